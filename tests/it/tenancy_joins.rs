//! A workspace reaches only its own at the joins between parts too: the
//! resolver and the port, IPv4 inside IPv6, the environment's proxy and
//! `PG*` variables, the secrets parser, erasure, sync ids. Each attack is
//! performed against the real binary and seen to fail, with nothing
//! reaching the other side.

use crate::fakes::brevo::BrevoFake;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

const ADMIN_TOKEN: &str = "admin-token-0123456789abcdef0123456789";

/// A Brevo key holding `$`, `${…}` naming the daemon's admin token, quotes
/// and `#`: what a workspace's secrets file says is what Brevo receives,
/// quoted or not, and no variable of the daemon's is expanded into it.
#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_secret_is_read_literally_and_never_expanded() -> anyhow::Result<()> {
    let key = "k${SYNCWARD__HTTP__ADMIN_TOKEN}$HOME\"q'#h";
    let s = Scenario::new(SyncOptions {
        rows: 5,
        ..SyncOptions::default()
    })
    .await?;
    let fake = BrevoFake::start(key).await?;
    s.publish_with_destination(
        100,
        &format!(
            "kind = \"brevo\"\napi_key_env = \"TEST_BREVO_KEY\"\nbase_url = \"{}\"\nmode = \"bulk\"\nlist_ids = [12]",
            fake.base_url
        ),
    )
    .await?;
    let secrets = tempfile::tempdir()?;
    let run = |line: String| {
        let cli = s
            .cli
            .clone()
            .with_env(
                "SYNCWARD__SECRETS__DIR",
                &secrets.path().display().to_string(),
            )
            .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", ADMIN_TOKEN);
        let file = secrets.path().join("acme.env");
        let source = format!("TEST_SOURCE_URL={}\n", s.db.url);
        async move {
            std::fs::write(&file, format!("{source}{line}\n"))?;
            cli.run(&["sync", "resync", SYNC_ID]).await?.ok()?;
            cli.run(&["sync", "run", SYNC_ID, "--foreground"])
                .await?
                .ok()
        }
    };
    run(format!("TEST_BREVO_KEY={key}")).await?;
    run(format!("TEST_BREVO_KEY=\"{key}\"")).await?;
    let requests = fake.requests();
    assert!(requests.len() >= 2, "{requests:?}");
    for request in &requests {
        assert_eq!(request.api_key.as_deref(), Some(key), "{request:?}");
        assert_eq!(request.status / 100, 2, "{request:?}");
    }
    assert_eq!(fake.contacts().len(), 5);
    Ok(())
}

/// A sync file of workspace `workspace`, id `id`, reading the scenario's
/// contacts and sending them to `destination` (a `[destination]` body).
fn sync_file(id: &str, workspace: &str, destination: &str) -> String {
    format!(
        r#"id = "{id}"
workspace = "{workspace}"
schedule = "0 0 0 29 2 *"

[source]
kind = "postgres"
url_env = "TEST_SOURCE_URL"
query = "SELECT id, email, first_name FROM contacts"
cursor_column = "id"

[destination]
{destination}

[mapping]
email = "email"
attributes = {{ FIRSTNAME = "first_name" }}
"#
    )
}

fn webhook(url: &str) -> String {
    format!("kind = \"webhook\"\nurl = \"{url}\"")
}

/// Writes `text` as `name` in the scenario's folder and applies it.
async fn apply(
    s: &Scenario,
    cli: &crate::helpers::Syncward,
    name: &str,
    text: &str,
) -> anyhow::Result<crate::helpers::cli::Outcome> {
    let path = s.dir.path().join(name);
    std::fs::write(&path, text)?;
    cli.run(&["sync", "apply", &path.display().to_string()])
        .await
}

