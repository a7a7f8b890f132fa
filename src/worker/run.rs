//! One run of one sync: from the saved cursor to the end of the source, safe to
//! kill at any instant.
//!
//! Per page: derive each record's delivery key; look the page's keys up in the
//! ledger (one query); replay `completed` keys without a call; claim the rest
//! `pending` (one fenced statement per destination call, which spends one
//! attempt of each key); deliver; mark them `completed` with the answer. Only
//! when every record of the page arrived or was rejected for good does the run
//! prove its lease and move the cursor, with a write refused if a newer fence
//! exists. Keys left `pending` by a dead run are suspects: they are sent again,
//! alone, within their attempt budget, so a record that kills the worker cannot
//! spend its neighbours' budgets.
//!
//! The reading half of the next pages (fetch, keys, mapping, ledger lookup)
//! runs while the current page is sent; everything that writes (claims,
//! completions, the cursor) stays in page order. A bulk page's answer and the
//! next page's claim ride in the page's checkpoint statement: one commit.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::{Instrument, info, info_span, warn};

use super::delivery_key::{DeliveryKey, PageKeys};
use crate::config::SyncDefinition;
use crate::destination::{
    AnyDestination, Destination, DestinationError, Outbound, RecordOutcome, RetryPolicy,
};
use crate::failure::FailureCode;
use crate::lease::{Lease, LeaseManager};
use crate::mapping::map_record;
use crate::source::{AnySource, Page, Source, SourceConnections, SourceError, UNDECODABLE_RECORD};
use crate::store::cursors;
use crate::store::grouped::RunStatements;
use crate::store::imports;
use crate::store::ledger::{self, BatchClaim, Claim, KeyState};
use crate::store::rejected::{self, ATTEMPT_BUDGET_EXHAUSTED, Rejection};
use crate::store::runs::{self, LeaseStart, RunCounts, RunRow};

/// What a run needs from its surroundings.
#[derive(Debug, Clone)]
pub struct RunEnv {
    pub store: PgPool,
    /// The run-queue statements, grouped with other runs' (one set per daemon).
    pub statements: RunStatements,
    pub leases: LeaseManager,
    /// Sends allowed per delivery key (`ledger.record_attempts`).
    pub record_attempts: i32,
    /// Lease renewal period (`lease.renew_every`).
    pub renew_every: Duration,
    /// In-run retries of destination calls.
    pub retry: RetryPolicy,
    /// Cancelled when the run should stop at its next clean batch boundary.
    pub stop: CancellationToken,
    /// Source connections shared by the runs of this process.
    pub sources: SourceConnections,
    /// Benchmarks only: skip the ledger entirely (no keys looked up, claimed or
    /// completed) to measure what it costs. Never set by the daemon.
    pub bench_without_ledger: bool,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunOutcome {
    Succeeded,
    Failed {
        code: FailureCode,
        detail: String,
    },
    /// Not run, for the reason the code gives (another run held the lease,
    /// or the sync is paused): not a failure, not retried.
    Skipped(FailureCode),
    /// Stopped cleanly at a batch boundary because `stop` was cancelled.
    Stopped,
}

#[derive(Debug, Clone)]
pub struct RunReport {
    pub outcome: RunOutcome,
    pub counts: RunCounts,
    /// The last clean cursor.
    pub cursor: Option<Value>,
    /// The lease the run still holds. The caller releases it once the outcome
    /// is recorded, so the next run of the sync cannot start before this one
    /// shows as finished (or put back). Left alone, it expires after `lease.ttl`.
    pub lease: Option<Lease>,
}

/// Progress after each clean page, for people watching.
#[derive(Debug, Clone)]
pub struct PageProgress {
    pub page: u64,
    pub records: usize,
    pub counts: RunCounts,
}

/// A failure with its code, raised anywhere in the loop.
struct Stop(FailureCode, String);

impl From<sqlx::Error> for Stop {
    fn from(e: sqlx::Error) -> Self {
        Stop(
            FailureCode::StoreUnavailable,
            format!("syncward's database: {e}"),
        )
    }
}

impl From<SourceError> for Stop {
    fn from(e: SourceError) -> Self {
        let code = match &e {
            SourceError::Unreachable(_) => FailureCode::SourceUnreachable,
            SourceError::Unauthorized(_) => FailureCode::SourceAuthFailed,
            SourceError::Query(_) => FailureCode::SourceQueryFailed,
            SourceError::InvalidConfig(_) => FailureCode::ConfigInvalid,
            SourceError::AccountFrozen(_) => FailureCode::SourceAccountFrozen,
            SourceError::AccountLocked(_) => FailureCode::SourceAccountLocked,
            SourceError::Redacted(_) => FailureCode::SourceDataRedacted,
            // Only where a record could not be rejected alone.
            SourceError::Undecodable(_) => FailureCode::SourceQueryFailed,
        };
        Stop(code, e.to_string())
    }
}

impl From<DestinationError> for Stop {
    fn from(e: DestinationError) -> Self {
        let code = match &e {
            DestinationError::Unauthorized(_) => FailureCode::DestinationAuthFailed,
            DestinationError::Unavailable(_) | DestinationError::Unanswered(_) => {
                FailureCode::DestinationUnavailable
            }
            DestinationError::RateLimited(_) => FailureCode::DestinationRateLimited,
            DestinationError::InvalidConfig(_) => FailureCode::ConfigInvalid,
        };
        Stop(code, e.to_string())
    }
}

fn lease_lost(detail: &str) -> Stop {
    Stop(FailureCode::LeaseLost, detail.to_string())
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
    let span = info_span!(
        "run",
        run.id = run.id,
        sync.id = %run.sync_id,
        workspace = %run.workspace_id,
        attempt = run.attempt
    );
    async {
        let mut source = match AnySource::open(&definition.source, &env.sources) {
            Ok(s) => s,
            Err(e) => return failed_before_start(Stop::from(e)),
        };
        let mut destination = match AnyDestination::open(&definition.destination, env.retry.clone())
        {
            Ok(d) => d,
            Err(e) => return failed_before_start(Stop::from(e)),
        };
        // Before the lease, so its check spends none of the lease's time;
        // recorded once the run has started.
        let mapped: Vec<String> = definition.mapping.attributes.keys().cloned().collect();
        let destination_notices = destination.start(&mapped).await;
        // The lease, then in one statement the fence, the lease recorded on
        // the run, and the saved cursor.
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
                return RunReport {
                    outcome: RunOutcome::Skipped(FailureCode::LeaseBusy),
                    counts: RunCounts::default(),
                    cursor: None,
                    lease: None,
                };
            }
            Err(e) => {
                return failed_before_start(Stop(
                    FailureCode::StoreUnavailable,
                    format!("taking the lease: {e}"),
                ));
            }
        };
        // The cursor as its JSON text (`null` at the source's start).
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
        let mut report = run_with_lease(
            env,
            run,
            definition,
            &lease,
            start,
            &mut source,
            &destination,
            progress,
        )
        .await;
        report.lease = Some(lease);
        report
    }
    .instrument(span)
    .await
}

