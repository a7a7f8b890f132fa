//! `syncward runs …`: run history.

use sqlx::PgPool;

use crate::cli::RunsCommand;
use crate::config::BadInput;
use crate::store::runs;

use super::{print_json, when};

pub async fn execute(pool: &PgPool, command: RunsCommand) -> anyhow::Result<()> {
    match command {
        RunsCommand::List { sync, limit, json } => {
            let list = runs::list_runs(pool, sync.as_deref(), limit.max(1)).await?;
            if json.json {
                return print_json(&list);
            }
            if list.is_empty() {
                println!("No runs yet.");
                return Ok(());
            }
            println!(
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
                println!(
                    "{:<8} {:<24} {:<10} {:<10} {:>7} {:<20} {:>8} {:>8} {:>8} {:>8}  {}",
                    r.id,
                    r.sync_id,
                    r.status,
                    r.trigger,
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
        RunsCommand::Show { run_id, json } => {
            let run = runs::get_run(pool, run_id).await?.ok_or_else(|| {
                BadInput::argument(
                    format!("run {run_id}"),
                    "no such run (see `syncward runs list`)",
                )
            })?;
            let events = runs::list_run_events(pool, run_id).await?;
            if json.json {
                let failure = run.failure_code.as_deref().and_then(crate::failure::FailureCode::parse).map(|c| {
                    serde_json::json!({
                        "code": c, "what_happened": c.what_happened(), "what_next": c.what_next(), "owner": c.owner(),
                    })
                });
                return print_json(
                    &serde_json::json!({ "run": run, "failure": failure, "events": events }),
                );
            }
            println!(
                "Run {} of sync {} (workspace {})",
                run.id, run.sync_id, run.workspace_id
            );
            println!("  status:    {}", run.status);
            println!("  trigger:   {}", run.trigger);
            println!("  attempt:   {} of {}", run.attempt, run.max_attempts);
            println!("  scheduled: {}", when(Some(run.scheduled_at)));
            println!("  started:   {}", when(run.started_at));
            println!("  finished:  {}", when(run.finished_at));
            let cursor = |c: &Option<sqlx::types::Json<serde_json::Value>>| {
                c.as_ref()
                    .map(|v| v.0.to_string())
                    .unwrap_or_else(|| "start".into())
            };
            println!(
                "  cursor:    {} -> {}",
                cursor(&run.cursor_start),
                cursor(&run.cursor_end)
            );
            println!(
                "  records:   {} read, {} written, {} replayed, {} rejected, {} re-sent pending",
                run.records_read,
                run.records_written,
                run.records_replayed,
                run.records_rejected,
                run.records_resent
            );
            if let Some(code) = &run.failure_code {
                println!("  failure:   {code}");
                if let Some(detail) = &run.failure_detail {
                    println!("  detail:    {detail}");
                }
                if let Some(code) = crate::failure::FailureCode::parse(code) {
                    let whose = match code.owner() {
                        crate::failure::Owner::Customer => "the sync's owner (customer)",
                        crate::failure::Owner::Operator => "the operators",
                    };
                    println!("  what happened: {}", code.what_happened());
                    println!("  what next:     {}", code.what_next());
                    println!("  whose job:     {whose}");
                }
            }
            if !events.is_empty() {
                println!("  timeline:");
                for e in events {
                    println!("    {}  {:<12} {}", when(Some(e.at)), e.kind, e.detail.0);
                }
            }
            Ok(())
        }
    }
}
