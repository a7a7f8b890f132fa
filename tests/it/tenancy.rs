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

/// Workspace tokens need an admin token: without one, anonymous readers
/// would be the admin. `token create` refuses, the daemon refuses to start,
/// and a token created behind a running daemon's back closes the anonymous
/// view at once.
#[tokio::test(flavor = "multi_thread")]
async fn anonymous_readers_never_see_every_workspace_once_workspace_tokens_exist()
-> anyhow::Result<()> {
    crate::helpers::install_crypto();
    let s = Scenario::new(SyncOptions::default()).await?;
    let create = ["token", "create", "--workspace", "acme"];
    let out = s.cli.run(&create).await?;
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("http.admin_token"), "{}", out.stderr);

    // No token yet: a daemon without an admin token serves anonymous reads.
    let mut daemon = crate::helpers::daemon::DaemonProcess::spawn(&s.cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);
    let http = reqwest::Client::new();
    let status = |path: &'static str| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            anyhow::Ok(
                http.get(format!("{base}{path}"))
                    .send()
                    .await?
                    .status()
                    .as_u16(),
            )
        }
    };
    assert_eq!(status("/api/syncs").await?, 200);
    // A token made by a CLI that has an admin token, behind the daemon's back.
    let admin_cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", ADMIN_TOKEN);
    admin_cli.run(&create).await?.ok()?;
    for path in [
        "/api/syncs",
        "/",
        "/api/syncs/acme-contacts",
        "/syncs/acme-contacts",
    ] {
        assert_eq!(status(path).await?, 401, "{path}");
    }
    daemon.signal("TERM")?;
    daemon.wait(std::time::Duration::from_secs(30)).await?;

    // Restarted without an admin token, it refuses to start, in one line.
    let out = s.cli.run(&["run"]).await?;
    assert_eq!(out.code, 2, "{out:?}");
    let line = out.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.contains("http.admin_token") && line.contains("1 workspace token"),
        "{line}"
    );
    Ok(())
}

