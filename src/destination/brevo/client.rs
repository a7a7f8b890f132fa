//! `BrevoDestination`: Brevo API v3 contacts (specs). `single` posts
//! `POST /contacts` with `updateEnabled: true` per record (201 created, 204
//! updated: an upsert); `bulk` posts `POST /contacts/import` per page, split so
//! each body stays under 8 MB, and keeps the returned `processId`.
//! Errors are classified by status first, then by Brevo's `code`.

use std::collections::HashMap;

use futures::future::join_all;
use reqwest::StatusCode;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use serde_json::{Value, json};

use super::attribute_types::{AttributeType, Dropped};
use super::config::{BrevoDestinationConfig, BrevoMode};
use crate::connector_config::WorkspaceSecrets;
use crate::destination::delivery::{Destination, Go};
use crate::destination::record::{
    Consent, DestinationError, FollowUp, FollowUpPage, ImportOutcome, Outbound, RecordOutcome,
};
use crate::destination::retry::{Pacer, Verdict, redirect_refused, send_with_retry};
use crate::outbound::{
    BodyError, DESTINATION_ANSWER_CAP, RetryPolicy, SharedBudgets, cap_text, describe_error,
    http_client, read_capped,
};
use crate::states::ImportStatus;

/// Largest import body sent; Brevo takes 10 MB and recommends about 8 MB.
pub const IMPORT_BODY_LIMIT: usize = 8_000_000;

/// Brevo's rate-limit reset header: seconds until the window resets.
const RESET_HEADER: &str = "x-sib-ratelimit-reset";
/// Brevo's header with the requests left in the current window.
const REMAINING_HEADER: &str = "x-sib-ratelimit-remaining";
/// The setting that holds Brevo's address (named when it answers a redirect).
const URL_SETTING: &str = "destination.base_url";

pub struct BrevoDestination {
    client: reqwest::Client,
    config: BrevoDestinationConfig,
    api_key: SecretString,
    policy: RetryPolicy,
    /// The pace of single `POST /contacts` writes.
    create_pacer: Pacer,
    /// The pace of imports: only with a shared budget (`share_budgets`); a
    /// run alone sends one import per page.
    import_pacer: Option<Pacer>,
    /// What `start` found of the mapped attributes in the account.
    fitting: Fitting,
}

/// How a run's attribute values are fitted to the account (found by
/// `start`): attributes the account lacks are left out of every body, since
/// an import would drop them silently anyway; a value that does not fit its
/// attribute's type is converted where nothing is lost, else left out and
/// counted in `dropped`.
#[derive(Debug, Default)]
pub(super) struct Fitting {
    pub unknown: Vec<String>,
    /// The mapped attributes whose values need fitting (name as the mapping
    /// writes it, and its type): usually none or a few, so a scan.
    pub types: Vec<(String, AttributeType)>,
    pub dropped: Dropped,
}

impl std::fmt::Debug for BrevoDestination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrevoDestination")
            .field("base_url", &self.config.base_url.as_str())
            .finish()
    }
}

/// Brevo's error body: `{"code", "message"}`.
#[derive(Debug, Deserialize)]
struct BrevoError {
    code: Option<String>,
    message: Option<String>,
}

impl BrevoDestination {
    pub fn open(
        config: &BrevoDestinationConfig,
        policy: RetryPolicy,
        secrets: &WorkspaceSecrets,
    ) -> Result<Self, DestinationError> {
        let api_key = secrets
            .get(&config.api_key_env, "destination.api_key_env")
            .map_err(DestinationError::InvalidConfig)?;
        crate::outbound::policy::check_connector_url(&config.base_url, URL_SETTING)
            .map_err(DestinationError::InvalidConfig)?;
        let client = http_client(&config.base_url)?;
        // One destination per run, and one run per sync: the sync's single
        // contact writes share this pace, whatever `concurrency` keeps in
        // flight. Imports (one per page) are not paced.
        let create_pacer =
            Pacer::per_second(config.requests_per_second, REMAINING_HEADER, RESET_HEADER);
        Ok(Self {
            client,
            config: config.clone(),
            api_key: SecretString::from(api_key),
            policy,
            create_pacer,
            import_pacer: None,
            fitting: Fitting::default(),
        })
    }

    /// Takes every contacts request (single writes and imports) from the
    /// account's budget in `budgets`, shared by every sync and daemon on the
    /// same API key: together they keep `requests_per_second` (Brevo allows 10
    /// a second per account on the contacts endpoints).
    pub fn share_budgets(&mut self, budgets: &SharedBudgets) {
        let account = format!("brevo:{}", self.key_digest());
        self.create_pacer.share(budgets, account.clone());
        let mut imports = Pacer::per_second(
            self.config.requests_per_second,
            REMAINING_HEADER,
            RESET_HEADER,
        );
        imports.share(budgets, account);
        self.import_pacer = Some(imports);
    }

