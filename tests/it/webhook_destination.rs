//! Destination `webhook`: one POST per record (or per page), signed per the
//! Standard Webhooks specification and verified so by the receiver, the
//! delivery key as `Idempotency-Key` and `webhook-id`, 4xx rejected, 5xx
//! retried; a captured POST replayed late or with another body is refused.

use std::collections::HashSet;

use crate::fakes::webhook::{TOLERANCE, WebhookReceiver};
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
    s.cli = s.cli.clone().with_secret("TEST_HOOK_SECRET", "hook-secret");
    let hook = WebhookReceiver::start_verifying("hook-secret").await?;
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
    assert!(hook.refused().is_empty(), "{:?}", hook.refused());
    let mut keys = HashSet::new();
    for post in &received {
        let key = post.headers["idempotency-key"].to_str()?.to_string();
        assert_eq!(key.len(), 64, "the delivery key in hex");
        assert_eq!(post.headers["webhook-id"].to_str()?, key);
        assert!(!post.headers.contains_key("x-syncward-signature"));
        keys.insert(key);
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
    // A secret in the specification's own format: the key is its base64 part.
    s.cli = s
        .cli
        .clone()
        .with_secret("TEST_HOOK_SECRET", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    let hook = WebhookReceiver::start_verifying("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").await?;
    s.publish_with_destination(5, &destination(&hook.url, true))
        .await?;
    s.run_foreground().await?.ok()?;
    let received = hook.received();
    assert_eq!(received.len(), 3, "pages of 5, 5 and 2");
    assert!(hook.refused().is_empty(), "{:?}", hook.refused());
    // The batch's id is its derived key, as its Idempotency-Key.
    for post in &received {
        assert_eq!(post.headers["webhook-id"], post.headers["idempotency-key"]);
    }
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

/// What the signature buys: a receiver that verifies refuses a captured POST
/// replayed once its timestamp is outside the tolerance, and one whose body
/// (or timestamp) was changed; the untouched POST, in time, passes.
#[tokio::test(flavor = "multi_thread")]
async fn a_replayed_or_tampered_post_is_refused_by_a_verifying_receiver() -> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions {
        rows: 1,
        ..SyncOptions::default()
    })
    .await?;
    s.cli = s.cli.clone().with_secret("TEST_HOOK_SECRET", "hook-secret");
    let hook = WebhookReceiver::start_verifying("hook-secret").await?;
    s.publish_with_destination(5, &destination(&hook.url, false))
        .await?;
    s.run_foreground().await?.ok()?;
    let captured = hook.received().first().cloned();
    let captured = captured.ok_or_else(|| anyhow::anyhow!("nothing was posted"))?;

    // Replayed at once, untouched: within the window, accepted.
    assert_eq!(hook.replay(&captured, &captured.body).await?, 200);

    // The body changed (another address): the signature no longer matches.
    let tampered =
        String::from_utf8(captured.body.to_vec())?.replace("@example.com", "@evil.example");
    assert_ne!(tampered.as_bytes(), &captured.body[..]);
    assert_eq!(hook.replay(&captured, tampered.as_bytes()).await?, 401);

    // A fresh timestamp on the captured signature: no match either.
    let mut fresh = captured.clone();
    let now = chrono::Utc::now().timestamp() + 1;
    fresh
        .headers
        .insert("webhook-timestamp", now.to_string().parse()?);
    assert_eq!(hook.replay(&fresh, &captured.body).await?, 401);

    // The untouched POST replayed later than the tolerance: stale.
    hook.set_clock_ahead(TOLERANCE + std::time::Duration::from_secs(60));
    assert_eq!(hook.replay(&captured, &captured.body).await?, 401);

    let reasons: Vec<String> = hook.refused().into_iter().map(|(_, r)| r).collect();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert_eq!(reasons[0], "no v1 signature matches");
    assert_eq!(reasons[1], "no v1 signature matches");
    assert!(reasons[2].contains("outside the tolerance"), "{reasons:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_401_from_the_webhook_ends_the_run_as_destination_auth_failed() -> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions::default()).await?;
    s.cli = s.cli.clone().with_secret("TEST_HOOK_SECRET", "hook-secret");
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
