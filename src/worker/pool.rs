//! The worker pool: `workers.count` loops of claim → run → record, woken by
//! LISTEN/NOTIFY with a poll fallback. A panicking run fails that run, never
//! the worker; runs still busy at the drain deadline are cut off and put back.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use sqlx::PgPool;
use sqlx::postgres::PgListener;
use tokio::sync::Notify;
use tracing::{Instrument, error, info, info_span, warn};

use super::hand_off::{HandOffPlaces, WorkerHandOff};
use super::outcome::{Recorded, Thresholds, record_outcome};
use super::run::execute_run;
use super::run_env::{RunEnv, RunOutcome, RunReport};
use crate::config::SyncDefinition;
use crate::daemon_shared::Daemon;
use crate::failure::FailureCode;
use crate::shutdown::Shutdown;
use crate::states::{RunStatus, RunTrigger};
use crate::store::runs::{self, ClaimedRun, Executor, RunCounts, RunRow};

/// Wait between tries to record a run's outcome while the store is away.
const RECORD_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs one run's future; a panic in it (a connector's bug) fails that run,
/// not the worker: it is logged at ERROR with the run and sync as tags (so it
/// reaches Sentry) and comes back as its message.
pub async fn catching_panic(
    run: &RunRow,
    execution: impl std::future::Future<Output = RunReport>,
) -> Result<RunReport, String> {
    AssertUnwindSafe(execution)
        .catch_unwind()
        .await
        .map_err(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            error!(
                panic = %what,
                tags.run_id = run.id,
                tags.sync_id = %run.sync_id,
                "Run panicked"
            );
            what
        })
}

/// How long a daemon run holds its worker waiting for a request slot shared
/// with other runs (an account's budget) before it gives the worker back and
/// returns to the queue: runs of other accounts, and runs with nothing to
/// send, start meanwhile.
const HOLD_WORKER_FOR_SLOT: Duration = Duration::from_secs(2);

/// The environment of one of `daemon`'s runs (`hand_off`: how it gives its
/// worker back).
fn run_env(daemon: &Daemon, shutdown: &Shutdown, hand_off: WorkerHandOff) -> RunEnv {
    let mut env = RunEnv::new(
        daemon.store.clone(),
        daemon.statements.clone(),
        daemon.budgets.clone(),
        daemon.leases.clone(),
        daemon.sources.clone(),
        &daemon.settings,
        shutdown.stop_token(),
    );
    env.hold_worker_for_slot = Some(HOLD_WORKER_FOR_SLOT);
    env.hand_off = hand_off;
    env
}

/// Starts the listener and the workers under `shutdown`'s tracker. Returns how
/// many workers are busy with a run, kept up to date (the daemon's status line).
pub fn start_workers(daemon: &Daemon, shutdown: &Shutdown) -> Arc<AtomicUsize> {
    let busy = Arc::new(AtomicUsize::new(0));
    let wake = Arc::new(Notify::new());
    let places = HandOffPlaces::new(daemon.settings.workers.count);
    shutdown.spawn(listen_for_runs(
        daemon.store.clone(),
        wake.clone(),
        shutdown.clone(),
    ));
    for n in 0..daemon.settings.workers.count {
        let executor = Executor {
            worker_id: format!(
                "{}-w{n}",
                &daemon.leases.boot_id().simple().to_string()[..8]
            ),
            boot_id: daemon.leases.boot_id(),
        };
        let span = info_span!("worker", worker = %executor.worker_id);
        shutdown.spawn(
            worker_loop(
                daemon.clone(),
                executor,
                wake.clone(),
                busy.clone(),
                places.clone(),
                shutdown.clone(),
            )
            .instrument(span),
        );
    }
    busy
}

/// LISTEN on `syncward_runs` and wake every idle worker on each NOTIFY.
async fn listen_for_runs(store: PgPool, wake: Arc<Notify>, shutdown: Shutdown) {
    while !shutdown.is_stopping() {
        let listener = async {
            let mut listener = PgListener::connect_with(&store).await?;
            listener.listen("syncward_runs").await?;
            loop {
                listener.recv().await?;
                wake.notify_waiters();
            }
            #[allow(unreachable_code)]
            Ok::<(), sqlx::Error>(())
        };
        tokio::select! {
            result = listener => {
                if let Err(e) = result {
                    warn!(error = %e, "LISTEN connection lost; workers poll until it is back");
                }
                tokio::select! {
                    _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
                    _ = shutdown.stopping() => {}
                }
            }
            _ = shutdown.stopping() => {}
        }
    }
}

