//! `HttpSourceConfig`: the `[source]` table for `kind = "http"`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::connector_config::{EnvVarName, FieldError};

const fn default_timeout() -> Duration {
    Duration::from_secs(30)
}

fn default_auth_header() -> String {
    "Authorization".into()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpSourceConfig {
    /// The first page's URL (GET). Later pages add `cursor_param`.
    pub url: url::Url,
    /// Query parameter that carries the cursor to the next page.
    pub cursor_param: String,
    /// JSON pointer to the array of records in an answer, e.g. `/data`.
    pub items_pointer: String,
    /// JSON pointer to the next page's cursor, e.g. `/meta/next`; absent,
    /// null or "" means the last page.
    pub next_cursor_pointer: String,
    /// Environment variable whose value is sent as `auth_header` (e.g.
    /// `Bearer …`). Optional.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_env: Option<EnvVarName>,
    /// Header that carries the secret. Default `Authorization`.
    #[serde(default = "default_auth_header")]
    pub auth_header: String,
    /// Longest wait for one response. Default 30s.
    #[serde(default = "default_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// When the API's cursor is an RFC 3339 time (an `updated_since`-style
    /// API), how far before the saved one each run starts again (the overlap
    /// window, `source::overlap`). Default 5m; `0s` turns it off. An opaque
    /// cursor is never moved.
    #[serde(
        default = "crate::source::overlap::default_overlap",
        with = "humantime_serde"
    )]
    pub overlap: Duration,
}

impl HttpSourceConfig {
    /// The fields whose change changes every delivery key: the source's
    /// fingerprint is made of them. `kind` is the table's tag.
    pub const KEY_FIELDS: &'static [&'static str] =
        &["kind", "url", "cursor_param", "items_pointer", "overlap"];
    /// The fields that change no key.
    pub const KEY_NEUTRAL: &'static [&'static str] =
        &["next_cursor_pointer", "auth_env", "auth_header", "timeout"];

    pub fn validate(&self) -> Result<(), FieldError> {
        if !matches!(self.url.scheme(), "http" | "https") {
            return Err(FieldError::new(
                "source.url".into(),
                "must be an http or https URL".into(),
            ));
        }
        if self.cursor_param.trim().is_empty() {
            return Err(FieldError::new(
                "source.cursor_param".into(),
                "must not be empty".into(),
            ));
        }
        for (key, pointer) in [
            ("source.items_pointer", &self.items_pointer),
            ("source.next_cursor_pointer", &self.next_cursor_pointer),
        ] {
            if !pointer.is_empty() && !pointer.starts_with('/') {
                return Err(FieldError::new(
                    key.into(),
                    format!(
                        "\"{}\" is not a JSON pointer (it starts with '/', e.g. /data)",
                        pointer.escape_default()
                    ),
                ));
            }
        }
        if reqwest::header::HeaderName::from_bytes(self.auth_header.as_bytes()).is_err() {
            return Err(FieldError::new(
                "source.auth_header".into(),
                format!(
                    "\"{}\" is not an HTTP header name",
                    self.auth_header.escape_default()
                ),
            ));
        }
        if self.timeout.is_zero() {
            return Err(FieldError::new(
                "source.timeout".into(),
                "must be longer than zero".into(),
            ));
        }
        crate::source::overlap::validate(self.overlap)
    }
}
