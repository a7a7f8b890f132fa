//! The systemd unit passes `systemd-analyze verify` and `security` with
//! nothing on stderr (the tool exits 0 on unknown keys, so its silence is the
//! check), is hardened to an exposure of 1.2 or less, reloads on SIGHUP and
//! does not restart a bad config forever; and the daemon, traced through a
//! run, alerts, a reload and a drain, stays inside the unit's system call
//! filter and address families and writes no file.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::fakes::sentry::SentryFake;
use crate::fakes::smtp::SmtpSink;
use crate::fakes::webhook::WebhookReceiver;
use crate::helpers::Syncward;
use crate::helpers::cli::BINARY;
use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

const UNIT: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/deploy/syncward.service"
));

/// The unit's `Key=Value` lines as (section, key, value), comments left out:
/// a directive named only in a comment does not count.
fn directives(unit: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
        } else if let Some((key, value)) = line.split_once('=') {
            out.push((
                section.clone(),
                key.trim().to_string(),
                value.trim().to_string(),
            ));
        }
    }
    out
}

fn directive<'a>(all: &'a [(String, String, String)], section: &str, key: &str) -> Vec<&'a str> {
    all.iter()
        .filter(|(s, k, _)| s == section && k == key)
        .map(|(_, _, v)| v.as_str())
        .collect()
}

#[tokio::test]
async fn the_unit_file_passes_systemd_analyze_verify() -> anyhow::Result<()> {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/syncward.service"
    ))?;
    for required in [
        "Type=notify",
        "KillSignal=SIGTERM",
        "TimeoutStopSec=45",
        "Restart=on-failure",
        "User=syncward",
        "EnvironmentFile=",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "WatchdogSec=",
    ] {
        assert!(unit.contains(required), "the unit lacks {required}");
    }
    // verify checks that ExecStart exists; the package installs /usr/bin/syncward,
    // here the freshly built binary stands in for it. Nothing else changes.
    assert!(unit.contains("ExecStart=/usr/bin/syncward "));
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("syncward.service");
    std::fs::write(
        &path,
        unit.replace(
            "ExecStart=/usr/bin/syncward ",
            &format!("ExecStart={BINARY} "),
        ),
    )?;
    let out = tokio::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed: {stderr}"
    );
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze verify complained: {stderr}"
    );
    Ok(())
}

#[tokio::test]
async fn the_unit_is_hardened_to_an_exposure_of_at_most_1_2() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("syncward.service");
    std::fs::write(
        &path,
        UNIT.replace(
            "ExecStart=/usr/bin/syncward ",
            &format!("ExecStart={BINARY} "),
        ),
    )?;
    let out = tokio::process::Command::new("systemd-analyze")
        .args(["security", "--offline=yes"])
        .arg(&path)
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze security failed: {stderr}"
    );
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze security complained: {stderr}"
    );
    // "→ Overall exposure level for syncward.service: 1.1 OK 🙂"
    let score: f64 = stdout
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for syncward.service:")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| anyhow::anyhow!("no overall exposure line in:\n{stdout}"))?
        .parse()?;
    assert!(
        score <= 1.2,
        "exposure {score} is above 1.2 (Debian's redis-server unit):\n{stdout}"
    );
    Ok(())
}

#[test]
fn the_unit_reloads_on_sighup_and_does_not_restart_a_bad_config_forever() {
    let all = directives(UNIT);
    assert_eq!(
        directive(&all, "Service", "ExecReload"),
        ["/bin/kill -HUP $MAINPID"]
    );
    assert!(
        directive(&all, "Service", "RestartPreventExitStatus")
            .iter()
            .any(|v| v.split_whitespace().any(|code| code == "2")),
        "exit 2 (bad config) must not be restarted"
    );
    assert_eq!(directive(&all, "Service", "Restart"), ["on-failure"]);
    // The start limit belongs in [Unit]; in [Service] systemd ignores it.
    let interval = directive(&all, "Unit", "StartLimitIntervalSec");
    let burst = directive(&all, "Unit", "StartLimitBurst");
    assert_eq!(interval.len(), 1, "one StartLimitIntervalSec in [Unit]");
    assert!(
        !["0", "infinity"].contains(&interval[0]),
        "a start limit of {} is none",
        interval[0]
    );
    assert!(
        burst.len() == 1 && burst[0].parse::<u32>().is_ok_and(|n| n >= 1),
        "one StartLimitBurst in [Unit]: {burst:?}"
    );
}

