//! Sync cursors and fencing tokens.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::types::Json;
use sqlx::{FromRow, PgPool};

use super::audit::{Actor, record_audit};

#[derive(Debug, Clone, Serialize, FromRow)]
pub struct CursorRow {
    pub sync_id: String,
    pub cursor: Option<Json<serde_json::Value>>,
    pub fence_issued: i64,
    pub fence: i64,
    pub run_id: Option<i64>,
    pub updated_at: DateTime<Utc>,
}

pub async fn get_cursor(pool: &PgPool, sync_id: &str) -> sqlx::Result<Option<CursorRow>> {
    sqlx::query_as::<_, CursorRow>("SELECT * FROM sync_cursors WHERE sync_id = $1")
        .bind(sync_id)
        .fetch_optional(pool)
        .await
}

/// Forgets the saved cursor. It also issues a new fence, so a run in progress
/// cannot write its old position back over the reset.
pub async fn reset_cursor(pool: &PgPool, sync_id: &str, actor: Actor) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let previous: Option<Option<Json<serde_json::Value>>> = sqlx::query_scalar(
        "UPDATE sync_cursors c SET cursor = NULL, fence_issued = c.fence_issued + 1,
                fence = c.fence_issued + 1, run_id = NULL, updated_at = now()
         FROM (SELECT sync_id, cursor FROM sync_cursors WHERE sync_id = $1 FOR UPDATE) old
         WHERE c.sync_id = old.sync_id
         RETURNING old.cursor",
    )
    .bind(sync_id)
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(previous) = &previous {
        let previous = previous.as_ref().map(|c| c.0.clone());
        record_audit(
            &mut tx,
            actor,
            "reset_cursor",
            sync_id,
            None,
            serde_json::json!({ "previous": previous }),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(previous.is_some())
}

/// Issues the next fencing token of a sync: one statement, durable, only grows.
pub async fn issue_fence(pool: &PgPool, sync_id: &str) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO sync_cursors (sync_id, fence_issued) VALUES ($1, 1)
         ON CONFLICT (sync_id) DO UPDATE SET fence_issued = sync_cursors.fence_issued + 1
         RETURNING fence_issued",
    )
    .bind(sync_id)
    .fetch_one(pool)
    .await
}

/// Moves the cursor, only if `fence` is still the newest issued: a run whose
/// lease was taken over (or whose cursor was reset) cannot write. Returns
/// whether the write happened.
pub async fn checkpoint_cursor(
    pool: &PgPool,
    sync_id: &str,
    cursor: Option<&serde_json::Value>,
    fence: i64,
    run_id: i64,
) -> sqlx::Result<bool> {
    let written = sqlx::query(
        "UPDATE sync_cursors SET cursor = $2, fence = $3, run_id = $4, updated_at = now()
         WHERE sync_id = $1 AND fence_issued = $3",
    )
    .bind(sync_id)
    .bind(cursor.map(Json))
    .bind(fence)
    .bind(run_id)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(written == 1)
}
