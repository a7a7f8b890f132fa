//! The HTML pages: what a browser shows for a breaker-paused sync and a failed
//! run, and that the CLI pages show the same content.

use std::path::PathBuf;
use std::time::Duration;

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::install_crypto;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

/// Admin tokens are at least 32 characters.
const TOKEN: &str = "page-token-for-tests-0123456789abcdef";
const WHAT_HAPPENED: &str = "The source refused or failed the query that reads the records.";
const WHAT_NEXT: &str =
    "Fix the sync's query (the detail gives the database's error) and publish the sync again.";

/// A sync whose source table is gone, failed five times in a row: the breaker
/// has paused it. Returns the id of the last failed run.
async fn breaker_paused(s: &Scenario) -> anyhow::Result<i64> {
    sqlx::raw_sql("ALTER TABLE contacts RENAME TO contacts_gone")
        .execute(&s.db.pool)
        .await?;
    for _ in 0..5 {
        let out = s.run_foreground().await?;
        anyhow::ensure!(out.code == 1, "the run should fail: {out:?}");
    }
    let (status, reason): (String, Option<String>) =
        sqlx::query_as("SELECT status, paused_reason FROM syncs WHERE id = $1")
            .bind(SYNC_ID)
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(
        (status.as_str(), reason.as_deref()),
        ("paused", Some("circuit_breaker_tripped"))
    );
    Ok(s.last_run().await?["id"].as_i64().unwrap_or_default())
}

