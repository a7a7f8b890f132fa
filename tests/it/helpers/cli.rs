//! `Syncward`: the real binary as a subprocess, with a clean environment that
//! points it at the test's database and Redis prefix.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::{TestDb, TestRedis};

pub const BINARY: &str = env!("CARGO_BIN_EXE_syncward");

/// Runs `syncward` commands against one test's services.
#[derive(Debug, Clone)]
pub struct Syncward {
    pub env: Vec<(String, String)>,
    pub config: Option<PathBuf>,
}

/// A finished command.
#[derive(Debug)]
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    /// The command succeeded; otherwise the error names the command's output.
    pub fn ok(self) -> anyhow::Result<Self> {
        anyhow::ensure!(
            self.code == 0,
            "exit {}\nstdout: {}\nstderr: {}",
            self.code,
            self.stdout,
            self.stderr
        );
        Ok(self)
    }

    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::from_str(&self.stdout)?)
    }
}

impl Syncward {
    /// A runner with no services (for config-only commands).
    pub fn bare() -> Self {
        Self {
            env: Vec::new(),
            config: None,
        }
    }

    pub fn new(db: &TestDb, redis: Option<&TestRedis>) -> Self {
        let mut env = vec![("SYNCWARD__DATABASE__URL".to_string(), db.url.clone())];
        if let Some(redis) = redis {
            env.push(("SYNCWARD__REDIS__URL".into(), redis.url.clone()));
            env.push(("SYNCWARD__REDIS__KEY_PREFIX".into(), redis.prefix.clone()));
        }
        Self { env, config: None }
    }

    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn with_config(mut self, path: &Path) -> Self {
        self.config = Some(path.to_path_buf());
        self
    }

    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = self.environment(tokio::process::Command::new(BINARY));
        cmd.args(args).stdin(Stdio::null()).kill_on_drop(true);
        cmd
    }

    /// The command run on a pseudo-terminal (util-linux `script`), as from a
    /// person's shell; its output is what the terminal received.
    pub fn command_on_terminal(&self, args: &[&str]) -> tokio::process::Command {
        let line = std::iter::once(BINARY)
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        let mut cmd = self.environment(tokio::process::Command::new("script"));
        cmd.args(["-qec", &line, "/dev/null"])
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    /// This runner's environment on `cmd`, and nothing of the developer's.
    fn environment(&self, mut cmd: tokio::process::Command) -> tokio::process::Command {
        // Nothing of the developer's own syncward settings may leak into a test.
        for (key, _) in std::env::vars() {
            if key.starts_with("SYNCWARD") {
                cmd.env_remove(key);
            }
        }
        // Never the machine's /etc config: each test says what it uses.
        let empty = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/it/fixtures/empty.toml"
        ));
        cmd.env("SYNCWARD_CONFIG", self.config.as_deref().unwrap_or(empty));
        // Nor the machine's /etc/syncward/syncward.env.
        cmd.env(
            "SYNCWARD_ENV_FILE",
            concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/fixtures/empty.env"),
        );
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }

    /// Runs a command to completion.
    pub async fn run(&self, args: &[&str]) -> anyhow::Result<Outcome> {
        let output = self.command(args).output().await?;
        Ok(Outcome {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }
}
