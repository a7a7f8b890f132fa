//! Shopify → Brevo as the real services answer (issue 19): marketing consent
//! carried from `defaultEmailAddress.marketingState` to Brevo's lists and
//! blacklist, API versions, and the shop states and redactions the first fakes
//! never produced.

use serde_json::{Value, json};

use crate::fakes::brevo::BrevoFake;
use crate::fakes::shopify::ShopifyFake;
use crate::helpers::{Syncward, TestDb, TestRedis};

const TOKEN: &str = "shpat_test_token";
const BREVO_KEY: &str = "xkeysib-test-key";
const CONSENT: &str =
    r#"consent = { field = "defaultEmailAddress.marketingState", subscribed = ["SUBSCRIBED"] }"#;

struct Shop {
    _db: TestDb,
    _redis: TestRedis,
    brevo: BrevoFake,
    shopify: ShopifyFake,
    cli: Syncward,
    dir: tempfile::TempDir,
}

impl Shop {
    async fn start(customers: usize) -> anyhow::Result<Self> {
        let db = TestDb::new().await?;
        let redis = TestRedis::new().await?;
        let brevo = BrevoFake::start(BREVO_KEY).await?;
        let shopify = ShopifyFake::start(TOKEN, customers, 1000.0, 250.0).await?;
        let cli = Syncward::new(&db, Some(&redis))
            .with_secret("TEST_SHOPIFY_TOKEN", TOKEN)
            .with_secret("TEST_BREVO_KEY", BREVO_KEY);
        Ok(Self {
            _db: db,
            _redis: redis,
            brevo,
            shopify,
            cli,
            dir: tempfile::tempdir()?,
        })
    }

    /// The sync file (the shipped example's shape) with this mode, API
    /// version and mapping extra line.
    fn sync_file(&self, mode: &str, version: &str, extra: &str) -> anyhow::Result<String> {
        let path = self.dir.path().join("shop.toml");
        std::fs::write(
            &path,
            format!(
                r#"id = "shop-customers"
workspace = "acme"
schedule = "0 */15 * * * *"

[source]
kind = "shopify"
shop = "acme"
api_version = "{version}"
access_token_env = "TEST_SHOPIFY_TOKEN"
page_size = 250
base_url = "{}"

[destination]
kind = "brevo"
api_key_env = "TEST_BREVO_KEY"
base_url = "{}"
mode = "{mode}"
list_ids = [12]

[mapping]
email = "defaultEmailAddress.emailAddress"
attributes = {{ FIRSTNAME = "firstName", LASTNAME = "lastName" }}
{extra}
"#,
                self.shopify.base_url, self.brevo.base_url
            ),
        )?;
        Ok(path.display().to_string())
    }

    async fn apply(&self, mode: &str, version: &str, extra: &str) -> anyhow::Result<()> {
        let path = self.sync_file(mode, version, extra)?;
        self.cli.run(&["sync", "apply", &path]).await?.ok()?;
        Ok(())
    }

    async fn run(&self) -> anyhow::Result<(i32, Value)> {
        let out = self
            .cli
            .run(&["sync", "run", "shop-customers", "--foreground"])
            .await?;
        let runs = self
            .cli
            .run(&["runs", "list", "--json"])
            .await?
            .ok()?
            .json()?;
        let run_id = runs[0]["id"].as_i64().unwrap_or_default().to_string();
        let shown = self
            .cli
            .run(&["runs", "show", &run_id, "--json"])
            .await?
            .ok()?
            .json()?;
        Ok((out.code, shown))
    }
}

/// Shopify's `CustomerEmailAddressMarketingState` values (Admin GraphQL
/// reference): SUBSCRIBED is consent, UNSUBSCRIBED an explicit opt-out;
/// the others (PENDING: a double opt-in not yet confirmed) are unknown.
const STATES: [&str; 5] = [
    "SUBSCRIBED",
    "UNSUBSCRIBED",
    "NOT_SUBSCRIBED",
    "INVALID",
    "PENDING",
];

