//! Signals and systemd (docs/contract.md §1.8, issue 17): SIGHUP reloads the log filter
//! and the alert channels and never stops the daemon; a broken config on
//! SIGHUP changes nothing; SIGTERM still drains; the daemon tells systemd it
//! is ready and how busy it is (sd_notify STATUS). The real binary, real
//! signals, a real config file rewritten between signals.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::fakes::brevo::Fault;
use crate::fakes::webhook::WebhookReceiver;
use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::{QUIET_SCHEDULE, SYNC_ID, Scenario, SyncOptions};

const LIMIT: Duration = Duration::from_secs(30);

/// A config file of the test's own, which it rewrites before each SIGHUP.
fn write_config(dir: &Path, text: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join("syncward.toml");
    // Written beside and renamed, as an editor or a package upgrade does: the
    // daemon never reads half a file.
    let partial = dir.join("syncward.toml.new");
    std::fs::write(&partial, text)?;
    std::fs::rename(&partial, &path)?;
    Ok(path)
}

/// A daemon config naming the log level and the alert webhook.
/// Alert signing keys of the specification's 24 bytes or more.
const OLD_SECRET: &str = "old-alert-secret-of-24-bytes";
const NEW_SECRET: &str = "new-alert-secret-of-24-bytes";

fn config_text(level: &str, hook: &WebhookReceiver, secret: &str, workers: u32) -> String {
    format!(
        r#"[log]
level = "{level}"

[workers]
count = {workers}
poll_interval = "100ms"

[alerts]
webhook_url = "{url}"
webhook_secret = "{secret}"
"#,
        url = hook.url
    )
}

/// The daemon is still running (it has not exited on the signal).
fn assert_alive(daemon: &mut DaemonProcess) -> anyhow::Result<()> {
    let exited = daemon.child.try_wait()?;
    assert!(
        exited.is_none(),
        "the daemon exited ({exited:?}); its log ends:\n{}",
        daemon.log_tail()
    );
    Ok(())
}

async fn sigterm_drains_cleanly(daemon: &mut DaemonProcess) -> anyhow::Result<()> {
    daemon.signal("TERM")?;
    let (code, _) = daemon.wait(LIMIT).await?;
    assert_eq!(
        code,
        Some(0),
        "SIGTERM after the reloads drains cleanly; the log ends:\n{}",
        daemon.log_tail()
    );
    Ok(())
}

async fn run_status(s: &Scenario) -> anyhow::Result<String> {
    Ok(s.last_run().await?["status"]
        .as_str()
        .unwrap_or_default()
        .to_string())
}

