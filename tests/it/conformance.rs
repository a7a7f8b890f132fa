//! The connector conformance suite: one set of behaviours every source
//! (postgres, shopify, http) and every destination (brevo single, brevo bulk,
//! webhook) must show, run against each (Vector's sink compliance harness).
//!
//! Sources (into Brevo bulk): resume from the saved cursor, an empty source,
//! a refused credential is final, a hang hits the timeout, a rate limit is
//! honoured (where the service has one), a frozen or locked account and a
//! page of redacted records fail the run with their own codes (where the
//! service documents them). Destinations (from Postgres): a replay makes no
//! call, a rate limit is honoured, a rejected record is kept and the run goes
//! on, a refused credential is final, a hang hits the timeout, a record
//! without consent is kept off marketing lists, a null attribute is sent as
//! the service allows; Brevo only: 425 is tried again, attributes the account
//! lacks are left out and named on the run.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::fakes::brevo::{BrevoFake, Fault};
use crate::fakes::paged_api::{ApiFault, PagedApiFake};
use crate::fakes::shopify::ShopifyFake;
use crate::fakes::webhook::WebhookReceiver;
use crate::helpers::cli::Outcome;
use crate::helpers::{Syncward, TestDb, TestRedis};

const BREVO_KEY: &str = "xkeysib-test-key";
const SECRET: &str = "the-right-secret";
const SYNC: &str = "conformance";

#[derive(Debug, Clone, Copy, PartialEq)]
enum SourceKind {
    Postgres,
    Shopify,
    Http,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum DestinationKind {
    BrevoSingle,
    BrevoBulk,
    Webhook,
}

/// A published sync `conformance` between one source and one destination.
struct Rig {
    db: TestDb,
    _redis: TestRedis,
    cli: Syncward,
    dir: tempfile::TempDir,
    brevo: BrevoFake,
    webhook: Option<WebhookReceiver>,
    shopify: Option<ShopifyFake>,
    api: Option<PagedApiFake>,
    source: SourceKind,
}

impl Rig {
    async fn new(
        source: SourceKind,
        destination: DestinationKind,
        records: usize,
    ) -> anyhow::Result<Self> {
        let db = TestDb::new().await?;
        let redis = TestRedis::new().await?;
        let brevo = BrevoFake::start(BREVO_KEY).await?;
        let (mut shopify, mut api, mut webhook) = (None, None, None);
        // `marketing` is read only by the consent cases (`map_also`).
        sqlx::raw_sql("CREATE TABLE contacts (id bigint PRIMARY KEY, email text, first_name text, marketing text)")
            .execute(&db.pool)
            .await?;
        let source_table = match source {
            SourceKind::Postgres => {
                sqlx::query("INSERT INTO contacts SELECT i, 'user' || i || '@example.com', 'F' || i FROM generate_series(1, $1) i")
                    .bind(records as i64)
                    .execute(&db.pool)
                    .await?;
                r#"kind = "postgres"
url_env = "TEST_SOURCE_URL"
query = "SELECT id, email, first_name FROM contacts"
cursor_column = "id"
page_size = 10
statement_timeout = "500ms""#
                    .to_string()
            }
            SourceKind::Shopify => {
                let fake = ShopifyFake::start(SECRET, records, 1000.0, 500.0).await?;
                let table = format!(
                    r#"kind = "shopify"
shop = "acme"
api_version = "2025-07"
access_token_env = "TEST_SOURCE_SECRET"
page_size = 10
base_url = "{}"
timeout = "300ms""#,
                    fake.base_url
                );
                shopify = Some(fake);
                table
            }
            SourceKind::Http => {
                let fake = PagedApiFake::start(SECRET, records, 10).await?;
                let table = format!(
                    r#"kind = "http"
url = "{}"
cursor_param = "after"
items_pointer = "/data"
next_cursor_pointer = "/meta/next"
auth_env = "TEST_SOURCE_SECRET"
timeout = "300ms""#,
                    fake.url
                );
                api = Some(fake);
                table
            }
        };
        let destination_table = match destination {
            DestinationKind::BrevoSingle | DestinationKind::BrevoBulk => format!(
                r#"kind = "brevo"
api_key_env = "TEST_BREVO_KEY"
base_url = "{}"
mode = "{}"
list_ids = [12]
timeout = "300ms""#,
                brevo.base_url,
                if destination == DestinationKind::BrevoSingle {
                    "single"
                } else {
                    "bulk"
                }
            ),
            DestinationKind::Webhook => {
                // Verifies every POST: the signature must hold on each path.
                let fake =
                    WebhookReceiver::start_verifying("webhook-signing-secret-of-32-bytes").await?;
                let table = format!(
                    r#"kind = "webhook"
url = "{}"
secret_env = "TEST_WEBHOOK_SECRET"
timeout = "300ms""#,
                    fake.url
                );
                webhook = Some(fake);
                table
            }
        };
        let email = match source {
            SourceKind::Shopify => "defaultEmailAddress.emailAddress",
            _ => "email",
        };
        // A store's customers carry their consent state; Brevo lists need it.
        let consent = match source {
            SourceKind::Shopify => CONSENT_SHOPIFY,
            _ => "",
        };
        let cli = Syncward::new(&db, Some(&redis))
            .with_secret("TEST_SOURCE_URL", &db.url)
            // The http source sends its secret as the whole header value.
            .with_secret(
                "TEST_SOURCE_SECRET",
                &if source == SourceKind::Http {
                    format!("Bearer {SECRET}")
                } else {
                    SECRET.to_string()
                },
            )
            .with_secret("TEST_BREVO_KEY", BREVO_KEY)
            .with_secret("TEST_WEBHOOK_SECRET", "webhook-signing-secret-of-32-bytes");
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("conformance.toml");
        std::fs::write(
            &path,
            format!(
                "id = \"{SYNC}\"\nworkspace = \"acme\"\nschedule = \"0 */15 * * * *\"\n\n[source]\n{source_table}\n\n[destination]\n{destination_table}\n\n[mapping]\nemail = \"{email}\"\n{consent}\n"
            ),
        )?;
        cli.run(&["sync", "apply", &path.display().to_string()])
            .await?
            .ok()?;
        Ok(Self {
            db,
            _redis: redis,
            cli,
            dir,
            brevo,
            webhook,
            shopify,
            api,
            source,
        })
    }