/// The system calls a `SystemCallFilter=` group names, nested groups expanded
/// (as this machine's systemd defines them).
fn syscall_group(name: &str) -> anyhow::Result<BTreeSet<String>> {
    let out = std::process::Command::new("systemd-analyze")
        .args(["syscall-filter", name])
        .output()?;
    anyhow::ensure!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze syscall-filter {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut calls = BTreeSet::new();
    for line in String::from_utf8_lossy(&out.stdout).lines().skip(1) {
        let entry = line.trim();
        if entry.is_empty() || entry.starts_with('#') {
            continue;
        }
        if entry.starts_with('@') {
            calls.extend(syscall_group(entry)?);
        } else {
            calls.insert(entry.to_string());
        }
    }
    anyhow::ensure!(!calls.is_empty(), "{name} names no system call");
    Ok(calls)
}

/// What the unit's `SystemCallFilter=` lines allow: the allow list, less
/// every `~` line.
fn allowed_syscalls(all: &[(String, String, String)]) -> anyhow::Result<BTreeSet<String>> {
    let (mut allowed, mut denied) = (BTreeSet::new(), BTreeSet::new());
    for value in directive(all, "Service", "SystemCallFilter") {
        let (target, names) = match value.strip_prefix('~') {
            Some(rest) => (&mut denied, rest),
            None => (&mut allowed, value),
        };
        for name in names.split_whitespace() {
            if name.starts_with('@') {
                target.extend(syscall_group(name)?);
            } else {
                target.insert(name.to_string());
            }
        }
    }
    Ok(&allowed - &denied)
}

/// The daemon under `strace -f`: the same command line and environment as
/// `DaemonProcess::spawn`, its log in a file; `pid` is the daemon's own (the
/// child of strace), so signals reach it, and strace exits with its code.
async fn spawn_traced(cli: &Syncward, trace: &Path) -> anyhow::Result<DaemonProcess> {
    let daemon = cli.command(&["run"]);
    let daemon = daemon.as_std();
    let mut command = tokio::process::Command::new("strace");
    command
        .args(["-f", "-qq", "-o"])
        .arg(trace)
        .arg(daemon.get_program())
        .args(daemon.get_args());
    for (key, value) in daemon.get_envs() {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    let log = tempfile::NamedTempFile::new()?;
    let child = command
        .env("SYNCWARD__HTTP__LISTEN", "127.0.0.1:0")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.reopen()?)
        .kill_on_drop(true)
        .spawn()?;
    let tracer = child
        .id()
        .ok_or_else(|| anyhow::anyhow!("strace exited at once"))?;
    // strace forks short-lived children of its own to probe ptrace features
    // before it starts the tracee, so the daemon is the child that has
    // exec'd the daemon's program, not merely the first child seen.
    let children = format!("/proc/{tracer}/task/{tracer}/children");
    let program = daemon.get_program().as_encoded_bytes().to_vec();
    let is_daemon = |pid: &u32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|line| line.split(|b| *b == 0).next() == Some(program.as_slice()))
            .unwrap_or(false)
    };
    let mut pid = None;
    for _ in 0..200 {
        pid = std::fs::read_to_string(&children)
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .find(is_daemon);
        if pid.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = pid.ok_or_else(|| anyhow::anyhow!("strace never started the daemon"))?;
    Ok(DaemonProcess { child, pid, log })
}

