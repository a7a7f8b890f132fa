//! A webhook receiver: records each POST (headers and body) and answers with
//! scripted statuses (200 once the script runs out).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

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

#[derive(Default)]
struct Inner {
    received: Vec<ReceivedPost>,
    statuses: VecDeque<u16>,
    /// Never answer (the client's timeout must fire).
    hang: bool,
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
        let inner = Arc::new(Mutex::new(Inner::default()));
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
    inner.received.push(ReceivedPost { headers, body });
    let status = inner.statuses.pop_front().unwrap_or(200);
    StatusCode::from_u16(status).unwrap_or(StatusCode::OK)
}
