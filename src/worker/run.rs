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
//!    lease proved beside it; the next page's call leaves only once that
//!    statement (which marks the call started) is in and the proof holds,
//!    so a kill re-sends at most the page in flight.
//!
//! Keys left `pending` by a dead run are suspects: they are sent again, alone,
//! within their attempt budget, so a record that kills the worker cannot spend
//! its neighbours' budgets. What it is made of lives beside it: pages read
//! ahead and staked ahead (`read_ahead`), a page's calls (`send_page`),
//! stakes packed per bulk call (`stakes`), the checkpoint waiting for the
//! next call (`clean_checkpoint`), replay checkpoints paced (`checkpoint_pacing`),
//! the account's request slots (`slots`).

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::Value;
use tracing::{debug, info, info_span, warn};

use super::checkpoint_pacing::CheckpointPacing;
use super::clean_checkpoint::{LoopState, Saving, checkpoint_waiting, land};
use super::field_guard::FieldGuard;
use super::read_ahead::ReadAhead;
use super::run_env::{PageProgress, RunContext, RunEnv, RunOutcome, RunReport};
use super::run_failure::RunFailure;
use super::send_page::send_page;
use super::slots;
use super::stakes::complete_alone;
use crate::config::SyncDefinition;
use crate::destination::{AnyDestination, Destination};
use crate::failure::FailureCode;
use crate::source::{AnySource, Source};
use crate::store::cursors;
use crate::store::runs::{self, LeaseStart, RunCounts, RunRow};

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

/// Runs the pages while the lease is renewed beside them.
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
    slots::use_reserved_slot(cx);
    let (store, sync_id) = (&cx.env.store, cx.run.sync_id.as_str());
    let mut fields = FieldGuard::load(store, sync_id, &cx.definition.mapping).await?;
    let mut pages = ReadAhead::start(cx, source, state.cursor.as_ref()).await?;
    let mut pacing = CheckpointPacing::new(state.cursor.clone());
    // The last clean page's checkpoint, written as the next page's call leaves.
    let mut saving = None;
    loop {
        if cx.env.stop.is_cancelled() {
            info!("Stopping at a clean batch boundary");
            land(cx, state, saving.take()).await?;
            pages.give_back_stake(cx).await?;
            checkpoint_waiting(cx, state, &pacing).await?;
            return Ok(RunOutcome::Stopped);
        }
        if let Some(wait) = slots::slot_too_far(cx, &mut pages).await {
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
        if let Err(failure) = fields.check(state.page + 1, &page.sorted.fields) {
            land(cx, state, saving.take()).await?;
            return Err(abandon(cx, &mut pages, failure).await);
        }
        state.page += 1;
        let before = state.counts;
        let records = page.head.records;
        // A page that names no next cursor (the last page of a cursor API)
        // keeps the cursor it was read from: the next run reads it again
        // (replayed from the ledger) and goes on from there. Never back to
        // the start.
        let next = page
            .head
            .next_cursor
            .clone()
            .or_else(|| pacing.at().clone());
        // 2-3. Send this page (the last clean page's checkpoint written and
        // the lease proved before its call leaves) while the next is
        // prepared and staked.
        let mut completions = Vec::new();
        let ((delivered, landed), prepared_next) = tokio::join!(
            send_page(cx, page, &mut state.counts, &mut completions, saving.take()),
            pages.advance(cx, next.as_ref()),
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