/// Debian's Chromium, headless: the rendered DOM of `url`, and a screenshot of
/// it at `target/screenshots/<name>.png`.
pub(crate) async fn chromium(url: &str, name: &str) -> anyhow::Result<String> {
    let binary = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .ok_or_else(|| {
            anyhow::anyhow!("Chromium is not installed: `apt-get install chromium chromium-driver` (scripts/test does it)")
        })?;
    let profile = tempfile::tempdir()?;
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&shots)?;
    let shot = shots.join(format!("{name}.png"));
    let _ = std::fs::remove_file(&shot); // a stale screenshot must not pass for a new one
    let base = |extra: &[String]| {
        let mut c = tokio::process::Command::new(binary);
        c.args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1280,1400",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .kill_on_drop(true);
        c
    };
    let dom = tokio::time::timeout(
        Duration::from_secs(60),
        base(&["--dump-dom".into()]).output(),
    )
    .await??;
    anyhow::ensure!(
        dom.status.success(),
        "chromium --dump-dom {url} failed: {}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let shot_run = tokio::time::timeout(
        Duration::from_secs(60),
        base(&[format!("--screenshot={}", shot.display())]).output(),
    )
    .await??;
    anyhow::ensure!(
        shot_run.status.success() && std::fs::metadata(&shot)?.len() > 1000,
        "chromium --screenshot {url} wrote no picture: {}",
        String::from_utf8_lossy(&shot_run.stderr)
    );
    Ok(String::from_utf8(dom.stdout)?)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_browser_shows_the_paused_reason_the_three_sentences_and_the_owner() -> anyhow::Result<()>
{
    let s = Scenario::new(SyncOptions::default()).await?;
    let run_id = breaker_paused(&s).await?;
    let daemon = DaemonProcess::spawn(&s.cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);

    let overview = chromium(&format!("{base}/"), "overview").await?;
    assert!(
        overview.contains(&format!(">{SYNC_ID}</a>")),
        "the sync is listed:\n{overview}"
    );
    assert!(
        overview.contains("paused by the circuit breaker (circuit_breaker_tripped)"),
        "{overview}"
    );
    assert!(
        overview.contains(&format!("#{run_id} failed")),
        "{overview}"
    );
    // Paused and silent syncs come first.
    let attention = overview
        .find("Needs attention: 1 paused or silent")
        .expect("a section of syncs that need attention");
    assert!(
        attention < overview.find("Workspace acme").unwrap_or(usize::MAX),
        "{overview}"
    );

    let sync = chromium(&format!("{base}/syncs/{SYNC_ID}"), "sync-paused-by-breaker").await?;
    for expected in [
        "paused by the circuit breaker (circuit_breaker_tripped)",
        "Why it is paused: the last failure",
        "<dt>failure:</dt><dd>source_query_failed</dd>",
        &format!("<dt>what happened:</dt><dd>{WHAT_HAPPENED}</dd>"),
        &format!("<dt>what next:</dt><dd>{WHAT_NEXT}</dd>"),
        "<dt>whose job:</dt><dd>the sync's owner</dd>",
        // No admin token here: buttons that could only be refused are not shown.
        "Read-only here: pausing, resuming and running need the admin token",
        "url_env = \"TEST_SOURCE_URL\"",
    ] {
        assert!(
            sync.contains(expected),
            "the sync page shows {expected:?}:\n{sync}"
        );
    }
    assert!(!sync.contains("</button>"), "{sync}");
    // Headings are words, not Markdown: no literal backticks.
    for heading in sync.split("<h2>").skip(1) {
        let heading = heading.split("</h2>").next().unwrap_or_default();
        assert!(!heading.contains('`'), "{heading}");
    }
    // The chart of recent runs: two bars per run (duration, records read),
    // red for the five failures, each linking to its run; summed up in words.
    let chart = &sync[sync.find("<svg").expect("an inline SVG chart")..];
    let chart = &chart[..chart.find("</svg>").expect("the chart ends")];
    assert_eq!(chart.matches("<rect").count(), 10, "{chart}");
    assert_eq!(chart.matches("fill=\"#cf222e\"").count(), 10, "{chart}");
    assert!(
        chart.contains(&format!("href=\"/runs/{run_id}\"")),
        "{chart}"
    );
    assert!(sync.contains("last 5 runs: 5 failed"), "{sync}");

    let run = chromium(&format!("{base}/runs/{run_id}"), "run-failed").await?;
    for expected in [
        "<dt>status:</dt><dd>failed</dd>",
        "<dt>attempt:</dt><dd>1 of 5</dd>",
        "<dt>failure:</dt><dd>source_query_failed</dd>",
        &format!("<dt>what happened:</dt><dd>{WHAT_HAPPENED}</dd>"),
        &format!("<dt>what next:</dt><dd>{WHAT_NEXT}</dd>"),
        "<dt>whose job:</dt><dd>the sync's owner</dd>",
        "<dt>re-sent pending:</dt><dd>0</dd>",
        "<dt>duration:</dt>",
        "<dt>cursor:</dt><dd>from the source's start to the source's start</dd>",
        "Timeline",
        "attempt 1 taken by worker",
    ] {
        assert!(
            run.contains(expected),
            "the run page shows {expected:?}:\n{run}"
        );
    }
    // A finished run's page stays as it is.
    assert!(!run.contains("http-equiv=\"refresh\""), "{run}");
    Ok(())
}

/// A run in progress: its page shows how far it got and reloads itself.
#[tokio::test(flavor = "multi_thread")]
async fn a_running_runs_page_shows_its_progress_and_refreshes_itself() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.fake.hold_writes();
    let run = s.run_foreground();
    let look = async {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while s.fake.held_writes() == 0 {
            anyhow::ensure!(std::time::Instant::now() < deadline, "no write arrived");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let daemon = DaemonProcess::spawn(&s.cli).await?;
        let base = format!("http://{}", daemon.http_address().await?);
        let run_id = s.last_run().await?["id"].as_i64().unwrap_or_default();
        let page = chromium(&format!("{base}/runs/{run_id}"), "run-in-progress").await;
        s.fake.release_writes();
        let page = page?;
        for expected in [
            "http-equiv=\"refresh\" content=\"5\"",
            "<dt>status:</dt><dd>running</dd>",
            "<dt>elapsed:</dt>",
            "<dt>pages:</dt><dd>0</dd>",
            "<dt>rate:</dt>",
        ] {
            assert!(
                page.contains(expected),
                "the page shows {expected:?}:\n{page}"
            );
        }
        anyhow::Ok(())
    };
    let (out, looked) = tokio::join!(run, look);
    looked?;
    let out = out?.ok()?;
    assert!(out.stdout.contains("succeeded"), "{}", out.stdout);
    let pages: i32 = sqlx::query_scalar("SELECT pages FROM runs ORDER BY id DESC LIMIT 1")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(pages, 3, "30 rows in pages of 10");
    Ok(())
}

