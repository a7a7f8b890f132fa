//! A Brevo API v3 fake (contacts, imports, processes), built from
//! specs/brevo-v3-openapi.2025-08.yml and the facts in docs/api-facts.md:
//! `api-key` auth with Brevo's 401 bodies, request shapes checked against the
//! spec, upsert by e-mail, and scripted faults (429 with
//! `x-sib-ratelimit-reset`, 500, a hang, garbage bodies, rejection rules) plus a
//! hook that runs after a write is applied and before the answer goes out.
//! `DELETE /contacts/{identifier}` follows brevo-v3-openapi.2026-02.yaml
//! (`deleteContact`: 204, or 404 for a contact the account does not hold).
//! Used by the tests and, as `examples/brevo_fake.rs`, by the quick start.

// Handlers return ready-made error responses through `Result`; their size does
// not matter in a test fake.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use serde_json::{Value, json};

/// A fault the next write request (contacts or import) gets instead of service.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// 429 with `x-sib-ratelimit-reset: secs`.
    RateLimited { reset_secs: u64 },
    /// 500.
    ServerError,
    /// Never answers (the client's timeout must fire).
    Hang,
    /// A success status with a body that is not JSON.
    Garbage,
    /// A success status whose body stops part-way: the connection is cut.
    Truncated,
    /// 401 as for a revoked key.
    Unauthorized,
    /// 425 Too Early with a `contactErrorModel` body (`POST /contacts`,
    /// brevo-v3-openapi.2025-08.yml lines 2220-2225).
    TooEarly,
}

/// One request as received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub api_key: Option<String>,
    pub body: Value,
    pub status: u16,
}

/// One contact written (created or updated), by a single create or an import row.
#[derive(Debug, Clone)]
pub struct ContactWrite {
    pub email: String,
    pub attributes: Value,
    pub via: &'static str,
    /// 1-based number of the write request that carried it.
    pub request: usize,
    /// When the fake applied it (the machine's clock, as Postgres' `now()`).
    pub at: std::time::SystemTime,
}

#[derive(Debug, Clone)]
pub struct FakeContact {
    pub id: i64,
    pub attributes: serde_json::Map<String, Value>,
    pub list_ids: Vec<i64>,
    /// Blacklisted for e-mail (`emailBlacklisted` on `POST /contacts`,
    /// `emailBlacklist` on an import); a later write without it keeps it.
    pub email_blacklisted: bool,
}

/// Marks a contact blacklisted for e-mail, as Brevo does for
/// `emailBlacklisted: true` (createContact) and `emailBlacklist: true`
/// (requestContactImport, for every row of the import).
fn blacklist(inner: &mut Inner, email: &str) {
    if let Some(contact) = inner.contacts.get_mut(&email.to_lowercase()) {
        contact.email_blacklisted = true;
    }
}

/// What a hook sees: the write request's number and the e-mails it carried.
#[derive(Debug, Clone)]
pub struct WriteEvent {
    pub request: usize,
    pub emails: Vec<String>,
}

type Hook = Arc<dyn Fn(&WriteEvent) + Send + Sync>;
type Rule = Arc<dyn Fn(&str) -> bool + Send + Sync>;

#[derive(Default)]
struct Inner {
    requests: Vec<RecordedRequest>,
    writes: Vec<ContactWrite>,
    contacts: BTreeMap<String, FakeContact>,
    next_contact_id: i64,
    processes: BTreeMap<i64, Value>,
    next_process_id: i64,
    write_requests: usize,
    faults: VecDeque<Fault>,
    always: Option<Fault>,
    reject: Option<Rule>,
    hook: Option<Hook>,
    /// How long each write request is held after it is applied, at least
    /// and at most (on the server's runtime: other requests go on meanwhile).
    write_delay: (std::time::Duration, std::time::Duration),
    process_status: Option<String>,
    /// `GET /contacts/attributes` answers these (`None`: the default list).
    attributes: Option<Vec<Value>>,
    /// The next successful `POST /contacts` answer says the window's quota is
    /// spent: `x-sib-ratelimit-remaining: 0`, reset in these seconds.
    quota_spent_once: Option<u64>,
    /// `GET /contacts/attributes` calls answered (not in `requests`).
    attribute_requests: usize,
    /// `GET /contacts/attributes` answers 503 (a Brevo outage).
    attributes_unavailable: bool,
    /// Benchmarks: keep the contacts, not a log of every request body and
    /// write (which would cost more than the server's own work).
    lean: bool,
    /// Brevo's account limit on the contacts endpoints, enforced: at most this
    /// many write requests in each clock second; more are answered 429.
    rate_limit: Option<usize>,
    /// The second being counted and how many writes it has had.
    window: (u64, usize),
    /// Writes answered 429 by the enforced limit.
    rate_limited: usize,
    /// Imports answered at once and applied after (`background_imports`).
    background: Option<tokio::sync::mpsc::UnboundedSender<(Bytes, i64)>>,
}

