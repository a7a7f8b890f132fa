//! A dead holder never blocks its sync, and Redis is not the only judge of
//! who runs (guarantee 3 and 8): a SIGKILLed foreground or daemon run is
//! taken over by the next run within `workers.liveness_ttl` (+ a sweep), from
//! every entry point; a live holder makes a foreground run exit 3 naming it
//! (or wait for it with `--wait`); Redis emptied mid-run with a second daemon
//! standing by overlaps nothing and sends nothing twice.

use std::time::{Duration, Instant, SystemTime};

use crate::helpers::daemon::{DaemonProcess, eventually};
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};
use crate::helpers::servers::PrivateRedis;
use crate::helpers::{Syncward, TestDb, TestRedis};

const TTL_SECS: u64 = 2;

/// A long lease (the default 15 min) so only a takeover frees it in time,
/// and short liveness, polls and sweeps.
fn recovering(cli: &Syncward) -> Syncward {
    cli.clone()
        .with_env("SYNCWARD__LEASE__TTL", "15m")
        .with_env("SYNCWARD__LEASE__RENEW_EVERY", "5m")
        .with_env("SYNCWARD__WORKERS__LIVENESS_TTL", &format!("{TTL_SECS}s"))
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "200ms")
        .with_env("SYNCWARD__SWEEPER__EVERY", "500ms")
        .with_env("SYNCWARD__RETRY__BACKOFF_BASE", "1s")
        .with_env("SYNCWARD__RETRY__BACKOFF_MAX", "2s")
}

/// 60 contacts in pages of 2, each write taking ~100 ms.
const SLOW: SyncOptions = SyncOptions {
    mode: "bulk",
    page_size: 2,
    rows: 60,
    concurrency: 4,
    timeout: "5s",
};

fn slow_writes(s: &Scenario) {
    s.fake.slow_writes(Duration::from_millis(100));
}

/// Every contact arrived; none more often than twice, and at most `page`
/// of them twice (the page in flight when the holder died).
fn assert_delivered_resending_at_most(s: &Scenario, rows: usize, page: usize) {
    let writes = s.writes_per_email();
    assert_eq!(writes.len(), rows, "every contact was written");
    let twice: Vec<_> = writes.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.iter().all(|(_, n)| **n == 2), "{twice:?}");
    assert!(twice.len() <= page, "only the page in flight: {twice:?}");
}

