//! Workspace-scoped tokens, attacked through every route of the API and the
//! pages: another workspace's syncs and runs are "not found" exactly like
//! ones that do not exist, lists hold only the token's workspace, a
//! read-only token cannot write, a revoked one is refused.

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::install_crypto;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

const ADMIN: &str = "tokens-admin-token-0123456789abcdef";
const OTHER: &str = "globex-contacts";

/// Every route that names a sync (`{sync}`) or a run (`{run}`).
const ROUTES: [(&str, &str); 19] = [
    ("GET", "/api/syncs/{sync}"),
    ("GET", "/api/syncs/{sync}/runs"),
    ("POST", "/api/syncs/{sync}/pause"),
    ("POST", "/api/syncs/{sync}/resume"),
    ("POST", "/api/syncs/{sync}/run"),
    ("POST", "/api/syncs/{sync}/retry-rejected"),
    ("GET", "/api/runs/{run}"),
    ("GET", "/api/runs/{run}/removals"),
    ("POST", "/api/runs/{run}/approve-removals"),
    ("POST", "/api/forget"),
    ("GET", "/syncs/{sync}"),
    ("GET", "/syncs/{sync}?version=1"),
    ("POST", "/syncs/{sync}/pause"),
    ("POST", "/syncs/{sync}/resume"),
    ("POST", "/syncs/{sync}/run"),
    ("POST", "/syncs/{sync}/retry-rejected"),
    ("GET", "/runs/{run}"),
    ("GET", "/api/trace?email=user1@example.com&sync={sync}"),
    ("GET", "/trace?email=user1@example.com&sync={sync}"),
];

struct Admin {
    base: String,
    http: reqwest::Client,
}

impl Admin {
    /// The request as a script (Bearer, on /api) or a browser (Basic and an
    /// Origin of our own, on the pages) would send it with `token`.
    async fn send(&self, method: &str, path: &str, token: &str) -> anyhow::Result<(u16, String)> {
        let url = format!("{}{path}", self.base);
        let request = match method {
            "POST" => self.http.post(&url).header("Origin", &self.base),
            _ => self.http.get(&url),
        };
        let request = if path.starts_with("/api/") {
            request.bearer_auth(token)
        } else {
            request.basic_auth("someone", Some(token))
        };
        let response = request.send().await?;
        Ok((response.status().as_u16(), response.text().await?))
    }
}

