//! `AnySource`: the configured source, opened; dispatches to each kind.

use serde_json::Value;

use super::SourceConfig;
use super::http::HttpSource;
use super::page::{Page, Source, SourceError};
use super::postgres::{PostgresSource, PostgresSourcePools};
use super::shopify::ShopifySource;

#[derive(Debug)]
pub enum AnySource {
    Postgres(PostgresSource),
    Shopify(ShopifySource),
    Http(HttpSource),
}

impl AnySource {
    /// Resolves secrets from the environment and prepares the client.
    /// Postgres sources take their connections from `pools`, shared by runs.
    pub fn open(config: &SourceConfig, pools: &PostgresSourcePools) -> Result<Self, SourceError> {
        match config {
            SourceConfig::Postgres(c) => PostgresSource::open(c, pools).map(AnySource::Postgres),
            SourceConfig::Shopify(c) => ShopifySource::open(c).map(AnySource::Shopify),
            SourceConfig::Http(c) => HttpSource::open(c).map(AnySource::Http),
        }
    }
}

impl Source for AnySource {
    fn fingerprint(&self) -> String {
        match self {
            AnySource::Postgres(s) => s.fingerprint(),
            AnySource::Shopify(s) => s.fingerprint(),
            AnySource::Http(s) => s.fingerprint(),
        }
    }

    async fn fetch_page(&mut self, cursor: Option<&Value>) -> Result<Page, SourceError> {
        match self {
            AnySource::Postgres(s) => s.fetch_page(cursor).await,
            AnySource::Shopify(s) => s.fetch_page(cursor).await,
            AnySource::Http(s) => s.fetch_page(cursor).await,
        }
    }
}
