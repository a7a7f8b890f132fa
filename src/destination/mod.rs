//! Destinations: where records go. The set of kinds is closed: one
//! `DestinationConfig` variant per kind, matched exhaustively.

mod any;
pub mod brevo;
mod config;
mod delivery;
mod record;
mod retry;
pub mod webhook;

/// The policy `AnyDestination::open` takes.
pub use crate::outbound::RetryPolicy;
pub use any::{AnyDestination, KeyCheck};
pub use config::DestinationConfig;
pub use delivery::{Destination, Go};
pub use record::{
    Consent, Contact, DestinationError, FollowUp, FollowUpPage, ImportOutcome, Outbound,
    RecordOutcome,
};
pub use retry::DESTINATION_RETRY;
