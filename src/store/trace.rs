//! The trace of addresses (migration 0034): one row per staked call holding
//! its records' addresses as keyed digests and what was sent for each, in
//! the order of its batch's keys, written by the stake's own statement
//! (`trace_page!`). `find` answers "which calls carried this address";
//! `forget` blanks an address's entries. No address is kept in clear.

use std::hash::Hasher;

use chrono::{DateTime, Utc};
use siphasher::sip::SipHasher24;
use sqlx::{PgConnection, PgPool};

/// Bytes of a keyed digest kept per record: 2^64 values, so an address meets
/// another's digest about once in 10^12 syncs of ten million records.
pub const DIGEST_LEN: usize = 8;
/// Positions each digest sets in its call's Bloom filter.
const BLOOM_HASHES: u64 = 5;
/// Filter bits per record: about one call in a hundred is opened in vain.
const BLOOM_BITS_PER_RECORD: usize = 10;

/// The install's key for address digests (`trace_key`), ready to digest:
/// SipHash-2-4 under its first 16 bytes. A keyed pseudo-random function
/// made for short inputs: without the key a digest says nothing of its
/// address, at a tenth of HMAC-SHA-256's cost on the run path.
#[derive(Clone)]
pub struct TraceKey(SipHasher24);

impl std::fmt::Debug for TraceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TraceKey([redacted])")
    }
}

impl TraceKey {
    /// Reads the install's key (made by the migration).
    pub async fn load(store: &mut PgConnection) -> sqlx::Result<TraceKey> {
        let key = sqlx::query_scalar!("SELECT key FROM trace_key")
            .fetch_one(store)
            .await?;
        Ok(TraceKey::from_bytes(&key))
    }

    /// From the stored key (32 bytes, checked by the table).
    fn from_bytes(key: &[u8]) -> TraceKey {
        let mut k = [0; 16];
        let n = key.len().min(16);
        k[..n].copy_from_slice(&key[..n]);
        TraceKey(SipHasher24::new_with_key(&k))
    }

    /// The digest of `address`, trimmed and in lower case (as `forget` and
    /// Brevo compare addresses).
    pub fn digest(&self, address: &str) -> [u8; DIGEST_LEN] {
        let mut hasher = self.0;
        let trimmed = address.trim();
        if trimmed.bytes().any(|b| b.is_ascii_uppercase()) || !trimmed.is_ascii() {
            hasher.write(trimmed.to_lowercase().as_bytes());
        } else {
            hasher.write(trimmed.as_bytes());
        }
        hasher.finish().to_le_bytes()
    }
}

/// The five filter positions of `digest` in a filter of `bits` bits, as
/// `(h1 + i * h2) mod bits` (the lookup computes the same in SQL).
fn bloom_positions(digest: &[u8; DIGEST_LEN], bits: u64) -> impl Iterator<Item = u64> {
    let (h1, h2) = bloom_hashes(digest);
    (0..BLOOM_HASHES).map(move |i| (h1 + i * h2) % bits)
}

fn bloom_hashes(digest: &[u8; DIGEST_LEN]) -> (u64, u64) {
    let h1 = u32::from_le_bytes([digest[0], digest[1], digest[2], digest[3]]);
    let h2 = u32::from_le_bytes([digest[4], digest[5], digest[6], digest[7]]) | 1;
    (u64::from(h1), u64::from(h2))
}

/// One call's entries, as its stake writes them.
#[derive(Debug, Clone, Default)]
pub struct TraceEntries {
    pub bloom: Vec<u8>,
    /// `DIGEST_LEN` bytes a record.
    pub digests: Vec<u8>,
    /// What was sent for each record, but its address (`SentColumns`).
    pub sent: Vec<u8>,
}

impl TraceEntries {
    /// The entries of records given by their digests, and what was sent for
    /// them (`SentColumns`, in the same order).
    pub fn new(
        records: impl ExactSizeIterator<Item = [u8; DIGEST_LEN]>,
        sent: Vec<u8>,
    ) -> TraceEntries {
        let n = records.len();
        let bytes = (n * BLOOM_BITS_PER_RECORD).div_ceil(8).max(8);
        let bits = bytes as u64 * 8;
        let mut entries = TraceEntries {
            bloom: vec![0; bytes],
            digests: Vec::with_capacity(n * DIGEST_LEN),
            sent,
        };
        for digest in records {
            for position in bloom_positions(&digest, bits) {
                entries.bloom[(position / 8) as usize] |= 1 << (position % 8);
            }
            entries.digests.extend_from_slice(&digest);
        }
        entries
    }
}