/// The daemon's own admin address is refused whatever names it: `localhost`
/// and every spelling of the loopback address, with loopback allowed. The
/// CLI that applies does not know the port the daemon bound (its config
/// says port 0), so the files are published; the daemon's runs then refuse
/// each at connect time, with the port the request goes to, before a byte
/// is sent. A CLI whose config names the port refuses the name at apply.
#[tokio::test(flavor = "multi_thread")]
async fn the_daemons_own_address_is_refused_by_name_and_by_every_spelling() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 3,
        ..SyncOptions::default()
    })
    .await?;
    let cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", ADMIN_TOKEN)
        .with_env("SYNCWARD__OUTBOUND__ALLOW", "127.0.0.1,localhost");
    let daemon = crate::helpers::daemon::DaemonProcess::spawn(&cli).await?;
    let address = daemon.http_address().await?;
    let port = address.rsplit(':').next().unwrap_or_default().to_string();
    let spellings = [
        format!("http://localhost:{port}/hook"),
        format!("http://LocalHost:{port}/hook"),
        format!("http://127.1:{port}/hook"),
        format!("http://0x7f.0.0.1:{port}/hook"),
        format!("http://2130706433:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        format!("http://localhost:0{port}/hook"),
    ];
    for (i, url) in spellings.iter().enumerate() {
        let id = format!("own-{i}");
        apply(&s, &cli, "own.toml", &sync_file(&id, "acme", &webhook(url)))
            .await?
            .ok()?;
        cli.run(&["sync", "run", &id]).await?.ok()?;
    }
    for (i, spelling) in spellings.iter().enumerate() {
        let id = format!("own-{i}");
        let last = std::sync::Arc::new(std::sync::Mutex::new(serde_json::Value::Null));
        crate::helpers::daemon::eventually(
            std::time::Duration::from_secs(60),
            "the run's end",
            || {
                let cli = cli.clone();
                let id = id.clone();
                let last = last.clone();
                async move {
                    let runs = cli
                        .run(&["runs", "list", "--sync", &id, "--json"])
                        .await?
                        .ok()?
                        .json()?;
                    let done = runs[0]["status"] == "failed";
                    *last.lock().unwrap_or_else(|e| e.into_inner()) = runs[0].clone();
                    Ok(done)
                }
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}: {}", daemon.log_tail()))?;
        let last = last.lock().unwrap_or_else(|e| e.into_inner()).clone();
        assert_eq!(last["failure_code"], "config_invalid", "{spelling}: {last}");
        let detail = last["failure_detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("own admin address") && detail.contains(&port),
            "{spelling}: {detail}"
        );
    }
    // Knowing the port, apply refuses the name too.
    let knowing = cli.clone().with_env("SYNCWARD__HTTP__LISTEN", &address);
    let out = apply(
        &s,
        &knowing,
        "own.toml",
        &sync_file("own-by-name", "acme", &webhook(&spellings[0])),
    )
    .await?;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("own admin address"), "{}", out.stderr);
    daemon.signal("TERM")?;
    let mut daemon = daemon;
    daemon.wait(std::time::Duration::from_secs(30)).await?;
    Ok(())
}

/// An inside IPv4 address wrapped in IPv6 is judged as the address it
/// carries: the cloud metadata address through NAT64, 6to4 and Teredo,
/// loopback as IPv4-compatible, and IPv6 ranges that are not global
/// (site-local, documentation), are all refused at apply with nothing
/// allowed but the source database.
#[tokio::test(flavor = "multi_thread")]
async fn inside_addresses_wrapped_in_ipv6_are_refused() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 3,
        ..SyncOptions::default()
    })
    .await?;
    // Only the source database is allowed.
    let strict = s
        .cli
        .clone()
        .with_env("SYNCWARD__OUTBOUND__ALLOW", "127.0.0.1/32");
    for (url, carried) in [
        ("http://[64:ff9b::a9fe:a9fe]/hook", "169.254.169.254"),
        ("http://[64:ff9b:1::a9fe:a9fe]/hook", "local-use NAT64"),
        ("http://[::a9fe:a9fe]/hook", "169.254.169.254"),
        ("http://[::10.0.0.1]/hook", "10.0.0.1"),
        ("http://[::ffff:0:a9fe:a9fe]/hook", "169.254.169.254"),
        ("http://[2002:a9fe:a9fe::]/hook", "169.254.169.254"),
        (
            "http://[2001:0:4136:e378:8000:63bf:5601:5601]/hook",
            "169.254.169.254",
        ),
        ("http://[fec0::1]/hook", "site-local"),
        ("http://[2001:db8::1]/hook", "documentation"),
    ] {
        let out = apply(
            &s,
            &strict,
            "wrapped.toml",
            &sync_file("wrapped", "acme", &webhook(url)),
        )
        .await?;
        assert_eq!(out.code, 2, "{url}: {out:?}");
        assert!(
            out.stderr.contains("destination.url")
                && out.stderr.contains(carried)
                && out.stderr.contains("outbound.allow"),
            "{url}: {}",
            out.stderr
        );
    }
    Ok(())
}

