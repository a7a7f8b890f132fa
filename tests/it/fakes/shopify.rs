//! A Shopify Admin GraphQL fake for the customers source, built from the facts
//! in docs/api-facts.md: `POST /admin/api/{version}/graphql.json` with
//! `X-Shopify-Access-Token`, `customers(first, after, sortKey: UPDATED_AT,
//! query)` sorted by `updatedAt` then id, with opaque cursors that hold the
//! last sort value (so a customer updated later moves past them) and the
//! search terms `updated_at:>='…'` / `updated_at:>'…'` joined by `AND`,
//! customers that the search index shows only later (`add_late_customer`), a leaky-bucket query cost (`extensions.cost` on every
//! answer), `THROTTLED` answers in the HTTP 200 form and the 429 form (with
//! `Retry-After`), and a 401 whose `errors` is a string. It records every
//! request and every wait it instructed, so a test can check they were kept.
//!
//! Bulk operations (docs/api-facts.md, "Shopify bulk operations"):
//! `customersCount(query, limit)` with its `precision`,
//! `bulkOperationRunQuery` (status `CREATED`; `userErrors` with code
//! `OPERATION_IN_PROGRESS` while another of the app's exports runs),
//! `node(id:)` and `currentBulkOperation` answering the operation's fields
//! (`objectCount` as an `UnsignedInt64` string), each look moving it one step
//! along its script (`CREATED`, `RUNNING`, then `COMPLETED`, `FAILED` with an
//! `errorCode` and a `partialDataUrl`, `CANCELED` or `EXPIRED`), and the
//! JSONL file (one customer per line, in id order) at an unauthenticated URL
//! that honours `Range: bytes=N-` (206, or 416 past its end).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine;
use serde_json::{Value, json};

/// One request as received.
#[derive(Debug, Clone)]
pub struct ShopifyRequest {
    pub version: String,
    pub variables: Value,
    pub status: u16,
    pub throttled: bool,
}

/// How one bulk operation goes: the status each look at it answers (the
/// last one stays), and how it ends.
#[derive(Debug, Clone)]
pub struct BulkScript {
    pub states: Vec<&'static str>,
    /// `errorCode` once `FAILED`.
    pub error_code: Option<&'static str>,
    /// A failed operation leaves partial data (`partialDataUrl`).
    pub partial: bool,
    /// The file leaves out this many of the customers `objectCount` counts.
    pub drop_lines: usize,
}

impl Default for BulkScript {
    fn default() -> Self {
        BulkScript {
            states: vec!["CREATED", "RUNNING", "COMPLETED"],
            error_code: None,
            partial: false,
            drop_lines: 0,
        }
    }
}

impl BulkScript {
    /// Created, running, then `status` (with `error_code` when failed).
    pub fn ending(status: &'static str, error_code: Option<&'static str>) -> Self {
        BulkScript {
            states: vec!["CREATED", "RUNNING", status],
            error_code,
            partial: status == "FAILED",
            drop_lines: 0,
        }
    }
}

struct FakeOperation {
    id: String,
    created_at: String,
    query: String,
    script: BulkScript,
    looks: usize,
    file: bytes::Bytes,
    objects: usize,
}

impl FakeOperation {
    fn status(&self) -> &'static str {
        let states = &self.script.states;
        states[self.looks.min(states.len() - 1)]
    }
}

/// One download of a bulk file.
#[derive(Debug, Clone)]
pub struct FileRequest {
    pub operation: usize,
    pub range: Option<String>,
    pub status: u16,
    pub token_sent: bool,
}

/// A wait the fake told the client to keep, and when the client came back.
#[derive(Debug, Clone)]
pub struct InstructedWait {
    pub answered_at: Instant,
    pub wait: Duration,
    pub form: u16,
    pub next_request_at: Option<Instant>,
}

