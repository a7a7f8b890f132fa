//! `syncward runs …`: run history.

use std::time::{Duration, Instant};

use crate::cli::RunsCommand;
use crate::failure::FailureCode;
use crate::ops::{Cancel, OpsError, RunFilter, RunRow, Scoped};
use crate::states::RunStatus;

use super::output::{out, outln};
use super::{print_json, when};

pub async fn execute(door: &Scoped, command: RunsCommand) -> anyhow::Result<()> {
    match command {
        RunsCommand::List {
            sync,
            workspace,
            status,
            since,
            limit,
            json,
        } => {
            let filter = RunFilter {
                sync: sync.as_deref(),
                workspace: workspace.as_deref(),
                status: status.as_deref(),
                since,
                limit: limit.max(1),
                seen_by: None,
            };
            let list = match door.run_list(&filter).await {
                Ok(list) => list,
                Err(OpsError::NotFound) => {
                    let id = sync.unwrap_or_default();
                    anyhow::bail!("sync \"{id}\": no such sync (see `syncward sync list`)")
                }
                Err(e) => return Err(e.into()),
            };
            if json.json {
                return print_json(&list);
            }
            if list.is_empty() {
                outln!("No runs yet.");
                return Ok(());
            }
            outln!(
                "{:<8} {:<24} {:<10} {:<10} {:>7} {:<20} {:>8} {:>8} {:>8} {:>8}  FAILURE",
                "RUN",
                "SYNC",
                "STATUS",
                "TRIGGER",
                "ATTEMPT",
                "FINISHED",
                "READ",
                "WRITTEN",
                "REPLAYED",
                "REJECTED"
            );
            for r in list {
                outln!(
                    "{:<8} {:<24} {:<10} {:<10} {:>7} {:<20} {:>8} {:>8} {:>8} {:>8}  {}",
                    r.id,
                    r.sync_id,
                    // As text: the states' Display ignores the column width.
                    r.status.as_str(),
                    r.trigger.as_str(),
                    format!("{}/{}", r.attempt, r.max_attempts),
                    when(r.finished_at),
                    r.records_read,
                    r.records_written,
                    r.records_replayed,
                    r.records_rejected,
                    r.failure_code.unwrap_or_default()
                );
            }
            Ok(())
        }
        RunsCommand::Watch { run_id, json } => watch(door, run_id, None, json.json).await,
        RunsCommand::Cancel { run_id, json } => {
            let done = match door.cancel_run(run_id).await {
                Ok(done) => done,
                Err(OpsError::NotFound) => {
                    anyhow::bail!("run {run_id}: no such run (see `syncward runs list`)")
                }
                Err(e) => return Err(e.into()),
            };
            if json.json {
                return print_json(&serde_json::json!({ "run_id": run_id, "cancel": done }));
            }
            match done {
                Cancel::Ended => outln!("run {run_id}: cancelled; it was queued and read nothing."),
                Cancel::Requested => outln!(
                    "run {run_id}: asked to stop; it stops at its next clean batch (`syncward runs watch {run_id}` follows it)."
                ),
                Cancel::AlreadyEnded(status) => {
                    outln!("run {run_id}: already ended ({status}); nothing to cancel.")
                }
            }
            Ok(())
        }
        RunsCommand::Show { run_id, all, json } => {
            let view = match door.run_view(run_id).await {
                Ok(view) => view,
                Err(OpsError::NotFound) => {
                    anyhow::bail!("run {run_id}: no such run (see `syncward runs list`)")
                }
                Err(e) => return Err(e.into()),
            };
            if json.json {
                return print_json(&view);
            }
            out!("{}", view.page_for(all).to_text());
            Ok(())
        }
    }
}

/// How often `watch` reads the run.
const WATCH_EVERY: Duration = Duration::from_millis(500);

/// Follows run `id` until it ends (or `limit` passes): one line per change of
/// state or progress. Ends `Ok` when it succeeded or was skipped for a reason
/// other than a busy sync; an error otherwise, which sets the exit code
/// (failed: 1, busy: 3).
pub async fn watch(
    door: &Scoped,
    id: i64,
    limit: Option<Duration>,
    json: bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut shown: Option<(RunStatus, i32, i32, i64)> = None;
    loop {
        let run = match door.run(id).await {
            Ok(run) => run,
            Err(OpsError::NotFound) => {
                anyhow::bail!("run {id}: no such run (see `syncward runs list`)")
            }
            Err(e) => return Err(e.into()),
        };
        let now = (run.status, run.attempt, run.pages, run.records_read);
        if shown.as_ref() != Some(&now) {
            show_progress(&run, json)?;
            shown = Some(now);
        }
        match run.status {
            RunStatus::Succeeded => return Ok(()),
            RunStatus::Failed => {
                if !json
                    && let Ok(view) = door.run_view(id).await
                    && let Some(failure) = &view.failure
                {
                    outln!("  What happened: {}", failure.what_happened);
                    outln!(
                        "  Detail:        {}",
                        run.failure_detail.as_deref().unwrap_or("-")
                    );
                    outln!("  What next:     {}", failure.what_next);
                    outln!(
                        "  Whose job:     {}",
                        crate::views::whose_job(failure.owner)
                    );
                }
                anyhow::bail!(
                    "run {id} failed: {}: {}",
                    run.failure_code.unwrap_or_default(),
                    run.failure_detail.unwrap_or_default()
                )
            }
            RunStatus::Skipped
                if run.failure_code.as_deref() == Some(FailureCode::LeaseBusy.as_str()) =>
            {
                return Err(super::run_once::SyncBusy {
                    sync: run.sync_id,
                    holder: "another run of it was in progress".into(),
                }
                .into());
            }
            RunStatus::Skipped => return Ok(()),
            RunStatus::Queued | RunStatus::Running => {}
        }
        if let Some(limit) = limit
            && started.elapsed() >= limit
        {
            anyhow::bail!(
                "run {id} is still {} after {}; it goes on without you: `syncward runs watch {id}` follows it",
                run.status,
                crate::words::duration_text(limit)
            );
        }
        tokio::time::sleep(WATCH_EVERY).await;
    }
}

fn show_progress(run: &RunRow, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(&serde_json::json!({
            "run_id": run.id,
            "sync": run.sync_id,
            "status": run.status,
            "attempt": run.attempt,
            "pages": run.pages,
            "read": run.records_read,
            "written": run.records_written,
            "replayed": run.records_replayed,
            "rejected": run.records_rejected,
            "failure_code": run.failure_code,
        }));
    }
    let counts = format!(
        "{} read, {} written, {} replayed, {} rejected",
        run.records_read, run.records_written, run.records_replayed, run.records_rejected
    );
    let id = run.id;
    match run.status {
        RunStatus::Queued if run.attempt == 0 => outln!("run {id}: queued"),
        RunStatus::Queued => outln!(
            "run {id}: queued again for attempt {} of {} ({})",
            run.attempt + 1,
            run.max_attempts,
            run.failure_code.as_deref().unwrap_or("retry")
        ),
        RunStatus::Running if run.pages == 0 => outln!(
            "run {id}: running (attempt {} of {})",
            run.attempt,
            run.max_attempts
        ),
        RunStatus::Running => outln!("run {id}: page {}: {counts}", run.pages),
        RunStatus::Succeeded => outln!("run {id}: succeeded: {counts}"),
        status @ (RunStatus::Failed | RunStatus::Skipped) => outln!(
            "run {id}: {status} ({}): {counts}",
            run.failure_code.as_deref().unwrap_or("-")
        ),
    }
    Ok(())
}