struct Shared {
    api_key: String,
    inner: Mutex<Inner>,
    /// While true, write requests wait (without blocking a thread) before
    /// they are served; `held` counts the ones that waited.
    gate: tokio::sync::watch::Sender<bool>,
    held: std::sync::atomic::AtomicUsize,
    /// Write requests answered with `Fault::Hang` so far (they never end).
    hanging: std::sync::atomic::AtomicUsize,
    /// Imports answered and not yet applied (`background_imports`).
    importing: tokio::sync::watch::Sender<usize>,
}

/// The running fake. Dropping it stops the server.
pub struct BrevoFake {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT/v3`: the sync's `destination.base_url`.
    pub base_url: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for BrevoFake {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl BrevoFake {
    /// Starts on an ephemeral loopback port.
    pub async fn start(api_key: &str) -> anyhow::Result<Self> {
        Self::start_on("127.0.0.1:0".parse()?, api_key).await
    }

    pub async fn start_on(addr: SocketAddr, api_key: &str) -> anyhow::Result<Self> {
        let shared = Arc::new(Shared {
            gate: tokio::sync::watch::Sender::new(false),
            held: std::sync::atomic::AtomicUsize::new(0),
            hanging: std::sync::atomic::AtomicUsize::new(0),
            importing: tokio::sync::watch::Sender::new(0),
            api_key: api_key.to_string(),
            inner: Mutex::new(Inner {
                next_contact_id: 1,
                next_process_id: 1,
                ..Inner::default()
            }),
        });
        let app = Router::new()
            .route("/v3/contacts", post(create_contact))
            .route("/v3/contacts/import", post(import_contacts))
            .route("/v3/processes", get(list_processes))
            .route("/v3/processes/{id}", get(get_process))
            .route("/v3/contacts/attributes", get(get_attributes))
            .route(
                "/v3/contacts/lists/{list_id}/contacts/remove",
                post(remove_from_list),
            )
            .route("/v3/contacts/{identifier}", delete(delete_contact))
            .route("/_fake/contacts", get(list_contacts))
            // Brevo takes import bodies up to 10 MB.
            .layer(DefaultBodyLimit::max(11 * 1024 * 1024))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            // The server only ends when the fake is dropped (aborted).
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            addr,
            base_url: format!("http://{addr}/v3"),
            shared,
            server,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.shared)
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().requests.clone()
    }

    /// Requests to one path (e.g. `/v3/contacts/import`).
    pub fn requests_to(&self, path: &str) -> Vec<RecordedRequest> {
        self.lock()
            .requests
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    pub fn writes(&self) -> Vec<ContactWrite> {
        self.lock().writes.clone()
    }

    pub fn contacts(&self) -> BTreeMap<String, FakeContact> {
        self.lock().contacts.clone()
    }

    /// Faults for the next write requests, in order, one each.
    pub fn push_faults(&self, faults: impl IntoIterator<Item = Fault>) {
        self.lock().faults.extend(faults);
    }

    /// A fault for every write request from now on (`None` to heal).
    pub fn set_fault_always(&self, fault: Option<Fault>) {
        self.lock().always = fault;
    }

    /// E-mails for which Brevo answers 400 (single) or counts a failed row (import).
    pub fn reject_emails(&self, rule: impl Fn(&str) -> bool + Send + Sync + 'static) {
        self.lock().reject = Some(Arc::new(rule));
    }

    /// Holds each write request `delay` after its contacts are applied,
    /// before the answer (after `on_write`'s hook): a slow destination.
    pub fn slow_writes(&self, delay: std::time::Duration) {
        self.lock().write_delay = (delay, delay);
    }

    /// As `slow_writes`, each write held a random time up to `most`.
    #[allow(dead_code)] // not every benchmark that compiles this file uses it
    pub fn slow_writes_up_to(&self, most: std::time::Duration) {
        self.lock().write_delay = (std::time::Duration::ZERO, most);
    }

    /// Runs after each write request's contacts are applied, before the answer.
    pub fn on_write(&self, hook: impl Fn(&WriteEvent) + Send + Sync + 'static) {
        self.lock().hook = Some(Arc::new(hook));
    }

    /// Keeps no request bodies and no write log (benchmarks).
    #[allow(dead_code)] // used by the benchmarks, which compile this file alone
    pub fn lean(&self) {
        lock(&self.shared).lean = true;
    }

    /// Answers an import as Brevo does (the spec's `importContacts`: "It
    /// returns the background process ID"): the body's shape is checked, the
    /// process id answered at once, and the rows applied after, in order, by
    /// one task; the process reads `in_process` until then. `GET
    /// /_fake/contacts` waits for the imports answered before it. Hooks and
    /// slow writes do not apply to these imports.
    #[allow(dead_code)] // used by the stand-alone fake (examples/brevo_fake.rs)
    pub fn background_imports(&self) {
        let (queue, mut imports) = tokio::sync::mpsc::unbounded_channel::<(Bytes, i64)>();
        let shared = Arc::downgrade(&self.shared);
        tokio::spawn(async move {
            while let Some((body, process)) = imports.recv().await {
                let Some(shared) = shared.upgrade() else {
                    break;
                };
                if let Err(refused) = apply_import(&shared, &body, Some(process)) {
                    let mut inner = lock(&shared);
                    inner.processes.insert(
                        process,
                        json!({"id": process, "name": "IMPORTUSER", "status": "failed",
                               "error": format!("the import was refused: HTTP {}", refused.status())}),
                    );
                }
                shared.importing.send_modify(|n| *n -= 1);
            }
        });
        lock(&self.shared).background = Some(queue);
    }