/// A proxy in the daemon's environment is not used by the connectors: a
/// proxy would resolve the target itself, and the outbound policy would
/// only ever see the proxy's address. With every proxy variable pointing at
/// a listener, the records reach the receiver directly and the listener is
/// never connected to.
#[tokio::test(flavor = "multi_thread")]
async fn a_proxy_in_the_environment_is_not_used() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 3,
        ..SyncOptions::default()
    })
    .await?;
    let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let proxy_url = format!("http://{}", proxy.local_addr()?);
    let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = connections.clone();
    let listener = tokio::spawn(async move {
        while let Ok((_conn, _)) = proxy.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let receiver = crate::fakes::webhook::WebhookReceiver::start().await?;
    apply(
        &s,
        &s.cli,
        "proxied.toml",
        &sync_file("proxied", "acme", &webhook(&receiver.url)),
    )
    .await?
    .ok()?;
    let mut cli = s.cli.clone();
    for var in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ] {
        cli = cli.with_env(var, &proxy_url);
    }
    cli.run(&["sync", "run", "proxied", "--foreground"])
        .await?
        .ok()?;
    let delivered: usize = receiver
        .received()
        .iter()
        .map(|post| post.records().len())
        .sum();
    assert_eq!(delivered, 3, "{:?}", receiver.received());
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 0);
    listener.abort();
    Ok(())
}

/// A Postgres server that asks every client for a cleartext password and
/// records what it is sent (the startup's user, then the password), then
/// refuses it. It answers an SSL request with "no".
async fn password_catcher() -> anyhow::Result<(
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let mut len = [0u8; 4];
                // The startup message, after an SSL request if one comes.
                let mut startup = loop {
                    conn.read_exact(&mut len).await?;
                    let mut body = vec![0u8; u32::from_be_bytes(len) as usize - 4];
                    conn.read_exact(&mut body).await?;
                    if body[..4] == 80_877_103u32.to_be_bytes() {
                        conn.write_all(b"N").await?;
                        continue;
                    }
                    break body;
                };
                startup.drain(..4);
                let fields: Vec<String> = startup
                    .split(|b| *b == 0)
                    .map(|f| String::from_utf8_lossy(f).into_owned())
                    .collect();
                let user = fields
                    .iter()
                    .position(|f| f == "user")
                    .and_then(|i| fields.get(i + 1))
                    .cloned()
                    .unwrap_or_default();
                // AuthenticationCleartextPassword.
                conn.write_all(&[b'R', 0, 0, 0, 8, 0, 0, 0, 3]).await?;
                let mut tag = [0u8; 1];
                conn.read_exact(&mut tag).await?;
                conn.read_exact(&mut len).await?;
                let mut password = vec![0u8; u32::from_be_bytes(len) as usize - 4];
                conn.read_exact(&mut password).await?;
                password.pop();
                record
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(format!("{user}:{}", String::from_utf8_lossy(&password)));
                // ErrorResponse: FATAL 28P01 invalid_password.
                let mut error = Vec::new();
                for (code, text) in [
                    (b'S', "FATAL"),
                    (b'C', "28P01"),
                    (b'M', "password authentication failed"),
                ] {
                    error.push(code);
                    error.extend_from_slice(text.as_bytes());
                    error.push(0);
                }
                error.push(0);
                let mut message = vec![b'E'];
                message.extend_from_slice(&(error.len() as u32 + 4).to_be_bytes());
                message.extend_from_slice(&error);
                conn.write_all(&message).await?;
                anyhow::Ok(())
            });
        }
    });
    Ok((address, seen))
}

