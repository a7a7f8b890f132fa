//! The sweeper: puts back runs whose worker is gone, and purges the ledger.
//!
//! Two rules. Fast: a `running` run whose daemon is dead by both judges (its
//! liveness key gone from Redis and its heartbeat stale in Postgres) belongs
//! to a dead process; its lease is broken (only if it still holds the
//! value the run recorded) and the run is re-queued at once. Slow: a `running`
//! run started longer ago than `sweeper.stuck_after` whose lease is free is
//! re-queued. A run that already spent its last attempt is failed instead.
//! It also purges the ledger and follows Brevo imports to their end.

mod imports;
mod notify;

use chrono::Utc;
use tracing::{info, warn};

use crate::daemon_shared::Daemon;
use crate::failure::FailureCode;
use crate::lease::is_alive;
use crate::shutdown::Shutdown;
use crate::states::{RunStatus, RunTrigger};
use crate::store::runs::{self, RunRow};
use crate::store::{history, ledger, processes};

/// What one sweep did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    pub requeued: Vec<i64>,
    pub failed: Vec<i64>,
    pub purged: u64,
    /// Runs, alerts and audit rows past `retention.*`.
    pub history_purged: u64,
    pub imports_ended: usize,
}

/// Sweeps every `sweeper.every` until shutdown begins.
pub async fn run(daemon: Daemon, shutdown: Shutdown) {
    let mut last_purge: Option<std::time::Instant> = None;
    loop {
        // The purges need no haste: at most once a minute, however often the
        // sweeper runs for fast recovery.
        let purge = last_purge.is_none_or(|t| t.elapsed() >= PURGE_EVERY);
        if purge {
            last_purge = Some(std::time::Instant::now());
        }
        match sweep_once(&daemon, purge).await {
            Ok(report) if report != SweepReport::default() => {
                let ids =
                    |ids: &[i64]| ids.iter().map(i64::to_string).collect::<Vec<_>>().join(" ");
                info!(
                    requeued = %ids(&report.requeued),
                    failed = %ids(&report.failed),
                    keys_purged = report.purged,
                    history_purged = report.history_purged,
                    imports_ended = report.imports_ended,
                    "Sweep done"
                )
            }
            Ok(_) => {}
            Err(e) => warn!(error = %e, "Sweep failed; trying again next round"),
        }
        tokio::select! {
            _ = tokio::time::sleep(daemon.settings.sweeper.every) => {}
            _ = shutdown.stopping() => return,
        }
    }
}

