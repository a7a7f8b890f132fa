//! Memory benchmark (prints its figures; asserts nothing): the resident memory
//! of a real `syncward run` (8 workers) while it streams a 1,000,000-row
//! Postgres source to the Brevo fake — eight syncs, one per eighth of the
//! table, bulk pages of 1,000 — sampled every 100 ms from /proc. Targets: flat
//! while streaming and at most 200 MB; at most 64 MB idle.
//!
//! `cargo bench --bench memory` (needs `scripts/services`); `BENCH_ROWS`
//! changes the size. `BENCH_SYNC_MODE=diff` runs the syncs in diff mode
//! (no cursor column; each run reads its whole slice) twice: the first round
//! sends every row and keeps its state, the second reads the unchanged rows
//! again and sends nothing — memory flat in the rows both times.

#[allow(dead_code)]
#[path = "../tests/it/fakes/brevo.rs"]
mod brevo;
#[path = "support/daemon_process.rs"]
mod daemon_process;
mod support;

use std::time::{Duration, Instant};

use uuid::Uuid;

const KEY: &str = "xkeysib-bench";
const SYNCS: usize = 8;

/// How the syncs read: `cursor` (default) or `diff`.
fn sync_mode() -> String {
    std::env::var("BENCH_SYNC_MODE").unwrap_or_else(|_| "cursor".into())
}

fn main() -> anyhow::Result<()> {
    support::main(&[("BENCH_BREVO_KEY", KEY)], 4, run_benchmark)
}

async fn run_benchmark(pool: sqlx::PgPool) -> anyhow::Result<()> {
    let rows: i64 = std::env::var("BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    sqlx::raw_sql(
        "CREATE TABLE contacts (id bigint PRIMARY KEY, email text NOT NULL, first_name text, last_name text)",
    )
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO contacts SELECT i, 'contact' || i || '@example.com', 'First' || i, 'Last' || i FROM generate_series(1, $1) i",
    )
    .bind(rows)
    .execute(&pool)
    .await?;
    sqlx::raw_sql("VACUUM ANALYZE contacts")
        .execute(&pool)
        .await?;
    let (fake_runtime, fake) = daemon_process::brevo_fake_apart(KEY)?;

    let dir = tempfile::tempdir()?;
    let config = dir.path().join("syncward.toml");
    std::fs::write(
        &config,
        "# memory benchmark: settings come from SYNCWARD__* variables\n",
    )?;
    let env: Vec<(String, String)> = vec![
        (
            "SYNCWARD__DATABASE__URL".into(),
            std::env::var("BENCH_SOURCE_URL")?,
        ),
        (
            "SYNCWARD__REDIS__KEY_PREFIX".into(),
            format!("syncward-bench-{}", Uuid::new_v4().simple()),
        ),
        ("SYNCWARD__HTTP__LISTEN".into(), "127.0.0.1:0".into()),
        (
            "SYNCWARD__SECRETS__DIR".into(),
            support::secrets_dir().display().to_string(),
        ),
        ("SYNCWARD__OUTBOUND__ALLOW".into(), support::LOOPBACK.into()),
        ("SYNCWARD__WORKERS__COUNT".into(), SYNCS.to_string()),
        ("SYNCWARD_CONFIG".into(), config.display().to_string()),
        // As the shipped unit (deploy/syncward.service) sets it.
        ("MIMALLOC_PURGE_DELAY".into(), "100".into()),
    ];
    let cli = |args: &[String]| -> anyhow::Result<()> {
        let out = std::process::Command::new(daemon_process::BINARY)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "syncward {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    let mut files = Vec::new();
    for k in 0..SYNCS {
        let path = dir.path().join(format!("slice-{k}.toml"));
        std::fs::write(
            &path,
            format!(
                r#"id = "slice-{k}"
workspace = "bench"
schedule = "0 0 0 1 1 *"
[source]
kind = "postgres"
url_env = "BENCH_SOURCE_URL"
query = "SELECT id, email, first_name, last_name FROM contacts WHERE id % {SYNCS} = {k}"
{reading}
page_size = 1000
[destination]
kind = "brevo"
api_key_env = "BENCH_BREVO_KEY"
base_url = "{}"
mode = "bulk"
list_ids = [1]
# The fake on loopback, not Brevo: the account budget is set to its maximum
# so the figures measure syncward, not Brevo's 10 requests a second.
requests_per_second = 1000
[mapping]
email = "email"
attributes = {{ FIRSTNAME = "first_name", LASTNAME = "last_name" }}
"#,
                fake.base_url,
                reading = match sync_mode().as_str() {
                    "diff" => "sync_mode = \"diff\"",
                    _ => "cursor_column = \"id\"",
                },
            ),
        )?;
        files.push(path.display().to_string());
    }
    let mut apply = vec!["sync".to_string(), "apply".to_string()];
    apply.extend(files);
    cli(&apply)?;

    let mut daemon = daemon_process::Daemon::spawn(&env)?;
    daemon.ready().await?;
    let pid = daemon.child.id();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let idle = daemon_process::rss_mb(pid).unwrap_or(0.0);
    let rounds = if sync_mode() == "diff" { 2 } else { 1 };
    println!(
        "memory: a {rows}-row source in {SYNCS} syncs (pages of 1000, {} mode), {SYNCS} workers, release build",
        sync_mode()
    );
    println!("  idle before:        {idle:7.1} MB   target <= 64");
    for round in 1..=rounds {
        if rounds > 1 {
            println!(
                "  round {round}: {}",
                if round == 1 {
                    "every row sent and its state kept"
                } else {
                    "the unchanged rows read again, nothing sent"
                }
            );
        }
        stream_round(&pool, &cli, pid, round, rows, &fake).await?;
    }
    let failed: i64 = sqlx::query_scalar("SELECT count(*) FROM runs WHERE status <> 'succeeded'")
        .fetch_one(&pool)
        .await?;
    anyhow::ensure!(failed == 0, "{failed} run(s) did not succeed");
    daemon.signal("TERM")?;
    let _ = daemon.child.wait();
    drop(fake);
    fake_runtime.shutdown_background();
    Ok(())
}