    /// The attributes Brevo is sent for `record`: its non-null ones that the
    /// account has.
    fn attributes_of<'a>(&'a self, record: &'a Outbound) -> NonNull<'a> {
        NonNull {
            attributes: &record.contact.attributes,
            fitting: &self.fitting,
        }
    }

    /// The base URL, for keying the attributes cache.
    pub(super) fn base_url(&self) -> &str {
        self.config.base_url.as_str()
    }

    /// The pacer of a page's first request: imports in bulk mode (paced
    /// only with a shared budget), single writes otherwise.
    fn first_pacer(&self) -> Option<&Pacer> {
        match self.config.mode {
            BrevoMode::Bulk => self.import_pacer.as_ref(),
            BrevoMode::Single => Some(&self.create_pacer),
        }
    }

    /// Records what the account holds of the mapped attributes.
    pub(super) fn fit_to(&mut self, unknown: Vec<String>, types: HashMap<String, AttributeType>) {
        self.fitting.unknown = unknown;
        self.fitting.types = types
            .into_iter()
            .filter(|(_, t)| t.needs_fitting())
            .collect();
    }

    fn url(&self, path: &str) -> String {
        format!(
            "{}{path}",
            self.config.base_url.as_str().trim_end_matches('/')
        )
    }

    /// A digest of the API key: names its process-check budget without the key.
    pub fn key_digest(&self) -> String {
        use sha2::Digest;
        hex::encode(&sha2::Sha256::digest(self.api_key.expose_secret().as_bytes())[..8])
    }

