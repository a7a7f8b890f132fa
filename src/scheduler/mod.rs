//! The scheduler: enqueues a run of every active sync at its cron, with
//! tokio-cron-scheduler. It reloads the set of syncs on every NOTIFY on
//! `syncward_syncs` (and every few seconds), so publishing, pausing and
//! resuming need no restart. A run that cannot be built (its definition no
//! longer validates, a secret is missing) is recorded as a failed run with
//! `config_invalid`, so the failure counts.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio_cron_scheduler::{Job, JobScheduler};
use tracing::{info, warn};
use uuid::Uuid;

use crate::daemon::Daemon;
use crate::failure::FailureCode;
use crate::shutdown::Shutdown;
use crate::store::{runs, syncs};

/// How often the set of syncs is re-read when no NOTIFY arrives.
const RELOAD_EVERY: Duration = Duration::from_secs(5);

pub async fn run(daemon: Daemon, shutdown: Shutdown) -> anyhow::Result<()> {
    let mut scheduler = JobScheduler::new().await?;
    add_deadman_job(&daemon, &scheduler).await?;
    scheduler.start().await?;
    let mut jobs: HashMap<String, (String, Uuid)> = HashMap::new();
    let mut listener = PgListener::connect_with(&daemon.store).await.ok();
    if let Some(l) = listener.as_mut()
        && let Err(e) = l.listen("syncward_syncs").await
    {
        warn!(error = %e, "LISTEN syncward_syncs failed; reloading every few seconds only");
        listener = None;
    }
    while !shutdown.is_stopping() {
        if let Err(e) = reload(&daemon, &scheduler, &mut jobs).await {
            warn!(error = %e, "Reloading the schedule failed");
        }
        let changed = async {
            match listener.as_mut() {
                Some(l) => l.recv().await.map(|_| ()),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = changed => if result.is_err() { listener = None },
            _ = tokio::time::sleep(RELOAD_EVERY) => {}
            _ = shutdown.stopping() => {}
        }
    }
    scheduler.shutdown().await?;
    Ok(())
}

/// Brings the cron jobs in line with the active syncs.
async fn reload(
    daemon: &Daemon,
    scheduler: &JobScheduler,
    jobs: &mut HashMap<String, (String, Uuid)>,
) -> anyhow::Result<()> {
    let active: HashMap<String, String> = syncs::list_syncs(&daemon.store)
        .await?
        .into_iter()
        .filter(|s| s.status == "active")
        .filter_map(|s| s.schedule.map(|schedule| (s.id, schedule)))
        .collect();
    let gone: Vec<String> = jobs
        .iter()
        .filter(|(id, (schedule, _))| active.get(*id) != Some(schedule))
        .map(|(id, _)| id.clone())
        .collect();
    for id in gone {
        if let Some((_, job)) = jobs.remove(&id) {
            scheduler.remove(&job).await?;
            info!(sync.id = %id, "Unscheduled");
        }
    }
    for (id, schedule) in active {
        if jobs.contains_key(&id) {
            continue;
        }
        let sync_id = id.clone();
        let tick_daemon = daemon.clone();
        let job = Job::new_async(schedule.as_str(), move |_, _| {
            let daemon = tick_daemon.clone();
            let sync_id = sync_id.clone();
            Box::pin(async move { enqueue_scheduled(&daemon, &sync_id).await })
        })?;
        let uuid = scheduler.add(job).await?;
        info!(sync.id = %id, schedule = %schedule, "Scheduled");
        jobs.insert(id, (schedule, uuid));
    }
    Ok(())
}

/// The dead-man check at `deadman.schedule` (minute 13 of every hour).
async fn add_deadman_job(daemon: &Daemon, scheduler: &JobScheduler) -> anyhow::Result<()> {
    let checker = daemon.clone();
    let job = Job::new_async(daemon.settings.deadman.schedule.as_str(), move |_, _| {
        let daemon = checker.clone();
        Box::pin(async move {
            let settings = &daemon.settings;
            match crate::deadman::check(
                &daemon.alerter,
                daemon.leases.pool(),
                &settings.redis.key_prefix,
                &settings.deadman,
            )
            .await
            {
                Ok(report) => {
                    info!(alerted = ?report.alerted, still_silent = ?report.still_silent, "Dead-man check done")
                }
                Err(e) => warn!(error = %e, "Dead-man check failed"),
            }
        })
    })?;
    scheduler.add(job).await?;
    Ok(())
}

/// One tick: enqueue a run, or record why it could not be built.
pub async fn enqueue_scheduled(daemon: &Daemon, sync_id: &str) {
    let result = async {
        let Some(sync) = syncs::get_sync(&daemon.store, sync_id).await? else { return Ok(()) };
        if sync.status != "active" {
            return Ok(());
        }
        let problem = match sync.definition() {
            Err(e) => Some(format!("the stored definition no longer validates: {e}")),
            Ok(definition) => definition.check_secrets(sync_id).err().map(|e| e.to_string()),
        };
        if let Some(detail) = problem {
            let run_id = runs::record_failed_enqueue(&daemon.store, sync_id, "schedule", FailureCode::ConfigInvalid.as_str(), &detail)
                .await?;
            warn!(sync.id = %sync_id, run.id = run_id, detail = %detail, "Scheduled run could not be built");
            if let Err(e) = crate::breaker::after_failure(&daemon.alerter, sync_id, daemon.settings.breaker.consecutive_failures).await {
                warn!(error = %e, "The circuit breaker check failed");
            }
            return Ok(());
        }
        let max_attempts = i32::try_from(daemon.settings.retry.max_attempts).unwrap_or(i32::MAX);
        runs::enqueue_run(&daemon.store, sync_id, "schedule", max_attempts).await?;
        Ok::<(), sqlx::Error>(())
    }
    .await;
    if let Err(e) = result {
        warn!(sync.id = %sync_id, error = %e, "Enqueueing a scheduled run failed");
    }
}
