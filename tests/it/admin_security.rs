//! The admin HTTP server under attack (issue 18): each test performs the
//! attack against the real daemon and sees it refused — cross-site forms,
//! token-less writes, the wrong credential scheme, DNS rebinding, framing,
//! ids that cannot be ids, slow clients — plus the token the Debian package
//! generates.

use std::time::{Duration, Instant};

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::install_crypto;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};
use crate::helpers::{Syncward, TestDb};

/// 40 characters: admin tokens are at least 32.
const TOKEN: &str = "admin-security-test-token-0123456789abcd";

const FORM: &str = "application/x-www-form-urlencoded";

/// A published sync and the daemon serving it, with `token` as the admin
/// token (none: the loopback read-only mode).
async fn daemon(
    token: Option<&str>,
    extra: &[(&str, &str)],
) -> anyhow::Result<(Scenario, DaemonProcess, String)> {
    install_crypto();
    let s = Scenario::new(SyncOptions::default()).await?;
    let mut cli = s.cli.clone();
    if let Some(token) = token {
        cli = cli.with_env("SYNCWARD__HTTP__ADMIN_TOKEN", token);
    }
    for (key, value) in extra {
        cli = cli.with_env(key, value);
    }
    let daemon = DaemonProcess::spawn(&cli).await?;
    let address = daemon.http_address().await?;
    Ok((s, daemon, address))
}

fn http() -> anyhow::Result<reqwest::Client> {
    install_crypto();
    Ok(reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?)
}

async fn sync_status(db: &TestDb) -> anyhow::Result<String> {
    Ok(sqlx::query_scalar("SELECT status FROM syncs WHERE id = $1")
        .bind(SYNC_ID)
        .fetch_one(&db.pool)
        .await?)
}

/// One request over a fresh TCP connection, written as is (so the test can
/// lie in `Host`); the status and the whole answer.
async fn raw(address: &str, request: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect(address).await?;
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await??;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Ok((status, text))
}

