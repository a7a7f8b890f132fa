//! Fault drills (docs/contract.md §4): the daemon's own Postgres restarted mid-run, Redis
//! restarted mid-run with every key lost, a Sentinel set's primary killed
//! mid-run under two daemons, a destination answering garbage and cut-off
//! bodies, a source connection dropped mid-page. Each ends with every contact
//! delivered and nothing sent twice beyond the page in flight.

use std::time::Duration;

use crate::fakes::brevo::Fault;
use crate::helpers::daemon::{DaemonProcess, eventually};
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};
use crate::helpers::servers::{PrivatePostgres, PrivateRedis, SentinelSet};
use crate::helpers::{TestDb, TestRedis};

/// 80 contacts in pages of 2, each import taking ~100 ms: a run of ~8 s.
fn slow(s: &mut Scenario) {
    s.fake.slow_writes(Duration::from_millis(100));
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "200ms")
        .with_env("SYNCWARD__RETRY__BACKOFF_BASE", "1s")
        .with_env("SYNCWARD__RETRY__BACKOFF_MAX", "2s");
}

const SLOW: SyncOptions = SyncOptions {
    mode: "bulk",
    page_size: 2,
    rows: 80,
    concurrency: 4,
    timeout: "5s",
};

async fn wait_for_writes(s: &Scenario, n: usize) -> anyhow::Result<()> {
    eventually(Duration::from_secs(30), "the run writing", || async {
        Ok(s.fake.writes().len() >= n)
    })
    .await
}

async fn wait_for_success(
    s: &Scenario,
    daemon: &DaemonProcess,
) -> anyhow::Result<serde_json::Value> {
    daemon
        .eventually(Duration::from_secs(90), "the run succeeding", || async {
            Ok(s.last_run()
                .await
                .map(|r| r["status"] == "succeeded")
                .unwrap_or(false))
        })
        .await?;
    s.last_run().await
}

/// Every contact arrived; none more often than twice (a re-send of the page
/// in flight when the fault hit).
fn assert_delivered_once_but_the_page_in_flight(s: &Scenario, rows: usize, page: usize) {
    let writes = s.writes_per_email();
    assert_eq!(writes.len(), rows, "every contact was written");
    let twice: Vec<_> = writes.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.iter().all(|(_, n)| **n == 2), "{twice:?}");
    assert!(
        twice.len() <= page,
        "only the page in flight is sent again: {twice:?}"
    );
}

