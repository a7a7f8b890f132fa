//! The chaos driver (guarantees 1–4 under fire): two daemons share one
//! Postgres and one Redis, a bulk and a single sync move contacts to the Brevo
//! fake (with a small random latency), and a random daemon is killed at a
//! random moment — SIGKILL mostly, SIGTERM sometimes — and restarted, over and
//! over. Then, from the fake's log and the database:
//!
//! - every source record was written (lost = 0). A key that kills cut off
//!   `ledger.record_attempts` times in a row is quarantined by the poison
//!   guard, as the contract says; the test answers the alert as an operator
//!   would, with `sync retry-rejected` (and one more run after the storm),
//!   and counts it as lost unless the send before each quarantine had a kill
//!   after it and the key is delivered in the end (`CHAOS_RECORD_ATTEMPTS=1`
//!   makes every cut-off key take this path);
//! - no key was sent again once it was `completed` (re-sent completed = 0);
//! - every second send of a key had a kill between it and the send before
//!   (re-sends only of keys `pending` at a kill, at most once per kill);
//! - no two attempts of one sync held it at the same time (overlaps = 0);
//! - the cursor never moved backwards (sampled every 50 ms);
//! - every run ended in a final state.
//!
//! Kill times are taken when the killed process is gone; a send the fake
//! logged up to `SEND_LAG` after a kill counts as sent before it (see there).
//! `CHAOS_KILLS` (default 10, as in CI) and `CHAOS_ROWS` (default 20,000 bulk
//! contacts; the single sync gets a tenth) size it; `scripts/chaos` runs the
//! full 100-kill version and prints the summary line.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use syncward::source::postgres::{PostgresSource, PostgresSourcePools};
use syncward::source::{Source, SourceConfig};
use syncward::store::audit::Actor;
use syncward::store::syncs;
use syncward::worker::DeliveryKey;

/// How long after a process is gone the fake may still log a write it sent:
/// its request's bytes were already in the socket, and the fake logs a write
/// when it applies it, which on a loaded machine lags the send (31 ms seen
/// with the whole suite running on two cores).
const SEND_LAG: Duration = Duration::from_millis(250);

/// Whether a kill lies between two sends of one key, as the fake logged them.
fn kill_between(kill_times: &[SystemTime], first: SystemTime, second: SystemTime) -> bool {
    kill_times
        .iter()
        .any(|k| *k + SEND_LAG > first && *k < second)
}

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

const SINGLE_ID: &str = "chaos-single";