    /// Publishes the sync again with `extra` lines in `[mapping]` (the file's
    /// last table) and the `marketing` column in the Postgres query.
    async fn map_also(&self, extra: &str) -> anyhow::Result<()> {
        let path = self.dir.path().join("conformance.toml");
        let text = std::fs::read_to_string(&path)?.replace(
            "SELECT id, email, first_name FROM",
            "SELECT id, email, first_name, marketing FROM",
        );
        std::fs::write(&path, format!("{text}{extra}\n"))?;
        self.cli
            .run(&["sync", "apply", &path.display().to_string()])
            .await?
            .ok()?;
        Ok(())
    }

    /// Every record the webhook received, as posted.
    fn posted(&self) -> Vec<serde_json::Value> {
        self.webhook
            .iter()
            .flat_map(|w| w.received())
            .flat_map(
                |post| match serde_json::from_slice(&post.body).unwrap_or_default() {
                    serde_json::Value::Array(items) => items,
                    one => vec![one],
                },
            )
            .collect()
    }

    async fn run(&self) -> anyhow::Result<Outcome> {
        self.cli.run(&["sync", "run", SYNC, "--foreground"]).await
    }

    async fn last_run(&self) -> anyhow::Result<serde_json::Value> {
        let list = self
            .cli
            .run(&["runs", "list", "--limit", "1", "--json"])
            .await?
            .ok()?
            .json()?;
        Ok(list[0].clone())
    }

