//! Page memory benchmark (prints its figures; asserts nothing): the peak
//! resident memory of `syncward sync run ID --foreground` reading one large
//! page from an http source (records of about 10 KB each, an unmapped note
//! beside the address) and sending it to the Brevo fake, sampled every 10 ms
//! from /proc, against the page's size. Target: at most 5× the page.
//!
//! `cargo bench --bench page_memory` (needs `scripts/services`);
//! `BENCH_PAGE_RECORDS` changes the page (default 5,000 records, ~50 MB).

#[allow(dead_code)]
#[path = "../tests/it/fakes/brevo.rs"]
mod brevo;
#[allow(dead_code)] // the daemon helpers: this benchmark runs in the foreground
#[path = "support/daemon_process.rs"]
mod daemon_process;
mod support;

use std::time::Duration;

use uuid::Uuid;

const KEY: &str = "xkeysib-bench";

fn main() -> anyhow::Result<()> {
    support::main(&[("BENCH_BREVO_KEY", KEY)], 2, run_benchmark)
}

async fn run_benchmark(_pool: sqlx::PgPool) -> anyhow::Result<()> {
    let records: usize = std::env::var("BENCH_PAGE_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000);
    let note = "n".repeat(10_000);
    let data: Vec<String> = (1..=records)
        .map(|i| format!(r#"{{"id":{i},"email":"page{i}@example.com","note":"{note}"}}"#))
        .collect();
    let page = format!(r#"{{"data":[{}],"meta":{{"next":null}}}}"#, data.join(","));
    let page_mb = page.len() as f64 / 1_048_576.0;
    drop(data);
    let app = axum::Router::new().route("/page", axum::routing::get(move || async move { page }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        // Serves until the benchmark ends.
        let _ = axum::serve(listener, app).await;
    });
    let (fake_runtime, fake) = daemon_process::brevo_fake_apart(KEY)?;

    let dir = tempfile::tempdir()?;
    let config = dir.path().join("syncward.toml");
    std::fs::write(
        &config,
        "# page memory benchmark: settings in SYNCWARD__* variables\n",
    )?;
    let sync = dir.path().join("page.toml");
    std::fs::write(
        &sync,
        format!(
            r#"id = "large-page"
workspace = "bench"
schedule = "0 0 0 1 1 *"
[source]
kind = "http"
url = "http://{addr}/page"
cursor_param = "after"
items_pointer = "/data"
next_cursor_pointer = "/meta/next"
timeout = "5m"
[destination]
kind = "brevo"
api_key_env = "BENCH_BREVO_KEY"
base_url = "{}"
mode = "bulk"
list_ids = [1]
requests_per_second = 1000
[mapping]
email = "email"
"#,
            fake.base_url
        ),
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
        (
            "SYNCWARD__SECRETS__DIR".into(),
            support::secrets_dir().display().to_string(),
        ),
        ("SYNCWARD__OUTBOUND__ALLOW".into(), support::LOOPBACK.into()),
        ("SYNCWARD_CONFIG".into(), config.display().to_string()),
    ];
    let cli = |args: &[&str]| {
        std::process::Command::new(daemon_process::BINARY)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
    };
    anyhow::ensure!(
        cli(&["sync", "apply", &sync.display().to_string()])?
            .wait()?
            .success(),
        "sync apply failed"
    );
    let mut run = cli(&["sync", "run", "large-page", "--foreground"])?;
    let pid = run.id();
    let mut peak: f64 = 0.0;
    let status = loop {
        if let Some(rss) = daemon_process::rss_mb(pid) {
            peak = peak.max(rss);
        }
        if let Some(status) = run.try_wait()? {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    println!(
        "page memory: one http page of {records} records, {page_mb:.1} MB, to the Brevo fake (bulk), release build"
    );
    println!(
        "  run: {}; destination contacts {}",
        if status.success() {
            "succeeded"
        } else {
            "FAILED"
        },
        fake.contacts().len()
    );
    println!(
        "  peak RSS of the foreground run: {peak:.1} MB = {:.2}x the page   target <= 5x",
        peak / page_mb
    );
    server.abort();
    drop(fake);
    fake_runtime.shutdown_background();
    anyhow::ensure!(status.success(), "the run failed");
    Ok(())
}
