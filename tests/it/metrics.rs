//! `/metrics` as Prometheus' own checker judges it: HELP text on every
//! metric, latency as histograms with buckets, counters present at zero from
//! the start, build info, each sync's last success.

use std::time::Duration;

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::install_crypto;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

pub(crate) async fn scrape(base: &str) -> anyhow::Result<String> {
    install_crypto();
    let response = reqwest::get(format!("{base}/metrics")).await?;
    anyhow::ensure!(response.status().is_success(), "{}", response.status());
    Ok(response.text().await?)
}

/// `promtool check metrics` on a scrape: its findings (none when clean).
fn promtool_findings(scrape: &str) -> anyhow::Result<String> {
    use std::io::Write;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| {
            anyhow::anyhow!("promtool (Debian's prometheus package; scripts/test installs it): {e}")
        })?;
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?
        .write_all(scrape.as_bytes())?;
    let out = child.wait_with_output()?;
    let findings = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    anyhow::ensure!(
        out.status.success() || !findings.is_empty(),
        "promtool failed silently"
    );
    Ok(if out.status.success() {
        findings
    } else {
        format!("exit {:?}: {findings}", out.status.code())
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_pass_promtool_with_help_text_histograms_and_counters_at_zero() -> anyhow::Result<()>
{
    let s = Scenario::new(SyncOptions::default()).await?;
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);

    // Before any run: the counters an alert rule reads are there, at zero.
    let first = scrape(&base).await?;
    for line in [
        "syncward_lease_losses_total 0",
        "syncward_breaker_trips_total{sync=\"acme-contacts\",workspace=\"acme\"} 0",
        "syncward_records_quarantined_total{sync=\"acme-contacts\",workspace=\"acme\"} 0",
        // Never succeeded yet: the series is there, at 0, for the silence rule.
        "syncward_sync_last_success_timestamp_seconds{sync=\"acme-contacts\",workspace=\"acme\"} 0",
        "syncward_sync_state{sync=\"acme-contacts\",workspace=\"acme\",state=\"active\"} 1",
        "syncward_sync_state{sync=\"acme-contacts\",workspace=\"acme\",state=\"paused_by_breaker\"} 0",
        "syncward_sync_failure_streak{sync=\"acme-contacts\",workspace=\"acme\"} 0",
        "syncward_workers 4",
        "syncward_ledger_purged_keys_total 0",
        "syncward_import_checks_total{outcome=\"budget_spent\"} 0",
        "syncward_alerts_total{channel=\"webhook\",outcome=\"failed\"} 0",
    ] {
        assert!(first.contains(line), "{line} missing:\n{first}");
    }
    assert!(first.contains("syncward_build_info{version=\""), "{first}");
    for process in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
    ] {
        assert!(
            first.contains(&format!("\n{process} ")),
            "{process} missing:\n{first}"
        );
    }
    assert_eq!(
        promtool_findings(&first)?,
        "",
        "promtool on the first scrape"
    );

    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    daemon
        .eventually(Duration::from_secs(30), "the run succeeding", || async {
            Ok(s.last_run().await?["status"] == "succeeded")
        })
        .await?;
    let after = scrape(&base).await?;
    assert!(
        after.contains("syncward_run_duration_seconds_bucket{outcome=\"succeeded\",le=\""),
        "run durations are a histogram:\n{after}"
    );
    assert!(
        after.contains(
            "syncward_destination_request_seconds_bucket{kind=\"brevo\",status=\"202\",le=\""
        ) && after.contains(
            "syncward_source_request_seconds_bucket{kind=\"postgres\",status=\"ok\",le=\""
        ),
        "{after}"
    );
    assert!(
        after.contains(&format!(
            "syncward_sync_last_success_timestamp_seconds{{sync=\"{SYNC_ID}\",workspace=\"acme\"}}"
        )),
        "{after}"
    );
    assert!(
        after.contains(
            "syncward_records_written_total{sync=\"acme-contacts\",workspace=\"acme\"} 30"
        ),
        "{after}"
    );
    assert_eq!(promtool_findings(&after)?, "", "promtool after a run");
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

/// The shipped alert rules load in Prometheus and fire on the series they
/// are for (and not on healthy ones): `deploy/prometheus/alerts_test.yml`.
#[test]
fn the_shipped_alert_rules_pass_promtool_check_and_their_unit_tests() -> anyhow::Result<()> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/prometheus");
    for args in [
        ["check", "rules", "alerts.yml"],
        ["test", "rules", "alerts_test.yml"],
    ] {
        let out = std::process::Command::new("promtool")
            .args(args)
            .current_dir(dir)
            .output()?;
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The shipped Grafana dashboard is valid JSON, every query is valid PromQL
/// (promtool loads them as rules) and names only metrics syncward exports.
#[test]
fn the_shipped_grafana_dashboard_queries_are_valid_promql_over_syncwards_metrics()
-> anyhow::Result<()> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/syncward.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["expr"].as_str().map(str::to_string))
        .collect();
    assert!(exprs.len() >= 10, "{exprs:?}");
    let telemetry =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/telemetry.rs"))?;
    for expr in &exprs {
        for name in expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("syncward_"))
        {
            let base = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_count")
                .trim_end_matches("_sum");
            assert!(
                telemetry.contains(&format!("\"{base}\"")),
                "{name} in the dashboard is not a metric syncward exports"
            );
        }
    }
    let dir = tempfile::tempdir()?;
    let rules = dir.path().join("dashboard_rules.yml");
    let body: String = exprs
        .iter()
        .enumerate()
        .map(|(i, e)| format!("      - record: syncward:dashboard:{i}\n        expr: '{e}'\n"))
        .collect();
    std::fs::write(
        &rules,
        format!("groups:\n  - name: dashboard\n    rules:\n{body}"),
    )?;
    let out = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&rules)
        .output()?;
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// What happens in another process shows in a daemon's metrics: the store
/// is read when scraped. A foreground run's breaker trip (in the CLI process)
/// moves the sync's state, streak and trips; its later success (after a
/// resume) moves its last success.
#[tokio::test(flavor = "multi_thread")]
async fn per_sync_metrics_come_from_the_store_so_a_foreground_run_counts() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__BREAKER__CONSECUTIVE_FAILURES", "2");
    let mut daemon = DaemonProcess::spawn(&cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);
    sqlx::raw_sql("ALTER TABLE contacts RENAME TO contacts_gone")
        .execute(&s.db.pool)
        .await?;
    for _ in 0..2 {
        let out = cli.run(&["sync", "run", SYNC_ID, "--foreground"]).await?;
        assert_eq!(out.code, 1, "{}", out.stderr);
    }
    let labels = format!("sync=\"{SYNC_ID}\",workspace=\"acme\"");
    let wanted = [
        format!("syncward_sync_state{{{labels},state=\"paused_by_breaker\"}} 1"),
        format!("syncward_sync_state{{{labels},state=\"active\"}} 0"),
        format!("syncward_sync_failure_streak{{{labels}}} 2"),
        format!("syncward_breaker_trips_total{{{labels}}} 1"),
    ];
    daemon
        .eventually(
            Duration::from_secs(20),
            "the trip in the metrics",
            || async {
                let text = scrape(&base).await?;
                Ok(wanted.iter().all(|w| text.contains(w.as_str())))
            },
        )
        .await?;
    sqlx::raw_sql("ALTER TABLE contacts_gone RENAME TO contacts")
        .execute(&s.db.pool)
        .await?;
    cli.run(&["sync", "resume", SYNC_ID]).await?.ok()?;
    assert_eq!(
        cli.run(&["sync", "run", SYNC_ID, "--foreground"])
            .await?
            .code,
        0
    );
    let prefix = format!("syncward_sync_last_success_timestamp_seconds{{{labels}}} ");
    daemon
        .eventually(
            Duration::from_secs(20),
            "the success in the metrics",
            || async {
                let text = scrape(&base).await?;
                let last: f64 = text
                    .lines()
                    .find_map(|l| l.strip_prefix(prefix.as_str()))
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0.0);
                Ok(last > 0.0
                    && text.contains(&format!("syncward_sync_failure_streak{{{labels}}} 0"))
                    && text.contains(&format!(
                        "syncward_sync_state{{{labels},state=\"active\"}} 1"
                    )))
            },
        )
        .await?;
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}
