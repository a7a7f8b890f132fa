//! The delivery ledger: one row per delivery key, claimed `pending` before the
//! destination is called and `completed` with its answer after. Every
//! statement takes a whole batch of keys: never one query per record.

use std::time::Duration;

use sqlx::types::Json;
use sqlx::{FromRow, PgPool};

/// A key's state in the ledger.
#[derive(Debug, Clone, FromRow)]
pub struct LedgerEntry {
    pub key: Vec<u8>,
    pub status: String,
    pub attempts: i32,
    pub result: Option<Json<serde_json::Value>>,
}

/// The ledger rows of these keys (absent keys are simply missing).
pub async fn lookup_keys(
    pool: &PgPool,
    sync_id: &str,
    keys: &[Vec<u8>],
) -> sqlx::Result<Vec<LedgerEntry>> {
    sqlx::query_as::<_, LedgerEntry>(
        "SELECT d.key, d.status, d.attempts, d.result
         FROM unnest($2::bytea[]) AS k(key) JOIN deliveries d ON d.sync_id = $1 AND d.key = k.key",
    )
    .bind(sync_id)
    .bind(keys)
    .fetch_all(pool)
    .await
}

/// What a claim did.
#[derive(Debug)]
pub enum Claim {
    /// Keys now `pending` for this run, with the attempts each has spent
    /// (this one included). Keys completed meanwhile are left out.
    Claimed(Vec<(Vec<u8>, i32)>),
    /// A newer fence was issued: this run no longer owns the sync.
    Fenced,
}

/// Claims keys as `pending` for a run, spending one attempt of each (new keys
/// start at 1, pending ones grow by 1), in one transaction that first checks
/// the run's fence is still the newest.
pub async fn claim_keys(
    pool: &PgPool,
    sync_id: &str,
    keys: &[Vec<u8>],
    run_id: i64,
    fence: i64,
) -> sqlx::Result<Claim> {
    let mut tx = pool.begin().await?;
    // FOR SHARE holds off a new fence until this claim commits.
    let newest: Option<i64> =
        sqlx::query_scalar("SELECT fence_issued FROM sync_cursors WHERE sync_id = $1 FOR SHARE")
            .bind(sync_id)
            .fetch_optional(&mut *tx)
            .await?;
    if newest != Some(fence) {
        return Ok(Claim::Fenced);
    }
    let claimed: Vec<(Vec<u8>, i32)> = sqlx::query_as(
        "INSERT INTO deliveries (sync_id, key, status, attempts, run_id, fence)
         SELECT $1, k, 'pending', 1, $3, $4 FROM unnest($2::bytea[]) AS k
         ON CONFLICT (sync_id, key) DO UPDATE
           SET attempts = deliveries.attempts + 1, run_id = EXCLUDED.run_id,
               fence = EXCLUDED.fence, claimed_at = now()
           WHERE deliveries.status = 'pending'
         RETURNING key, attempts",
    )
    .bind(sync_id)
    .bind(keys)
    .bind(run_id)
    .bind(fence)
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Claim::Claimed(claimed))
}

/// Marks keys `completed` with the destination's answer for each.
pub async fn complete_keys(
    pool: &PgPool,
    sync_id: &str,
    keys: &[Vec<u8>],
    results: &[serde_json::Value],
) -> sqlx::Result<u64> {
    let results: Vec<Json<&serde_json::Value>> = results.iter().map(Json).collect();
    Ok(sqlx::query(
        "UPDATE deliveries d SET status = 'completed', result = r.result, completed_at = now()
         FROM unnest($2::bytea[], $3::jsonb[]) AS r(key, result)
         WHERE d.sync_id = $1 AND d.key = r.key AND d.status = 'pending'",
    )
    .bind(sync_id)
    .bind(keys)
    .bind(results)
    .execute(pool)
    .await?
    .rows_affected())
}

/// Forgets pending keys whose records the destination refused for good: nothing
/// was written, so a later replay (after a mapping fix, say) may send them.
pub async fn release_keys(pool: &PgPool, sync_id: &str, keys: &[Vec<u8>]) -> sqlx::Result<u64> {
    Ok(sqlx::query(
        "DELETE FROM deliveries WHERE sync_id = $1 AND key = ANY($2) AND status = 'pending'",
    )
    .bind(sync_id)
    .bind(keys)
    .execute(pool)
    .await?
    .rows_affected())
}

/// Deletes completed keys older than `retention`, `batch` rows per statement so
/// no statement holds locks for long. Returns how many went.
pub async fn purge_completed(pool: &PgPool, retention: Duration, batch: i64) -> sqlx::Result<u64> {
    let seconds = retention.as_secs_f64();
    let mut total = 0;
    loop {
        let deleted = sqlx::query(
            "DELETE FROM deliveries WHERE ctid IN (
               SELECT ctid FROM deliveries
               WHERE status = 'completed' AND completed_at < now() - make_interval(secs => $1)
               LIMIT $2)",
        )
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

/// One record the destination refused (or that ran out of attempts).
#[derive(Debug, Clone)]
pub struct Rejection {
    pub key: Option<Vec<u8>>,
    pub email: Option<String>,
    pub code: String,
    pub message: String,
}

/// Keeps rejected records of a run, in one statement.
pub async fn record_rejections(
    pool: &PgPool,
    run_id: i64,
    sync_id: &str,
    rejections: &[Rejection],
) -> sqlx::Result<()> {
    if rejections.is_empty() {
        return Ok(());
    }
    let keys: Vec<Option<Vec<u8>>> = rejections.iter().map(|r| r.key.clone()).collect();
    let emails: Vec<Option<String>> = rejections.iter().map(|r| r.email.clone()).collect();
    let codes: Vec<&str> = rejections.iter().map(|r| r.code.as_str()).collect();
    let messages: Vec<&str> = rejections.iter().map(|r| r.message.as_str()).collect();
    sqlx::query(
        "INSERT INTO rejected_records (run_id, sync_id, key, email, code, message)
         SELECT $1, $2, k, e, c, m FROM unnest($3::bytea[], $4::text[], $5::text[], $6::text[]) AS r(k, e, c, m)",
    )
    .bind(run_id)
    .bind(sync_id)
    .bind(keys)
    .bind(emails)
    .bind(codes)
    .bind(messages)
    .execute(pool)
    .await?;
    Ok(())
}

/// A stored rejected record.
#[derive(Debug, Clone, serde::Serialize, FromRow)]
pub struct RejectedRow {
    pub id: i64,
    pub run_id: i64,
    #[serde(serialize_with = "hex_key")]
    pub key: Option<Vec<u8>>,
    pub email: Option<String>,
    pub code: String,
    pub message: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

fn hex_key<S: serde::Serializer>(key: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    match key {
        Some(k) => s.serialize_str(&hex::encode(k)),
        None => s.serialize_none(),
    }
}

pub async fn list_rejections(
    pool: &PgPool,
    run_id: i64,
    limit: i64,
) -> sqlx::Result<Vec<RejectedRow>> {
    sqlx::query_as::<_, RejectedRow>(
        "SELECT * FROM rejected_records WHERE run_id = $1 ORDER BY id LIMIT $2",
    )
    .bind(run_id)
    .bind(limit)
    .fetch_all(pool)
    .await
}
