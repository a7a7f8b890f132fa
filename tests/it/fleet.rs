//! A fleet: syncs that share one destination account pace as one, across
//! processes, through the account's budget in Redis.

use std::time::Duration;

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::{BREVO_KEY, SYNC_ID, Scenario, SyncOptions};

/// Two syncs on one Brevo key, run at the same moment by two processes, share
/// the account's budget: the fake, enforcing Brevo's limit of 10 requests in
/// each second, never answers 429, and every contact of both arrives. (Each
/// run alone would send its 9 a second: 18 together.)
#[tokio::test(flavor = "multi_thread")]
async fn syncs_sharing_a_destination_account_never_draw_a_429_together() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        mode: "single",
        ..SyncOptions::default()
    })
    .await?;
    let destination = format!(
        "kind = \"brevo\"\napi_key_env = \"TEST_BREVO_KEY\"\nbase_url = \"{}\"\nmode = \"single\"\n\
         list_ids = [12]\nconcurrency = 4\nrequests_per_second = 9\ntimeout = \"5s\"",
        s.fake.base_url
    );
    s.publish_with_destination(10, &destination).await?;
    // The second sync: the same file under another id.
    publish_copy(&s, "acme-contacts-2", None).await?;
    s.fake.enforce_rate_limit(10);

    let run = |id: &'static str| {
        let cli = s.cli.clone();
        async move { cli.run(&["sync", "run", id, "--foreground"]).await?.ok() }
    };
    let (a, b) = tokio::join!(run(SYNC_ID), run("acme-contacts-2"));
    a?;
    b?;
    assert_eq!(
        s.fake.rate_limited(),
        0,
        "the account's limit was never hit"
    );
    let written = s.writes_per_email();
    assert_eq!(written.len(), 30, "{written:?}");
    assert!(
        written.values().all(|n| *n == 2),
        "each contact once per sync: {written:?}"
    );
    Ok(())
}

/// A run whose account budget is booked far ahead (other daemons' runs took
/// the next seconds) gives its worker back instead of holding it while it
/// waits: on a daemon with one worker, a sync with nothing to send runs and
/// succeeds meanwhile; the waiting run comes back in the queue (once: it
/// keeps the slot it reserved), its attempt returned, and delivers
/// everything once the budget frees.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_waiting_for_its_accounts_budget_gives_its_worker_back() -> anyhow::Result<()> {
    let s = paced_scenario(30, 2).await?;
    publish_nothing_to_send(&s).await?;
    // Other daemons booked the account's next 8 seconds.
    book_account_ahead(&s, 8_000).await?;

    let cli = one_worker(&s);
    let daemon = DaemonProcess::spawn(&cli).await?;
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let events = |sync: &'static str| {
        let pool = s.db.pool.clone();
        async move {
            let rows: Vec<(String, serde_json::Value)> = sqlx::query_as(
                "SELECT e.kind, e.detail FROM run_events e JOIN runs r ON r.id = e.run_id
                 WHERE r.sync_id = $1 ORDER BY e.id",
            )
            .bind(sync)
            .fetch_all(&pool)
            .await?;
            anyhow::Ok(rows)
        }
    };
    daemon
        .eventually(
            Duration::from_secs(30),
            "the run giving its worker back",
            || async {
                Ok(events(SYNC_ID)
                    .await?
                    .iter()
                    .any(|(kind, _)| kind == "requeued"))
            },
        )
        .await?;
    s.cli.run(&["sync", "run", "acme-nothing"]).await?.ok()?;
    let status = |sync: &'static str| {
        let pool = s.db.pool.clone();
        async move {
            let status: Option<String> = sqlx::query_scalar(
                "SELECT status FROM runs WHERE sync_id = $1 ORDER BY id DESC LIMIT 1",
            )
            .bind(sync)
            .fetch_optional(&pool)
            .await?;
            anyhow::Ok(status.unwrap_or_default())
        }
    };
    daemon
        .eventually(
            Duration::from_secs(30),
            "the other sync's run succeeding",
            || async { Ok(status("acme-nothing").await? == "succeeded") },
        )
        .await?;
    assert_eq!(
        status(SYNC_ID).await?,
        "queued",
        "the waiting run was back in the queue, not on the one worker"
    );
    assert!(s.fake.writes().is_empty(), "nothing sent before the slot");
    daemon
        .eventually(
            Duration::from_secs(60),
            "the waiting run succeeding",
            || async { Ok(status(SYNC_ID).await? == "succeeded") },
        )
        .await?;
    let run = s.last_run().await?;
    assert_eq!(run["attempt"], 1, "waiting is not a try: {run}");
    assert_eq!(s.writes_per_email().len(), 30);
    let requeued: Vec<_> = events(SYNC_ID)
        .await?
        .into_iter()
        .filter(|(kind, _)| kind == "requeued")
        .collect();
    // It came back for the slot it had reserved, not to the end of the line.
    assert_eq!(requeued.len(), 1, "{requeued:?}");
    let reason = requeued[0].1["reason"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(reason.contains("request budget"), "{reason}");
    assert_eq!(requeued[0].1["trigger"], "manual", "{requeued:?}");
    Ok(())
}

