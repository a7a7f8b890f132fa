//! What a run is given and what it gives back: its environment (built in one
//! place, `RunEnv::new`), what every step of one run reads once its lease is
//! taken (`RunContext`) and the proof that the lease is still its own, how it
//! ended, and its progress per page.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::hand_off::WorkerHandOff;
use super::run_failure::RunFailure;
use crate::config::secrets::SecretStore;
use crate::config::{Settings, SyncDefinition};
use crate::destination::{AnyDestination, DESTINATION_RETRY, Destination, RetryPolicy};
use crate::failure::FailureCode;
use crate::lease::{Lease, LeaseManager};
use crate::outbound::SharedBudgets;
use crate::source::SourceConnections;
use crate::store::grouped::RunStatements;
use crate::store::runs::{RunCounts, RunRow};
use crate::store::trace::TraceKey;

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
    /// Destination request budgets, shared per account with every daemon:
    /// the process's one set (its local pace, while Redis is away, is the
    /// whole process's, not each run's).
    pub budgets: SharedBudgets,
    /// Where each workspace's secrets are read, when a run opens its
    /// connectors.
    pub secrets: SecretStore,
    /// How long a run may hold its worker waiting for a request slot it
    /// shares with other runs: a longer wait puts it back in the queue until
    /// the slot nears (`RunOutcome::Deferred`). `None` (a foreground run,
    /// which has no worker to give back): it waits.
    pub hold_worker_for_slot: Option<Duration>,
    /// How the run gives its worker back while it waits for a slot nearer
    /// than that (none outside a daemon's workers).
    pub hand_off: WorkerHandOff,
    /// `sync run --only ADDRESS`: the run reads and sends only the records
    /// of this address, and moves no cursor (`only_record`).
    pub only: Option<String>,
    /// The install's key for the trace's address digests, read from the
    /// store by the first run that needs it.
    trace_key: std::sync::Arc<tokio::sync::OnceCell<TraceKey>>,
}

impl RunEnv {
    /// The environment the daemon and `sync run --foreground` give a run,
    /// from the settings: the one place it is built.
    pub fn new(
        store: PgPool,
        statements: RunStatements,
        budgets: SharedBudgets,
        leases: LeaseManager,
        sources: SourceConnections,
        settings: &Settings,
        stop: CancellationToken,
    ) -> Self {
        RunEnv {
            store,
            statements,
            leases,
            // Bounded far below i32::MAX by the config's validation.
            record_attempts: i32::try_from(settings.ledger.record_attempts).unwrap_or(i32::MAX),
            renew_every: settings.lease.renew_every,
            retry: DESTINATION_RETRY,
            stop,
            sources,
            budgets,
            secrets: settings.secrets.store(),
            hold_worker_for_slot: None,
            hand_off: WorkerHandOff::default(),
            only: None,
            trace_key: Default::default(),
        }
    }

    /// The install's trace key (read once).
    pub async fn trace_key(&self) -> sqlx::Result<&TraceKey> {
        self.trace_key
            .get_or_try_init(|| async {
                let mut store = self.store.acquire().await?;
                TraceKey::load(&mut store).await
            })
            .await
    }
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
    /// Stopped cleanly at a batch boundary because the destination account's
    /// shared request budget is busy this long: back in the queue until then,
    /// its worker free meanwhile (`RunEnv::hold_worker_for_slot`).
    Deferred(Duration),
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

impl RunReport {
    pub(super) fn ended(outcome: RunOutcome) -> Self {
        RunReport {
            outcome,
            counts: RunCounts::default(),
            cursor: None,
            lease: None,
        }
    }
}

/// Progress after each clean page, for people watching.
#[derive(Debug, Clone)]
pub struct PageProgress {
    pub page: u64,
    pub records: usize,
    pub counts: RunCounts,
}

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