async fn token(s: &Scenario, workspace: &str, read_only: bool) -> anyhow::Result<(String, i64)> {
    let mut args = vec!["token", "create", "--workspace", workspace, "--json"];
    if read_only {
        args.push("--read-only");
    }
    let out = s
        .cli
        .clone()
        .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", ADMIN)
        .run(&args)
        .await?
        .ok()?;
    let created: serde_json::Value = serde_json::from_str(&out.stdout)?;
    Ok((
        created["token"].as_str().unwrap_or_default().to_owned(),
        created["id"].as_i64().unwrap_or_default(),
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_token_cannot_see_or_change_another_workspace_through_any_route()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    // A second workspace's sync, with a run of its own.
    let text = std::fs::read_to_string(s.dir.path().join("sync.toml"))?
        .replacen(
            &format!("id = \"{SYNC_ID}\""),
            &format!("id = \"{OTHER}\""),
            1,
        )
        .replacen("workspace = \"acme\"", "workspace = \"globex\"", 1);
    let other_file = s.dir.path().join("globex.toml");
    std::fs::write(&other_file, text)?;
    s.cli
        .run(&["sync", "apply", other_file.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    s.cli
        .run(&["sync", "run", OTHER, "--foreground"])
        .await?
        .ok()?;
    let other_run: i64 = sqlx::query_scalar("SELECT max(id) FROM runs WHERE sync_id = $1")
        .bind(OTHER)
        .fetch_one(&s.db.pool)
        .await?;
    s.run_foreground().await?.ok()?;
    let own_run = s.last_run().await?["id"].as_i64().unwrap_or_default();

    let (acme, acme_id) = token(&s, "acme", false).await?;
    let (reader, _) = token(&s, "acme", true).await?;
    assert!(acme.starts_with("swt_") && acme.len() > 60, "{acme}");
    let listed = s.cli.run(&["token", "list"]).await?.ok()?.stdout;
    assert!(
        !listed.contains(&acme) && listed.contains("read-only"),
        "{listed}"
    );
    let cli = s.cli.clone().with_env("SYNCWARD__HTTP__ADMIN_TOKEN", ADMIN);
    let unknown = cli
        .run(&["token", "create", "--workspace", "nobody"])
        .await?;
    assert_eq!(unknown.code, 1, "{unknown:?}");

    let daemon = DaemonProcess::spawn(&cli).await?;
    install_crypto();
    let admin = Admin {
        base: format!("http://{}", daemon.http_address().await?),
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()?,
    };
    let runs_before: i64 = sqlx::query_scalar("SELECT count(*) FROM runs")
        .fetch_one(&s.db.pool)
        .await?;

    // Every route, aimed at the other workspace and at a sync or run that
    // does not exist: the same 404, with the same body.
    for (method, route) in ROUTES {
        let at = |sync: &str, run: i64| {
            route
                .replace("{sync}", sync)
                .replace("{run}", &run.to_string())
        };
        let (status, body) = admin.send(method, &at(OTHER, other_run), &acme).await?;
        let (missing_status, missing_body) = admin
            .send(method, &at("no-such-sync", 999_999), &acme)
            .await?;
        assert_eq!(status, 404, "{method} {route}: {body}");
        assert_eq!(
            (missing_status, &missing_body),
            (404, &body),
            "{method} {route}"
        );
        // The admin token reaches the same route (the run held no
        // removals: it is told so).
        if method == "GET" {
            let (status, body) = admin.send(method, &at(OTHER, other_run), ADMIN).await?;
            if route.ends_with("/removals") {
                assert_eq!(status, 400, "admin: {method} {route}: {body}");
                assert!(body.contains("holds no removals"), "{body}");
            } else {
                assert_eq!(status, 200, "admin: {method} {route}");
            }
        }
    }
    let (status, runs_after) = (
        sqlx::query_scalar::<_, String>("SELECT status FROM syncs WHERE id = $1")
            .bind(OTHER)
            .fetch_one(&s.db.pool)
            .await?,
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM runs")
            .fetch_one(&s.db.pool)
            .await?,
    );
    assert_eq!(
        (status.as_str(), runs_after),
        ("active", runs_before),
        "nothing changed"
    );

    // Lists hold the token's workspace only.
    let (code, list) = admin.send("GET", "/api/syncs", &acme).await?;
    assert_eq!(code, 200);
    assert!(list.contains(SYNC_ID) && !list.contains(OTHER), "{list}");
    // A trace looks in the token's syncs only: the other workspace's calls
    // that carried the same address are not shown, nor its sync named.
    let (code, traced) = admin
        .send("GET", "/api/trace?email=user1@example.com", &acme)
        .await?;
    assert_eq!(code, 200, "{traced}");
    let traced: serde_json::Value = serde_json::from_str(&traced)?;
    assert_eq!(traced["syncs"], serde_json::json!([SYNC_ID]), "{traced}");
    let calls = traced["calls"].as_array().cloned().unwrap_or_default();
    assert!(
        !calls.is_empty() && calls.iter().all(|c| c["sync"] == SYNC_ID),
        "{traced}"
    );
    let (_, everything) = admin
        .send("GET", "/api/trace?email=user1@example.com", ADMIN)
        .await?;
    assert!(everything.contains(OTHER), "{everything}");
    let (code, overview) = admin.send("GET", "/", &acme).await?;
    assert_eq!(code, 200);
    assert!(
        overview.contains(SYNC_ID) && !overview.contains(OTHER),
        "{overview}"
    );
    let (_, everything) = admin.send("GET", "/api/syncs", ADMIN).await?;
    assert!(
        everything.contains(SYNC_ID) && everything.contains(OTHER),
        "{everything}"
    );

    // Its own workspace: read by both, changed only by the read-write token.
    let own = format!("/api/runs/{own_run}");
    assert_eq!(admin.send("GET", &own, &reader).await?.0, 200);
    assert_eq!(
        admin
            .send("GET", &format!("/syncs/{SYNC_ID}"), &reader)
            .await?
            .0,
        200
    );
    let (code, body) = admin
        .send("POST", &format!("/api/syncs/{SYNC_ID}/pause"), &reader)
        .await?;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("read-only"), "{body}");
    let (code, body) = admin
        .send("POST", &format!("/api/syncs/{SYNC_ID}/pause"), &acme)
        .await?;
    assert_eq!(code, 200, "{body}");
    let (code, _) = admin
        .send("POST", &format!("/syncs/{SYNC_ID}/resume"), &acme)
        .await?;
    assert_eq!(code, 303, "the page's button redirects back");
    // Its own run's held removals: asked of the store (none held), and not
    // approved by the read-only token.
    let (code, body) = admin
        .send("GET", &format!("/api/runs/{own_run}/removals"), &reader)
        .await?;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("holds no removals"), "{body}");
    let (code, body) = admin
        .send(
            "POST",
            &format!("/api/runs/{own_run}/approve-removals"),
            &reader,
        )
        .await?;
    assert_eq!(code, 403, "{body}");

    // Revoked: refused at once.
    s.cli
        .run(&["token", "revoke", &acme_id.to_string()])
        .await?
        .ok()?;
    assert_eq!(admin.send("GET", "/api/syncs", &acme).await?.0, 401);
    assert_eq!(admin.send("GET", "/", &acme).await?.0, 401);
    Ok(())
}

/// `ROUTES` (walked with another workspace's token above) and the routes
/// every scope may call (lists filtered to the scope, health, readiness,
/// metrics) are every route the router has: a route added without being
/// walked fails here. (A handler reaches syncs and runs only through
/// `ops`, entered with the token's scope, which refuses by default.)
#[test]
fn every_route_of_the_router_is_walked_with_a_foreign_token_or_open_to_all() -> anyhow::Result<()> {
    let source = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/http/mod.rs"))?;
    let open = [
        ("GET", "/api/syncs"),
        ("GET", "/"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/metrics"),
    ];
    let mut found = Vec::new();
    for piece in source.split(".route(\"").skip(1) {
        let Some((path, rest)) = piece.split_once('"') else {
            continue;
        };
        let method = rest.trim_start_matches([',', ' ']);
        let method = if method.starts_with("get(") {
            "GET"
        } else if method.starts_with("post(") {
            "POST"
        } else {
            anyhow::bail!("route {path}: a method this test does not know: {method:.20}")
        };
        found.push((method, path.to_string()));
    }
    anyhow::ensure!(found.len() >= 10, "routes not found in src/http/mod.rs");
    // `{id}` in the router is `{sync}` or `{run}` in ROUTES; `{verb}` is
    // each of the sync page's buttons.
    let walked: Vec<(&str, String)> = ROUTES
        .iter()
        .map(|(m, p)| {
            let p = p.split('?').next().unwrap_or_default();
            let generic = p.replace("{sync}", "{id}").replace("{run}", "{id}");
            (*m, generic)
        })
        .collect();
    for (method, path) in &found {
        let covered = open.contains(&(*method, path.as_str()))
            || walked.iter().any(|(m, p)| m == method && p == path)
            || (path == "/syncs/{id}/{verb}"
                && walked
                    .iter()
                    .any(|(m, p)| *m == "POST" && p.starts_with("/syncs/{id}/")));
        anyhow::ensure!(
            covered,
            "{method} {path} is neither walked with a foreign token nor open to all"
        );
    }
    Ok(())
}
