//! The crash-safe sync run (guarantees 1, 2, 3 and 7), through the real binary
//! against real Postgres and Redis and the Brevo fake.

use std::time::{Duration, Instant};

use crate::fakes::brevo::Fault;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

const LEASE_LOST: &str =
    "The run lost its slot part-way through and stopped to avoid writing twice.";
const LEASE_BUSY: &str = "Another run of this sync was already in progress";

fn email(i: i64) -> String {
    format!("user{i}@example.com")
}

/// The seed scenario: 3 pages, the runner SIGKILLed when page 3's write
/// arrives; the cursor stays at page 3's start, and a new run replays what was
/// completed and re-sends only what was still pending, at most once.
async fn follow_one_contact(
    mode: &'static str,
    kill_at_request: usize,
) -> anyhow::Result<Scenario> {
    let s = Scenario::new(SyncOptions {
        mode,
        ..SyncOptions::default()
    })
    .await?;
    let kill = s.killer();
    s.fake.on_write(move |event| {
        if event.request == kill_at_request {
            kill();
        }
    });
    let first = s.run_foreground().await?;
    assert_ne!(
        first.code, 0,
        "the runner should have been killed: {first:?}"
    );
    assert_eq!(
        s.cursor().await?.as_deref(),
        Some("20"),
        "the cursor must stay at page 3's start"
    );
    let dead = s.last_run().await?;
    assert_eq!(
        dead["status"], "running",
        "a killed run stays running until recovered"
    );

    s.fake.on_write(|_| {});
    s.wait_for_lease_free().await?;
    let second = s.run_foreground().await?.ok()?;
    assert!(second.stdout.contains("succeeded"), "{}", second.stdout);
    assert_eq!(s.cursor().await?.as_deref(), Some("30"));
    let contacts = s.fake.contacts();
    for i in 1..=30 {
        assert!(
            contacts.contains_key(&email(i)),
            "{} never arrived",
            email(i)
        );
    }
    Ok(s)
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_bulk_runner_resumes_at_page_3_and_resends_only_pending_keys_once()
-> anyhow::Result<()> {
    let s = follow_one_contact("bulk", 3).await?;
    let writes = s.writes_per_email();
    for i in 1..=20 {
        assert_eq!(writes[&email(i)], 1, "{} was written again", email(i));
    }
    for i in 21..=30 {
        assert_eq!(
            writes[&email(i)],
            2,
            "page 3's pending keys are re-sent exactly once"
        );
    }
    let run = s.last_run().await?;
    assert_eq!(run["records_resent"], 10);
    assert_eq!(run["records_written"], 10);
    assert_eq!(run["records_read"], 10, "the new run starts at page 3");
    // Four import calls in all: pages 1, 2, 3 (killed), and 3 again.
    assert_eq!(s.fake.requests_to("/v3/contacts/import").len(), 4);
    Ok(())
}

/// One durable commit stands between a page's answer and the next page's
/// call (issue 62): while page 1's checkpoint cannot commit (the run's row
/// is locked), page 2's call does not leave, so a runner killed then
/// re-sends at most page 1. (Seen in CI as a Postgres restart re-sending two
/// pages.)
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_killed_while_its_checkpoint_waits_resends_only_that_page() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.fake.hold_writes();
    let drive = async {
        crate::helpers::daemon::eventually(
            Duration::from_secs(30),
            "page 1's call held at the fake",
            || async { Ok(s.fake.held_writes() >= 1) },
        )
        .await?;
        let mut lock = s.db.pool.begin().await?;
        sqlx::query("SELECT 1 FROM runs WHERE sync_id = $1 AND status = 'running' FOR UPDATE")
            .bind(SYNC_ID)
            .fetch_one(&mut *lock)
            .await?;
        s.fake.release_writes();
        crate::helpers::daemon::eventually(
            Duration::from_secs(30),
            "page 1's call answered",
            || async { Ok(!s.fake.requests_to("/v3/contacts/import").is_empty()) },
        )
        .await?;
        // Page 2's call must not leave while the lock is held (it would at
        // once if it did not wait).
        let _ =
            crate::helpers::daemon::eventually(Duration::from_secs(5), "page 2's call", || async {
                Ok(s.fake.requests_to("/v3/contacts/import").len() >= 2)
            })
            .await;
        let calls = s.fake.requests_to("/v3/contacts/import").len();
        s.killer()();
        lock.rollback().await?;
        anyhow::Ok(calls)
    };
    let (first, calls) = tokio::join!(s.run_foreground(), drive);
    assert_eq!(
        calls?, 1,
        "a call left before the page before it was checkpointed"
    );
    let first = first?;
    assert_ne!(first.code, 0, "the runner was not killed: {first:?}");
    s.wait_for_lease_free().await?;
    let second = s.run_foreground().await?.ok()?;
    assert!(second.stdout.contains("succeeded"), "{}", second.stdout);
    let writes = s.writes_per_email();
    // The killed runner's checkpoint may still commit once the lock goes
    // (its server session outlives it): page 1 is then not re-sent.
    for i in 1..=10 {
        assert!(
            (1..=2).contains(&writes[&email(i)]),
            "{} written {} times",
            email(i),
            writes[&email(i)]
        );
    }
    for i in 11..=30 {
        assert_eq!(writes[&email(i)], 1, "{} was written twice", email(i));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_single_runner_replays_completed_records_and_resends_pending_ones_at_most_once()
-> anyhow::Result<()> {
    // Page 3 goes out in chunks of 4: records 21–24, then 25–28 (the kill), then 29–30.
    let s = follow_one_contact("single", 25).await?;
    let writes = s.writes_per_email();
    for i in (1..=24).chain(29..=30) {
        assert_eq!(writes[&email(i)], 1, "{} was written twice", email(i));
    }
    for i in 25..=28 {
        assert!(
            (1..=2).contains(&writes[&email(i)]),
            "{} written {} times",
            email(i),
            writes[&email(i)]
        );
    }
    let run = s.last_run().await?;
    assert_eq!(
        run["records_replayed"], 4,
        "21–24 completed before the kill"
    );
    assert_eq!(run["records_resent"], 4, "25–28 were pending");
    Ok(())
}

/// A foreground run holds at most 3 store connections, its lease start and
/// finish included: a pool hands its idle connections round, so each further
/// one would plan the run's statements and load the ledger's partitions
/// again on the server.
#[tokio::test(flavor = "multi_thread")]
async fn a_foreground_run_holds_at_most_three_store_connections() -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use sqlx::Connection;

    let s = Scenario::new(SyncOptions {
        rows: 100,
        ..SyncOptions::default()
    })
    .await?;
    // Each import takes a moment, so the run lasts long enough to be watched.
    s.fake
        .on_write(|_| std::thread::sleep(Duration::from_millis(20)));
    // The store's sessions but the test's (the source's name themselves),
    // looked at through one connection of its own.
    const OTHERS: &str = "SELECT count(*) FROM pg_stat_activity
         WHERE datname = current_database() AND backend_type = 'client backend'
           AND application_name = '' AND pid <> pg_backend_pid()";
    let mut looker = sqlx::PgConnection::connect_with(&s.db.pool.connect_options()).await?;
    let test_pool = sqlx::query_scalar::<_, i64>(OTHERS)
        .fetch_one(&mut looker)
        .await?;
    let done = Arc::new(AtomicBool::new(false));
    let watch = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut counts = Vec::new();
            while !done.load(Ordering::SeqCst) {
                let n = sqlx::query_scalar::<_, i64>(OTHERS)
                    .fetch_one(&mut looker)
                    .await?;
                counts.push(n - test_pool);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            anyhow::Ok(counts)
        })
    };
    let run = s.run_foreground().await;
    done.store(true, Ordering::SeqCst);
    let counts = watch.await??;
    // Sessions held, not ending: a session the run closed (its first
    // probe of the store) is listed until its process exits, which a
    // loaded machine delays; a held one is seen in three looks in a row.
    let most = counts
        .windows(3)
        .map(|w| w.iter().copied().min().unwrap_or(0))
        .max()
        .unwrap_or(0);
    let samples = counts.len();
    let run = run?.ok()?;
    assert!(
        run.stdout.contains("100 read, 100 written"),
        "{}",
        run.stdout
    );
    assert!(
        samples >= 20,
        "only {samples} looks at the store's sessions"
    );
    let held = most;
    assert!(
        (1..=3).contains(&held),
        "the run held {held} store connections at once (sessions seen: {counts:?})"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn replay_of_a_delivered_range_makes_no_destination_call() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.run_foreground().await?.ok()?;
    let calls = s.fake.requests().len();
    sqlx::query("UPDATE sync_cursors SET cursor = NULL")
        .execute(&s.db.pool)
        .await?;
    let again = s.run_foreground().await?.ok()?;
    assert!(
        again.stdout.contains("30 read, 0 written, 30 replayed"),
        "{}",
        again.stdout
    );
    assert_eq!(
        s.fake.requests().len(),
        calls,
        "a fully delivered range must send nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
/// The proof travels beside the checkpoint (docs/contract.md): page 2's
/// checkpoint, fenced, still moves the cursor past the page it proved clean,
/// but no call leaves after the failed proof.
async fn deleting_the_lease_mid_run_stops_it_with_lease_lost_before_the_next_call()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let key = s.lease_key();
    let url = s.redis.url.clone();
    s.fake.on_write(move |event| {
        if event.request == 2 {
            let client = deadpool_redis::redis::Client::open(url.as_str()).expect("redis url");
            let mut conn = client.get_connection().expect("redis connection");
            let _: () = deadpool_redis::redis::cmd("DEL")
                .arg(&key)
                .query(&mut conn)
                .expect("DEL");
        }
    });
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stdout.contains(LEASE_LOST), "{}", out.stdout);
    assert_eq!(
        s.fake.requests().len(),
        2,
        "a call left after the lease was gone"
    );
    assert_eq!(
        s.cursor().await?.as_deref(),
        Some("20"),
        "the cursor stands after the last clean page"
    );
    let run = s.last_run().await?;
    assert_eq!(run["status"], "failed");
    assert_eq!(run["failure_code"], "lease_lost");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreground_run_while_a_live_holder_has_the_lease_exits_3_and_sends_nothing()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let holder = s.hold_lease_as_live_process().await?;
    let mut conn = s.redis.pool.get().await?;
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 3, "{out:?}");
    assert!(
        out.stderr.contains("is busy") && out.stderr.contains(&holder),
        "{}",
        out.stderr
    );
    assert!(s.fake.requests().is_empty());

    // A holder whose liveness key is gone is dead: its lease is taken over.
    let _: () = deadpool_redis::redis::cmd("DEL")
        .arg(format!("{}:daemon:{holder}", s.redis.prefix))
        .query_async(&mut conn)
        .await?;
    let out = s.run_foreground().await?.ok()?;
    assert!(out.stdout.contains("succeeded"), "{}", out.stdout);
    Ok(())
}

