//! Destinations: where records go. The set of kinds is closed: one
//! `DestinationConfig` variant per kind, matched exhaustively.

mod any;
pub mod brevo;
mod config;
mod delivery;
pub mod http_client;
mod record;
mod retry;
pub mod webhook;

pub use any::AnyDestination;
pub use config::DestinationConfig;
pub use delivery::Destination;
pub use http_client::http_client;
pub use record::{
    Consent, Contact, DestinationError, FollowUp, IMPORT_UNKNOWN, ImportOutcome, Outbound,
    RecordOutcome,
};
pub use retry::RetryPolicy;
