//! THE statement that writes several tables for one commit: a clean page's checkpoint.
//! One commit (one round trip) per page: the fenced cursor, the run's counts, the bulk
//! call's answer and the page after next's stake; built from the single-effect statements'
//! fragments. The run sends the next page while it is in flight.

use sqlx::PgPool;
use sqlx::types::Json;

use super::compose::composed;
use super::ledger::{BatchCompletion, BatchStake, BatchStakeRequest};
use super::runs::RunCounts;

/// One clean page, as the run holds it at its checkpoint.
#[derive(Debug, Clone, Copy)]
pub struct CleanPage<'a> {
    pub run_id: i64,
    pub sync_id: &'a str,
    /// The run's fence: the write is refused once a newer one was issued.
    pub fence: i64,
    /// The run's counts so far.
    pub counts: &'a RunCounts,
    /// Pages the run has done, this one included.
    pub pages: u64,
    /// Where the page ended (`None`: the source's start).
    pub cursor: Option<&'a serde_json::Value>,
    /// The page's bulk-call answer, written whether or not the cursor moves.
    pub completion: Option<&'a BatchCompletion>,
    /// A later page's bulk call, staked only if the cursor moves: one that
    /// neither supersedes nor watches open stakes (those are made alone,
    /// `ledger::stake_batch`, asking as late as they can). Made here, it
    /// costs no commit of its own.
    pub stake: Option<&'a BatchStakeRequest>,
}

/// After a clean page: moves the sync's cursor, only if `fence` is still the
/// newest issued, and with it the run's counts and position; completes the
/// page's bulk call (written whether or not the cursor moves: the call was
/// made); and, when the cursor moved, stakes the later page's bulk call.
/// Returns whether the cursor moved (`false`: a newer fence was issued, and
/// the run must stop), the stake, and whether the run was asked to stop
/// (`runs cancel`).
pub async fn record_clean_page(
    pool: &PgPool,
    page: &CleanPage<'_>,
) -> sqlx::Result<(bool, Option<BatchStake>, bool)> {
    let CleanPage {
        run_id,
        sync_id,
        fence,
        counts,
        pages,
        cursor,
        completion,
        stake,
    } = *page;
    debug_assert!(stake.is_none_or(|s| s.watched.is_empty() && s.superseded.is_empty()));
    // Binds: $1 run, $2 sync, $3 fence, $4-$7 and $9 the counts, $8 the
    // cursor, $10-$13 the completion, $14 the pages, $15-$20 the stake (and
    // its trace, `store::trace`).
    //
    // - `done`, `followed`: the page's bulk answer, as `ledger::complete_batch`
    //   writes it, whether or not the cursor moves (the call was made).
    // - `moved`: the cursor, as `cursors::checkpoint_cursor` moves it, under
    //   the fence check; it is what every later effect hangs on.
    // - `progress`: the run's counts and position, only with the cursor; it
    //   answers whether a person asked the run to stop (`runs cancel`).
    // - `staked`: the later page's stake, as `ledger::stake_batch` makes it,
    //   fenced by `moved` instead of a `FOR SHARE` check (the cursor row is
    //   already locked by its update), and only when one is asked for;
    //   `traced`: its trace row.
    let row = composed!(query [
        "WITH ",
        complete_batch_ctes!(batch: "$10", result: "$11", sync: "$2", run: "$1",
                             process: "$12", records: "$13"),
        ",
         moved AS (",
        move_cursor!(sync: "$2", cursor: "$8", fence: "$3", run: "$1"),
        " RETURNING 1),
         progress AS (
           UPDATE runs SET records_read = $4, records_written = $5, records_replayed = $6,
                  records_rejected = $7, records_resent = $9, cursor_end = $8,
                  pages = $14, heartbeat_at = now()
           WHERE id = $1 AND EXISTS (SELECT 1 FROM moved)
           RETURNING cancel_requested_at IS NOT NULL AS cancel),
         next_stake AS (SELECT 1 FROM moved WHERE $15::bytea IS NOT NULL),
         staked AS (",
        insert_batch!(guard: "next_stake", sync: "$2", run: "$1", fence: "$3", page: "$15",
                      packed_keys: "$16", attempts: "$17", started: "false"),
        "),",
        trace_page!(staked: "staked", sync: "$2", run: "$1", bloom: "$18", digests: "$19",
                    sent: "$20"),
        "
         SELECT EXISTS (SELECT 1 FROM moved) AS \"moved!\", (SELECT id FROM staked) AS batch,
          coalesce((SELECT cancel FROM progress), false) AS \"cancel!\"",
    ],
        run_id,
        sync_id,
        fence,
        counts.read,
        counts.written,
        counts.replayed,
        counts.rejected,
        cursor.map(Json) as _,
        counts.resent,
        completion.map(|c| c.batch),
        completion.map(|c| Json(&c.result)) as _,
        completion.and_then(|c| c.import.map(|i| i.0)),
        completion.and_then(|c| c.import.map(|i| i.1)),
        i32::try_from(pages).unwrap_or(i32::MAX),
        stake.map(|s| &s.page[..]),
        stake.map(|s| &s.packed_keys),
        stake.map(|s| s.attempts),
        stake.and_then(|s| s.trace.as_ref().map(|t| &t.bloom)),
        stake.and_then(|s| s.trace.as_ref().map(|t| &t.digests)),
        stake.and_then(|s| s.trace.as_ref().map(|t| &t.sent)),
    )
    .fetch_one(pool)
    .await?;
    let staked = (row.moved && stake.is_some()).then(|| match row.batch {
        Some(batch) => BatchStake::Staked {
            batch,
            completed_meanwhile: Vec::new(),
        },
        None => BatchStake::Fenced,
    });
    Ok((row.moved, staked, row.cancel))
}
