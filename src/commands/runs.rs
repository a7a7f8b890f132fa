//! `syncward runs …`: run history.

use crate::cli::RunsCommand;
use crate::ops::{OpsError, Scoped};

use super::output::{out, outln};
use super::{print_json, when};

pub async fn execute(door: &Scoped, command: RunsCommand) -> anyhow::Result<()> {
    match command {
        RunsCommand::List { sync, limit, json } => {
            let list = match door.run_list(sync.as_deref(), limit.max(1)).await {
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
            out!("{}", view.page().to_text());
            Ok(())
        }
    }
}
