//! Rejected and quarantined records: what a destination refused for good,
//! and what ran out of its attempt budget, with the page each was read from,
//! until `sync retry-rejected` puts them back.

use sqlx::PgPool;
use sqlx::types::Json;

use super::audit::{Actor, record_audit};
use super::compose::composed;

/// One record the destination refused (or that ran out of attempts).
#[derive(Debug, Clone)]
pub struct Rejection {
    pub key: Option<Vec<u8>>,
    pub email: Option<String>,
    /// Where to find it in the source (`SourceConfig::record_key`).
    pub source_key: Option<crate::source::SourceKey>,
    pub code: String,
    pub message: String,
}

/// Keeps rejected records of a run, read from one page (its ledger id and
/// the cursor it was read from), in one statement.
pub async fn record_rejections(
    pool: &PgPool,
    run_id: i64,
    sync_id: &str,
    (page, page_cursor): (&[u8; 32], Option<&serde_json::Value>),
    rejections: &[Rejection],
) -> sqlx::Result<()> {
    if rejections.is_empty() {
        return Ok(());
    }
    let keys: Vec<Option<Vec<u8>>> = rejections.iter().map(|r| r.key.clone()).collect();
    let emails: Vec<Option<String>> = rejections.iter().map(|r| r.email.clone()).collect();
    let source_keys: Vec<Option<String>> = rejections
        .iter()
        .map(|r| r.source_key.as_ref().map(|k| k.to_text()))
        .collect();
    let codes: Vec<&str> = rejections.iter().map(|r| r.code.as_str()).collect();
    let messages: Vec<&str> = rejections.iter().map(|r| r.message.as_str()).collect();
    // The source's start is stored as JSON null: SQL NULL means "unknown".
    let page_cursor = Json(page_cursor.unwrap_or(&serde_json::Value::Null));
    sqlx::query!(
        "INSERT INTO rejected_records
           (run_id, sync_id, key, email, code, message, page, page_cursor, source_key)
         SELECT $1, $2, k, e, c, m, $7, $8, s
         FROM unnest($3::bytea[], $4::text[], $5::text[], $6::text[], $9::text[])
           AS r(k, e, c, m, s)",
        run_id,
        sync_id,
        keys as _,
        emails as _,
        codes as _,
        messages as _,
        &page[..],
        page_cursor as _,
        source_keys as _,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// A stored rejected record.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RejectedRow {
    pub id: i64,
    pub run_id: i64,
    #[serde(serialize_with = "hex_key")]
    pub key: Option<Vec<u8>>,
    pub email: Option<String>,
    /// The record's key in its source (its cursor column's value, or its id).
    pub source_key: Option<String>,
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
    sqlx::query_as!(
        RejectedRow,
        "SELECT id, run_id, key, email, source_key, code, message, created_at FROM rejected_records
         WHERE run_id = $1 ORDER BY id LIMIT $2",
        run_id,
        limit,
    )
    .fetch_all(pool)
    .await
}

/// Code kept on a record whose attempt budget ran out: quarantined.
pub const ATTEMPT_BUDGET_EXHAUSTED: &str = "attempt_budget_exhausted";

/// How many records a run quarantined.
pub async fn quarantined_in_run(pool: &PgPool, run_id: i64) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        r#"SELECT count(*) AS "quarantined!" FROM rejected_records WHERE run_id = $1 AND code = $2"#,
        run_id,
        ATTEMPT_BUDGET_EXHAUSTED,
    )
    .fetch_one(pool)
    .await
}

/// A sync's records that are quarantined or rejected and not put back yet.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OpenRejections {
    /// Distinct records quarantined (a page read again records them again).
    pub quarantined: i64,
    /// Distinct records rejected for cause.
    pub rejected: i64,
    /// The newest of either.
    pub latest: Vec<RejectedRow>,
}

