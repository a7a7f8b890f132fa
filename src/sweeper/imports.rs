//! Following imports to their end (a destination that answers before it
//! writes, as Brevo's `POST /contacts/import`): the destination says later
//! whether the rows arrived. Checks are spread out
//! (`sweeper.import_check_after`) and budgeted per account and hour across
//! every daemon (`sweeper.import_checks_per_hour`; Brevo allows 100/h).

use deadpool_redis::redis;
use tracing::{info, warn};

use crate::alerts::Alert;
use crate::daemon::Daemon;
use crate::destination::{
    AnyDestination, DESTINATION_RETRY, Destination, FollowUp, IMPORT_UNKNOWN, ImportOutcome,
};
use crate::store::imports::ImportProcessRow;
use crate::store::{imports, syncs};

/// Imports looked at per sweep, at most.
const PER_SWEEP: i64 = 20;

/// Checks of one import after which syncward stops asking and records its
/// outcome as unknown. Checks are at least `sweeper.import_check_after` apart
/// (1 min by default), so this follows an import for an hour or more, far
/// longer than Brevo takes for an 8 MB page; past it the process is lost, and
/// asking on would spend the key's 100 checks an hour on it forever.
pub const MAX_CHECKS_PER_IMPORT: i32 = 60;

/// Kind of the alert raised when an import's outcome cannot be learned.
pub const IMPORT_UNKNOWN_ALERT: &str = "import_outcome_unknown";

/// Takes one check from this hour's budget of the account; false when spent.
async fn take_check(daemon: &Daemon, budget: &str) -> anyhow::Result<bool> {
    let now = chrono::Utc::now();
    let hour = now.timestamp() / 3600;
    let key = format!("{}:{budget}:{hour}", daemon.settings.redis.key_prefix);
    let mut conn = daemon.leases.pool().get().await?;
    let (used,): (u64,) = redis::pipe()
        .atomic()
        .incr(&key, 1u64)
        .expire(&key, 3600 + 60)
        .ignore()
        .query_async(&mut conn)
        .await?;
    Ok(used <= u64::from(daemon.settings.sweeper.import_checks_per_hour))
}

/// Checks the imports that are due; returns how many ended.
pub async fn check_imports(daemon: &Daemon) -> anyhow::Result<usize> {
    let due = imports::due_import_processes(
        &daemon.store,
        daemon.settings.sweeper.import_check_after,
        PER_SWEEP,
    )
    .await?;
    let mut ended = 0;
    for process in due {
        let Some(sync) = syncs::get_sync(&daemon.store, &process.sync_id).await? else {
            continue;
        };
        let Ok(definition) = sync.definition() else {
            continue;
        };
        let secrets = daemon
            .settings
            .secrets
            .store()
            .workspace(&definition.workspace);
        let destination =
            match AnyDestination::open(&definition.destination, DESTINATION_RETRY, &secrets) {
                Ok(d) => d,
                Err(e) => {
                    warn!(sync.id = %process.sync_id, error = %e, "Cannot check imports");
                    continue;
                }
            };
        if let Some(budget) = destination.follow_up_budget()
            && !take_check(daemon, &budget).await?
        {
            info!(sync.id = %process.sync_id, "This hour's import-check budget is spent; later");
            crate::telemetry::record_import_check("budget_spent");
            break;
        }
        let answer = destination
            .check_follow_up(FollowUp(process.process_id))
            .await;
        crate::telemetry::record_import_check(match &answer {
            Ok(Some(_)) => "ended",
            Ok(None) => "running",
            Err(_) => "failed",
        });
        // This check is the last one allowed: an import still unfinished (or
        // unreadable) after it is given up as unknown.
        let last_check = process.checks + 1 >= MAX_CHECKS_PER_IMPORT;
        let outcome = match answer {
            Ok(Some(outcome)) => Some(outcome),
            Ok(None) if last_check => Some(ImportOutcome {
                status: IMPORT_UNKNOWN.to_string(),
                counts: None,
                error: Some(format!(
                    "still not finished after {MAX_CHECKS_PER_IMPORT} checks; syncward stopped asking"
                )),
            }),
            Err(e) if last_check => Some(ImportOutcome {
                status: IMPORT_UNKNOWN.to_string(),
                counts: None,
                error: Some(format!(
                    "no answer after {MAX_CHECKS_PER_IMPORT} checks (last: {e}); syncward stopped asking"
                )),
            }),
            Ok(None) => None,
            Err(e) => {
                warn!(process = process.process_id, error = %e, "Checking an import failed");
                None
            }
        };
        let Some(outcome) = outcome else {
            imports::mark_import_checked(&daemon.store, process.id).await?;
            continue;
        };
        let recorded = imports::finish_import_process(
            &daemon.store,
            &process,
            &outcome.status,
            outcome.counts.as_ref(),
            outcome.error.as_deref(),
        )
        .await?;
        if !recorded {
            continue;
        }
        ended += 1;
        if outcome.status != "completed" {
            warn!(
                run.id = process.run_id, sync.id = %process.sync_id,
                process = process.process_id, status = %outcome.status,
                "An import did not complete; its page is recorded as rejected"
            );
        }
        if outcome.status == IMPORT_UNKNOWN {
            alert_unknown(
                daemon,
                &sync.workspace_id,
                &process,
                outcome.error.as_deref(),
            )
            .await;
        }
    }
    Ok(ended)
}

/// One critical alert per import whose outcome cannot be learned: its page
/// may or may not have arrived, and only a person can tell (Brevo's import
/// history) or decide to send it again.
async fn alert_unknown(
    daemon: &Daemon,
    workspace: &str,
    process: &ImportProcessRow,
    why: Option<&str>,
) {
    let sync = &process.sync_id;
    daemon
        .alerter
        .raise(&Alert {
            kind: IMPORT_UNKNOWN_ALERT,
            workspace: Some(workspace.to_string()),
            sync: Some(sync.clone()),
            run_id: Some(process.run_id),
            message: format!(
                "Sync {sync}: the outcome of Brevo import process {} (run {}, {} records) is unknown{}. \
                 Its records are shown as rejected (import_unknown) and left the ledger. Next: check the \
                 import in Brevo's contact import history; to send them again, reset the cursor \
                 (`syncward sync reset-cursor {sync}`) and run the sync (Brevo writes are upserts).",
                process.process_id,
                process.run_id,
                process.records,
                why.map(|w| format!(" ({w})")).unwrap_or_default(),
            ),
            failure: None,
        })
        .await;
}
