//! Purging history past `retention.*`: finished runs (with their timeline,
//! rejected records and import processes, by cascade), alerts and audit
//! rows. Kept whatever their age: each sync's newest finished run (its
//! last outcome and last success), the run a sync's cursor names, and runs
//! holding records not yet put back (quarantined or rejected: deleting them
//! would lose track of records never delivered). One statement per table,
//! in batches, so no statement holds locks for long.

use std::time::Duration;

use sqlx::PgPool;

/// What a purge deleted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct HistoryPurged {
    pub runs: u64,
    pub alerts: u64,
    pub audit_rows: u64,
}

/// How long each kind of history is kept.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    pub runs: Duration,
    pub alerts: Duration,
    pub audit_log: Duration,
}

/// Deletes history older than its retention, `batch` rows per statement.
pub async fn purge_history(
    pool: &PgPool,
    retention: Retention,
    batch: i64,
) -> sqlx::Result<HistoryPurged> {
    let runs = delete_in_batches(
        pool,
        "DELETE FROM runs WHERE id IN (
           SELECT r.id FROM runs r
           WHERE r.status IN ('succeeded', 'failed', 'skipped')
             AND r.finished_at < now() - make_interval(secs => $1)
             AND r.id <> (SELECT max(n.id) FROM runs n
                          WHERE n.sync_id = r.sync_id
                            AND n.status IN ('succeeded', 'failed', 'skipped'))
             AND NOT EXISTS (SELECT 1 FROM sync_cursors c WHERE c.run_id = r.id)
             AND NOT EXISTS (SELECT 1 FROM rejected_records x
                             WHERE x.run_id = r.id AND x.put_back_at IS NULL)
           LIMIT $2)",
        retention.runs,
        batch,
    )
    .await?;
    let mut purged = HistoryPurged {
        runs,
        ..HistoryPurged::default()
    };
    for (table, counter, kept) in [
        ("alerts", &mut purged.alerts, retention.alerts),
        ("audit_log", &mut purged.audit_rows, retention.audit_log),
    ] {
        // Table names from the list above, not from input.
        let sql = format!(
            "DELETE FROM {table} WHERE id IN (
               SELECT id FROM {table} WHERE at < now() - make_interval(secs => $1) LIMIT $2)"
        );
        *counter = delete_in_batches(pool, &sql, kept, batch).await?;
    }
    Ok(purged)
}

/// Runs `sql`, a `DELETE` of at most `$2` rows older than `$1` seconds, until
/// it deletes fewer than `batch`: many short statements, so none holds locks
/// on a busy table for long. Returns how many rows went.
pub(super) async fn delete_in_batches(
    pool: &PgPool,
    sql: &str,
    older_than: Duration,
    batch: i64,
) -> sqlx::Result<u64> {
    let seconds = older_than.as_secs_f64();
    let mut total = 0;
    loop {
        let deleted = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(seconds)
            .bind(batch)
            .execute(pool)
            .await?
            .rows_affected();
        total += deleted;
        if deleted < u64::try_from(batch).unwrap_or(u64::MAX) {
            return Ok(total);
        }
    }
}
