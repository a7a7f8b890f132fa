//! The daemon (guarantees 4 and 8): the real binary, real signals, real
//! Postgres and Redis, the Brevo fake.

use std::time::Duration;

use crate::fakes::brevo::Fault;
use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::{QUIET_SCHEDULE, SYNC_ID, Scenario, SyncOptions};

async fn run_field(s: &Scenario, field: &str) -> anyhow::Result<serde_json::Value> {
    Ok(s.last_run().await?[field].clone())
}

/// A sync of 40 pages whose every import takes ~150 ms at the fake.
async fn slow_scenario(liveness: &str) -> anyhow::Result<Scenario> {
    let mut s = Scenario::new(SyncOptions {
        rows: 80,
        page_size: 2,
        ..SyncOptions::default()
    })
    .await?;
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__WORKERS__LIVENESS_TTL", liveness)
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "200ms")
        .with_env("SYNCWARD__SWEEPER__EVERY", "500ms")
        .with_env("SYNCWARD__WORKERS__COUNT", "2");
    s.fake.slow_writes(Duration::from_millis(150));
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    Ok(s)
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_drains_at_a_batch_boundary_and_a_second_daemon_resumes_without_resending()
-> anyhow::Result<()> {
    let s = slow_scenario("30s").await?;
    let mut first = DaemonProcess::spawn(&s.cli).await?;
    first
        .eventually(Duration::from_secs(20), "five pages written", || async {
            Ok(s.fake.requests_to("/v3/contacts/import").len() >= 5)
        })
        .await?;
    first.signal("TERM")?;
    let (code, took) = first.wait(Duration::from_secs(30)).await?;
    assert_eq!(
        code,
        Some(0),
        "a clean drain exits 0; the log ends:\n{}",
        first.log_tail()
    );
    assert!(took < Duration::from_secs(17), "drained in {took:?}");
    let run = s.last_run().await?;
    assert_eq!(run["status"], "queued", "{run}");
    assert_eq!(run["trigger"], "shutdown");
    assert_eq!(run["attempt"], 0, "a clean stop gives its attempt back");
    let cursor: i64 = s.cursor().await?.unwrap_or_default().parse()?;
    let written = s.fake.writes().len() as i64;
    assert_eq!(
        cursor, written,
        "the cursor is at the last clean batch: every written record is checkpointed"
    );
    // The next page's import, claimed with the last checkpoint but never
    // sent, was given back with the attempt it spent.
    let open: i64 =
        sqlx::query_scalar("SELECT count(*) FROM delivery_batches WHERE completed_at IS NULL")
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(open, 0, "an unsent claim was left behind");

    let mut second = DaemonProcess::spawn(&s.cli).await?;
    second
        .eventually(Duration::from_secs(40), "the run finishing", || async {
            Ok(run_field(&s, "status").await? == "succeeded")
        })
        .await?;
    second.signal("TERM")?;
    second.wait(Duration::from_secs(30)).await?;
    assert_eq!(s.fake.contacts().len(), 80);
    let writes = s.writes_per_email();
    assert!(
        writes.values().all(|n| *n == 1),
        "a key completed before the drain was sent again: {writes:?}"
    );
    let most: Option<i32> = sqlx::query_scalar("SELECT max(attempts) FROM delivery_states")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(most, Some(1), "every key was claimed once");
    assert_eq!(run_field(&s, "attempt").await?, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkilled_daemons_run_is_taken_over_once_its_liveness_key_expires() -> anyhow::Result<()>
{
    let s = slow_scenario("2s").await?;
    let mut first = DaemonProcess::spawn(&s.cli).await?;
    first
        .eventually(Duration::from_secs(20), "five pages written", || async {
            Ok(s.fake.requests_to("/v3/contacts/import").len() >= 5)
        })
        .await?;
    first.signal("KILL")?;
    first.wait(Duration::from_secs(10)).await?;
    assert_eq!(
        run_field(&s, "status").await?,
        "running",
        "a killed daemon leaves its run running"
    );

    let mut second = DaemonProcess::spawn(&s.cli).await?;
    second
        .eventually(Duration::from_secs(40), "the run finishing", || async {
            Ok(run_field(&s, "status").await? == "succeeded")
        })
        .await?;
    second.signal("TERM")?;
    second.wait(Duration::from_secs(30)).await?;
    let run = s.last_run().await?;
    assert_eq!(run["attempt"], 2, "the killed attempt stays spent");
    assert_eq!(s.fake.contacts().len(), 80);
    let twice: Vec<_> = s
        .writes_per_email()
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .collect();
    assert!(
        twice.len() <= 2 && twice.iter().all(|(_, n)| *n == 2),
        "only the pending page may be re-sent, once: {twice:?}"
    );
    let recovered: i64 = sqlx::query_scalar("SELECT count(*) FROM run_events WHERE kind = 'requeued' AND detail->>'trigger' = 'recovery'")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(recovered, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn failing_attempts_back_off_and_the_run_fails_after_max_attempts() -> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions::default()).await?;
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__RETRY__MAX_ATTEMPTS", "3")
        .with_env("SYNCWARD__RETRY__BACKOFF_BASE", "1s")
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "100ms");
    s.fake.set_fault_always(Some(Fault::ServerError));
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    daemon
        .eventually(
            Duration::from_secs(60),
            "the run failing for good",
            || async { Ok(run_field(&s, "status").await? == "failed") },
        )
        .await?;
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    let run = s.last_run().await?;
    assert_eq!(run["attempt"], 3);
    assert_eq!(run["failure_code"], "destination_unavailable");
    let waits: Vec<f64> = sqlx::query_scalar(
        "SELECT (detail->>'due_in_s')::float8 FROM run_events WHERE kind = 'requeued' ORDER BY id",
    )
    .fetch_all(&s.db.pool)
    .await?;
    assert_eq!(waits.len(), 2, "two retries between three attempts");
    assert!(
        (0.9..=1.1).contains(&waits[0]),
        "first backoff {}",
        waits[0]
    );
    assert!(
        (1.8..=2.2).contains(&waits[1]),
        "second backoff {}",
        waits[1]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_schedule_follows_pause_and_resume_without_a_restart_and_counts_enqueue_failures()
-> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions {
        rows: 3,
        ..SyncOptions::default()
    })
    .await?;
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "100ms");
    let every_second = std::fs::read_to_string(s.dir.path().join("sync.toml"))?
        .replace(QUIET_SCHEDULE, "* * * * * *");
    std::fs::write(s.dir.path().join("sync.toml"), &every_second)?;
    s.cli
        .run(&[
            "sync",
            "apply",
            s.dir.path().join("sync.toml").to_str().unwrap_or_default(),
        ])
        .await?
        .ok()?;
    let count = |status: &'static str| {
        let pool = s.db.pool.clone();
        async move {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM runs WHERE status = $1")
                .bind(status)
                .fetch_one(&pool)
                .await?;
            anyhow::Ok(n)
        }
    };
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    daemon
        .eventually(
            Duration::from_secs(20),
            "scheduled runs succeeding",
            || async { Ok(count("succeeded").await? >= 2) },
        )
        .await?;

    s.cli.run(&["sync", "pause", SYNC_ID]).await?.ok()?;
    daemon
        .eventually(
            Duration::from_secs(20),
            "the runs queued before the pause ended",
            || async {
                let open: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM runs WHERE status IN ('queued', 'running')",
                )
                .fetch_one(&s.db.pool)
                .await?;
                Ok(open == 0)
            },
        )
        .await?;
    // A window for the schedule to show it enqueues nothing (its ticks run
    // every second here): an absence has no event to wait for.
    let paused_at: i64 = sqlx::query_scalar("SELECT count(*) FROM runs")
        .fetch_one(&s.db.pool)
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later: i64 = sqlx::query_scalar("SELECT count(*) FROM runs")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(later, paused_at, "a paused sync got new runs");

    s.cli.run(&["sync", "resume", SYNC_ID]).await?.ok()?;
    daemon
        .eventually(Duration::from_secs(20), "runs after resume", || async {
            let n: i64 = sqlx::query_scalar("SELECT count(*) FROM runs")
                .fetch_one(&s.db.pool)
                .await?;
            Ok(n >= later + 2)
        })
        .await?;
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;

    // The same daemon without the Brevo key: each tick records a failed run.
    let without_key = s.cli.without_secret("TEST_BREVO_KEY");
    let mut daemon = DaemonProcess::spawn(&without_key).await?;
    daemon
        .eventually(Duration::from_secs(20), "failed enqueues", || async {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM runs WHERE failure_code = 'secret_missing'",
            )
            .fetch_one(&s.db.pool)
            .await?;
            Ok(n >= 3)
        })
        .await?;
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    let detail: String = sqlx::query_scalar(
        "SELECT failure_detail FROM runs WHERE failure_code = 'secret_missing' LIMIT 1",
    )
    .fetch_one(&s.db.pool)
    .await?;
    assert!(
        detail.contains("TEST_BREVO_KEY") && detail.contains("is not set"),
        "{detail}"
    );
    Ok(())
}