struct Inner {
    customers: Vec<Value>,
    /// Customers the listing does not show yet (indexes into `customers`).
    hidden: Vec<usize>,
    available: f64,
    refilled_at: Instant,
    requests: Vec<ShopifyRequest>,
    waits: Vec<InstructedWait>,
    /// Request numbers (1-based) before which another app empties the bucket.
    drain_before: Vec<usize>,
    throttles: usize,
    /// Never answer (the client's timeout must fire).
    hang: bool,
    /// Every request is answered with this status and body instead.
    answer: Option<(u16, Value)>,
    /// `X-Shopify-API-Version` sent back (default: the version asked for).
    served_version: Option<String>,
    /// `X-Shopify-API-Deprecated-Reason`, when set.
    deprecated_reason: Option<String>,
    /// `http://127.0.0.1:PORT`, for the bulk files' URLs.
    base: String,
    operations: Vec<FakeOperation>,
    /// Scripts for the next operations started (then the default).
    scripts: std::collections::VecDeque<BulkScript>,
    file_requests: Vec<FileRequest>,
}

struct Shared {
    token: String,
    maximum: f64,
    restore_rate: f64,
    inner: Mutex<Inner>,
}

pub struct ShopifyFake {
    /// `http://127.0.0.1:PORT`: the sync's `source.base_url`.
    pub base_url: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for ShopifyFake {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Inner> {
    // A panic while holding the lock only happens in a failing test; keep going.
    shared.inner.lock().unwrap_or_else(|e| e.into_inner())
}

impl ShopifyFake {
    /// A shop of `customers` customers (`customer{i}@example.com`), a bucket
    /// of `maximum` points refilled at `restore_rate` points/s.
    pub async fn start(
        token: &str,
        customers: usize,
        maximum: f64,
        restore_rate: f64,
    ) -> anyhow::Result<Self> {
        let customers = (1..=customers).map(customer).collect();
        let shared = Arc::new(Shared {
            token: token.to_string(),
            maximum,
            restore_rate,
            inner: Mutex::new(Inner {
                customers,
                hidden: Vec::new(),
                available: maximum,
                refilled_at: Instant::now(),
                requests: Vec::new(),
                waits: Vec::new(),
                drain_before: Vec::new(),
                throttles: 0,
                hang: false,
                answer: None,
                served_version: None,
                deprecated_reason: None,
                base: String::new(),
                operations: Vec::new(),
                scripts: Default::default(),
                file_requests: Vec::new(),
            }),
        });
        let app = Router::new()
            .route(
                "/admin/api/{version}/graphql.json",
                post(graphql_with_headers),
            )
            .route("/bulk/{n}", get(bulk_file))
            .with_state(shared.clone());
        let (addr, server) = super::serve(app).await?;
        lock(&shared).base = format!("http://{addr}");
        Ok(Self {
            base_url: format!("http://{addr}"),
            shared,
            server,
        })
    }

    /// New customers join the shop (at the end of the UPDATED_AT order).
    pub fn add_customers(&self, n: usize) {
        let mut inner = lock(&self.shared);
        let start = inner.customers.len() + 1;
        inner.customers.extend((start..start + n).map(customer));
    }

    /// A new customer whose `updatedAt` lies `lag` before the latest one
    /// (its write took that long to reach the listing), not shown until
    /// `reveal_late`. Returns its address.
    pub fn add_late_customer(&self, lag: Duration) -> String {
        let mut inner = lock(&self.shared);
        let i = inner.customers.len() + 1;
        let latest = inner.customers.iter().filter_map(updated_at).max();
        let mut late = customer(i);
        if let Some(latest) = latest {
            let at = latest - chrono::Duration::from_std(lag).unwrap_or_default();
            late["updatedAt"] = json!(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
        }
        inner.customers.push(late);
        inner.hidden.push(i - 1);
        format!("customer{i}@example.com")
    }

    /// The listing catches up: late customers are shown.
    pub fn reveal_late(&self) {
        lock(&self.shared).hidden.clear();
    }

    /// Changes customer `i` (0-based) in place, e.g. its marketing state.
    pub fn edit_customers(&self, mut edit: impl FnMut(usize, &mut Value)) {
        let mut inner = lock(&self.shared);
        for (i, c) in inner.customers.iter_mut().enumerate() {
            edit(i, c);
        }
    }

    /// Customer `i` (0-based) changes now: a new first name, `updatedAt` now.
    pub fn update_now(&self, i: usize, first_name: &str) {
        let mut inner = lock(&self.shared);
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        let c = &mut inner.customers[i];
        c["firstName"] = json!(first_name);
        c["updatedAt"] = json!(now);
    }

    /// Every request from now on gets this status and JSON body.
    pub fn answer_always(&self, status: u16, body: Value) {
        lock(&self.shared).answer = Some((status, body));
    }

    /// Shopify serves `version` (its `X-Shopify-API-Version` header), e.g.
    /// once the pinned one is retired, with an optional
    /// `X-Shopify-API-Deprecated-Reason`.
    pub fn serve_version(&self, version: &str, deprecated_reason: Option<&str>) {
        let mut inner = lock(&self.shared);
        inner.served_version = Some(version.to_string());
        inner.deprecated_reason = deprecated_reason.map(str::to_string);
    }

    /// Every request from now on hangs.
    pub fn hang(&self) {
        lock(&self.shared).hang = true;
    }

    /// Another app spends the whole bucket just before request `n` (1-based).
    pub fn drain_bucket_before(&self, n: usize) {
        lock(&self.shared).drain_before.push(n);
    }

    /// The next operations started go by these scripts, in order.
    pub fn script_bulk(&self, scripts: impl IntoIterator<Item = BulkScript>) {
        lock(&self.shared).scripts.extend(scripts);
    }

    /// How many bulk operations were started.
    pub fn bulk_operations_started(&self) -> usize {
        lock(&self.shared).operations.len()
    }

    pub fn file_requests(&self) -> Vec<FileRequest> {
        lock(&self.shared).file_requests.clone()
    }

    pub fn requests(&self) -> Vec<ShopifyRequest> {
        lock(&self.shared).requests.clone()
    }

    pub fn instructed_waits(&self) -> Vec<InstructedWait> {
        lock(&self.shared).waits.clone()
    }
}

/// Customer `i` (1-based), updated `i` seconds into 2025: the shop's order
/// of updates is the order customers were made in.
fn customer(i: usize) -> Value {
    let at = chrono::DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
        .expect("a valid time")
        .to_utc()
        + chrono::Duration::seconds(i as i64);
    json!({
        "id": format!("gid://shopify/Customer/{i}"),
        "firstName": format!("First{i}"),
        "lastName": format!("Last{i}"),
        "updatedAt": at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "defaultEmailAddress": {
            "emailAddress": format!("customer{i}@example.com"),
            "marketingState": "SUBSCRIBED",
            "marketingOptInLevel": "SINGLE_OPT_IN",
            "marketingUpdatedAt": at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        },
    })
}

/// A customer as a GraphQL answer holds it: only the consent fields the
/// query selected.
fn selected(customer: &Value, query: &str) -> Value {
    let mut node = customer.clone();
    if let Some(address) = node
        .get_mut("defaultEmailAddress")
        .and_then(Value::as_object_mut)
    {
        address.retain(|field, _| {
            !matches!(field.as_str(), "marketingOptInLevel" | "marketingUpdatedAt")
                || query.contains(field.as_str())
        });
    }
    node
}

fn updated_at(customer: &Value) -> Option<chrono::DateTime<chrono::Utc>> {
    let text = customer.get("updatedAt")?.as_str()?;
    Some(chrono::DateTime::parse_from_rfc3339(text).ok()?.to_utc())
}

/// One search term the fake understands.
enum Term {
    /// `updated_at:>='T'` (inclusive) or `updated_at:>'T'`.
    UpdatedAfter(bool, chrono::DateTime<chrono::Utc>),
    /// `email:"ADDRESS"` (Shopify's search by e-mail, without regard to case).
    Email(String),
}

impl Term {
    fn admits(&self, customer: &Value) -> bool {
        match self {
            Term::UpdatedAfter(inclusive, bound) => updated_at(customer).is_some_and(|at| {
                if *inclusive {
                    at >= *bound
                } else {
                    at > *bound
                }
            }),
            Term::Email(address) => customer
                .pointer("/defaultEmailAddress/emailAddress")
                .and_then(Value::as_str)
                .is_some_and(|e| e.eq_ignore_ascii_case(address)),
        }
    }
}

/// The `query:` search terms the fake understands: `updated_at:>='T'`,
/// `updated_at:>'T'` (quotes optional) and `email:"ADDRESS"`, joined by
/// `AND`. `None` names a term it does not.
fn search_filter(query: &str) -> Result<Vec<Term>, String> {
    let mut bounds = Vec::new();
    for term in query.split(" AND ") {
        let term = term.trim().trim_start_matches('(').trim_end_matches(')');
        if let Some(address) = term.strip_prefix("email:") {
            bounds.push(Term::Email(address.trim_matches(['\'', '"']).to_string()));
            continue;
        }
        let (inclusive, value) = if let Some(v) = term.strip_prefix("updated_at:>=") {
            (true, v)
        } else if let Some(v) = term.strip_prefix("updated_at:>") {
            (false, v)
        } else {
            return Err(format!(
                "the fake does not understand the search term {term:?}"
            ));
        };
        let value = value.trim_matches(['\'', '"']);
        let at = chrono::DateTime::parse_from_rfc3339(value)
            .map_err(|e| format!("{value:?} is not a time: {e}"))?;
        bounds.push(Term::UpdatedAfter(inclusive, at.to_utc()));
    }
    Ok(bounds)
}

/// What a customers query costs: one point per node asked for, plus the connection.
fn query_cost(first: u64) -> f64 {
    first as f64 + 2.0
}

fn encode_cursor(index: usize) -> String {
    base64::engine::general_purpose::STANDARD
        .encode(format!("{{\"last_id\":{index},\"fake\":true}}"))
}

fn decode_cursor(cursor: &str) -> Option<usize> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(cursor)
        .ok()?;
    let value: Value = serde_json::from_slice(&bytes).ok()?;
    value.get("last_id")?.as_u64().map(|i| i as usize)
}

fn graphql_error(status: StatusCode, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"errors": [{"message": message}]})),
    )
        .into_response()
}

