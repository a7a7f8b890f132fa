//! Three pages in flight: page N is sent while page N+1 (already read) is
//! keyed and looked up in the ledger and page N+2 is read, the lookup of its
//! stakes in the ledger started beside it (found by the cursor it is read
//! from, before its keys are known) and awaited only once its keys are, at
//! the next step. Page N+1's bulk call is staked once it is keyed, while
//! page N's call is still in flight: a stake reserves its keys' attempts but
//! spends none until its call is marked started (in page N's checkpoint,
//! just before it leaves), so a run that dies or stops meanwhile costs the
//! page nothing (and gives the stake back when it can). On the bulk path
//! this overlap is what keeps the source, the ledger lookups and the
//! destination busy at once; on a replay, a page waits for its keying, not
//! for a round trip (see docs/bench-log.md).

use super::delivery_key::{PageKeys, keyed_fingerprint};
use super::page::PreparedPage;
use super::prepared_page::{StakesLookup, prepare_page};
use super::run_env::RunContext;
use super::run_failure::RunFailure;
use crate::source::{AnySource, Page, Source, SourceError};
use crate::store::ledger::{self, BatchStake};
use serde_json::Value;

/// The pages after the one being sent.
pub(super) struct ReadAhead<'s> {
    source: &'s mut AnySource,
    /// What the source reads: part of every page's identity in the ledger.
    fingerprint: String,
    /// The page to send next, keyed and looked up; `None` after the last.
    /// A source error waits here until the page is due.
    next: Option<Result<PreparedPage, SourceError>>,
    /// The page after it, read but not yet keyed.
    following: Option<ReadPage>,
}

/// A page read ahead, and the lookup of its stakes in the ledger, started
/// beside it (none in diff mode, whose pages are looked up by their records'
/// identities).
struct ReadPage {
    page: Result<Page, SourceError>,
    stakes: Option<StakesLookup>,
}

impl<'s> ReadAhead<'s> {
    /// Reads the first two pages from `cursor` and prepares the first.
    pub async fn start(
        cx: &RunContext<'_>,
        source: &'s mut AnySource,
        cursor: Option<&Value>,
    ) -> Result<Self, RunFailure> {
        let fingerprint = keyed_fingerprint(source.fingerprint(), cx.run.ledger_epoch);
        let first = source.fetch_page(cursor).await?;
        let run = cx.run;
        crate::telemetry::record_source_hold(&run.sync_id, &run.workspace_id, first.held_back);
        let following = read_following(cx, &fingerprint, source, following_cursor(&first)).await;
        let next = prepare_page(cx, &fingerprint, cursor, first, None).await?;
        Ok(ReadAhead {
            source,
            fingerprint,
            next: Some(Ok(next)),
            following,
        })
    }

    /// The page to send now; `None` once the source has no more.
    pub fn take(&mut self) -> Result<Option<PreparedPage>, SourceError> {
        match self.next.take() {
            Some(Ok(page)) if page.head.records > 0 => Ok(Some(page)),
            Some(Ok(_)) | None => Ok(None),
            Some(Err(e)) => Err(e),
        }
    }

    /// Prepares the page read ahead (it starts at `from`, where the page
    /// being sent ends) and stakes its bulk call, while the one after it is
    /// read. A store failure while preparing is returned for the run to
    /// raise once the page being sent is checkpointed.
    pub async fn advance(
        &mut self,
        cx: &RunContext<'_>,
        from: Option<&Value>,
    ) -> Result<(), RunFailure> {
        let read = self.following.take();
        let after = match &read {
            Some(ReadPage { page: Ok(page), .. }) => following_cursor(page),
            _ => None,
        };
        let fingerprint = &self.fingerprint;
        let prepare = async {
            match read {
                None => Ok::<_, RunFailure>(None),
                Some(ReadPage { page: Err(e), .. }) => Ok(Some(Err(e))),
                Some(ReadPage {
                    page: Ok(page),
                    stakes,
                }) => {
                    let mut page = prepare_page(cx, fingerprint, from, page, stakes).await?;
                    stake_ahead(cx, &mut page).await?;
                    Ok(Some(Ok(page)))
                }
            }
        };
        let (prepared, following) =
            tokio::join!(prepare, read_following(cx, fingerprint, self.source, after));
        self.following = following;
        match prepared {
            Ok(next) => {
                self.next = next;
                Ok(())
            }
            Err(failure) => {
                self.next = None;
                Err(failure)
            }
        }
    }

    /// The page to send next, once prepared.
    pub fn next_mut(&mut self) -> Option<&mut PreparedPage> {
        self.next.as_mut().and_then(|page| page.as_mut().ok())
    }

    /// A run that stops between pages gives back the stake of the next page:
    /// it was never sent.
    pub async fn give_back_stake(&mut self, cx: &RunContext<'_>) -> Result<(), RunFailure> {
        if let Some(PreparedPage {
            staked: Some(BatchStake::Staked { batch, .. }),
            ..
        }) = self.next_mut()
        {
            ledger::forget_batch(&cx.env.store, *batch).await?;
        }
        Ok(())
    }
}

/// Stakes a prepared page's bulk call, fenced, before its turn comes (see
/// the module's comment). A page sent otherwise is staked as it goes, and
/// so is one that watches another run's open stakes: whether those
/// completed meanwhile is asked as late as it can be, just before the call.
async fn stake_ahead(cx: &RunContext<'_>, page: &mut PreparedPage) -> Result<(), RunFailure> {
    let request = cx
        .bulk()
        .then(|| page.whole_stake(cx))
        .flatten()
        .filter(|stake| stake.watched.is_empty());
    let Some(request) = request else {
        return Ok(());
    };
    let run = cx.run;
    let stake = ledger::stake_batch(
        &cx.env.store,
        &run.sync_id,
        run.id,
        cx.lease.fence,
        &request,
    )
    .await?;
    page.staked = Some(stake);
    Ok(())
}

/// Where the page after `page` starts; `None` after the last page. A page
/// that names no next cursor ends the run too: reading from where it was read
/// would only give the same page again (while it is still being sent).
fn following_cursor(page: &Page) -> Option<Value> {
    if page.last || page.records.is_empty() {
        return None;
    }
    page.next_cursor.clone()
}

/// Reads the page at `at` (see `following_cursor`) and starts the lookup of
/// its stakes in the ledger at the same time; nothing when there is none.
async fn read_following(
    cx: &RunContext<'_>,
    fingerprint: &str,
    source: &mut AnySource,
    at: Option<Value>,
) -> Option<ReadPage> {
    let at = at?;
    let stakes = (!cx.definition.source.keys_by_identity()).then(|| {
        let page_id = PageKeys::new(&cx.run.sync_id, fingerprint, Some(&at)).page_id();
        StakesLookup::start(cx, page_id)
    });
    let page = source.fetch_page(Some(&at)).await;
    Some(ReadPage { page, stakes })
}
