//! Private Postgres and Redis servers on free ports, for fault drills that stop
//! and restart them: the shared servers other tests use are never touched.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn run(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
        .with_context(|| format!("cannot start {program}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{program} {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A PostgreSQL cluster of the test's own (Debian's server binaries), trust
/// auth on 127.0.0.1, stopped when dropped.
pub struct PrivatePostgres {
    pub port: u16,
    bin: PathBuf,
    data: tempfile::TempDir,
    as_postgres: bool,
}

impl PrivatePostgres {
    pub async fn start() -> anyhow::Result<Self> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .context("PostgreSQL server binaries are missing (scripts/services installs them)")?
            .filter_map(Result::ok)
            .map(|e| e.path().join("bin"))
            .filter(|p| p.join("initdb").exists())
            .max()
            .ok_or_else(|| anyhow::anyhow!("no initdb under /usr/lib/postgresql/*/bin"))?;
        // initdb refuses to run as root: as root, the cluster belongs to `postgres`.
        let as_postgres = run("id", &["-u"]).await?.trim() == "0";
        let data = tempfile::tempdir()?;
        if as_postgres {
            run(
                "chown",
                &[
                    "-R",
                    "postgres:postgres",
                    &data.path().display().to_string(),
                ],
            )
            .await?;
        }
        let server = Self {
            port: free_port()?,
            bin,
            data,
            as_postgres,
        };
        let dir = server.dir();
        server
            .pg(
                "initdb",
                &[
                    "-D",
                    &dir,
                    "-A",
                    "trust",
                    "-U",
                    "postgres",
                    "--no-sync",
                    "-E",
                    "UTF8",
                ],
            )
            .await?;
        std::fs::write(
            server.data.path().join("cluster/postgresql.auto.conf"),
            format!(
                "port = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\nfsync = off\nmax_connections = 100\n",
                server.port,
                server.data.path().display()
            ),
        )?;
        server.pg_ctl(&["start"]).await?;
        Ok(server)
    }

    fn dir(&self) -> String {
        self.data.path().join("cluster").display().to_string()
    }

    async fn pg(&self, tool: &str, args: &[&str]) -> anyhow::Result<String> {
        let path = self.bin.join(tool).display().to_string();
        if self.as_postgres {
            let mut all = vec!["-u", "postgres", "--", path.as_str()];
            all.extend_from_slice(args);
            run("runuser", &all).await
        } else {
            run(&path, args).await
        }
    }

    async fn pg_ctl(&self, action: &[&str]) -> anyhow::Result<()> {
        let dir = self.dir();
        let log = self.data.path().join("server.log").display().to_string();
        let mut args = vec![
            "-D",
            dir.as_str(),
            "-l",
            log.as_str(),
            "-w",
            "-t",
            "30",
            "-m",
            "fast",
        ];
        args.extend_from_slice(action);
        self.pg("pg_ctl", &args).await.map(drop)
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`: may create databases.
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server (fast: every connection is cut) and starts it again.
    pub async fn restart(&self) -> anyhow::Result<()> {
        self.pg_ctl(&["restart"]).await
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let pg_ctl = self.bin.join("pg_ctl").display().to_string();
        let dir = self.dir();
        let mut command = if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--", &pg_ctl]);
            c
        } else {
            std::process::Command::new(&pg_ctl)
        };
        // Best effort at teardown: a server that is already gone is fine.
        let _ = command
            .args(["-D", &dir, "-m", "immediate", "-w", "stop"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// A redis-server of the test's own that keeps nothing on disk (`--save ""`),
/// so a restart loses every key, as DESIGN allows.
pub struct PrivateRedis {
    pub port: u16,
    child: Option<tokio::process::Child>,
}

impl PrivateRedis {
    pub async fn start() -> anyhow::Result<Self> {
        let mut redis = Self {
            port: free_port()?,
            child: None,
        };
        redis.launch().await?;
        Ok(redis)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn launch(&mut self) -> anyhow::Result<()> {
        let child = tokio::process::Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("redis-server is missing (scripts/services installs it)")?;
        self.child = Some(child);
        let url = self.url();
        crate::helpers::daemon::eventually(
            Duration::from_secs(10),
            "the private Redis answering",
            || async { Ok(crate::helpers::TestRedis::at(&url).await.is_ok()) },
        )
        .await
    }

    /// Kills the server (every key is lost) and starts an empty one on the same port.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        self.launch().await
    }
}
