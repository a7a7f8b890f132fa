//! `[database]` and `[redis]`: where the store and Redis are.

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use crate::config::RedisAddress;

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseSettings {
    /// Postgres URL of the store. Secret (it may hold a password): printed with the
    /// password redacted. Default `postgres://syncward@127.0.0.1:5432/syncward`.
    #[serde(serialize_with = "crate::config::shown::secret_url")]
    pub url: SecretString,
    /// Most connections the daemon opens to the store (a `sync run
    /// --foreground` opens at most 3 of them). Default 10.
    pub max_connections: u32,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: SecretString::from("postgres://syncward@127.0.0.1:5432/syncward"),
            max_connections: 10,
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisSettings {
    /// Redis URL for leases, liveness keys, dead-man markers and shared request
    /// budgets. Secret (it may hold a password). Default `redis://127.0.0.1:6379`.
    ///
    /// One server: `redis://[[user]:password@]host[:port][/db]` (`rediss://`
    /// for TLS). A Sentinel set, whose current primary is used and followed
    /// through a failover:
    /// `redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service_name[/db]`,
    /// each host a Sentinel (port 26379 when left out), `service_name` the
    /// primary's name in the Sentinels' configuration (`mymaster`); the
    /// user-info and database are the primary's, the Sentinels are asked
    /// without a password. `check-config` shows either form with its password
    /// redacted.
    #[serde(serialize_with = "crate::config::shown::secret_url")]
    pub url: SecretString,
    /// Prefix of every Redis key; isolates deployments (and tests) sharing one
    /// Redis. Default `syncward`.
    pub key_prefix: String,
}

impl RedisSettings {
    /// `url` read as one server or a Sentinel set; the error names the problem
    /// without quoting the URL.
    pub fn address(&self) -> Result<RedisAddress, String> {
        RedisAddress::parse(self.url.expose_secret())
    }
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            url: SecretString::from("redis://127.0.0.1:6379"),
            key_prefix: "syncward".into(),
        }
    }
}
