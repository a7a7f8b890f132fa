//! The process itself: `[outbound]` (where connectors may call), `[secrets]`
//! (where workspaces' secrets are read), `[log]`.

use serde::{Deserialize, Serialize};

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundSettings {
    /// Host names, addresses and CIDR ranges inside the network (loopback,
    /// link-local, private, CGNAT) that sources and destinations may reach
    /// anyway (`outbound::policy`), e.g. `["warehouse.internal",
    /// "10.20.0.0/16"]`. Default: none (only public addresses).
    pub allow: Vec<String>,
    /// An HTTP proxy every source and destination request goes through
    /// (`http://host:port`, user-info for its credentials), for networks
    /// whose way out is a proxy. The proxy's environment variables
    /// (`HTTP_PROXY`, …) are never used. With a proxy, syncward still
    /// refuses address literals and its own address, but the proxy resolves
    /// names: it must refuse inside addresses itself (docs/operations.md).
    /// Secret in its user-info. Changing it needs a restart. Default: none.
    #[serde(serialize_with = "crate::config::shown::optional_url")]
    pub proxy: Option<url::Url>,
}

impl OutboundSettings {
    /// The policy the connectors' client enforces; `own` is the admin
    /// address, which no sync may call.
    pub fn policy(
        &self,
        own: std::net::SocketAddr,
    ) -> Result<crate::outbound::OutboundPolicy, String> {
        Ok(
            crate::outbound::OutboundPolicy::new(&self.allow, Some(own))?
                .with_proxy(self.proxy.clone()),
        )
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecretsSettings {
    /// The directory of the workspaces' secrets files, `<workspace>.env`
    /// each (`config::secrets`). Default `/etc/syncward/secrets`.
    pub dir: std::path::PathBuf,
}

impl Default for SecretsSettings {
    fn default() -> Self {
        Self {
            dir: crate::config::secrets::DEFAULT_SECRETS_DIR.into(),
        }
    }
}

impl SecretsSettings {
    /// The workspaces' secrets, where this daemon reads them.
    pub fn store(&self) -> crate::config::secrets::SecretStore {
        crate::config::secrets::SecretStore::new(&self.dir)
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// Filter in `RUST_LOG` syntax, e.g. `info` or `syncward=debug,sqlx=warn`.
    /// Default `info`.
    pub level: String,
    /// `human` (default) or `json` (one JSON object per line, for journald
    /// shippers).
    pub format: LogFormat,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: LogFormat::Human,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Human,
    Json,
}
