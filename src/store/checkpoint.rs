//! THE statement that writes several tables for one commit: a clean page's checkpoint.
//! One commit (one round trip) per page: the fenced cursor, the run's counts, the bulk
//! call's answer, the next page's stake; built from the single-effect statements' fragments.

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
    /// The next page's bulk call, staked only if the cursor moves. Never one
    /// that watches open stakes: whether those completed meanwhile is asked
    /// where such a stake is made alone (`ledger::stake_batch`). Left out
    /// here, that question lets Postgres keep one plan of this statement
    /// instead of planning it at every page.
    pub stake: Option<&'a BatchStakeRequest>,
    /// The next page's call is marked started with its stake: its request
    /// slot is near and nothing else stands between this commit and the
    /// call (one round trip a page less than marking it alone).
    pub call_started: bool,
}

/// After a clean page: moves the sync's cursor, only if `fence` is still the
/// newest issued, and with it the run's counts and position; completes the
/// page's bulk call (written whether or not the cursor moves: the call was
/// made); and, when the cursor moved, stakes the next page's bulk call.
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
        call_started,
    } = *page;
    debug_assert!(stake.is_none_or(|s| s.watched.is_empty()));
    // Binds: $1 run, $2 sync, $3 fence, $4-$7 and $9 the counts, $8 the
    // cursor, $10-$13 the completion, $14-$17 and $19 the stake, $18 the pages.
    //
    // - `done`, `followed`: the page's bulk answer, as `ledger::complete_batch`
    //   writes it, whether or not the cursor moves (the call was made).
    // - `moved`: the cursor, as `cursors::checkpoint_cursor` moves it, under
    //   the fence check; it is what every later effect hangs on.
    // - `progress`: the run's counts and position, only with the cursor; it
    //   answers whether a person asked the run to stop (`runs cancel`).
    // - `gone`, `staked`: the next page's stake, as `ledger::stake_batch`
    //   makes it, fenced by `moved` instead of a `FOR SHARE` check (the cursor
    //   row is already locked by its update), and only when one is asked for.
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
                  pages = $18, heartbeat_at = now()
           WHERE id = $1 AND EXISTS (SELECT 1 FROM moved)
           RETURNING cancel_requested_at IS NOT NULL AS cancel),
         next_stake AS (SELECT 1 FROM moved WHERE $14::bytea IS NOT NULL), ",
        stake_batch_ctes!(guard: "next_stake", sync: "$2", run: "$1", fence: "$3", page: "$14",
                          packed_keys: "$15", attempts: "$16", superseded: "$17",
                          started: "$19"),
        " SELECT EXISTS (SELECT 1 FROM moved) AS \"moved!\", (SELECT id FROM staked) AS batch,
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
        stake.map(|c| &c.page[..]),
        stake.map(|c| &c.packed_keys),
        stake.map(|c| c.attempts),
        stake.map(|c| &c.superseded[..]).unwrap_or(&[]),
        i32::try_from(pages).unwrap_or(i32::MAX),
        call_started,
    )
    .fetch_one(pool)
    .await?;
    let (moved, cancel) = (row.moved, row.cancel);
    let staked = (moved && stake.is_some()).then(|| match row.batch {
        Some(batch) => BatchStake::Staked {
            batch,
            completed_meanwhile: Vec::new(),
            call_started,
        },
        None => BatchStake::Fenced,
    });
    Ok((moved, staked, cancel))
}
