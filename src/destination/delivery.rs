//! The `Destination` contract: deliver a batch of records, answer per record.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use super::record::{DestinationError, FollowUp, FollowUpPage, Outbound, RecordOutcome};

pub trait Destination: Send + Sync {
    /// Called once when a run opens, before any page, with the attribute
    /// names the mapping produces. The destination may check them against
    /// the service and adjust what it sends; what the run should know (an
    /// attribute the service would drop) comes back as notices, which the
    /// run logs and adds to its timeline (`destination_notice`). A check
    /// that cannot be made is skipped; only a refused credential (401/403),
    /// which no later call would get past, fails the run.
    fn start(
        &mut self,
        attributes: &[String],
    ) -> impl Future<Output = Result<Vec<String>, DestinationError>> + Send;

    /// Most records per `deliver` call; `None` means a whole page in one call
    /// (bulk endpoints). The run loop stakes ledger keys per call, so a smaller
    /// batch leaves fewer keys in doubt when the process dies.
    fn batch_size(&self) -> Option<usize>;

    /// Delivers `records`, returning one outcome per record in the same order.
    /// No request leaves before `go` is done; what comes before the first
    /// (its body) is done meanwhile. Transient failures are retried inside;
    /// what comes back as an error (for the whole call, or
    /// `RecordOutcome::Failed` for the records of a call that failed while
    /// others succeeded) is final for this run.
    fn deliver(
        &self,
        records: &[Outbound],
        go: Go<'_>,
    ) -> impl Future<Output = Result<Vec<RecordOutcome>, DestinationError>> + Send;

    /// Mirror mode: takes these contacts (by address) off what the sync put
    /// them on — Brevo: the sync's lists, never deleted nor blocklisted; a
    /// webhook: a `removed` event each. `key` names the call (a digest of
    /// the addresses) for destinations that take an idempotency key.
    /// Transient failures are retried inside; an error is final for the run.
    fn remove(
        &self,
        emails: &[String],
        key: &str,
    ) -> impl Future<Output = Result<(), DestinationError>> + Send;

    /// The later check a delivered record's answer asks for (an asynchronous
    /// import), if any. Most destinations write before they answer.
    fn follow_up(&self, _answer: &Value) -> Option<FollowUp> {
        None
    }

    /// Who shares an hourly budget of follow-up checks (an account, named
    /// without its secret); `None` when checks are not budgeted.
    fn follow_up_budget(&self) -> Option<String> {
        None
    }

    /// What the destination left out of the records it wrote so far, and
    /// why (values that do not fit their attribute): `(attribute, how many,
    /// why)`, taken (a second call names only what came after).
    fn take_dropped(&self) -> Vec<(String, u64, String)> {
        Vec::new()
    }

    /// Before a page's calls: takes the first request slot of a budget
    /// shared with other runs (unless one is held). `Ok(wait)` when it comes
    /// within `within`, `wait` from now (zero without a shared budget);
    /// `Err(wait)` when it is further: the slot is the run's all the same,
    /// so the run can give its worker back and come back for it
    /// (`hold_slot`) instead of holding the worker while it waits.
    fn reserve_slot(
        &self,
        _within: std::time::Duration,
    ) -> impl Future<Output = Result<std::time::Duration, std::time::Duration>> + Send {
        async { Ok(std::time::Duration::ZERO) }
    }

    /// The next call's first request leaves in a slot the run reserved
    /// earlier (`reserve_slot`), `wait` from now.
    fn hold_slot(&self, _wait: std::time::Duration) {}

    /// Page `page` (0: the newest) of the destination's list of follow-ups:
    /// one request, however many imports it settles.
    fn follow_up_page(
        &self,
        page: u32,
    ) -> impl Future<Output = Result<FollowUpPage, DestinationError>> + Send {
        async move {
            Err(DestinationError::InvalidConfig(format!(
                "this destination answers at once; it has no imports to list (page {page})"
            )))
        }
    }
}

/// What must be done before a call's first request leaves (the run's proof
/// that it still holds the lease, the ledger's mark that the call started,
/// the account's request slot). `start` sends it on its way, `wait` waits
/// for it just before the first request, so the work in between (building
/// the body) costs no time of its own. Work that fails keeps the call from
/// leaving: `wait` returns its error, and no request is sent.
pub struct Go<'a> {
    work: Option<GoWork<'a>>,
    /// What work finished at `start` answered.
    answered: Result<(), DestinationError>,
}

type GoWork<'a> = Pin<Box<dyn Future<Output = Result<(), DestinationError>> + Send + 'a>>;

impl std::fmt::Debug for Go<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.work.is_some() {
            "Go(pending)"
        } else {
            "Go(now)"
        })
    }
}

impl<'a> Go<'a> {
    pub fn after(work: impl Future<Output = Result<(), DestinationError>> + Send + 'a) -> Self {
        Go {
            work: Some(Box::pin(work)),
            answered: Ok(()),
        }
    }

    /// Nothing to wait for.
    pub fn now() -> Self {
        Go {
            work: None,
            answered: Ok(()),
        }
    }

    /// Its first poll: the statements it makes are written out.
    pub async fn start(&mut self) {
        if let Some(work) = &mut self.work
            && let std::task::Poll::Ready(answer) = futures::poll!(work.as_mut())
        {
            self.work = None;
            self.answered = answer;
        }
    }

    /// Done, however far `start` took it; an error means the call must not
    /// leave (answered once: a second wait finds nothing to wait for).
    pub async fn wait(&mut self) -> Result<(), DestinationError> {
        if let Some(work) = self.work.take() {
            self.answered = work.await;
        }
        std::mem::replace(&mut self.answered, Ok(()))
    }
}
