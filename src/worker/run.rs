//! One run of one sync: from the saved cursor to the end of the source, safe to
//! kill at any instant. This file is the guarantee path (docs/contract.md §1), top to
//! bottom:
//!
//! 1. take the lease, and with it a fence and the saved cursor;
//! 2. per page: derive each record's delivery key and look the keys up in the
//!    ledger (`prepared_page`); replay `completed` keys without a call;
//! 3. stake the rest `pending` in a fenced statement, which spends one attempt
//!    of each key (`stakes`); deliver; settle each key with its answer;
//! 4. only when every record of the page arrived or was rejected for good,
//!    move the cursor in a statement refused if a newer fence exists, the
//!    lease proved beside it; the next page is sent meanwhile (the statement
//!    stakes the page after it), and its call proves the lease again before
//!    it leaves.
//!
//! Keys left `pending` by a dead run are suspects: they are sent again, alone,
//! within their attempt budget, so a record that kills the worker cannot spend
//! its neighbours' budgets. What makes this fast lives beside it: pages read
//! ahead and staked ahead (`read_ahead`), stakes packed per bulk call
//! (`stakes`), replay checkpoints paced (`checkpoint_pacing`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use tracing::{debug, info, info_span, warn};

use super::checkpoint_pacing::CheckpointPacing;
use super::delivery_key::DeliveryKey;
use super::field_guard::FieldGuard;
use super::hand_off::HAND_OFF_FROM;
use super::prepared_page::{Pending, PreparedPage};
use super::read_ahead::ReadAhead;
use super::run_env::{PageProgress, RunEnv, RunOutcome, RunReport};
use super::run_failure::RunFailure;
use super::stakes::{CallAnswers, PageStakes, complete_alone};
use crate::config::SyncDefinition;
use crate::destination::{
    AnyDestination, Destination, DestinationError, Go, Outbound, RecordOutcome,
};
use crate::failure::FailureCode;
use crate::lease::Lease;
use crate::source::{AnySource, Source};
use crate::store::checkpoint::{self, CleanPage};
use crate::store::cursors;
use crate::store::ledger::{BatchCompletion, BatchStake, BatchStakeRequest};
use crate::store::record_states::{self, RecordState, StateScope};
use crate::store::rejected::{self, Rejection};
use crate::store::runs::{self, LeaseStart, RunCounts, RunRow};
use crate::store::trace::TraceKey;

/// What every step of one run reads, fixed once the lease is taken.
pub(super) struct RunContext<'a> {
    pub env: &'a RunEnv,
    pub run: &'a RunRow,
    pub definition: &'a SyncDefinition,
    pub lease: &'a Lease,
    pub destination: &'a AnyDestination,
    /// Set by the renewal when the lease is gone.
    pub lost: &'a AtomicBool,
    /// Digests the addresses of the run's trace (`trace_entries`).
    pub trace: &'a TraceKey,
}

impl RunContext<'_> {
    /// A bulk destination takes a page in one call (one stake row per call).
    pub fn bulk(&self) -> bool {
        self.destination.batch_size().is_none()
    }
}

