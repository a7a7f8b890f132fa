//! Source `shopify`: a shop's customers through the Admin GraphQL API, paged by
//! Shopify's opaque cursors, paced by its query-cost bucket.

mod bulk;
mod bulk_read;
mod client;
mod config;

pub use client::ShopifySource;
pub use config::ShopifySourceConfig;
