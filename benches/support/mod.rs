//! What the benchmarks share: each runs in a database of its own, and its
//! secrets are passed as environment variables, which a benchmark does not set
//! in its own process (no unsafe code) — it re-runs itself with them set, and
//! the re-run writes every `BENCH_*` variable into the secrets file of each
//! workspace its syncs use (`secrets_dir`, `write_secrets`).

use std::future::Future;

use sqlx::{Connection, Executor, PgConnection, PgPool};
use uuid::Uuid;

/// `outbound.allow` of a benchmark: everything it talks to is on loopback
/// (also `SYNCWARD__OUTBOUND__ALLOW` of the daemons it starts).
pub const LOOPBACK: &str = "127.0.0.1";

const ADMIN: &str = "postgres://syncward:syncward@127.0.0.1:5432/syncward";

/// A benchmark's `main`: re-runs itself with the environment (`extra`, and
/// `BENCH_DATABASE` / `BENCH_SOURCE_URL` naming a database of its own); in the
/// re-run, creates that database, migrates it, hands `bench` a pool of
/// `connections` on it, and drops it afterwards.
pub fn main<F, Fut>(extra: &[(&str, &str)], connections: u32, bench: F) -> anyhow::Result<()>
where
    F: FnOnce(PgPool) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    if std::env::var_os("BENCH_DATABASE").is_none() {
        let name = format!("syncward_bench_{}", Uuid::new_v4().simple());
        let status = std::process::Command::new(std::env::current_exe()?)
            .args(std::env::args().skip(1))
            .env("BENCH_DATABASE", &name)
            .env(
                "BENCH_SECRETS_DIR",
                std::env::temp_dir().join(format!("syncward-bench-secrets-{name}")),
            )
            // Loopback without TLS, as a daemon on the database's host would
            // connect (TLS here costs ~20% of the run-queue figure).
            .env(
                "BENCH_SOURCE_URL",
                format!("postgres://syncward:syncward@127.0.0.1:5432/{name}?sslmode=disable"),
            )
            .envs(extra.iter().copied())
            .status()?;
        std::process::exit(status.code().unwrap_or(1));
    }
    // reqwest and sqlx are built without a default crypto provider; this only
    // fails when one is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    // The fakes and the database are on loopback.
    if let Ok(policy) = syncward::outbound::OutboundPolicy::new(&[LOOPBACK.to_string()], None) {
        syncward::outbound::policy::install(policy);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let name = std::env::var("BENCH_DATABASE")?;
            let mut admin = PgConnection::connect(ADMIN).await?;
            admin
                .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .await?;
            let secrets = secrets_dir();
            std::fs::create_dir_all(&secrets)?;
            write_secrets(&["bench"])?;
            let result = async {
                let url = std::env::var("BENCH_SOURCE_URL")?;
                // Opened as the daemon opens its store.
                let pool =
                    syncward::store::connect_for_migrate(&syncward::config::DatabaseSettings {
                        url: url.into(),
                        max_connections: connections,
                    })
                    .await?;
                syncward::store::MIGRATOR.run(&pool).await?;
                bench(pool).await
            }
            .await;
            admin
                .execute(sqlx::AssertSqlSafe(format!(
                    "DROP DATABASE {name} WITH (FORCE)"
                )))
                .await?;
            let _ = std::fs::remove_dir_all(&secrets);
            result
        })
}

/// The directory of this benchmark's workspaces' secrets files (for
/// `secrets.dir`, or `SYNCWARD__SECRETS__DIR` of a daemon it starts).
#[allow(dead_code)]
pub fn secrets_dir() -> std::path::PathBuf {
    std::env::var_os("BENCH_SECRETS_DIR")
        .map(Into::into)
        .unwrap_or_else(|| std::env::temp_dir().join("syncward-bench-secrets"))
}

/// Writes every `BENCH_*` variable of this process into the secrets file of
/// each of `workspaces`.
#[allow(dead_code)]
pub fn write_secrets(workspaces: &[&str]) -> anyhow::Result<()> {
    write_secrets_with(workspaces, &[])
}