/// Every answer carries `X-Shopify-API-Version` (the version served), and
/// `X-Shopify-API-Deprecated-Reason` when one is set, as Shopify's versioning
/// page documents (shopify.dev/docs/api/usage/versioning).
async fn graphql_with_headers(
    State(shared): State<Arc<Shared>>,
    Path(version): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (served, reason, answer) = {
        let inner = lock(&shared);
        (
            inner
                .served_version
                .clone()
                .unwrap_or_else(|| version.clone()),
            inner.deprecated_reason.clone(),
            inner.answer.clone(),
        )
    };
    let mut response = match answer {
        Some((status, body)) => {
            lock(&shared).requests.push(ShopifyRequest {
                version: version.clone(),
                variables: Value::Null,
                status,
                throttled: false,
            });
            (
                StatusCode::from_u16(status).unwrap_or(StatusCode::OK),
                axum::Json(body),
            )
                .into_response()
        }
        None => graphql(State(shared), Path(version), headers, body).await,
    };
    if let Ok(v) = served.parse() {
        response.headers_mut().insert("x-shopify-api-version", v);
    }
    if let Some(Ok(v)) = reason.map(|r| r.parse()) {
        response
            .headers_mut()
            .insert("x-shopify-api-deprecated-reason", v);
    }
    response
}

