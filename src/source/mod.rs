//! Sources: where records come from. The set of kinds is closed: one
//! `SourceConfig` variant per kind, matched exhaustively.

mod any;
mod config;
pub mod http;
mod overlap;
mod page;
pub mod postgres;
mod retry;
pub mod shopify;

pub use any::{AnySource, OutboundTarget, SourceConnections};
pub use config::{SourceConfig, SourceKey, SyncMode};
pub use page::{Page, PageRecords, Records, Source, SourceError, UNDECODABLE_RECORD};
