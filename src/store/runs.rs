//! Runs: the queue and the history.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::types::Json;
use sqlx::{FromRow, PgPool};

/// A run as stored.
#[derive(Debug, Clone, Serialize, FromRow)]
pub struct RunRow {
    pub id: i64,
    pub sync_id: String,
    pub workspace_id: String,
    pub sync_version: i32,
    pub status: String,
    pub trigger: String,
    pub attempt: i32,
    pub max_attempts: i32,
    pub created_at: DateTime<Utc>,
    pub scheduled_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    pub worker_id: Option<String>,
    pub boot_id: Option<uuid::Uuid>,
    #[serde(skip)]
    pub lease_token: Option<String>,
    pub fence: Option<i64>,
    pub cursor_start: Option<Json<serde_json::Value>>,
    pub cursor_end: Option<Json<serde_json::Value>>,
    pub records_read: i64,
    pub records_written: i64,
    pub records_replayed: i64,
    pub records_rejected: i64,
    pub records_resent: i64,
    pub failure_code: Option<String>,
    pub failure_detail: Option<String>,
}

/// One entry of a run's timeline.
#[derive(Debug, Clone, Serialize, FromRow)]
pub struct RunEventRow {
    pub id: i64,
    pub run_id: i64,
    pub at: DateTime<Utc>,
    pub kind: String,
    pub detail: Json<serde_json::Value>,
}

/// Newest runs first, of one sync or of all.
pub async fn list_runs(
    pool: &PgPool,
    sync_id: Option<&str>,
    limit: i64,
) -> sqlx::Result<Vec<RunRow>> {
    sqlx::query_as::<_, RunRow>(
        "SELECT * FROM runs WHERE ($1::text IS NULL OR sync_id = $1) ORDER BY id DESC LIMIT $2",
    )
    .bind(sync_id)
    .bind(limit)
    .fetch_all(pool)
    .await
}

pub async fn get_run(pool: &PgPool, id: i64) -> sqlx::Result<Option<RunRow>> {
    sqlx::query_as::<_, RunRow>("SELECT * FROM runs WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await
}

pub async fn list_run_events(pool: &PgPool, run_id: i64) -> sqlx::Result<Vec<RunEventRow>> {
    sqlx::query_as::<_, RunEventRow>("SELECT * FROM run_events WHERE run_id = $1 ORDER BY id")
        .bind(run_id)
        .fetch_all(pool)
        .await
}
