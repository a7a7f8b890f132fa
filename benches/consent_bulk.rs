//! Bulk with consent (prints its figures; asserts nothing about speed): a
//! Postgres source of 100,000 contacts of which 80 % are not subscribed, 10 %
//! subscribed and 10 % opted out → the Brevo fake enforcing Brevo's 10
//! requests a second per account, with the sync's own account budget at
//! Brevo's default (`requests_per_second = 10`). Each page goes in up to
//! three imports (the lists; the holding list with `emailBlacklist`; the
//! holding list), so the figure is contacts/s within the account's limit, at
//! each page size in `BENCH_PAGE_SIZES` (default `1000,5000`).
//!
//! `cargo bench --bench consent_bulk` (needs `scripts/services`);
//! `BENCH_ROWS` changes the size. Target: ≥ 5,000 contacts/s per account
//! with 80 % not subscribed, and no 429.

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

async fn run_benchmarks(pool: sqlx::PgPool) -> anyhow::Result<()> {
    let rows: i64 = std::env::var("BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let page_sizes: Vec<u32> = std::env::var("BENCH_PAGE_SIZES")
        .unwrap_or_else(|_| "1000,5000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    sqlx::raw_sql("CREATE TABLE contacts (id bigint PRIMARY KEY, email text NOT NULL, first_name text, state text)")
        .execute(&pool)
        .await?;
    // One in ten subscribed, one in ten opted out, the rest not subscribed:
    // a typical store (issue 31).
    sqlx::query(
        "INSERT INTO contacts SELECT i, 'contact' || i || '@example.com', 'First' || i,
                CASE i % 10 WHEN 0 THEN 'SUBSCRIBED' WHEN 1 THEN 'UNSUBSCRIBED' ELSE 'NOT_SUBSCRIBED' END
         FROM generate_series(1, $1) i",
    )
    .bind(rows)
    .execute(&pool)
    .await?;
    sqlx::raw_sql("VACUUM ANALYZE contacts")
        .execute(&pool)
        .await?;

    let mut settings = Settings::default();
    settings.secrets.dir = support::secrets_dir();
    let (env, executor) = support::run_env(&pool, &settings)?;

    println!(
        "consent_bulk: {rows} contacts, 80 % not subscribed, 10 % opted out, Brevo's 10 requests/s enforced"
    );
    for page_size in page_sizes {
        // A fake of its own per page size: its per-second window starts empty.
        let fake = brevo::BrevoFake::start(KEY).await?;
        fake.lean();
        fake.enforce_rate_limit(10);
        let text = format!(
            r#"
id = "consent{page_size}"
workspace = "bench"
schedule = "0 0 * * * *"
[source]
kind = "postgres"
url_env = "BENCH_SOURCE_URL"
query = "SELECT id, email, first_name, state FROM contacts"
cursor_column = "id"
page_size = {page_size}
[destination]
kind = "brevo"
api_key_env = "BENCH_BREVO_KEY"
base_url = "{}"
mode = "bulk"
list_ids = [1]
holding_list_id = 2
[mapping]
email = "email"
attributes = {{ FIRSTNAME = "first_name" }}
consent = {{ field = "state", subscribed = ["SUBSCRIBED"] }}
"#,
            fake.base_url
        );
        let definition = SyncDefinition::parse("consent.toml", &text)?;
        syncs::publish_syncs(&pool, std::slice::from_ref(&definition), Actor::Cli).await?;
        let (elapsed, counts) = support::timed_run(&env, &pool, &executor, &definition).await?;
        anyhow::ensure!(counts.written == rows, "not every record was written");
        let imports = fake.requests_to("/v3/contacts/import").len();
        let singles = fake.requests_to("/v3/contacts").len();
        println!(
            "  pages of {page_size:>5}: {:>7.0} contacts/s   target >= 5000   ({} requests: {imports} imports, {singles} single writes; {} answered 429)",
            rows as f64 / elapsed.as_secs_f64(),
            imports + singles,
            fake.rate_limited(),
        );
    }
    Ok(())
}