/// A run whose account slot is near (within the two seconds a run may wait
/// for it) waits for it without its worker, and does not go back in the
/// queue: on a daemon with one worker, a run of another sync, enqueued while
/// the first waits, is claimed and succeeds before the first ends; the
/// first sends every page in its slots, once, on its first attempt.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_waiting_for_a_near_slot_does_not_hold_its_worker() -> anyhow::Result<()> {
    // One request a second: every page after the first waits ~1.1 s for its
    // slot, so the run lasts several seconds after its first wait.
    let s = paced_scenario(40, 1).await?;
    publish_nothing_to_send(&s).await?;
    s.fake.enforce_rate_limit(10);

    let cli = one_worker(&s);
    let daemon = DaemonProcess::spawn(&cli).await?;
    // Another daemon booked the account's next 1.8 s: the first page waits
    // that long.
    book_account_ahead(&s, 1_800).await?;
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let status = |sync: &'static str| {
        let pool = s.db.pool.clone();
        async move {
            let status: Option<String> = sqlx::query_scalar(
                "SELECT status FROM runs WHERE sync_id = $1 ORDER BY id DESC LIMIT 1",
            )
            .bind(sync)
            .fetch_optional(&pool)
            .await?;
            anyhow::Ok(status.unwrap_or_default())
        }
    };
    daemon
        .eventually(Duration::from_secs(30), "the run starting", || async {
            Ok(status(SYNC_ID).await? == "running")
        })
        .await?;
    s.cli.run(&["sync", "run", "acme-nothing"]).await?.ok()?;
    daemon
        .eventually(Duration::from_secs(60), "both runs succeeding", || async {
            Ok(status("acme-nothing").await? == "succeeded"
                && status(SYNC_ID).await? == "succeeded")
        })
        .await?;
    // In the order the store recorded them: the other sync's run was claimed
    // and ended while the waiting run was still running.
    let events: Vec<(String, String)> = sqlx::query_as(
        "SELECT r.sync_id, e.kind FROM run_events e JOIN runs r ON r.id = e.run_id ORDER BY e.id",
    )
    .fetch_all(&s.db.pool)
    .await?;
    let at = |sync: &str, kind: &str| events.iter().position(|(s, k)| s == sync && k == kind);
    let (Some(other_ended), Some(waiting_ended)) =
        (at("acme-nothing", "succeeded"), at(SYNC_ID, "succeeded"))
    else {
        anyhow::bail!("runs not both recorded: {events:?}");
    };
    assert!(
        other_ended < waiting_ended,
        "the other run went while the first waited for its slot: {events:?}"
    );
    assert!(
        !events.iter().any(|(_, kind)| kind == "requeued"),
        "the waiting run stayed off the queue: {events:?}"
    );
    let run = s.last_run().await?;
    assert_eq!(run["attempt"], 1, "{run}");
    let written = s.writes_per_email();
    assert_eq!(written.len(), 40, "{written:?}");
    assert!(written.values().all(|n| *n == 1), "{written:?}");
    assert_eq!(s.fake.rate_limited(), 0);
    assert_eq!(s.fake.requests_to("/v3/contacts/import").len(), 4);
    Ok(())
}