    /// `GET /contacts/attributes`: the account's contact attributes with
    /// their types (`{"attributes": [{"name", "category", "type",
    /// "enumeration"?, …}]}`, brevo-v3-openapi.2026-02.yaml `getAttributes`).
    /// One call, no retries: `sync apply` and `sync preview` ask it once.
    pub async fn account_attributes(
        &self,
    ) -> Result<Vec<(String, AttributeType)>, DestinationError> {
        let what = "listing the account's attributes";
        let (status, body) = self.get_once("/contacts/attributes", what).await?;
        if !status.is_success() {
            return Err(match classify_error(status, &body, 1) {
                Verdict::Fail(e) => e,
                _ => DestinationError::Unavailable(format!("{what}: HTTP {status}")),
            });
        }
        let listed: Value = serde_json::from_slice(&body).map_err(|_| {
            DestinationError::Unavailable(format!("{what}: the answer is not JSON"))
        })?;
        Ok(listed["attributes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| {
                        Some((
                            x["name"].as_str()?.to_string(),
                            AttributeType::of_listing(x),
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// `GET /processes?limit=50&offset=…&sort=desc`, once (each call spends
    /// Brevo's 100/h budget, and settles up to 50 imports): page `page` of
    /// the account's processes, newest first (spec 2026-02 `getProcesses`:
    /// `limit` at most 50, `sort` by creation, descending by default).
    pub async fn process_page(&self, page: u32) -> Result<FollowUpPage, DestinationError> {
        let what = format!("listing the account's import processes (page {page})");
        let path = format!(
            "/processes?limit={PROCESS_PAGE}&offset={}&sort=desc",
            u64::from(page) * PROCESS_PAGE
        );
        let (status, body) = self.get_once(&path, &what).await?;
        if !status.is_success() {
            return match classify_error(status, &body, 1) {
                Verdict::Fail(e) => Err(e),
                _ => Err(DestinationError::Unavailable(format!(
                    "{what}: HTTP {status}"
                ))),
            };
        }
        judge_process_page(&body)
            .ok_or_else(|| DestinationError::Unavailable(format!("{what}: an unreadable answer")))
    }

    /// One GET of the API with the key, no retries (the non-contact
    /// endpoints allow ~100 calls an hour): the status and the body, read up
    /// to the answer cap; no redirect is followed. `what` opens every error.
    async fn get_once(
        &self,
        path: &str,
        what: &str,
    ) -> Result<(StatusCode, Vec<u8>), DestinationError> {
        let response = self
            .client
            .get(self.url(path))
            .timeout(self.config.timeout)
            .header("api-key", self.api_key.expose_secret())
            .header("accept", "application/json")
            .send()
            .await
            .map_err(|e| DestinationError::Unavailable(format!("{what}: {}", describe_error(e))))?;
        let status = response.status();
        if status.is_redirection() {
            return Err(redirect_refused(&response, URL_SETTING));
        }
        let body = read_capped(response, DESTINATION_ANSWER_CAP)
            .await
            .map_err(|e| {
                DestinationError::Unavailable(match e {
                    BodyError::CutOff(e) => format!("{what}: {e}"),
                    BodyError::TooLarge => format!(
                        "{what}: the destination's answer exceeded {}; not read further",
                        cap_text(DESTINATION_ANSWER_CAP)
                    ),
                })
            })?;
        Ok((status, body))
    }

    /// A JSON POST to the API with the key, as every Brevo write is.
    fn post(&self, url: &str, body: &Value) -> reqwest::RequestBuilder {
        self.post_to(url).json(body)
    }

    /// A POST whose JSON body is already written.
    fn post_bytes(&self, url: &str, body: bytes::Bytes) -> reqwest::RequestBuilder {
        self.post_to(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
    }

    fn post_to(&self, url: &str) -> reqwest::RequestBuilder {
        self.client
            .post(url)
            .timeout(self.config.timeout)
            .header("api-key", self.api_key.expose_secret())
            .header("accept", "application/json")
    }

    /// `DELETE /contacts/{email}?identifierType=email_id` (`deleteContact`):
    /// the contact gone from the account, for an erasure request. Paced and
    /// retried as a single write is.
    pub async fn delete_contact(&self, email: &str) -> Result<Deleted, DestinationError> {
        let mut url = url::Url::parse(&self.url("/contacts")).map_err(|e| {
            DestinationError::InvalidConfig(format!("{URL_SETTING}: not a URL: {e}"))
        })?;
        url.path_segments_mut()
            .map_err(|()| {
                DestinationError::InvalidConfig(format!("{URL_SETTING}: cannot take a path"))
            })?
            .push(email);
        url.query_pairs_mut()
            .append_pair("identifierType", "email_id");
        let build = || {
            self.client
                .delete(url.as_str())
                .timeout(self.config.timeout)
                .header("api-key", self.api_key.expose_secret())
                .header("accept", "application/json")
        };
        self.send(build, Some(&self.create_pacer), judge_delete)
            .await
    }

    async fn create_contact(&self, record: &Outbound) -> Result<RecordOutcome, DestinationError> {
        let mut body = json!({
            "email": record.contact.email,
            "attributes": self.attributes_of(record),
            "updateEnabled": true,
        });
        // Consent (docs/contract.md §1.10): a subscribed contact (or any, without a
        // rule) joins the lists; an opted-out one is blocklisted and on no
        // list; any other is on no list and its blocklist status is left
        // alone. `emailBlacklisted: false` is never sent: it would undo an
        // unsubscribe made in Brevo itself.
        let consent = record.contact.consent;
        if consent.allows_lists() && !self.config.list_ids.is_empty() {
            body["listIds"] = json!(self.config.list_ids);
        }
        if consent.opted_out() {
            body["emailBlacklisted"] = json!(true);
        }
        let url = self.url("/contacts");
        let build = || self.post(&url, &body);
        self.send(build, Some(&self.create_pacer), judge_create)
            .await
    }

    /// One request with the connector's retries, spaced by `pacer`, its
    /// answer judged by `judge`: every Brevo call goes through here.
    async fn send<T>(
        &self,
        build: impl Fn() -> reqwest::RequestBuilder,
        pacer: Option<&Pacer>,
        judge: impl Fn(reqwest::StatusCode, &[u8]) -> Verdict<T>,
    ) -> Result<T, DestinationError> {
        send_with_retry(
            "brevo",
            build,
            &self.policy,
            pacer,
            RESET_HEADER,
            URL_SETTING,
            judge,
        )
        .await
    }

    /// `POST /contacts/import` of `records` into `lists`, every row
    /// blocklisted when `blocklist` (the import's `emailBlacklist` applies to
    /// all its rows); the first request waits for `go`, its body built.
    async fn import(
        &self,
        records: &[Outbound],
        lists: &[u64],
        blocklist: bool,
        go: &mut Go<'_>,
    ) -> Result<Vec<RecordOutcome>, DestinationError> {
        // Each contact is written as JSON once: its length decides the split,
        // its bytes go into the body as they are.
        let rows: Vec<Vec<u8>> = records
            .iter()
            .map(|r| import_row(r, &self.fitting))
            .collect();
        let sizes: Vec<usize> = rows.iter().map(Vec::len).collect();
        // A list of integers always serializes.
        let list_ids = serde_json::to_string(lists).unwrap_or_else(|_| "[]".into());
        // The flags after the rows: quiet unless the operator wants Brevo's
        // e-mail per import; the opt-out group blocklisted.
        let flags = format!(
            r#","updateExistingContacts":true,"emptyContactsAttributes":false,"disableNotification":{}{}}}"#,
            !self.config.import_notifications,
            if blocklist {
                r#","emailBlacklist":true"#
            } else {
                ""
            },
        );
        let mut outcomes = Vec::with_capacity(records.len());
        for chunk in split_by_body_size(&sizes, IMPORT_BODY_LIMIT) {
            let rows = &rows[chunk.clone()];
            let mut body =
                Vec::with_capacity(sizes[chunk].iter().sum::<usize>() + rows.len() + 128);
            body.extend_from_slice(br#"{"jsonBody":["#);
            for (i, row) in rows.iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(row);
            }
            body.extend_from_slice(br#"],"listIds":"#);
            body.extend_from_slice(list_ids.as_bytes());
            body.extend_from_slice(flags.as_bytes());
            // Shared, not copied, by each try.
            let body = bytes::Bytes::from(body);
            let url = self.url("/contacts/import");
            let build = || self.post_bytes(&url, body.clone());
            if let Err(e) = go.wait().await {
                outcomes.resize(records.len(), RecordOutcome::Failed(e));
                break;
            }
            let answer = self
                .send(build, self.import_pacer.as_ref(), |status, bytes| {
                    judge_import(status, bytes, rows.len())
                })
                .await;
            match answer {
                Ok(answer) => outcomes.extend(answer),
                // The chunks already imported keep their answers; this one
                // and the rest failed as a whole.
                Err(e) => {
                    outcomes.resize(records.len(), RecordOutcome::Failed(e));
                    break;
                }
            }
        }
        Ok(outcomes)
    }
}

/// `POST /contacts`: 201 `{"id"}` (created) and 204 (updated) are delivered.
fn judge_create(status: StatusCode, bytes: &[u8]) -> Verdict<RecordOutcome> {
    match status {
        StatusCode::CREATED | StatusCode::OK => match serde_json::from_slice::<Value>(bytes) {
            Ok(v) if v.get("id").is_some() => Verdict::Done(RecordOutcome::Delivered(
                json!({"status": 201, "id": v["id"]}),
            )),
            _ => Verdict::Retry(format!("HTTP {status} with an unreadable body")),
        },
        StatusCode::NO_CONTENT => Verdict::Done(RecordOutcome::Delivered(json!({"status": 204}))),
        other => classify_error(other, bytes, 1).map(|mut v| v.remove(0)),
    }
}

/// Most addresses one `…/contacts/remove` call takes (`removeContactFromList`).
const REMOVE_LIMIT: usize = 150;

/// `POST /contacts/lists/{listId}/contacts/remove`: 201 takes them off. A
/// 400 saying they are already off (or unknown to Brevo) is as good; a 404
/// is a list the account lacks, and other answers are judged as any write's.
fn judge_remove(status: StatusCode, bytes: &[u8], list: u64) -> Verdict<()> {
    if status.is_success() {
        return Verdict::Done(());
    }
    let message = serde_json::from_slice::<BrevoError>(bytes)
        .ok()
        .and_then(|e| e.message)
        .unwrap_or_default();
    match status {
        StatusCode::BAD_REQUEST
            if message.contains("already removed") || message.contains("does not exist") =>
        {
            Verdict::Done(())
        }
        StatusCode::NOT_FOUND => Verdict::Fail(DestinationError::InvalidConfig(format!(
            "Brevo has no list {list} (destination.list_ids): {message}"
        ))),
        other => match classify_error(other, bytes, 1) {
            // A refusal of the addresses themselves: nothing was taken off.
            Verdict::Done(_) => Verdict::Fail(DestinationError::InvalidConfig(format!(
                "Brevo refused to take contacts off list {list}: HTTP {other} {message}"
            ))),
            Verdict::Retry(why) => Verdict::Retry(why),
            Verdict::Fail(e) => Verdict::Fail(e),
        },
    }
}

/// What `DELETE /contacts/{identifier}` did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Deleted {
    /// 204: the contact is gone.
    Deleted,
    /// 404: the account held no such contact.
    NotFound,
    /// Brevo would not delete it (405: the account's own registered
    /// address; 400), with its message.
    Refused(String),
}

/// `DELETE /contacts/{identifier}`: 204 deleted, 404 not there, 405 the
/// account's registered address (brevo-v3-openapi.2026-02.yaml, `deleteContact`).
fn judge_delete(status: StatusCode, bytes: &[u8]) -> Verdict<Deleted> {
    if status.is_success() {
        return Verdict::Done(Deleted::Deleted);
    }
    let message = serde_json::from_slice::<BrevoError>(bytes)
        .ok()
        .and_then(|e| e.message)
        .unwrap_or_default();
    match status {
        StatusCode::NOT_FOUND => Verdict::Done(Deleted::NotFound),
        StatusCode::METHOD_NOT_ALLOWED | StatusCode::BAD_REQUEST => Verdict::Done(
            Deleted::Refused(format!("HTTP {} {message}", status.as_u16())),
        ),
        other => classify_error(other, bytes, 1)
            .map(|_| Deleted::Refused(format!("HTTP {other} {message}"))),
    }
}

/// `POST /contacts/import`: 202 `{"processId"}` delivers the `records` it carried.
fn judge_import(status: StatusCode, bytes: &[u8], records: usize) -> Verdict<Vec<RecordOutcome>> {
    if !status.is_success() {
        return classify_error(status, bytes, records);
    }
    match serde_json::from_slice::<Value>(bytes)
        .ok()
        .and_then(|v| v.get("processId").cloned())
    {
        Some(id) => Verdict::Done(vec![
            RecordOutcome::Delivered(json!({"processId": id}));
            records
        ]),
        None => Verdict::Retry(format!("HTTP {status} without a processId")),
    }
}

/// Processes a `GET /processes` page lists, at most (the endpoint's limit).
const PROCESS_PAGE: u64 = 50;

/// A `GET /processes` page: `{"count", "processes": [{id, name, status,
/// info?, error?}]}`. Each listed process is judged as `judge_process`
/// judges one; older ones follow while the page is full and `count` says
/// there are more.
fn judge_process_page(body: &[u8]) -> Option<FollowUpPage> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let processes = v.get("processes").and_then(Value::as_array);
    let listed: Vec<(i64, Option<ImportOutcome>)> = processes
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p.get("id")?.as_i64()?, judge_process_value(p))))
        .collect();
    let full = listed.len() as u64 >= PROCESS_PAGE;
    let count_says_more = v
        .get("count")
        .and_then(Value::as_u64)
        .is_none_or(|count| count > PROCESS_PAGE);
    Some(FollowUpPage {
        more: full && count_says_more,
        listed,
    })
}

/// A process body: terminal or still running (unknown statuses included).
#[cfg(test)]
fn judge_process(body: &[u8]) -> Option<ImportOutcome> {
    judge_process_value(&serde_json::from_slice(body).ok()?)
}

/// A process, terminal or still running (unknown statuses included).
fn judge_process_value(v: &Value) -> Option<ImportOutcome> {
    let status = match v.get("status")?.as_str()? {
        "completed" => ImportStatus::Completed,
        "failed" => ImportStatus::Failed,
        "cancelled" => ImportStatus::Cancelled,
        _ => return None,
    };
    Some(ImportOutcome {
        status,
        counts: v.pointer("/info/import").cloned(),
        error: v.get("error").filter(|e| !e.is_null()).map(|e| {
            e.as_str()
                .map(str::to_string)
                .unwrap_or_else(|| e.to_string())
        }),
    })
}

/// A 4xx answer: 401/403 end the run; 404 means the URL is wrong; 425 is tried
/// again; anything else rejects the records the request carried.
fn classify_error(status: StatusCode, body: &[u8], records: usize) -> Verdict<Vec<RecordOutcome>> {
    let parsed: Option<BrevoError> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .and_then(|e| e.message.clone())
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned());
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Verdict::Fail(
            DestinationError::Unauthorized(format!("Brevo answered HTTP {status}: {message}")),
        ),
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => {
            Verdict::Fail(DestinationError::InvalidConfig(format!(
                "Brevo answered HTTP {status} ({message}); check destination.base_url"
            )))
        }
        // 425 Too Early (documented for `POST /contacts` and `PUT
        // /contacts/{identifier}`): Brevo is not ready for the write yet, which
        // says nothing against the record. Retried like a 5xx; past the in-run
        // retries the call fails as a whole and the record's attempt is given
        // back.
        StatusCode::TOO_EARLY => Verdict::Retry(format!("HTTP {status} ({message})")),
        _ => {
            let code = parsed
                .and_then(|e| e.code)
                .unwrap_or_else(|| format!("http_{}", status.as_u16()));
            Verdict::Done(vec![RecordOutcome::Rejected { code, message }; records])
        }
    }
}

