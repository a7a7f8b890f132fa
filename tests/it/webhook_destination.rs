//! Destination `webhook`: one signed POST per record (or per page), the
//! delivery key as `Idempotency-Key`, 4xx rejected, 5xx retried.

use std::collections::HashSet;

use syncward::destination::webhook::SIGNATURE_HEADER;

use crate::fakes::webhook::WebhookReceiver;
use crate::helpers::scenario::{Scenario, SyncOptions};

fn destination(url: &str, batch: bool) -> String {
    format!(
        "kind = \"webhook\"\nurl = \"{url}\"\nsecret_env = \"TEST_HOOK_SECRET\"\nbatch = {batch}\ntimeout = \"2s\""
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn each_record_is_posted_once_signed_with_its_delivery_key() -> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions {
        rows: 12,
        ..SyncOptions::default()
    })
    .await?;
    s.cli = s.cli.clone().with_env("TEST_HOOK_SECRET", "hook-secret");
    let hook = WebhookReceiver::start().await?;
    // The first POST gets a 503 (retried), the second a 422 (that record is rejected).
    hook.answer_with([503, 422]);
    s.publish_with_destination(5, &destination(&hook.url, false))
        .await?;
    let out = s.run_foreground().await?.ok()?;
    assert!(
        out.stdout
            .contains("12 read, 11 written, 0 replayed, 1 rejected"),
        "{}",
        out.stdout
    );

    let received = hook.received();
    assert_eq!(received.len(), 13, "12 records and one retry");
    let mut keys = HashSet::new();
    for post in &received {
        let key = post.headers["idempotency-key"].to_str()?.to_string();
        assert_eq!(key.len(), 64, "the delivery key in hex");
        keys.insert(key);
        let expected = syncward::destination::webhook::sign(b"hook-secret", &post.body);
        assert_eq!(post.headers[SIGNATURE_HEADER].to_str()?, expected);
        let body: serde_json::Value = serde_json::from_slice(&post.body)?;
        assert!(
            body["email"]
                .as_str()
                .is_some_and(|e| e.ends_with("@example.com"))
        );
        assert!(body["attributes"]["FIRSTNAME"].is_string());
    }
    assert_eq!(keys.len(), 12, "the retry carried the same key");
    let rejected: String = sqlx::query_scalar("SELECT code FROM rejected_records")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(rejected, "http_422");

    // A replay of the delivered range posts nothing; the rejected record is tried again.
    sqlx::query("UPDATE sync_cursors SET cursor = NULL")
        .execute(&s.db.pool)
        .await?;
    let out = s.run_foreground().await?.ok()?;
    assert!(
        out.stdout.contains("12 read, 1 written, 11 replayed"),
        "{}",
        out.stdout
    );
    assert_eq!(hook.received().len(), 14);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn batch_mode_posts_one_array_per_page() -> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions {
        rows: 12,
        ..SyncOptions::default()
    })
    .await?;
    s.cli = s.cli.clone().with_env("TEST_HOOK_SECRET", "hook-secret");
    let hook = WebhookReceiver::start().await?;
    s.publish_with_destination(5, &destination(&hook.url, true))
        .await?;
    s.run_foreground().await?.ok()?;
    let received = hook.received();
    assert_eq!(received.len(), 3, "pages of 5, 5 and 2");
    let sizes: Vec<usize> = received
        .iter()
        .map(|p| {
            serde_json::from_slice::<Vec<serde_json::Value>>(&p.body)
                .map(|v| v.len())
                .unwrap_or(0)
        })
        .collect();
    assert_eq!(sizes, [5, 5, 2]);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_401_from_the_webhook_ends_the_run_as_destination_auth_failed() -> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions::default()).await?;
    s.cli = s.cli.clone().with_env("TEST_HOOK_SECRET", "hook-secret");
    let hook = WebhookReceiver::start().await?;
    hook.answer_with([401; 8]);
    s.publish_with_destination(5, &destination(&hook.url, true))
        .await?;
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 1);
    assert_eq!(
        s.last_run().await?["failure_code"],
        "destination_auth_failed"
    );
    Ok(())
}