async fn graphql(
    State(shared): State<Arc<Shared>>,
    Path(version): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let now = Instant::now();
    let token_ok = headers
        .get("x-shopify-access-token")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t == shared.token);
    if lock(&shared).hang {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let variables = request.get("variables").cloned().unwrap_or(Value::Null);
    let mut inner = lock(&shared);
    let number = inner.requests.len() + 1;
    // The previous instructed wait, if any, learns when the client came back.
    if let Some(last) = inner.waits.last_mut()
        && last.next_request_at.is_none()
    {
        last.next_request_at = Some(now);
    }
    let mut record = ShopifyRequest {
        version,
        variables: variables.clone(),
        status: 200,
        throttled: false,
    };
    if !token_ok {
        record.status = 401;
        inner.requests.push(record);
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"errors": "[API] Invalid API key or access token (unrecognized login or wrong password)"})),
        )
            .into_response();
    }
    let query = request
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default();
    // Bulk operations and counts cost a flat 10 points here.
    let bulk = [
        "customersCount(",
        "bulkOperationRunQuery",
        "currentBulkOperation",
        "node(id:",
    ]
    .iter()
    .any(|q| query.contains(q));
    if !bulk
        && (!query.contains("customers(")
            || !query.contains("defaultEmailAddress")
            || !query.contains("pageInfo"))
    {
        record.status = 400;
        inner.requests.push(record);
        return graphql_error(StatusCode::OK, "the fake answers customers queries only");
    }
    let first = variables.get("first").and_then(Value::as_u64).unwrap_or(0);
    if !bulk && (first == 0 || first > 250) {
        inner.requests.push(record);
        return graphql_error(StatusCode::OK, "first must be between 1 and 250");
    }
    // The leaky bucket.
    let elapsed = now.duration_since(inner.refilled_at).as_secs_f64();
    inner.available = (inner.available + elapsed * shared.restore_rate).min(shared.maximum);
    inner.refilled_at = now;
    if inner.drain_before.contains(&number) {
        inner.available = 0.0;
    }
    let cost = if bulk { 10.0 } else { query_cost(first) };
    let status_of = |available: f64| json!({"maximumAvailable": shared.maximum, "currentlyAvailable": available, "restoreRate": shared.restore_rate});
    if inner.available < cost {
        inner.throttles += 1;
        let wait =
            Duration::from_secs_f64(((cost - inner.available) / shared.restore_rate).max(1.0));
        let body = json!({
            "data": null,
            "errors": [{"message": "Throttled", "extensions": {"code": "THROTTLED", "documentation": "https://shopify.dev/api/usage/rate-limits"}}],
            "extensions": {"cost": {"requestedQueryCost": cost, "actualQueryCost": null, "throttleStatus": status_of(inner.available)}},
        });
        // Odd throttles answer 200, even ones 429 with Retry-After.
        let form = if inner.throttles % 2 == 1 { 200 } else { 429 };
        let wait = if form == 429 {
            Duration::from_secs(wait.as_secs_f64().ceil() as u64)
        } else {
            wait
        };
        record.status = form;
        record.throttled = true;
        inner.requests.push(record);
        inner.waits.push(InstructedWait {
            answered_at: Instant::now(),
            wait,
            form,
            next_request_at: None,
        });
        let mut response = (
            StatusCode::from_u16(form).unwrap_or(StatusCode::OK),
            axum::Json(body),
        )
            .into_response();
        if form == 429 {
            response.headers_mut().insert(
                "retry-after",
                wait.as_secs()
                    .to_string()
                    .parse()
                    .expect("a number is a header value"),
            );
        }
        return response;
    }
    inner.available -= cost;
    if bulk {
        let (status, mut body) = bulk_answer(&mut inner, query, &variables);
        body["extensions"] = json!({"cost": {
            "requestedQueryCost": cost, "actualQueryCost": cost,
            "throttleStatus": status_of(inner.available),
        }});
        record.status = status.as_u16();
        inner.requests.push(record);
        return (status, axum::Json(body)).into_response();
    }
    // The listing: shown customers matching the search, by (updatedAt, id).
    let mut listing = match matching(&inner, variables.get("query").and_then(Value::as_str)) {
        Ok(listing) => listing,
        Err(why) => {
            inner.requests.push(record);
            return graphql_error(StatusCode::OK, &why);
        }
    };
    let sort_key = |i: usize| (updated_at(&inner.customers[i]), i);
    listing.sort_by_key(|i| sort_key(*i));
    let from = match variables.get("after").and_then(Value::as_str) {
        None => 0,
        Some(cursor) => match decode_cursor(cursor) {
            // Past the cursor's sort value, wherever that customer is now.
            Some(i) if i < inner.customers.len() => {
                let mark = sort_key(i);
                listing.partition_point(|j| sort_key(*j) <= mark)
            }
            _ => {
                inner.requests.push(record);
                return graphql_error(StatusCode::OK, "Invalid cursor for current pagination.");
            }
        },
    };
    let page: Vec<usize> = listing[from..]
        .iter()
        .take(first as usize)
        .copied()
        .collect();
    let edges: Vec<Value> = page
        .iter()
        .map(
            |i| json!({"cursor": encode_cursor(*i), "node": selected(&inner.customers[*i], query)}),
        )
        .collect();
    let end_cursor = page.last().map(|i| encode_cursor(*i));
    let has_next = from + page.len() < listing.len();
    let (start, end) = (0, page.len());
    let body = json!({
        "data": {"customers": {
            "edges": edges,
            "pageInfo": {"hasNextPage": has_next, "endCursor": end_cursor},
        }},
        "extensions": {"cost": {
            "requestedQueryCost": cost,
            "actualQueryCost": (end - start) as f64 + 2.0,
            "throttleStatus": status_of(inner.available),
        }},
    });
    inner.requests.push(record);
    axum::Json(body).into_response()
}

