//! Alerts: every critical alert is always a log line at ERROR; it goes to
//! Sentry (level fatal, tagged with workspace, sync and kind) and to the alert
//! webhook (JSON signed per the Standard Webhooks specification) when those
//! are configured, and is stored with
//! the outcome of each channel, and by e-mail over SMTP to the operators (plus,
//! for failures that are the customer's, to the workspace's own address from
//! `alerts.workspace_email`). One channel failing never stops another. The
//! channels can be replaced while the daemon runs (SIGHUP).

use std::sync::{Arc, RwLock};
use std::time::Duration;

use secrecy::ExposeSecret;
use serde_json::{Value, json};
use sqlx::PgPool;
use tracing::{error, warn};

use crate::config::AlertSettings;
use crate::outbound::{RetryPolicy, WebhookSigner};

use crate::failure::FailureCode;
use crate::store::alerts::{NewAlert, record_alert};

/// One alert.
#[derive(Debug, Clone)]
pub struct Alert {
    pub kind: &'static str,
    pub workspace: Option<String>,
    pub sync: Option<String>,
    pub run_id: Option<i64>,
    pub message: String,
    pub failure: Option<FailureCode>,
}

/// A Sentry client for `alerts.sentry_dsn`, if set (the DSN was checked
/// when the settings were loaded).
pub fn sentry_client(settings: &AlertSettings) -> Option<Arc<sentry::Client>> {
    let dsn = settings
        .sentry_dsn
        .as_ref()?
        .expose_secret()
        .parse::<sentry::types::Dsn>()
        .ok()?;
    let mut options = sentry::ClientOptions::default();
    options.dsn = Some(dsn);
    options.release = Some(concat!("syncward@", env!("CARGO_PKG_VERSION")).into());
    Some(Arc::new(sentry::Client::from(sentry::apply_defaults(
        options,
    ))))
}

/// Retries of an alert webhook delivery: three tries in all, 500 ms then
/// 1 s apart. The webhook's 429s are not waited out: an alert is not held.
const WEBHOOK_RETRY: RetryPolicy = RetryPolicy {
    retries: 2,
    backoff_base: Duration::from_millis(500),
    backoff_max: Duration::from_secs(1),
    waits: 0,
    max_wait: Duration::ZERO,
};
/// The timeout of each try.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends alerts to every configured channel and records the outcome. Clones
/// share their channels: `reload` (SIGHUP) changes them for every clone.
#[derive(Clone)]
pub struct Alerter {
    store: PgPool,
    /// Swapped whole by `reload`; an alert being delivered keeps the channels
    /// it started with.
    channels: Arc<RwLock<Arc<Channels>>>,
}

/// The configured channels besides the log.
struct Channels {
    webhook: Option<(url::Url, WebhookSigner)>,
    sentry: Option<Arc<sentry::Client>>,
    email: Option<EmailChannel>,
}

/// The SMTP transport, the sender, the operators, and the workspaces' own
/// addresses for customer-owned alerts.
#[derive(Clone)]
struct EmailChannel {
    transport: lettre::AsyncSmtpTransport<lettre::Tokio1Executor>,
    from: String,
    operators: Vec<String>,
    workspaces: std::collections::BTreeMap<String, String>,
}

impl std::fmt::Debug for Alerter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let channels = self.channels();
        f.debug_struct("Alerter")
            .field(
                "webhook",
                &channels
                    .webhook
                    .as_ref()
                    .map(|w| crate::config::redact_url_text(w.0.as_str())),
            )
            .field("sentry", &channels.sentry.is_some())
            .field("email", &channels.email.is_some())
            .finish()
    }
}

impl Channels {
    fn new(settings: &AlertSettings) -> Self {
        // The secret was checked when the settings were loaded; one that
        // still cannot be used is reported once here and the channel left out.
        let webhook = settings
            .webhook_url
            .clone()
            .zip(settings.webhook_secret.as_ref())
            .and_then(|(url, secret)| match WebhookSigner::from_secret(secret) {
                Ok(signer) => Some((url, signer)),
                Err(problem) => {
                    error!(
                        problem,
                        "alerts.webhook_secret cannot be used; webhook alerts are off"
                    );
                    None
                }
            });
        // A client of our own rather than the global hub: alerts are the only
        // events syncward sends, and tests run several alerters in one process.
        // The DSN was checked when the settings were loaded.
        let sentry = sentry_client(settings);
        let email = settings.email.as_ref().and_then(|e| {
            // The URL was checked when the settings were loaded; a transport that
            // cannot be built is reported once here and the channel left out.
            match lettre::AsyncSmtpTransport::<lettre::Tokio1Executor>::from_url(e.smtp_url.expose_secret()) {
                Ok(builder) => Some(EmailChannel {
                    transport: builder.timeout(Some(Duration::from_secs(10))).build(),
                    from: e.from.clone(),
                    operators: e.to.clone(),
                    workspaces: settings.workspace_email.clone(),
                }),
                Err(err) => {
                    error!(error = %err, "alerts.email.smtp_url cannot be used; e-mail alerts are off");
                    None
                }
            }
        });
        Self {
            webhook,
            sentry,
            email,
        }
    }