/// One contact of an import's `jsonBody`, written without copying it.
#[derive(serde::Serialize)]
struct ImportRow<'a> {
    email: &'a str,
    attributes: NonNull<'a>,
}

/// Attributes as Brevo takes them: without the null ones. Brevo's schema
/// allows only numbers, strings, booleans and arrays of strings as attribute
/// values (brevo-v3-openapi.2025-08.yml, `createContact.attributes`), so a
/// source's null (a Shopify customer without a first name) is left out: the
/// contact keeps what Brevo has for it (imports run with
/// `emptyContactsAttributes: false`).
/// Attributes the account lacks are left out too, and each value is fitted to
/// its attribute's type (`Fitting`): what is sent is what Brevo keeps.
struct NonNull<'a> {
    attributes: &'a serde_json::Map<String, Value>,
    fitting: &'a Fitting,
}

impl serde::Serialize for NonNull<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        let kept = self
            .attributes
            .iter()
            .filter(|(n, v)| !v.is_null() && !self.fitting.unknown.iter().any(|u| u == *n));
        for (name, value) in kept {
            let kind = self.fitting.types.iter().find(|(n, _)| n == name);
            match kind.map(|(_, t)| t.fit(value)) {
                None => map.serialize_entry(name, value)?,
                Some(Ok(fitted)) => map.serialize_entry(name, fitted.as_ref())?,
                Some(Err(why)) => self.fitting.dropped.note(name, why),
            }
        }
        map.end()
    }
}

