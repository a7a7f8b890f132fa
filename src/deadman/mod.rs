//! The dead-man check (guarantee 6): silence is an alert. For every workspace
//! with an active sync (and, with `deadman.per_sync`, for every active sync):
//! once it has been active longer than its silence window, no successful run
//! within the window is an incident — "runs were recorded but none succeeded"
//! or "no runs were recorded at all". Each incident alerts once: a Redis marker
//! (`SET NX`) and an open incident row (one per target) keep it closed until the
//! first successful run, which deletes the marker, closes the incident and
//! sends a recovery notice.

use std::time::Duration;

use deadpool_redis::redis::{self, AsyncCommands};
use tracing::info;

use crate::alerts::{Alert, Alerter};
use crate::config::DeadmanSettings;
use crate::redis::{RedisPool, SharedConnection, keys};
use crate::store::deadman;

/// What one check found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct DeadmanReport {
    /// Targets newly alerted: `workspace:acme`, `sync:acme-contacts`.
    pub alerted: Vec<String>,
    /// Targets still silent whose incident was already open.
    pub still_silent: Vec<String>,
}

fn marker(prefix: &str, target: &str) -> String {
    keys::deadman_marker(prefix, target)
}

pub async fn check(
    alerter: &Alerter,
    redis: &RedisPool,
    prefix: &str,
    settings: &DeadmanSettings,
) -> anyhow::Result<DeadmanReport> {
    let store = alerter.store();
    let watch = Watch {
        alerter,
        redis,
        prefix,
    };
    let mut report = DeadmanReport::default();
    let syncs = deadman::active_syncs(store).await?;
    let now = chrono::Utc::now();
    let window_of = |s: &deadman::ActiveSync| {
        s.silence_window
            .as_deref()
            .and_then(|w| humantime::parse_duration(w).ok())
            .unwrap_or(settings.silence_window)
    };
    let old_enough = |activated: Option<chrono::DateTime<chrono::Utc>>, window: Duration| {
        activated.is_some_and(|a| {
            now - a >= chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX)
        })
    };
    // Workspaces: left alone while their oldest active sync is younger than the window.
    let mut workspaces: Vec<(&str, Option<chrono::DateTime<chrono::Utc>>)> = Vec::new();
    for s in &syncs {
        match workspaces.iter_mut().find(|(w, _)| *w == s.workspace_id) {
            Some((_, oldest)) => *oldest = (*oldest).min(s.activated_at),
            None => workspaces.push((&s.workspace_id, s.activated_at)),
        }
    }
    for (workspace, oldest) in workspaces {
        if !old_enough(oldest, settings.silence_window) {
            continue;
        }
        let silence = Watched {
            workspace,
            sync: None,
            window: settings.silence_window,
        };
        judge(&watch, &silence, &mut report).await?;
    }
    if settings.per_sync {
        for s in &syncs {
            let window = window_of(s);
            if !old_enough(s.activated_at, window) {
                continue;
            }
            let silence = Watched {
                workspace: &s.workspace_id,
                sync: Some(&s.id),
                window,
            };
            judge(&watch, &silence, &mut report).await?;
        }
    }
    Ok(report)
}

/// Where a check reports and keeps its markers.
struct Watch<'a> {
    alerter: &'a Alerter,
    redis: &'a RedisPool,
    prefix: &'a str,
}

/// A workspace, or one of its syncs (`sync`), watched for `window`.
struct Watched<'a> {
    workspace: &'a str,
    sync: Option<&'a str>,
    window: Duration,
}

impl Watched<'_> {
    /// Its name in markers and reports: `workspace:W` or `sync:S`.
    fn target(&self) -> String {
        match self.sync {
            Some(id) => format!("sync:{id}"),
            None => format!("workspace:{}", self.workspace),
        }
    }
}

/// Opens one incident, and raises one alert, when `watched` had no success
/// within its window; nothing when it had, or its incident is already open.
async fn judge(
    watch: &Watch<'_>,
    watched: &Watched<'_>,
    report: &mut DeadmanReport,
) -> anyhow::Result<()> {
    let Watched {
        workspace,
        sync,
        window,
    } = *watched;
    let target = watched.target();
    let (alerter, redis, prefix) = (watch.alerter, watch.redis, watch.prefix);
    let store = alerter.store();
    let (succeeded, finished) = deadman::activity(store, workspace, sync, window).await?;
    if succeeded > 0 {
        return Ok(());
    }
    let mut conn = redis.get().await?;
    let opened: Option<String> = redis::cmd("SET")
        .arg(marker(prefix, &target))
        .arg("open")
        .arg("NX")
        .query_async(&mut conn)
        .await?;
    let (silence, what) = if finished > 0 {
        (
            "runs_without_success",
            format!("runs were recorded but none succeeded ({finished} runs)"),
        )
    } else {
        ("no_runs", "no runs were recorded at all".to_string())
    };
    // The incident row is the second lock: a Redis that lost its markers does
    // not open a second incident.
    let incident = if opened.is_some() {
        deadman::open_incident(store, workspace, sync, silence, finished).await?
    } else {
        None
    };
    let Some(_) = incident else {
        report.still_silent.push(target);
        return Ok(());
    };
    let window_text = crate::words::duration_text(window);
    let (subject, next) = match sync {
        Some(id) => (
            format!("Sync {id} (workspace {workspace})"),
            if finished > 0 {
                format!(
                    "Look at its failed runs (`syncward runs list --sync {id}`) and fix the cause."
                )
            } else {
                "Check that a syncward daemon is running and that the sync's schedule fires."
                    .to_string()
            },
        ),
        None => (
            format!("Workspace {workspace}"),
            if finished > 0 {
                "Look at its syncs' failed runs (`syncward sync list`) and fix the cause."
                    .to_string()
            } else {
                "Check that a syncward daemon is running and that the syncs' schedules fire."
                    .to_string()
            },
        ),
    };
    alerter
        .raise(&Alert {
            kind: "deadman_silence",
            workspace: Some(workspace.to_string()),
            sync: sync.map(str::to_string),
            run_id: None,
            message: format!(
                "{subject} has had no successful run for {window_text}: {what}. Next: {next}"
            ),
            failure: None,
        })
        .await;
    report.alerted.push(target);
    Ok(())
}

/// The success path of a run: ends the silence of its sync and its workspace,
/// deleting their markers and sending a recovery notice for each incident the
/// run's finish closed (`store::runs::finish_run` closes them in its statement).
pub async fn on_success(
    alerter: &Alerter,
    redis: &SharedConnection,
    prefix: &str,
    workspace: &str,
    sync_id: &str,
    closed: &[deadman::IncidentRow],
) -> anyhow::Result<usize> {
    let markers = [
        marker(prefix, &format!("workspace:{workspace}")),
        marker(prefix, &format!("sync:{sync_id}")),
    ];
    let _: i64 = redis
        .run(|mut conn| {
            let markers = &markers;
            async move { conn.del(&markers[..]).await }
        })
        .await?;
    for incident in closed {
        let subject = match &incident.sync_id {
            Some(id) => format!("Sync {id}"),
            None => format!("Workspace {}", incident.workspace_id),
        };
        info!(incident = incident.id, "Dead-man incident closed");
        alerter
            .notify_recovery(&Alert {
                kind: "deadman_recovered",
                workspace: Some(incident.workspace_id.clone()),
                sync: incident.sync_id.clone(),
                run_id: None,
                message: format!("{subject} is no longer silent: a run of {sync_id} succeeded."),
                failure: None,
            })
            .await;
    }
    Ok(closed.len())
}