/// `/metrics` labels every workspace's syncs: once a token is set it needs
/// the scrape token or the admin token; `/readyz` says ready or not and
/// names no sync.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_need_the_scrape_token_and_readiness_names_no_sync() -> anyhow::Result<()> {
    crate::helpers::install_crypto();
    let s = Scenario::new(SyncOptions::default()).await?;
    let scrape = "scrape-token-0123456789abcdef0123456789";
    s.run_foreground().await?.ok()?;
    let cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", ADMIN_TOKEN)
        .with_env("SYNCWARD__HTTP__METRICS_TOKEN", scrape);
    let mut daemon = crate::helpers::daemon::DaemonProcess::spawn(&cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);
    let http = reqwest::Client::new();
    let metrics = |token: Option<&str>| {
        let mut request = http.get(format!("{base}/metrics"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move {
            let answer = request.send().await?;
            anyhow::Ok((answer.status().as_u16(), answer.text().await?))
        }
    };
    assert_eq!(metrics(None).await?.0, 401);
    assert_eq!(
        metrics(Some("not-the-token-0123456789abcdef012345"))
            .await?
            .0,
        401
    );
    for token in [scrape, ADMIN_TOKEN] {
        let (status, text) = metrics(Some(token)).await?;
        assert_eq!(status, 200);
        assert!(text.contains("syncward_build_info"), "{text}");
    }
    // The scrape token opens nothing else.
    let api = http
        .get(format!("{base}/api/syncs"))
        .bearer_auth(scrape)
        .send()
        .await?;
    assert_eq!(api.status().as_u16(), 401);
    let ready = http.get(format!("{base}/readyz")).send().await?;
    assert_eq!(ready.status().as_u16(), 200);
    let body = ready.text().await?;
    assert!(!body.contains(SYNC_ID) && !body.contains("acme"), "{body}");
    daemon.signal("TERM")?;
    daemon.wait(std::time::Duration::from_secs(30)).await?;
    Ok(())
}

/// The audit log says which token made a change; a sync id belongs to its
/// workspace (another workspace's file naming it is refused), and a run
/// belongs to its sync's workspace as it is now, so a sync moved with
/// `sync move` takes its runs along.
#[tokio::test(flavor = "multi_thread")]
async fn the_audit_log_names_the_token_and_only_a_move_takes_a_sync_and_its_runs_elsewhere()
-> anyhow::Result<()> {
    crate::helpers::install_crypto();
    let s = Scenario::new(SyncOptions::default()).await?;
    let cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", ADMIN_TOKEN);
    let token = |workspace: &'static str| {
        let cli = cli.clone();
        async move {
            let out = cli
                .run(&["token", "create", "--workspace", workspace, "--json"])
                .await?
                .ok()?
                .json()?;
            anyhow::Ok((
                out["token"].as_str().unwrap_or_default().to_string(),
                out["id"].as_i64().unwrap_or_default(),
            ))
        }
    };
    let (acme, acme_id) = token("acme").await?;
    s.run_foreground().await?.ok()?;
    let run_id = s.last_run().await?["id"].as_i64().unwrap_or_default();
    let mut daemon = crate::helpers::daemon::DaemonProcess::spawn(&cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);
    let http = reqwest::Client::new();
    let post = |path: String, bearer: &str| {
        http.post(format!("{base}{path}"))
            .bearer_auth(bearer)
            .send()
    };
    let pause = format!("/api/syncs/{SYNC_ID}/pause");
    let resume = format!("/api/syncs/{SYNC_ID}/resume");
    assert_eq!(post(pause.clone(), &acme).await?.status().as_u16(), 200);
    assert_eq!(post(resume, ADMIN_TOKEN).await?.status().as_u16(), 200);
    cli.clone()
        .with_env("SUDO_USER", "alice")
        .run(&["sync", "pause", SYNC_ID])
        .await?
        .ok()?;
    let actors: Vec<String> = sqlx::query_scalar(
        "SELECT actor FROM audit_log WHERE sync_id = $1 ORDER BY id DESC LIMIT 3",
    )
    .bind(SYNC_ID)
    .fetch_all(&s.db.pool)
    .await?;
    assert_eq!(
        actors,
        [
            "cli:alice".to_string(),
            "api:admin".into(),
            format!("api:token:{acme_id}")
        ]
    );

    // A file of globex's naming acme's sync id is refused, plan and apply;
    // only `sync move` moves it, and its earlier run goes with it.
    let path = s.dir.path().join("sync.toml");
    let taken = std::fs::read_to_string(&path)?.replacen(
        "workspace = \"acme\"",
        "workspace = \"globex\"",
        1,
    );
    std::fs::write(&path, taken)?;
    let file = path.display().to_string();
    for args in [
        vec!["sync", "apply", "--plan", file.as_str()],
        vec!["sync", "apply", file.as_str()],
    ] {
        let out = cli.run(&args).await?;
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert!(
            out.stderr.contains("belongs to workspace acme") && out.stderr.lines().count() == 1,
            "{}",
            out.stderr
        );
    }
    let show = cli
        .run(&["sync", "show", SYNC_ID, "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(show["sync"]["workspace_id"], "acme", "{show}");
    let moved = cli
        .run(&["sync", "move", SYNC_ID, "--workspace", "globex", "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(moved["from"], "acme", "{moved}");
    assert_eq!(moved["runs"], 1, "{moved}");
    // The file now agrees with the store: it applies.
    cli.run(&["sync", "apply", &file]).await?.ok()?;
    let (globex, _) = token("globex").await?;
    let run = |bearer: String| {
        http.get(format!("{base}/api/runs/{run_id}"))
            .bearer_auth(bearer)
            .send()
    };
    assert_eq!(run(acme.clone()).await?.status().as_u16(), 404);
    assert_eq!(run(globex.clone()).await?.status().as_u16(), 200);
    assert_eq!(post(pause, &acme).await?.status().as_u16(), 404);
    daemon.signal("TERM")?;
    daemon.wait(std::time::Duration::from_secs(30)).await?;
    Ok(())
}

/// A sync file pointing at an address inside the network: refused at apply
/// unless `outbound.allow` lists it; the daemon's own admin address always.
#[tokio::test(flavor = "multi_thread")]
async fn a_sync_cannot_target_inside_addresses_or_the_daemon_itself() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let source = "kind = \"postgres\"\nurl_env = \"TEST_SOURCE_URL\"\nquery = \"SELECT id, email, first_name FROM contacts\"\ncursor_column = \"id\"";
    let path = s.dir.path().join("inside.toml");
    let apply = |cli: crate::helpers::Syncward, destination: String| {
        let path = path.clone();
        async move {
            std::fs::write(&path, sync_file(source, &destination))?;
            cli.run(&["sync", "apply", &path.display().to_string()])
                .await
        }
    };
    let webhook = |url: &str| format!("kind = \"webhook\"\nurl = \"{url}\"");
    // The cloud metadata service, allowed loopback or not.
    let out = apply(
        s.cli.clone(),
        "kind = \"brevo\"\napi_key_env = \"TEST_BREVO_KEY\"\nbase_url = \"http://169.254.169.254/v3\"\nmode = \"bulk\"\nlist_ids = [1]".into(),
    )
    .await?;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("destination.base_url") && out.stderr.contains("link-local"),
        "{}",
        out.stderr
    );
    // The daemon's own admin address (http.listen), even with loopback allowed.
    let out = apply(
        s.cli.clone(),
        webhook("http://127.0.0.1:8080/api/syncs/x/pause"),
    )
    .await?;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("own admin address"), "{}", out.stderr);
    // Loopback by name, with nothing allowed: the source's database and the
    // receiver are both refused.
    let strict = s.cli.clone().with_env("SYNCWARD__OUTBOUND__ALLOW", "");
    let out = apply(strict, webhook("http://localhost:9/hook")).await?;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("loopback"), "{}", out.stderr);
    Ok(())
}