fn basic_header() -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("admin:{TOKEN}"))
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn cross_site_writes_are_refused_and_the_sync_stays_active() -> anyhow::Result<()> {
    let (s, mut daemon, address) = daemon(Some(TOKEN), &[]).await?;
    let base = format!("http://{address}");
    let http = http()?;

    // A foreign page's form, with the token a browser would attach (the
    // API's Bearer cannot come from a form, but a script may hold it).
    let api = http
        .post(format!("{base}/api/syncs/{SYNC_ID}/pause"))
        .bearer_auth(TOKEN)
        .header("origin", "http://evil.example")
        .header("content-type", FORM)
        .body("x=1")
        .send()
        .await?;
    assert_eq!(api.status().as_u16(), 403);
    let body: serde_json::Value = api.json().await?;
    assert!(
        body["error"]
            .as_str()
            .is_some_and(|e| e.contains("Origin \"http://evil.example\"")),
        "{body}"
    );
    // The page button, with the Basic credentials a browser saved.
    for (header, value) in [
        ("origin", "http://evil.example"),
        ("origin", "null"),
        ("referer", "http://evil.example/attack.html"),
    ] {
        let page = http
            .post(format!("{base}/syncs/{SYNC_ID}/pause"))
            .basic_auth("admin", Some(TOKEN))
            .header(header, value)
            .header("content-type", FORM)
            .send()
            .await?;
        assert_eq!(page.status().as_u16(), 403, "{header}: {value}");
        let text = page.text().await?;
        assert!(text.contains("Cross-site write refused"), "{text}");
    }
    // A form with neither Origin nor Referer cannot be told from a foreign one.
    for content_type in [FORM, "text/plain", "multipart/form-data; boundary=x"] {
        let bare = http
            .post(format!("{base}/syncs/{SYNC_ID}/pause"))
            .basic_auth("admin", Some(TOKEN))
            .header("content-type", content_type)
            .send()
            .await?;
        assert_eq!(bare.status().as_u16(), 403, "{content_type}");
    }
    assert_eq!(sync_status(&s.db).await?, "active", "nothing paused it");

    // Our own page's button, and a script with the token, still work.
    let ours = http
        .post(format!("{base}/syncs/{SYNC_ID}/pause"))
        .basic_auth("admin", Some(TOKEN))
        .header("origin", base.as_str())
        .header("content-type", FORM)
        .send()
        .await?;
    assert_eq!(ours.status().as_u16(), 303);
    assert_eq!(sync_status(&s.db).await?, "paused");
    let script = http
        .post(format!("{base}/api/syncs/{SYNC_ID}/resume"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await?;
    assert_eq!(script.status().as_u16(), 200);
    assert_eq!(sync_status(&s.db).await?, "active");
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_token_reads_are_served_and_every_write_is_refused() -> anyhow::Result<()> {
    let (s, mut daemon, address) = daemon(None, &[]).await?;
    let base = format!("http://{address}");
    let http = http()?;
    assert_eq!(
        http.get(format!("{base}/api/syncs/{SYNC_ID}"))
            .send()
            .await?
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        http.get(format!("{base}/syncs/{SYNC_ID}"))
            .send()
            .await?
            .status()
            .as_u16(),
        200
    );
    for verb in ["pause", "resume", "run", "retry-rejected"] {
        let api = http
            .post(format!("{base}/api/syncs/{SYNC_ID}/{verb}"))
            .send()
            .await?;
        assert_eq!(api.status().as_u16(), 403, "/api/…/{verb}");
        let body: serde_json::Value = api.json().await?;
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| e.contains("set http.admin_token")),
            "{body}"
        );
        // Even our own page's button, from our own origin.
        let page = http
            .post(format!("{base}/syncs/{SYNC_ID}/{verb}"))
            .header("origin", base.as_str())
            .header("content-type", FORM)
            .send()
            .await?;
        assert_eq!(page.status().as_u16(), 403, "/syncs/…/{verb}");
        let text = page.text().await?;
        assert!(
            text.lines().count() == 1 && text.contains("set http.admin_token"),
            "{text}"
        );
    }
    assert_eq!(sync_status(&s.db).await?, "active");
    let runs: i64 = sqlx::query_scalar("SELECT count(*) FROM runs")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(runs, 0, "no run was queued");
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_takes_bearer_only_and_the_pages_basic_only() -> anyhow::Result<()> {
    let (_s, mut daemon, address) = daemon(Some(TOKEN), &[]).await?;
    let base = format!("http://{address}");
    let http = http()?;
    let api = |authorization: String| {
        http.get(format!("{base}/api/syncs"))
            .header("authorization", authorization)
            .send()
    };
    assert_eq!(
        api(basic_header()).await?.status().as_u16(),
        401,
        "Basic on /api"
    );
    for scheme in ["Bearer", "bearer", "BEARER"] {
        assert_eq!(
            api(format!("{scheme} {TOKEN}")).await?.status().as_u16(),
            200,
            "{scheme}"
        );
    }
    // A token one character short, and one longer: both refused.
    assert_eq!(
        api(format!("Bearer {}", &TOKEN[1..]))
            .await?
            .status()
            .as_u16(),
        401
    );
    assert_eq!(
        api(format!("Bearer {TOKEN}x")).await?.status().as_u16(),
        401
    );
    let page = |authorization: String| {
        http.get(format!("{base}/syncs/{SYNC_ID}"))
            .header("authorization", authorization)
            .send()
    };
    let bearer_on_page = page(format!("Bearer {TOKEN}")).await?;
    assert_eq!(bearer_on_page.status().as_u16(), 401, "Bearer on a page");
    assert!(
        bearer_on_page
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("Basic ")),
    );
    assert_eq!(page(basic_header()).await?.status().as_u16(), 200);
    // Bearer does not press a button either.
    let pressed = http
        .post(format!("{base}/syncs/{SYNC_ID}/pause"))
        .bearer_auth(TOKEN)
        .header("origin", base.as_str())
        .send()
        .await?;
    assert_eq!(pressed.status().as_u16(), 401);
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

/// DNS rebinding: evil.example now resolves to 127.0.0.1, so the browser
/// sends `Host: evil.example:PORT` and a matching Origin.
#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_host_is_refused_even_with_a_matching_origin() -> anyhow::Result<()> {
    let (s, mut daemon, address) = daemon(Some(TOKEN), &[]).await?;
    let port = address.rsplit(':').next().unwrap_or_default().to_string();
    let evil = format!("evil.example:{port}");
    let (status, answer) = raw(
        &address,
        &format!(
            "GET /api/syncs HTTP/1.1\r\nHost: {evil}\r\nAuthorization: Bearer {TOKEN}\r\n\
             Connection: close\r\n\r\n"
        ),
    )
    .await?;
    assert_eq!(status, 421, "{answer}");
    assert!(!answer.contains(SYNC_ID), "nothing was read: {answer}");
    let (status, answer) = raw(
        &address,
        &format!(
            "POST /syncs/{SYNC_ID}/pause HTTP/1.1\r\nHost: {evil}\r\nOrigin: http://{evil}\r\n\
             Authorization: {}\r\nContent-Type: {FORM}\r\nContent-Length: 0\r\n\
             Connection: close\r\n\r\n",
            basic_header()
        ),
    )
    .await?;
    assert_eq!(status, 421, "{answer}");
    assert_eq!(
        sync_status(&s.db).await?,
        "active",
        "the button did nothing"
    );
    // Readiness and metrics are checked too; only /healthz is exempt.
    for path in ["/readyz", "/metrics", "/"] {
        let (status, answer) = raw(
            &address,
            &format!("GET {path} HTTP/1.1\r\nHost: {evil}\r\nConnection: close\r\n\r\n"),
        )
        .await?;
        assert_eq!(status, 421, "{path}: {answer}");
    }
    let (status, _) = raw(
        &address,
        &format!("GET /healthz HTTP/1.1\r\nHost: {evil}\r\nConnection: close\r\n\r\n"),
    )
    .await?;
    assert_eq!(status, 200, "/healthz answers any probe");
    // No Host at all (HTTP/1.0) is refused too; the real names are served.
    let (status, _) = raw(&address, "GET /readyz HTTP/1.0\r\n\r\n").await?;
    assert_eq!(status, 421);
    for host in [address.clone(), format!("localhost:{port}")] {
        let (status, answer) = raw(
            &address,
            &format!("GET /readyz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
        .await?;
        assert_eq!(status, 200, "{host}: {answer}");
    }
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_allowed_host_from_the_config_is_served() -> anyhow::Result<()> {
    let (_s, mut daemon, address) = daemon(
        Some(TOKEN),
        &[(
            "SYNCWARD__HTTP__ALLOWED_HOSTS",
            "syncward.example.com,admin.example.com:8443",
        )],
    )
    .await?;
    for (host, expected) in [
        ("syncward.example.com", 200),
        ("admin.example.com:8443", 200),
        ("admin.example.com", 421),
    ] {
        let (status, answer) = raw(
            &address,
            &format!("GET /readyz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
        .await?;
        assert_eq!(status, expected, "{host}: {answer}");
    }
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_answer_carries_the_security_headers() -> anyhow::Result<()> {
    let (_s, mut daemon, address) = daemon(Some(TOKEN), &[]).await?;
    let base = format!("http://{address}");
    let http = http()?;
    let answers = [
        (
            "a page",
            http.get(format!("{base}/syncs/{SYNC_ID}"))
                .basic_auth("a", Some(TOKEN)),
        ),
        (
            "an API answer",
            http.get(format!("{base}/api/syncs")).bearer_auth(TOKEN),
        ),
        ("a refusal", http.get(format!("{base}/api/syncs"))),
        ("a 404", http.get(format!("{base}/nowhere"))),
        ("health", http.get(format!("{base}/healthz"))),
    ];
    for (what, request) in answers {
        let answer = request.send().await?;
        let header = |name: &str| {
            answer
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        assert_eq!(header("x-frame-options"), "DENY", "{what}");
        assert_eq!(
            header("content-security-policy"),
            "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; form-action 'self'",
            "{what}"
        );
        assert_eq!(header("x-content-type-options"), "nosniff", "{what}");
        assert_eq!(header("referrer-policy"), "same-origin", "{what}");
    }
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test]
async fn a_token_shorter_than_32_characters_is_refused_at_config_load() -> anyhow::Result<()> {
    let short = "s".repeat(31);
    let out = Syncward::bare()
        .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", &short)
        .run(&["check-config"])
        .await?;
    assert_eq!(out.code, 2, "{out:?}");
    let line = out.stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "one line: {line}");
    assert!(
        line.starts_with(
            "error: environment variable SYNCWARD__HTTP__ADMIN_TOKEN: http.admin_token: is 31 characters long; at least 32"
        ),
        "{line}"
    );
    assert!(!line.contains(&short), "the token is not echoed: {line}");
    let out = Syncward::bare()
        .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", &"s".repeat(32))
        .run(&["check-config"])
        .await?;
    assert_eq!(out.code, 0, "{out:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn ids_that_cannot_be_ids_are_404_without_an_error() -> anyhow::Result<()> {
    let (_s, mut daemon, address) = daemon(Some(TOKEN), &[]).await?;
    let base = format!("http://{address}");
    let http = http()?;
    for path in [
        "/api/syncs/%00",
        "/api/syncs/%FF%FE",
        "/api/syncs/Acme",
        "/api/syncs/a%3Ab",
        "/api/syncs/%00/runs",
        "/api/runs/%00",
        "/api/runs/abc",
        "/api/runs/99999999999999999999999",
        "/api/runs/-1",
    ] {
        let answer = http
            .get(format!("{base}{path}"))
            .bearer_auth(TOKEN)
            .send()
            .await?;
        assert_eq!(answer.status().as_u16(), 404, "{path}");
        let body: serde_json::Value = answer.json().await?;
        assert!(
            body["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("no such")),
            "{path}: {body}"
        );
    }
    for path in ["/syncs/%00", "/syncs/A", "/runs/%00", "/runs/abc"] {
        let answer = http
            .get(format!("{base}{path}"))
            .basic_auth("a", Some(TOKEN))
            .send()
            .await?;
        assert_eq!(answer.status().as_u16(), 404, "{path}");
    }
    let pause = http
        .post(format!("{base}/api/syncs/%00/pause"))
        .bearer_auth(TOKEN)
        .send()
        .await?;
    assert_eq!(pause.status().as_u16(), 404);
    // Long ids, over raw TCP (reqwest refuses URLs past 64 KiB): 60 KB is
    // answered 404 by the id check; 100 KB is past what the HTTP parser takes
    // in a request line, which answers 414 before any route.
    for (length, expected) in [(60 * 1024, 404), (100 * 1024, 414)] {
        let id = "a".repeat(length);
        for (request, what) in [
            (
                format!(
                    "GET /api/syncs/{id} HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {TOKEN}\r\nConnection: close\r\n\r\n"
                ),
                "API",
            ),
            (
                format!(
                    "POST /syncs/{id}/pause HTTP/1.1\r\nHost: {address}\r\nAuthorization: {}\r\nOrigin: {base}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    basic_header()
                ),
                "button",
            ),
        ] {
            let (status, _) = raw(&address, &request).await?;
            assert_eq!(status, expected, "{what} with a {length}-byte id");
        }
    }
    // The answers came before the store: nothing failed there.
    let log = std::fs::read_to_string(daemon.log.path())?;
    assert!(
        !log.contains("ERROR"),
        "the daemon logged an error:\n{}",
        daemon.log_tail()
    );
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

/// Slowloris: connections trickling one header byte a second are closed at
/// the header-read timeout while a normal request is answered meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn slow_clients_are_cut_off_at_the_header_timeout() -> anyhow::Result<()> {
    const TIMEOUT: Duration = Duration::from_secs(2);
    const CLIENTS: usize = 200;
    let (_s, mut daemon, address) = daemon(
        Some(TOKEN),
        &[("SYNCWARD__HTTP__HEADER_READ_TIMEOUT", "2s")],
    )
    .await?;
    let request = format!(
        "GET /api/syncs HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    );
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        let mut stream = TcpStream::connect(&address).await?;
        let bytes = request.clone().into_bytes();
        clients.push(tokio::spawn(async move {
            let opened = Instant::now();
            let mut buf = [0u8; 1024];
            for byte in bytes {
                if stream.write_all(&[byte]).await.is_err() {
                    return opened.elapsed();
                }
                // A second between bytes, unless the server closes first.
                let wait = tokio::time::sleep(Duration::from_secs(1));
                tokio::pin!(wait);
                loop {
                    tokio::select! {
                        () = &mut wait => break,
                        read = stream.read(&mut buf) => match read {
                            Ok(0) | Err(_) => return opened.elapsed(),
                            Ok(_) => {} // an error answer (408); the close follows
                        },
                    }
                }
            }
            Duration::MAX // sent the whole request: never cut off
        }));
    }
    // Meanwhile a normal client is served at once.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(5),
        http()?
            .get(format!("http://{address}/api/syncs"))
            .bearer_auth(TOKEN)
            .send(),
    )
    .await??;
    assert_eq!(answer.status().as_u16(), 200);
    assert!(
        asked.elapsed() < TIMEOUT,
        "the normal request waited {:?}",
        asked.elapsed()
    );
    let mut slowest = Duration::ZERO;
    for client in clients {
        slowest = slowest.max(tokio::time::timeout(TIMEOUT * 5, client).await??);
    }
    assert!(
        slowest <= TIMEOUT * 3,
        "every slow connection closed within 3× the {TIMEOUT:?} header timeout; the slowest took {slowest:?}"
    );
    assert!(started.elapsed() < TIMEOUT * 5);
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

/// At `http.max_connections`, a new connection waits for a slot instead of
/// starving the ones that hold them; a silent one is cut at the header timeout,
/// which frees it.
#[tokio::test(flavor = "multi_thread")]
async fn connections_beyond_the_limit_wait_for_a_free_slot() -> anyhow::Result<()> {
    let (_s, mut daemon, address) = daemon(
        Some(TOKEN),
        &[
            ("SYNCWARD__HTTP__HEADER_READ_TIMEOUT", "2s"),
            ("SYNCWARD__HTTP__MAX_CONNECTIONS", "4"),
        ],
    )
    .await?;
    let mut silent = Vec::new();
    for _ in 0..4 {
        silent.push(TcpStream::connect(&address).await?);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = Instant::now();
    let (status, _) = raw(
        &address,
        &format!("GET /readyz HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"),
    )
    .await?;
    let waited = asked.elapsed();
    assert_eq!(status, 200);
    assert!(
        waited >= Duration::from_millis(1000) && waited < Duration::from_secs(6),
        "served once the silent connections were cut (about 1.7 s), after {waited:?}"
    );
    drop(silent);
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

/// The package's postinst, run against a scratch /etc/syncward: it generates
/// a 64-character token into the env file (0640) once, never replaces an
/// operator's, and says where it is.
#[tokio::test]
async fn the_package_generates_an_admin_token_once() -> anyhow::Result<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = std::fs::read_to_string(root.join("deploy/debian/postinst"))?;
    let scratch = tempfile::tempdir()?;
    let etc = scratch.path().join("etc");
    std::fs::create_dir_all(&etc)?;
    let script = script.replace("/etc/syncward", &etc.display().to_string());
    // dpkg has unpacked the conffile before postinst runs (world-readable in
    // an older package): postinst gives it to the syncward group, 0640.
    let config = etc.join("syncward.toml");
    std::fs::write(&config, "")?;
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    let postinst = scratch.path().join("postinst");
    std::fs::write(&postinst, script)?;
    // Stand-ins for the commands that would change this machine's users.
    let bin = scratch.path().join("bin");
    std::fs::create_dir_all(&bin)?;
    let log = scratch.path().join("calls");
    for command in ["getent", "adduser", "chown"] {
        let stub = bin.join(command);
        std::fs::write(
            &stub,
            format!("#!/bin/sh\necho \"{command} $*\" >> '{}'\n", log.display()),
        )?;
        std::process::Command::new("chmod")
            .arg("755")
            .arg(&stub)
            .status()?;
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = || async {
        let out = tokio::process::Command::new("sh")
            .arg(&postinst)
            .arg("configure")
            .env("PATH", &path)
            .output()
            .await?;
        anyhow::ensure!(out.status.success(), "postinst failed: {out:?}");
        anyhow::Ok(String::from_utf8(out.stdout)?)
    };
    let env_file = etc.join("syncward.env");
    let said = run().await?;
    assert!(
        said.contains(&format!(
            "SYNCWARD__HTTP__ADMIN_TOKEN in {}",
            env_file.display()
        )),
        "{said}"
    );
    let text = std::fs::read_to_string(&env_file)?;
    let tokens: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("SYNCWARD__HTTP__ADMIN_TOKEN="))
        .collect();
    assert_eq!(tokens.len(), 1, "{text}");
    assert_eq!(tokens[0].len(), 64);
    assert!(tokens[0].chars().all(|c| c.is_ascii_hexdigit()), "{text}");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&env_file)?.permissions());
    assert_eq!(mode & 0o777, 0o640);
    let calls = std::fs::read_to_string(&log)?;
    assert!(
        calls.contains(&format!("chown root:syncward {}", env_file.display()))
            && calls.contains(&format!("chown root:syncward {}", config.display())),
        "{calls}"
    );
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&config)?.permissions());
    assert_eq!(mode & 0o777, 0o640, "the config is not world-readable");
    // The daemon takes it.
    let out = Syncward::bare()
        .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", tokens[0])
        .run(&["check-config"])
        .await?;
    assert_eq!(out.code, 0, "{out:?}");

    // Once: an upgrade keeps it.
    let again = run().await?;
    assert!(!again.contains("generated"), "{again}");
    assert_eq!(std::fs::read_to_string(&env_file)?, text);

    // An operator's token, in the env file or in the config, is never replaced.
    let own = "SYNCWARD__DATABASE__URL=postgres://x@y/z\nSYNCWARD__HTTP__ADMIN_TOKEN=operators-own-token-0123456789abcdef";
    std::fs::write(&env_file, own)?;
    run().await?;
    assert_eq!(std::fs::read_to_string(&env_file)?, own);
    std::fs::write(&env_file, "SYNCWARD__DATABASE__URL=postgres://x@y/z")?;
    std::fs::write(
        etc.join("syncward.toml"),
        "[http]\nadmin_token = \"from-the-config-0123456789abcdef\"\n",
    )?;
    run().await?;
    assert_eq!(
        std::fs::read_to_string(&env_file)?,
        "SYNCWARD__DATABASE__URL=postgres://x@y/z"
    );
    // Without one, it is appended after the operator's last line.
    std::fs::write(etc.join("syncward.toml"), "")?;
    run().await?;
    let text = std::fs::read_to_string(&env_file)?;
    assert!(
        text.starts_with("SYNCWARD__DATABASE__URL=postgres://x@y/z\n#"),
        "{text}"
    );
    Ok(())
}