/// One contact as written in an import's `jsonBody`.
fn import_row(record: &Outbound, fitting: &Fitting) -> Vec<u8> {
    // A string and a map of JSON values always serialize.
    serde_json::to_vec(&ImportRow {
        email: &record.contact.email,
        attributes: NonNull {
            attributes: &record.contact.attributes,
            fitting,
        },
    })
    .unwrap_or_default()
}

/// Splits rows of these serialized sizes so each import body stays under
/// `limit` bytes.
fn split_by_body_size(sizes: &[usize], limit: usize) -> Vec<std::ops::Range<usize>> {
    // Room for the envelope around jsonBody (listIds and flags).
    let budget = limit.saturating_sub(4096);
    let mut chunks = Vec::new();
    let (mut start, mut size) = (0, 0);
    for (i, len) in sizes.iter().enumerate() {
        let entry = len + 1;
        if i > start && size + entry > budget {
            chunks.push(start..i);
            (start, size) = (i, 0);
        }
        size += entry;
    }
    if start < sizes.len() {
        chunks.push(start..sizes.len());
    }
    chunks
}

impl BrevoDestination {
    /// The lists a contact of this consent is put on, as the writes below
    /// decide: the sync's lists when consent allows them; else the holding
    /// list of a bulk import, or none.
    pub fn lists_for(&self, consent: Consent) -> Vec<u64> {
        if consent.allows_lists() {
            return self.config.list_ids.clone();
        }
        match (self.config.mode, self.config.holding_list_id) {
            (BrevoMode::Bulk, Some(holding)) => vec![holding],
            _ => Vec::new(),
        }
    }

