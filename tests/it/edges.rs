//! The edges an attacker (or a broken peer) pushes on: a sync that switches
//! its shared source connection to read-write for the next sync, credentials
//! that would follow a redirect, answers too large to hold, secrets inside
//! URLs that a transport error would echo, e-mail addresses that are not
//! addresses, and source rows that are not UTF-8. Each test performs the
//! attack against the real binary and sees it refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
{consent}
"#,
        // A Shopify source feeding Brevo lists needs a consent rule.
        consent = if source.contains("kind = \"shopify\"") {
            r#"consent = { field = "defaultEmailAddress.marketingState", subscribed = ["SUBSCRIBED"] }"#
        } else {
            ""
        }
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
    let json = shown
        .json()
        .map_err(|e| e.context(format!("runs show {id} --json: {}", shown.stdout)))?;
    Ok((json, format!("{}\n{}", out.stdout, out.stderr)))
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
        .with_secret("TEST_SOURCE_URL", &db.url)
        .with_secret("TEST_BREVO_KEY", BREVO_KEY)
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

// ---------------------------------------------------------------------------
// Small servers for the edges below.

/// A server on an ephemeral port; aborted when dropped.
struct EdgeServer {
    url: String,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for EdgeServer {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl EdgeServer {
    async fn start(app: axum::Router) -> anyhow::Result<Self> {
        let (addr, server) = crate::fakes::serve(app).await?;
        Ok(Self {
            url: format!("http://{addr}"),
            server,
        })
    }

    /// Answers every request with `200 {}` and counts them in `hits`.
    async fn catcher(hits: Arc<AtomicUsize>) -> anyhow::Result<Self> {
        Self::start(axum::Router::new().fallback(move || {
            let hits = hits.clone();
            async move {
                hits.fetch_add(1, Ordering::SeqCst);
                "{}"
            }
        }))
        .await
    }

    /// Answers every request with `307` to the same path at `target`.
    async fn redirector(target: String) -> anyhow::Result<Self> {
        Self::start(axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let location = format!("{target}{}", uri.path());
            async move {
                (
                    axum::http::StatusCode::TEMPORARY_REDIRECT,
                    [(axum::http::header::LOCATION, location)],
                )
            }
        }))
        .await
    }

    /// Answers every request with `status` and a body of `total` bytes,
    /// streamed (never held whole), keeping in `pulled` the most the client
    /// took of any one answer (plus what the sockets buffer) before it hung
    /// up: each answer has its own cap, and a Brevo run asks twice (the
    /// account's attributes, then the import).
    async fn streamer(
        status: axum::http::StatusCode,
        total: usize,
        pulled: Arc<AtomicUsize>,
    ) -> anyhow::Result<Self> {
        static CHUNK: [u8; 64 * 1024] = [b' '; 64 * 1024];
        Self::start(axum::Router::new().fallback(move || {
            let pulled = pulled.clone();
            async move {
                let body = futures::stream::unfold(0usize, move |sent| {
                    let pulled = pulled.clone();
                    async move {
                        (sent < total).then(|| {
                            pulled.fetch_max(sent + CHUNK.len(), Ordering::SeqCst);
                            (Ok::<_, std::io::Error>(&CHUNK[..]), sent + CHUNK.len())
                        })
                    }
                });
                (
                    status,
                    [(axum::http::header::CONTENT_TYPE, "application/json")],
                    axum::body::Body::from_stream(body),
                )
            }
        }))
        .await
    }
}

/// An `http` `[source]` body at `url`, its token from `TEST_API_AUTH`.
fn http_source(url: &str) -> String {
    format!(
        r#"kind = "http"
url = "{url}"
cursor_param = "after"
items_pointer = "/data"
next_cursor_pointer = "/meta/next"
auth_env = "TEST_API_AUTH"
timeout = "5s""#
    )
}

/// A Shopify `[source]` body at `base_url`, its token from `TEST_SHOPIFY_TOKEN`.
fn shopify_source(base_url: &str) -> String {
    format!(
        r#"kind = "shopify"
shop = "acme"
api_version = "2025-07"
access_token_env = "TEST_SHOPIFY_TOKEN"
base_url = "{base_url}"
timeout = "5s""#
    )
}

/// A test's services, the Brevo fake, a `contacts` table of 12 rows and the
/// environment every sync file above names.
struct Edges {
    db: TestDb,
    _redis: TestRedis,
    brevo: BrevoFake,
    cli: Syncward,
    dir: tempfile::TempDir,
}

const API_TOKEN: &str = "Bearer api-edges-token";
const SHOPIFY_TOKEN: &str = "shpat_edges_token";

