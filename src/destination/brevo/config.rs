//! `BrevoDestinationConfig`: the `[destination]` table for `kind = "brevo"`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::connector_config::{EnvVarName, FieldError};

fn default_base_url() -> url::Url {
    // A constant, valid URL.
    url::Url::parse("https://api.brevo.com/v3").expect("the Brevo base URL is valid")
}

const fn default_concurrency() -> u32 {
    4
}

const fn default_requests_per_second() -> u32 {
    10
}

const fn default_timeout() -> Duration {
    Duration::from_secs(30)
}

/// How records are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BrevoMode {
    /// One `POST /contacts/import` per page (asynchronous on Brevo's side).
    #[default]
    Bulk,
    /// One `POST /contacts` per record, `updateEnabled: true`.
    Single,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrevoDestinationConfig {
    /// Environment variable that holds the Brevo API key.
    pub api_key_env: EnvVarName,
    /// API root. Default `https://api.brevo.com/v3`; point it at a local fake in tests.
    #[serde(default = "default_base_url")]
    pub base_url: url::Url,
    /// `bulk` (default) or `single`.
    #[serde(default)]
    pub mode: BrevoMode,
    /// Lists every contact is added to (with a consent rule: every
    /// subscribed contact); `bulk` needs at least one.
    #[serde(default)]
    pub list_ids: Vec<u64>,
    /// `bulk` with a consent rule: the list that contacts going on none of
    /// `list_ids` (opted out, or not subscribed) are imported into. Brevo's
    /// import puts every row it writes on a list (`listIds` is mandatory,
    /// `requestContactImport`), so keep this one out of every campaign, e.g.
    /// "syncward: not on a marketing list". Default none: those contacts
    /// are written one by one with `POST /contacts`, on no list (about 9 a
    /// second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holding_list_id: Option<u64>,
    /// Whether Brevo e-mails the account owner when an import ends (one
    /// e-mail per page in `bulk` mode). Default false: imports are sent with
    /// `disableNotification: true`.
    #[serde(default)]
    pub import_notifications: bool,
    /// Requests in flight at once in `single` mode (1 to 10; Brevo allows 10/s).
    /// Default 4.
    #[serde(default = "default_concurrency")]
    pub concurrency: u32,
    /// Most write requests a second to the account (this API key), across
    /// every sync and daemon that uses the key, however many are in flight
    /// (1 to 1000); they are spaced for nine tenths of it, so delays on the
    /// way never put one over. Default 10: Brevo's limit on `/v3/contacts`
    /// on the general plan; raise it only for a plan with a higher one. An
    /// answer with `x-sib-ratelimit-remaining: 0` also holds the next write
    /// until `x-sib-ratelimit-reset`.
    #[serde(default = "default_requests_per_second")]
    pub requests_per_second: u32,
    /// Longest wait for one response. Default 30s.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

impl BrevoDestinationConfig {
    /// A setting that works but costs, said when the sync is published:
    /// bulk mode with a consent rule and no holding list writes every
    /// contact that goes on no list one by one (about 9 a second), and most
    /// of a store's customers are such contacts.
    pub fn setting_warning(&self, consent_rule: bool) -> Option<&'static str> {
        (self.mode == BrevoMode::Bulk && self.holding_list_id.is_none() && consent_rule).then_some(
            "bulk mode with a consent rule but no destination.holding_list_id: contacts that go on \
             no list (not subscribed, opted out) are written one by one, about 9 a second; name a \
             list kept out of campaigns as holding_list_id to import them",
        )
    }

    pub fn validate(&self) -> Result<(), FieldError> {
        if !matches!(self.base_url.scheme(), "http" | "https") {
            return Err(FieldError::new(
                "destination.base_url".into(),
                "must be an http or https URL".into(),
            ));
        }
        if self.mode == BrevoMode::Bulk && self.list_ids.is_empty() {
            return Err(FieldError::new(
                "destination.list_ids".into(),
                "bulk mode imports into lists: name at least one".into(),
            ));
        }
        if let Some(holding) = self.holding_list_id
            && self.list_ids.contains(&holding)
        {
            return Err(FieldError::new(
                "destination.holding_list_id".into(),
                format!(
                    "list {holding} is also in destination.list_ids: it must be a list no campaign is sent to"
                ),
            ));
        }
        if !(1..=10).contains(&self.concurrency) {
            return Err(FieldError::new(
                "destination.concurrency".into(),
                format!("{} is out of range 1..=10", self.concurrency),
            ));
        }
        if !(1..=1000).contains(&self.requests_per_second) {
            return Err(FieldError::new(
                "destination.requests_per_second".into(),
                format!("{} is out of range 1..=1000", self.requests_per_second),
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
