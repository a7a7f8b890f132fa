//! Stakes: how a destination call reserves its records' attempts before it
//! is made, spends them as it goes out, and how its answers settle them
//! after. A bulk call is one `delivery_batches` row holding the page's
//! packed keys (one insert instead of a thousand);
//! per-record calls get a `deliveries` row per key. The next page's bulk
//! stake is made while this page's call is in flight (`read_ahead`), so it
//! costs the page no round trip of its own.

use std::collections::{HashMap, HashSet};

use serde_json::Value;
use tracing::warn;

use super::delivery_key::DeliveryKey;
use super::page::{Pending, PreparedPage};
use super::run_env::RunContext;
use super::run_failure::RunFailure;
use super::trace_entries::trace_entries;
use crate::destination::{DestinationError, FollowUp};
use crate::store::imports;
use crate::store::ledger::{
    self, BatchCompletion, BatchStake, BatchStakeRequest, CallStake, Stake,
};

impl PreparedPage {
    /// The stake of this page's bulk call (suspects first, as the run sends
    /// them); none when nothing is to be sent, or when the page is not sent
    /// in one call (a suspect on its last attempt goes alone).
    pub(super) fn whole_stake(&self, cx: &RunContext<'_>) -> Option<BatchStakeRequest> {
        let sorted = &self.sorted;
        if sorted.suspects.is_empty() && sorted.fresh.is_empty()
            || sorted
                .suspects
                .iter()
                .any(|s| s.last_chance(cx.env.record_attempts))
        {
            return None;
        }
        Some(whole_stake(
            cx,
            &self.head.page_id,
            &self.head.open_batches,
            sorted.suspects.iter().chain(&sorted.fresh),
        ))
    }
}

/// What a stake needs to know of its page.
pub(super) struct PageStakes<'a> {
    pub page_id: &'a [u8; 32],
    pub open_batches: &'a [(i64, Vec<u8>)],
    /// The page's bulk call, already staked during the previous page's call.
    pub staked: Option<BatchStake>,
}

/// How a call's records were staked.
#[derive(Debug, Clone, Copy)]
pub(super) enum Staked {
    /// One batch row holds the keys (a bulk call): its answer completes it.
    Whole { batch: i64 },
    /// One row per key (per-record calls).
    PerKey,
}

impl PageStakes<'_> {
    /// Stakes the records of one call, fenced: refused when a newer fence
    /// exists. Returns the records still to send (a key completed by another
    /// run since the lookup is not sent again).
    pub async fn stake(
        &mut self,
        cx: &RunContext<'_>,
        batch: Vec<Pending>,
    ) -> Result<(Staked, Vec<Pending>), RunFailure> {
        if cx.bulk() {
            self.stake_whole(cx, batch).await
        } else {
            self.stake_per_key(cx, batch).await
        }
    }

    /// Stakes a bulk call's keys (or takes the stake made for them while
    /// the previous page's call was in flight).
    async fn stake_whole(
        &mut self,
        cx: &RunContext<'_>,
        batch: Vec<Pending>,
    ) -> Result<(Staked, Vec<Pending>), RunFailure> {
        let staked = match self.staked.take() {
            Some(staked) => staked,
            None => {
                let request = whole_stake(cx, self.page_id, self.open_batches, batch.iter());
                let run = cx.run;
                ledger::stake_batch(
                    &cx.env.store,
                    &run.sync_id,
                    run.id,
                    cx.lease.fence,
                    &request,
                )
                .await?
            }
        };
        match staked {
            BatchStake::Fenced => Err(RunFailure::fenced_before_stake()),
            BatchStake::Staked {
                batch: id,
                completed_meanwhile,
            } => {
                let done: HashSet<&[u8]> = completed_meanwhile.chunks_exact(32).collect();
                let batch = batch
                    .into_iter()
                    .filter(|p| !done.contains(&p.key.0[..]))
                    .collect();
                Ok((Staked::Whole { batch: id }, batch))
            }
        }
    }

    /// Stakes a batch of per-record calls, one row per key.
    async fn stake_per_key(
        &self,
        cx: &RunContext<'_>,
        batch: Vec<Pending>,
    ) -> Result<(Staked, Vec<Pending>), RunFailure> {
        // Keys with a row of their own are staked again; the rest (new, or
        // pending only in a bulk stake) get a row, with what they already spent.
        let (again, fresh): (Vec<&Pending>, Vec<&Pending>) = batch.iter().partition(|p| p.per_key);
        let spent: Vec<i32> = fresh.iter().map(|p| p.spent).collect();
        let keys = |items: Vec<&Pending>| -> Vec<Vec<u8>> {
            items.into_iter().map(|p| p.key.0.to_vec()).collect()
        };
        // Traced in the order the statement lists them: fresh, then again.
        let trace = trace_entries(cx, fresh.iter().chain(&again).copied());
        let (fresh, again) = (keys(fresh), keys(again));
        let run = cx.run;
        let request = ledger::KeyStake {
            sync_id: &run.sync_id,
            page: self.page_id,
            fresh: &fresh,
            spent: &spent,
            again: &again,
            run_id: run.id,
            fence: cx.lease.fence,
            trace: Some(&trace),
        };
        let stake = ledger::stake_keys(&cx.env.store, &request).await?;
        match stake {
            Stake::Fenced => Err(RunFailure::fenced_before_stake()),
            Stake::Staked { keys, .. } => {
                let staked: HashMap<Vec<u8>, i32> = keys.into_iter().collect();
                let batch = batch
                    .into_iter()
                    .filter(|p| staked.contains_key(&p.key.0[..]))
                    .collect();
                Ok((Staked::PerKey, batch))
            }
        }
    }
}

