//! An operator's own paged JSON API, for the `http` source: `GET /contacts`
//! with `?after=<cursor>`, answering `{"data": [...], "meta": {"next": ...}}`,
//! a bearer token, scripted faults (429 with `Retry-After`, 500), and one
//! empty page in the middle that still names a next one. Or, started with
//! `start_by_time`, an `updated_since`-style API: `?after=<RFC 3339 time>`
//! lists the contacts updated after it, oldest first, and names the last
//! one's `updated_at` as the next cursor; a contact written late
//! (`add_late_contact`) is listed only once revealed.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

/// A fault the next request gets instead of a page.
#[derive(Debug, Clone, PartialEq)]
pub enum ApiFault {
    RateLimited { retry_after_secs: u64 },
    ServerError,
}

#[derive(Debug, Clone)]
pub struct ApiRequest {
    pub at: Instant,
    pub after: Option<String>,
    pub status: u16,
}

struct Inner {
    faults: Vec<ApiFault>,
    requests: Vec<ApiRequest>,
    contacts: usize,
    /// By-time mode: each contact's `updated_at` (by index), and those not
    /// listed yet.
    times: Option<Vec<chrono::DateTime<chrono::Utc>>>,
    hidden: Vec<usize>,
    /// Never answer (the client's timeout must fire).
    hang: bool,
}

struct Shared {
    token: String,
    page: usize,
    inner: Mutex<Inner>,
}

pub struct PagedApiFake {
    /// `http://127.0.0.1:PORT/contacts`: the sync's `source.url`.
    pub url: String,
    shared: Arc<Shared>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for PagedApiFake {
    fn drop(&mut self) {
        self.server.abort();
    }
}

fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Inner> {
    // A panic while holding the lock only happens in a failing test; keep going.
    shared.inner.lock().unwrap_or_else(|e| e.into_inner())
}

impl PagedApiFake {
    /// `contacts` contacts (`api{i}@example.com`) in pages of `page`; the
    /// second page is served empty (with a next cursor) before its records.
    pub async fn start(token: &str, contacts: usize, page: usize) -> anyhow::Result<Self> {
        Self::serve(token, contacts, page, None).await
    }

    /// An `updated_since`-style API: contact `i` was updated `i` seconds
    /// into 2025, and the cursor is a time.
    pub async fn start_by_time(token: &str, contacts: usize, page: usize) -> anyhow::Result<Self> {
        let times = (1..=contacts).map(time_of).collect();
        Self::serve(token, contacts, page, Some(times)).await
    }

    async fn serve(
        token: &str,
        contacts: usize,
        page: usize,
        times: Option<Vec<chrono::DateTime<chrono::Utc>>>,
    ) -> anyhow::Result<Self> {
        let shared = Arc::new(Shared {
            token: token.to_string(),
            page,
            inner: Mutex::new(Inner {
                faults: Vec::new(),
                requests: Vec::new(),
                contacts,
                times,
                hidden: Vec::new(),
                hang: false,
            }),
        });
        let app = Router::new()
            .route("/contacts", get(contacts_page))
            .with_state(shared.clone());
        let (addr, server) = super::serve(app).await?;
        Ok(Self {
            url: format!("http://{addr}/contacts"),
            shared,
            server,
        })
    }

    /// Faults for the next requests, in order.
    pub fn push_faults(&self, faults: impl IntoIterator<Item = ApiFault>) {
        lock(&self.shared).faults.extend(faults);
    }

    /// More contacts at the end (updated after every other, by time).
    pub fn add_contacts(&self, n: usize) {
        let mut inner = lock(&self.shared);
        inner.contacts += n;
        if let Some(times) = &mut inner.times {
            let latest = times.iter().max().copied().unwrap_or_else(|| time_of(0));
            times.extend((1..=n).map(|k| latest + chrono::Duration::seconds(k as i64)));
        }
    }

    /// By time: a new contact updated `lag` before the latest one (its
    /// write reached the listing that late), not listed until
    /// `reveal_late`. Returns its address.
    pub fn add_late_contact(&self, lag: std::time::Duration) -> String {
        let mut inner = lock(&self.shared);
        inner.contacts += 1;
        let index = inner.contacts - 1;
        let times = inner.times.as_mut().expect("started by time");
        let latest = times.iter().max().copied().unwrap_or_else(|| time_of(0));
        times.push(latest - chrono::Duration::from_std(lag).unwrap_or_default());
        inner.hidden.push(index);
        format!("api{}@example.com", index + 1)
    }

