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
}

/// Why a call failed as a whole, classified for the run loop.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DestinationError {
    /// The destination refused the credentials (401/403): final.
    #[error("{0}")]
    Unauthorized(String),
    /// 5xx, timeouts, garbage: still failing after the in-run retries.
    #[error("{0}")]
    Unavailable(String),
    /// 429 for longer than the run waits.
    #[error("{0}")]
    RateLimited(String),
    /// The settings cannot work (missing secret, a URL that answers 404).
    #[error("{0}")]
    InvalidConfig(String),
}
