//! `syncward sync run ID [--foreground]`: queue a run, or execute one here on
//! the daemon's own run code path and print how it went.

use anyhow::Context;
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::Instrument;
use uuid::Uuid;

use crate::config::{BadInput, Settings, SyncDefinition};
use crate::failure::FailureCode;
use crate::ops::{Runnable, Scoped};
use std::time::{Duration, Instant};

use super::connect_redis;
use super::output::outln;
use super::run_progress::RunProgress;
use crate::lease::{LeaseManager, clear_liveness, is_alive, refresh_liveness};
use crate::redis::SharedConnection;
use crate::states::{RunStatus, RunTrigger};
use crate::store::processes::{self, ProcessKind};
use crate::store::runs::{self, Executor, RunCounts};
use crate::store::syncs;
use crate::worker::{
    PageProgress, Recorded, RunEnv, RunOutcome, RunReport, Thresholds, execute_run, record_outcome,
};

/// Queues a run; `forced` ones run although the sync is paused. `queued` is
/// false when a run of the sync was already waiting (that one is reported).
pub async fn enqueue(
    pool: &PgPool,
    door: &Scoped,
    runnable: &Runnable,
    json: bool,
) -> anyhow::Result<i64> {
    let id = runnable.sync.id.as_str();
    let (run_id, new) = door.enqueue(runnable).await?;
    // A queued run waits for a daemon: say so when none is alive to take it.
    if processes::live_processes(pool)
        .await?
        .iter()
        .all(|p| p.kind != ProcessKind::Daemon.as_str())
    {
        eprintln!(
            "warning: no syncward daemon is alive to run it; start one (`systemctl start syncward`) or run it here with --foreground"
        );
    }
    if json {
        // The API's answer to the same ask, field for field.
        outln!("{}", crate::ops::run_queued(id, run_id, new));
    } else if new {
        outln!("{id}: run {run_id} queued; a running daemon picks it up.");
    } else {
        outln!("{id}: run {run_id} was already queued.");
    }
    Ok(run_id)
}

/// `--only ADDRESS`, checked before anything runs: an address, and a source
/// that can read one record by it (exit 2 otherwise).
pub fn only_address(sync: &syncs::SyncRow, address: String) -> anyhow::Result<String> {
    if let Some(problem) = crate::mapping::email_problem(address.trim()) {
        return Err(BadInput::new("arguments", "--only", format!("{address:?}: {problem}")).into());
    }
    let definition = sync
        .definition()
        .context("the stored definition no longer validates")?;
    definition
        .source
        .reads_by_address()
        .map_err(|why| BadInput::new("arguments", "--only", why))?;
    Ok(address.trim().to_string())
}

/// What `--only` sent for the address and what came back: this run's
/// entries of its trace.
async fn print_only(
    settings: &Settings,
    pool: &PgPool,
    sync: &syncs::SyncRow,
    (run_id, counts): (i64, &RunCounts),
    address: &str,
    json: bool,
) -> anyhow::Result<()> {
    let door = crate::ops::Door::new(pool.clone(), settings.run_attempts());
    let mut trace = door
        .enter(crate::ops::Scope::Cli)
        .trace(address, Some(&sync.id), crate::ops::DEFAULT_CALLS)
        .await?;
    trace.calls.retain(|c| c.run_id == run_id);
    trace.rejections.retain(|r| r.run_id == run_id);
    if json {
        outln!(
            "{}",
            serde_json::json!({
                "only": address,
                "run_id": run_id,
                "calls": trace.calls,
                "rejections": trace.rejections,
            })
        );
        return Ok(());
    }
    if counts.read == 0 {
        let field = sync
            .definition()
            .map(|d| d.mapping.email)
            .unwrap_or_default();
        outln!(
            "No record of the source has {address} in its mapped e-mail field `{field}`: nothing was sent."
        );
    } else if trace.calls.is_empty() && trace.rejections.is_empty() {
        // A diff or mirror sync keys a record by its identity and content.
        outln!(
            "The record of {address} is unchanged since it was delivered: replayed from the ledger, nothing was sent (`sync resync` sends every record again)."
        );
    }
    for call in &trace.calls {
        outln!("Sent for {address}: {}", call.sent);
        outln!("Answer: {}", call.answer);
    }
    for rejection in &trace.rejections {
        outln!("Rejected: {} — {}", rejection.code, rejection.message);
    }
    Ok(())
}

/// A foreground run found a live holder of its sync: exit code 3.
#[derive(Debug, thiserror::Error)]
#[error("sync {sync} is busy: {holder}")]
pub struct SyncBusy {
    pub sync: String,
    /// Who holds it, in words.
    pub holder: String,
}