    async fn add_records(&self, from: usize, n: usize) -> anyhow::Result<()> {
        match self.source {
            SourceKind::Postgres => {
                sqlx::query("INSERT INTO contacts SELECT i, 'user' || i || '@example.com', 'F' || i FROM generate_series($1, $2) i")
                    .bind(from as i64)
                    .bind((from + n - 1) as i64)
                    .execute(&self.db.pool)
                    .await?;
            }
            SourceKind::Shopify => self
                .shopify
                .as_ref()
                .map(|f| f.add_customers(n))
                .unwrap_or_default(),
            SourceKind::Http => self
                .api
                .as_ref()
                .map(|f| f.add_contacts(n))
                .unwrap_or_default(),
        }
        Ok(())
    }

    /// Writes per e-mail at whichever destination the rig has.
    fn writes(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        match &self.webhook {
            Some(w) => {
                for post in w.received() {
                    for record in post.records() {
                        *counts.entry(record).or_default() += 1;
                    }
                }
            }
            None => {
                for w in self.brevo.writes() {
                    *counts.entry(w.email).or_default() += 1;
                }
            }
        }
        counts
    }

    fn destination_calls(&self) -> usize {
        match &self.webhook {
            Some(w) => w.received().len(),
            None => self.brevo.requests().len(),
        }
    }
}

// ---- sources ----

async fn resumes_from_the_saved_cursor(kind: SourceKind) -> anyhow::Result<()> {
    let rig = Rig::new(kind, DestinationKind::BrevoBulk, 25).await?;
    assert_eq!(rig.run().await?.code, 0);
    rig.add_records(26, 7).await?;
    assert_eq!(rig.run().await?.code, 0);
    let run = rig.last_run().await?;
    // It started from the saved cursor, not the beginning; a cursor API's
    // last page (no next cursor) is read again, and Shopify's overlap
    // window (5 min before the last `updatedAt`: this whole fake shop,
    // whose customers are a second apart) too, their records replayed.
    assert!(!run["cursor_start"].is_null(), "{run}");
    assert_eq!(run["records_written"], 7, "{run}");
    let read = run["records_read"].as_i64().unwrap_or(99);
    assert_eq!(
        read - 7,
        run["records_replayed"].as_i64().unwrap_or(-1),
        "{run}"
    );
    match kind {
        SourceKind::Shopify => assert!(run["cursor_end"]["since"].is_string(), "{run}"),
        _ => assert!(read <= 7 + 10, "{run}"),
    }
    let writes = rig.writes();
    assert_eq!(writes.len(), 32);
    assert!(writes.values().all(|n| *n == 1), "{writes:?}");
    Ok(())
}

async fn an_empty_source_succeeds_without_a_destination_call(
    kind: SourceKind,
) -> anyhow::Result<()> {
    let rig = Rig::new(kind, DestinationKind::BrevoBulk, 0).await?;
    assert_eq!(rig.run().await?.code, 0);
    assert_eq!(rig.last_run().await?["status"], "succeeded");
    assert_eq!(rig.destination_calls(), 0);
    Ok(())
}

async fn a_refused_credential_is_final(kind: SourceKind) -> anyhow::Result<()> {
    let mut rig = Rig::new(kind, DestinationKind::BrevoBulk, 5).await?;
    rig.cli = match kind {
        // A role the server does not know: the login is refused.
        SourceKind::Postgres => rig.cli.clone().with_secret(
            "TEST_SOURCE_URL",
            &rig.db
                .url
                .replacen("syncward:syncward@", "nobody_at_all:x@", 1),
        ),
        _ => rig
            .cli
            .clone()
            .with_secret("TEST_SOURCE_SECRET", "a-revoked-secret"),
    };
    assert_eq!(rig.run().await?.code, 1);
    let run = rig.last_run().await?;
    assert_eq!(run["failure_code"], "source_auth_failed", "{run}");
    assert!(!syncward::failure::FailureCode::SourceAuthFailed.is_retryable());
    assert_eq!(rig.destination_calls(), 0);
    Ok(())
}

async fn a_hang_hits_the_timeout(kind: SourceKind) -> anyhow::Result<()> {
    let rig = Rig::new(kind, DestinationKind::BrevoBulk, 5).await?;
    match kind {
        SourceKind::Postgres => {
            let path = rig.dir.path().join("conformance.toml");
            let text = std::fs::read_to_string(&path)?.replace(
                "FROM contacts\"",
                "FROM contacts WHERE pg_sleep(30) IS NOT NULL\"",
            );
            std::fs::write(&path, text)?;
            rig.cli
                .run(&["sync", "apply", &path.display().to_string()])
                .await?
                .ok()?;
        }
        SourceKind::Shopify => rig
            .shopify
            .as_ref()
            .map(ShopifyFake::hang)
            .unwrap_or_default(),
        SourceKind::Http => rig.api.as_ref().map(PagedApiFake::hang).unwrap_or_default(),
    }
    let started = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(60), rig.run()).await??;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    let code = rig.last_run().await?["failure_code"].clone();
    assert!(
        code == "source_unreachable" || code == "source_query_failed",
        "{code}"
    );
    Ok(())
}