/// 80 contacts in 40 pages, each import held ~150 ms at the fake: a run
/// lasts several seconds, long enough to signal the daemon in the middle.
async fn slow_scenario(write_delay: Duration) -> anyhow::Result<Scenario> {
    let s = Scenario::new(SyncOptions {
        rows: 80,
        page_size: 2,
        ..SyncOptions::default()
    })
    .await?;
    s.fake.slow_writes(write_delay);
    Ok(s)
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_idle_and_mid_run_reloads_without_stopping_and_sigterm_still_drains()
-> anyhow::Result<()> {
    let mut s = slow_scenario(Duration::from_millis(150)).await?;
    let hook = WebhookReceiver::start().await?;
    let config = write_config(s.dir.path(), &config_text("info", &hook, OLD_SECRET, 2))?;
    s.cli = s.cli.clone().with_config(&config);
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    daemon.wait_for_log("syncward is running", 1, LIMIT).await?;

    // Idle: twice, a moment apart (each reload logged before the next signal).
    for n in 1..=2 {
        daemon.signal("HUP")?;
        daemon.wait_for_log("Config reloaded", n, LIMIT).await?;
        assert_alive(&mut daemon)?;
    }

    // Mid-run: twice again while the run is sending.
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    daemon
        .eventually(LIMIT, "five pages written", || async {
            Ok(s.fake.requests_to("/v3/contacts/import").len() >= 5)
        })
        .await?;
    for n in 3..=4 {
        daemon.signal("HUP")?;
        daemon.wait_for_log("Config reloaded", n, LIMIT).await?;
        assert_alive(&mut daemon)?;
    }
    assert_eq!(
        run_status(&s).await?,
        "running",
        "the reloads happened while the run was in progress"
    );
    daemon
        .eventually(LIMIT, "the run succeeding", || async {
            Ok(run_status(&s).await? == "succeeded")
        })
        .await?;
    let run = s.last_run().await?;
    assert_eq!(run["attempt"], 1, "SIGHUP did not interrupt the run: {run}");
    assert_eq!(s.fake.contacts().len(), 80, "every contact arrived");
    let writes = s.writes_per_email();
    assert!(
        writes.values().all(|n| *n == 1),
        "a contact was sent twice: {writes:?}"
    );
    assert_eq!(daemon.logged("draining"), 0, "SIGHUP started a drain");
    assert_eq!(
        daemon.logged("needs a restart"),
        0,
        "an unchanged file needs no restart"
    );

    sigterm_drains_cleanly(&mut daemon).await
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_puts_a_new_log_level_and_alert_webhook_in_force_and_names_what_needs_a_restart()
-> anyhow::Result<()> {
    let mut s = Scenario::new(SyncOptions::default()).await?;
    // Each receiver verifies with its own secret: a POST signed with the
    // other one is refused.
    let (old_hook, new_hook) = (
        WebhookReceiver::start_verifying(OLD_SECRET).await?,
        WebhookReceiver::start_verifying(NEW_SECRET).await?,
    );
    let config = write_config(s.dir.path(), &config_text("info", &old_hook, OLD_SECRET, 2))?;
    // Each failure trips the breaker, which raises an alert.
    s.cli = s
        .cli
        .clone()
        .with_config(&config)
        .with_env("SYNCWARD__RETRY__MAX_ATTEMPTS", "1")
        .with_env("SYNCWARD__BREAKER__CONSECUTIVE_FAILURES", "1");
    s.fake.set_fault_always(Some(Fault::Unauthorized));
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    daemon.wait_for_log("syncward is running", 1, LIMIT).await?;

    // Quieter logs, another webhook and secret, and a worker count (which
    // only a restart changes).
    write_config(s.dir.path(), &config_text("warn", &new_hook, NEW_SECRET, 3))?;
    daemon.signal("HUP")?;
    // Logged at WARN, so it shows under the new filter too.
    daemon
        .wait_for_log("Changed setting needs a restart", 1, LIMIT)
        .await?;
    let restart: Vec<String> = std::fs::read_to_string(daemon.log.path())?
        .lines()
        .filter(|l| l.contains("Changed setting needs a restart"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        restart.len(),
        1,
        "only workers.count needs one: {restart:?}"
    );
    assert!(restart[0].contains("workers.count"), "{restart:?}");
    let lines_before = std::fs::read_to_string(daemon.log.path())?.lines().count();

    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    daemon
        .eventually(LIMIT, "the alert reaching the new webhook", || async {
            Ok(!new_hook.received().is_empty())
        })
        .await?;
    assert_alive(&mut daemon)?;
    let mut kinds = Vec::new();
    assert!(
        new_hook.refused().is_empty(),
        "not signed with the reloaded secret: {:?}",
        new_hook.refused()
    );
    for post in new_hook.received() {
        let body: serde_json::Value = serde_json::from_slice(&post.body)?;
        kinds.push(body["kind"].clone());
    }
    assert!(
        kinds.contains(&serde_json::json!("circuit_breaker_tripped")),
        "{kinds:?}"
    );
    assert!(
        old_hook.received().is_empty(),
        "the old webhook still got alerts: {:?}",
        old_hook.received()
    );

    // The run's INFO lines are gone; its failure's WARN line ("Run
    // finished", written once the failure and its alert are recorded) and
    // its alert's ERROR line are there.
    daemon.wait_for_log("Run finished", 1, LIMIT).await?;
    let log = std::fs::read_to_string(daemon.log.path())?;
    let after: Vec<&str> = log.lines().skip(lines_before).collect();
    assert!(
        after.iter().any(|l| l.contains("ERROR")),
        "the alert was logged: {after:?}"
    );
    assert!(
        !after.iter().any(|l| l.contains(" INFO ")),
        "INFO lines after the reload to `warn`: {after:?}"
    );
    let finished: Vec<&&str> = after
        .iter()
        .filter(|l| l.contains("Run finished"))
        .collect();
    assert!(
        !finished.is_empty() && finished.iter().all(|l| l.contains("WARN")),
        "a failed run is logged at WARN: {finished:?}"
    );

    sigterm_drains_cleanly(&mut daemon).await
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_with_a_broken_config_keeps_the_daemon_running_on_its_old_settings()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let (old_hook, new_hook) = (
        WebhookReceiver::start_verifying(OLD_SECRET).await?,
        WebhookReceiver::start_verifying(NEW_SECRET).await?,
    );
    let config = write_config(s.dir.path(), &config_text("info", &old_hook, OLD_SECRET, 2))?;
    // Only the daemon reads the file the test breaks; the test's own commands
    // keep the scenario's (empty) one.
    let daemon_cli = s
        .cli
        .clone()
        .with_config(&config)
        .with_env("SYNCWARD__RETRY__MAX_ATTEMPTS", "1")
        .with_env("SYNCWARD__BREAKER__CONSECUTIVE_FAILURES", "1");
    s.fake.set_fault_always(Some(Fault::Unauthorized));
    let mut daemon = DaemonProcess::spawn(&daemon_cli).await?;
    daemon.wait_for_log("syncward is running", 1, LIMIT).await?;

    // A value that parses but cannot work, beside a new webhook and level.
    write_config(s.dir.path(), &config_text("warn", &new_hook, NEW_SECRET, 0))?;
    daemon.signal("HUP")?;
    daemon
        .wait_for_log("Config reload refused", 1, LIMIT)
        .await?;
    // Not TOML at all.
    write_config(
        s.dir.path(),
        &format!("{}\n[log\n", config_text("warn", &new_hook, NEW_SECRET, 2)),
    )?;
    daemon.signal("HUP")?;
    daemon
        .wait_for_log("Config reload refused", 2, LIMIT)
        .await?;
    assert_alive(&mut daemon)?;
    let refusals: Vec<String> = std::fs::read_to_string(daemon.log.path())?
        .lines()
        .filter(|l| l.contains("Config reload refused"))
        .map(str::to_string)
        .collect();
    assert!(
        refusals[0].contains("ERROR")
            && refusals[0].contains("workers.count")
            && refusals[0].contains("must be at least 1"),
        "the reason, on one line: {refusals:?}"
    );
    assert!(
        refusals[1].contains("ERROR") && refusals[1].contains("not valid TOML"),
        "the reason, on one line: {refusals:?}"
    );
    assert_eq!(daemon.logged("Config reloaded"), 0);

    // The old settings are in force: the old webhook, INFO lines.
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    daemon
        .eventually(LIMIT, "the alert reaching the old webhook", || async {
            Ok(!old_hook.received().is_empty())
        })
        .await?;
    daemon.wait_for_log("Run finished", 1, LIMIT).await?;
    assert!(
        new_hook.received().is_empty(),
        "the broken config's webhook got alerts"
    );
    assert!(
        old_hook.refused().is_empty(),
        "not signed with the old secret: {:?}",
        old_hook.refused()
    );

    sigterm_drains_cleanly(&mut daemon).await
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_during_the_drain_is_ignored_and_the_drain_ends_cleanly() -> anyhow::Result<()> {
    let mut s = slow_scenario(Duration::ZERO).await?;
    let hook = WebhookReceiver::start().await?;
    let config = write_config(s.dir.path(), &config_text("info", &hook, OLD_SECRET, 2))?;
    s.cli = s.cli.clone().with_config(&config);
    // The first import waits at the fake's door: the drain cannot end before
    // the test lets it go.
    s.fake.hold_writes();
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    daemon
        .eventually(LIMIT, "an import held at the fake", || async {
            Ok(s.fake.held_writes() >= 1)
        })
        .await?;
    daemon.signal("TERM")?;
    daemon
        .wait_for_log("Signal received; draining", 1, LIMIT)
        .await?;
    daemon.signal("HUP")?;
    daemon
        .wait_for_log("SIGHUP during the drain; ignored", 1, LIMIT)
        .await?;
    assert_alive(&mut daemon)?;
    s.fake.release_writes();
    let (code, _) = daemon.wait(LIMIT).await?;
    assert_eq!(code, Some(0), "the log ends:\n{}", daemon.log_tail());
    assert_eq!(daemon.logged("Config reloaded"), 0);
    let run = s.last_run().await?;
    assert_eq!(run["status"], "queued", "drained and put back: {run}");
    assert_eq!(run["trigger"], "shutdown");
    Ok(())
}

/// Datagrams the daemon sent to the test's notify socket, as text.
async fn receive_until(
    socket: &tokio::net::UnixDatagram,
    received: &mut Vec<String>,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> anyhow::Result<()> {
    let mut buf = vec![0u8; 4096];
    let deadline = tokio::time::Instant::now() + LIMIT;
    while !done(received) {
        let n = tokio::time::timeout_at(deadline, socket.recv(&mut buf))
            .await
            .map_err(|_| {
                anyhow::anyhow!("{what} did not arrive within {LIMIT:?}: {received:?}")
            })??;
        received.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    Ok(())
}

/// The STATUS= value of each datagram that has one.
fn statuses(received: &[String]) -> Vec<String> {
    received
        .iter()
        .flat_map(|d| d.lines())
        .filter_map(|l| l.strip_prefix("STATUS="))
        .map(str::to_string)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_tells_systemd_it_is_ready_and_how_busy_it_is() -> anyhow::Result<()> {
    let mut s = slow_scenario(Duration::from_millis(150)).await?;
    // A second sync, so a run can wait in the queue while the one worker is busy.
    let second = std::fs::read_to_string(s.dir.path().join("sync.toml"))?
        .replace(&format!("id = \"{SYNC_ID}\""), "id = \"second-sync\"");
    assert!(second.contains(QUIET_SCHEDULE) && second.contains("second-sync"));
    let second_path = s.dir.path().join("second.toml");
    std::fs::write(&second_path, second)?;
    s.cli
        .run(&["sync", "apply", second_path.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    let socket_path = s.dir.path().join("notify.sock");
    let socket = tokio::net::UnixDatagram::bind(&socket_path)?;
    s.cli = s
        .cli
        .clone()
        .with_env("NOTIFY_SOCKET", socket_path.to_str().unwrap_or_default())
        .with_env("SYNCWARD__WORKERS__COUNT", "1")
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "100ms")
        // Keep-alive ticks (and so STATUS lines) every third of this.
        .with_env("SYNCWARD__WORKERS__LIVENESS_TTL", "1s");
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    let mut received = Vec::new();
    receive_until(&socket, &mut received, "READY=1", |r| {
        r.iter().any(|d| d.lines().any(|l| l == "READY=1"))
    })
    .await?;
    let ready = received
        .iter()
        .find(|d| d.lines().any(|l| l == "READY=1"))
        .cloned()
        .unwrap_or_default();
    assert!(
        ready.contains("STATUS=0/1 workers busy, no runs queued"),
        "READY comes with the first status line: {ready:?}"
    );

    // One run busy on the only worker, the second sync's run waiting.
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    daemon
        .eventually(LIMIT, "a page written", || async {
            Ok(!s.fake.requests_to("/v3/contacts/import").is_empty())
        })
        .await?;
    s.cli.run(&["sync", "run", "second-sync"]).await?.ok()?;
    receive_until(
        &socket,
        &mut received,
        "a STATUS line with the busy worker and the queued run",
        |r| {
            statuses(r).iter().any(|l| {
                l.starts_with("1/1 workers busy, 1 run queued (oldest ") && l.ends_with("s)")
            })
        },
    )
    .await?;

    daemon.signal("TERM")?;
    receive_until(&socket, &mut received, "STOPPING=1", |r| {
        r.iter().any(|d| d.lines().any(|l| l == "STOPPING=1"))
    })
    .await?;
    let stopping = received
        .iter()
        .find(|d| d.lines().any(|l| l == "STOPPING=1"))
        .cloned()
        .unwrap_or_default();
    assert!(
        stopping.contains("STATUS=Draining: "),
        "the stop says it drains: {stopping:?}"
    );
    let (code, _) = daemon.wait(LIMIT).await?;
    assert_eq!(code, Some(0), "the log ends:\n{}", daemon.log_tail());
    for line in statuses(&received) {
        let line = line.strip_prefix("Draining: ").unwrap_or(&line);
        assert!(
            line.contains("/1 workers busy, ") && line.contains("queued"),
            "every status line names workers and queue: {line:?}"
        );
    }
    Ok(())
}

/// `outbound.allow` changes on SIGHUP: a sync refused while its hosts were
/// not listed runs once the reloaded file lists them, and no restart is
/// asked for.
#[tokio::test(flavor = "multi_thread")]
async fn sighup_puts_a_new_outbound_allow_list_in_force() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let strict = "[workers]\npoll_interval = \"100ms\"\n\n[outbound]\nallow = []\n";
    let config = write_config(s.dir.path(), strict)?;
    let daemon_cli = s
        .cli
        .clone()
        .with_config(&config)
        .with_env("SYNCWARD__RETRY__MAX_ATTEMPTS", "1")
        .without_env("SYNCWARD__OUTBOUND__ALLOW");
    let mut daemon = DaemonProcess::spawn(&daemon_cli).await?;
    daemon.wait_for_log("syncward is running", 1, LIMIT).await?;

    // The source database and the Brevo fake are both on loopback.
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    daemon
        .eventually(LIMIT, "the refused run failing", || async {
            Ok(run_status(&s).await? == "failed")
        })
        .await?;
    let failed = s.last_run().await?;
    assert_eq!(failed["failure_code"], "config_invalid", "{failed}");
    assert!(s.fake.requests().is_empty(), "{:?}", s.fake.requests());

    let listed = strict.replace("allow = []", "allow = [\"127.0.0.1\", \"::1\"]");
    write_config(s.dir.path(), &listed)?;
    daemon.signal("HUP")?;
    daemon.wait_for_log("Config reloaded", 1, LIMIT).await?;
    assert_eq!(daemon.logged("needs a restart"), 0, "{}", daemon.log_tail());

    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    daemon
        .eventually(LIMIT, "the run succeeding", || async {
            Ok(run_status(&s).await? == "succeeded")
        })
        .await?;
    assert!(!s.fake.contacts().is_empty());
    sigterm_drains_cleanly(&mut daemon).await
}
