//! Brevo answers the fakes did not give before issue 19, each as Brevo's
//! OpenAPI file documents it (specs/brevo-v3-openapi.2025-08.yml):
//! a process Brevo no longer knows, 425 Too Early, null attributes, import
//! counts of invalid e-mails, and attributes the account lacks (at apply,
//! preview and when a run opens).

use std::time::Duration;

use crate::fakes::brevo::Fault;
use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::{QUIET_SCHEDULE, SYNC_ID, Scenario, SyncOptions};

async fn count(s: &Scenario, sql: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&s.db.pool)
        .await?)
}

fn checker(s: &Scenario) -> crate::helpers::Syncward {
    s.cli
        .clone()
        .with_env("SYNCWARD__SWEEPER__EVERY", "100ms")
        .with_env("SYNCWARD__SWEEPER__IMPORT_CHECK_AFTER", "50ms")
        .with_env("SYNCWARD__SWEEPER__IMPORT_CHECKS_PER_HOUR", "1000")
}

/// An import the account's process list (`GET /processes`, newest first,
/// `getProcesses` spec 2026-02) no longer holds is final: found missing by
/// one listing, its page recorded as `import_unknown` on the run, one alert
/// per process, no further polling.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_brevo_does_not_know_is_given_up_once_with_an_alert() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    assert_eq!(s.run_foreground().await?.code, 0);
    let run_id = s.last_run().await?["id"].as_i64().unwrap_or_default();
    s.fake.forget_processes();
    let mut daemon = DaemonProcess::spawn(&checker(&s)).await?;
    daemon
        .eventually(Duration::from_secs(20), "every import given up", || async {
            Ok(count(
                &s,
                "SELECT count(*) FROM import_processes WHERE status = 'unknown'",
            )
            .await?
                == 3)
        })
        .await?;
    // More sweeps pass: nothing asks about them again.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let checks: Vec<_> = s
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with("/v3/processes"))
        .collect();
    assert_eq!(checks.len(), 1, "one listing settles all three");
    assert!(checks.iter().all(|r| r.status == 200));
    let shown = s
        .cli
        .run(&["runs", "show", &run_id.to_string(), "--json"])
        .await?
        .ok()?
        .json()?;
    let rejected = shown["rejected_records"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(rejected.len(), 3, "{rejected:?}");
    assert!(
        rejected.iter().all(|r| r["code"] == "import_unknown"
            && r["message"]
                .as_str()
                .unwrap_or_default()
                .contains("no longer lists this import")),
        "{rejected:?}"
    );
    assert_eq!(shown["run"]["records_rejected"], 30);
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM alerts WHERE kind = 'import_outcome_unknown'"
        )
        .await?,
        3
    );
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

/// A process that reports `processing` (a non-terminal status of the
/// `getProcess` schema, brevo-v3-openapi.2026-02.yaml) forever is asked about
/// at most `MAX_CHECKS_PER_IMPORT` (60) times, then given up as unknown.
#[tokio::test(flavor = "multi_thread")]
async fn an_import_that_never_ends_is_given_up_after_the_check_cap() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 10,
        ..SyncOptions::default()
    })
    .await?;
    s.fake.set_process_status("processing");
    assert_eq!(s.run_foreground().await?.code, 0);
    let mut daemon = DaemonProcess::spawn(&checker(&s)).await?;
    daemon
        .eventually(Duration::from_secs(60), "the import given up", || async {
            Ok(count(
                &s,
                "SELECT count(*) FROM import_processes WHERE status = 'unknown'",
            )
            .await?
                == 1)
        })
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let checks = s
        .fake
        .requests()
        .iter()
        .filter(|r| r.path.starts_with("/v3/processes"))
        .count();
    assert_eq!(checks, 60);
    let message: String = sqlx::query_scalar("SELECT message FROM rejected_records")
        .fetch_one(&s.db.pool)
        .await?;
    assert!(message.contains("after 60 checks"), "{message}");
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

/// `POST /contacts` answering 425 Too Early with a `contactErrorModel` body
/// (brevo-v3-openapi.2025-08.yml lines 2220-2225) is tried again within the
/// run, not a rejected record: every contact arrives.
#[tokio::test(flavor = "multi_thread")]
async fn too_early_from_a_single_create_is_tried_again() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        mode: "single",
        rows: 10,
        concurrency: 1,
        ..SyncOptions::default()
    })
    .await?;
    s.fake.push_faults([Fault::TooEarly, Fault::TooEarly]);
    assert_eq!(s.run_foreground().await?.code, 0);
    let run = s.last_run().await?;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["records_rejected"], 0, "{run}");
    assert_eq!(run["records_written"], 10, "{run}");
    let early = s
        .fake
        .requests_to("/v3/contacts")
        .iter()
        .filter(|r| r.status == 425)
        .count();
    assert_eq!(early, 2);
    assert_eq!(s.fake.contacts().len(), 10);
    Ok(())
}

