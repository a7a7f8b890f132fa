//! An outage costs time, never a record (guarantee 4): a destination that
//! answers 401, 429, 500 or nothing for longer than `ledger.record_attempts`
//! runs spends no record's attempt budget; once it recovers every contact is
//! delivered and none is quarantined.

use std::time::Duration;

use crate::fakes::brevo::Fault;
use crate::helpers::Syncward;
use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

fn email(i: i64) -> String {
    format!("user{i}@example.com")
}

async fn count(s: &Scenario, sql: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&s.db.pool)
        .await?)
}

/// Every contact of the scenario reached the fake, and nothing was given up.
async fn assert_all_delivered_none_given_up(s: &Scenario, rows: i64) -> anyhow::Result<()> {
    let contacts = s.fake.contacts();
    let missing: Vec<String> = (1..=rows)
        .map(email)
        .filter(|e| !contacts.contains_key(e))
        .collect();
    assert!(missing.is_empty(), "never delivered: {missing:?}");
    assert_eq!(
        count(s, "SELECT count(*) FROM rejected_records").await?,
        0,
        "an outage quarantines or rejects nothing"
    );
    assert_eq!(s.cursor().await?, Some(rows.to_string()));
    Ok(())
}

/// Foreground runs against a destination failing with `fault` for `runs`
/// runs (each exits 1 with `code`), then healed: the next run delivers all.
async fn outage_then_recovery(
    options: SyncOptions,
    fault: Fault,
    code: &str,
    runs: usize,
) -> anyhow::Result<Scenario> {
    let s = Scenario::new(options.clone()).await?;
    s.fake.set_fault_always(Some(fault));
    for n in 0..runs {
        let out = s.run_foreground().await?;
        assert_eq!(out.code, 1, "outage run {n} must fail: {out:?}");
        assert_eq!(s.last_run().await?["failure_code"], code);
    }
    s.fake.set_fault_always(None);
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 0, "the run after recovery succeeds: {out:?}");
    assert_all_delivered_none_given_up(&s, options.rows).await?;
    Ok(s)
}