/// Executes one claimed run and reports how it ended. The caller records the
/// outcome (finish, retry or re-queue); this function writes only the ledger,
/// the cursor, the run's progress and its lease.
pub async fn execute_run(
    env: &RunEnv,
    run: &RunRow,
    definition: &SyncDefinition,
    progress: &mut (dyn FnMut(&PageProgress) + Send),
) -> RunReport {
    async {
        let failed = |e: RunFailure| {
            RunReport::ended(RunOutcome::Failed {
                code: e.0,
                detail: e.1,
            })
        };
        let secrets = env.secrets.workspace(&definition.workspace);
        // A secret missing from the file here is the operators' to add (the
        // apply that published the sync found it where it ran); a name of
        // the daemon's own is the sync file's fault and fails below.
        for (field, name) in definition.secret_names() {
            if !name.is_the_daemons()
                && let Err(why) = secrets.lookup(name)
            {
                return failed(RunFailure(
                    FailureCode::SecretMissing,
                    format!("{field}: {why}"),
                ));
            }
        }
        let mut source =
            match AnySource::open(&definition.source, &env.sources, &secrets, &env.stop) {
                Ok(s) => s,
                Err(e) => return failed(e.into()),
            };
        let mut destination =
            match AnyDestination::open(&definition.destination, env.retry.clone(), &secrets) {
                Ok(d) => d,
                Err(e) => return failed(e.into()),
            };
        destination.share_budgets(&env.budgets, definition.workspace.as_str());
        let trace = match env.trace_key().await {
            Ok(trace) => trace,
            Err(e) => {
                return failed(RunFailure(
                    FailureCode::StoreUnavailable,
                    format!("reading the trace key: {e}"),
                ));
            }
        };
        // Before the lease, so its check spends none of the lease's time;
        // recorded once the run has started.
        let mapped: Vec<String> = definition.mapping.attributes.keys().cloned().collect();
        let destination_notices = match destination.start(&mapped).await {
            Ok(notices) => notices,
            Err(e) => return failed(e.into()),
        };
        // 1. The lease, then in one statement the fence, the lease recorded
        // on the run, and the saved cursor.
        let taken = env
            .leases
            .acquire_with(&run.sync_id, |lease_value| {
                env.statements.begin_leased(LeaseStart {
                    run_id: run.id,
                    sync_id: run.sync_id.clone(),
                    lease_value,
                })
            })
            .await;
        let (lease, start) = match taken {
            Ok(Some(taken)) => taken,
            Ok(None) => {
                info!("Lease busy; skipping");
                return RunReport::ended(RunOutcome::Skipped(FailureCode::LeaseBusy));
            }
            Err(e) => {
                return failed(RunFailure(
                    FailureCode::StoreUnavailable,
                    format!("taking the lease: {e}"),
                ));
            }
        };
        // Diff mode reads the whole query every run; a source with a time
        // cursor starts an overlap window before the saved one.
        let start = if definition.source.sync_mode().reads_whole() {
            None
        } else {
            source.rewind(start)
        };
        let cursor = start.as_ref().map(|c| c.to_string());
        info!(
            fence = lease.fence,
            cursor = cursor.as_deref().unwrap_or("null"),
            "Run started"
        );
        for notice in destination_notices {
            warn!(notice = %notice, "Destination notice");
            let event = serde_json::json!({ "message": notice });
            if let Err(e) =
                runs::add_run_event(&env.store, run.id, "destination_notice", event).await
            {
                warn!(error = %e, "Could not record the destination notice");
            }
        }
        let lost = AtomicBool::new(false);
        let cx = RunContext {
            env,
            run,
            definition,
            lease: &lease,
            destination: &destination,
            lost: &lost,
            trace,
        };
        let mut report = run_with_lease(&cx, start, &mut source, progress).await;
        record_dropped_values(env, run, definition, &destination).await;
        report.lease = Some(lease);
        report
    }
    .await
}

/// The span a run's log lines carry, made by whoever runs it (a worker, a
/// foreground command): its ids appear once per line.
pub fn run_span(run: &RunRow) -> tracing::Span {
    info_span!(
        "run",
        run.id = run.id,
        sync.id = %run.sync_id,
        workspace = %run.workspace_id,
        attempt = run.attempt
    )
}

/// Where a run stands: its counts, last written cursor and page number.
struct LoopState {
    counts: RunCounts,
    cursor: Option<Value>,
    page: u64,
}

/// Runs the pages while the lease is renewed beside them.
/// Values the destination left out for not fitting their attribute's type
/// (Brevo ignores such a value): one notice per attribute on the run's
/// timeline, a WARN, and the metric, so what Brevo would drop is never
/// counted as written without a word.
async fn record_dropped_values(
    env: &RunEnv,
    run: &RunRow,
    definition: &SyncDefinition,
    destination: &AnyDestination,
) {
    for (attribute, count, why) in destination.take_dropped() {
        let notice = format!(
            "attribute {attribute}: {} not written, {why} (Brevo would ignore them); \
             fix the mapping or the attribute's type",
            crate::words::counted(count, "value", "values")
        );
        warn!(notice = %notice, "Destination notice");
        crate::telemetry::record_values_dropped(
            &run.sync_id,
            definition.workspace.as_str(),
            &attribute,
            count,
        );
        let event =
            serde_json::json!({ "message": notice, "attribute": attribute, "values": count });
        if let Err(e) = runs::add_run_event(&env.store, run.id, "destination_notice", event).await {
            warn!(error = %e, "Could not record the destination notice");
        }
    }
}

