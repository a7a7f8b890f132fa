//! Alerts as raised, with the outcome of each channel.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use sqlx::types::Json;

#[derive(Debug, Clone, Serialize)]
pub struct AlertRow {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub kind: String,
    pub severity: String,
    pub workspace_id: Option<String>,
    pub sync_id: Option<String>,
    pub run_id: Option<i64>,
    pub message: String,
    pub failure_code: Option<String>,
    pub owner: Option<String>,
    pub channels: Json<serde_json::Value>,
}

/// What to store about one alert.
#[derive(Debug, Clone)]
pub struct NewAlert<'a> {
    pub kind: &'a str,
    pub severity: &'a str,
    pub workspace_id: Option<&'a str>,
    pub sync_id: Option<&'a str>,
    pub run_id: Option<i64>,
    pub message: &'a str,
    pub failure_code: Option<&'a str>,
    pub owner: Option<&'a str>,
    pub channels: serde_json::Value,
}

pub async fn record_alert(pool: &PgPool, alert: &NewAlert<'_>) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        "INSERT INTO alerts (kind, severity, workspace_id, sync_id, run_id, message, failure_code, owner, channels)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING id",
        alert.kind,
        alert.severity,
        alert.workspace_id,
        alert.sync_id,
        alert.run_id,
        alert.message,
        alert.failure_code,
        alert.owner,
        Json(&alert.channels) as _,
    )
    .fetch_one(pool)
    .await
}

pub async fn list_alerts_for_sync(pool: &PgPool, sync_id: &str) -> sqlx::Result<Vec<AlertRow>> {
    sqlx::query_as!(
        AlertRow,
        r#"SELECT id, at, kind, severity, workspace_id, sync_id, run_id, message, failure_code,
                  owner, channels AS "channels: Json<serde_json::Value>"
           FROM alerts WHERE sync_id = $1 ORDER BY id"#,
        sync_id,
    )
    .fetch_all(pool)
    .await
}