    /// Write requests wait at the door until `release_writes`.
    pub fn hold_writes(&self) {
        self.shared.gate.send_replace(true);
    }

    pub fn release_writes(&self) {
        self.shared.gate.send_replace(false);
    }

    /// How many write requests are hanging (`Fault::Hang`) so far.
    pub fn hanging_writes(&self) -> usize {
        self.shared
            .hanging
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How many write requests have waited at the door so far.
    pub fn held_writes(&self) -> usize {
        self.shared.held.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Brevo forgets every import process so far: `GET /processes/{id}`
    /// answers its documented 404 (`processId is invalid`).
    pub fn forget_processes(&self) {
        self.lock().processes.clear();
    }

    /// The account's contact attributes, by name (`GET /contacts/attributes`
    /// lists them as `{name, category: "normal", type: "text"}`).
    pub fn set_attributes(&self, names: &[&str]) {
        self.lock().attributes = Some(
            names
                .iter()
                .map(|n| json!({"name": n, "category": "normal", "type": "text"}))
                .collect(),
        );
    }

    /// `GET /contacts/attributes` answers 503 from now on.
    pub fn make_attributes_unavailable(&self) {
        self.lock().attributes_unavailable = true;
    }

    /// The next successful `POST /contacts` answer carries Brevo's rate-limit
    /// headers with no request left in the window (`x-sib-ratelimit-limit:
    /// 10`, `-remaining: 0`, `-reset: reset_secs`; specs README).
    /// Enforces Brevo's account limit: at most `per_second` write requests in
    /// each clock second, the rest answered 429 (counted by `rate_limited`).
    pub fn enforce_rate_limit(&self, per_second: usize) {
        self.lock().rate_limit = Some(per_second);
    }

    /// Writes the enforced limit answered 429.
    pub fn rate_limited(&self) -> usize {
        self.lock().rate_limited
    }

    pub fn spend_quota_once(&self, reset_secs: u64) {
        self.lock().quota_spent_once = Some(reset_secs);
    }

    /// How many times `GET /contacts/attributes` was asked (it is not in
    /// `requests()`).
    pub fn attribute_requests(&self) -> usize {
        self.lock().attribute_requests
    }

    /// The status new import processes report (default `completed`).
    pub fn set_process_status(&self, status: &str) {
        self.lock().process_status = Some(status.to_string());
    }
}

impl Inner {
    /// The id of the next import process.
    fn new_process_id(&mut self) -> i64 {
        self.next_process_id += 1;
        self.next_process_id - 1
    }
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Inner> {
    // A panic while holding the lock only happens in a failing test; keep going.
    shared.inner.lock().unwrap_or_else(|e| e.into_inner())
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (
        status,
        axum::Json(json!({"code": code, "message": message})),
    )
        .into_response()
}

fn record(
    shared: &Shared,
    method: &str,
    path: &str,
    headers: &HeaderMap,
    body: &Value,
    status: u16,
) {
    let api_key = headers
        .get("api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut inner = lock(shared);
    let body = if inner.lean {
        Value::Null
    } else {
        body.clone()
    };
    inner.requests.push(RecordedRequest {
        method: method.into(),
        path: path.into(),
        api_key,
        body,
        status,
    });
}

/// Checks `api-key` as Brevo does.
fn authorize(shared: &Shared, headers: &HeaderMap) -> Result<(), Response> {
    match headers.get("api-key").and_then(|v| v.to_str().ok()) {
        None => Err(error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "authentication not found in headers",
        )),
        Some(key) if key != shared.api_key => Err(error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Key not found",
        )),
        Some(_) => Ok(()),
    }
}

async fn wait_at_gate(shared: &Shared) {
    let mut gate = shared.gate.subscribe();
    if *gate.borrow_and_update() {
        shared
            .held
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // The sender lives as long as the fake.
        let _ = gate.wait_for(|closed| !*closed).await;
    }
}

/// The fault this write request gets, if any.
fn take_fault(shared: &Shared) -> Option<Fault> {
    let mut inner = lock(shared);
    if let Some(limit) = inner.rate_limit {
        let second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        if inner.window.0 != second {
            inner.window = (second, 0);
        }
        if inner.window.1 >= limit {
            inner.rate_limited += 1;
            return Some(Fault::RateLimited { reset_secs: 1 });
        }
        inner.window.1 += 1;
    }
    inner.faults.pop_front().or_else(|| inner.always.clone())
}

async fn apply_fault(shared: &Shared, fault: Fault) -> Response {
    match fault {
        Fault::RateLimited { reset_secs } => {
            let mut response = (StatusCode::TOO_MANY_REQUESTS, "Too Many Requests").into_response();
            let h = response.headers_mut();
            h.insert(
                "x-sib-ratelimit-limit",
                "10".parse().expect("static header"),
            );
            h.insert(
                "x-sib-ratelimit-remaining",
                "0".parse().expect("static header"),
            );
            h.insert(
                "x-sib-ratelimit-reset",
                reset_secs.to_string().parse().expect("number header"),
            );
            response
        }
        Fault::ServerError => {
            (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error").into_response()
        }
        Fault::Hang => {
            shared
                .hanging
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(3600)).await;
            StatusCode::GATEWAY_TIMEOUT.into_response()
        }
        Fault::Garbage => (StatusCode::CREATED, "<html>upstream garbage").into_response(),
        Fault::Truncated => {
            let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
                Ok(Bytes::from_static(b"{\"processId\": 12")),
                Err(std::io::Error::other("connection cut by the fake")),
            ];
            let mut response =
                axum::body::Body::from_stream(futures::stream::iter(chunks)).into_response();
            *response.status_mut() = StatusCode::ACCEPTED;
            response
        }
        Fault::Unauthorized => error(StatusCode::UNAUTHORIZED, "unauthorized", "Key not found"),
        Fault::TooEarly => error(
            StatusCode::TOO_EARLY,
            "account_in_process",
            "Too Early: the account is still being processed",
        ),
    }
}

fn parse_body(body: &Bytes) -> Result<Value, Response> {
    serde_json::from_slice(body).map_err(|_| {
        error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "Input must be a valid JSON object",
        )
    })
}