/// What was sent for each record of a call, but its address, in columns
/// (`sent`): one list of attribute names, then per record its values in that
/// order, its consent state (none without a rule) and, once per call, the
/// lists each consent state goes on. A page of records shares its names and
/// lists, so they are written once: a tenth of the bytes of one object per
/// record, to build, compress and store.
#[derive(Debug)]
pub struct SentColumns {
    names: Vec<String>,
    /// `[v,…],[v,…]`: the records' values.
    rows: Vec<u8>,
    /// `"state",null,…`: the records' consent.
    consent: Vec<u8>,
    any_consent: bool,
    /// The lists by consent state (none: the destination has no lists).
    lists: Option<serde_json::Value>,
    /// Why the records were taken off (a mirror run's removals).
    taken_off: Option<&'static str>,
    count: usize,
}

impl SentColumns {
    /// For about `records` records, with the destination's lists by
    /// consent state.
    pub fn new(records: usize, lists: Option<serde_json::Value>) -> Self {
        SentColumns {
            names: Vec::new(),
            rows: Vec::with_capacity(records * 24),
            consent: Vec::new(),
            any_consent: false,
            lists,
            taken_off: None,
            count: 0,
        }
    }

    /// Records taken off the destination, for `why`.
    pub fn taken_off(why: &'static str) -> Self {
        SentColumns {
            taken_off: Some(why),
            ..SentColumns::new(0, None)
        }
    }

    /// One record: its attributes and its consent state.
    pub fn push(
        &mut self,
        attributes: &serde_json::Map<String, serde_json::Value>,
        consent: Option<&str>,
    ) {
        if self.count == 0 {
            self.names = attributes.keys().cloned().collect();
        } else if !attributes.keys().eq(self.names.iter()) {
            for name in attributes.keys() {
                if !self.names.contains(name) {
                    self.names.push(name.clone());
                }
            }
        }
        if self.count > 0 {
            self.rows.push(b',');
            self.consent.push(b',');
        }
        self.rows.push(b'[');
        for (i, name) in self.names.iter().enumerate() {
            if i > 0 {
                self.rows.push(b',');
            }
            match attributes.get(name) {
                Some(value) => {
                    // Writing a `Value` into a Vec cannot fail.
                    let _ = serde_json::to_writer(&mut self.rows, value);
                }
                None => self.rows.extend_from_slice(b"null"),
            }
        }
        self.rows.push(b']');
        match consent {
            Some(state) => {
                let _ = serde_json::to_writer(&mut self.consent, state);
                self.any_consent = true;
            }
            None => self.consent.extend_from_slice(b"null"),
        }
        self.count += 1;
    }

    /// A record taken off (no values).
    pub fn push_removed(&mut self) {
        if self.count > 0 {
            self.rows.push(b',');
            self.consent.push(b',');
        }
        self.rows.extend_from_slice(b"null");
        self.consent.extend_from_slice(b"null");
        self.count += 1;
    }

    /// The column's bytes.
    pub fn finish(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.rows.len() + self.consent.len() + 128);
        out.extend_from_slice(b"{\"names\":");
        let _ = serde_json::to_writer(&mut out, &self.names);
        out.extend_from_slice(b",\"rows\":[");
        out.extend_from_slice(&self.rows);
        out.push(b']');
        if self.any_consent {
            out.extend_from_slice(b",\"consent\":[");
            out.extend_from_slice(&self.consent);
            out.push(b']');
        }
        if let Some(lists) = &self.lists {
            out.extend_from_slice(b",\"lists\":");
            let _ = serde_json::to_writer(&mut out, lists);
        }
        if let Some(why) = self.taken_off {
            out.extend_from_slice(b",\"taken_off\":");
            let _ = serde_json::to_writer(&mut out, why);
        }
        out.push(b'}');
        out
    }
}

