//! The store: every SQL statement syncward runs, one file per table family.
//! Other parts call these functions and never write SQL themselves.

pub mod audit;
pub mod cursors;
pub mod runs;
pub mod syncs;

use std::time::Duration;

use anyhow::Context;
use secrecy::ExposeSecret;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

use crate::config::{DatabaseSettings, redact_url};

/// The migrations in `migrations/`, embedded in the binary.
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// Opens the pool and proves the server answers. The error names the server
/// with its password redacted.
pub async fn connect(settings: &DatabaseSettings) -> anyhow::Result<PgPool> {
    let pool = PgPoolOptions::new()
        .max_connections(settings.max_connections)
        .acquire_timeout(Duration::from_secs(10))
        .connect(settings.url.expose_secret())
        .await
        .with_context(|| format!("cannot reach Postgres at {}", redact_url(&settings.url)))?;
    Ok(pool)
}

/// Applies pending migrations; a no-op when the schema is current. Returns how
/// many were applied.
pub async fn migrate(pool: &PgPool) -> anyhow::Result<usize> {
    let applied_before = applied_migrations(pool).await?;
    MIGRATOR.run(pool).await.context("applying migrations failed")?;
    Ok(applied_migrations(pool).await?.saturating_sub(applied_before))
}

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
