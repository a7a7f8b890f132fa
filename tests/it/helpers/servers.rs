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

    /// Stops the server (fast: every connection is cut); `start_again` brings it back.
    pub async fn stop(&self) -> anyhow::Result<()> {
        self.pg_ctl(&["stop"]).await
    }

    pub async fn start_again(&self) -> anyhow::Result<()> {
        self.pg_ctl(&["start"]).await
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
/// so a restart loses every key, as docs/contract.md allows. Killed when dropped.
pub struct PrivateRedis {
    pub port: u16,
    /// `--replicaof` a primary's port, for a replica.
    primary: Option<u16>,
    child: Option<tokio::process::Child>,
    /// Its working directory: a replica writes the primary's snapshot there.
    dir: tempfile::TempDir,
}

impl PrivateRedis {
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_as(None).await
    }

    /// A replica of `primary`, in sync with it before this returns.
    pub async fn replica_of(primary: &PrivateRedis) -> anyhow::Result<Self> {
        let replica = Self::start_as(Some(primary.port)).await?;
        let client = deadpool_redis::redis::Client::open(replica.url())?;
        crate::helpers::daemon::eventually(
            Duration::from_secs(30),
            "the replica in sync with its primary",
            || async {
                let mut conn = client.get_multiplexed_async_connection().await?;
                let info: String = deadpool_redis::redis::cmd("INFO")
                    .arg("replication")
                    .query_async(&mut conn)
                    .await?;
                Ok(info.contains("master_link_status:up"))
            },
        )
        .await?;
        Ok(replica)
    }

    async fn start_as(primary: Option<u16>) -> anyhow::Result<Self> {
        let mut redis = Self {
            port: free_port()?,
            primary,
            child: None,
            dir: tempfile::tempdir()?,
        };
        redis.launch().await?;
        Ok(redis)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn launch(&mut self) -> anyhow::Result<()> {
        let port = self.port.to_string();
        let dir = self.dir.path().display().to_string();
        let mut args = vec![
            "--dir",
            &dir,
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ];
        let primary = self.primary.map(|p| p.to_string());
        if let Some(primary) = &primary {
            args.extend(["--replicaof", "127.0.0.1", primary]);
        }
        let child = tokio::process::Command::new("redis-server")
            .args(&args)
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

    /// Kills the server with SIGKILL: every connection to it is cut at once.
    pub async fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill().await?;
        }
        Ok(())
    }

    /// Starts an empty server on the same port after `kill`.
    pub async fn start_again(&mut self) -> anyhow::Result<()> {
        self.launch().await
    }

    /// Kills the server (every key is lost) and starts an empty one on the same port.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill().await?;
        self.launch().await
    }
}

/// The primary's name in the Sentinels' configuration.
pub const SENTINEL_SERVICE: &str = "mymaster";

/// A Sentinel set of the test's own: a primary, one replica and three
/// Sentinels (quorum 2) on free loopback ports, each Sentinel with its own
/// config file in a temporary directory. Quick to act: a primary silent for
/// 1 s is down, a failover times out after 3 s. Every process is killed when
/// the set is dropped (`kill_on_drop`), the directories removed.
pub struct SentinelSet {
    pub primary: PrivateRedis,
    pub replica: PrivateRedis,
    sentinels: Vec<(u16, tokio::process::Child)>,
    _dir: tempfile::TempDir,
}

impl SentinelSet {
    /// Starts the set and waits until every Sentinel knows the replica and
    /// the two other Sentinels (without which no failover is authorised).
    pub async fn start() -> anyhow::Result<Self> {
        let primary = PrivateRedis::start().await?;
        let replica = PrivateRedis::replica_of(&primary).await?;
        let dir = tempfile::tempdir()?;
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let port = free_port()?;
            // A Sentinel rewrites its own config file: each has one of its own.
            let config = dir.path().join(format!("sentinel-{i}.conf"));
            std::fs::write(
                &config,
                format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\n\
                     sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {primary} 2\n\
                     sentinel down-after-milliseconds {SENTINEL_SERVICE} 1000\n\
                     sentinel failover-timeout {SENTINEL_SERVICE} 3000\n\
                     sentinel parallel-syncs {SENTINEL_SERVICE} 1\n",
                    dir = dir.path().display(),
                    primary = primary.port,
                ),
            )?;
            let child = tokio::process::Command::new("redis-sentinel")
                .arg(&config)
                .stdout(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()
                .context("redis-sentinel is missing (scripts/test installs it)")?;
            sentinels.push((port, child));
        }
        let set = Self {
            primary,
            replica,
            sentinels,
            _dir: dir,
        };
        for (port, _) in &set.sentinels {
            let client = deadpool_redis::redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
            crate::helpers::daemon::eventually(
                Duration::from_secs(60),
                "a Sentinel knowing the replica and the other Sentinels",
                || async {
                    let Ok(mut conn) = client.get_multiplexed_async_connection().await else {
                        return Ok(false);
                    };
                    let master: std::collections::HashMap<String, String> =
                        deadpool_redis::redis::cmd("SENTINEL")
                            .arg("MASTER")
                            .arg(SENTINEL_SERVICE)
                            .query_async(&mut conn)
                            .await?;
                    Ok(master.get("num-slaves").map(String::as_str) == Some("1")
                        && master.get("num-other-sentinels").map(String::as_str) == Some("2"))
                },
            )
            .await?;
        }
        Ok(set)
    }

    /// `redis.url` naming the three Sentinels and the service.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|(port, _)| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis+sentinel://{}/{SENTINEL_SERVICE}", hosts.join(","))
    }

    /// The primary's port as every Sentinel names it now.
    pub async fn primary_ports(&self) -> anyhow::Result<Vec<u16>> {
        let mut ports = Vec::new();
        for (port, _) in &self.sentinels {
            let client = deadpool_redis::redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            let (_, primary): (String, u16) = deadpool_redis::redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(SENTINEL_SERVICE)
                .query_async(&mut conn)
                .await?;
            ports.push(primary);
        }
        Ok(ports)
    }
}
