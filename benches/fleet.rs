//! Fleet benchmark (prints its figures; asserts only that nothing was lost):
//! `BENCH_SYNCS` syncs (default 10,000) all due on the same second, on
//! `BENCH_DAEMONS` real `syncward run` subprocesses (default 4, each with
//! `BENCH_WORKERS` workers, default 16), against one Postgres and one Redis.
//!
//! `BENCH_SHARED` of them (default 300) share three destination accounts: each
//! sends 20 contacts in two bulk imports to one of three Brevo fakes, each fake
//! enforcing Brevo's 10 requests in each second for its key. The rest have an
//! empty page (their runs go claim → lease → read → finish).
//!
//! Figures: when the tick's runs were enqueued (seen committed by a poller,
//! after the due second), when runs first started (their first claim; a run
//! waiting for its account gives its worker back and is claimed again), 429s per account
//! and the rate each account reached, Postgres CPU (all `postgres` processes,
//! from /proc) and its most connections. `cargo bench --bench fleet`.

#[allow(dead_code)]
#[path = "../tests/it/fakes/brevo.rs"]
mod brevo;
#[allow(dead_code)]
#[path = "support/daemon_process.rs"]
mod daemon_process;
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Timelike, Utc};
use syncward::config::SyncDefinition;
use syncward::store::audit::Actor;
use syncward::store::syncs;
use uuid::Uuid;

const KEYS: [&str; 3] = ["xkeysib-fleet-a", "xkeysib-fleet-b", "xkeysib-fleet-c"];
const CONTACTS: i64 = 20;

fn main() -> anyhow::Result<()> {
    support::main(
        &[
            ("BENCH_KEY_0", KEYS[0]),
            ("BENCH_KEY_1", KEYS[1]),
            ("BENCH_KEY_2", KEYS[2]),
        ],
        8,
        run_benchmark,
    )
}

fn setting(name: &str, default: usize) -> anyhow::Result<usize> {
    Ok(match std::env::var(name) {
        Ok(v) => v.parse()?,
        Err(_) => default,
    })
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn sync_file(i: usize, schedule: &str, fakes: &[String]) -> String {
    let (query, account, page) = match account_of(i) {
        Some(a) => ("SELECT id, email FROM contacts", a, 10),
        None => ("SELECT id, email FROM contacts WHERE false", 0, 500),
    };
    format!(
        r#"id = "fleet-{i}"
workspace = "ws-{workspace}"
schedule = "{schedule}"
[source]
kind = "postgres"
url_env = "BENCH_CONTACTS_URL"
query = "{query}"
cursor_column = "id"
page_size = {page}
[destination]
kind = "brevo"
api_key_env = "BENCH_KEY_{account}"
base_url = "{base}"
mode = "bulk"
list_ids = [1]
[mapping]
email = "email"
"#,
        workspace = i % 50,
        base = fakes[account],
    )
}

/// Which account a sync sends to (the first `BENCH_SHARED` syncs), if any.
fn account_of(i: usize) -> Option<usize> {
    let shared = setting("BENCH_SHARED", 300).unwrap_or(300);
    (i < shared).then_some(i % KEYS.len())
}

async fn run_benchmark(pool: sqlx::PgPool) -> anyhow::Result<()> {
    let total = setting("BENCH_SYNCS", 10_000)?;
    let shared = setting("BENCH_SHARED", 300)?.min(total);
    let daemons = setting("BENCH_DAEMONS", 4)?;
    let workers = setting("BENCH_WORKERS", 16)?;
    // The syncs' contacts live in a database of their own, as an operator's
    // source does: in the store's database, each run's commit
    // horizon would wait for the daemons' own store transactions to end.
    let source_db = format!("{}_source", std::env::var("BENCH_DATABASE")?);
    let source_url = std::env::var("BENCH_SOURCE_URL")?.replacen(
        &std::env::var("BENCH_DATABASE")?,
        &source_db,
        1,
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {source_db}")))
        .execute(&pool)
        .await?;
    let result = run_fleet(pool.clone(), &source_url, total, shared, daemons, workers).await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {source_db} WITH (FORCE)"
    )))
    .execute(&pool)
    .await?;
    result
}

