//! Destination `webhook`: records POSTed as JSON to an HTTP endpoint.

mod config;

pub use config::WebhookDestinationConfig;