async fn worker_loop(
    daemon: Daemon,
    executor: Executor,
    wake: Arc<Notify>,
    busy: Arc<AtomicUsize>,
    places: HandOffPlaces,
    shutdown: Shutdown,
) {
    loop {
        if shutdown.is_stopping() {
            return;
        }
        // Registered before the query, so a NOTIFY that lands in between is not lost.
        let notified = wake.notified();
        match daemon.statements.claim(&executor).await {
            Ok(Some(claimed)) => {
                busy.fetch_add(1, Ordering::Relaxed);
                // The run is a task of its own (tracked for the drain), so
                // that it can give this worker back and go on alone.
                let (hand_off, released) = places.for_run();
                let run = process(daemon.clone(), claimed, shutdown.clone(), hand_off);
                let run = shutdown.spawn(run.in_current_span());
                tokio::select! {
                    _ = run => {}
                    Ok(()) = released => {}
                }
                busy.fetch_sub(1, Ordering::Relaxed);
            }
            Ok(None) => {
                tokio::select! {
                    _ = notified => {}
                    _ = tokio::time::sleep(daemon.settings.workers.poll_interval) => {}
                    _ = shutdown.stopping() => {}
                }
            }
            Err(e) => {
                warn!(error = %e, "Claiming a run failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(daemon.settings.workers.poll_interval) => {}
                    _ = shutdown.stopping() => {}
                }
            }
        }
    }
}

async fn process(daemon: Daemon, claimed: ClaimedRun, shutdown: Shutdown, hand_off: WorkerHandOff) {
    let (daemon, shutdown) = (&daemon, &shutdown);
    let ClaimedRun {
        run,
        sync_definition,
        sync_paused,
        sync_archived,
    } = claimed;
    let span = super::run::run_span(&run);
    async {
        let definition = match sync_definition {
            Some(stored) => serde_json::from_value::<SyncDefinition>(stored.0)
                .map_err(|e| format!("the stored definition no longer validates: {e}")),
            None => Err("the sync no longer exists".to_string()),
        };
        let report = match definition {
            // A run queued before the archive: nothing is read or sent.
            _ if sync_archived == Some(true) => RunReport {
                outcome: RunOutcome::Skipped(FailureCode::SyncArchived),
                counts: RunCounts::default(),
                cursor: None,
                lease: None,
            },
            // A run queued before the pause: nothing is read or sent.
            _ if sync_paused == Some(true) && run.trigger != RunTrigger::Forced => RunReport {
                outcome: RunOutcome::Skipped(FailureCode::SyncPaused),
                counts: RunCounts::default(),
                cursor: None,
                lease: None,
            },
            Err(detail) => RunReport {
                outcome: RunOutcome::Failed { code: FailureCode::ConfigInvalid, detail },
                counts: RunCounts::default(),
                cursor: None,
                lease: None,
            },
            Ok(definition) => {
                let env = run_env(daemon, shutdown, hand_off);
                let mut quiet = |_: &super::run_env::PageProgress| {};
                let execution = catching_panic(&run, execute_run(&env, &run, &definition, &mut quiet));
                tokio::select! {
                    result = execution => match result {
                        Ok(report) => report,
                        Err(what) => {
                            // The lease of a panicked run is not released by it.
                            break_recorded_lease(daemon, run.id).await;
                            RunReport {
                                outcome: RunOutcome::Failed { code: FailureCode::Internal, detail: format!("the run panicked: {what}") },
                                counts: RunCounts::default(),
                                cursor: None,
                                lease: None,
                            }
                        }
                    },
                    _ = shutdown.drain_expired() => {
                        shutdown.record_cut_off();
                        cut_off(daemon, &run).await;
                        return;
                    }
                }
            }
        };
        // The store may be briefly away (a Postgres restart): keep trying, so
        // the run does not stay `running` under a live daemon that no sweeper
        // would take it from.
        let recorded = loop {
            match record_outcome(
                &daemon.alerter, &daemon.statements, &run, &report, Some(&daemon.settings.retry), Thresholds::of(&daemon.settings)).await {
                Ok(recorded) => break Ok(recorded),
                Err(e) => {
                    warn!(error = %e, "Recording the run's outcome failed; trying again");
                    tokio::select! {
                        _ = tokio::time::sleep(RECORD_RETRY) => {}
                        _ = shutdown.drain_expired() => break Err(e),
                    }
                }
            }
        };
        // Released once the outcome is recorded: the next run of the sync
        // cannot start before this one shows as ended or put back. The
        // release and the dead-man markers' clearing go to Redis together.
        let release = async {
            if let Some(lease) = &report.lease
                && let Err(e) = daemon.leases.release(lease).await
            {
                warn!(error = %e, "Releasing the lease failed; it expires on its own");
            }
        };
        let told = async { match recorded {
            Ok(Recorded::Finished { status, failure, closed_incidents }) => {
                // A failure is for `journalctl -p warning`; one that paused
                // the sync raises its alert at ERROR besides.
                match failure {
                    Some(code) if status == RunStatus::Failed => {
                        warn!(status = status.as_str(), failure = code.as_str(), "Run finished")
                    }
                    _ => info!(status = status.as_str(), failure = failure.map(|f| f.as_str()).unwrap_or(""), "Run finished"),
                }
                if status == RunStatus::Succeeded
                    && let Err(e) = crate::deadman::on_success(
                        &daemon.alerter,
                        &daemon.redis,
                        &daemon.settings.redis.key_prefix,
                        &run.workspace_id,
                        &run.sync_id,
                        &closed_incidents,
                    )
                    .await
                {
                    warn!(error = %e, "Ending a dead-man incident failed");
                }
            }
            Ok(Recorded::Requeued { due_in, trigger }) => info!(trigger, due_in_s = due_in.as_secs_f64(), "Run put back in the queue"),
            Ok(Recorded::Superseded) => warn!("The run was put back by a sweeper while it ran here; its outcome is not recorded (the ledger and the fence keep its writes safe)"),
            Err(e) => error!(error = %e, "Recording the run's outcome failed until the drain deadline; once this daemon is gone, the sweeper of another recovers it"),
        }
        };
        tokio::join!(release, told);
    }
    .instrument(span)
    .await
}