impl Staked {
    /// Marks the call of these records as started, just before it goes
    /// out: the attempt the stake reserved is now spent. A mark that fails
    /// costs nothing but the count (the run settles the call next).
    pub async fn start_call(self, cx: &RunContext<'_>, keys: &[DeliveryKey]) {
        let packed: Vec<Vec<u8>>;
        let stake = match self {
            Staked::Whole { batch } => CallStake::Batch(batch),
            Staked::PerKey => {
                packed = keys.iter().map(|k| k.0.to_vec()).collect();
                CallStake::Keys {
                    sync_id: &cx.run.sync_id,
                    run_id: cx.run.id,
                    keys: &packed,
                }
            }
        };
        if let Err(e) = ledger::start_call(&cx.env.store, stake).await {
            warn!(
                error = %e,
                "Could not mark a call as started: a death during it would not count against its records' attempts"
            );
        }
    }
}

/// The stake of a bulk call of these records, read from page `page_id`: one
/// batch row spending one attempt of every key (the page's keys share a
/// budget: the next attempt is one more than the most any of them has spent).
/// Open stakes of the page that share keys with it are watched (an older run
/// may still complete them); those it covers entirely go.
fn whole_stake<'a>(
    cx: &RunContext<'_>,
    page_id: &[u8; 32],
    open_batches: &[(i64, Vec<u8>)],
    records: impl Iterator<Item = &'a Pending> + Clone,
) -> BatchStakeRequest {
    let mut packed = Vec::new();
    let mut attempts = 1;
    let trace = trace_entries(cx, records.clone());
    for p in records {
        packed.extend_from_slice(&p.key.0);
        attempts = attempts.max(p.spent + 1);
    }
    let staking: HashSet<&[u8]> = packed.chunks_exact(32).collect();
    let mut superseded = Vec::new();
    let mut watched = Vec::new();
    for (id, open) in open_batches {
        let mut open_keys = open.chunks_exact(32);
        if open_keys.clone().any(|k| staking.contains(k)) {
            watched.push(*id);
            if open_keys.all(|k| staking.contains(k)) {
                superseded.push(*id);
            }
        }
    }
    BatchStakeRequest {
        page: *page_id,
        packed_keys: packed,
        attempts,
        superseded,
        watched,
        trace: Some(trace),
    }
}

/// What one call's records came back as, sorted for settling.
#[derive(Default)]
pub(super) struct CallAnswers {
    pub delivered: Vec<Vec<u8>>,
    pub results: Vec<Value>,
    /// Rejected for good: their stakes are released.
    pub refused: Vec<Vec<u8>>,
    /// Asynchronous writes to check later (Brevo imports), with how many
    /// records each carried.
    pub follow_ups: Vec<(FollowUp, i32)>,
    pub failed: FailedCalls,
}