/// A source null (a Shopify customer's `firstName`) is left out of the
/// attributes: `createContact.attributes` allows only numbers, strings,
/// booleans and arrays of strings (brevo-v3-openapi.2025-08.yml lines
/// 22819-22828), and the fake answers a null there with 400
/// `invalid_parameter`, as the schema says. Imports leave it out too.
#[tokio::test(flavor = "multi_thread")]
async fn null_attributes_are_left_out_of_single_and_import_bodies() -> anyhow::Result<()> {
    for mode in ["single", "bulk"] {
        let s = Scenario::new(SyncOptions {
            mode,
            rows: 10,
            ..SyncOptions::default()
        })
        .await?;
        sqlx::query("UPDATE contacts SET first_name = NULL WHERE id % 2 = 0")
            .execute(&s.db.pool)
            .await?;
        assert_eq!(s.run_foreground().await?.code, 0, "{mode}");
        let run = s.last_run().await?;
        assert_eq!(run["records_rejected"], 0, "{mode}: {run}");
        let bodies: Vec<serde_json::Value> = s
            .fake
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST")
            .flat_map(|r| match r.body.get("jsonBody") {
                Some(rows) => rows.as_array().cloned().unwrap_or_default(),
                None => vec![r.body],
            })
            .collect();
        assert_eq!(bodies.len(), 10, "{mode}");
        for body in &bodies {
            let attributes = body["attributes"].as_object().cloned().unwrap_or_default();
            assert!(attributes.values().all(|v| !v.is_null()), "{mode}: {body}");
        }
        let contacts = s.fake.contacts();
        assert_eq!(contacts.len(), 10, "{mode}");
        assert!(
            !contacts["user2@example.com"]
                .attributes
                .contains_key("FIRSTNAME")
        );
        assert_eq!(
            contacts["user1@example.com"].attributes["FIRSTNAME"],
            "First1"
        );
    }
    Ok(())
}

/// A sync file mapping `attributes` to Brevo at the scenario's fake.
fn sync_file(s: &Scenario, attributes: &str) -> anyhow::Result<String> {
    let text = format!(
        r#"
id = "{SYNC_ID}"
workspace = "acme"
schedule = "{QUIET_SCHEDULE}"

[source]
kind = "postgres"
url_env = "TEST_SOURCE_URL"
query = "SELECT id, email, first_name FROM contacts"
cursor_column = "id"
page_size = 10

[destination]
kind = "brevo"
api_key_env = "TEST_BREVO_KEY"
base_url = "{base}"
mode = "bulk"
list_ids = [12]

[mapping]
email = "email"
attributes = {{ {attributes} }}
"#,
        base = s.fake.base_url,
    );
    let path = s.dir.path().join("attributes.toml");
    std::fs::write(&path, text)?;
    Ok(path.display().to_string())
}

/// `GET /contacts/attributes` lists the account's attributes (`getAttributes`,
/// brevo-v3-openapi.2025-08.yml lines 2582-2621; the fake answers that
/// example's shape). `sync apply` refuses a mapping naming one the account
/// lacks (exit 2, the file and the names), unless `--skip-attribute-check`.
#[tokio::test(flavor = "multi_thread")]
async fn apply_refuses_attributes_the_brevo_account_does_not_have() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.fake.set_attributes(&["FIRSTNAME", "LASTNAME"]);
    let asked = s.fake.attribute_requests();
    let file = sync_file(
        &s,
        r#"FIRSTNAME = "first_name", SHOPIFY_ID = "id", LOYALTY = "id""#,
    )?;
    let refused = s.cli.run(&["sync", "apply", &file]).await?;
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused.stderr.contains(&file)
            && refused.stderr.contains("mapping.attributes")
            && refused.stderr.contains("LOYALTY, SHOPIFY_ID")
            && refused.stderr.contains("--skip-attribute-check"),
        "{}",
        refused.stderr
    );
    assert_eq!(s.fake.attribute_requests(), asked + 1);
    let version: i32 = sqlx::query_scalar("SELECT version FROM syncs WHERE id = $1")
        .bind(SYNC_ID)
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(version, 1, "nothing was published");

    let forced = s
        .cli
        .run(&["sync", "apply", "--skip-attribute-check", &file])
        .await?;
    assert_eq!(forced.code, 0, "{forced:?}");
    assert_eq!(
        s.fake.attribute_requests(),
        asked + 1,
        "a skipped check asks nothing"
    );

    // Every mapped attribute exists: published without a word.
    let good = sync_file(&s, r#"FIRSTNAME = "first_name", LASTNAME = "email""#)?;
    let published = s.cli.run(&["sync", "apply", &good]).await?;
    assert_eq!(published.code, 0, "{published:?}");
    assert!(!published.stderr.contains("warning"), "{published:?}");
    Ok(())
}

