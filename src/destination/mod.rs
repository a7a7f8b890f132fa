//! Destinations: where records go. The set of kinds is closed: one
//! `DestinationConfig` variant per kind, matched exhaustively.

pub mod brevo;
mod config;
pub mod webhook;

pub use config::DestinationConfig;