fn setting(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Every record's delivery key → its e-mail, paging the source exactly as
/// runs do (pages start only at checkpoints, which are page ends).
async fn keys_by_email(s: &Scenario, sync_id: &str) -> anyhow::Result<HashMap<String, Vec<u8>>> {
    let sync = syncs::get_sync(&s.db.pool, sync_id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no sync {sync_id}"))?;
    let definition = sync.definition()?;
    let SourceConfig::Postgres(config) = &definition.source else {
        anyhow::bail!("the chaos syncs read Postgres");
    };
    let mut source = PostgresSource::with_url(config, &s.db.url, &PostgresSourcePools::default())?;
    let fingerprint = source.fingerprint();
    let mut keys = HashMap::new();
    let mut cursor: Option<Value> = None;
    loop {
        let page = source.fetch_page(cursor.as_ref()).await?;
        for (position, record) in page.records.into_values()?.iter().enumerate() {
            let key = DeliveryKey::derive(
                sync_id,
                &fingerprint,
                cursor.as_ref(),
                position as u64,
                record,
            );
            let email = record["email"].as_str().unwrap_or_default().to_lowercase();
            keys.insert(email, key.0.to_vec());
        }
        if page.last || page.next_cursor.is_none() {
            return Ok(keys);
        }
        cursor = page.next_cursor;
    }
}

/// The daemons' settings under fire (two workers, short liveness, quick
/// retries, no breaker), and a small random latency at the destination so
/// kills land mid-request too.
fn under_fire(s: &mut Scenario) {
    s.fake.slow_writes_up_to(Duration::from_millis(20));
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__WORKERS__COUNT", "2")
        .with_env("SYNCWARD__WORKERS__LIVENESS_TTL", "2s")
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "200ms")
        .with_env("SYNCWARD__SWEEPER__EVERY", "500ms")
        .with_env("SYNCWARD__RETRY__BACKOFF_BASE", "1s")
        .with_env("SYNCWARD__RETRY__BACKOFF_MAX", "2s")
        .with_env("SYNCWARD__BREAKER__CONSECUTIVE_FAILURES", "1000");
    // CHAOS_RECORD_ATTEMPTS=1 makes every key a kill cuts off quarantined:
    // the operator's put-back path under fire (default: the shipped budget).
    if let Ok(attempts) = std::env::var("CHAOS_RECORD_ATTEMPTS") {
        s.cli = s
            .cli
            .clone()
            .with_env("SYNCWARD__LEDGER__RECORD_ATTEMPTS", &attempts);
    }
}

#[derive(Debug, Default)]
struct Findings {
    records: usize,
    lost: usize,
    resent_completed: usize,
    resent_pending: usize,
    resent_without_kill: usize,
    overlaps: i64,
    cursor_backwards: usize,
    unfinished_runs: i64,
    /// Keys the poison guard quarantined after kills cut their calls off
    /// `ledger.record_attempts` times, put back as the alert says.
    quarantined: usize,
    /// Of those, keys with a send that no kill followed: a death that was
    /// not a kill, or an attempt spent on an observed outcome.
    quarantined_without_kill: usize,
}

#[tokio::test(flavor = "multi_thread")]
async fn random_kills_lose_nothing_and_resend_only_what_was_pending() -> anyhow::Result<()> {
    let kills_wanted = setting("CHAOS_KILLS", 10) as usize;
    let rows = setting("CHAOS_ROWS", 20_000) as i64;
    let started = Instant::now();
    let mut s = Scenario::new(SyncOptions {
        mode: "bulk",
        page_size: 100,
        rows,
        concurrency: 4,
        timeout: "30s",
    })
    .await?;
    // The single sync reads its own table, so its e-mails are its own.
    sqlx::raw_sql(
        "CREATE TABLE contacts_single (id bigint PRIMARY KEY, email text, first_name text)",
    )
    .execute(&s.db.pool)
    .await?;
    sqlx::query("INSERT INTO contacts_single SELECT i, 'single' || i || '@example.com', 'S' || i FROM generate_series(1, $1) i")
        .bind((rows / 10).max(100))
        .execute(&s.db.pool)
        .await?;
    let single = std::fs::read_to_string(s.dir.path().join("sync.toml"))?
        .replace(
            &format!("id = \"{SYNC_ID}\""),
            &format!("id = \"{SINGLE_ID}\""),
        )
        .replace("FROM contacts", "FROM contacts_single")
        // Brevo's 10 writes/s pace would stretch 2,000 contacts over minutes;
        // this test is about kills, not pacing (`brevo_api` tests that).
        .replace(
            "mode = \"bulk\"",
            "mode = \"single\"\nrequests_per_second = 1000",
        )
        .replace("page_size = 100", "page_size = 50");
    let single_path = s.dir.path().join("single.toml");
    std::fs::write(&single_path, single)?;
    s.cli
        .run(&["sync", "apply", &single_path.display().to_string()])
        .await?
        .ok()?;
    under_fire(&mut s);

    // The cursor sampler: a value or fence that goes down is a finding.
    let stop = Arc::new(AtomicBool::new(false));
    // `sync retry-rejected` rewinds the cursor to the first page put back:
    // the operator's move, not a finding.
    let mut put_back = PutBack::default();
    let sampler = {
        let pool = s.db.pool.clone();
        let stop = stop.clone();
        let (started, finished) = (put_back.started.clone(), put_back.finished.clone());
        tokio::spawn(async move {
            let mut last: HashMap<String, (i64, i64)> = HashMap::new();
            let mut backwards = 0usize;
            let mut finished_before_last = 0;
            while !stop.load(Ordering::SeqCst) {
                let finished_before = finished.load(Ordering::SeqCst);
                let rows: Vec<(String, Option<String>, i64)> =
                    sqlx::query_as("SELECT sync_id, cursor->>'value', fence FROM sync_cursors")
                        .fetch_all(&pool)
                        .await
                        .unwrap_or_default();
                // An answer started before this read and not finished before
                // the last one may have rewound a cursor in between.
                let rewound = started.load(Ordering::SeqCst) > finished_before_last;
                finished_before_last = finished_before;
                for (sync, value, fence) in rows {
                    let value = value.and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
                    if let Some((v0, f0)) = last.get(&sync)
                        && (value < *v0 && !rewound || fence < *f0)
                    {
                        backwards += 1;
                    }
                    last.insert(sync, (value, fence));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            backwards
        })
    };

    let mut daemons = vec![
        DaemonProcess::spawn(&s.cli).await?,
        DaemonProcess::spawn(&s.cli).await?,
    ];
    let mut kill_times: Vec<SystemTime> = Vec::new();
    // Killed daemons' logs, kept for the post-mortem.
    let mut graveyard: Vec<DaemonProcess> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60 + 20 * kills_wanted as u64);
    // Runs are enqueued here, one at a time per sync. When both syncs have
    // finished a round before every kill has landed, their cursors are rewound
    // and another round starts: a replay under fire, which must send nothing.
    let mut round = 1i64;
    loop {
        // The operator answers a quarantine alert at once (a page of which
        // every record is quarantined stops its sync until then).
        put_back.answer_alerts(&s).await?;
        let mut finished_round = 0;
        for sync in [SYNC_ID, SINGLE_ID] {
            let (busy, succeeded): (i64, i64) = sqlx::query_as(
                "SELECT count(*) FILTER (WHERE status IN ('queued', 'running')),
                        count(*) FILTER (WHERE status = 'succeeded')
                 FROM runs WHERE sync_id = $1",
            )
            .bind(sync)
            .fetch_one(&s.db.pool)
            .await?;
            if succeeded >= round {
                finished_round += 1;
            } else if busy == 0 {
                syncward::store::runs::enqueue_run(
                    &s.db.pool,
                    sync,
                    syncward::states::RunTrigger::Manual,
                    5,
                )
                .await?;
            }
        }
        if finished_round == 2 {
            if kill_times.len() >= kills_wanted {
                break;
            }
            for sync in [SYNC_ID, SINGLE_ID] {
                syncward::store::cursors::reset_cursor(&s.db.pool, sync, Actor::Cli).await?;
            }
            round += 1;
            continue;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the syncs did not finish in time; last daemon log:\n{}",
            daemons[0].log_tail()
        );
        if kill_times.len() < kills_wanted {
            tokio::time::sleep(Duration::from_millis(rand::random_range(300..2000))).await;
            let victim = rand::random_range(0..daemons.len());
            let signal = if rand::random_range(0..5) == 0 {
                "TERM"
            } else {
                "KILL"
            };
            println!(
                "chaos: SIG{signal} to daemon {} at {}",
                daemons[victim].pid,
                chrono::DateTime::<chrono::Utc>::from(SystemTime::now())
            );
            daemons[victim].signal(signal)?;
            // A drain ends within its 15 s deadline; a killed process at once.
            daemons[victim].wait(Duration::from_secs(40)).await?;
            // The moment it was gone: every send it made came before this one.
            kill_times.push(SystemTime::now());
            let fresh = DaemonProcess::spawn(&s.cli).await?;
            graveyard.push(std::mem::replace(&mut daemons[victim], fresh));
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // Let the last runs settle, then stop both daemons cleanly.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for d in &mut daemons {
        d.signal("TERM")?;
    }
    for d in &mut daemons {
        d.wait(Duration::from_secs(40)).await?;
    }
    stop.store(true, Ordering::SeqCst);
    let cursor_backwards = sampler.await?;

    // Quarantined after the last answer: put back, and one run of each
    // affected sync on a fresh daemon.
    put_back.answer_alerts(&s).await?;
    if !put_back.syncs.is_empty() {
        run_once_more(&s, &put_back).await?;
    }

    let mut f = Findings {
        cursor_backwards,
        quarantined: put_back.count,
        ..Findings::default()
    };
    let writes = s.fake.writes();
    let mut writes_by_email: BTreeMap<&str, Vec<SystemTime>> = BTreeMap::new();
    for w in &writes {
        writes_by_email
            .entry(w.email.as_str())
            .or_default()
            .push(w.at);
    }
    for sync in [SYNC_ID, SINGLE_ID] {
        let keys = keys_by_email(&s, sync).await?;
        let ledger: Vec<(Vec<u8>, String, Option<chrono::DateTime<chrono::Utc>>)> = sqlx::query_as(
            "SELECT key, status, completed_at FROM delivery_states WHERE sync_id = $1",
        )
        .bind(sync)
        .fetch_all(&s.db.pool)
        .await?;
        let ledger: HashMap<Vec<u8>, (String, Option<chrono::DateTime<chrono::Utc>>)> = ledger
            .into_iter()
            .map(|(k, st, at)| (k, (st, at)))
            .collect();
        f.records += keys.len();
        for (email, key) in &keys {
            let sends = writes_by_email
                .get(email.as_str())
                .cloned()
                .unwrap_or_default();
            let completed_at = match ledger.get(key) {
                Some((status, Some(at))) if status == "completed" => Some(SystemTime::from(*at)),
                _ => None,
            };
            if sends.is_empty() || completed_at.is_none() {
                f.lost += 1;
                // What a loss looked like, for whoever has to find it.
                if f.lost <= 10 {
                    let (attempts, rejected): (Option<i32>, Option<String>) = sqlx::query_as(
                        "SELECT (SELECT max(attempts) FROM delivery_states
                                  WHERE sync_id = $1 AND key = $2),
                                (SELECT string_agg(code || ': ' || message, '; ')
                                   FROM rejected_records WHERE sync_id = $1 AND email = $3)",
                    )
                    .bind(sync)
                    .bind(key)
                    .bind(email)
                    .fetch_one(&s.db.pool)
                    .await?;
                    eprintln!(
                        "chaos: lost {email} ({sync}): {} send(s) at {:?}; ledger {:?}, \
                         attempts {attempts:?}; rejected {rejected:?}",
                        sends.len(),
                        sends,
                        ledger.get(key)
                    );
                }
                continue;
            }
            let completed_at = completed_at.unwrap_or(SystemTime::UNIX_EPOCH);
            let put_backs = put_back
                .at
                .get(&(sync.to_string(), email.clone()))
                .cloned()
                .unwrap_or_default();
            f.resent_completed += sends.iter().filter(|at| **at > completed_at).count();
            f.resent_pending += sends.len() - 1;
            for pair in sends.windows(2) {
                if let Some(p) = put_backs.iter().find(|p| **p > pair[0] && **p < pair[1]) {
                    // The operator's send: the death that quarantined the
                    // key must have been a kill after the send before it.
                    f.resent_pending -= 1;
                    if !kill_times
                        .iter()
                        .any(|k| *k + SEND_LAG > pair[0] && *k < *p)
                    {
                        f.quarantined_without_kill += 1;
                        eprintln!(
                            "chaos: {email} quarantined after a send at {:?} that no kill followed",
                            chrono::DateTime::<chrono::Utc>::from(pair[0])
                        );
                    }
                    continue;
                }
                if !kill_between(&kill_times, pair[0], pair[1]) {
                    f.resent_without_kill += 1;
                    println!(
                        "chaos: {email} sent at {:?} and again at {:?} with no kill between",
                        chrono::DateTime::<chrono::Utc>::from(pair[0]),
                        chrono::DateTime::<chrono::Utc>::from(pair[1])
                    );
                }
            }
        }
    }
    // Attempts: from each claim to the run's next event (requeue, finish).
    f.overlaps = sqlx::query_scalar(
        "WITH ev AS (
           SELECT e.run_id, r.sync_id, e.kind, e.at,
                  lead(e.at) OVER (PARTITION BY e.run_id ORDER BY e.id) AS next_at
           FROM run_events e JOIN runs r ON r.id = e.run_id),
         attempts AS (
           SELECT run_id, sync_id, tstzrange(at, coalesce(next_at, 'infinity'), '[)') AS span
           FROM ev WHERE kind = 'claimed')
         SELECT count(*) FROM attempts a JOIN attempts b
           ON a.sync_id = b.sync_id AND (a.run_id, lower(a.span)) < (b.run_id, lower(b.span))
          AND a.span && b.span",
    )
    .fetch_one(&s.db.pool)
    .await?;
    f.unfinished_runs = sqlx::query_scalar(
        "SELECT count(*) FROM runs WHERE status NOT IN ('succeeded', 'failed', 'skipped')",
    )
    .fetch_one(&s.db.pool)
    .await?;
    // What else happened to the runs: the causes of re-sends other than kills.
    let events: Vec<(i64, String, chrono::DateTime<chrono::Utc>, Value)> = sqlx::query_as(
        "SELECT run_id, kind, at, detail FROM run_events WHERE kind NOT IN ('claimed', 'succeeded') ORDER BY id",
    )
    .fetch_all(&s.db.pool)
    .await?;
    for (run, kind, at, detail) in events {
        println!("chaos: run {run} {kind} at {at}: {detail}");
    }
    if f.resent_without_kill > 0 || f.overlaps > 0 {
        for d in graveyard.iter().chain(daemons.iter()) {
            let text = std::fs::read_to_string(d.log.path()).unwrap_or_default();
            for line in text.lines().filter(|l| {
                !l.contains("DEBUG") && !l.contains(" INFO ")
                    || l.contains("running")
                    || l.contains("claimed")
            }) {
                println!("chaos: [{}] {line}", d.pid);
            }
        }
    }
    let kills = kill_times.len();
    let in_flight_bound = kills * 100;
    println!(
        "chaos: kills {kills}, rounds {round}, records {}, lost {}, quarantined by kills and put back {}, re-sent completed {}, re-sent pending {} (bound {in_flight_bound}), re-sent without a kill {}, overlaps {}, cursor backwards {}, unfinished runs {}, wall time {:.0} s",
        f.records,
        f.lost,
        f.quarantined,
        f.resent_completed,
        f.resent_pending,
        f.resent_without_kill,
        f.overlaps,
        f.cursor_backwards,
        f.unfinished_runs,
        started.elapsed().as_secs_f64()
    );
    assert_eq!(f.lost, 0, "{f:?}");
    assert_eq!(f.quarantined_without_kill, 0, "{f:?}");
    assert_eq!(f.resent_completed, 0, "{f:?}");
    assert_eq!(f.resent_without_kill, 0, "{f:?}");
    assert!(f.resent_pending <= in_flight_bound, "{f:?}");
    assert_eq!(f.overlaps, 0, "{f:?}");
    assert_eq!(f.cursor_backwards, 0, "{f:?}");
    assert_eq!(f.unfinished_runs, 0, "{f:?}");
    Ok(())
}

/// Quarantines answered as the alert says, with `sync retry-rejected`: when
/// each key was put back (a send after that is the operator's, not a
/// re-send).
#[derive(Default)]
struct PutBack {
    /// The last `rejected_records` row answered.
    seen: i64,
    /// Answers started and finished (each may rewind a cursor between).
    started: Arc<std::sync::atomic::AtomicUsize>,
    finished: Arc<std::sync::atomic::AtomicUsize>,
    at: HashMap<(String, String), Vec<SystemTime>>,
    count: usize,
    /// Every sync that had keys put back.
    syncs: Vec<String>,
}

impl PutBack {
    async fn answer_alerts(&mut self, s: &Scenario) -> anyhow::Result<()> {
        let quarantined: Vec<(i64, String, String)> = sqlx::query_as(
            "SELECT id, sync_id, coalesce(lower(email), '') FROM rejected_records
             WHERE code = 'attempt_budget_exhausted' AND id > $1 ORDER BY id",
        )
        .bind(self.seen)
        .fetch_all(&s.db.pool)
        .await?;
        let Some((last, _, _)) = quarantined.last() else {
            return Ok(());
        };
        self.seen = *last;
        let now = SystemTime::now();
        let mut syncs: Vec<&str> = Vec::new();
        for (_, sync, email) in &quarantined {
            self.at
                .entry((sync.clone(), email.clone()))
                .or_default()
                .push(now);
            if !syncs.contains(&sync.as_str()) {
                syncs.push(sync);
            }
        }
        self.count += quarantined.len();
        println!(
            "chaos: put back {} quarantined key(s) of {syncs:?}",
            quarantined.len()
        );
        for sync in syncs {
            self.started.fetch_add(1, Ordering::SeqCst);
            s.cli.run(&["sync", "retry-rejected", sync]).await?.ok()?;
            self.finished.fetch_add(1, Ordering::SeqCst);
            if !self.syncs.iter().any(|known| known == sync) {
                self.syncs.push(sync.to_string());
            }
        }
        Ok(())
    }
}

/// One run of each sync that had keys put back, on a fresh daemon, after the
/// storm: it sends what was put back after the sync's last run.
async fn run_once_more(s: &Scenario, put_back: &PutBack) -> anyhow::Result<()> {
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    for sync in &put_back.syncs {
        syncward::store::runs::enqueue_run(
            &s.db.pool,
            sync,
            syncward::states::RunTrigger::Manual,
            5,
        )
        .await?;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let busy: i64 =
            sqlx::query_scalar("SELECT count(*) FROM runs WHERE status IN ('queued', 'running')")
                .fetch_one(&s.db.pool)
                .await?;
        if busy == 0 {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the put-back runs did not finish; the daemon's log ends:\n{}",
            daemon.log_tail()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(40)).await?;
    Ok(())
}

/// The late-commit drill: four writers insert into a live table in
/// transactions they hold open for a random while (so they commit out of
/// order), while two daemons run the sync again and again and are killed at
/// random. Once the writers stop and a run started after them succeeds,
/// every committed row arrived, and a row sent twice had a kill between its
/// sends (the page in flight).
#[tokio::test(flavor = "multi_thread")]
async fn writers_committing_out_of_order_under_kills_lose_no_row() -> anyhow::Result<()> {
    let kills_wanted = setting("CHAOS_KILLS", 10) as usize;
    let per_writer = (setting("CHAOS_ROWS", 20_000) / 40).max(50) as i64;
    let mut s = Scenario::new(SyncOptions {
        page_size: 50,
        rows: 1,
        timeout: "30s",
        ..SyncOptions::default()
    })
    .await?;
    sqlx::raw_sql(
        "CREATE TABLE stream (id bigserial PRIMARY KEY, email text NOT NULL, first_name text)",
    )
    .execute(&s.db.pool)
    .await?;
    let text = std::fs::read_to_string(s.dir.path().join("sync.toml"))?
        .replace("FROM contacts", "FROM stream")
        .replace("page_size = 50", "page_size = 50\ncommit_wait = \"500ms\"");
    let path = s.dir.path().join("stream.toml");
    std::fs::write(&path, text)?;
    s.cli
        .run(&["sync", "apply", &path.display().to_string()])
        .await?
        .ok()?;
    under_fire(&mut s);

    let mut writers = Vec::new();
    for w in 0..4i64 {
        let pool = s.db.pool.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..per_writer {
                let mut tx = pool.begin().await?;
                sqlx::query(
                    "INSERT INTO stream (email, first_name) VALUES ('w' || $1 || '-' || $2 || '@example.com', 'W')",
                )
                .bind(w)
                .bind(i)
                .execute(&mut *tx)
                .await?;
                tokio::time::sleep(Duration::from_millis(rand::random_range(0..40))).await;
                tx.commit().await?;
            }
            anyhow::Ok(())
        }));
    }
    let mut daemons = vec![
        DaemonProcess::spawn(&s.cli).await?,
        DaemonProcess::spawn(&s.cli).await?,
    ];
    let mut kill_times: Vec<SystemTime> = Vec::new();
    let mut graveyard: Vec<DaemonProcess> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120 + 20 * kills_wanted as u64);
    let mut writers_done_at: Option<chrono::DateTime<chrono::Utc>> = None;
    loop {
        if writers_done_at.is_none() && writers.iter().all(|w| w.is_finished()) {
            for w in writers.drain(..) {
                w.await??;
            }
            writers_done_at = Some(chrono::Utc::now());
        }
        // One run at a time, queued again as soon as the last one ended.
        let (busy, done_after): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status IN ('queued', 'running')),
                    count(*) FILTER (WHERE status = 'succeeded' AND $2::timestamptz IS NOT NULL
                                     AND started_at > $2::timestamptz)
             FROM runs WHERE sync_id = $1",
        )
        .bind(SYNC_ID)
        .bind(writers_done_at)
        .fetch_one(&s.db.pool)
        .await?;
        if done_after > 0 && kill_times.len() >= kills_wanted {
            break;
        }
        if busy == 0 {
            syncward::store::runs::enqueue_run(
                &s.db.pool,
                SYNC_ID,
                syncward::states::RunTrigger::Manual,
                5,
            )
            .await?;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the sync did not catch up in time; last daemon log:\n{}",
            daemons[0].log_tail()
        );
        if kill_times.len() < kills_wanted {
            tokio::time::sleep(Duration::from_millis(rand::random_range(300..2000))).await;
            let victim = rand::random_range(0..daemons.len());
            daemons[victim].signal("KILL")?;
            daemons[victim].wait(Duration::from_secs(40)).await?;
            kill_times.push(SystemTime::now());
            let fresh = DaemonProcess::spawn(&s.cli).await?;
            graveyard.push(std::mem::replace(&mut daemons[victim], fresh));
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    for d in &mut daemons {
        d.signal("TERM")?;
    }
    for d in &mut daemons {
        d.wait(Duration::from_secs(40)).await?;
    }
    let committed: Vec<String> = sqlx::query_scalar("SELECT email FROM stream ORDER BY id")
        .fetch_all(&s.db.pool)
        .await?;
    assert_eq!(committed.len() as i64, 4 * per_writer);
    let mut sends: BTreeMap<String, Vec<SystemTime>> = BTreeMap::new();
    for w in s.fake.writes() {
        sends.entry(w.email).or_default().push(w.at);
    }
    let lost: Vec<&String> = committed
        .iter()
        .filter(|e| !sends.contains_key(e.as_str()))
        .collect();
    let twice_without_kill = sends
        .values()
        .flat_map(|at| at.windows(2))
        .filter(|pair| !kill_between(&kill_times, pair[0], pair[1]))
        .count();
    println!(
        "chaos: late commits: {} rows by 4 writers, {} kills, {} lost, {} sent twice without a kill between",
        committed.len(),
        kill_times.len(),
        lost.len(),
        twice_without_kill
    );
    assert!(
        lost.is_empty(),
        "{} committed rows never arrived: {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    assert_eq!(twice_without_kill, 0);
    drop(graveyard);
    Ok(())
}
