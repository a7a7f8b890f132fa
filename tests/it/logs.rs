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
