//! Destination `brevo`: contacts, upserted one by one or imported per page.

mod config;

pub use config::{BrevoDestinationConfig, BrevoMode};