/// The check that counts is at connect time, on the address connected to:
/// a sync published while its receiver was allowed reaches nothing inside
/// once it is not, and its run fails as a setting to fix, not an outage to
/// retry.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_refuses_an_inside_address_it_was_once_allowed() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let receiver = crate::fakes::webhook::WebhookReceiver::start().await?;
    let source = "kind = \"postgres\"\nurl_env = \"TEST_SOURCE_URL\"\nquery = \"SELECT id, email, first_name FROM contacts\"\ncursor_column = \"id\"";
    let path = s.dir.path().join("rebind.toml");
    std::fs::write(
        &path,
        sync_file(
            source,
            &format!("kind = \"webhook\"\nurl = \"{}\"", receiver.url),
        ),
    )?;
    s.cli
        .run(&["sync", "apply", &path.display().to_string()])
        .await?
        .ok()?;
    let strict = s.cli.clone().with_env("SYNCWARD__OUTBOUND__ALLOW", "");
    let out = strict
        .run(&["sync", "run", "hostile", "--foreground"])
        .await?;
    assert_ne!(out.code, 0, "{out:?}");
    let runs = strict
        .run(&["runs", "list", "--sync", "hostile", "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(runs[0]["failure_code"], "config_invalid", "{runs}");
    let detail = runs[0]["failure_detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("destination.url") && detail.contains("outbound.allow"),
        "{detail}"
    );
    assert!(receiver.received().is_empty(), "{:?}", receiver.received());
    Ok(())
}

/// A name is checked on what it resolves to when the connection is made
/// (the connectors' client resolves through the policy), so a name that
/// resolved elsewhere when a sync was applied and to loopback now (DNS
/// rebinding) is refused, and the refusal is told apart from an outage.
#[tokio::test(flavor = "multi_thread")]
async fn a_name_resolving_inside_at_connect_time_is_refused() -> anyhow::Result<()> {
    crate::helpers::install_crypto();
    let receiver = crate::fakes::webhook::WebhookReceiver::start().await?;
    let by_name = receiver.url.replacen("127.0.0.1", "localhost", 1);
    syncward::outbound::policy::install(syncward::outbound::OutboundPolicy::default());
    let client = syncward::outbound::http_client(&url::Url::parse(&by_name)?)?;
    let err = client
        .post(&by_name)
        .body("{}")
        .send()
        .await
        .expect_err("refused");
    let why = syncward::outbound::policy::refused(&err).unwrap_or_default();
    assert!(
        why.contains("localhost") && why.contains("loopback"),
        "{why}"
    );
    // Listed by name, the same client reaches it.
    let allowed = syncward::outbound::OutboundPolicy::new(&["localhost".into()], None)
        .map_err(anyhow::Error::msg)?;
    syncward::outbound::policy::install(allowed);
    let answer = client.post(&by_name).body("{}").send().await?;
    assert!(answer.status().is_success(), "{}", answer.status());
    assert_eq!(receiver.received().len(), 1);
    Ok(())
}
