//! The bulk read's loop (`bulk` holds the protocol): find or start the
//! export, wait for it, read its file a page at a time, start it again when
//! Shopify ended it early or it came short of its own count, then hand over
//! to the incremental read.

use std::time::Duration;

use serde_json::{Value, json};
use tracing::{info, warn};

use super::bulk::{self, BulkAt, BulkOperation, JsonlFile, Started};
use super::client::{BULK_BUSY_WAIT, BULK_POLL_FIRST, BULK_POLL_MAX, BULK_RESTARTS, ShopifySource};
use crate::source::overlap;
use crate::source::page::{Page, SourceError};
use crate::source::retry::{Answer, SOURCE_RETRY};

/// What reading a completed operation's file came to.
enum FileRead {
    Page(Page),
    /// The file holds fewer (or more) customers than the operation counted.
    Short(String),
}

impl ShopifySource {
    /// The next page of a bulk read at `at`; `None`: the first read, which
    /// takes up the app's export of the same query if Shopify still has one
    /// (a run that died waiting for it), else starts one. A run told to stop
    /// while it waits gets an empty last page.
    pub(super) async fn bulk_page(&mut self, mut at: Option<BulkAt>) -> Result<Page, SourceError> {
        let mut notices = Vec::new();
        // After a restart: a new export, never the one just given up on.
        let mut fresh = false;
        loop {
            let found = match &at {
                Some(at) => self.operation(&at.id).await?,
                None => match self.adopt_or_start(fresh).await? {
                    Some(op) => Some(op),
                    None => return Ok(Page::default_last()),
                },
            };
            let op = match found {
                Some(op) => match self.until_done(op).await? {
                    Some(op) => op,
                    None => return Ok(Page::default_last()),
                },
                None => {
                    let id = at.as_ref().map(|a| a.id.clone()).unwrap_or_default();
                    notices.push(format!(
                        "Shopify no longer knows bulk operation {id}; a new export was started"
                    ));
                    self.restart(&mut at, &mut fresh, "unknown")?;
                    continue;
                }
            };
            let whole_file_read = at
                .as_ref()
                .is_some_and(|a| a.id == op.id && a.line > 0 && op.objects() == Some(a.line));
            match op.status.as_str() {
                "COMPLETED" => {
                    let from = match &at {
                        Some(a) if a.id == op.id => a.clone(),
                        _ => BulkAt::start_of(&op),
                    };
                    match self.read_file(&op, from).await? {
                        FileRead::Page(mut page) => {
                            page.notices.splice(0..0, notices);
                            return Ok(page);
                        }
                        FileRead::Short(why) => {
                            warn!(operation = %op.id, "{why}");
                            notices.push(why);
                            self.restart(&mut at, &mut fresh, "short")?;
                        }
                    }
                }
                // Its file, read whole already, expired while the sync
                // waited for its next update: the incremental read goes on.
                "EXPIRED" if whole_file_read => {
                    let mut page = self.after_bulk(&op, Vec::new()).await?;
                    page.notices.splice(0..0, notices);
                    return Ok(page);
                }
                "FAILED" if op.error_code.as_deref() == Some("ACCESS_DENIED") => {
                    return Err(SourceError::Unauthorized(format!(
                        "Shopify denied the bulk export of customers (bulk operation {}, \
                         ACCESS_DENIED): the app usually lacks an access scope; reading \
                         customers needs read_customers (and approval for protected customer \
                         data)",
                        op.id
                    )));
                }
                status => {
                    let code = op
                        .error_code
                        .as_deref()
                        .map(|c| format!(" ({c})"))
                        .unwrap_or_default();
                    let partial = if op.partial_data_url.is_some() {
                        "; its partial data is not used"
                    } else {
                        ""
                    };
                    let why = format!(
                        "Shopify's bulk export {} ended {status}{code}{partial}; a new one was started",
                        op.id
                    );
                    warn!(operation = %op.id, "{why}");
                    notices.push(why);
                    self.restart(&mut at, &mut fresh, status)?;
                }
            }
        }
    }

    /// Gives up on the operation at hand: the next one is a new export, up
    /// to `BULK_RESTARTS` a run.
    fn restart(
        &mut self,
        at: &mut Option<BulkAt>,
        fresh: &mut bool,
        how: &str,
    ) -> Result<(), SourceError> {
        self.bulk_file = None;
        self.bulk_restarts += 1;
        if self.bulk_restarts > BULK_RESTARTS {
            return Err(SourceError::Unreachable(format!(
                "Shopify ended {} bulk exports of customers early in this run (the last: {how}); \
                 the next run starts another",
                self.bulk_restarts
            )));
        }
        *at = None;
        *fresh = true;
        Ok(())
    }

