//! A webhook receiver: records each POST (headers and body) and answers with
//! scripted statuses (200 once the script runs out). Started with a secret,
//! it verifies every POST as a receiver following the Standard Webhooks
//! specification would, written here from the specification and not from
//! syncward's signer: `webhook-id`, `webhook-timestamp` within
//! `TOLERANCE` of its clock, and a `v1,<base64 HMAC-SHA256 of
//! "{id}.{timestamp}.{body}">` among the space-separated `webhook-signature`
//! entries; a POST that fails is answered 401 and kept apart in `refused`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

#[derive(Debug, Clone)]
pub struct ReceivedPost {
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl ReceivedPost {
    /// The e-mails the POST carried (one record, or a batch array).
    pub fn records(&self) -> Vec<String> {
        let value: serde_json::Value = serde_json::from_slice(&self.body).unwrap_or_default();
        let items = match value {
            serde_json::Value::Array(items) => items,
            one => vec![one],
        };
        items
            .iter()
            .filter_map(|r| r["email"].as_str().map(str::to_lowercase))
            .collect()
    }
}

/// How far a `webhook-timestamp` may be from the receiver's clock, either way.
pub const TOLERANCE: Duration = Duration::from_secs(5 * 60);

#[derive(Default)]
struct Inner {
    received: Vec<ReceivedPost>,
    statuses: VecDeque<u16>,
    /// Never answer (the client's timeout must fire).
    hang: bool,
    /// The HMAC key; with it, unverified POSTs are refused.
    key: Option<Vec<u8>>,
    /// POSTs that failed verification, with the reason.
    refused: Vec<(ReceivedPost, String)>,
    /// Added to the real clock when checking timestamps (a receiver that sees
    /// a captured request later).
    clock_ahead: Duration,
    /// Until then, every other POST gets this status (a receiver mid-deploy).
    flap: Option<(std::time::Instant, u16)>,
    /// POSTs answered so far (for the flapping).
    answered: u64,
    /// Arrays longer than this get 413 Payload Too Large.
    max_batch: Option<usize>,
}

pub struct WebhookReceiver {
    pub url: String,
    inner: Arc<Mutex<Inner>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for WebhookReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl WebhookReceiver {
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(Inner::default()).await
    }

    /// A receiver that verifies each POST against `secret`, given as syncward
    /// takes it: `whsec_<base64>` is the decoded bytes, anything else the raw ones.
    pub async fn start_verifying(secret: &str) -> anyhow::Result<Self> {
        use base64::Engine;
        let key = match secret.strip_prefix("whsec_") {
            Some(encoded) => base64::engine::general_purpose::STANDARD.decode(encoded)?,
            None => secret.as_bytes().to_vec(),
        };
        Self::start_with(Inner {
            key: Some(key),
            ..Inner::default()
        })
        .await
    }

    async fn start_with(inner: Inner) -> anyhow::Result<Self> {
        let inner = Arc::new(Mutex::new(inner));
        let app = Router::new()
            .route("/hook", post(receive))
            .with_state(inner.clone());
        let (addr, server) = super::serve(app).await?;
        let url = format!("http://{addr}/hook");
        Ok(Self { url, inner, server })
    }

    /// Statuses for the next POSTs, in order.
    pub fn answer_with(&self, statuses: impl IntoIterator<Item = u16>) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .statuses
            .extend(statuses);
    }

    /// For `for_how_long` from now, every other POST is answered `status`
    /// (the scripted statuses still come first).
    pub fn flap(&self, status: u16, for_how_long: Duration) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).flap =
            Some((std::time::Instant::now() + for_how_long, status));
    }

    /// From now on, an array of more than `records` is answered 413.
    pub fn refuse_batches_above(&self, records: usize) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .max_batch = Some(records);
    }

    /// Every POST from now on hangs.
    pub fn hang(&self) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).hang = true;
    }

    pub fn received(&self) -> Vec<ReceivedPost> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .received
            .clone()
    }

    /// The POSTs that failed verification, with the reason.
    pub fn refused(&self) -> Vec<(ReceivedPost, String)> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .refused
            .clone()
    }

    /// From now on the receiver's clock runs `ahead` of the real one.
    pub fn set_clock_ahead(&self, ahead: Duration) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clock_ahead = ahead;
    }

    /// Sends a captured POST again, as an attacker who recorded it would,
    /// with the same headers and `body`; returns the status.
    pub async fn replay(&self, post: &ReceivedPost, body: &[u8]) -> anyhow::Result<u16> {
        let mut request = reqwest::Client::new().post(&self.url);
        for name in [
            "content-type",
            "webhook-id",
            "webhook-timestamp",
            "webhook-signature",
        ] {
            if let Some(value) = post.headers.get(name) {
                request = request.header(name, value.to_str()?);
            }
        }
        Ok(request.body(body.to_vec()).send().await?.status().as_u16())
    }
}

/// Verifies one POST per the Standard Webhooks specification; the reason it
/// fails otherwise.
fn verify(
    key: &[u8],
    headers: &HeaderMap,
    body: &[u8],
    clock_ahead: Duration,
) -> Result<(), String> {
    use base64::Engine;
    use hmac::{KeyInit, Mac};
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| format!("no {name} header"))
    };
    let id = header("webhook-id")?;
    let timestamp = header("webhook-timestamp")?;
    let signatures = header("webhook-signature")?;
    let sent: i64 = timestamp
        .parse()
        .map_err(|_| format!("webhook-timestamp {timestamp:?} is not Unix seconds"))?;
    let now = chrono::Utc::now().timestamp() + clock_ahead.as_secs() as i64;
    if (now - sent).unsigned_abs() > TOLERANCE.as_secs() {
        return Err(format!(
            "webhook-timestamp is {}s from now, outside the tolerance",
            now - sent
        ));
    }
    let mut mac =
        <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key).map_err(|e| e.to_string())?;
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body);
    let expected = mac.finalize().into_bytes();
    let matches = signatures.split(' ').any(|entry| {
        entry
            .strip_prefix("v1,")
            .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
            .is_some_and(|given| {
                // Constant-time, as a real receiver must compare.
                use subtle::ConstantTimeEq;
                given.ct_eq(expected.as_slice()).into()
            })
    });
    if matches {
        Ok(())
    } else {
        Err("no v1 signature matches".into())
    }
}

async fn receive(
    State(inner): State<Arc<Mutex<Inner>>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let hang = inner.lock().unwrap_or_else(|e| e.into_inner()).hang;
    if hang {
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    }
    let mut inner = inner.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(key) = &inner.key
        && let Err(reason) = verify(key, &headers, &body, inner.clock_ahead)
    {
        inner.refused.push((ReceivedPost { headers, body }, reason));
        return StatusCode::UNAUTHORIZED;
    }
    let post = ReceivedPost { headers, body };
    let too_large = inner.max_batch.is_some_and(|max| {
        serde_json::from_slice::<Vec<serde_json::Value>>(&post.body).is_ok_and(|a| a.len() > max)
    });
    inner.received.push(post);
    inner.answered += 1;
    let flapping = match inner.flap {
        Some((until, status)) if std::time::Instant::now() < until && inner.answered % 2 == 1 => {
            Some(status)
        }
        _ => None,
    };
    let status = match inner.statuses.pop_front() {
        Some(status) => status,
        None if too_large => 413,
        None => flapping.unwrap_or(200),
    };
    StatusCode::from_u16(status).unwrap_or(StatusCode::OK)
}
