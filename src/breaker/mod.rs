//! The circuit breaker: after every recorded failure, whatever path recorded
//! it, read the sync's last N finished runs since it last changed (published,
//! edited or resumed). If all N failed, pause it (a conditional update, so
//! concurrent daemons trip it once), keep the last failure as its last error,
//! write an audit row naming the runs, and raise one critical alert. N is the
//! sync file's `breaker_failures`, else `breaker.consecutive_failures`; a
//! failure that says no later run can succeed (`pauses_at_once`: a webhook's
//! 410 Gone) pauses it the first time, with its code as the reason.

use serde_json::json;
use tracing::info;

use crate::alerts::{Alert, Alerter};
use crate::failure::FailureCode;
use crate::states::{PauseReason, RunStatus, SyncStatus};
use crate::store::{runs, syncs};

/// Called after a failure of `sync_id` was recorded. Returns whether this call
/// paused the sync.
pub async fn after_failure(
    alerter: &Alerter,
    sync_id: &str,
    default_threshold: u32,
) -> anyhow::Result<bool> {
    let store = alerter.store();
    let Some(sync) = syncs::get_sync(store, sync_id).await? else {
        return Ok(false);
    };
    let threshold = sync
        .definition()
        .ok()
        .and_then(|d| d.breaker_failures)
        .unwrap_or(default_threshold)
        .max(1);
    let recent =
        runs::last_finished_runs(store, sync_id, sync.changed_at, i64::from(threshold)).await?;
    let Some(last) = recent.first() else {
        return Ok(false);
    };
    let code = last.failure_code.as_deref().and_then(FailureCode::parse);
    let last_error = json!({
        "run_id": last.id,
        "code": last.failure_code,
        "detail": last.failure_detail,
        "what_happened": code.map(FailureCode::what_happened),
        "what_next": code.map(FailureCode::what_next),
        "owner": code.map(|c| c.owner()),
        "at": last.finished_at,
    });
    if last.status == RunStatus::Failed {
        syncs::set_last_error(store, sync_id, &last_error).await?;
    }
    let at_once = last.status == RunStatus::Failed && code.is_some_and(FailureCode::pauses_at_once);
    let (recent, threshold, reason) = match code {
        Some(code) if at_once => (&recent[..1], 1, PauseReason::Failure(code)),
        _ => (&recent[..], threshold, PauseReason::Breaker),
    };
    if sync.status != SyncStatus::Active
        || recent.len() < threshold as usize
        || recent.iter().any(|r| r.status != RunStatus::Failed)
    {
        return Ok(false);
    }
    let run_ids: Vec<i64> = recent.iter().map(|r| r.id).collect();
    let trip = syncs::Trip {
        changed_at: sync.changed_at,
        reason,
        last_error: &last_error,
        run_ids: &run_ids,
    };
    if !syncs::trip_breaker(store, sync_id, &trip).await? {
        return Ok(false);
    }
    // The sync in the message: the run's span names it too where there is one.
    info!(
        failures = threshold,
        reason = reason.as_str(),
        "Circuit breaker tripped; sync {sync_id} paused"
    );
    let what = code
        .map(FailureCode::what_happened)
        .unwrap_or("The runs failed.");
    let next = code
        .map(FailureCode::what_next)
        .unwrap_or("See the runs for details.");
    alerter
        .raise(&Alert {
            kind: "circuit_breaker_tripped",
            workspace: Some(sync.workspace_id.clone()),
            sync: Some(sync_id.to_string()),
            run_id: Some(last.id),
            message: if at_once {
                format!(
                    "Sync {sync_id} was paused after one failure ({reason}): {what} Next: {next}"
                )
            } else {
                format!(
                    "Sync {sync_id} failed {threshold} times in a row and was paused. Last failure ({}): {what} Next: {next} \
                     It stays paused until someone resumes it (`syncward sync resume {sync_id}`).",
                    last.failure_code.as_deref().unwrap_or("unknown")
                )
            },
            failure: code,
        })
        .await;
    Ok(true)
}
