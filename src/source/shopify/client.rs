//! `ShopifySource`: `customers(first, after, sortKey: UPDATED_AT)` over the
//! Admin GraphQL API (docs/api-facts.md, "Shopify Admin GraphQL").
//!
//! Cost: every answer carries `extensions.cost.throttleStatus`; before the next
//! request the client waits until the bucket holds what the last query cost,
//! so it is rarely throttled. When it is anyway (`THROTTLED` in
//! `errors[].extensions.code`, with HTTP 200, 429 or 503), it waits
//! `(requestedQueryCost − currentlyAvailable) / restoreRate` seconds (at
//! least 1; longer when `Retry-After` says so) and asks again.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::config::ShopifySourceConfig;
use crate::canonical_json::canonical_json;
use crate::connector_config::WorkspaceSecrets;
use crate::outbound::{
    BodyError, SOURCE_PAGE_CAP, cap_text, describe_error, read_capped, redirect_target, retry_after,
};
use crate::source::overlap;
use crate::source::page::{Page, Source, SourceError};
use crate::source::retry::{Answer, SOURCE_RETRY, fetch_with_retries};
use tokio_util::sync::CancellationToken;

use super::bulk::{self, BulkAt, JsonlFile, customer_fields};

const QUERY: &str = concat!(
    "query SyncwardCustomers($first: Int!, $after: String, $query: String) {
  customers(first: $first, after: $after, sortKey: UPDATED_AT, query: $query) {
    edges { cursor node { ",
    customer_fields!(),
    " } }
    pageInfo { hasNextPage endCursor }
  }
}"
);

/// A bulk operation's state is asked first after this, then at twice the
/// wait before, up to `BULK_POLL_MAX` (Shopify suggests polling a long
/// export about once a minute; none of ours waits that long between looks).
pub(super) const BULK_POLL_FIRST: Duration = Duration::from_millis(500);
pub(super) const BULK_POLL_MAX: Duration = Duration::from_secs(30);
/// Operations a run starts again (failed, canceled, expired, or short of
/// their own count) before it gives up until the next run.
pub(super) const BULK_RESTARTS: u32 = 3;
/// Longest a run waits for another export of the app on the shop to end
/// before it gives up until the next run.
pub(super) const BULK_BUSY_WAIT: Duration = Duration::from_secs(600);

pub struct ShopifySource {
    pub(super) config: ShopifySourceConfig,
    token: String,
    endpoint: String,
    pub(super) client: reqwest::Client,
    /// When the bucket will hold what the last query cost again.
    next_send: Option<Instant>,
    /// Whether this run was already told that Shopify serves another version
    /// (once per run is enough).
    version_noticed: bool,
    /// The bulk operation's file being read, kept open between pages.
    pub(super) bulk_file: Option<Box<JsonlFile>>,
    /// Operations this run started again.
    pub(super) bulk_restarts: u32,
    /// The process is stopping: a wait for an export ends at once.
    pub(super) stop: CancellationToken,
}

impl std::fmt::Debug for ShopifySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShopifySource")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl ShopifySource {
    pub fn open(
        config: &ShopifySourceConfig,
        secrets: &WorkspaceSecrets,
        stop: &CancellationToken,
    ) -> Result<Self, SourceError> {
        let token = secrets
            .get(&config.access_token_env, "source.access_token_env")
            .map_err(SourceError::InvalidConfig)?;
        let endpoint = url::Url::parse(&config.endpoint())
            .map_err(|e| SourceError::InvalidConfig(format!("source.base_url: {e}")))?;
        crate::outbound::policy::check_connector_url(&endpoint, "source.base_url")
            .map_err(SourceError::InvalidConfig)?;
        let client = crate::outbound::http_client(&endpoint)
            .map_err(|e| SourceError::InvalidConfig(e.to_string()))?;
        Ok(Self {
            endpoint: config.endpoint(),
            config: config.clone(),
            token,
            client,
            next_send: None,
            version_noticed: false,
            bulk_file: None,
            bulk_restarts: 0,
            stop: stop.clone(),
        })
    }

    async fn ask(&self, after: Option<&str>, search: Option<&str>) -> Answer {
        let body = json!({
            "query": QUERY,
            "variables": { "first": self.config.page_size, "after": after, "query": search },
        });
        self.post(&body, "the customers query")
            .await
            .then(customers_page)
    }

    /// One GraphQL request, judged up to its `data` (`what` names the
    /// request in a refusal); version notices ride on the page a customers
    /// query makes of it.
    pub(super) async fn post(&self, body: &Value, what: &str) -> Answer<Value> {
        let sent = self
            .client
            .post(&self.endpoint)
            .header("X-Shopify-Access-Token", &self.token)
            .timeout(self.config.timeout)
            .json(body)
            .send()
            .await;
        let response = match sent {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Answer::Retry("Shopify did not answer in time".into());
            }
            Err(e) => {
                if let Some(why) = crate::outbound::policy::refused(&e) {
                    return Answer::Fail(SourceError::InvalidConfig(format!(
                        "source.base_url: {why}"
                    )));
                }
                return Answer::Retry(format!("cannot reach Shopify: {}", describe_error(e)));
            }
        };
        let status = response.status();
        if status.is_redirection() {
            // The request carries the access token: a redirect is not followed.
            return Answer::Fail(SourceError::InvalidConfig(format!(
                "Shopify answered a redirect (HTTP {}) to {}; syncward does not follow \
                 redirects with credentials: set source.shop (or source.base_url) to the \
                 final address",
                status.as_u16(),
                redirect_target(&response)
            )));
        }
        let retry_after = retry_after(response.headers());
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let notice = version_notice(
            &self.config.api_version,
            header("x-shopify-api-version").as_deref(),
            header("x-shopify-api-deprecated-reason").as_deref(),
        );
        let bytes = match read_capped(response, SOURCE_PAGE_CAP).await {
            Ok(b) => b,
            Err(BodyError::CutOff(e)) => {
                return Answer::Retry(format!("Shopify's answer was cut off: {e}"));
            }
            Err(BodyError::TooLarge) => {
                return Answer::Fail(SourceError::Query(format!(
                    "Shopify's answer exceeded {}; not read further (lower source.page_size)",
                    cap_text(SOURCE_PAGE_CAP)
                )));
            }
        };
        judge_graphql(status, &bytes, retry_after, what).then(|mut body, pause| {
            if let (Some(notice), Value::Object(map)) = (notice, &mut body) {
                map.insert(NOTICE_FIELD.into(), Value::String(notice));
            }
            Answer::Page(body, pause)
        })
    }
}