/// When the run `run_id` took its lease (its newest `lease` event).
async fn leased_at(s: &Scenario, run_id: i64) -> anyhow::Result<SystemTime> {
    let at: chrono::DateTime<chrono::Utc> =
        sqlx::query_scalar("SELECT max(at) FROM run_events WHERE run_id = $1 AND kind = 'lease'")
            .bind(run_id)
            .fetch_one(&s.db.pool)
            .await?;
    Ok(SystemTime::from(at))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkilled_foreground_run_on_this_machine_is_taken_over_at_once() -> anyhow::Result<()> {
    let mut s = Scenario::new(SLOW).await?;
    // A liveness TTL far longer than the takeover may take: only the proof
    // that the pid is gone can free the sync in time.
    s.cli = recovering(&s.cli).with_env("SYNCWARD__WORKERS__LIVENESS_TTL", "60s");
    let killed_at = std::sync::Arc::new(std::sync::Mutex::new(None));
    let kill = s.killer();
    let at = killed_at.clone();
    s.fake.slow_writes(Duration::from_millis(100));
    s.fake.on_write(move |event| {
        if event.request == 5 {
            *at.lock().unwrap_or_else(|e| e.into_inner()) = Some(SystemTime::now());
            kill();
        }
    });
    let first = s.run_foreground().await?;
    assert_ne!(first.code, 0, "the runner was killed: {first:?}");
    let killed = killed_at
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .ok_or_else(|| anyhow::anyhow!("the kill never happened"))?;
    slow_writes(&s);

    // At once: the holder's process row names this machine and boot, and
    // its pid is gone, so it is dead now, not when its liveness TTL runs
    // out; the next run goes ahead without waiting (issue 32).
    let out = s.cli.run(&["sync", "run", SYNC_ID, "--foreground"]).await?;
    assert_eq!(out.code, 0, "{out:?}");
    let run = s.last_run().await?;
    assert_eq!(run["status"], "succeeded");
    let waited = leased_at(&s, run["id"].as_i64().unwrap_or_default())
        .await?
        .duration_since(killed)?;
    // Well inside the 60 s liveness TTL, with room for a loaded machine.
    assert!(
        waited < Duration::from_secs(20),
        "took the lease {waited:?} after the kill (liveness TTL 60 s)"
    );
    assert_delivered_resending_at_most(&s, 60, 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sigkilled_daemon_run_is_resumed_by_a_standing_daemon_within_the_liveness_ttl()
-> anyhow::Result<()> {
    let mut s = Scenario::new(SLOW).await?;
    s.cli = recovering(&s.cli);
    slow_writes(&s);
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let first = DaemonProcess::spawn(&s.cli).await?;
    first
        .eventually(Duration::from_secs(30), "ten writes", || async {
            Ok(s.fake.writes().len() >= 10)
        })
        .await?;
    let mut second = DaemonProcess::spawn(&s.cli).await?;
    second.http_address().await?;
    let run_id = s.last_run().await?["id"].as_i64().unwrap_or_default();
    first.signal("KILL")?;
    let killed = SystemTime::now();
    second
        .eventually(Duration::from_secs(60), "the run succeeding", || async {
            Ok(s.last_run().await?["status"] == "succeeded")
        })
        .await?;
    let waited = leased_at(&s, run_id).await?.duration_since(killed)?;
    assert!(
        waited < Duration::from_secs(TTL_SECS + 2 + 3),
        "resumed {waited:?} after the kill"
    );
    assert_delivered_resending_at_most(&s, 60, 2);
    second.signal("TERM")?;
    second.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreground_run_against_a_live_daemon_holder_exits_3_naming_it_and_wait_goes_through()
-> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions { rows: 30, ..SLOW }).await?;
    s.cli = recovering(&s.cli);
    slow_writes(&s);
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    daemon
        .eventually(Duration::from_secs(30), "a write", || async {
            Ok(!s.fake.writes().is_empty())
        })
        .await?;
    let busy = s.cli.run(&["sync", "run", SYNC_ID, "--foreground"]).await?;
    assert_eq!(busy.code, 3, "{busy:?}");
    assert!(
        busy.stderr
            .contains(&format!("daemon process (pid {}", daemon.pid)),
        "{}",
        busy.stderr
    );
    let started = Instant::now();
    let waited = s
        .cli
        .run(&["sync", "run", SYNC_ID, "--foreground", "--wait", "60s"])
        .await?;
    assert_eq!(waited.code, 0, "{waited:?}");
    assert!(waited.stdout.contains("waiting up to"), "{}", waited.stdout);
    assert!(started.elapsed() < Duration::from_secs(60));
    // The busy attempt created no run; the daemon's run finished first, then
    // the waiting one replayed it all.
    let statuses: Vec<String> = sqlx::query_scalar("SELECT status FROM runs ORDER BY id")
        .fetch_all(&s.db.pool)
        .await?;
    assert_eq!(statuses, ["succeeded", "succeeded"]);
    assert!(s.writes_per_email().values().all(|n| *n == 1));
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

/// A daemon's sweeper puts back a `running` run whose process row is gone, so
/// a foreground run keeps its row (and liveness key) until its end is
/// recorded: removed before, a sweep in between re-queued the run it had
/// just finished (seen once in CI as `["succeeded", "running"]` above).
#[tokio::test(flavor = "multi_thread")]
async fn a_foreground_run_shows_signs_of_life_until_its_end_is_recorded() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions { rows: 6, ..SLOW }).await?;
    // What the run showed at the moment its process row went.
    sqlx::raw_sql(
        "CREATE TABLE seen_at_deregister (status text);
         CREATE FUNCTION note_deregister() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           INSERT INTO seen_at_deregister SELECT status FROM runs WHERE boot_id = OLD.boot_id;
           RETURN OLD;
         END $$;
         CREATE TRIGGER note_deregister AFTER DELETE ON processes
           FOR EACH ROW EXECUTE FUNCTION note_deregister();",
    )
    .execute(&s.db.pool)
    .await?;
    s.cli
        .run(&["sync", "run", SYNC_ID, "--foreground"])
        .await?
        .ok()?;
    let seen: Vec<String> = sqlx::query_scalar("SELECT status FROM seen_at_deregister")
        .fetch_all(&s.db.pool)
        .await?;
    assert_eq!(seen, ["succeeded"]);
    Ok(())
}

/// A run put back in the queue while a foreground process still ran it (as
/// a sweeper does with a run whose process looks dead) is not reported as
/// succeeded by that process: it exits 1 saying the run was put back.
#[tokio::test(flavor = "multi_thread")]
async fn a_foreground_run_put_back_meanwhile_says_so_instead_of_succeeding() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions { rows: 20, ..SLOW }).await?;
    slow_writes(&s);
    let cli = s.cli.clone();
    let run = tokio::spawn(async move { cli.run(&["sync", "run", SYNC_ID, "--foreground"]).await });
    eventually(Duration::from_secs(30), "a write", || async {
        Ok(!s.fake.writes().is_empty())
    })
    .await?;
    let put_back = sqlx::query(
        "UPDATE runs SET status = 'queued', trigger = 'recovery', worker_id = NULL, boot_id = NULL
         WHERE status = 'running'",
    )
    .execute(&s.db.pool)
    .await?
    .rows_affected();
    assert_eq!(put_back, 1);
    let out = run.await??;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stderr
            .contains("was put back in the queue while it ran here"),
        "{}",
        out.stderr
    );
    assert!(!out.stdout.contains("succeeded"), "{}", out.stdout);
    assert_eq!(s.last_run().await?["status"], "queued");
    Ok(())
}

