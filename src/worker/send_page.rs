//! One prepared page sent: its calls (suspects alone, the rest in the
//! destination's batch size), each staked, sent and settled with its answer;
//! the page's rejections and, in diff and mirror mode, what it delivered kept.
//! The last clean page's checkpoint is written just before the first call
//! leaves, with that call's mark.

use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tracing::info;

use super::clean_checkpoint::{Landed, Saving, landing};
use super::delivery_key::DeliveryKey;
use super::page::{PageHead, Pending, PreparedPage, SortedRecords};
use super::run_env::{RunContext, prove_lease};
use super::run_failure::RunFailure;
use super::stakes::{CallAnswers, PageStakes, Staked, complete_alone};
use crate::destination::{Destination, DestinationError, Go, Outbound, RecordOutcome};
use crate::failure::FailureCode;
use crate::store::ledger::BatchCompletion;
use crate::store::rejected::{self, Rejection};
use crate::store::runs::RunCounts;

/// Sends a prepared page, the last clean page's checkpoint (`saving`)
/// written before its first call leaves (whatever happens, alone if need
/// be); returns the failure when no record of it can be delivered (every one
/// rejected, or quarantined): the page is never given up on as a whole, and
/// what the checkpoint came to.
pub(super) async fn send_page(
    cx: &RunContext<'_>,
    page: PreparedPage,
    counts: &mut RunCounts,
    completions: &mut Vec<BatchCompletion>,
    saving: Option<Saving>,
) -> (Result<Option<FailureCode>, RunFailure>, Option<Landed>) {
    let checkpoint = Checkpoint {
        waiting: Mutex::new(saving),
        landed: OnceLock::new(),
    };
    let sent = send(cx, page, counts, completions, &checkpoint).await;
    let waiting = checkpoint
        .waiting
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    // Written alone if no call took it (the page made none).
    let landed = landing(cx, waiting)
        .await
        .or(checkpoint.landed.into_inner());
    (sent, landed)
}

/// The last clean page's checkpoint: waiting until the page's first call
/// takes it, then what it came to.
struct Checkpoint {
    waiting: Mutex<Option<Saving>>,
    landed: OnceLock<Landed>,
}

impl Checkpoint {
    /// The checkpoint waiting, for the call about to leave; `None` once a
    /// call took it (or if none waits).
    fn take(&self) -> Option<Saving> {
        self.waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// Writes `saving` (the lease proved beside it), marking the call of
    /// `staked` started in the same statement when it is a bulk stake (else
    /// `start_call` marks it beside). Refuses when the run must stop there.
    async fn land(
        &self,
        cx: &RunContext<'_>,
        saving: Saving,
        staked: Staked,
        keys: &[DeliveryKey],
    ) -> Result<(), DestinationError> {
        let landed = match staked {
            Staked::Whole { batch } => saving.write(cx, Some(batch)).await,
            Staked::PerKey => tokio::join!(saving.write(cx, None), staked.start_call(cx, keys)).0,
        };
        let stops = landed.stops();
        let _ = self.landed.set(landed);
        match stops {
            true => Err(DestinationError::Unavailable(
                "not sent: the run stops at the last checkpoint".into(),
            )),
            false => Ok(()),
        }
    }
}

async fn send(
    cx: &RunContext<'_>,
    page: PreparedPage,
    counts: &mut RunCounts,
    completions: &mut Vec<BatchCompletion>,
    checkpoint: &Checkpoint,
) -> Result<Option<FailureCode>, RunFailure> {
    let PreparedPage {
        head:
            PageHead {
                records,
                cursor,
                page_id,
                open_batches,
                ..
            },
        staked,
        sorted:
            SortedRecords {
                replayed,
                mut rejections,
                exhausted,
                suspects,
                fresh,
                states,
                seen,
                page_digest,
                ..
            },
    } = page;
    counts.read += records as i64;
    counts.replayed += replayed;
    let mut stakes = PageStakes {
        page_id: &page_id,
        open_batches: &open_batches,
        staked,
    };
    let mut delivered = 0;
    for (call, batch) in calls(cx, suspects, fresh).into_iter().enumerate() {
        // A page sent in several bulk calls: the answers of the earlier ones
        // are written now, not with the checkpoint, so a later call that
        // kills the process does not take them along.
        if call > 0 && !completions.is_empty() {
            complete_alone(cx, std::mem::take(completions)).await?;
        }
        let batch = Batch {
            records: batch,
            rejections: &mut rejections,
            completions,
            prove: call == 0,
            checkpoint,
        };
        delivered += deliver_batch(cx, &mut stakes, batch, counts).await?;
    }
    counts.written += delivered as i64;
    counts.rejected += rejections.len() as i64;
    let run = cx.run;
    let page = (&page_id, cursor.as_ref());
    rejected::record_rejections(&cx.env.store, run.id, &run.sync_id, page, &rejections).await?;
    super::diff_page::remember_delivered(cx, &page_id, states, seen, page_digest, &rejections)
        .await?;
    if exhausted > 0 {
        metrics::counter!(
            "syncward_records_quarantined_total",
            "sync" => run.sync_id.clone(),
            "workspace" => run.workspace_id.clone()
        )
        .increment(exhausted as u64);
    }
    if rejections.len() < records {
        return Ok(None);
    }
    Ok(Some(if exhausted == 0 {
        FailureCode::DestinationRejectedAll
    } else {
        FailureCode::RecordsQuarantined
    }))
}

/// How a page's records go out. Suspects go alone, fresh records in the
/// destination's batch size. A bulk destination takes the whole page in one
/// call, but for suspects on their last attempt: alone, so a record that kills
/// the worker is found before its neighbours' budgets run out.
fn calls(cx: &RunContext<'_>, suspects: Vec<Pending>, fresh: Vec<Pending>) -> Vec<Vec<Pending>> {
    let mut calls: Vec<Vec<Pending>> = Vec::new();
    match cx.destination.batch_size() {
        Some(n) => {
            calls.extend(suspects.into_iter().map(|s| vec![s]));
            let mut fresh = fresh.into_iter().peekable();
            while fresh.peek().is_some() {
                calls.push(fresh.by_ref().take(n.max(1)).collect());
            }
        }
        None => {
            let (alone, mut all): (Vec<Pending>, Vec<Pending>) = suspects
                .into_iter()
                .partition(|s| s.last_chance(cx.env.record_attempts));
            calls.extend(alone.into_iter().map(|s| vec![s]));
            all.extend(fresh);
            if !all.is_empty() {
                calls.push(all);
            }
        }
    }
    calls
}

/// One destination call's records, and where its answers go.
struct Batch<'p> {
    records: Vec<Pending>,
    rejections: &'p mut Vec<Rejection>,
    /// Bulk-call answers that ride with the page's checkpoint.
    completions: &'p mut Vec<BatchCompletion>,
    /// The lease is proved before the call leaves (a page's first call).
    prove: bool,
    /// The last clean page's checkpoint, written before the call leaves.
    checkpoint: &'p Checkpoint,
}

