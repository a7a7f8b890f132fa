//! `TestDb`: each test gets its own database, cloned from a template that is
//! migrated once per schema (across processes: nextest runs one per test).

use std::str::FromStr;

use anyhow::Context;
use sha2::{Digest, Sha256};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection, PgPool};
use syncward::store::MIGRATOR;

/// Server and role the tests use; `scripts/services` creates them.
pub fn admin_url() -> String {
    std::env::var("SYNCWARD_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://syncward:syncward@127.0.0.1:5432/syncward".into())
}

#[derive(Debug)]
pub struct TestDb {
    pub pool: PgPool,
    pub name: String,
    pub url: String,
    admin: String,
}

impl TestDb {
    pub async fn new() -> anyhow::Result<Self> {
        // Sources run in this process reach the test databases on loopback.
        super::allow_loopback();
        Self::at(&admin_url()).await
    }

    /// A fresh database on the server of `admin` (a URL whose role may create
    /// databases); an unreachable server is an error that says so.
    pub async fn at(admin: &str) -> anyhow::Result<Self> {
        Self::create(admin, true).await
    }

    /// A database with no schema at all, for migration tests.
    pub async fn empty() -> anyhow::Result<Self> {
        Self::create(&admin_url(), false).await
    }

    async fn create(admin: &str, migrated: bool) -> anyhow::Result<Self> {
        super::install_crypto();
        let admin = admin.to_string();
        let mut conn = PgConnection::connect(&admin).await.with_context(|| {
            format!("tests need Postgres at {admin} (run scripts/services); it is not reachable")
        })?;
        let name = format!("syncward_test_{}", uuid::Uuid::new_v4().simple());
        let create = if migrated {
            let template = ensure_template(&mut conn, &admin).await?;
            format!("CREATE DATABASE {name} TEMPLATE {template}")
        } else {
            format!("CREATE DATABASE {name}")
        };
        conn.execute(sqlx::AssertSqlSafe(create)).await?;
        conn.close().await?;
        let url = with_database(&admin, &name)?;
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .connect(&url)
            .await?;
        Ok(Self {
            pool,
            name,
            url,
            admin,
        })
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let admin = self.admin.clone();
        // Dropping runs outside any async context we could await in: a private
        // thread with its own runtime does the DROP and is joined, so the database
        // is gone when the test ends. Failure to drop only leaves a stray database
        // that `scripts/test` removes on its next run.
        let handle = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(mut conn) = PgConnection::connect(&admin).await {
                    let _ = conn
                        .execute(sqlx::AssertSqlSafe(format!(
                            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                        )))
                        .await;
                }
            });
        });
        let _ = handle.join();
    }
}

/// Name of the template for the current migrations, creating it when missing.
async fn ensure_template(conn: &mut PgConnection, admin: &str) -> anyhow::Result<String> {
    let mut hash = Sha256::new();
    for m in MIGRATOR.iter() {
        hash.update(m.version.to_le_bytes());
        hash.update(&*m.checksum);
    }
    let template = format!("syncward_tmpl_{}", &hex::encode(hash.finalize())[..16]);
    // A session-level advisory lock serialises template builds across test processes.
    conn.execute("SELECT pg_advisory_lock(772001)").await?;
    let result = build_template_if_missing(conn, admin, &template).await;
    conn.execute("SELECT pg_advisory_unlock(772001)").await?;
    result.map(|()| template)
}

async fn build_template_if_missing(
    conn: &mut PgConnection,
    admin: &str,
    template: &str,
) -> anyhow::Result<()> {
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(template)
            .fetch_one(&mut *conn)
            .await?;
    if exists {
        return Ok(());
    }
    // Built under another name and renamed when complete, so a crash mid-build
    // never leaves a half-migrated template behind.
    let building = format!("{template}_build");
    conn.execute(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE IF EXISTS {building} WITH (FORCE)"
    )))
    .await?;
    conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {building}")))
        .await?;
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .connect(&with_database(admin, &building)?)
        .await?;
    MIGRATOR
        .run(&pool)
        .await
        .context("migrating the test template")?;
    pool.close().await;
    conn.execute(sqlx::AssertSqlSafe(format!(
        "ALTER DATABASE {building} RENAME TO {template}"
    )))
    .await?;
    // Templates of older migrations are of no use any more; one still being
    // copied (by another checkout's tests) is left for next time.
    let stale: Vec<String> = sqlx::query_scalar(
        "SELECT datname FROM pg_database
         WHERE datname LIKE 'syncward\\_tmpl\\_%' AND datname <> $1 AND datname NOT LIKE '%\\_build'",
    )
    .bind(template)
    .fetch_all(&mut *conn)
    .await?;
    for name in stale {
        let _ = conn
            .execute(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS {name}"
            )))
            .await;
    }
    Ok(())
}

fn with_database(url: &str, database: &str) -> anyhow::Result<String> {
    // Round-trip through the options type so only the database name changes.
    let _ = PgConnectOptions::from_str(url)?;
    let mut parsed = url::Url::parse(url)?;
    parsed.set_path(&format!("/{database}"));
    Ok(parsed.to_string())
}

/// Starts a run of `sync_id` the way a worker does once it holds the lease:
/// the run is queued (`runs::enqueue_run`), then given the sync's next fence by
/// the daemon's lease-start statement (`runs::begin_leased_runs`). Returns the
/// run and its fence. The sync must exist.
pub async fn start_fenced_run(pool: &PgPool, sync_id: &str) -> anyhow::Result<(i64, i64)> {
    use syncward::store::runs;
    let (run_id, _) =
        runs::enqueue_run(pool, sync_id, syncward::states::RunTrigger::Manual, 5).await?;
    let start = runs::LeaseStart {
        run_id,
        sync_id: sync_id.to_owned(),
        lease_value: format!("test/{run_id}"),
    };
    let started = runs::begin_leased_runs(pool, &[start]).await?;
    let (fence, _cursor) = started
        .into_iter()
        .next()
        .flatten()
        .context("no fence: another run of the sync is alive")?;
    Ok((run_id, fence))
}