const FAST_TIMEOUT: SyncOptions = SyncOptions {
    mode: "bulk",
    page_size: 10,
    rows: 30,
    concurrency: 4,
    timeout: "300ms",
};

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_key_for_more_runs_than_record_attempts_gives_up_no_record_in_bulk()
-> anyhow::Result<()> {
    outage_then_recovery(
        SyncOptions::default(),
        Fault::Unauthorized,
        "destination_auth_failed",
        4,
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_key_for_more_runs_than_record_attempts_gives_up_no_record_in_single()
-> anyhow::Result<()> {
    let s = outage_then_recovery(
        SyncOptions {
            mode: "single",
            ..SyncOptions::default()
        },
        Fault::Unauthorized,
        "destination_auth_failed",
        4,
    )
    .await?;
    // Refused answers wrote nothing: each contact was written once.
    assert!(s.writes_per_email().values().all(|n| *n == 1));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn server_errors_for_more_runs_than_record_attempts_give_up_no_record() -> anyhow::Result<()>
{
    for mode in ["bulk", "single"] {
        outage_then_recovery(
            SyncOptions {
                mode,
                ..SyncOptions::default()
            },
            Fault::ServerError,
            "destination_unavailable",
            4,
        )
        .await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rate_limit_storm_for_more_runs_than_record_attempts_gives_up_no_record()
-> anyhow::Result<()> {
    for mode in ["bulk", "single"] {
        outage_then_recovery(
            SyncOptions {
                mode,
                ..SyncOptions::default()
            },
            Fault::RateLimited { reset_secs: 0 },
            "destination_rate_limited",
            4,
        )
        .await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destination_that_hangs_for_more_runs_than_record_attempts_gives_up_no_record()
-> anyhow::Result<()> {
    for mode in ["bulk", "single"] {
        let s = outage_then_recovery(
            SyncOptions {
                mode,
                ..FAST_TIMEOUT
            },
            Fault::Hang,
            "destination_unavailable",
            4,
        )
        .await?;
        // A request that timed out may have been written: its keys stayed
        // pending and were re-sent, counted as such.
        let run = s.last_run().await?;
        assert!(run["records_resent"].as_i64() > Some(0), "{run}");
    }
    Ok(())
}

/// The daemon's settings for these drills: quick polls, backoff in seconds,
/// a dead daemon's runs taken over within seconds.
fn quick(cli: &Syncward) -> Syncward {
    cli.clone()
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "200ms")
        .with_env("SYNCWARD__WORKERS__LIVENESS_TTL", "2s")
        .with_env("SYNCWARD__SWEEPER__EVERY", "500ms")
        .with_env("SYNCWARD__RETRY__BACKOFF_BASE", "1s")
        .with_env("SYNCWARD__RETRY__BACKOFF_MAX", "2s")
}

/// Queues a run and waits for the daemon to finish it; its row.
async fn run_through_daemon(
    s: &Scenario,
    daemon: &DaemonProcess,
) -> anyhow::Result<serde_json::Value> {
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let queued: i64 = s.last_run().await?["id"].as_i64().unwrap_or_default();
    daemon
        .eventually(Duration::from_secs(60), "the run finishing", || async {
            let run = s.last_run().await?;
            Ok(run["id"].as_i64() == Some(queued)
                && matches!(run["status"].as_str(), Some("succeeded" | "failed")))
        })
        .await?;
    s.last_run().await
}

/// Acceptance (a): a revoked key for `breaker.consecutive_failures` runs
/// pauses the sync once; after the fix and `sync resume` every contact is
/// delivered and none was given up.
async fn revoked_key_through_the_daemon(mode: &'static str) -> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions {
        mode,
        ..SyncOptions::default()
    })
    .await?;
    s.cli = quick(&s.cli);
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    s.fake.set_fault_always(Some(Fault::Unauthorized));
    for n in 1..=5 {
        let run = run_through_daemon(&s, &daemon).await?;
        assert_eq!(run["status"], "failed", "run {n}: {run}");
        assert_eq!(run["failure_code"], "destination_auth_failed");
    }
    let (status, reason): (String, Option<String>) =
        sqlx::query_as("SELECT status, paused_reason FROM syncs WHERE id = $1")
            .bind(SYNC_ID)
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(status, "paused", "five failed runs pause the sync");
    assert_eq!(reason.as_deref(), Some("circuit_breaker_tripped"));

    // Paused means paused: a manual run is refused and names the way out.
    let refused = s.cli.run(&["sync", "run", SYNC_ID]).await?;
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("is paused")
            && refused
                .stderr
                .contains(&format!("syncward sync resume {SYNC_ID}")),
        "{}",
        refused.stderr
    );

    s.fake.set_fault_always(None);
    s.cli.run(&["sync", "resume", SYNC_ID]).await?.ok()?;
    let run = run_through_daemon(&s, &daemon).await?;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_all_delivered_none_given_up(&s, 30).await?;
    assert_eq!(
        count(&s, "SELECT count(*) FROM runs WHERE status = 'failed'").await?,
        5,
        "exactly breaker.consecutive_failures failed runs"
    );
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM alerts WHERE kind = 'circuit_breaker_tripped'"
        )
        .await?,
        1
    );
    assert_eq!(count(&s, "SELECT count(*) FROM alerts").await?, 1);
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_a_revoked_key_pauses_the_sync_once_and_resume_delivers_everything_in_bulk()
-> anyhow::Result<()> {
    revoked_key_through_the_daemon("bulk").await
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_a_revoked_key_pauses_the_sync_once_and_resume_delivers_everything_in_single()
-> anyhow::Result<()> {
    revoked_key_through_the_daemon("single").await
}

/// Acceptance (b): the destination fails every attempt of a run for longer
/// than `ledger.record_attempts` attempts (with backoff between them), then
/// recovers: the same run delivers every contact.
async fn outage_across_attempts(options: SyncOptions, fault: Fault) -> anyhow::Result<()> {
    let rows = options.rows;
    let mut s = Scenario::new(options).await?;
    s.cli = quick(&s.cli);
    s.fake.set_fault_always(Some(fault.clone()));
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    daemon
        .eventually(
            Duration::from_secs(120),
            "four attempts failing",
            || async {
                let failures = count(
                    &s,
                    "SELECT count(*) FROM run_events WHERE kind = 'requeued'",
                )
                .await?;
                Ok(failures >= 4)
            },
        )
        .await?;
    s.fake.set_fault_always(None);
    daemon
        .eventually(Duration::from_secs(60), "the run succeeding", || async {
            Ok(s.last_run().await?["status"] == "succeeded")
        })
        .await?;
    let run = s.last_run().await?;
    assert_eq!(run["attempt"], 5, "{fault:?}: {run}");
    assert_all_delivered_none_given_up(&s, rows).await?;
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_server_errors_across_four_attempts_then_recovery_deliver_everything_in_bulk()
-> anyhow::Result<()> {
    outage_across_attempts(SyncOptions::default(), Fault::ServerError).await
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_a_rate_limit_storm_across_four_attempts_then_recovery_delivers_everything_in_single()
-> anyhow::Result<()> {
    outage_across_attempts(
        SyncOptions {
            mode: "single",
            ..SyncOptions::default()
        },
        Fault::RateLimited { reset_secs: 0 },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_a_hanging_destination_across_four_attempts_then_recovery_delivers_everything()
-> anyhow::Result<()> {
    outage_across_attempts(FAST_TIMEOUT, Fault::Hang).await
}

/// Acceptance (c): a record whose write kills the daemon every time is
/// quarantined after `ledger.record_attempts` deaths, with one alert; its
/// neighbours are delivered; `sync retry-rejected` brings it back.
async fn poison_through_the_daemon(mode: &'static str) -> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions {
        mode,
        ..SyncOptions::default()
    })
    .await?;
    s.cli = quick(&s.cli);
    let poison = email(14);
    let kill = s.killer();
    let p = poison.clone();
    s.fake.on_write(move |event| {
        if event.emails.contains(&p) {
            kill();
        }
    });
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let mut deaths = 0;
    let mut graveyard = Vec::new();
    let succeeded = loop {
        let daemon = DaemonProcess::spawn(&s.cli).await?;
        s.runner_pid
            .store(daemon.pid, std::sync::atomic::Ordering::SeqCst);
        let mut daemon = daemon;
        let started = std::time::Instant::now();
        while !daemon_gone(&mut daemon)? && s.last_run().await?["status"] != "succeeded" {
            anyhow::ensure!(
                started.elapsed() < Duration::from_secs(60),
                "neither a death nor a success within 60 s; the daemon's log ends:\n{}",
                daemon.log_tail()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if daemon_gone(&mut daemon)? {
            deaths += 1;
            graveyard.push(daemon);
            anyhow::ensure!(deaths <= 3, "the poison killed the daemon a fourth time");
            continue;
        }
        break daemon;
    };
    let mut daemon = succeeded;
    assert_eq!(deaths, 3, "the poison killed record_attempts daemons");
    let sends = s.writes_per_email();
    assert_eq!(sends.get(&poison), Some(&3), "{sends:?}");
    let contacts = s.fake.contacts();
    for i in (1..=30).filter(|i| *i != 14) {
        assert!(
            contacts.contains_key(&email(i)),
            "{} never arrived",
            email(i)
        );
    }
    let (code, kept): (String, Option<String>) =
        sqlx::query_as("SELECT code, email FROM rejected_records")
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(code, "attempt_budget_exhausted");
    assert_eq!(kept.as_deref(), Some(poison.as_str()));
    let alerts: Vec<(String, Option<String>)> =
        sqlx::query_as("SELECT kind, owner FROM alerts ORDER BY id")
            .fetch_all(&s.db.pool)
            .await?;
    assert_eq!(
        alerts,
        vec![(
            "records_quarantined".to_string(),
            Some("operator".to_string())
        )]
    );
    let shown = s.cli.run(&["sync", "show", SYNC_ID]).await?.ok()?.stdout;
    assert!(shown.contains("1 quarantined"), "{shown}");

    // The cause is fixed; the record is put back and the next run sends it.
    s.fake.on_write(|_| {});
    let put_back = s
        .cli
        .run(&["sync", "retry-rejected", SYNC_ID])
        .await?
        .ok()?;
    assert!(
        put_back.stdout.contains("put back 1 record ("),
        "{}",
        put_back.stdout
    );
    let run = run_through_daemon(&s, &daemon).await?;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        s.writes_per_email().get(&poison),
        Some(&4),
        "the poison is sent once more"
    );
    assert_eq!(run["records_written"], 1, "only the poison is sent: {run}");
    assert_eq!(
        count(&s, "SELECT count(*) FROM alerts").await?,
        1,
        "one alert for the incident"
    );
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

fn daemon_gone(daemon: &mut DaemonProcess) -> anyhow::Result<bool> {
    Ok(daemon.child.try_wait()?.is_some())
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_a_poison_record_is_quarantined_after_record_attempts_deaths_and_put_back_in_single()
-> anyhow::Result<()> {
    poison_through_the_daemon("single").await
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_a_poison_record_is_quarantined_after_record_attempts_deaths_and_put_back_in_bulk()
-> anyhow::Result<()> {
    poison_through_the_daemon("bulk").await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_queued_before_the_pause_ends_skipped_without_calling_anything() -> anyhow::Result<()>
{
    let mut s = Scenario::new(SyncOptions::default()).await?;
    s.cli = quick(&s.cli);
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    s.cli.run(&["sync", "pause", SYNC_ID]).await?.ok()?;
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    daemon
        .eventually(Duration::from_secs(30), "the run ending", || async {
            Ok(s.last_run().await?["status"] == "skipped")
        })
        .await?;
    let run = s.last_run().await?;
    assert_eq!(run["failure_code"], "sync_paused", "{run}");
    assert!(s.fake.requests().is_empty(), "the destination was called");
    assert_eq!(run["records_read"], 0);
    // --force runs it once; the sync stays paused.
    let forced = s
        .cli
        .run(&["sync", "run", SYNC_ID, "--force"])
        .await?
        .ok()?;
    assert!(forced.stdout.contains("queued"), "{}", forced.stdout);
    daemon
        .eventually(
            Duration::from_secs(30),
            "the forced run succeeding",
            || async { Ok(s.last_run().await?["status"] == "succeeded") },
        )
        .await?;
    assert_eq!(s.fake.contacts().len(), 30);
    let status: String = sqlx::query_scalar("SELECT status FROM syncs WHERE id = $1")
        .bind(SYNC_ID)
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(status, "paused");
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_server_errors_across_four_attempts_then_recovery_deliver_everything_in_single()
-> anyhow::Result<()> {
    outage_across_attempts(
        SyncOptions {
            mode: "single",
            ..SyncOptions::default()
        },
        Fault::ServerError,
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_a_rate_limit_storm_across_four_attempts_then_recovery_delivers_everything_in_bulk()
-> anyhow::Result<()> {
    outage_across_attempts(SyncOptions::default(), Fault::RateLimited { reset_secs: 0 }).await
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_a_hanging_destination_across_four_attempts_then_recovery_delivers_everything_in_single()
-> anyhow::Result<()> {
    outage_across_attempts(
        SyncOptions {
            mode: "single",
            ..FAST_TIMEOUT
        },
        Fault::Hang,
    )
    .await
}
