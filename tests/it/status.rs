//! `syncward status`: the live daemons with their busy workers, the queue,
//! running runs, paused syncs and open incidents; exit 3 with no daemon.

use std::time::Duration;

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

#[tokio::test(flavor = "multi_thread")]
async fn status_names_the_live_daemon_its_busy_workers_the_running_run_and_paused_syncs_and_exits_3_without_one()
-> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions {
        rows: 40,
        page_size: 2,
        ..SyncOptions::default()
    })
    .await?;
    s.cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__WORKERS__COUNT", "3")
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "200ms");

    // No daemon: exit 3, and it says so.
    let none = s.cli.run(&["status"]).await?;
    assert_eq!(none.code, 3, "{none:?}");
    assert!(none.stdout.contains("Daemons alive: 0"), "{}", none.stdout);
    assert!(
        none.stderr.contains("no syncward daemon is alive"),
        "{}",
        none.stderr
    );

    s.fake.slow_writes(Duration::from_millis(150));
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    daemon
        .eventually(
            Duration::from_secs(30),
            "status showing the busy worker",
            || async {
                let out = s.cli.run(&["status", "--json"]).await?;
                let status: serde_json::Value =
                    serde_json::from_str(&out.stdout).unwrap_or_default();
                Ok(out.code == 0
                    && status["daemons"][0]["workers_busy"] == 1
                    && status["daemons"][0]["workers_total"] == 3
                    && status["running"][0]["sync_id"] == SYNC_ID)
            },
        )
        .await?;
    let text = s.cli.run(&["status"]).await?.ok()?.stdout;
    assert!(text.contains("Daemons alive: 1"), "{text}");
    assert!(text.contains(&format!("pid {}", daemon.pid)), "{text}");
    assert!(text.contains("1/3 workers busy"), "{text}");
    assert!(
        text.contains(&format!("of {SYNC_ID} (attempt 1)")),
        "{text}"
    );

    s.cli.run(&["sync", "pause", SYNC_ID]).await?.ok()?;
    let text = s.cli.run(&["status"]).await?.ok()?.stdout;
    assert!(text.contains("Paused syncs: 1"), "{text}");
    assert!(
        text.contains(&format!("{SYNC_ID} (acme): paused by a person (manual)")),
        "{text}"
    );

    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    // A daemon that stopped cleanly is gone from the store at once.
    let after = s.cli.run(&["status"]).await?;
    assert_eq!(after.code, 3, "{after:?}");
    Ok(())
}

/// The first hour's small things: `status` shows a person's pause reason as
/// `sync list` does (not the code `manual`), and `runs list` keeps its
/// columns under their headings.
#[tokio::test(flavor = "multi_thread")]
async fn status_shows_the_pause_reason_and_runs_list_keeps_its_columns() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 3,
        ..SyncOptions::default()
    })
    .await?;
    s.run_foreground().await?.ok()?;
    let list = s.cli.run(&["runs", "list"]).await?.ok()?.stdout;
    let mut lines = list.lines();
    let header = lines.next().unwrap_or_default();
    let row = lines.next().unwrap_or_default();
    for (heading, value) in [("TRIGGER", "foreground"), ("ATTEMPT", "1/5")] {
        let column = header.find(heading).unwrap_or(usize::MAX);
        let at = row.find(value).unwrap_or(usize::MAX);
        // Left-aligned columns start under their heading, right-aligned
        // ones end under it.
        assert!(
            at == column || at + value.len() == column + heading.len(),
            "{heading}:\n{list}"
        );
    }
    // `sync list` says when each sync runs next (no daemon has armed it yet).
    let syncs = s.cli.run(&["sync", "list"]).await?.ok()?.stdout;
    assert!(
        syncs.contains("NEXT RUN") && syncs.contains("at the next tick"),
        "{syncs}"
    );
    s.cli
        .run(&[
            "sync",
            "pause",
            SYNC_ID,
            "--reason",
            "waiting for the new list",
        ])
        .await?
        .ok()?;
    let status = s.cli.run(&["status"]).await?;
    assert!(
        status.stdout.contains(&format!(
            "{SYNC_ID} (acme): paused by a person: waiting for the new list"
        )),
        "{}",
        status.stdout
    );
    Ok(())
}
