//! Outages of the store and Redis as the daemon sees them. A watcher probes
//! both every second: an outage is logged once at ERROR with its cause (the
//! pool's own error hides it behind "pool timed out", so a direct connection
//! names it), its end once with how long it lasted, and in between the pages
//! answer 503 at once naming it instead of waiting on a pool.

use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use secrecy::ExposeSecret;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::{ConnectOptions, Connection};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::config::{DatabaseSettings, RedisSettings, redact_url};
use crate::redis::RedisPool;

/// How often each service is probed, and how long a probe may take: an
/// outage is known within two seconds of its start.
const EVERY: Duration = Duration::from_secs(1);
const PROBE_TIMEOUT: Duration = Duration::from_millis(900);

/// The services a run cannot do without.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    Store,
    Redis,
}

/// One service down: which, where, why, since when.
#[derive(Debug, Clone)]
pub struct Outage {
    pub service: Service,
    /// Where it was looked for, password redacted.
    pub address: String,
    pub cause: String,
    since: Instant,
}

impl fmt::Display for Outage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.service, self.address.is_empty()) {
            (Service::Store, true) => write!(f, "The store (Postgres)")?,
            (Service::Store, false) => write!(f, "The store (Postgres at {})", self.address)?,
            (Service::Redis, _) => write!(f, "Redis ({})", self.address)?,
        }
        write!(f, " is unreachable")?;
        let lasted = self.since.elapsed().as_secs();
        if lasted > 0 {
            write!(f, " (for {lasted} s)")?;
        }
        write!(f, ": {}", self.cause)
    }
}

impl Outage {
    /// A store failure a request met before the watcher saw the outage.
    pub fn unseen(e: &sqlx::Error) -> Self {
        Self {
            service: Service::Store,
            address: String::new(),
            cause: e.to_string(),
            since: Instant::now(),
        }
    }
}

/// What the watcher knows now; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Outages(Arc<Mutex<Known>>);

#[derive(Debug, Default)]
struct Known {
    store: Option<Outage>,
    redis: Option<Outage>,
}

impl Outages {
    /// The outage going on, the store's first (nothing works without it).
    pub fn current(&self) -> Option<Outage> {
        let known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        known.store.clone().or_else(|| known.redis.clone())
    }

    /// The store's outage, if it is down.
    pub fn store(&self) -> Option<Outage> {
        let known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        known.store.clone()
    }

    /// Records a probe's result; logs the start and the end of an outage.
    fn observe(&self, service: Service, address: &str, result: Result<(), String>) {
        let mut known = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = match service {
            Service::Store => &mut known.store,
            Service::Redis => &mut known.redis,
        };
        match (slot.as_ref(), result) {
            (None, Err(cause)) => {
                let outage = Outage {
                    service,
                    address: address.to_string(),
                    cause,
                    since: Instant::now(),
                };
                error!(
                    "{outage}. Runs wait and resume on their own; the pages answer 503 until it is back. Operator: check that it is running and reachable from this host"
                );
                *slot = Some(outage);
            }
            (Some(outage), Ok(())) => {
                info!(
                    "{} is reachable again after {} s",
                    match service {
                        Service::Store => "The store",
                        Service::Redis => "Redis",
                    },
                    outage.since.elapsed().as_secs()
                );
                *slot = None;
            }
            _ => {}
        }
    }

    /// Probes the store and Redis every second until `stop`.
    pub fn watch(
        &self,
        database: &DatabaseSettings,
        redis_settings: &RedisSettings,
        redis: RedisPool,
        stop: CancellationToken,
    ) -> anyhow::Result<tokio::task::JoinHandle<()>> {
        let options = PgConnectOptions::from_str(database.url.expose_secret())?
            .log_statements(tracing::log::LevelFilter::Off);
        let store_address = redact_url(&database.url);
        let redis_address = redact_url(&redis_settings.url);
        // A pool of its own, one connection: the probe must not queue behind
        // runs for one of theirs.
        let probe_pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(PROBE_TIMEOUT)
            .connect_lazy_with(options.clone());
        let outages = self.clone();
        Ok(tokio::spawn(async move {
            let mut tick = tokio::time::interval(EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let (store, redis) =
                    tokio::join!(probe_store(&probe_pool, &options), probe_redis(&redis));
                outages.observe(Service::Store, &store_address, store);
                outages.observe(Service::Redis, &redis_address, redis);
            }
        }))
    }
}

/// `SELECT 1` through the probe's pool; when that fails, a connection of
/// its own says why.
async fn probe_store(pool: &PgPool, options: &PgConnectOptions) -> Result<(), String> {
    let pooled = tokio::time::timeout(PROBE_TIMEOUT, crate::store::ping(pool)).await;
    if let Ok(Ok(_)) = pooled {
        return Ok(());
    }
    match tokio::time::timeout(PROBE_TIMEOUT, sqlx::PgConnection::connect_with(options)).await {
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} ms", PROBE_TIMEOUT.as_millis())),
        // It takes a new connection: the pooled one died with an earlier
        // server (a restart), and the pool has dropped it.
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
    }
}

async fn probe_redis(redis: &RedisPool) -> Result<(), String> {
    match tokio::time::timeout(PROBE_TIMEOUT, redis.ping()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {} ms", PROBE_TIMEOUT.as_millis())),
    }
}

/// The pages: 503 at once while the store or Redis is down, naming it.
pub async fn pages_during_outage(
    State(outages): State<Outages>,
    request: Request,
    next: Next,
) -> Response {
    match outages.current() {
        Some(outage) => unavailable_page(&outage),
        None => next.run(request).await,
    }
}

/// The API: 503 at once while the store is down (it needs nothing else).
pub async fn api_during_outage(
    State(outages): State<Outages>,
    request: Request,
    next: Next,
) -> Response {
    match outages.store() {
        Some(outage) => unavailable_api(&outage),
        None => next.run(request).await,
    }
}

pub fn unavailable_page(outage: &Outage) -> Response {
    let text = html_escape(&outage.to_string());
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [("retry-after", "5")],
        Html(format!(
            "<!DOCTYPE html><title>Unavailable</title><h1>Unavailable</h1><p>{text}.</p>\
             <p>Runs wait and resume on their own. This page comes back with it.</p>"
        )),
    )
        .into_response()
}

pub fn unavailable_api(outage: &Outage) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [("retry-after", "5")],
        axum::Json(serde_json::json!({ "error": outage.to_string() })),
    )
        .into_response()
}

/// Whether a store error means it could not be reached (rather than a
/// query that failed): such a failure is an outage, answered 503.
pub fn unreachable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_) => true,
        // Class 08 (connection exception) and 57P (the server shutting down,
        // crashed, or not yet taking connections).
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
