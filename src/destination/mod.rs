//! Destinations: where records go. The set of kinds is closed: one
//! `DestinationConfig` variant per kind, matched exhaustively.

mod answer_words;
mod any;
pub mod brevo;
mod config;
mod delivery;
mod erasure;
mod mapping_check;
mod record;
mod retry;
pub mod webhook;

/// The policy `AnyDestination::open` takes.
pub use crate::outbound::RetryPolicy;
pub use answer_words::{ImportReport, answer_words};
pub use any::{AnyDestination, KeyCheck};
pub use config::DestinationConfig;
pub use delivery::{Destination, Go};
pub use erasure::{ErasingAccount, Erasure, ErasureOutcome, NotDeletable};
pub use mapping_check::MappingCheck;
pub use record::{
    Consent, Contact, DestinationError, FollowUp, FollowUpPage, ImportOutcome, Outbound,
    RecordOutcome,
};
pub use retry::DESTINATION_RETRY;
