//! `PostgresSourceConfig`: the `[source]` table for `kind = "postgres"`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::connector_config::{EnvVarName, FieldError};
use crate::source::SyncMode;

const fn default_page_size() -> u32 {
    500
}

const fn default_statement_timeout() -> Duration {
    Duration::from_secs(30)
}

const fn default_max_removal_share() -> f64 {
    0.1
}

fn is_default_max_removal_share(share: &f64) -> bool {
    *share == default_max_removal_share()
}

const fn default_commit_wait() -> Duration {
    Duration::from_secs(2)
}

/// Longest `commit_wait` a sync may set: a run waits this long holding a
/// worker.
pub const MAX_COMMIT_WAIT: Duration = Duration::from_secs(60);

/// Largest page the source reads at once; a bigger page risks the memory bound.
pub const MAX_PAGE_SIZE: u32 = 10_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSourceConfig {
    /// Environment variable that holds the source database URL.
    pub url_env: EnvVarName,
    /// One SELECT; it is wrapped as a subquery and paged by `cursor_column`.
    pub query: String,
    /// Column of the query that orders and pages the rows (an id, or a
    /// timestamp set by the database); rows sharing a value are read
    /// together. Required in `cursor` mode, not used in `diff` mode.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cursor_column: String,
    /// `cursor` (default): each run reads from the saved cursor on. `diff`:
    /// each run reads the whole query and sends only the records whose
    /// content is new or changed since they were last delivered.
    /// `mirror` is `diff`, and records that left the query since the last
    /// complete read are taken off the destination.
    #[serde(default, skip_serializing_if = "SyncMode::is_cursor")]
    pub sync_mode: SyncMode,
    /// Mirror mode's guard against a broken query emptying a list: the
    /// largest share (0 to 1) of the records it knows that one run may take
    /// off the destination; a run that would take more removes nobody and
    /// fails (`mirror_removal_refused`). Default 0.1 (10 %).
    #[serde(
        default = "default_max_removal_share",
        skip_serializing_if = "is_default_max_removal_share"
    )]
    pub max_removal_share: f64,
    /// Rows per page (1 to 10000). Default 500.
    #[serde(default = "default_page_size")]
    pub page_size: u32,
    /// Longest a page query may run. Default 30s.
    #[serde(default = "default_statement_timeout", with = "humantime_serde")]
    pub statement_timeout: Duration,
    /// How long a run waits, before its first page, for source transactions
    /// older than its read to end (they may still commit rows behind the
    /// cursor). A transaction still open then holds the run's new rows back
    /// until a later run, with a notice: never a skip. Default 2s, at most 60s.
    #[serde(default = "default_commit_wait", with = "humantime_serde")]
    pub commit_wait: Duration,
}

impl PostgresSourceConfig {
    /// The fields whose change changes every delivery key: the source's
    /// fingerprint is made of them, and `page_size` places records on pages
    /// (a record's page cursor and place are part of its key). `kind` is
    /// the table's tag.
    pub const KEY_FIELDS: &'static [&'static str] =
        &["kind", "query", "cursor_column", "page_size", "sync_mode"];
    /// The fields that change no key.
    pub const KEY_NEUTRAL: &'static [&'static str] = &[
        "url_env",
        "max_removal_share",
        "statement_timeout",
        "commit_wait",
    ];

    pub fn validate(&self) -> Result<(), FieldError> {
        let query = self.query.trim();
        if query.is_empty() {
            return Err(FieldError::new(
                "source.query".into(),
                "must not be empty".into(),
            ));
        }
        if query.ends_with(';') {
            return Err(FieldError::new(
                "source.query".into(),
                "must be one SELECT without a trailing ';'".into(),
            ));
        }
        let first = query
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_ascii_uppercase();
        if first != "SELECT" && first != "WITH" {
            return Err(FieldError::new(
                "source.query".into(),
                format!("must start with SELECT or WITH, not \"{first}\""),
            ));
        }
        if !(0.0..=1.0).contains(&self.max_removal_share) {
            return Err(FieldError::new(
                "source.max_removal_share".into(),
                format!("{} is not a share between 0 and 1", self.max_removal_share),
            ));
        }
        if self.sync_mode.reads_whole() {
            if !self.cursor_column.is_empty() {
                return Err(FieldError::new(
                    "source.cursor_column".into(),
                    "is not used when sync_mode is \"diff\" or \"mirror\" (every run reads the whole query); remove it".into(),
                ));
            }
        } else if self.cursor_column.is_empty() {
            return Err(FieldError::new(
                "source.cursor_column".into(),
                "is required (or set sync_mode = \"diff\" for a query without a column that moves forward)".into(),
            ));
        }
        let column_ok = self.cursor_column.is_empty()
            || self
                .cursor_column
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && self
                    .cursor_column
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !column_ok {
            return Err(FieldError::new(
                "source.cursor_column".into(),
                format!(
                    "\"{}\" is not a plain column name (letters, digits, '_')",
                    self.cursor_column.escape_default()
                ),
            ));
        }
        if self.page_size == 0 || self.page_size > MAX_PAGE_SIZE {
            return Err(FieldError::new(
                "source.page_size".into(),
                format!("{} is out of range 1..={MAX_PAGE_SIZE}", self.page_size),
            ));
        }
        if self.commit_wait > MAX_COMMIT_WAIT {
            return Err(FieldError::new(
                "source.commit_wait".into(),
                format!(
                    "{} is longer than {}",
                    crate::words::duration_text(self.commit_wait),
                    crate::words::duration_text(MAX_COMMIT_WAIT)
                ),
            ));
        }
        if self.statement_timeout.is_zero() {
            return Err(FieldError::new(
                "source.statement_timeout".into(),
                "must be longer than zero".into(),
            ));
        }
        Ok(())
    }
}
