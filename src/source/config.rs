//! `SourceConfig`: the `[source]` table of a sync file, tagged by `kind`.

use serde::{Deserialize, Serialize};

use super::http::HttpSourceConfig;
use super::postgres::PostgresSourceConfig;
use super::shopify::ShopifySourceConfig;
use crate::connector_config::FieldError;

/// Where a record is in its source (`SourceConfig::record_key`), shown
/// with a rejected record so that a person can look it up.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceKey {
    Integer(i64),
    Text(Box<str>),
}

impl SourceKey {
    /// The longest key kept, in bytes (a longer one is cut, marked `…`).
    const LONGEST: usize = 200;

    /// As stored and shown.
    pub fn to_text(&self) -> String {
        match self {
            SourceKey::Integer(i) => i.to_string(),
            SourceKey::Text(t) if t.len() <= Self::LONGEST => t.to_string(),
            SourceKey::Text(t) => format!("{}…", &t[..t.floor_char_boundary(Self::LONGEST)]),
        }
    }
}

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
    /// The connector's name, as sync files write `kind`.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceConfig::Postgres(_) => "postgres",
            SourceConfig::Shopify(_) => "shopify",
            SourceConfig::Http(_) => "http",
        }
    }

    /// The field that says where a record is in its source: a Postgres
    /// query's cursor column (`id` in diff and mirror mode, which have
    /// none), a Shopify customer's or an http record's `id`.
    pub fn record_key_field(&self) -> &str {
        match self {
            SourceConfig::Postgres(c) if !c.cursor_column.is_empty() => &c.cursor_column,
            SourceConfig::Postgres(_) | SourceConfig::Shopify(_) | SourceConfig::Http(_) => "id",
        }
    }

    /// A record's key in its source (`record_key_field`); `None` when the
    /// record has no such field. Kept beside every record sent, so an
    /// integer key (the usual id) costs no allocation.
    pub fn record_key(&self, record: &serde_json::Value) -> Option<SourceKey> {
        match record.get(self.record_key_field())? {
            serde_json::Value::Null => None,
            serde_json::Value::Number(n) => Some(match n.as_i64() {
                Some(i) => SourceKey::Integer(i),
                None => SourceKey::Text(n.to_string().into()),
            }),
            serde_json::Value::String(s) => Some(SourceKey::Text(s.as_str().into())),
            other => Some(SourceKey::Text(other.to_string().into())),
        }
    }

    /// The fields whose change changes every delivery key, as each source's
    /// config marks them (`KEY_FIELDS`, beside its fields).
    pub fn key_fields(&self) -> &'static [&'static str] {
        match self {
            SourceConfig::Postgres(_) => PostgresSourceConfig::KEY_FIELDS,
            SourceConfig::Shopify(_) => ShopifySourceConfig::KEY_FIELDS,
            SourceConfig::Http(_) => HttpSourceConfig::KEY_FIELDS,
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

    /// Whether the source can read one record by its address
    /// (`sync run --only`); why not, in one line, when it cannot.
    pub fn reads_by_address(&self) -> Result<(), String> {
        match self {
            SourceConfig::Postgres(_) | SourceConfig::Shopify(_) => Ok(()),
            SourceConfig::Http(_) => Err(
                "an http source cannot read one record by its address (its API has no search); \
                 run the whole sync, or `sync preview` its next page"
                    .into(),
            ),
        }
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
    pub fn validate(&self) -> Result<(), FieldError> {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{HttpSourceConfig, PostgresSourceConfig, ShopifySourceConfig, SourceConfig};

    /// The fields a config struct declares, read from its source file.
    fn declared_fields(source: &str, name: &str) -> Vec<String> {
        let start = source
            .find(&format!("pub struct {name} {{"))
            .unwrap_or_else(|| panic!("{name} is not declared"));
        let body = &source[start..];
        let body = &body[..body.find("\n}").expect("the struct ends")];
        body.lines()
            .filter_map(|line| line.strip_prefix("    pub "))
            .filter_map(|line| line.split_once(':'))
            .map(|(field, _)| field.to_string())
            .collect()
    }

    /// Every field of a source's config is marked as changing delivery
    /// keys or listed as changing none: a new field cannot silently drop the
    /// plan's warning (`config::definition_diff`).
    #[test]
    fn every_source_field_is_marked_as_changing_keys_or_not() {
        let sources = [
            (
                include_str!("postgres/config.rs"),
                "PostgresSourceConfig",
                PostgresSourceConfig::KEY_FIELDS,
                PostgresSourceConfig::KEY_NEUTRAL,
            ),
            (
                include_str!("shopify/config.rs"),
                "ShopifySourceConfig",
                ShopifySourceConfig::KEY_FIELDS,
                ShopifySourceConfig::KEY_NEUTRAL,
            ),
            (
                include_str!("http/config.rs"),
                "HttpSourceConfig",
                HttpSourceConfig::KEY_FIELDS,
                HttpSourceConfig::KEY_NEUTRAL,
            ),
        ];
        for (source, name, keyed, neutral) in sources {
            let fields = declared_fields(source, name);
            assert!(fields.len() >= 5, "{name}: {fields:?}");
            for field in &fields {
                let marked =
                    keyed.contains(&field.as_str()) as u8 + neutral.contains(&field.as_str()) as u8;
                assert_eq!(
                    marked, 1,
                    "{name}.{field} must be in exactly one of KEY_FIELDS and KEY_NEUTRAL"
                );
            }
            for listed in keyed.iter().chain(neutral) {
                assert!(
                    *listed == "kind" || fields.iter().any(|f| f == listed),
                    "{name} lists {listed}, which it does not declare"
                );
            }
        }
    }

    fn source(table: &str) -> SourceConfig {
        toml::from_str(table).expect("a valid [source] table")
    }

    #[test]
    fn a_records_source_key_is_its_cursor_column_or_its_id() {
        let cursor = source(
            "kind = \"postgres\"\nurl_env = \"U\"\nquery = \"SELECT 1\"\ncursor_column = \"updated\"",
        );
        let diff = source(
            "kind = \"postgres\"\nurl_env = \"U\"\nquery = \"SELECT 1\"\nsync_mode = \"diff\"",
        );
        let shopify = source(
            "kind = \"shopify\"\nshop = \"acme\"\napi_version = \"2025-10\"\naccess_token_env = \"T\"",
        );
        let row = json!({"id": 3002, "updated": "2026-12-06T10:00:00Z", "email": "a@b.c"});
        let text = |key: Option<super::SourceKey>| key.map(|k| k.to_text());
        assert_eq!(
            text(cursor.record_key(&row)).as_deref(),
            Some("2026-12-06T10:00:00Z")
        );
        assert_eq!(diff.record_key(&row), Some(super::SourceKey::Integer(3002)));
        let customer = json!({"id": "gid://shopify/Customer/7"});
        assert_eq!(
            text(shopify.record_key(&customer)).as_deref(),
            Some("gid://shopify/Customer/7")
        );
        assert_eq!(diff.record_key(&json!({"id": null})), None);
        assert_eq!(diff.record_key(&json!({"email": "a@b.c"})), None);
        let long = text(diff.record_key(&json!({"id": "é".repeat(300)}))).unwrap_or_default();
        assert!(long.len() <= 204 && long.ends_with('…'), "{long}");
    }
}
