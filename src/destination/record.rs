//! What destinations receive and answer, per record.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::states::ImportStatus;

/// A record mapped for a destination.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Contact {
    pub email: String,
    pub attributes: Map<String, Value>,
    /// Marketing consent, when the mapping has a `consent` rule.
    #[serde(skip_serializing_if = "Consent::is_not_asked")]
    pub consent: Consent,
}

/// The person's marketing consent, by the mapping's `consent` rule: three
/// states (docs/contract.md §1.10), and none without a rule. Destinations that add
/// contacts to marketing lists must honour it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Consent {
    /// The mapping has no `consent` rule: the sync's lists apply to everyone.
    #[default]
    NotAsked,
    /// The consent field holds one of the rule's `subscribed` values: on the
    /// sync's lists.
    Subscribed,
    /// One of the rule's `unsubscribed` values, an explicit opt-out: on no
    /// list, and blocklisted for e-mail where the destination can.
    Unsubscribed,
    /// Anything else (not subscribed, pending, another value, null, absent):
    /// on no list, its blocklist status left as it is.
    Unknown,
}

impl Consent {
    pub fn is_not_asked(&self) -> bool {
        *self == Consent::NotAsked
    }

    /// Whether the contact may be put on marketing lists.
    pub fn allows_lists(&self) -> bool {
        matches!(self, Consent::NotAsked | Consent::Subscribed)
    }

    /// Whether the person opted out (blocklisted where the destination can).
    pub fn opted_out(&self) -> bool {
        *self == Consent::Unsubscribed
    }
}

/// One record to deliver, with its delivery key for idempotency headers.
#[derive(Debug, Clone)]
pub struct Outbound {
    pub key: [u8; 32],
    pub contact: Contact,
}

impl Outbound {
    /// The delivery key as idempotency headers carry it. Written out only by
    /// the destinations that send one (not for each record of a page).
    pub fn key_hex(&self) -> String {
        hex::encode(self.key)
    }
}

/// The destination's answer for one record.
#[derive(Debug, Clone, PartialEq)]
pub enum RecordOutcome {
    /// Written; the value is kept in the ledger and replayed instead of a call.
    Delivered(Value),
    /// Refused for good (a 400 for this record): kept with code and message.
    Rejected { code: String, message: String },
    /// The call carrying it failed as a whole, after the in-run retries: the
    /// run observed the failure, so the record's attempt is given back.
    Failed(DestinationError),
}

/// A write the destination finishes after it answered (a Brevo import
/// queues its rows): the id it is checked by later. The run records it; the
/// sweeper asks the destination how it ended (`Destination::check_follow_up`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowUp(pub i64);

/// How a follow-up (an import) ended.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportOutcome {
    /// Completed, failed, cancelled, or unknown (its end cannot be learned).
    pub status: ImportStatus,
    /// What the destination counted (Brevo's `info.import`: imported,
    /// updated, invalid_emails, duplicates).
    pub counts: Option<Value>,
    pub error: Option<String>,
}

/// One page of the destination's list of its follow-ups, newest first
/// (Brevo: `GET /processes`): each listed id with how it ended (`None`:
/// still running), and whether older ones follow.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FollowUpPage {
    pub listed: Vec<(i64, Option<ImportOutcome>)>,
    pub more: bool,
}

/// Why a call failed as a whole, classified for the run loop.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DestinationError {
    /// The destination refused the credentials (401/403): final.
    #[error("{0}")]
    Unauthorized(String),
    /// 5xx, refused connections: still failing after the in-run retries.
    /// Every try was answered or never reached the destination: nothing was
    /// written.
    #[error("{0}")]
    Unavailable(String),
    /// Still failing after the in-run retries, and at least one try went
    /// unanswered after the request was sent (a timeout, a reset, a success
    /// status with an unreadable body): the write may have happened.
    #[error("{0}")]
    Unanswered(String),
    /// The endpoint is gone for good (HTTP 410): the sync is paused until
    /// its owner points it elsewhere.
    #[error("{0}")]
    Gone(String),
    /// 429 for longer than the run waits.
    #[error("{0}")]
    RateLimited(String),
    /// The settings cannot work (missing secret, a URL that answers 404).
    #[error("{0}")]
    InvalidConfig(String),
}

impl DestinationError {
    /// Whether the failed call may have written its records: then their keys
    /// stay `pending` and are re-sent (as re-sends) by the next run.
    pub fn maybe_written(&self) -> bool {
        matches!(self, DestinationError::Unanswered(_))
    }
}

/// The shared HTTP client cannot be built: no call can be made with these
/// settings on this machine.
impl From<crate::outbound::ClientError> for DestinationError {
    fn from(e: crate::outbound::ClientError) -> Self {
        DestinationError::InvalidConfig(e.to_string())
    }
}
