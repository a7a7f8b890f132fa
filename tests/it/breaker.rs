//! The circuit breaker (guarantee 5): five failures in a row since the sync
//! last changed pause it, once, with an audit row and one alert.

use syncward::daemon_shared::Daemon;

use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

/// The source table disappears: every run fails as `source_query_failed`.
async fn break_source(s: &Scenario) -> anyhow::Result<()> {
    sqlx::raw_sql("ALTER TABLE contacts RENAME TO contacts_gone")
        .execute(&s.db.pool)
        .await?;
    Ok(())
}

async fn heal_source(s: &Scenario) -> anyhow::Result<()> {
    sqlx::raw_sql("ALTER TABLE contacts_gone RENAME TO contacts")
        .execute(&s.db.pool)
        .await?;
    Ok(())
}

async fn status(s: &Scenario) -> anyhow::Result<(String, Option<String>)> {
    Ok(
        sqlx::query_as("SELECT status, paused_reason FROM syncs WHERE id = $1")
            .bind(SYNC_ID)
            .fetch_one(&s.db.pool)
            .await?,
    )
}

async fn count(s: &Scenario, sql: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&s.db.pool)
        .await?)
}

async fn fail_runs(s: &Scenario, n: usize) -> anyhow::Result<()> {
    for _ in 0..n {
        let out = s.run_foreground().await?;
        anyhow::ensure!(out.code == 1, "the run should fail: {out:?}");
    }
    Ok(())
}

/// The sync's due time comes (its schedule is quiet, so it is set), and one
/// scheduler tick runs.
async fn scheduled_tick_falls(s: &Scenario, daemon: &Daemon) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE sync_schedule SET next_due_at = now() - interval '1 second' WHERE sync_id = $1",
    )
    .bind(SYNC_ID)
    .execute(&s.db.pool)
    .await?;
    syncward::scheduler::Ticker::default().tick(daemon).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_run_failing_including_at_enqueue_pauses_the_sync_at_the_fifth_failure_once()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    break_source(&s).await?;
    fail_runs(&s, 3).await?;
    // A scheduled tick whose schedule cannot be read (a definition an older
    // syncward stored that no longer validates): the enqueue itself fails
    // and is recorded.
    let daemon = s.daemon_in_process();
    let set_schedule = |schedule: &'static str| {
        sqlx::query(
            "UPDATE syncs SET definition = jsonb_set(definition, '{schedule}', to_jsonb($2::text)) WHERE id = $1",
        )
        .bind(SYNC_ID)
        .bind(schedule)
        .execute(&s.db.pool)
    };
    let quiet = crate::helpers::scenario::QUIET_SCHEDULE;
    set_schedule("*/15 * * * *").await?;
    scheduled_tick_falls(&s, &daemon).await?;
    set_schedule(quiet).await?;
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM runs WHERE failure_code = 'config_invalid'"
        )
        .await?,
        1
    );
    assert_eq!(status(&s).await?.0, "active", "four failures do not pause");
    fail_runs(&s, 1).await?;
    assert_eq!(
        status(&s).await?,
        (
            "paused".to_string(),
            Some("circuit_breaker_tripped".to_string())
        )
    );

    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM audit_log WHERE reason = 'circuit_breaker_tripped'"
        )
        .await?,
        1
    );
    let failed_runs: serde_json::Value = sqlx::query_scalar(
        "SELECT detail->'failed_runs' FROM audit_log WHERE reason = 'circuit_breaker_tripped'",
    )
    .fetch_one(&s.db.pool)
    .await?;
    assert_eq!(failed_runs.as_array().map(Vec::len), Some(5));
    let alerts = syncward::store::alerts::list_alerts_for_sync(&s.db.pool, SYNC_ID).await?;
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].kind, "circuit_breaker_tripped");
    assert_eq!(alerts[0].severity, "critical");
    assert_eq!(alerts[0].owner.as_deref(), Some("customer"));
    assert!(
        alerts[0].message.contains("failed 5 times in a row"),
        "{}",
        alerts[0].message
    );
    let last_error: serde_json::Value =
        sqlx::query_scalar("SELECT last_error FROM syncs WHERE id = $1")
            .bind(SYNC_ID)
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(last_error["code"], "source_query_failed");
    assert!(
        last_error["what_next"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );

    // No sixth run: a paused sync's schedule enqueues nothing.
    let runs_before = count(&s, "SELECT count(*) FROM runs").await?;
    scheduled_tick_falls(&s, &daemon).await?;
    assert_eq!(count(&s, "SELECT count(*) FROM runs").await?, runs_before);
    let shown = s.cli.run(&["sync", "show", SYNC_ID]).await?.ok()?.stdout;
    assert!(shown.contains("circuit_breaker_tripped"), "{shown}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_success_ends_the_streak_and_resume_rearms_the_breaker() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 3,
        ..SyncOptions::default()
    })
    .await?;
    break_source(&s).await?;
    fail_runs(&s, 4).await?;
    heal_source(&s).await?;
    s.run_foreground().await?.ok()?;
    break_source(&s).await?;
    fail_runs(&s, 4).await?;
    assert_eq!(
        status(&s).await?.0,
        "active",
        "4 failures, a success, 4 failures must not pause"
    );
    fail_runs(&s, 1).await?;
    assert_eq!(status(&s).await?.0, "paused", "the fifth in a row pauses");

    s.cli.run(&["sync", "resume", SYNC_ID]).await?.ok()?;
    fail_runs(&s, 1).await?;
    assert_eq!(
        status(&s).await?.0,
        "active",
        "after a resume the old failures no longer count"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_per_sync_threshold_of_2_pauses_at_the_second_failure() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let path = s.dir.path().join("sync.toml");
    let text = std::fs::read_to_string(&path)?.replace(
        "workspace = \"acme\"",
        "workspace = \"acme\"\nbreaker_failures = 2",
    );
    std::fs::write(&path, text)?;
    s.cli
        .run(&["sync", "apply", path.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    break_source(&s).await?;
    fail_runs(&s, 1).await?;
    assert_eq!(status(&s).await?.0, "active");
    fail_runs(&s, 1).await?;
    assert_eq!(status(&s).await?.0, "paused");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_daemons_recording_failures_at_once_trip_the_breaker_once() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    for _ in 0..5 {
        syncward::store::runs::record_failed_enqueue(
            &s.db.pool,
            SYNC_ID,
            syncward::states::RunTrigger::Schedule,
            "config_invalid",
            "test",
        )
        .await?;
    }
    let alerter = syncward::alerts::Alerter::new(
        s.db.pool.clone(),
        &syncward::config::Settings::default().alerts,
    );
    let (a, b) = tokio::join!(
        syncward::breaker::after_failure(&alerter, SYNC_ID, 5),
        syncward::breaker::after_failure(&alerter, SYNC_ID, 5)
    );
    assert_eq!(
        [a?, b?].iter().filter(|t| **t).count(),
        1,
        "exactly one call trips it"
    );
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM audit_log WHERE reason = 'circuit_breaker_tripped'"
        )
        .await?,
        1
    );
    assert_eq!(count(&s, "SELECT count(*) FROM alerts").await?, 1);
    Ok(())
}