/// Customer `i` (1-based, `customer{i}@example.com`) has `STATES[(i-1) % 5]`.
fn state_of(email: &str) -> &'static str {
    let i: usize = email
        .trim_start_matches("customer")
        .split('@')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    STATES[(i - 1) % STATES.len()]
}

/// The consent state a Shopify state maps to under `CONSENT`.
fn consent_of(state: &str) -> &'static str {
    match state {
        "SUBSCRIBED" => "subscribed",
        "UNSUBSCRIBED" => "unsubscribed",
        _ => "unknown",
    }
}

/// The holding list of the bulk runs that have one.
const HOLDING: i64 = 99;

async fn consent_is_honoured(mode: &str, holding: bool) -> anyhow::Result<()> {
    let s = Shop::start(20).await?;
    s.shopify.edit_customers(|i, c| {
        c["defaultEmailAddress"]["marketingState"] = json!(STATES[i % STATES.len()]);
    });
    let path = s.sync_file(mode, "2025-07", CONSENT)?;
    if holding {
        let text = std::fs::read_to_string(&path)?.replace(
            "list_ids = [12]",
            &format!("list_ids = [12]\nholding_list_id = {HOLDING}"),
        );
        std::fs::write(&path, text)?;
    }
    let applied = s.cli.run(&["sync", "apply", &path]).await?.ok()?;
    // Bulk without a holding list says at apply what it will cost.
    assert_eq!(
        applied.stderr.contains("no destination.holding_list_id"),
        mode == "bulk" && !holding,
        "{}",
        applied.stderr
    );
    // The preview says each record's consent state.
    let preview = s
        .cli
        .run(&["sync", "preview", "shop-customers", "--json"])
        .await?
        .ok()?
        .json()?;
    let consents: Vec<(String, String)> = preview["records"]
        .as_array()
        .map(|records| {
            records
                .iter()
                .map(|r| {
                    (
                        r["email"].as_str().unwrap_or_default().to_string(),
                        r["consent"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(!consents.is_empty(), "{preview}");
    for (email, consent) in &consents {
        assert_eq!(consent, consent_of(state_of(email)), "{email}: {preview}");
    }
    let (code, shown) = s.run().await?;
    assert_eq!(code, 0, "{shown}");

    let contacts = s.brevo.contacts();
    assert_eq!(contacts.len(), 20, "every customer is written");
    for (email, contact) in &contacts {
        let state = state_of(email);
        let off_list = if holding { vec![HOLDING] } else { vec![] };
        let (lists, blocklisted) = match consent_of(state) {
            "subscribed" => (vec![12], false),
            "unsubscribed" => (off_list, true),
            _ => (off_list, false),
        };
        assert_eq!(contact.list_ids, lists, "{email} {state}");
        assert_eq!(contact.email_blacklisted, blocklisted, "{email} {state}");
    }
    // No request puts anyone but the subscribed on list 12, none blocklists
    // anyone but the opted-out, and `emailBlacklisted: false` is never sent.
    for request in s.brevo.requests() {
        let rows: Vec<&Value> = match request.body.get("jsonBody").and_then(Value::as_array) {
            Some(rows) => rows.iter().collect(),
            None => vec![&request.body],
        };
        let to_list_12 = request
            .body
            .get("listIds")
            .is_some_and(|l| l.as_array().is_some_and(|l| l.contains(&json!(12))));
        let blocklists = request.body.get("emailBlacklisted") == Some(&json!(true))
            || request.body.get("emailBlacklist") == Some(&json!(true));
        assert_ne!(request.body.get("emailBlacklisted"), Some(&json!(false)));
        for row in rows {
            let email = row["email"].as_str().unwrap_or_default();
            let consent = consent_of(state_of(email));
            assert_eq!(
                to_list_12,
                consent == "subscribed",
                "{email}: {}",
                request.body
            );
            assert_eq!(
                blocklists,
                consent == "unsubscribed",
                "{email}: {}",
                request.body
            );
        }
    }
    // Bulk stays bulk with a holding list: one import per consent group of
    // each page, no single write.
    if mode == "bulk" && holding {
        assert!(s.brevo.requests_to("/v3/contacts").is_empty());
        assert_eq!(s.brevo.requests_to("/v3/contacts/import").len(), 3);
    }
    // Imports are quiet: Brevo sends the account owner no e-mail per page.
    for import in s.brevo.requests_to("/v3/contacts/import") {
        assert_eq!(
            import.body["disableNotification"],
            json!(true),
            "{}",
            import.body
        );
    }
    Ok(())
}

/// Brevo: `createContact.emailBlacklisted` and `listIds` (spec 2025-08,
/// `paths./contacts.post`); an import's `listIds` is mandatory and its
/// `emailBlacklist` applies to the whole import (`requestContactImport`).
#[tokio::test(flavor = "multi_thread")]
async fn consent_has_three_states_in_bulk_mode_with_a_holding_list() -> anyhow::Result<()> {
    consent_is_honoured("bulk", true).await
}

#[tokio::test(flavor = "multi_thread")]
async fn consent_has_three_states_in_bulk_mode_without_a_holding_list() -> anyhow::Result<()> {
    consent_is_honoured("bulk", false).await
}

#[tokio::test(flavor = "multi_thread")]
async fn consent_has_three_states_in_single_mode() -> anyhow::Result<()> {
    consent_is_honoured("single", false).await
}

/// The opt-in level and the time consent last changed
/// (`CustomerEmailAddress.marketingOptInLevel` and `marketingUpdatedAt`)
/// are read with every customer and can be mapped to attributes.
#[tokio::test(flavor = "multi_thread")]
async fn the_opt_in_level_and_consent_time_can_be_mapped_to_attributes() -> anyhow::Result<()> {
    let s = Shop::start(3).await?;
    let path = s.sync_file("bulk", "2025-07", CONSENT)?;
    let text = std::fs::read_to_string(&path)?.replace(
        r#"attributes = { FIRSTNAME = "firstName", LASTNAME = "lastName" }"#,
        r#"attributes = { FIRSTNAME = "firstName", OPT_IN_LEVEL = "defaultEmailAddress.marketingOptInLevel", CONSENT_UPDATED_AT = "defaultEmailAddress.marketingUpdatedAt" }"#,
    );
    assert!(text.contains("OPT_IN_LEVEL"));
    std::fs::write(&path, text)?;
    s.cli.run(&["sync", "apply", &path]).await?.ok()?;
    let (code, shown) = s.run().await?;
    assert_eq!(code, 0, "{shown}");
    // The fake answers only the fields the query selected, as GraphQL does.
    let contacts = s.brevo.contacts();
    let first = &contacts["customer1@example.com"];
    assert_eq!(first.attributes["OPT_IN_LEVEL"], "SINGLE_OPT_IN");
    // A date attribute keeps the day of the timestamp.
    assert_eq!(first.attributes["CONSENT_UPDATED_AT"], "2025-01-01");
    Ok(())
}

/// Without a consent rule, a store's customers would all join the lists:
/// `sync apply` refuses the file, naming the key to add.
#[tokio::test(flavor = "multi_thread")]
async fn a_shopify_sync_to_brevo_lists_without_a_consent_rule_is_refused_at_apply()
-> anyhow::Result<()> {
    let s = Shop::start(1).await?;
    let path = s.sync_file("bulk", "2025-07", "")?;
    let out = s.cli.run(&["sync", "apply", &path]).await?;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("mapping.consent"), "{out:?}");
    assert!(s.brevo.requests().is_empty());
    Ok(())
}

#[test]
fn the_shipped_shopify_example_carries_consent_in_three_states() -> anyhow::Result<()> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/syncs/shopify-customers.toml");
    let example = syncward::config::SyncDefinition::parse(
        "shopify-customers.toml",
        &std::fs::read_to_string(&path)?,
    )?;
    let rule = example
        .mapping
        .consent
        .ok_or_else(|| anyhow::anyhow!("no consent rule"))?;
    assert_eq!(rule.field, "defaultEmailAddress.marketingState");
    assert_eq!(rule.subscribed, vec!["SUBSCRIBED".to_string()]);
    assert_eq!(rule.unsubscribed, vec!["UNSUBSCRIBED".to_string()]);
    let syncward::destination::DestinationConfig::Brevo(brevo) = example.destination else {
        anyhow::bail!("the example writes to Brevo");
    };
    assert!(brevo.holding_list_id.is_some(), "bulk stays bulk");
    assert!(!brevo.import_notifications);
    Ok(())
}

/// `Customer.defaultEmailAddress` exists from Admin API 2025-04 on (specs
/// README: "`Customer.email` is deprecated since 2025-04 in favour of
/// `defaultEmailAddress`"): an older pinned version is refused at apply.
#[tokio::test(flavor = "multi_thread")]
async fn an_api_version_before_default_email_address_is_refused_at_apply_with_the_reason()
-> anyhow::Result<()> {
    let s = Shop::start(1).await?;
    let path = s.sync_file("bulk", "2025-01", CONSENT)?;
    let out = s.cli.run(&["sync", "apply", &path]).await?;
    assert_eq!(out.code, 2, "{out:?}");
    assert!(out.stderr.contains("source.api_version"), "{out:?}");
    assert!(out.stderr.contains("2025-04"), "{out:?}");
    assert!(out.stderr.contains("defaultEmailAddress"), "{out:?}");
    Ok(())
}

/// Shopify answers every request with `X-Shopify-API-Version` (the version
/// it served: a retired pinned version falls forward to the oldest supported
/// one) and, for deprecated usage, `X-Shopify-API-Deprecated-Reason`
/// (shopify.dev/docs/api/usage/versioning). The run goes on, warns once and
/// says so on its timeline.
#[tokio::test(flavor = "multi_thread")]
async fn a_served_version_other_than_the_pinned_one_is_warned_on_the_run() -> anyhow::Result<()> {
    let s = Shop::start(600).await?;
    s.shopify.serve_version(
        "2025-07",
        Some("https://shopify.dev/api/usage/versioning#deprecation-practices"),
    );
    s.apply("bulk", "2025-04", CONSENT).await?;
    let (code, shown) = s.run().await?;
    assert_eq!(code, 0, "{shown}");
    assert_eq!(s.brevo.contacts().len(), 600);
    let notices: Vec<&Value> = shown["events"]
        .as_array()
        .map(|events| {
            events
                .iter()
                .filter(|e| e["kind"] == "source_notice")
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(notices.len(), 1, "once per run, not per page: {shown}");
    let message = notices[0]["detail"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("served API version 2025-07, not the pinned 2025-04"),
        "{message}"
    );
    assert!(message.contains("deprecation-practices"), "{message}");
    // The sync's page (and `sync show`) says it too, while the latest run did.
    let sync = s
        .cli
        .run(&["sync", "show", "shop-customers", "--json"])
        .await?
        .ok()?
        .json()?;
    let on_sync = sync["source_notices"][0]["detail"]["message"]
        .as_str()
        .unwrap_or_default();
    assert_eq!(on_sync, message, "{sync}");
    Ok(())
}

async fn fails_as(s: &Shop, code: &str, detail: &str) -> anyhow::Result<()> {
    s.apply("bulk", "2025-07", CONSENT).await?;
    let (exit, shown) = s.run().await?;
    assert_eq!(exit, 1, "{shown}");
    assert_eq!(shown["failure"]["code"], code, "{shown}");
    assert_eq!(shown["failure"]["owner"], "customer", "{shown}");
    assert!(
        !shown["failure"]["what_next"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{shown}"
    );
    let got = shown["run"]["failure_detail"].as_str().unwrap_or_default();
    assert!(got.contains(detail), "{got}");
    assert!(s.brevo.requests().is_empty(), "nothing was sent");
    Ok(())
}

/// "402 Payment Required: The requested shop is currently frozen. The shop
/// owner needs to log in to the shop's admin and pay the outstanding balance
/// to unfreeze the shop." (shopify.dev/docs/api/usage/response-codes; the
/// body `{"errors":"Unavailable Shop"}` as observed on the Shopify community).
#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_shop_fails_the_run_as_source_account_frozen_for_the_customer()
-> anyhow::Result<()> {
    let s = Shop::start(3).await?;
    s.shopify
        .answer_always(402, json!({"errors": "Unavailable Shop"}));
    fails_as(&s, "source_account_frozen", "Unavailable Shop").await
}

/// "423 Locked: The requested shop is currently locked." (same page).
#[tokio::test(flavor = "multi_thread")]
async fn a_locked_shop_fails_the_run_as_source_account_locked_for_the_customer()
-> anyhow::Result<()> {
    let s = Shop::start(3).await?;
    s.shopify
        .answer_always(423, json!({"errors": "This store is unavailable"}));
    fails_as(&s, "source_account_locked", "shop is locked").await
}

/// "403 Forbidden: ... generally returned if you haven't requested the
/// appropriate scope for this action." (same page).
#[tokio::test(flavor = "multi_thread")]
async fn a_forbidden_answer_says_an_access_scope_is_missing() -> anyhow::Result<()> {
    let s = Shop::start(3).await?;
    s.shopify.answer_always(
        403,
        json!({"errors": "[API] This action requires merchant approval for read_customers scope."}),
    );
    fails_as(&s, "source_auth_failed", "access scope").await
}

/// Protected customer data: "APIs will redact customer personal data by
/// default" for apps without approval (shopify.dev changelog, 2022-10; "Work
/// with protected customer data": "handle errors or redacted data"). Names
/// and e-mails come back null on every customer.
#[tokio::test(flavor = "multi_thread")]
async fn a_page_of_redacted_customers_fails_the_run_as_source_data_redacted_not_missing_email()
-> anyhow::Result<()> {
    let s = Shop::start(5).await?;
    s.shopify.edit_customers(|_, c| {
        c["firstName"] = Value::Null;
        c["lastName"] = Value::Null;
        c["defaultEmailAddress"]["emailAddress"] = Value::Null;
    });
    fails_as(&s, "source_data_redacted", "redacted").await?;
    let runs = s.cli.run(&["runs", "list", "--json"]).await?.ok()?.json()?;
    assert_eq!(
        runs[0]["records_rejected"].as_i64().unwrap_or_default(),
        0,
        "{runs}"
    );
    Ok(())
}

/// GraphQL's form of a missing scope: HTTP 200 with
/// `errors[].extensions.code == "ACCESS_DENIED"` (shopify.dev Admin GraphQL
/// "Status and error codes": "The client doesn't have correct authentication
/// credentials. Similar to 401 Unauthorized.").
#[tokio::test(flavor = "multi_thread")]
async fn a_graphql_access_denied_says_an_access_scope_is_missing() -> anyhow::Result<()> {
    let s = Shop::start(3).await?;
    s.shopify.answer_always(
        200,
        json!({"errors": [{
            "message": "Access denied for customers field. Required access: `read_customers` access scope.",
            "extensions": {"code": "ACCESS_DENIED", "documentation": "https://shopify.dev/api/usage/access-scopes"}
        }]}),
    );
    fails_as(&s, "source_auth_failed", "read_customers").await
}

/// A webhook destination has no lists: each posted record says whether it
/// carries consent, so the receiver can honour it.
#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_receives_each_records_consent() -> anyhow::Result<()> {
    let s = Shop::start(10).await?;
    s.shopify.edit_customers(|i, c| {
        c["defaultEmailAddress"]["marketingState"] = json!(STATES[i % STATES.len()]);
    });
    let receiver = crate::fakes::webhook::WebhookReceiver::start().await?;
    let path = s.dir.path().join("hook.toml");
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
base_url = "{}"

[destination]
kind = "webhook"
url = "{}"

[mapping]
email = "defaultEmailAddress.emailAddress"
{CONSENT}
"#,
            s.shopify.base_url, receiver.url
        ),
    )?;
    s.cli
        .run(&["sync", "apply", &path.display().to_string()])
        .await?
        .ok()?;
    let (code, shown) = s.run().await?;
    assert_eq!(code, 0, "{shown}");
    let posts = receiver.received();
    assert_eq!(posts.len(), 10);
    for post in posts {
        let body: Value = serde_json::from_slice(&post.body)?;
        let email = body["email"].as_str().unwrap_or_default();
        assert_eq!(body["consent"], consent_of(state_of(email)), "{body}");
    }
    Ok(())
}