/// What was sent for the record at `position` of a call's `sent` column:
/// `{"attributes": {…}, "consent": …, "lists": […]}`, or `{"taken_off":
/// why}`; `null` once forgotten.
pub fn sent_at(sent: &[u8], position: usize) -> serde_json::Value {
    use serde_json::{Value, json};
    let Ok(all) = serde_json::from_slice::<Value>(sent) else {
        return Value::Null;
    };
    if let Some(why) = all.get("taken_off") {
        return json!({ "taken_off": why });
    }
    let Some(Value::Array(values)) = all.get("rows").and_then(|r| r.get(position)) else {
        return Value::Null;
    };
    let names = all.get("names").and_then(Value::as_array);
    let attributes: serde_json::Map<String, Value> = names
        .into_iter()
        .flatten()
        .zip(values)
        .filter_map(|(name, value)| Some((name.as_str()?.to_string(), value.clone())))
        .collect();
    let mut record = json!({ "attributes": attributes });
    let consent = all
        .pointer(&format!("/consent/{position}"))
        .filter(|c| !c.is_null());
    if let Some(consent) = consent {
        record["consent"] = consent.clone();
    }
    let state = consent.and_then(Value::as_str).unwrap_or("not_asked");
    if let Some(lists) = all.get("lists").and_then(|l| l.get(state)) {
        record["lists"] = lists.clone();
    }
    record
}

/// The `sent` column with the records at `positions` blanked (an erasure).
fn sent_without(sent: &[u8], positions: &[usize]) -> Vec<u8> {
    use serde_json::Value;
    let Ok(mut all) = serde_json::from_slice::<Value>(sent) else {
        return b"{}".to_vec();
    };
    for column in ["rows", "consent"] {
        if let Some(Value::Array(values)) = all.get_mut(column) {
            for &p in positions {
                if let Some(value) = values.get_mut(p) {
                    *value = Value::Null;
                }
            }
        }
    }
    serde_json::to_vec(&all).unwrap_or_else(|_| b"{}".to_vec())
}

/// The trace row of a stake, written when the stake's row is: a CTE
/// `traced` inserting one `trace_pages` row for each row of `staked` (a
/// CTE returning the stake's batch `id`), when `bloom` is not null.
#[rustfmt::skip]
macro_rules! trace_page {
    (@sql $k:tt staked: $staked:tt, sync: $sync:tt, run: $run:tt, bloom: $bloom:tt,
     digests: $digests:tt, sent: $sent:tt) => { $crate::store::compose::composed!(@resume $k ["
     traced AS (
       INSERT INTO trace_pages (sync_id, run_id, batch_id, bloom, digests, sent)
       SELECT ", $sync, ", ", $run, ", id, ", $bloom, ", ", $digests, ", ", $sent, "
       FROM ", $staked, " WHERE ", $bloom, "::bytea IS NOT NULL)",
    ]) };
}
pub(crate) use trace_page;

/// One call that carried the address looked up (or a mirror run's removal
/// of it: no batch).
#[derive(Debug, Clone)]
pub struct TraceHit {
    pub sync_id: String,
    pub run_id: i64,
    pub batch_id: Option<i64>,
    /// When the call was staked (just before it went out).
    pub staked_at: DateTime<Utc>,
    /// The record's delivery key (none once its batch is gone).
    pub key: Option<Vec<u8>>,
    /// What was sent for it, but its address.
    pub sent: serde_json::Value,
}

