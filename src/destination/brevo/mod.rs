//! Destination `brevo`: contacts, upserted one by one or imported per page.

mod answer_words;
mod attribute_types;
mod attributes;
mod client;
mod config;

pub use answer_words::answer_words;
pub use attribute_types::AttributeType;
pub use attributes::{AccountCheck, account_check, key_check, unchecked_words};
pub use client::{BrevoDestination, Deleted, IMPORT_BODY_LIMIT};
pub use config::{BrevoDestinationConfig, BrevoMode};