async fn run_with_lease(
    cx: &RunContext<'_>,
    start: Option<Value>,
    source: &mut AnySource,
    progress: &mut (dyn FnMut(&PageProgress) + Send),
) -> RunReport {
    let mut state = LoopState {
        counts: RunCounts::default(),
        cursor: start,
        page: 0,
    };
    // Boxed: the page loop's future is large, and a run's is held on a
    // worker's stack (a debug build's overflowed in a Redis failover).
    let pages = Box::pin(async {
        match &cx.env.only {
            Some(address) => {
                super::only_record::send_only(cx, source, &mut state.counts, address).await
            }
            None => page_loop(cx, source, &mut state, progress).await,
        }
    });
    let result = tokio::select! {
        result = pages => result,
        never = renew_until_lost(cx) => match never {},
    };
    let outcome = match result {
        Ok(outcome) => outcome,
        // Stopped at a checkpoint it wrote: nothing failed.
        Err(RunFailure(FailureCode::RunCancelled, detail)) => {
            info!(detail = %detail, "Run cancelled");
            RunOutcome::Skipped(FailureCode::RunCancelled)
        }
        Err(RunFailure(code, detail)) => {
            // Persist the last clean cursor once more before the failure is
            // recorded (refused, harmlessly, if the fence moved on).
            let (run, fence) = (cx.run, cx.lease.fence);
            let cursor = state.cursor.as_ref();
            if let Err(e) =
                cursors::checkpoint_cursor(&cx.env.store, &run.sync_id, cursor, fence, run.id).await
            {
                warn!(error = %e, "Could not persist the last clean cursor again");
            }
            warn!(code = %code, detail = %detail, "Run failed");
            RunOutcome::Failed { code, detail }
        }
    };
    RunReport {
        outcome,
        counts: state.counts,
        cursor: state.cursor,
        lease: None,
    }
}

/// Renews the lease every `renew_every` (and the run's heartbeat with it). Never
/// returns: it marks the lease lost and idles when it is gone.
async fn renew_until_lost(cx: &RunContext<'_>) -> std::convert::Infallible {
    let env = cx.env;
    loop {
        tokio::time::sleep(env.renew_every).await;
        match env.leases.renew(cx.lease).await {
            Ok(true) => {
                if let Err(e) = runs::touch_heartbeat(&env.store, cx.run.id).await {
                    warn!(error = %e, "Heartbeat write failed");
                }
            }
            Ok(false) => {
                warn!("Lease renewal found the lease gone");
                cx.lost.store(true, Ordering::SeqCst);
                return std::future::pending().await;
            }
            // A Redis hiccup is not a loss; the proof before the next checkpoint decides.
            Err(e) => warn!(error = %e, "Lease renewal failed"),
        }
    }
}