/// The newest `limit` calls of `syncs` that carried the address of `digest`,
/// newest first. Reads each call's filter (about 1 KB), and the digests of
/// the calls the filter lets through.
pub async fn find(
    pool: &PgPool,
    syncs: &[String],
    digest: &[u8; DIGEST_LEN],
    limit: usize,
) -> sqlx::Result<Vec<TraceHit>> {
    let (h1, h2) = bloom_hashes(digest);
    let (h1, h2) = (h1 as i64, h2 as i64);
    let candidates = sqlx::query!(
        "SELECT id, digests FROM trace_pages
         WHERE sync_id = ANY($1)
           AND get_bit(bloom, ($2::bigint + 0 * $3::bigint) % (8 * octet_length(bloom))) = 1
           AND get_bit(bloom, ($2::bigint + 1 * $3::bigint) % (8 * octet_length(bloom))) = 1
           AND get_bit(bloom, ($2::bigint + 2 * $3::bigint) % (8 * octet_length(bloom))) = 1
           AND get_bit(bloom, ($2::bigint + 3 * $3::bigint) % (8 * octet_length(bloom))) = 1
           AND get_bit(bloom, ($2::bigint + 4 * $3::bigint) % (8 * octet_length(bloom))) = 1
         ORDER BY id DESC",
        syncs,
        h1,
        h2,
    )
    .fetch_all(pool)
    .await?;
    let mut hits = Vec::new();
    for candidate in candidates {
        let Some(position) = position_of(&candidate.digests, digest) else {
            continue;
        };
        // The key at the same place in the call's batch.
        let row = sqlx::query!(
            r#"SELECT t.sync_id, t.run_id, t.batch_id, t.created_at, t.sent,
                      CASE WHEN b.per_key THEN b.keys[$2 + 1]
                           ELSE substring(b.packed_keys FROM $2 * 32 + 1 FOR 32) END AS key
               FROM trace_pages t
               LEFT JOIN delivery_batches b ON b.id = t.batch_id AND b.sync_id = t.sync_id
               WHERE t.id = $1"#,
            candidate.id,
            position as i32,
        )
        .fetch_one(pool)
        .await?;
        let sent = sent_at(&row.sent, position);
        hits.push(TraceHit {
            sync_id: row.sync_id,
            run_id: row.run_id,
            batch_id: row.batch_id,
            staked_at: row.created_at,
            key: row.key,
            sent,
        });
        if hits.len() >= limit {
            break;
        }
    }
    Ok(hits)
}

/// What the ledger holds of one traced call and one of its keys: the call's
/// stake (gone once superseded or past retention), the key's own row (a
/// per-record call), and the Brevo import the call started, if any.
#[derive(Debug, Clone)]
pub struct CallState {
    pub batch_kept: bool,
    pub per_key: Option<bool>,
    pub attempts: Option<i32>,
    pub completed_at: Option<DateTime<Utc>>,
    pub result: Option<serde_json::Value>,
    pub key_status: Option<String>,
    pub process_status: Option<String>,
    pub process_records: Option<i32>,
    pub process_counts: Option<serde_json::Value>,
    pub process_error: Option<String>,
}

/// The ledger's state of `key`, staked in batch `batch_id` of `sync_id`.
pub async fn call_state(
    pool: &PgPool,
    sync_id: &str,
    batch_id: i64,
    key: &[u8],
) -> sqlx::Result<CallState> {
    let row = sqlx::query!(
        r#"SELECT b.id IS NOT NULL AS "batch_kept!", b.per_key AS "per_key?",
                  coalesce(d.attempts, b.attempts) AS attempts,
                  coalesce(d.completed_at, b.completed_at) AS completed_at,
                  coalesce(d.result, b.result) AS result, d.status AS "key_status?",
                  p.status AS "process_status?", p.records AS "process_records?",
                  p.counts AS process_counts, p.error AS process_error
           FROM (SELECT 1) one
           LEFT JOIN delivery_batches b ON b.id = $2 AND b.sync_id = $1
           LEFT JOIN deliveries d ON b.per_key AND d.key = $3 AND d.sync_id = $1
           LEFT JOIN import_processes p
             ON p.sync_id = $1
            AND p.process_id = (coalesce(d.result, b.result) ->> 'processId')::bigint"#,
        sync_id,
        batch_id,
        key,
    )
    .fetch_one(pool)
    .await?;
    Ok(CallState {
        batch_kept: row.batch_kept,
        per_key: row.per_key,
        attempts: row.attempts,
        completed_at: row.completed_at,
        result: row.result,
        key_status: row.key_status,
        process_status: row.process_status,
        process_records: row.process_records,
        process_counts: row.process_counts,
        process_error: row.process_error,
    })
}

