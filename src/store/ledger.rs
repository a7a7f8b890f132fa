//! The delivery ledger. Every stake is a batch row (`delivery_batches`) marked
//! with the page its keys were read from, and reserves one attempt of each key
//! before the destination is called; the attempt is spent as the call starts
//! (`call_started`, migration 0022). A bulk call's keys live in its batch row
//! alone and its answer completes that one row; per-record destinations keep
//! one `deliveries` row per key as well, completed key by key. Every statement
//! takes a whole page or batch of keys: never one query per record.
//!
//! A key hashes its page cursor, so it can only have been staked from its own
//! page: a page with no batch row has none of its keys in the ledger, and its
//! lookup is one index probe instead of one per key (migration 0007; syncs with
//! keys from before pages were recorded still probe per key).
//!
//! Both tables are partitioned by the UTC day their rows completed on
//! (migration 0016, `ledger_days`): open stakes and pending keys share the
//! partition 'infinity', where (key, sync_id) is unique; statements that
//! touch only those name `completed_on = 'infinity'`, so they read nothing
//! else. Completing a row moves it into its day, and retention drops days.

use std::time::Duration;

use sqlx::PgPool;
use sqlx::types::Json;

use super::compose::composed;
use super::history::delete_in_batches;
use super::ledger_days;
use super::trace::TraceEntries;
use crate::states::DeliveryStatus;

/// A key's per-key row in the ledger.
#[derive(Debug, Clone)]
pub struct LedgerEntry {
    pub key: Vec<u8>,
    pub status: DeliveryStatus,
    pub attempts: i32,
}

/// A batch-only stake (a bulk call) of a page.
#[derive(Debug, Clone)]
pub struct PageBatch {
    pub id: i64,
    pub keys: Vec<Vec<u8>>,
    pub completed: bool,
    pub attempts: i32,
}

/// Where one key stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyState {
    /// Never staked (or forgotten): send it.
    Absent,
    /// Staked and not known to have arrived, with the attempts spent on it;
    /// `per_key` when it has its own `deliveries` row.
    Pending { attempts: i32, per_key: bool },
    /// Delivered: replay the stored answer.
    Completed,
}

/// What the ledger holds for one page's keys.
#[derive(Debug, Default)]
pub struct PageLedger {
    states: foldhash::HashMap<[u8; 32], KeyState>,
    /// One completed stake holds exactly the page's keys, in order: every
    /// key is completed (a replay's usual answer, found without a map).
    all_completed: bool,
    /// Open batch-only stakes of the page, with their keys packed (32 bytes
    /// each): for the next stake to supersede or watch.
    pub open_batches: Vec<(i64, Vec<u8>)>,
}

impl PageLedger {
    pub fn state(&self, key: &[u8; 32]) -> KeyState {
        if self.all_completed {
            return KeyState::Completed;
        }
        self.states.get(key).copied().unwrap_or(KeyState::Absent)
    }

    fn merge(&mut self, key: &[u8], state: KeyState) {
        let Ok(key) = <[u8; 32]>::try_from(key) else {
            return;
        };
        let merged = match (self.state(&key), state) {
            (KeyState::Completed, _) | (_, KeyState::Completed) => KeyState::Completed,
            (KeyState::Absent, s) => s,
            (
                KeyState::Pending {
                    attempts: a,
                    per_key: p,
                },
                KeyState::Pending {
                    attempts: b,
                    per_key: q,
                },
            ) => KeyState::Pending {
                attempts: a.max(b),
                per_key: p || q,
            },
            (s, KeyState::Absent) => s,
        };
        self.states.insert(key, merged);
    }
}

/// One row of the page lookup: one of the page's stakes (none when the page
/// has none), and whether the sync has keys from before pages were recorded.
#[derive(Debug)]
struct PageLookupRow {
    /// The stake: a batch-only stake with its keys packed, or a per-key one
    /// (`per_key`, no packed keys), whether it completed, the attempts it
    /// spent and the UTC day it was made.
    batch: Option<i64>,
    packed_keys: Option<Vec<u8>>,
    completed: Option<bool>,
    attempts: Option<i32>,
    per_key: Option<bool>,
    staked_on: Option<chrono::NaiveDate>,
    /// The sync has keys from before pages were recorded: a page's keys are
    /// always probed one by one, on every day.
    unpaged: bool,
}

/// How far back a page's keys are probed one by one.
#[derive(Debug, Clone, Copy)]
enum ProbeFrom {
    /// The day the page's first per-key stake was made (a key completes
    /// after its stake).
    Day(chrono::NaiveDate),
    /// Every day: the sync has keys from before pages were recorded.
    EveryDay,
}

