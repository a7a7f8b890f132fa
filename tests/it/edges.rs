//! The edges an attacker (or a broken peer) pushes on: a sync that switches
//! its shared source connection to read-write for the next sync, credentials
//! that would follow a redirect, answers too large to hold, secrets inside
//! URLs that a transport error would echo, e-mail addresses that are not
//! addresses, and source rows that are not UTF-8. Each test performs the
//! attack against the real binary and sees it refused.

use std::time::Duration;

use serde_json::Value;
use syncward::source::Source;
use syncward::source::postgres::{PostgresSource, PostgresSourceConfig, PostgresSourcePools};

use crate::fakes::brevo::BrevoFake;
use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::QUIET_SCHEDULE;
use crate::helpers::{Syncward, TestDb, TestRedis};

const BREVO_KEY: &str = "xkeysib-edges-key";

/// A sync file for `id` with these `[source]` and `[destination]` bodies,
/// mapping `email` and `first_name`, published through the CLI.
async fn publish(
    cli: &Syncward,
    dir: &tempfile::TempDir,
    id: &str,
    source: &str,
    destination: &str,
) -> anyhow::Result<()> {
    let text = format!(
        r#"id = "{id}"
workspace = "acme"
schedule = "{QUIET_SCHEDULE}"

[source]
{source}

[destination]
{destination}

[mapping]
email = "email"
attributes = {{ FIRSTNAME = "first_name" }}
"#
    );
    let path = dir.path().join(format!("{id}.toml"));
    std::fs::write(&path, text)?;
    cli.run(&["sync", "apply", &path.display().to_string()])
        .await?
        .ok()?;
    Ok(())
}

/// A Postgres `[source]` body reading `query` from `TEST_SOURCE_URL`.
fn postgres_source(query: &str) -> String {
    format!(
        r#"kind = "postgres"
url_env = "TEST_SOURCE_URL"
query = "{query}"
cursor_column = "id"
page_size = 10"#
    )
}

/// A bulk Brevo `[destination]` body at `base_url`.
fn brevo_destination(base_url: &str) -> String {
    format!(
        r#"kind = "brevo"
api_key_env = "TEST_BREVO_KEY"
base_url = "{base_url}"
mode = "bulk"
list_ids = [12]
timeout = "5s""#
    )
}

/// The newest run of `sync` (`runs list --json`), `Null` before any.
async fn last_run(cli: &Syncward, sync: &str) -> anyhow::Result<Value> {
    let list = cli
        .run(&["runs", "list", "--sync", sync, "--limit", "1", "--json"])
        .await?
        .ok()?
        .json()?;
    Ok(list[0].clone())
}

/// Runs `sync` in the foreground to its end; the run as `runs show --json`
/// gives it, and the command's output.
async fn run_foreground(cli: &Syncward, sync: &str) -> anyhow::Result<(Value, String)> {
    let out = cli.run(&["sync", "run", sync, "--foreground"]).await?;
    let run = last_run(cli, sync).await?;
    let id = run["id"].as_i64().unwrap_or_default().to_string();
    let shown = cli.run(&["runs", "show", &id, "--json"]).await?.ok()?;
    Ok((shown.json()?, format!("{}\n{}", out.stdout, out.stderr)))
}

async fn contacts_table(db: &TestDb, rows: i64) -> anyhow::Result<()> {
    sqlx::raw_sql("CREATE TABLE contacts (id bigint PRIMARY KEY, email text, first_name text)")
        .execute(&db.pool)
        .await?;
    sqlx::query(
        "INSERT INTO contacts SELECT i, 'user' || i || '@example.com', 'First' || i FROM generate_series(1, $1) i",
    )
    .bind(rows)
    .execute(&db.pool)
    .await?;
    Ok(())
}

async fn count_contacts(db: &TestDb) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM contacts")
        .fetch_one(&db.pool)
        .await?)
}

// ---------------------------------------------------------------------------
// (a) One sync cannot switch off read-only (or the timeout) for another.

/// The query of the sync that poisons its connection: every row switches
/// read-only and the statement timeout off for the rest of the session.
const POISONING_QUERY: &str = "SELECT id, email, first_name FROM contacts \
     WHERE set_config('default_transaction_read_only', 'off', false) = 'off' \
       AND set_config('statement_timeout', '0', false) = '0'";

