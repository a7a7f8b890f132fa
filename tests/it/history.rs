//! History does not grow forever: runs, alerts and audit rows past
//! `retention.*` are purged, but never a sync's newest finished run,
//! the run its cursor names, or a run holding records not yet put back.

use std::time::Duration;

use syncward::store::history::{Retention, purge_history};

/// 90 days for everything.
const NINETY_DAYS: Retention = Retention {
    runs: Duration::from_secs(90 * 86400),
    alerts: Duration::from_secs(90 * 86400),
    audit_log: Duration::from_secs(90 * 86400),
};

use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

async fn ids(s: &Scenario, sql: &str) -> anyhow::Result<Vec<i64>> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_all(&s.db.pool)
        .await?)
}

#[tokio::test(flavor = "multi_thread")]
async fn history_past_retention_is_purged_but_the_newest_run_and_undelivered_records_stay()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        mode: "single",
        ..SyncOptions::default()
    })
    .await?;
    // Run 1 rejects one record (kept, not put back); runs 2-4 succeed.
    s.fake.reject_emails(|e| e.starts_with("user7@"));
    s.run_foreground().await?.ok()?;
    s.fake.reject_emails(|_| false);
    for _ in 0..3 {
        s.run_foreground().await?.ok()?;
    }
    s.cli.run(&["sync", "pause", SYNC_ID]).await?.ok()?;
    s.cli.run(&["sync", "resume", SYNC_ID]).await?.ok()?;
    // Everything is 100 days old.
    sqlx::raw_sql(
        "UPDATE runs SET finished_at = now() - interval '100 days', created_at = now() - interval '100 days';
         UPDATE audit_log SET at = now() - interval '100 days';
         INSERT INTO alerts (kind, severity, message, at) VALUES ('test', 'critical', 'old', now() - interval '100 days'),
                                                                 ('test', 'critical', 'new', now());
         UPDATE sync_cursors SET run_id = NULL;",
    )
    .execute(&s.db.pool)
    .await?;
    let runs = ids(&s, "SELECT id FROM runs ORDER BY id").await?;
    assert_eq!(runs.len(), 4);

    let purged = purge_history(&s.db.pool, NINETY_DAYS, 1).await?;
    assert_eq!(purged.runs, 2, "{purged:?}");
    assert_eq!(purged.alerts, 1);
    assert!(purged.audit_rows >= 2, "{purged:?}");
    // Run 1 holds a rejected record not put back; run 4 is the newest.
    assert_eq!(
        ids(&s, "SELECT id FROM runs ORDER BY id").await?,
        vec![runs[0], runs[3]]
    );
    assert_eq!(
        ids(
            &s,
            "SELECT count(*) FROM run_events WHERE run_id NOT IN (SELECT id FROM runs)"
        )
        .await?,
        vec![0],
        "timelines go with their runs"
    );
    // Once the record is put back, its run may go too.
    s.cli
        .run(&["sync", "retry-rejected", SYNC_ID])
        .await?
        .ok()?;
    let purged = purge_history(&s.db.pool, NINETY_DAYS, 100).await?;
    assert_eq!(purged.runs, 1);
    assert_eq!(
        ids(&s, "SELECT id FROM runs ORDER BY id").await?,
        vec![runs[3]]
    );
    assert_eq!(
        ids(&s, "SELECT count(*) FROM alerts").await?,
        vec![1],
        "the recent alert stays"
    );
    Ok(())
}
