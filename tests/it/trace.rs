//! `syncward trace ADDRESS` (and `GET /api/trace`): for one address, every
//! call that carried it — run, when, what was sent, what the destination
//! answered, where its delivery key stands — its rejections, and nothing
//! once it is forgotten. The store keeps no address in clear for it.

use std::time::Duration;

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

async fn trace(s: &Scenario, address: &str) -> anyhow::Result<serde_json::Value> {
    s.cli.run(&["trace", address, "--json"]).await?.ok()?.json()
}

fn calls(trace: &serde_json::Value) -> Vec<serde_json::Value> {
    trace["calls"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bulk_sent_address_is_traced_to_its_run_its_attributes_and_its_import()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.run_foreground().await?.ok()?;
    let run_id = s.last_run().await?["id"].as_i64().unwrap_or_default();

    let found = trace(&s, " User14@Example.com ").await?;
    let sent = calls(&found);
    assert_eq!(sent.len(), 1, "{found}");
    let call = &sent[0];
    assert_eq!(call["sync"], SYNC_ID);
    assert_eq!(call["run_id"], run_id);
    assert_eq!(call["kind"], "sent");
    assert_eq!(call["sent"]["attributes"]["FIRSTNAME"], "First14");
    assert_eq!(call["sent"]["lists"], serde_json::json!([12]));
    assert_eq!(call["key_state"], "completed");
    let answer = call["answer"].as_str().unwrap_or_default();
    assert!(answer.contains("Brevo import"), "{answer}");
    assert!(answer.contains("not finished"), "{answer}");
    // The key is the ledger's: the same one a replay finds completed.
    assert_eq!(call["delivery_key"].as_str().map(str::len), Some(64));

    // Once the sweeper has followed the import to its end, the answer says
    // what Brevo reported of it.
    let checker = s
        .cli
        .clone()
        .with_env("SYNCWARD__SWEEPER__EVERY", "200ms")
        .with_env("SYNCWARD__SWEEPER__IMPORT_CHECK_AFTER", "100ms");
    let daemon = DaemonProcess::spawn(&checker).await?;
    daemon
        .eventually(Duration::from_secs(20), "the imports checked", || async {
            let pending: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM import_processes WHERE status = 'pending'",
            )
            .fetch_one(&s.db.pool)
            .await?;
            Ok(pending == 0)
        })
        .await?;
    // The page shows the same, in a browser.
    let base = format!("http://{}", daemon.http_address().await?);
    let page =
        crate::pages::chromium(&format!("{base}/trace?email=user14@example.com"), "trace").await?;
    for expected in [
        "Trace of user14@example.com",
        "First14",
        &format!("href=\"/runs/{run_id}\""),
        "imported: Brevo import",
    ] {
        assert!(
            page.contains(expected),
            "the page shows {expected:?}:\n{page}"
        );
    }
    drop(daemon);
    let found = trace(&s, "user14@example.com").await?;
    let answer = calls(&found)[0]["answer"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(answer.starts_with("imported: Brevo import"), "{answer}");
    assert!(answer.contains("among its 10 records"), "{answer}");

    // A replay of the range sends nothing, so it adds no call.
    s.cli.run(&["sync", "reset-cursor", SYNC_ID]).await?.ok()?;
    s.run_foreground().await?.ok()?;
    assert_eq!(calls(&trace(&s, "user14@example.com").await?).len(), 1);

    // The text answer names the run and what came back; an address no sync
    // met is said so; a word that is no address is refused (exit 2).
    let text = s.cli.run(&["trace", "user14@example.com"]).await?.ok()?;
    assert!(
        text.stdout.contains(&format!("#{run_id}")),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("FIRSTNAME"), "{}", text.stdout);
    let nobody = s.cli.run(&["trace", "nobody@example.com"]).await?.ok()?;
    assert!(
        nobody.stdout.contains("No call of 1 sync carried"),
        "{}",
        nobody.stdout
    );
    let bad = s.cli.run(&["trace", "not-an-address"]).await?;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("ADDRESS"), "{}", bad.stderr);

    // The trace is kept as long as the ledger keeps keys: past
    // `ledger.retention`, `ledger purge` takes it too.
    sqlx::query("UPDATE trace_pages SET created_at = now() - interval '8 days'")
        .execute(&s.db.pool)
        .await?;
    s.cli.run(&["ledger", "purge"]).await?.ok()?;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM trace_pages")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(left, 0);
    assert!(calls(&trace(&s, "user14@example.com").await?).is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_single_write_answer_and_a_rejection_are_traced_and_forget_leaves_nothing_to_find()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        mode: "single",
        rows: 10,
        ..SyncOptions::default()
    })
    .await?;
    s.fake.reject_emails(|e| e == "user3@example.com");
    s.run_foreground().await?.ok()?;

    let found = trace(&s, "user7@example.com").await?;
    let call = &calls(&found)[0];
    assert_eq!(call["key_state"], "completed");
    let answer = call["answer"].as_str().unwrap_or_default();
    assert!(
        answer.starts_with("created: Brevo answered 201"),
        "{answer}"
    );

    let refused = trace(&s, "user3@example.com").await?;
    let rejections = refused["rejections"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(rejections.len(), 1, "{refused}");
    assert_eq!(rejections[0]["sync"], SYNC_ID);
    assert!(
        rejections[0]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{refused}"
    );

    // No address in clear: the trace's rows hold digests, keys and what was
    // sent but the address.
    let clear: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM trace_pages WHERE convert_from(sent, 'UTF8') LIKE '%@example.com%'",
    )
    .fetch_one(&s.db.pool)
    .await?;
    assert_eq!(clear, 0);

    s.cli.run(&["forget", "user7@example.com"]).await?.ok()?;
    let gone = trace(&s, "user7@example.com").await?;
    assert!(calls(&gone).is_empty(), "{gone}");
    let text = s.cli.run(&["trace", "user7@example.com"]).await?.ok()?;
    assert!(text.stdout.contains("No call of"), "{}", text.stdout);
    // What was sent for user7 is gone from the row it shared with others,
    // and the others are still found.
    let firsts: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM trace_pages WHERE convert_from(sent, 'UTF8') LIKE '%\"First7\"%'",
    )
    .fetch_one(&s.db.pool)
    .await?;
    assert_eq!(firsts, 0);
    assert_eq!(calls(&trace(&s, "user8@example.com").await?).len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn only_one_address_is_read_and_sent_again_through_the_ledger_without_moving_the_cursor()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.run_foreground().await?.ok()?;
    let cursor = s.cursor().await?;
    let imports_before = s.fake.requests_to("/v3/contacts/import").len();
    // "Why is this one contact wrong?": its source row changed, and only it
    // is sent, now.
    sqlx::query("UPDATE contacts SET first_name = 'Fixed' WHERE id = 4")
        .execute(&s.db.pool)
        .await?;
    let out = s
        .cli
        .run(&[
            "sync",
            "run",
            SYNC_ID,
            "--foreground",
            "--only",
            "User4@Example.com",
        ])
        .await?
        .ok()?;
    assert!(
        out.stdout
            .contains("Sent for User4@Example.com: {\"attributes\":{\"FIRSTNAME\":\"Fixed\"}"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("Answer: accepted in Brevo import"),
        "{}",
        out.stdout
    );
    let imports = s.fake.requests_to("/v3/contacts/import");
    assert_eq!(
        imports.len(),
        imports_before + 1,
        "one import, of one contact"
    );
    let body = &imports[imports.len() - 1].body;
    let sent = body["jsonBody"].as_array().cloned().unwrap_or_default();
    assert_eq!(sent.len(), 1, "{body}");
    assert_eq!(sent[0]["email"], "user4@example.com");
    assert_eq!(sent[0]["attributes"]["FIRSTNAME"], "Fixed");
    // The cursor stays where the last full run left it; the trace holds both
    // calls, the newest first.
    assert_eq!(s.cursor().await?, cursor);
    let found = trace(&s, "user4@example.com").await?;
    let both = calls(&found);
    assert_eq!(both.len(), 2, "{found}");
    assert_eq!(both[0]["sent"]["attributes"]["FIRSTNAME"], "Fixed");
    assert_eq!(both[1]["sent"]["attributes"]["FIRSTNAME"], "First4");

    // An address no record holds sends nothing and says so; a word that is
    // no address is refused before anything runs.
    let none = s
        .cli
        .run(&[
            "sync",
            "run",
            SYNC_ID,
            "--foreground",
            "--only",
            "nobody@example.com",
        ])
        .await?
        .ok()?;
    assert!(
        none.stdout.contains(
            "No record of the source has nobody@example.com in its mapped e-mail field `email`"
        ),
        "{}",
        none.stdout
    );
    assert_eq!(
        s.fake.requests_to("/v3/contacts/import").len(),
        imports.len()
    );
    let bad = s
        .cli
        .run(&["sync", "run", SYNC_ID, "--foreground", "--only", "nobody"])
        .await?;
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(bad.stderr.contains("--only"), "{}", bad.stderr);
    Ok(())
}