/// SIGTERM while a run waits for its account's slot without its worker: the
/// drain still waits for that run (it is no worker's, but the daemon's), which
/// stops at its next clean page, checkpoints and goes back in the queue with
/// its attempt given back; the daemon exits 0 well within the 25 s cut-off,
/// and the next daemon sends the rest, every contact once.
#[tokio::test(flavor = "multi_thread")]
async fn sigterm_while_a_run_waits_for_its_slot_without_its_worker_drains_it() -> anyhow::Result<()>
{
    // One request a second: every page waits ~1 s for its slot.
    let s = paced_scenario(40, 1).await?;
    s.fake.enforce_rate_limit(10);
    let cli = one_worker(&s).with_env("SYNCWARD__LOG__LEVEL", "info,syncward=debug");
    let mut first = DaemonProcess::spawn(&cli).await?;
    book_account_ahead(&s, 1_800).await?;
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    // The run has given its worker back.
    first
        .wait_for_log("the worker is free meanwhile", 1, Duration::from_secs(30))
        .await?;
    first.signal("TERM")?;
    let (code, took) = first.wait(Duration::from_secs(40)).await?;
    assert_eq!(
        code,
        Some(0),
        "a clean drain exits 0; the log ends:\n{}",
        first.log_tail()
    );
    // The contract: drained by 15 s, gone by 25 s (the cut-off would exit 0
    // too, but leave the run running with its attempt spent: checked below).
    assert!(took < Duration::from_secs(25), "exited after {took:?}");
    let run = s.last_run().await?;
    assert_eq!(run["status"], "queued", "{run}");
    assert_eq!(run["trigger"], "shutdown", "{run}");
    assert_eq!(
        run["attempt"], 0,
        "a clean stop gives its attempt back: {run}"
    );
    let cursor: i64 = s
        .cursor()
        .await?
        .map(|c| c.parse())
        .transpose()?
        .unwrap_or_default();
    let written = s.fake.writes().len() as i64;
    assert_eq!(
        cursor, written,
        "the cursor is at the last clean page: every written record is checkpointed"
    );
    assert!(
        written < 40,
        "the run was stopped before its end ({written} written)"
    );
    let open: i64 =
        sqlx::query_scalar("SELECT count(*) FROM delivery_batches WHERE completed_at IS NULL")
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(open, 0, "an unsent claim was left behind");

    let mut second = DaemonProcess::spawn(&cli).await?;
    second
        .eventually(Duration::from_secs(60), "the run finishing", || async {
            Ok(s.last_run().await?["status"] == "succeeded")
        })
        .await?;
    second.signal("TERM")?;
    second.wait(Duration::from_secs(30)).await?;
    let writes = s.writes_per_email();
    assert_eq!(writes.len(), 40, "{writes:?}");
    assert!(writes.values().all(|n| *n == 1), "{writes:?}");
    assert_eq!(s.fake.rate_limited(), 0);
    Ok(())
}

/// A run whose account slot is near but whose daemon has no place left for
/// runs waiting without their worker (one worker, one place, taken by
/// another run of the account) does not hold its worker for the wait: it
/// goes back in the queue with its slot. Both syncs still send every
/// contact once, with no 429.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_with_no_place_to_wait_alone_goes_back_in_the_queue() -> anyhow::Result<()> {
    // Two requests a second shared by both syncs: pages wait ~0.5-1 s.
    let s = paced_scenario(40, 2).await?;
    publish_copy(&s, "acme-second", None).await?;
    s.fake.enforce_rate_limit(10);
    let cli = one_worker(&s).with_env("SYNCWARD__LOG__LEVEL", "info,syncward=debug");
    let daemon = DaemonProcess::spawn(&cli).await?;
    // The first run waits 1.8 s for its first slot: it gives its worker
    // back, and holds the daemon's one place until it ends.
    book_account_ahead(&s, 1_800).await?;
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    daemon
        .wait_for_log("the worker is free meanwhile", 1, Duration::from_secs(30))
        .await?;
    // Once its first import is out, the second sync's run takes the worker:
    // its slots come between the first run's, 0.5-1 s ahead.
    daemon
        .eventually(Duration::from_secs(30), "the first import", || async {
            Ok(!s.fake.requests_to("/v3/contacts/import").is_empty())
        })
        .await?;
    s.cli.run(&["sync", "run", "acme-second"]).await?.ok()?;
    daemon
        .eventually(Duration::from_secs(90), "both runs succeeding", || async {
            let done: i64 =
                sqlx::query_scalar("SELECT count(*) FROM runs WHERE status = 'succeeded'")
                    .fetch_one(&s.db.pool)
                    .await?;
            Ok(done == 2)
        })
        .await?;
    let requeued: Vec<String> = sqlx::query_scalar(
        "SELECT r.sync_id FROM run_events e JOIN runs r ON r.id = e.run_id
         WHERE e.kind = 'requeued' ORDER BY e.id",
    )
    .fetch_all(&s.db.pool)
    .await?;
    assert!(
        requeued.iter().any(|sync| sync == "acme-second"),
        "the second run went back in the queue rather than wait on the worker: {requeued:?}"
    );
    let written = s.writes_per_email();
    assert_eq!(written.len(), 40, "{written:?}");
    assert!(
        written.values().all(|n| *n == 2),
        "each sync wrote each contact once: {written:?}"
    );
    assert_eq!(s.fake.rate_limited(), 0);
    Ok(())
}

