//! `DaemonProcess`: the real `syncward run` as a subprocess, signalled with
//! real signals.

use std::process::Stdio;
use std::time::{Duration, Instant};

use super::Syncward;

pub struct DaemonProcess {
    pub child: tokio::process::Child,
    pub pid: u32,
    /// The daemon's log (stderr), kept in a file: an unread pipe would fill up
    /// and block the daemon.
    pub log: tempfile::NamedTempFile,
}

impl DaemonProcess {
    pub async fn spawn(cli: &Syncward) -> anyhow::Result<Self> {
        let log = tempfile::NamedTempFile::new()?;
        let mut command = cli.command(&["run"]);
        // Every test daemon gets a port of its own unless the test chose one.
        if !cli.env.iter().any(|(k, _)| k == "SYNCWARD__HTTP__LISTEN") {
            command.env("SYNCWARD__HTTP__LISTEN", "127.0.0.1:0");
        }
        let child = command
            .stdout(Stdio::null())
            .stderr(log.reopen()?)
            .spawn()?;
        let pid = child
            .id()
            .ok_or_else(|| anyhow::anyhow!("the daemon exited at once"))?;
        Ok(Self { child, pid, log })
    }

    /// The admin HTTP address, once the daemon has logged it.
    pub async fn http_address(&self) -> anyhow::Result<String> {
        for _ in 0..100 {
            let text = std::fs::read_to_string(self.log.path()).unwrap_or_default();
            if let Some(line) = text.lines().find(|l| l.contains("Admin HTTP listening")) {
                let address = line
                    .split("address=")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next());
                if let Some(address) = address {
                    return Ok(address.to_string());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!(
            "the daemon never logged its HTTP address:\n{}",
            self.log_tail()
        )
    }

    /// The last lines the daemon logged, for failure messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.log.path()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// How many lines of the daemon's log contain `needle`.
    pub fn logged(&self, needle: &str) -> usize {
        std::fs::read_to_string(self.log.path())
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Waits (at most `limit`) until `needle` has been logged at least `times` times.
    pub async fn wait_for_log(
        &self,
        needle: &str,
        times: usize,
        limit: Duration,
    ) -> anyhow::Result<()> {
        self.eventually(
            limit,
            &format!("{times}× \"{needle}\" in the log"),
            || async { Ok(self.logged(needle) >= times) },
        )
        .await
    }

    /// `eventually`, with the daemon's last log lines in the error: a wait
    /// that times out on a loaded CI machine must say what the daemon did.
    pub async fn eventually<F, Fut>(
        &self,
        limit: Duration,
        what: &str,
        check: F,
    ) -> anyhow::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<bool>>,
    {
        eventually(limit, what, check)
            .await
            .map_err(|e| e.context(format!("the daemon's log ends:\n{}", self.log_tail())))
    }

    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.pid.to_string())
            .status()?;
        anyhow::ensure!(
            status.success(),
            "kill -{signal} {} failed; the daemon's log ends:\n{}",
            self.pid,
            self.log_tail()
        );
        Ok(())
    }

    /// Waits for the process to end (at most `limit`); its exit code and how long it took.
    pub async fn wait(&mut self, limit: Duration) -> anyhow::Result<(Option<i32>, Duration)> {
        let started = Instant::now();
        let status = tokio::time::timeout(limit, self.child.wait()).await??;
        Ok((status.code(), started.elapsed()))
    }
}

/// Polls `check` every 100 ms until it holds or `limit` passes.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<bool>>,
{
    let started = Instant::now();
    while started.elapsed() < limit {
        if check().await? {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("{what} did not happen within {limit:?}")
}
