//! The scheduler: every second, one tick enqueues a run of each active sync
//! whose due time has come, and moves that due time to the schedule's next
//! one, in one statement (`store::schedule`). The due times live in Postgres,
//! so any daemon's tick can fire any sync, several daemons split a busy
//! second between them, and a tick that fell while no daemon ran is still due
//! when one starts (`catch_up`). tokio-cron-scheduler keeps the dead-man check.
//! A stored schedule that cannot be read is recorded as a failed run with
//! `config_invalid`, so the failure counts.

use std::collections::HashMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_cron_scheduler::{Job, JobScheduler};
use tracing::{debug, info, warn};

use crate::config::{CatchUp, Schedule, Timezone};
use crate::daemon_shared::Daemon;
use crate::failure::FailureCode;
use crate::shutdown::Shutdown;
use crate::states::RunTrigger;
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

/// The timing fields of a stored definition, as text: what a tick reads.
type TimingText = (Option<String>, Option<String>, Option<String>);

/// Ticks the durable schedule. Holds the parsed timing of each distinct
/// (schedule, timezone, catch_up), so a busy second parses each once and
/// reads no definition: whether a run can be built (its definition, its
/// secrets) is the worker's to find out, and a run that cannot fails with
/// `config_invalid`, which the breaker counts.
#[derive(Debug, Default)]
pub struct Ticker {
    timings: HashMap<TimingText, Result<Timing, String>>,
}

impl Ticker {
    /// One tick: every due sync (up to a batch) gets its run and its next due
    /// time; every unarmed one gets its first due time. A sync whose stored
    /// schedule cannot be read is advanced by an hour and its failure to
    /// enqueue recorded.
    pub async fn tick(&mut self, daemon: &Daemon) -> anyhow::Result<TickReport> {
        let mut tx = daemon.store.begin().await?;
        let due = schedule::lock_due_syncs(&mut tx, TICK_BATCH).await?;
        if due.is_empty() {
            return Ok(TickReport::default());
        }
        let now = Utc::now();
        let max_attempts = i32::try_from(daemon.settings.retry.max_attempts).unwrap_or(i32::MAX);
        let mut steps = Vec::with_capacity(due.len());
        let mut problems: HashMap<&str, String> = HashMap::new();
        for sync in &due {
            let text = (
                sync.schedule.clone(),
                sync.timezone.clone(),
                sync.catch_up.clone(),
            );
            let timing =
                self.timings
                    .entry(text)
                    .or_insert_with_key(|(schedule, timezone, catch_up)| {
                        read_timing(
                            schedule.as_deref(),
                            timezone.as_deref(),
                            catch_up.as_deref(),
                        )
                    });
            let (next, enqueue) = match (&*timing, sync.next_due_at) {
                (Ok(timing), None) => (timing.next(now, None), false),
                (Ok(timing), Some(due_at)) => (
                    timing.next(now, Some(due_at)),
                    now - due_at <= MISSED_AFTER || timing.catch_up == CatchUp::Once,
                ),
                (Err(problem), seen) => {
                    if seen.is_some() {
                        problems.insert(&sync.id, problem.clone());
                    }
                    (None, false)
                }
            };
            steps.push(schedule::Advance {
                sync_id: sync.id.clone(),
                workspace_id: sync.workspace_id.clone(),
                version: sync.version,
                seen: sync.next_due_at,
                // A schedule that cannot be read is looked at again in an hour.
                next: next.unwrap_or(now + chrono::TimeDelta::hours(1)),
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
            match due_at.get(step.sync_id.as_str()).copied().flatten() {
                None => report.armed += 1,
                Some(due_at) if step.enqueued => {
                    report.enqueued += 1;
                    let lag = (now - due_at).to_std().unwrap_or_default();
                    metrics::histogram!("syncward_schedule_lag_seconds").record(lag.as_secs_f64());
                    debug!(sync.id = %step.sync_id, due_at = %due_at, "Scheduled run enqueued");
                }
                Some(_) => {
                    if let Some(detail) = problems.get(step.sync_id.as_str()) {
                        record_unbuildable(daemon, &step.sync_id, detail).await;
                    }
                }
            }
        }
        Ok(report)
    }
}

/// A stored definition's timing fields, parsed as the sync file's are.
fn read_timing(
    schedule: Option<&str>,
    timezone: Option<&str>,
    catch_up: Option<&str>,
) -> Result<Timing, String> {
    let unreadable = |what: String| format!("the stored definition no longer validates: {what}");
    let schedule = Schedule::parse(schedule.unwrap_or_default())
        .map_err(|e| unreadable(format!("schedule: {e}")))?;
    let timezone = timezone
        .map(Timezone::parse)
        .transpose()
        .map_err(|e| unreadable(format!("timezone: {e}")))?;
    let catch_up = match catch_up {
        None => CatchUp::default(),
        Some(text) => serde_json::from_value(serde_json::Value::String(text.to_owned()))
            .map_err(|e| unreadable(format!("catch_up: {e}")))?,
    };
    Ok(Timing {
        schedule,
        timezone,
        catch_up,
    })
}

/// A tick whose run could not be built: recorded as a failed run, which the
/// breaker counts.
async fn record_unbuildable(daemon: &Daemon, sync_id: &str, detail: &str) {
    let code = FailureCode::ConfigInvalid.as_str();
    match runs::record_failed_enqueue(&daemon.store, sync_id, RunTrigger::Schedule, code, detail)
        .await
    {
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
                daemon.redis.pool(),
                &settings.redis.key_prefix,
                &settings.deadman,
            )
            .await
            {
                Ok(report) => {
                    info!(alerted = %report.alerted.join(" "), still_silent = %report.still_silent.join(" "), "Dead-man check done")
                }
                Err(e) => warn!(error = %e, "Dead-man check failed"),
            }
        })
    })?;
    scheduler.add(job).await?;
    Ok(())
}
