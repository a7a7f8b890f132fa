//! What the benchmarks share: each runs in a database of its own, and secrets
//! reach syncs through environment variables, which a benchmark does not set in
//! its own process (no unsafe code) — it re-runs itself with them set.

use std::future::Future;

use sqlx::{Connection, Executor, PgConnection, PgPool};
use uuid::Uuid;

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
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(async {
            let name = std::env::var("BENCH_DATABASE")?;
            let mut admin = PgConnection::connect(ADMIN).await?;
            admin
                .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .await?;
            let result = async {
                let url = std::env::var("BENCH_SOURCE_URL")?;
                // Opened as the daemon opens its store.
                let pool = syncward::store::connect(&syncward::config::DatabaseSettings {
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
            result
        })
}
