//! Destination `brevo`: contacts, upserted one by one or imported per page.

mod attributes;
mod client;
mod config;

pub use attributes::missing_attributes;
pub use client::{BrevoDestination, IMPORT_BODY_LIMIT};
pub use config::{BrevoDestinationConfig, BrevoMode};
