//! Sync definition files: every kind of bad file is refused with its own
//! one-line message, and an apply with any bad file writes nothing.

use std::path::{Path, PathBuf};

use crate::helpers::{Syncward, TestDb};

pub const GOOD_SYNC: &str = r#"
id = "acme-contacts"
workspace = "acme"
schedule = "0 */15 * * * *"

[source]
kind = "postgres"
url_env = "TEST_SOURCE_URL"
query = "SELECT id, email, first_name FROM contacts"
cursor_column = "id"
page_size = 500

[destination]
kind = "brevo"
api_key_env = "TEST_BREVO_KEY"
base_url = "http://127.0.0.1:9/v3"
mode = "bulk"
list_ids = [12]

[mapping]
email = "email"
attributes = { FIRSTNAME = "first_name" }
"#;

/// A runner with the secrets the good file names: its source is the test's
/// own database, which `source_table` gives the good file's table (an
/// apply checks the query and its columns there).
pub fn runner(db: &TestDb) -> Syncward {
    Syncward::new(db, None)
        .with_secret("TEST_SOURCE_URL", &db.url)
        .with_secret("TEST_BREVO_KEY", "xkeysib-test")
}

/// The table the good file's query reads, empty.
pub async fn source_table(db: &TestDb) -> anyhow::Result<()> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS contacts (id bigint PRIMARY KEY, email text, first_name text)",
    )
    .execute(&db.pool)
    .await?;
    Ok(())
}

pub fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path)
}

async fn count(db: &TestDb, table: &str) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(&db.pool)
            .await?,
    )
}