/// Page text as one line: tags become spaces, entities are decoded, runs of
/// whitespace collapse.
fn visible_text(html: &str) -> String {
    let mut text = String::new();
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => {
                in_tag = true;
                text.push(' ');
            }
            '>' => in_tag = false,
            c if !in_tag => text.push(c),
            _ => {}
        }
    }
    let text = text
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&");
    collapse(&text)
}

fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

async fn page(url: &str) -> anyhow::Result<(u16, String)> {
    install_crypto();
    let response = reqwest::Client::new()
        .get(url)
        .basic_auth("admin", Some(TOKEN))
        .send()
        .await?;
    Ok((response.status().as_u16(), response.text().await?))
}

#[tokio::test(flavor = "multi_thread")]
async fn cli_pages_show_what_the_html_pages_and_the_api_show() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let run_id = breaker_paused(&s).await?;
    let cli = s.cli.clone().with_env("SYNCWARD__HTTP__ADMIN_TOKEN", TOKEN);
    let daemon = DaemonProcess::spawn(&cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);
    install_crypto();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;

    let run_id_text = run_id.to_string();
    for (args, path, api) in [
        (
            vec!["runs", "show", run_id_text.as_str()],
            format!("/runs/{run_id}"),
            format!("/api/runs/{run_id}"),
        ),
        (
            vec!["sync", "show", SYNC_ID],
            format!("/syncs/{SYNC_ID}"),
            format!("/api/syncs/{SYNC_ID}"),
        ),
    ] {
        let text = s.cli.run(&args).await?.ok()?.stdout;
        let (status, html) = page(&format!("{base}{path}")).await?;
        assert_eq!(status, 200, "{path}");
        let shown = visible_text(&html);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                shown.contains(&collapse(line)),
                "`{}` prints {line:?}, which {path} does not show:\n{shown}",
                args.join(" ")
            );
        }
        let mut json_args = args.clone();
        json_args.push("--json");
        let from_cli = s.cli.run(&json_args).await?.ok()?.json()?;
        let from_api: serde_json::Value = http
            .get(format!("{base}{api}"))
            .bearer_auth(TOKEN)
            .send()
            .await?
            .json()
            .await?;
        assert_eq!(
            from_cli,
            from_api,
            "`{}` and {api} agree",
            json_args.join(" ")
        );
    }

    // Pages want the token too; a browser is asked for it (Basic, token as password).
    let bare = http.get(format!("{base}/runs/{run_id}")).send().await?;
    assert_eq!(bare.status().as_u16(), 401);
    assert!(
        bare.headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("Basic ")),
        "the browser is asked for credentials"
    );

    // The sync page's buttons: a foreign page cannot press them; ours can.
    let forged = http
        .post(format!("{base}/syncs/{SYNC_ID}/resume"))
        .basic_auth("admin", Some(TOKEN))
        .header("origin", "http://evil.example")
        .send()
        .await?;
    assert_eq!(forged.status().as_u16(), 403);
    let pressed = http
        .post(format!("{base}/syncs/{SYNC_ID}/resume"))
        .basic_auth("admin", Some(TOKEN))
        .header("origin", base.as_str())
        .send()
        .await?;
    assert_eq!(pressed.status().as_u16(), 303);
    assert_eq!(
        pressed
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok()),
        Some(format!("/syncs/{SYNC_ID}").as_str())
    );
    let status: String = sqlx::query_scalar("SELECT status FROM syncs WHERE id = $1")
        .bind(SYNC_ID)
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(status, "active");
    let queued = http
        .post(format!("{base}/syncs/{SYNC_ID}/run"))
        .basic_auth("admin", Some(TOKEN))
        .send()
        .await?;
    assert_eq!(queued.status().as_u16(), 303);
    let runs: i64 =
        sqlx::query_scalar("SELECT count(*) FROM runs WHERE sync_id = $1 AND trigger = 'manual'")
            .bind(SYNC_ID)
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(runs, 1, "Run now queued one run");
    Ok(())
}