    /// The listing catches up: late contacts are shown.
    pub fn reveal_late(&self) {
        lock(&self.shared).hidden.clear();
    }

    /// Every request from now on hangs.
    pub fn hang(&self) {
        lock(&self.shared).hang = true;
    }

    pub fn requests(&self) -> Vec<ApiRequest> {
        lock(&self.shared).requests.clone()
    }
}

/// Contact `i` (1-based) was updated `i` seconds into 2025.
fn time_of(i: usize) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
        .expect("a valid time")
        .to_utc()
        + chrono::Duration::seconds(i as i64)
}

fn contact(i: usize, updated_at: Option<chrono::DateTime<chrono::Utc>>) -> serde_json::Value {
    let mut c = json!({"id": i + 1, "email": format!("api{}@example.com", i + 1), "profile": {"name": format!("Name{}", i + 1)}});
    if let Some(at) = updated_at {
        c["updated_at"] = json!(at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    }
    c
}

/// By time: the contacts updated after `after`, oldest first.
fn page_by_time(inner: &Inner, page: usize, after: Option<&str>) -> Response {
    let times = inner.times.as_deref().unwrap_or_default();
    let after = match after.map(chrono::DateTime::parse_from_rfc3339) {
        None => None,
        Some(Ok(t)) => Some(t.to_utc()),
        Some(Err(e)) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": format!("after is not a time: {e}")})),
            )
                .into_response();
        }
    };
    let mut listing: Vec<usize> = (0..times.len())
        .filter(|i| !inner.hidden.contains(i))
        .filter(|i| after.is_none_or(|a| times[*i] > a))
        .collect();
    listing.sort_by_key(|i| (times[*i], *i));
    let data: Vec<_> = listing
        .iter()
        .take(page)
        .map(|i| contact(*i, Some(times[*i])))
        .collect();
    let next = (listing.len() > page)
        .then(|| {
            data.last()
                .and_then(|c| c["updated_at"].as_str().map(str::to_string))
        })
        .flatten();
    axum::Json(json!({"data": data, "meta": {"next": next}})).into_response()
}

async fn contacts_page(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Response {
    let after = query.get("after").cloned();
    if lock(&shared).hang {
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    }
    let mut inner = lock(&shared);
    let mut request = ApiRequest {
        at: Instant::now(),
        after: after.clone(),
        status: 200,
    };
    let authorized = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == format!("Bearer {}", shared.token));
    if !authorized {
        request.status = 401;
        inner.requests.push(request);
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "invalid token"})),
        )
            .into_response();
    }
    if !inner.faults.is_empty() {
        let fault = inner.faults.remove(0);
        return match fault {
            ApiFault::RateLimited { retry_after_secs } => {
                request.status = 429;
                inner.requests.push(request);
                let mut r = (StatusCode::TOO_MANY_REQUESTS, "slow down").into_response();
                r.headers_mut().insert(
                    "retry-after",
                    retry_after_secs
                        .to_string()
                        .parse()
                        .expect("a number is a header value"),
                );
                r
            }
            ApiFault::ServerError => {
                request.status = 500;
                inner.requests.push(request);
                (StatusCode::INTERNAL_SERVER_ERROR, "oops").into_response()
            }
        };
    }
    inner.requests.push(request);
    if inner.times.is_some() {
        return page_by_time(&inner, shared.page, after.as_deref());
    }
    // Cursors: "p<start>" for a page, "e<start>" for the empty page before it.
    let (start, empty) = match after.as_deref() {
        None => (0, false),
        Some(c) if c.starts_with('e') => (c[1..].parse().unwrap_or(0), false),
        Some(c) => (
            c[1..].parse().unwrap_or(0),
            c[1..].parse::<usize>().unwrap_or(0) == shared.page,
        ),
    };
    if empty {
        return axum::Json(json!({"data": [], "meta": {"next": format!("e{start}")}}))
            .into_response();
    }
    let end = (start + shared.page).min(inner.contacts);
    let data: Vec<_> = (start..end).map(|i| contact(i, None)).collect();
    let next = (end < inner.contacts).then(|| format!("p{end}"));
    axum::Json(json!({"data": data, "meta": {"next": next}})).into_response()
}