/// The customers a search shows, in id order (what a bulk file lists).
fn matching(inner: &Inner, search: Option<&str>) -> Result<Vec<usize>, String> {
    let bounds = match search {
        None => Vec::new(),
        Some(q) => search_filter(q)?,
    };
    Ok((0..inner.customers.len())
        .filter(|i| !inner.hidden.contains(i))
        .filter(|i| bounds.iter().all(|term| term.admits(&inner.customers[*i])))
        .collect())
}

/// The `query:` argument of a bulk document's `customers(...)`, a GraphQL
/// string literal.
fn document_search(document: &str) -> Option<String> {
    let rest = &document[document.find("customers(query: ")? + "customers(query: ".len()..];
    serde_json::Deserializer::from_str(rest)
        .into_iter::<String>()
        .next()?
        .ok()
}

fn operation_json(base: &str, n: usize, op: &FakeOperation) -> Value {
    let status = op.status();
    let completed = status == "COMPLETED";
    let failed = status == "FAILED";
    json!({
        "id": op.id,
        "status": status,
        "errorCode": if failed { op.script.error_code.map(Value::from).unwrap_or(Value::Null) } else { Value::Null },
        "createdAt": op.created_at,
        "completedAt": if completed { json!(op.created_at) } else { Value::Null },
        "objectCount": if completed || failed { op.objects.to_string() } else { "0".to_string() },
        "rootObjectCount": if completed || failed { op.objects.to_string() } else { "0".to_string() },
        "fileSize": if completed { Value::from(op.file.len().to_string()) } else { Value::Null },
        "url": if completed && op.objects > 0 { json!(format!("{base}/bulk/{n}")) } else { Value::Null },
        "partialDataUrl": if failed && op.script.partial { json!(format!("{base}/bulk/{n}")) } else { Value::Null },
        "query": op.query,
        "type": "QUERY",
    })
}