#[tokio::test]
async fn each_bad_sync_file_exits_2_with_its_own_message_and_nothing_is_written()
-> anyhow::Result<()> {
    let db = TestDb::new().await?;
    source_table(&db).await?;
    let dir = tempfile::tempdir()?;
    let good = |from: &str, to: &str| GOOD_SYNC.replacen(from, to, 1);
    // (file text, the message it must produce)
    let cases: Vec<(String, &str)> = vec![
        (
            good("\"acme-contacts\"", "\"acme:contacts\""),
            "id: \"acme:contacts\" contains a colon; only a-z, 0-9, '-' and '_' are allowed",
        ),
        (
            good("\"acme-contacts\"", "\"acme contacts\""),
            "id: \"acme contacts\" contains a space",
        ),
        (
            good("\"acme-contacts\"", "\"Acme-Contacts\""),
            "id: \"Acme-Contacts\" contains upper case 'A'",
        ),
        (
            good("\"acme-contacts\"", "\"\""),
            "id: \"\" must not be empty",
        ),
        (
            good("schedule =", "timezone = \"Mars/Olympus\"\nschedule ="),
            "timezone: \"Mars/Olympus\" is not a time zone name; use an IANA name such as \"Europe/Paris\"",
        ),
        (
            good("schedule =", "catch_up = \"always\"\nschedule ="),
            "catch_up: unknown variant `always`, expected `once` or `skip`",
        ),
        (
            good("workspace = \"acme\"", "workspace = \"acme/eu\""),
            "workspace: \"acme/eu\" contains '/'",
        ),
        (
            good("kind = \"postgres\"", "kind = \"mysql\""),
            "source.kind: unknown kind `mysql`, expected one of `postgres`, `shopify`, `http`",
        ),
        (
            good("kind = \"brevo\"", "kind = \"mailchimp\""),
            "destination.kind: unknown kind `mailchimp`, expected `brevo` or `webhook`",
        ),
        (
            good("[mapping]\nemail = \"email\"\n", "[mapping]\n"),
            "mapping: missing field `email`",
        ),
        (
            GOOD_SYNC
                .split("[mapping]")
                .next()
                .unwrap_or_default()
                .to_string(),
            "missing field `mapping`",
        ),
        (
            good("\"0 */15 * * * *\"", "\"*/15 * * * *\""),
            "schedule: \"*/15 * * * *\" has 5 fields; a schedule needs 6",
        ),
        (
            good("\"0 */15 * * * *\"", "\"0 */15 * * * * * *\""),
            "schedule: \"0 */15 * * * * * *\" has 8 fields",
        ),
        (
            good("\"0 */15 * * * *\"", "\"@hourly\""),
            "schedule: @hourly is a shorthand; write its six fields (seconds first): \"0 0 * * * *\"",
        ),
        (
            good("\"0 */15 * * * *\"", "\"0 61 * * * *\""),
            "schedule: \"0 61 * * * *\": minute 61 is out of range (minute is 0–59)",
        ),
        (
            good("TEST_BREVO_KEY", "TEST_UNSET_BREVO_KEY"),
            "destination.api_key_env: TEST_UNSET_BREVO_KEY is not set in",
        ),
        (
            good(
                "api_key_env = \"TEST_BREVO_KEY\"",
                "api_key_env = \"xkeysib-abc123\"",
            ),
            "destination.api_key_env: \"xkeysib-abc123\" is not an environment variable name",
        ),
        (
            good(
                "api_key_env = \"TEST_BREVO_KEY\"",
                "api_key_env = \"SYNCWARD__HTTP__ADMIN_TOKEN\"",
            ),
            "destination.api_key_env: SYNCWARD__HTTP__ADMIN_TOKEN is a name of the daemon's own",
        ),
        (
            good(
                "url_env = \"TEST_SOURCE_URL\"",
                "url_env = \"SYNCWARD__DATABASE__URL\"",
            ),
            "source.url_env: SYNCWARD__DATABASE__URL is a name of the daemon's own",
        ),
        (
            good(
                "workspace = \"acme\"",
                "workspace = \"acme\"\ncolour = \"blue\"",
            ),
            "unknown field `colour`",
        ),
        (
            good("page_size = 500", "page_size = 0"),
            "source.page_size: 0 is out of range 1..=10000",
        ),
        (
            good("FROM contacts\"", "FROM contacts;\""),
            "source.query: must be one SELECT without a trailing ';'",
        ),
        (
            good("FROM contacts\"", "FROM contacts; DROP TABLE x\"")
                .replace("SELECT id", "DELETE id"),
            "source.query: must start with SELECT or WITH, not \"DELETE\"",
        ),
        (
            good("cursor_column = \"id\"", "cursor_column = \"id; drop\""),
            "source.cursor_column: \"id; drop\" is not a plain column name",
        ),
        (
            good("list_ids = [12]", "list_ids = []"),
            "destination.list_ids: bulk mode imports into lists",
        ),
        (
            good("page_size = 500", "page_size = 500\nbatch = 10"),
            "source.batch: unknown field `batch`",
        ),
        (
            good("schedule =", "breaker_failures = 0\nschedule ="),
            "breaker_failures: must be at least 1",
        ),
        (
            good("page_size = 500", "page_size = \"lots\""),
            "source.page_size: invalid type: string \"lots\", expected u32",
        ),
        (
            good("mode = \"bulk\"", "mode = \"turbo\""),
            "destination.mode: unknown value `turbo`, expected `bulk` or `single`",
        ),
        (
            good(
                "id = \"acme-contacts\"",
                "id = \"acme-contacts\"\nid = \"again\"",
            ),
            "line 3, column 1: not valid TOML: duplicate key",
        ),
        (
            good("http://127.0.0.1:9/v3", "https://user:pw@127.0.0.1:9/v3"),
            "destination.base_url: the URL holds a password (user:password@); give secrets by environment variable",
        ),
        (
            good("http://127.0.0.1:9/v3", "https://127.0.0.1:9/v3?api_key=X"),
            "destination.base_url: the URL has the query parameter \"api_key\", whose name looks like a secret",
        ),
        (
            good(
                "http://127.0.0.1:9/v3",
                "https://user:pw@127.0.0.1:99999/v3",
            ),
            "destination.base_url: invalid port number: \"[redacted]\"",
        ),
    ];
    let mut messages = Vec::new();
    for (i, (text, expected)) in cases.iter().enumerate() {
        let path = write(dir.path(), &format!("bad-{i}.toml"), text)?;
        let out = runner(&db)
            .run(&["sync", "apply", path.to_str().unwrap_or_default()])
            .await?;
        assert_eq!(out.code, 2, "case {i} ({expected}): {out:?}");
        let line = out.stderr.trim_end().to_string();
        assert_eq!(line.lines().count(), 1, "case {i}: not one line: {line}");
        assert!(
            line.starts_with(&format!("error: {}: ", path.display())),
            "case {i}: file not named: {line}"
        );
        assert!(
            line.contains(expected),
            "case {i}: expected {expected:?} in {line}"
        );
        assert!(
            !line.contains("user:pw") && !line.contains("=X"),
            "case {i}: a credential is echoed: {line}"
        );
        messages.push(
            line.split_once(".toml: ")
                .map(|(_, m)| m.to_string())
                .unwrap_or_default(),
        );
    }
    let distinct: std::collections::HashSet<_> = messages.iter().collect();
    assert_eq!(
        distinct.len(),
        messages.len(),
        "two cases share a message: {messages:#?}"
    );
    assert_eq!(count(&db, "syncs").await?, 0);
    assert_eq!(count(&db, "workspaces").await?, 0);
    assert_eq!(count(&db, "audit_log").await?, 0);
    Ok(())
}

