//! Source `postgres`: rows of the operator's query, paged by a cursor column.

mod config;

pub use config::PostgresSourceConfig;
