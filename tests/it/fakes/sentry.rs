//! A Sentry ingestion fake: accepts `POST /api/{project}/envelope/` (the
//! envelope format: a header line, then item header and payload lines) and
//! keeps the event payloads it received.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

type Events = Arc<Mutex<Vec<(String, Option<String>, serde_json::Value)>>>;

pub struct SentryFake {
    /// `http://KEY@127.0.0.1:PORT/42`
    pub dsn: String,
    events: Events,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for SentryFake {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl SentryFake {
    pub async fn start() -> anyhow::Result<Self> {
        let events: Events = Arc::default();
        let app = Router::new()
            .route("/api/{project}/envelope/", post(envelope))
            .with_state(events.clone());
        let (addr, server) = super::serve(app).await?;
        let dsn = format!("http://fakepublickey@{addr}/42");
        Ok(Self {
            dsn,
            events,
            server,
        })
    }

    /// `(project, X-Sentry-Auth header, event payload)` for every event received.
    pub fn events(&self) -> Vec<(String, Option<String>, serde_json::Value)> {
        self.events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

async fn envelope(
    State(events): State<Events>,
    Path(project): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let text = String::from_utf8_lossy(&body);
    let auth = headers
        .get("x-sentry-auth")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut lines = text.lines().skip(1); // the envelope header
    while let Some(item_header) = lines.next() {
        let Ok(item) = serde_json::from_str::<serde_json::Value>(item_header) else {
            continue;
        };
        let Some(payload) = lines.next() else { break };
        if item["type"] == "event"
            && let Ok(event) = serde_json::from_str::<serde_json::Value>(payload)
        {
            events.lock().unwrap_or_else(|e| e.into_inner()).push((
                project.clone(),
                auth.clone(),
                event,
            ));
        }
    }
    StatusCode::OK
}
