//! How runs are executed, kept and watched: `[workers]`, `[shutdown]`,
//! `[lease]`, `[retry]`, `[sweeper]`, `[ledger]`, `[retention]`, `[breaker]`,
//! `[deadman]`.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::Schedule;

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerSettings {
    /// Runs executed at once by this daemon. Default 4.
    pub count: usize,
    /// How often an idle worker looks for work when no NOTIFY arrived. Default 1s.
    #[serde(with = "crate::config::shown::duration")]
    pub poll_interval: Duration,
    /// Lifetime of this daemon's liveness key in Redis, refreshed every third of
    /// it (with a heartbeat in Postgres); a run whose holder's key is gone
    /// and whose heartbeat is stale is taken over. Default 10s: with
    /// `sweeper.every` it bounds SIGKILL-to-resumed (12 s).
    #[serde(with = "crate::config::shown::duration")]
    pub liveness_ttl: Duration,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            count: 4,
            poll_interval: Duration::from_secs(1),
            liveness_ttl: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownSettings {
    /// After SIGTERM, time for busy runs to stop at a clean batch boundary.
    /// Default 15s.
    #[serde(with = "crate::config::shown::duration")]
    pub drain_deadline: Duration,
    /// After SIGTERM, the process exits at this point whatever still runs.
    /// Default 25s.
    #[serde(with = "crate::config::shown::duration")]
    pub hard_exit_after: Duration,
}

impl Default for ShutdownSettings {
    fn default() -> Self {
        Self {
            drain_deadline: Duration::from_secs(15),
            hard_exit_after: Duration::from_secs(25),
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseSettings {
    /// Lifetime of a run's lease on its sync. Default 15m.
    #[serde(with = "crate::config::shown::duration")]
    pub ttl: Duration,
    /// How often a run renews its lease; must be shorter than `ttl`. Default 5m.
    #[serde(with = "crate::config::shown::duration")]
    pub renew_every: Duration,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(15 * 60),
            renew_every: Duration::from_secs(5 * 60),
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySettings {
    /// Attempts a run gets, the first included. Default 5.
    pub max_attempts: u32,
    /// Wait before the second attempt; doubles for each further one. Default 60s.
    #[serde(with = "crate::config::shown::duration")]
    pub backoff_base: Duration,
    /// Longest wait between attempts. Default 1h.
    #[serde(with = "crate::config::shown::duration")]
    pub backoff_max: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            backoff_base: Duration::from_secs(60),
            backoff_max: Duration::from_secs(3600),
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SweeperSettings {
    /// How often the sweeper looks for runs of dead processes and stuck runs
    /// (the ledger is purged at most once a minute). Default 2s.
    #[serde(with = "crate::config::shown::duration")]
    pub every: Duration,
    /// A `running` run started longer ago than this, with a free lease, is
    /// re-queued. Default 1h.
    #[serde(with = "crate::config::shown::duration")]
    pub stuck_after: Duration,
    /// A Brevo import is first asked about this long after it was accepted,
    /// and again this long after each answer that it is still running.
    /// Default 1m.
    #[serde(with = "crate::config::shown::duration")]
    pub import_check_after: Duration,
    /// Import-process checks per hour and Brevo API key, across daemons
    /// (Brevo allows 100/h on `GET /processes`; keep room for people). Default 90.
    pub import_checks_per_hour: u32,
}

impl Default for SweeperSettings {
    fn default() -> Self {
        Self {
            every: Duration::from_secs(2),
            stuck_after: Duration::from_secs(3600),
            import_check_after: Duration::from_secs(60),
            import_checks_per_hour: 90,
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LedgerSettings {
    /// How long completed delivery keys are kept. Default 7d.
    #[serde(with = "crate::config::shown::duration")]
    pub retention: Duration,
    /// Times one record may be sent before it is rejected as
    /// `attempt_budget_exhausted`. Default 3.
    pub record_attempts: u32,
}

impl Default for LedgerSettings {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(7 * 24 * 3600),
            record_attempts: 3,
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionSettings {
    /// How long finished runs are kept, with their timelines, rejected
    /// records and import processes. Each sync's newest finished run and runs
    /// holding records not yet put back are kept whatever their age.
    /// Default 30d.
    #[serde(with = "crate::config::shown::duration")]
    pub runs: Duration,
    /// How long alerts are kept. Default 90d.
    #[serde(with = "crate::config::shown::duration")]
    pub alerts: Duration,
    /// How long audit rows (publishes, pauses, resumes, resets) are kept.
    /// Default 1y.
    #[serde(with = "crate::config::shown::duration")]
    pub audit_log: Duration,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        Self {
            runs: Duration::from_secs(30 * 24 * 3600),
            alerts: Duration::from_secs(90 * 24 * 3600),
            audit_log: Duration::from_secs(365 * 24 * 3600),
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerSettings {
    /// Consecutive failed runs that pause a sync (a sync file may override it).
    /// Default 5.
    pub consecutive_failures: u32,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            consecutive_failures: 5,
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeadmanSettings {
    /// When the dead-man check runs: cron with seconds. Default `0 13 * * * *`
    /// (minute 13 of every hour).
    pub schedule: Schedule,
    /// A workspace or sync with no successful run for this long is silent
    /// (a sync file may override it). Default 24h.
    #[serde(with = "crate::config::shown::duration")]
    pub silence_window: Duration,
    /// Also check each sync on its own, so a healthy sync does not hide a silent
    /// sibling. Default true.
    pub per_sync: bool,
}

impl Default for DeadmanSettings {
    fn default() -> Self {
        Self {
            // The literal is a valid six-field expression; covered by a test.
            schedule: Schedule::parse("0 13 * * * *").expect("default dead-man schedule is valid"),
            silence_window: Duration::from_secs(24 * 3600),
            per_sync: true,
        }
    }
}
