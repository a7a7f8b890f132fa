//! Run-queue benchmark (prints its figures; asserts nothing about speed):
//! no-op-sized runs (a source whose page is empty) through claim → lease →
//! run → finish, with one and with two daemons' worker pools (4 workers each)
//! in this process, on the daemon's own code path. Target on a 2-core machine:
//! ≥ 2,000 runs/s. `cargo bench --bench run_queue`; `BENCH_RUNS` sets how many.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use syncward::config::{Settings, SyncDefinition};
use syncward::lease::{LeaseManager, refresh_liveness};
use syncward::shutdown::Shutdown;
use syncward::store::audit::Actor;
use syncward::store::{runs, syncs};
use syncward::worker::{Daemon, start_workers};
use uuid::Uuid;

fn main() -> anyhow::Result<()> {
    support::main(&[("BENCH_BREVO_KEY", "unused")], 20, run_benchmarks)
}

async fn run_benchmarks(pool: sqlx::PgPool) -> anyhow::Result<()> {
    let runs_wanted: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
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
    let redis = deadpool_redis::Config::from_url("redis://127.0.0.1:6379")
        .create_pool(Some(deadpool_redis::Runtime::Tokio1))?;
    let prefix = format!("syncward-bench-{}", Uuid::new_v4().simple());

    println!("run queue, {runs_wanted} no-op runs, 4 workers per daemon");
    for daemons in [1usize, 2] {
        for d in &definitions {
            runs::enqueue_run(&pool, d.id.as_str(), "manual", 5).await?;
        }
        let shutdown = Shutdown::new(Duration::from_secs(15));
        for _ in 0..daemons {
            let mut settings = Settings::default();
            settings.workers.poll_interval = Duration::from_millis(50);
            settings.redis.key_prefix = prefix.clone();
            let boot = Uuid::new_v4();
            refresh_liveness(&redis, &prefix, boot, Duration::from_secs(600)).await?;
            let leases = LeaseManager::new(redis.clone(), &prefix, boot, Duration::from_secs(900));
            let alerter = syncward::alerts::Alerter::new(pool.clone(), &settings.alerts);
            let daemon = Daemon {
                store: pool.clone(),
                leases,
                settings: Arc::new(settings),
                alerter,
                sources: Default::default(),
            };
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
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let elapsed = started.elapsed();
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
    Ok(())
}
