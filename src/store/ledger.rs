//! The delivery ledger: one row per delivery key, claimed `pending` before the
//! destination is called and `completed` with its answer after. Every
//! statement takes a whole batch of keys: never one query per record. Keys
//! sent in one bulk call are claimed with a batch row (`delivery_batches`) that
//! the call's answer completes as a whole; `delivery_states` reads both.

use std::time::Duration;

use sqlx::types::Json;
use sqlx::{FromRow, PgPool};

/// A key's state in the ledger.
#[derive(Debug, Clone, FromRow)]
pub struct LedgerEntry {
    pub key: Vec<u8>,
    pub status: String,
    pub attempts: i32,
}

/// The ledger rows of these keys (absent keys are simply missing).
pub async fn lookup_keys(
    pool: &PgPool,
    sync_id: &str,
    keys: &[Vec<u8>],
) -> sqlx::Result<Vec<LedgerEntry>> {
    // An empty page (the end of the source) costs no round trip.
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    // One index probe per key: the key leads the primary key, and the planner
    // takes unnest() for a few rows, so it probes rather than scans. (Led by
    // the sync, a new sync's missing statistics made it scan every key of the
    // sync for each page; `key = ANY(...)` made it scan the whole table while
    // the ledger was small.)
    //
    // The page's keys share a batch or two: their completion is looked up once
    // per batch (a hashed subplan), not once per key as a join would.
    sqlx::query_as::<_, LedgerEntry>(
        "WITH d AS MATERIALIZED (
           SELECT d.key, d.status, d.attempts, d.batch_id
           FROM unnest($2::bytea[]) AS k(key)
           JOIN deliveries d ON d.key = k.key AND d.sync_id = $1),
         done AS MATERIALIZED (
           SELECT id FROM delivery_batches
           WHERE id IN (SELECT DISTINCT batch_id FROM d) AND completed_at IS NOT NULL)
         SELECT key,
                CASE WHEN status = 'completed' OR batch_id IN (SELECT id FROM done)
                     THEN 'completed' ELSE 'pending' END AS status,
                attempts
         FROM d",
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
    /// (this one included), and the batch they were claimed in, if one was
    /// asked for. Keys completed meanwhile are left out.
    Claimed {
        keys: Vec<(Vec<u8>, i32)>,
        batch: Option<i64>,
    },
    /// A newer fence was issued: this run no longer owns the sync.
    Fenced,
}

/// A claimed key and its attempts, or (no key) the fence check's row with the
/// new batch.
type ClaimRow = (Option<Vec<u8>>, Option<i32>, Option<i64>);

/// Claims keys as `pending` for a run, spending one attempt of each, in one
/// statement that first checks the run's fence is still the newest. `fresh`
/// keys were absent from the ledger: they are inserted with one attempt spent
/// (a plain insert, a third of the cost of an upsert). `again` keys were found
/// `pending` (left by a dead run): their attempts grow by one. A key that was
/// completed meanwhile is left out; a fresh key that someone else inserted
/// meanwhile means another run wrote under this sync: `Fenced`. With
/// `as_batch` the keys are claimed in a new batch, for `complete_batch`.
pub async fn claim_keys(
    pool: &PgPool,
    sync_id: &str,
    fresh: &[Vec<u8>],
    again: &[Vec<u8>],
    run_id: i64,
    fence: i64,
    as_batch: bool,
) -> sqlx::Result<Claim> {
    // FOR SHARE holds off a new fence until this claim commits. The last
    // branch yields one row with no key (and the batch) when the fence is
    // still ours.
    let rows: Result<Vec<ClaimRow>, sqlx::Error> =
        sqlx::query_as(
            "WITH f AS (
               SELECT 1 FROM sync_cursors WHERE sync_id = $1 AND fence_issued = $4 FOR SHARE),
             b AS (
               INSERT INTO delivery_batches (sync_id, run_id, keys)
               SELECT $1, $3, $2::bytea[] || $5::bytea[] FROM f WHERE $6
               RETURNING id),
             fresh AS (
               INSERT INTO deliveries (sync_id, key, status, attempts, run_id, fence, batch_id)
               SELECT $1, k, 'pending', 1, $3, $4, (SELECT id FROM b) FROM f, unnest($2::bytea[]) AS k
               RETURNING key, attempts),
             again AS (
               UPDATE deliveries d SET attempts = d.attempts + 1, run_id = $3, fence = $4,
                      claimed_at = now(), batch_id = (SELECT id FROM b)
               FROM f WHERE d.sync_id = $1 AND d.key = ANY($5::bytea[]) AND d.status = 'pending'
                 AND NOT EXISTS (SELECT 1 FROM delivery_batches done
                                 WHERE done.id = d.batch_id AND done.completed_at IS NOT NULL)
               RETURNING d.key, d.attempts)
             SELECT key, attempts, NULL::bigint FROM fresh
             UNION ALL SELECT key, attempts, NULL FROM again
             UNION ALL SELECT NULL, NULL, (SELECT id FROM b) FROM f",
        )
        .bind(sync_id)
        .bind(fresh)
        .bind(run_id)
        .bind(fence)
        .bind(again)
        .bind(as_batch)
        .fetch_all(pool)
        .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(Claim::Fenced),
        Err(e) => return Err(e),
    };
    let Some(batch) = rows
        .iter()
        .find(|(key, _, _)| key.is_none())
        .map(|row| row.2)
    else {
        return Ok(Claim::Fenced);
    };
    Ok(Claim::Claimed {
        keys: rows
            .into_iter()
            .filter_map(|(key, attempts, _)| Some((key?, attempts?)))
            .collect(),
        batch,
    })
}

