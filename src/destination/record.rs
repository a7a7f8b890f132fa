//! What destinations receive and answer, per record.

use serde::Serialize;
use serde_json::{Map, Value};

/// A record mapped for a destination.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Contact {
    pub email: String,
    pub attributes: Map<String, Value>,
}

/// One record to deliver, with its delivery key (hex) for idempotency headers.
#[derive(Debug, Clone)]
pub struct Outbound {
    pub key_hex: String,
    pub contact: Contact,
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
