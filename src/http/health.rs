//! `/healthz` (the process answers) and `/readyz` (Postgres and Redis answer).

use axum::extract::State;
use axum::http::header::WWW_AUTHENTICATE;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

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

pub async fn readyz(State(state): State<HttpState>) -> impl IntoResponse {
    let postgres =
        match tokio::time::timeout(READY_TIMEOUT, sqlx::query("SELECT 1").execute(&state.store))
            .await
        {
            Ok(Ok(_)) => "ok".to_string(),
            Ok(Err(e)) => format!("unreachable: {e}"),
            Err(_) => "no answer within 2s".to_string(),
        };
    let redis = match tokio::time::timeout(READY_TIMEOUT, async {
        let mut conn = state.redis.get().await.map_err(|e| e.to_string())?;
        deadpool_redis::redis::cmd("PING")
            .query_async::<String>(&mut conn)
            .await
            .map_err(|e| e.to_string())
    })
    .await
    {
        Ok(Ok(_)) => "ok".to_string(),
        Ok(Err(e)) => format!("unreachable: {e}"),
        Err(_) => "no answer within 2s".to_string(),
    };
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