/// Starts every sync once and samples the daemon's memory until all `round`
/// rounds of runs have ended.
async fn stream_round(
    pool: &sqlx::PgPool,
    cli: &dyn Fn(&[String]) -> anyhow::Result<()>,
    pid: u32,
    round: usize,
    rows: i64,
    fake: &brevo::BrevoFake,
) -> anyhow::Result<()> {
    for k in 0..SYNCS {
        cli(&["sync".into(), "run".into(), format!("slice-{k}")])?;
    }
    let started = Instant::now();
    let mut samples: Vec<(f64, f64, i64)> = Vec::new();
    loop {
        let (done, written): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status IN ('succeeded', 'failed')), coalesce(sum(records_written), 0)::bigint FROM runs",
        )
        .fetch_one(pool)
        .await?;
        if let Some(rss) = daemon_process::rss_mb(pid) {
            samples.push((started.elapsed().as_secs_f64(), rss, written));
        }
        if done as usize >= SYNCS * round {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(1800),
            "the syncs did not finish in 30 min"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let wall = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = daemon_process::rss_mb(pid).unwrap_or(0.0);
    let peak = samples.iter().map(|s| s.1).fold(0.0, f64::max);
    for q in [0.1, 0.25, 0.5, 0.75, 0.9] {
        if let Some(s) = samples.get(((samples.len() as f64) * q) as usize) {
            println!(
                "  at {:3.0}% of the time: {:7.1} MB  ({} records written, {:.0} s)",
                q * 100.0,
                s.1,
                s.2,
                s.0
            );
        }
    }
    println!("  peak while streaming: {peak:5.1} MB   target <= 200, flat");
    println!("  idle after:         {after:7.1} MB");
    println!(
        "  wall time {wall:.0} s, {:.0} rows/s, destination contacts {}, imports {}",
        rows as f64 / wall,
        fake.contacts().len(),
        fake.requests_to("/v3/contacts/import").len()
    );
    Ok(())
}
