//! `AnySource`: the configured source, opened; dispatches to each kind. And
//! `SourceConnections`: what sources keep open across runs, held by the run's
//! environment without naming a kind. The one file that names every source.

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::SourceConfig;
use super::http::HttpSource;
use super::page::{Page, Source, SourceError};
use super::postgres::{PostgresSource, PostgresSourcePools};
use super::shopify::ShopifySource;
use crate::connector_config::WorkspaceSecrets;

/// Connections sources share across the runs of a process (today the
/// Postgres source's pools and column plans); cheap to clone, and every
/// clone shares them. Opened lazily, as runs ask.
#[derive(Debug, Clone, Default)]
pub struct SourceConnections {
    postgres: PostgresSourcePools,
}

#[derive(Debug)]
pub enum AnySource {
    Postgres(PostgresSource),
    Shopify(ShopifySource),
    Http(HttpSource),
}

impl AnySource {
    /// Resolves secrets from the workspace's and prepares the client. A
    /// source that waits on its service (a Shopify export) stops waiting
    /// when `stop` is cancelled.
    /// Sources that keep connections take them from `connections`, shared by
    /// runs.
    pub fn open(
        config: &SourceConfig,
        connections: &SourceConnections,
        secrets: &WorkspaceSecrets,
        stop: &CancellationToken,
    ) -> Result<Self, SourceError> {
        match config {
            SourceConfig::Postgres(c) => {
                PostgresSource::open(c, &connections.postgres, secrets).map(AnySource::Postgres)
            }
            SourceConfig::Shopify(c) => {
                ShopifySource::open(c, secrets, stop).map(AnySource::Shopify)
            }
            SourceConfig::Http(c) => HttpSource::open(c, secrets).map(AnySource::Http),
        }
    }
}

impl AnySource {
    /// The fields every record will have, where the kind knows them before
    /// reading one (a Postgres query's columns); `None` where only records
    /// tell (Shopify's and http sources' JSON). `sync apply` checks the
    /// cursor column and the mapping against them.
    pub async fn fields(&mut self) -> Result<Option<Vec<String>>, SourceError> {
        match self {
            AnySource::Postgres(s) => s.column_names().await.map(Some),
            AnySource::Shopify(_) | AnySource::Http(_) => Ok(None),
        }
    }
}

impl AnySource {
    /// The records whose `field` (the mapping's e-mail field) holds
    /// `address`, ignoring case, as one last page with no cursor
    /// (`sync run --only`); a source with no search refuses
    /// (`SourceConfig::reads_by_address`).
    pub async fn fetch_by_address(
        &mut self,
        field: &str,
        address: &str,
    ) -> Result<Page, SourceError> {
        match self {
            AnySource::Postgres(s) => s.fetch_by_address(field, address).await,
            AnySource::Shopify(s) => s.fetch_by_address(address).await,
            AnySource::Http(_) => Err(SourceError::InvalidConfig(
                "an http source cannot read one record by its address".into(),
            )),
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

    fn rewind(&self, saved: Option<Value>) -> Option<Value> {
        match self {
            AnySource::Postgres(s) => s.rewind(saved),
            AnySource::Shopify(s) => s.rewind(saved),
            AnySource::Http(s) => s.rewind(saved),
        }
    }

    async fn fetch_page(&mut self, cursor: Option<&Value>) -> Result<Page, SourceError> {
        let started = std::time::Instant::now();
        let (kind, page) = match self {
            AnySource::Postgres(s) => ("postgres", s.fetch_page(cursor).await),
            AnySource::Shopify(s) => ("shopify", s.fetch_page(cursor).await),
            AnySource::Http(s) => ("http", s.fetch_page(cursor).await),
        };
        metrics::histogram!(
            "syncward_source_request_seconds", "kind" => kind, "status" => page_status(&page)
        )
        .record(started.elapsed().as_secs_f64());
        page
    }
}

/// How a page read ended, as a metric label.
fn page_status(page: &Result<Page, SourceError>) -> &'static str {
    match page {
        Ok(_) => "ok",
        Err(SourceError::Unreachable(_)) => "unreachable",
        Err(SourceError::Unauthorized(_)) => "unauthorized",
        Err(SourceError::Query(_)) => "query_failed",
        Err(SourceError::InvalidConfig(_)) => "invalid_config",
        Err(SourceError::AccountFrozen(_) | SourceError::AccountLocked(_)) => "account_blocked",
        Err(SourceError::Redacted(_)) => "redacted",
        Err(SourceError::TransactionsHidden(_)) => "transactions_hidden",
        Err(SourceError::Undecodable(_)) => "undecodable",
    }
}

/// Where a source connects, for `sync apply`'s outbound check.
#[derive(Debug)]
pub enum OutboundTarget {
    /// An HTTP source's URL, and the field that sets it.
    Url(&'static str, url::Url),
    /// A database's host and port, and the field that names its secret.
    Host(&'static str, String, u16),
}

impl SourceConfig {
    /// Where this source connects: an HTTP URL, or the database's host read
    /// from the workspace's secret as a run reads it (nothing from this
    /// process's PG* variables). `None` when it cannot be known here (the
    /// secret missing or unreadable: checked before) or is a local socket.
    pub fn outbound_target(&self, secrets: &WorkspaceSecrets) -> Option<OutboundTarget> {
        match self {
            SourceConfig::Http(c) => Some(OutboundTarget::Url("source.url", c.url.clone())),
            SourceConfig::Shopify(c) => url::Url::parse(&c.endpoint())
                .ok()
                .map(|url| OutboundTarget::Url("source.base_url", url)),
            SourceConfig::Postgres(c) => {
                let url = secrets.lookup(&c.url_env).unwrap_or_default();
                let options = super::postgres::source_options(&url).ok()?;
                let host = options.get_host().to_string();
                (!host.starts_with('/'))
                    .then(|| OutboundTarget::Host("source.url_env", host, options.get_port()))
            }
        }
    }
}
