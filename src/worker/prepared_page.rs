//! A page made ready to send while the page before it is still out: every
//! record keyed, the keys looked up in the ledger (one query), replayed
//! records counted and dropped, the rest mapped. Nothing here writes, so a
//! page prepared ahead is simply dropped if the page before does not end clean.

use serde_json::Value;
use tracing::warn;

use tokio_util::task::AbortOnDropHandle;

use super::delivery_key::PageKeys;
use super::page::{PageHead, PreparedPage, SortedRecords, now_and_then, undecodable};
use super::run_env::RunContext;
use super::run_failure::RunFailure;
use crate::mapping::map_record;
use crate::source::{Page, SourceError};
use crate::store::ledger::{self, KeyState, PageStakes};
use crate::store::rejected::Rejection;
use crate::store::runs;

/// Derives each record's key, looks the page's keys up in the ledger (one
/// query, unless the lookup of its stakes was started with the page's read:
/// `stakes`, awaited once the keys are known), and maps the
/// records to send. Reads only (but for the source's notices, added to the
/// run's timeline).
pub(super) async fn prepare_page(
    cx: &RunContext<'_>,
    fingerprint: &str,
    page_cursor: Option<&Value>,
    page: Page,
    stakes: Option<StakesLookup>,
) -> Result<PreparedPage, RunFailure> {
    let Page {
        records: mut page_records,
        next_cursor,
        notices,
        ..
    } = page;
    record_notices(cx, notices).await?;
    if cx.definition.source.keys_by_identity() {
        return super::diff_page::prepare_diff_page(
            cx,
            fingerprint,
            page_cursor,
            page_records,
            next_cursor,
        )
        .await;
    }
    let (env, run) = (cx.env, cx.run);
    let sync_id = run.sync_id.as_str();
    let records = page_records.len();
    let mut page_keys = PageKeys::new(sync_id, fingerprint, page_cursor);
    let page_id = page_keys.page_id();
    let mut rejections = Vec::new();
    // A row the source cannot decode has no canonical bytes, so no key: it
    // is rejected alone (without one), and the rest of the page goes on.
    let mut keys = Vec::with_capacity(records);
    for position in 0..records {
        match page_keys.key_of(&page_records, position) {
            Ok(key) => keys.push((position, key)),
            Err(SourceError::Undecodable(why)) => rejections.push(undecodable(None, why)),
            Err(e) => return Err(e.into()),
        }
        now_and_then(position).await;
    }
    let packed: Vec<[u8; 32]> = keys.iter().map(|(_, k)| k.0).collect();
    // Stakes read ahead serve only the page they were read for: another
    // page's would let its keys look unsent.
    let stakes = match stakes {
        Some(lookup) => lookup.finish().await,
        None => None,
    };
    let known = match stakes.transpose()? {
        Some(stakes) if stakes.page() == &page_id => {
            stakes.resolve(&env.store, sync_id, &packed).await?
        }
        _ => ledger::lookup_page(&env.store, sync_id, &page_id, &packed).await?,
    };
    let mut sorted = SortedRecords::new(rejections);
    for (position, key) in keys {
        now_and_then(position).await;
        let state = known.state(&key.0);
        // A replayed record is not even built, let alone mapped.
        if state == KeyState::Completed {
            sorted.replayed += 1;
            continue;
        }
        let record = match page_records.take(position) {
            Ok(record) => record,
            Err(SourceError::Undecodable(why)) => {
                sorted
                    .rejections
                    .push(undecodable(Some(key.0.to_vec()), why));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let source_key = cx.definition.source.record_key(&record);
        let contact = match map_record(&cx.definition.mapping, &record) {
            Ok(contact) => contact,
            Err(e) => {
                sorted.rejections.push(Rejection {
                    key: Some(key.0.to_vec()),
                    email: None,
                    source_key,
                    code: e.code().to_string(),
                    message: e.to_string(),
                });
                continue;
            }
        };
        sorted.fields.count(&cx.definition.mapping, &contact);
        sorted.add(key, state, contact, source_key, env.record_attempts);
    }
    Ok(sorted.into_page(PageHead {
        records,
        cursor: page_cursor.cloned(),
        next_cursor,
        page_id,
        open_batches: known.open_batches,
    }))
}

/// Adds the source's notices to the run's timeline.
async fn record_notices(cx: &RunContext<'_>, notices: Vec<String>) -> Result<(), RunFailure> {
    for notice in notices {
        warn!(notice = %notice, "Source notice");
        runs::add_run_event(
            &cx.env.store,
            cx.run.id,
            "source_notice",
            serde_json::json!({ "message": notice }),
        )
        .await?;
    }
    Ok(())
}

/// A page's stakes being read from the ledger on a task of their own, so the
/// round trip runs on while the run does other things; dropped, it is
/// aborted.
pub(super) struct StakesLookup(AbortOnDropHandle<sqlx::Result<PageStakes>>);

impl StakesLookup {
    pub fn start(cx: &RunContext<'_>, page_id: [u8; 32]) -> Self {
        let pool = cx.env.store.clone();
        let sync_id = cx.run.sync_id.clone();
        Self(AbortOnDropHandle::new(tokio::spawn(async move {
            ledger::page_stakes(&pool, &sync_id, &page_id).await
        })))
    }

    /// The stakes read; `None` if the task died (it panicked: the caller
    /// looks the page up itself).
    pub async fn finish(self) -> Option<sqlx::Result<PageStakes>> {
        self.0.await.ok()
    }
}
