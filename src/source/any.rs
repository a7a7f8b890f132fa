//! `AnySource`: the configured source, opened; dispatches to each kind.

use serde_json::Value;

use super::SourceConfig;
use super::page::{Page, Source, SourceError};
use super::postgres::{PostgresSource, PostgresSourcePools};

#[derive(Debug)]
pub enum AnySource {
    Postgres(PostgresSource),
}

impl AnySource {
    /// Resolves secrets from the environment and prepares the client.
    /// Postgres sources take their connections from `pools`, shared by runs.
    pub fn open(config: &SourceConfig, pools: &PostgresSourcePools) -> Result<Self, SourceError> {
        match config {
            SourceConfig::Postgres(c) => PostgresSource::open(c, pools).map(AnySource::Postgres),
        }
    }
}

impl Source for AnySource {
    fn fingerprint(&self) -> String {
        match self {
            AnySource::Postgres(s) => s.fingerprint(),
        }
    }

    async fn fetch_page(&mut self, cursor: Option<&Value>) -> Result<Page, SourceError> {
        match self {
            AnySource::Postgres(s) => s.fetch_page(cursor).await,
        }
    }
}
