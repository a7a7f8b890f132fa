//! `WebhookDestinationConfig`: the `[destination]` table for `kind = "webhook"`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::connector_config::{EnvVarName, FieldError};

const fn default_timeout() -> Duration {
    Duration::from_secs(30)
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookDestinationConfig {
    /// Endpoint that receives the POSTs.
    pub url: url::Url,
    /// Environment variable holding the HMAC-SHA256 key for the signature
    /// header. Default: none (unsigned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<EnvVarName>,
    /// POST one JSON array per page instead of one object per record. Default false.
    #[serde(default)]
    pub batch: bool,
    /// Longest wait for one response. Default 30s.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// POSTs per second to the URL's host, shared by every sync and daemon
    /// that posts there (1–1000). Default: none (unpaced; a receiver's 429 is
    /// waited out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_second: Option<u32>,
}

impl WebhookDestinationConfig {
    pub fn validate(&self) -> Result<(), FieldError> {
        if !matches!(self.url.scheme(), "http" | "https") {
            return Err(FieldError::new(
                "destination.url".into(),
                "must be an http or https URL".into(),
            ));
        }
        if let Some(rate) = self.requests_per_second
            && !(1..=1000).contains(&rate)
        {
            return Err(FieldError::new(
                "destination.requests_per_second".into(),
                format!("{rate} is out of range 1..=1000"),
            ));
        }
        if self.timeout.is_zero() {
            return Err(FieldError::new(
                "destination.timeout".into(),
                "must be longer than zero".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_budget_outside_1_to_1000_is_refused_naming_the_key() {
        let config = |rate: Option<u32>| WebhookDestinationConfig {
            url: url::Url::parse("https://hooks.example.com/in").expect("url"),
            secret_env: None,
            batch: false,
            timeout: Duration::from_secs(5),
            requests_per_second: rate,
        };
        assert!(config(None).validate().is_ok());
        assert!(config(Some(50)).validate().is_ok());
        for rate in [0, 1001] {
            let FieldError {
                field: key,
                why: problem,
            } = config(Some(rate)).validate().expect_err("refused");
            assert_eq!(key, "destination.requests_per_second");
            assert!(problem.contains("1..=1000"), "{problem}");
        }
    }
}
