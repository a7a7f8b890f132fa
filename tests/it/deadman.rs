//! The dead-man check (guarantee 6), with backdated rows instead of sleeps.

use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

async fn backdate_activation(s: &Scenario) -> anyhow::Result<()> {
    sqlx::query("UPDATE syncs SET activated_at = now() - interval '25 hours'")
        .execute(&s.db.pool)
        .await?;
    Ok(())
}

async fn alerts(s: &Scenario) -> anyhow::Result<Vec<(String, String, Option<String>, String)>> {
    Ok(
        sqlx::query_as("SELECT kind, severity, sync_id, message FROM alerts ORDER BY id")
            .fetch_all(&s.db.pool)
            .await?,
    )
}

async fn check(s: &Scenario) -> anyhow::Result<String> {
    Ok(s.cli.run(&["deadman", "check"]).await?.ok()?.stdout)
}

#[tokio::test(flavor = "multi_thread")]
async fn only_failed_runs_alert_once_until_a_success_ends_the_incident() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 3,
        ..SyncOptions::default()
    })
    .await?;
    backdate_activation(&s).await?;
    for _ in 0..2 {
        syncward::store::runs::record_failed_enqueue(
            &s.db.pool,
            SYNC_ID,
            syncward::states::RunTrigger::Schedule,
            "config_invalid",
            "x",
        )
        .await?;
    }
    let out = check(&s).await?;
    assert!(
        out.contains("workspace:acme: silent; alert raised"),
        "{out}"
    );
    let raised = alerts(&s).await?;
    let workspace_alert = raised
        .iter()
        .find(|a| a.2.is_none())
        .expect("a workspace alert");
    assert_eq!(workspace_alert.0, "deadman_silence");
    assert_eq!(workspace_alert.1, "critical");
    assert!(
        workspace_alert
            .3
            .contains("runs were recorded but none succeeded (2 runs)"),
        "{}",
        workspace_alert.3
    );
    assert!(workspace_alert.3.contains("Next:"), "{}", workspace_alert.3);
    let first_count = raised.len();

    let again = check(&s).await?;
    assert!(again.contains("still silent; already alerted"), "{again}");
    assert_eq!(
        alerts(&s).await?.len(),
        first_count,
        "a second check raised another alert"
    );

    // A success: the markers go, the incidents close, a recovery notice goes out.
    let open_before: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deadman_incidents WHERE closed_at IS NULL")
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(
        open_before, first_count as i64,
        "one incident per alert raised"
    );
    s.run_foreground().await?.ok()?;
    let mut conn = s.redis.pool.get().await?;
    let markers: Vec<String> = deadpool_redis::redis::cmd("KEYS")
        .arg(format!("{}:deadman:*", s.redis.prefix))
        .query_async(&mut conn)
        .await?;
    assert!(markers.is_empty(), "{markers:?}");
    let recovered: i64 =
        sqlx::query_scalar("SELECT count(*) FROM alerts WHERE kind = 'deadman_recovered'")
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(
        recovered, open_before,
        "one recovery notice per incident closed"
    );
    let open: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deadman_incidents WHERE closed_at IS NULL")
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(open, 0);

    // The next silence alerts again.
    sqlx::query("UPDATE runs SET finished_at = now() - interval '25 hours'")
        .execute(&s.db.pool)
        .await?;
    let out = check(&s).await?;
    assert!(
        out.contains("workspace:acme: silent; alert raised"),
        "{out}"
    );
    let last = alerts(&s)
        .await?
        .into_iter()
        .filter(|a| a.0 == "deadman_silence" && a.2.is_none())
        .count();
    assert_eq!(last, 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_with_no_runs_gets_the_no_runs_alert_and_a_young_one_nothing()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let out = check(&s).await?;
    assert!(
        out.contains("No silence"),
        "a workspace younger than 24 h is left alone: {out}"
    );
    assert!(alerts(&s).await?.is_empty());

    backdate_activation(&s).await?;
    check(&s).await?;
    let raised = alerts(&s).await?;
    assert!(
        raised
            .iter()
            .any(|a| a.2.is_none() && a.3.contains("no runs were recorded at all")),
        "{raised:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_healthy_sync_does_not_hide_a_silent_sibling() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 3,
        ..SyncOptions::default()
    })
    .await?;
    let sibling =
        std::fs::read_to_string(s.dir.path().join("sync.toml"))?.replace(SYNC_ID, "acme-leads");
    let path = s.dir.path().join("leads.toml");
    std::fs::write(&path, sibling)?;
    s.cli
        .run(&["sync", "apply", path.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    s.run_foreground().await?.ok()?;
    backdate_activation(&s).await?;
    let out = check(&s).await?;
    assert!(
        out.contains("sync:acme-leads: silent; alert raised"),
        "{out}"
    );
    assert!(
        !out.contains("workspace:acme"),
        "the workspace had a success: {out}"
    );
    let raised = alerts(&s).await?;
    assert_eq!(raised.len(), 1, "{raised:?}");
    assert_eq!(raised[0].2.as_deref(), Some("acme-leads"));
    let shown = s
        .cli
        .run(&["sync", "show", "acme-leads", "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(shown["deadman_incidents"][0]["silence"], "no_runs");
    Ok(())
}