/// Records that a mirror run took these records off the destination:
/// entries with no batch.
pub async fn record_removals(
    pool: &PgPool,
    sync_id: &str,
    run_id: i64,
    entries: &TraceEntries,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO trace_pages (sync_id, run_id, batch_id, removed, bloom, digests, sent)
         VALUES ($1, $2, NULL, true, $3, $4, $5)",
        sync_id,
        run_id,
        &entries.bloom,
        &entries.digests,
        &entries.sent,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// A rejection of the address, as `rejected_records` keeps it (address in
/// clear, as it always has been).
#[derive(Debug, Clone)]
pub struct TraceRejection {
    pub sync_id: String,
    pub run_id: i64,
    pub code: String,
    pub message: String,
    pub at: DateTime<Utc>,
    pub key: Option<Vec<u8>>,
}

/// The newest `limit` rejections of `address` by syncs in `syncs`.
pub async fn rejections(
    pool: &PgPool,
    syncs: &[String],
    address: &str,
    limit: i64,
) -> sqlx::Result<Vec<TraceRejection>> {
    sqlx::query_as!(
        TraceRejection,
        "SELECT sync_id, run_id, code, message, created_at AS at, key FROM rejected_records
         WHERE lower(email) = lower(trim($2)) AND sync_id = ANY($1)
         ORDER BY id DESC LIMIT $3",
        syncs,
        address,
        limit,
    )
    .fetch_all(pool)
    .await
}

/// Where the address stands in a diff or mirror sync's kept states: when
/// last delivered and which run last saw it in the query.
#[derive(Debug, Clone)]
pub struct TraceKept {
    pub sync_id: String,
    pub delivered_at: DateTime<Utc>,
    pub seen_run: Option<i64>,
}

pub async fn kept_states(
    pool: &PgPool,
    syncs: &[String],
    address: &str,
) -> sqlx::Result<Vec<TraceKept>> {
    sqlx::query_as!(
        TraceKept,
        "SELECT sync_id, delivered_at, seen_run FROM record_states
         WHERE lower(email) = lower(trim($2)) AND sync_id = ANY($1)
         ORDER BY delivered_at DESC",
        syncs,
        address,
    )
    .fetch_all(pool)
    .await
}

/// Where `digest` is among `digests` (aligned), if it is.
fn position_of(digests: &[u8], digest: &[u8; DIGEST_LEN]) -> Option<usize> {
    digests.chunks_exact(DIGEST_LEN).position(|d| d == digest)
}

/// Blanks every entry of these digests, in the erasure's transaction: the
/// digest becomes zeros (matching no address) and what was sent becomes
/// `null`. Returns the rows rewritten.
pub async fn forget(tx: &mut PgConnection, digests: &[[u8; DIGEST_LEN]]) -> sqlx::Result<u64> {
    let mut rewritten = 0;
    for digest in digests {
        let (h1, h2) = bloom_hashes(digest);
        let (h1, h2) = (h1 as i64, h2 as i64);
        let rows = sqlx::query!(
            "SELECT id, digests, sent FROM trace_pages
             WHERE get_bit(bloom, ($1::bigint + 0 * $2::bigint) % (8 * octet_length(bloom))) = 1
               AND get_bit(bloom, ($1::bigint + 1 * $2::bigint) % (8 * octet_length(bloom))) = 1
               AND get_bit(bloom, ($1::bigint + 2 * $2::bigint) % (8 * octet_length(bloom))) = 1
               AND get_bit(bloom, ($1::bigint + 3 * $2::bigint) % (8 * octet_length(bloom))) = 1
               AND get_bit(bloom, ($1::bigint + 4 * $2::bigint) % (8 * octet_length(bloom))) = 1
             FOR UPDATE",
            h1,
            h2,
        )
        .fetch_all(&mut *tx)
        .await?;
        for row in rows {
            let mut digests = row.digests;
            let mut found = Vec::new();
            for (position, slot) in digests.chunks_exact_mut(DIGEST_LEN).enumerate() {
                if slot == digest {
                    slot.fill(0);
                    found.push(position);
                }
            }
            if found.is_empty() {
                continue;
            }
            let sent = sent_without(&row.sent, &found);
            sqlx::query!(
                "UPDATE trace_pages SET digests = $2, sent = $3 WHERE id = $1",
                row.id,
                digests,
                sent,
            )
            .execute(&mut *tx)
            .await?;
            rewritten += 1;
        }
    }
    Ok(rewritten)
}

/// Deletes trace rows older than `retention` (the ledger's), `batch` per
/// statement; returns how many went.
pub async fn purge(pool: &PgPool, retention: std::time::Duration, batch: i64) -> sqlx::Result<u64> {
    let mut purged = 0;
    loop {
        let n = sqlx::query!(
            "DELETE FROM trace_pages WHERE id IN (
               SELECT id FROM trace_pages
               WHERE created_at < now() - make_interval(secs => $1)
               ORDER BY created_at LIMIT $2)",
            retention.as_secs_f64(),
            batch,
        )
        .execute(pool)
        .await?
        .rows_affected();
        purged += n;
        if n < batch as u64 {
            return Ok(purged);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_digested_trimmed_and_in_lower_case_under_the_key() {
        let key = TraceKey::from_bytes(&[7; 32]);
        assert_eq!(
            key.digest(" Ann@Example.org "),
            key.digest("ann@example.org")
        );
        assert_ne!(key.digest("ann@example.org"), key.digest("bob@example.org"));
        let other = TraceKey::from_bytes(&[8; 32]);
        assert_ne!(
            key.digest("ann@example.org"),
            other.digest("ann@example.org")
        );
    }

    #[test]
    fn what_was_sent_is_kept_in_columns_and_read_back_per_record() {
        use serde_json::json;
        let lists =
            json!({"not_asked": [12], "subscribed": [12], "unsubscribed": [], "unknown": [99]});
        let mut sent = SentColumns::new(3, Some(lists));
        let record = |v: serde_json::Value| match v {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        sent.push(
            &record(json!({"FIRSTNAME": "Ann", "AGE": 41})),
            Some("subscribed"),
        );
        // A record missing an attribute, and one with an attribute the
        // first had not.
        sent.push(&record(json!({"FIRSTNAME": "Bob"})), Some("unknown"));
        sent.push(
            &record(json!({"FIRSTNAME": "Cy", "AGE": 7, "CITY": "Oslo"})),
            None,
        );
        let bytes = sent.finish();
        assert_eq!(
            sent_at(&bytes, 0),
            json!({"attributes": {"FIRSTNAME": "Ann", "AGE": 41}, "consent": "subscribed", "lists": [12]})
        );
        assert_eq!(
            sent_at(&bytes, 1),
            json!({"attributes": {"FIRSTNAME": "Bob", "AGE": null}, "consent": "unknown", "lists": [99]})
        );
        assert_eq!(
            sent_at(&bytes, 2),
            json!({"attributes": {"FIRSTNAME": "Cy", "AGE": 7, "CITY": "Oslo"}, "lists": [12]})
        );
        assert_eq!(sent_at(&bytes, 3), serde_json::Value::Null);
        let blanked = sent_without(&bytes, &[1]);
        assert_eq!(sent_at(&blanked, 1), serde_json::Value::Null);
        assert_eq!(sent_at(&blanked, 0), sent_at(&bytes, 0));
        assert!(!String::from_utf8_lossy(&blanked).contains("Bob"));

        let mut removed = SentColumns::taken_off("left the query");
        removed.push_removed();
        assert_eq!(
            sent_at(&removed.finish(), 0),
            json!({"taken_off": "left the query"})
        );
    }

    #[test]
    fn every_digest_of_a_call_passes_its_filter_and_others_mostly_do_not() {
        let key = TraceKey::from_bytes(&[7; 32]);
        let digests: Vec<[u8; DIGEST_LEN]> = (0..1000)
            .map(|i| key.digest(&format!("person{i}@example.org")))
            .collect();
        let entries = TraceEntries::new(digests.iter().copied(), b"[]".to_vec());
        let bits = entries.bloom.len() as u64 * 8;
        let passes = |d: &[u8; DIGEST_LEN]| {
            bloom_positions(d, bits).all(|p| entries.bloom[(p / 8) as usize] & (1 << (p % 8)) != 0)
        };
        assert!(digests.iter().all(passes));
        assert_eq!(position_of(&entries.digests, &digests[417]), Some(417));
        let strangers = (0..10_000)
            .map(|i| key.digest(&format!("stranger{i}@example.org")))
            .filter(passes)
            .count();
        assert!(strangers < 300, "{strangers} of 10,000 strangers passed");
    }
}
