//! Recording how a run ended: finished, retried with backoff, or put back in
//! the queue after a clean stop. One place, for the daemon and the CLI.

use std::time::Duration;

use sqlx::PgPool;

use super::run_env::{RunOutcome, RunReport};
use crate::config::RetrySettings;
use crate::failure::FailureCode;
use crate::outbound::RetryPolicy;
use crate::states::{RunStatus, RunTrigger};
use crate::store::grouped::RunStatements;
use crate::store::notifications;
use crate::store::rejected;
use crate::store::runs::{self, RunCounts, RunRow};

/// What became of the run.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    Finished {
        status: RunStatus,
        failure: Option<FailureCode>,
        /// Dead-man incidents a success closed (for their recovery notices).
        closed_incidents: Vec<crate::store::deadman::IncidentRow>,
    },
    Requeued {
        due_in: Duration,
        trigger: &'static str,
    },
    /// The run had left this claim already (a sweeper put it back, believing
    /// its worker dead, and it may be running elsewhere): nothing was recorded.
    Superseded,
}

/// The policy a sync's failed runs are retried by: `retry.backoff_base`
/// doubling per attempt up to `retry.backoff_max`, for as many retries as the
/// run has attempts after its first (`max_attempts`, which a sync may set).
pub fn run_retry(retry: &RetrySettings, max_attempts: i32) -> RetryPolicy {
    RetryPolicy {
        // A run without attempts left (or a nonsensical count) is not retried.
        retries: u32::try_from(max_attempts.saturating_sub(1)).unwrap_or(0),
        backoff_base: retry.backoff_base,
        backoff_max: retry.backoff_max,
        // Runs are not told to wait by a server: their waits are the
        // connectors' own, within the run.
        waits: 0,
        max_wait: Duration::ZERO,
    }
}

/// The settings a run's end is judged by.
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    /// `breaker.consecutive_failures` (a sync may override it).
    pub breaker_failures: u32,
    /// `ledger.record_attempts`, named in the quarantine alert.
    pub record_attempts: u32,
}

impl Thresholds {
    pub fn of(settings: &crate::config::Settings) -> Self {
        Self {
            breaker_failures: settings.breaker.consecutive_failures,
            record_attempts: settings.ledger.record_attempts,
        }
    }
}

/// Records a run's end. With `retry` (daemon runs), a retryable failure with
/// attempts left goes back in the queue after its backoff, and a clean stop at a
/// batch boundary goes back at once with its attempt returned.
pub async fn record_outcome(
    alerter: &crate::alerts::Alerter,
    statements: &RunStatements,
    run: &RunRow,
    report: &RunReport,
    retry: Option<&RetrySettings>,
    thresholds: Thresholds,
) -> sqlx::Result<Recorded> {
    let store = alerter.store();
    let recorded = record(store, statements, run, report, retry).await?;
    if let Some(started) = run.started_at {
        let seconds = (chrono::Utc::now() - started).num_milliseconds() as f64 / 1000.0;
        let outcome = match &report.outcome {
            RunOutcome::Succeeded => "succeeded",
            RunOutcome::Failed { .. } => "failed",
            RunOutcome::Skipped(_) => "skipped",
            RunOutcome::Stopped => "stopped",
            RunOutcome::Deferred(_) => "deferred",
        };
        metrics::histogram!("syncward_run_duration_seconds", "outcome" => outcome)
            .record(seconds.max(0.0));
    }
    if matches!(
        &report.outcome,
        RunOutcome::Failed {
            code: crate::failure::FailureCode::LeaseLost,
            ..
        }
    ) {
        metrics::counter!("syncward_lease_losses_total").increment(1);
    }
    if let Recorded::Finished {
        status: RunStatus::Succeeded,
        ..
    } = &recorded
    {
        crate::telemetry::record_success(&run.sync_id, &run.workspace_id, chrono::Utc::now());
    }
    if let Recorded::Finished {
        status: RunStatus::Failed,
        ..
    } = &recorded
    {
        // The breaker reads what was just recorded; its own failure must not
        // hide the run's outcome.
        if let Err(e) =
            crate::breaker::after_failure(alerter, &run.sync_id, thresholds.breaker_failures).await
        {
            tracing::error!(error = %e, "The circuit breaker check of sync {} failed", run.sync_id);
        }
    }
    if let Recorded::Finished {
        status, failure, ..
    } = &recorded
        && let Some(event) = run_event(run, report, *status, *failure)
        && let Err(e) = notifications::enqueue(store, run.id, &run.sync_id, &event).await
    {
        tracing::error!(error = %e, "The run's [notify] event of sync {} was not kept", run.sync_id);
    }
    if report.counts.rejected > 0
        && let Err(e) = alert_quarantine(alerter, run, thresholds.record_attempts).await
    {
        tracing::error!(error = %e, "The quarantine alert check of sync {} failed", run.sync_id);
    }
    Ok(recorded)
}