/// Validates attributes (`additionalProperties: number | string | boolean |
/// [string]`, `createContact`, brevo-v3-openapi.2025-08.yml lines 22819-22828:
/// no null) and listIds. An import row's attributes are
/// `additionalProperties: true` (lines 23248-23251): `null_ok`.
fn check_contact_fields(body: &Value, null_ok: bool) -> Result<(), Response> {
    if let Some(attrs) = body.get("attributes") {
        let Some(map) = attrs.as_object() else {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "invalid_parameter",
                "attributes should be an object",
            ));
        };
        for (name, value) in map {
            let ok = match value {
                Value::Number(_) | Value::String(_) | Value::Bool(_) => true,
                Value::Null => null_ok,
                Value::Array(items) => items.iter().all(Value::is_string),
                Value::Object(_) => false,
            };
            if !ok {
                return Err(error(
                    StatusCode::BAD_REQUEST,
                    "invalid_parameter",
                    &format!("attribute {name} has an invalid type"),
                ));
            }
        }
    }
    if let Some(lists) = body.get("listIds")
        && !lists
            .as_array()
            .is_some_and(|a| a.iter().all(|v| v.as_i64().is_some()))
    {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "listIds should be an array of integers",
        ));
    }
    Ok(())
}

/// Writes the contact whose lowercased address is `key`.
fn upsert(
    inner: &mut Inner,
    key: String,
    attributes: &Value,
    lists: &[i64],
    via: &'static str,
    request: usize,
) -> bool {
    let mut attrs = attributes.as_object().cloned().unwrap_or_default();
    // "Values that don't match the attribute type (e.g. text or string in a
    // date attribute) will be ignored" (`createContact.attributes`,
    // brevo-v3-openapi.2025-08.yml line 22830): kept out of the contact.
    if !inner.lean {
        let listed = inner.attributes.clone().unwrap_or_else(default_attributes);
        attrs.retain(|name, value| fits_type(&listed, name, value));
    }
    if !inner.lean {
        inner.writes.push(ContactWrite {
            email: key.clone(),
            attributes: if attributes.is_null() {
                json!({})
            } else {
                attributes.clone()
            },
            via,
            request,
            at: std::time::SystemTime::now(),
        });
    }
    match inner.contacts.get_mut(&key) {
        Some(existing) => {
            existing.attributes.extend(attrs);
            for l in lists {
                if !existing.list_ids.contains(l) {
                    existing.list_ids.push(*l);
                }
            }
            false
        }
        None => {
            let id = inner.next_contact_id;
            inner.next_contact_id += 1;
            inner.contacts.insert(
                key,
                FakeContact {
                    id,
                    attributes: attrs,
                    list_ids: lists.to_vec(),
                    email_blacklisted: false,
                },
            );
            true
        }
    }
}

/// What follows each applied write: `on_write`'s hook, then `slow_writes`' wait.
async fn after_write(shared: &Shared, event: WriteEvent) {
    let (hook, delay) = {
        let inner = lock(shared);
        (inner.hook.clone(), inner.write_delay)
    };
    if let Some(hook) = hook {
        hook(&event);
    }
    let (least, most) = delay;
    let wait = if most > least {
        least + (most - least).mul_f64(rand::random::<f64>())
    } else {
        least
    };
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
}