/// A run that a worker claims while another run holds the lease ends
/// `skipped` with the exact sentence (the daemon's path).
#[tokio::test(flavor = "multi_thread")]
async fn a_claimed_run_whose_sync_is_held_is_skipped_with_the_exact_sentence() -> anyhow::Result<()>
{
    let s = Scenario::new(SyncOptions::default()).await?;
    s.hold_lease_as_live_process().await?;
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let mut daemon = crate::helpers::daemon::DaemonProcess::spawn(&s.cli).await?;
    daemon
        .eventually(Duration::from_secs(30), "the run ending", || async {
            Ok(s.last_run().await?["status"] == "skipped")
        })
        .await?;
    let run = s.last_run().await?;
    assert_eq!(run["failure_detail"], LEASE_BUSY);
    assert!(s.fake.requests().is_empty());
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_key_fails_the_run_as_destination_auth_failed() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.fake.push_faults([Fault::Unauthorized]);
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 1);
    assert!(
        out.stdout.contains("destination_auth_failed"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("Renew the API key"), "{}", out.stdout);
    assert!(
        out.stdout.contains("Whose job:     the sync's owner"),
        "the owner is the customer: {}",
        out.stdout
    );
    assert_eq!(
        s.last_run().await?["failure_code"],
        "destination_auth_failed"
    );
    assert_eq!(s.cursor().await?, None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_429_is_waited_out_for_its_reset_and_the_run_succeeds() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.fake.push_faults([Fault::RateLimited { reset_secs: 1 }]);
    let started = Instant::now();
    s.run_foreground().await?.ok()?;
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "the reset was not waited for"
    );
    let statuses: Vec<u16> = s
        .fake
        .requests_to("/v3/contacts/import")
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [429, 202, 202, 202]);
    assert_eq!(s.fake.contacts().len(), 30);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn three_500s_then_ok_succeeds() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.fake
        .push_faults([Fault::ServerError, Fault::ServerError, Fault::ServerError]);
    s.run_foreground().await?.ok()?;
    let statuses: Vec<u16> = s
        .fake
        .requests_to("/v3/contacts/import")
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [500, 500, 500, 202, 202, 202]);
    assert_eq!(s.last_run().await?["status"], "succeeded");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destination_that_keeps_failing_ends_as_destination_unavailable() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        timeout: "300ms",
        ..SyncOptions::default()
    })
    .await?;
    s.fake.push_faults([
        Fault::Garbage,
        Fault::Hang,
        Fault::ServerError,
        Fault::ServerError,
        Fault::ServerError,
    ]);
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 1);
    let run = s.last_run().await?;
    assert_eq!(run["failure_code"], "destination_unavailable");
    assert_eq!(
        s.cursor().await?,
        None,
        "nothing was delivered, so the cursor did not move"
    );
    // Page 2 was staked while page 1's call was in flight: the failed run
    // gave that stake back (only page 1's, whose call may have written, is
    // left open).
    let open: i64 =
        sqlx::query_scalar("SELECT count(*) FROM delivery_batches WHERE completed_at IS NULL")
            .fetch_one(&s.db.pool)
            .await?;
    assert!(open <= 1, "{open} open stakes: the next page's was kept");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_record_rejected_fails_the_run_as_destination_rejected_all() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        mode: "single",
        ..SyncOptions::default()
    })
    .await?;
    s.fake.reject_emails(|_| true);
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 1);
    assert!(out.stdout.contains("Check the mapping"), "{}", out.stdout);
    let run = s.last_run().await?;
    assert_eq!(run["failure_code"], "destination_rejected_all");
    assert_eq!(
        s.cursor().await?,
        None,
        "a page rejected whole is not skipped over"
    );
    let kept: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM rejected_records WHERE code = 'invalid_parameter'",
    )
    .fetch_one(&s.db.pool)
    .await?;
    assert_eq!(kept, 10);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn some_rejected_records_are_kept_with_code_and_message_and_the_run_succeeds()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        mode: "single",
        ..SyncOptions::default()
    })
    .await?;
    s.fake
        .reject_emails(|e| e.starts_with("user7@") || e.starts_with("user17@"));
    sqlx::query("UPDATE contacts SET email = NULL WHERE id = 23")
        .execute(&s.db.pool)
        .await?;
    let out = s.run_foreground().await?.ok()?;
    assert!(
        out.stdout
            .contains("30 read, 27 written, 0 replayed, 3 rejected"),
        "{}",
        out.stdout
    );
    let rows: Vec<(Option<String>, String, String)> = sqlx::query_as(
        "SELECT email, code, message FROM rejected_records ORDER BY email NULLS LAST",
    )
    .fetch_all(&s.db.pool)
    .await?;
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0].0.as_deref(), Some("user17@example.com"));
    assert_eq!(rows[0].1, "invalid_parameter");
    assert!(rows[0].2.contains("rejected"), "{}", rows[0].2);
    assert_eq!(rows[2].0, None);
    assert_eq!(rows[2].1, "missing_email");
    assert_eq!(s.cursor().await?.as_deref(), Some("30"));
    Ok(())
}