/// The `[notify]` event of a finished run (Standard Webhooks' `type`,
/// `timestamp`, `data`): `run.succeeded`, `run.failed` or `run.cancelled`;
/// none for a run skipped for another reason (it did nothing).
fn run_event(
    run: &RunRow,
    report: &RunReport,
    status: RunStatus,
    failure: Option<FailureCode>,
) -> Option<serde_json::Value> {
    let kind = match (status, failure) {
        (RunStatus::Succeeded, _) => "run.succeeded",
        (RunStatus::Failed, _) => "run.failed",
        (RunStatus::Skipped, Some(FailureCode::RunCancelled)) => "run.cancelled",
        _ => return None,
    };
    let now = chrono::Utc::now();
    let duration = run
        .started_at
        .map(|started| (now - started).num_milliseconds().max(0) as f64 / 1000.0);
    let counts = &report.counts;
    Some(serde_json::json!({
        "type": kind,
        "timestamp": now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "data": {
            "sync": run.sync_id,
            "workspace": run.workspace_id,
            "run_id": run.id,
            "status": status.as_str(),
            "counts": {
                "read": counts.read,
                "written": counts.written,
                "replayed": counts.replayed,
                "rejected": counts.rejected,
                "resent": counts.resent,
            },
            "duration_s": duration,
            "failure_code": failure.map(FailureCode::as_str),
            "owner": failure.map(|f| f.owner().as_str()),
        },
    }))
}

/// Kind of the alert raised when a run quarantines records.
pub const QUARANTINE_ALERT: &str = "records_quarantined";

/// One critical alert per sync and incident when a run quarantined records:
/// the incident lasts until they are put back (`sync retry-rejected`).
async fn alert_quarantine(
    alerter: &crate::alerts::Alerter,
    run: &RunRow,
    record_attempts: u32,
) -> sqlx::Result<()> {
    let store = alerter.store();
    let quarantined = rejected::quarantined_in_run(store, run.id).await?;
    if quarantined == 0
        || !rejected::quarantine_alert_due(store, &run.sync_id, QUARANTINE_ALERT).await?
    {
        return Ok(());
    }
    let sync = &run.sync_id;
    alerter
        .raise(&crate::alerts::Alert {
            kind: QUARANTINE_ALERT,
            workspace: Some(run.workspace_id.clone()),
            sync: Some(sync.clone()),
            run_id: Some(run.id),
            message: format!(
                "Sync {sync}: {} quarantined after killing the worker {record_attempts} times \
                 (run {}). They are not sent again until someone puts them back: find what kills the worker \
                 on them, then run `syncward sync retry-rejected {sync}`.",
                crate::words::counted(quarantined, "record", "records"),
                run.id
            ),
            failure: Some(FailureCode::RecordsQuarantined),
        })
        .await;
    Ok(())
}

/// A deferred run comes back this much before its reserved slot, and waits
/// the rest on a worker.
const DEFER_EARLY: Duration = Duration::from_secs(1);