/// What the ledger holds for the keys of one page: the page's stakes (one
/// statement, one index probe per day partition), and the keys' own rows only when
/// the page has per-key stakes or the sync has keys from before pages were
/// recorded (a second statement).
pub async fn lookup_page(
    pool: &PgPool,
    sync_id: &str,
    page: &[u8; 32],
    keys: &[[u8; 32]],
) -> sqlx::Result<PageLedger> {
    // An empty page (the end of the source) costs no round trip.
    if keys.is_empty() {
        return Ok(PageLedger::default());
    }
    page_stakes(pool, sync_id, page)
        .await?
        .resolve(pool, sync_id, keys)
        .await
}

/// A page's stakes, read by the page's identity alone: a run reads them
/// while the page itself is read, before its keys are known.
#[derive(Debug)]
pub struct PageStakes {
    page: [u8; 32],
    rows: Vec<PageLookupRow>,
}

/// The stakes of page `page` (`PageStakes::resolve` then places its keys).
pub async fn page_stakes(
    pool: &PgPool,
    sync_id: &str,
    page: &[u8; 32],
) -> sqlx::Result<PageStakes> {
    // One scan of `delivery_batches` for the page: each mention of the table
    // is one probe (and, at every execution, one lock) per day partition.
    let rows = sqlx::query_as!(
        PageLookupRow,
        r#"SELECT b.id AS "batch?", CASE WHEN NOT b.per_key THEN b.packed_keys END AS "packed_keys?",
                b.completed_at IS NOT NULL AS "completed?",
                b.attempts - (NOT b.call_started)::int AS "attempts?",
                b.per_key AS "per_key?", (b.created_at AT TIME ZONE 'UTC')::date AS "staked_on?",
                u.unpaged AS "unpaged!"
         FROM (SELECT EXISTS (SELECT 1 FROM ledger_unpaged_syncs WHERE sync_id = $1) AS unpaged) u
         LEFT JOIN delivery_batches b ON b.page = $2 AND b.sync_id = $1"#,
        sync_id,
        &page[..],
    )
    .fetch_all(pool)
    .await?;
    Ok(PageStakes { page: *page, rows })
}

impl PageStakes {
    /// The page these are the stakes of.
    pub fn page(&self) -> &[u8; 32] {
        &self.page
    }

    /// Where each of the page's keys stands: from the page's batch-only
    /// stakes, and from the keys' own rows (a second statement) when the
    /// page has per-key stakes or the sync has keys from before pages were
    /// recorded.
    pub async fn resolve(
        self,
        pool: &PgPool,
        sync_id: &str,
        keys: &[[u8; 32]],
    ) -> sqlx::Result<PageLedger> {
        if keys.is_empty() {
            return Ok(PageLedger::default());
        }
        let rows = self.rows;
        let unpaged = rows.first().is_some_and(|row| row.unpaged);
        let mut ledger = PageLedger::default();
        let mut first_per_key = None;
        for row in rows {
            if row.per_key == Some(true) {
                first_per_key = first_per_key.into_iter().chain(row.staked_on).min();
                continue;
            }
            let (Some(id), Some(batch_keys), Some(done), Some(attempts)) =
                (row.batch, row.packed_keys, row.completed, row.attempts)
            else {
                continue;
            };
            if done && batch_keys.chunks_exact(32).eq(keys.iter().map(|k| &k[..])) {
                ledger.all_completed = true;
                continue;
            }
            let state = if done {
                KeyState::Completed
            } else {
                KeyState::Pending {
                    attempts,
                    per_key: false,
                }
            };
            for key in batch_keys.chunks_exact(32) {
                ledger.merge(key, state);
            }
            if !done {
                ledger.open_batches.push((id, batch_keys));
            }
        }
        // The keys' own rows are probed from the page's first per-key stake's
        // day (a key completes after its stake), or on every day when the sync
        // has keys from before pages were recorded.
        let probe = if unpaged {
            Some(ProbeFrom::EveryDay)
        } else {
            first_per_key.map(ProbeFrom::Day)
        };
        if let Some(since) = probe
            && !ledger.all_completed
        {
            let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
            for entry in lookup_keys(pool, sync_id, &keys, since).await? {
                let state = if entry.status == DeliveryStatus::Completed {
                    KeyState::Completed
                } else {
                    KeyState::Pending {
                        attempts: entry.attempts,
                        per_key: true,
                    }
                };
                ledger.merge(&entry.key, state);
            }
        }
        Ok(ledger)
    }
}

