//! Logs journald understands: under systemd each line carries its syslog
//! priority (so `journalctl -p err` finds ERROR lines) and no second
//! timestamp; third-party chatter stays below warn.

use std::os::unix::fs::MetadataExt;
use std::time::Duration;

use crate::helpers::daemon::eventually;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

#[tokio::test(flavor = "multi_thread")]
async fn under_journald_lines_carry_their_priority_and_no_timestamp_and_the_scheduler_is_quiet()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    // The run fails (its table is gone): a WARN line.
    sqlx::raw_sql("ALTER TABLE contacts RENAME TO contacts_gone")
        .execute(&s.db.pool)
        .await?;
    let log = tempfile::NamedTempFile::new()?;
    let meta = std::fs::metadata(log.path())?;
    let mut child = s
        .cli
        .command(&["run"])
        .env("SYNCWARD__HTTP__LISTEN", "127.0.0.1:0")
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .stdout(std::process::Stdio::null())
        .stderr(log.reopen()?)
        .spawn()?;
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let read = || std::fs::read_to_string(log.path()).unwrap_or_default();
    eventually(
        Duration::from_secs(30),
        "the failed run's WARN line",
        || async {
            Ok(read()
                .lines()
                .any(|l| l.starts_with("<4>") && l.contains("Run failed")))
        },
    )
    .await
    .map_err(|e| e.context(read()))?;
    let text = read();
    let running = text
        .lines()
        .find(|l| l.contains("syncward is running"))
        .ok_or_else(|| anyhow::anyhow!("no start line:\n{text}"))?;
    assert!(running.starts_with("<6>"), "{running}");
    // journald stamps lines itself: none starts with a date after its priority.
    assert!(
        text.lines()
            .all(|l| !l.get(3..).unwrap_or_default().starts_with("20")),
        "{text}"
    );
    assert!(
        text.lines().all(|l| l.starts_with('<')),
        "every line has a priority:\n{text}"
    );
    assert!(
        !text.contains("Uninited"),
        "cron scheduler chatter:\n{text}"
    );
    // SIGTERM through the kill command, as elsewhere in the tests.
    let pid = child.id().unwrap_or_default().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()?;
    tokio::time::timeout(Duration::from_secs(30), child.wait()).await??;
    Ok(())
}

/// In JSON, the run's identity is at the top level of each line it logs, and
/// values are text, not Rust's Debug form.
#[tokio::test(flavor = "multi_thread")]
async fn json_lines_carry_run_id_sync_id_workspace_and_attempt_at_the_top_level()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let cli = s.cli.clone().with_env("SYNCWARD__LOG__FORMAT", "json");
    let mut daemon = crate::helpers::daemon::DaemonProcess::spawn(&cli).await?;
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    daemon
        .eventually(Duration::from_secs(30), "the run succeeding", || async {
            Ok(s.last_run().await?["status"] == "succeeded")
        })
        .await?;
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    let text = std::fs::read_to_string(daemon.log.path())?;
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{e}: {text}"))?;
    let run_id = s.last_run().await?["id"].clone();
    let started = lines
        .iter()
        .find(|l| l["message"] == "Run started")
        .ok_or_else(|| anyhow::anyhow!("no Run started line:\n{text}"))?;
    assert_eq!(started["run_id"], run_id, "{started}");
    assert_eq!(started["sync_id"], SYNC_ID, "{started}");
    assert_eq!(started["workspace"], "acme", "{started}");
    assert_eq!(started["attempt"], 1, "{started}");
    assert_eq!(
        started["cursor"], "null",
        "the cursor as JSON text: {started}"
    );
    let finished = lines
        .iter()
        .find(|l| l["message"] == "Run finished")
        .ok_or_else(|| anyhow::anyhow!("no Run finished line:\n{text}"))?;
    assert_eq!(finished["sync_id"], SYNC_ID, "{finished}");
    assert!(!text.contains("Some("), "Debug-formatted values:\n{text}");
    Ok(())
}

/// In text, a daemon run's lines name its ids once each (one span holds
/// them), pages are logged at DEBUG only, and no INFO line holds a Rust
/// Debug dump (`Report { a: [] }`, `Some(…)`).
#[tokio::test(flavor = "multi_thread")]
async fn text_lines_name_the_run_once_and_keep_pages_and_debug_dumps_out_of_info()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        page_size: 10,
        rows: 40,
        ..SyncOptions::default()
    })
    .await?;
    let mut daemon = crate::helpers::daemon::DaemonProcess::spawn(&s.cli).await?;
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    daemon
        .eventually(Duration::from_secs(30), "the run succeeding", || async {
            Ok(s.last_run().await?["status"] == "succeeded")
        })
        .await?;
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    let text = std::fs::read_to_string(daemon.log.path())?;
    let run_lines: Vec<&str> = text.lines().filter(|l| l.contains("run.id=")).collect();
    assert!(
        run_lines.iter().any(|l| l.contains("Run finished")),
        "the run's lines carry its id:\n{text}"
    );
    for line in &run_lines {
        for field in ["run.id=", "sync.id=", "workspace=", "attempt="] {
            assert_eq!(line.matches(field).count(), 1, "{field} once: {line}");
        }
    }
    let info: Vec<&str> = text.lines().filter(|l| l.contains(" INFO ")).collect();
    assert!(!info.is_empty(), "{text}");
    for line in info {
        assert!(!line.contains("Page done"), "a page at INFO: {line}");
        let dump = line.contains("Some(")
            || line.contains(": [")
            || line.contains("=[")
            || line.split_whitespace().any(|w| {
                w.ends_with('{') && w.len() > 1 && w.starts_with(|c: char| c.is_ascii_uppercase())
            });
        assert!(!dump, "a Debug dump at INFO: {line}");
    }
    Ok(())
}