/// The pages, in order, until the source ends, the run is stopped, or a page
/// fails.
async fn page_loop(
    cx: &RunContext<'_>,
    source: &mut AnySource,
    state: &mut LoopState,
    progress: &mut (dyn FnMut(&PageProgress) + Send),
) -> Result<RunOutcome, RunFailure> {
    // A run back from giving its worker away sends first in the slot it
    // reserved then. One already past is not used: the account's line has
    // moved on, and a request sent late beside the ones in their slots
    // could pass the account's limit.
    if let Some(Ok(wait)) = cx
        .run
        .slot_at
        .map(|slot| (slot - chrono::Utc::now()).to_std())
    {
        cx.destination.hold_slot(wait);
        give_worker_back_for(cx, wait);
    }
    let (store, sync_id) = (&cx.env.store, cx.run.sync_id.as_str());
    let mut fields = FieldGuard::load(store, sync_id, &cx.definition.mapping).await?;
    let mut pages = ReadAhead::start(cx, source, state.cursor.as_ref()).await?;
    let mut pacing = CheckpointPacing::new(state.cursor.clone());
    // The last clean page's checkpoint, written while the next page is sent.
    let mut saving = None;
    loop {
        if cx.env.stop.is_cancelled() {
            info!("Stopping at a clean batch boundary");
            land(cx, state, saving.take()).await?;
            pages.give_back_stake(cx).await?;
            checkpoint_waiting(cx, state, &pacing).await?;
            return Ok(RunOutcome::Stopped);
        }
        if let Some(wait) = slot_too_far(cx, &mut pages).await {
            info!(
                wait_s = wait.as_secs_f64(),
                "The destination account's request budget is busy; back in the queue until it nears"
            );
            land(cx, state, saving.take()).await?;
            pages.give_back_stake(cx).await?;
            checkpoint_waiting(cx, state, &pacing).await?;
            return Ok(RunOutcome::Deferred(wait));
        }
        let page = match pages.take() {
            Ok(Some(page)) => page,
            Ok(None) => {
                land(cx, state, saving.take()).await?;
                checkpoint_waiting(cx, state, &pacing).await?;
                // A complete read: mirror mode takes off who left the query,
                // and its fields' counts are the next run's yardstick.
                super::mirror::remove_departed(cx).await?;
                if let Err(e) = fields.remember(store, sync_id, cx.run.id).await {
                    warn!(error = %e, "Could not keep the mapped fields' counts");
                }
                return Ok(RunOutcome::Succeeded);
            }
            Err(e) => {
                land(cx, state, saving.take()).await?;
                return Err(e.into());
            }
        };
        // Nothing of a read whose mapped field vanished is sent.
        if let Err(failure) = fields.check(state.page + 1, &page.fields) {
            land(cx, state, saving.take()).await?;
            return Err(abandon(cx, &mut pages, failure).await);
        }
        state.page += 1;
        let before = state.counts;
        let records = page.records;
        // A page that names no next cursor (the last page of a cursor API)
        // keeps the cursor it was read from: the next run reads it again
        // (replayed from the ledger) and goes on from there. Never back to
        // the start.
        let next = page.next_cursor.clone().or_else(|| pacing.at().clone());
        // 2-3. Send this page (its call proves the lease before it leaves)
        // while the next is prepared and staked, with the last clean page's
        // checkpoint in one statement.
        let mut completions = Vec::new();
        let (delivered, (prepared_next, landed)) = tokio::join!(
            send_page(cx, page, &mut state.counts, &mut completions),
            pages.advance(cx, next.as_ref(), saving.take()),
        );
        // The last checkpoint answers first: a refused one stops the run,
        // with this page's answer recorded (its call was made).
        let cancel = match landed.map(|landed| landed.apply(state)) {
            Some(Err(failure)) => {
                complete_alone(cx, completions).await?;
                return Err(abandon(cx, &mut pages, failure).await);
            }
            Some(Ok(cancel)) => cancel,
            None => false,
        };
        let refused = match delivered {
            Ok(refused) => refused,
            Err(failure) => return Err(abandon(cx, &mut pages, failure).await),
        };
        if let Some(refused) = refused {
            complete_alone(cx, completions).await?;
            let failure = RunFailure(
                refused,
                format!(
                    "all {records} records of page {} were rejected or quarantined",
                    state.page
                ),
            );
            return Err(abandon(cx, &mut pages, failure).await);
        }
        // 4. The page is clean: its checkpoint goes (or a replayed page's
        // waits).
        let counts = &state.counts;
        let replayed_whole = counts.replayed - before.replayed == records as i64
            && (counts.written, counts.rejected, counts.resent)
                == (before.written, before.rejected, before.resent);
        // Diff mode keeps no cursor: every run reads the whole query.
        let saved = if cx.definition.source.sync_mode().reads_whole() {
            None
        } else {
            next
        };
        if !pacing.page_clean(saved, replayed_whole) {
            saving = Some(Saving::new(state, pacing.at(), completions));
            pacing.written();
        }
        if cancel {
            land(cx, state, saving.take()).await?;
            checkpoint_waiting(cx, state, &pacing).await?;
            pages.give_back_stake(cx).await?;
            return Err(RunFailure(
                FailureCode::RunCancelled,
                format!("cancelled by a person; stopped after page {}", state.page),
            ));
        }
        debug!(
            page = state.page,
            records,
            written = state.counts.written - before.written,
            replayed = state.counts.replayed - before.replayed,
            rejected = state.counts.rejected - before.rejected,
            "Page done"
        );
        crate::telemetry::record_page(
            &cx.run.sync_id,
            &cx.run.workspace_id,
            &before,
            &state.counts,
        );
        progress(&PageProgress {
            page: state.page,
            records,
            counts: state.counts,
        });
        // A failure preparing the next page surfaces once this one is saved.
        if let Err(failure) = prepared_next {
            land(cx, state, saving.take()).await?;
            return Err(failure);
        }
    }
}

