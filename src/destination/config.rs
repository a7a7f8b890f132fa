//! `DestinationConfig`: the `[destination]` table of a sync file, tagged by `kind`.

use serde::{Deserialize, Serialize};

use super::brevo::BrevoDestinationConfig;
use super::webhook::WebhookDestinationConfig;
use crate::connector_config::{EnvVarName, FieldError};

/// The `[destination]` table of a sync file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DestinationConfig {
    /// Brevo contacts: one upsert per record, or one import per page.
    Brevo(BrevoDestinationConfig),
    /// A JSON POST per record (or per page) to an HTTP endpoint.
    Webhook(WebhookDestinationConfig),
}

impl DestinationConfig {
    /// The connector's name, as sync files write `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            DestinationConfig::Brevo(_) => "brevo",
            DestinationConfig::Webhook(_) => "webhook",
        }
    }

    /// The URL every call goes to, and the field that sets it (`sync
    /// apply`'s outbound check).
    pub fn outbound_url(&self) -> (&'static str, url::Url) {
        match self {
            DestinationConfig::Brevo(c) => ("destination.base_url", c.base_url.clone()),
            DestinationConfig::Webhook(c) => ("destination.url", c.url.clone()),
        }
    }

    /// Pure checks of values that deserialize but cannot work. Errors name the
    /// field under `destination.`.
    pub fn validate(&self) -> Result<(), FieldError> {
        match self {
            DestinationConfig::Brevo(c) => c.validate(),
            DestinationConfig::Webhook(c) => c.validate(),
        }
    }

    /// Names the field behind a deserialization error of this table (lost in
    /// serde's tagged-enum buffering).
    pub(crate) fn diagnose(mut table: toml::Table) -> Option<(String, String)> {
        let kind = table.remove("kind")?;
        match kind.as_str()? {
            "brevo" => crate::connector_config::field_error::<BrevoDestinationConfig>(table),
            "webhook" => crate::connector_config::field_error::<WebhookDestinationConfig>(table),
            _ => None,
        }
    }

    /// The environment variables holding this destination's secrets, with the
    /// field that names each.
    pub fn secret_env_vars(&self) -> Vec<(&'static str, &EnvVarName)> {
        match self {
            DestinationConfig::Brevo(c) => vec![("api_key_env", &c.api_key_env)],
            DestinationConfig::Webhook(c) => {
                c.secret_env.iter().map(|v| ("secret_env", v)).collect()
            }
        }
    }
}
