//! The store: every SQL statement syncward runs, one file per table family.
//! Other parts call these functions and never write SQL themselves.

pub mod alerts;
pub mod audit;
pub mod checkpoint;
mod compose;
pub mod cursors;
pub mod deadman;
mod fence;
pub mod field_presence;
pub mod forget;
pub mod grouped;
pub mod held_removals;
pub mod history;
pub mod imports;
pub mod ledger;
pub mod ledger_days;
pub mod notifications;
pub mod processes;
pub mod record_states;
pub mod rejected;
pub mod runs;
pub mod schedule;
pub mod syncs;
pub mod tokens;
pub mod trace;

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use secrecy::ExposeSecret;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, PgConnection};

use crate::config::{DatabaseSettings, redact_url};

/// The migrations in `migrations/`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Opens the pool on a store whose schema this binary can use, and proves
/// the server answers. A store without syncward's schema, or behind it, is
/// refused as bad input (exit 2, which the unit does not restart), naming the
/// database and `syncward migrate`; a SQL error about a missing table would
/// say neither. Errors name the server with its password redacted.
pub async fn connect(settings: &DatabaseSettings) -> anyhow::Result<PgPool> {
    let pool = connect_for_migrate(settings).await?;
    let pending = pending_migrations(&pool).await?;
    if !pending.is_empty() {
        let what = if pending.len() == MIGRATOR.iter().count() {
            "holds no syncward schema yet".to_string()
        } else {
            format!("has a schema behind this syncward (migrations {pending:?} pending)")
        };
        return Err(crate::config::BadInput::new(
            format!("the store {}", redact_url(&settings.url)),
            "",
            format!("{what}: run `syncward migrate` as the daemon's user"),
        )
        .into());
    }
    Ok(pool)
}

/// Opens the pool of a process that runs one sync (`sync run --foreground`)
/// with at most `ONE_RUN_CONNECTIONS` of `database.max_connections`.
pub async fn connect_for_one_run(settings: &DatabaseSettings) -> anyhow::Result<PgPool> {
    connect(&DatabaseSettings {
        url: settings.url.clone(),
        max_connections: settings.max_connections.min(ONE_RUN_CONNECTIONS),
    })
    .await
}

/// Most statements one run has in flight at once: its call's mark, the next
/// page's lookup or the last checkpoint with the next stake, and a page's
/// rejections. A pool hands its idle connections round, so every connection
/// it ever opened plans each statement and loads the ledger's partitions
/// again: a fourth and fifth cost a 100-page run 10 % more of Postgres'
/// time and gained nothing (2026-12-07).
const ONE_RUN_CONNECTIONS: u32 = 3;

/// The migrations this binary has that the store has not applied.
pub async fn pending_migrations(pool: &PgPool) -> anyhow::Result<Vec<i64>> {
    let applied = applied_migration_versions(pool).await?;
    Ok(MIGRATOR
        .iter()
        .map(|m| m.version)
        .filter(|v| !applied.contains(v))
        .collect())
}

/// Opens the pool whatever the schema (for `syncward migrate`) and proves the
/// server answers.
pub async fn connect_for_migrate(settings: &DatabaseSettings) -> anyhow::Result<PgPool> {
    let unreachable = || format!("cannot reach Postgres at {}", redact_url(&settings.url));
    let options =
        PgConnectOptions::from_str(settings.url.expose_secret()).with_context(unreachable)?;
    // One direct connection first: a pool hides the cause ("connection refused",
    // "password authentication failed") behind a generic acquire timeout.
    let probe = tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options))
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {}s", CONNECT_TIMEOUT.as_secs()))
        .with_context(unreachable)?
        .with_context(unreachable)?;
    // Closing the probe is courtesy; the server drops it either way.
    let _ = probe.close().await;
    // No ping before each checkout: it doubled every statement's round trips.
    // A connection that died while idle (a Postgres restart) fails its next
    // statement once and is discarded; every caller retries or reports that.
    Ok(PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(CONNECT_TIMEOUT)
        .test_before_acquire(false)
        .connect_lazy_with(options))
}

