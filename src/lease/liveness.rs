//! Per-boot liveness keys: each daemon process keeps its key (`redis::keys::liveness`)
//! alive while it runs; a run whose holder's key is gone belongs to a dead
//! daemon.

use std::time::Duration;

use deadpool_redis::redis::{self, AsyncCommands};
use uuid::Uuid;

use super::LeaseError;
use crate::redis::RedisPool;
use crate::redis::keys::liveness as liveness_key;

/// Sets (or refreshes) this daemon's liveness key for `ttl`.
pub async fn refresh_liveness(
    pool: &RedisPool,
    prefix: &str,
    boot_id: Uuid,
    ttl: Duration,
) -> Result<(), LeaseError> {
    let mut conn = pool.get().await?;
    let millis = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
    let _: () = redis::cmd("SET")
        .arg(liveness_key(prefix, boot_id))
        .arg("alive")
        .arg("PX")
        .arg(millis)
        .query_async(&mut conn)
        .await?;
    Ok(())
}

/// Whether the daemon with `boot_id` still shows signs of life.
pub async fn is_alive(pool: &RedisPool, prefix: &str, boot_id: Uuid) -> Result<bool, LeaseError> {
    let mut conn = pool.get().await?;
    Ok(conn.exists(liveness_key(prefix, boot_id)).await?)
}

/// Removes this daemon's key at a clean exit, so nothing waits out its TTL.
pub async fn clear_liveness(
    pool: &RedisPool,
    prefix: &str,
    boot_id: Uuid,
) -> Result<(), LeaseError> {
    let mut conn = pool.get().await?;
    let _: () = conn.del(liveness_key(prefix, boot_id)).await?;
    Ok(())
}

/// Processes on this machine proven dead (their pid is gone or reused;
/// `store::processes::dead_on_this_machine`) stop counting as alive at once:
/// their liveness key and their process row go, so their leases are free to
/// take over and their runs to resume, without waiting out a TTL. Returns
/// their boot ids.
pub async fn reap_dead_on_this_machine(
    store: &sqlx::PgPool,
    pool: &RedisPool,
    prefix: &str,
    own: Uuid,
) -> anyhow::Result<Vec<Uuid>> {
    let dead = crate::store::processes::dead_on_this_machine(store, own).await?;
    for boot in &dead {
        clear_liveness(pool, prefix, *boot).await?;
        crate::store::processes::deregister(store, *boot).await?;
        tracing::info!(boot_id = %boot.simple(), "A process on this machine is gone; its leases are free at once");
    }
    Ok(dead)
}
