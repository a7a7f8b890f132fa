//! Mirror mode's held removals (migration 0032): the exact records a run
//! refused to take off for `source.max_removal_share`, listed for a person,
//! approved by one, and taken off by the next run if still absent.

use serde::Serialize;
use sqlx::PgPool;

use super::audit::{Actor, record_audit};
use super::record_states::StateScope;

/// Holds the records this run's complete read did not see (those it
/// refused to take off), in place of the sync's earlier unapproved holds;
/// returns how many.
pub async fn hold_departed(pool: &PgPool, scope: StateScope<'_>) -> sqlx::Result<u64> {
    let mut tx = pool.begin().await?;
    sqlx::query!(
        "DELETE FROM held_removals WHERE sync_id = $1 AND approved_at IS NULL",
        scope.sync_id
    )
    .execute(&mut *tx)
    .await?;
    let held = sqlx::query!(
        "INSERT INTO held_removals (run_id, sync_id, identity)
         SELECT $3, sync_id, identity FROM record_states
         WHERE sync_id = $1 AND ledger_epoch = $2 AND seen_run IS DISTINCT FROM $3",
        scope.sync_id,
        scope.epoch,
        scope.run_id,
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(held)
}

/// Forgets the sync's unapproved holds: a run that took off everyone who
/// left made them moot.
pub async fn drop_unapproved(pool: &PgPool, sync_id: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "DELETE FROM held_removals WHERE sync_id = $1 AND approved_at IS NULL",
        sync_id
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// One run's held removals, a page of them.
#[derive(Debug, Clone, Serialize)]
pub struct HeldRemovals {
    pub run_id: i64,
    pub sync_id: String,
    /// How many the run held.
    pub held: i64,
    /// When and by whom they were approved; `None`: not yet.
    pub approved_at: Option<chrono::DateTime<chrono::Utc>>,
    pub approved_by: Option<String>,
    /// This page's addresses, in identity order (`None`: the address was
    /// forgotten, or never kept).
    pub addresses: Vec<Option<String>>,
}

/// The removals run `run_id` held: `limit` of them after the first `offset`.
pub async fn list(
    pool: &PgPool,
    run_id: i64,
    sync_id: &str,
    offset: i64,
    limit: i64,
) -> sqlx::Result<HeldRemovals> {
    let head = sqlx::query!(
        r#"SELECT count(*) AS "held!", max(approved_at) AS approved_at, max(approved_by) AS approved_by
           FROM held_removals WHERE run_id = $1"#,
        run_id
    )
    .fetch_one(pool)
    .await?;
    let addresses = sqlx::query_scalar!(
        "SELECT s.email FROM held_removals h
         LEFT JOIN record_states s ON s.sync_id = h.sync_id AND s.identity = h.identity
         WHERE h.run_id = $1
         ORDER BY h.identity OFFSET $2 LIMIT $3",
        run_id,
        offset,
        limit,
    )
    .fetch_all(pool)
    .await?;
    Ok(HeldRemovals {
        run_id,
        sync_id: sync_id.to_string(),
        held: head.held,
        approved_at: head.approved_at,
        approved_by: head.approved_by,
        addresses,
    })
}

/// Approves the removals run `run_id` held, by `actor`, with an audit
/// entry; returns how many (0: the run held none, or they were approved
/// already).
pub async fn approve(pool: &PgPool, run_id: i64, sync_id: &str, actor: Actor) -> sqlx::Result<u64> {
    let mut tx = pool.begin().await?;
    let approved = sqlx::query!(
        "UPDATE held_removals SET approved_at = now(), approved_by = $2
         WHERE run_id = $1 AND approved_at IS NULL",
        run_id,
        actor.label(),
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if approved > 0 {
        record_audit(
            &mut tx,
            actor,
            "approve_removals",
            sync_id,
            None,
            serde_json::json!({ "run_id": run_id, "records": approved }),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(approved)
}

/// Up to `limit` approved removals of the sync after identity `after` that
/// this run's complete read did not see either: identity and address.
pub async fn approved_departed(
    pool: &PgPool,
    scope: StateScope<'_>,
    after: &[u8],
    limit: i64,
) -> sqlx::Result<Vec<super::record_states::Departed>> {
    sqlx::query_as!(
        super::record_states::Departed,
        "SELECT DISTINCT s.identity, s.email FROM held_removals h
         JOIN record_states s ON s.sync_id = h.sync_id AND s.identity = h.identity
         WHERE h.sync_id = $1 AND h.approved_at IS NOT NULL AND s.ledger_epoch = $2
           AND s.seen_run IS DISTINCT FROM $3 AND s.identity > $5
         ORDER BY s.identity LIMIT $4",
        scope.sync_id,
        scope.epoch,
        scope.run_id,
        limit,
        after,
    )
    .fetch_all(pool)
    .await
}

/// The sync's approved removals are done with (taken off, or back in the
/// query).
pub async fn drop_approved(pool: &PgPool, sync_id: &str) -> sqlx::Result<()> {
    sqlx::query!(
        "DELETE FROM held_removals WHERE sync_id = $1 AND approved_at IS NOT NULL",
        sync_id
    )
    .execute(pool)
    .await?;
    Ok(())
}
