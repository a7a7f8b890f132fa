//! THE statement that writes several tables for one commit: a clean page's checkpoint.
//! One commit (one round trip) per page: the fenced cursor, the run's counts, the bulk
//! call's answer and the next page's call marked started; built from the single-effect
//! statements' fragments. It is the one durable commit between a page's answer and the
//! next page's call: that call leaves only once it is in.

use sqlx::PgPool;
use sqlx::types::Json;

use super::compose::composed;
use super::ledger::BatchCompletion;
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
    /// The next page's bulk stake (a `delivery_batches` id), its call
    /// marked started only if the cursor moves: the call leaves next, and
    /// the mark costs no commit of its own.
    pub mark: Option<i64>,
}

/// After a clean page: moves the sync's cursor, only if `fence` is still the
/// newest issued, and with it the run's counts and position; completes the
/// page's bulk call (written whether or not the cursor moves: the call was
/// made); and, when the cursor moved, marks the next page's bulk call
/// started (its stake's attempt spent, guarantee 4). Returns whether the
/// cursor moved (`false`: a newer fence was issued, and the run must stop)
/// and whether the run was asked to stop (`runs cancel`).
pub async fn record_clean_page(pool: &PgPool, page: &CleanPage<'_>) -> sqlx::Result<(bool, bool)> {
    let CleanPage {
        run_id,
        sync_id,
        fence,
        counts,
        pages,
        cursor,
        completion,
        mark,
    } = *page;
    // Binds: $1 run, $2 sync, $3 fence, $4-$7 and $9 the counts, $8 the
    // cursor, $10-$13 the completion, $14 the pages, $15 the stake to mark.
    //
    // - `done`, `followed`: the page's bulk answer, as `ledger::complete_batch`
    //   writes it, whether or not the cursor moves (the call was made).
    // - `moved`: the cursor, as `cursors::checkpoint_cursor` moves it, under
    //   the fence check; it is what every later effect hangs on.
    // - `progress`: the run's counts and position, only with the cursor; it
    //   answers whether a person asked the run to stop (`runs cancel`).
    // - `marked`: the next page's call started, as `ledger::start_call` marks
    //   it, only with the cursor.
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
         marked AS (
           UPDATE delivery_batches SET call_started = true
           WHERE id = $15 AND completed_on = 'infinity' AND NOT call_started
             AND EXISTS (SELECT 1 FROM moved))
         SELECT EXISTS (SELECT 1 FROM moved) AS \"moved!\",
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
        mark,
    )
    .fetch_one(pool)
    .await?;
    Ok((row.moved, row.cancel))
}