async fn record(
    store: &PgPool,
    statements: &RunStatements,
    run: &RunRow,
    report: &RunReport,
    retry: Option<&RetrySettings>,
) -> sqlx::Result<Recorded> {
    let counts = &report.counts;
    match &report.outcome {
        RunOutcome::Succeeded => finish(statements, run, RunStatus::Succeeded, counts, None).await,
        RunOutcome::Skipped(code) => {
            let detail = code.what_happened().to_string();
            finish(
                statements,
                run,
                RunStatus::Skipped,
                counts,
                Some((*code, detail)),
            )
            .await
        }
        // Back in the queue until the account's slot nears, its attempt
        // returned: waiting for a budget is neither a failure nor a try.
        // The slot it reserved goes with it.
        RunOutcome::Deferred(wait) if retry.is_some() => {
            let due_in = wait.saturating_sub(DEFER_EARLY);
            let reason = format!(
                "the destination account's request budget was booked {:.1} s ahead; the worker was given back until the run's slot",
                wait.as_secs_f64()
            );
            let requeue = runs::Requeue {
                due_in,
                give_back_attempt: true,
                trigger: run.trigger,
                reason: &reason,
                slot_in: Some(*wait),
            };
            requeued(
                runs::requeue_run(store, run, counts, requeue).await?,
                due_in,
                "deferred",
            )
        }
        RunOutcome::Stopped | RunOutcome::Deferred(_) => match retry {
            Some(_) => {
                let requeue = runs::Requeue {
                    due_in: Duration::ZERO,
                    give_back_attempt: true,
                    trigger: RunTrigger::Shutdown,
                    reason: "stopped at a clean batch boundary",
                    slot_in: None,
                };
                let done = runs::requeue_run(store, run, counts, requeue).await?;
                requeued(done, Duration::ZERO, "shutdown")
            }
            None => {
                let detail = "stopped at a batch boundary".to_string();
                finish(
                    statements,
                    run,
                    RunStatus::Failed,
                    counts,
                    Some((FailureCode::Interrupted, detail)),
                )
                .await
            }
        },
        RunOutcome::Failed { code, detail } => match retry
            .filter(|_| code.is_retryable())
            // The run's attempt (1 for the first) is the retry it would need.
            .and_then(|settings| {
                run_retry(settings, run.max_attempts)
                    .backoff(u32::try_from(run.attempt).unwrap_or(0))
            }) {
            Some(due_in) => {
                let reason = format!("{code}: {detail}");
                let requeue = runs::Requeue {
                    due_in,
                    give_back_attempt: false,
                    trigger: RunTrigger::Retry,
                    reason: &reason,
                    slot_in: None,
                };
                requeued(
                    runs::requeue_run(store, run, counts, requeue).await?,
                    due_in,
                    "retry",
                )
            }
            _ => {
                finish(
                    statements,
                    run,
                    RunStatus::Failed,
                    counts,
                    Some((*code, detail.clone())),
                )
                .await
            }
        },
    }
}

/// What a requeue that did (`done`) or found the claim gone recorded.
fn requeued(done: bool, due_in: Duration, trigger: &'static str) -> sqlx::Result<Recorded> {
    Ok(if done {
        Recorded::Requeued { due_in, trigger }
    } else {
        Recorded::Superseded
    })
}

async fn finish(
    statements: &RunStatements,
    run: &RunRow,
    status: RunStatus,
    counts: &RunCounts,
    failure: Option<(FailureCode, String)>,
) -> sqlx::Result<Recorded> {
    let event = serde_json::json!({"failure_code": failure.as_ref().map(|f| f.0)});
    let finish = runs::Finish {
        run_id: run.id,
        started_at: run.started_at,
        status,
        counts: *counts,
        failure: failure
            .as_ref()
            .map(|(code, detail)| (code.as_str().to_owned(), detail.clone())),
        event,
    };
    let Some(closed_incidents) = statements.finish(finish).await? else {
        return Ok(Recorded::Superseded);
    };
    metrics::counter!(
        "syncward_runs_finished_total",
        "outcome" => status.as_str(),
        "failure_code" => failure.as_ref().map(|f| f.0.as_str()).unwrap_or("")
    )
    .increment(1);
    Ok(Recorded::Finished {
        status,
        failure: failure.map(|f| f.0),
        closed_incidents,
    })
}
