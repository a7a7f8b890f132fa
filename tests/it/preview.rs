//! `sync preview`: the next page, mapped, with keys and ledger state; writes
//! nothing anywhere.

use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

async fn counts(s: &Scenario) -> anyhow::Result<Vec<i64>> {
    let mut out = Vec::new();
    for table in [
        "runs",
        "deliveries",
        "delivery_batches",
        "rejected_records",
        "audit_log",
        "alerts",
        "run_events",
    ] {
        out.push(
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
                .fetch_one(&s.db.pool)
                .await?,
        );
    }
    let cursor: Option<serde_json::Value> =
        sqlx::query_scalar("SELECT cursor FROM sync_cursors WHERE sync_id = $1")
            .bind(SYNC_ID)
            .fetch_one(&s.db.pool)
            .await?;
    out.push(i64::from(cursor.is_some()));
    Ok(out)
}

#[tokio::test(flavor = "multi_thread")]
async fn preview_shows_the_next_page_with_keys_and_ledger_state_and_writes_nothing()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    sqlx::query("UPDATE contacts SET email = NULL WHERE id = 2")
        .execute(&s.db.pool)
        .await?;
    let before = counts(&s).await?;
    let out = s
        .cli
        .run(&["sync", "preview", SYNC_ID, "--limit", "3", "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(counts(&s).await?, before, "preview wrote to the store");
    assert!(
        s.fake.requests().is_empty(),
        "preview called the destination"
    );
    assert_eq!(out["page_records"], 10);
    let records = out["records"].as_array().cloned().unwrap_or_default();
    assert_eq!(records.len(), 3);
    assert_eq!(records[0]["email"], "user1@example.com");
    assert_eq!(records[0]["attributes"]["FIRSTNAME"], "First1");
    assert_eq!(records[0]["ledger"], "new");
    assert_eq!(records[0]["key"].as_str().map(str::len), Some(64));
    assert!(
        records[1]["rejected"]
            .as_str()
            .is_some_and(|r| r.starts_with("missing_email")),
        "{}",
        records[1]
    );

    // After a run, the same page shows its keys completed: the preview derives
    // the very keys the run used.
    s.run_foreground().await?.ok()?;
    s.cli.run(&["sync", "reset-cursor", SYNC_ID]).await?.ok()?;
    let before = counts(&s).await?;
    let text = s
        .cli
        .run(&["sync", "preview", SYNC_ID, "--limit", "3"])
        .await?
        .ok()?
        .stdout;
    assert_eq!(counts(&s).await?, before);
    assert!(text.contains("completed"), "{text}");
    assert!(text.contains("Nothing was written."), "{text}");
    // The cursor in words, as the pages say it, not its JSON.
    assert!(
        text.contains("next page from the source's start") && !text.contains("\"type\""),
        "{text}"
    );
    Ok(())
}