/// The own rows of these keys (absent keys are simply missing), with their
/// state through their batch. Keys completed before day `since` are not
/// looked for: a key completes after its stake, and its stake's batch row
/// (which marks the page) stays while the key's row points at it, so the
/// page's oldest per-key batch bounds the days to probe.
async fn lookup_keys(
    pool: &PgPool,
    sync_id: &str,
    keys: &[Vec<u8>],
    since: ProbeFrom,
) -> sqlx::Result<Vec<LedgerEntry>> {
    // One index probe per key: the key leads the primary key, and the planner
    // takes unnest() for a few rows, so it probes rather than scans. (Led by
    // the sync, a new sync's missing statistics made it scan every key of the
    // sync for each page; `key = ANY(...)` made it scan the whole table while
    // the ledger was small.)
    //
    // The page's keys share a batch or two: their completion is looked up once
    // per batch (a hashed subplan), not once per key as a join would.
    //
    // Each key probes each day partition's index (a lateral subquery kept
    // apart by `OFFSET 0`): as a plain join over the partitioned table, the
    // generic plan of the prepared statement scanned every partition (700,000
    // keys in the ledger: 260 ms a page instead of 17 ms). `since` prunes the
    // days before the page was first staked (a replay of a recent page
    // probes today's partition, the pending and the default ones).
    sqlx::query_as!(
        LedgerEntry,
        r#"WITH d AS MATERIALIZED (
           SELECT d.key, d.status, d.attempts, d.batch_id
           FROM unnest($2::bytea[]) AS k(key)
           CROSS JOIN LATERAL (
             SELECT d.key, d.status, d.attempts - (NOT d.call_started)::int AS attempts,
                    d.batch_id
             FROM deliveries d
             WHERE d.key = k.key AND d.sync_id = $1
               AND d.completed_on >= coalesce($3, '-infinity'::date) OFFSET 0) AS d),
         done AS MATERIALIZED (
           SELECT id FROM delivery_batches
           WHERE id IN (SELECT DISTINCT batch_id FROM d) AND completed_at IS NOT NULL)
         SELECT key AS "key!",
                CASE WHEN status = 'completed' OR batch_id IN (SELECT id FROM done)
                     THEN 'completed' ELSE 'pending' END AS "status!: DeliveryStatus",
                attempts AS "attempts!"
         FROM d"#,
        sync_id,
        keys,
        match since {
            ProbeFrom::Day(day) => Some(day),
            ProbeFrom::EveryDay => None,
        },
    )
    .fetch_all(pool)
    .await
}

/// What a stake did.
#[derive(Debug)]
pub enum Stake {
    /// Keys now `pending` for this run, with the attempts each has spent
    /// (this one included), and the batch they were staked in. Keys completed
    /// meanwhile are left out.
    Staked {
        keys: Vec<(Vec<u8>, i32)>,
        batch: i64,
    },
    /// A newer fence was issued: this run no longer owns the sync.
    Fenced,
}

/// A stake of per-record calls: the run staking under its fence, the page
/// the keys were read from, and the keys.
#[derive(Debug, Clone, Copy)]
pub struct KeyStake<'a> {
    pub sync_id: &'a str,
    pub page: &'a [u8; 32],
    /// Keys with no row of their own yet, and the attempts each already
    /// spent elsewhere (`spent[i]` for `fresh[i]`).
    pub fresh: &'a [Vec<u8>],
    pub spent: &'a [i32],
    /// Keys found `pending` with a row of their own.
    pub again: &'a [Vec<u8>],
    pub run_id: i64,
    pub fence: i64,
    /// The call's trace entries (`store::trace`), `fresh` then `again`
    /// (none: untraced).
    pub trace: Option<&'a TraceEntries>,
}