/// A daemon whose run is started and whose destination hangs every request.
async fn daemon_with_a_hanging_run() -> anyhow::Result<(Scenario, DaemonProcess)> {
    let mut s = Scenario::new(SyncOptions {
        timeout: "120s",
        ..SyncOptions::default()
    })
    .await?;
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "100ms");
    s.fake.set_fault_always(Some(Fault::Hang));
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let daemon = DaemonProcess::spawn(&s.cli).await?;
    daemon
        .eventually(Duration::from_secs(20), "the run starting", || async {
            Ok(run_field(&s, "status").await? == "running")
        })
        .await?;
    Ok((s, daemon))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_hanging_at_the_drain_deadline_is_cut_off_and_put_back_and_the_exit_is_not_clean()
-> anyhow::Result<()> {
    let (s, mut daemon) = daemon_with_a_hanging_run().await?;
    daemon
        .eventually(
            Duration::from_secs(20),
            "its first import hanging",
            || async { Ok(s.fake.hanging_writes() >= 1) },
        )
        .await?;
    daemon.signal("TERM")?;
    let (code, took) = daemon.wait(Duration::from_secs(40)).await?;
    assert!(
        took >= Duration::from_secs(14),
        "exited before the drain deadline: {took:?}"
    );
    assert!(took <= Duration::from_secs(30), "took {took:?}");
    assert_ne!(code, Some(0), "a cut-off shutdown is not a clean exit");
    assert!(
        daemon
            .log_tail()
            .contains("still busy at the drain deadline"),
        "{}",
        daemon.log_tail()
    );
    // Cut off at the drain deadline: back in the queue with its attempt spent.
    let run = s.last_run().await?;
    assert_eq!(run["status"], "queued", "{run}");
    assert_eq!(run["attempt"], 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_stuck_past_the_drain_is_gone_at_the_hard_exit_with_a_non_zero_code()
-> anyhow::Result<()> {
    let (s, mut daemon) = daemon_with_a_hanging_run().await?;
    let run_id = run_field(&s, "id").await?.as_i64().unwrap_or_default();
    // Its first import hangs at the fake, and its own database stalls too: the
    // run's row is locked, so even putting the cut-off run back blocks. Only
    // the hard exit can end this process.
    let mut stall = s.db.pool.begin().await?;
    sqlx::query("SELECT id FROM runs WHERE id = $1 FOR UPDATE")
        .bind(run_id)
        .execute(&mut *stall)
        .await?;
    daemon.signal("TERM")?;
    let (code, took) = daemon.wait(Duration::from_secs(45)).await?;
    stall.rollback().await?;
    assert!(
        took >= Duration::from_secs(24) && took <= Duration::from_secs(30),
        "gone after {took:?}, not at the 25 s hard exit:\n{}",
        daemon.log_tail()
    );
    assert_eq!(code, Some(1), "a hard exit is not a clean exit");
    assert!(
        daemon
            .log_tail()
            .contains("still running 25s after the signal; exiting now"),
        "{}",
        daemon.log_tail()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn without_liveness_a_killed_run_is_requeued_only_after_stuck_after_and_once_its_lease_expired()
-> anyhow::Result<()> {
    // A liveness key that outlives the test: only the slow rule can act.
    let mut s = slow_scenario("1h").await?;
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__LEASE__TTL", "6s")
        .with_env("SYNCWARD__LEASE__RENEW_EVERY", "2s");
    let mut first = DaemonProcess::spawn(&s.cli).await?;
    first
        .eventually(Duration::from_secs(20), "three pages written", || async {
            Ok(s.fake.requests_to("/v3/contacts/import").len() >= 3)
        })
        .await?;
    first.signal("KILL")?;
    first.wait(Duration::from_secs(10)).await?;
    let killed_at = std::time::Instant::now();
    // As if it had run on another machine: its death cannot be proven from
    // here (a holder on this machine whose pid is gone is dead at once), so
    // only its liveness TTL and the slow rule judge it.
    sqlx::query("UPDATE processes SET host = 'another-machine'")
        .execute(&s.db.pool)
        .await?;

    let second_cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__SWEEPER__STUCK_AFTER", "2s");
    let mut second = DaemonProcess::spawn(&second_cli).await?;
    second
        .eventually(Duration::from_secs(40), "the run finishing", || async {
            Ok(run_field(&s, "status").await? == "succeeded")
        })
        .await?;
    let requeued_at: chrono::DateTime<chrono::Utc> = sqlx::query_scalar(
        "SELECT at FROM run_events WHERE kind = 'requeued' AND detail->>'trigger' = 'sweeper'",
    )
    .fetch_one(&s.db.pool)
    .await?;
    let claimed_first: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT min(at) FROM run_events WHERE kind = 'claimed'")
            .fetch_one(&s.db.pool)
            .await?;
    assert!(
        requeued_at - claimed_first >= chrono::Duration::seconds(2),
        "re-queued before stuck_after"
    );
    assert!(
        killed_at.elapsed() >= Duration::from_secs(4),
        "the lease (6 s) had to expire first"
    );
    second.signal("TERM")?;
    second.wait(Duration::from_secs(30)).await?;
    assert_eq!(s.fake.contacts().len(), 80);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_during_its_last_attempt_is_not_attempted_again() -> anyhow::Result<()> {
    let s = slow_scenario("2s").await?;
    // Four attempts already spent (by earlier daemons): the next claim is the fifth and last.
    sqlx::query("UPDATE runs SET attempt = 4, max_attempts = 5 WHERE status = 'queued'")
        .execute(&s.db.pool)
        .await?;
    let mut first = DaemonProcess::spawn(&s.cli).await?;
    first
        .eventually(Duration::from_secs(20), "two pages written", || async {
            Ok(s.fake.requests_to("/v3/contacts/import").len() >= 2)
        })
        .await?;
    first.signal("KILL")?;
    first.wait(Duration::from_secs(10)).await?;
    assert_eq!(run_field(&s, "attempt").await?, 5);

    let mut second = DaemonProcess::spawn(&s.cli).await?;
    second
        .eventually(Duration::from_secs(30), "the run failing", || async {
            Ok(run_field(&s, "status").await? == "failed")
        })
        .await?;
    let writes = s.fake.requests_to("/v3/contacts/import").len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    second.signal("TERM")?;
    second.wait(Duration::from_secs(30)).await?;
    let run = s.last_run().await?;
    assert_eq!(run["attempt"], 5, "no sixth attempt");
    assert_eq!(run["failure_code"], "interrupted");
    let claims: i64 = sqlx::query_scalar("SELECT count(*) FROM run_events WHERE kind = 'claimed'")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(claims, 1);
    assert_eq!(
        s.fake.requests_to("/v3/contacts/import").len(),
        writes,
        "nothing was sent after the kill"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn two_daemons_never_overlap_runs_of_one_sync_and_claim_each_run_once() -> anyhow::Result<()>
{
    let s = Scenario::new(SyncOptions {
        rows: 2,
        ..SyncOptions::default()
    })
    .await?;
    let template = std::fs::read_to_string(s.dir.path().join("sync.toml"))?
        .replace(QUIET_SCHEDULE, "* * * * * *");
    let mut files = Vec::new();
    for i in 0..50 {
        let path = s.dir.path().join(format!("sync-{i}.toml"));
        std::fs::write(
            &path,
            template.replace(
                &format!("id = \"{SYNC_ID}\""),
                &format!("id = \"sync-{i}\""),
            ),
        )?;
        files.push(path.display().to_string());
    }
    s.cli.run(&["sync", "pause", SYNC_ID]).await?.ok()?;
    let mut args = vec!["sync", "apply"];
    args.extend(files.iter().map(String::as_str));
    s.cli.run(&args).await?.ok()?;
    let cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "200ms");
    let mut a = DaemonProcess::spawn(&cli).await?;
    let mut b = DaemonProcess::spawn(&cli).await?;
    // 50 syncs due every second: both daemons at work, 100 runs done.
    a.eventually(
        Duration::from_secs(60),
        "100 runs succeeded, taken by both daemons",
        || async {
            let (finished, daemons): (i64, i64) = sqlx::query_as(
                "SELECT count(*) FILTER (WHERE status = 'succeeded'),
                        count(DISTINCT boot_id) FILTER (WHERE status = 'succeeded')
                 FROM runs",
            )
            .fetch_one(&s.db.pool)
            .await?;
            Ok(finished >= 100 && daemons == 2)
        },
    )
    .await?;
    a.signal("TERM")?;
    b.signal("TERM")?;
    a.wait(Duration::from_secs(30)).await?;
    b.wait(Duration::from_secs(30)).await?;

    let finished: i64 = sqlx::query_scalar("SELECT count(*) FROM runs WHERE status = 'succeeded'")
        .fetch_one(&s.db.pool)
        .await?;
    assert!(finished >= 100, "only {finished} runs succeeded");
    let pairs = s.overlapping_holds().await?;
    assert!(
        pairs.is_empty(),
        "two runs of one sync held it at once: {pairs:?}"
    );
    let unleased: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM runs r WHERE r.status = 'succeeded'
           AND (SELECT count(*) FILTER (WHERE e.kind = 'lease')
                     - count(*) FILTER (WHERE e.kind = 'claimed')
                FROM run_events e WHERE e.run_id = r.id) <> 0",
    )
    .fetch_one(&s.db.pool)
    .await?;
    assert_eq!(
        unleased, 0,
        "every claim of a run that succeeded took the lease once"
    );
    let mismatched: i64 = sqlx::query_scalar(
        // A clean stop at the drain, and a wait for the account's budget
        // off the worker, give their attempt back: count those out.
        "SELECT count(*) FROM runs r WHERE r.attempt <>
           (SELECT count(*) FILTER (WHERE e.kind = 'claimed')
                 - count(*) FILTER (WHERE e.kind = 'requeued'
                                      AND (e.detail->>'reason' = 'stopped at a clean batch boundary'
                                           OR e.detail->>'reason' LIKE 'the destination account''s request budget was booked %'))
            FROM run_events e WHERE e.run_id = r.id)",
    )
    .fetch_one(&s.db.pool)
    .await?;
    assert_eq!(
        mismatched, 0,
        "a run was claimed more (or less) often than its attempts say"
    );
    let workers: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT boot_id) FROM runs WHERE boot_id IS NOT NULL")
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(workers, 2, "both daemons took runs");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn with_log_format_json_every_log_line_is_a_json_object() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__LOG__FORMAT", "json")
        .with_env("SYNCWARD__LOG__LEVEL", "syncward=debug,info");
    let mut daemon = DaemonProcess::spawn(&cli).await?;
    daemon
        .eventually(
            Duration::from_secs(10),
            "the daemon logging that it runs",
            || async {
                Ok(std::fs::read_to_string(daemon.log.path())?.contains("syncward is running"))
            },
        )
        .await?;
    daemon.signal("TERM")?;
    let (code, _) = daemon.wait(Duration::from_secs(30)).await?;
    assert_eq!(code, Some(0));
    let text = std::fs::read_to_string(daemon.log.path())?;
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{e}: {text}"))?;
    assert!(lines.len() >= 3);
    assert!(
        lines
            .iter()
            .all(|l| l["level"].is_string() && l["timestamp"].is_string())
    );
    assert!(
        lines
            .iter()
            .any(|l| l["message"] == "syncward is running" && l["workers"] == 4)
    );
    Ok(())
}
