//! `/healthz` (the process answers) and `/readyz` (Postgres and Redis answer).

use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::header::WWW_AUTHENTICATE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use tracing::debug;

/// How long a scrape's reading of the syncs' health serves later scrapes.
const SYNC_HEALTH_FRESH: Duration = Duration::from_secs(1);

use super::{HttpState, READY_TIMEOUT};

pub async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}

/// Prometheus text format; behind the scrape or admin token once either is
/// set (its labels name every workspace's syncs).
pub async fn metrics(State(state): State<HttpState>, headers: HeaderMap) -> Response {
    if !super::auth::scrape_allowed(&headers, state.token.as_ref(), state.metrics_token.as_ref()) {
        return (
            StatusCode::UNAUTHORIZED,
            [(WWW_AUTHENTICATE, "Bearer")],
            "/metrics needs Authorization: Bearer with http.metrics_token (or the admin token)\n",
        )
            .into_response();
    }
    match &state.metrics {
        Some(handle) => {
            refresh_sync_health(&state).await;
            crate::telemetry::collect_process();
            handle.run_upkeep();
            (
                StatusCode::OK,
                [("content-type", "text/plain; version=0.0.4")],
                handle.render(),
            )
        }
        None => (
            StatusCode::NOT_FOUND,
            [("content-type", "text/plain")],
            "no metrics recorder\n".to_string(),
        ),
    }
    .into_response()
}

/// Each sync's gauges are read from the store when scraped, not each sweep:
/// at 10,000 syncs one read costs Postgres ~0.5 s, which four daemons
/// sweeping every 2 s turned into a core. At most once a second, so several
/// scrapers cost one read. A store outage leaves the last values (the outage
/// itself is logged by `outages`).
async fn refresh_sync_health(state: &HttpState) {
    let mut read_at = state.sync_health_read_at.lock().await;
    if read_at.is_some_and(|at| at.elapsed() < SYNC_HEALTH_FRESH) {
        return;
    }
    match state.door.sync_health().await {
        Ok(syncs) => {
            crate::telemetry::record_sync_health(&syncs);
            *read_at = Some(Instant::now());
        }
        Err(e) => debug!(error = %e, "Reading the syncs' health for a scrape failed"),
    }
}

/// What one service's ping says within `READY_TIMEOUT`: "ok", or why not.
async fn readiness<E: std::fmt::Display>(
    ping: impl std::future::Future<Output = Result<(), E>>,
) -> String {
    match tokio::time::timeout(READY_TIMEOUT, ping).await {
        Ok(Ok(())) => "ok".to_string(),
        Ok(Err(e)) => format!("unreachable: {e}"),
        Err(_) => "no answer within 2s".to_string(),
    }
}

pub async fn readyz(State(state): State<HttpState>) -> impl IntoResponse {
    let postgres = readiness(state.door.store_ready()).await;
    let redis = readiness(state.redis.ping()).await;
    let ready = postgres == "ok" && redis == "ok";
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        axum::Json(json!({"ready": ready, "postgres": postgres, "redis": redis})),
    )
}