    /// The app's running or completed export of this very query, if Shopify
    /// has one; else a new one. `None`: told to stop while waiting.
    async fn adopt_or_start(&mut self, fresh: bool) -> Result<Option<BulkOperation>, SourceError> {
        let document = bulk::export_document(self.config.query.as_deref());
        if !fresh {
            let body = json!({ "query": bulk::current_query() });
            let current = self
                .request(body, "the current bulk operation", |b| {
                    bulk::judge_operation(b, "/data/currentBulkOperation")
                })
                .await?;
            if let Some(op) = current.filter(|op| {
                op.query.as_deref() == Some(document.as_str())
                    && (op.pending() || op.status == "COMPLETED")
            }) {
                info!(operation = %op.id, status = %op.status, "Taking up Shopify's bulk export of this query");
                return Ok(Some(op));
            }
        }
        let waiting_since = tokio::time::Instant::now();
        let mut wait = BULK_POLL_FIRST;
        loop {
            let body = json!({ "query": bulk::START, "variables": { "query": document } });
            match self
                .request(body, "the bulk export of customers", bulk::judge_start)
                .await?
            {
                Started::Operation(op) => {
                    info!(operation = %op.id, "Shopify bulk export of customers started");
                    return Ok(Some(op));
                }
                Started::Busy(why) => {
                    if waiting_since.elapsed() > BULK_BUSY_WAIT {
                        return Err(SourceError::Unreachable(format!(
                            "Shopify runs another bulk export of this app on the shop and it \
                             has not ended in {} s ({why}); the next run asks again",
                            BULK_BUSY_WAIT.as_secs()
                        )));
                    }
                    if !self.pause(wait).await {
                        return Ok(None);
                    }
                    wait = (wait * 2).min(BULK_POLL_MAX);
                }
            }
        }
    }

    /// `op` once it has ended (completed, failed, canceled or expired);
    /// `None` when told to stop first.
    async fn until_done(
        &mut self,
        mut op: BulkOperation,
    ) -> Result<Option<BulkOperation>, SourceError> {
        let mut wait = BULK_POLL_FIRST;
        while op.pending() {
            if !self.pause(wait).await {
                return Ok(None);
            }
            wait = (wait * 2).min(BULK_POLL_MAX);
            op = match self.operation(&op.id).await? {
                Some(op) => op,
                None => BulkOperation::gone(&op.id),
            };
        }
        Ok(Some(op))
    }

    async fn operation(&mut self, id: &str) -> Result<Option<BulkOperation>, SourceError> {
        let body = json!({ "query": bulk::poll_query(), "variables": { "id": id } });
        self.request(body, "the bulk operation's state", |b| {
            bulk::judge_operation(b, "/data/node")
        })
        .await
    }

    /// Sleeps `wait`, or less when the process is told to stop (false).
    async fn pause(&self, wait: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(wait) => true,
            _ = self.stop.cancelled() => false,
        }
    }

    /// The page of `op`'s file at `from`, read through the file kept open
    /// since the page before where it is there; a download cut off is read
    /// again from the page's start.
    async fn read_file(
        &mut self,
        op: &BulkOperation,
        from: BulkAt,
    ) -> Result<FileRead, SourceError> {
        let Some(url) = op.url.clone() else {
            // No file: nothing matched the query when it ran.
            return match op.objects() {
                Some(n) if n > 0 => Ok(FileRead::Short(format!(
                    "Shopify's bulk export {} counted {n} customers but left no file",
                    op.id
                ))),
                _ => Ok(FileRead::Page(self.after_bulk(op, Vec::new()).await?)),
            };
        };
        let n = self.config.bulk_page_size as usize;
        let mut failures = 0;
        let (file, records, ended) = loop {
            let open = match self.bulk_file.take() {
                Some(file) if file.at == from => Ok(file),
                _ => JsonlFile::open(&url, from.clone(), self.config.timeout)
                    .await
                    .map(Box::new),
            };
            let read = match open {
                Ok(mut file) => file
                    .next_records(n)
                    .await
                    .map(|(records, ended)| (file, records, ended)),
                Err(e) => Err(e),
            };
            match read {
                Ok(read) => break read,
                Err(Answer::Fail(e)) => return Err(e),
                Err(other) => {
                    let why = match other {
                        Answer::Retry(why) => why,
                        _ => "Shopify's bulk file could not be read".to_string(),
                    };
                    failures += 1;
                    let Some(backoff) = SOURCE_RETRY.backoff(failures) else {
                        return Err(SourceError::Unreachable(format!(
                            "{why} (gave up after {} tries)",
                            SOURCE_RETRY.retries + 1
                        )));
                    };
                    info!(problem = %why, backoff_ms = backoff.as_millis() as u64, "Shopify bulk file read failed; retrying");
                    if !self.pause(backoff).await {
                        return Ok(FileRead::Page(Page::default_last()));
                    }
                }
            }
        };
        if !ended {
            let next = file.at.to_cursor();
            self.bulk_file = Some(file);
            return Ok(FileRead::Page(Page {
                records: records.into(),
                next_cursor: Some(next),
                last: false,
                notices: Vec::new(),
                held_back: None,
            }));
        }
        // The whole file is read: does it hold what the operation counted?
        // (Bulk exports have been seen to drop results silently.)
        let held = file.at.line;
        if let Some(counted) = op.objects()
            && counted != held
        {
            return Ok(FileRead::Short(format!(
                "Shopify's bulk export {} counted {counted} customers but its file held {held}",
                op.id
            )));
        }
        info!(operation = %op.id, customers = held, "Shopify bulk export read whole");
        Ok(FileRead::Page(self.after_bulk(op, records).await?))
    }

    /// The last page of a bulk read: its records, and the incremental read
    /// from the export's start, less the overlap window. With no records
    /// left, the incremental read's first page itself.
    async fn after_bulk(
        &mut self,
        op: &BulkOperation,
        records: Vec<Value>,
    ) -> Result<Page, SourceError> {
        let since = overlap::earlier_by(&op.created_at, self.config.overlap)
            .unwrap_or_else(|| op.created_at.clone());
        let cursor = json!({ "since": since, "updated_at": op.created_at });
        if records.is_empty() {
            return self.fetch_paged(Some(&cursor)).await;
        }
        Ok(Page {
            records: records.into(),
            next_cursor: Some(cursor),
            last: false,
            notices: Vec::new(),
            held_back: None,
        })
    }
}