/// Stakes keys of one page as `pending` for a run, one row per key, reserving
/// one attempt of each (spent once the call starts, `start_call`), in one statement that first checks the run's fence is
/// still the newest; the stake's batch row marks the page. `fresh` keys have
/// no row of their own: they are inserted (a plain insert, a third of the cost
/// of an upsert) with `spent[i]` attempts already spent on them elsewhere plus
/// this one. `again` keys were found `pending` (left by a dead run): their
/// attempts grow by one, unless that run's stake never started its call. A key completed meanwhile is left out; a fresh key
/// that someone else inserted meanwhile means another run wrote under this
/// sync: `Fenced`.
pub async fn stake_keys(pool: &PgPool, stake: &KeyStake<'_>) -> sqlx::Result<Stake> {
    let KeyStake {
        sync_id,
        page,
        fresh,
        spent,
        again,
        run_id,
        fence,
        trace,
    } = *stake;
    // The last branch yields one row with no key (and the batch) when the
    // fence is still ours.
    let rows = composed!(query [
        "WITH f AS (",
        fence_guard!(sync: "$1", fence: "$4"),
        "),
             b AS (
               INSERT INTO delivery_batches (sync_id, run_id, fence, page, keys, per_key)
               SELECT $1, $3, $4, $6, $2::bytea[] || $5::bytea[], true FROM f
               RETURNING id),",
        trace_page!(staked: "b", sync: "$1", run: "$3", bloom: "$8", digests: "$9", sent: "$10"),
        ",
             fresh AS (
               INSERT INTO deliveries
                 (sync_id, key, status, attempts, call_started, run_id, fence, batch_id)
               SELECT $1, k, 'pending', s + 1, false, $3, $4, (SELECT id FROM b)
               FROM f, unnest($2::bytea[], $7::int4[]) AS k(k, s)
               RETURNING key, attempts),
             again AS (
               UPDATE deliveries d SET attempts = d.attempts + d.call_started::int,
                      call_started = false, run_id = $3, fence = $4,
                      staked_at = now(), batch_id = (SELECT id FROM b)
               FROM f WHERE d.sync_id = $1 AND d.key = ANY($5::bytea[]) AND d.status = 'pending'
                 AND d.completed_on = 'infinity'
                 AND NOT EXISTS (SELECT 1 FROM delivery_batches done
                                 WHERE done.id = d.batch_id AND done.completed_at IS NOT NULL)
               RETURNING d.key, d.attempts)
             SELECT key AS \"key?\", attempts AS \"attempts?\", NULL::bigint AS \"batch?\"
             FROM fresh
             UNION ALL SELECT key, attempts, NULL FROM again
             UNION ALL SELECT NULL, NULL, (SELECT id FROM b) FROM f",
    ], sync_id, fresh, run_id, fence, again, &page[..], spent, trace.map(|t| &t.bloom),
       trace.map(|t| &t.digests), trace.map(|t| &t.sent))
    .fetch_all(pool)
    .await;
    let rows = match rows {
        Ok(rows) => rows,
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(Stake::Fenced),
        Err(e) => return Err(e),
    };
    // A staked key and its attempts, or (no key) the fence check's row with
    // the new batch.
    let Some(batch) = rows
        .iter()
        .find(|row| row.key.is_none())
        .and_then(|row| row.batch)
    else {
        return Ok(Stake::Fenced);
    };
    Ok(Stake::Staked {
        keys: rows
            .into_iter()
            .filter_map(|row| Some((row.key?, row.attempts?)))
            .collect(),
        batch,
    })
}

/// What a batch-only stake did.
#[derive(Debug)]
pub enum BatchStake {
    /// The keys are staked in `batch`. `completed_meanwhile` holds the keys
    /// (packed) of watched batches that completed after the page was looked
    /// up: not to be sent. Its call is marked started as it goes
    /// (`start_call`).
    Staked {
        batch: i64,
        completed_meanwhile: Vec<u8>,
    },
    /// A newer fence was issued: this run no longer owns the sync.
    Fenced,
}

/// A bulk call's stake: its keys (packed: 32 bytes each) as one batch row of
/// `page`, with attempt number `attempts` (one more than the most any of them
/// had spent). Open batch-only stakes in `superseded` (every key of theirs is
/// in this stake) are deleted; the keys of `watched` ones (open when looked
/// up, sharing keys with this stake) that completed meanwhile are returned.
#[derive(Debug, Clone)]
pub struct BatchStakeRequest {
    pub page: [u8; 32],
    pub packed_keys: Vec<u8>,
    pub attempts: i32,
    pub superseded: Vec<i64>,
    pub watched: Vec<i64>,
    /// The call's trace entries (`store::trace`), in `packed_keys`'s order
    /// (none: untraced).
    pub trace: Option<TraceEntries>,
}