    fn names(&self) -> Vec<&'static str> {
        let mut names = vec!["log"];
        if self.sentry.is_some() {
            names.push("sentry");
        }
        if self.email.is_some() {
            names.push("email");
        }
        if self.webhook.is_some() {
            names.push("webhook");
        }
        names
    }
}

impl Alerter {
    pub fn new(store: PgPool, settings: &AlertSettings) -> Self {
        Self {
            store,
            channels: Arc::new(RwLock::new(Arc::new(Channels::new(settings)))),
        }
    }

    /// Replaces the channels with those `settings` describe, for this alerter
    /// and every clone of it; alerts already being delivered finish on the old
    /// ones. Returns the channels now in use.
    pub fn reload(&self, settings: &AlertSettings) -> Vec<&'static str> {
        let fresh = Arc::new(Channels::new(settings));
        let names = fresh.names();
        // Poisoned only if a thread panicked while swapping an Arc, which
        // cannot panic: the value inside is whole either way.
        *self.channels.write().unwrap_or_else(|e| e.into_inner()) = fresh;
        names
    }

    /// The channels an alert raised now goes to, `log` first.
    pub fn channel_names(&self) -> Vec<&'static str> {
        self.channels().names()
    }

    fn channels(&self) -> Arc<Channels> {
        // See `reload` on poisoning.
        self.channels
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn store(&self) -> &PgPool {
        &self.store
    }

    /// Raises a critical alert on every channel. Failures are recorded and
    /// logged; they never stop the caller.
    pub async fn raise(&self, alert: &Alert) {
        log_critical(alert);
        self.deliver(alert, "critical").await
    }

    /// A recovery notice: the incident an earlier alert opened is over.
    pub async fn notify_recovery(&self, alert: &Alert) {
        tracing::info!(
            alert.kind = alert.kind,
            workspace = alert.workspace.as_deref().unwrap_or("-"),
            sync = alert.sync.as_deref().unwrap_or("-"),
            "{}",
            alert.message
        );
        self.deliver(alert, "info").await
    }

    async fn deliver(&self, alert: &Alert, severity: &str) {
        let current = self.channels();
        let mut channels = serde_json::Map::new();
        channels.insert("log".into(), json!("sent"));
        if let Some(client) = &current.sentry {
            channels.insert(
                "sentry".into(),
                json!(send_to_sentry(client.clone(), alert, severity).await),
            );
        }
        if let Some(email) = &current.email {
            channels.insert("email".into(), json!(email.send(alert, severity).await));
        }
        if let Some((url, signer)) = &current.webhook {
            let outcome = self.post_webhook(url, signer, alert, severity).await;
            channels.insert("webhook".into(), json!(outcome));
        }
        for (channel, outcome) in &channels {
            // Each channel records "sent…" or "failed: …".
            let sent = outcome.as_str().is_some_and(|o| o.starts_with("sent"));
            metrics::counter!(
                "syncward_alerts_total",
                "channel" => channel.clone(),
                "outcome" => if sent { "sent" } else { "failed" }
            )
            .increment(1);
        }
        store_alert(&self.store, alert, severity, Value::Object(channels)).await
    }

    /// POSTs the alert as JSON (docs/contract.md §3), signed, with a few retries; returns
    /// the outcome to record.
    async fn post_webhook(
        &self,
        url: &url::Url,
        signer: &WebhookSigner,
        alert: &Alert,
        severity: &str,
    ) -> String {
        let body = json!({
            "kind": alert.kind,
            "severity": severity,
            "workspace": alert.workspace,
            "sync": alert.sync,
            "message": crate::logging::mask_addresses(&alert.message),
            "at": chrono::Utc::now().to_rfc3339(),
        })
        .to_string();
        // One id for every try of this alert, so a receiver can drop repeats.
        let id = format!("alert_{}", uuid::Uuid::new_v4().simple());
        let client = match crate::outbound::operator_client() {
            Ok(c) => c,
            Err(e) => return format!("failed: {e}"),
        };
        let mut failures = 0;
        let last = loop {
            // Signed per try: the timestamp is the try's.
            let mut request = client
                .post(url.as_str())
                .timeout(WEBHOOK_TIMEOUT)
                .header("content-type", "application/json");
            for (name, value) in signer.headers(&id, body.as_bytes()) {
                request = request.header(name, value);
            }
            let sent = request.body(body.clone()).send().await;
            let problem = match sent {
                Ok(r) if r.status().is_success() => return "sent".into(),
                Ok(r) => format!("HTTP {}", r.status()),
                // Without the URL: its query may hold a token, and this
                // outcome is stored and shown with the alert.
                Err(e) => e.without_url().to_string(),
            };
            failures += 1;
            match WEBHOOK_RETRY.backoff(failures) {
                Some(backoff) => tokio::time::sleep(backoff).await,
                None => break problem,
            }
        };
        warn!(alert.kind = alert.kind, error = %last, "Alert webhook failed");
        format!("failed after {} tries: {last}", WEBHOOK_RETRY.retries + 1)
    }
}

