//! Destination `webhook`: records POSTed as JSON to an HTTP endpoint.

mod client;
mod config;

pub use client::{SIGNATURE_HEADER, WebhookDestination, sign};
pub use config::WebhookDestinationConfig;
