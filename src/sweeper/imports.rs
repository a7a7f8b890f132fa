//! Following Brevo imports to their end. `POST /contacts/import` only queues
//! the rows; the process says later whether they arrived. Checks are spread
//! out (`sweeper.import_check_after`) and budgeted per API key and hour across
//! every daemon (`sweeper.import_checks_per_hour`; Brevo allows 100/h).

use deadpool_redis::redis;
use tracing::{info, warn};

use crate::destination::brevo::BrevoDestination;
use crate::destination::{DestinationConfig, RetryPolicy};
use crate::store::{imports, syncs};
use crate::worker::Daemon;

/// Imports looked at per sweep, at most.
const PER_SWEEP: i64 = 20;

/// Takes one check from this hour's budget of the key; false when spent.
async fn take_check(daemon: &Daemon, key_digest: &str) -> anyhow::Result<bool> {
    let now = chrono::Utc::now();
    let hour = now.timestamp() / 3600;
    let key = format!(
        "{}:brevo-process-checks:{key_digest}:{hour}",
        daemon.settings.redis.key_prefix
    );
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
        let DestinationConfig::Brevo(config) = &definition.destination else {
            continue;
        };
        let brevo = match BrevoDestination::open(config, RetryPolicy::default()) {
            Ok(b) => b,
            Err(e) => {
                warn!(sync.id = %process.sync_id, error = %e, "Cannot check Brevo imports");
                continue;
            }
        };
        if !take_check(daemon, &brevo.key_digest()).await? {
            info!(sync.id = %process.sync_id, "This hour's import-check budget is spent; later");
            break;
        }
        match brevo.import_outcome(process.process_id).await {
            Ok(None) => imports::mark_import_checked(&daemon.store, process.id).await?,
            Ok(Some(outcome)) => {
                let recorded = imports::finish_import_process(
                    &daemon.store,
                    &process,
                    &outcome.status,
                    outcome.counts.as_ref(),
                    outcome.error.as_deref(),
                )
                .await?;
                if recorded {
                    ended += 1;
                    if outcome.status != "completed" {
                        warn!(
                            run.id = process.run_id, sync.id = %process.sync_id,
                            process = process.process_id, status = %outcome.status,
                            "A Brevo import did not complete; its page is recorded as rejected"
                        );
                    }
                }
            }
            Err(e) => {
                warn!(process = process.process_id, error = %e, "Checking a Brevo import failed");
                imports::mark_import_checked(&daemon.store, process.id).await?;
            }
        }
    }
    Ok(ended)
}
