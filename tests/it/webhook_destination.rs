//! Destination `webhook`: one POST per record (or per page), signed per the
//! Standard Webhooks specification and verified so by the receiver, the
//! delivery key as `Idempotency-Key` and `webhook-id`; answers judged by what
//! they mean (400/413/422 reject the record, 410 pauses the sync, the rest of
//! the non-2xx are outages); a captured POST replayed late or with another
//! body is refused; a signing key under the specification's 24 bytes is
//! refused at apply.

use std::collections::HashSet;

use crate::fakes::webhook::{TOLERANCE, WebhookReceiver};
use crate::helpers::scenario::{Scenario, SyncOptions};

/// A signing secret of the specification's minimum length or more.
const HOOK_SECRET: &str = "hook-secret-of-at-least-24-bytes";

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
    s.cli = s.cli.clone().with_secret("TEST_HOOK_SECRET", HOOK_SECRET);
    let hook = WebhookReceiver::start_verifying(HOOK_SECRET).await?;
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
    s.cli = s.cli.clone().with_secret("TEST_HOOK_SECRET", HOOK_SECRET);
    let hook = WebhookReceiver::start_verifying(HOOK_SECRET).await?;
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
    s.cli = s.cli.clone().with_secret("TEST_HOOK_SECRET", HOOK_SECRET);
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

/// A receiver mid-deploy: every other POST answered 404 for a while, then
/// healthy. Every record arrives; none is rejected, and no run fails for it
/// beyond what the in-run retries absorb.
#[tokio::test(flavor = "multi_thread")]
async fn a_receiver_that_flaps_during_a_deploy_loses_no_record() -> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions {
        rows: 40,
        ..SyncOptions::default()
    })
    .await?;
    s.cli = s.cli.clone().with_secret("TEST_HOOK_SECRET", HOOK_SECRET);
    let hook = WebhookReceiver::start_verifying(HOOK_SECRET).await?;
    s.publish_with_destination(10, &destination(&hook.url, false))
        .await?;
    hook.flap(404, std::time::Duration::from_secs(3));
    // Runs as the schedule would make them, until one succeeds.
    let mut failures = Vec::new();
    for _ in 0..5 {
        let out = s.run_foreground().await?;
        if out.code == 0 {
            break;
        }
        failures.push(s.last_run().await?["failure_code"].clone());
    }
    assert!(
        failures.iter().all(|c| c == "destination_unavailable"),
        "{failures:?}"
    );
    assert_eq!(s.last_run().await?["status"], "succeeded");
    let arrived: HashSet<String> = hook.received().iter().flat_map(|p| p.records()).collect();
    assert_eq!(arrived.len(), 40, "every record arrived");
    assert!(hook.refused().is_empty(), "{:?}", hook.refused());
    let rejected: i64 = sqlx::query_scalar("SELECT count(*) FROM rejected_records")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(rejected, 0, "nothing rejected");
    Ok(())
}

/// Each answer that means an outage (5xx, 404, 408, 409, 425) on every try:
/// the run fails as `destination_unavailable` after its in-run retries,
/// nothing is rejected, the attempts are given back, and the next run, with
/// the receiver healthy, delivers every record.
#[tokio::test(flavor = "multi_thread")]
async fn answers_that_mean_an_outage_cost_time_never_a_record() -> anyhow::Result<()> {
    let outages = [500u16, 503, 404, 408, 409, 425];
    let checks = outages.map(|status| async move {
        let mut s = Scenario::new(SyncOptions {
            rows: 2,
            ..SyncOptions::default()
        })
        .await?;
        s.cli = s.cli.clone().with_secret("TEST_HOOK_SECRET", HOOK_SECRET);
        let hook = WebhookReceiver::start_verifying(HOOK_SECRET).await?;
        s.publish_with_destination(5, &destination(&hook.url, true))
            .await?;
        // The first try and the four retries.
        hook.answer_with([status; 5]);
        let out = s.run_foreground().await?;
        anyhow::ensure!(
            out.code == 1,
            "HTTP {status}: exit {}: {}",
            out.code,
            out.stderr
        );
        let run = s.last_run().await?;
        anyhow::ensure!(
            run["failure_code"] == "destination_unavailable",
            "HTTP {status}: {run}"
        );
        anyhow::ensure!(
            hook.received().len() == 5,
            "HTTP {status}: retried within the run"
        );
        let (rejected, attempts): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM rejected_records),
                    (SELECT coalesce(sum(attempts), 0)::bigint FROM deliveries)
                  + (SELECT coalesce(sum(attempts), 0)::bigint FROM delivery_batches)",
        )
        .fetch_one(&s.db.pool)
        .await?;
        anyhow::ensure!(
            (rejected, attempts) == (0, 0),
            "HTTP {status}: {rejected} rejected, {attempts} attempts kept"
        );
        let out = s.run_foreground().await?;
        anyhow::ensure!(out.code == 0, "HTTP {status}: the next run: {}", out.stderr);
        let arrived: HashSet<String> = hook.received().iter().flat_map(|p| p.records()).collect();
        anyhow::ensure!(arrived.len() == 2, "HTTP {status}: {arrived:?}");
        anyhow::Ok(())
    });
    for result in futures::future::join_all(checks).await {
        result?;
    }
    Ok(())
}

