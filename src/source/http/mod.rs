//! Source `http`: the operator's own paged JSON API, followed by a cursor
//! query parameter.

mod client;
mod config;
mod raw_page;

pub use client::HttpSource;
pub use config::HttpSourceConfig;