    /// Bulk mode with consent. An import's `listIds` (mandatory unless
    /// `newList`) and `emailBlacklist` apply to every row it carries
    /// (`requestContactImport`, spec 2025-08), so a page is imported in up
    /// to three groups: contacts that join the sync's lists; opted-out ones
    /// into `holding_list_id` with `emailBlacklist: true`; the rest into
    /// `holding_list_id` as they are. Without a holding list, the last two
    /// groups go one by one through `POST /contacts` (no `listIds`, the
    /// opted-out with `emailBlacklisted: true`), `concurrency` at a time.
    /// One outcome per record, in the page's order: the run loop sees one
    /// page either way.
    async fn import_with_consent(
        &self,
        records: &[Outbound],
        go: &mut Go<'_>,
    ) -> Result<Vec<RecordOutcome>, DestinationError> {
        let consent = |i: usize| records[i].contact.consent;
        if (0..records.len()).all(|i| consent(i).allows_lists()) {
            return self.import(records, &self.config.list_ids, false, go).await;
        }
        let group = |keep: &dyn Fn(Consent) -> bool| -> Vec<usize> {
            (0..records.len()).filter(|&i| keep(consent(i))).collect()
        };
        let listed = group(&|c| c.allows_lists());
        let opted_out = group(&|c| c.opted_out());
        let unknown = group(&|c| !c.allows_lists() && !c.opted_out());
        let mut outcomes: Vec<Option<RecordOutcome>> = vec![None; records.len()];
        let mut imports = vec![(listed, self.config.list_ids.clone(), false)];
        let mut singles = Vec::new();
        match self.config.holding_list_id {
            Some(holding) => {
                imports.push((opted_out, vec![holding], true));
                imports.push((unknown, vec![holding], false));
            }
            None => singles.extend(opted_out.into_iter().chain(unknown)),
        }
        for (indices, lists, blocklist) in imports {
            if indices.is_empty() {
                continue;
            }
            let subset: Vec<Outbound> = indices.iter().map(|&i| records[i].clone()).collect();
            let answers = self.import(&subset, &lists, blocklist, go).await?;
            for (&i, outcome) in indices.iter().zip(answers) {
                outcomes[i] = Some(outcome);
            }
        }
        go.wait().await?;
        for group in singles.chunks(self.config.concurrency.max(1) as usize) {
            let answers = join_all(group.iter().map(|&i| self.create_contact(&records[i]))).await;
            for (&i, answer) in group.iter().zip(answers) {
                outcomes[i] = Some(answer.unwrap_or_else(RecordOutcome::Failed));
            }
        }
        // Every index was filled above (each import answers every record it
        // carried); a gap would be a bug, reported as an unanswered call.
        Ok(outcomes
            .into_iter()
            .map(|o| {
                o.unwrap_or_else(|| {
                    RecordOutcome::Failed(DestinationError::Unanswered(
                        "no answer was recorded for this record".into(),
                    ))
                })
            })
            .collect())
    }
}