impl Edges {
    async fn new() -> anyhow::Result<Self> {
        let db = TestDb::new().await?;
        let redis = TestRedis::new().await?;
        let brevo = BrevoFake::start(BREVO_KEY).await?;
        contacts_table(&db, 12).await?;
        let cli = Syncward::new(&db, Some(&redis))
            .with_secret("TEST_SOURCE_URL", &db.url)
            .with_secret("TEST_BREVO_KEY", BREVO_KEY)
            .with_secret("TEST_API_AUTH", API_TOKEN)
            .with_secret("TEST_SHOPIFY_TOKEN", SHOPIFY_TOKEN)
            .with_env("SYNCWARD__WORKERS__COUNT", "1")
            .with_env("SYNCWARD__WORKERS__POLL_INTERVAL", "100ms");
        Ok(Self {
            db,
            _redis: redis,
            brevo,
            cli,
            dir: tempfile::tempdir()?,
        })
    }

    async fn publish(&self, id: &str, source: &str, destination: &str) -> anyhow::Result<()> {
        publish(&self.cli, &self.dir, id, source, destination).await
    }
}

fn detail(run: &Value) -> &str {
    run["run"]["failure_detail"].as_str().unwrap_or_default()
}

// ---------------------------------------------------------------------------
// (b) Credentials do not follow redirects.