/// A run that stops on a failure gives back the next page's stake (made
/// while this page's call was in flight) when it can: it was never sent.
async fn abandon(
    cx: &RunContext<'_>,
    pages: &mut ReadAhead<'_>,
    failure: RunFailure,
) -> RunFailure {
    if let Err(e) = pages.give_back_stake(cx).await {
        warn!(error = %e.1, "Could not give back the next page's stake");
    }
    failure
}

/// A daemon run about to send a page takes the account's next request slot
/// if it comes soon enough
/// (and waits for it without its worker); else the wait, for the run to go
/// back in the queue. Pages with nothing to send, and foreground runs, never
/// wait here.
async fn slot_too_far(cx: &RunContext<'_>, pages: &mut ReadAhead<'_>) -> Option<Duration> {
    cx.env.hold_worker_for_slot?;
    let page = pages.next_mut()?;
    if page.fresh.is_empty() && page.suspects.is_empty() {
        return None;
    }
    match cx.destination.reserve_slot(slot_within(cx)).await {
        Ok(wait) => {
            give_worker_back_for(cx, wait);
            None
        }
        Err(wait) => Some(wait),
    }
}

/// How near the account's request slot must be for a run to keep it and
/// wait (`reserve_slot`): a foreground run always waits; a daemon run up to
/// `hold_worker_for_slot`, or, with no place to wait alone, up to a wait
/// worth a hand-off (which would hold the worker itself: the run goes back
/// in the queue instead, with its slot, and the worker starts another run).
fn slot_within(cx: &RunContext<'_>) -> Duration {
    match cx.env.hold_worker_for_slot {
        None => Duration::MAX,
        Some(within) if !cx.env.hand_off.can_wait_alone() => within.min(HAND_OFF_FROM),
        Some(within) => within,
    }
}

/// A wait this long for the account's slot is not spent on a worker: the
/// run gives it back (once, while the daemon has a place) and goes on alone.
fn give_worker_back_for(cx: &RunContext<'_>, wait: Duration) {
    if wait >= HAND_OFF_FROM && !cx.env.hand_off.given_back() && cx.env.hand_off.give_worker_back()
    {
        debug!(
            wait_s = wait.as_secs_f64(),
            "Waiting for the destination account's request slot; the worker is free meanwhile"
        );
    }
}

/// A clean page's checkpoint, written while the next page is sent (by
/// `ReadAhead::advance`, with the stake of the page after it).
pub(super) struct Saving {
    counts: RunCounts,
    pages: u64,
    at: Option<Value>,
    completions: Vec<BatchCompletion>,
}

/// What a checkpoint came to.
pub(super) struct Landed {
    /// Where it moved the cursor, if it did.
    moved: Option<Option<Value>>,
    /// Whether a person asked the run to stop, or why the run must stop.
    answer: Result<bool, RunFailure>,
}

impl Landed {
    fn apply(self, state: &mut LoopState) -> Result<bool, RunFailure> {
        if let Some(at) = self.moved {
            state.cursor = at;
        }
        self.answer
    }
}

impl Saving {
    /// A clean page's checkpoint, to move the cursor to `at` with the run's
    /// progress. The page's bulk-call answers go with it.
    fn new(state: &LoopState, at: &Option<Value>, completions: Vec<BatchCompletion>) -> Self {
        Saving {
            counts: state.counts,
            pages: state.page,
            at: at.clone(),
            completions,
        }
    }

