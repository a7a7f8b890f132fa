//! Admin HTTP (axum, `http.listen`): health, readiness, Prometheus metrics, the
//! JSON API and the HTML pages. The API and the pages reach syncs and runs
//! only through `ops::Door`, entered with the caller's scope; the only writes
//! are the operator actions (pause, resume, run now, retry rejected), the
//! same `ops` actions as the CLI's.
//!
//! The edges, outermost first: the connection loop (`server`: connection
//! limit, header-read timeout), the security headers on every answer, the
//! request timeout, the Host check (`hosts`: every route but `/healthz`),
//! then on the API and pages the token's scope and the write rules
//! (`auth`), and last the ids in the path (`path_ids`), before any handler
//! asks `ops`, which decides what the scope may see and do. `http/` holds
//! no store: tokens, readiness and the metrics' sync health go through the
//! door too.
//! Health and readiness need no token (readiness names no sync); metrics
//! need the scrape or admin token once either is set.

mod api;
mod auth;
mod health;
mod hosts;
mod pages;
mod path_ids;
mod server;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::header::{
    CONTENT_SECURITY_POLICY, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS, X_FRAME_OPTIONS,
};
use axum::http::{HeaderValue, StatusCode};
use axum::routing::{get, post};
use secrecy::SecretString;
use tokio::net::TcpListener;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::TimeoutLayer;

use crate::config::Settings;
use crate::redis::RedisPool;
use crate::shutdown::Shutdown;

pub use hosts::AllowedHosts;
pub use server::ConnectionLimits;

/// What the handlers share.
#[derive(Clone, Debug)]
pub struct HttpState {
    /// The store, behind `ops`' door (with the workspaces' secrets, for
    /// `POST /api/forget` with the destination, and `run.max_attempts`).
    pub door: crate::ops::Door,
    /// The store's and Redis' outages, as the daemon's watcher sees them.
    pub outages: crate::outages::Outages,
    pub redis: RedisPool,
    pub token: Option<SecretString>,
    /// `http.metrics_token`: the scrape token of `/metrics`.
    pub metrics_token: Option<SecretString>,
    /// The Prometheus recorder's handle; `None` where none is installed.
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// When `/metrics` last read every sync's health from the store.
    pub sync_health_read_at: std::sync::Arc<tokio::sync::Mutex<Option<std::time::Instant>>>,
}

/// How long readiness waits for each service.
const READY_TIMEOUT: Duration = Duration::from_secs(2);

/// The bound admin socket with what the settings say about serving it: the
/// allowed hosts (which need the port actually bound), the limits and the
/// request timeout.
#[derive(Debug)]
pub struct AdminListener {
    listener: TcpListener,
    hosts: AllowedHosts,
    limits: ConnectionLimits,
    request_timeout: Duration,
}

impl AdminListener {
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// Binds `http.listen`; refuses a non-loopback address without an admin token.
pub async fn bind(settings: &Settings) -> anyhow::Result<AdminListener> {
    let addr: SocketAddr = settings.http.listen;
    anyhow::ensure!(
        settings.http.admin_token.is_some() || addr.ip().is_loopback(),
        "http.listen {addr} is not a loopback address and http.admin_token is not set; set a token or listen on 127.0.0.1"
    );
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {addr} (http.listen): {e}"))?;
    let bound = listener.local_addr()?;
    Ok(AdminListener {
        listener,
        hosts: AllowedHosts::new(bound, &settings.http.allowed_hosts),
        limits: ConnectionLimits {
            max_connections: settings.http.max_connections,
            header_read_timeout: settings.http.header_read_timeout,
        },
        request_timeout: settings.http.request_timeout,
    })
}

/// `default-src 'none'`: the pages load nothing; their one inline `<style>`
/// and plain forms posting to themselves are all they need.
const CONTENT_SECURITY_POLICY_VALUE: &str =
    "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; form-action 'self'";

/// Every route, behind the Host check, the request timeout and the security
/// headers.
pub fn router(state: HttpState, hosts: AllowedHosts, request_timeout: Duration) -> Router {
    let access = Arc::new(auth::AdminAccess::new(
        state.token.as_ref(),
        state.door.clone(),
        hosts.clone(),
    ));
    // The API and the pages get the door as their only state: a handler
    // that does not take a `Scoped` (its scope, from `auth`) reaches no
    // sync or run, and one that asks for the store does not compile.
    let door = state.door.clone();
    let api = Router::new()
        .route("/api/syncs", get(api::list_syncs))
        .route("/api/syncs/{id}", get(api::show_sync))
        .route("/api/syncs/{id}/runs", get(api::sync_runs))
        .route("/api/syncs/{id}/pause", post(api::pause))
        .route("/api/syncs/{id}/resume", post(api::resume))
        .route("/api/syncs/{id}/run", post(api::run_now))
        .route("/api/syncs/{id}/retry-rejected", post(api::retry_rejected))
        .route("/api/runs/{id}", get(api::show_run))
        .route("/api/runs/{id}/removals", get(api::held_removals))
        .route(
            "/api/runs/{id}/approve-removals",
            post(api::approve_removals),
        )
        .route("/api/forget", post(api::forget))
        .route("/api/trace", get(api::trace))
        .route_layer(axum::middleware::from_fn_with_state(
            access.clone(),
            auth::api_access,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.outages.clone(),
            crate::outages::api_during_outage,
        ))
        .with_state(door.clone());
    let pages = Router::new()
        .route("/", get(pages::overview))
        .route("/syncs/{id}", get(pages::sync_page))
        .route("/syncs/{id}/{verb}", post(pages::action))
        .route("/runs/{id}", get(pages::run_page))
        .route("/trace", get(pages::trace_page))
        .route_layer(axum::middleware::from_fn_with_state(
            access,
            auth::page_access,
        ))
        .route_layer(axum::middleware::from_fn_with_state(
            state.outages.clone(),
            crate::outages::pages_during_outage,
        ))
        .with_state(door);
    let header = |name, value: &'static str| {
        SetResponseHeaderLayer::overriding(name, HeaderValue::from_static(value))
    };
    Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .merge(api)
        .merge(pages)
        .with_state(state)
        .layer(axum::middleware::from_fn_with_state(
            hosts,
            hosts::require_allowed_host,
        ))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            request_timeout,
        ))
        .layer(header(X_FRAME_OPTIONS, "DENY"))
        .layer(header(
            CONTENT_SECURITY_POLICY,
            CONTENT_SECURITY_POLICY_VALUE,
        ))
        .layer(header(X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .layer(header(REFERRER_POLICY, "same-origin"))
}

/// Serves until the drain begins.
pub async fn serve(listener: AdminListener, state: HttpState, shutdown: Shutdown) {
    tracing::info!(
        hosts = listener.hosts.as_slice().join(" "),
        "Admin HTTP answers to these Host names"
    );
    let app = router(state, listener.hosts, listener.request_timeout);
    server::accept_loop(listener.listener, app, listener.limits, shutdown).await;
}
