//! `Scenario`: a sync from a Postgres table in the test database to the Brevo
//! fake, published through the real CLI, ready to run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use super::{Syncward, TestDb, TestRedis};
use crate::fakes::brevo::BrevoFake;

pub const BREVO_KEY: &str = "xkeysib-test-key";
pub const SYNC_ID: &str = "acme-contacts";
/// The scenario's schedule: midnight on 29 February, so no tick lands inside a
/// test. A quarter-hourly one did in CI: its run, skipped as busy, became the
/// newest run the daemon tests follow, and they waited for it in vain.
pub const QUIET_SCHEDULE: &str = "0 0 0 29 2 *";

/// Options of the published sync.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    pub mode: &'static str,
    pub page_size: u32,
    pub rows: i64,
    pub concurrency: u32,
    pub timeout: &'static str,
}

impl Default for SyncOptions {
    fn default() -> Self {
        Self {
            mode: "bulk",
            page_size: 10,
            rows: 30,
            concurrency: 4,
            timeout: "5s",
        }
    }
}

pub struct Scenario {
    pub db: TestDb,
    pub redis: TestRedis,
    pub fake: BrevoFake,
    pub cli: Syncward,
    pub dir: tempfile::TempDir,
    /// The pid of the runner a fake hook should kill (0: none).
    pub runner_pid: Arc<AtomicU32>,
}

impl Scenario {
    /// Source table `contacts(id, email, first_name)` with `rows` rows
    /// (`user{id}@example.com`), the sync published, a runner with short leases.
    pub async fn new(options: SyncOptions) -> anyhow::Result<Self> {
        Self::on(options, TestDb::new().await?, TestRedis::new().await?).await
    }

    /// The same on a database and Redis of the caller's choosing (a private
    /// server a fault drill restarts).
    pub async fn on(options: SyncOptions, db: TestDb, redis: TestRedis) -> anyhow::Result<Self> {
        let scenario = Self::unpublished(db, redis, options.rows).await?;
        scenario.publish(&options).await?;
        Ok(scenario)
    }

    /// The source, the fake and the CLI, with no sync published yet (a test
    /// that publishes its own way: a previous release's store).
    pub async fn unpublished(db: TestDb, redis: TestRedis, rows: i64) -> anyhow::Result<Self> {
        let fake = BrevoFake::start(BREVO_KEY).await?;
        sqlx::raw_sql("CREATE TABLE contacts (id bigint PRIMARY KEY, email text, first_name text)")
            .execute(&db.pool)
            .await?;
        sqlx::query(
            "INSERT INTO contacts SELECT i, 'user' || i || '@example.com', 'First' || i FROM generate_series(1, $1) i",
        )
        .bind(rows)
        .execute(&db.pool)
        .await?;
        let cli = Syncward::new(&db, Some(&redis))
            .with_secret("TEST_SOURCE_URL", &db.url)
            .with_secret("TEST_BREVO_KEY", BREVO_KEY)
            // Short leases and liveness, so a killed runner's hold on the
            // sync ends within seconds.
            .with_env("SYNCWARD__LEASE__TTL", "3s")
            .with_env("SYNCWARD__LEASE__RENEW_EVERY", "1s")
            .with_env("SYNCWARD__WORKERS__LIVENESS_TTL", "2s");
        let dir = tempfile::tempdir()?;
        Ok(Self {
            db,
            redis,
            fake,
            cli,
            dir,
            runner_pid: Arc::new(AtomicU32::new(0)),
        })
    }

    pub async fn publish(&self, o: &SyncOptions) -> anyhow::Result<()> {
        self.publish_with_destination(o.page_size, &self.brevo_destination(o))
            .await
    }

    /// The `[destination]` table body of the scenario's Brevo fake.
    pub fn brevo_destination(&self, o: &SyncOptions) -> String {
        format!(
            r#"kind = "brevo"
api_key_env = "TEST_BREVO_KEY"
base_url = "{base}"
mode = "{mode}"
list_ids = [12]
concurrency = {concurrency}
timeout = "{timeout}""#,
            base = self.fake.base_url,
            mode = o.mode,
            concurrency = o.concurrency,
            timeout = o.timeout,
        )
    }