    /// Writes it: the lease proved beside a statement that moves the cursor
    /// and is refused if a newer fence wrote, and that stakes `stake` (a
    /// later page's bulk call) if it moved. The answers of a page sent in
    /// several calls go alone before it, all but the last: the calls were
    /// made either way. The run sends the next page meanwhile, whose call
    /// proves the lease again before it leaves: no call leaves after a failed
    /// proof (docs/contract.md). Boxed: it is large, and a run's future is
    /// held on a worker's stack.
    pub(super) fn write<'a>(
        self,
        cx: &'a RunContext<'a>,
        stake: Option<&'a BatchStakeRequest>,
    ) -> std::pin::Pin<Box<dyn Future<Output = (Landed, Option<BatchStake>)> + Send + 'a>> {
        Box::pin(self.written(cx, stake))
    }

    async fn written(
        mut self,
        cx: &RunContext<'_>,
        stake: Option<&BatchStakeRequest>,
    ) -> (Landed, Option<BatchStake>) {
        let at = self.at;
        let write = async {
            let with_checkpoint = self.completions.pop();
            complete_alone(cx, self.completions).await?;
            let page = CleanPage {
                run_id: cx.run.id,
                sync_id: &cx.run.sync_id,
                fence: cx.lease.fence,
                counts: &self.counts,
                pages: self.pages,
                cursor: at.as_ref(),
                completion: with_checkpoint.as_ref(),
                stake,
            };
            Ok::<_, RunFailure>(checkpoint::record_clean_page(&cx.env.store, &page).await?)
        };
        let (proof, written) = tokio::join!(prove_lease(cx), write);
        match written {
            Err(failure) => (
                Landed {
                    moved: None,
                    answer: Err(failure),
                },
                None,
            ),
            Ok((false, _, _)) => (
                Landed {
                    moved: None,
                    answer: Err(RunFailure::lease_lost("a newer fence wrote the cursor")),
                },
                None,
            ),
            Ok((true, staked, cancel)) => (
                Landed {
                    moved: Some(at),
                    answer: proof.map(|()| cancel),
                },
                staked,
            ),
        }
    }
}

/// The checkpoint in flight, if any, written with no stake.
pub(super) async fn landing(cx: &RunContext<'_>, saving: Option<Saving>) -> Option<Landed> {
    match saving {
        Some(saving) => Some(saving.write(cx, None).await.0),
        None => None,
    }
}

/// Writes the checkpoint in flight, if any, alone; a person's request to
/// stop that it brings back is the run's to end with.
async fn land(
    cx: &RunContext<'_>,
    state: &mut LoopState,
    saving: Option<Saving>,
) -> Result<(), RunFailure> {
    let Some(landed) = landing(cx, saving).await else {
        return Ok(());
    };
    if landed.apply(state)? {
        return Err(RunFailure(
            FailureCode::RunCancelled,
            format!("cancelled by a person; stopped after page {}", state.page),
        ));
    }
    Ok(())
}

/// The lease is still this run's: not reported lost by the renewal, and
/// still holding this run's value in Redis.
pub(super) async fn prove_lease(cx: &RunContext<'_>) -> Result<(), RunFailure> {
    if cx.lost.load(Ordering::SeqCst) {
        return Err(RunFailure::lease_lost("the lease could not be renewed"));
    }
    match cx.env.leases.prove(cx.lease).await {
        Ok(true) => Ok(()),
        Ok(false) => Err(RunFailure::lease_lost(
            "the lease was gone at the checkpoint",
        )),
        Err(e) => Err(RunFailure(
            FailureCode::StoreUnavailable,
            format!("proving the lease: {e}"),
        )),
    }
}

/// Writes the checkpoint a run of replayed pages left waiting, if any.
async fn checkpoint_waiting(
    cx: &RunContext<'_>,
    state: &mut LoopState,
    pacing: &CheckpointPacing,
) -> Result<(), RunFailure> {
    if pacing.waiting() {
        let saving = Saving::new(state, pacing.at(), Vec::new());
        land(cx, state, Some(saving)).await?;
    }
    Ok(())
}