/// A scenario of `rows` contacts in pages of 10, published to a bulk Brevo
/// destination whose account budget is `requests_per_second`.
async fn paced_scenario(rows: i64, requests_per_second: u32) -> anyhow::Result<Scenario> {
    let s = Scenario::new(SyncOptions {
        rows,
        ..SyncOptions::default()
    })
    .await?;
    let destination = format!(
        "kind = \"brevo\"\napi_key_env = \"TEST_BREVO_KEY\"\nbase_url = \"{}\"\nmode = \"bulk\"\n\
         list_ids = [12]\nrequests_per_second = {requests_per_second}\ntimeout = \"5s\"",
        s.fake.base_url
    );
    s.publish_with_destination(10, &destination).await?;
    Ok(s)
}

/// A second sync on the scenario's account whose query finds nothing to send.
async fn publish_nothing_to_send(s: &Scenario) -> anyhow::Result<()> {
    publish_copy(s, "acme-nothing", Some("WHERE id < 0")).await
}

/// A copy of the scenario's sync as sync `id` (same source and account), its
/// query narrowed by `filter` if given.
async fn publish_copy(s: &Scenario, id: &str, filter: Option<&str>) -> anyhow::Result<()> {
    let mut file = std::fs::read_to_string(s.dir.path().join("sync.toml"))?.replacen(
        &format!("id = \"{SYNC_ID}\""),
        &format!("id = \"{id}\""),
        1,
    );
    if let Some(filter) = filter {
        file = file.replacen("FROM contacts\"", &format!("FROM contacts {filter}\""), 1);
    }
    let path = s.dir.path().join(format!("{id}.toml"));
    std::fs::write(&path, file)?;
    s.cli
        .run(&["sync", "apply", path.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    Ok(())
}

/// The scenario's command line for a daemon of one worker that polls often.
fn one_worker(s: &Scenario) -> crate::helpers::Syncward {
    s.cli
        .clone()
        .with_env("SYNCWARD__WORKERS__COUNT", "1")
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "100ms")
}

/// Books the scenario's account `ms` ahead, as other daemons' runs would:
/// the budget's slot key, as `SharedBudgets` names it (the key's digest, not
/// the key), set to that instant on Redis' clock.
async fn book_account_ahead(s: &Scenario, ms: i64) -> anyhow::Result<()> {
    use sha2::Digest;
    let digest = hex::encode(&sha2::Sha256::digest(BREVO_KEY.as_bytes())[..8]);
    let slot_key = format!("{}:budget:brevo:{digest}", s.redis.prefix);
    let mut conn = s.redis.pool.get().await?;
    let (seconds, micros): (i64, i64) = deadpool_redis::redis::cmd("TIME")
        .query_async(&mut conn)
        .await?;
    let _: () = deadpool_redis::redis::cmd("SET")
        .arg(&slot_key)
        .arg(seconds * 1000 + micros / 1000 + ms)
        .arg("PX")
        .arg(ms + 1_000)
        .query_async(&mut conn)
        .await?;
    Ok(())
}
