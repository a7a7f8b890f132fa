//! Every committed source row is read, whatever the commit order: a row whose
//! transaction commits after later rows were read is delivered once it
//! commits, and the runs in between say what holds them back (the real
//! binary, a real open transaction, the Brevo fake).

use crate::helpers::scenario::{Scenario, SyncOptions};

#[tokio::test(flavor = "multi_thread")]
async fn a_transaction_held_open_across_runs_holds_the_cursor_back_and_loses_nothing()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.run_foreground().await?.ok()?;
    assert_eq!(s.writes_per_email().len(), 30);

    // Writer A inserts row 31 and stays open; writer B commits 32 and 33.
    let mut writer_a = s.db.pool.begin().await?;
    sqlx::query("INSERT INTO contacts VALUES (31, 'user31@example.com', 'First31')")
        .execute(&mut *writer_a)
        .await?;
    sqlx::raw_sql(
        "INSERT INTO contacts VALUES (32, 'user32@example.com', 'First32'), (33, 'user33@example.com', 'First33')",
    )
    .execute(&s.db.pool)
    .await?;

    for _ in 0..2 {
        s.run_foreground().await?.ok()?;
        assert_eq!(
            s.writes_per_email().len(),
            30,
            "a run while A is open sent rows after A's: its cursor would pass row 31"
        );
        assert_eq!(s.cursor().await?.as_deref(), Some("30"));
        assert_eq!(s.last_run().await?["status"], "succeeded");
    }
    // The sync's page (and `sync show`) says what holds it back.
    let shown = s.cli.run(&["sync", "show", "acme-contacts"]).await?.ok()?;
    assert!(
        shown.stdout.contains("wait for an open source transaction"),
        "{}",
        shown.stdout
    );

    writer_a.commit().await?;
    s.run_foreground().await?.ok()?;
    let writes = s.writes_per_email();
    assert_eq!(writes.len(), 33, "rows 31-33 arrive once A commits");
    assert!(writes.values().all(|&n| n == 1), "{writes:?}");
    assert_eq!(s.cursor().await?.as_deref(), Some("33"));
    Ok(())
}
