//! A clean page's checkpoint, waiting: written just before the next page's
//! call leaves (`send_page` carries it, with that call's mark), the lease
//! proved beside it; and where the run stands once it lands.

use serde_json::Value;

use super::checkpoint_pacing::CheckpointPacing;
use super::run_env::{RunContext, prove_lease};
use super::run_failure::RunFailure;
use super::stakes::complete_alone;
use crate::failure::FailureCode;
use crate::store::checkpoint::{self, CleanPage};
use crate::store::ledger::BatchCompletion;
use crate::store::runs::RunCounts;

/// Where a run stands: its counts, last written cursor and page number.
pub(super) struct LoopState {
    pub counts: RunCounts,
    pub cursor: Option<Value>,
    pub page: u64,
}

/// A clean page's checkpoint, written as the next page's call is about to
/// leave (by `send_page`, with that call's mark).
pub(super) struct Saving {
    counts: RunCounts,
    pages: u64,
    at: Option<Value>,
    completions: Vec<BatchCompletion>,
}

/// What a checkpoint came to.
pub(super) struct Landed {
    /// Where it moved the cursor, if it did.
    moved: Option<Option<Value>>,
    /// Whether a person asked the run to stop, or why the run must stop.
    answer: Result<bool, RunFailure>,
}

impl Landed {
    /// Whether the run must stop here: no call may leave after it.
    pub(super) fn stops(&self) -> bool {
        self.answer.is_err()
    }

    pub(super) fn apply(self, state: &mut LoopState) -> Result<bool, RunFailure> {
        if let Some(at) = self.moved {
            state.cursor = at;
        }
        self.answer
    }
}

impl Saving {
    /// A clean page's checkpoint, to move the cursor to `at` with the run's
    /// progress. The page's bulk-call answers go with it.
    pub(super) fn new(
        state: &LoopState,
        at: &Option<Value>,
        completions: Vec<BatchCompletion>,
    ) -> Self {
        Saving {
            counts: state.counts,
            pages: state.page,
            at: at.clone(),
            completions,
        }
    }

    /// Writes it: the lease proved beside a statement that moves the cursor
    /// and is refused if a newer fence wrote, and that marks the call of
    /// bulk stake `mark` started if it moved. The answers of a page sent in
    /// several calls go alone before it, all but the last: the calls were
    /// made either way. The next call leaves only once this has landed and
    /// the proof is in: no call leaves after a failed proof, and a kill
    /// re-sends at most the page in flight (docs/contract.md). Boxed: it is
    /// large, and a run's future is held on a worker's stack.
    pub(super) fn write<'a>(
        self,
        cx: &'a RunContext<'a>,
        mark: Option<i64>,
    ) -> std::pin::Pin<Box<dyn Future<Output = Landed> + Send + 'a>> {
        Box::pin(self.written(cx, mark))
    }

    async fn written(mut self, cx: &RunContext<'_>, mark: Option<i64>) -> Landed {
        let at = self.at;
        let write = async {
            let with_checkpoint = self.completions.pop();
            complete_alone(cx, self.completions).await?;
            let page = CleanPage {
                run_id: cx.run.id,
                sync_id: &cx.run.sync_id,
                fence: cx.lease.fence,
                counts: &self.counts,
                pages: self.pages,
                cursor: at.as_ref(),
                completion: with_checkpoint.as_ref(),
                mark,
            };
            Ok::<_, RunFailure>(checkpoint::record_clean_page(&cx.env.store, &page).await?)
        };
        let (proof, written) = tokio::join!(prove_lease(cx), write);
        match written {
            Err(failure) => Landed {
                moved: None,
                answer: Err(failure),
            },
            Ok((false, _)) => Landed {
                moved: None,
                answer: Err(RunFailure::lease_lost("a newer fence wrote the cursor")),
            },
            Ok((true, cancel)) => Landed {
                moved: Some(at),
                answer: proof.map(|()| cancel),
            },
        }
    }
}

/// The checkpoint waiting, if any, written with no call's mark.
pub(super) async fn landing(cx: &RunContext<'_>, saving: Option<Saving>) -> Option<Landed> {
    match saving {
        Some(saving) => Some(saving.write(cx, None).await),
        None => None,
    }
}

/// Writes the checkpoint waiting, if any, alone; a person's request to
/// stop that it brings back is the run's to end with.
pub(super) async fn land(
    cx: &RunContext<'_>,
    state: &mut LoopState,
    saving: Option<Saving>,
) -> Result<(), RunFailure> {
    let Some(landed) = landing(cx, saving).await else {
        return Ok(());
    };
    if landed.apply(state)? {
        return Err(RunFailure(
            FailureCode::RunCancelled,
            format!("cancelled by a person; stopped after page {}", state.page),
        ));
    }
    Ok(())
}

/// Writes the checkpoint a run of replayed pages left waiting, if any.
pub(super) async fn checkpoint_waiting(
    cx: &RunContext<'_>,
    state: &mut LoopState,
    pacing: &CheckpointPacing,
) -> Result<(), RunFailure> {
    if pacing.waiting() {
        let saving = Saving::new(state, pacing.at(), Vec::new());
        land(cx, state, Some(saving)).await?;
    }
    Ok(())
}
