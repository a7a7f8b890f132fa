//! `HttpSource`: GET `url` (plus `cursor_param=<cursor>` after the first
//! page), records at `items_pointer`, the next cursor at `next_cursor_pointer`.
//! 429 waits for `Retry-After` (1 s without one); 5xx, timeouts, cut-off and
//! unreadable answers are retried; 401/403 are `source_auth_failed`.

use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::config::HttpSourceConfig;
use super::raw_page::{RawPageError, read_page};
use crate::canonical_json::canonical_json;
use crate::connector_config::WorkspaceSecrets;
use crate::outbound::{
    BodyError, SOURCE_PAGE_CAP, cap_text, describe_error, read_capped, redirect_target, retry_after,
};
use crate::source::overlap;
use crate::source::page::{Page, Source, SourceError};
use crate::source::retry::{Answer, SOURCE_RETRY, fetch_with_retries};

/// Empty pages with a next cursor followed in one fetch before giving up.
const EMPTY_PAGES: usize = 100;

pub struct HttpSource {
    config: HttpSourceConfig,
    auth: Option<String>,
    client: reqwest::Client,
    next_send: Option<Instant>,
}

impl std::fmt::Debug for HttpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSource")
            .field("url", &self.config.url.as_str())
            .finish()
    }
}

impl HttpSource {
    pub fn open(
        config: &HttpSourceConfig,
        secrets: &WorkspaceSecrets,
    ) -> Result<Self, SourceError> {
        let auth = match &config.auth_env {
            None => None,
            Some(var) => Some(
                secrets
                    .get(var, "source.auth_env")
                    .map_err(SourceError::InvalidConfig)?,
            ),
        };
        crate::outbound::policy::check_connector_url(&config.url, "source.url")
            .map_err(SourceError::InvalidConfig)?;
        let client = crate::outbound::http_client(&config.url)
            .map_err(|e| SourceError::InvalidConfig(e.to_string()))?;
        Ok(Self {
            config: config.clone(),
            auth,
            client,
            next_send: None,
        })
    }

    async fn ask(&self, cursor: Option<&str>) -> Answer {
        let mut url = self.config.url.clone();
        if let Some(cursor) = cursor {
            url.query_pairs_mut()
                .append_pair(&self.config.cursor_param, cursor);
        }
        let mut request = self.client.get(url).timeout(self.config.timeout);
        if let Some(secret) = &self.auth {
            request = request.header(self.config.auth_header.as_str(), secret);
        }
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Answer::Retry("the API did not answer in time".into());
            }
            Err(e) => {
                if let Some(why) = crate::outbound::policy::refused(&e) {
                    return Answer::Fail(SourceError::InvalidConfig(format!("source.url: {why}")));
                }
                return Answer::Retry(format!("cannot reach the API: {}", describe_error(e)));
            }
        };
        let status = response.status();
        if status.is_redirection() {
            // The request may carry `auth_header`: a redirect is not followed.
            return Answer::Fail(SourceError::InvalidConfig(format!(
                "the API answered a redirect (HTTP {}) to {}; syncward does not follow \
                 redirects with credentials: set source.url to the final address",
                status.as_u16(),
                redirect_target(&response)
            )));
        }
        let wait = retry_after(response.headers());
        match read_capped(response, SOURCE_PAGE_CAP).await {
            Ok(bytes) => judge(&self.config, status, bytes, wait),
            Err(BodyError::CutOff(e)) => {
                Answer::Retry(format!("the API's answer was cut off: {e}"))
            }
            Err(BodyError::TooLarge) => Answer::Fail(SourceError::Query(format!(
                "the API's answer exceeded {}; not read further (ask it for smaller pages)",
                cap_text(SOURCE_PAGE_CAP)
            ))),
        }
    }
}

/// Reads one answer. Pure, so every shape of answer is testable.
fn judge(
    config: &HttpSourceConfig,
    status: StatusCode,
    bytes: Vec<u8>,
    retry_after: Option<std::time::Duration>,
) -> Answer {
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        return Answer::Fail(SourceError::Unauthorized(format!(
            "the API refused the credentials (HTTP {status})"
        )));
    }
    if status == StatusCode::TOO_MANY_REQUESTS {
        return Answer::Throttled(
            retry_after
                .unwrap_or(std::time::Duration::from_secs(1))
                .min(SOURCE_RETRY.max_wait),
        );
    }
    if status.is_server_error() {
        return Answer::Retry(format!("HTTP {status}"));
    }
    if !status.is_success() {
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
        return Answer::Fail(SourceError::Query(format!(
            "the API answered HTTP {status}: {text}"
        )));
    }
    // The records stay in the body's bytes until each is asked for.
    let page = match read_page(bytes, &config.items_pointer, &config.next_cursor_pointer) {
        Ok(page) => page,
        Err(RawPageError::NotJson) => {
            return Answer::Retry(format!("HTTP {status} with a body that is not JSON"));
        }
        Err(RawPageError::NoArray) => {
            return Answer::Fail(SourceError::Query(format!(
                "the answer has no array at {} (source.items_pointer)",
                config.items_pointer
            )));
        }
    };
    let next = match page.next {
        Some(Value::String(s)) if !s.is_empty() => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    Answer::Page(
        Page {
            records: page.records.into(),
            last: next.is_none(),
            next_cursor: next.map(|c| json!({ "cursor": c })),
            notices: Vec::new(),
            held_back: None,
        },
        None,
    )
}

