//! The scheduler: every second, one tick enqueues a run of each active sync
//! whose due time has come, and moves that due time to the schedule's next
//! one, in one statement (`store::schedule`). The due times live in Postgres,
//! so any daemon's tick can fire any sync, several daemons split a busy
//! second between them, and a tick that fell while no daemon ran is still due
//! when one starts (`catch_up`). tokio-cron-scheduler keeps the dead-man check.
//! A run that cannot be built (its definition no longer validates, a secret is
//! missing) is recorded as a failed run with `config_invalid`, so the failure
//! counts.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_cron_scheduler::{Job, JobScheduler};
use tracing::{debug, info, warn};

use crate::config::{CatchUp, Schedule, SyncDefinition, Timezone};
use crate::daemon::Daemon;
use crate::failure::FailureCode;
use crate::shutdown::Shutdown;
use crate::store::{runs, schedule};

/// Syncs one tick's statement takes at most; a fuller second takes several.
const TICK_BATCH: i64 = 1000;

/// A tick more than this late fell while no daemon ran (or all were stalled):
/// it is caught up once or skipped, as the sync's `catch_up` says.
const MISSED_AFTER: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

pub async fn run(daemon: Daemon, shutdown: Shutdown) -> anyhow::Result<()> {
    let mut scheduler = JobScheduler::new().await?;
    add_deadman_job(&daemon, &scheduler).await?;
    scheduler.start().await?;
    let mut ticker = Ticker::default();
    while !shutdown.is_stopping() {
        while !shutdown.is_stopping() {
            match ticker.tick(&daemon).await {
                Ok(report) if report.full => continue,
                Ok(_) => break,
                Err(e) => {
                    warn!(error = %e, "A schedule tick failed; the next one retries");
                    break;
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(until_next_second()) => {}
            _ = shutdown.stopping() => {}
        }
    }
    scheduler.shutdown().await?;
    Ok(())
}

/// Cron has one-second resolution: a tick lands just after each whole second.
fn until_next_second() -> Duration {
    let into_second = Utc::now().timestamp_subsec_millis();
    Duration::from_millis(u64::from(1000 - into_second.min(999)) + 5)
}

/// When one sync runs, read from its definition.
#[derive(Debug, Clone)]
struct Timing {
    schedule: Schedule,
    timezone: Option<Timezone>,
    catch_up: CatchUp,
}

impl Timing {
    /// The next due time after `now`, strictly after the one just served.
    fn next(&self, now: DateTime<Utc>, served: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
        let from = served.map_or(now, |served| served.max(now));
        self.schedule.next_after_in(from, self.timezone.as_ref())
    }
}

/// What one tick did.
#[derive(Debug, Default, Clone, Copy)]
pub struct TickReport {
    /// Runs enqueued.
    pub enqueued: usize,
    /// Syncs armed (their first due time set).
    pub armed: usize,
    /// The tick took a full batch: more syncs may be due this second.
    pub full: bool,
}

/// Ticks the durable schedule. Holds each sync's parsed timing per version, so
/// a busy second parses no definition twice.
#[derive(Debug, Default)]
pub struct Ticker {
    timings: HashMap<String, (i32, Timing)>,
}

impl Ticker {
    /// One tick: every due sync (up to a batch) gets its run and its next due
    /// time; every unarmed one gets its first due time. Syncs whose run cannot
    /// be built are advanced too, and their failure recorded.
    pub async fn tick(&mut self, daemon: &Daemon) -> anyhow::Result<TickReport> {
        let mut tx = daemon.store.begin().await?;
        let due = schedule::lock_due_syncs(&mut tx, TICK_BATCH).await?;
        if due.is_empty() {
            return Ok(TickReport::default());
        }
        let unparsed: Vec<String> = due
            .iter()
            .filter(|d| self.timings.get(&d.id).is_none_or(|(v, _)| *v != d.version))
            .map(|d| d.id.clone())
            .collect();
        // Definitions that cannot become a run: their failure is recorded once
        // their tick is taken, and they are re-read at every tick until fixed.
        let mut problems: HashMap<String, Unbuildable> = HashMap::new();
        if !unparsed.is_empty() {
            for (id, version, json) in schedule::definitions(&mut tx, &unparsed).await? {
                match read_timing(&id, &json.0) {
                    Ok(timing) => {
                        self.timings.insert(id, (version, timing));
                    }
                    Err(problem) => {
                        self.timings.remove(&id);
                        problems.insert(id, *problem);
                    }
                }
            }
        }
        let now = Utc::now();
        let max_attempts = i32::try_from(daemon.settings.retry.max_attempts).unwrap_or(i32::MAX);
        let mut steps = Vec::with_capacity(due.len());
        for sync in &due {
            let timing = match problems.get(&sync.id) {
                Some((timing, _)) => timing.as_ref(),
                None => self.timings.get(&sync.id).map(|(_, t)| t),
            };
            // A schedule unreadable even on its own is looked at again in an hour.
            let next = timing
                .and_then(|t| t.next(now, sync.next_due_at))
                .unwrap_or(now + chrono::TimeDelta::hours(1));
            let enqueue = match (sync.next_due_at, timing) {
                (None, _) => false,
                _ if problems.contains_key(&sync.id) => false,
                (Some(due_at), Some(timing)) => {
                    now - due_at <= MISSED_AFTER || timing.catch_up == CatchUp::Once
                }
                (Some(_), None) => false,
            };
            steps.push(schedule::Advance {
                sync_id: sync.id.clone(),
                seen: sync.next_due_at,
                next,
                enqueue,
            });
        }
        let advanced = schedule::advance_and_enqueue(&mut tx, &steps, max_attempts).await?;
        tx.commit().await?;

        let mut report = TickReport {
            full: i64::try_from(due.len()).unwrap_or(i64::MAX) >= TICK_BATCH,
            ..TickReport::default()
        };
        let due_at: HashMap<&str, Option<DateTime<Utc>>> =
            due.iter().map(|d| (d.id.as_str(), d.next_due_at)).collect();
        for step in &advanced {
            let seen = due_at.get(step.sync_id.as_str()).copied().flatten();
            match seen {
                None => report.armed += 1,
                Some(due_at) if step.enqueued => {
                    report.enqueued += 1;
                    let lag = (now - due_at).to_std().unwrap_or_default();
                    metrics::histogram!("syncward_schedule_lag_seconds").record(lag.as_secs_f64());
                    debug!(sync.id = %step.sync_id, due_at = %due_at, "Scheduled run enqueued");
                }
                Some(_) => {}
            }
            if seen.is_some()
                && let Some((_, detail)) = problems.get(&step.sync_id)
            {
                record_unbuildable(daemon, &step.sync_id, detail).await;
            }
        }
        Ok(report)
    }
}

/// Why a sync's run cannot be built, with its timing if the schedule reads.
type Unbuildable = (Option<Timing>, String);

/// A definition's timing, or why its run cannot be built (with the timing if
/// at least the schedule reads).
fn read_timing(sync_id: &str, json: &serde_json::Value) -> Result<Timing, Box<Unbuildable>> {
    let definition = match serde_json::from_value::<SyncDefinition>(json.clone()) {
        Ok(definition) => definition,
        Err(e) => {
            let schedule = json
                .get("schedule")
                .and_then(serde_json::Value::as_str)
                .and_then(|s| Schedule::parse(s).ok());
            let timing = schedule.map(|schedule| Timing {
                schedule,
                timezone: None,
                catch_up: CatchUp::Once,
            });
            return Err(Box::new((
                timing,
                format!("the stored definition no longer validates: {e}"),
            )));
        }
    };
    let timing = Timing {
        schedule: definition.schedule.clone(),
        timezone: definition.timezone,
        catch_up: definition.catch_up,
    };
    match definition.check_secrets(sync_id) {
        Ok(()) => Ok(timing),
        Err(e) => Err(Box::new((Some(timing), e.to_string()))),
    }
}

/// A tick whose run could not be built: recorded as a failed run, which the
/// breaker counts.
async fn record_unbuildable(daemon: &Daemon, sync_id: &str, detail: &str) {
    let code = FailureCode::ConfigInvalid.as_str();
    match runs::record_failed_enqueue(&daemon.store, sync_id, "schedule", code, detail).await {
        Ok(run_id) => {
            warn!(sync.id = %sync_id, run.id = run_id, detail = %detail, "Scheduled run could not be built");
            if let Err(e) = crate::breaker::after_failure(
                &daemon.alerter,
                sync_id,
                daemon.settings.breaker.consecutive_failures,
            )
            .await
            {
                warn!(error = %e, "The circuit breaker check failed");
            }
        }
        Err(e) => {
            warn!(sync.id = %sync_id, error = %e, "Recording an unbuildable scheduled run failed")
        }
    }
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
