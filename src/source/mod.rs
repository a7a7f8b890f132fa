//! Sources: where records come from. The set of kinds is closed: one
//! `SourceConfig` variant per kind, matched exhaustively.

mod config;
pub mod postgres;

pub use config::SourceConfig;
