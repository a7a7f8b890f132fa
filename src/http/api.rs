//! The JSON API (docs/contract.md §3).

use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::path_ids::{RunIdPath, SyncIdPath};
use crate::ops::{OpsError, PutBackFilter, Scoped};

pub(super) fn not_found(what: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"error": format!("no such {what}")})),
    )
        .into_response()
}

/// 409 for any action on an archived sync: only applying its file again acts on it.
fn archived(id: &str) -> Response {
    (
        StatusCode::CONFLICT,
        axum::Json(json!({
            "error": format!("sync {id} is archived; apply its file again to restore it")
        })),
    )
        .into_response()
}

fn internal(e: impl Into<OpsError>) -> Response {
    let e = e.into();
    if let OpsError::Store(store) = &e
        && crate::outages::unreachable(store)
    {
        return crate::outages::unavailable_api(&crate::outages::Outage::unseen(store));
    }
    tracing::error!(error = %e, "API request failed");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        axum::Json(json!({"error": "internal error; see the daemon's log"})),
    )
        .into_response()
}

pub async fn list_syncs(door: Scoped) -> Response {
    match door.sync_list().await {
        Ok(list) => axum::Json(list).into_response(),
        Err(e) => internal(e),
    }
}

pub async fn show_sync(door: Scoped, SyncIdPath(id): SyncIdPath) -> Response {
    match door.sync_view(id.as_str(), None).await {
        Ok(view) => axum::Json(view).into_response(),
        Err(e) => refused(id.as_str(), e),
    }
}

pub async fn sync_runs(door: Scoped, SyncIdPath(id): SyncIdPath) -> Response {
    match door.sync_runs(id.as_str(), 100).await {
        Ok(list) => axum::Json(list).into_response(),
        Err(e) => refused(id.as_str(), e),
    }
}

pub async fn show_run(door: Scoped, RunIdPath(id): RunIdPath) -> Response {
    match door.run_view(id).await {
        Ok(view) => axum::Json(view).into_response(),
        Err(OpsError::NotFound) => not_found("run"),
        Err(e) => internal(e),
    }
}

#[derive(Debug, serde::Deserialize)]
pub struct RemovalsQuery {
    /// Which page of addresses (from 1).
    #[serde(default = "first_page")]
    page: i64,
    /// Addresses a page (1–10000).
    #[serde(default = "removals_per_page")]
    per_page: i64,
}

fn first_page() -> i64 {
    1
}

fn removals_per_page() -> i64 {
    100
}

/// `GET /api/runs/{id}/removals[?page=N][&per_page=N]`: the records a
/// mirror run refused to take off, by address (`sync removals`).
pub async fn held_removals(
    door: Scoped,
    RunIdPath(id): RunIdPath,
    Query(query): Query<RemovalsQuery>,
) -> Response {
    if query.page < 1 || !(1..=10_000).contains(&query.per_page) {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "page must be 1 or more and per_page 1 to 10000"})),
        )
            .into_response();
    }
    let offset = (query.page - 1).saturating_mul(query.per_page);
    match door.held_removals(id, offset, query.per_page).await {
        Ok(held) => axum::Json(held).into_response(),
        Err(OpsError::NotFound) => not_found("run"),
        Err(e) => refused(&format!("of run {id}"), e),
    }
}

/// `POST /api/runs/{id}/approve-removals`: the sync's next run takes off
/// exactly the removals the run held that are still absent from the query
/// (`sync approve-removals`).
pub async fn approve_removals(door: Scoped, RunIdPath(id): RunIdPath) -> Response {
    match door.approve_removals(id).await {
        Ok(approved) => axum::Json(json!({"run_id": id, "approved": approved})).into_response(),
        Err(OpsError::NotFound) => not_found("run"),
        Err(e) => refused(&format!("of run {id}"), e),
    }
}

/// An action refused by `ops`, in the API's form.
fn refused(id: &str, e: OpsError) -> Response {
    match e {
        OpsError::NotFound => not_found("sync"),
        OpsError::Archived => archived(id),
        OpsError::ReadOnly => (
            StatusCode::FORBIDDEN,
            axum::Json(json!({"error": OpsError::ReadOnly.to_string()})),
        )
            .into_response(),
        OpsError::Paused { reason } => (
            StatusCode::CONFLICT,
            axum::Json(json!({
                "error": format!(
                    "sync {id} is paused ({reason}); resume it first, or add ?force=true to run it once anyway"
                )
            })),
        )
            .into_response(),
        OpsError::Store(e) => internal(e),
        // Not found, as for a sync or run of another workspace: a
        // workspace token learns nothing of the admin's routes.
        OpsError::AdminOnly => (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": OpsError::AdminOnly.to_string()})),
        )
            .into_response(),
        OpsError::BadInput(why) => {
            (StatusCode::BAD_REQUEST, axum::Json(json!({"error": why}))).into_response()
        }
        // Not asked through the API.
        e @ (OpsError::NoVersion(_) | OpsError::Unpublishable(_) | OpsError::CannotPublish) => internal(e),
    }
}