/// Answers a count or bulk-operation request.
fn bulk_answer(inner: &mut Inner, query: &str, variables: &Value) -> (StatusCode, Value) {
    let ok = |data: Value| (StatusCode::OK, json!({ "data": data }));
    if query.contains("customersCount(") {
        let search = variables.get("query").and_then(Value::as_str);
        let limit = variables
            .get("limit")
            .and_then(Value::as_u64)
            .unwrap_or(10_000) as usize;
        let n = match matching(inner, search) {
            Ok(m) => m.len(),
            Err(why) => return (StatusCode::OK, json!({"errors": [{"message": why}]})),
        };
        let precision = if n >= limit { "AT_LEAST" } else { "EXACT" };
        return ok(json!({"customersCount": {"count": n.min(limit), "precision": precision}}));
    }
    if query.contains("bulkOperationRunQuery") {
        let document = variables
            .get("query")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if inner
            .operations
            .iter()
            .any(|op| matches!(op.status(), "CREATED" | "RUNNING"))
        {
            let running = inner
                .operations
                .last()
                .map(|op| op.id.clone())
                .unwrap_or_default();
            return ok(
                json!({"bulkOperationRunQuery": {"bulkOperation": null, "userErrors": [{
                    "field": null, "code": "OPERATION_IN_PROGRESS",
                    "message": format!("A bulk query operation for this app and shop is already in progress: {running}."),
                }]}}),
            );
        }
        if !document.contains("customers") || !document.contains("defaultEmailAddress") {
            return ok(
                json!({"bulkOperationRunQuery": {"bulkOperation": null, "userErrors": [{
                    "field": ["query"], "code": "INVALID", "message": "Invalid bulk query: the fake exports customers only",
                }]}}),
            );
        }
        let listing = match matching(inner, document_search(document).as_deref()) {
            Ok(m) => m,
            Err(why) => return (StatusCode::OK, json!({"errors": [{"message": why}]})),
        };
        let script = inner.scripts.pop_front().unwrap_or_default();
        let kept = listing.len().saturating_sub(script.drop_lines);
        let mut file = Vec::new();
        for i in &listing[..kept] {
            serde_json::to_writer(&mut file, &selected(&inner.customers[*i], document))
                .expect("a customer serializes");
            file.push(b'\n');
        }
        let n = inner.operations.len() + 1;
        let op = FakeOperation {
            id: format!("gid://shopify/BulkOperation/{n}"),
            created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            query: document.to_string(),
            script,
            looks: 0,
            file: file.into(),
            objects: listing.len(),
        };
        let answer = json!({"bulkOperationRunQuery": {
            "bulkOperation": {"id": op.id, "status": "CREATED", "createdAt": op.created_at},
            "userErrors": [],
        }});
        inner.operations.push(op);
        return ok(answer);
    }
    let base = inner.base.clone();
    if query.contains("currentBulkOperation") {
        let n = inner.operations.len();
        let Some(op) = inner.operations.last_mut() else {
            return ok(json!({"currentBulkOperation": null}));
        };
        let answer = operation_json(&base, n, op);
        op.looks += 1;
        return ok(json!({"currentBulkOperation": answer}));
    }
    if query.contains("node(id:") {
        let id = variables
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(n) = inner.operations.iter().position(|op| op.id == id) else {
            return ok(json!({"node": null}));
        };
        let op = &mut inner.operations[n];
        let answer = operation_json(&base, n + 1, op);
        op.looks += 1;
        return ok(json!({"node": answer}));
    }
    (
        StatusCode::OK,
        json!({"errors": [{"message": "the fake does not answer this query"}]}),
    )
}

