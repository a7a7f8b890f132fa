//! Brevo import outcomes: the sweeper follows each import process to its end,
//! within the hourly budget, and records how it ended on its run — a failed
//! import as a rejected page whose keys leave the ledger.

use std::time::Duration;

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

async fn count(s: &Scenario, sql: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&s.db.pool)
        .await?)
}

fn checker(s: &Scenario, checks_per_hour: &str) -> crate::helpers::Syncward {
    s.cli
        .clone()
        .with_env("SYNCWARD__SWEEPER__EVERY", "200ms")
        .with_env("SYNCWARD__SWEEPER__IMPORT_CHECK_AFTER", "100ms")
        .with_env("SYNCWARD__SWEEPER__IMPORT_CHECKS_PER_HOUR", checks_per_hour)
}

/// The budget is counted per clock hour: a check just past the hour draws on a
/// new one. Waits out the last minute of an hour so the test's checks share one.
async fn away_from_the_hours_end() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let left = 3600 - now % 3600;
    if left <= 60 {
        tokio::time::sleep(Duration::from_secs(left + 1)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_import_shows_on_its_run_as_a_rejected_page_within_the_check_budget()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.fake.set_process_status("failed");
    assert_eq!(
        s.run_foreground().await?.code,
        0,
        "the imports were accepted"
    );
    let run_id = s.last_run().await?["id"].as_i64().unwrap_or_default();
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM import_processes WHERE status = 'pending'"
        )
        .await?,
        3
    );

    // A budget of one request this hour: one `GET /processes` lists all
    // three imports and settles them.
    away_from_the_hours_end().await;
    let mut daemon = DaemonProcess::spawn(&checker(&s, "1")).await?;
    daemon
        .eventually(Duration::from_secs(20), "the imports checked", || async {
            Ok(count(
                &s,
                "SELECT count(*) FROM import_processes WHERE status = 'failed'",
            )
            .await?
                == 3)
        })
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let checks: Vec<String> = s
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/v3/processes"))
        .map(|r| r.path)
        .collect();
    assert_eq!(checks, vec!["/v3/processes?limit=50&offset=0&sort=desc"]);
    // The checks are counted for Prometheus: three ended.
    let scraped =
        crate::metrics::scrape(&format!("http://{}", daemon.http_address().await?)).await?;
    assert!(
        scraped.contains("syncward_import_checks_total{outcome=\"ended\"} 3"),
        "{scraped}"
    );
    // The hour's budget is spent: a new import waits, unasked.
    sqlx::query("INSERT INTO contacts SELECT i, 'late' || i || '@example.com', 'L' FROM generate_series(1001, 1005) i")
        .execute(&s.db.pool)
        .await?;
    assert_eq!(s.run_foreground().await?.code, 0);
    daemon
        .eventually(
            Duration::from_secs(20),
            "a check refused by the budget",
            || async {
                let scraped =
                    crate::metrics::scrape(&format!("http://{}", daemon.http_address().await?))
                        .await?;
                Ok(!scraped.contains("syncward_import_checks_total{outcome=\"budget_spent\"} 0"))
            },
        )
        .await?;
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM import_processes WHERE status = 'pending'"
        )
        .await?,
        1
    );
    assert_eq!(
        s.fake
            .requests()
            .iter()
            .filter(|r| r.path.starts_with("/v3/processes"))
            .count(),
        1
    );

    let shown = s
        .cli
        .run(&["runs", "show", &run_id.to_string(), "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(shown["run"]["status"], "succeeded");
    assert_eq!(
        shown["run"]["records_rejected"], 30,
        "three pages of ten did not arrive"
    );
    let rejected = shown["rejected_records"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(rejected.len(), 3);
    assert!(
        rejected.iter().all(|r| r["code"] == "import_failed"),
        "{rejected:?}"
    );
    assert!(
        rejected[0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("The file could not be processed"),
        "{rejected:?}"
    );
    assert_eq!(shown["imports"].as_array().map(Vec::len), Some(3));
    // Nothing arrived, so the keys are out of the ledger: a replay sends
    // them again. Only the five late records' keys are left (their import
    // is still unchecked).
    assert_eq!(
        count(
            &s,
            &format!("SELECT count(*) FROM delivery_states WHERE sync_id = '{SYNC_ID}'")
        )
        .await?,
        5
    );
    // Summarised by status; each import with its error under --all.
    let show = |all: bool| {
        let mut args = vec!["runs".to_string(), "show".into(), run_id.to_string()];
        if all {
            args.push("--all".into());
        }
        let cli = s.cli.clone();
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            anyhow::Ok(cli.run(&args).await?.ok()?.stdout)
        }
    };
    let text = show(false).await?;
    assert!(
        text.contains("Brevo imports (") && text.contains("--all lists each"),
        "{text}"
    );
    // Each import's outcome is under --all only (the rejected records still
    // say why theirs did not arrive).
    assert!(!text.contains("import_outcome"), "{text}");
    let text = show(true).await?;
    assert!(
        text.contains("Brevo imports") && text.contains("failed (The file could not be processed"),
        "{text}"
    );
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

/// Runs the sync in the foreground, then a daemon that checks its imports
/// (90 checks an hour) until none is pending: the daemon and the run as
/// `runs show --json` shows it.
async fn run_with_settled_imports(
    s: &Scenario,
) -> anyhow::Result<(DaemonProcess, serde_json::Value)> {
    assert_eq!(s.run_foreground().await?.code, 0);
    let run_id = s.last_run().await?["id"].as_i64().unwrap_or_default();
    let daemon = DaemonProcess::spawn(&checker(s, "90")).await?;
    daemon
        .eventually(Duration::from_secs(20), "every import checked", || async {
            Ok(count(
                s,
                "SELECT count(*) FROM import_processes WHERE status = 'pending'",
            )
            .await?
                == 0)
        })
        .await?;
    let shown = s
        .cli
        .run(&["runs", "show", &run_id.to_string(), "--json"])
        .await?
        .ok()?
        .json()?;
    Ok((daemon, shown))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_completed_import_records_its_failure_counts_on_the_run() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.fake
        .reject_emails(|e| e.starts_with("user1@") || e.starts_with("user2@"));
    let (mut daemon, shown) = run_with_settled_imports(&s).await?;
    let run_id = shown["run"]["id"].as_i64().unwrap_or_default();
    let invalid: i64 = shown["imports"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| p["counts"]["invalid_emails"].as_i64())
                .sum()
        })
        .unwrap_or_default();
    assert_eq!(invalid, 2, "{shown}");
    let outcomes = shown["events"]
        .as_array()
        .map(|e| e.iter().filter(|e| e["kind"] == "import_outcome").count());
    assert_eq!(outcomes, Some(3));
    // `info.import.invalid_emails` of a completed process (`GET
    // /processes/{processId}`, brevo-v3-openapi.2026-02.yaml lines 3467 and
    // 3497): the run counts them as rejected, once,
    // and says so, while the page itself is not a rejected page.
    assert_eq!(shown["import_invalid_emails"], 2, "{shown}");
    assert_eq!(
        shown["run"]["records_rejected"], 2,
        "the invalid e-mails did not arrive; the rest of the page did"
    );
    let rejected = shown["rejected_records"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0]["code"], "import_invalid_emails");
    let text = s
        .cli
        .run(&["runs", "show", &run_id.to_string()])
        .await?
        .ok()?
        .stdout;
    assert!(
        text.contains("invalid e-mails (Brevo imports)") && text.contains("import_invalid_emails"),
        "{text}"
    );
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

/// Rows a completed import skipped for a duplicate identifier
/// (`info.import.duplicate_email_id`, `getProcess` spec 2026-02) are
/// rejected records with their code, not written ones.
#[tokio::test(flavor = "multi_thread")]
async fn an_imports_duplicate_rows_are_recorded_as_rejected_with_their_code() -> anyhow::Result<()>
{
    let s = Scenario::new(SyncOptions::default()).await?;
    // Two more rows with user3's address, on the first page.
    sqlx::query("INSERT INTO contacts VALUES (0, 'user3@example.com', 'Again'), (-1, 'USER3@example.com', 'Twice')")
        .execute(&s.db.pool)
        .await?;
    let (mut daemon, shown) = run_with_settled_imports(&s).await?;
    let rejected = shown["rejected_records"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(
        rejected[0]["code"], "import_duplicate_email_id",
        "{rejected:?}"
    );
    assert!(
        rejected[0]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("2 of the"),
        "{rejected:?}"
    );
    assert_eq!(shown["run"]["records_rejected"], 2, "{shown}");
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}