/// Longest wait of a page's or API call's store query for a connection:
/// an outage the daemon's watcher has not seen yet still answers 503 within
/// 2 s, not after the runs' 10 s.
const HTTP_ACQUIRE_TIMEOUT: Duration = Duration::from_millis(1500);

/// The admin HTTP's own small pool: its queries wait at most
/// `HTTP_ACQUIRE_TIMEOUT` for a connection, and never queue behind runs for
/// one. The schema was checked by `connect`.
pub fn http_pool(settings: &DatabaseSettings) -> anyhow::Result<PgPool> {
    let options = PgConnectOptions::from_str(settings.url.expose_secret())
        .with_context(|| format!("cannot reach Postgres at {}", redact_url(&settings.url)))?;
    Ok(PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(HTTP_ACQUIRE_TIMEOUT)
        .test_before_acquire(false)
        .connect_lazy_with(options))
}

/// A pool of `connections` beside `pool`, on the same server, whose sessions
/// plan every prepared statement once (`plan_cache_mode =
/// force_generic_plan`): for statements that Postgres otherwise plans
/// again at every call, their array sizes changing the custom plan's price,
/// and whose generic plan runs as fast (`grouped::RunStatements`' finishes).
/// Set per session, not as a startup option, so a pooler in front of
/// Postgres passes it. A generic plan is priced on the tables' sizes when it
/// is made and kept until an ANALYZE: made on an empty store (a daemon
/// started before any sync was published) it reads every sync at each claim.
/// So a session lives `GENERIC_PLAN_LIFETIME` at most, and its successor
/// plans on the tables as they are then.
pub fn generic_plan_pool(pool: &PgPool, connections: u32) -> PgPool {
    PgPoolOptions::new()
        .max_connections(connections)
        .max_lifetime(GENERIC_PLAN_LIFETIME)
        .acquire_timeout(CONNECT_TIMEOUT)
        .test_before_acquire(false)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::Executor::execute(&mut *conn, "SET plan_cache_mode = force_generic_plan")
                    .await?;
                Ok(())
            })
        })
        .connect_lazy_with((*pool.connect_options()).clone())
}

/// How long a session of `generic_plan_pool` keeps its plans: a minute of
/// claims on a plan made on an empty store, then three statements planned
/// again.
const GENERIC_PLAN_LIFETIME: Duration = Duration::from_secs(60);

/// Longest wait for a store connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Applies pending migrations; a no-op when the schema is current. Returns how
/// many were applied.
pub async fn migrate(pool: &PgPool) -> anyhow::Result<usize> {
    let applied_before = applied_migrations(pool).await?;
    MIGRATOR
        .run(pool)
        .await
        .context("applying migrations failed")?;
    // The ledger's partitions for today and the next days (migration 0016),
    // should the schema be current but the days have moved on.
    ledger_days::create_days(pool, 0, ledger_days::DAYS_AHEAD)
        .await
        .context("creating the ledger's day partitions failed")?;
    Ok(applied_migrations(pool)
        .await?
        .saturating_sub(applied_before))
}

/// Whether the store answers a statement now (readiness, outage probes).
pub async fn ping(pool: &PgPool) -> sqlx::Result<()> {
    sqlx::query_scalar!(r#"SELECT 1 AS "one!""#)
        .fetch_one(pool)
        .await?;
    Ok(())
}

// The migration history is sqlx's own table, made by `migrate` and not by a
// migration: the compile-time checks (`.sqlx/`, written from `migrations/`)
// cannot see it, so these reads are checked at run time.
async fn applied_migrations(pool: &PgPool) -> anyhow::Result<usize> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(pool)
        .await
        .context("reading the migration history failed")?;
    if !exists {
        return Ok(0);
    }
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(pool)
        .await
        .context("reading the migration history failed")?;
    Ok(usize::try_from(count).unwrap_or(0))
}

/// Versions of the migrations applied to the store.
pub async fn applied_migration_versions(pool: &PgPool) -> anyhow::Result<Vec<i64>> {
    if applied_migrations(pool).await? == 0 {
        return Ok(Vec::new());
    }
    Ok(
        sqlx::query_scalar("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all(pool)
            .await?,
    )
}