/// `sync preview` says which mapped attributes the account lacks, in a
/// warning line, and still shows the page.
#[tokio::test(flavor = "multi_thread")]
async fn preview_warns_of_attributes_the_brevo_account_does_not_have() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.fake.set_attributes(&["LASTNAME"]);
    let shown = s
        .cli
        .run(&["sync", "preview", SYNC_ID, "--limit", "2"])
        .await?
        .ok()?;
    assert!(
        shown
            .stdout
            .lines()
            .any(|l| l.starts_with("warning:") && l.contains("no attribute FIRSTNAME")),
        "{}",
        shown.stdout
    );
    assert!(
        shown.stdout.contains("user1@example.com"),
        "{}",
        shown.stdout
    );
    assert!(s.fake.requests().is_empty(), "a preview writes nothing");
    Ok(())
}

/// The attribute bodies of every write the fake received: single creates
/// and each row of each import.
fn written_attributes(s: &Scenario) -> Vec<serde_json::Value> {
    s.fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST")
        .flat_map(|r| match r.body.get("jsonBody") {
            Some(rows) => rows.as_array().cloned().unwrap_or_default(),
            None => vec![r.body],
        })
        .map(|body| body["attributes"].clone())
        .collect()
}

/// The `destination_notice` messages on the newest run's timeline.
async fn destination_notices(s: &Scenario) -> anyhow::Result<Vec<String>> {
    let run_id = s.last_run().await?["id"].as_i64().unwrap_or_default();
    let shown = s
        .cli
        .run(&["runs", "show", &run_id.to_string(), "--json"])
        .await?
        .ok()?
        .json()?;
    Ok(shown["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| e["kind"] == "destination_notice")
        .map(|e| {
            e["detail"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect())
}

/// An import drops an attribute the account does not have without a word
/// (issue 19.2; `requestContactImport` takes any `attributes`, and
/// `getAttributes`, brevo-v3-openapi.2025-08.yml lines 2582-2621, is where
/// the account's list is). An attribute deleted after `sync apply` is found
/// when the run opens (one `GET /contacts/attributes`): the run succeeds,
/// sends no unknown attribute in either mode, and says on its timeline which
/// were not written.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_leaves_out_attributes_the_account_lost_and_says_so() -> anyhow::Result<()> {
    for mode in ["bulk", "single"] {
        let s = Scenario::new(SyncOptions {
            mode,
            rows: 10,
            ..SyncOptions::default()
        })
        .await?;
        // FIRSTNAME existed at apply; deleted in Brevo since.
        s.fake.set_attributes(&["LASTNAME"]);
        let asked = s.fake.attribute_requests();
        assert_eq!(s.run_foreground().await?.code, 0, "{mode}");
        assert_eq!(
            s.fake.attribute_requests(),
            asked + 1,
            "{mode}: one check per run"
        );
        let run = s.last_run().await?;
        assert_eq!(run["records_rejected"], 0, "{mode}: {run}");
        let bodies = written_attributes(&s);
        assert_eq!(bodies.len(), 10, "{mode}");
        assert!(
            bodies.iter().all(|a| a.get("FIRSTNAME").is_none()),
            "{mode}: {bodies:?}"
        );
        assert_eq!(
            destination_notices(&s).await?,
            vec!["attributes FIRSTNAME are not in the Brevo account and were not written"],
            "{mode}"
        );
    }
    Ok(())
}

/// The check spends Brevo's ~100/h budget for non-contact endpoints (specs
/// README, "Rate limit") and must not stop a sync that would otherwise work:
/// when `GET /contacts/attributes` fails, the run goes on unchecked and
/// sends the mapping as it is.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_goes_on_unchecked_when_the_attributes_cannot_be_listed() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 10,
        ..SyncOptions::default()
    })
    .await?;
    s.fake.make_attributes_unavailable();
    assert_eq!(s.run_foreground().await?.code, 0);
    let bodies = written_attributes(&s);
    assert_eq!(bodies.len(), 10);
    assert!(
        bodies.iter().all(|a| a.get("FIRSTNAME").is_some()),
        "{bodies:?}"
    );
    assert!(destination_notices(&s).await?.is_empty());
    Ok(())
}