/// A bulk operation's JSONL file: no credential needed (a signed URL),
/// `Range: bytes=N-` honoured.
async fn bulk_file(
    State(shared): State<Arc<Shared>>,
    Path(n): Path<usize>,
    headers: HeaderMap,
) -> Response {
    let mut inner = lock(&shared);
    let range = headers
        .get("range")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let token_sent = headers.contains_key("x-shopify-access-token");
    let Some(file) = n
        .checked_sub(1)
        .and_then(|i| inner.operations.get(i))
        .map(|op| op.file.clone())
    else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let from = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse::<usize>().ok());
    let (status, body) = match from {
        None => (StatusCode::OK, file.clone()),
        Some(from) if from >= file.len() => {
            (StatusCode::RANGE_NOT_SATISFIABLE, bytes::Bytes::new())
        }
        Some(from) => (StatusCode::PARTIAL_CONTENT, file.slice(from..)),
    };
    inner.file_requests.push(FileRequest {
        operation: n,
        range,
        status: status.as_u16(),
        token_sent,
    });
    let mut response = (status, body).into_response();
    if let (StatusCode::PARTIAL_CONTENT, Some(from)) = (status, from)
        && let Ok(v) = format!("bytes {from}-{}/{}", file.len() - 1, file.len()).parse()
    {
        response.headers_mut().insert("content-range", v);
    }
    response
}