/// A source connects with what its sync names and nothing of the daemon's:
/// a URL without a password, at a server that asks for one, is sent none —
/// not the daemon's `PGPASSWORD`, not its `.pgpass` — and the daemon's
/// `PGUSER`, `PGDATABASE` and `PGSSLMODE` change nothing. What sqlx would
/// take and cannot be told not to (`PGOPTIONS`, `PGSSLCERT`, `PGSSLKEY`,
/// `PGSSLROOTCERT`) is refused with one line before any connection.
#[tokio::test(flavor = "multi_thread")]
async fn a_postgres_source_takes_nothing_from_the_daemons_environment() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 3,
        ..SyncOptions::default()
    })
    .await?;
    let (address, seen) = password_catcher().await?;
    let home = tempfile::tempdir()?;
    let pgpass = home.path().join(".pgpass");
    std::fs::write(&pgpass, "*:*:*:*:pgpass-secret\n")?;
    // libpq and sqlx ignore a .pgpass others can read.
    std::fs::set_permissions(&pgpass, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    let receiver = crate::fakes::webhook::WebhookReceiver::start().await?;
    let cli = s
        .cli
        .clone()
        .with_workspace_secret(
            "acme",
            "CATCHER_URL",
            &format!("postgres://tenant@{address}/tenantdb?sslmode=disable"),
        )
        .with_env("PGPASSWORD", "daemon-secret")
        .with_env("PGUSER", "daemon-user")
        .with_env("PGDATABASE", "daemon-db")
        .with_env("PGSSLMODE", "require")
        .with_env("HOME", &home.path().display().to_string())
        .with_env("PGPASSFILE", &pgpass.display().to_string());
    let file = sync_file("catcher", "acme", &webhook(&receiver.url))
        .replace("TEST_SOURCE_URL", "CATCHER_URL");
    // The catcher refuses every login: published without the source check.
    let path = s.dir.path().join("catcher.toml");
    std::fs::write(&path, &file)?;
    cli.run(&[
        "sync",
        "apply",
        "--no-source-check",
        &path.display().to_string(),
    ])
    .await?
    .ok()?;
    let out = cli.run(&["sync", "run", "catcher", "--foreground"]).await?;
    assert_ne!(out.code, 0, "{out:?}");
    let seen_now = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(
        !seen_now.is_empty(),
        "the run never reached the server: {out:?}"
    );
    for login in &seen_now {
        assert_eq!(login, "tenant:", "{seen_now:?}");
    }
    // Server options in the environment (sqlx cannot unset them, as it
    // cannot a client certificate): refused, nothing connects. (The store,
    // the operator's own, still takes them.)
    let before = seen_now.len();
    let certified = cli.clone().with_env("PGOPTIONS", "-c work_mem=8MB");
    let out = certified
        .run(&["sync", "run", "catcher", "--foreground"])
        .await?;
    assert_ne!(out.code, 0, "{out:?}");
    let runs = certified
        .run(&["runs", "list", "--sync", "catcher", "--json"])
        .await?
        .ok()?
        .json()?;
    let detail = runs[0]["failure_detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("CATCHER_URL") && detail.contains("PGOPTIONS") && !detail.contains('\n'),
        "{detail}"
    );
    assert_eq!(seen.lock().unwrap_or_else(|e| e.into_inner()).len(), before);
    assert!(receiver.received().is_empty());
    Ok(())
}