/// Sends a prepared page; returns the failure when no record of it can be
/// delivered (every one rejected, or quarantined): the page is never given up
/// on as a whole.
pub(super) async fn send_page(
    cx: &RunContext<'_>,
    page: PreparedPage,
    counts: &mut RunCounts,
    completions: &mut Vec<BatchCompletion>,
) -> Result<Option<FailureCode>, RunFailure> {
    let PreparedPage {
        records,
        cursor,
        page_id,
        open_batches,
        staked,
        replayed,
        mut rejections,
        exhausted,
        suspects,
        fresh,
        states,
        seen,
        page_digest,
        ..
    } = page;
    counts.read += records as i64;
    counts.replayed += replayed;
    let mut stakes = PageStakes {
        page_id: &page_id,
        open_batches: &open_batches,
        staked,
    };
    let mut delivered = 0;
    for (call, batch) in calls(cx, suspects, fresh).into_iter().enumerate() {
        // A page sent in several bulk calls: the answers of the earlier ones
        // are written now, not with the checkpoint, so a later call that
        // kills the process does not take them along.
        if call > 0 && !completions.is_empty() {
            complete_alone(cx, std::mem::take(completions)).await?;
        }
        let batch = Batch {
            records: batch,
            rejections: &mut rejections,
            completions,
            prove: call == 0,
        };
        delivered += deliver_batch(cx, &mut stakes, batch, counts).await?;
    }
    counts.written += delivered as i64;
    counts.rejected += rejections.len() as i64;
    let run = cx.run;
    let page = (&page_id, cursor.as_ref());
    rejected::record_rejections(&cx.env.store, run.id, &run.sync_id, page, &rejections).await?;
    if !states.is_empty() || !seen.is_empty() {
        // Diff mode: every record sent and not refused is kept as delivered,
        // so the next run sends it again only if it changes. (A call that
        // failed returned above: its records are sent again next run, as
        // completed keys if they did arrive.) Mirror mode: every record read
        // is marked as seen by this run.
        let refused: std::collections::HashSet<&[u8]> =
            rejections.iter().filter_map(|r| r.key.as_deref()).collect();
        let kept: Vec<RecordState> = states
            .into_iter()
            .filter(|s| !refused.contains(&s.key.0[..]))
            .map(|s| RecordState {
                identity: s.identity,
                fingerprint: s.content,
                email: s.email,
            })
            .collect();
        let scope = StateScope {
            sync_id: &run.sync_id,
            epoch: run.ledger_epoch,
            run_id: run.id,
        };
        record_states::remember_states(&cx.env.store, scope, &kept).await?;
        record_states::mark_seen(&cx.env.store, scope, &seen).await?;
    }
    if let Some(digest) = page_digest
        && rejections.is_empty()
    {
        // Every record of the page is now delivered and kept: the next read
        // of the same page can skip it whole. (A page with a refused record
        // is looked at record by record again.)
        record_states::keep_page_digest(&cx.env.store, &page_id, &digest).await?;
    }
    if exhausted > 0 {
        metrics::counter!(
            "syncward_records_quarantined_total",
            "sync" => run.sync_id.clone(),
            "workspace" => run.workspace_id.clone()
        )
        .increment(exhausted as u64);
    }
    if rejections.len() < records {
        return Ok(None);
    }
    Ok(Some(if exhausted == 0 {
        FailureCode::DestinationRejectedAll
    } else {
        FailureCode::RecordsQuarantined
    }))
}

/// How a page's records go out. Suspects go alone, fresh records in the
/// destination's batch size. A bulk destination takes the whole page in one
/// call, but for suspects on their last attempt: alone, so a record that kills
/// the worker is found before its neighbours' budgets run out.
fn calls(cx: &RunContext<'_>, suspects: Vec<Pending>, fresh: Vec<Pending>) -> Vec<Vec<Pending>> {
    let mut calls: Vec<Vec<Pending>> = Vec::new();
    match cx.destination.batch_size() {
        Some(n) => {
            calls.extend(suspects.into_iter().map(|s| vec![s]));
            let mut fresh = fresh.into_iter().peekable();
            while fresh.peek().is_some() {
                calls.push(fresh.by_ref().take(n.max(1)).collect());
            }
        }
        None => {
            let (alone, mut all): (Vec<Pending>, Vec<Pending>) = suspects
                .into_iter()
                .partition(|s| s.last_chance(cx.env.record_attempts));
            calls.extend(alone.into_iter().map(|s| vec![s]));
            all.extend(fresh);
            if !all.is_empty() {
                calls.push(all);
            }
        }
    }
    calls
}

