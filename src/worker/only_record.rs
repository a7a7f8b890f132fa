//! `sync run ID --foreground --only ADDRESS`: the record(s) of one address,
//! read by the source's search and sent through the run's own path (keys,
//! mapping, consent, the ledger's stake and answer), for "why is this one
//! contact wrong". The cursor does not move: nothing is checkpointed.

use serde_json::json;

use super::prepared_page::prepare_page;
use super::run_env::RunContext;
use super::run_env::RunOutcome;
use super::run_failure::RunFailure;
use super::send_page::send_page;
use super::stakes::complete_alone;
use crate::source::{AnySource, Source};
use crate::store::runs::RunCounts;

/// Reads and sends the records of `address`; the counts say what happened
/// (none read: no record of the source holds it).
pub(super) async fn send_only(
    cx: &RunContext<'_>,
    source: &mut AnySource,
    counts: &mut RunCounts,
    address: &str,
) -> Result<RunOutcome, RunFailure> {
    let page = source
        .fetch_by_address(&cx.definition.mapping.email, address)
        .await?;
    if page.records.is_empty() {
        return Ok(RunOutcome::Succeeded);
    }
    // A page of its own, named by this run: its keys are new, so the record
    // is sent even if a run delivered it before (that is what was asked).
    let cursor = json!({ "only": cx.run.id });
    let fingerprint = source.fingerprint();
    let page = prepare_page(cx, &fingerprint, Some(&cursor), page, None).await?;
    let mut completions = Vec::new();
    // No checkpoint waits: this run keeps no cursor.
    let (refused, _) = send_page(cx, page, counts, &mut completions, None).await;
    complete_alone(cx, completions).await?;
    match refused? {
        None => Ok(RunOutcome::Succeeded),
        Some(code) => Err(RunFailure(
            code,
            format!("the record(s) of {address} were rejected or quarantined"),
        )),
    }
}
