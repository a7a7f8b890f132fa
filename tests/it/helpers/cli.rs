//! `Syncward`: the real binary as a subprocess, with a clean environment that
//! points it at the test's database and Redis prefix.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use super::{TestDb, TestRedis};

pub const BINARY: &str = env!("CARGO_BIN_EXE_syncward");

/// Runs `syncward` commands against one test's services.
#[derive(Debug, Clone)]
pub struct Syncward {
    pub env: Vec<(String, String)>,
    pub config: Option<PathBuf>,
    secrets: Arc<Secrets>,
    /// Variables taken out of the command's environment (so the config
    /// file decides them).
    unset: Vec<String>,
}

/// The workspaces' secrets files of one runner (`secrets.dir`), written
/// before every command from what the test gave.
#[derive(Debug)]
struct Secrets {
    dir: tempfile::TempDir,
    /// (workspace, or every workspace the tests use; name; value)
    entries: Mutex<Vec<(Option<String>, String, String)>>,
}

/// `outbound.allow` in tests: the fakes and the test databases are on
/// loopback.
pub const LOOPBACK: &str = "127.0.0.1,::1";

/// The workspaces the tests' sync files use: `with_secret` reaches each.
const WORKSPACES: &[&str] = &["acme", "globex"];

impl Secrets {
    fn new() -> Arc<Self> {
        Arc::new(Secrets {
            dir: tempfile::tempdir().expect("a temporary directory"),
            entries: Mutex::new(Vec::new()),
        })
    }

    fn write(&self) {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut workspaces: Vec<&str> = WORKSPACES.to_vec();
        workspaces.extend(entries.iter().filter_map(|e| e.0.as_deref()));
        for workspace in workspaces {
            let lines: String = entries
                .iter()
                .filter(|(w, _, _)| w.as_deref().is_none_or(|w| w == workspace))
                .map(|(_, name, value)| format!("{name}='{value}'\n"))
                .collect();
            let path = self.dir.path().join(format!("{workspace}.env"));
            if std::fs::read_to_string(&path).is_ok_and(|now| now == lines) {
                continue;
            }
            // Replaced whole (a daemon may be reading it right now).
            let fresh = self.dir.path().join(format!(".{workspace}.env.new"));
            std::fs::write(&fresh, lines).expect("the secrets file is written");
            std::fs::rename(&fresh, &path).expect("the secrets file is replaced");
        }
    }
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
            secrets: Secrets::new(),
            unset: Vec::new(),
        }
    }

    pub fn new(db: &TestDb, redis: Option<&TestRedis>) -> Self {
        let mut env = vec![("SYNCWARD__DATABASE__URL".to_string(), db.url.clone())];
        if let Some(redis) = redis {
            env.push(("SYNCWARD__REDIS__URL".into(), redis.url.clone()));
            env.push(("SYNCWARD__REDIS__KEY_PREFIX".into(), redis.prefix.clone()));
        }
        Self {
            env,
            config: None,
            secrets: Secrets::new(),
            unset: Vec::new(),
        }
    }

    pub fn with_env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// The same runner with `key` left out of the environment, even one
    /// this helper sets itself (`SYNCWARD__OUTBOUND__ALLOW`).
    pub fn without_env(mut self, key: &str) -> Self {
        self.env.retain(|(k, _)| k != key);
        self.unset.push(key.into());
        self
    }

    /// A secret every workspace of the tests has (in its secrets file).
    pub fn with_secret(self, name: &str, value: &str) -> Self {
        self.add_secret(None, name, value);
        self
    }

    /// A secret of `workspace` alone.
    pub fn with_workspace_secret(self, workspace: &str, name: &str, value: &str) -> Self {
        self.add_secret(Some(workspace), name, value);
        self
    }

    /// The same runner with secret `name` taken out of every workspace's
    /// file (in a directory of its own).
    pub fn without_secret(&self, name: &str) -> Self {
        let kept: Vec<_> = self
            .secrets
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|e| e.1 != name)
            .cloned()
            .collect();
        let secrets = Secrets::new();
        *secrets.entries.lock().unwrap_or_else(|e| e.into_inner()) = kept;
        Self {
            env: self.env.clone(),
            config: self.config.clone(),
            secrets,
            unset: self.unset.clone(),
        }
    }

    fn add_secret(&self, workspace: Option<&str>, name: &str, value: &str) {
        let mut entries = self
            .secrets
            .entries
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        entries.push((workspace.map(str::to_string), name.into(), value.into()));
    }

    /// The directory of the workspaces' secrets files.
    pub fn secrets_dir(&self) -> &Path {
        self.secrets.dir.path()
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
        // Nor the machine's /etc/syncward/secrets.
        self.secrets.write();
        cmd.env("SYNCWARD__SECRETS__DIR", self.secrets.dir.path());
        // Every fake listens on loopback: the tests' syncs may reach it (a
        // test of the policy itself sets its own list).
        cmd.env("SYNCWARD__OUTBOUND__ALLOW", LOOPBACK);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        for key in &self.unset {
            cmd.env_remove(key);
        }
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
