//! Brevo import processes a run started, until the sweeper has seen each end.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::types::Json;
use sqlx::{FromRow, PgPool};

use crate::states::ImportStatus;

#[derive(Debug, Clone, Serialize, FromRow)]
pub struct ImportProcessRow {
    pub id: i64,
    pub sync_id: String,
    pub run_id: i64,
    pub process_id: i64,
    pub records: i32,
    pub status: ImportStatus,
    pub counts: Option<Json<serde_json::Value>>,
    pub error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub checked_at: Option<DateTime<Utc>>,
    pub checks: i32,
    /// A completed import's `info.import.invalid_emails`: contacts Brevo did
    /// not import.
    pub invalid_emails: Option<i32>,
}

/// Keeps the imports of one page: `(process id, records it carried)`.
pub async fn record_import_processes(
    pool: &PgPool,
    sync_id: &str,
    run_id: i64,
    processes: &[(i64, i32)],
) -> sqlx::Result<()> {
    let ids: Vec<i64> = processes.iter().map(|p| p.0).collect();
    let records: Vec<i32> = processes.iter().map(|p| p.1).collect();
    sqlx::query!(
        "INSERT INTO import_processes (sync_id, run_id, process_id, records)
         SELECT $1, $2, p, r FROM unnest($3::bigint[], $4::int[]) AS t(p, r)
         ON CONFLICT (sync_id, process_id) DO NOTHING",
        sync_id,
        run_id,
        &ids,
        &records,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Pending imports last looked at (or started) more than `after` ago, oldest first.
pub async fn due_import_processes(
    pool: &PgPool,
    after: std::time::Duration,
    limit: i64,
) -> sqlx::Result<Vec<ImportProcessRow>> {
    sqlx::query_as!(
        ImportProcessRow,
        r#"SELECT id, sync_id, run_id, process_id, records, status AS "status: ImportStatus",
                  counts AS "counts: Json<serde_json::Value>", error, created_at, checked_at,
                  checks, invalid_emails
           FROM import_processes
           WHERE status = 'pending' AND coalesce(checked_at, created_at) < now() - make_interval(secs => $1)
           ORDER BY coalesce(checked_at, created_at) LIMIT $2"#,
        after.as_secs_f64(),
        limit,
    )
    .fetch_all(pool)
    .await
}

/// Notes a check that found the import still running.
pub async fn mark_import_checked(pool: &PgPool, id: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE import_processes SET checked_at = now(), checks = checks + 1 WHERE id = $1",
        id,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Records how an import ended, on the run it belongs to, in one
/// transaction. A `failed`, `cancelled` or `unknown` (Brevo no longer knows
/// it, or it never finished within the checks allowed) import is a rejected page: a
/// rejected-records row, the run's rejected count, and its delivery keys taken
/// out of the ledger (nothing arrived, so a replay sends them again).
pub async fn finish_import_process(
    pool: &PgPool,
    process: &ImportProcessRow,
    status: ImportStatus,
    counts: Option<&serde_json::Value>,
    error: Option<&str>,
) -> sqlx::Result<bool> {
    let invalid = invalid_emails(counts);
    let mut tx = pool.begin().await?;
    let ended = sqlx::query!(
        "UPDATE import_processes SET status = $2, counts = $3, error = $4, invalid_emails = $5,
                checked_at = now(), checks = checks + 1
         WHERE id = $1 AND status = 'pending'",
        process.id,
        status as _,
        counts.map(Json) as _,
        error,
        invalid,
    )
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if !ended {
        return Ok(false);
    }
    let detail = serde_json::json!({
        "process_id": process.process_id, "status": status, "records": process.records,
        "counts": counts, "error": error,
    });
    sqlx::query!(
        "INSERT INTO run_events (run_id, kind, detail) VALUES ($1, 'import_outcome', $2)",
        process.run_id,
        Json(&detail) as _,
    )
    .execute(&mut *tx)
    .await?;
    if status == ImportStatus::Completed {
        // Brevo's report counts the rows it skipped but does not name them:
        // one row per count with its code, and the run's rejected count
        // grows by each.
        for (what, n) in skipped_rows(counts) {
            let message = format!(
                "Brevo import process {} completed, but {n} of the {} contacts it carried were \
                 not imported ({}; Brevo's report does not say which)",
                process.process_id,
                process.records,
                skipped_reason(&what),
            );
            reject_carried(&mut tx, process, format!("import_{what}"), message, n).await?;
        }
    }
    if status != ImportStatus::Completed {
        let message = if status == ImportStatus::Unknown {
            format!(
                "Brevo import process {}: outcome unknown{}: whether the {} records it carried \
                 arrived cannot be learned; they leave the ledger, so a cursor reset and a new \
                 run send them again (Brevo writes are upserts)",
                process.process_id,
                error.map(|e| format!(" ({e})")).unwrap_or_default(),
                process.records
            )
        } else {
            format!(
                "Brevo import process {} ended {status}{}: the {} records it carried did not arrive",
                process.process_id,
                error.map(|e| format!(" ({e})")).unwrap_or_default(),
                process.records
            )
        };
        let code = format!("import_{status}");
        reject_carried(&mut tx, process, code, message, i64::from(process.records)).await?;
        // Its keys leave the ledger, whether completed one by one or as a batch.
        sqlx::query!(
            "WITH b AS (
               DELETE FROM delivery_batches
               WHERE sync_id = $1 AND result @> jsonb_build_object('processId', $2::bigint)
               RETURNING id, sync_id, keys),
             batched AS (
               DELETE FROM deliveries d USING b
               WHERE d.sync_id = b.sync_id AND d.key = ANY(b.keys) AND d.batch_id = b.id)
             DELETE FROM deliveries
             WHERE sync_id = $1 AND result @> jsonb_build_object('processId', $2::bigint)",
            &process.sync_id,
            process.process_id,
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(true)
}

/// Counts `records` the import carried as rejected on its run, kept as one
/// rejected-records row under `code` (with no key: Brevo does not say which).
async fn reject_carried(
    tx: &mut sqlx::PgConnection,
    process: &ImportProcessRow,
    code: String,
    message: String,
    records: i64,
) -> sqlx::Result<()> {
    sqlx::query!(
        "WITH kept AS (
           INSERT INTO rejected_records (run_id, sync_id, key, email, code, message)
           VALUES ($1, $2, NULL, NULL, $3, $4))
         UPDATE runs SET records_rejected = records_rejected + $5 WHERE id = $1",
        process.run_id,
        &process.sync_id,
        code,
        message,
        records,
    )
    .execute(tx)
    .await?;
    Ok(())
}

/// The rows a completed import skipped, by Brevo's count name
/// (`info.import`, `getProcess` spec 2026-02): `invalid_emails` and every
/// `duplicate_*` (an identifier that appeared twice), the non-zero ones.
pub fn skipped_rows(counts: Option<&serde_json::Value>) -> Vec<(String, i64)> {
    let Some(counts) = counts.and_then(serde_json::Value::as_object) else {
        return Vec::new();
    };
    counts
        .iter()
        .filter(|(name, _)| *name == "invalid_emails" || name.starts_with("duplicate_"))
        .filter_map(|(name, n)| Some((name.clone(), n.as_i64().filter(|n| *n > 0)?)))
        .collect()
}

/// What a skipped-rows count means, in words.
fn skipped_reason(count: &str) -> String {
    match count {
        "invalid_emails" => "an invalid e-mail address".into(),
        "duplicate_email_id" => "the same e-mail address twice in one import".into(),
        other => match other.strip_prefix("duplicate_") {
            Some(what) => format!("a duplicate {}", what.replace('_', " ")),
            None => other.replace('_', " "),
        },
    }
}

/// `info.import.invalid_emails` of an import's counts, when Brevo gave it.
pub fn invalid_emails(counts: Option<&serde_json::Value>) -> Option<i32> {
    counts?
        .get("invalid_emails")?
        .as_i64()
        .and_then(|n| i32::try_from(n).ok())
}

pub async fn list_import_processes(
    pool: &PgPool,
    run_id: i64,
) -> sqlx::Result<Vec<ImportProcessRow>> {
    sqlx::query_as!(
        ImportProcessRow,
        r#"SELECT id, sync_id, run_id, process_id, records, status AS "status: ImportStatus",
                  counts AS "counts: Json<serde_json::Value>", error, created_at, checked_at,
                  checks, invalid_emails
           FROM import_processes WHERE run_id = $1 ORDER BY id"#,
        run_id,
    )
    .fetch_all(pool)
    .await
}
