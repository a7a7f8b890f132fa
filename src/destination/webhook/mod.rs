//! Destination `webhook`: records POSTed as JSON to an HTTP endpoint.

mod client;
mod config;

pub use client::{WebhookDestination, answer_words};
pub use config::WebhookDestinationConfig;