/// `write_secrets`, with `extra` secrets beside the `BENCH_*` variables.
pub fn write_secrets_with(workspaces: &[&str], extra: &[(&str, &str)]) -> anyhow::Result<()> {
    let mut lines = String::new();
    for (key, value) in std::env::vars().filter(|(k, _)| k.starts_with("BENCH_")) {
        lines.push_str(&format!("{key}='{value}'\n"));
    }
    for (key, value) in extra {
        lines.push_str(&format!("{key}='{value}'\n"));
    }
    for workspace in workspaces {
        std::fs::write(secrets_dir().join(format!("{workspace}.env")), &lines)?;
    }
    Ok(())
}

/// A run environment as the daemon's, on `pool` with `settings`, its leases
/// under a Redis prefix of its own, and an executor to claim runs as.
#[allow(dead_code)]
pub fn run_env(
    pool: &PgPool,
    settings: &syncward::config::Settings,
) -> anyhow::Result<(syncward::worker::RunEnv, syncward::store::runs::Executor)> {
    let redis = syncward::redis::RedisPool::server("redis://127.0.0.1:6379")?;
    let redis = syncward::redis::SharedConnection::new(redis);
    let leases = syncward::lease::LeaseManager::new(
        redis.clone(),
        &format!("syncward-bench-{}", Uuid::new_v4().simple()),
        Uuid::new_v4(),
        std::time::Duration::from_secs(900),
    );
    let env = syncward::worker::RunEnv::new(
        pool.clone(),
        syncward::store::grouped::RunStatements::new(pool.clone()),
        syncward::outbound::SharedBudgets::in_redis(redis.clone(), &settings.redis.key_prefix),
        leases,
        Default::default(),
        settings,
        tokio_util::sync::CancellationToken::new(),
    );
    let executor = syncward::store::runs::Executor {
        worker_id: "bench".into(),
        boot_id: Uuid::new_v4(),
    };
    Ok((env, executor))
}

/// Claims a run of `definition`, runs it on the daemon's code path,
/// releases its lease and marks it finished (so the sync's next run may
/// start): how long it took and what it moved. Fails unless it succeeded.
#[allow(dead_code)]
pub async fn timed_run(
    env: &syncward::worker::RunEnv,
    pool: &PgPool,
    executor: &syncward::store::runs::Executor,
    definition: &syncward::config::SyncDefinition,
) -> anyhow::Result<(std::time::Duration, syncward::store::runs::RunCounts)> {
    let id = definition.id.to_string();
    let run = syncward::store::runs::create_claimed_run(
        pool,
        &id,
        syncward::states::RunTrigger::Foreground,
        1,
        executor,
    )
    .await?;
    let started = std::time::Instant::now();
    let report = syncward::worker::execute_run(env, &run, definition, &mut |_| {}).await;
    let elapsed = started.elapsed();
    if let Some(lease) = &report.lease {
        env.leases.release(lease).await?;
    }
    anyhow::ensure!(
        report.outcome == syncward::worker::RunOutcome::Succeeded,
        "run {} failed: {:?}",
        run.id,
        report.outcome
    );
    sqlx::query("UPDATE runs SET status = 'succeeded', finished_at = now() WHERE id = $1")
        .bind(run.id)
        .execute(pool)
        .await?;
    Ok((elapsed, report.counts))
}

/// CPU seconds used so far by every process named `name` (for `postgres`,
/// the server and its backends, those that ended included), from /proc.
#[allow(dead_code)]
pub fn cpu_seconds(name: &str) -> f64 {
    let command = format!("({name}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    entries
        .flatten()
        .filter_map(|entry| std::fs::read_to_string(entry.path().join("stat")).ok())
        .filter(|stat| {
            stat.split_once(") ")
                .is_some_and(|(name, _)| name.ends_with(&command))
        })
        .map(|stat| stat_cpu_seconds(&stat))
        .sum()
}

/// CPU seconds used so far by this process, every thread (a benchmark with
/// its in-process fakes), from /proc.
#[allow(dead_code)]
pub fn own_cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat").map_or(0.0, |stat| stat_cpu_seconds(&stat))
}

/// utime, stime, cutime and cstime of a /proc stat line, in seconds: fields
/// 14 to 17 (the postmaster's cutime holds the backends that ended, so a
/// difference of two readings counts them too).
#[allow(dead_code)]
fn stat_cpu_seconds(stat: &str) -> f64 {
    let ticks = 100.0; // USER_HZ on Linux
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return 0.0;
    };
    // `rest` starts at field 3.
    let used: u64 = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .filter_map(|v| v.parse::<u64>().ok())
        .sum();
    used as f64 / ticks
}
