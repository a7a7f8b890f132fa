//! Shopify bulk operations (docs/api-facts.md, "Shopify bulk operations"): a
//! first read, or a `sync resync`, of a store with `bulk_above` customers or
//! more asks Shopify to export them all (`bulkOperationRunQuery`), waits for
//! the operation by polling it, and streams the JSONL file it leaves, a page
//! of `bulk_page_size` lines at a time, resuming at a byte offset. The count
//! of lines is checked against the operation's own `objectCount`; then the
//! read goes on incrementally from the operation's start, less the overlap
//! window.
//!
//! What the GraphQL requests say and what their answers mean lives here; the
//! loop that drives them is `ShopifySource::bulk_page` (client.rs).

use std::time::Duration;

use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::outbound::describe_error;
use crate::source::page::SourceError;
use crate::source::retry::Answer;

/// The customer fields every read selects (a page's nodes and a bulk file's
/// lines have the same shape).
macro_rules! customer_fields {
    () => {
        "id firstName lastName updatedAt defaultEmailAddress { emailAddress marketingState marketingOptInLevel marketingUpdatedAt }"
    };
}
pub(super) use customer_fields;

/// How many customers match, counted up to `limit` (`customersCount`:
/// `precision` is `AT_LEAST` when the limit was reached).
pub(super) const COUNT: &str = "query SyncwardCustomersCount($query: String, $limit: Int) {
  customersCount(query: $query, limit: $limit) { count precision }
}";

const OPERATION_FIELDS: &str = "id status errorCode createdAt completedAt objectCount rootObjectCount url partialDataUrl query";

/// Starts an export; `userErrors.code` says why one was refused.
pub(super) const START: &str = "mutation SyncwardBulkCustomers($query: String!) {
  bulkOperationRunQuery(query: $query) { bulkOperation { id status createdAt } userErrors { field message code } }
}";

/// An operation by id (`node`, on every version from 2025-04 on).
pub(super) fn poll_query() -> String {
    format!(
        "query SyncwardBulkState($id: ID!) {{ node(id: $id) {{ ... on BulkOperation {{ {OPERATION_FIELDS} }} }} }}"
    )
}

/// The app's most recent query operation: a run that died waiting for its
/// export finds it again here instead of starting another.
pub(super) fn current_query() -> String {
    format!(
        "query SyncwardCurrentBulk {{ currentBulkOperation(type: QUERY) {{ {OPERATION_FIELDS} }} }}"
    )
}

/// The query a bulk operation runs: every customer matching the sync's
/// filter, the same fields as a page. No `first`/`after`: Shopify pages
/// itself.
pub(super) fn export_document(filter: Option<&str>) -> String {
    let filter = filter.map(str::trim).filter(|f| !f.is_empty());
    let args = match filter {
        // A GraphQL string literal inside the document.
        Some(f) => format!("(query: {})", Value::String(f.to_string())),
        None => String::new(),
    };
    format!(
        "{{ customers{args} {{ edges {{ node {{ {} }} }} }} }}",
        customer_fields!()
    )
}

/// A bulk operation as Shopify describes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BulkOperation {
    pub id: String,
    /// Shopify's `BulkOperationStatus`, as Shopify spells it (`CREATED`,
    /// `RUNNING`, `COMPLETED`, ...). The one status kept as text and
    /// compared as text in `src/` (here and in `bulk_read`): it is another
    /// service's vocabulary, and a status Shopify adds later must read as
    /// "not pending, not completed" rather than fail the whole answer.
    pub status: String,
    #[serde(default)]
    pub error_code: Option<String>,
    pub created_at: String,
    /// `UnsignedInt64`, which GraphQL sends as a string.
    #[serde(default)]
    pub object_count: Option<Value>,
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub partial_data_url: Option<String>,
    #[serde(default)]
    pub query: Option<String>,
}

impl BulkOperation {
    pub fn objects(&self) -> Option<u64> {
        match self.object_count.as_ref()? {
            Value::String(s) => s.parse().ok(),
            v => v.as_u64(),
        }
    }