async fn run_fleet(
    pool: sqlx::PgPool,
    source_url: &str,
    total: usize,
    shared: usize,
    daemons: usize,
    workers: usize,
) -> anyhow::Result<()> {
    let workspaces: Vec<String> = (0..50).map(|w| format!("ws-{w}")).collect();
    support::write_secrets_with(
        &workspaces.iter().map(String::as_str).collect::<Vec<_>>(),
        &[("BENCH_CONTACTS_URL", source_url)],
    )?;
    let source = sqlx::PgPool::connect(source_url).await?;
    sqlx::raw_sql("CREATE TABLE contacts (id bigint PRIMARY KEY, email text NOT NULL)")
        .execute(&source)
        .await?;
    sqlx::query(
        "INSERT INTO contacts SELECT i, 'contact' || i || '@example.com' FROM generate_series(1, $1) i",
    )
    .bind(CONTACTS)
    .execute(&source)
    .await?;
    source.close().await;
    let mut fakes = Vec::new();
    for key in KEYS {
        let (runtime, fake) = daemon_process::brevo_fake_apart(key)?;
        fake.enforce_rate_limit(10);
        fakes.push((runtime, fake));
    }
    let bases: Vec<String> = fakes.iter().map(|(_, f)| f.base_url.clone()).collect();

    // All due on one second, far enough ahead for the daemons to start and arm
    // every sync first.
    let due: DateTime<Utc> = (Utc::now() + chrono::TimeDelta::seconds(60))
        .with_nanosecond(0)
        .unwrap_or_default();
    let schedule = format!("{} {} {} * * *", due.second(), due.minute(), due.hour());
    let publishing = Instant::now();
    let definitions: Vec<SyncDefinition> = (0..total)
        .map(|i| SyncDefinition::parse("fleet.toml", &sync_file(i, &schedule, &bases)))
        .collect::<Result<_, _>>()?;
    for chunk in definitions.chunks(1000) {
        syncs::publish_syncs(&pool, chunk, Actor::Cli).await?;
    }
    println!(
        "fleet: {total} syncs ({shared} on 3 shared accounts, {CONTACTS} contacts each in 2 imports), {daemons} daemons x {workers} workers; published in {:.1} s",
        publishing.elapsed().as_secs_f64()
    );

    let config = tempfile::NamedTempFile::new()?;
    std::fs::write(
        config.path(),
        "# fleet benchmark: settings are in SYNCWARD__* variables\n",
    )?;
    let env: Vec<(String, String)> = vec![
        (
            "SYNCWARD__DATABASE__URL".into(),
            std::env::var("BENCH_SOURCE_URL")?,
        ),
        (
            "SYNCWARD__REDIS__KEY_PREFIX".into(),
            format!("syncward-fleet-{}", Uuid::new_v4().simple()),
        ),
        ("SYNCWARD__HTTP__LISTEN".into(), "127.0.0.1:0".into()),
        (
            "SYNCWARD__SECRETS__DIR".into(),
            support::secrets_dir().display().to_string(),
        ),
        ("SYNCWARD__OUTBOUND__ALLOW".into(), support::LOOPBACK.into()),
        ("SYNCWARD__WORKERS__COUNT".into(), workers.to_string()),
        (
            "SYNCWARD_CONFIG".into(),
            config.path().display().to_string(),
        ),
        ("RUST_LOG".into(), "warn".into()),
    ];
    let mut processes = Vec::new();
    for _ in 0..daemons {
        processes.push(daemon_process::Daemon::spawn(&env)?);
    }
    for process in &processes {
        process.ready().await?;
    }
    let started = Instant::now();
    loop {
        let armed: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM sync_schedule WHERE sync_id LIKE 'fleet-%' AND next_due_at > '-infinity'",
        )
        .fetch_one(&pool)
        .await?;
        if armed as usize == total {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(50),
            "only {armed} syncs armed"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "  all armed {:.1} s after the daemons were ready",
        started.elapsed().as_secs_f64()
    );
    anyhow::ensure!(
        Utc::now() < due,
        "arming took past the due second; raise the lead time"
    );

    // Connections and Postgres CPU while the tick's runs go through.
    let most_connections = Arc::new(AtomicI64::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let pool = pool.clone();
        let most = most_connections.clone();
        let sampling = sampling.clone();
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                if let Ok(n) = sqlx::query_scalar::<_, i64>(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()",
                )
                .fetch_one(&pool)
                .await
                {
                    most.fetch_max(n, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let wait = (due - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(wait.saturating_sub(Duration::from_millis(500))).await;
    let cpu_before = support::cpu_seconds("postgres");
    let daemons_cpu_before = support::cpu_seconds("syncward");
    let wall = Instant::now();

    // Enqueue lag as the bench sees it: committed runs counted every 50 ms (a count scans the runs table: rarely enough not to take the cores measured).
    let mut enqueued_at: Vec<f64> = Vec::with_capacity(total);
    let mut seen = 0usize;
    while seen < total {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM runs WHERE trigger = 'schedule'")
            .fetch_one(&pool)
            .await?;
        let since_due = (Utc::now() - due).num_microseconds().unwrap_or(0) as f64 / 1e6;
        while seen < n as usize {
            enqueued_at.push(since_due);
            seen += 1;
        }
        anyhow::ensure!(since_due < 120.0, "only {seen} of {total} runs enqueued");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    loop {
        let left: i64 =
            sqlx::query_scalar("SELECT count(*) FROM runs WHERE status IN ('queued', 'running')")
                .fetch_one(&pool)
                .await?;
        if left == 0 {
            break;
        }
        anyhow::ensure!(
            wall.elapsed() < Duration::from_secs(900),
            "{left} runs never finished"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let cpu = support::cpu_seconds("postgres") - cpu_before;
    let daemons_cpu = support::cpu_seconds("syncward") - daemons_cpu_before;
    let elapsed = wall.elapsed().as_secs_f64();
    sampling.store(false, Ordering::Relaxed);
    sampler.await?;

    let mut started_after: Vec<f64> = sqlx::query_scalar(
        // When each run first started (its first claim): a run that gave its
        // worker back to wait for its account's budget is claimed again later.
        "SELECT extract(epoch FROM min(e.at) - $1)::float8
         FROM runs r JOIN run_events e ON e.run_id = r.id AND e.kind = 'claimed'
         WHERE r.trigger = 'schedule' GROUP BY r.id",
    )
    .bind(due)
    .fetch_all(&pool)
    .await?;
    started_after.sort_by(f64::total_cmp);
    // When the tick transactions that inserted them began (Postgres' now()).
    let mut ticked_after: Vec<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM created_at - $1)::float8 FROM runs WHERE trigger = 'schedule'",
    )
    .bind(due)
    .fetch_all(&pool)
    .await?;
    ticked_after.sort_by(f64::total_cmp);
    let outcomes: Vec<(String, i64)> = sqlx::query_as(
        "SELECT status, count(*) FROM runs WHERE trigger = 'schedule' GROUP BY status ORDER BY status",
    )
    .fetch_all(&pool)
    .await?;
    println!(
        "  enqueued after the due second: p50 {:.3} s, p99 {:.3} s, all {:.3} s   target p99 <= 1 s",
        percentile(&enqueued_at, 50.0),
        percentile(&enqueued_at, 99.0),
        enqueued_at.last().copied().unwrap_or(f64::NAN)
    );
    println!(
        "  their tick transactions began after the due second: p50 {:.3} s, p99 {:.3} s",
        percentile(&ticked_after, 50.0),
        percentile(&ticked_after, 99.0),
    );
    println!(
        "  started after the due second: p50 {:.3} s, p99 {:.3} s, last {:.3} s",
        percentile(&started_after, 50.0),
        percentile(&started_after, 99.0),
        started_after.last().copied().unwrap_or(f64::NAN)
    );
    println!("  runs: {outcomes:?}, all done {elapsed:.1} s after the due second");
    // Runs that gave their worker back to wait for their account's budget,
    // and the worker time runs held: claimed to finished or given back.
    let (given_back, held, held_shared): (i64, f64, f64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE e.kind = 'requeued'),
                coalesce(sum(extract(epoch FROM e.at - c.at)), 0)::float8,
                coalesce(sum(extract(epoch FROM e.at - c.at))
                           FILTER (WHERE split_part(r.sync_id, '-', 2)::int < $1), 0)::float8
         FROM run_events e JOIN runs r ON r.id = e.run_id
         CROSS JOIN LATERAL (SELECT at FROM run_events c WHERE c.run_id = e.run_id
                               AND c.kind = 'claimed' AND c.id < e.id ORDER BY c.id DESC LIMIT 1) c
         WHERE e.kind IN ('requeued', 'succeeded', 'failed')",
    )
    .bind(i32::try_from(shared).unwrap_or(i32::MAX))
    .fetch_one(&pool)
    .await?;
    println!(
        "  given back to wait for an account: {given_back}; worker time held by runs: {held:.1} s ({held_shared:.1} s by the shared accounts' runs)"
    );
    // Where a run with nothing to send spends its worker's time: from its
    // claim to its lease (lease taken, fence issued) and from there to its
    // finish (source read, run recorded), as Postgres' clock saw each
    // statement begin.
    let (to_lease, to_finish): (f64, f64) = sqlx::query_as(
        "SELECT coalesce(avg(extract(epoch FROM l.at - c.at)), 0)::float8 * 1000,
                coalesce(avg(extract(epoch FROM f.at - l.at)), 0)::float8 * 1000
         FROM runs r
         JOIN run_events c ON c.run_id = r.id AND c.kind = 'claimed'
         JOIN run_events l ON l.run_id = r.id AND l.kind = 'lease'
         JOIN run_events f ON f.run_id = r.id AND f.kind = 'succeeded'
         WHERE r.trigger = 'schedule' AND split_part(r.sync_id, '-', 2)::int >= $1",
    )
    .bind(i32::try_from(shared).unwrap_or(i32::MAX))
    .fetch_one(&pool)
    .await?;
    println!(
        "  a run with nothing to send, mean: claim to lease {to_lease:.1} ms, lease to finish {to_finish:.1} ms"
    );
    let mut lost = 0usize;
    for (i, (_, fake)) in fakes.iter().enumerate() {
        let syncs_here = (0..shared).filter(|s| s % KEYS.len() == i).count();
        let imports = fake.requests_to("/v3/contacts/import").len();
        let writes = fake.writes();
        let written = writes.len();
        let expected = syncs_here * CONTACTS as usize;
        lost += expected.saturating_sub(written);
        // The rate the account reached: import requests over the time from the
        // first write applied to the last.
        let first = writes.iter().map(|w| w.at).min();
        let last = writes.iter().map(|w| w.at).max();
        let rate = match (first, last) {
            (Some(first), Some(last)) if imports > 1 => {
                let span = last.duration_since(first).unwrap_or_default().as_secs_f64();
                (imports - 1) as f64 / span.max(f64::EPSILON)
            }
            _ => f64::NAN,
        };
        println!(
            "  account {}: {syncs_here} syncs, {} imports at {rate:.2} requests/s (limit 10), {} answered 429, {written} of {expected} contacts written",
            i + 1,
            imports,
            fake.rate_limited()
        );
    }
    println!(
        "  Postgres: {cpu:.1} CPU seconds over {elapsed:.1} s ({:.0} % of one core), most connections {}",
        100.0 * cpu / elapsed,
        most_connections.load(Ordering::Relaxed)
    );
    println!(
        "  the daemons: {daemons_cpu:.1} CPU seconds over {elapsed:.1} s ({:.0} % of one core)",
        100.0 * daemons_cpu / elapsed,
    );
    drop(processes);
    for (runtime, fake) in fakes {
        drop(fake);
        runtime.shutdown_background();
    }
    anyhow::ensure!(lost == 0, "{lost} contacts were not written");
    Ok(())
}