/// Who runs the sync now, if anyone alive does: Postgres' judge first (a
/// running run under a live process), then the Redis lease's holder if its
/// liveness key is there. In words, for people.
async fn live_holder_words(
    pool: &PgPool,
    redis: &crate::redis::RedisPool,
    prefix: &str,
    leases: &LeaseManager,
    sync_id: &str,
    except_run: Option<i64>,
) -> anyhow::Result<Option<String>> {
    if let Some(h) = processes::live_holder(pool, sync_id, except_run).await? {
        let since = h
            .started_at
            .map(|t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
            .unwrap_or_else(|| "-".into());
        return Ok(Some(format!(
            "run {} is in progress in a {} process (pid {} on {}, boot id {}) since {since}",
            h.run_id,
            h.kind,
            h.pid,
            if h.host.is_empty() {
                "an unnamed host"
            } else {
                &h.host
            },
            h.boot_id.simple()
        )));
    }
    let Some(holder) = leases.holder(sync_id).await? else {
        return Ok(None);
    };
    let Some(boot) = holder.boot_id else {
        return Ok(Some(format!("its lease is held by {}", holder.value)));
    };
    if !is_alive(redis, prefix, boot).await? {
        return Ok(None);
    }
    Ok(Some(format!(
        "its lease is held by a live process (boot id {})",
        boot.simple()
    )))
}

/// Runs the sync here. With `wait`, first waits (up to that long) for a live
/// holder to finish; a live holder found at the start or at the lease is
/// `SyncBusy` (exit 3).
pub async fn foreground(
    settings: &Settings,
    pool: &PgPool,
    sync: syncs::SyncRow,
    forced: bool,
    wait: Option<Duration>,
    only: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let redis = connect_redis(&settings.redis).await?;
    let boot_id = Uuid::new_v4();
    // This process holds a liveness key like a daemon does, and beats in the
    // store, so no daemon's sweeper mistakes the run for an orphan.
    let (prefix, ttl) = (
        settings.redis.key_prefix.clone(),
        settings.workers.liveness_ttl,
    );
    refresh_liveness(&redis, &prefix, boot_id, ttl).await?;
    processes::register(pool, boot_id, ProcessKind::Foreground, ttl).await?;
    let shared = SharedConnection::new(redis.clone());
    let leases = LeaseManager::new(shared.clone(), &prefix, boot_id, settings.lease.ttl);
    let waiting_since = Instant::now();
    let mut told = false;
    // A holder on this machine whose pid is gone (a SIGKILLed run) is dead
    // at once: no waiting out its liveness TTL.
    crate::lease::reap_dead_on_this_machine(pool, &redis, &prefix, boot_id).await?;
    while let Some(holder) =
        live_holder_words(pool, &redis, &prefix, &leases, &sync.id, None).await?
    {
        let Some(wait) = wait.filter(|w| waiting_since.elapsed() < *w) else {
            // Tidiness: the row goes stale on its own.
            let _ = processes::deregister(pool, boot_id).await;
            let _ = clear_liveness(&redis, &prefix, boot_id).await;
            return Err(SyncBusy {
                sync: sync.id.clone(),
                holder: if wait.is_some() {
                    format!(
                        "{holder}; still after waiting {}",
                        crate::words::duration_text(wait.unwrap_or_default())
                    )
                } else {
                    format!("{holder}; `--wait` waits for it")
                },
            }
            .into());
        };
        if !told {
            outln!(
                "Sync {}: {holder}; waiting up to {}.",
                sync.id,
                crate::words::duration_text(wait)
            );
            told = true;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        refresh_liveness(&redis, &prefix, boot_id, ttl).await?;
        processes::beat(pool, boot_id).await?;
        crate::lease::reap_dead_on_this_machine(pool, &redis, &prefix, boot_id).await?;
    }
    let executor = Executor {
        worker_id: format!("cli-{}", std::process::id()),
        boot_id,
    };
    let max_attempts = settings.run_attempts();
    let trigger = if forced {
        RunTrigger::Forced
    } else {
        RunTrigger::Foreground
    };
    let run = runs::create_claimed_run(pool, &sync.id, trigger, max_attempts, &executor)
        .await
        .context("creating the run failed")?;
    runs::add_run_event(
        pool,
        run.id,
        "claimed",
        serde_json::json!({"attempt": 1, "worker": executor.worker_id}),
    )
    .await?;
    let shown = RunProgress::new(json);
    shown.started(run.id, &sync.id);

    // Signs of life until the run's end is recorded: a sweeper that saw this
    // process gone while the run still shows `running` would put it back.
    let keep_alive = {
        let (redis, pool, prefix) = (redis.clone(), pool.clone(), prefix.clone());
        AbortOnDropHandle::new(tokio::spawn(async move {
            // Each judge at its own pace: a Redis that hangs must not hold
            // back the heartbeat in Postgres (see `run_daemon`).
            let key = async {
                loop {
                    tokio::time::sleep(ttl / 3).await;
                    if let Err(e) = refresh_liveness(&redis, &prefix, boot_id, ttl).await {
                        tracing::warn!(error = %e, "Refreshing the liveness key failed");
                    }
                }
            };
            let beat = async {
                loop {
                    tokio::time::sleep(ttl / 3).await;
                    if let Err(e) = processes::beat(&pool, boot_id).await {
                        tracing::warn!(error = %e, "Writing the heartbeat failed");
                    }
                }
            };
            tokio::join!(key, beat)
        }))
    };
    let statements = crate::store::grouped::RunStatements::for_one_run(pool.clone());
    // For the rate on each page line and the summary.
    let started = Instant::now();
    let definition: Result<SyncDefinition, _> = sync.definition();
    let (outcome, counts, lease) = match definition {
        Ok(definition) => {
            let mut env = RunEnv::new(
                pool.clone(),
                statements.clone(),
                crate::outbound::SharedBudgets::in_redis(shared.clone(), &prefix),
                leases.clone(),
                Default::default(),
                settings,
                CancellationToken::new(),
            );
            env.only = only.clone();
            let mut progress = |p: &PageProgress| shown.page(p, started);
            let report = execute_run(&env, &run, &definition, &mut progress)
                .instrument(crate::worker::run_span(&run))
                .await;
            (report.outcome, report.counts, report.lease)
        }
        Err(e) => (
            RunOutcome::Failed {
                code: FailureCode::ConfigInvalid,
                detail: format!("the stored definition no longer validates: {e}"),
            },
            RunCounts::default(),
            None,
        ),
    };
    let report = RunReport {
        outcome: outcome.clone(),
        counts,
        cursor: None,
        lease: None,
    };
    let alerter = crate::alerts::Alerter::new(pool.clone(), &settings.alerts);
    let recorded = record_outcome(
        &alerter,
        &statements,
        &run,
        &report,
        None,
        Thresholds::of(settings),
    )
    .await?;
    // Released only now: the next run cannot start before this one shows as ended.
    if let Some(lease) = &lease
        && let Err(e) = leases.release(lease).await
    {
        tracing::warn!(error = %e, "Releasing the lease failed; it expires on its own");
    }
    // The key and the row would go stale on their own; removing them is
    // tidiness.
    drop(keep_alive);
    let _ = clear_liveness(&redis, &prefix, boot_id).await;
    let _ = processes::deregister(pool, boot_id).await;
    if let Recorded::Finished {
        status: RunStatus::Succeeded,
        closed_incidents,
        ..
    } = &recorded
    {
        crate::deadman::on_success(
            &alerter,
            &shared,
            &prefix,
            &run.workspace_id,
            &run.sync_id,
            closed_incidents,
        )
        .await?;
    }
    if let Recorded::Superseded = recorded {
        // Its writes stand (the ledger and the fence keep them safe); its
        // end is not this process's to record any more.
        anyhow::bail!(
            "run {} was put back in the queue while it ran here (a sweeper saw it without signs of life); \
             its outcome is not recorded and a daemon runs it again: see `syncward runs show {}`",
            run.id,
            run.id
        );
    }
    // The advice names this sync's secrets and file, and a resume only if
    // the sync is paused now (the breaker may just have paused it).
    let now = crate::store::syncs::get_sync(pool, &run.sync_id).await?;
    let context = now
        .as_ref()
        .unwrap_or(&sync)
        .failure_context(Some(&settings.secrets.store()));
    shown.finished(
        run.id,
        &outcome,
        &counts,
        started.elapsed().as_secs_f64(),
        &context,
    );
    if let Some(address) = &only {
        print_only(settings, pool, &sync, (run.id, &counts), address, json).await?;
    }
    match outcome {
        RunOutcome::Skipped(FailureCode::LeaseBusy) => {
            let holder =
                live_holder_words(pool, &redis, &prefix, &leases, &run.sync_id, Some(run.id))
                    .await?
                    .unwrap_or_else(|| "another run held its lease a moment ago".into());
            Err(SyncBusy {
                sync: run.sync_id.clone(),
                holder,
            }
            .into())
        }
        RunOutcome::Succeeded | RunOutcome::Skipped(_) => Ok(()),
        RunOutcome::Stopped | RunOutcome::Deferred(_) => {
            anyhow::bail!("run {} stopped before the end of the source", run.id)
        }
        RunOutcome::Failed { code, .. } => anyhow::bail!("run {} failed: {code}", run.id),
    }
}