    /// An operation Shopify no longer knows (`node` answered null).
    pub fn gone(id: &str) -> Self {
        BulkOperation {
            id: id.to_string(),
            status: "GONE".into(),
            error_code: None,
            created_at: String::new(),
            object_count: None,
            url: None,
            partial_data_url: None,
            query: None,
        }
    }

    pub fn pending(&self) -> bool {
        matches!(self.status.as_str(), "CREATED" | "RUNNING" | "CANCELING")
    }
}

/// What a start request came to.
#[derive(Debug)]
pub(super) enum Started {
    Operation(BulkOperation),
    /// Another query operation of this app runs on the shop (Shopify runs
    /// one at a time before API 2026-01, five from then) or the shop's limit
    /// is reached: wait and ask again.
    Busy(String),
}

pub(super) fn judge_count(body: Value) -> Answer<u64> {
    match body
        .pointer("/data/customersCount/count")
        .and_then(Value::as_u64)
    {
        Some(n) => Answer::Page(n, None),
        None => Answer::Retry("an answer without data.customersCount.count".into()),
    }
}

pub(super) fn judge_start(body: Value) -> Answer<Started> {
    let payload = body.pointer("/data/bulkOperationRunQuery");
    let errors = payload
        .and_then(|p| p.get("userErrors"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if let Some(first) = errors.first() {
        let message = first
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message")
            .to_string();
        return match first.get("code").and_then(Value::as_str) {
            Some("OPERATION_IN_PROGRESS" | "LIMIT_REACHED") => {
                Answer::Page(Started::Busy(message), None)
            }
            _ => Answer::Fail(SourceError::Query(format!(
                "Shopify refused the bulk export of customers: {message}"
            ))),
        };
    }
    match payload
        .and_then(|p| p.get("bulkOperation"))
        .filter(|op| !op.is_null())
        .map(|op| serde_json::from_value::<BulkOperation>(op.clone()))
    {
        Some(Ok(op)) => Answer::Page(Started::Operation(op), None),
        Some(Err(e)) => Answer::Retry(format!("an unreadable bulkOperation: {e}")),
        None => Answer::Retry("a bulk start answered without an operation".into()),
    }
}

/// An operation read by `node(id:)` or `currentBulkOperation`; `None` when
/// Shopify has none (an id it no longer knows).
pub(super) fn judge_operation(body: Value, pointer: &str) -> Answer<Option<BulkOperation>> {
    match body.pointer(pointer) {
        None | Some(Value::Null) => Answer::Page(None, None),
        Some(op) => match serde_json::from_value::<BulkOperation>(op.clone()) {
            Ok(op) => Answer::Page(Some(op), None),
            Err(e) => Answer::Retry(format!("an unreadable bulk operation: {e}")),
        },
    }
}

/// Where a bulk read stands, as its cursor holds it: the operation, its
/// start (where the incremental read goes on from), and how far into its
/// file the pages before got.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct BulkAt {
    pub id: String,
    pub created_at: String,
    pub line: u64,
    pub offset: u64,
}

impl BulkAt {
    pub fn from_cursor(cursor: &Value) -> Option<Self> {
        let b = cursor.get("bulk")?;
        Some(BulkAt {
            id: b.get("id")?.as_str()?.to_string(),
            created_at: b.get("created_at")?.as_str()?.to_string(),
            line: b.get("line")?.as_u64()?,
            offset: b.get("offset")?.as_u64()?,
        })
    }

    pub fn start_of(op: &BulkOperation) -> Self {
        BulkAt {
            id: op.id.clone(),
            created_at: op.created_at.clone(),
            line: 0,
            offset: 0,
        }
    }

    pub fn to_cursor(&self) -> Value {
        json!({ "bulk": {
            "id": self.id, "created_at": self.created_at, "line": self.line, "offset": self.offset,
        }})
    }
}

/// A bulk operation's file, streamed: lines are handed out as they arrive,
/// so memory holds one page of records and one chunk of the download,
/// whatever the file's size.
pub(super) struct JsonlFile {
    pub at: BulkAt,
    response: reqwest::Response,
    /// Bytes received and not yet handed out (from `at.offset`).
    buffer: Vec<u8>,
    /// The download has ended.
    ended: bool,
    /// Longest wait for the next chunk.
    chunk_timeout: Duration,
}

impl std::fmt::Debug for JsonlFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonlFile").field("at", &self.at).finish()
    }
}