#[tokio::test(flavor = "multi_thread")]
async fn a_sync_that_switches_read_only_off_cannot_let_another_sync_write_the_source()
-> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let redis = TestRedis::new().await?;
    let brevo = BrevoFake::start(BREVO_KEY).await?;
    contacts_table(&db, 12).await?;
    // What the second sync's query calls: a function that deletes every row.
    sqlx::raw_sql(
        "CREATE FUNCTION wipe_contacts() RETURNS int LANGUAGE plpgsql AS
         $$ BEGIN DELETE FROM contacts; RETURN 0; END $$",
    )
    .execute(&db.pool)
    .await?;
    // One worker: both runs share the process's pool for the source URL,
    // and its one connection.
    let cli = Syncward::new(&db, Some(&redis))
        .with_env("TEST_SOURCE_URL", &db.url)
        .with_env("TEST_BREVO_KEY", BREVO_KEY)
        .with_env("SYNCWARD__WORKERS__COUNT", "1")
        .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "100ms");
    let dir = tempfile::tempdir()?;
    let destination = brevo_destination(&brevo.base_url);
    publish(
        &cli,
        &dir,
        "poisoner",
        &postgres_source(POISONING_QUERY),
        &destination,
    )
    .await?;
    publish(
        &cli,
        &dir,
        "wiper",
        &postgres_source("SELECT id, email, first_name FROM contacts WHERE wipe_contacts() = 0"),
        &destination,
    )
    .await?;

    let mut daemon = DaemonProcess::spawn(&cli).await?;
    cli.run(&["sync", "run", "poisoner"]).await?.ok()?;
    daemon
        .eventually(Duration::from_secs(30), "the poisoning run", || async {
            Ok(last_run(&cli, "poisoner").await?["status"] == "succeeded")
        })
        .await?;
    cli.run(&["sync", "run", "wiper"]).await?.ok()?;
    daemon
        .eventually(Duration::from_secs(30), "the wiping run ending", || async {
            Ok(!last_run(&cli, "wiper").await?["finished_at"].is_null())
        })
        .await?;
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;

    let run = last_run(&cli, "wiper").await?;
    assert_eq!(
        count_contacts(&db).await?,
        12,
        "the source lost rows: {run}"
    );
    assert_ne!(run["status"], "succeeded", "{run}");
    assert_eq!(run["failure_code"], "source_query_failed", "{run}");
    assert!(
        run.to_string().contains("read-only transaction"),
        "the failure names read-only: {run}"
    );
    Ok(())
}

fn source_config(query: &str, statement_timeout: &str) -> anyhow::Result<PostgresSourceConfig> {
    Ok(toml::from_str(&format!(
        "url_env = \"UNUSED\"\nquery = \"{query}\"\ncursor_column = \"id\"\npage_size = 10\nstatement_timeout = \"{statement_timeout}\"\n"
    ))?)
}

#[tokio::test]
async fn every_page_reads_with_read_only_and_its_timeout_whatever_the_last_query_set()
-> anyhow::Result<()> {
    let db = TestDb::new().await?;
    contacts_table(&db, 25).await?;
    // One set of pools, as in a daemon: the sources below share connections.
    let pools = PostgresSourcePools::default();
    let poisoning = POISONING_QUERY.replace("SELECT id,", "SELECT pg_backend_pid() AS pid, id,");
    let mut poisoner =
        PostgresSource::with_url(&source_config(&poisoning, "7s")?, &db.url, &pools)?;
    let page = poisoner.fetch_page(None).await?;
    let poisoned = page.records.into_values()?[0]["pid"].clone();
    let settings = "SELECT pg_backend_pid() AS pid, id, email, \
                    current_setting('transaction_read_only') AS ro, \
                    current_setting('statement_timeout') AS timeout FROM contacts";
    drop(poisoner);
    // A connection goes back to its pool in a task of its own: read until a
    // page comes from the poisoned connection (every page must be clean).
    let mut shared = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let mut reader =
            PostgresSource::with_url(&source_config(settings, "7s")?, &db.url, &pools)?;
        for r in reader.fetch_page(None).await?.records.into_values()? {
            assert_eq!(r["ro"], "on", "{r}");
            assert_eq!(r["timeout"], "7s", "{r}");
            shared |= r["pid"] == poisoned;
        }
        if shared {
            break;
        }
    }
    assert!(shared, "no page was read on the poisoned connection");
    Ok(())
}
