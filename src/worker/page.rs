//! A page on its way through a run, as types: what every prepared page
//! starts with (`PageHead`), its records sorted by their keys' ledger states
//! (`SortedRecords`), each record still to send (`Pending`), and the page
//! they make (`PreparedPage`). Built by `prepared_page` and `diff_page`,
//! staked by `stakes`, sent by `send_page`.

use serde_json::Value;

use super::delivery_key::DeliveryKey;
use super::field_guard::FieldCounts;
use crate::destination::Outbound;
use crate::source::UNDECODABLE_RECORD;
use crate::store::ledger::{BatchStake, KeyState};
use crate::store::rejected::{ATTEMPT_BUDGET_EXHAUSTED, Rejection};

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
    pub head: PageHead,
    /// Its bulk call, staked while the previous page's call was in flight.
    pub staked: Option<BatchStake>,
    pub sorted: SortedRecords,
}

/// Diff mode: a record's key, and who it is and what it is now (and, in
/// mirror mode, its address).
pub(super) struct DiffState {
    pub key: DeliveryKey,
    pub identity: [u8; 32],
    pub content: [u8; 32],
    pub email: Option<String>,
}

/// What every prepared page starts with, whichever way it was keyed.
pub(super) struct PageHead {
    pub records: usize,
    /// The cursor the page was read from (`None`: the source's start).
    pub cursor: Option<Value>,
    pub next_cursor: Option<Value>,
    /// The page's identity in the ledger.
    pub page_id: [u8; 32],
    /// The page's open batch-only stakes (bulk calls left unanswered), with
    /// their keys packed.
    pub open_batches: Vec<(i64, Vec<u8>)>,
}

/// A page's mapped records sorted by their keys' ledger states.
pub(super) struct SortedRecords {
    /// Records the ledger already holds as `completed`.
    pub replayed: i64,
    /// Refused before any call: unmappable, or out of attempts.
    pub rejections: Vec<Rejection>,
    /// How many of `rejections` ran out of attempts.
    pub exhausted: usize,
    /// Left `pending` by an earlier run: outcome unknown.
    pub suspects: Vec<Pending>,
    pub fresh: Vec<Pending>,
    /// Diff mode: what each record sent will be kept as once its page is
    /// clean.
    pub states: Vec<DiffState>,
    /// Mirror mode: every record of the page (identity, address), marked as
    /// seen by this run once the page is clean.
    pub seen: Vec<([u8; 32], String)>,
    /// Diff mode: the page's digest (`diff_page`), kept once it is clean.
    pub page_digest: Option<[u8; 32]>,
    /// Which mapped fields held a value (the vanished-field guard's count).
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
            head,
            staked: None,
            sorted: self,
        }
    }
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
