//! Admin HTTP (axum, `http.listen`): health, readiness, Prometheus metrics, the
//! JSON API and the HTML pages. With `http.admin_token` set, everything but health, readiness
//! and metrics needs
//! `Authorization: Bearer <token>`; without one, only loopback is served.
//! Reads the store; the only writes are the operator actions (pause, resume,
//! run now), which go through the same store functions as the CLI.

mod api;
mod auth;
mod health;
mod pages;
pub mod views;

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::{get, post};
use deadpool_redis::Pool;
use secrecy::SecretString;
use sqlx::PgPool;
use tokio::net::TcpListener;

use crate::config::Settings;
use crate::shutdown::Shutdown;

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct HttpState {
    pub store: PgPool,
    pub redis: Pool,
    pub token: Option<SecretString>,
    pub max_attempts: i32,
    /// The Prometheus recorder's handle; `None` where none is installed.
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
}

/// How long readiness waits for each service.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// Binds `http.listen`; refuses a non-loopback address without an admin token.
pub async fn bind(settings: &Settings) -> anyhow::Result<TcpListener> {
    let addr: SocketAddr = settings.http.listen;
    anyhow::ensure!(
        settings.http.admin_token.is_some() || addr.ip().is_loopback(),
        "http.listen {addr} is not a loopback address and http.admin_token is not set; set a token or listen on 127.0.0.1"
    );
    TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} (http.listen): {e}"))
}

pub fn router(state: HttpState) -> Router {
    let protected = Router::new()
        .route("/api/syncs", get(api::list_syncs))
        .route("/api/syncs/{id}", get(api::show_sync))
        .route("/api/syncs/{id}/runs", get(api::sync_runs))
        .route("/api/syncs/{id}/pause", post(api::pause))
        .route("/api/syncs/{id}/resume", post(api::resume))
        .route("/api/syncs/{id}/run", post(api::run_now))
        .route("/api/syncs/{id}/retry-rejected", post(api::retry_rejected))
        .route("/api/runs/{id}", get(api::show_run))
        .route("/", get(pages::overview))
        .route("/syncs/{id}", get(pages::sync_page))
        .route("/syncs/{id}/{verb}", post(pages::action))
        .route("/runs/{id}", get(pages::run_page))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ));
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .merge(protected)
        .with_state(state)
}

/// Serves until the drain begins.
pub async fn serve(listener: TcpListener, state: HttpState, shutdown: Shutdown) {
    let app = router(state);
    let stopping = shutdown.clone();
    if let Err(e) = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stopping.stopping().await })
        .await
    {
        tracing::error!(error = %e, "The admin HTTP server stopped");
    }
}
