//! The durable schedule: due times live in Postgres, any daemon's tick fires
//! any sync exactly once, and a tick that fell while no daemon ran is caught
//! up once (or skipped) when one starts.

use std::time::Duration;

use chrono::{Timelike, Utc};

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::{QUIET_SCHEDULE, SYNC_ID, Scenario, SyncOptions};

async fn scalar_i64(s: &Scenario, sql: &str, id: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .bind(id)
        .fetch_one(&s.db.pool)
        .await?)
}

async fn scheduled_runs(s: &Scenario, id: &str) -> anyhow::Result<i64> {
    scalar_i64(
        s,
        "SELECT count(*) FROM runs WHERE sync_id = $1 AND trigger = 'schedule'",
        id,
    )
    .await
}

/// Publishes a copy of the scenario's sync under `id`, with `edit` applied to
/// its file.
async fn publish_copy(
    s: &Scenario,
    id: &str,
    edit: impl Fn(String) -> String,
) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(s.dir.path().join("sync.toml"))?.replacen(
        &format!("id = \"{SYNC_ID}\""),
        &format!("id = \"{id}\""),
        1,
    );
    let path = s.dir.path().join(format!("{id}.toml"));
    std::fs::write(&path, edit(text))?;
    s.cli
        .run(&["sync", "apply", path.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    Ok(())
}

/// A daily sync at 03:00 New York time whose tick fell while every daemon was
/// down: the next daemon to start enqueues one run for it at once (catch_up
/// once, the default), none for its `catch_up = "skip"` twin, and moves both
/// to the next 03:00 in New York.
#[tokio::test(flavor = "multi_thread")]
async fn a_tick_missed_while_no_daemon_ran_is_caught_up_once_or_skipped() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let daily = |catch_up: &'static str| {
        move |text: String| {
            text.replacen(
                &format!("schedule = \"{QUIET_SCHEDULE}\""),
                &format!(
                    "schedule = \"0 0 3 * * *\"\ntimezone = \"America/New_York\"\ncatch_up = \"{catch_up}\""
                ),
                1,
            )
        }
    };
    publish_copy(&s, "daily-once", daily("once")).await?;
    publish_copy(&s, "daily-skip", daily("skip")).await?;
    let at_three_in_new_york =
        "SELECT count(*) FROM sync_schedule WHERE sync_id = $1 AND next_due_at > now()
         AND (next_due_at AT TIME ZONE 'America/New_York')::time = '03:00'";

    let mut first = DaemonProcess::spawn(&s.cli).await?;
    first
        .eventually(Duration::from_secs(30), "both syncs armed", || async {
            Ok(
                scalar_i64(&s, at_three_in_new_york, "daily-once").await? == 1
                    && scalar_i64(&s, at_three_in_new_york, "daily-skip").await? == 1,
            )
        })
        .await?;
    first.signal("TERM")?;
    first.wait(Duration::from_secs(40)).await?;

    // 03:00 in New York came and went four hours ago, with no daemon running.
    sqlx::query(
        "UPDATE sync_schedule SET next_due_at = now() - interval '4 hours'
         WHERE sync_id IN ('daily-once', 'daily-skip')",
    )
    .execute(&s.db.pool)
    .await?;

    let second = DaemonProcess::spawn(&s.cli).await?;
    second
        .eventually(
            Duration::from_secs(30),
            "the missed ticks taken",
            || async {
                Ok(
                    scalar_i64(&s, at_three_in_new_york, "daily-once").await? == 1
                        && scalar_i64(&s, at_three_in_new_york, "daily-skip").await? == 1,
                )
            },
        )
        .await?;
    assert_eq!(scheduled_runs(&s, "daily-once").await?, 1, "caught up once");
    assert_eq!(scheduled_runs(&s, "daily-skip").await?, 0, "skipped");
    second
        .eventually(
            Duration::from_secs(60),
            "the caught-up run succeeded",
            || async {
                Ok(scalar_i64(
                    &s,
                    "SELECT count(*) FROM runs WHERE sync_id = $1 AND status = 'succeeded'",
                    "daily-once",
                )
                .await?
                    == 1)
            },
        )
        .await?;
    Ok(())
}

