//! The durable schedule: which active syncs are due, and the one statement per
//! tick that advances their due times and enqueues their runs together.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

/// An active sync whose due time has come (or which is not yet armed).
#[derive(Debug, Clone)]
pub struct DueSync {
    pub id: String,
    pub workspace_id: String,
    pub version: i32,
    /// `None`: not armed yet (new, re-scheduled or resumed).
    pub next_due_at: Option<DateTime<Utc>>,
    /// The definition's `schedule`, `timezone` and `catch_up`, as stored.
    pub schedule: Option<String>,
    pub timezone: Option<String>,
    pub catch_up: Option<String>,
}

/// Locks up to `limit` due or unarmed active syncs, oldest due first, skipping
/// rows another daemon's tick holds, so several daemons split one busy second
/// between them instead of queueing on the same rows.
pub async fn lock_due_syncs(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<DueSync>> {
    sqlx::query_as!(
        DueSync,
        "SELECT d.sync_id AS id, s.workspace_id, s.version, nullif(d.next_due_at, '-infinity') AS next_due_at,
                s.definition->>'schedule' AS schedule, s.definition->>'timezone' AS timezone,
                s.definition->>'catch_up' AS catch_up
         FROM sync_schedule d JOIN syncs s ON s.id = d.sync_id
         WHERE d.next_due_at <= now() AND s.status = 'active'
         ORDER BY d.next_due_at
         LIMIT $1
         FOR UPDATE OF d SKIP LOCKED",
        limit,
    )
    .fetch_all(conn)
    .await
}

/// One sync's step of a tick: its new due time, and whether a run is enqueued.
#[derive(Debug, Clone)]
pub struct Advance {
    pub sync_id: String,
    pub workspace_id: String,
    pub version: i32,
    /// The due time the tick read; the row advances only if it still holds it.
    pub seen: Option<DateTime<Utc>>,
    pub next: DateTime<Utc>,
    pub enqueue: bool,
}

/// What the tick's statement did to one sync.
#[derive(Debug, Clone)]
pub struct Advanced {
    pub sync_id: String,
    /// A new queued run was inserted (false when one was already queued, or
    /// none was asked for).
    pub enqueued: bool,
}

/// Touches `sync_schedule` and `runs` in one statement: each sync's due time moves to
/// its next time, and a run is enqueued for each that asked, so a due time is
/// never advanced without its run nor a run enqueued twice for one tick. A
/// sync already holding a queued run gets no second one. Returns the syncs
/// advanced (a row another tick advanced first is left out).
pub async fn advance_and_enqueue(
    conn: &mut PgConnection,
    steps: &[Advance],
    max_attempts: i32,
) -> sqlx::Result<Vec<Advanced>> {
    if steps.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = steps.iter().map(|s| s.sync_id.as_str()).collect();
    let seen: Vec<Option<DateTime<Utc>>> = steps.iter().map(|s| s.seen).collect();
    let next: Vec<DateTime<Utc>> = steps.iter().map(|s| s.next).collect();
    let enqueue: Vec<bool> = steps.iter().map(|s| s.enqueue).collect();
    let workspaces: Vec<&str> = steps.iter().map(|s| s.workspace_id.as_str()).collect();
    let versions: Vec<i32> = steps.iter().map(|s| s.version).collect();
    // The sync's workspace and version come from the lock's read, in this
    // transaction: the statement touches no `syncs` row.
    sqlx::query_as!(
        Advanced,
        r#"WITH step AS (
           SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::bool[],
                                $6::text[], $7::int[])
                         AS t(id, seen, next, enqueue, workspace_id, version)),
         advanced AS (
           UPDATE sync_schedule d SET next_due_at = step.next
           FROM step
           WHERE d.sync_id = step.id AND d.next_due_at = coalesce(step.seen, '-infinity')
           RETURNING step.id, step.workspace_id, step.version, step.enqueue),
         enqueued AS (
           INSERT INTO runs (sync_id, workspace_id, sync_version, trigger, max_attempts)
           SELECT id, workspace_id, version, 'schedule', $5 FROM advanced WHERE enqueue
           ON CONFLICT (sync_id) WHERE status = 'queued' AND sync_id IS NOT NULL DO NOTHING
           RETURNING sync_id)
         SELECT advanced.id AS "sync_id!", enqueued.sync_id IS NOT NULL AS "enqueued!"
         FROM advanced LEFT JOIN enqueued ON enqueued.sync_id = advanced.id"#,
        &ids as _,
        &seen as _,
        &next,
        &enqueue,
        max_attempts,
        &workspaces as _,
        &versions,
    )
    .fetch_all(conn)
    .await
}
