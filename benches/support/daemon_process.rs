//! A real `syncward run` subprocess for benchmarks, with its log kept in a
//! file (an unread pipe would block it).

use std::process::Stdio;
use std::time::Duration;

use uuid::Uuid;

pub const BINARY: &str = env!("CARGO_BIN_EXE_syncward");

/// One `syncward run` subprocess and its log.
pub struct Daemon {
    pub child: std::process::Child,
    log: tempfile::NamedTempFile,
}

impl Daemon {
    pub fn spawn(env: &[(String, String)]) -> anyhow::Result<Self> {
        let log = tempfile::NamedTempFile::new()?;
        let child = std::process::Command::new(BINARY)
            .arg("run")
            // Not the machine's /etc/syncward/syncward.env: the bench says what it uses.
            .env("SYNCWARD_ENV_FILE", "/dev/null")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log.reopen()?)
            .spawn()?;
        Ok(Self { child, log })
    }

    /// Waits until the daemon has logged that it runs; its boot id.
    pub async fn ready(&self) -> anyhow::Result<Uuid> {
        for _ in 0..200 {
            let text = std::fs::read_to_string(self.log.path())?;
            if let Some(line) = text.lines().find(|l| l.contains("syncward is running")) {
                let id = line
                    .split("boot_id=")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .ok_or_else(|| anyhow::anyhow!("no boot id in {line}"))?;
                return Ok(id.parse()?);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        anyhow::bail!(
            "the daemon never became ready:\n{}",
            std::fs::read_to_string(self.log.path())?
        )
    }

    pub fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()?;
        anyhow::ensure!(status.success(), "kill -{signal} failed");
        Ok(())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // Best effort: the daemon may have exited already.
        let _ = self.child.kill();
        let _ = self.child.wait();
        // BENCH_KEEP_LOGS=DIR keeps each daemon's log there, to read after.
        if let Ok(dir) = std::env::var("BENCH_KEEP_LOGS") {
            let to = std::path::Path::new(&dir).join(format!("syncward-{}.log", self.child.id()));
            let _ = std::fs::copy(self.log.path(), to);
        }
    }
}

/// Resident memory of a process in MB, from /proc.
#[allow(dead_code)] // the latency benchmark does not measure memory
pub fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// The Brevo fake on a runtime of its own: its slow answers block that
/// runtime's threads, never the ones a benchmark measures with. Shut the
/// runtime down with `shutdown_background` (dropping it in async code panics).
pub fn brevo_fake_apart(
    key: &'static str,
) -> anyhow::Result<(tokio::runtime::Runtime, crate::brevo::BrevoFake)> {
    std::thread::spawn(move || -> anyhow::Result<_> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let fake = runtime.block_on(crate::brevo::BrevoFake::start(key))?;
        Ok((runtime, fake))
    })
    .join()
    .map_err(|_| anyhow::anyhow!("starting the Brevo fake panicked"))?
}
