//! Alerts: every critical alert is always a log line at ERROR, and is stored
//! with the outcome of each channel. (Sentry, webhook and e-mail channels are
//! the guards issue's next step; until then the log is the only channel.)

use serde_json::json;
use sqlx::PgPool;
use tracing::error;

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

/// Raises a critical alert: logs it, then stores it. A storage failure is
/// logged and does not stop the caller.
pub async fn raise(store: &PgPool, alert: &Alert) {
    store_alert(store, alert, "critical").await
}

/// A recovery notice: the incident an earlier alert opened is over.
pub async fn notify_recovery(store: &PgPool, alert: &Alert) {
    tracing::info!(
        alert.kind = alert.kind,
        workspace = alert.workspace.as_deref().unwrap_or("-"),
        sync = alert.sync.as_deref().unwrap_or("-"),
        "{}",
        alert.message
    );
    store_alert(store, alert, "info").await
}

async fn store_alert(store: &PgPool, alert: &Alert, severity: &str) {
    if severity == "critical" {
        log_critical(alert);
    }
    let stored = NewAlert {
        kind: alert.kind,
        severity,
        workspace_id: alert.workspace.as_deref(),
        sync_id: alert.sync.as_deref(),
        run_id: alert.run_id,
        message: &alert.message,
        failure_code: alert.failure.map(|c| c.as_str()),
        owner: alert.failure.map(|c| c.owner().as_str()),
        channels: json!({ "log": "sent" }),
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
