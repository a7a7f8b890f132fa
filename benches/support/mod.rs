//! What the benchmarks share: each runs in a database of its own, and secrets
//! reach syncs through environment variables, which a benchmark does not set in
//! its own process (no unsafe code) — it re-runs itself with them set.

use std::future::Future;

use sqlx::{Connection, Executor, PgConnection};
use uuid::Uuid;

const ADMIN: &str = "postgres://syncward:syncward@127.0.0.1:5432/syncward";

/// In the first process: re-runs this benchmark with `BENCH_DATABASE`,
/// `BENCH_SOURCE_URL` (that database) and `extra` set, and exits with its code.
/// In the re-run: returns.
pub fn reexec_with_env(extra: &[(&str, &str)]) -> anyhow::Result<()> {
    if std::env::var_os("BENCH_DATABASE").is_some() {
        return Ok(());
    }
    let name = format!("syncward_bench_{}", Uuid::new_v4().simple());
    let status = std::process::Command::new(std::env::current_exe()?)
        .args(std::env::args().skip(1))
        .env("BENCH_DATABASE", &name)
        .env(
            "BENCH_SOURCE_URL",
            format!("postgres://syncward:syncward@127.0.0.1:5432/{name}"),
        )
        .envs(extra.iter().copied())
        .status()?;
    std::process::exit(status.code().unwrap_or(1));
}

/// Creates the benchmark's database, runs `bench` with its URL, drops it.
pub async fn with_database<F, Fut>(bench: F) -> anyhow::Result<()>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let name = std::env::var("BENCH_DATABASE")?;
    let mut admin = PgConnection::connect(ADMIN).await?;
    admin
        .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .await?;
    let result = bench(std::env::var("BENCH_SOURCE_URL")?).await;
    admin
        .execute(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {name} WITH (FORCE)"
        )))
        .await?;
    result
}
