//! `/healthz` (the process answers) and `/readyz` (Postgres and Redis answer).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::json;

use super::{HttpState, READY_TIMEOUT};

pub async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}

/// Prometheus text format.
pub async fn metrics(State(state): State<HttpState>) -> impl IntoResponse {
    match &state.metrics {
        Some(handle) => {
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