/// The records of a call that failed as a whole.
#[derive(Default)]
pub(super) struct FailedCalls {
    pub keys: Vec<Vec<u8>>,
    /// The first failure: the run's.
    pub error: Option<DestinationError>,
    /// Whether any of the failed calls may have written.
    pub maybe_written: bool,
}

impl CallAnswers {
    pub fn fail(&mut self, key: &DeliveryKey, error: DestinationError) {
        let failed = &mut self.failed;
        failed.keys.push(key.0.to_vec());
        failed.maybe_written |= error.maybe_written();
        failed.error.get_or_insert(error);
    }

    pub fn deliver(&mut self, key: &DeliveryKey, result: Value, follow_up: Option<FollowUp>) {
        self.delivered.push(key.0.to_vec());
        self.results.push(result);
        if let Some(follow_up) = follow_up {
            match self.follow_ups.iter_mut().find(|(f, _)| *f == follow_up) {
                Some((_, records)) => *records += 1,
                None => self.follow_ups.push((follow_up, 1)),
            }
        }
    }

    /// Settles the call's stakes: delivered keys completed with their
    /// answers, refused ones released, failed ones given their attempt back
    /// (the run saw the failure). A bulk call answered whole completes its
    /// one row in the page's checkpoint statement (`completions`).
    pub async fn settle(
        &self,
        cx: &RunContext<'_>,
        staked: Staked,
        sent: usize,
        completions: &mut Vec<BatchCompletion>,
    ) -> Result<(), RunFailure> {
        let (store, run) = (&cx.env.store, cx.run);
        let failed = &self.failed;
        match staked {
            Staked::Whole { batch: id, .. }
                if self.delivered.is_empty() && self.refused.is_empty() =>
            {
                if failed.error.is_some() {
                    ledger::give_back_batch(store, id, failed.maybe_written).await?;
                }
            }
            Staked::Whole { batch: id, .. }
                if self.delivered.len() == sent
                    && self.results.iter().all(|r| r == &self.results[0]) =>
            {
                completions.push(BatchCompletion {
                    batch: id,
                    result: self.results[0].clone(),
                    import: self.follow_ups.first().map(|(f, n)| (f.0, *n)),
                });
            }
            Staked::Whole { batch: id, .. } => {
                ledger::settle_batch_per_key(
                    store,
                    id,
                    &self.delivered,
                    &self.results,
                    &failed.keys,
                    failed.maybe_written,
                )
                .await?;
                self.record_follow_ups(cx).await?;
            }
            Staked::PerKey => {
                if !self.delivered.is_empty() {
                    ledger::complete_keys(store, &run.sync_id, &self.delivered, &self.results)
                        .await?;
                    self.record_follow_ups(cx).await?;
                }
                if !self.refused.is_empty() {
                    ledger::release_keys(store, &run.sync_id, &self.refused).await?;
                }
                if !failed.keys.is_empty() {
                    ledger::give_back_keys(
                        store,
                        &run.sync_id,
                        run.id,
                        &failed.keys,
                        failed.maybe_written,
                    )
                    .await?;
                }
            }
        }
        Ok(())
    }

    /// Asynchronous writes are followed up by the sweeper: only the
    /// destination's later answer says whether the rows arrived.
    async fn record_follow_ups(&self, cx: &RunContext<'_>) -> Result<(), RunFailure> {
        if self.follow_ups.is_empty() {
            return Ok(());
        }
        let processes: Vec<(i64, i32)> = self.follow_ups.iter().map(|(f, n)| (f.0, *n)).collect();
        imports::record_import_processes(&cx.env.store, &cx.run.sync_id, cx.run.id, &processes)
            .await?;
        Ok(())
    }
}

/// Writes bulk-call answers that cannot wait for a checkpoint.
pub(super) async fn complete_alone(
    cx: &RunContext<'_>,
    completions: Vec<BatchCompletion>,
) -> Result<(), RunFailure> {
    for completion in &completions {
        ledger::complete_batch(&cx.env.store, &cx.run.sync_id, cx.run.id, completion).await?;
    }
    Ok(())
}