async fn create_contact(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = "/v3/contacts";
    let parsed = parse_body(&body).unwrap_or(Value::Null);
    let mut response = create_contact_inner(&shared, &headers, &body).await;
    if response.status().is_success()
        && let Some(reset) = lock(&shared).quota_spent_once.take()
    {
        let h = response.headers_mut();
        h.insert(
            "x-sib-ratelimit-limit",
            "10".parse().expect("static header"),
        );
        h.insert(
            "x-sib-ratelimit-remaining",
            "0".parse().expect("static header"),
        );
        h.insert(
            "x-sib-ratelimit-reset",
            reset.to_string().parse().expect("number header"),
        );
    }
    record(
        &shared,
        "POST",
        path,
        &headers,
        &parsed,
        response.status().as_u16(),
    );
    response
}

async fn create_contact_inner(shared: &Shared, headers: &HeaderMap, body: &Bytes) -> Response {
    wait_at_gate(shared).await;
    if let Err(r) = authorize(shared, headers) {
        return r;
    }
    if let Some(fault) = take_fault(shared) {
        return apply_fault(shared, fault).await;
    }
    let body = match parse_body(body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let Some(email) = body.get("email").and_then(Value::as_str) else {
        return error(
            StatusCode::BAD_REQUEST,
            "missing_parameter",
            "email is missing",
        );
    };
    if !email.contains('@') {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "Invalid email address",
        );
    }
    if let Err(r) = check_contact_fields(&body, false) {
        return r;
    }
    let rejected = lock(shared).reject.clone().is_some_and(|rule| rule(email));
    if rejected {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "Contact rejected by the fake's rule",
        );
    }
    let update_enabled = body
        .get("updateEnabled")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let lists: Vec<i64> = body
        .get("listIds")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    let attributes = body.get("attributes").cloned().unwrap_or(json!({}));
    let (created, id, request) = {
        let mut inner = lock(shared);
        let exists = inner.contacts.contains_key(&email.to_lowercase());
        if exists && !update_enabled {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"code": "duplicate_parameter", "message": "Contact already exist", "metadata": {"duplicate_identifiers": ["email"]}})),
            )
                .into_response();
        }
        inner.write_requests += 1;
        let request = inner.write_requests;
        let created = upsert(
            &mut inner,
            email.to_lowercase(),
            &attributes,
            &lists,
            "contacts",
            request,
        );
        if body.get("emailBlacklisted").and_then(Value::as_bool) == Some(true) {
            blacklist(&mut inner, email);
        }
        let id = inner
            .contacts
            .get(&email.to_lowercase())
            .map(|c| c.id)
            .unwrap_or_default();
        (created, id, request)
    };
    after_write(
        shared,
        WriteEvent {
            request,
            emails: vec![email.to_lowercase()],
        },
    )
    .await;
    if created {
        (StatusCode::CREATED, axum::Json(json!({"id": id}))).into_response()
    } else {
        StatusCode::NO_CONTENT.into_response()
    }
}

/// `POST /contacts/lists/{listId}/contacts/remove` (`removeContactFromList`,
/// brevo-v3-openapi.2026-02.yaml): a body of exactly one of `emails` (1 to
/// 150 addresses), `ids`, `extIds` or `all`; this fake takes `emails` only,
/// as syncward sends. 201 `{"contacts": {"success": [...], "failure":
/// [...]}}`: the addresses taken off, and those not on the list or unknown.
/// The contacts themselves stay (and keep their blocklist state).
/// `DELETE /v3/contacts/{identifier}?identifierType=email_id`: the contact
/// gone (204), or 404 `document_not_found` when the account has none.
async fn delete_contact(
    State(shared): State<Arc<Shared>>,
    Path(identifier): Path<String>,
    Query(query): Query<std::collections::HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let path = format!("/v3/contacts/{identifier}");
    let response = (|| {
        if let Err(r) = authorize(&shared, &headers) {
            return r;
        }
        match query.get("identifierType").map(String::as_str) {
            None | Some("email_id") if identifier.contains('@') => {}
            _ => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "invalid_parameter",
                    "identifierType must be email_id for an e-mail address",
                );
            }
        }
        let removed = lock(&shared).contacts.remove(&identifier.to_lowercase());
        match removed {
            Some(_) => StatusCode::NO_CONTENT.into_response(),
            None => error(
                StatusCode::NOT_FOUND,
                "document_not_found",
                "Contact does not exist",
            ),
        }
    })();
    record(
        &shared,
        "DELETE",
        &path,
        &headers,
        &Value::Null,
        response.status().as_u16(),
    );
    response
}

