//! Destination `webhook`: records POSTed as JSON to an HTTP endpoint.

mod client;
mod config;
mod signature;

pub use client::WebhookDestination;
pub use config::WebhookDestinationConfig;
pub use signature::{ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, WebhookSigner};
