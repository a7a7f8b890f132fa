//! The Shopify customers source against the Shopify fake: a Shopify → Brevo
//! sync under throttling, pacing from the cost bucket, and a revoked token.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::fakes::brevo::BrevoFake;
use crate::fakes::shopify::ShopifyFake;
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
    // Another app empties the shared bucket before the 1st and the 5th request:
    // one THROTTLED answer in the 200 form, one in the 429 form.
    s.shopify.drain_bucket_before(1);
    s.shopify.drain_bucket_before(5);
    let out = s
        .cli
        .run(&["sync", "run", "shop-customers", "--foreground"])
        .await?;
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
    assert_eq!(requests[0].variables["first"], 250);
    assert!(
        requests[0].variables["after"].is_null(),
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
    // 2,000 customers in pages of 250, plus the two throttled tries.
    assert_eq!(requests.len(), 8 + 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_shopify_token_fails_the_run_as_source_auth_failed_for_the_customer()
-> anyhow::Result<()> {
    let s = scenario(10, "shpat_revoked").await?;
    let out = s
        .cli
        .run(&["sync", "run", "shop-customers", "--foreground"])
        .await?;
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
