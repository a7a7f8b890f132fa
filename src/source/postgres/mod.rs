//! Source `postgres`: rows of the operator's query, paged by a cursor column.

mod client;
mod columns;
mod config;
mod horizon;
mod options;
mod pools;

pub use client::PostgresSource;
pub use config::PostgresSourceConfig;
pub use options::source_options;
pub use pools::PostgresSourcePools;