async fn a_rate_limit_is_honoured(kind: SourceKind) -> anyhow::Result<()> {
    let rig = Rig::new(kind, DestinationKind::BrevoBulk, 15).await?;
    let started = Instant::now();
    match kind {
        SourceKind::Shopify => rig
            .shopify
            .as_ref()
            .map(|f| f.drain_bucket_before(1))
            .unwrap_or_default(),
        SourceKind::Http => rig
            .api
            .as_ref()
            .map(|f| {
                f.push_faults([ApiFault::RateLimited {
                    retry_after_secs: 1,
                }])
            })
            .unwrap_or_default(),
        SourceKind::Postgres => anyhow::bail!("Postgres has no rate limit"),
    }
    assert_eq!(rig.run().await?.code, 0);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "the run waited as told"
    );
    assert_eq!(rig.writes().len(), 15);
    Ok(())
}

/// An answer about the account rather than the request: Shopify's "402
/// Payment Required: The requested shop is currently frozen" and "423 Locked:
/// The requested shop is currently locked" (shopify.dev/docs/api/usage/
/// response-codes), and protected customer data redacted for an app without
/// approval ("APIs will redact customer personal data by default",
/// shopify.dev changelog 2022-10): the run fails with the answer's own code,
/// owned by the customer, not `source_query_failed` or a page of
/// `missing_email` rejections, and nothing reaches the destination.
async fn an_account_answer_fails_the_run_with_its_code(
    kind: SourceKind,
    answer: AccountAnswer,
) -> anyhow::Result<()> {
    let rig = Rig::new(kind, DestinationKind::BrevoBulk, 5).await?;
    let code = match (kind, answer) {
        (SourceKind::Shopify, AccountAnswer::Frozen) => {
            if let Some(f) = &rig.shopify {
                f.answer_always(402, serde_json::json!({"errors": "Unavailable Shop"}));
            }
            "source_account_frozen"
        }
        (SourceKind::Shopify, AccountAnswer::Locked) => {
            if let Some(f) = &rig.shopify {
                f.answer_always(
                    423,
                    serde_json::json!({"errors": "This store is unavailable"}),
                );
            }
            "source_account_locked"
        }
        (SourceKind::Shopify, AccountAnswer::Redacted) => {
            if let Some(f) = &rig.shopify {
                f.edit_customers(|_, c| {
                    c["firstName"] = serde_json::Value::Null;
                    c["lastName"] = serde_json::Value::Null;
                    c["defaultEmailAddress"]["emailAddress"] = serde_json::Value::Null;
                });
            }
            "source_data_redacted"
        }
        _ => anyhow::bail!("{kind:?} documents no such answer"),
    };
    assert_eq!(rig.run().await?.code, 1);
    let run = rig.last_run().await?;
    assert_eq!(run["failure_code"], code, "{run}");
    assert_eq!(run["records_rejected"], 0, "{run}");
    let shown = rig
        .cli
        .run(&["runs", "show", &run["id"].to_string(), "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(shown["failure"]["owner"], "customer", "{shown}");
    assert_eq!(rig.destination_calls(), 0);
    Ok(())
}

#[derive(Debug, Clone, Copy)]
enum AccountAnswer {
    Frozen,
    Locked,
    Redacted,
}

macro_rules! source_conformance {
    ($($module:ident => $kind:expr, rate_limited: $limited:tt, account_answers: $answers:tt;)*) => {$(
        mod $module {
            use super::*;
            #[tokio::test(flavor = "multi_thread")]
            async fn resumes_from_the_saved_cursor() -> anyhow::Result<()> { super::resumes_from_the_saved_cursor($kind).await }
            #[tokio::test(flavor = "multi_thread")]
            async fn an_empty_source_succeeds_without_a_destination_call() -> anyhow::Result<()> { super::an_empty_source_succeeds_without_a_destination_call($kind).await }
            #[tokio::test(flavor = "multi_thread")]
            async fn a_refused_credential_is_final() -> anyhow::Result<()> { super::a_refused_credential_is_final($kind).await }
            #[tokio::test(flavor = "multi_thread")]
            async fn a_hang_hits_the_timeout() -> anyhow::Result<()> { super::a_hang_hits_the_timeout($kind).await }
            source_conformance!(@rate $limited $kind);
            source_conformance!(@answers $answers $kind);
        }
    )*};
    (@answers yes $kind:expr) => {
        #[tokio::test(flavor = "multi_thread")]
        async fn a_frozen_account_is_source_account_frozen() -> anyhow::Result<()> { super::an_account_answer_fails_the_run_with_its_code($kind, AccountAnswer::Frozen).await }
        #[tokio::test(flavor = "multi_thread")]
        async fn a_locked_account_is_source_account_locked() -> anyhow::Result<()> { super::an_account_answer_fails_the_run_with_its_code($kind, AccountAnswer::Locked).await }
        #[tokio::test(flavor = "multi_thread")]
        async fn a_redacted_page_is_source_data_redacted() -> anyhow::Result<()> { super::an_account_answer_fails_the_run_with_its_code($kind, AccountAnswer::Redacted).await }
    };
    (@answers no $kind:expr) => {};
    (@rate yes $kind:expr) => {
        #[tokio::test(flavor = "multi_thread")]
        async fn a_rate_limit_is_honoured() -> anyhow::Result<()> { super::a_rate_limit_is_honoured($kind).await }
    };
    (@rate no $kind:expr) => {};
}

source_conformance! {
    // Only Shopify documents answers about the account (frozen, locked,
    // redacted data); a database or a generic paged API has none.
    postgres_source => SourceKind::Postgres, rate_limited: no, account_answers: no;
    shopify_source => SourceKind::Shopify, rate_limited: yes, account_answers: yes;
    http_source => SourceKind::Http, rate_limited: yes, account_answers: no;
}

// ---- destinations ----

async fn a_replay_makes_no_destination_call(kind: DestinationKind) -> anyhow::Result<()> {
    let rig = Rig::new(SourceKind::Postgres, kind, 25).await?;
    assert_eq!(rig.run().await?.code, 0);
    let calls = rig.destination_calls();
    rig.cli.run(&["sync", "reset-cursor", SYNC]).await?.ok()?;
    assert_eq!(rig.run().await?.code, 0);
    assert_eq!(rig.destination_calls(), calls, "the replay sent nothing");
    assert_eq!(rig.last_run().await?["records_replayed"], 25);
    Ok(())
}

async fn a_destination_rate_limit_is_honoured(kind: DestinationKind) -> anyhow::Result<()> {
    let rig = Rig::new(SourceKind::Postgres, kind, 5).await?;
    match &rig.webhook {
        Some(w) => w.answer_with([429]),
        None => rig
            .brevo
            .push_faults([Fault::RateLimited { reset_secs: 1 }]),
    }
    let started = Instant::now();
    assert_eq!(rig.run().await?.code, 0);
    assert!(
        started.elapsed() >= Duration::from_millis(950),
        "waited for the reset"
    );
    assert_eq!(rig.writes().len(), 5);
    Ok(())
}

async fn a_rejected_record_is_kept_and_the_run_goes_on(
    kind: DestinationKind,
) -> anyhow::Result<()> {
    let rig = Rig::new(SourceKind::Postgres, kind, 12).await?;
    // A record without its e-mail cannot be delivered anywhere.
    sqlx::query("UPDATE contacts SET email = NULL WHERE id = 4")
        .execute(&rig.db.pool)
        .await?;
    assert_eq!(rig.run().await?.code, 0);
    let run = rig.last_run().await?;
    assert_eq!(
        (run["status"].clone(), run["records_rejected"].clone()),
        ("succeeded".into(), 1.into()),
        "{run}"
    );
    let shown = rig
        .cli
        .run(&["runs", "show", &run["id"].to_string(), "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(shown["rejected_records"][0]["code"], "missing_email");
    assert_eq!(rig.writes().len(), 11);
    Ok(())
}

async fn a_refused_destination_credential_is_final(kind: DestinationKind) -> anyhow::Result<()> {
    let rig = Rig::new(SourceKind::Postgres, kind, 5).await?;
    match &rig.webhook {
        Some(w) => w.answer_with([401]),
        None => rig.brevo.push_faults([Fault::Unauthorized]),
    }
    assert_eq!(rig.run().await?.code, 1);
    let run = rig.last_run().await?;
    assert_eq!(run["failure_code"], "destination_auth_failed", "{run}");
    assert!(!syncward::failure::FailureCode::DestinationAuthFailed.is_retryable());
    Ok(())
}

async fn a_destination_hang_hits_the_timeout(kind: DestinationKind) -> anyhow::Result<()> {
    let rig = Rig::new(SourceKind::Postgres, kind, 5).await?;
    match &rig.webhook {
        Some(w) => w.hang(),
        None => rig.brevo.set_fault_always(Some(Fault::Hang)),
    }
    let started = Instant::now();
    let out = tokio::time::timeout(Duration::from_secs(60), rig.run()).await??;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "took {:?}",
        started.elapsed()
    );
    assert_eq!(
        rig.last_run().await?["failure_code"],
        "destination_unavailable"
    );
    Ok(())
}

/// The consent rule of every Shopify rig (the fake's customers are all
/// subscribed unless a test edits them).
const CONSENT_SHOPIFY: &str =
    r#"consent = { field = "defaultEmailAddress.marketingState", subscribed = ["SUBSCRIBED"] }"#;

/// Consent has three states (issue 31.1, docs/contract.md §1.10): a `subscribed`
/// value joins the lists; an `unsubscribed` one (an explicit opt-out) is
/// blocklisted and on no list; any other value is on no list and left
/// alone. Brevo: `listIds` and `emailBlacklisted: true` (`createContact`,
/// brevo-v3-openapi.2025-08.yml lines 22836-22840; an import's `listIds` and
/// `emailBlacklist` cover every row, `requestContactImport` lines
/// 23224-23290, so bulk mode without a holding list writes the other two
/// groups one by one); `emailBlacklisted: false` is never sent. Webhook (no
/// lists): each record carries `"consent"` for the receiver to honour.
async fn consent_has_three_states(kind: DestinationKind) -> anyhow::Result<()> {
    let rig = Rig::new(SourceKind::Postgres, kind, 12).await?;
    sqlx::query(
        "UPDATE contacts SET marketing = CASE id % 3 WHEN 0 THEN 'SUBSCRIBED' WHEN 1 THEN 'UNSUBSCRIBED' ELSE 'NOT_SUBSCRIBED' END",
    )
    .execute(&rig.db.pool)
    .await?;
    rig.map_also(r#"consent = { field = "marketing", subscribed = ["SUBSCRIBED"] }"#)
        .await?;
    assert_eq!(rig.run().await?.code, 0);
    let run = rig.last_run().await?;
    assert_eq!(run["records_rejected"], 0, "{run}");
    assert_eq!(run["records_written"], 12, "{run}");
    let state = |email: &str| {
        let id: u32 = email
            .trim_start_matches("user")
            .trim_end_matches("@example.com")
            .parse()
            .unwrap_or_default();
        ["subscribed", "unsubscribed", "unknown"][(id % 3) as usize]
    };
    match &rig.webhook {
        Some(_) => {
            let posted = rig.posted();
            assert_eq!(posted.len(), 12);
            for record in posted {
                let email = record["email"].as_str().unwrap_or_default();
                assert_eq!(record["consent"], state(email), "{record}");
            }
        }
        None => {
            let contacts = rig.brevo.contacts();
            assert_eq!(contacts.len(), 12);
            for (email, contact) in contacts {
                let (lists, blocklisted) = match state(&email) {
                    "subscribed" => (vec![12], false),
                    "unsubscribed" => (vec![], true),
                    _ => (vec![], false),
                };
                assert_eq!(contact.list_ids, lists, "{email}");
                assert_eq!(contact.email_blacklisted, blocklisted, "{email}");
            }
            for request in rig.brevo.requests() {
                assert_ne!(
                    request.body.get("emailBlacklisted"),
                    Some(&serde_json::json!(false)),
                    "{}",
                    request.body
                );
            }
        }
    }
    Ok(())
}

/// A source's null (a contact without a first name). Brevo's attribute
/// values are numbers, strings, booleans or arrays of strings, never null
/// (`createContact.attributes`, brevo-v3-openapi.2025-08.yml lines
/// 22820-22828): the attribute is left out and Brevo keeps what it has.
/// Webhook: the receiver takes any JSON, and the null is posted as it is.
async fn a_null_attribute_is_sent_as_the_destination_allows(
    kind: DestinationKind,
) -> anyhow::Result<()> {
    let rig = Rig::new(SourceKind::Postgres, kind, 10).await?;
    sqlx::query("UPDATE contacts SET first_name = NULL WHERE id % 2 = 0")
        .execute(&rig.db.pool)
        .await?;
    rig.map_also(r#"attributes = { FIRSTNAME = "first_name" }"#)
        .await?;
    assert_eq!(rig.run().await?.code, 0);
    let run = rig.last_run().await?;
    assert_eq!(run["records_rejected"], 0, "{run}");
    match &rig.webhook {
        Some(_) => {
            let posted = rig.posted();
            assert_eq!(posted.len(), 10);
            let nulls = posted
                .iter()
                .filter(|r| r["attributes"].get("FIRSTNAME") == Some(&serde_json::Value::Null))
                .count();
            assert_eq!(nulls, 5, "{posted:?}");
        }
        None => {
            let writes = rig.brevo.writes();
            assert_eq!(writes.len(), 10);
            assert!(
                writes.iter().all(|w| w
                    .attributes
                    .as_object()
                    .is_some_and(|a| a.values().all(|v| !v.is_null()))),
                "{writes:?}"
            );
            let contacts = rig.brevo.contacts();
            assert!(
                !contacts["user2@example.com"]
                    .attributes
                    .contains_key("FIRSTNAME")
            );
            assert_eq!(contacts["user1@example.com"].attributes["FIRSTNAME"], "F1");
        }
    }
    Ok(())
}

macro_rules! destination_conformance {
    ($($module:ident => $kind:expr;)*) => {$(
        mod $module {
            use super::*;
            #[tokio::test(flavor = "multi_thread")]
            async fn a_replay_makes_no_destination_call() -> anyhow::Result<()> { super::a_replay_makes_no_destination_call($kind).await }
            #[tokio::test(flavor = "multi_thread")]
            async fn a_rate_limit_is_honoured() -> anyhow::Result<()> { super::a_destination_rate_limit_is_honoured($kind).await }
            #[tokio::test(flavor = "multi_thread")]
            async fn a_rejected_record_is_kept_and_the_run_goes_on() -> anyhow::Result<()> { super::a_rejected_record_is_kept_and_the_run_goes_on($kind).await }
            #[tokio::test(flavor = "multi_thread")]
            async fn a_refused_credential_is_final() -> anyhow::Result<()> { super::a_refused_destination_credential_is_final($kind).await }
            #[tokio::test(flavor = "multi_thread")]
            async fn a_hang_hits_the_timeout() -> anyhow::Result<()> { super::a_destination_hang_hits_the_timeout($kind).await }
            #[tokio::test(flavor = "multi_thread")]
            async fn consent_has_three_states() -> anyhow::Result<()> { super::consent_has_three_states($kind).await }
            #[tokio::test(flavor = "multi_thread")]
            async fn a_null_attribute_is_sent_as_the_destination_allows() -> anyhow::Result<()> { super::a_null_attribute_is_sent_as_the_destination_allows($kind).await }
        }
    )*};
}

destination_conformance! {
    brevo_single_destination => DestinationKind::BrevoSingle;
    brevo_bulk_destination => DestinationKind::BrevoBulk;
    webhook_destination => DestinationKind::Webhook;
}

/// Brevo's documented 425 Too Early (`POST /contacts`, a `contactErrorModel`
/// body, brevo-v3-openapi.2025-08.yml lines 2220-2225) is tried again: no
/// record is rejected for it, on either Brevo path.
async fn a_too_early_answer_is_tried_again(kind: DestinationKind) -> anyhow::Result<()> {
    let rig = Rig::new(SourceKind::Postgres, kind, 5).await?;
    rig.brevo.push_faults([Fault::TooEarly]);
    assert_eq!(rig.run().await?.code, 0);
    let run = rig.last_run().await?;
    assert_eq!(run["records_rejected"], 0, "{run}");
    assert_eq!(rig.writes().len(), 5);
    Ok(())
}

/// An attribute the account does not have ("These attributes must be present
/// in your Brevo account", `createContact.attributes`, brevo-v3-openapi.
/// 2025-08.yml line 22830; an import drops it silently) is found when the run
/// opens (`getAttributes`, lines 2582-2621): left out of every write, named in
/// a `destination_notice` on the run, and the run succeeds.
async fn an_attribute_the_account_lacks_is_left_out_and_named(
    kind: DestinationKind,
) -> anyhow::Result<()> {
    let rig = Rig::new(SourceKind::Postgres, kind, 5).await?;
    rig.map_also(r#"attributes = { FIRSTNAME = "first_name" }"#)
        .await?;
    // Deleted in Brevo after the sync was applied.
    rig.brevo.set_attributes(&["LASTNAME"]);
    assert_eq!(rig.run().await?.code, 0);
    let run = rig.last_run().await?;
    assert_eq!(run["records_rejected"], 0, "{run}");
    let writes = rig.brevo.writes();
    assert_eq!(writes.len(), 5);
    assert!(
        writes
            .iter()
            .all(|w| w.attributes.get("FIRSTNAME").is_none()),
        "{writes:?}"
    );
    let shown = rig
        .cli
        .run(&["runs", "show", &run["id"].to_string(), "--json"])
        .await?
        .ok()?
        .json()?;
    let notices: Vec<&serde_json::Value> = shown["events"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter(|e| e["kind"] == "destination_notice")
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(notices.len(), 1, "{shown}");
    assert_eq!(
        notices[0]["detail"]["message"],
        "attributes FIRSTNAME are not in the Brevo account and were not written"
    );
    Ok(())
}

/// Answers only Brevo gives, for each Brevo destination.
mod brevo_answers {
    use super::*;
    #[tokio::test(flavor = "multi_thread")]
    async fn single_an_unknown_attribute_is_left_out_and_named() -> anyhow::Result<()> {
        an_attribute_the_account_lacks_is_left_out_and_named(DestinationKind::BrevoSingle).await
    }
    #[tokio::test(flavor = "multi_thread")]
    async fn bulk_an_unknown_attribute_is_left_out_and_named() -> anyhow::Result<()> {
        an_attribute_the_account_lacks_is_left_out_and_named(DestinationKind::BrevoBulk).await
    }
    #[tokio::test(flavor = "multi_thread")]
    async fn single_too_early_is_tried_again() -> anyhow::Result<()> {
        a_too_early_answer_is_tried_again(DestinationKind::BrevoSingle).await
    }
    #[tokio::test(flavor = "multi_thread")]
    async fn bulk_too_early_is_tried_again() -> anyhow::Result<()> {
        a_too_early_answer_is_tried_again(DestinationKind::BrevoBulk).await
    }
}