/// A revoked key when there is nothing new to send: the attribute check at
/// run start is answered 401, which no write would get past either, so the
/// run fails as `destination_auth_failed` (not `succeeded`), and the breaker
/// counts it: two such runs pause the sync with a threshold of two.
#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_key_fails_the_run_even_with_nothing_to_send() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 10,
        ..SyncOptions::default()
    })
    .await?;
    assert_eq!(s.run_foreground().await?.code, 0);
    let revoked = s
        .cli
        .clone()
        .with_secret("TEST_BREVO_KEY", "xkeysib-revoked")
        .with_env("SYNCWARD__BREAKER__CONSECUTIVE_FAILURES", "2");
    for _ in 0..2 {
        let out = revoked
            .run(&["sync", "run", SYNC_ID, "--foreground"])
            .await?;
        assert_eq!(out.code, 1, "{}", out.stdout);
        assert!(
            out.stdout.contains("destination_auth_failed"),
            "{}",
            out.stdout
        );
    }
    let run = s.last_run().await?;
    assert_eq!(run["failure_code"], "destination_auth_failed");
    assert_eq!(run["records_read"], 0, "it failed before reading: {run}");
    let (status, reason): (String, Option<String>) =
        sqlx::query_as("SELECT status, paused_reason FROM syncs WHERE id = $1")
            .bind(SYNC_ID)
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(
        (status.as_str(), reason.as_deref()),
        ("paused", Some("circuit_breaker_tripped"))
    );
    Ok(())
}

/// Brevo allows 10 requests/s on `/v3/contacts` (specs README, "Rate
/// limit"): single mode paces its writes to that per sync, however many are
/// in flight (`concurrency = 10` here, against a fake that answers at once).
#[tokio::test(flavor = "multi_thread")]
async fn single_mode_writes_at_most_ten_contacts_a_second() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        mode: "single",
        rows: 25,
        page_size: 25,
        concurrency: 10,
        ..SyncOptions::default()
    })
    .await?;
    assert_eq!(s.run_foreground().await?.code, 0);
    let mut at: Vec<_> = s.fake.writes().iter().map(|w| w.at).collect();
    at.sort();
    assert_eq!(at.len(), 25);
    for (first, eleventh) in at.iter().zip(at.iter().skip(10)) {
        let gap = eleventh.duration_since(*first).unwrap_or_default();
        assert!(gap >= Duration::from_millis(950), "{gap:?}");
    }
    Ok(())
}

/// An answer with `x-sib-ratelimit-remaining: 0` (the window's quota spent;
/// `x-sib-ratelimit-reset` in seconds, specs README "Rate limit") holds the
/// next write until the reset instead of drawing a 429.
#[tokio::test(flavor = "multi_thread")]
async fn a_spent_quota_holds_the_next_write_until_the_reset() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        mode: "single",
        rows: 6,
        concurrency: 4,
        ..SyncOptions::default()
    })
    .await?;
    s.fake.spend_quota_once(2);
    assert_eq!(s.run_foreground().await?.code, 0);
    let mut at: Vec<_> = s.fake.writes().iter().map(|w| w.at).collect();
    at.sort();
    assert_eq!(at.len(), 6);
    let gap = at[1].duration_since(at[0]).unwrap_or_default();
    assert!(gap >= Duration::from_millis(1900), "{gap:?}");
    assert!(
        s.fake.requests().iter().all(|r| r.status != 429),
        "no 429 drawn"
    );
    Ok(())
}