/// Redis loses everything mid-run (`restart` or `FLUSHALL`) while a second
/// daemon stands by: the store's heartbeats keep the second daemon from
/// taking the run over; the run stops at its next proof and is resumed.
async fn redis_lost_mid_run(flush: bool) -> anyhow::Result<()> {
    let mut redis = PrivateRedis::start().await?;
    let mut s = Scenario::on(
        SLOW,
        TestDb::new().await?,
        TestRedis::at(&redis.url()).await?,
    )
    .await?;
    s.cli = recovering(&s.cli);
    slow_writes(&s);
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let mut first = DaemonProcess::spawn(&s.cli).await?;
    first
        .eventually(Duration::from_secs(30), "ten writes", || async {
            Ok(s.fake.writes().len() >= 10)
        })
        .await?;
    let mut second = DaemonProcess::spawn(&s.cli).await?;
    second.http_address().await?;
    if flush {
        let mut conn = s.redis.pool.get().await?;
        let _: () = deadpool_redis::redis::cmd("FLUSHALL")
            .query_async(&mut conn)
            .await?;
    } else {
        redis.restart().await?;
    }
    eventually(Duration::from_secs(90), "the run succeeding", || async {
        Ok(s.last_run()
            .await
            .map(|r| r["status"] == "succeeded")
            .unwrap_or(false))
    })
    .await
    .map_err(|e| {
        e.context(format!(
            "first daemon:\n{}\nsecond daemon:\n{}",
            first.log_tail(),
            second.log_tail()
        ))
    })?;
    let timeline: Vec<String> =
        sqlx::query_scalar("SELECT kind || ' ' || detail::text FROM run_events ORDER BY id")
            .fetch_all(&s.db.pool)
            .await?;
    // Met at its next proof: the lease gone (lease_lost), or Redis still
    // down (store_unavailable); either way it stopped and was put back.
    assert!(
        timeline.iter().any(
            |e| e.starts_with("requeued") && e.contains("proving the lease")
                || e.contains("lease_lost")
        ),
        "the run met the loss at its next proof: {timeline:?}"
    );
    let writes = s.writes_per_email();
    assert_eq!(writes.len(), 60, "every contact was written");
    assert!(
        writes.values().all(|n| *n == 1),
        "no key sent twice: {writes:?}"
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
        daemon.signal("TERM")?;
        daemon.wait(Duration::from_secs(30)).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_restarted_empty_mid_run_with_a_second_daemon_overlaps_nothing_and_resends_nothing()
-> anyhow::Result<()> {
    redis_lost_mid_run(false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn redis_flushed_mid_run_with_a_second_daemon_overlaps_nothing_and_resends_nothing()
-> anyhow::Result<()> {
    redis_lost_mid_run(true).await
}

/// Who is proven dead on this machine: a process row naming this host and
/// boot whose pid is gone, or whose pid now belongs to a process started at
/// another time (the pid was reused). A live one, or one registered on
/// another host or boot, is left to heartbeats.
#[tokio::test(flavor = "multi_thread")]
async fn only_processes_of_this_machine_whose_pid_is_gone_or_reused_are_proven_dead()
-> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")?
        .trim()
        .to_string();
    let boot = format!(
        "{} {}",
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?.trim(),
        std::fs::read_link("/proc/self/ns/pid")?.display()
    );
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let ticks: i64 = stat[stat.rfind(')').unwrap_or(0) + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap_or_default()
        .parse()?;
    let me = i32::try_from(std::process::id())?;
    // A child that has exited and that nobody has waited for: a zombie,
    // its /proc entry still there (as a SIGKILLed daemon's is until its
    // parent reaps it).
    let mut child = std::process::Command::new("true").spawn()?;
    let zombie = i32::try_from(child.id())?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let zombie_stat = std::fs::read_to_string(format!("/proc/{zombie}/stat"))?;
    assert!(zombie_stat.contains(") Z "), "{zombie_stat}");
    let zombie_ticks: i64 = zombie_stat[zombie_stat.rfind(')').unwrap_or(0) + 1..]
        .split_whitespace()
        .nth(19)
        .unwrap_or_default()
        .parse()?;
    let other_namespace = format!(
        "{} pid:[1]",
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")?.trim()
    );
    let rows = [
        ("alive", host.as_str(), boot.as_str(), me, ticks),
        ("zombie", host.as_str(), boot.as_str(), zombie, zombie_ticks),
        ("reused", host.as_str(), boot.as_str(), me, ticks + 1),
        ("gone", host.as_str(), boot.as_str(), i32::MAX - 7, 1),
        ("elsewhere", "another-host", boot.as_str(), i32::MAX - 7, 1),
        (
            "before-reboot",
            host.as_str(),
            "another-boot",
            i32::MAX - 7,
            1,
        ),
        // Same kernel and host name, another container's pid namespace.
        (
            "other-namespace",
            host.as_str(),
            other_namespace.as_str(),
            i32::MAX - 7,
            1,
        ),
    ];
    let mut ids = std::collections::HashMap::new();
    for (name, host, boot, pid, ticks) in rows {
        let id = uuid::Uuid::new_v4();
        ids.insert(id, name);
        sqlx::query(
            "INSERT INTO processes (boot_id, kind, host, pid, version, liveness_ttl_ms, machine_boot, start_ticks)
             VALUES ($1, 'foreground', $2, $3, 'test', 60000, $4, $5)",
        )
        .bind(id)
        .bind(host)
        .bind(pid)
        .bind(boot)
        .bind(ticks)
        .execute(&db.pool)
        .await?;
    }
    let mut dead: Vec<&str> =
        syncward::store::processes::dead_on_this_machine(&db.pool, uuid::Uuid::new_v4())
            .await?
            .iter()
            .map(|id| ids[id])
            .collect();
    dead.sort();
    assert_eq!(dead, vec!["gone", "reused", "zombie"]);
    child.wait()?;
    Ok(())
}
