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
//! The run is `syncward sync run --foreground`, a process of its own (the
//! fakes serve from this one), its resident memory sampled every 100 ms.
//!
//! `cargo bench --bench shopify_bulk` (needs `scripts/services`). Target
//! (issue 31): ≥ 5,000 contacts/s per account, no 429; the run's memory flat
//! while it reads the file (it holds one page and one chunk of it).

#[allow(dead_code)]
#[path = "../tests/it/fakes/brevo.rs"]
mod brevo;
#[path = "support/daemon_process.rs"]
#[allow(dead_code)]
mod daemon_process;
#[allow(dead_code)]
#[path = "../tests/it/fakes/shopify.rs"]
mod shopify;
mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use syncward::config::SyncDefinition;
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
    let (elapsed, samples) = foreground_run(&definition).await?;
    let written: i64 = sqlx::query_scalar(
        "SELECT records_written FROM runs WHERE sync_id = 'shop-bulk' ORDER BY id DESC LIMIT 1",
    )
    .fetch_one(&pool)
    .await?;
    anyhow::ensure!(
        written == customers as i64,
        "{written} of {customers} written"
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
    let peak = samples.iter().map(|s| s.1).fold(0.0, f64::max);
    println!(
        "  the run's process: peak RSS {peak:.1} MB; at 10/25/50/75/90 % of the time: {}",
        [0.1, 0.25, 0.5, 0.75, 0.9]
            .iter()
            .filter_map(|q| samples.get((samples.len() as f64 * q) as usize))
            .map(|s| format!("{:.1}", s.1))
            .collect::<Vec<_>>()
            .join(" / ")
    );
    Ok(())
}

/// Runs the sync with `syncward sync run --foreground` and samples its
/// resident memory every 100 ms: the wall time, and (seconds, MB) samples.
async fn foreground_run(
    definition: &SyncDefinition,
) -> anyhow::Result<(Duration, Vec<(f64, f64)>)> {
    let log = tempfile::NamedTempFile::new()?;
    let config = tempfile::NamedTempFile::new()?;
    std::fs::write(
        config.path(),
        "# settings come from SYNCWARD__* variables\n",
    )?;
    let started = Instant::now();
    let mut child = std::process::Command::new(daemon_process::BINARY)
        .args(["sync", "run", definition.id.as_str(), "--foreground"])
        .env("SYNCWARD_ENV_FILE", "/dev/null")
        .env("SYNCWARD_CONFIG", config.path())
        .env(
            "SYNCWARD__DATABASE__URL",
            std::env::var("BENCH_SOURCE_URL")?,
        )
        .env(
            "SYNCWARD__REDIS__KEY_PREFIX",
            format!("syncward-bench-{}", uuid::Uuid::new_v4().simple()),
        )
        .env("SYNCWARD__SECRETS__DIR", support::secrets_dir())
        .env("SYNCWARD__OUTBOUND__ALLOW", support::LOOPBACK)
        .stdout(std::process::Stdio::null())
        .stderr(log.reopen()?)
        .spawn()?;
    let pid = child.id();
    let mut samples = Vec::new();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if let Some(rss) = daemon_process::rss_mb(pid) {
            samples.push((started.elapsed().as_secs_f64(), rss));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    anyhow::ensure!(
        status.success(),
        "the foreground run failed: {}",
        std::fs::read_to_string(log.path())?
    );
    Ok((started.elapsed(), samples))
}
