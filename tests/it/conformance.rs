//! The connector conformance suite: one set of behaviours every source
//! (postgres, shopify, http) and every destination (brevo single, brevo bulk,
//! webhook) must show, run against each (Vector's sink compliance harness).
//!
//! Sources (into Brevo bulk): resume from the saved cursor, an empty source,
//! a refused credential is final, a hang hits the timeout, a rate limit is
//! honoured (where the service has one). Destinations (from Postgres): a replay
//! makes no call, a rate limit is honoured, a rejected record is kept and the
//! run goes on, a refused credential is final, a hang hits the timeout.

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
        sqlx::raw_sql("CREATE TABLE contacts (id bigint PRIMARY KEY, email text, first_name text)")
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
                let fake = WebhookReceiver::start_verifying("webhook-signing-secret").await?;
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
        let cli = Syncward::new(&db, Some(&redis))
            .with_env("TEST_SOURCE_URL", &db.url)
            // The http source sends its secret as the whole header value.
            .with_env(
                "TEST_SOURCE_SECRET",
                &if source == SourceKind::Http {
                    format!("Bearer {SECRET}")
                } else {
                    SECRET.to_string()
                },
            )
            .with_env("TEST_BREVO_KEY", BREVO_KEY)
            .with_env("TEST_WEBHOOK_SECRET", "webhook-signing-secret");
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("conformance.toml");
        std::fs::write(
            &path,
            format!(
                "id = \"{SYNC}\"\nworkspace = \"acme\"\nschedule = \"0 */15 * * * *\"\n\n[source]\n{source_table}\n\n[destination]\n{destination_table}\n\n[mapping]\nemail = \"{email}\"\n"
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
    // last page (no next cursor) is read again, its records replayed.
    assert!(!run["cursor_start"].is_null(), "{run}");
    assert_eq!(run["records_written"], 7, "{run}");
    assert!(
        run["records_read"].as_i64().unwrap_or(99) <= 7 + 10,
        "{run}"
    );
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
        SourceKind::Postgres => rig.cli.clone().with_env(
            "TEST_SOURCE_URL",
            &rig.db
                .url
                .replacen("syncward:syncward@", "nobody_at_all:x@", 1),
        ),
        _ => rig
            .cli
            .clone()
            .with_env("TEST_SOURCE_SECRET", "a-revoked-secret"),
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

macro_rules! source_conformance {
    ($($module:ident => $kind:expr, rate_limited: $limited:tt;)*) => {$(
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
        }
    )*};
    (@rate yes $kind:expr) => {
        #[tokio::test(flavor = "multi_thread")]
        async fn a_rate_limit_is_honoured() -> anyhow::Result<()> { super::a_rate_limit_is_honoured($kind).await }
    };
    (@rate no $kind:expr) => {};
}

source_conformance! {
    postgres_source => SourceKind::Postgres, rate_limited: no;
    shopify_source => SourceKind::Shopify, rate_limited: yes;
    http_source => SourceKind::Http, rate_limited: yes;
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

/// Answers only Brevo gives, for each Brevo destination.
mod brevo_answers {
    use super::*;
    #[tokio::test(flavor = "multi_thread")]
    async fn single_too_early_is_tried_again() -> anyhow::Result<()> {
        a_too_early_answer_is_tried_again(DestinationKind::BrevoSingle).await
    }
    #[tokio::test(flavor = "multi_thread")]
    async fn bulk_too_early_is_tried_again() -> anyhow::Result<()> {
        a_too_early_answer_is_tried_again(DestinationKind::BrevoBulk).await
    }
}