/// A bulk call's stake (guarantee 4: the attempt is reserved before the call),
/// as two CTEs, `gone` and `staked`, made only when `guard` (a CTE) has a
/// row: the superseded open stakes are deleted and the stake's batch row is
/// inserted (`staked` returns its id), its call marked started when
/// `started` is true, and its trace written (`traced`). The statement answers with that id and
/// `completed_meanwhile!`.
#[rustfmt::skip]
macro_rules! stake_batch_ctes {
    (@sql $k:tt guard: $guard:tt, sync: $sync:tt, run: $run:tt, fence: $fence:tt,
     page: $page:tt, packed_keys: $packed:tt, attempts: $attempts:tt,
     superseded: $superseded:tt, started: $started:tt, bloom: $bloom:tt, digests: $digests:tt,
     sent: $sent:tt) => { $crate::store::compose::composed!(@resume $k ["
     gone AS (
       DELETE FROM delivery_batches o USING ", $guard, "
       WHERE o.id = ANY(", $superseded, "::bigint[]) AND o.completed_on = 'infinity'
         AND NOT o.per_key),
     staked AS (",
       insert_batch!(guard: $guard, sync: $sync, run: $run, fence: $fence, page: $page,
                     packed_keys: $packed, attempts: $attempts, started: $started),
     "),",
       trace_page!(staked: "staked", sync: $sync, run: $run, bloom: $bloom, digests: $digests,
                   sent: $sent),
    ]) };
}
pub(crate) use stake_batch_ctes;

/// The insert of a bulk call's stake row, made when `guard` has a row;
/// returns its id.
#[rustfmt::skip]
macro_rules! insert_batch {
    (@sql $k:tt guard: $guard:tt, sync: $sync:tt, run: $run:tt, fence: $fence:tt,
     page: $page:tt, packed_keys: $packed:tt, attempts: $attempts:tt,
     started: $started:tt) => { $crate::store::compose::composed!(@resume $k ["
       INSERT INTO delivery_batches
         (sync_id, run_id, fence, page, keys, packed_keys, attempts, call_started, per_key)
       SELECT ", $sync, ", ", $run, ", ", $fence, ", ", $page, ", '{}', ", $packed, ", ", $attempts, ", ", $started, ", false
       FROM ", $guard, "
       RETURNING id",
    ]) };
}
pub(crate) use insert_batch;

/// The keys (packed) of the `watched` stakes that completed since the page
/// was looked up: a stake's second answer, not to be sent.
#[rustfmt::skip]
macro_rules! completed_meanwhile {
    (@sql $k:tt watched: $watched:tt) => { $crate::store::compose::composed!(@resume $k ["
     (SELECT string_agg(packed_keys, ''::bytea) FROM delivery_batches
      WHERE id = ANY(", $watched, "::bigint[]) AND completed_at IS NOT NULL)",
    ]) };
}
pub(crate) use completed_meanwhile;

/// Makes a bulk call's stake, after checking the run's fence is still the
/// newest. The run makes the next page's stake while this page's call is
/// in flight (`worker::read_ahead`).
pub async fn stake_batch(
    pool: &PgPool,
    sync_id: &str,
    run_id: i64,
    fence: i64,
    stake: &BatchStakeRequest,
) -> sqlx::Result<BatchStake> {
    if stake.superseded.is_empty() && stake.watched.is_empty() {
        // The usual stake, of a page no earlier run left open: a statement
        // Postgres plans once (the other's empty arrays make it plan that
        // one at every page: a third of its time).
        let batch = composed!(query_scalar [
            "WITH f AS (",
            fence_guard!(sync: "$1", fence: "$5"),
            "), staked AS (",
            insert_batch!(guard: "f", sync: "$1", run: "$4", fence: "$5", page: "$2",
                          packed_keys: "$3", attempts: "$6", started: "false"),
            "), ",
            trace_page!(staked: "staked", sync: "$1", run: "$4", bloom: "$7", digests: "$8",
                        sent: "$9"),
            " SELECT id AS \"id!\" FROM staked",
        ],
            sync_id,
            &stake.page[..],
            &stake.packed_keys,
            run_id,
            fence,
            stake.attempts,
            stake.trace.as_ref().map(|t| &t.bloom),
            stake.trace.as_ref().map(|t| &t.digests),
            stake.trace.as_ref().map(|t| &t.sent),
        )
        .fetch_optional(pool)
        .await?;
        return Ok(match batch {
            Some(batch) => BatchStake::Staked {
                batch,
                completed_meanwhile: Vec::new(),
            },
            None => BatchStake::Fenced,
        });
    }
    let row = composed!(query_as BatchStakeRow [
        "WITH f AS (",
        fence_guard!(sync: "$1", fence: "$6"),
        "), ",
        stake_batch_ctes!(guard: "f", sync: "$1", run: "$5", fence: "$6", page: "$2",
                          packed_keys: "$3", attempts: "$4", superseded: "$7", started: "false",
                          bloom: "$9", digests: "$10", sent: "$11"),
        " SELECT (SELECT id FROM staked) AS batch, ",
        completed_meanwhile!(watched: "$8"),
        " AS completed_meanwhile",
    ],
        sync_id,
        &stake.page[..],
        &stake.packed_keys,
        stake.attempts,
        run_id,
        fence,
        &stake.superseded,
        &stake.watched,
        stake.trace.as_ref().map(|t| &t.bloom),
        stake.trace.as_ref().map(|t| &t.digests),
        stake.trace.as_ref().map(|t| &t.sent),
    )
    .fetch_one(pool)
    .await?;
    Ok(row.into())
}

/// A bulk call's stake as its statement answers it: the new batch's id
/// (none: a newer fence was issued) and the watched keys completed meanwhile,
/// packed.
#[derive(Debug)]
pub(crate) struct BatchStakeRow {
    pub batch: Option<i64>,
    pub completed_meanwhile: Option<Vec<u8>>,
}

impl From<BatchStakeRow> for BatchStake {
    fn from(row: BatchStakeRow) -> Self {
        match row.batch {
            Some(batch) => BatchStake::Staked {
                batch,
                completed_meanwhile: row.completed_meanwhile.unwrap_or_default(),
            },
            None => BatchStake::Fenced,
        }
    }
}

/// Whose stake a call is: a bulk call's batch row, or per-record calls' own
/// rows (their keys, staked by run `run_id`).
#[derive(Debug, Clone, Copy)]
pub enum CallStake<'a> {
    Batch(i64),
    Keys {
        sync_id: &'a str,
        run_id: i64,
        keys: &'a [Vec<u8>],
    },
}