#[tokio::test]
async fn one_bad_file_in_an_apply_publishes_none_of_them() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    source_table(&db).await?;
    let dir = tempfile::tempdir()?;
    let first = write(dir.path(), "a.toml", GOOD_SYNC)?;
    let second = write(
        dir.path(),
        "b.toml",
        &GOOD_SYNC.replace("acme-contacts", "acme-leads"),
    )?;
    let bad = write(
        dir.path(),
        "c.toml",
        &GOOD_SYNC.replace("acme-contacts", "acme:bad"),
    )?;
    let args = |files: &[&PathBuf]| {
        let mut v = vec!["sync".to_string(), "apply".to_string()];
        v.extend(files.iter().map(|p| p.display().to_string()));
        v
    };
    let a = args(&[&first, &second, &bad]);
    let out = runner(&db)
        .run(&a.iter().map(String::as_str).collect::<Vec<_>>())
        .await?;
    assert_eq!(out.code, 2);
    assert!(
        out.stderr
            .contains("c.toml: id: \"acme:bad\" contains a colon"),
        "{}",
        out.stderr
    );
    assert_eq!(count(&db, "syncs").await?, 0);

    // Two files with one id: refused as a duplicate, nothing written.
    let copy = write(dir.path(), "a-copy.toml", GOOD_SYNC)?;
    let a = args(&[&first, &copy]);
    let out = runner(&db)
        .run(&a.iter().map(String::as_str).collect::<Vec<_>>())
        .await?;
    assert_eq!(out.code, 2);
    assert!(
        out.stderr.contains(
            "a-copy.toml: id \"acme-contacts\": appears in more than one file of this apply"
        ),
        "{}",
        out.stderr
    );
    assert_eq!(count(&db, "syncs").await?, 0);

    let a = args(&[&first, &second]);
    runner(&db)
        .run(&a.iter().map(String::as_str).collect::<Vec<_>>())
        .await?
        .ok()?;
    assert_eq!(count(&db, "syncs").await?, 2);
    assert_eq!(count(&db, "workspaces").await?, 1);
    Ok(())
}

#[tokio::test]
async fn every_example_sync_file_in_config_syncs_is_valid() -> anyhow::Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/syncs");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path)?;
            syncward::config::SyncDefinition::parse(&path.display().to_string(), &text)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            seen += 1;
        }
    }
    assert!(seen >= 3, "postgres, shopify and http examples");
    Ok(())
}