/// One destination call's records, and where its answers go.
struct Batch<'p> {
    records: Vec<Pending>,
    rejections: &'p mut Vec<Rejection>,
    /// Bulk-call answers that ride with the page's checkpoint.
    completions: &'p mut Vec<BatchCompletion>,
    /// The lease is proved before the call leaves (a page's first call).
    prove: bool,
}

/// Stakes, sends and settles one call's records; returns how many were
/// delivered. A call that failed is settled first, then fails the run, which
/// is retried with backoff (the cursor stays at this page).
async fn deliver_batch(
    cx: &RunContext<'_>,
    stakes: &mut PageStakes<'_>,
    batch: Batch<'_>,
    counts: &mut RunCounts,
) -> Result<usize, RunFailure> {
    let (offered, prove) = (batch.records.len(), batch.prove);
    let (staked, records) = stakes.stake(cx, batch.records).await?;
    // A key completed by someone else between lookup and stake is not sent.
    counts.replayed += (offered - records.len()) as i64;
    if records.is_empty() {
        return Ok(0);
    }
    let resent = records.iter().filter(|p| p.suspect).count();
    if resent > 0 {
        counts.resent += resent as i64;
        info!(
            keys = resent,
            "Re-sending keys left pending by an earlier run"
        );
    }
    let sent = records.len();
    let mut keys: Vec<DeliveryKey> = Vec::with_capacity(sent);
    let mut outbound: Vec<Outbound> = Vec::with_capacity(sent);
    let mut source_keys = Vec::with_capacity(sent);
    for p in records {
        keys.push(p.key);
        outbound.push(p.outbound);
        source_keys.push(p.source_key);
    }
    // The stake's attempt is spent as the call goes out: marked first, so a
    // record whose call kills the process at once is counted. The lease is
    // proved (the first call of a page: the last checkpoint may still be in
    // flight), the account's request slot taken and the body built
    // meanwhile; a failed proof keeps the call from leaving. A call that
    // failed as a whole failed for each of its records.
    let refusal = std::sync::OnceLock::new();
    let go = Go::after(async {
        // With no bound the slot is always held (`Ok`), however far it is.
        let slot = cx.destination.reserve_slot(Duration::MAX);
        let proof = async {
            match prove {
                true => prove_lease(cx).await,
                false => Ok(()),
            }
        };
        let (proof, (), _) = tokio::join!(proof, staked.start_call(cx, &keys), slot);
        proof.map_err(|failure| {
            let _ = refusal.set(failure);
            DestinationError::Unavailable("not sent: the run lost its lease".into())
        })
    });
    let outcomes = cx
        .destination
        .deliver(&outbound, go)
        .await
        .unwrap_or_else(|e| vec![RecordOutcome::Failed(e); sent]);
    let mut answers = CallAnswers::default();
    let answered = keys.iter().zip(outbound).zip(source_keys).zip(outcomes);
    for (((key, outbound), source_key), outcome) in answered {
        match outcome {
            RecordOutcome::Failed(error) => answers.fail(key, error),
            RecordOutcome::Delivered(result) => {
                let follow_up = cx.destination.follow_up(&result);
                answers.deliver(key, result, follow_up);
            }
            RecordOutcome::Rejected { code, message } => {
                answers.refused.push(key.0.to_vec());
                batch.rejections.push(Rejection {
                    key: Some(key.0.to_vec()),
                    email: Some(outbound.contact.email),
                    source_key,
                    code,
                    message,
                });
            }
        }
    }
    answers.settle(cx, staked, sent, batch.completions).await?;
    if let Some(failure) = refusal.into_inner() {
        return Err(failure);
    }
    if let Some(error) = answers.failed.error {
        return Err(error.into());
    }
    Ok(answers.delivered.len())
}