#[tokio::test(flavor = "multi_thread")]
async fn a_redirect_is_not_followed_with_credentials_and_fails_the_run_naming_the_setting()
-> anyhow::Result<()> {
    let e = Edges::new().await?;
    let hits = Arc::new(AtomicUsize::new(0));
    let catcher = EdgeServer::catcher(hits.clone()).await?;
    let redirector = EdgeServer::redirector(catcher.url.clone()).await?;
    e.publish(
        "to-redirect",
        &postgres_source("SELECT id, email, first_name FROM contacts"),
        &brevo_destination(&format!("{}/v3", redirector.url)),
    )
    .await?;
    e.publish(
        "from-redirect",
        &http_source(&format!("{}/contacts", redirector.url)),
        &brevo_destination(&e.brevo.base_url),
    )
    .await?;
    e.publish(
        "shop-redirect",
        &shopify_source(&redirector.url),
        &brevo_destination(&e.brevo.base_url),
    )
    .await?;
    for (sync, setting) in [
        (
            "to-redirect",
            "set destination.base_url to the final address",
        ),
        ("from-redirect", "set source.url to the final address"),
        (
            "shop-redirect",
            "set source.shop (or source.base_url) to the final address",
        ),
    ] {
        let (run, output) = run_foreground(&e.cli, sync).await?;
        assert_eq!(run["run"]["status"], "failed", "{sync}: {output}");
        assert_eq!(
            run["run"]["failure_code"], "config_invalid",
            "{sync}: {run}"
        );
        let detail = detail(&run);
        assert!(
            detail.contains("redirect (HTTP 307) to http://127.0.0.1:")
                && detail.contains("syncward does not follow redirects with credentials")
                && detail.contains(setting),
            "{sync}: {detail}"
        );
    }
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "the redirect's target received a request"
    );
    assert!(
        e.brevo.requests().is_empty(),
        "nothing was read, nothing sent"
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// (c) Answers are read up to a cap.

/// Bytes the streaming fakes offer: far past both caps.
const HUGE: usize = 512 * 1024 * 1024;
/// What loopback sockets and the client's buffers may take beyond the cap
/// before the client hangs up.
const BUFFERED: usize = 32 * 1024 * 1024;

/// The daemon's peak resident memory (`VmHWM`), in bytes.
fn peak_rss(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no VmHWM in /proc/{pid}/status"))?;
    Ok(kib * 1024)
}

#[tokio::test(flavor = "multi_thread")]
async fn answers_past_the_cap_are_not_read_further_and_fail_the_run_with_the_cap_named()
-> anyhow::Result<()> {
    let e = Edges::new().await?;
    let to_destination = Arc::new(AtomicUsize::new(0));
    let to_source = Arc::new(AtomicUsize::new(0));
    let big_answers = EdgeServer::streamer(
        axum::http::StatusCode::ACCEPTED,
        HUGE,
        to_destination.clone(),
    )
    .await?;
    let big_pages =
        EdgeServer::streamer(axum::http::StatusCode::OK, HUGE, to_source.clone()).await?;
    e.publish(
        "big-answer",
        &postgres_source("SELECT id, email, first_name FROM contacts"),
        &brevo_destination(&format!("{}/v3", big_answers.url)),
    )
    .await?;
    e.publish(
        "big-page",
        &http_source(&format!("{}/contacts", big_pages.url)),
        &brevo_destination(&e.brevo.base_url),
    )
    .await?;

    let mut daemon = DaemonProcess::spawn(&e.cli).await?;
    e.cli.run(&["sync", "run", "big-answer"]).await?.ok()?;
    e.cli.run(&["sync", "run", "big-page"]).await?.ok()?;
    // The destination's failure is retryable: the run goes back to the queue
    // (after a minute) with the reason in its timeline.
    let shown = |sync: &'static str| {
        let cli = e.cli.clone();
        async move {
            let run = last_run(&cli, sync).await?;
            let id = run["id"].as_i64().unwrap_or_default().to_string();
            cli.run(&["runs", "show", &id, "--json"])
                .await?
                .ok()?
                .json()
        }
    };
    daemon
        .eventually(Duration::from_secs(60), "both runs ending", || async {
            let answer = shown("big-answer").await?;
            let page = shown("big-page").await?;
            Ok(answer["run"]["trigger"] == "retry" && page["run"]["status"] == "failed")
        })
        .await?;
    let peak = peak_rss(daemon.pid)?;
    eprintln!("the daemon peaked at {} MB", peak / (1024 * 1024));
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;

    let answer = shown("big-answer").await?;
    assert!(
        answer["events"].to_string().contains(
            "destination_unavailable: the destination's answer (HTTP 202) exceeded 16 MiB; not read further"
        ),
        "{answer}"
    );
    let page = shown("big-page").await?;
    assert_eq!(page["run"]["failure_code"], "source_query_failed");
    assert!(
        detail(&page).contains("the API's answer exceeded 64 MiB; not read further"),
        "{page}"
    );
    let taken = to_destination.load(Ordering::SeqCst);
    assert!(
        taken < 16 * 1024 * 1024 + BUFFERED,
        "the destination's answer was read past its cap: {taken} bytes"
    );
    let taken = to_source.load(Ordering::SeqCst);
    assert!(
        taken < 64 * 1024 * 1024 + BUFFERED,
        "the source's page was read past its cap: {taken} bytes"
    );
    // Both answers held at once would still be under this; 512 MB read whole
    // would not.
    assert!(
        peak < 300 * 1024 * 1024,
        "the daemon peaked at {} MB",
        peak / (1024 * 1024)
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// (d) Transport errors do not echo URLs.

#[tokio::test(flavor = "multi_thread")]
async fn a_transport_error_keeps_the_url_and_its_secrets_out_of_the_failure_and_the_log()
-> anyhow::Result<()> {
    let e = Edges::new().await?;
    // A port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    // Secrets a sync file may not hold in a query parameter named like one
    // (`?api_key=` is refused at `sync apply`): in the path, and in a
    // parameter whose name does not give it away.
    let url = format!("http://{closed}/SECRETPATH/v3?account=SECRETQUERY");
    e.publish(
        "to-closed",
        &postgres_source("SELECT id, email, first_name FROM contacts"),
        &brevo_destination(&url),
    )
    .await?;
    e.publish(
        "from-closed",
        &http_source(&url),
        &brevo_destination(&e.brevo.base_url),
    )
    .await?;
    for (sync, code) in [
        ("to-closed", "destination_unavailable"),
        ("from-closed", "source_unreachable"),
    ] {
        let (run, output) = run_foreground(&e.cli, sync).await?;
        assert_eq!(run["run"]["failure_code"], code, "{sync}: {run}");
        let detail = detail(&run);
        assert!(detail.contains("Connection refused"), "{sync}: {detail}");
        for shown in [run.to_string(), output] {
            assert!(
                !shown.contains("SECRET"),
                "{sync}: a secret of the URL was shown: {shown}"
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// (e) An e-mail address must be one.

#[tokio::test(flavor = "multi_thread")]
async fn a_row_whose_address_is_not_one_is_rejected_as_invalid_email_and_the_page_goes_on()
-> anyhow::Result<()> {
    let e = Edges::new().await?;
    let bad = [
        (3, "ann smith@example.com"),
        (5, "\"<script>\"@x"),
        (7, "bell\u{7}@example.com"),
    ];
    for (id, address) in bad {
        sqlx::query("UPDATE contacts SET email = $2 WHERE id = $1")
            .bind(id as i64)
            .bind(address)
            .execute(&e.db.pool)
            .await?;
    }
    e.publish(
        "checked",
        &postgres_source("SELECT id, email, first_name FROM contacts"),
        &brevo_destination(&e.brevo.base_url),
    )
    .await?;
    let (run, output) = run_foreground(&e.cli, "checked").await?;
    assert_eq!(run["run"]["status"], "succeeded", "{output}");
    assert_eq!(run["run"]["records_written"], 9, "{run}");
    assert_eq!(run["run"]["records_rejected"], 3, "{run}");
    let rejected: Vec<(Option<String>, String, String)> =
        sqlx::query_as("SELECT email, code, message FROM rejected_records ORDER BY id")
            .fetch_all(&e.db.pool)
            .await?;
    assert_eq!(rejected.len(), 3, "{rejected:?}");
    for ((email, code, message), problem) in
        rejected
            .iter()
            .zip(["contains a space", "quoted local part", "control character"])
    {
        assert_eq!(code, "invalid_email");
        assert_eq!(email, &None, "the address is not kept");
        assert!(message.contains(problem), "{message}");
        assert!(
            !message.contains('@'),
            "the message quotes the address: {message}"
        );
    }
    let delivered = e.brevo.contacts();
    assert_eq!(delivered.len(), 9, "{:?}", delivered.keys());
    assert!(delivered.keys().all(|k| !bad.iter().any(|(_, b)| b == k)));
    Ok(())
}

// ---------------------------------------------------------------------------
// (f) A row that is not UTF-8 is rejected alone.

/// A database in `SQL_ASCII` (which stores any bytes) beside the test's,
/// dropped when this is.
struct AsciiDb {
    url: String,
    name: String,
    admin: sqlx::PgPool,
}

impl AsciiDb {
    async fn beside(db: &TestDb) -> anyhow::Result<Self> {
        // Named like the test databases, so `scripts/test` sweeps a stray one.
        let name = format!("{}_ascii", db.name);
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
        )))
        .execute(&db.pool)
        .await?;
        let mut url = url::Url::parse(&db.url)?;
        url.set_path(&format!("/{name}"));
        Ok(Self {
            url: url.to_string(),
            name,
            admin: db.pool.clone(),
        })
    }

    async fn drop_now(self) -> anyhow::Result<()> {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        )))
        .execute(&self.admin)
        .await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_row_with_bytes_that_are_not_utf8_is_rejected_and_the_others_are_delivered()
-> anyhow::Result<()> {
    let e = Edges::new().await?;
    let ascii = AsciiDb::beside(&e.db).await?;
    let source = sqlx::PgPool::connect(&ascii.url).await?;
    // Row 3's name (read in binary) and row 8's tags (read through to_json)
    // hold a byte that is not UTF-8; rows 5 and 6 tie on the cursor with row
    // 3, so the bad row is also ordered among its ties.
    sqlx::raw_sql(
        "CREATE TABLE contacts (id bigint PRIMARY KEY, grp int NOT NULL, email text,
                                first_name text, tags text[]);
         INSERT INTO contacts SELECT i, CASE WHEN i IN (3, 5, 6) THEN 3 ELSE i END,
                                     'user' || i || '@example.com', 'First' || i, ARRAY['t' || i]
         FROM generate_series(1, 10) i;
         UPDATE contacts SET first_name = E'Bj\\xf6rn' WHERE id = 3;
         UPDATE contacts SET tags = ARRAY[E'caf\\xe9'] WHERE id = 8;",
    )
    .execute(&source)
    .await?;
    source.close().await;
    let cli = e.cli.clone().with_secret("TEST_ASCII_URL", &ascii.url);
    publish(
        &cli,
        &e.dir,
        "latin1",
        r#"kind = "postgres"
url_env = "TEST_ASCII_URL"
query = "SELECT id, grp, email, first_name, tags FROM contacts"
cursor_column = "grp"
page_size = 4"#,
        &brevo_destination(&e.brevo.base_url),
    )
    .await?;
    let (run, output) = run_foreground(&cli, "latin1").await?;
    ascii.drop_now().await?;
    assert_eq!(run["run"]["status"], "succeeded", "{output}");
    assert_eq!(run["run"]["records_read"], 10, "{run}");
    assert_eq!(run["run"]["records_written"], 8, "{run}");
    assert_eq!(run["run"]["records_rejected"], 2, "{run}");
    let rejected: Vec<(String, String)> =
        sqlx::query_as("SELECT code, message FROM rejected_records ORDER BY message")
            .fetch_all(&e.db.pool)
            .await?;
    assert_eq!(rejected.len(), 2, "{rejected:?}");
    for ((code, message), column) in rejected.iter().zip(["first_name", "tags"]) {
        assert_eq!(code, "invalid_encoding");
        assert!(
            message.contains(&format!(
                "column \"{column}\" holds bytes that are not UTF-8"
            )),
            "{message}"
        );
    }
    let delivered: Vec<String> = e.brevo.contacts().into_keys().collect();
    let expected: std::collections::BTreeSet<String> = [1, 2, 4, 5, 6, 7, 9, 10]
        .iter()
        .map(|i| format!("user{i}@example.com"))
        .collect();
    assert_eq!(
        delivered
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>(),
        expected
    );
    Ok(())
}