/// Marks a stake's call as started, as the call goes out (guarantee 4): a
/// stake reserves its keys' attempt, and only a call that may have left
/// spends it. A process killed between stake and call leaves a stake that
/// spent nothing, so random kills cannot run a record out of its budget
/// before it was ever sent. (A mark that did not land before a death errs
/// the other way: that attempt is not counted.)
pub async fn start_call(pool: &PgPool, stake: CallStake<'_>) -> sqlx::Result<()> {
    // Committed without waiting for the disk: a synchronous commit here would
    // cost a page a second fsync. Lost only with the server itself, which
    // errs towards not counting the attempt. `set_config(..., true)` holds
    // for the statement's implicit transaction, up to its commit; so the
    // mark is one prepared statement, planned once per connection (as a
    // simple query after `SET LOCAL`, it was parsed and planned per call).
    match stake {
        CallStake::Batch(batch) => {
            sqlx::query!(
                "UPDATE delivery_batches SET call_started = true
             FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
             WHERE id = $1 AND completed_on = 'infinity' AND NOT call_started",
                batch,
            )
            .execute(pool)
            .await?
        }
        CallStake::Keys {
            sync_id,
            run_id,
            keys,
        } => {
            sqlx::query!(
                "UPDATE deliveries SET call_started = true
             FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async_commit
             WHERE sync_id = $1 AND key = ANY($2) AND completed_on = 'infinity'
               AND run_id = $3 AND NOT call_started",
                sync_id,
                keys,
                run_id,
            )
            .execute(pool)
            .await?
        }
    };
    Ok(())
}