/// The drain deadline passed while the run was busy: its future is dropped; put
/// it back with its attempt spent and free its lease for whoever resumes it.
async fn cut_off(daemon: &Daemon, run: &RunRow) {
    warn!("Drain deadline reached; cutting the run off");
    break_recorded_lease(daemon, run.id).await;
    // Keep the counts its last clean batch recorded.
    let counts = match runs::get_run(&daemon.store, run.id).await {
        Ok(Some(row)) => row.counts(),
        _ => RunCounts::default(),
    };
    if let Err(e) = runs::requeue_run(
        &daemon.store,
        run,
        &counts,
        runs::Requeue {
            due_in: Duration::ZERO,
            give_back_attempt: false,
            trigger: RunTrigger::Shutdown,
            reason: "cut off at the drain deadline",
            slot_in: None,
        },
    )
    .await
    {
        error!(error = %e, "Re-queuing a cut-off run failed; the sweeper will recover it");
    }
}

/// Breaks the lease a run recorded, if it still holds exactly that value.
async fn break_recorded_lease(daemon: &Daemon, run_id: i64) {
    if let Ok(Some(row)) = runs::get_run(&daemon.store, run_id).await
        && let Some(value) = row.lease_token
        && let Err(e) = daemon.leases.break_lease(&row.sync_id, &value).await
    {
        warn!(error = %e, "Breaking the run's lease failed; it expires on its own");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;
    use crate::redis::{RedisPool, SharedConnection};

    /// With Redis away, an account's runs in one daemon pace it together (at
    /// half the shared rate), not each at that rate of its own.
    #[tokio::test]
    async fn runs_of_one_daemon_share_the_local_pace_while_redis_is_away() {
        // A port nothing listens on: every reservation falls back to the local pace.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let redis = RedisPool::server(&format!("redis://127.0.0.1:{port}")).unwrap();
        let store = PgPool::connect_lazy("postgres://nobody@127.0.0.1:1/none").unwrap();
        let daemon = Daemon::new(
            store,
            SharedConnection::new(redis),
            uuid::Uuid::new_v4(),
            Arc::new(Settings::default()),
        );
        let shutdown = Shutdown::new(Duration::from_secs(15));
        let (first, second) = (
            run_env(&daemon, &shutdown, WorkerHandOff::default()),
            run_env(&daemon, &shutdown, WorkerHandOff::default()),
        );
        let per_second = 10;
        let first_slot = first.budgets.per_second("acct", per_second).take().await;
        let second_slot = second.budgets.per_second("acct", per_second).take().await;
        assert_eq!(first_slot, Ok(Duration::ZERO));
        // The second run's slot comes one local interval (twice the shared
        // one: 2 × 1 s / (10 × 0.9) = 222 ms) after the first run's.
        let interval = first
            .budgets
            .per_second("acct", per_second)
            .interval()
            .unwrap();
        let second_slot = second_slot.unwrap();
        assert!(
            second_slot > interval + interval / 2 && second_slot <= interval * 2,
            "the second run's slot is {second_slot:?} away; one local interval ({:?}) expected",
            interval * 2
        );
    }
}
