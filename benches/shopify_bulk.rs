//! A large Shopify store through a bulk operation (prints its figures;
//! asserts only that every customer arrived): `BENCH_CUSTOMERS` customers
//! (default 1,000,000) of which 80 % are not subscribed, 10 % subscribed and
//! 10 % opted out, exported by the Shopify fake (`bulkOperationRunQuery`,
//! polled until `COMPLETED`, a JSONL file streamed in pages of
//! `bulk_page_size` = 5,000) → the Brevo fake enforcing Brevo's 10 requests
//! a second per account, the sync's own budget at Brevo's default. Each page
//! goes in up to three imports (the lists; the holding list with
//! `emailBlacklist`; the holding list).
//!
//! `cargo bench --bench shopify_bulk` (needs `scripts/services`). Target
//! (issue 31): ≥ 5,000 contacts/s per account, no 429; memory flat in the
//! store's size (the run holds one page and one chunk of the file).

#[allow(dead_code)]
#[path = "../tests/it/fakes/brevo.rs"]
mod brevo;
#[allow(dead_code)]
#[path = "../tests/it/fakes/shopify.rs"]
mod shopify;
mod support;

use serde_json::json;
use syncward::config::{Settings, SyncDefinition};
use syncward::store::audit::Actor;
use syncward::store::syncs;

const BREVO_KEY: &str = "xkeysib-bench";
const SHOPIFY_TOKEN: &str = "shpat_bench";

/// What the fakes serve on (the Shopify fake's `super::serve`).
pub async fn serve(
    app: axum::Router,
) -> anyhow::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((addr, server))
}

fn main() -> anyhow::Result<()> {
    support::main(
        &[
            ("BENCH_BREVO_KEY", BREVO_KEY),
            ("BENCH_SHOPIFY_TOKEN", SHOPIFY_TOKEN),
        ],
        8,
        run_benchmark,
    )
}

/// This process's peak resident memory so far, in MB (`VmHWM`).
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

async fn run_benchmark(pool: sqlx::PgPool) -> anyhow::Result<()> {
    let customers: usize = std::env::var("BENCH_CUSTOMERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let shop = shopify::ShopifyFake::start(SHOPIFY_TOKEN, customers, 1000.0, 100.0).await?;
    // One in ten subscribed, one in ten opted out, the rest not subscribed.
    shop.edit_customers(|i, c| {
        c["defaultEmailAddress"]["marketingState"] = json!(match i % 10 {
            0 => "SUBSCRIBED",
            1 => "UNSUBSCRIBED",
            _ => "NOT_SUBSCRIBED",
        });
    });
    let brevo = brevo::BrevoFake::start(BREVO_KEY).await?;
    brevo.lean();
    brevo.enforce_rate_limit(10);

    let mut settings = Settings::default();
    settings.secrets.dir = support::secrets_dir();
    let (env, executor) = support::run_env(&pool, &settings)?;
    let text = format!(
        r#"
id = "shop-bulk"
workspace = "bench"
schedule = "0 0 * * * *"
[source]
kind = "shopify"
shop = "bench"
api_version = "2025-07"
access_token_env = "BENCH_SHOPIFY_TOKEN"
base_url = "{}"
[destination]
kind = "brevo"
api_key_env = "BENCH_BREVO_KEY"
base_url = "{}"
mode = "bulk"
list_ids = [1]
holding_list_id = 2
[mapping]
email = "defaultEmailAddress.emailAddress"
attributes = {{ FIRSTNAME = "firstName", LASTNAME = "lastName" }}
consent = {{ field = "defaultEmailAddress.marketingState", subscribed = ["SUBSCRIBED"] }}
"#,
        shop.base_url, brevo.base_url
    );
    let definition = SyncDefinition::parse("shop-bulk.toml", &text)?;
    syncs::publish_syncs(&pool, std::slice::from_ref(&definition), Actor::Cli).await?;
    println!(
        "shopify_bulk: {customers} customers, 80 % not subscribed, 10 % opted out, Brevo's 10 requests/s enforced"
    );
    let before = peak_rss_mb();
    let (elapsed, counts) = support::timed_run(&env, &pool, &executor, &definition).await?;
    let grown = peak_rss_mb() - before;
    anyhow::ensure!(
        counts.written == customers as i64,
        "{} of {customers} written",
        counts.written
    );
    let imports = brevo.requests_to("/v3/contacts/import").len();
    let singles = brevo.requests_to("/v3/contacts").len();
    println!(
        "  {:>7.0} contacts/s   target >= 5000   ({:.1} s; {} bulk export(s), {} file download(s); {imports} imports, {singles} single writes; {} answered 429)",
        customers as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64(),
        shop.bulk_operations_started(),
        shop.file_requests().len(),
        brevo.rate_limited(),
    );
    println!(
        "  peak RSS of the whole process (both fakes included) grew {grown:.0} MB during the run"
    );
    Ok(())
}