/// Where `post` leaves a version notice in the body it hands on (a name no
/// GraphQL answer uses).
const NOTICE_FIELD: &str = "syncward_notice";

/// What to tell the operator when Shopify's answer says it served another
/// API version than the sync pinned (`X-Shopify-API-Version`: Shopify falls
/// forward to the oldest supported version once a pinned one is retired) or
/// that the request used something deprecated
/// (`X-Shopify-API-Deprecated-Reason`); shopify.dev/docs/api/usage/versioning.
fn version_notice(pinned: &str, served: Option<&str>, deprecated: Option<&str>) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(served) = served
        .map(str::trim)
        .filter(|v| !v.is_empty() && *v != pinned)
    {
        parts.push(format!(
            "Shopify served API version {served}, not the pinned {pinned} (source.api_version): \
             the pinned version is probably retired; test the sync against {served} and pin it"
        ));
    }
    if let Some(reason) = deprecated.map(str::trim).filter(|r| !r.is_empty()) {
        parts.push(format!(
            "Shopify says the request uses something deprecated in {pinned}: {reason}"
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// How long until the bucket holds what the query costs, from
/// `extensions.cost`: `(requestedQueryCost − currentlyAvailable) / restoreRate`
/// (zero when it holds enough already).
fn missing_cost_wait(body: &Value) -> Option<Duration> {
    let cost = body.pointer("/extensions/cost")?;
    let number = |p: &str| cost.pointer(p).and_then(Value::as_f64);
    let requested = number("/requestedQueryCost")?;
    let available = number("/throttleStatus/currentlyAvailable")?;
    let rate = number("/throttleStatus/restoreRate").filter(|r| *r > 0.0)?;
    // Clamped before the conversion, which panics on huge values.
    let seconds = ((requested - available) / rate).clamp(0.0, SOURCE_RETRY.max_wait.as_secs_f64());
    seconds
        .is_finite()
        .then(|| Duration::from_secs_f64(seconds))
}

/// Reads one customers-query answer. Pure, so every shape of answer is
/// testable.
#[cfg(test)]
fn judge(status: StatusCode, bytes: &[u8], retry_after: Option<Duration>) -> Answer {
    judge_graphql(status, bytes, retry_after, "the customers query").then(customers_page)
}

/// Reads one GraphQL answer up to its body: statuses, throttles and
/// `errors` are judged here, for every kind of request (`what` names it).
/// The pause is what the bucket lacks for a request of the same cost.
pub(super) fn judge_graphql(
    status: StatusCode,
    bytes: &[u8],
    retry_after: Option<Duration>,
    what: &str,
) -> Answer<Value> {
    let parsed: Option<Value> = serde_json::from_slice(bytes).ok();
    // Shopify's own words, where it gave some: `errors` is a string on these
    // answers, not a list.
    let why = || {
        parsed
            .as_ref()
            .and_then(|v| v.get("errors"))
            .map(|e| {
                e.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| e.to_string())
            })
            .unwrap_or_else(|| format!("HTTP {status}"))
    };
    // Statuses per shopify.dev/docs/api/usage/response-codes.
    match status {
        StatusCode::UNAUTHORIZED => {
            return Answer::Fail(SourceError::Unauthorized(format!(
                "Shopify refused the access token: {}",
                why()
            )));
        }
        StatusCode::FORBIDDEN => {
            return Answer::Fail(SourceError::Unauthorized(format!(
                "Shopify answered HTTP 403 Forbidden ({}): the app usually lacks an access \
                 scope; reading customers needs read_customers (and approval for protected \
                 customer data)",
                why()
            )));
        }
        StatusCode::PAYMENT_REQUIRED => {
            return Answer::Fail(SourceError::AccountFrozen(format!(
                "Shopify answered HTTP 402 Payment Required ({}): the shop is frozen until \
                 its owner pays the outstanding balance",
                why()
            )));
        }
        StatusCode::LOCKED => {
            return Answer::Fail(SourceError::AccountLocked(format!(
                "Shopify answered HTTP 423 Locked ({}): the shop is locked; its owner must \
                 contact Shopify support",
                why()
            )));
        }
        _ => {}
    }
    let Some(body) = parsed else {
        return if status == StatusCode::TOO_MANY_REQUESTS {
            Answer::Throttled(
                retry_after
                    .unwrap_or(Duration::from_secs(1))
                    .min(SOURCE_RETRY.max_wait),
            )
        } else {
            Answer::Retry(format!("HTTP {status} with a body that is not JSON"))
        };
    };
    let errors = body.get("errors").and_then(Value::as_array);
    let throttled = errors.is_some_and(|errs| {
        errs.iter()
            .any(|e| e.pointer("/extensions/code").and_then(Value::as_str) == Some("THROTTLED"))
    });
    if throttled || status == StatusCode::TOO_MANY_REQUESTS {
        let computed = missing_cost_wait(&body).unwrap_or_default();
        let wait = computed
            .max(retry_after.unwrap_or_default())
            .max(Duration::from_secs(1))
            .min(SOURCE_RETRY.max_wait);
        return Answer::Throttled(wait);
    }
    if status.is_server_error() {
        return Answer::Retry(format!("HTTP {status}"));
    }
    if let Some(errs) = errors.filter(|e| !e.is_empty()) {
        let messages: Vec<String> = errs
            .iter()
            .map(|e| {
                e.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("an error without a message")
                    .to_string()
            })
            .collect();
        let messages = messages.join("; ");
        // GraphQL's own codes, often with HTTP 200 (shopify.dev Admin
        // GraphQL "Status and error codes").
        let has_code = |code: &str| {
            errs.iter()
                .any(|e| e.pointer("/extensions/code").and_then(Value::as_str) == Some(code))
        };
        if has_code("ACCESS_DENIED") {
            return Answer::Fail(SourceError::Unauthorized(format!(
                "Shopify denied access ({messages}): the app usually lacks an access scope; \
                 reading customers needs read_customers (and approval for protected customer \
                 data)"
            )));
        }
        if has_code("SHOP_INACTIVE") {
            return Answer::Fail(SourceError::AccountLocked(format!(
                "Shopify says the shop is not active ({messages}): it is locked, e.g. for \
                 repeatedly exceeding API rate limits or for fraud risk"
            )));
        }
        if has_code("INTERNAL_SERVER_ERROR") {
            return Answer::Retry(format!("Shopify had an internal error: {messages}"));
        }
        return Answer::Fail(SourceError::Query(format!(
            "Shopify refused {what}: {messages}"
        )));
    }
    if !status.is_success() {
        return Answer::Fail(SourceError::Query(format!(
            "Shopify answered HTTP {status}"
        )));
    }
    if body.get("data").is_none_or(Value::is_null) {
        return Answer::Retry(format!("HTTP {status} without data"));
    }
    let pause = missing_cost_wait(&body).filter(|w| !w.is_zero());
    Answer::Page(body, pause)
}

/// A customers query's page, from its judged body.
fn customers_page(mut body: Value, pause: Option<Duration>) -> Answer {
    let notices: Vec<String> = body
        .as_object_mut()
        .and_then(|m| m.remove(NOTICE_FIELD))
        .and_then(|n| n.as_str().map(str::to_string))
        .into_iter()
        .collect();
    let Some(customers) = body.pointer("/data/customers") else {
        return Answer::Retry("an answer without data.customers".into());
    };
    let records: Vec<Value> = customers
        .get("edges")
        .and_then(Value::as_array)
        .map(|edges| {
            edges
                .iter()
                .filter_map(|e| e.get("node").cloned())
                .collect()
        })
        .unwrap_or_default();
    if all_redacted(&records) {
        return Answer::Fail(SourceError::Redacted(format!(
            "Shopify returned a page of {} customers without a single e-mail address: \
             protected customer data is redacted for this app (it needs approval for \
             level 2, the e-mail field)",
            records.len()
        )));
    }
    let has_next = customers
        .pointer("/pageInfo/hasNextPage")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let end = customers
        .pointer("/pageInfo/endCursor")
        .and_then(Value::as_str)
        .map(str::to_string);
    let last = !has_next || end.is_none();
    let updated_at = latest_updated_at(&records);
    Answer::Page(
        Page {
            next_cursor: end.map(|c| match updated_at {
                Some(u) => json!({ "after": c, "updated_at": u }),
                None => json!({ "after": c }),
            }),
            records: records.into(),
            last,
            notices,
            held_back: None,
        },
        pause,
    )
}

/// Whether no customer of a non-empty page has an e-mail address: what
/// Shopify returns to an app that is not approved for protected customer
/// data's e-mail field (redacted to null; shopify.dev "Work with protected
/// customer data"). One customer without an address among others (a
/// phone-only customer) is rejected alone as `missing_email` by the mapping;
/// a page with none at all could not be delivered anyway, and says why.
fn all_redacted(records: &[Value]) -> bool {
    !records.is_empty()
        && records.iter().all(|node| {
            node.pointer("/defaultEmailAddress/emailAddress")
                .and_then(Value::as_str)
                .is_none_or(|s| s.trim().is_empty())
        })
}

/// The `customers(query:)` search: the sync's own filter, and from `since`
/// on when the run re-reads an overlap window (Shopify's search syntax,
/// terms joined by `AND`).
fn search_query(filter: Option<&str>, since: Option<&str>) -> Option<String> {
    let filter = filter.map(str::trim).filter(|f| !f.is_empty());
    match (filter, since) {
        (None, None) => None,
        (Some(f), None) => Some(f.to_string()),
        (None, Some(s)) => Some(format!("updated_at:>='{s}'")),
        (Some(f), Some(s)) => Some(format!("({f}) AND updated_at:>='{s}'")),
    }
}

/// The latest `updatedAt` among a page's customers (the last one, as they
/// come sorted by it), as Shopify wrote it.
fn latest_updated_at(records: &[Value]) -> Option<String> {
    records
        .iter()
        .filter_map(|node| {
            let text = node.get("updatedAt")?.as_str()?;
            let at = chrono::DateTime::parse_from_rfc3339(text).ok()?;
            Some((at, text))
        })
        .max_by_key(|(at, _)| *at)
        .map(|(_, text)| text.to_string())
}

impl Source for ShopifySource {
    fn fingerprint(&self) -> String {
        let identity =
            json!({ "shop": self.config.shop, "query": self.config.query, "sort": "UPDATED_AT" });
        let digest = Sha256::digest(canonical_json(&identity).as_bytes());
        format!("shopify:{}", hex::encode(digest))
    }

    /// A run starts `overlap` before the last `updatedAt` read: a search
    /// `updated_at:>='…'` (kept in every page's cursor, as Shopify's cursors
    /// hold only for the query they came from) with no `after`.
    fn rewind(&self, saved: Option<Value>) -> Option<Value> {
        let saved = saved?;
        let last = saved.get("updated_at").and_then(Value::as_str);
        match last.and_then(|t| Some((t, overlap::earlier_by(t, self.config.overlap)?))) {
            Some((last, since)) if !self.config.overlap.is_zero() => {
                Some(json!({ "since": since, "updated_at": last }))
            }
            _ => Some(saved),
        }
    }

    async fn fetch_page(&mut self, cursor: Option<&Value>) -> Result<Page, SourceError> {
        if let Some(at) = cursor.and_then(BulkAt::from_cursor) {
            return self.bulk_page(Some(at)).await;
        }
        if cursor.is_none() && self.config.bulk_above > 0 && self.store_is_large().await? {
            return self.bulk_page(None).await;
        }
        self.fetch_paged(cursor).await
    }
}

impl ShopifySource {
    /// The customers Shopify's search finds by `address` under the sync's
    /// own filter: `sync run --only`.
    pub async fn fetch_by_address(&mut self, address: &str) -> Result<Page, SourceError> {
        let by_address = format!("email:{}", Value::String(address.trim().to_string()));
        let search = match search_query(self.config.query.as_deref(), None) {
            Some(filter) => format!("({filter}) AND {by_address}"),
            None => by_address,
        };
        let mut next_send = self.next_send.take();
        let this = &*self;
        let page = fetch_with_retries("Shopify", &mut next_send, || {
            this.ask(None, Some(search.as_str()))
        })
        .await;
        self.next_send = next_send;
        page.map(|mut page| {
            page.next_cursor = None;
            page.last = true;
            page
        })
    }

    /// A page of `customers(first, after, sortKey: UPDATED_AT)`.
    pub(super) async fn fetch_paged(
        &mut self,
        cursor: Option<&Value>,
    ) -> Result<Page, SourceError> {
        let field = |name: &str| cursor.and_then(|c| c.get(name)).and_then(Value::as_str);
        let (after, since) = (field("after"), field("since"));
        let search = search_query(self.config.query.as_deref(), since);
        let mut next_send = self.next_send.take();
        let this = &*self;
        let mut page = fetch_with_retries("Shopify", &mut next_send, || {
            this.ask(after, search.as_deref())
        })
        .await;
        self.next_send = next_send;
        if let Ok(page) = &mut page {
            // Every cursor says what it was read under and how far it got.
            if let Some(Value::Object(next)) = &mut page.next_cursor {
                if let Some(since) = since {
                    next.insert("since".into(), json!(since));
                }
                if let (None, Some(last)) = (next.get("updated_at"), field("updated_at")) {
                    next.insert("updated_at".into(), json!(last));
                }
            }
            // Once per run: every answer carries the same headers.
            if self.version_noticed {
                page.notices.clear();
            } else if !page.notices.is_empty() {
                self.version_noticed = true;
            }
        }
        page
    }

    /// One GraphQL request with the source's retries and pacing; `judge`
    /// reads what its `data` means.
    pub(super) async fn request<T>(
        &mut self,
        body: Value,
        what: &str,
        judge: impl Fn(Value) -> Answer<T>,
    ) -> Result<T, SourceError> {
        let mut next_send = self.next_send.take();
        let (this, body, judge) = (&*self, &body, &judge);
        let answer = fetch_with_retries("Shopify", &mut next_send, || async move {
            this.post(body, what)
                .await
                .then(|data, pause| judge(data).then(|value, _| Answer::Page(value, pause)))
        })
        .await;
        self.next_send = next_send;
        answer
    }

    /// Whether the sync's customers reach `bulk_above` (counted no further).
    async fn store_is_large(&mut self) -> Result<bool, SourceError> {
        let limit = self.config.bulk_above.min(i32::MAX as u64);
        let body = json!({
            "query": bulk::COUNT,
            "variables": { "query": search_query(self.config.query.as_deref(), None), "limit": limit },
        });
        let count = self
            .request(body, "the customers count", bulk::judge_count)
            .await?;
        Ok(count >= limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throttled_body(requested: f64, available: f64, rate: f64) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "data": null,
            "errors": [{"message": "Throttled", "extensions": {"code": "THROTTLED"}}],
            "extensions": {"cost": {"requestedQueryCost": requested, "actualQueryCost": null,
                "throttleStatus": {"maximumAvailable": 1000.0, "currentlyAvailable": available, "restoreRate": rate}}}
        }))
        .unwrap()
    }

    #[test]
    fn a_run_starts_the_overlap_before_the_last_updated_at_under_the_syncs_own_filter() {
        let config: ShopifySourceConfig = toml::from_str(
            "shop = \"acme\"\napi_version = \"2025-07\"\naccess_token_env = \"SHOPIFY_TOKEN\"",
        )
        .unwrap();
        assert_eq!(config.overlap, Duration::from_secs(300));
        // Another test may have installed it first.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let source = ShopifySource {
            endpoint: config.endpoint(),
            config,
            token: String::new(),
            client: reqwest::Client::new(),
            next_send: None,
            version_noticed: false,
            bulk_file: None,
            bulk_restarts: 0,
            stop: CancellationToken::new(),
        };
        let saved = json!({"after": "abc", "since": "2026-01-01T00:00:00Z",
            "updated_at": "2026-12-01T10:00:00Z"});
        assert_eq!(
            source.rewind(Some(saved)),
            Some(json!({"since": "2026-12-01T09:55:00Z", "updated_at": "2026-12-01T10:00:00Z"}))
        );
        // A cursor saved before overlaps existed goes on from `after`.
        let old = json!({"after": "abc"});
        assert_eq!(source.rewind(Some(old.clone())), Some(old));
        assert_eq!(source.rewind(None), None);
        assert_eq!(search_query(None, None), None);
        assert_eq!(
            search_query(Some("state:ENABLED"), Some("2026-12-01T09:55:00Z")).as_deref(),
            Some("(state:ENABLED) AND updated_at:>='2026-12-01T09:55:00Z'")
        );
        assert_eq!(
            search_query(Some(" "), Some("2026-12-01T09:55:00Z")).as_deref(),
            Some("updated_at:>='2026-12-01T09:55:00Z'")
        );
    }

    #[test]
    fn each_page_cursor_carries_the_latest_updated_at_read() {
        let body = serde_json::to_vec(&json!({"data": {"customers": {
            "edges": [
                {"cursor": "a", "node": {"id": "1", "updatedAt": "2026-12-01T10:00:00Z",
                    "defaultEmailAddress": {"emailAddress": "a@example.com"}}},
                {"cursor": "b", "node": {"id": "2", "updatedAt": "2026-12-01T10:00:01.5Z",
                    "defaultEmailAddress": {"emailAddress": "b@example.com"}}}],
            "pageInfo": {"hasNextPage": true, "endCursor": "b"}}}}))
        .unwrap();
        match judge(StatusCode::OK, &body, None) {
            Answer::Page(page, _) => assert_eq!(
                page.next_cursor,
                Some(json!({"after": "b", "updated_at": "2026-12-01T10:00:01.5Z"}))
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn throttled_waits_for_the_missing_cost_at_least_one_second_and_honours_retry_after() {
        let wait = |status, body: &[u8], after| match judge(status, body, after) {
            Answer::Throttled(w) => w,
            _ => panic!("not throttled"),
        };
        assert_eq!(
            wait(StatusCode::OK, &throttled_body(252.0, 2.0, 50.0), None),
            Duration::from_secs(5)
        );
        assert_eq!(
            wait(StatusCode::OK, &throttled_body(252.0, 240.0, 50.0), None),
            Duration::from_secs(1)
        );
        assert_eq!(
            wait(
                StatusCode::TOO_MANY_REQUESTS,
                &throttled_body(252.0, 202.0, 50.0),
                Some(Duration::from_secs(3))
            ),
            Duration::from_secs(3)
        );
        assert_eq!(
            wait(
                StatusCode::SERVICE_UNAVAILABLE,
                &throttled_body(252.0, 2.0, 50.0),
                None
            ),
            Duration::from_secs(5)
        );
        // A bucket that would take ages to refill waits at most a minute.
        assert_eq!(
            wait(StatusCode::OK, &throttled_body(1e300, 0.0, 1e-300), None),
            SOURCE_RETRY.max_wait
        );
    }

    #[test]
    fn a_served_version_other_than_the_pinned_one_or_a_deprecation_is_a_notice() {
        assert_eq!(version_notice("2025-07", Some("2025-07"), None), None);
        assert_eq!(version_notice("2025-07", None, None), None);
        let retired = version_notice("2025-04", Some("2025-07"), None).unwrap();
        assert!(
            retired.contains("served API version 2025-07, not the pinned 2025-04"),
            "{retired}"
        );
        let deprecated = version_notice(
            "2025-07",
            Some("2025-07"),
            Some("Customer.email is deprecated"),
        )
        .unwrap();
        assert!(
            deprecated.contains("Customer.email is deprecated"),
            "{deprecated}"
        );
    }

    #[test]
    fn frozen_locked_forbidden_and_redacted_answers_have_their_own_errors() {
        let fail = |status: u16, body: &[u8]| match judge(
            StatusCode::from_u16(status).unwrap(),
            body,
            None,
        ) {
            Answer::Fail(e) => e,
            _ => panic!("HTTP {status} did not fail"),
        };
        assert!(
            matches!(fail(402, br#"{"errors":"Unavailable Shop"}"#), SourceError::AccountFrozen(m) if m.contains("Unavailable Shop"))
        );
        assert!(matches!(fail(423, b"{}"), SourceError::AccountLocked(_)));
        let coded = |code: &str| {
            serde_json::to_vec(&json!({"errors": [{"message": "m", "extensions": {"code": code}}]}))
                .unwrap()
        };
        assert!(
            matches!(fail(200, &coded("ACCESS_DENIED")), SourceError::Unauthorized(m) if m.contains("access scope"))
        );
        assert!(matches!(
            fail(200, &coded("SHOP_INACTIVE")),
            SourceError::AccountLocked(_)
        ));
        assert!(matches!(
            judge(StatusCode::OK, &coded("INTERNAL_SERVER_ERROR"), None),
            Answer::Retry(_)
        ));
        assert!(
            matches!(fail(403, b"{}"), SourceError::Unauthorized(m) if m.contains("access scope"))
        );
        let page = |emails: [Value; 2]| {
            serde_json::to_vec(&json!({"data": {"customers": {
                "edges": emails.iter().map(|e| json!({"cursor": "c", "node": {"id": "1", "firstName": null, "lastName": null, "defaultEmailAddress": {"emailAddress": e, "marketingState": "SUBSCRIBED"}}})).collect::<Vec<_>>(),
                "pageInfo": {"hasNextPage": false, "endCursor": "c"}}}})).unwrap()
        };
        assert!(matches!(
            fail(200, &page([Value::Null, json!("")])),
            SourceError::Redacted(_)
        ));
        assert!(matches!(
            judge(
                StatusCode::OK,
                &page([Value::Null, json!("a@example.com")]),
                None
            ),
            Answer::Page(..)
        ));
    }

    #[test]
    fn a_bad_token_is_unauthorized_with_shopifys_message() {
        let body = br#"{"errors":"[API] Invalid API key or access token (unrecognized login or wrong password)"}"#;
        match judge(StatusCode::UNAUTHORIZED, body, None) {
            Answer::Fail(SourceError::Unauthorized(m)) => {
                assert!(m.contains("Invalid API key"), "{m}")
            }
            _ => panic!("not unauthorized"),
        }
    }

    proptest::proptest! {
        /// Any answer is read without a panic.
        #[test]
        fn any_answer_is_judged_without_panicking(
            status in 100u16..600,
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
        ) {
            let _ = judge(StatusCode::from_u16(status).unwrap(), &body, None);
        }
    }
}