fn failed_before_start(stop: Stop) -> RunReport {
    RunReport {
        outcome: RunOutcome::Failed {
            code: stop.0,
            detail: stop.1,
        },
        counts: RunCounts::default(),
        cursor: None,
        lease: None,
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_with_lease(
    env: &RunEnv,
    run: &RunRow,
    definition: &SyncDefinition,
    lease: &Lease,
    start: Option<Value>,
    source: &mut AnySource,
    destination: &AnyDestination,
    progress: &mut (dyn FnMut(&PageProgress) + Send),
) -> RunReport {
    let lost = Arc::new(AtomicBool::new(false));
    let mut state = LoopState {
        counts: RunCounts::default(),
        cursor: start,
        page: 0,
    };
    let pages = page_loop(
        env,
        run,
        definition,
        lease,
        source,
        destination,
        &lost,
        &mut state,
        progress,
    );
    let renewal = renew_until_lost(env, run.id, lease, &lost);
    let result = tokio::select! {
        result = pages => result,
        never = renewal => match never {},
    };
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(Stop(code, detail)) => {
            // Persist the last clean cursor once more before the failure is
            // recorded (refused, harmlessly, if the fence moved on).
            if let Err(e) = cursors::checkpoint_cursor(
                &env.store,
                &run.sync_id,
                state.cursor.as_ref(),
                lease.fence,
                run.id,
            )
            .await
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
/// returns: it marks `lost` and idles when the lease is gone.
async fn renew_until_lost(
    env: &RunEnv,
    run_id: i64,
    lease: &Lease,
    lost: &AtomicBool,
) -> std::convert::Infallible {
    loop {
        tokio::time::sleep(env.renew_every).await;
        match env.leases.renew(lease).await {
            Ok(true) => {
                if let Err(e) = runs::touch_heartbeat(&env.store, run_id).await {
                    warn!(error = %e, "Heartbeat write failed");
                }
            }
            Ok(false) => {
                warn!("Lease renewal found the lease gone");
                lost.store(true, Ordering::SeqCst);
                return std::future::pending().await;
            }
            // A Redis hiccup is not a loss; the proof before the next checkpoint decides.
            Err(e) => warn!(error = %e, "Lease renewal failed"),
        }
    }
}

struct LoopState {
    counts: RunCounts,
    cursor: Option<Value>,
    page: u64,
}

#[allow(clippy::too_many_arguments)]
async fn page_loop(
    env: &RunEnv,
    run: &RunRow,
    definition: &SyncDefinition,
    lease: &Lease,
    source: &mut AnySource,
    destination: &AnyDestination,
    lost: &AtomicBool,
    state: &mut LoopState,
    progress: &mut (dyn FnMut(&PageProgress) + Send),
) -> Result<RunOutcome, Stop> {
    let fingerprint = source.fingerprint();
    // Three pages in flight: page N is sent while page N+1 (already read) is
    // keyed and looked up in the ledger and page N+2 is read. All of that only
    // reads, so it is simply dropped if page N does not end clean; claiming
    // (which spends attempts) waits until page N is done.
    let first = source.fetch_page(state.cursor.as_ref()).await?;
    let at = following_cursor(&first);
    let mut following = read_following(source, at).await;
    // Where the last clean page ended: written, or (`deferred`) not yet.
    let mut at = state.cursor.clone();
    let mut deferred = false;
    let mut last_write = Instant::now();
    let mut ahead: Result<PreparedPage, SourceError> = Ok(prepare_page(
        env,
        run,
        definition,
        &fingerprint,
        state.cursor.as_ref(),
        first,
    )
    .await?);
    loop {
        if env.stop.is_cancelled() {
            info!("Stopping at a clean batch boundary");
            // A claim made for this page with the last checkpoint was never
            // sent: its attempt is given back.
            if let Ok(PreparedPage {
                claimed: Some(BatchClaim::Claimed { batch, .. }),
                ..
            }) = &ahead
            {
                ledger::forget_batch(&env.store, *batch).await?;
            }
            checkpoint_deferred(env, run, lease, lost, state, &at, deferred).await?;
            return Ok(RunOutcome::Stopped);
        }
        let prepared = ahead?;
        if prepared.records == 0 {
            checkpoint_deferred(env, run, lease, lost, state, &at, deferred).await?;
            return Ok(RunOutcome::Succeeded);
        }
        state.page += 1;
        let before = state.counts;
        let records = prepared.records;
        // A page that names no next cursor (the last page of a cursor API)
        // keeps the cursor it was read from: the next run reads it again
        // (replayed from the ledger) and goes on from there. Never back to
        // the start.
        let next = prepared.next_cursor.clone().or_else(|| at.clone());
        let mut completions = Vec::new();
        let delivery = send_page(
            env,
            run,
            lease,
            destination,
            prepared,
            &mut state.counts,
            &mut completions,
        );
        let (next_page, after) = match following.take() {
            Some(Ok(page)) => {
                let after = read_following(source, following_cursor(&page));
                (Some(Ok(page)), Some(after))
            }
            Some(Err(e)) => (Some(Err(e)), None),
            None => (None, None),
        };
        let read_ahead = async {
            let prepare = async {
                Some(match next_page? {
                    Ok(page) => {
                        prepare_page(env, run, definition, &fingerprint, next.as_ref(), page)
                            .await
                            .map_err(AheadError::Store)
                    }
                    Err(e) => Err(AheadError::Source(e)),
                })
            };
            let read = async {
                match after {
                    Some(after) => after.await,
                    None => None,
                }
            };
            let (prepared, after) = tokio::join!(prepare, read);
            Some((prepared?, after))
        };
        let (delivered, read_ahead) = tokio::join!(delivery, read_ahead);
        if let Some(refused) = delivered? {
            complete_alone(env, run, completions).await?;
            return Err(Stop(
                refused,
                format!(
                    "all {records} records of page {} were rejected or quarantined",
                    state.page
                ),
            ));
        }
        // The page is clean. A page replayed whole (nothing sent, claimed or
        // rejected) may wait up to a second for its checkpoint: the cursor
        // then moves once for many such pages, and a run killed meanwhile only
        // replays them again.
        at = next;
        let replayed_whole = state.counts.replayed - before.replayed == records as i64
            && state.counts.written == before.written
            && state.counts.rejected == before.rejected
            && state.counts.resent == before.resent;
        // The next page (keyed and looked up meanwhile) has its bulk call
        // claimed in this page's checkpoint statement: after this page is
        // clean, and one commit for both.
        let (mut upcoming, after) = match read_ahead {
            Some((prepared, after)) => (Some(prepared), after),
            None => (None, None),
        };
        let claim_next = match &upcoming {
            Some(Ok(page)) if !env.bench_without_ledger && destination.batch_size().is_none() => {
                page.whole_claim(env.record_attempts)
            }
            _ => None,
        };
        if replayed_whole && claim_next.is_none() && last_write.elapsed() < REPLAY_CHECKPOINT_EVERY
        {
            deferred = true;
        } else {
            let claimed = checkpoint(
                env,
                run,
                lease,
                lost,
                state,
                &at,
                completions,
                claim_next.as_ref(),
            )
            .await?;
            if let Some(Ok(page)) = upcoming.as_mut() {
                page.claimed = claimed;
            }
            deferred = false;
            last_write = Instant::now();
        }
        info!(
            page = state.page,
            records,
            written = state.counts.written - before.written,
            replayed = state.counts.replayed - before.replayed,
            rejected = state.counts.rejected - before.rejected,
            "Page done"
        );
        crate::telemetry::record_page(&run.sync_id, &before, &state.counts);
        progress(&PageProgress {
            page: state.page,
            records,
            counts: state.counts,
        });
        let Some(prepared) = upcoming else {
            checkpoint_deferred(env, run, lease, lost, state, &at, deferred).await?;
            return Ok(RunOutcome::Succeeded);
        };
        ahead = match prepared {
            Ok(prepared) => Ok(prepared),
            Err(AheadError::Store(stop)) => return Err(stop),
            Err(AheadError::Source(source_error)) => Err(source_error),
        };
        following = after;
    }
}

/// How long the checkpoint of pages replayed whole may wait.
const REPLAY_CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Proves the run still owns the sync, then moves the cursor to `at` (with the
/// run's progress), refused if a newer fence wrote. The page's bulk-call
/// answers (`completions`) are written in the same statement, or alone when
/// the run cannot checkpoint: the calls were made either way.
#[allow(clippy::too_many_arguments)]
async fn checkpoint(
    env: &RunEnv,
    run: &RunRow,
    lease: &Lease,
    lost: &AtomicBool,
    state: &mut LoopState,
    at: &Option<Value>,
    mut completions: Vec<ledger::BatchCompletion>,
    claim_next: Option<&ledger::BatchClaimRequest>,
) -> Result<Option<BatchClaim>, Stop> {
    let proof = if lost.load(Ordering::SeqCst) {
        Err(lease_lost("the lease could not be renewed"))
    } else {
        match env.leases.prove(lease).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(lease_lost("the lease was gone at the checkpoint")),
            Err(e) => Err(Stop(
                FailureCode::StoreUnavailable,
                format!("proving the lease: {e}"),
            )),
        }
    };
    if let Err(stop) = proof {
        complete_alone(env, run, completions).await?;
        return Err(stop);
    }
    // One answer rides with the checkpoint (a bulk page has one call).
    let with_checkpoint = completions.pop();
    complete_alone(env, run, completions).await?;
    let (moved, claimed) = runs::record_clean_page(
        &env.store,
        run.id,
        &run.sync_id,
        lease.fence,
        &state.counts,
        at.as_ref(),
        with_checkpoint.as_ref(),
        claim_next,
    )
    .await?;
    if !moved {
        return Err(lease_lost("a newer fence wrote the cursor"));
    }
    state.cursor = at.clone();
    Ok(claimed)
}

/// Writes the checkpoint a run of replayed pages left waiting, if any.
async fn checkpoint_deferred(
    env: &RunEnv,
    run: &RunRow,
    lease: &Lease,
    lost: &AtomicBool,
    state: &mut LoopState,
    at: &Option<Value>,
    deferred: bool,
) -> Result<(), Stop> {
    if deferred {
        checkpoint(env, run, lease, lost, state, at, Vec::new(), None).await?;
    }
    Ok(())
}

/// Writes bulk-call answers that cannot wait for a checkpoint.
async fn complete_alone(
    env: &RunEnv,
    run: &RunRow,
    completions: Vec<ledger::BatchCompletion>,
) -> Result<(), Stop> {
    for completion in &completions {
        ledger::complete_batch(&env.store, &run.sync_id, run.id, completion).await?;
    }
    Ok(())
}

/// One record on its way: its key, where it stands, and its mapped contact.
struct Pending {
    key: DeliveryKey,
    outbound: Outbound,
    /// Found `pending` from an earlier run: its outcome is unknown.
    suspect: bool,
    /// Attempts already spent on the key.
    spent: i32,
    /// The key has a `deliveries` row of its own (a per-record claim).
    per_key: bool,
}

impl Pending {
    /// A key whose earlier sends died with their process, with one attempt
    /// left in its budget of `budget`: sent alone.
    fn last_chance(&self, budget: i32) -> bool {
        self.suspect && self.spent >= 1 && self.spent + 1 >= budget
    }
}

/// What went wrong with a page read ahead.
enum AheadError {
    /// Keying the page (a row the source cannot decode) or looking it up
    /// (the store) failed: the run fails once the page before is checkpointed.
    Store(Stop),
    /// The source failed to give the page: raised when the page is due.
    Source(SourceError),
}

/// Where the page after `page` starts; `None` after the last page. A page
/// that names no next cursor ends the run too: reading from where it was read
/// would only give the same page again (while it is still being sent).
fn following_cursor(page: &Page) -> Option<Value> {
    if page.last || page.records.is_empty() {
        return None;
    }
    page.next_cursor.clone()
}

/// Reads the page at `at` (see `following_cursor`); nothing when there is none.
async fn read_following(
    source: &mut AnySource,
    at: Option<Value>,
) -> Option<Result<Page, SourceError>> {
    let at = at?;
    Some(source.fetch_page(Some(&at)).await)
}

/// A page read, keyed, mapped and looked up in the ledger; nothing written.
struct PreparedPage {
    records: usize,
    /// The cursor the page was read from (`None`: the source's start).
    cursor: Option<Value>,
    next_cursor: Option<Value>,
    /// The page's identity in the ledger.
    page_id: [u8; 32],
    /// The page's open batch-only claims (bulk calls left unanswered), with
    /// their keys packed.
    open_batches: Vec<(i64, Vec<u8>)>,
    /// Its bulk call, claimed with the previous page's checkpoint.
    claimed: Option<BatchClaim>,
    /// Records the ledger already holds as `completed`.
    replayed: i64,
    /// Refused before any call: unmappable, or out of attempts.
    rejections: Vec<Rejection>,
    /// How many of `rejections` ran out of attempts.
    exhausted: usize,
    /// Left `pending` by an earlier run: outcome unknown.
    suspects: Vec<Pending>,
    fresh: Vec<Pending>,
}

impl PreparedPage {
    /// The claim of this page's bulk call (suspects first, as `send_page`
    /// sends them); none when nothing is to be sent, or when the page is not
    /// sent in one call (a suspect on its last attempt goes alone).
    fn whole_claim(&self, budget: i32) -> Option<ledger::BatchClaimRequest> {
        if self.suspects.is_empty() && self.fresh.is_empty()
            || self.suspects.iter().any(|s| s.last_chance(budget))
        {
            return None;
        }
        Some(whole_claim(
            &self.page_id,
            &self.open_batches,
            self.suspects.iter().chain(&self.fresh),
        ))
    }
}

/// Derives each record's key, looks the page's keys up in the ledger (one
/// query), and maps the records to send. Reads only.
async fn prepare_page(
    env: &RunEnv,
    run: &RunRow,
    definition: &SyncDefinition,
    fingerprint: &str,
    page_cursor: Option<&Value>,
    page: Page,
) -> Result<PreparedPage, Stop> {
    let sync_id = run.sync_id.as_str();
    let Page {
        records: mut page_records,
        next_cursor,
        notices,
        ..
    } = page;
    for notice in notices {
        warn!(sync = %sync_id, notice = %notice, "Source notice");
        runs::add_run_event(
            &env.store,
            run.id,
            "source_notice",
            serde_json::json!({ "message": notice }),
        )
        .await?;
    }
    let records = page_records.len();
    let mut page_keys = PageKeys::new(sync_id, fingerprint, page_cursor);
    let page_id = page_keys.page_id();
    let mut rejections = Vec::new();
    // A row the source cannot decode has no canonical bytes, so no key: it
    // is rejected alone (without one), and the rest of the page goes on.
    let mut keys = Vec::with_capacity(records);
    for position in 0..records {
        match page_keys.key_of(&page_records, position) {
            Ok(key) => keys.push((position, key)),
            Err(SourceError::Undecodable(why)) => rejections.push(undecodable(None, why)),
            Err(e) => return Err(e.into()),
        }
    }
    let known = if env.bench_without_ledger {
        ledger::PageLedger::default()
    } else {
        let packed: Vec<[u8; 32]> = keys.iter().map(|(_, k)| k.0).collect();
        ledger::lookup_page(&env.store, sync_id, &page_id, &packed).await?
    };
    let mut fresh = Vec::new();
    let mut suspects = Vec::new();
    let mut replayed = 0;
    let mut exhausted = 0;
    for (position, key) in keys {
        let state = known.state(&key.0);
        // A replayed record is not even built, let alone mapped.
        if state == KeyState::Completed {
            replayed += 1;
            continue;
        }
        let record = match page_records.take(position) {
            Ok(record) => record,
            Err(SourceError::Undecodable(why)) => {
                rejections.push(undecodable(Some(key.0.to_vec()), why));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let contact = match map_record(&definition.mapping, &record) {
            Ok(contact) => contact,
            Err(e) => {
                rejections.push(Rejection {
                    key: Some(key.0.to_vec()),
                    email: None,
                    code: e.code().to_string(),
                    message: e.to_string(),
                });
                continue;
            }
        };
        let (spent, per_key) = match state {
            KeyState::Pending { attempts, per_key } => (attempts, per_key),
            _ => (0, false),
        };
        if spent >= env.record_attempts {
            exhausted += 1;
            rejections.push(Rejection {
                key: Some(key.0.to_vec()),
                email: Some(contact.email),
                code: ATTEMPT_BUDGET_EXHAUSTED.into(),
                message: format!(
                    "its write died with the process {spent} times (no run saw an answer); \
                     quarantined: `syncward sync retry-rejected` puts it back"
                ),
            });
            continue;
        }
        let item = Pending {
            key,
            outbound: Outbound {
                key_hex: key.hex(),
                contact,
            },
            suspect: state != KeyState::Absent,
            spent,
            per_key,
        };
        if item.suspect {
            suspects.push(item)
        } else {
            fresh.push(item)
        }
    }
    Ok(PreparedPage {
        records,
        cursor: page_cursor.cloned(),
        next_cursor,
        page_id,
        open_batches: known.open_batches,
        claimed: None,
        replayed,
        rejections,
        exhausted,
        suspects,
        fresh,
    })
}

/// The rejection of a record the source could not decode.
fn undecodable(key: Option<Vec<u8>>, why: String) -> Rejection {
    Rejection {
        key,
        email: None,
        code: UNDECODABLE_RECORD.into(),
        message: why,
    }
}

/// Sends a prepared page; returns the failure when no record of it can be
/// delivered (every one rejected, or quarantined): the page is never given up
/// on as a whole.
async fn send_page(
    env: &RunEnv,
    run: &RunRow,
    lease: &Lease,
    destination: &AnyDestination,
    page: PreparedPage,
    counts: &mut RunCounts,
    completions: &mut Vec<ledger::BatchCompletion>,
) -> Result<Option<FailureCode>, Stop> {
    let PreparedPage {
        records,
        cursor,
        page_id,
        open_batches,
        mut claimed,
        replayed,
        mut rejections,
        exhausted,
        suspects,
        fresh,
        ..
    } = page;
    counts.read += records as i64;
    counts.replayed += replayed;

    // Suspects go alone, fresh records in the destination's batch size. A bulk
    // destination takes the whole page in one call, but for suspects on their
    // last attempt: alone, so a record that kills the worker is found before
    // its neighbours' budgets run out.
    let mut batches: Vec<Vec<Pending>> = Vec::new();
    match destination.batch_size() {
        Some(n) => {
            batches.extend(suspects.into_iter().map(|s| vec![s]));
            let mut fresh = fresh.into_iter().peekable();
            while fresh.peek().is_some() {
                batches.push(fresh.by_ref().take(n.max(1)).collect());
            }
        }
        None => {
            let (alone, mut all): (Vec<Pending>, Vec<Pending>) = suspects
                .into_iter()
                .partition(|s| s.last_chance(env.record_attempts));
            batches.extend(alone.into_iter().map(|s| vec![s]));
            all.extend(fresh);
            if !all.is_empty() {
                batches.push(all);
            }
        }
    }

    let mut delivered = 0;
    for (call, batch) in batches.into_iter().enumerate() {
        // A page sent in several bulk calls: the answers of the earlier ones
        // are written now, not with the checkpoint, so a later call that
        // kills the process does not take them along.
        if call > 0 && !completions.is_empty() {
            complete_alone(env, run, std::mem::take(completions)).await?;
        }
        let mut claim = ClaimContext {
            page_id: &page_id,
            open_batches: &open_batches,
            claimed: &mut claimed,
        };
        delivered += deliver_batch(
            env,
            run,
            lease,
            destination,
            &mut claim,
            batch,
            counts,
            &mut rejections,
            completions,
        )
        .await?;
    }
    counts.written += delivered as i64;
    counts.rejected += rejections.len() as i64;
    rejected::record_rejections(
        &env.store,
        run.id,
        &run.sync_id,
        (&page_id, cursor.as_ref()),
        &rejections,
    )
    .await?;
    if exhausted > 0 {
        metrics::counter!(
            "syncward_records_quarantined_total",
            "sync" => run.sync_id.clone()
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

/// What a claim needs to know of its page.
struct ClaimContext<'a> {
    page_id: &'a [u8; 32],
    open_batches: &'a [(i64, Vec<u8>)],
    /// The page's bulk call, already claimed with the previous checkpoint.
    claimed: &'a mut Option<BatchClaim>,
}

/// How a batch was claimed.
enum Claimed {
    /// One batch row holds the keys (a bulk call): its answer completes it.
    Whole(i64),
    /// One row per key (per-record calls).
    PerKey,
    /// Benchmarks only: nothing claimed.
    Unrecorded,
}

/// Claims, sends and completes one batch; returns how many were delivered.
#[allow(clippy::too_many_arguments)]
async fn deliver_batch(
    env: &RunEnv,
    run: &RunRow,
    lease: &Lease,
    destination: &AnyDestination,
    page: &mut ClaimContext<'_>,
    batch: Vec<Pending>,
    counts: &mut RunCounts,
    rejections: &mut Vec<Rejection>,
    completions: &mut Vec<ledger::BatchCompletion>,
) -> Result<usize, Stop> {
    let sync_id = run.sync_id.as_str();
    let offered = batch.len();
    let (claimed, batch) = if env.bench_without_ledger {
        (Claimed::Unrecorded, batch)
    } else if destination.batch_size().is_none() {
        claim_whole(env, run, lease, page, batch).await?
    } else {
        claim_per_key(env, run, lease, page, batch).await?
    };
    // A key completed by someone else between lookup and claim is not sent.
    counts.replayed += (offered - batch.len()) as i64;
    if batch.is_empty() {
        return Ok(0);
    }
    let resent = batch.iter().filter(|p| p.suspect).count();
    if resent > 0 {
        counts.resent += resent as i64;
        info!(
            keys = resent,
            "Re-sending keys left pending by an earlier run"
        );
    }
    let sent = batch.len();
    let (keys, outbound): (Vec<DeliveryKey>, Vec<Outbound>) =
        batch.into_iter().map(|p| (p.key, p.outbound)).unzip();
    // A call that failed as a whole failed for each of its records.
    let outcomes = destination
        .deliver(&outbound)
        .await
        .unwrap_or_else(|e| vec![RecordOutcome::Failed(e); sent]);
    let mut done_keys = Vec::new();
    let mut done_results = Vec::new();
    let mut refused_keys = Vec::new();
    let mut failed = FailedCalls::default();
    for ((key, outbound), outcome) in keys.iter().zip(outbound).zip(outcomes) {
        match outcome {
            RecordOutcome::Failed(error) => failed.add(key, error),
            RecordOutcome::Delivered(result) => {
                done_keys.push(key.0.to_vec());
                done_results.push(result);
            }
            RecordOutcome::Rejected { code, message } => {
                refused_keys.push(key.0.to_vec());
                rejections.push(Rejection {
                    key: Some(key.0.to_vec()),
                    email: Some(outbound.contact.email),
                    code,
                    message,
                });
            }
        }
    }
    // Asynchronous imports (Brevo's processId) are followed up by the sweeper:
    // only the process says whether the rows arrived.
    let mut processes: Vec<(i64, i32)> = Vec::new();
    for id in done_results
        .iter()
        .filter_map(|r| r.get("processId").and_then(serde_json::Value::as_i64))
    {
        match processes.iter_mut().find(|p| p.0 == id) {
            Some(p) => p.1 += 1,
            None => processes.push((id, 1)),
        }
    }
    match claimed {
        Claimed::Unrecorded => {}
        // The whole call failed: its attempt is given back (the run saw the
        // failure), and the run fails below.
        Claimed::Whole(id) if done_keys.is_empty() && refused_keys.is_empty() => {
            if failed.error.is_some() {
                ledger::give_back_batch(&env.store, id, failed.maybe_written).await?;
            }
        }
        // Every record delivered with one answer (an import's processId): one
        // row completes them all, with the import to follow up, in the page's
        // checkpoint statement.
        Claimed::Whole(id)
            if done_keys.len() == sent && done_results.iter().all(|r| r == &done_results[0]) =>
        {
            completions.push(ledger::BatchCompletion {
                batch: id,
                result: done_results[0].clone(),
                import: processes.first().copied(),
            });
        }
        Claimed::Whole(id) => {
            ledger::settle_batch_per_key(
                &env.store,
                id,
                &done_keys,
                &done_results,
                &failed.keys,
                failed.maybe_written,
            )
            .await?;
            if !processes.is_empty() {
                imports::record_import_processes(&env.store, sync_id, run.id, &processes).await?;
            }
        }
        Claimed::PerKey => {
            if !done_keys.is_empty() {
                ledger::complete_keys(&env.store, sync_id, &done_keys, &done_results).await?;
                if !processes.is_empty() {
                    imports::record_import_processes(&env.store, sync_id, run.id, &processes)
                        .await?;
                }
            }
            if !refused_keys.is_empty() {
                ledger::release_keys(&env.store, sync_id, &refused_keys).await?;
            }
            if !failed.keys.is_empty() {
                ledger::give_back_keys(
                    &env.store,
                    sync_id,
                    run.id,
                    &failed.keys,
                    failed.maybe_written,
                )
                .await?;
            }
        }
    }
    // What was delivered is recorded; the failure ends the run, which is
    // retried with backoff (the cursor stays at this page).
    if let Some(error) = failed.error {
        return Err(Stop::from(error));
    }
    Ok(done_keys.len())
}

/// The records of a batch whose calls failed as a whole.
#[derive(Default)]
struct FailedCalls {
    keys: Vec<Vec<u8>>,
    /// The first failure: the run's.
    error: Option<DestinationError>,
    /// Whether any of the failed calls may have written.
    maybe_written: bool,
}

impl FailedCalls {
    fn add(&mut self, key: &DeliveryKey, error: DestinationError) {
        self.keys.push(key.0.to_vec());
        self.maybe_written |= error.maybe_written();
        self.error.get_or_insert(error);
    }
}

fn fenced_before_claim() -> Stop {
    lease_lost("a newer fence was issued before the records were claimed")
}

/// The claim of a bulk call of these records, read from page `page_id`: one
/// batch row spending one attempt of every key (the page's keys share a
/// budget: the next attempt is one more than the most any of them has spent).
/// Open claims of the page that share keys with it are watched (an older run
/// may still complete them); those it covers entirely go.
fn whole_claim<'a>(
    page_id: &[u8; 32],
    open_batches: &[(i64, Vec<u8>)],
    records: impl Iterator<Item = &'a Pending>,
) -> ledger::BatchClaimRequest {
    let mut packed = Vec::new();
    let mut attempts = 1;
    for p in records {
        packed.extend_from_slice(&p.key.0);
        attempts = attempts.max(p.spent + 1);
    }
    let claiming: HashSet<&[u8]> = packed.chunks_exact(32).collect();
    let mut superseded = Vec::new();
    let mut watched = Vec::new();
    for (id, open) in open_batches {
        let mut open_keys = open.chunks_exact(32);
        if open_keys.clone().any(|k| claiming.contains(k)) {
            watched.push(*id);
            if open_keys.all(|k| claiming.contains(k)) {
                superseded.push(*id);
            }
        }
    }
    ledger::BatchClaimRequest {
        page: *page_id,
        packed_keys: packed,
        attempts,
        superseded,
        watched,
    }
}

/// Claims a bulk call's keys (or takes the claim the previous page's
/// checkpoint made for them). Returns the records still to send.
async fn claim_whole(
    env: &RunEnv,
    run: &RunRow,
    lease: &Lease,
    page: &mut ClaimContext<'_>,
    batch: Vec<Pending>,
) -> Result<(Claimed, Vec<Pending>), Stop> {
    let claimed = match page.claimed.take() {
        Some(claimed) => claimed,
        None => {
            let request = whole_claim(page.page_id, page.open_batches, batch.iter());
            ledger::claim_batch(&env.store, &run.sync_id, run.id, lease.fence, &request).await?
        }
    };
    match claimed {
        BatchClaim::Fenced => Err(fenced_before_claim()),
        BatchClaim::Claimed {
            batch: id,
            completed_meanwhile,
        } => {
            let done: HashSet<&[u8]> = completed_meanwhile.chunks_exact(32).collect();
            let batch = batch
                .into_iter()
                .filter(|p| !done.contains(&p.key.0[..]))
                .collect();
            Ok((Claimed::Whole(id), batch))
        }
    }
}

/// Claims a batch of per-record calls, one row per key. Returns the records
/// still to send.
async fn claim_per_key(
    env: &RunEnv,
    run: &RunRow,
    lease: &Lease,
    page: &ClaimContext<'_>,
    batch: Vec<Pending>,
) -> Result<(Claimed, Vec<Pending>), Stop> {
    // Keys with a row of their own are claimed again; the rest (new, or
    // pending only in a bulk claim) get a row, with what they already spent.
    let (again, fresh): (Vec<&Pending>, Vec<&Pending>) = batch.iter().partition(|p| p.per_key);
    let spent: Vec<i32> = fresh.iter().map(|p| p.spent).collect();
    let keys = |items: Vec<&Pending>| -> Vec<Vec<u8>> {
        items.into_iter().map(|p| p.key.0.to_vec()).collect()
    };
    let (fresh, again) = (keys(fresh), keys(again));
    match ledger::claim_keys(
        &env.store,
        &run.sync_id,
        page.page_id,
        &fresh,
        &spent,
        &again,
        run.id,
        lease.fence,
    )
    .await?
    {
        Claim::Fenced => Err(fenced_before_claim()),
        Claim::Claimed { keys, .. } => {
            let claimed: HashMap<Vec<u8>, i32> = keys.into_iter().collect();
            let batch = batch
                .into_iter()
                .filter(|p| claimed.contains_key(&p.key.0[..]))
                .collect();
            Ok((Claimed::PerKey, batch))
        }
    }
}