/// The records `sync retry-rejected` would put back, counted, with the newest.
pub async fn open_rejections(
    pool: &PgPool,
    sync_id: &str,
    limit: i64,
) -> sqlx::Result<OpenRejections> {
    struct Open {
        quarantined: i64,
        rejected: i64,
    }
    let Open {
        quarantined,
        rejected,
    } = sqlx::query_as!(
        Open,
        r#"SELECT count(DISTINCT coalesce(key, int8send(id))) FILTER (WHERE code = $2) AS "quarantined!",
                  count(DISTINCT coalesce(key, int8send(id))) FILTER (WHERE code <> $2) AS "rejected!"
           FROM rejected_records WHERE sync_id = $1 AND put_back_at IS NULL"#,
        sync_id,
        ATTEMPT_BUDGET_EXHAUSTED,
    )
    .fetch_one(pool)
    .await?;
    let latest = sqlx::query_as!(
        RejectedRow,
        "SELECT id, run_id, key, email, source_key, code, message, created_at FROM rejected_records
         WHERE sync_id = $1 AND put_back_at IS NULL ORDER BY id DESC LIMIT $2",
        sync_id,
        limit,
    )
    .fetch_all(pool)
    .await?;
    Ok(OpenRejections {
        quarantined,
        rejected,
        latest,
    })
}

/// Whether a quarantine alert is due for the sync: none was raised since its
/// records were last put back (one alert per incident).
pub async fn quarantine_alert_due(pool: &PgPool, sync_id: &str, kind: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT NOT EXISTS (
             SELECT 1 FROM alerts WHERE sync_id = $1 AND kind = $2
               AND at > coalesce((SELECT max(at) FROM audit_log
                                  WHERE sync_id = $1 AND action = 'retry_rejected'), '-infinity'))
           AS "due!""#,
        sync_id,
        kind,
    )
    .fetch_one(pool)
    .await
}

/// Which records to put back.
#[derive(Debug, Clone, Default)]
pub struct PutBackFilter {
    /// Only those of this run.
    pub run_id: Option<i64>,
    /// Only those with this code (e.g. `attempt_budget_exhausted`).
    pub code: Option<String>,
}

/// What `put_back` did.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PutBack {
    /// Distinct records put back, per code.
    pub by_code: Vec<(String, i64)>,
    /// Where the cursor was moved back to (JSON null: the source's start);
    /// absent when it stayed.
    pub rewound_to: Option<serde_json::Value>,
    /// The first `PUT_BACK_LISTED` records put back (one per key, oldest
    /// first), so that they can be looked up in the source.
    pub listed: Vec<PutBackRecord>,
}

/// How many of the records put back `PutBack::listed` names.
pub const PUT_BACK_LISTED: usize = 20;

/// One record put back, as its reader looks for it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PutBackRecord {
    pub email: Option<String>,
    pub source_key: Option<String>,
    pub code: String,
}

impl PutBack {
    pub fn records(&self) -> i64 {
        self.by_code.iter().map(|(_, n)| n).sum()
    }
}

/// A record put back: its key, the page it was read from and that page's
/// cursor (when known), and its row.
struct PutBackRow {
    key: Option<Vec<u8>>,
    page: Option<Vec<u8>>,
    page_cursor: Option<Json<serde_json::Value>>,
    id: i64,
    email: Option<String>,
    source_key: Option<String>,
    code: String,
}