/// Brevo ignores a value that does not match its attribute's type ("Values
/// that don't match the attribute type (e.g. text or string in a date
/// attribute) will be ignored", `createContact.attributes`,
/// brevo-v3-openapi.2025-08.yml line 22830; the fake ignores them too). The
/// run reads the types with the names (`getAttributes`: `type`, a category's
/// `enumeration`), converts what it can without loss (a timestamp to its
/// day, a category label to its value), leaves out what it cannot, and says
/// so per attribute on the run's timeline and in the metric: nothing Brevo
/// drops is counted as written without a word.
#[tokio::test(flavor = "multi_thread")]
async fn values_that_do_not_fit_their_attribute_type_are_converted_or_reported()
-> anyhow::Result<()> {
    for mode in ["bulk", "single"] {
        let s = Scenario::new(SyncOptions {
            mode,
            ..SyncOptions::default()
        })
        .await?;
        sqlx::raw_sql(
            "ALTER TABLE contacts ADD COLUMN signup text, ADD COLUMN gender text;
             UPDATE contacts SET
               signup = CASE WHEN id % 2 = 0 THEN '2025-03-04T10:00:00Z' ELSE 'soon' END,
               gender = CASE id % 3 WHEN 0 THEN 'Women' WHEN 1 THEN '1' ELSE 'Robot' END",
        )
        .execute(&s.db.pool)
        .await?;
        let path = sync_file(&s, r#"DOB = "signup", GENDER = "gender""#)?;
        let text = std::fs::read_to_string(&path)?
            .replace(
                "SELECT id, email, first_name FROM contacts",
                "SELECT id, email, first_name, signup, gender FROM contacts",
            )
            .replace("mode = \"bulk\"", &format!("mode = \"{mode}\""));
        std::fs::write(&path, text)?;
        s.cli.run(&["sync", "apply", &path]).await?.ok()?;
        // The plan, on a machine that holds the secrets, names the
        // mismatches of a sample too (nothing changes: exit 0).
        let plan = s.cli.run(&["sync", "apply", "--plan", &path]).await?;
        assert_eq!(plan.code, 0, "{plan:?}");
        // One line per attribute, with a count, not one per record.
        let dob: Vec<&str> = plan
            .stdout
            .lines()
            .filter(|l| l.contains("mapping.attributes.DOB"))
            .collect();
        assert!(
            dob.len() == 1
                && dob[0].contains("5 of 10 sampled records")
                && dob[0].contains("text that is not a date"),
            "{}",
            plan.stdout
        );
        // The preview names the mismatches of its sample.
        let preview = s.cli.run(&["sync", "preview", SYNC_ID]).await?.ok()?.stdout;
        assert!(
            preview.contains("mapping.attributes.DOB: 5 of 10 sampled records")
                && preview.contains("text that is not a date")
                && preview.contains("mapping.attributes.GENDER: 3 of 10 sampled records")
                && preview.contains("a value that is not one of the category's"),
            "{preview}"
        );
        assert_eq!(s.run_foreground().await?.code, 0, "{mode}");
        let run = s.last_run().await?;
        assert_eq!(run["status"], "succeeded", "{mode}: {run}");
        assert_eq!(run["records_written"], 30, "{mode}: {run}");

        for (email, contact) in s.fake.contacts() {
            let id: i64 = email
                .trim_start_matches("user")
                .trim_end_matches("@example.com")
                .parse()?;
            let dob = contact.attributes.get("DOB");
            let gender = contact.attributes.get("GENDER");
            if id % 2 == 0 {
                assert_eq!(
                    dob,
                    Some(&serde_json::json!("2025-03-04")),
                    "{mode} {email}"
                );
            } else {
                assert_eq!(dob, None, "{mode} {email}");
            }
            match id % 3 {
                0 => assert_eq!(gender, Some(&serde_json::json!(2)), "{mode} {email}"),
                1 => assert_eq!(gender, Some(&serde_json::json!(1)), "{mode} {email}"),
                _ => assert_eq!(gender, None, "{mode} {email}"),
            }
        }
        // What does not fit is not sent at all.
        for attributes in written_attributes(&s) {
            assert_ne!(attributes.get("DOB"), Some(&serde_json::json!("soon")));
            assert_ne!(attributes.get("GENDER"), Some(&serde_json::json!("Robot")));
        }
        let notices = destination_notices(&s).await?;
        assert!(
            notices
                .iter()
                .any(|n| n.starts_with("attribute DOB: 15 values not written")
                    && n.contains("not a date")),
            "{mode}: {notices:?}"
        );
        assert!(
            notices
                .iter()
                .any(|n| n.starts_with("attribute GENDER: 10 values not written")),
            "{mode}: {notices:?}"
        );
        let run_id = run["id"].as_i64().unwrap_or_default().to_string();
        let shown = s.cli.run(&["runs", "show", &run_id]).await?.ok()?.stdout;
        assert!(
            shown.contains("attribute DOB: 15 values not written"),
            "{shown}"
        );
    }
    Ok(())
}