/// One sweep; with `purge`, the ledger and history are purged too.
pub async fn sweep_once(daemon: &Daemon, purge: bool) -> anyhow::Result<SweepReport> {
    let mut report = SweepReport::default();
    let prefix = &daemon.settings.redis.key_prefix;
    let stuck_after = chrono::Duration::from_std(daemon.settings.sweeper.stuck_after)?;
    // A process on this machine whose pid is gone is dead now, not when
    // its TTL runs out: its runs are put back below this same sweep.
    crate::lease::reap_dead_on_this_machine(
        &daemon.store,
        daemon.redis.pool(),
        prefix,
        daemon.leases.boot_id(),
    )
    .await?;
    for run in runs::running_runs(&daemon.store, None, None).await? {
        // Dead by both judges: its liveness key is gone from Redis and its
        // heartbeat is stale in Postgres (a Redis restart loses every key of
        // processes that are alive and well).
        let dead_holder = match run.boot_id {
            Some(boot) if boot != daemon.leases.boot_id() => {
                !is_alive(daemon.redis.pool(), prefix, boot).await?
                    && !processes::is_live(&daemon.store, boot).await?
            }
            _ => false,
        };
        if dead_holder {
            if let Some(value) = &run.lease_token {
                daemon.leases.break_lease(&run.sync_id, value).await?;
            }
            put_back(
                daemon,
                &run,
                RunTrigger::Recovery,
                "its daemon stopped showing signs of life",
                &mut report,
            )
            .await?;
            continue;
        }
        let started = run.started_at.unwrap_or(run.created_at);
        let stuck = Utc::now() - started > stuck_after;
        if stuck && daemon.leases.holder(&run.sync_id).await?.is_none() {
            put_back(
                daemon,
                &run,
                RunTrigger::Sweeper,
                "running for longer than sweeper.stuck_after with a free lease",
                &mut report,
            )
            .await?;
        }
    }
    // Gauges for dashboards, refreshed each round.
    let (depth, oldest) = runs::queue_stats(&daemon.store).await?;
    metrics::gauge!("syncward_queue_depth").set(depth as f64);
    metrics::gauge!("syncward_queue_oldest_age_seconds").set(oldest);
    let open = crate::store::deadman::open_incident_count(&daemon.store).await?;
    metrics::gauge!("syncward_deadman_incidents_open").set(open as f64);
    if purge {
        let purged =
            ledger::purge_completed(&daemon.store, daemon.settings.ledger.retention, 10_000)
                .await?;
        report.purged = purged.keys;
        metrics::counter!("syncward_ledger_purged_keys_total").increment(purged.keys);
        metrics::counter!("syncward_ledger_partitions_dropped_total").increment(purged.days);
        let kept = &daemon.settings.retention;
        let retention = history::Retention {
            runs: kept.runs,
            alerts: kept.alerts,
            audit_log: kept.audit_log,
        };
        let history = history::purge_history(&daemon.store, retention, 1_000).await?;
        for (table, purged) in [
            ("runs", history.runs),
            ("alerts", history.alerts),
            ("audit_log", history.audit_rows),
        ] {
            metrics::counter!("syncward_history_purged_total", "table" => table).increment(purged);
        }
        report.history_purged = history.runs + history.alerts + history.audit_rows;
    }
    // Brevo's answer about an import must not hold up the rest of the sweep.
    match imports::check_imports(daemon).await {
        Ok(ended) => report.imports_ended = ended,
        Err(e) => warn!(error = %e, "Checking Brevo imports failed; next sweep"),
    }
    // Nor must a run's [notify] receiver.
    if let Err(e) = notify::deliver_due(daemon).await {
        warn!(error = %e, "Delivering runs' [notify] events failed; next sweep");
    }
    Ok(report)
}

/// How often the sweeper purges the ledger and history.
const PURGE_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

async fn put_back(
    daemon: &Daemon,
    run: &RunRow,
    trigger: RunTrigger,
    reason: &str,
    report: &mut SweepReport,
) -> anyhow::Result<()> {
    if run.attempt >= run.max_attempts {
        // Its last attempt died with it: the attempt was spent at the claim.
        let detail = format!("the worker died during the last attempt ({reason})");
        // Another daemon's sweeper may have got there first.
        if runs::finish_run(
            &daemon.store,
            run,
            RunStatus::Failed,
            &run.counts(),
            Some((FailureCode::Interrupted.as_str(), &detail)),
            &serde_json::json!({"failure_code": "interrupted", "reason": reason}),
        )
        .await?
        .is_none()
        {
            return Ok(());
        }
        warn!(run.id = run.id, sync.id = %run.sync_id, "Dead run had no attempts left; failed");
        crate::breaker::after_failure(
            &daemon.alerter,
            &run.sync_id,
            daemon.settings.breaker.consecutive_failures,
        )
        .await?;
        report.failed.push(run.id);
    } else if runs::requeue_run(
        &daemon.store,
        run,
        &run.counts(),
        runs::Requeue {
            due_in: std::time::Duration::ZERO,
            give_back_attempt: false,
            trigger,
            reason,
            slot_in: None,
        },
    )
    .await?
    {
        warn!(run.id = run.id, sync.id = %run.sync_id, trigger = trigger.as_str(), "Re-queued a run whose worker is gone");
        report.requeued.push(run.id);
    }
    Ok(())
}
