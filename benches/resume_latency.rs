//! Resume-latency benchmark (prints its figures; asserts nothing about speed):
//! how long a run stands still when the daemon running it is stopped.
//!
//! One long sync (Postgres source → the Brevo fake, each import taking
//! `BENCH_IMPORT_MS`, default 100 ms) runs in a real `syncward run`
//! subprocess while a second daemon stands by. The holder is sent SIGTERM (10
//! times) and then SIGKILL (10 times); each time the figure is the time from
//! the signal to the standby's claim of the run (its `claimed` event, on
//! Postgres' clock), and a fresh standby is started for the next round.
//!
//! After SIGTERM the holder drains at its next batch boundary and puts the run
//! back with a NOTIFY, so the standby resumes it at once. After SIGKILL nobody
//! puts it back: the standby, on this machine, finds at its next sweep that
//! the holder's pid is gone and frees its lease (up to one `sweeper.every`);
//! one on another machine would wait for the liveness key to expire and the
//! heartbeat to go stale (about `workers.liveness_ttl` more). Both default
//! to the shipped defaults (10 s, 2 s); `BENCH_LIVENESS_TTL` and
//! `BENCH_SWEEPER_EVERY` override them, and they are printed with the figures.
//!
//! `cargo bench --bench resume_latency` (needs `scripts/services`).

#[allow(dead_code)]
#[path = "../tests/it/fakes/brevo.rs"]
mod brevo;
#[path = "support/daemon_process.rs"]
mod daemon_process;
mod support;

use std::time::{Duration, Instant};

use uuid::Uuid;

const KEY: &str = "xkeysib-bench";
const ROUNDS: usize = 10;

fn main() -> anyhow::Result<()> {
    support::main(&[("BENCH_BREVO_KEY", KEY)], 4, run_benchmark)
}

fn setting(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

async fn run_benchmark(pool: sqlx::PgPool) -> anyhow::Result<()> {
    let import_ms: u64 = setting("BENCH_IMPORT_MS", "100").parse()?;
    let defaults = syncward::config::Settings::default();
    let shipped = |d: Duration| humantime::format_duration(d).to_string();
    let liveness = setting(
        "BENCH_LIVENESS_TTL",
        &shipped(defaults.workers.liveness_ttl),
    );
    let sweeper = setting("BENCH_SWEEPER_EVERY", &shipped(defaults.sweeper.every));
    let rows: i64 = 200_000;
    sqlx::raw_sql(
        "CREATE TABLE contacts (id bigint PRIMARY KEY, email text NOT NULL, first_name text)",
    )
    .execute(&pool)
    .await?;
    sqlx::query(
        "INSERT INTO contacts SELECT i, 'contact' || i || '@example.com', 'First' || i FROM generate_series(1, $1) i",
    )
    .bind(rows)
    .execute(&pool)
    .await?;
    let (fake_runtime, fake) = daemon_process::brevo_fake_apart(KEY)?;
    fake.on_write(move |_| std::thread::sleep(Duration::from_millis(import_ms)));

    let dir = tempfile::tempdir()?;
    let sync_file = dir.path().join("latency.toml");
    std::fs::write(
        &sync_file,
        format!(
            r#"id = "latency"
workspace = "bench"
schedule = "0 0 0 1 1 *"
[source]
kind = "postgres"
url_env = "BENCH_SOURCE_URL"
query = "SELECT id, email, first_name FROM contacts"
cursor_column = "id"
page_size = 50
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
"#,
            fake.base_url
        ),
    )?;
    // Settings come from the environment; the config file says so.
    let config = dir.path().join("syncward.toml");
    std::fs::write(
        &config,
        "# resume-latency benchmark: every setting is in SYNCWARD__* variables\n",
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
        ("SYNCWARD__WORKERS__COUNT".into(), "1".into()),
        // Every SIGKILL spends the attempt it interrupts: 20 rounds need more
        // than the default 5.
        ("SYNCWARD__RETRY__MAX_ATTEMPTS".into(), "100".into()),
        ("SYNCWARD__WORKERS__LIVENESS_TTL".into(), liveness.clone()),
        ("SYNCWARD__SWEEPER__EVERY".into(), sweeper.clone()),
        ("SYNCWARD_CONFIG".into(), config.display().to_string()),
    ];
    let cli = |args: &[&str]| -> anyhow::Result<()> {
        let out = std::process::Command::new(daemon_process::BINARY)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "syncward {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    };
    cli(&["sync", "apply", &sync_file.display().to_string()])?;
    cli(&["sync", "run", "latency"])?;
    let run_id: i64 = sqlx::query_scalar("SELECT id FROM runs WHERE sync_id = 'latency'")
        .fetch_one(&pool)
        .await?;

    let mut holder = daemon_process::Daemon::spawn(&env)?;
    let holder_boot = holder.ready().await?;
    wait_for_holder(&pool, run_id, holder_boot).await?;
    println!(
        "resume latency: a {rows}-contact sync, pages of 50, imports of {import_ms} ms; workers.liveness_ttl = {liveness}, sweeper.every = {sweeper}"
    );
    for signal in ["TERM", "KILL"] {
        let mut figures = Vec::new();
        for _ in 0..ROUNDS {
            let standby = daemon_process::Daemon::spawn(&env)?;
            let standby_boot = standby.ready().await?;
            // Let the holder's run get going again after the last takeover.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let before: chrono::DateTime<chrono::Utc> =
                sqlx::query_scalar("SELECT clock_timestamp()")
                    .fetch_one(&pool)
                    .await?;
            let signalled = Instant::now();
            holder.signal(signal)?;
            let claimed = wait_for_holder(&pool, run_id, standby_boot).await?;
            let latency = (claimed - before)
                .to_std()
                .unwrap_or_default()
                .as_secs_f64();
            figures.push(latency);
            println!(
                "  SIG{signal}: resumed after {latency:.3} s (seen by the bench after {:.3} s)",
                signalled.elapsed().as_secs_f64()
            );
            // The old holder exits (drained, or already dead) before the next round.
            let _ = holder.child.wait();
            holder = standby;
        }
        let min = figures.iter().copied().fold(f64::INFINITY, f64::min);
        let max = figures.iter().copied().fold(0.0, f64::max);
        println!(
            "SIG{signal}-to-resumed: median {:.3} s over {ROUNDS} (min {min:.3}, max {max:.3})",
            median(figures)
        );
    }
    let status: String = sqlx::query_scalar("SELECT status FROM runs WHERE id = $1")
        .bind(run_id)
        .fetch_one(&pool)
        .await?;
    println!("  the run is still {status} (the benchmark stops it here)");
    drop(holder);
    drop(fake);
    fake_runtime.shutdown_background();
    Ok(())
}

/// Waits until `boot` has claimed the run; when it did, on Postgres' clock.
async fn wait_for_holder(
    pool: &sqlx::PgPool,
    run_id: i64,
    boot: Uuid,
) -> anyhow::Result<chrono::DateTime<chrono::Utc>> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(300) {
        let claimed: Option<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
            "SELECT e.at FROM runs r JOIN run_events e ON e.run_id = r.id AND e.kind = 'claimed'
             WHERE r.id = $1 AND r.status = 'running' AND r.boot_id = $2
             ORDER BY e.id DESC LIMIT 1",
        )
        .bind(run_id)
        .bind(boot)
        .fetch_optional(pool)
        .await?;
        if let Some(at) = claimed {
            return Ok(at);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    anyhow::bail!("daemon {boot} never claimed run {run_id}")
}