async fn remove_from_list(
    State(shared): State<Arc<Shared>>,
    Path(list_id): Path<i64>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = format!("/v3/contacts/lists/{list_id}/contacts/remove");
    let parsed = parse_body(&body).unwrap_or(Value::Null);
    let response = remove_inner(&shared, list_id, &headers, &body).await;
    record(
        &shared,
        "POST",
        &path,
        &headers,
        &parsed,
        response.status().as_u16(),
    );
    response
}

async fn remove_inner(
    shared: &Shared,
    list_id: i64,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    wait_at_gate(shared).await;
    if let Err(r) = authorize(shared, headers) {
        return r;
    }
    if let Some(fault) = take_fault(shared) {
        return apply_fault(shared, fault).await;
    }
    let body = match parse_body(body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let fields: Vec<&String> = body
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    let emails: Vec<String> = match body.get("emails").and_then(Value::as_array) {
        Some(list)
            if fields.len() == 1
                && (1..=150).contains(&list.len())
                && list
                    .iter()
                    .all(|e| e.as_str().is_some_and(|e| e.contains('@'))) =>
        {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_lowercase)
                .collect()
        }
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_parameter",
                "emails must be an array of 1 to 150 e-mail addresses, alone",
            );
        }
    };
    let (success, failure, request) = {
        let mut inner = lock(shared);
        inner.write_requests += 1;
        let (mut success, mut failure) = (Vec::new(), Vec::new());
        for email in &emails {
            match inner.contacts.get_mut(email) {
                Some(contact) if contact.list_ids.contains(&list_id) => {
                    contact.list_ids.retain(|l| *l != list_id);
                    success.push(email.clone());
                }
                _ => failure.push(email.clone()),
            }
        }
        (success, failure, inner.write_requests)
    };
    after_write(shared, WriteEvent { request, emails }).await;
    (
        StatusCode::CREATED,
        axum::Json(json!({"contacts": {"success": success, "failure": failure}})),
    )
        .into_response()
}

async fn import_contacts(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = if lock(&shared).lean {
        Value::Null
    } else {
        parse_body(&body).unwrap_or(Value::Null)
    };
    let response = import_inner(&shared, &headers, &body).await;
    record(
        &shared,
        "POST",
        "/v3/contacts/import",
        &headers,
        &parsed,
        response.status().as_u16(),
    );
    response
}

async fn import_inner(shared: &Shared, headers: &HeaderMap, body: &Bytes) -> Response {
    wait_at_gate(shared).await;
    if let Err(r) = authorize(shared, headers) {
        return r;
    }
    if let Some(fault) = take_fault(shared) {
        return apply_fault(shared, fault).await;
    }
    if body.len() > 10 * 1024 * 1024 {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "Maximum allowed body size is 10MB",
        );
    }
    let queue = lock(shared).background.clone();
    if let Some(queue) = queue {
        if let Err(r) = check_import_shape(body) {
            return r;
        }
        let process_id = {
            let mut inner = lock(shared);
            let id = inner.new_process_id();
            inner.processes.insert(
                id,
                json!({"id": id, "name": "IMPORTUSER", "status": "in_process"}),
            );
            id
        };
        shared.importing.send_modify(|n| *n += 1);
        if queue.send((body.clone(), process_id)).is_err() {
            shared.importing.send_modify(|n| *n -= 1);
        }
        return (
            StatusCode::ACCEPTED,
            axum::Json(json!({"processId": process_id})),
        )
            .into_response();
    }
    let (process_id, request, emails) = match apply_import(shared, body, None) {
        Ok(applied) => applied,
        Err(r) => return r,
    };
    after_write(shared, WriteEvent { request, emails }).await;
    (
        StatusCode::ACCEPTED,
        axum::Json(json!({"processId": process_id})),
    )
        .into_response()
}

