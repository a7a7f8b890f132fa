//! `[notify]` events (migration 0033): written when a run finishes,
//! delivered and retried by the sweeper.

use sqlx::PgPool;

/// Keeps `event` for delivery if the run's sync has a `[notify]` table.
pub async fn enqueue(
    pool: &PgPool,
    run_id: i64,
    sync_id: &str,
    event: &serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO run_notifications (run_id, sync_id, event)
         SELECT $1, $2, $3 WHERE EXISTS (
           SELECT 1 FROM syncs WHERE id = $2 AND definition ? 'notify')",
        run_id,
        sync_id,
        sqlx::types::Json(event) as _,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// An event due for (another) delivery attempt.
#[derive(Debug, Clone)]
pub struct DueEvent {
    pub id: i64,
    pub run_id: i64,
    pub sync_id: String,
    pub event: sqlx::types::Json<serde_json::Value>,
    /// Attempts made, this one included.
    pub attempts: i32,
}

/// Takes up to `limit` due events, each held away from other daemons for
/// `hold` while this one tries it.
pub async fn take_due(
    pool: &PgPool,
    limit: i64,
    hold: std::time::Duration,
) -> sqlx::Result<Vec<DueEvent>> {
    let hold_s = hold.as_secs_f64();
    sqlx::query_as!(
        DueEvent,
        r#"UPDATE run_notifications n
           SET attempts = n.attempts + 1, next_at = now() + make_interval(secs => $2)
           WHERE n.id IN (SELECT id FROM run_notifications
                          WHERE delivered_at IS NULL AND next_at <= now()
                          ORDER BY next_at LIMIT $1 FOR UPDATE SKIP LOCKED)
           RETURNING n.id, n.run_id, n.sync_id, n.event AS "event: _", n.attempts"#,
        limit,
        hold_s,
    )
    .fetch_all(pool)
    .await
}

/// The event arrived.
pub async fn delivered(pool: &PgPool, id: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE run_notifications SET delivered_at = now(), last_error = NULL WHERE id = $1",
        id
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The attempt failed (`error`); the next one is due after `wait`.
pub async fn failed(
    pool: &PgPool,
    id: i64,
    error: &str,
    wait: std::time::Duration,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE run_notifications SET last_error = $2, next_at = now() + make_interval(secs => $3)
         WHERE id = $1",
        id,
        error,
        wait.as_secs_f64(),
    )
    .execute(pool)
    .await?;
    Ok(())
}