/// Two daemons and 200 syncs due on the same second: each sync gets exactly
/// one run from that tick, whichever daemon took it, and its due time moves
/// a day on.
#[tokio::test(flavor = "multi_thread")]
async fn two_daemons_enqueue_every_sync_due_on_one_second_exactly_once() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    // Far enough ahead that both daemons start and arm every sync first.
    let due = Utc::now() + chrono::TimeDelta::seconds(25);
    let schedule = format!("{} {} {} * * *", due.second(), due.minute(), due.hour());
    let dir = tempfile::tempdir()?;
    let template = std::fs::read_to_string(s.dir.path().join("sync.toml"))?
        .replacen(
            &format!("schedule = \"{QUIET_SCHEDULE}\""),
            &format!("schedule = \"{schedule}\""),
            1,
        )
        // Runs with nothing to send: this test counts enqueues, not deliveries.
        .replacen("FROM contacts\"", "FROM contacts WHERE false\"", 1);
    for i in 0..200 {
        std::fs::write(
            dir.path().join(format!("fleet-{i}.toml")),
            template.replacen(
                &format!("id = \"{SYNC_ID}\""),
                &format!("id = \"fleet-{i}\""),
                1,
            ),
        )?;
    }
    let mut apply = vec!["sync".to_string(), "apply".to_string()];
    for i in 0..200 {
        apply.push(
            dir.path()
                .join(format!("fleet-{i}.toml"))
                .display()
                .to_string(),
        );
    }
    let apply: Vec<&str> = apply.iter().map(String::as_str).collect();
    s.cli.run(&apply).await?.ok()?;

    let a = DaemonProcess::spawn(&s.cli).await?;
    let _b = DaemonProcess::spawn(&s.cli).await?;
    let count = |sql: &'static str| {
        let pool = s.db.pool.clone();
        async move { Ok::<i64, anyhow::Error>(sqlx::query_scalar(sql).fetch_one(&pool).await?) }
    };
    a.eventually(
        Duration::from_secs(60),
        "200 runs enqueued by the tick",
        || async {
            Ok(count(
                "SELECT count(*) FROM runs WHERE sync_id LIKE 'fleet-%' AND trigger = 'schedule'",
            )
            .await?
                >= 200)
        },
    )
    .await?;
    a.eventually(Duration::from_secs(10), "every due time a day on", || async {
        Ok(count(
            "SELECT count(*) FROM sync_schedule WHERE sync_id LIKE 'fleet-%' AND next_due_at > now() + interval '23 hours'",
        )
        .await?
            == 200)
    })
    .await?;
    let most: i64 = count(
        "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM runs
         WHERE sync_id LIKE 'fleet-%' AND trigger = 'schedule' GROUP BY sync_id) c",
    )
    .await?;
    assert_eq!(most, 1, "no sync got two runs from one tick");
    assert_eq!(
        count("SELECT count(*) FROM runs WHERE sync_id LIKE 'fleet-%' AND trigger = 'schedule'")
            .await?,
        200
    );
    Ok(())
}

/// A paused sync runs nothing at its ticks, and resuming it does not make up
/// for them: it waits for its next tick. Publishing a new schedule re-arms it
/// the same way.
#[tokio::test(flavor = "multi_thread")]
async fn a_resumed_or_rescheduled_sync_waits_for_its_next_tick() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let daemon = s.daemon_in_process();
    let mut ticker = syncward::scheduler::Ticker::default();
    let report = ticker.tick(&daemon).await?;
    assert_eq!((report.armed, report.enqueued), (1, 0), "{report:?}");
    let armed = "SELECT count(*) FROM sync_schedule WHERE sync_id = $1 AND next_due_at > now()";
    assert_eq!(scalar_i64(&s, armed, SYNC_ID).await?, 1);

    s.cli.run(&["sync", "pause", SYNC_ID]).await?.ok()?;
    sqlx::query(
        "UPDATE sync_schedule SET next_due_at = now() - interval '2 days' WHERE sync_id = $1",
    )
    .bind(SYNC_ID)
    .execute(&s.db.pool)
    .await?;
    let report = ticker.tick(&daemon).await?;
    assert_eq!(
        (report.armed, report.enqueued),
        (0, 0),
        "paused: {report:?}"
    );

    s.cli.run(&["sync", "resume", SYNC_ID]).await?.ok()?;
    let report = ticker.tick(&daemon).await?;
    assert_eq!(
        (report.armed, report.enqueued),
        (1, 0),
        "resumed: {report:?}"
    );
    assert_eq!(scalar_i64(&s, armed, SYNC_ID).await?, 1);

    // Due a moment ago, then re-published with another schedule: re-armed.
    sqlx::query(
        "UPDATE sync_schedule SET next_due_at = now() - interval '1 second' WHERE sync_id = $1",
    )
    .bind(SYNC_ID)
    .execute(&s.db.pool)
    .await?;
    publish_copy(&s, SYNC_ID, |text| {
        text.replacen(QUIET_SCHEDULE, "0 0 12 * * *", 1)
    })
    .await?;
    let report = ticker.tick(&daemon).await?;
    assert_eq!(
        (report.armed, report.enqueued),
        (1, 0),
        "rescheduled: {report:?}"
    );
    assert_eq!(scheduled_runs(&s, SYNC_ID).await?, 0);
    Ok(())
}