/// Checks an import's body and applies its rows: the process id (`process`,
/// or a new one), the write request's number, and the addresses written.
fn apply_import(
    shared: &Shared,
    body: &Bytes,
    process: Option<i64>,
) -> Result<(i64, usize, Vec<String>), Response> {
    let body = parse_body(body)?;
    let sources = ["jsonBody", "fileBody", "fileUrl"]
        .iter()
        .filter(|k| body.get(**k).is_some())
        .count();
    if sources != 1 {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "Exactly one of fileUrl, fileBody, jsonBody is required",
        ));
    }
    let Some(rows) = body.get("jsonBody").and_then(Value::as_array) else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "this fake only imports jsonBody",
        ));
    };
    if body.get("listIds").is_none() && body.get("newList").is_none() {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "missing_parameter",
            "listIds or newList is required",
        ));
    }
    check_contact_fields(
        &json!({"listIds": body.get("listIds").cloned().unwrap_or(json!([]))}),
        true,
    )?;
    for row in rows {
        if row.get("email").and_then(Value::as_str).is_none() {
            return Err(error(
                StatusCode::BAD_REQUEST,
                "invalid_parameter",
                "every jsonBody row needs an email",
            ));
        }
        check_contact_fields(row, true)?;
    }
    let lists: Vec<i64> = body
        .get("listIds")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_i64).collect())
        .unwrap_or_default();
    Ok({
        let mut inner = lock(shared);
        inner.write_requests += 1;
        let request = inner.write_requests;
        let reject = inner.reject.clone();
        let (mut imported, mut updated, mut invalid, mut duplicate) = (0, 0, 0, 0);
        let mut emails = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for row in rows {
            let email = row["email"].as_str().unwrap_or_default();
            if !email.contains('@') || reject.as_ref().is_some_and(|rule| rule(email)) {
                invalid += 1;
                continue;
            }
            // An address twice in one import: the first row is imported,
            // the later ones counted under `duplicate_email_id`.
            let key = email.to_lowercase();
            if !seen.insert(key.clone()) {
                duplicate += 1;
                continue;
            }
            emails.push(key.clone());
            let attributes = row.get("attributes").unwrap_or(&Value::Null);
            if upsert(&mut inner, key, attributes, &lists, "import", request) {
                imported += 1
            } else {
                updated += 1
            }
            if body.get("emailBlacklist").and_then(Value::as_bool) == Some(true) {
                blacklist(&mut inner, email);
            }
        }
        let id = process.unwrap_or_else(|| inner.new_process_id());
        let status = inner
            .process_status
            .clone()
            .unwrap_or_else(|| "completed".into());
        inner.processes.insert(
            id,
            json!({
                "id": id, "name": "IMPORTUSER", "status": status,
                "error": (status == "failed").then_some("The file could not be processed (fake)"),
                // `info.import` as `getProcess` lists it (spec 2026-02), plus
                // the fake's own imported/updated counts.
                "info": {"import": {"imported": imported, "updated": updated, "invalid_emails": invalid,
                                     "duplicate_contact_id": 0, "duplicate_ext_id": 0,
                                     "duplicate_email_id": duplicate, "duplicate_phone_id": 0,
                                     "duplicate_whatsapp_id": 0, "duplicate_landline_number_id": 0}}
            }),
        );
        (id, request, emails)
    })
}

/// What Brevo checks before it answers an import: a JSON object with
/// exactly one source (this fake takes `jsonBody`) and `listIds` of integers
/// or a `newList`. Reads the rows without keeping them.
fn check_import_shape(body: &Bytes) -> Result<(), Response> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Shape {
        json_body: Option<Vec<serde::de::IgnoredAny>>,
        file_body: Option<serde::de::IgnoredAny>,
        file_url: Option<serde::de::IgnoredAny>,
        list_ids: Option<Vec<Value>>,
        new_list: Option<serde::de::IgnoredAny>,
    }
    let shape: Shape = serde_json::from_slice(body).map_err(|_| {
        error(
            StatusCode::BAD_REQUEST,
            "bad_request",
            "Input must be a valid JSON object",
        )
    })?;
    let sources = [
        shape.json_body.is_some(),
        shape.file_body.is_some(),
        shape.file_url.is_some(),
    ];
    if sources.iter().filter(|s| **s).count() != 1 {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "Exactly one of fileUrl, fileBody, jsonBody is required",
        ));
    }
    if shape.json_body.is_none() {
        return Err(error(
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "this fake only imports jsonBody",
        ));
    }
    match (&shape.list_ids, &shape.new_list) {
        (None, None) => Err(error(
            StatusCode::BAD_REQUEST,
            "missing_parameter",
            "listIds or newList is required",
        )),
        (Some(ids), _) if !ids.iter().all(|v| v.as_i64().is_some()) => Err(error(
            StatusCode::BAD_REQUEST,
            "invalid_parameter",
            "listIds should be an array of integers",
        )),
        _ => Ok(()),
    }
}

