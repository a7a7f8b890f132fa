//! `WebhookDestination`: POSTs `{"email", "attributes"}` per record (or an array
//! per page with `batch = true`) with the delivery key as `Idempotency-Key`,
//! and, when a secret is configured, signs each attempt per the Standard
//! Webhooks specification with the delivery key as `webhook-id` (see
//! `signature.rs`). Answers by what they mean (`judge`): 2xx delivered; 400,
//! 413 and 422 say the record is wrong and reject it (a batch answered 413 is
//! split first); 401/403 end the run; 410 Gone pauses the sync; anything else
//! (5xx, 404, 408, 409, 425, 429, no answer) is an outage, retried.

use futures::future::join_all;
use reqwest::StatusCode;
use secrecy::SecretString;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::config::WebhookDestinationConfig;
use crate::connector_config::WorkspaceSecrets;
use crate::destination::delivery::{Destination, Go};
use crate::destination::record::{Contact, DestinationError, Outbound, RecordOutcome};
use crate::destination::retry::{Pacer, Verdict, send_with_retry};
use crate::outbound::{RetryPolicy, SharedBudgets, WebhookSigner, http_client};

/// Requests in flight at once without `batch`.
const CONCURRENCY: usize = 4;

pub struct WebhookDestination {
    client: reqwest::Client,
    config: WebhookDestinationConfig,
    signer: Option<WebhookSigner>,
    policy: RetryPolicy,
    /// The host's shared budget, when `requests_per_second` is set.
    pacer: Option<Pacer>,
}

impl std::fmt::Debug for WebhookDestination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookDestination")
            .field("url", &self.config.url.as_str())
            .finish()
    }
}

/// The shared budget a webhook's `requests_per_second` paces: one per
/// workspace and host, so one workspace's pace never slows another's posts
/// to the same receiver.
fn budget_account(url: &url::Url, workspace: &str) -> String {
    let host = url.host_str().unwrap_or_default();
    let port = url.port_or_known_default().unwrap_or_default();
    format!("webhook:{workspace}:{host}:{port}")
}

impl WebhookDestination {
    pub fn open(
        config: &WebhookDestinationConfig,
        policy: RetryPolicy,
        secrets: &WorkspaceSecrets,
    ) -> Result<Self, DestinationError> {
        let signer = match &config.secret_env {
            Some(var) => {
                let secret = SecretString::from(
                    secrets
                        .get(var, "destination.secret_env")
                        .map_err(DestinationError::InvalidConfig)?,
                );
                Some(WebhookSigner::from_secret(&secret).map_err(|problem| {
                    DestinationError::InvalidConfig(format!(
                        "{var} (destination.secret_env) {problem}"
                    ))
                })?)
            }
            None => None,
        };
        crate::outbound::policy::check_connector_url(&config.url, "destination.url")
            .map_err(DestinationError::InvalidConfig)?;
        let client = http_client(&config.url)?;
        Ok(Self {
            client,
            config: config.clone(),
            signer,
            policy,
            pacer: None,
        })
    }

    /// With `requests_per_second` set, paces every POST to the URL's host
    /// through its budget in `budgets`, shared by every sync and daemon that
    /// posts there.
    pub fn share_budgets(&mut self, budgets: &SharedBudgets, workspace: &str) {
        let Some(rate) = self.config.requests_per_second else {
            return;
        };
        let mut pacer = Pacer::per_second(rate, "x-ratelimit-remaining", "retry-after");
        pacer.share(budgets, budget_account(&self.config.url, workspace));
        self.pacer = Some(pacer);
    }

    async fn post(
        &self,
        body: Vec<u8>,
        idempotency_key: &str,
        records: usize,
    ) -> Result<Vec<RecordOutcome>, DestinationError> {
        let build = || {
            let mut request = self
                .client
                .post(self.config.url.as_str())
                .timeout(self.config.timeout)
                .header("content-type", "application/json")
                .header("Idempotency-Key", idempotency_key)
                .body(body.clone());
            // Signed on every attempt: the timestamp is the attempt's, so a
            // retry after a long backoff is not stale at the receiver; the id
            // (the delivery key) stays the same.
            if let Some(signer) = &self.signer {
                for (name, value) in signer.headers(idempotency_key, &body) {
                    request = request.header(name, value);
                }
            }
            request
        };
        send_with_retry(
            "webhook",
            build,
            &self.policy,
            self.pacer.as_ref(),
            "retry-after",
            "destination.url",
            |status, bytes| judge(status, bytes, records),
        )
        .await
    }

    /// One array POST of `records`; a receiver that answers 413 for it gets
    /// each half on its own (down to one record, which is then rejected).
    fn post_batch<'a>(
        &'a self,
        records: &'a [Outbound],
    ) -> futures::future::BoxFuture<'a, Result<Vec<RecordOutcome>, DestinationError>> {
        Box::pin(async move {
            let items: Vec<Value> = records.iter().map(|r| payload(&r.contact)).collect();
            let body = serde_json::to_vec(&items)
                .map_err(|e| DestinationError::InvalidConfig(e.to_string()))?;
            // One key for the batch, derived from its records' keys.
            let mut hash = Sha256::new();
            records
                .iter()
                .for_each(|r| hash.update(r.key_hex().as_bytes()));
            let key = hex::encode(hash.finalize());
            let outcomes = self.post(body, &key, records.len()).await?;
            let too_large = matches!(
                outcomes.first(),
                Some(RecordOutcome::Rejected { code, .. }) if code == TOO_LARGE
            );
            if !too_large || records.len() < 2 {
                return Ok(outcomes);
            }
            let (first, second) = records.split_at(records.len() / 2);
            let mut outcomes = self.post_batch(first).await?;
            outcomes.extend(self.post_batch(second).await?);
            Ok(outcomes)
        })
    }
}

