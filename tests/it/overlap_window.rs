//! Sources with an `updated_at`-style cursor (Shopify's customers, an
//! `updated_since` API) re-read an overlap window each run: a record whose
//! write reached the listing only after records updated later were read
//! still arrives, and the records read again cost no request.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::fakes::brevo::BrevoFake;
use crate::fakes::paged_api::PagedApiFake;
use crate::fakes::shopify::ShopifyFake;
use crate::helpers::{Syncward, TestDb, TestRedis};

const BREVO_KEY: &str = "xkeysib-test-key";
const SHOPIFY_TOKEN: &str = "shpat_test_token";
const API_TOKEN: &str = "api-token";

/// Which source the sync reads.
enum Source {
    Shopify(ShopifyFake),
    Api(PagedApiFake),
}

impl Source {
    fn add(&self, n: usize) {
        match self {
            Source::Shopify(f) => f.add_customers(n),
            Source::Api(f) => f.add_contacts(n),
        }
    }

    fn add_late(&self, lag: Duration) -> String {
        match self {
            Source::Shopify(f) => f.add_late_customer(lag),
            Source::Api(f) => f.add_late_contact(lag),
        }
    }

    fn reveal_late(&self) {
        match self {
            Source::Shopify(f) => f.reveal_late(),
            Source::Api(f) => f.reveal_late(),
        }
    }

    fn table(&self, overlap: &str) -> String {
        match self {
            Source::Shopify(f) => format!(
                r#"kind = "shopify"
shop = "acme"
api_version = "2025-07"
access_token_env = "TEST_SHOPIFY_TOKEN"
page_size = 10
base_url = "{}"
{overlap}"#,
                f.base_url
            ),
            Source::Api(f) => format!(
                r#"kind = "http"
url = "{}"
cursor_param = "after"
items_pointer = "/data"
next_cursor_pointer = "/meta/next"
auth_env = "TEST_API_AUTH"
{overlap}"#,
                f.url
            ),
        }
    }

    fn email_field(&self) -> &'static str {
        match self {
            Source::Shopify(_) => "defaultEmailAddress.emailAddress",
            Source::Api(_) => "email",
        }
    }
}

struct Rig {
    _db: TestDb,
    _redis: TestRedis,
    brevo: BrevoFake,
    source: Source,
    cli: Syncward,
    _dir: tempfile::TempDir,
}

impl Rig {
    /// 30 records, read in pages of 10; `overlap` is the line put in the
    /// source table (empty: the default).
    async fn start(shopify: bool, overlap: &str) -> anyhow::Result<Self> {
        let db = TestDb::new().await?;
        let redis = TestRedis::new().await?;
        let brevo = BrevoFake::start(BREVO_KEY).await?;
        let source = if shopify {
            Source::Shopify(ShopifyFake::start(SHOPIFY_TOKEN, 30, 1000.0, 500.0).await?)
        } else {
            Source::Api(PagedApiFake::start_by_time(API_TOKEN, 30, 10).await?)
        };
        let cli = Syncward::new(&db, Some(&redis))
            .with_secret("TEST_SHOPIFY_TOKEN", SHOPIFY_TOKEN)
            .with_secret("TEST_API_AUTH", &format!("Bearer {API_TOKEN}"))
            .with_secret("TEST_BREVO_KEY", BREVO_KEY);
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("sync.toml");
        std::fs::write(
            &path,
            format!(
                r#"id = "updated-since"
workspace = "acme"
schedule = "{schedule}"

[source]
{source}

[destination]
kind = "brevo"
api_key_env = "TEST_BREVO_KEY"
base_url = "{brevo}"
mode = "bulk"
list_ids = [12]

[mapping]
email = "{email}"
{consent}
"#,
                consent = match &source {
                    Source::Shopify(_) =>
                        r#"consent = { field = "defaultEmailAddress.marketingState", subscribed = ["SUBSCRIBED"] }"#,
                    Source::Api(_) => "",
                },
                schedule = crate::helpers::scenario::QUIET_SCHEDULE,
                source = source.table(overlap),
                brevo = brevo.base_url,
                email = source.email_field(),
            ),
        )?;
        cli.run(&["sync", "apply", &path.display().to_string()])
            .await?
            .ok()?;
        Ok(Rig {
            _db: db,
            _redis: redis,
            brevo,
            source,
            cli,
            _dir: dir,
        })
    }