/// A Brevo import a batch started, for the sweeper to follow up
/// (`store::imports`).
#[derive(Debug, Clone, Copy)]
pub struct ImportToFollow<'a> {
    pub sync_id: &'a str,
    pub run_id: i64,
    pub process_id: i64,
    pub records: i32,
}

/// Completes every key still claimed in `batch` with one answer: one row;
/// with the import the answer names, recorded in the same statement.
pub async fn complete_batch(
    pool: &PgPool,
    batch: i64,
    result: &serde_json::Value,
    import: Option<ImportToFollow<'_>>,
) -> sqlx::Result<()> {
    sqlx::query(
        "WITH done AS (
           UPDATE delivery_batches SET result = $2, completed_at = now() WHERE id = $1)
         INSERT INTO import_processes (sync_id, run_id, process_id, records)
         SELECT $3, $4, $5, $6 WHERE $5 IS NOT NULL
         ON CONFLICT (sync_id, process_id) DO NOTHING",
    )
    .bind(batch)
    .bind(Json(result))
    .bind(import.map(|i| i.sync_id))
    .bind(import.map(|i| i.run_id))
    .bind(import.map(|i| i.process_id))
    .bind(import.map(|i| i.records))
    .execute(pool)
    .await?;
    Ok(())
}

/// Marks keys `completed` with the destination's answer for each.
pub async fn complete_keys(
    pool: &PgPool,
    sync_id: &str,
    keys: &[Vec<u8>],
    results: &[serde_json::Value],
) -> sqlx::Result<u64> {
    // One answer for all (a bulk import's process, a webhook batch): no join.
    // The join below pairs keys and answers one by one, which is quadratic
    // when the planner underestimates a new sync's rows; it only ever sees the
    // small batches of per-record destinations.
    if let Some(first) = results.first()
        && results.iter().all(|r| r == first)
    {
        return Ok(sqlx::query(
            "UPDATE deliveries SET status = 'completed', result = $3, completed_at = now()
             WHERE sync_id = $1 AND key = ANY($2::bytea[]) AND status = 'pending'",
        )
        .bind(sync_id)
        .bind(keys)
        .bind(Json(first))
        .execute(pool)
        .await?
        .rows_affected());
    }
    let results: Vec<Json<&serde_json::Value>> = results.iter().map(Json).collect();
    Ok(sqlx::query(
        "UPDATE deliveries d SET status = 'completed', result = r.result, completed_at = now()
         FROM unnest($2::bytea[], $3::jsonb[]) AS r(key, result)
         WHERE d.sync_id = $1 AND d.key = ANY($2::bytea[]) AND d.key = r.key AND d.status = 'pending'",
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

/// Deletes completed keys older than `retention`, `batch` keys per statement
/// so no statement holds locks for long (a completed bulk batch goes whole).
/// Batches never completed (their call failed) go too once that old: their
/// keys stay, `pending`. Returns how many keys went.
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
            break;
        }
    }
    loop {
        let (found, deleted): (bool, i64) = sqlx::query_as(
            "WITH b AS (
               DELETE FROM delivery_batches WHERE id = (
                 SELECT id FROM delivery_batches
                 WHERE completed_at < now() - make_interval(secs => $1)
                 ORDER BY completed_at LIMIT 1)
               RETURNING id, sync_id, keys),
             k AS (
               DELETE FROM deliveries d USING b
               WHERE d.sync_id = b.sync_id AND d.key = ANY(b.keys) AND d.batch_id = b.id
               RETURNING 1)
             SELECT EXISTS (SELECT 1 FROM b), (SELECT count(*) FROM k)",
        )
        .bind(seconds)
        .fetch_one(pool)
        .await?;
        total += u64::try_from(deleted).unwrap_or(0);
        if !found {
            break;
        }
    }
    sqlx::query(
        "DELETE FROM delivery_batches
         WHERE completed_at IS NULL AND created_at < now() - make_interval(secs => $1)",
    )
    .bind(seconds)
    .execute(pool)
    .await?;
    Ok(total)
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
