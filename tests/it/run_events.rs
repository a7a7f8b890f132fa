//! Run events (`[notify]`): a finished run is announced to the job that
//! follows the sync with one signed event (Standard Webhooks, checked by a
//! receiver written from the specification), delivered at least once by the
//! daemon's sweeper through a receiver that answers 500 twice, and never
//! holding the run up.

use std::time::Duration;

use crate::fakes::brevo::Fault;
use crate::fakes::webhook::WebhookReceiver;
use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};
use crate::helpers::{TestDb, TestRedis};

const NOTIFY_SECRET: &str = "notify-secret-of-at-least-24-bytes";

#[tokio::test(flavor = "multi_thread")]
async fn a_finished_run_is_announced_once_signed_past_a_receiver_that_answers_500_twice()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let hook = WebhookReceiver::start_verifying(NOTIFY_SECRET).await?;
    hook.answer_with([500, 500]);
    let text = format!(
        "{}\n[notify]\nurl = \"{}\"\nsecret_env = \"NOTIFY_SECRET\"\n",
        s.sync_file(10, &s.brevo_destination(&SyncOptions::default())),
        hook.url
    );
    let cli = s
        .cli
        .clone()
        .with_secret("NOTIFY_SECRET", NOTIFY_SECRET)
        .with_env("SYNCWARD__SWEEPER__EVERY", "1s")
        .with_env("SYNCWARD__RETRY__BACKOFF_BASE", "1s");
    s.apply_text("notify.toml", &text).await?.ok()?;

    // The run ends at once: its event waits for a daemon to deliver it.
    let out = cli
        .run(&["sync", "run", SYNC_ID, "--foreground"])
        .await?
        .ok()?;
    assert!(out.stdout.contains("succeeded"), "{}", out.stdout);
    assert!(
        hook.received().is_empty(),
        "the run waited for its receiver"
    );
    let run = s.last_run().await?;

    let daemon = DaemonProcess::spawn(&cli).await?;
    daemon
        .eventually(Duration::from_secs(60), "the event's third attempt", || {
            let hook = &hook;
            async move { Ok(hook.received().len() >= 3) }
        })
        .await?;
    // Delivered: no attempt after the 200.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let posts = hook.received();
    assert_eq!(posts.len(), 3, "attempts after the event arrived");
    assert!(hook.refused().is_empty(), "{:?}", hook.refused());
    let ids: Vec<&str> = posts
        .iter()
        .map(|p| p.headers["webhook-id"].to_str().unwrap_or_default())
        .collect();
    assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
    let event: serde_json::Value = serde_json::from_slice(&posts[2].body)?;
    assert_eq!(event["type"], "run.succeeded", "{event}");
    let data = &event["data"];
    assert_eq!(data["sync"], SYNC_ID, "{event}");
    assert_eq!(data["run_id"], run["id"], "{event}");
    assert_eq!(data["counts"]["read"], 30, "{event}");
    assert_eq!(data["counts"]["written"], 30, "{event}");
    assert!(
        data["failure_code"].is_null() && data["owner"].is_null(),
        "{event}"
    );
    assert!(data["duration_s"].as_f64().is_some(), "{event}");
    let (attempts, delivered): (i32, bool) = sqlx::query_as(
        "SELECT attempts, delivered_at IS NOT NULL FROM run_notifications WHERE run_id = $1",
    )
    .bind(run["id"].as_i64().unwrap_or_default())
    .fetch_one(&s.db.pool)
    .await?;
    assert_eq!((attempts, delivered), (3, true));

    // A failed run is announced with its code and whose job it is.
    sqlx::raw_sql(
        "INSERT INTO contacts (id, email, first_name)
         SELECT i, 'new' || i || '@example.com', 'New' || i FROM generate_series(31, 35) i",
    )
    .execute(&s.db.pool)
    .await?;
    s.fake.set_fault_always(Some(Fault::Unauthorized));
    let failed = cli.run(&["sync", "run", SYNC_ID, "--foreground"]).await?;
    assert_ne!(failed.code, 0, "{failed:?}");
    daemon
        .eventually(Duration::from_secs(30), "the failed run's event", || {
            let hook = &hook;
            async move { Ok(hook.received().len() >= 4) }
        })
        .await?;
    let event: serde_json::Value = serde_json::from_slice(&hook.received()[3].body)?;
    assert_eq!(event["type"], "run.failed", "{event}");
    assert_eq!(
        event["data"]["failure_code"], "destination_auth_failed",
        "{event}"
    );
    assert_eq!(event["data"]["owner"], "customer", "{event}");
    Ok(())
}

/// A sync file cannot aim its events at an address the outbound policy
/// forbids (the cloud metadata service): `sync apply` refuses it in one
/// line naming `notify.url`, and nothing is published.
#[tokio::test(flavor = "multi_thread")]
async fn a_notify_url_at_the_metadata_service_is_refused_at_apply() -> anyhow::Result<()> {
    let s = Scenario::unpublished(TestDb::new().await?, TestRedis::new().await?, 30).await?;
    let text = format!(
        "{}\n[notify]\nurl = \"http://169.254.169.254/latest/meta-data\"\nsecret_env = \"NOTIFY_SECRET\"\n",
        s.sync_file(10, &s.brevo_destination(&SyncOptions::default())),
    );
    // The secret is there: only the address is wrong.
    let _ = s.cli.clone().with_secret("NOTIFY_SECRET", NOTIFY_SECRET);
    let out = s.apply_text("hostile.toml", &text).await?;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("notify.url") && out.stderr.trim().lines().count() == 1,
        "{}",
        out.stderr
    );
    let published: i64 = sqlx::query_scalar("SELECT count(*) FROM syncs")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(published, 0);
    Ok(())
}