async fn events(s: &Scenario) -> anyhow::Result<String> {
    let rows: Vec<(String, sqlx::types::Json<serde_json::Value>)> =
        sqlx::query_as("SELECT kind, detail FROM run_events ORDER BY id")
            .fetch_all(&s.db.pool)
            .await?;
    Ok(rows.iter().map(|(k, d)| format!("{k} {}\n", d.0)).collect())
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_restarted_mid_run_the_daemon_reconnects_and_the_run_finishes()
-> anyhow::Result<()> {
    let pg = PrivatePostgres::start().await?;
    let db = TestDb::at(&pg.admin_url()).await?;
    let mut s = Scenario::on(SLOW, db, TestRedis::new().await?).await?;
    slow(&mut s);
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    wait_for_writes(&s, 10).await?;
    pg.restart().await?;
    let run = wait_for_success(&s, &daemon).await?;
    assert!(
        daemon.child.try_wait()?.is_none(),
        "the daemon kept running through the restart:\n{}",
        daemon.log_tail()
    );
    assert_delivered_once_but_the_page_in_flight(&s, 80, 2);
    // A statement the restart cut ends the attempt it was in (at most one:
    // the restart is over before the retry is due); the retry finishes.
    let retried: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM run_events WHERE kind = 'requeued' AND detail->>'trigger' = 'retry'",
    )
    .fetch_one(&s.db.pool)
    .await?;
    assert!(retried <= 1, "{}", events(&s).await?);
    assert_eq!(run["attempt"], 1 + retried, "{run}");
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_restarted_empty_mid_run_the_run_stops_as_lease_lost_and_resumes()
-> anyhow::Result<()> {
    let mut redis = PrivateRedis::start().await?;
    let mut s = Scenario::on(
        SLOW,
        TestDb::new().await?,
        TestRedis::at(&redis.url()).await?,
    )
    .await?;
    slow(&mut s);
    // The restart happens while the run waits on the destination, so the run
    // meets Redis again only afterwards, at its next proof, with its lease gone.
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    wait_for_writes(&s, 10).await?;
    let fence_before: i64 = sqlx::query_scalar("SELECT fence FROM sync_cursors WHERE sync_id = $1")
        .bind(SYNC_ID)
        .fetch_one(&s.db.pool)
        .await?;
    s.fake.hold_writes();
    eventually(
        Duration::from_secs(10),
        "a write held at the fake",
        || async { Ok(s.fake.held_writes() > 0) },
    )
    .await?;
    redis.restart().await?;
    s.fake.release_writes();
    let run = wait_for_success(&s, &daemon).await?;
    let timeline = events(&s).await?;
    assert!(
        timeline.contains("lease_lost"),
        "the run noticed at its next proof:\n{timeline}"
    );
    // The fence lives in Postgres: the resumed run wrote with a newer one.
    let fence_after: i64 = sqlx::query_scalar("SELECT fence FROM sync_cursors WHERE sync_id = $1")
        .bind(SYNC_ID)
        .fetch_one(&s.db.pool)
        .await?;
    assert!(
        fence_after > fence_before,
        "fence {fence_before} -> {fence_after}"
    );
    assert_delivered_once_but_the_page_in_flight(&s, 80, 2);
    // The lost lease ended the first attempt; the second finished.
    assert_eq!(run["attempt"], 2, "{run}");
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

/// `redis.url` names three Sentinels; the primary is SIGKILLed while a run of
/// two daemons writes. The Sentinels promote the replica, the daemons follow
/// it at their next connection, and Postgres (the second judge: run events,
/// fences, the ledger) shows no two runs holding the sync at once and no key
/// sent twice.
#[tokio::test(flavor = "multi_thread")]
async fn sentinel_failover_mid_run_with_two_daemons_overlaps_nothing_and_resends_nothing()
-> anyhow::Result<()> {
    let mut set = SentinelSet::start().await?;
    let mut s = Scenario::on(SLOW, TestDb::new().await?, TestRedis::at(&set.url()).await?).await?;
    slow(&mut s);
    // Attempts spent while the Sentinels elect (each refused connection is a
    // re-queue with a new attempt) must not run out on a slow machine.
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__RETRY__MAX_ATTEMPTS", "20");
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let mut first = DaemonProcess::spawn(&s.cli).await?;
    let mut second = DaemonProcess::spawn(&s.cli).await?;
    second.http_address().await?;
    wait_for_writes(&s, 10).await?;
    let fence_before: i64 = sqlx::query_scalar("SELECT fence FROM sync_cursors WHERE sync_id = $1")
        .bind(SYNC_ID)
        .fetch_one(&s.db.pool)
        .await?;
    set.primary.kill().await?;
    let writes_at_kill = s.fake.writes().len();
    let replica = set.replica.port;
    eventually(
        Duration::from_secs(60),
        "the Sentinels promoting the replica",
        || async { Ok(set.primary_ports().await?.iter().all(|p| *p == replica)) },
    )
    .await?;
    let logs = || {
        format!(
            "first daemon:\n{}\nsecond daemon:\n{}",
            first.log_tail(),
            second.log_tail()
        )
    };
    eventually(Duration::from_secs(120), "the run succeeding", || async {
        Ok(s.last_run()
            .await
            .map(|r| r["status"] == "succeeded")
            .unwrap_or(false))
    })
    .await
    .map_err(|e| e.context(logs()))?;
    anyhow::ensure!(
        writes_at_kill < 80,
        "the run was over before the failover: {writes_at_kill} writes at the kill"
    );
    // The run went on past the failover: its later fences were taken on the
    // promoted replica.
    let fence_after: i64 = sqlx::query_scalar("SELECT fence FROM sync_cursors WHERE sync_id = $1")
        .bind(SYNC_ID)
        .fetch_one(&s.db.pool)
        .await?;
    assert!(
        fence_after > fence_before,
        "fence {fence_before} -> {fence_after}"
    );
    let timeline = events(&s).await?;
    println!(
        "{writes_at_kill} writes at the kill; fence {fence_before} -> {fence_after}\n{timeline}"
    );
    assert!(
        timeline.contains("requeued"),
        "the run met the failover and was put back:\n{timeline}"
    );
    let writes = s.writes_per_email();
    assert_eq!(writes.len(), 80, "every contact was written");
    let twice: Vec<_> = writes.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "keys sent twice: {twice:?}");
    let holds = s.overlapping_holds().await?;
    assert!(
        holds.is_empty(),
        "two runs of the sync held it at once: {holds:?}\n{}",
        logs()
    );
    let spans = s.fence_spans().await?;
    for pair in spans.windows(2) {
        assert!(
            pair[0].2 <= pair[1].1,
            "fence {} was still writing when fence {} began: {spans:?}",
            pair[0].0,
            pair[1].0
        );
    }
    for daemon in [&mut first, &mut second] {
        assert!(
            daemon.child.try_wait()?.is_none(),
            "a daemon died in the failover:\n{}",
            daemon.log_tail()
        );
        daemon.signal("TERM")?;
        daemon.wait(Duration::from_secs(30)).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn garbage_and_cut_off_answers_are_retried_and_the_run_succeeds() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.fake.push_faults([
        Fault::Garbage,
        Fault::Truncated,
        Fault::Truncated,
        Fault::Garbage,
    ]);
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 0, "{out:?}");
    let writes = s.writes_per_email();
    assert_eq!(writes.len(), 30);
    // The faulty answers came instead of service: nothing was written twice.
    assert!(writes.values().all(|n| *n == 1), "{writes:?}");
    let statuses: Vec<u16> = s
        .fake
        .requests_to("/v3/contacts/import")
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(
        &statuses[..4],
        &[201, 202, 202, 201],
        "the four faults were served: {statuses:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_source_connection_dropped_mid_page_fails_the_attempt_and_the_retry_delivers()
-> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions {
        rows: 30,
        page_size: 10,
        ..SyncOptions::default()
    })
    .await?;
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "200ms")
        .with_env("SYNCWARD__RETRY__BACKOFF_BASE", "1s")
        .with_env("SYNCWARD__RETRY__BACKOFF_MAX", "2s");
    // A query that reads slowly (pg_sleep per row), so a page is mid-read when
    // the test cuts its connection.
    let text = std::fs::read_to_string(s.dir.path().join("sync.toml"))?.replace(
        "FROM contacts\"",
        "FROM contacts WHERE pg_sleep(0.03) IS NOT NULL\"",
    );
    let path = s.dir.path().join("slow.toml");
    std::fs::write(&path, text)?;
    s.cli
        .run(&["sync", "apply", &path.display().to_string()])
        .await?
        .ok()?;
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    let terminated = daemon
        .eventually(Duration::from_secs(20), "a page read to cut", || async {
            let n: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = current_database() AND pid <> pg_backend_pid()
                AND query LIKE '%pg_sleep(0.03)%' AND state = 'active') t",
            )
            .fetch_one(&s.db.pool)
            .await?;
            Ok(n > 0)
        })
        .await;
    terminated?;
    let run = wait_for_success(&s, &daemon).await?;
    let timeline = events(&s).await?;
    assert!(timeline.contains("source_unreachable"), "{timeline}");
    // The one cut read ended the first attempt; the second finished.
    assert_eq!(run["attempt"], 2, "{run}");
    let writes = s.writes_per_email();
    assert_eq!(writes.len(), 30);
    assert!(
        writes.values().all(|n| *n == 1),
        "a page that was never read was never sent: {writes:?}"
    );
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