    async fn run(&self) -> anyhow::Result<Value> {
        self.cli
            .run(&["sync", "run", "updated-since", "--foreground"])
            .await?
            .ok()?;
        let runs = self
            .cli
            .run(&["runs", "list", "--json"])
            .await?
            .ok()?
            .json()?;
        Ok(runs[0].clone())
    }

    fn writes(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for w in self.brevo.writes() {
            *counts.entry(w.email).or_default() += 1;
        }
        counts
    }

    /// 30 delivered; then a record written 60 s before the latest one
    /// reaches the listing only after 5 newer ones were read. Returns its
    /// address and the run that read after it appeared.
    async fn late_record(&self) -> anyhow::Result<(String, Value)> {
        let first = self.run().await?;
        assert_eq!(first["records_written"], 30, "{first}");
        let late = self.source.add_late(Duration::from_secs(60));
        self.source.add(5);
        let second = self.run().await?;
        assert_eq!(second["status"], "succeeded", "{second}");
        self.source.reveal_late();
        let third = self.run().await?;
        assert_eq!(third["status"], "succeeded", "{third}");
        Ok((late, third))
    }
}

async fn a_late_record_arrives_once_and_the_window_costs_no_request(
    shopify: bool,
) -> anyhow::Result<()> {
    let rig = Rig::start(shopify, "").await?;
    let (late, third) = rig.late_record().await?;
    let writes = rig.writes();
    assert_eq!(writes.get(&late), Some(&1), "the late record arrived");
    assert_eq!(writes.len(), 36, "{writes:?}");
    assert!(writes.values().all(|n| *n == 1), "each once: {writes:?}");
    // The window was read again; only the late record was sent.
    assert_eq!(third["records_written"], 1, "{third}");
    assert!(
        third["records_replayed"].as_i64().unwrap_or_default() >= 5,
        "the window re-read the newest records: {third}"
    );
    let before = rig.brevo.requests_to("/v3/contacts/import").len();
    let fourth = rig.run().await?;
    assert_eq!(fourth["records_written"], 0, "{fourth}");
    assert_eq!(
        rig.brevo.requests_to("/v3/contacts/import").len(),
        before,
        "a run with nothing new sends nothing"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn shopify_customer_listed_late_arrives_through_the_overlap_window() -> anyhow::Result<()> {
    a_late_record_arrives_once_and_the_window_costs_no_request(true).await
}

#[tokio::test(flavor = "multi_thread")]
async fn updated_since_api_record_listed_late_arrives_through_the_overlap_window()
-> anyhow::Result<()> {
    a_late_record_arrives_once_and_the_window_costs_no_request(false).await
}

/// The failure the window exists for: with it turned off, the late record
/// is never read.
#[tokio::test(flavor = "multi_thread")]
async fn without_an_overlap_a_record_listed_late_is_skipped_for_good() -> anyhow::Result<()> {
    for shopify in [true, false] {
        let rig = Rig::start(shopify, "overlap = \"0s\"").await?;
        let (late, _) = rig.late_record().await?;
        rig.run().await?;
        assert_eq!(rig.writes().get(&late), None, "shopify: {shopify}");
        assert_eq!(rig.writes().len(), 35);
    }
    Ok(())
}

/// Shopify's cursors hold only for the query they came from: every page of
/// a re-read carries the window's search, and the saved cursor says how far
/// the reads got.
#[tokio::test(flavor = "multi_thread")]
async fn a_shopify_reread_pages_under_the_windows_search_from_the_last_updated_at()
-> anyhow::Result<()> {
    let rig = Rig::start(true, "").await?;
    rig.run().await?;
    let Source::Shopify(shop) = &rig.source else {
        unreachable!()
    };
    let before = shop.requests().len();
    rig.run().await?;
    let requests = shop.requests();
    let rereads = &requests[before..];
    // Customer 30 was updated at 00:00:30: the window starts 5 min before.
    assert_eq!(
        rereads[0].variables["query"], "updated_at:>='2024-12-31T23:55:30Z'",
        "{rereads:?}"
    );
    assert!(rereads[0].variables["after"].is_null());
    assert!(
        rereads
            .iter()
            .all(|r| r.variables["query"] == rereads[0].variables["query"]),
        "{rereads:?}"
    );
    let show = rig
        .cli
        .run(&["sync", "show", "updated-since", "--json"])
        .await?
        .ok()?
        .json()?;
    let cursor = serde_json::to_string(&show)?;
    assert!(cursor.contains("2025-01-01T00:00:30Z"), "{show}");
    Ok(())
}