impl Destination for BrevoDestination {
    async fn start(&mut self, attributes: &[String]) -> Result<Vec<String>, DestinationError> {
        super::attributes::check_at_start(self, attributes).await
    }

    fn batch_size(&self) -> Option<usize> {
        match self.config.mode {
            BrevoMode::Single => Some(self.config.concurrency as usize),
            BrevoMode::Bulk => None,
        }
    }

    async fn deliver(
        &self,
        records: &[Outbound],
        mut go: Go<'_>,
    ) -> Result<Vec<RecordOutcome>, DestinationError> {
        go.start().await;
        match self.config.mode {
            BrevoMode::Bulk => self.import_with_consent(records, &mut go).await,
            BrevoMode::Single => {
                go.wait().await?;
                Ok(join_all(records.iter().map(|r| self.create_contact(r)))
                    .await
                    .into_iter()
                    .map(|answer| answer.unwrap_or_else(RecordOutcome::Failed))
                    .collect())
            }
        }
    }

    /// `POST /contacts/lists/{listId}/contacts/remove` for each of the
    /// sync's lists, 150 addresses a call (the endpoint's limit). Brevo
    /// answers 201 with the addresses it took off (`success`) and those that
    /// were not on the list (`failure`): both mean the contact is off it.
    async fn remove(&self, emails: &[String], _key: &str) -> Result<(), DestinationError> {
        for list in &self.config.list_ids {
            let url = self.url(&format!("/contacts/lists/{list}/contacts/remove"));
            for chunk in emails.chunks(REMOVE_LIMIT) {
                let body = json!({ "emails": chunk });
                let build = || self.post(&url, &body);
                self.send(build, Some(&self.create_pacer), |status, bytes| {
                    judge_remove(status, bytes, *list)
                })
                .await?;
            }
        }
        Ok(())
    }

    /// `POST /contacts/import` answers `{"processId": n}` and imports the
    /// rows later; the process says whether they arrived.
    fn follow_up(&self, answer: &Value) -> Option<FollowUp> {
        answer
            .get("processId")
            .and_then(Value::as_i64)
            .map(FollowUp)
    }

    /// The account's next slot, for the page's first request: imports in
    /// bulk mode, single writes otherwise.
    async fn reserve_slot(
        &self,
        within: std::time::Duration,
    ) -> Result<std::time::Duration, std::time::Duration> {
        match self.first_pacer() {
            Some(pacer) => pacer.reserve_within(within).await,
            None => Ok(std::time::Duration::ZERO),
        }
    }

    fn hold_slot(&self, wait: std::time::Duration) {
        if let Some(pacer) = self.first_pacer() {
            pacer.hold_slot(wait);
        }
    }

    /// Values left out for not fitting their attribute's type (Brevo would
    /// ignore them).
    fn take_dropped(&self) -> Vec<(String, u64, String)> {
        self.fitting.dropped.take()
    }

    /// Brevo allows ~100 process requests an hour per key.
    fn follow_up_budget(&self) -> Option<String> {
        Some(format!("brevo-process-checks:{}", self.key_digest()))
    }

