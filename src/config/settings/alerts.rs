//! `[alerts]`: where failures and silences are told.

use secrecy::SecretString;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AlertSettings {
    /// Sentry DSN for critical alerts. Secret. Default: none (no Sentry).
    #[serde(serialize_with = "crate::config::shown::optional_secret")]
    pub sentry_dsn: Option<SecretString>,
    /// URL that receives each alert as signed JSON. Default: none.
    #[serde(serialize_with = "crate::config::shown::optional_url")]
    pub webhook_url: Option<url::Url>,
    /// Key of the alert webhook's signature (Standard Webhooks: `webhook-id`,
    /// `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256>`):
    /// `whsec_<base64>` is the decoded bytes, any other value its raw bytes.
    /// Required with `webhook_url`. Secret. Default: none.
    #[serde(serialize_with = "crate::config::shown::optional_secret")]
    pub webhook_secret: Option<SecretString>,
    /// E-mail over SMTP. Default: none.
    pub email: Option<EmailSettings>,
    /// Owner routing: workspace id → address that also receives the alerts
    /// whose failure is the customer's (a revoked key, a mapping every record is
    /// rejected for). Needs `alerts.email`. Default: none.
    pub workspace_email: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSettings {
    /// SMTP server, e.g. `smtps://user:pass@smtp.example.com:465` or
    /// `smtp://127.0.0.1:2525` (plain, local). Secret (it may hold a password).
    #[serde(serialize_with = "crate::config::shown::secret_url")]
    pub smtp_url: SecretString,
    /// Sender address.
    pub from: String,
    /// Recipients; at least one.
    pub to: Vec<String>,
}