/// The code of a record refused for its size (HTTP 413).
const TOO_LARGE: &str = "http_413";

/// What a webhook's answer means for the `records` it carried. Standard
/// Webhooks treats every non-2xx answer as a failed attempt, to be retried,
/// and 410 Gone as "disable this endpoint"; only 400, 413 and 422 say the
/// record itself is wrong. So a receiver that flaps during a deploy (404s,
/// 409s) costs time, never a record.
/// A webhook call's stored answer (`{"status": N}`, see `judge`), in words;
/// `None` when `result` is not one.
pub fn answer_words(result: Option<&Value>) -> Option<String> {
    let status = result?.get("status")?;
    Some(format!("accepted: the destination answered {status}"))
}

fn judge(status: StatusCode, bytes: &[u8], records: usize) -> Verdict<Vec<RecordOutcome>> {
    if status.is_success() {
        return Verdict::Done(vec![
            RecordOutcome::Delivered(
                json!({"status": status.as_u16()})
            );
            records
        ]);
    }
    let message = String::from_utf8_lossy(&bytes[..bytes.len().min(300)]).into_owned();
    match status {
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            Verdict::Fail(DestinationError::Unauthorized(format!(
                "the webhook answered HTTP {status}: {message}"
            )))
        }
        StatusCode::GONE => Verdict::Fail(DestinationError::Gone(format!(
            "the webhook answered HTTP {status}: {message}"
        ))),
        StatusCode::BAD_REQUEST
        | StatusCode::PAYLOAD_TOO_LARGE
        | StatusCode::UNPROCESSABLE_ENTITY => Verdict::Done(vec![
            RecordOutcome::Rejected {
                code: format!("http_{}", status.as_u16()),
                message
            };
            records
        ]),
        _ => Verdict::Retry(format!("HTTP {status}")),
    }
}

/// One record as posted: `{"email", "attributes"}`, plus `"consent"`
/// (`"subscribed"`, `"unsubscribed"` or `"unknown"`) when the mapping has a
/// consent rule, so the receiver can honour it.
fn payload(contact: &Contact) -> Value {
    let mut value = json!({"email": contact.email, "attributes": contact.attributes});
    if !contact.consent.is_not_asked() {
        value["consent"] = json!(contact.consent);
    }
    value
}

impl Destination for WebhookDestination {
    /// A webhook takes whatever it is sent: nothing to check.
    async fn start(&mut self, _attributes: &[String]) -> Result<Vec<String>, DestinationError> {
        Ok(Vec::new())
    }

    fn batch_size(&self) -> Option<usize> {
        if self.config.batch {
            None
        } else {
            Some(CONCURRENCY)
        }
    }

    /// A `{"event": "removed", "email"}` per contact: in one array in batch
    /// mode (keyed by `key`), else one POST each (keyed by its address'
    /// digest under `key`). A refusal of the event fails the run: a removal
    /// is not a record to reject.
    async fn remove(&self, emails: &[String], key: &str) -> Result<(), DestinationError> {
        let event = |email: &String| json!({"event": "removed", "email": email});
        // Serializing a JSON value of strings cannot fail: the defaults are
        // never taken.
        let bodies: Vec<(Vec<u8>, String)> = if self.config.batch {
            let items: Vec<Value> = emails.iter().map(event).collect();
            vec![(
                serde_json::to_vec(&items).unwrap_or_default(),
                key.to_string(),
            )]
        } else {
            emails
                .iter()
                .map(|email| {
                    let digest = hex::encode(Sha256::digest(format!("{key}:{email}")));
                    (
                        serde_json::to_vec(&event(email)).unwrap_or_default(),
                        digest,
                    )
                })
                .collect()
        };
        for (body, key) in bodies {
            for outcome in self.post(body, &key, 1).await? {
                if let RecordOutcome::Rejected { code, message } = outcome {
                    return Err(DestinationError::InvalidConfig(format!(
                        "the webhook refused a removed event ({code}): {message}"
                    )));
                }
            }
        }
        Ok(())
    }

    async fn deliver(
        &self,
        records: &[Outbound],
        mut go: Go<'_>,
    ) -> Result<Vec<RecordOutcome>, DestinationError> {
        go.wait().await?;
        if self.config.batch {
            return self.post_batch(records).await;
        }
        let calls = records.iter().map(|r| async move {
            let body = serde_json::to_vec(&payload(&r.contact))
                .map_err(|e| DestinationError::InvalidConfig(e.to_string()))?;
            self.post(body, &r.key_hex(), 1)
                .await
                .map(|mut v| v.remove(0))
        });
        Ok(join_all(calls)
            .await
            .into_iter()
            .map(|answer| answer.unwrap_or_else(RecordOutcome::Failed))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_workspace_has_its_own_budget_per_receiver() {
        let url = url::Url::parse("https://hooks.example.com/in").expect("a URL");
        assert_eq!(
            budget_account(&url, "acme"),
            "webhook:acme:hooks.example.com:443"
        );
        assert_ne!(budget_account(&url, "acme"), budget_account(&url, "globex"));
    }
}
