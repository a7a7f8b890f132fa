//! `syncward run`: the daemon. Workers, scheduler and sweeper under one
//! `Shutdown`; config reloads on SIGHUP through `Reload`; a per-boot liveness
//! key in Redis while it lives; systemd notifications (READY, STATUS,
//! RELOADING, STOPPING, WATCHDOG) when started by systemd.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use sd_notify::NotifyState;
use tracing::{info, warn};
use uuid::Uuid;

use super::connect_redis;
use crate::config::Settings;
use crate::daemon_shared::Daemon;
use crate::lease::{clear_liveness, refresh_liveness};
use crate::redis::SharedConnection;
use crate::reload::Reload;
use crate::shutdown::Shutdown;
use crate::store::processes::ProcessKind;
use crate::worker::start_workers;
use crate::{scheduler, store, sweeper};

/// Runs until `shutdown` has begun and every task has drained; each ask on
/// `reload` re-reads the config (until the drain begins).
pub async fn run(settings: Settings, shutdown: Shutdown, reload: Reload) -> anyhow::Result<()> {
    // Refuses a store whose schema is behind (exit 2, not restarted).
    let store = store::connect(&settings.database).await?;
    // Workspace tokens without an admin token would leave anonymous readers
    // every workspace (the API refuses them anyway; starting is refused so
    // the operator hears it).
    let tokens = store::tokens::active_tokens(&store).await?;
    if tokens > 0 && settings.http.admin_token.is_none() {
        return Err(crate::config::BadInput::new(
            "syncward run",
            "http.admin_token",
            format!(
                "is not set, and {tokens} workspace token(s) exist: set it \
                 (SYNCWARD__HTTP__ADMIN_TOKEN, at least 32 characters) or revoke them \
                 (`syncward token list`, `syncward token revoke ID`)"
            ),
        )
        .into());
    }
    let redis = connect_redis(&settings.redis).await?;
    let boot_id = Uuid::new_v4();
    // The process hub: panics and ERROR log lines reach Sentry as events
    // (alerts go through their own channel). Kept until the daemon returns,
    // which flushes it. The DSN was checked when the settings were loaded;
    // a SIGHUP does not rebind it.
    let _sentry = crate::alerts::sentry_client(&settings.alerts).map(|client| {
        // Panics: the panic integration reports through the main hub.
        sentry::Hub::main().bind_client(Some(client.clone()));
        crate::logging::send_errors_to_sentry(client.clone());
        SentryFlush(client)
    });
    let settings = Arc::new(settings);
    let prefix = settings.redis.key_prefix.clone();
    let ttl = settings.workers.liveness_ttl;
    refresh_liveness(&redis, &prefix, boot_id, ttl)
        .await
        .context("writing the liveness key failed")?;
    store::processes::register(&store, boot_id, ProcessKind::Daemon, ttl)
        .await
        .context("registering the daemon in the store failed")?;
    let daemon = Daemon::new(
        store,
        SharedConnection::new(redis.clone()),
        boot_id,
        settings.clone(),
    );

    let listener = crate::http::bind(&settings).await?;
    info!(address = %listener.local_addr()?, "Admin HTTP listening");
    // The port actually bound is the daemon's own address: no sync calls it.
    if let Ok(policy) = settings.outbound.policy(listener.local_addr()?) {
        crate::outbound::policy::install(policy);
    }
    // The store's and Redis' outages: logged once each way, answered 503 by
    // the pages while they last.
    let outages = crate::outages::Outages::default();
    shutdown.spawn(outages.watch(
        &settings.database,
        &settings.redis,
        redis.clone(),
        shutdown.stop_token(),
    )?);
    let http_state = crate::http::HttpState {
        door: crate::ops::Door::new(
            store::http_pool(&settings.database)?,
            settings.run_attempts(),
        )
        .with_secrets(settings.secrets.store()),
        outages,
        redis: redis.clone(),
        token: settings.http.admin_token.clone(),
        metrics_token: settings.http.metrics_token.clone(),
        // One recorder per process; a second install (tests running two
        // daemons in one process) keeps the first.
        metrics: crate::telemetry::install(),
        sync_health_read_at: Default::default(),
    };
    metrics::gauge!("syncward_workers").set(settings.workers.count as f64);
    metrics::gauge!("syncward_workers_busy").set(0.0);
    shutdown.spawn(crate::http::serve(listener, http_state, shutdown.clone()));
    let busy = start_workers(&daemon, &shutdown);
    // The worker count shows in `syncward status` from the start.
    if let Err(e) =
        store::processes::beat_with_workers(&daemon.store, boot_id, 0, settings.workers.count).await
    {
        warn!(error = %e, "Writing the heartbeat failed");
    }
    shutdown.spawn(sweeper::run(daemon.clone(), shutdown.clone()));
    let scheduled = daemon.clone();
    let scheduler_shutdown = shutdown.clone();
    shutdown.spawn(async move {
        if let Err(e) = scheduler::run(scheduled, scheduler_shutdown).await {
            warn!(error = %e, "The scheduler stopped");
        }
    });
    info!(boot_id = %boot_id, workers = settings.workers.count, "syncward is running");
    // Without NOTIFY_SOCKET (not under systemd) nothing reads the status line:
    // spare the store its query then.
    let status = StatusLine {
        store: daemon.store.clone(),
        busy,
        workers: settings.workers.count,
        enabled: std::env::var_os("NOTIFY_SOCKET").is_some(),
    };
    let line = status.render(&shutdown).await;
    // Without NOTIFY_SOCKET this does nothing; under systemd a lost
    // notification shows as a start timeout, which says more than a log line.
    let _ = sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(&line)]);

    // The liveness key and the watchdog are kept up until every task has
    // ended: runs draining after SIGTERM are still alive. Each judge of
    // liveness keeps its own pace: a Redis that hangs while its Sentinels
    // elect a new primary must not hold back the heartbeat in Postgres, or
    // both would judge this live daemon dead and its runs would be taken
    // over mid-call.
    let every = (ttl / 3).max(std::time::Duration::from_millis(100));
    let liveness_key = async {
        loop {
            tokio::time::sleep(every).await;
            if let Err(e) = refresh_liveness(&redis, &prefix, boot_id, ttl).await {
                warn!(error = %e, "Refreshing the liveness key failed");
            }
        }
    };
    let keep_alive = async {
        let watchdog = sd_notify::watchdog_enabled();
        loop {
            tokio::time::sleep(every.min(watchdog.map(|w| w / 2).unwrap_or(every))).await;
            let busy = status.busy.load(Ordering::Relaxed);
            metrics::gauge!("syncward_workers_busy").set(busy as f64);
            let beat = store::processes::beat_with_workers(
                &daemon.store,
                boot_id,
                busy,
                settings.workers.count,
            )
            .await;
            if let Err(e) = beat {
                warn!(error = %e, "Writing the heartbeat failed");
            }
            if watchdog.is_some() {
                // Best effort: a failed ping shows up as a watchdog restart.
                let _ = sd_notify::notify(&[NotifyState::Watchdog]);
            }
            if status.enabled {
                let line = status.render(&shutdown).await;
                // Best effort: the next tick sends a fresh one.
                let _ = sd_notify::notify(&[NotifyState::Status(&line)]);
            }
        }
    };
    let reloading = async {
        loop {
            reload.requested().await;
            // main ignores SIGHUP once the drain began; an ask that was
            // already pending then is dropped the same way.
            if shutdown.is_stopping() {
                continue;
            }
            // RELOADING=1 needs the clock reading beside it on systemd 253+.
            match NotifyState::monotonic_usec_now() {
                Ok(now) => {
                    // Best effort, like every notification: the reload happens
                    // whether or not systemd heard of it.
                    let _ = sd_notify::notify(&[NotifyState::Reloading, now]);
                }
                Err(e) => {
                    warn!(error = %e, "Reading the monotonic clock failed; systemd is not told of the reload")
                }
            }
            reload.apply(&settings, &daemon.alerter);
            // Back to running whether or not the new config was taken (best
            // effort: a lost READY leaves systemd showing "reloading").
            let line = status.render(&shutdown).await;
            let _ = sd_notify::notify(&[NotifyState::Ready, NotifyState::Status(&line)]);
        }
    };
    let drained = async {
        shutdown.stopping().await;
        info!("Shutting down: no new claims; runs stop at their next clean batch");
        let line = status.render(&shutdown).await;
        // Best effort: systemd learns of the stop from the exit anyway.
        let _ = sd_notify::notify(&[NotifyState::Stopping, NotifyState::Status(&line)]);
        shutdown.wait().await;
    };
    tokio::select! {
        never = liveness_key => never,
        never = keep_alive => never,
        never = reloading => never,
        () = drained => {}
    }
    if let Err(e) = clear_liveness(&redis, &prefix, boot_id).await {
        warn!(error = %e, "Clearing the liveness key failed; it expires on its own");
    }
    if let Err(e) = store::processes::deregister(&daemon.store, boot_id).await {
        warn!(error = %e, "Removing the daemon from the store failed; its heartbeat goes stale");
    }
    let cut_off = shutdown.cut_off_runs();
    anyhow::ensure!(
        cut_off == 0,
        "{} still busy at the drain deadline: put back in the queue",
        crate::words::counted(cut_off, "run was", "runs were")
    );
    info!("Drained; exiting");
    Ok(())
}

