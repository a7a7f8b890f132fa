//! Diff-mode benchmark (prints its figures; asserts nothing about speed): a
//! Postgres query of 1,000,000 contacts with no cursor column
//! (`source.sync_mode = "diff"`) → the Brevo fake on loopback, pages of
//! 1,000, on the run code path the daemon uses. The first run sends every
//! contact; then each run over the unchanged query is timed: rows/s, the
//! requests it made (the target is none) and the process's peak memory.
//!
//! `cargo bench --bench diff_mode` (needs `scripts/services`); `BENCH_ROWS`
//! changes the size, `BENCH_REPS` the timed runs (3). Target on a 2-core
//! machine: ≥ 500,000 unchanged rows/s, 0 requests, memory flat in the rows.

#[allow(dead_code)]
#[path = "../tests/it/fakes/brevo.rs"]
mod brevo;
mod support;

use syncward::config::{Settings, SyncDefinition};
use syncward::store::audit::Actor;
use syncward::store::syncs;

const KEY: &str = "xkeysib-bench";

fn main() -> anyhow::Result<()> {
    support::main(&[("BENCH_BREVO_KEY", KEY)], 8, run_benchmarks)
}

/// The process's peak resident memory so far (VmHWM), in MiB.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn run_benchmarks(pool: sqlx::PgPool) -> anyhow::Result<()> {
    let rows: i64 = std::env::var("BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let reps: usize = std::env::var("BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    sqlx::raw_sql("CREATE TABLE contacts (id bigint PRIMARY KEY, email text NOT NULL, first_name text, last_name text)")
        .execute(&pool)
        .await?;
    sqlx::query(
        "INSERT INTO contacts SELECT i, 'contact' || i || '@example.com', 'First' || i, 'Last' || i
         FROM generate_series(1, $1) i",
    )
    .bind(rows)
    .execute(&pool)
    .await?;
    sqlx::raw_sql("VACUUM ANALYZE contacts")
        .execute(&pool)
        .await?;
    let fake = brevo::BrevoFake::start(KEY).await?;
    fake.lean();
    let text = format!(
        r#"
id = "bench-diff"
workspace = "bench"
schedule = "0 0 * * * *"
[source]
kind = "postgres"
url_env = "BENCH_SOURCE_URL"
sync_mode = "diff"
query = "SELECT email, first_name, last_name FROM contacts"
page_size = 1000
statement_timeout = "5m"
[destination]
kind = "brevo"
api_key_env = "BENCH_BREVO_KEY"
base_url = "{}"
mode = "bulk"
list_ids = [1]
requests_per_second = 1000
[mapping]
email = "email"
attributes = {{ FIRSTNAME = "first_name", LASTNAME = "last_name" }}
"#,
        fake.base_url
    );
    let definition = SyncDefinition::parse("bench-diff.toml", &text)?;
    syncs::publish_syncs(&pool, std::slice::from_ref(&definition), Actor::Cli).await?;
    let mut settings = Settings::default();
    settings.lease.renew_every = std::time::Duration::from_secs(300);
    settings.secrets.dir = support::secrets_dir();
    let (env, executor) = support::run_env(&pool, &settings)?;
    let run_once = || {
        let (env, pool, executor, definition) = (
            env.clone(),
            pool.clone(),
            executor.clone(),
            definition.clone(),
        );
        async move {
            let (elapsed, counts) = support::timed_run(&env, &pool, &executor, &definition).await?;
            anyhow::Ok((elapsed, counts))
        }
    };
    let (first, counts) = run_once().await?;
    anyhow::ensure!(
        counts.written == rows,
        "the first run did not send everyone"
    );
    let requests_after_first = fake.requests().len();
    let peak_after_first = peak_rss_mib();
    println!(
        "diff mode, first run: {rows} rows sent in {:.1} s ({:.0} rows/s); peak RSS {peak_after_first:.0} MiB",
        first.as_secs_f64(),
        rows as f64 / first.as_secs_f64()
    );
    let mut rates = Vec::new();
    for _ in 0..reps {
        let (elapsed, counts) = run_once().await?;
        anyhow::ensure!(
            counts.written == 0 && counts.replayed == rows,
            "an unchanged run sent records: {counts:?}"
        );
        rates.push(rows as f64 / elapsed.as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    let requests = fake.requests().len() - requests_after_first;
    println!(
        "diff mode, unchanged: {:.0} rows/s median ({:.0}–{:.0}) over {reps} runs of {rows} rows; {requests} requests; peak RSS {:.0} MiB (after the first run: {peak_after_first:.0} MiB)",
        rates[rates.len() / 2],
        rates[0],
        rates[rates.len() - 1],
        peak_rss_mib()
    );
    Ok(())
}