/// Puts rejected and quarantined records back so the next run sends them
/// again: their stakes are forgotten (a fresh attempt budget), and the cursor
/// goes back to the earliest page holding one (the ledger replays the pages
/// in between without calling the destination). A new fence is issued, as a
/// cursor reset does, so a run in progress cannot write its position over
/// the rewind. One transaction.
pub async fn put_back(
    pool: &PgPool,
    sync_id: &str,
    filter: &PutBackFilter,
    actor: Actor,
) -> sqlx::Result<PutBack> {
    let mut tx = pool.begin().await?;
    let rows: Vec<PutBackRow> = sqlx::query_as!(
        PutBackRow,
        r#"UPDATE rejected_records SET put_back_at = now()
           WHERE sync_id = $1 AND put_back_at IS NULL
             AND ($2::bigint IS NULL OR run_id = $2) AND ($3::text IS NULL OR code = $3)
           RETURNING key, page, page_cursor AS "page_cursor: Json<serde_json::Value>", id,
                     email, source_key, code"#,
        sync_id,
        filter.run_id,
        filter.code.as_deref(),
    )
    .fetch_all(&mut *tx)
    .await?;
    let mut done = PutBack::default();
    if rows.is_empty() {
        tx.commit().await?;
        return Ok(done);
    }
    let mut listed_keys = std::collections::HashSet::new();
    let mut oldest_first: Vec<&PutBackRow> = rows.iter().collect();
    oldest_first.sort_by_key(|r| r.id);
    done.listed = oldest_first
        .into_iter()
        .filter(|r| r.key.as_ref().is_none_or(|k| listed_keys.insert(k.clone())))
        .take(PUT_BACK_LISTED)
        .map(|r| PutBackRecord {
            email: r.email.clone(),
            source_key: r.source_key.clone(),
            code: r.code.clone(),
        })
        .collect();
    let mut keys: Vec<Vec<u8>> = rows.iter().filter_map(|r| r.key.clone()).collect();
    keys.sort();
    keys.dedup();
    let mut pages: Vec<Vec<u8>> = rows.iter().filter_map(|r| r.page.clone()).collect();
    pages.sort();
    pages.dedup();
    // A key rejected on several runs counts once per code.
    let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
    done.by_code = sqlx::query!(
        r#"SELECT code, count(DISTINCT coalesce(key, int8send(id))) AS "records!"
           FROM rejected_records WHERE id = ANY($1) GROUP BY code ORDER BY code"#,
        &ids,
    )
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|row| (row.code, row.records))
    .collect();
    // Forget their stakes: per-key rows, and the open bulk stakes of their
    // pages (the keys of such a stake that arrived have completed stakes of
    // their own; the others are sent again, as they would be anyway).
    sqlx::query!(
        "WITH k AS (
           DELETE FROM deliveries WHERE sync_id = $1 AND key = ANY($2) AND status = 'pending')
         DELETE FROM delivery_batches
         WHERE sync_id = $1 AND page = ANY($3) AND completed_at IS NULL AND NOT per_key",
        sync_id,
        &keys,
        &pages,
    )
    .execute(&mut *tx)
    .await?;
    // The earliest page, unless the cursor was reset since (a reset already
    // reads everything again, and the cursor may now be before that page).
    let earliest = rows
        .iter()
        .filter(|r| r.page_cursor.is_some())
        .min_by_key(|r| r.id)
        .map(|r| (r.id, r.page_cursor.clone().map(|c| c.0).unwrap_or_default()));
    if let Some((id, cursor)) = earliest {
        let moved = composed!(query_scalar [
            "UPDATE sync_cursors c
             SET cursor = CASE WHEN $2 = 'null'::jsonb THEN NULL ELSE $2 END, ",
            take_fence!(row: "c"),
            ", run_id = NULL, updated_at = now()
             WHERE c.sync_id = $1 AND NOT EXISTS (
               SELECT 1 FROM audit_log a WHERE a.sync_id = $1 AND a.action = 'reset_cursor'
                 AND a.at > (SELECT created_at FROM rejected_records WHERE id = $3))
             RETURNING c.fence",
        ], sync_id, Json(&cursor) as _, id)
        .fetch_optional(&mut *tx)
        .await?;
        if moved.is_some() {
            done.rewound_to = Some(cursor);
        }
    }
    record_audit(
        &mut tx,
        actor,
        "retry_rejected",
        sync_id,
        None,
        serde_json::json!({
            "run_id": filter.run_id,
            "code": filter.code,
            "put_back": done.by_code,
            "rewound_to": done.rewound_to,
        }),
    )
    .await?;
    tx.commit().await?;
    Ok(done)
}