/// What `systemctl status` shows on its Status line: busy workers and the
/// queue, e.g. `2/4 workers busy, 5 runs queued (oldest 3s)`.
struct StatusLine {
    store: sqlx::PgPool,
    busy: Arc<AtomicUsize>,
    workers: usize,
    /// Under systemd (`NOTIFY_SOCKET` set); otherwise no line is rendered.
    enabled: bool,
}

impl StatusLine {
    async fn render(&self, shutdown: &Shutdown) -> String {
        if !self.enabled {
            return String::new();
        }
        let busy = self.busy.load(Ordering::Relaxed);
        let queue = match store::runs::queue_stats(&self.store).await {
            Ok((0, _)) => "no runs queued".to_string(),
            Ok((depth, oldest)) => format!(
                "{depth} run{} queued (oldest {})",
                if depth == 1 { "" } else { "s" },
                // Whole seconds: the line is for a glance, not a measurement.
                crate::words::duration_text(Duration::from_secs(oldest.max(0.0) as u64))
            ),
            Err(e) => format!("queue unknown ({e})"),
        };
        let stage = if shutdown.is_stopping() {
            "Draining: "
        } else {
            ""
        };
        format!("{stage}{busy}/{} workers busy, {queue}", self.workers)
    }
}

/// Flushes the Sentry client when the daemon returns (events are sent from a
/// thread of their own).
struct SentryFlush(Arc<sentry::Client>);

impl Drop for SentryFlush {
    fn drop(&mut self) {
        self.0.close(Some(std::time::Duration::from_secs(2)));
    }
}
