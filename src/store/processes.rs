//! Processes: the daemons and foreground runs alive now, as Postgres sees
//! them (migration 0009). A process beats every third of its liveness TTL;
//! a heartbeat older than that TTL means it is gone.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

/// What kind of process holds runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessKind {
    Daemon,
    Foreground,
}

impl ProcessKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessKind::Daemon => "daemon",
            ProcessKind::Foreground => "foreground",
        }
    }
}

/// A process as stored.
#[derive(Debug, Clone, Serialize)]
pub struct ProcessRow {
    pub boot_id: Uuid,
    pub kind: String,
    pub host: String,
    pub pid: i32,
    pub version: String,
    pub started_at: DateTime<Utc>,
    pub heartbeat_at: DateTime<Utc>,
    pub liveness_ttl_ms: i64,
    pub workers_total: i32,
    pub workers_busy: i32,
}

/// Registers this process (its first heartbeat).
pub async fn register(
    pool: &PgPool,
    boot_id: Uuid,
    kind: ProcessKind,
    liveness_ttl: Duration,
) -> sqlx::Result<()> {
    let host = hostname();
    let pid = std::process::id();
    let ttl_ms = i64::try_from(liveness_ttl.as_millis())
        .unwrap_or(i64::MAX)
        .max(1);
    sqlx::query!(
        "INSERT INTO processes (boot_id, kind, host, pid, version, liveness_ttl_ms, machine_boot, start_ticks)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (boot_id) DO UPDATE SET heartbeat_at = now()",
        boot_id,
        kind.as_str(),
        host,
        i32::try_from(pid).unwrap_or(i32::MAX),
        env!("CARGO_PKG_VERSION"),
        ttl_ms,
        machine_boot(),
        start_ticks(pid),
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// This process is still alive.
pub async fn beat(pool: &PgPool, boot_id: Uuid) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE processes SET heartbeat_at = now() WHERE boot_id = $1",
        boot_id
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// A daemon is still alive, with `busy` of its `total` workers running a run.
pub async fn beat_with_workers(
    pool: &PgPool,
    boot_id: Uuid,
    busy: usize,
    total: usize,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE processes SET heartbeat_at = now(), workers_busy = $2, workers_total = $3
         WHERE boot_id = $1",
        boot_id,
        i32::try_from(busy).unwrap_or(i32::MAX),
        i32::try_from(total).unwrap_or(i32::MAX),
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// This process ends cleanly; rows of processes long gone are tidied too.
pub async fn deregister(pool: &PgPool, boot_id: Uuid) -> sqlx::Result<()> {
    sqlx::query!(
        "DELETE FROM processes
         WHERE boot_id = $1 OR heartbeat_at < now() - interval '1 day'",
        boot_id,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Processes whose heartbeat is fresh, oldest first.
pub async fn live_processes(pool: &PgPool) -> sqlx::Result<Vec<ProcessRow>> {
    sqlx::query_as!(
        ProcessRow,
        "SELECT boot_id, kind, host, pid, version, started_at, heartbeat_at, liveness_ttl_ms,
                workers_total, workers_busy
         FROM processes
         WHERE heartbeat_at > now() - make_interval(secs => liveness_ttl_ms / 1000.0)
         ORDER BY started_at",
    )
    .fetch_all(pool)
    .await
}

/// A live run of a sync and the process that holds it.
#[derive(Debug, Clone, Serialize)]
pub struct LiveHolder {
    pub run_id: i64,
    pub started_at: Option<DateTime<Utc>>,
    pub boot_id: Uuid,
    pub kind: String,
    pub host: String,
    pub pid: i32,
}

/// The run of `sync_id` (other than `except_run`) that is `running` under a
/// live process, if any: Postgres' judge of who runs the sync.
pub async fn live_holder(
    pool: &PgPool,
    sync_id: &str,
    except_run: Option<i64>,
) -> sqlx::Result<Option<LiveHolder>> {
    sqlx::query_as!(
        LiveHolder,
        "SELECT r.id AS run_id, r.started_at, p.boot_id, p.kind, p.host, p.pid
         FROM runs r JOIN processes p ON p.boot_id = r.boot_id
         WHERE r.sync_id = $1 AND r.status = 'running' AND r.id IS DISTINCT FROM $2
           AND p.heartbeat_at > now() - make_interval(secs => p.liveness_ttl_ms / 1000.0)
         ORDER BY r.id LIMIT 1",
        sync_id,
        except_run,
    )
    .fetch_optional(pool)
    .await
}

/// Whether the process with `boot_id` has a fresh heartbeat.
pub async fn is_live(pool: &PgPool, boot_id: Uuid) -> sqlx::Result<bool> {
    sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM processes WHERE boot_id = $1
             AND heartbeat_at > now() - make_interval(secs => liveness_ttl_ms / 1000.0)) AS "live!""#,
        boot_id,
    )
    .fetch_one(pool)
    .await
}

/// The processes registered on this machine since its last boot, other than
/// `own`, that are proven dead: their pid is gone, or belongs to a process
/// started at another time (the pid was reused). Their heartbeat may still
/// look fresh; nothing else on this machine can be judged this way, so the
/// rest is left to heartbeats and liveness TTLs.
pub async fn dead_on_this_machine(pool: &PgPool, own: Uuid) -> sqlx::Result<Vec<Uuid>> {
    let Some(boot) = machine_boot() else {
        return Ok(Vec::new());
    };
    struct Here {
        boot_id: Uuid,
        pid: i32,
        start_ticks: Option<i64>,
    }
    let here: Vec<Here> = sqlx::query_as!(
        Here,
        "SELECT boot_id, pid, start_ticks FROM processes
         WHERE host = $1 AND machine_boot = $2 AND boot_id <> $3",
        hostname(),
        boot,
        own,
    )
    .fetch_all(pool)
    .await?;
    Ok(here
        .into_iter()
        .filter(|process| {
            let Ok(pid) = u32::try_from(process.pid) else {
                return false;
            };
            // The kernel's word first: no such process is dead, whatever
            // /proc shows this user (it may hide others' processes).
            if !exists(pid) {
                return true;
            }
            match (process_state(pid), process.start_ticks) {
                // Exited, and waiting for its parent to reap it (a zombie).
                (Some(('Z' | 'X' | 'x', _)), _) => true,
                // Another process took the pid.
                (Some((_, now)), Some(then)) => now != then,
                // Hidden from this user, or registered without a start
                // time: not provable.
                _ => false,
            }
        })
        .map(|process| process.boot_id)
        .collect())
}

/// Where this process's pids mean something: the machine's boot id (Linux,
/// unique per boot) and this process's pid namespace (containers on one
/// kernel share the boot id, not the namespace; two of them may even share a
/// host name). `None` when either cannot be read: then nothing is judged by
/// pid.
fn machine_boot() -> Option<String> {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let namespace = std::fs::read_link("/proc/self/ns/pid").ok()?;
    let boot = boot.trim();
    (!boot.is_empty()).then(|| format!("{boot} {}", namespace.display()))
}

/// Whether process `pid` exists, as the kernel says: `kill(pid, 0)` fails
/// with ESRCH only when there is none (a permission error means one that
/// exists but is not ours).
fn exists(pid: u32) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        // Not a pid the kernel could have: nothing to prove.
        return true;
    };
    !matches!(
        rustix::process::test_kill_process(pid),
        Err(e) if e == rustix::io::Errno::SRCH
    )
}

/// When process `pid` started, in clock ticks since boot (`/proc/PID/stat`
/// field 22); `None` when there is no such process.
fn start_ticks(pid: u32) -> Option<i64> {
    process_state(pid).map(|(_, ticks)| ticks)
}

/// Process `pid`'s state letter (`/proc/PID/stat` field 3: `Z` for an
/// exited process its parent has not reaped yet) and start ticks (field 22).
fn process_state(pid: u32) -> Option<(char, i64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces:
    // count fields after its closing one, where field 3 is the first.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ticks = fields.nth(18)?.parse().ok()?;
    Some((state, ticks))
}

/// The machine's name, for people reading `status` (empty when unknown).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_default()
}
