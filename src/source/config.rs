//! `SourceConfig`: the `[source]` table of a sync file, tagged by `kind`.

use serde::{Deserialize, Serialize};

use super::http::HttpSourceConfig;
use super::postgres::PostgresSourceConfig;
use super::shopify::ShopifySourceConfig;

/// How a sync reads its source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SyncMode {
    /// From the saved cursor on, by a column that moves forward.
    #[default]
    Cursor,
    /// The whole query every run; only records whose content is new or
    /// changed since they were last delivered are sent. Needs no cursor.
    Diff,
    /// Diff, and records that left the query since the last complete read
    /// are taken off the destination (off its lists; never deleted).
    Mirror,
}

impl SyncMode {
    pub fn is_cursor(&self) -> bool {
        *self == SyncMode::Cursor
    }

    /// Every run reads the whole query (diff and mirror).
    pub fn reads_whole(self) -> bool {
        self != SyncMode::Cursor
    }
}

/// The `[source]` table of a sync file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SourceConfig {
    /// Keyset-paged rows of a read-only query on the operator's Postgres.
    Postgres(PostgresSourceConfig),
    /// A shop's customers through Shopify's Admin GraphQL API.
    Shopify(ShopifySourceConfig),
    /// The operator's own paged JSON API.
    Http(HttpSourceConfig),
}

impl SourceConfig {
    /// The fields whose change changes every delivery key: those the source's
    /// fingerprint is made of, and `page_size` (a record's page cursor and
    /// position are part of its key).
    /// The connector's name, as sync files write `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceConfig::Postgres(_) => "postgres",
            SourceConfig::Shopify(_) => "shopify",
            SourceConfig::Http(_) => "http",
        }
    }

    pub fn key_fields(&self) -> &'static [&'static str] {
        match self {
            SourceConfig::Postgres(_) => {
                &["kind", "query", "cursor_column", "page_size", "sync_mode"]
            }
            SourceConfig::Shopify(_) => &[
                "kind",
                "shop",
                "query",
                "page_size",
                "bulk_page_size",
                "overlap",
            ],
            SourceConfig::Http(_) => &[
                "kind",
                "url",
                "cursor_param",
                "items_pointer",
                "page_size",
                "overlap",
            ],
        }
    }

    /// How the sync reads this source.
    pub fn sync_mode(&self) -> SyncMode {
        match self {
            SourceConfig::Postgres(c) => c.sync_mode,
            SourceConfig::Shopify(_) | SourceConfig::Http(_) => SyncMode::Cursor,
        }
    }

    /// The window re-read before a time cursor each run (`source::overlap`);
    /// `None` for sources that read up to a safe horizon instead (Postgres)
    /// or where it is turned off.
    pub fn overlap(&self) -> Option<std::time::Duration> {
        let overlap = match self {
            SourceConfig::Postgres(_) => return None,
            SourceConfig::Shopify(c) => c.overlap,
            SourceConfig::Http(c) => c.overlap,
        };
        (!overlap.is_zero()).then_some(overlap)
    }

    /// Whether records are keyed by who they are and what they hold
    /// (`worker::diff_page`) rather than by where they were read: a source
    /// that reads records again (the whole query, or an overlap window)
    /// needs a key that a record read again unchanged keeps.
    pub fn keys_by_identity(&self) -> bool {
        self.sync_mode().reads_whole() || self.overlap().is_some()
    }

    /// Mirror mode's largest share of known records one run may take off.
    pub fn max_removal_share(&self) -> f64 {
        match self {
            SourceConfig::Postgres(c) => c.max_removal_share,
            SourceConfig::Shopify(_) | SourceConfig::Http(_) => 0.0,
        }
    }

    /// Pure checks of values that deserialize but cannot work. Errors name the
    /// field under `source.`.
    pub fn validate(&self) -> Result<(), (String, String)> {
        match self {
            SourceConfig::Postgres(c) => c.validate(),
            SourceConfig::Shopify(c) => c.validate(),
            SourceConfig::Http(c) => c.validate(),
        }
    }

    /// Names the field behind a deserialization error of this table (given
    /// without interpretation by serde's tagged-enum buffering).
    pub(crate) fn diagnose(mut table: toml::Table) -> Option<(String, String)> {
        let kind = table.remove("kind")?;
        match kind.as_str()? {
            "postgres" => crate::connector_config::field_error::<PostgresSourceConfig>(table),
            "shopify" => crate::connector_config::field_error::<ShopifySourceConfig>(table),
            "http" => crate::connector_config::field_error::<HttpSourceConfig>(table),
            _ => None,
        }
    }

    /// The environment variables holding this source's secrets, with the field
    /// that names each.
    pub fn secret_env_vars(&self) -> Vec<(&'static str, &crate::connector_config::EnvVarName)> {
        match self {
            SourceConfig::Postgres(c) => vec![("url_env", &c.url_env)],
            SourceConfig::Shopify(c) => vec![("access_token_env", &c.access_token_env)],
            SourceConfig::Http(c) => c.auth_env.iter().map(|v| ("auth_env", v)).collect(),
        }
    }
}