/// `GET /processes?limit&offset&sort` (`getProcesses`, spec 2026-02):
/// `limit` 0 to 50 (default 10), `offset` (default 0), `sort` `asc` or
/// `desc` (default: newest first); `{"count", "processes"}`.
async fn list_processes(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
) -> Response {
    let query = query.unwrap_or_default();
    let param = |name: &str| {
        query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    let limit = param("limit").map_or(Ok(10), |v| v.parse::<usize>());
    let offset = param("offset").map_or(Ok(0), |v| v.parse::<usize>());
    let sort = param("sort").unwrap_or_else(|| "desc".into());
    let response = match authorize(&shared, &headers) {
        Err(r) => r,
        Ok(()) => match (limit, offset) {
            (Ok(limit), Ok(offset)) if limit <= 50 && (sort == "asc" || sort == "desc") => {
                let inner = lock(&shared);
                let mut all: Vec<Value> = inner.processes.values().cloned().collect();
                if sort == "desc" {
                    all.reverse();
                }
                let page: Vec<Value> = all.iter().skip(offset).take(limit).cloned().collect();
                (
                    StatusCode::OK,
                    axum::Json(json!({"count": all.len(), "processes": page})),
                )
                    .into_response()
            }
            _ => error(
                StatusCode::BAD_REQUEST,
                "invalid_parameter",
                "limit must be 0 to 50, offset a number, sort asc or desc",
            ),
        },
    };
    record(
        &shared,
        "GET",
        &format!("/v3/processes?{query}"),
        &headers,
        &Value::Null,
        response.status().as_u16(),
    );
    response
}

async fn get_process(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let response = match authorize(&shared, &headers) {
        Err(r) => r,
        Ok(()) => match id
            .parse::<i64>()
            .ok()
            .and_then(|id| lock(&shared).processes.get(&id).cloned())
        {
            Some(process) => (StatusCode::OK, axum::Json(process)).into_response(),
            None => error(
                StatusCode::NOT_FOUND,
                "invalid_parameter",
                "processId is invalid",
            ),
        },
    };
    record(
        &shared,
        "GET",
        &format!("/v3/processes/{id}"),
        &headers,
        &Value::Null,
        response.status().as_u16(),
    );
    response
}

/// The account's attributes by default: the example of `GET
/// /contacts/attributes` (brevo-v3-openapi.2025-08.yml lines 2594-2621), plus
/// the attributes the tests' and shipped examples' syncs map, as an account
/// set up for them would have.
/// Whether Brevo keeps `value` in attribute `name` of this account (an
/// attribute it does not list is left to the unknown-attribute rules).
fn fits_type(listed: &[Value], name: &str, value: &Value) -> bool {
    let Some(attribute) = listed.iter().find(|a| {
        a["name"]
            .as_str()
            .is_some_and(|n| n.eq_ignore_ascii_case(name))
    }) else {
        return true;
    };
    if let Some(enumeration) = attribute["enumeration"].as_array() {
        return value
            .as_i64()
            .is_some_and(|v| enumeration.iter().any(|e| e["value"].as_i64() == Some(v)));
    }
    match attribute["type"].as_str() {
        Some("date") => value.as_str().is_some_and(|s| {
            s.len() == 10 && chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok()
        }),
        Some("float") => value.is_number(),
        Some("boolean") => value.is_boolean(),
        Some("text") => value.is_string() || value.is_number() || value.is_boolean(),
        Some("multiple-choice") => {
            let options = attribute["multiCategoryOptions"].as_array();
            value
                .as_array()
                .is_some_and(|items| items.iter().all(|i| options.is_some_and(|o| o.contains(i))))
        }
        _ => true,
    }
}

fn default_attributes() -> Vec<Value> {
    let mut attributes = vec![
        json!({"name": "LASTNAME", "category": "normal", "type": "text"}),
        json!({"name": "FIRSTNAME", "category": "normal", "type": "text"}),
        json!({"name": "DOB", "category": "normal", "type": "date"}),
        json!({"name": "GENDER", "category": "category", "type": "text", "enumeration": [
            {"value": 1, "label": "Men"}, {"value": 2, "label": "Women"}, {"value": 3, "label": "Kid"}]}),
        json!({"name": "BDO", "category": "normal", "type": "user"}),
        json!({"name": "COUNTRY", "category": "normal", "type": "multiple-choice",
               "multiCategoryOptions": ["USA", "India", "France"]}),
    ];
    for name in [
        "SHOPIFY_ID",
        "NAME",
        "EXT_ID",
        "EXTERNAL_ID",
        "OPT_IN_LEVEL",
    ] {
        attributes.push(json!({"name": name, "category": "normal", "type": "text"}));
    }
    attributes.push(json!({"name": "CONSENT_UPDATED_AT", "category": "normal", "type": "date"}));
    attributes
}

/// `GET /contacts/attributes`: `200 {"attributes": [...]}` (`getAttributes`).
async fn get_attributes(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    let response = match authorize(&shared, &headers) {
        Err(r) => r,
        Ok(()) if lock(&shared).attributes_unavailable => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "service_unavailable",
            "Service unavailable",
        ),
        Ok(()) => {
            let attributes = lock(&shared)
                .attributes
                .clone()
                .unwrap_or_else(default_attributes);
            (
                StatusCode::OK,
                axum::Json(json!({"attributes": attributes})),
            )
                .into_response()
        }
    };
    // Counted apart from `requests()`: tests assert that a run or a preview
    // sent nothing, and this read happens at every apply with a key.
    lock(&shared).attribute_requests += 1;
    response
}

/// Not Brevo: lets people and scripts see what the fake holds.
async fn list_contacts(State(shared): State<Arc<Shared>>) -> Response {
    // The imports answered before this request are applied first.
    let _ = shared.importing.subscribe().wait_for(|n| *n == 0).await;
    let inner = lock(&shared);
    let contacts: Vec<Value> = inner
        .contacts
        .iter()
        .map(|(email, c)| json!({"email": email, "id": c.id, "attributes": c.attributes, "listIds": c.list_ids}))
        .collect();
    axum::Json(json!({"count": contacts.len(), "writes": inner.writes.len(), "contacts": contacts}))
        .into_response()
}
