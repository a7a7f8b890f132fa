//! The `http` source against a paged JSON API fake: pointers, cursor parameter,
//! a bearer token from the environment, 429 with Retry-After, a 500, an empty
//! page that names a next one, and a revoked token.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::fakes::brevo::BrevoFake;
use crate::fakes::paged_api::{ApiFault, PagedApiFake};
use crate::helpers::{Syncward, TestDb, TestRedis};

const BREVO_KEY: &str = "xkeysib-test-key";

async fn setup(
    token_in_env: &str,
) -> anyhow::Result<(
    TestDb,
    TestRedis,
    BrevoFake,
    PagedApiFake,
    Syncward,
    tempfile::TempDir,
)> {
    let db = TestDb::new().await?;
    let redis = TestRedis::new().await?;
    let brevo = BrevoFake::start(BREVO_KEY).await?;
    let api = PagedApiFake::start("api-token", 120, 25).await?;
    let cli = Syncward::new(&db, Some(&redis))
        .with_secret("TEST_API_AUTH", &format!("Bearer {token_in_env}"))
        .with_secret("TEST_BREVO_KEY", BREVO_KEY);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("api.toml");
    std::fs::write(
        &path,
        format!(
            r#"id = "api-contacts"
workspace = "acme"
schedule = "0 */15 * * * *"

[source]
kind = "http"
url = "{}"
cursor_param = "after"
items_pointer = "/data"
next_cursor_pointer = "/meta/next"
auth_env = "TEST_API_AUTH"

[destination]
kind = "brevo"
api_key_env = "TEST_BREVO_KEY"
base_url = "{}"
mode = "bulk"
list_ids = [12]

[mapping]
email = "email"
attributes = {{ NAME = "profile.name", EXT_ID = "id" }}
"#,
            api.url, brevo.base_url
        ),
    )?;
    cli.run(&["sync", "apply", &path.display().to_string()])
        .await?
        .ok()?;
    Ok((db, redis, brevo, api, cli, dir))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paged_api_is_followed_to_its_end_through_a_429_a_500_and_an_empty_page()
-> anyhow::Result<()> {
    let (_db, _redis, brevo, api, cli, _dir) = setup("api-token").await?;
    api.push_faults([
        ApiFault::RateLimited {
            retry_after_secs: 1,
        },
        ApiFault::ServerError,
    ]);
    let out = cli
        .run(&["sync", "run", "api-contacts", "--foreground"])
        .await?;
    assert_eq!(out.code, 0, "{out:?}");
    let mut writes: BTreeMap<String, usize> = BTreeMap::new();
    for w in brevo.writes() {
        *writes.entry(w.email).or_default() += 1;
    }
    assert_eq!(writes.len(), 120, "every record of every page");
    assert!(writes.values().all(|n| *n == 1));
    let contact = brevo
        .contacts()
        .get("api77@example.com")
        .cloned()
        .map(|c| c.attributes)
        .unwrap_or_default();
    assert_eq!(contact.get("NAME"), Some(&serde_json::json!("Name77")));
    assert_eq!(
        contact.get("EXT_ID"),
        Some(&serde_json::json!(77)),
        "JSON types are kept"
    );

    let requests = api.requests();
    assert_eq!(requests[0].status, 429);
    let waited = requests[1].at.duration_since(requests[0].at);
    assert!(
        waited >= Duration::from_millis(950),
        "Retry-After: 1 was honoured ({waited:?})"
    );
    assert_eq!(requests[1].status, 500);
    assert!(
        requests.iter().any(|r| r.after.as_deref() == Some("e25")),
        "the empty page was followed"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_api_token_fails_the_run_as_source_auth_failed() -> anyhow::Result<()> {
    let (_db, _redis, brevo, _api, cli, _dir) = setup("revoked").await?;
    let out = cli
        .run(&["sync", "run", "api-contacts", "--foreground"])
        .await?;
    assert_eq!(out.code, 1, "{out:?}");
    let runs = cli.run(&["runs", "list", "--json"]).await?.ok()?.json()?;
    assert_eq!(runs[0]["failure_code"], "source_auth_failed");
    assert!(brevo.requests().is_empty());
    Ok(())
}

/// One page of `records` contacts of about 10 KB each (an unmapped note).
fn big_page(records: usize) -> String {
    let note = "n".repeat(10_000);
    let data: Vec<String> = (1..=records)
        .map(|i| format!(r#"{{"id":{i},"email":"big{i}@example.com","note":"{note}"}}"#))
        .collect();
    format!(r#"{{"data":[{}],"meta":{{"next":null}}}}"#, data.join(","))
}

/// A page is kept as the bytes it came in and each record parsed when
/// needed (the memory bound is measured by `benches/page_memory.rs`): a
/// 50 MB page is delivered; one past the 64 MiB cap fails the run, saying so.
#[tokio::test(flavor = "multi_thread")]
async fn a_50_mb_page_is_delivered_and_one_past_the_cap_fails_saying_so() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let redis = TestRedis::new().await?;
    let brevo = BrevoFake::start(BREVO_KEY).await?;
    let big = big_page(5_000);
    let huge = big_page(7_000);
    assert!(big.len() > 50_000_000 && huge.len() > 64 * 1024 * 1024);
    let app = axum::Router::new()
        .route("/big", axum::routing::get(move || async move { big }))
        .route("/huge", axum::routing::get(move || async move { huge }));
    let (addr, _server) = crate::fakes::serve(app).await?;
    let cli = Syncward::new(&db, Some(&redis)).with_secret("TEST_BREVO_KEY", BREVO_KEY);
    let dir = tempfile::tempdir()?;
    for (id, path) in [("big-page", "big"), ("huge-page", "huge")] {
        let file = dir.path().join(format!("{id}.toml"));
        std::fs::write(
            &file,
            format!(
                r#"id = "{id}"
workspace = "acme"
schedule = "{schedule}"

[source]
kind = "http"
url = "http://{addr}/{path}"
cursor_param = "after"
items_pointer = "/data"
next_cursor_pointer = "/meta/next"

[destination]
kind = "brevo"
api_key_env = "TEST_BREVO_KEY"
base_url = "{brevo}"
mode = "bulk"
list_ids = [12]

[mapping]
email = "email"
"#,
                schedule = crate::helpers::scenario::QUIET_SCHEDULE,
                brevo = brevo.base_url,
            ),
        )?;
        cli.run(&["sync", "apply", &file.display().to_string()])
            .await?
            .ok()?;
    }
    cli.run(&["sync", "run", "big-page", "--foreground"])
        .await?
        .ok()?;
    let writes: BTreeMap<String, usize> =
        brevo
            .writes()
            .into_iter()
            .fold(BTreeMap::new(), |mut m, w| {
                *m.entry(w.email).or_default() += 1;
                m
            });
    assert_eq!(writes.len(), 5_000);
    assert!(writes.values().all(|n| *n == 1));
    let out = cli
        .run(&["sync", "run", "huge-page", "--foreground"])
        .await?;
    assert_ne!(out.code, 0);
    let runs = cli
        .run(&["runs", "list", "--sync", "huge-page", "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(runs[0]["failure_code"], "source_query_failed", "{runs}");
    let detail = runs[0]["failure_detail"].as_str().unwrap_or_default();
    assert!(detail.contains("64 MiB"), "{detail}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn only_one_address_is_refused_for_an_http_source_in_one_line() -> anyhow::Result<()> {
    let (_db, _redis, brevo, api, cli, _dir) = setup("api-token").await?;
    let out = cli
        .run(&[
            "sync",
            "run",
            "api-contacts",
            "--foreground",
            "--only",
            "someone@example.com",
        ])
        .await?;
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("--only")
            && out.stderr.contains("cannot read one record by its address"),
        "{}",
        out.stderr
    );
    assert!(brevo.requests().is_empty() && api.requests().is_empty());
    Ok(())
}