/// Gives back a bulk stake whose call was never made (the run stopped first):
/// the attempt it spent is not spent.
pub async fn forget_batch(pool: &PgPool, batch: i64) -> sqlx::Result<()> {
    sqlx::query!(
        "DELETE FROM delivery_batches
         WHERE id = $1 AND completed_on = 'infinity' AND NOT per_key",
        batch,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Gives back the attempt a bulk stake spent on a call whose failure the run
/// observed (any answer, a refused connection, a timeout): an outage costs no
/// record's budget. The stake is forgotten when it held nothing else of note
/// (its keys had spent no attempt before, and nothing may have been written);
/// otherwise its keys stay `pending` with the attempts they had before.
pub async fn give_back_batch(pool: &PgPool, batch: i64, maybe_written: bool) -> sqlx::Result<()> {
    // Two effects on one row, chosen by disjoint conditions: one statement.
    sqlx::query!(
        "WITH gone AS (
           DELETE FROM delivery_batches
           WHERE id = $1 AND completed_on = 'infinity' AND NOT per_key AND attempts <= 1 AND NOT $2)
         UPDATE delivery_batches SET attempts = attempts - call_started::int
         WHERE id = $1 AND completed_on = 'infinity' AND NOT per_key AND (attempts > 1 OR $2)",
        batch,
        maybe_written,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The same for per-key stakes this run made: each key's attempt is given
/// back; a key is forgotten when that leaves it with nothing of note.
pub async fn give_back_keys(
    pool: &PgPool,
    sync_id: &str,
    run_id: i64,
    keys: &[Vec<u8>],
    maybe_written: bool,
) -> sqlx::Result<()> {
    sqlx::query!(
        "WITH gone AS (
           DELETE FROM deliveries
           WHERE sync_id = $1 AND key = ANY($2) AND completed_on = 'infinity' AND run_id = $3
             AND attempts <= 1 AND NOT $4)
         UPDATE deliveries SET attempts = attempts - call_started::int
         WHERE sync_id = $1 AND key = ANY($2) AND completed_on = 'infinity' AND run_id = $3
           AND (attempts > 1 OR $4)",
        sync_id,
        keys,
        run_id,
        maybe_written,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// A bulk call's one answer for its whole batch, to be written (with the
/// page's checkpoint, `checkpoint::record_clean_page`, or alone).
#[derive(Debug, Clone)]
pub struct BatchCompletion {
    pub batch: i64,
    pub result: serde_json::Value,
    /// The Brevo import the answer names, for the sweeper to follow up
    /// (`store::imports`): its process id and how many records it carries.
    pub import: Option<(i64, i32)>,
}

/// A bulk call's answer written (guarantee 2: a delivered batch is replayed,
/// never sent again), as two CTEs: `done` completes batch `batch` with
/// `result`, moving it into the day's partition (the day as `completion_day!`
/// writes it, spelt out: this macro is expanded in `checkpoint.rs` too); `followed` records the Brevo import it names (`process`, `records`;
/// none when `process` is NULL) for the sweeper to follow up.
#[rustfmt::skip]
macro_rules! complete_batch_ctes {
    (@sql $k:tt batch: $batch:tt, result: $result:tt, sync: $sync:tt, run: $run:tt,
     process: $process:tt, records: $records:tt) => { $crate::store::compose::composed!(@resume $k ["
     done AS (
       UPDATE delivery_batches
       SET result = ", $result, ", completed_at = now(), completed_on = (now() AT TIME ZONE 'UTC')::date
       WHERE id = ", $batch, " AND completed_on = 'infinity'),
     followed AS (
       INSERT INTO import_processes (sync_id, run_id, process_id, records)
       SELECT ", $sync, "::text, ", $run, "::bigint, ", $process, "::bigint, ", $records, "::int
       WHERE ", $process, "::bigint IS NOT NULL
       ON CONFLICT (sync_id, process_id) DO NOTHING)",
    ]) };
}
pub(crate) use complete_batch_ctes;

/// Completes every key staked in the batch with its one answer: one row;
/// with the import the answer names, recorded in the same statement.
pub async fn complete_batch(
    pool: &PgPool,
    sync_id: &str,
    run_id: i64,
    completion: &BatchCompletion,
) -> sqlx::Result<()> {
    composed!(query [
        "WITH ",
        complete_batch_ctes!(batch: "$1", result: "$2", sync: "$3", run: "$4",
                             process: "$5", records: "$6"),
        " SELECT 1 AS completed",
    ],
        completion.batch,
        Json(&completion.result) as _,
        sync_id,
        run_id,
        completion.import.map(|i| i.0),
        completion.import.map(|i| i.1),
    )
    .fetch_one(pool)
    .await?;
    Ok(())
}

/// Settles a batch-only stake whose call answered key by key (some records
/// refused, different answers, or part of the call failed): the delivered
/// keys get rows of their own, `completed` with their answers; the refused
/// keys are forgotten (nothing was written), so a later replay may send them.
/// The `failed` keys' attempt is given back as `give_back_batch` does: they
/// keep a `pending` row of their own unless that would hold nothing of note.
pub async fn settle_batch_per_key(
    pool: &PgPool,
    batch: i64,
    keys: &[Vec<u8>],
    results: &[serde_json::Value],
    failed: &[Vec<u8>],
    maybe_written: bool,
) -> sqlx::Result<()> {
    let results: Vec<Json<&serde_json::Value>> = results.iter().map(Json).collect();
    // The delivered keys' pending rows (if any) are deleted and their
    // completed rows inserted into the day's partition: (key, sync_id) is
    // unique within a partition only.
    composed!(query [
        "WITH b AS (
           UPDATE delivery_batches
           SET per_key = true, packed_keys = NULL,
               keys = $2::bytea[] || CASE WHEN $5 OR attempts > 1 THEN $4::bytea[] ELSE '{}' END
           WHERE id = $1 AND completed_on = 'infinity'
           RETURNING sync_id, run_id, fence, attempts),
         kept AS (
           INSERT INTO deliveries (sync_id, key, status, attempts, run_id, fence, batch_id)
           SELECT b.sync_id, k, 'pending', b.attempts - 1, b.run_id, b.fence, $1
           FROM b, unnest($4::bytea[]) AS k WHERE $5 OR b.attempts > 1
           ON CONFLICT (key, sync_id, completed_on) DO UPDATE SET attempts = EXCLUDED.attempts,
             call_started = true, run_id = EXCLUDED.run_id, fence = EXCLUDED.fence, batch_id = EXCLUDED.batch_id),
         was_pending AS (
           DELETE FROM deliveries d USING b
           WHERE d.sync_id = b.sync_id AND d.key = ANY($2::bytea[]) AND d.completed_on = 'infinity')
         INSERT INTO deliveries
           (sync_id, key, status, attempts, result, run_id, fence, batch_id, completed_at,
            completed_on)
         SELECT b.sync_id, r.key, 'completed', b.attempts, r.result, b.run_id, b.fence, $1, now(), ",
        completion_day!(),
        " FROM b, unnest($2::bytea[], $3::jsonb[]) AS r(key, result)
         ON CONFLICT (key, sync_id, completed_on) DO UPDATE SET result = EXCLUDED.result,
           completed_at = EXCLUDED.completed_at, batch_id = EXCLUDED.batch_id",
    ], batch, keys, &results as _, failed, maybe_written)
    .execute(pool)
    .await?;
    Ok(())
}

/// Marks keys `completed` with the destination's answer for each, which
/// moves their rows into the day's partition.
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
        return Ok(composed!(query [
            "UPDATE deliveries SET status = 'completed', result = $3, completed_at = now(),
                    completed_on = ",
            completion_day!(),
            " WHERE sync_id = $1 AND key = ANY($2::bytea[]) AND completed_on = 'infinity'",
        ], sync_id, keys, Json(first) as _)
        .execute(pool)
        .await?
        .rows_affected());
    }
    let results: Vec<Json<&serde_json::Value>> = results.iter().map(Json).collect();
    Ok(composed!(query [
        "UPDATE deliveries d SET status = 'completed', result = r.result, completed_at = now(),
                completed_on = ",
        completion_day!(),
        " FROM unnest($2::bytea[], $3::jsonb[]) AS r(key, result)
         WHERE d.sync_id = $1 AND d.key = ANY($2::bytea[]) AND d.key = r.key
           AND d.completed_on = 'infinity'",
    ], sync_id, keys, &results as _)
    .execute(pool)
    .await?
    .rows_affected())
}

/// Forgets pending keys whose records the destination refused for good: nothing
/// was written, so a later replay (after a mapping fix, say) may send them.
pub async fn release_keys(pool: &PgPool, sync_id: &str, keys: &[Vec<u8>]) -> sqlx::Result<u64> {
    Ok(sqlx::query!(
        "DELETE FROM deliveries
         WHERE sync_id = $1 AND key = ANY($2) AND completed_on = 'infinity'",
        sync_id,
        keys,
    )
    .execute(pool)
    .await?
    .rows_affected())
}

/// What a purge of the ledger did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LedgerPurge {
    /// Day partitions dropped (a day counts once for both tables).
    pub days: u64,
    /// Completed keys that went (a completed bulk batch's keys counted as keys).
    pub keys: u64,
}

