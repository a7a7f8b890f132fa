//! The Shopify customers source against the Shopify fake: a Shopify → Brevo
//! sync under throttling, pacing from the cost bucket, and a revoked token;
//! a large store read through a bulk operation in each of the states
//! Shopify documents, killed mid-file and stopped mid-wait.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::fakes::brevo::BrevoFake;
use crate::fakes::shopify::{BulkScript, ShopifyFake};
use crate::helpers::daemon::eventually;
use crate::helpers::{Syncward, TestDb, TestRedis};

const TOKEN: &str = "shpat_test_token";
const BREVO_KEY: &str = "xkeysib-test-key";

struct ShopifyScenario {
    _db: TestDb,
    _redis: TestRedis,
    brevo: BrevoFake,
    shopify: ShopifyFake,
    cli: Syncward,
    _dir: tempfile::TempDir,
}

async fn scenario(customers: usize, token_in_env: &str) -> anyhow::Result<ShopifyScenario> {
    scenario_with(customers, token_in_env, "").await
}

/// The scenario with `source_extra` lines in the `[source]` table.
async fn scenario_with(
    customers: usize,
    token_in_env: &str,
    source_extra: &str,
) -> anyhow::Result<ShopifyScenario> {
    let db = TestDb::new().await?;
    let redis = TestRedis::new().await?;
    let brevo = BrevoFake::start(BREVO_KEY).await?;
    // A bucket of 1,000 points refilled at 250/s; a page of 250 costs 252.
    let shopify = ShopifyFake::start(TOKEN, customers, 1000.0, 250.0).await?;
    let cli = Syncward::new(&db, Some(&redis))
        .with_secret("TEST_SHOPIFY_TOKEN", token_in_env)
        .with_secret("TEST_BREVO_KEY", BREVO_KEY);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("shop.toml");
    std::fs::write(
        &path,
        format!(
            r#"id = "shop-customers"
workspace = "acme"
schedule = "0 */15 * * * *"

[source]
kind = "shopify"
shop = "acme"
api_version = "2025-07"
access_token_env = "TEST_SHOPIFY_TOKEN"
page_size = 250
base_url = "{}"
{source_extra}

[destination]
kind = "brevo"
api_key_env = "TEST_BREVO_KEY"
base_url = "{}"
mode = "bulk"
list_ids = [12]

[mapping]
email = "defaultEmailAddress.emailAddress"
attributes = {{ FIRSTNAME = "firstName", LASTNAME = "lastName", SHOPIFY_ID = "id" }}
consent = {{ field = "defaultEmailAddress.marketingState", subscribed = ["SUBSCRIBED"] }}
"#,
            shopify.base_url, brevo.base_url
        ),
    )?;
    cli.run(&["sync", "apply", &path.display().to_string()])
        .await?
        .ok()?;
    Ok(ShopifyScenario {
        _db: db,
        _redis: redis,
        brevo,
        shopify,
        cli,
        _dir: dir,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn shopify_customers_reach_brevo_once_each_under_throttling_with_the_waits_kept()
-> anyhow::Result<()> {
    let s = scenario(2000, TOKEN).await?;
    // Another app empties the shared bucket before the 2nd and the 6th
    // request (the 1st is the count): one THROTTLED answer in the 200 form,
    // one in the 429 form.
    s.shopify.drain_bucket_before(2);
    s.shopify.drain_bucket_before(6);
    let out = run_foreground(&s.cli).await?;
    assert_eq!(out.code, 0, "{out:?}");

    let mut writes: BTreeMap<String, usize> = BTreeMap::new();
    for w in s.brevo.writes() {
        *writes.entry(w.email).or_default() += 1;
    }
    assert_eq!(writes.len(), 2000, "every customer reached Brevo");
    assert!(writes.values().all(|n| *n == 1), "each exactly once");
    let contact = s.brevo.contacts().get("customer1234@example.com").cloned();
    let attributes = contact.map(|c| c.attributes).unwrap_or_default();
    assert_eq!(
        attributes.get("FIRSTNAME"),
        Some(&serde_json::json!("First1234"))
    );
    assert_eq!(
        attributes.get("SHOPIFY_ID"),
        Some(&serde_json::json!("gid://shopify/Customer/1234"))
    );

    let requests = s.shopify.requests();
    let throttled: Vec<u16> = requests
        .iter()
        .filter(|r| r.throttled)
        .map(|r| r.status)
        .collect();
    // Pacing from throttleStatus: the only throttles are the two the other app caused.
    assert_eq!(throttled, vec![200, 429], "{requests:?}");
    assert!(requests.iter().all(|r| r.version == "2025-07"));
    // A first read asks how large the store is (below `bulk_above`: paged).
    assert!(
        requests[0].variables["limit"] == 10_000,
        "{:?}",
        requests[0]
    );
    let pages: Vec<_> = requests
        .iter()
        .filter(|r| r.variables.get("first").is_some())
        .collect();
    assert_eq!(pages[0].variables["first"], 250);
    assert!(
        pages[0].variables["after"].is_null(),
        "the first page starts at the beginning"
    );
    assert!(
        requests
            .last()
            .is_some_and(|r| r.variables["after"].is_string())
    );
    for w in s.shopify.instructed_waits() {
        let back = w
            .next_request_at
            .ok_or_else(|| anyhow::anyhow!("the client never came back after {w:?}"))?;
        let waited = back.duration_since(w.answered_at);
        assert!(
            waited + Duration::from_millis(20) >= w.wait,
            "told to wait {:?} (HTTP {}), came back after {waited:?}",
            w.wait,
            w.form
        );
    }
    // The count, 2,000 customers in pages of 250, and the two throttled tries.
    assert_eq!(requests.len(), 1 + 8 + 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_shopify_token_fails_the_run_as_source_auth_failed_for_the_customer()
-> anyhow::Result<()> {
    let s = scenario(10, "shpat_revoked").await?;
    let out = run_foreground(&s.cli).await?;
    assert_eq!(out.code, 1, "{out:?}");
    let runs = s.cli.run(&["runs", "list", "--json"]).await?.ok()?.json()?;
    let run_id = runs[0]["id"].as_i64().unwrap_or_default().to_string();
    let shown = s
        .cli
        .run(&["runs", "show", &run_id, "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(shown["failure"]["code"], "source_auth_failed");
    assert_eq!(shown["failure"]["owner"], "customer");
    assert!(
        shown["run"]["failure_detail"]
            .as_str()
            .unwrap_or_default()
            .contains("Invalid API key or access token"),
        "{shown}"
    );
    assert!(s.brevo.requests().is_empty(), "nothing was sent");
    Ok(())
}

/// A foreground run of the shop's sync.
async fn run_foreground(cli: &Syncward) -> anyhow::Result<crate::helpers::cli::Outcome> {
    cli.run(&["sync", "run", "shop-customers", "--foreground"])
        .await
}

/// A store of `customers`, exported in bulk from 1,000 on, in pages of 700.
const BULK: &str = "bulk_above = 1000\nbulk_page_size = 700";

/// How many times each address was written to Brevo.
fn writes_per_address(brevo: &BrevoFake) -> BTreeMap<String, usize> {
    let mut writes: BTreeMap<String, usize> = BTreeMap::new();
    for w in brevo.writes() {
        *writes.entry(w.email).or_default() += 1;
    }
    writes
}

/// The run's timeline (`runs show --json`), as text.
async fn last_run_shown(cli: &Syncward) -> anyhow::Result<serde_json::Value> {
    let runs = cli.run(&["runs", "list", "--json"]).await?.ok()?.json()?;
    let run_id = runs[0]["id"].as_i64().unwrap_or_default().to_string();
    cli.run(&["runs", "show", &run_id, "--json"])
        .await?
        .ok()?
        .json()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_large_store_is_read_through_one_bulk_export_then_incrementally() -> anyhow::Result<()> {
    let s = scenario_with(3000, TOKEN, BULK).await?;
    let out = run_foreground(&s.cli).await?;
    assert_eq!(out.code, 0, "{out:?}");
    let writes = writes_per_address(&s.brevo);
    assert_eq!(writes.len(), 3000, "every customer reached Brevo");
    assert!(writes.values().all(|n| *n == 1), "each exactly once");
    assert_eq!(s.shopify.bulk_operations_started(), 1);
    // One download read whole across the run's five pages, with no token.
    let files = s.shopify.file_requests();
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files.iter().all(|f| !f.token_sent && f.status == 200));
    // Pages of 700: five imports' worth of pages, not twelve of 250.
    let pages: Vec<_> = s
        .shopify
        .requests()
        .into_iter()
        .filter(|r| r.variables.get("first").is_some())
        .collect();
    assert_eq!(pages.len(), 1, "only the incremental read pages: {pages:?}");
    assert!(
        pages[0].variables["query"]
            .as_str()
            .is_some_and(|q| q.starts_with("updated_at:>='")),
        "it reads from the export's start less the overlap: {pages:?}"
    );

    // A customer changed after the export is read incrementally; no new export.
    s.shopify.update_now(41, "Changed");
    let out = run_foreground(&s.cli).await?;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(s.shopify.bulk_operations_started(), 1);
    let contact = s.brevo.contacts().get("customer42@example.com").cloned();
    assert_eq!(
        contact.map(|c| c.attributes.get("FIRSTNAME").cloned()),
        Some(Some(serde_json::json!("Changed")))
    );
    assert_eq!(writes_per_address(&s.brevo).values().sum::<usize>(), 3001);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_export_shopify_ends_early_or_short_of_its_count_is_started_again() -> anyhow::Result<()>
{
    let s = scenario_with(1500, TOKEN, BULK).await?;
    s.shopify.script_bulk([
        BulkScript::ending("FAILED", Some("TIMEOUT")),
        BulkScript::ending("CANCELED", None),
        BulkScript {
            drop_lines: 3,
            ..BulkScript::default()
        },
    ]);
    let out = run_foreground(&s.cli).await?;
    assert_eq!(out.code, 0, "{out:?}");
    let writes = writes_per_address(&s.brevo);
    assert_eq!(writes.len(), 1500, "every customer reached Brevo");
    assert!(writes.values().all(|n| *n == 1), "each exactly once");
    assert_eq!(s.shopify.bulk_operations_started(), 4);
    let shown = last_run_shown(&s.cli).await?.to_string();
    for said in [
        "ended FAILED (TIMEOUT); its partial data is not used; a new one was started",
        "ended CANCELED; a new one was started",
        "counted 1500 customers but its file held 1497",
    ] {
        assert!(shown.contains(said), "{said:?} in {shown}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_export_is_started_again() -> anyhow::Result<()> {
    let s = scenario_with(1200, TOKEN, BULK).await?;
    s.shopify
        .script_bulk([BulkScript::ending("EXPIRED", None), BulkScript::default()]);
    let out = run_foreground(&s.cli).await?;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(writes_per_address(&s.brevo).len(), 1200);
    assert!(
        last_run_shown(&s.cli)
            .await?
            .to_string()
            .contains("ended EXPIRED; a new one was started")
    );

    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn an_export_denied_access_fails_the_run_as_source_auth_failed() -> anyhow::Result<()> {
    let s = scenario_with(1200, TOKEN, BULK).await?;
    s.shopify
        .script_bulk([BulkScript::ending("FAILED", Some("ACCESS_DENIED"))]);
    let out = run_foreground(&s.cli).await?;
    assert_eq!(out.code, 1, "{out:?}");
    let shown = last_run_shown(&s.cli).await?;
    assert_eq!(shown["failure"]["code"], "source_auth_failed", "{shown}");
    assert!(
        shown["run"]["failure_detail"]
            .as_str()
            .is_some_and(|d| d.contains("ACCESS_DENIED")),
        "{shown}"
    );
    assert_eq!(s.shopify.bulk_operations_started(), 1);
    assert!(s.brevo.writes().is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_mid_file_resumes_at_its_byte_offset_in_the_same_export() -> anyhow::Result<()>
{
    let s = scenario_with(3000, TOKEN, "bulk_above = 1000\nbulk_page_size = 500").await?;
    let mut child = s
        .cli
        .command(&["sync", "run", "shop-customers", "--foreground"])
        .spawn()?;
    eventually(Duration::from_secs(60), "two pages at Brevo", || async {
        Ok(s.brevo.writes().len() >= 1000)
    })
    .await?;
    s.brevo.hold_writes();
    eventually(Duration::from_secs(30), "a write held", || async {
        Ok(s.brevo.held_writes() > 0)
    })
    .await?;
    child.start_kill()?;
    child.wait().await?;
    s.brevo.release_writes();

    let out = run_foreground(&s.cli).await?;
    assert_eq!(out.code, 0, "{out:?}");
    let writes = writes_per_address(&s.brevo);
    assert_eq!(writes.len(), 3000, "every customer reached Brevo");
    let twice = writes.values().filter(|n| **n > 1).count();
    assert!(twice <= 500, "at most the page in flight again: {twice}");
    assert_eq!(s.shopify.bulk_operations_started(), 1, "the same export");
    let files = s.shopify.file_requests();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files.iter().all(|f| f.operation == 1), "{files:?}");
    assert!(
        files[1].status == 206
            && files[1]
                .range
                .as_deref()
                .is_some_and(|r| r.starts_with("bytes=") && r != "bytes=0-"),
        "the second run asked from its offset: {files:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_stopped_while_its_export_runs_ends_at_once_and_the_next_takes_the_export_up()
-> anyhow::Result<()> {
    let s = scenario_with(1200, TOKEN, BULK).await?;
    // Running for the first looks: the first run is stopped meanwhile (it
    // would need 15 s of polls to see the export complete).
    let mut states = vec!["CREATED"];
    states.extend(std::iter::repeat_n("RUNNING", 4));
    states.push("COMPLETED");
    s.shopify.script_bulk([BulkScript {
        states,
        ..BulkScript::default()
    }]);
    let child = s
        .cli
        .command(&["sync", "run", "shop-customers", "--foreground"])
        .spawn()?;
    eventually(Duration::from_secs(30), "the export started", || async {
        Ok(s.shopify.bulk_operations_started() == 1)
    })
    .await?;
    let pid = child.id().ok_or_else(|| anyhow::anyhow!("no pid"))?;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).ok_or_else(|| anyhow::anyhow!("pid 0"))?,
        rustix::process::Signal::TERM,
    )?;
    let stopped_at = std::time::Instant::now();
    let out = child.wait_with_output().await?;
    assert!(
        stopped_at.elapsed() < Duration::from_secs(15),
        "stopped in {:?}",
        stopped_at.elapsed()
    );
    assert!(s.brevo.writes().is_empty(), "{out:?}");

    let out = run_foreground(&s.cli).await?;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(
        s.shopify.bulk_operations_started(),
        1,
        "taken up, not started again"
    );
    assert_eq!(writes_per_address(&s.brevo).len(), 1200);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn only_one_customer_is_found_by_shopifys_search_by_email_and_sent() -> anyhow::Result<()> {
    let s = scenario(30, TOKEN).await?;
    let out = s
        .cli
        .run(&[
            "sync",
            "run",
            "shop-customers",
            "--foreground",
            "--only",
            "customer7@example.com",
        ])
        .await?
        .ok()?;
    assert!(
        out.stdout.contains("Sent for customer7@example.com"),
        "{}",
        out.stdout
    );
    // One search, by e-mail; one customer written.
    let searches: Vec<String> = s
        .shopify
        .requests()
        .iter()
        .filter_map(|r| {
            r.variables
                .get("query")
                .and_then(|q| q.as_str())
                .map(str::to_string)
        })
        .collect();
    assert_eq!(
        searches,
        vec!["email:\"customer7@example.com\"".to_string()]
    );
    assert_eq!(
        writes_per_address(&s.brevo).into_keys().collect::<Vec<_>>(),
        vec!["customer7@example.com".to_string()]
    );
    Ok(())
}
