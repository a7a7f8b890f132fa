//! The `Source` contract: read one page of records from a cursor.

use std::future::Future;

use serde_json::Value;

use crate::canonical_json::write_value;

/// One page read from a source.
#[derive(Debug, Default)]
pub struct Page {
    /// Records as JSON objects, in the source's stable order.
    pub records: Records,
    /// The cursor to read the next page from. `None` when the source cannot
    /// say (an empty page, the last page of a cursor API): the run then keeps
    /// the cursor this page was read from.
    pub next_cursor: Option<Value>,
    /// True when the source has nothing after this page.
    pub last: bool,
    /// Things the operator should know that do not stop the run (Shopify
    /// serving another API version than the pinned one): the run logs each
    /// as a warning and adds it to its timeline (`source_notice`).
    pub notices: Vec<String>,
    /// Set when the source held rows back because a transaction open this
    /// long may still commit rows before them (the Postgres source's commit
    /// horizon): the run reads them once it ends.
    pub held_back: Option<std::time::Duration>,
}

impl Page {
    /// An empty page after which the source has nothing.
    pub fn default_last() -> Self {
        Page {
            last: true,
            ..Page::default()
        }
    }
}

/// A page's records, however the source holds them. Most sources hand over
/// JSON values (`Vec<Value>`). A source may keep its own form instead and
/// build a record's value only when asked: the Postgres source keeps its rows,
/// which write their canonical JSON (what a delivery key hashes) straight from
/// the row's bytes, so a replayed record, whose key the ledger holds as
/// completed, is never built into a value.
pub trait PageRecords: Send + Sync + std::fmt::Debug {
    fn len(&self) -> usize;

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the canonical JSON (`crate::canonical_json`) of record `i` to
    /// `out`: the same bytes as for the value `take(i)` would give.
    fn write_canonical(&self, i: usize, out: &mut Vec<u8>) -> Result<(), SourceError>;

    /// Record `i` as a JSON value; asked for once per record.
    fn take(&mut self, i: usize) -> Result<Value, SourceError>;

    /// Every record as a JSON value.
    fn into_values(mut self: Box<Self>) -> Result<Vec<Value>, SourceError> {
        (0..self.len()).map(|i| self.take(i)).collect()
    }
}

impl PageRecords for Vec<Value> {
    fn len(&self) -> usize {
        Vec::len(self)
    }

    fn write_canonical(&self, i: usize, out: &mut Vec<u8>) -> Result<(), SourceError> {
        write_value(&self[i], out);
        Ok(())
    }

    /// Moves the value out, leaving `null` behind.
    fn take(&mut self, i: usize) -> Result<Value, SourceError> {
        Ok(std::mem::take(&mut self[i]))
    }

    fn into_values(self: Box<Self>) -> Result<Vec<Value>, SourceError> {
        Ok(*self)
    }
}

/// The records of one page: one box per page, whatever the source; each
/// record is then reached through it (no allocation per record).
#[derive(Debug)]
pub struct Records(Box<dyn PageRecords>);

impl Default for Records {
    fn default() -> Self {
        Records(Box::new(Vec::new()))
    }
}

impl<R: PageRecords + 'static> From<R> for Records {
    fn from(records: R) -> Self {
        Records(Box::new(records))
    }
}

impl Records {
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Appends the canonical JSON (`crate::canonical_json`) of record `i` to
    /// `out`: the same bytes as for the value `take(i)` would give.
    pub fn write_canonical(&self, i: usize, out: &mut Vec<u8>) -> Result<(), SourceError> {
        self.0.write_canonical(i, out)
    }

    /// Record `i` as a JSON value; taken once (a value is moved out, leaving
    /// `null` behind).
    pub fn take(&mut self, i: usize) -> Result<Value, SourceError> {
        self.0.take(i)
    }

    /// Every record as a JSON value.
    pub fn into_values(self) -> Result<Vec<Value>, SourceError> {
        self.0.into_values()
    }
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
    /// The source account is frozen for an unpaid balance (Shopify 402).
    #[error("{0}")]
    AccountFrozen(String),
    /// The source account is locked (Shopify 423).
    #[error("{0}")]
    AccountLocked(String),
    /// The source withheld the fields the sync needs from a whole page
    /// (Shopify's redacted protected customer data).
    #[error("{0}")]
    Redacted(String),
    /// The source does not show which of its transactions are open (a role
    /// without `pg_read_all_stats`, a standby), so the run cannot know how
    /// far it may read without passing a row still being committed.
    #[error("{0}")]
    TransactionsHidden(String),
    /// One record cannot be read (bytes that are not UTF-8, from a
    /// `SQL_ASCII` database): that record is rejected with
    /// `UNDECODABLE_RECORD`, and the rest of its page goes on. Where the
    /// whole page is at stake (the cursor's value), it is a query failure.
    #[error("{0}")]
    Undecodable(String),
}

/// The code a record the source cannot decode is rejected with.
pub const UNDECODABLE_RECORD: &str = "invalid_encoding";

/// A source of records, read page by page from a cursor.
pub trait Source: Send {
    /// Identifies what the source reads (kind and query, not credentials), so
    /// delivery keys of different sources never meet.
    fn fingerprint(&self) -> String;

    /// Where a run starts reading, given the cursor the last run saved. A
    /// source whose cursor is a time starts an overlap window earlier
    /// (`source::overlap`); the others start where the last run stopped.
    fn rewind(&self, saved: Option<Value>) -> Option<Value> {
        saved
    }

    /// The page after `cursor` (`None`: from the start).
    fn fetch_page(
        &mut self,
        cursor: Option<&Value>,
    ) -> impl Future<Output = Result<Page, SourceError>> + Send;
}