/// 410 Gone: the receiver says the endpoint is gone for good. The run fails
/// with a customer-owned code, the sync is paused at once (no five failed
/// runs first), and its page says what happened, what to do and whose job it is.
#[tokio::test(flavor = "multi_thread")]
async fn a_410_gone_pauses_the_sync_at_once_saying_why() -> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions {
        rows: 10,
        ..SyncOptions::default()
    })
    .await?;
    s.cli = s.cli.clone().with_secret("TEST_HOOK_SECRET", HOOK_SECRET);
    let hook = WebhookReceiver::start().await?;
    hook.answer_with([410]);
    s.publish_with_destination(5, &destination(&hook.url, true))
        .await?;
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 1, "{}", out.stderr);
    assert_eq!(hook.received().len(), 1, "410 is not retried");
    let run = s.last_run().await?;
    assert_eq!(run["failure_code"], "destination_gone");
    let (status, reason, owner): (String, Option<String>, Option<String>) = sqlx::query_as(
        "SELECT status, paused_reason, last_error->>'owner' FROM syncs WHERE id = 'acme-contacts'",
    )
    .fetch_one(&s.db.pool)
    .await?;
    assert_eq!(
        (status.as_str(), reason.as_deref(), owner.as_deref()),
        ("paused", Some("destination_gone"), Some("customer"))
    );
    let show = s.cli.run(&["sync", "show", "acme-contacts"]).await?.ok()?;
    assert!(show.stdout.contains("410 Gone"), "{}", show.stdout);
    assert!(show.stdout.contains("destination.url"), "{}", show.stdout);
    // Nothing was lost: resumed, with the endpoint back, every record goes.
    s.cli
        .run(&["sync", "resume", "acme-contacts"])
        .await?
        .ok()?;
    s.run_foreground().await?.ok()?;
    let arrived: HashSet<String> = hook.received()[1..]
        .iter()
        .flat_map(|p| p.records())
        .collect();
    assert_eq!(arrived.len(), 10);
    Ok(())
}

/// 400, 413 and 422 say the record is wrong: it is rejected with the code.
/// A batch answered 413 is split until the receiver takes it, so only a
/// record too large alone is rejected.
#[tokio::test(flavor = "multi_thread")]
async fn answers_that_say_the_record_is_wrong_reject_it_and_413_splits_a_batch()
-> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions {
        rows: 3,
        ..SyncOptions::default()
    })
    .await?;
    s.cli = s.cli.clone().with_secret("TEST_HOOK_SECRET", HOOK_SECRET);
    let hook = WebhookReceiver::start().await?;
    hook.answer_with([400, 413, 422]);
    s.publish_with_destination(5, &destination(&hook.url, false))
        .await?;
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 1, "every record of the page was rejected");
    let mut codes: Vec<String> = sqlx::query_scalar("SELECT code FROM rejected_records")
        .fetch_all(&s.db.pool)
        .await?;
    codes.sort();
    assert_eq!(codes, ["http_400", "http_413", "http_422"]);
    assert_eq!(hook.received().len(), 3, "none was retried");

    let mut s = Scenario::new(SyncOptions {
        rows: 12,
        ..SyncOptions::default()
    })
    .await?;
    s.cli = s.cli.clone().with_secret("TEST_HOOK_SECRET", HOOK_SECRET);
    let hook = WebhookReceiver::start().await?;
    hook.refuse_batches_above(3);
    s.publish_with_destination(12, &destination(&hook.url, true))
        .await?;
    let out = s.run_foreground().await?.ok()?;
    assert!(out.stdout.contains("12 written"), "{}", out.stdout);
    let taken: Vec<usize> = hook
        .received()
        .iter()
        .map(|p| p.records().len())
        .filter(|n| *n <= 3)
        .collect();
    // 12 → 6 + 6 → 3 + 3 + 3 + 3.
    assert_eq!(taken, [3, 3, 3, 3]);
    assert_eq!(hook.received().len(), 1 + 2 + 4);
    let arrived: HashSet<String> = hook
        .received()
        .iter()
        .filter(|p| p.records().len() <= 3)
        .flat_map(|p| p.records())
        .collect();
    assert_eq!(arrived.len(), 12);
    Ok(())
}

/// A signing key under the specification's 24 bytes is refused by `sync
/// apply`, naming the file, the field and the fix; nothing is published.
#[tokio::test(flavor = "multi_thread")]
async fn a_signing_secret_under_24_bytes_is_refused_at_apply() -> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions::default()).await?;
    s.cli = s
        .cli
        .clone()
        .with_secret("TEST_HOOK_SECRET", "short-secret");
    let hook = WebhookReceiver::start().await?;
    let refused = s
        .publish_with_destination(5, &destination(&hook.url, false))
        .await
        .expect_err("a 12-byte key is refused");
    let message = format!("{refused:#}");
    assert!(message.contains("destination.secret_env"), "{message}");
    assert!(
        message.contains("12 bytes") && message.contains("24"),
        "{message}"
    );
    assert!(
        !message.contains("short-secret"),
        "the secret is not echoed: {message}"
    );
    // The sync keeps the version it had (the scenario's Brevo destination).
    let kinds: Vec<String> =
        sqlx::query_scalar("SELECT definition->'destination'->>'kind' FROM syncs")
            .fetch_all(&s.db.pool)
            .await?;
    assert_eq!(kinds, ["brevo"]);
    Ok(())
}