/// How long a purge waits for the table lock that detaching a day takes.
const DETACH_LOCK_WAIT: Duration = Duration::from_secs(2);

/// Forgets completed keys past `retention`: the day partitions whose whole
/// day ended more than `retention` ago are detached and dropped
/// (`ledger_days`); rows in the default partition (a day that had no
/// partition) are deleted `batch` per statement. Pending keys stay. The
/// partitions of today and the next days are created first, so the days
/// ahead are always ready.
pub async fn purge_completed(
    pool: &PgPool,
    retention: Duration,
    batch: i64,
) -> sqlx::Result<LedgerPurge> {
    ledger_days::create_days(pool, 0, ledger_days::DAYS_AHEAD).await?;
    let (days, mut keys) = ledger_days::drop_days_past(pool, retention, DETACH_LOCK_WAIT).await?;
    let seconds = retention.as_secs_f64();
    keys += delete_in_batches(
        pool,
        "DELETE FROM deliveries_default WHERE ctid IN (
           SELECT ctid FROM deliveries_default
           WHERE completed_at < now() - make_interval(secs => $1)
           LIMIT $2)",
        retention,
        batch,
    )
    .await?;
    loop {
        let purged = sqlx::query!(
            r#"WITH b AS (
               DELETE FROM delivery_batches_default WHERE ctid IN (
                 SELECT ctid FROM delivery_batches_default
                 WHERE completed_at < now() - make_interval(secs => $1)
                 LIMIT $2)
               RETURNING per_key, packed_keys)
             SELECT count(*) AS "deleted!",
                    coalesce(sum(octet_length(packed_keys) / 32) FILTER (WHERE NOT per_key), 0)::bigint
                      AS "bulk_keys!"
             FROM b"#,
            seconds,
            batch,
        )
        .fetch_one(pool)
        .await?;
        let (deleted, bulk_keys) = (purged.deleted, purged.bulk_keys);
        keys += u64::try_from(bulk_keys).unwrap_or(0);
        if deleted < batch {
            break;
        }
    }
    // What `trace` keeps goes with the ledger's retention.
    super::trace::purge(pool, retention, batch).await?;
    // An open batch row marks its page (see the module comment): it goes only
    // once none of its keys' own rows point at it. A batch-only stake (a bulk
    // call that never answered) is its keys' pending stake, kept as a pending
    // key row is.
    sqlx::query!(
        "DELETE FROM delivery_batches b
         WHERE completed_on = 'infinity' AND per_key
           AND created_at < now() - make_interval(secs => $1)
           AND NOT EXISTS (SELECT 1 FROM deliveries d
                           WHERE d.sync_id = b.sync_id AND d.key = ANY(b.keys) AND d.batch_id = b.id)",
        seconds,
    )
    .execute(pool)
    .await?;
    // A sync whose keys from before pages were recorded are all gone looks its
    // pages up like any other.
    sqlx::query!(
        "DELETE FROM ledger_unpaged_syncs u
         WHERE NOT EXISTS (SELECT 1 FROM delivery_batches b
                           WHERE b.sync_id = u.sync_id AND b.page IS NULL)
           AND NOT EXISTS (SELECT 1 FROM deliveries d
                           LEFT JOIN delivery_batches b ON b.id = d.batch_id
                           WHERE d.sync_id = u.sync_id AND b.page IS NULL)",
    )
    .execute(pool)
    .await?;
    Ok(LedgerPurge { days, keys })
}