#[tokio::test(flavor = "multi_thread")]
async fn the_daemon_stays_inside_the_units_system_call_filter_and_address_families()
-> anyhow::Result<()> {
    crate::helpers::install_crypto();
    let all = directives(UNIT);
    let allowed = allowed_syscalls(&all)?;
    let families: BTreeSet<&str> = directive(&all, "Service", "RestrictAddressFamilies")
        .iter()
        .flat_map(|v| v.split_whitespace())
        .collect();
    anyhow::ensure!(!families.is_empty(), "the unit restricts no address family");

    // Everything the daemon does in production, on every alert channel.
    let (hook, sentry, smtp) = (
        WebhookReceiver::start().await?,
        SentryFake::start().await?,
        SmtpSink::start().await?,
    );
    let s = Scenario::new(SyncOptions::default()).await?;
    let notify_path = s.dir.path().join("notify.sock");
    let notify = tokio::net::UnixDatagram::bind(&notify_path)?;
    let cli = s
        .cli
        .clone()
        .with_env("NOTIFY_SOCKET", notify_path.to_str().unwrap_or_default())
        .with_env("SYNCWARD__ALERTS__WEBHOOK_URL", &hook.url)
        .with_env(
            "SYNCWARD__ALERTS__WEBHOOK_SECRET",
            "alert-signing-secret-of-32-bytes",
        )
        .with_env("SYNCWARD__ALERTS__SENTRY_DSN", &sentry.dsn)
        .with_env("SYNCWARD__ALERTS__EMAIL__SMTP_URL", &smtp.url)
        .with_env("SYNCWARD__ALERTS__EMAIL__FROM", "syncward@example.com")
        .with_env("SYNCWARD__ALERTS__EMAIL__TO", "ops@example.com")
        .with_env("SYNCWARD__RETRY__MAX_ATTEMPTS", "1")
        .with_env("SYNCWARD__BREAKER__CONSECUTIVE_FAILURES", "1")
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "100ms")
        .with_env("SYNCWARD__WORKERS__LIVENESS_TTL", "1s");
    let trace = s.dir.path().join("strace.txt");
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let mut daemon = spawn_traced(&cli, &trace).await?;
    let limit = Duration::from_secs(60);
    let status = || async {
        anyhow::Ok(
            s.last_run().await?["status"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        )
    };
    daemon
        .eventually(limit, "the run succeeding", || async {
            Ok(status().await? == "succeeded")
        })
        .await?;
    let base = format!("http://{}", daemon.http_address().await?);
    let http = reqwest::Client::new();
    for path in ["/healthz", "/readyz", "/metrics", "/api/syncs", "/"] {
        let answer = http.get(format!("{base}{path}")).send().await?;
        assert!(answer.status().is_success(), "{path}: {}", answer.status());
    }
    daemon.signal("HUP")?;
    daemon
        .eventually(limit, "the reload", || async {
            Ok(std::fs::read_to_string(daemon.log.path())?.contains("Config reloaded"))
        })
        .await?;
    // A failing run (its source table gone) trips the breaker: one alert on
    // every channel.
    sqlx::raw_sql("ALTER TABLE contacts RENAME TO contacts_gone")
        .execute(&s.db.pool)
        .await?;
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    daemon
        .eventually(limit, "the alert on every channel", || async {
            Ok(!hook.received().is_empty()
                && !sentry.events().is_empty()
                && !smtp.mails().is_empty())
        })
        .await?;
    daemon.signal("TERM")?;
    let (code, _) = daemon.wait(limit).await?;
    assert_eq!(code, Some(0), "the log ends:\n{}", daemon.log_tail());
    let mut datagram = vec![0u8; 4096];
    let n = notify.try_recv(&mut datagram)?;
    assert!(String::from_utf8_lossy(&datagram[..n]).contains("READY=1"));

    let trace = std::fs::read_to_string(&trace)?;
    let mut used = BTreeSet::new();
    let mut sockets = BTreeSet::new();
    let mut written = BTreeSet::new();
    for line in trace.lines() {
        // "1234 openat(AT_FDCWD, ...) = 3" or "1234 <... futex resumed>) = 0"
        let Some((_, call)) = line.split_once(' ') else {
            continue;
        };
        let call = call.trim_start();
        let call = call.strip_prefix("<... ").unwrap_or(call);
        let name: String = call
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue; // "+++ exited with 0 +++", "--- SIGTERM ... ---"
        }
        if let Some(family) = call.strip_prefix("socket(") {
            sockets.insert(family.split(',').next().unwrap_or_default().to_string());
        }
        if name.starts_with("open")
            && ["O_WRONLY", "O_RDWR", "O_CREAT"]
                .iter()
                .any(|flag| call.contains(flag))
            && !call.contains("\"/dev/")
            && !call.contains("= -1 ")
        {
            written.insert(call.to_string());
        }
        used.insert(name);
    }
    assert!(used.len() > 20, "the trace looks empty: {used:?}");
    let outside: Vec<_> = used.difference(&allowed).collect();
    assert!(
        outside.is_empty(),
        "system calls the unit's SystemCallFilter refuses: {outside:?}"
    );
    let refused: Vec<_> = sockets
        .iter()
        .filter(|f| !families.contains(f.as_str()))
        .collect();
    assert!(
        refused.is_empty(),
        "socket families outside RestrictAddressFamilies: {refused:?}"
    );
    assert!(
        written.is_empty(),
        "files opened for writing under ProtectSystem=strict: {written:?}"
    );
    Ok(())
}
