//! Mirror mode's last step (`source.sync_mode = "mirror"`): after a complete
//! read of the query, the records it delivered that the read did not see
//! left the query, and are taken off the destination — unless more of them
//! left than `source.max_removal_share` allows, when a broken query (an
//! empty view, a dropped join) would otherwise empty the lists: then the run
//! takes nobody off and fails as `mirror_removal_refused`.
//!
//! Crash-safe like the rest: the lease is proved first; each call of at
//! most 150 addresses is followed by forgetting exactly those records, so a
//! run killed between the two repeats at most the call in flight (taking a
//! contact off a list it is no longer on changes nothing).

use sha2::{Digest, Sha256};
use tracing::{info, warn};

use super::run::{RunContext, prove_lease};
use super::run_failure::RunFailure;
use crate::destination::Destination;
use crate::failure::FailureCode;
use crate::source::SyncMode;
use crate::store::record_states::{self, StateScope};
use crate::store::runs;

/// Records taken off per destination call (Brevo's limit for one call).
const BATCH: i64 = 150;

/// Takes the records that left the query off the destination; returns how
/// many.
pub(super) async fn remove_departed(cx: &RunContext<'_>) -> Result<u64, RunFailure> {
    let source = &cx.definition.source;
    if source.sync_mode() != SyncMode::Mirror {
        return Ok(0);
    }
    let run = cx.run;
    let scope = StateScope {
        sync_id: &run.sync_id,
        epoch: run.ledger_epoch,
        run_id: run.id,
    };
    let store = &cx.env.store;
    let record_states::Departures { left, known } =
        record_states::count_departed(store, scope).await?;
    if left == 0 {
        return Ok(0);
    }
    let allowed = source.max_removal_share();
    let share = left as f64 / known.max(1) as f64;
    if share > allowed {
        return Err(RunFailure(
            FailureCode::MirrorRemovalRefused,
            format!(
                "{left} of the {known} records delivered ({:.1} %) left the query; source.max_removal_share allows {:.1} % in one run",
                share * 100.0,
                allowed * 100.0
            ),
        ));
    }
    prove_lease(cx).await?;
    let mut removed = 0;
    let mut after = Vec::new();
    loop {
        let batch = record_states::departed(store, scope, &after, BATCH).await?;
        let Some(last) = batch.last() else {
            break;
        };
        after = last.identity.clone();
        let emails: Vec<String> = batch.iter().filter_map(|d| d.email.clone()).collect();
        if emails.len() < batch.len() {
            // Delivered in diff mode and gone before a read in mirror mode
            // saw its address: it cannot be named to the destination.
            warn!(
                records = batch.len() - emails.len(),
                "Records left the query with no address kept; not taken off"
            );
        }
        if !emails.is_empty() {
            let mut digest = Sha256::new();
            emails.iter().for_each(|e| digest.update(e.as_bytes()));
            let key = hex::encode(digest.finalize());
            cx.destination.remove(&emails, &key).await?;
        }
        let identities: Vec<Vec<u8>> = batch.into_iter().map(|d| d.identity).collect();
        record_states::forget_states(store, &identities).await?;
        removed += emails.len() as u64;
    }
    info!(
        removed,
        "Records that left the query taken off the destination"
    );
    let event = serde_json::json!({ "message": format!("{removed} records that left the query were taken off the destination") });
    if let Err(e) = runs::add_run_event(store, run.id, "records_removed", event).await {
        warn!(error = %e, "Could not record the removals on the run");
    }
    Ok(removed)
}