impl EmailChannel {
    /// Mails the alert; customer-owned failures also go to the workspace's address.
    async fn send(&self, alert: &Alert, severity: &str) -> String {
        use lettre::AsyncTransport;
        let mut to = self.operators.clone();
        let customer_owned = alert
            .failure
            .is_some_and(|c| c.owner() == crate::failure::Owner::Customer);
        if customer_owned
            && let Some(address) = alert
                .workspace
                .as_ref()
                .and_then(|w| self.workspaces.get(w))
        {
            to.push(address.clone());
        }
        let subject = format!(
            "[syncward] {severity}: {} ({})",
            alert.kind,
            alert
                .sync
                .as_deref()
                .or(alert.workspace.as_deref())
                .unwrap_or("syncward")
        );
        let mut body = format!("{}\n\n", crate::logging::mask_addresses(&alert.message));
        body.push_str(&format!("Kind: {}\n", alert.kind));
        if let Some(w) = &alert.workspace {
            body.push_str(&format!("Workspace: {w}\n"));
        }
        if let Some(s) = &alert.sync {
            body.push_str(&format!("Sync: {s}\n"));
        }
        if let Some(code) = alert.failure {
            let context = crate::failure::FailureContext {
                sync_id: alert.sync.clone().unwrap_or_default(),
                paused: alert.kind == "circuit_breaker_tripped",
                ..Default::default()
            };
            body.push_str(&format!(
                "Failure: {code}\nWhat happened: {}\nWhat next: {}\nWhose job: {}\n",
                code.what_happened(),
                code.what_next_for(&context),
                code.owner().as_str()
            ));
        }
        // A Message-ID (made from this host's name): spam filters penalise
        // a message without one.
        let mut builder = lettre::Message::builder().subject(subject).message_id(None);
        match self.from.parse() {
            Ok(from) => builder = builder.from(from),
            Err(e) => return format!("failed: alerts.email.from: {e}"),
        }
        for address in &to {
            match address.parse() {
                Ok(mailbox) => builder = builder.to(mailbox),
                Err(e) => return format!("failed: {address}: {e}"),
            }
        }
        let message = match builder.body(body) {
            Ok(m) => m,
            Err(e) => return format!("failed: {e}"),
        };
        match self.transport.send(message).await {
            Ok(_) => format!("sent to {}", to.join(", ")),
            Err(e) => {
                warn!(alert.kind = alert.kind, error = %e, "Alert e-mail failed");
                format!("failed: {e}")
            }
        }
    }
}

/// Sends the alert as a Sentry event and waits (briefly) for the transport to
/// hand it over.
async fn send_to_sentry(client: Arc<sentry::Client>, alert: &Alert, severity: &str) -> String {
    use sentry::protocol::{Event, Level};
    let mut tags = std::collections::BTreeMap::new();
    tags.insert("kind".to_string(), alert.kind.to_string());
    if let Some(w) = &alert.workspace {
        tags.insert("workspace".to_string(), w.clone());
    }
    if let Some(s) = &alert.sync {
        tags.insert("sync".to_string(), s.clone());
    }
    if let Some(code) = alert.failure {
        tags.insert("failure_code".to_string(), code.as_str().to_string());
        tags.insert("owner".to_string(), code.owner().as_str().to_string());
    }
    let event = Event {
        message: Some(crate::logging::mask_addresses(&alert.message).into_owned()),
        level: if severity == "critical" {
            Level::Fatal
        } else {
            Level::Info
        },
        tags,
        ..Default::default()
    };
    let hub = sentry::Hub::new(Some(client.clone()), Arc::new(sentry::Scope::default()));
    hub.capture_event(event);
    // The transport sends from its own thread; flushing blocks, so off the runtime.
    match tokio::task::spawn_blocking(move || client.flush(Some(Duration::from_secs(10)))).await {
        Ok(true) => "sent".into(),
        Ok(false) => "failed: not delivered within 10s".into(),
        Err(e) => format!("failed: {e}"),
    }
}

async fn store_alert(store: &PgPool, alert: &Alert, severity: &str, channels: Value) {
    let stored = NewAlert {
        kind: alert.kind,
        severity,
        workspace_id: alert.workspace.as_deref(),
        sync_id: alert.sync.as_deref(),
        run_id: alert.run_id,
        message: &alert.message,
        failure_code: alert.failure.map(|c| c.as_str()),
        owner: alert.failure.map(|c| c.owner().as_str()),
        channels,
    };
    if let Err(e) = record_alert(store, &stored).await {
        error!(error = %e, "Storing an alert failed");
    }
}

fn log_critical(alert: &Alert) {
    error!(
        alert.kind = alert.kind,
        workspace = alert.workspace.as_deref().unwrap_or("-"),
        sync = alert.sync.as_deref().unwrap_or("-"),
        failure_code = alert.failure.map(|c| c.as_str()).unwrap_or("-"),
        owner = alert.failure.map(|c| c.owner().as_str()).unwrap_or("-"),
        "{}",
        alert.message
    );
}
