//! A page made ready to send while the page before it is still out: every
//! record keyed, the keys looked up in the ledger (one query), replayed
//! records counted and dropped, the rest mapped. Nothing here writes, so a
//! page prepared ahead is simply dropped if the page before does not end clean.

use serde_json::Value;
use tracing::warn;

use super::delivery_key::{DeliveryKey, PageKeys};
use super::field_guard::FieldCounts;
use super::read_ahead::StakesLookup;
use super::run::RunContext;
use super::run_failure::RunFailure;
use crate::destination::Outbound;
use crate::mapping::map_record;
use crate::source::{Page, SourceError, UNDECODABLE_RECORD};
use crate::store::ledger::{self, BatchStake, KeyState};
use crate::store::rejected::{ATTEMPT_BUDGET_EXHAUSTED, Rejection};
use crate::store::runs;

/// Records keyed or mapped between two yields. A page is prepared in the
/// same task as the previous page's call (`tokio::join!`): keyed in one go,
/// a thousand records held up the answers of that call's statements and
/// request by a millisecond or more, on the page's critical path.
const RECORDS_PER_YIELD: usize = 100;

/// Lets the other half of the run's task go on every `RECORDS_PER_YIELD`
/// records (diff mode's pages too, `diff_page`).
pub(super) async fn now_and_then(done: usize) {
    if done % RECORDS_PER_YIELD == RECORDS_PER_YIELD - 1 {
        tokio::task::yield_now().await;
    }
}

/// One record on its way: its key, where it stands, and its mapped contact.
pub(super) struct Pending {
    pub key: DeliveryKey,
    pub outbound: Outbound,
    /// Found `pending` from an earlier run: its outcome is unknown.
    pub suspect: bool,
    /// Attempts already spent on the key.
    pub spent: i32,
    /// The key has a `deliveries` row of its own (a per-record stake).
    pub per_key: bool,
    /// Where the record is in its source, named if it is rejected.
    pub source_key: Option<crate::source::SourceKey>,
}

impl Pending {
    /// A key whose earlier sends died with their process, with one attempt
    /// left in its budget of `budget`: sent alone.
    pub fn last_chance(&self, budget: i32) -> bool {
        self.suspect && self.spent >= 1 && self.spent + 1 >= budget
    }
}

/// A page read, keyed, mapped and looked up in the ledger; nothing written.
pub(super) struct PreparedPage {
    pub records: usize,
    /// The cursor the page was read from (`None`: the source's start).
    pub cursor: Option<Value>,
    pub next_cursor: Option<Value>,
    /// The page's identity in the ledger.
    pub page_id: [u8; 32],
    /// The page's open batch-only stakes (bulk calls left unanswered), with
    /// their keys packed.
    pub open_batches: Vec<(i64, Vec<u8>)>,
    /// Its bulk call, staked while the previous page's call was in flight.
    pub staked: Option<BatchStake>,
    /// Records the ledger already holds as `completed`.
    pub replayed: i64,
    /// Refused before any call: unmappable, or out of attempts.
    pub rejections: Vec<Rejection>,
    /// How many of `rejections` ran out of attempts.
    pub exhausted: usize,
    /// Left `pending` by an earlier run: outcome unknown.
    pub suspects: Vec<Pending>,
    pub fresh: Vec<Pending>,
    /// Diff mode: what each record sent is kept as once its page is clean.
    pub states: Vec<DiffState>,
    /// Mirror mode: every record of the page (identity, address), marked as
    /// seen by this run once the page is clean.
    pub seen: Vec<([u8; 32], String)>,
    /// Diff mode: the page's digest (`diff_page`), kept once it is clean.
    pub page_digest: Option<[u8; 32]>,
    /// Which mapped fields held a value (the vanished-field guard's count).
    pub fields: FieldCounts,
}

/// Diff mode: a record's key, and who it is and what it is now (and, in
/// mirror mode, its address).
pub(super) struct DiffState {
    pub key: DeliveryKey,
    pub identity: [u8; 32],
    pub content: [u8; 32],
    pub email: Option<String>,
}

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

/// What every prepared page starts with, whichever way it was keyed.
pub(super) struct PageHead {
    pub records: usize,
    pub cursor: Option<Value>,
    pub next_cursor: Option<Value>,
    pub page_id: [u8; 32],
    pub open_batches: Vec<(i64, Vec<u8>)>,
}

/// A page's mapped records sorted by their keys' ledger states.
pub(super) struct SortedRecords {
    pub replayed: i64,
    pub rejections: Vec<Rejection>,
    pub exhausted: usize,
    pub suspects: Vec<Pending>,
    pub fresh: Vec<Pending>,
    /// Diff mode: what each record sent will be kept as once delivered.
    pub states: Vec<DiffState>,
    /// Mirror mode: every record read (identity, address).
    pub seen: Vec<([u8; 32], String)>,
    /// Diff mode: the page's digest, kept once the page is clean.
    pub page_digest: Option<[u8; 32]>,
    pub fields: FieldCounts,
}

impl SortedRecords {
    pub fn new(rejections: Vec<Rejection>) -> Self {
        Self {
            replayed: 0,
            rejections,
            exhausted: 0,
            suspects: Vec::new(),
            fresh: Vec::new(),
            states: Vec::new(),
            seen: Vec::new(),
            page_digest: None,
            fields: FieldCounts::default(),
        }
    }

    /// Files a record whose key is not completed: out of attempts
    /// (quarantined), left pending by an earlier run (a suspect), or fresh.
    pub fn add(
        &mut self,
        key: DeliveryKey,
        state: KeyState,
        contact: crate::destination::Contact,
        source_key: Option<crate::source::SourceKey>,
        record_attempts: i32,
    ) {
        let (spent, per_key) = match state {
            KeyState::Pending { attempts, per_key } => (attempts, per_key),
            _ => (0, false),
        };
        if spent >= record_attempts {
            self.exhausted += 1;
            self.rejections.push(Rejection {
                key: Some(key.0.to_vec()),
                email: Some(contact.email),
                source_key,
                code: ATTEMPT_BUDGET_EXHAUSTED.into(),
                message: format!(
                    "its write died with the process {spent} times (no run saw an answer); \
                     quarantined: `syncward sync retry-rejected` puts it back"
                ),
            });
            return;
        }
        let item = Pending {
            key,
            outbound: Outbound {
                key: key.0,
                contact,
            },
            suspect: state != KeyState::Absent,
            spent,
            per_key,
            source_key,
        };
        if item.suspect {
            self.suspects.push(item)
        } else {
            self.fresh.push(item)
        }
    }

    pub fn into_page(self, head: PageHead) -> PreparedPage {
        PreparedPage {
            records: head.records,
            cursor: head.cursor,
            next_cursor: head.next_cursor,
            page_id: head.page_id,
            open_batches: head.open_batches,
            staked: None,
            replayed: self.replayed,
            rejections: self.rejections,
            exhausted: self.exhausted,
            suspects: self.suspects,
            fresh: self.fresh,
            states: self.states,
            seen: self.seen,
            page_digest: self.page_digest,
            fields: self.fields,
        }
    }
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

/// The rejection of a record the source could not decode.
pub(super) fn undecodable(key: Option<Vec<u8>>, why: String) -> Rejection {
    Rejection {
        key,
        email: None,
        source_key: None,
        code: UNDECODABLE_RECORD.into(),
        message: why,
    }
}
