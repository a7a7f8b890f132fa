//! Dead-man queries: who is active, what ran, and the incidents opened.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{FromRow, PgPool};

/// An active sync with what the dead-man check needs.
#[derive(Debug, Clone)]
pub struct ActiveSync {
    pub id: String,
    pub workspace_id: String,
    pub activated_at: Option<DateTime<Utc>>,
    /// The sync file's `silence_window`, as humantime text, if set.
    pub silence_window: Option<String>,
}

pub async fn active_syncs(pool: &PgPool) -> sqlx::Result<Vec<ActiveSync>> {
    sqlx::query_as!(
        ActiveSync,
        "SELECT id, workspace_id, activated_at, definition->>'silence_window' AS silence_window
         FROM syncs WHERE status = 'active' ORDER BY workspace_id, id",
    )
    .fetch_all(pool)
    .await
}

/// Runs finished within `window` (succeeded, all finished) of a workspace, or
/// of one sync when `sync_id` is given.
pub async fn activity(
    pool: &PgPool,
    workspace_id: &str,
    sync_id: Option<&str>,
    window: std::time::Duration,
) -> sqlx::Result<(i64, i64)> {
    let row = sqlx::query!(
        r#"SELECT count(*) FILTER (WHERE status = 'succeeded') AS "succeeded!", count(*) AS "finished!"
           FROM runs
           WHERE workspace_id = $1 AND ($2::text IS NULL OR sync_id = $2)
             AND status IN ('succeeded', 'failed') AND finished_at > now() - make_interval(secs => $3)"#,
        workspace_id,
        sync_id,
        window.as_secs_f64(),
    )
    .fetch_one(pool)
    .await?;
    Ok((row.succeeded, row.finished))
}

/// Opens an incident; `None` when one is already open for the target.
pub async fn open_incident(
    pool: &PgPool,
    workspace_id: &str,
    sync_id: Option<&str>,
    silence: &str,
    runs_seen: i64,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "INSERT INTO deadman_incidents (scope, workspace_id, sync_id, silence, runs_seen)
         VALUES (CASE WHEN $2::text IS NULL THEN 'workspace' ELSE 'sync' END, $1, $2, $3, $4)
         ON CONFLICT (scope, workspace_id, coalesce(sync_id, '')) WHERE closed_at IS NULL DO NOTHING
         RETURNING id",
        workspace_id,
        sync_id,
        silence,
        runs_seen,
    )
    .fetch_optional(pool)
    .await
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, FromRow)]
pub struct IncidentRow {
    pub id: i64,
    pub scope: String,
    pub workspace_id: String,
    pub sync_id: Option<String>,
    pub silence: String,
    pub runs_seen: i64,
    pub opened_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
}

/// Open incidents touching a sync (its own and its workspace's).
pub async fn open_incidents_for_sync(
    pool: &PgPool,
    sync_id: &str,
) -> sqlx::Result<Vec<IncidentRow>> {
    sqlx::query_as!(
        IncidentRow,
        "SELECT i.id, i.scope, i.workspace_id, i.sync_id, i.silence, i.runs_seen, i.opened_at,
                i.closed_at
         FROM deadman_incidents i JOIN syncs s ON s.id = $1
         WHERE i.closed_at IS NULL AND i.workspace_id = s.workspace_id AND (i.scope = 'workspace' OR i.sync_id = $1)
         ORDER BY i.id",
        sync_id,
    )
    .fetch_all(pool)
    .await
}

pub async fn open_incident_count(pool: &PgPool) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "open!" FROM deadman_incidents WHERE closed_at IS NULL"#
    )
    .fetch_one(pool)
    .await
}

/// Every open incident, oldest first (for `syncward status`).
pub async fn open_incidents(pool: &PgPool) -> sqlx::Result<Vec<IncidentRow>> {
    sqlx::query_as!(
        IncidentRow,
        "SELECT id, scope, workspace_id, sync_id, silence, runs_seen, opened_at, closed_at
         FROM deadman_incidents WHERE closed_at IS NULL ORDER BY opened_at, id",
    )
    .fetch_all(pool)
    .await
}
