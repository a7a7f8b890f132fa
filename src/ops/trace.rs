//! `syncward trace ADDRESS`: everything the syncs a scope sees did with one
//! address — the calls that carried it (newest first: run, when, what was
//! sent, what the destination answered, where its delivery key stands), its
//! rejections, a diff or mirror sync's kept state of it and its removals.
//! Looked up by the install's keyed digest (`store::trace`): the store keeps
//! no address in clear for it.

use super::{OpsError, Scoped};
use crate::store::trace;
use crate::views::{Trace, TracedCall, TracedKept, TracedRejection};

/// Calls shown when the caller names no number.
pub const DEFAULT_CALLS: usize = 20;
impl Scoped {
    /// What the syncs this scope sees (or `sync` alone) did with `address`:
    /// up to `calls` calls, newest first.
    pub async fn trace(
        &self,
        address: &str,
        sync: Option<&str>,
        calls: usize,
    ) -> Result<Trace, OpsError> {
        if let Some(problem) = crate::mapping::email_problem(address.trim()) {
            return Err(OpsError::BadInput(format!(
                "{address:?} is not an e-mail address: {problem}"
            )));
        }
        let syncs: Vec<String> = match sync {
            Some(id) => vec![self.sync(id).await?.id],
            None => self.sync_list().await?.into_iter().map(|s| s.id).collect(),
        };
        let mut store = self.store.acquire().await?;
        let key = trace::TraceKey::load(&mut store).await?;
        drop(store);
        let digest = key.digest(address);
        let hits = trace::find(&self.store, &syncs, &digest, calls.max(1)).await?;
        let mut traced = Vec::with_capacity(hits.len());
        for hit in hits {
            traced.push(self.traced_call(hit).await?);
        }
        let rejections = trace::rejections(&self.store, &syncs, address, 50)
            .await?
            .into_iter()
            .map(|r| TracedRejection {
                sync: r.sync_id,
                run_id: r.run_id,
                at: r.at,
                code: r.code,
                message: r.message,
                delivery_key: r.key.map(hex::encode),
            })
            .collect();
        let kept = trace::kept_states(&self.store, &syncs, address)
            .await?
            .into_iter()
            .map(|k| TracedKept {
                sync: k.sync_id,
                delivered_at: k.delivered_at,
                last_seen_by_run: k.seen_run,
            })
            .collect();
        Ok(Trace {
            address: address.trim().to_string(),
            syncs,
            calls: traced,
            rejections,
            kept,
        })
    }

    async fn traced_call(&self, hit: trace::TraceHit) -> Result<TracedCall, OpsError> {
        // A mirror run's removal has no batch; a call whose batch is gone, no key.
        let (kind, state) = match (hit.batch_id, &hit.key) {
            (None, _) => ("taken_off", None),
            (Some(_), None) => ("sent", None),
            (Some(batch), Some(key)) => (
                "sent",
                Some(trace::call_state(&self.store, &hit.sync_id, batch, key).await?),
            ),
        };
        let (key_state, answer) = match (&state, kind) {
            (Some(state), _) => describe(state),
            (None, "taken_off") => (
                "gone",
                "taken off the destination's lists by a mirror run".into(),
            ),
            (None, _) => ("gone", GONE.into()),
        };
        Ok(TracedCall {
            sync: hit.sync_id,
            run_id: hit.run_id,
            at: hit.staked_at,
            kind,
            sent: hit.sent,
            delivery_key: hit.key.as_ref().map(hex::encode),
            key_state,
            attempts: state.as_ref().and_then(|s| s.attempts),
            completed_at: state.as_ref().and_then(|s| s.completed_at),
            answer,
            result: state.and_then(|s| s.result),
        })
    }
}

/// A call whose stake the ledger no longer holds.
const GONE: &str = "the ledger no longer holds this call (past retention, or staked again by a \
                    later call: see the newer entries)";

/// Where a traced key stands, and what the destination answered, in words.
fn describe(state: &trace::CallState) -> (&'static str, String) {
    if !state.batch_kept {
        return ("gone", GONE.into());
    }
    let completed = match state.per_key {
        Some(true) => state.key_status.as_deref() == Some("completed"),
        _ => state.completed_at.is_some(),
    };
    if !completed {
        return (
            "pending",
            "no answer recorded: the call's outcome is unknown, and the next run sends it \
             again under the same delivery key"
                .into(),
        );
    }
    let import = crate::destination::ImportReport {
        status: state.process_status.as_deref(),
        records: state.process_records.unwrap_or(0).into(),
        counts: state.process_counts.as_ref(),
        error: state.process_error.as_deref(),
    };
    (
        "completed",
        crate::destination::answer_words(state.result.as_ref(), &import),
    )
}