/// An erasure stays in its workspace: with two workspaces holding syncs,
/// `forget --destination` must be told whose request it is (refused with
/// one line otherwise, nothing touched), and then asks the Brevo accounts
/// of that workspace's syncs — the one an earlier version wrote to as
/// well — and never the other workspace's host.
#[tokio::test(flavor = "multi_thread")]
async fn an_erasure_reaches_only_the_accounts_of_its_workspace() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 10,
        ..SyncOptions::default()
    })
    .await?;
    let earlier = BrevoFake::start(crate::helpers::scenario::BREVO_KEY).await?;
    let other = BrevoFake::start("globex-key").await?;
    let brevo = |base: &str, key_env: &str| {
        format!(
            "kind = \"brevo\"\napi_key_env = \"{key_env}\"\nbase_url = \"{base}\"\nmode = \"bulk\"\nlist_ids = [12]"
        )
    };
    // acme's sync wrote to `earlier` in an earlier version, then to its
    // own fake again.
    s.publish_with_destination(100, &brevo(&earlier.base_url, "TEST_BREVO_KEY"))
        .await?;
    s.publish(&SyncOptions::default()).await?;
    s.run_foreground().await?.ok()?;
    let cli = s
        .cli
        .clone()
        .with_workspace_secret("globex", "GLOBEX_KEY", "globex-key");
    apply(
        &s,
        &cli,
        "globex.toml",
        &sync_file(
            "globex-contacts",
            "globex",
            &brevo(&other.base_url, "GLOBEX_KEY"),
        ),
    )
    .await?
    .ok()?;
    cli.run(&["sync", "run", "globex-contacts", "--foreground"])
        .await?
        .ok()?;
    assert!(other.contacts().contains_key("user7@example.com"));

    let out = cli
        .run(&["forget", "user7@example.com", "--destination"])
        .await?;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(
        out.stderr.contains("--workspace") && out.stderr.trim().lines().count() == 1,
        "{}",
        out.stderr
    );
    let rejected: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'forget'")
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(rejected, 0, "nothing was forgotten yet");

    let done = cli
        .run(&[
            "forget",
            "user7@example.com",
            "--workspace",
            "acme",
            "--destination",
            "--json",
        ])
        .await?
        .ok()?
        .json()?;
    assert_eq!(done["workspace"], "acme", "{done}");
    let deletes = |fake: &BrevoFake| {
        fake.requests()
            .into_iter()
            .filter(|r| r.method == "DELETE")
            .map(|r| r.path)
            .collect::<Vec<_>>()
    };
    assert_eq!(deletes(&s.fake), ["/v3/contacts/user7@example.com"]);
    assert_eq!(deletes(&earlier), ["/v3/contacts/user7@example.com"]);
    assert!(deletes(&other).is_empty(), "{:?}", deletes(&other));
    assert!(other.contacts().contains_key("user7@example.com"));
    Ok(())
}

/// A failure detail that quotes a record (a Postgres cast error names the
/// value it could not cast: an address) reaches the journal and Sentry
/// with the address masked; the run's page, which only the workspace sees
/// and `forget` reaches, keeps it whole.
#[tokio::test(flavor = "multi_thread")]
async fn a_failure_detail_quoting_an_address_is_masked_in_the_journal_and_sentry()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 3,
        ..SyncOptions::default()
    })
    .await?;
    let sentry = crate::fakes::sentry::SentryFake::start().await?;
    let receiver = crate::fakes::webhook::WebhookReceiver::start().await?;
    let cli = s
        .cli
        .clone()
        .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", ADMIN_TOKEN)
        .with_env("SYNCWARD__ALERTS__SENTRY_DSN", &sentry.dsn)
        .with_env("SYNCWARD__BREAKER__CONSECUTIVE_FAILURES", "1")
        .with_env("SYNCWARD__RETRY__MAX_ATTEMPTS", "1");
    let file = sync_file("casting", "acme", &webhook(&receiver.url)).replace(
        "SELECT id, email, first_name FROM contacts",
        "SELECT id, email, email::int::text AS first_name FROM contacts",
    );
    apply(&s, &cli, "casting.toml", &file).await?.ok()?;
    let mut daemon = crate::helpers::daemon::DaemonProcess::spawn(&cli).await?;
    cli.run(&["sync", "run", "casting"]).await?.ok()?;
    daemon
        .eventually(
            std::time::Duration::from_secs(60),
            "the breaker's alert at Sentry",
            || async {
                Ok(sentry
                    .events()
                    .iter()
                    .any(|(_, _, e)| e.to_string().contains("casting")))
            },
        )
        .await?;
    let runs = cli
        .run(&["runs", "list", "--sync", "casting", "--json"])
        .await?
        .ok()?
        .json()?;
    let detail = runs[0]["failure_detail"].as_str().unwrap_or_default();
    assert!(detail.contains("user1@example.com"), "{detail}");
    daemon.signal("TERM")?;
    daemon.wait(std::time::Duration::from_secs(30)).await?;
    let journal = std::fs::read_to_string(daemon.log.path())?;
    assert!(journal.contains("[address]"), "{journal}");
    assert!(!journal.contains("@example.com"), "{journal}");
    let sent: String = sentry
        .events()
        .iter()
        .map(|(_, _, e)| e.to_string())
        .collect();
    assert!(!sent.contains("@example.com"), "{sent}");
    assert!(receiver.received().is_empty());
    Ok(())
}