    /// Publishes the sync with another `[destination]` table body.
    pub async fn publish_with_destination(
        &self,
        page_size: u32,
        destination: &str,
    ) -> anyhow::Result<()> {
        self.apply_text("sync.toml", &self.sync_file(page_size, destination))
            .await?
            .ok()?;
        Ok(())
    }

    /// Writes `text` as the sync file `name` in the scenario's directory and
    /// applies it; the command's outcome, whatever it was.
    pub async fn apply_text(&self, name: &str, text: &str) -> anyhow::Result<super::cli::Outcome> {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text)?;
        self.cli
            .run(&["sync", "apply", path.to_str().unwrap_or_default()])
            .await
    }

    /// The scenario's sync file with this page size and `[destination]` body.
    pub fn sync_file(&self, page_size: u32, destination: &str) -> String {
        format!(
            r#"
id = "{SYNC_ID}"
workspace = "acme"
schedule = "{QUIET_SCHEDULE}"

[source]
kind = "postgres"
url_env = "TEST_SOURCE_URL"
query = "SELECT id, email, first_name FROM contacts"
cursor_column = "id"
page_size = {page_size}

[destination]
{destination}

[mapping]
email = "email"
attributes = {{ FIRSTNAME = "first_name" }}
"#,
        )
    }

    /// The daemon's parts in this process (store, leases, default settings),
    /// for tests that drive one of them directly (a scheduler tick).
    pub fn daemon_in_process(&self) -> syncward::daemon_shared::Daemon {
        let mut settings = syncward::config::Settings::default();
        settings.redis.key_prefix = self.redis.prefix.clone();
        settings.lease.ttl = std::time::Duration::from_secs(60);
        syncward::daemon_shared::Daemon::new(
            self.db.pool.clone(),
            syncward::redis::SharedConnection::new(self.redis.pool.clone()),
            uuid::Uuid::new_v4(),
            Arc::new(settings),
        )
    }

    /// Runs the sync in the foreground to its end (or its death).
    pub async fn run_foreground(&self) -> anyhow::Result<super::cli::Outcome> {
        let child = self
            .cli
            .command(&["sync", "run", SYNC_ID, "--foreground"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        self.runner_pid
            .store(child.id().unwrap_or(0), Ordering::SeqCst);
        let output = child.wait_with_output().await?;
        self.runner_pid.store(0, Ordering::SeqCst);
        Ok(super::cli::Outcome {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        })
    }

    /// A hook action: SIGKILL the runner now.
    pub fn killer(&self) -> impl Fn() + Send + Sync + 'static {
        let pid = self.runner_pid.clone();
        move || {
            let pid = pid.load(Ordering::SeqCst);
            if pid != 0 {
                // `kill` is the plain way to send a signal without unsafe code.
                let _ = std::process::Command::new("kill")
                    .arg("-KILL")
                    .arg(pid.to_string())
                    .status();
            }
        }
    }

    pub fn lease_key(&self) -> String {
        format!("{}:lease:{SYNC_ID}", self.redis.prefix)
    }

    /// Makes the sync's lease held by another live process (its lease and
    /// its liveness key, for a minute); returns that process' boot id.
    pub async fn hold_lease_as_live_process(&self) -> anyhow::Result<String> {
        let holder = uuid::Uuid::new_v4().simple().to_string();
        let mut conn = self.redis.pool.get().await?;
        for (key, value) in [
            (self.lease_key(), format!("{holder}/token")),
            (
                format!("{}:daemon:{holder}", self.redis.prefix),
                "alive".into(),
            ),
        ] {
            let _: () = deadpool_redis::redis::cmd("SET")
                .arg(key)
                .arg(value)
                .arg("PX")
                .arg(60_000)
                .query_async(&mut conn)
                .await?;
        }
        Ok(holder)
    }

    /// Waits (up to 15 s) until a dead runner no longer holds the sync: its
    /// lease expired or its liveness key did (so the lease is taken over),
    /// and no run of the sync is alive by its process' heartbeat.
    pub async fn wait_for_lease_free(&self) -> anyhow::Result<()> {
        for _ in 0..150 {
            let mut conn = self.redis.pool.get().await?;
            let held: Option<String> = deadpool_redis::redis::cmd("GET")
                .arg(self.lease_key())
                .query_async(&mut conn)
                .await?;
            let holder_alive = match held.as_deref().and_then(|v| v.split_once('/')) {
                Some((boot, _)) => {
                    deadpool_redis::redis::cmd("EXISTS")
                        .arg(format!("{}:daemon:{boot}", self.redis.prefix))
                        .query_async(&mut conn)
                        .await?
                }
                None => false,
            };
            let live_runs: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM runs r JOIN processes p ON p.boot_id = r.boot_id
                 WHERE r.status = 'running'
                   AND p.heartbeat_at > now() - make_interval(secs => p.liveness_ttl_ms / 1000.0)",
            )
            .fetch_one(&self.db.pool)
            .await?;
            if !holder_alive && live_runs == 0 {
                return Ok(());
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        anyhow::bail!("the sync {SYNC_ID} stayed held by a dead runner")
    }

    /// The saved cursor's value, as text (`None` at the start).
    pub async fn cursor(&self) -> anyhow::Result<Option<String>> {
        let value: Option<sqlx::types::Json<serde_json::Value>> =
            sqlx::query_scalar("SELECT cursor FROM sync_cursors WHERE sync_id = $1")
                .bind(SYNC_ID)
                .fetch_one(&self.db.pool)
                .await?;
        Ok(value.and_then(|v| {
            v.0.get("value")
                .and_then(|v| v.as_str())
                .map(str::to_string)
        }))
    }

    /// The newest run as JSON (`runs show --json`).
    pub async fn last_run(&self) -> anyhow::Result<serde_json::Value> {
        let list = self
            .cli
            .run(&["runs", "list", "--sync", SYNC_ID, "--limit", "1", "--json"])
            .await?
            .ok()?
            .json()?;
        Ok(list[0].clone())
    }

    /// The activity of each fence in the ledger, in fence order: (fence,
    /// first claim, last answer). A fence that still wrote after the next
    /// one began is two runs writing at once.
    pub async fn fence_spans(
        &self,
    ) -> anyhow::Result<Vec<(i64, std::time::SystemTime, std::time::SystemTime)>> {
        type Span = (
            i64,
            chrono::DateTime<chrono::Utc>,
            chrono::DateTime<chrono::Utc>,
        );
        let rows: Vec<Span> = sqlx::query_as(
            "SELECT fence, min(created_at), max(coalesce(completed_at, created_at))
             FROM delivery_batches GROUP BY fence ORDER BY fence",
        )
        .fetch_all(&self.db.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(f, a, b)| (f, a.into(), b.into()))
            .collect())
    }

    /// Pairs of runs of one sync that held it at the same time, by Postgres'
    /// record: a run holds its sync from taking the lease (its `lease` event)
    /// until its next event (an end or a re-queue). A claim that found the
    /// lease busy held nothing.
    pub async fn overlapping_holds(&self) -> anyhow::Result<Vec<(i64, i64)>> {
        Ok(sqlx::query_as(
            "WITH ev AS (
               SELECT e.run_id, r.sync_id, e.kind, e.at,
                      lead(e.at) OVER (PARTITION BY e.run_id ORDER BY e.id) AS next_at
               FROM run_events e JOIN runs r ON r.id = e.run_id),
             held AS (
               SELECT run_id, sync_id, tstzrange(at, coalesce(next_at, 'infinity'), '[)') AS span
               FROM ev WHERE kind = 'lease')
             SELECT a.run_id, b.run_id FROM held a JOIN held b
               ON a.sync_id = b.sync_id AND a.run_id < b.run_id AND a.span && b.span",
        )
        .fetch_all(&self.db.pool)
        .await?)
    }

    /// How often each e-mail was written to the fake.
    pub fn writes_per_email(&self) -> std::collections::BTreeMap<String, usize> {
        let mut counts = std::collections::BTreeMap::new();
        for w in self.fake.writes() {
            *counts.entry(w.email).or_insert(0) += 1;
        }
        counts
    }
}