/// `POST /api/syncs/{id}/pause`, with an optional body `{"reason": "…"}`.
pub async fn pause(door: Scoped, SyncIdPath(id): SyncIdPath, body: axum::body::Bytes) -> Response {
    let id = id.as_str();
    #[derive(serde::Deserialize)]
    struct PauseBody {
        reason: Option<String>,
    }
    let reason = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        match serde_json::from_slice::<PauseBody>(&body) {
            Ok(b) => b.reason,
            Err(e) => {
                let why = format!("the body must be {{\"reason\": \"…\"}} or empty: {e}");
                return (StatusCode::BAD_REQUEST, axum::Json(json!({"error": why})))
                    .into_response();
            }
        }
    };
    match door.pause(id, reason.as_deref()).await {
        Ok(changed) => {
            axum::Json(json!({"sync": id, "status": "paused", "changed": changed})).into_response()
        }
        Err(e) => refused(id, e),
    }
}

pub async fn resume(door: Scoped, SyncIdPath(id): SyncIdPath) -> Response {
    let id = id.as_str();
    match door.resume(id).await {
        Ok(changed) => {
            axum::Json(json!({"sync": id, "status": "active", "changed": changed})).into_response()
        }
        Err(e) => refused(id, e),
    }
}

#[derive(Debug, serde::Deserialize)]
pub struct RunQuery {
    /// Run although the sync is paused (once; it stays paused).
    #[serde(default)]
    force: bool,
}

pub async fn run_now(
    door: Scoped,
    SyncIdPath(id): SyncIdPath,
    Query(query): Query<RunQuery>,
) -> Response {
    let id = id.as_str();
    match door.run_now(id, query.force).await {
        Ok((run_id, new)) => (
            StatusCode::ACCEPTED,
            axum::Json(crate::ops::run_queued(id, run_id, new)),
        )
            .into_response(),
        Err(e) => refused(id, e),
    }
}

#[derive(Debug, serde::Deserialize)]
pub struct RetryRejectedQuery {
    /// Only the records of this run.
    run: Option<i64>,
    /// Only the records with this code (e.g. `attempt_budget_exhausted`).
    code: Option<String>,
}

/// `POST /api/syncs/{id}/retry-rejected[?run=RUN_ID][&code=CODE]`: puts
/// quarantined and rejected records back for the next run.
pub async fn retry_rejected(
    door: Scoped,
    SyncIdPath(id): SyncIdPath,
    Query(query): Query<RetryRejectedQuery>,
) -> Response {
    let id = id.as_str();
    let filter = PutBackFilter {
        run_id: query.run,
        code: query.code,
    };
    match door.retry_rejected(id, &filter).await {
        Ok(done) => axum::Json(json!({
            "sync": id,
            "put_back": done.records(),
            "by_code": done.by_code,
            "rewound_to": done.rewound_to,
            "listed": done.listed,
        }))
        .into_response(),
        Err(e) => refused(id, e),
    }
}

/// `POST /api/forget` body: the addresses, and whether to delete them in
/// the syncs' Brevo accounts too.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForgetRequest {
    addresses: Vec<String>,
    #[serde(default)]
    destination: bool,
    /// Whose request it is (as `forget --workspace`).
    #[serde(default)]
    workspace: Option<String>,
}

/// An erasure request (admin token only): every address taken out of the
/// store, and with `"destination": true` out of the Brevo accounts.
pub async fn forget(
    door: Scoped,
    body: Result<axum::Json<ForgetRequest>, axum::extract::rejection::JsonRejection>,
) -> Response {
    // Who may ask comes before what was asked.
    if let Err(e) = door.may_forget() {
        return refused("", e);
    }
    let request = match body {
        Ok(axum::Json(request)) => request,
        Err(e) => {
            return (
                StatusCode::BAD_REQUEST,
                axum::Json(json!({"error": e.body_text()})),
            )
                .into_response();
        }
    };
    match door
        .forget(
            &request.addresses,
            request.workspace.as_deref(),
            request.destination,
        )
        .await
    {
        Ok(done) => axum::Json(done).into_response(),
        Err(e) => refused("", e),
    }
}

/// `GET /api/trace?email=…[&sync=ID][&calls=N]`.
#[derive(Debug, serde::Deserialize)]
pub struct TraceQuery {
    #[serde(default)]
    email: String,
    sync: Option<String>,
    /// Calls shown, newest first (1–1000).
    #[serde(default = "default_calls")]
    calls: usize,
}

fn default_calls() -> usize {
    crate::ops::DEFAULT_CALLS
}

/// `GET /api/trace?email=…`: what the scope's syncs did with one address
/// (`syncward trace`).
pub async fn trace(door: Scoped, Query(query): Query<TraceQuery>) -> Response {
    if !(1..=1000).contains(&query.calls) {
        return (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "calls must be 1 to 1000"})),
        )
            .into_response();
    }
    match door
        .trace(&query.email, query.sync.as_deref(), query.calls)
        .await
    {
        Ok(trace) => axum::Json(trace).into_response(),
        Err(OpsError::NotFound) => not_found("sync"),
        Err(OpsError::BadInput(why)) => {
            (StatusCode::BAD_REQUEST, axum::Json(json!({"error": why}))).into_response()
        }
        Err(e) => internal(e),
    }
}