    async fn follow_up_page(&self, page: u32) -> Result<FollowUpPage, DestinationError> {
        self.process_page(page).await
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Map;

    use super::*;
    use crate::destination::Contact;

    #[test]
    fn import_bodies_are_split_under_the_limit() {
        let big = "x".repeat(1000);
        let records: Vec<Outbound> = (0..50)
            .map(|i| Outbound {
                key: [0; 32],
                contact: Contact {
                    email: format!("{i}@example.com"),
                    attributes: Map::from_iter([("BIO".to_string(), Value::String(big.clone()))]),
                    consent: Default::default(),
                },
            })
            .collect();
        let sizes: Vec<usize> = records
            .iter()
            .map(|r| import_row(r, &Fitting::default()).len())
            .collect();
        let chunks = split_by_body_size(&sizes, 4096 + 10_500);
        assert!(chunks.len() >= 5, "{}", chunks.len());
        assert_eq!(chunks.iter().map(|c| c.len()).sum::<usize>(), 50);
        assert!(
            chunks
                .iter()
                .all(|c| sizes[c.clone()].iter().sum::<usize>() < 10_500)
        );
    }

    proptest::proptest! {
        /// Whatever Brevo (or a broken proxy) answers, judging it never panics,
        /// and every record the request carried gets exactly one outcome.
        #[test]
        fn any_answer_is_judged_without_panicking(
            status in 100u16..600,
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..400),
            records in 1usize..50,
        ) {
            let status = StatusCode::from_u16(status).unwrap();
            let _ = judge_create(status, &body);
            if let Verdict::Done(outcomes) = judge_import(status, &body, records) {
                proptest::prop_assert_eq!(outcomes.len(), records);
            }
        }

        #[test]
        fn json_shaped_answers_are_judged_without_panicking(
            status in proptest::sample::select(vec![200u16, 201, 202, 204, 400, 401, 404, 409, 422]),
            body in "\\{(\"(id|processId|code|message)\": ?(1|\"x\"|null|\\[\\]|\\{\\}),? ?){0,3}\\}",
        ) {
            let status = StatusCode::from_u16(status).unwrap();
            let _ = judge_create(status, body.as_bytes());
            let _ = judge_import(status, body.as_bytes(), 3);
        }
    }

    #[test]
    fn unknown_process_statuses_count_as_still_running() {
        assert_eq!(judge_process(br#"{"id":1,"status":"processing"}"#), None);
        assert_eq!(
            judge_process(br#"{"id":1,"status":"in_progress_v2"}"#),
            None
        );
        assert_eq!(judge_process(b"garbage"), None);
        let failed = judge_process(br#"{"id":1,"status":"failed","error":"bad file"}"#).unwrap();
        assert_eq!(
            (failed.status.as_str(), failed.error.as_deref()),
            ("failed", Some("bad file"))
        );
        let done = judge_process(
            br#"{"id":1,"status":"completed","info":{"import":{"invalid_emails":2}}}"#,
        )
        .unwrap();
        assert_eq!(done.counts, Some(serde_json::json!({"invalid_emails": 2})));
        let clean = judge_process(br#"{"id":1,"status":"completed","error":null}"#).unwrap();
        assert_eq!(clean.error, None);
    }

    #[test]
    fn too_early_is_tried_again_not_rejected() {
        let body = br#"{"code":"account_in_process","message":"Too Early"}"#;
        assert!(matches!(
            judge_create(StatusCode::TOO_EARLY, body),
            Verdict::Retry(_)
        ));
        assert!(matches!(
            judge_import(StatusCode::TOO_EARLY, body, 3),
            Verdict::Retry(_)
        ));
    }

    #[test]
    fn a_process_page_lists_each_process_and_says_whether_older_ones_follow() {
        // The example of `getProcesses` (brevo-v3-openapi.2026-02.yaml).
        let body = br#"{"count": 198, "processes": [
            {"id": 217, "name": "IMPORTUSER", "status": "completed",
             "info": {"import": {"invalid_emails": null, "duplicate_email_id": 2}}},
            {"id": 213, "name": "SEARCH_EXPORT_USERS", "status": "completed"},
            {"id": 212, "name": "IMPORTUSER", "status": "queued"}]}"#;
        let page = judge_process_page(body).unwrap();
        assert!(!page.more, "a page of three is the last");
        assert_eq!(page.listed.len(), 3);
        assert_eq!(page.listed[0].0, 217);
        let done = page.listed[0].1.clone().unwrap();
        assert_eq!(done.status, ImportStatus::Completed);
        assert_eq!(done.counts.unwrap()["duplicate_email_id"], 2);
        assert_eq!(page.listed[2], (212, None));
        let full: Vec<Value> = (0..50)
            .map(|i| json!({"id": 1000 - i, "name": "IMPORTUSER", "status": "processing"}))
            .collect();
        let full = json!({"count": 120, "processes": full}).to_string();
        assert!(judge_process_page(full.as_bytes()).unwrap().more);
        assert_eq!(judge_process_page(b"<html>"), None);
        assert_eq!(
            judge_process_page(br#"{"count": 0}"#),
            Some(FollowUpPage::default())
        );
    }
}
