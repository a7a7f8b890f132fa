//! Sync cursors: where each sync's next run starts, and which fence wrote
//! it. The fence's own SQL is in `fence.rs`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use sqlx::types::Json;

use super::audit::{Actor, record_audit};
use super::compose::composed;

#[derive(Debug, Clone, Serialize)]
pub struct CursorRow {
    pub sync_id: String,
    pub cursor: Option<Json<serde_json::Value>>,
    pub fence_issued: i64,
    pub fence: i64,
    pub run_id: Option<i64>,
    pub updated_at: DateTime<Utc>,
}

pub async fn get_cursor(pool: &PgPool, sync_id: &str) -> sqlx::Result<Option<CursorRow>> {
    sqlx::query_as!(
        CursorRow,
        r#"SELECT sync_id, cursor AS "cursor: Json<serde_json::Value>", fence_issued, fence,
                  run_id, updated_at
           FROM sync_cursors WHERE sync_id = $1"#,
        sync_id,
    )
    .fetch_optional(pool)
    .await
}

/// Forgets the saved cursor. It also issues a new fence, so a run in progress
/// cannot write its old position back over the reset.
pub async fn reset_cursor(pool: &PgPool, sync_id: &str, actor: Actor) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let previous = rewind_cursor(&mut tx, sync_id).await?;
    if let Some(previous) = &previous {
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

/// Forgets the cursor under a new fence (a run in flight can no longer
/// checkpoint). `None` when the sync has no cursor row; else the cursor it had.
pub async fn rewind_cursor(
    conn: &mut sqlx::PgConnection,
    sync_id: &str,
) -> sqlx::Result<Option<Option<serde_json::Value>>> {
    let previous = composed!(query_scalar [
        "UPDATE sync_cursors c SET cursor = NULL, ",
        take_fence!(row: "c"),
        ", run_id = NULL, updated_at = now()
         FROM (SELECT sync_id, cursor FROM sync_cursors WHERE sync_id = $1 FOR UPDATE) old
         WHERE c.sync_id = old.sync_id
         RETURNING old.cursor AS \"cursor: Json<serde_json::Value>\"",
    ], sync_id)
    .fetch_optional(conn)
    .await?;
    Ok(previous.map(|p| p.map(|c| c.0)))
}

/// The checkpoint's cursor write (guarantee 1): the sync's cursor moves to
/// `cursor`, recorded as written by `run` under `fence`, only while that
/// fence is the newest issued (`fence_held`). The statement says whether it
/// wrote (rows affected, or a `RETURNING`).
#[rustfmt::skip]
macro_rules! move_cursor {
    (@sql $k:tt sync: $sync:tt, cursor: $cursor:tt, fence: $fence:tt, run: $run:tt) => {
        $crate::store::compose::composed!(@resume $k ["
       UPDATE sync_cursors SET cursor = ", $cursor, ", fence = ", $fence, ", run_id = ", $run, ",
              updated_at = now()
       WHERE ", fence_held!(sync: $sync, fence: $fence),
        ])
    };
}
pub(crate) use move_cursor;

/// Moves the cursor alone, only if `fence` is still the newest issued: a run
/// whose lease was taken over (or whose cursor was reset) cannot write.
/// Returns whether the write happened. (A clean page moves it with the rest of
/// its commit: `checkpoint::record_clean_page`.)
pub async fn checkpoint_cursor(
    pool: &PgPool,
    sync_id: &str,
    cursor: Option<&serde_json::Value>,
    fence: i64,
    run_id: i64,
) -> sqlx::Result<bool> {
    let written = composed!(query [
        move_cursor!(sync: "$1", cursor: "$2", fence: "$3", run: "$4"),
    ], sync_id, cursor.map(Json) as _, fence, run_id)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(written == 1)
}