impl Source for HttpSource {
    fn fingerprint(&self) -> String {
        let identity = json!({
            "url": self.config.url.as_str(),
            "cursor_param": self.config.cursor_param,
            "items": self.config.items_pointer,
        });
        let digest = Sha256::digest(canonical_json(&identity).as_bytes());
        format!("http:{}", hex::encode(digest))
    }

    /// A saved cursor that is an RFC 3339 time starts `overlap` earlier. The
    /// time it was moved from rides along (`overlap_from`), so a run that
    /// ends where it started (a last page naming no next cursor) saves the
    /// same start again instead of creeping back a window every run.
    fn rewind(&self, saved: Option<Value>) -> Option<Value> {
        let overlap = self.config.overlap;
        let saved = saved?;
        let from = saved
            .get("overlap_from")
            .or_else(|| saved.get("cursor"))
            .and_then(Value::as_str);
        match from.and_then(|t| Some((t, overlap::earlier_by(t, overlap)?))) {
            Some((from, start)) if !overlap.is_zero() => {
                Some(json!({ "cursor": start, "overlap_from": from }))
            }
            _ => Some(saved),
        }
    }

    async fn fetch_page(&mut self, cursor: Option<&Value>) -> Result<Page, SourceError> {
        let mut cursor = cursor
            .and_then(|c| c.get("cursor"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut next_send = self.next_send.take();
        let this = &*self;
        // An empty page that still names a next one is followed: the run
        // loop reads an empty page as the end.
        for _ in 0..EMPTY_PAGES {
            let page =
                fetch_with_retries("The API", &mut next_send, || this.ask(cursor.as_deref()))
                    .await?;
            if !page.records.is_empty() || page.last {
                self.next_send = next_send;
                return Ok(page);
            }
            cursor = page
                .next_cursor
                .as_ref()
                .and_then(|c| c.get("cursor"))
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        Err(SourceError::Query(format!(
            "the API answered {EMPTY_PAGES} empty pages in a row, each naming a next one"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> HttpSourceConfig {
        toml::from_str(
            r#"url = "https://api.example.com/contacts"
cursor_param = "after"
items_pointer = "/data"
next_cursor_pointer = "/meta/next""#,
        )
        .unwrap()
    }

    #[test]
    fn pages_follow_the_pointers_and_end_without_a_next_cursor() {
        let body = br#"{"data":[{"id":1},{"id":2}],"meta":{"next":"abc"}}"#;
        match judge(&config(), StatusCode::OK, body.to_vec(), None) {
            Answer::Page(page, _) => {
                assert_eq!(page.records.len(), 2);
                assert_eq!(page.next_cursor, Some(json!({"cursor": "abc"})));
                assert!(!page.last);
            }
            other => panic!("{other:?}"),
        }
        match judge(
            &config(),
            StatusCode::OK,
            br#"{"data":[{"id":3}],"meta":{"next":null}}"#.to_vec(),
            None,
        ) {
            Answer::Page(page, _) => assert!(page.last && page.next_cursor.is_none()),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            judge(&config(), StatusCode::OK, br#"{"items":[]}"#.to_vec(), None),
            Answer::Fail(SourceError::Query(_))
        ));
    }

    #[test]
    fn a_time_cursor_starts_the_overlap_earlier_and_never_creeps_back() {
        // Another test may have installed it first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let none = WorkspaceSecrets::from_values([]);
        let source = HttpSource::open(&config(), &none).unwrap();
        let saved = json!({"cursor": "2026-12-01T10:00:00Z"});
        let start = source.rewind(Some(saved)).unwrap();
        assert_eq!(
            start,
            json!({"cursor": "2026-12-01T09:55:00Z", "overlap_from": "2026-12-01T10:00:00Z"})
        );
        // Saved again unchanged (nothing after it): the same start.
        assert_eq!(source.rewind(Some(start.clone())), Some(start));
        // Opaque cursors and the first run are left alone.
        let opaque = json!({"cursor": "p100"});
        assert_eq!(source.rewind(Some(opaque.clone())), Some(opaque));
        assert_eq!(source.rewind(None), None);
        let mut off = config();
        off.overlap = std::time::Duration::ZERO;
        let source = HttpSource::open(&off, &none).unwrap();
        let saved = json!({"cursor": "2026-12-01T10:00:00Z"});
        assert_eq!(source.rewind(Some(saved.clone())), Some(saved));
    }

    proptest::proptest! {
        /// Any answer is read without a panic.
        #[test]
        fn any_answer_is_judged_without_panicking(
            status in 100u16..600,
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
        ) {
            let _ = judge(&config(), StatusCode::from_u16(status).unwrap(), body, None);
        }
    }
}
