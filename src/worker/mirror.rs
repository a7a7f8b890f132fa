//! Mirror mode's last step (`source.sync_mode = "mirror"`): after a complete
//! read of the query, the records it delivered that the read did not see
//! left the query, and are taken off the destination — unless more of them
//! left than `source.max_removal_share` allows, when a broken query (an
//! empty view, a dropped join) would otherwise empty the lists: then the run
//! takes nobody off, holds exactly who it would have taken off for a person
//! to approve (`sync removals`, `sync approve-removals`: the next run then
//! takes off those still absent), and fails as `mirror_removal_refused`.
//!
//! Crash-safe like the rest: the lease is proved first; each call of at
//! most 150 addresses is followed by forgetting exactly those records, so a
//! run killed between the two repeats at most the call in flight (taking a
//! contact off a list it is no longer on changes nothing).

use sha2::{Digest, Sha256};
use tracing::{info, warn};

use super::run_env::{RunContext, prove_lease};
use super::run_failure::RunFailure;
use crate::destination::Destination;
use crate::failure::FailureCode;
use crate::source::SyncMode;
use crate::store::held_removals;
use crate::store::record_states::{self, StateScope};
use crate::store::runs;
use crate::store::trace::{self, SentColumns, TraceEntries};

/// Records taken off per destination call (Brevo's limit for one call).
const BATCH: i64 = 150;

/// Takes the records that left the query off the destination; returns how
/// many. Removals a person approved after an earlier refusal go first,
/// exactly those still absent from the query.
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
    let approved = take_off(cx, scope, Leaving::Approved).await?;
    held_removals::drop_approved(store, &run.sync_id).await?;
    let record_states::Departures { left, known } =
        record_states::count_departed(store, scope).await?;
    if left == 0 {
        held_removals::drop_unapproved(store, &run.sync_id).await?;
        return Ok(approved);
    }
    let allowed = source.max_removal_share();
    let share = left as f64 / known.max(1) as f64;
    if share > allowed {
        // The exact set is kept for a person to approve, not only a share
        // to raise.
        held_removals::hold_departed(store, scope).await?;
        return Err(RunFailure(
            FailureCode::MirrorRemovalRefused,
            format!(
                "{left} of the {known} records delivered ({:.1} %) left the query; source.max_removal_share allows {:.1} % in one run; \
                 they are held: `syncward sync removals {id}` lists them, `syncward sync approve-removals {id}` lets the next run take them off",
                share * 100.0,
                allowed * 100.0,
                id = run.id,
            ),
        ));
    }
    let removed = take_off(cx, scope, Leaving::Departed).await?;
    held_removals::drop_unapproved(store, &run.sync_id).await?;
    Ok(approved + removed)
}

/// Which records that left the query a pass takes off.
/// Keeps the removal for `syncward trace` (each address's digest); a trace
/// not written costs the run nothing.
async fn trace_removals(cx: &RunContext<'_>, batch: &[record_states::Departed], which: Leaving) {
    let why = match which {
        Leaving::Departed => "left the query",
        Leaving::Approved => "removal approved by a person",
    };
    let removed: Vec<_> = batch
        .iter()
        .filter_map(|d| Some(cx.trace.digest(d.email.as_deref()?)))
        .collect();
    let mut sent = SentColumns::taken_off(why);
    removed.iter().for_each(|_| sent.push_removed());
    let entries = TraceEntries::new(removed.into_iter(), sent.finish());
    let run = cx.run;
    if let Err(e) = trace::record_removals(&cx.env.store, &run.sync_id, run.id, &entries).await {
        warn!(error = %e, "Could not keep the removals for trace");
    }
}

#[derive(Debug, Clone, Copy)]
enum Leaving {
    /// Every one this run's complete read did not see.
    Departed,
    /// Only those a person approved (`sync approve-removals`).
    Approved,
}

/// Takes off the records that left the query (`which`), the lease proved
/// first; returns how many.
async fn take_off(
    cx: &RunContext<'_>,
    scope: StateScope<'_>,
    which: Leaving,
) -> Result<u64, RunFailure> {
    let store = &cx.env.store;
    let mut removed = 0;
    let mut proved = false;
    let mut after = Vec::new();
    loop {
        let batch = match which {
            Leaving::Departed => record_states::departed(store, scope, &after, BATCH).await?,
            Leaving::Approved => {
                held_removals::approved_departed(store, scope, &after, BATCH).await?
            }
        };
        let Some(last) = batch.last() else {
            break;
        };
        if !proved {
            prove_lease(cx).await?;
            proved = true;
        }
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
            trace_removals(cx, &batch, which).await;
        }
        let identities: Vec<Vec<u8>> = batch.into_iter().map(|d| d.identity).collect();
        record_states::forget_states(store, &identities).await?;
        removed += emails.len() as u64;
    }
    if removed == 0 {
        return Ok(0);
    }
    let what = match which {
        Leaving::Departed => "records that left the query",
        Leaving::Approved => "approved removals still absent from the query",
    };
    info!(removed, what, "Taken off the destination");
    let event = serde_json::json!({ "message": format!("{removed} {what} were taken off the destination") });
    if let Err(e) = runs::add_run_event(store, cx.run.id, "records_removed", event).await {
        warn!(error = %e, "Could not record the removals on the run");
    }
    Ok(removed)
}
