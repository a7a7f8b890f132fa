//! The `Source` contract: read one page of records from a cursor.

use std::future::Future;

use serde_json::Value;

/// One page read from a source.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// Records as JSON objects, in the source's stable order.
    pub records: Vec<Value>,
    /// The cursor to read the next page from. `None` when the source cannot
    /// say (an empty page, the last page of a cursor API): the run then keeps
    /// the cursor this page was read from.
    pub next_cursor: Option<Value>,
    /// True when the source has nothing after this page.
    pub last: bool,
}

/// Why a page could not be read, classified for the run loop.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
    /// The source did not answer (network, refused connection, timeout).
    #[error("{0}")]
    Unreachable(String),
    /// The source refused the credentials.
    #[error("{0}")]
    Unauthorized(String),
    /// The source answered with an error about the query or the data.
    #[error("{0}")]
    Query(String),
    /// The sync's source settings cannot work (a missing secret, say).
    #[error("{0}")]
    InvalidConfig(String),
}

/// A source of records, read page by page from a cursor.
pub trait Source: Send {
    /// Identifies what the source reads (kind and query, not credentials), so
    /// delivery keys of different sources never meet.
    fn fingerprint(&self) -> String;

    /// The page after `cursor` (`None`: from the start).
    fn fetch_page(
        &mut self,
        cursor: Option<&Value>,
    ) -> impl Future<Output = Result<Page, SourceError>> + Send;
}
