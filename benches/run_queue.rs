//! Run-queue benchmark (prints its figures; asserts nothing about speed):
//! no-op-sized runs (a source whose page is empty) through claim → lease →
//! run → finish, with one and with two daemons' worker pools in this process,
//! on the daemon's own code path, with default settings but for the number of
//! workers: 4 (the default), 16, 32 and 64. Target on a 2-core machine: ≥ 2,000
//! runs/s. `cargo bench --bench run_queue`; `BENCH_RUNS` sets how many runs,
//! `BENCH_WORKERS` (e.g. `4,32`) the worker counts.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use syncward::config::{Settings, SyncDefinition};
use syncward::daemon_shared::Daemon;
use syncward::lease::refresh_liveness;
use syncward::shutdown::Shutdown;
use syncward::store::audit::Actor;
use syncward::store::{runs, syncs};
use syncward::worker::start_workers;
use uuid::Uuid;

fn main() -> anyhow::Result<()> {
    support::main(&[("BENCH_BREVO_KEY", "unused")], 20, run_benchmarks)
}

async fn run_benchmarks(pool: sqlx::PgPool) -> anyhow::Result<()> {
    let runs_wanted: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let worker_counts: Vec<usize> = match std::env::var("BENCH_WORKERS") {
        Ok(list) => list
            .split(',')
            .map(|n| n.trim().parse())
            .collect::<Result<_, _>>()?,
        Err(_) => vec![4, 16, 32, 64],
    };
    sqlx::raw_sql("CREATE TABLE contacts (id bigint PRIMARY KEY, email text)")
        .execute(&pool)
        .await?;
    let definitions: Vec<SyncDefinition> = (0..runs_wanted)
        .map(|i| {
            SyncDefinition::parse(
                "bench.toml",
                &format!(
                    r#"
id = "noop-{i}"
workspace = "bench"
schedule = "0 0 0 1 1 *"
[source]
kind = "postgres"
url_env = "BENCH_SOURCE_URL"
query = "SELECT id, email FROM contacts"
cursor_column = "id"
[destination]
kind = "brevo"
api_key_env = "BENCH_BREVO_KEY"
base_url = "http://127.0.0.1:9/v3"
list_ids = [1]
[mapping]
email = "email"
"#
                ),
            )
        })
        .collect::<Result<_, _>>()?;
    syncs::publish_syncs(&pool, &definitions, Actor::Cli).await?;
    let redis = syncward::redis::RedisPool::server("redis://127.0.0.1:6379")?;
    let prefix = format!("syncward-bench-{}", Uuid::new_v4().simple());

    for workers in worker_counts {
        println!("run queue, {runs_wanted} no-op runs, {workers} workers per daemon");
        for daemons in [1usize, 2] {
            // Every round starts from the same state: no runs from earlier
            // rounds (and no autovacuum of them during this one).
            sqlx::raw_sql("TRUNCATE runs CASCADE")
                .execute(&pool)
                .await?;
            sqlx::raw_sql("VACUUM ANALYZE runs, run_events, sync_cursors")
                .execute(&pool)
                .await?;
            for d in &definitions {
                runs::enqueue_run(
                    &pool,
                    d.id.as_str(),
                    syncward::states::RunTrigger::Manual,
                    5,
                )
                .await?;
            }
            let shutdown = Shutdown::new(Duration::from_secs(15));
            let started_at: chrono::DateTime<chrono::Utc> =
                sqlx::query_scalar("SELECT clock_timestamp()")
                    .fetch_one(&pool)
                    .await?;
            for _ in 0..daemons {
                let mut settings = Settings::default();
                settings.workers.poll_interval = Duration::from_millis(50);
                settings.workers.count = workers;
                settings.redis.key_prefix = prefix.clone();
                settings.secrets.dir = support::secrets_dir();
                let boot = Uuid::new_v4();
                refresh_liveness(&redis, &prefix, boot, Duration::from_secs(600)).await?;

                // Each daemon its own store pool, opened as the daemon opens it
                // (default size: the workers' queue statements are grouped).
                settings.database.url = std::env::var("BENCH_SOURCE_URL")?.into();
                let store = syncward::store::connect(&settings.database).await?;
                settings.lease.ttl = Duration::from_secs(900);
                let shared = syncward::redis::SharedConnection::new(redis.clone());
                let daemon = Daemon::new(store, shared, boot, Arc::new(settings));
                start_workers(&daemon, &shutdown);
            }
            let started = Instant::now();
            loop {
                let left: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM runs WHERE status IN ('queued', 'running')",
                )
                .fetch_one(&pool)
                .await?;
                if left == 0 {
                    break;
                }
                anyhow::ensure!(
                    started.elapsed() < Duration::from_secs(300),
                    "runs did not finish"
                );
                // A count scans the runs table: rarely, not to take the cores
                // the daemons are measured on.
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            let last_finish: chrono::DateTime<chrono::Utc> =
                sqlx::query_scalar("SELECT max(finished_at) FROM runs")
                    .fetch_one(&pool)
                    .await?;
            let elapsed = (last_finish - started_at).to_std()?;
            shutdown.begin();
            shutdown.wait().await;
            let failed: i64 =
                sqlx::query_scalar("SELECT count(*) FROM runs WHERE status <> 'succeeded'")
                    .fetch_one(&pool)
                    .await?;
            anyhow::ensure!(failed == 0, "{failed} runs did not succeed");
            println!(
                "  {daemons} daemon(s): {:>7.0} runs/s ({:.2} s)   target >= 2000",
                runs_wanted as f64 / elapsed.as_secs_f64(),
                elapsed.as_secs_f64()
            );
        }
    }
    Ok(())
}