/// Stakes, sends and settles one call's records; returns how many were
/// delivered. A call that failed is settled first, then fails the run, which
/// is retried with backoff (the cursor stays at this page).
async fn deliver_batch(
    cx: &RunContext<'_>,
    stakes: &mut PageStakes<'_>,
    batch: Batch<'_>,
    counts: &mut RunCounts,
) -> Result<usize, RunFailure> {
    let (offered, prove, checkpoint) = (batch.records.len(), batch.prove, batch.checkpoint);
    let (staked, records) = stakes.stake(cx, batch.records).await?;
    // A key completed by someone else between lookup and stake is not sent.
    counts.replayed += (offered - records.len()) as i64;
    if records.is_empty() {
        return Ok(0);
    }
    let resent = records.iter().filter(|p| p.suspect).count();
    if resent > 0 {
        counts.resent += resent as i64;
        info!(
            keys = resent,
            "Re-sending keys left pending by an earlier run"
        );
    }
    let sent = records.len();
    let mut keys: Vec<DeliveryKey> = Vec::with_capacity(sent);
    let mut outbound: Vec<Outbound> = Vec::with_capacity(sent);
    let mut source_keys = Vec::with_capacity(sent);
    for p in records {
        keys.push(p.key);
        outbound.push(p.outbound);
        source_keys.push(p.source_key);
    }
    // The stake's attempt is spent as the call goes out: marked first (in
    // the last clean page's checkpoint, when one is waiting: the one
    // durable commit between a page's answer and the next call), so a
    // record whose call kills the process at once is counted. The lease is
    // proved (a page's first call), the account's request slot taken and
    // the body built meanwhile; a failed proof or checkpoint keeps the call
    // from leaving. A call that failed as a whole failed for each of its
    // records.
    let refusal = std::sync::OnceLock::new();
    let go = Go::after(async {
        // With no bound the slot is always held (`Ok`), however far it is.
        let slot = cx.destination.reserve_slot(Duration::MAX);
        let ready = async {
            match checkpoint.take() {
                // The checkpoint's write proves the lease beside it.
                Some(saving) => checkpoint.land(cx, saving, staked, &keys).await,
                None => {
                    let proof = async {
                        match prove {
                            true => prove_lease(cx).await,
                            false => Ok(()),
                        }
                    };
                    let (proof, ()) = tokio::join!(proof, staked.start_call(cx, &keys));
                    proof.map_err(|failure| {
                        let _ = refusal.set(failure);
                        DestinationError::Unavailable("not sent: the run lost its lease".into())
                    })
                }
            }
        };
        tokio::join!(ready, slot).0
    });
    let outcomes = cx
        .destination
        .deliver(&outbound, go)
        .await
        .unwrap_or_else(|e| vec![RecordOutcome::Failed(e); sent]);
    let mut answers = CallAnswers::default();
    let answered = keys.iter().zip(outbound).zip(source_keys).zip(outcomes);
    for (((key, outbound), source_key), outcome) in answered {
        match outcome {
            RecordOutcome::Failed(error) => answers.fail(key, error),
            RecordOutcome::Delivered(result) => {
                let follow_up = cx.destination.follow_up(&result);
                answers.deliver(key, result, follow_up);
            }
            RecordOutcome::Rejected { code, message } => {
                answers.refused.push(key.0.to_vec());
                batch.rejections.push(Rejection {
                    key: Some(key.0.to_vec()),
                    email: Some(outbound.contact.email),
                    source_key,
                    code,
                    message,
                });
            }
        }
    }
    answers.settle(cx, staked, sent, batch.completions).await?;
    if let Some(failure) = refusal.into_inner() {
        return Err(failure);
    }
    if let Some(error) = answers.failed.error {
        return Err(error.into());
    }
    Ok(answers.delivered.len())
}