/// `apply` and `--plan` run the same checks and agree: what a run would
/// fail on at the source — a query that does not parse, a cursor column or
/// a mapped field the query does not return, a secret the workspace lacks
/// — is refused by both with exit 2 and one line naming the field; nothing
/// is published. A source that cannot be reached from here is refused
/// too, saying how to publish anyway, and `--no-source-check` does.
#[tokio::test(flavor = "multi_thread")]
async fn apply_and_plan_refuse_alike_what_a_run_would_fail_on() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    source_table(&db).await?;
    let dir = tempfile::tempdir()?;
    let cli = runner(&db);
    for (text, expected) in [
        (
            GOOD_SYNC.replace("FROM contacts", "FORM contacts"),
            "acme.toml: source.query: ",
        ),
        (
            GOOD_SYNC.replace("cursor_column = \"id\"", "cursor_column = \"updated\""),
            "acme.toml: source.cursor_column: \"updated\" is not among the query's columns (id, email, first_name)",
        ),
        (
            GOOD_SYNC.replace("FIRSTNAME = \"first_name\"", "FIRSTNAME = \"given_name\""),
            "acme.toml: mapping.attributes.FIRSTNAME: \"given_name\" is not among the query's columns",
        ),
        (
            GOOD_SYNC.replace("TEST_BREVO_KEY", "TEST_MISSING_KEY"),
            "acme.toml: destination.api_key_env: TEST_MISSING_KEY is not set in",
        ),
    ] {
        let path = write(dir.path(), "acme.toml", &text)?;
        let file = path.display().to_string();
        for args in [
            vec!["sync", "apply", "--plan", file.as_str()],
            vec!["sync", "apply", file.as_str()],
        ] {
            let out = cli.run(&args).await?;
            assert_eq!(out.code, 2, "{args:?}: {out:?}");
            assert!(out.stderr.contains(expected), "{args:?}: {}", out.stderr);
            assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
        }
        assert_eq!(count(&db, "syncs").await?, 0, "nothing was published");
    }
    // A source this machine cannot reach: refused, with the way out.
    let unreachable = cli
        .clone()
        .with_secret("TEST_SOURCE_URL", "postgres://reader@127.0.0.1:9/warehouse");
    let path = write(dir.path(), "acme.toml", GOOD_SYNC)?;
    let file = path.display().to_string();
    let out = unreachable.run(&["sync", "apply", &file]).await?;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("--no-source-check"), "{}", out.stderr);
    unreachable
        .run(&["sync", "apply", "--no-source-check", &file])
        .await?
        .ok()?;
    assert_eq!(count(&db, "syncs").await?, 1);
    Ok(())
}

/// A cursor column the query does not return, published anyway: the run and
/// the preview say so in the sync file's words (`source.cursor_column`),
/// never in the page statement's (`column q.updated does not exist`).
#[tokio::test(flavor = "multi_thread")]
async fn a_missing_cursor_column_is_named_by_its_key_in_a_run_and_a_preview() -> anyhow::Result<()>
{
    let db = TestDb::new().await?;
    source_table(&db).await?;
    let dir = tempfile::tempdir()?;
    let cli = runner(&db);
    let text = GOOD_SYNC.replace("cursor_column = \"id\"", "cursor_column = \"updated\"");
    let path = write(dir.path(), "acme.toml", &text)?;
    cli.run(&[
        "sync",
        "apply",
        "--no-source-check",
        &path.display().to_string(),
    ])
    .await?
    .ok()?;
    let preview = cli.run(&["sync", "preview", "acme-contacts"]).await?;
    assert_ne!(preview.code, 0, "{preview:?}");
    let said = format!("{}{}", preview.stdout, preview.stderr);
    assert!(
        said.contains("source.cursor_column: \"updated\" is not among the columns of source.query")
            && !said.contains("q.updated"),
        "{said}"
    );
    Ok(())
}