/// The daemon's log lines that contain `needle`.
fn log_lines(daemon: &DaemonProcess, needle: &str) -> Vec<String> {
    std::fs::read_to_string(daemon.log.path())
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(needle))
        .map(str::to_string)
        .collect()
}

/// After an outage: the page answers 200 again and the daemon logged the
/// recovery (`line`) once.
async fn back_after_outage(daemon: &DaemonProcess, page: &str, line: &str) -> anyhow::Result<()> {
    daemon
        .eventually(Duration::from_secs(20), "the pages back", || async {
            Ok(timed_get(page).await?.0 == 200)
        })
        .await?;
    daemon
        .eventually(Duration::from_secs(20), "the recovery line", || async {
            Ok(log_lines(daemon, line).len() == 1)
        })
        .await
}

/// A GET of `url`: its status, body and how long it took.
async fn timed_get(url: &str) -> anyhow::Result<(u16, String, Duration)> {
    let started = std::time::Instant::now();
    let answer = reqwest::get(url).await?;
    let status = answer.status().as_u16();
    let body = answer.text().await?;
    Ok((status, body, started.elapsed()))
}

/// The store stopped, then Redis killed, under an idle daemon: while each is
/// down the pages answer 503 at once naming it (the API too for the store),
/// the log says so at ERROR once with the cause however long it lasts, and
/// once more when it ends; then the pages are back.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_or_redis_outage_is_answered_503_naming_it_and_logged_once_each_way()
-> anyhow::Result<()> {
    let pg = PrivatePostgres::start().await?;
    let mut redis = PrivateRedis::start().await?;
    let db = TestDb::at(&pg.admin_url()).await?;
    let s = Scenario::on(SLOW, db, TestRedis::at(&redis.url()).await?).await?;
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);
    let page = format!("{base}/syncs/{SYNC_ID}");
    assert_eq!(timed_get(&page).await?.0, 200);

    pg.stop().await?;
    // Asked at once (before the watcher has looked) and while it lasts:
    // 503 naming the store, never a wait on the runs' 10 s pool timeout.
    // (The margin is generous; the design is 1.5 s.)
    let mut lasted = Duration::ZERO;
    let outage_started = std::time::Instant::now();
    while lasted < Duration::from_secs(4) {
        let (status, body, took) = timed_get(&page).await?;
        assert_eq!(status, 503, "{body}");
        assert!(body.contains("The store (Postgres"), "{body}");
        assert!(took < Duration::from_secs(5), "answered after {took:?}");
        lasted = outage_started.elapsed();
    }
    let (status, body, _) = timed_get(&format!("{base}/api/syncs")).await?;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("Connection refused"), "the cause: {body}");
    let errors = log_lines(&daemon, "The store (Postgres at");
    assert_eq!(errors.len(), 1, "one ERROR for the outage: {errors:#?}");
    assert!(
        errors[0].contains("ERROR") && errors[0].contains("Connection refused"),
        "{errors:#?}"
    );
    pg.start_again().await?;
    back_after_outage(&daemon, &page, "The store is reachable again after").await?;

    redis.kill().await?;
    daemon
        .eventually(Duration::from_secs(20), "Redis' outage seen", || async {
            let (status, body, _) = timed_get(&page).await?;
            Ok(status == 503 && body.contains("Redis (redis://127.0.0.1:"))
        })
        .await?;
    // The API needs only the store.
    assert_eq!(timed_get(&format!("{base}/api/syncs")).await?.0, 200);
    redis.start_again().await?;
    back_after_outage(&daemon, &page, "Redis is reachable again after").await?;
    let errors = log_lines(&daemon, "Redis (redis://");
    assert_eq!(errors.len(), 1, "one ERROR for the outage: {errors:#?}");
    assert!(errors[0].contains("ERROR"), "{errors:#?}");
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}
