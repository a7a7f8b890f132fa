//! Delivers the `[notify]` events of finished runs (`store::notifications`):
//! signed as the alerts are (Standard Webhooks; one `webhook-id` per event,
//! the same on every retry), through the outbound policy, retried with
//! `retry.backoff_base` doubling up to `retry.backoff_max`. A run never
//! waits for them: they are written when it ends and sent from here.

use std::time::Duration;

use secrecy::SecretString;
use tracing::{info, warn};

use crate::daemon_shared::Daemon;
use crate::outbound::policy;
use crate::outbound::{WebhookSigner, describe_error, http_client};
use crate::store::notifications::{self, DueEvent};
use crate::store::syncs;

/// Events tried in one sweep.
const PER_SWEEP: i64 = 50;

/// How long an event being tried is kept from other daemons.
const HOLD: Duration = Duration::from_secs(60);

/// Longest wait for a receiver's answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Tries every due event once; returns how many arrived.
pub async fn deliver_due(daemon: &Daemon) -> sqlx::Result<usize> {
    let store = &daemon.store;
    let mut arrived = 0;
    for event in notifications::take_due(store, PER_SWEEP, HOLD).await? {
        match send(daemon, &event).await {
            Ok(()) => {
                notifications::delivered(store, event.id).await?;
                arrived += 1;
            }
            Err(why) => {
                let wait = backoff(daemon, event.attempts);
                warn!(
                    run.id = event.run_id,
                    sync.id = %event.sync_id,
                    attempt = event.attempts,
                    retry_in_s = wait.as_secs(),
                    error = %why,
                    "A run's [notify] event was not delivered; it is tried again"
                );
                notifications::failed(store, event.id, &why, wait).await?;
            }
        }
    }
    Ok(arrived)
}

/// `retry.backoff_base` doubled at each attempt, at most `retry.backoff_max`.
fn backoff(daemon: &Daemon, attempts: i32) -> Duration {
    let retry = &daemon.settings.retry;
    let doublings = u32::try_from(attempts.saturating_sub(1))
        .unwrap_or(0)
        .min(20);
    retry
        .backoff_base
        .saturating_mul(2u32.saturating_pow(doublings))
        .min(retry.backoff_max)
}

/// One attempt: the event, signed with the sync's `notify.secret_env`,
/// POSTed to its `notify.url`; Err with why it did not arrive.
async fn send(daemon: &Daemon, event: &DueEvent) -> Result<(), String> {
    let sync = syncs::get_sync(&daemon.store, &event.sync_id)
        .await
        .map_err(|e| format!("syncward's database: {e}"))?
        .ok_or("the sync is gone")?;
    let definition = sync.definition().map_err(|e| e.to_string())?;
    let Some(notify) = definition.notify else {
        info!(run.id = event.run_id, sync.id = %event.sync_id, "The sync no longer has a [notify] table; its event is dropped");
        return Ok(());
    };
    let secret = daemon
        .settings
        .secrets
        .store()
        .workspace(&definition.workspace)
        .lookup(&notify.secret_env)?;
    let signer = WebhookSigner::from_secret(&SecretString::from(secret))
        .map_err(|why| format!("notify.secret_env {why}"))?;
    policy::check_connector_url(&notify.url, "notify.url")?;
    let body = serde_json::to_vec(&event.event.0).map_err(|e| e.to_string())?;
    let id = format!("run-{}-event-{}", event.run_id, event.id);
    let client = http_client(&notify.url).map_err(|e| e.to_string())?;
    let mut request = client
        .post(notify.url.clone())
        .timeout(TIMEOUT)
        .header(reqwest::header::CONTENT_TYPE, "application/json");
    for (name, value) in signer.headers(&id, &body) {
        request = request.header(name, value);
    }
    let response = request.body(body).send().await.map_err(describe_error)?;
    match response.status() {
        status if status.is_success() => Ok(()),
        status => Err(format!("the receiver answered HTTP {}", status.as_u16())),
    }
}