/// A forward proxy that records each request line and answers 200 itself.
async fn recording_proxy() -> anyhow::Result<(
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
)> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let mut conn = tokio::io::BufReader::new(conn);
                loop {
                    let mut first = String::new();
                    if conn.read_line(&mut first).await? == 0 {
                        return anyhow::Ok(());
                    }
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        conn.read_line(&mut line).await?;
                        if line.trim().is_empty() {
                            break;
                        }
                        if let Some((name, value)) = line.split_once(':')
                            && name.eq_ignore_ascii_case("content-length")
                        {
                            length = value.trim().parse()?;
                        }
                    }
                    let mut body = vec![0u8; length];
                    conn.read_exact(&mut body).await?;
                    record
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(first.trim().to_string());
                    conn.get_mut()
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                        .await?;
                }
            });
        }
    });
    Ok((address, seen))
}

/// `outbound.proxy` is how an operator sends the connectors through a
/// proxy: every request goes to it (the environment's proxy still never),
/// a name is handed to the proxy to resolve (its duty, docs/operations.md),
/// and an inside address literal is refused before the proxy is asked.
#[tokio::test(flavor = "multi_thread")]
async fn the_configured_proxy_carries_requests_and_is_never_asked_for_a_refused_address()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 3,
        ..SyncOptions::default()
    })
    .await?;
    let (proxy, seen) = recording_proxy().await?;
    let (ambient, ambient_seen) = recording_proxy().await?;
    let cli = s
        .cli
        .clone()
        .with_env(
            "SYNCWARD__OUTBOUND__PROXY",
            &format!("http://localhost:{}", proxy.port()),
        )
        .with_env("HTTP_PROXY", &format!("http://{ambient}"))
        .with_env("SYNCWARD__OUTBOUND__ALLOW", "127.0.0.1/32");
    apply(
        &s,
        &cli,
        "named.toml",
        &sync_file("named", "acme", &webhook("http://hooks.example.test/hook")),
    )
    .await?
    .ok()?;
    cli.run(&["sync", "run", "named", "--foreground"])
        .await?
        .ok()?;
    let through = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(
        !through.is_empty()
            && through
                .iter()
                .all(|line| line == "POST http://hooks.example.test/hook HTTP/1.1"),
        "{through:?}"
    );
    // Published while 10.0.0.0/8 was allowed, an inside literal is refused
    // when the run opens its destination: the proxy is not asked.
    let wider = cli
        .clone()
        .with_env("SYNCWARD__OUTBOUND__ALLOW", "127.0.0.1/32,10.0.0.0/8");
    apply(
        &s,
        &wider,
        "inside.toml",
        &sync_file("inside", "acme", &webhook("http://10.1.2.3/hook")),
    )
    .await?
    .ok()?;
    let out = cli.run(&["sync", "run", "inside", "--foreground"]).await?;
    assert_ne!(out.code, 0, "{out:?}");
    assert_eq!(
        seen.lock().unwrap_or_else(|e| e.into_inner()).len(),
        through.len()
    );
    assert!(
        ambient_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    );
    Ok(())
}