/// Why a file could not be read on: worth asking again (`Retry`) or not.
pub(super) type FileError = Answer<()>;

impl JsonlFile {
    /// Opens the file at `at`'s offset: a `Range` request, or, where the
    /// server sends the whole file, the bytes before it are skipped. The
    /// URL is signed; it is sent no credential.
    pub async fn open(url: &str, at: BulkAt, chunk_timeout: Duration) -> Result<Self, FileError> {
        let parsed = url::Url::parse(url)
            .map_err(|e| Answer::Retry(format!("Shopify's bulk file URL does not parse: {e}")))?;
        crate::outbound::policy::check_connector_url(&parsed, "Shopify's bulk file URL")
            .map_err(|e| Answer::Fail(SourceError::InvalidConfig(e)))?;
        // The file lies on another host and port than the shop's API.
        let client = crate::outbound::http_client(&parsed)
            .map_err(|e| Answer::Fail(SourceError::InvalidConfig(e.to_string())))?;
        let mut request = client.get(parsed);
        if at.offset > 0 {
            request = request.header(reqwest::header::RANGE, format!("bytes={}-", at.offset));
        }
        let response = match tokio::time::timeout(chunk_timeout, request.send()).await {
            Err(_) => {
                return Err(Answer::Retry(
                    "Shopify's bulk file did not answer in time".into(),
                ));
            }
            Ok(Err(e)) => {
                if let Some(why) = crate::outbound::policy::refused(&e) {
                    return Err(Answer::Fail(SourceError::InvalidConfig(format!(
                        "Shopify's bulk file URL: {why}"
                    ))));
                }
                return Err(Answer::Retry(format!(
                    "cannot download Shopify's bulk file: {}",
                    describe_error(e)
                )));
            }
            Ok(Ok(r)) => r,
        };
        let mut skip = match response.status() {
            StatusCode::PARTIAL_CONTENT => 0,
            // The last run stopped at the file's end.
            StatusCode::RANGE_NOT_SATISFIABLE => {
                return Ok(JsonlFile {
                    at,
                    response,
                    buffer: Vec::new(),
                    ended: true,
                    chunk_timeout,
                });
            }
            StatusCode::OK => at.offset,
            status => {
                return Err(Answer::Retry(format!(
                    "Shopify's bulk file answered HTTP {status}"
                )));
            }
        };
        let mut file = JsonlFile {
            at,
            response,
            buffer: Vec::new(),
            ended: false,
            chunk_timeout,
        };
        // A server that ignored the range: read past what was read before.
        while skip > 0 {
            let Some(chunk) = file.chunk().await? else {
                return Err(Answer::Retry(
                    "Shopify's bulk file ended before where the last run stopped".into(),
                ));
            };
            let n = (skip as usize).min(chunk.len());
            file.buffer.extend_from_slice(&chunk[n..]);
            skip -= n as u64;
        }
        Ok(file)
    }

    async fn chunk(&mut self) -> Result<Option<bytes::Bytes>, FileError> {
        if self.ended {
            return Ok(None);
        }
        match tokio::time::timeout(self.chunk_timeout, self.response.chunk()).await {
            Err(_) => Err(Answer::Retry("Shopify's bulk file stalled".into())),
            Ok(Err(e)) => Err(Answer::Retry(format!(
                "Shopify's bulk file was cut off: {}",
                describe_error(e)
            ))),
            Ok(Ok(None)) => {
                self.ended = true;
                Ok(None)
            }
            Ok(Ok(Some(chunk))) => Ok(Some(chunk)),
        }
    }

