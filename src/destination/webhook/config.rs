//! `WebhookDestinationConfig`: the `[destination]` table for `kind = "webhook"`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::connector_config::EnvVarName;

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
}

impl WebhookDestinationConfig {
    pub fn validate(&self) -> Result<(), (String, String)> {
        if !matches!(self.url.scheme(), "http" | "https") {
            return Err((
                "destination.url".into(),
                "must be an http or https URL".into(),
            ));
        }
        if self.timeout.is_zero() {
            return Err((
                "destination.timeout".into(),
                "must be longer than zero".into(),
            ));
        }
        Ok(())
    }
}
