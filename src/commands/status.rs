//! `syncward status`: what is alive and what waits, read from the store: the
//! daemons whose heartbeat is fresh (with their busy workers), the queue,
//! the running runs with their progress, paused syncs and open dead-man
//! incidents. Exit 3 when no daemon is alive, so monitoring can call it.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::output::outln;
use super::print_json;
use crate::config::Settings;
use crate::ops::{Door, Scope};
use crate::states::{PauseReason, SyncStatus};
use crate::store;
use crate::store::deadman::{self, IncidentRow};
use crate::store::processes::{self, ProcessRow};
use crate::store::runs::{self, RunRow};

/// No daemon is alive: exit code 3.
#[derive(Debug, thiserror::Error)]
#[error("no syncward daemon is alive (none has a fresh heartbeat in the store)")]
pub struct NoLiveDaemon;

/// Everything `status` shows.
#[derive(Debug, Serialize)]
pub struct Status {
    pub at: DateTime<Utc>,
    pub daemons: Vec<ProcessRow>,
    /// Foreground runs' processes alive now.
    pub foreground: Vec<ProcessRow>,
    pub queue_depth: i64,
    /// Age of the oldest due queued run, in seconds (0 when none is due).
    pub queue_oldest_age_seconds: f64,
    pub running: Vec<RunningRun>,
    pub paused: Vec<PausedSync>,
    pub open_incidents: Vec<IncidentRow>,
}

#[derive(Debug, Serialize)]
pub struct RunningRun {
    pub id: i64,
    pub sync_id: String,
    pub attempt: i32,
    pub started_at: Option<DateTime<Utc>>,
    pub records_read: i64,
    pub records_written: i64,
    pub records_replayed: i64,
    pub boot_id: Option<uuid::Uuid>,
}

#[derive(Debug, Serialize)]
pub struct PausedSync {
    pub id: String,
    pub workspace_id: String,
    pub reason: Option<PauseReason>,
    /// What the person who paused it wrote.
    pub note: Option<String>,
}

impl From<RunRow> for RunningRun {
    fn from(r: RunRow) -> Self {
        Self {
            id: r.id,
            sync_id: r.sync_id,
            attempt: r.attempt,
            started_at: r.started_at,
            records_read: r.records_read,
            records_written: r.records_written,
            records_replayed: r.records_replayed,
            boot_id: r.boot_id,
        }
    }
}

pub async fn execute(settings: &Settings, json: bool) -> anyhow::Result<()> {
    let pool = store::connect(&settings.database).await?;
    let door = Door::new(pool.clone(), settings.run_attempts()).enter(Scope::Cli);
    let (live, (queue_depth, queue_oldest_age_seconds), open_incidents) = tokio::try_join!(
        processes::live_processes(&pool),
        runs::queue_stats(&pool),
        deadman::open_incidents(&pool),
    )?;
    let (running, syncs) = tokio::try_join!(door.running_runs(), door.sync_list())?;
    let (daemons, foreground): (Vec<ProcessRow>, Vec<ProcessRow>) =
        live.into_iter().partition(|p| p.kind == "daemon");
    let status = Status {
        at: Utc::now(),
        daemons,
        foreground,
        queue_depth,
        queue_oldest_age_seconds,
        running: running.into_iter().map(RunningRun::from).collect(),
        paused: syncs
            .into_iter()
            .filter(|s| s.status == SyncStatus::Paused)
            .map(|s| PausedSync {
                id: s.id,
                workspace_id: s.workspace_id,
                reason: s.paused_reason,
                note: s.paused_note,
            })
            .collect(),
        open_incidents,
    };
    if json {
        print_json(&status)?;
    } else {
        print_text(&status);
    }
    if status.daemons.is_empty() {
        return Err(NoLiveDaemon.into());
    }
    Ok(())
}

fn since(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let secs = (now - at).num_seconds().max(0) as u64;
    let up = crate::words::duration_text(std::time::Duration::from_secs(secs));
    format!("{} (up {up})", at.format("%Y-%m-%d %H:%M:%SZ"))
}

/// `host pid N boot B`: which process, on which machine and boot.
fn process(host: &str, pid: i32, boot_id: uuid::Uuid) -> String {
    let host = if host.is_empty() { "?" } else { host };
    format!("{host} pid {pid} boot {}", boot_id.simple())
}

fn print_text(s: &Status) {
    outln!("Daemons alive: {}", s.daemons.len());
    for d in &s.daemons {
        outln!(
            "  {} v{} since {}; {}/{} workers busy",
            process(&d.host, d.pid, d.boot_id),
            d.version,
            since(d.started_at, s.at),
            d.workers_busy,
            d.workers_total
        );
    }
    for f in &s.foreground {
        outln!(
            "  foreground run: {} since {}",
            process(&f.host, f.pid, f.boot_id),
            since(f.started_at, s.at)
        );
    }
    outln!(
        "Queue: {}{}",
        crate::words::counted(s.queue_depth, "run", "runs"),
        if s.queue_depth > 0 {
            format!("; the oldest due {:.0} s ago", s.queue_oldest_age_seconds)
        } else {
            String::new()
        }
    );
    outln!("Running: {}", s.running.len());
    for r in &s.running {
        outln!(
            "  run {} of {} (attempt {}): {} read, {} written, {} replayed{}",
            r.id,
            r.sync_id,
            r.attempt,
            r.records_read,
            r.records_written,
            r.records_replayed,
            r.started_at
                .map(|t| format!(", started {}", since(t, s.at)))
                .unwrap_or_default()
        );
    }
    outln!("Paused syncs: {}", s.paused.len());
    for p in &s.paused {
        outln!(
            "  {} ({}): {}",
            p.id,
            p.workspace_id,
            // In the words `sync list` uses: a person's reason, or the code's.
            match p.reason {
                Some(reason) => crate::views::paused_words(reason, p.note.as_deref()),
                None => "paused".to_string(),
            }
        );
    }
    outln!("Open dead-man incidents: {}", s.open_incidents.len());
    for i in &s.open_incidents {
        outln!(
            "  {} {}: {} since {}",
            i.scope,
            i.sync_id.as_deref().unwrap_or(&i.workspace_id),
            i.silence,
            i.opened_at.format("%Y-%m-%d %H:%M:%SZ")
        );
    }
}