    /// Reads until the buffer holds a whole line after `from` or the file
    /// has ended.
    async fn fill_line(&mut self, from: usize) -> Result<(), FileError> {
        while !self.buffer[from..].contains(&b'\n') {
            match self.chunk().await? {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// Up to `n` records, and whether the file has nothing after them
    /// (known before they are handed out, so the last page says so).
    pub async fn next_records(&mut self, n: usize) -> Result<(Vec<Value>, bool), FileError> {
        let mut records = Vec::with_capacity(n.min(1024));
        let mut consumed = 0;
        while records.len() < n {
            self.fill_line(consumed).await?;
            let rest = &self.buffer[consumed..];
            let (line, used) = match rest.iter().position(|b| *b == b'\n') {
                Some(end) => (&rest[..end], end + 1),
                // The last line may end without a newline.
                None if !rest.is_empty() && self.ended => (rest, rest.len()),
                None => break,
            };
            if !line.iter().all(u8::is_ascii_whitespace) {
                let record: Value = serde_json::from_slice(line).map_err(|e| {
                    Answer::Fail(SourceError::Query(format!(
                        "line {} of Shopify's bulk file is not JSON: {e}",
                        self.at.line + 1
                    )))
                })?;
                records.push(record);
                self.at.line += 1;
            }
            consumed += used;
            self.at.offset += used as u64;
            if consumed > 1 << 20 {
                self.buffer.drain(..consumed);
                consumed = 0;
            }
        }
        self.buffer.drain(..consumed);
        // Is there anything after these?
        while self.buffer.iter().all(u8::is_ascii_whitespace) && !self.ended {
            match self.chunk().await? {
                Some(chunk) => self.buffer.extend_from_slice(&chunk),
                None => break,
            }
        }
        let ended = self.ended && self.buffer.iter().all(u8::is_ascii_whitespace);
        Ok((records, ended))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_export_document_carries_the_syncs_filter_as_a_graphql_string() {
        assert_eq!(
            export_document(None),
            format!(
                "{{ customers {{ edges {{ node {{ {} }} }} }} }}",
                customer_fields!()
            )
        );
        let doc = export_document(Some("tag:\"vip\" AND country:FR"));
        assert!(
            doc.starts_with(r#"{ customers(query: "tag:\"vip\" AND country:FR") { edges"#),
            "{doc}"
        );
    }

    #[test]
    fn a_start_refused_for_a_running_export_is_busy_and_an_invalid_query_fails() {
        let busy = json!({"data": {"bulkOperationRunQuery": {"bulkOperation": null, "userErrors": [
            {"field": null, "message": "A bulk query operation for this app and shop is already in progress: gid://shopify/BulkOperation/1.", "code": "OPERATION_IN_PROGRESS"}]}}});
        assert!(matches!(
            judge_start(busy),
            Answer::Page(Started::Busy(m), _) if m.contains("already in progress")
        ));
        let invalid = json!({"data": {"bulkOperationRunQuery": {"bulkOperation": null, "userErrors": [
            {"field": ["query"], "message": "Invalid bulk query", "code": "INVALID"}]}}});
        assert!(matches!(
            judge_start(invalid),
            Answer::Fail(SourceError::Query(m)) if m.contains("Invalid bulk query")
        ));
    }

    #[test]
    fn object_counts_arrive_as_strings() {
        let op: BulkOperation = serde_json::from_value(json!({
            "id": "gid://shopify/BulkOperation/7", "status": "COMPLETED", "errorCode": null,
            "createdAt": "2026-12-01T00:00:00Z", "objectCount": "57", "url": "https://x/y.jsonl"
        }))
        .unwrap();
        assert_eq!(op.objects(), Some(57));
        assert!(!op.pending());
        let cursor = BulkAt::start_of(&op).to_cursor();
        assert_eq!(BulkAt::from_cursor(&cursor), Some(BulkAt::start_of(&op)));
    }
}
