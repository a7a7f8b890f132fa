//! Alert channels: the signed webhook (verified by the receiver per the
//! Standard Webhooks specification), retried, recorded per channel.

use std::time::Duration;

use crate::fakes::webhook::WebhookReceiver;
use crate::helpers::scenario::{Scenario, SyncOptions};

async fn silent_workspace(hook: &WebhookReceiver) -> anyhow::Result<Scenario> {
    let mut s = Scenario::new(SyncOptions::default()).await?;
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__ALERTS__WEBHOOK_URL", &hook.url)
        .with_env(
            "SYNCWARD__ALERTS__WEBHOOK_SECRET",
            "alert-signing-secret-of-32-bytes",
        );
    sqlx::query("UPDATE syncs SET activated_at = now() - interval '25 hours'")
        .execute(&s.db.pool)
        .await?;
    Ok(s)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_alert_webhook_gets_signed_json_and_a_failed_post_is_retried() -> anyhow::Result<()> {
    let hook = WebhookReceiver::start_verifying("alert-signing-secret-of-32-bytes").await?;
    hook.answer_with([500]);
    let s = silent_workspace(&hook).await?;
    s.cli.run(&["deadman", "check"]).await?.ok()?;
    let received = hook.received();
    // Two alerts (workspace and sync); the first POST failed once and was retried.
    assert_eq!(received.len(), 3, "{received:?}");
    assert!(hook.refused().is_empty(), "{:?}", hook.refused());
    // The retry carried its alert's id; the two alerts have their own.
    let ids: std::collections::HashSet<&str> = received
        .iter()
        .map(|p| p.headers["webhook-id"].to_str().unwrap_or_default())
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert!(
        received
            .iter()
            .all(|p| !p.headers.contains_key("x-syncward-signature"))
    );
    for post in &received {
        let body: serde_json::Value = serde_json::from_slice(&post.body)?;
        for field in ["kind", "severity", "workspace", "sync", "message", "at"] {
            assert!(body.get(field).is_some(), "{field} missing from {body}");
        }
        assert_eq!(body["kind"], "deadman_silence");
        assert_eq!(body["severity"], "critical");
        assert_eq!(body["workspace"], "acme");
    }
    let channels: Vec<serde_json::Value> =
        sqlx::query_scalar("SELECT channels FROM alerts ORDER BY id")
            .fetch_all(&s.db.pool)
            .await?;
    assert_eq!(channels.len(), 2);
    assert!(
        channels
            .iter()
            .all(|c| c["webhook"] == "sent" && c["log"] == "sent"),
        "{channels:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_that_keeps_failing_is_recorded_and_does_not_stop_the_alert() -> anyhow::Result<()>
{
    let hook = WebhookReceiver::start().await?;
    hook.answer_with([503; 20]);
    let s = silent_workspace(&hook).await?;
    s.cli.run(&["deadman", "check"]).await?.ok()?;
    let channels: Vec<serde_json::Value> =
        sqlx::query_scalar("SELECT channels FROM alerts ORDER BY id")
            .fetch_all(&s.db.pool)
            .await?;
    assert_eq!(
        channels.len(),
        2,
        "both alerts are stored whatever the webhook does"
    );
    for c in channels {
        assert_eq!(c["log"], "sent");
        assert!(
            c["webhook"]
                .as_str()
                .is_some_and(|w| w.starts_with("failed after 3 tries: HTTP 503")),
            "{c}"
        );
    }
    assert_eq!(hook.received().len(), 6);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stored_webhook_failure_never_holds_the_urls_token() -> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions::default()).await?;
    s.cli = s
        .cli
        .clone()
        .with_env(
            "SYNCWARD__ALERTS__WEBHOOK_URL",
            "http://127.0.0.1:1/hook?token=SECRET",
        )
        .with_env(
            "SYNCWARD__ALERTS__WEBHOOK_SECRET",
            "alert-signing-secret-of-32-bytes",
        );
    sqlx::query("UPDATE syncs SET activated_at = now() - interval '25 hours'")
        .execute(&s.db.pool)
        .await?;
    let out = s.cli.run(&["deadman", "check"]).await?.ok()?;
    assert!(!out.stdout.contains("SECRET") && !out.stderr.contains("SECRET"));
    let channels: Vec<serde_json::Value> =
        sqlx::query_scalar("SELECT channels FROM alerts ORDER BY id")
            .fetch_all(&s.db.pool)
            .await?;
    assert_eq!(channels.len(), 2);
    for c in channels {
        let webhook = c["webhook"].as_str().unwrap_or_default();
        assert!(webhook.starts_with("failed after 3 tries"), "{c}");
        assert!(!c.to_string().contains("SECRET"), "{c}");
    }
    // Asked again, for machines: the same incidents, still silent, no new alert.
    let again = s
        .cli
        .run(&["deadman", "check", "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(again["alerted"], serde_json::json!([]), "{again}");
    assert_eq!(
        again["still_silent"].as_array().map(Vec::len),
        Some(2),
        "{again}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn sentry_receives_a_fatal_event_tagged_with_workspace_sync_and_kind() -> anyhow::Result<()> {
    let sentry = crate::fakes::sentry::SentryFake::start().await?;
    let mut s = Scenario::new(SyncOptions::default()).await?;
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__ALERTS__SENTRY_DSN", &sentry.dsn);
    sqlx::query("UPDATE syncs SET activated_at = now() - interval '25 hours'")
        .execute(&s.db.pool)
        .await?;
    s.cli.run(&["deadman", "check"]).await?.ok()?;
    let events = sentry.events();
    assert_eq!(events.len(), 2, "{events:?}");
    for (project, auth, event) in &events {
        assert_eq!(project, "42");
        assert!(
            auth.as_deref()
                .is_some_and(|a| a.contains("sentry_key=fakepublickey")),
            "{auth:?}"
        );
        assert_eq!(event["level"], "fatal");
        assert_eq!(event["tags"]["kind"], "deadman_silence");
        assert_eq!(event["tags"]["workspace"], "acme");
        assert!(
            event["message"]
                .as_str()
                .is_some_and(|m| m.contains("no runs were recorded at all")),
            "{event}"
        );
    }
    assert!(
        events
            .iter()
            .any(|(_, _, e)| e["tags"]["sync"] == "acme-contacts")
    );
    let channels: Vec<serde_json::Value> =
        sqlx::query_scalar("SELECT channels FROM alerts ORDER BY id")
            .fetch_all(&s.db.pool)
            .await?;
    assert!(
        channels.iter().all(|c| c["sentry"] == "sent"),
        "{channels:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn alerts_are_mailed_to_operators_and_customer_owned_ones_to_the_workspace_too()
-> anyhow::Result<()> {
    let smtp = crate::fakes::smtp::SmtpSink::start().await?;
    let mut s = Scenario::new(SyncOptions::default()).await?;
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__ALERTS__EMAIL__SMTP_URL", &smtp.url)
        .with_env("SYNCWARD__ALERTS__EMAIL__FROM", "syncward@ops.example")
        .with_env("SYNCWARD__ALERTS__EMAIL__TO", "oncall@ops.example")
        .with_env(
            "SYNCWARD__ALERTS__WORKSPACE_EMAIL__ACME",
            "owner@acme.example",
        );
    // The breaker trips at the first failure; the failure (a missing table) is the customer's.
    let path = s.dir.path().join("sync.toml");
    let text = std::fs::read_to_string(&path)?.replace(
        "workspace = \"acme\"",
        "workspace = \"acme\"\nbreaker_failures = 1",
    );
    std::fs::write(&path, text)?;
    s.cli
        .run(&["sync", "apply", path.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    sqlx::raw_sql("ALTER TABLE contacts RENAME TO contacts_gone")
        .execute(&s.db.pool)
        .await?;
    assert_eq!(s.run_foreground().await?.code, 1);

    let mails = smtp.mails();
    assert_eq!(mails.len(), 1, "{mails:?}");
    let mail = &mails[0];
    assert_eq!(mail.to, ["oncall@ops.example", "owner@acme.example"]);
    assert_eq!(mail.from, "<syncward@ops.example>");
    assert!(
        mail.data.contains("circuit_breaker_tripped"),
        "{}",
        mail.data
    );
    assert!(mail.data.contains("Sync: acme-contacts"), "{}", mail.data);
    assert!(
        mail.data.contains("What next: Fix the sync's query"),
        "{}",
        mail.data
    );
    assert!(mail.data.contains("Whose job: customer"), "{}", mail.data);
    // Spam filters penalise a message without one.
    assert!(mail.data.contains("Message-ID: <"), "{}", mail.data);

    // A silence is the operators' alone.
    sqlx::query("UPDATE syncs SET activated_at = now() - interval '25 hours', status = 'active', paused_reason = NULL")
        .execute(&s.db.pool)
        .await?;
    sqlx::query("UPDATE runs SET finished_at = now() - interval '25 hours'")
        .execute(&s.db.pool)
        .await?;
    s.cli.run(&["deadman", "check"]).await?.ok()?;
    let mails = smtp.mails();
    let silence: Vec<_> = mails
        .iter()
        .filter(|m| m.data.contains("deadman_silence"))
        .collect();
    assert_eq!(silence.len(), 2, "{mails:?}");
    assert!(silence.iter().all(|m| m.to == ["oncall@ops.example"]));
    // Long body lines arrive quoted-printable, folded with soft breaks.
    let unfold = |data: &str| data.replace("=\n", "");
    assert!(
        silence
            .iter()
            .any(|m| unfold(&m.data).contains("no runs were recorded at all")
                && unfold(&m.data).contains("Next:")),
        "{silence:?}"
    );
    let channels: Vec<serde_json::Value> =
        sqlx::query_scalar("SELECT channels FROM alerts ORDER BY id")
            .fetch_all(&s.db.pool)
            .await?;
    assert!(
        channels.iter().all(|c| c["email"]
            .as_str()
            .is_some_and(|e| e.starts_with("sent to"))),
        "{channels:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_webhook_does_not_block_the_email() -> anyhow::Result<()> {
    let smtp = crate::fakes::smtp::SmtpSink::start().await?;
    let hook = WebhookReceiver::start().await?;
    hook.answer_with([500; 20]);
    let mut s = silent_workspace(&hook).await?;
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__ALERTS__EMAIL__SMTP_URL", &smtp.url)
        .with_env("SYNCWARD__ALERTS__EMAIL__FROM", "syncward@ops.example")
        .with_env("SYNCWARD__ALERTS__EMAIL__TO", "oncall@ops.example");
    s.cli.run(&["deadman", "check"]).await?.ok()?;
    assert_eq!(
        smtp.mails().len(),
        2,
        "both silences were mailed although the webhook kept failing"
    );
    let channels: Vec<serde_json::Value> =
        sqlx::query_scalar("SELECT channels FROM alerts ORDER BY id")
            .fetch_all(&s.db.pool)
            .await?;
    for c in channels {
        assert!(
            c["webhook"]
                .as_str()
                .is_some_and(|w| w.starts_with("failed")),
            "{c}"
        );
        assert!(
            c["email"]
                .as_str()
                .is_some_and(|e| e.starts_with("sent to")),
            "{c}"
        );
    }
    Ok(())
}

/// The daemon reports to Sentry beyond alerts: an ERROR log line (here an API
/// request whose store query fails) reaches Sentry as an event, with no
/// secret in it. (Alert log lines are left out of this path: alerts reach
/// Sentry through their own channel, once.)
#[tokio::test(flavor = "multi_thread")]
async fn the_daemons_error_log_lines_reach_sentry_through_its_own_hub_without_secrets()
-> anyhow::Result<()> {
    let sentry = crate::fakes::sentry::SentryFake::start().await?;
    let token = "a-token-of-at-least-thirty-two-characters";
    let s = Scenario::new(SyncOptions::default()).await?;
    let cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__ALERTS__SENTRY_DSN", &sentry.dsn)
        .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", token);
    let mut daemon = crate::helpers::daemon::DaemonProcess::spawn(&cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);
    // The store loses a table the API reads: an internal error, logged at ERROR.
    sqlx::raw_sql("ALTER TABLE deadman_incidents RENAME TO deadman_incidents_gone")
        .execute(&s.db.pool)
        .await?;
    crate::helpers::install_crypto();
    let status = reqwest::Client::new()
        .get(format!("{base}/api/syncs"))
        .bearer_auth(token)
        .send()
        .await?
        .status();
    assert_eq!(status, 500);
    daemon
        .eventually(
            Duration::from_secs(20),
            "the ERROR event at Sentry",
            || async {
                // An error event (Sentry's default level, left out of the JSON).
                Ok(sentry.events().iter().any(|(_, _, e)| {
                    e["message"] == "API request failed"
                        && e["logger"] == "syncward::http::api"
                        && e["level"].as_str().unwrap_or("error") == "error"
                }))
            },
        )
        .await?;
    sqlx::raw_sql("ALTER TABLE deadman_incidents_gone RENAME TO deadman_incidents")
        .execute(&s.db.pool)
        .await?;
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    // No secret in what Sentry got.
    let all: String = sentry
        .events()
        .iter()
        .map(|(_, _, e)| e.to_string())
        .collect();
    assert!(!all.contains(token), "the admin token reached Sentry");
    Ok(())
}

/// A run that panics (a connector's bug) fails that run, not the worker, and
/// reaches Sentry as an error event tagged with its run and sync. Driven in
/// this process: the daemon's logging and Sentry hub around the worker's own
/// panic guard, with a run future that panics.
#[tokio::test(flavor = "multi_thread")]
async fn a_panicking_run_reaches_sentry_tagged_with_its_run_and_sync() -> anyhow::Result<()> {
    use crate::helpers::scenario::SYNC_ID;
    use syncward::store::runs::{Executor, create_claimed_run};

    let sentry = crate::fakes::sentry::SentryFake::start().await?;
    let s = Scenario::new(SyncOptions::default()).await?;
    let executor = Executor {
        worker_id: "panic-test".into(),
        boot_id: uuid::Uuid::new_v4(),
    };
    let run = create_claimed_run(
        &s.db.pool,
        SYNC_ID,
        syncward::states::RunTrigger::Manual,
        5,
        &executor,
    )
    .await?;
    syncward::logging::init(
        &syncward::config::LogSettings::default(),
        syncward::logging::Audience::Daemon,
    )?;
    let alerts = syncward::config::AlertSettings {
        sentry_dsn: Some(sentry.dsn.clone().into()),
        ..Default::default()
    };
    let client = syncward::alerts::sentry_client(&alerts)
        .ok_or_else(|| anyhow::anyhow!("the fake's DSN is a DSN"))?;
    syncward::logging::send_errors_to_sentry(client.clone());

    let outcome = syncward::worker::catching_panic(&run, async {
        panic!("a connector bug");
    })
    .await;
    assert_eq!(outcome.err().as_deref(), Some("a connector bug"));
    assert!(
        client.flush(Some(Duration::from_secs(10))),
        "the transport sent it"
    );
    let events = sentry.events();
    let event = events
        .iter()
        .map(|(_, _, e)| e)
        .find(|e| e["message"] == "Run panicked")
        .ok_or_else(|| anyhow::anyhow!("no panic event at Sentry: {events:?}"))?;
    assert_eq!(event["tags"]["run_id"], run.id.to_string(), "{event}");
    assert_eq!(event["tags"]["sync_id"], SYNC_ID, "{event}");
    Ok(())
}