/// A record whose write kills the runner every time is sent at most
/// `record_attempts` times across restarts, then rejected, and the rest of the
/// source is delivered.
#[tokio::test(flavor = "multi_thread")]
async fn a_poison_record_is_sent_at_most_record_attempts_times_then_rejected() -> anyhow::Result<()>
{
    let s = Scenario::new(SyncOptions {
        mode: "single",
        ..SyncOptions::default()
    })
    .await?;
    let poison = email(14);
    let kill = s.killer();
    let p = poison.clone();
    s.fake.on_write(move |event| {
        if event.emails.contains(&p) {
            kill();
        }
    });
    let mut finished = None;
    for _ in 0..6 {
        let out = s.run_foreground().await?;
        if out.code == 0 {
            finished = Some(out);
            break;
        }
        s.wait_for_lease_free().await?;
    }
    let out =
        finished.ok_or_else(|| anyhow::anyhow!("the sync never got past the poison record"))?;
    assert!(out.stdout.contains("succeeded"), "{}", out.stdout);
    let sends = s
        .fake
        .requests_to("/v3/contacts")
        .iter()
        .filter(|r| r.body["email"] == poison.as_str())
        .count();
    assert_eq!(
        sends, 3,
        "the poison record is sent exactly record_attempts times"
    );
    let code: String = sqlx::query_scalar("SELECT code FROM rejected_records WHERE email = $1")
        .bind(&poison)
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(code, "attempt_budget_exhausted");
    let contacts = s.fake.contacts();
    for i in (1..=30).filter(|i| *i != 14) {
        assert!(
            contacts.contains_key(&email(i)),
            "{} was not delivered",
            email(i)
        );
    }
    // Its neighbours in the same chunk were re-sent alone, not exhausted.
    let exhausted: i64 = sqlx::query_scalar("SELECT count(*) FROM rejected_records")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(exhausted, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn delivery_keys_hold_no_email_or_source_value() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.run_foreground().await?.ok()?;
    let keys: Vec<Vec<u8>> = sqlx::query_scalar("SELECT key FROM delivery_states")
        .fetch_all(&s.db.pool)
        .await?;
    assert_eq!(keys.len(), 30);
    for key in keys {
        assert_eq!(key.len(), 32);
        let as_text = String::from_utf8_lossy(&key).to_string();
        assert!(
            !as_text.contains("example.com")
                && !as_text.contains("user")
                && !as_text.contains("First")
        );
    }
    let completed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM delivery_states WHERE status = 'completed' AND result ? 'processId'",
    )
    .fetch_one(&s.db.pool)
    .await?;
    assert_eq!(
        completed, 30,
        "bulk keys keep the import's processId as their result"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn ledger_purge_deletes_only_completed_keys_past_retention() -> anyhow::Result<()> {
    // Per-record destinations complete keys one by one.
    let s = Scenario::new(SyncOptions {
        mode: "single",
        ..SyncOptions::default()
    })
    .await?;
    s.run_foreground().await?.ok()?;
    // Completed eight days ago, on a day with no partition: the default
    // partition's rows are deleted key by key.
    sqlx::query(
        "UPDATE deliveries SET completed_at = now() - interval '8 days',
                completed_on = ((now() - interval '8 days') AT TIME ZONE 'UTC')::date
         WHERE key IN (SELECT key FROM deliveries LIMIT 12)",
    )
    .execute(&s.db.pool)
    .await?;
    let out = s.cli.run(&["ledger", "purge"]).await?.ok()?;
    assert!(
        out.stdout.starts_with("Deleted 12 completed delivery keys"),
        "{}",
        out.stdout
    );
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(left, 18);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn ledger_purge_deletes_completed_bulk_batches_past_retention() -> anyhow::Result<()> {
    // A bulk import completes its page's keys as one batch (3 pages of 10).
    let s = Scenario::new(SyncOptions::default()).await?;
    s.run_foreground().await?.ok()?;
    let batches: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM delivery_batches WHERE completed_at IS NOT NULL AND octet_length(packed_keys) = 320",
    )
    .fetch_one(&s.db.pool)
    .await?;
    assert_eq!(batches, 3);
    let per_key: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deliveries WHERE status = 'completed'")
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(per_key, 0, "bulk keys live in their batch alone");
    // One old completed batch; one old per-key batch that never completed and
    // that no key row points at any more (it goes); and one old bulk claim
    // that never answered (its keys stay pending, so it stays).
    sqlx::query(
        "UPDATE delivery_batches SET completed_at = now() - interval '8 days',
                completed_on = ((now() - interval '8 days') AT TIME ZONE 'UTC')::date
         WHERE id = (SELECT min(id) FROM delivery_batches)",
    )
    .execute(&s.db.pool)
    .await?;
    sqlx::query(
        "INSERT INTO delivery_batches (sync_id, keys, created_at)
         VALUES ($1, '{}', now() - interval '8 days')",
    )
    .bind(SYNC_ID)
    .execute(&s.db.pool)
    .await?;
    sqlx::query(
        "INSERT INTO delivery_batches (sync_id, keys, packed_keys, per_key, page, fence, created_at)
         VALUES ($1, '{}', sha256('a') || sha256('b'), false, sha256('page'), 1,
                 now() - interval '8 days')",
    )
    .bind(SYNC_ID)
    .execute(&s.db.pool)
    .await?;
    let out = s.cli.run(&["ledger", "purge"]).await?.ok()?;
    assert!(
        out.stdout.starts_with("Deleted 10 completed delivery keys"),
        "{}",
        out.stdout
    );
    let left: Vec<(String, i64)> = sqlx::query_as(
        "SELECT status, count(*) FROM delivery_states GROUP BY status ORDER BY status",
    )
    .fetch_all(&s.db.pool)
    .await?;
    assert_eq!(
        left,
        vec![("completed".to_string(), 20), ("pending".to_string(), 2)]
    );
    let batches_left: i64 = sqlx::query_scalar("SELECT count(*) FROM delivery_batches")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(batches_left, 3);
    Ok(())
}

/// `--json`: one object per line (started, each page, finished), so scripts
/// read a foreground run without parsing sentences; a failure carries its
/// three sentences.
#[tokio::test(flavor = "multi_thread")]
async fn a_foreground_run_with_json_prints_an_object_per_page_and_a_summary() -> anyhow::Result<()>
{
    let s = Scenario::new(SyncOptions::default()).await?;
    let args = ["sync", "run", SYNC_ID, "--foreground", "--json"];
    let out = s.cli.run(&args).await?.ok()?;
    let lines = out
        .stdout
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<Vec<serde_json::Value>, _>>()?;
    assert_eq!(lines[0]["event"], "started", "{}", out.stdout);
    let pages: Vec<_> = lines.iter().filter(|l| l["event"] == "page").collect();
    assert_eq!(pages.len(), 3, "{}", out.stdout);
    assert_eq!(pages[2]["counts"]["read"], 30);
    let last = &lines[lines.len() - 1];
    assert_eq!(last["event"], "finished");
    assert_eq!(last["status"], "succeeded");
    assert_eq!(last["counts"]["written"], 30);
    assert!(last["failure"].is_null());

    sqlx::raw_sql("ALTER TABLE contacts RENAME TO contacts_gone")
        .execute(&s.db.pool)
        .await?;
    let out = s.cli.run(&args).await?;
    assert_eq!(out.code, 1, "{out:?}");
    let last: serde_json::Value =
        serde_json::from_str(out.stdout.lines().last().unwrap_or_default())?;
    assert_eq!(last["status"], "failed");
    assert_eq!(last["failure"]["code"], "source_query_failed");
    assert_eq!(last["failure"]["whose_job"], "the sync's owner");
    assert!(
        last["failure"]["what_next"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );

    // Queued for a daemon: the run's id, and whether it was new.
    let queued = s
        .cli
        .run(&["sync", "run", SYNC_ID, "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(queued["new"], true);
    assert_eq!(queued["sync"], SYNC_ID);
    let again = s
        .cli
        .run(&["sync", "run", SYNC_ID, "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(
        (again["run_id"].clone(), again["new"].clone()),
        (queued["run_id"].clone(), false.into())
    );
    Ok(())
}

/// On a terminal a foreground run redraws one progress line (indicatif)
/// instead of printing a line per page, and still ends with its summary.
#[tokio::test(flavor = "multi_thread")]
async fn on_a_terminal_a_foreground_run_redraws_one_progress_line() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let output = s
        .cli
        .command_on_terminal(&["sync", "run", SYNC_ID, "--foreground"])
        .output()
        .await?;
    assert!(output.status.success(), "{output:?}");
    let seen = String::from_utf8_lossy(&output.stdout);
    assert!(seen.contains("started in the foreground"), "{seen}");
    assert!(seen.contains("succeeded: 30 read, 30 written"), "{seen}");
    assert!(
        !seen.contains("  page 1: 10 records"),
        "no line per page: {seen}"
    );
    // The line is redrawn in place: carriage returns or cursor moves.
    assert!(seen.contains('\r') || seen.contains("\u{1b}["), "{seen:?}");
    Ok(())
}
