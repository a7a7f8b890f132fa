//! The vanished-field guard: a mapped source field that held a value in most
//! records of the sync's last complete read and holds none in most records
//! now stops the run before it sends (`mapped_field_vanished`, owner
//! customer), naming the field and its shares; `[mapping] allow_vanished`
//! or a changed mapping lets it through (the real binary, the Brevo fake).

use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

/// Applies the scenario's sync over `query`, with `mapping` as the
/// `[mapping]` table's body and `mode` added to `[source]`.
async fn apply(
    s: &Scenario,
    query: &str,
    mode: &str,
    mapping: &str,
) -> anyhow::Result<crate::helpers::cli::Outcome> {
    let text = format!(
        r#"
id = "{SYNC_ID}"
workspace = "acme"
schedule = "{schedule}"

[source]
kind = "postgres"
url_env = "TEST_SOURCE_URL"
query = "{query}"
{mode}
page_size = 10

[destination]
kind = "brevo"
api_key_env = "TEST_BREVO_KEY"
base_url = "{base}"
mode = "bulk"
list_ids = [12]

[mapping]
email = "email"
{mapping}
"#,
        schedule = crate::helpers::scenario::QUIET_SCHEDULE,
        base = s.fake.base_url,
    );
    s.apply_text("vanished.toml", &text).await
}

const FIRSTNAME: &str = r#"attributes = { FIRSTNAME = "first_name" }"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_renamed_column_stops_the_run_before_it_sends_until_the_attribute_is_allowed_to_vanish()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let query = "SELECT * FROM contacts";
    apply(&s, query, r#"cursor_column = "id""#, FIRSTNAME)
        .await?
        .ok()?;
    let first = s.run_foreground().await?.ok()?;
    assert!(first.stdout.contains("succeeded"), "{}", first.stdout);
    let sent = s.fake.requests().len();

    // The column is renamed; new rows arrive under the new name.
    sqlx::raw_sql(
        "ALTER TABLE contacts RENAME first_name TO given_name;
         INSERT INTO contacts (id, email, given_name)
         SELECT i, 'new' || i || '@example.com', 'Given' || i FROM generate_series(31, 60) i",
    )
    .execute(&s.db.pool)
    .await?;
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 1, "{out:?}");
    let run = s.last_run().await?;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["failure_code"], "mapped_field_vanished", "{run}");
    let detail = run["failure_detail"].as_str().unwrap_or_default();
    for part in [
        "field \"first_name\" (attribute FIRSTNAME)",
        "in 100 % of the last complete read's 30 records",
        "in 0 % of the 10 read now",
        "stopped before sending page 1",
    ] {
        assert!(detail.contains(part), "{part:?} not in {detail:?}");
    }
    assert_eq!(s.fake.requests().len(), sent, "the run sent something");
    assert_eq!(s.cursor().await?.as_deref(), Some("30"), "the cursor moved");
    // What to do next, and whose it is, on the run's page in the terminal.
    let shown = s
        .cli
        .run(&["runs", "show", &run["id"].to_string()])
        .await?
        .ok()?;
    assert!(
        shown.stdout.contains("allow_vanished") && shown.stdout.contains("the sync's owner"),
        "{}",
        shown.stdout
    );

    // An attribute that is not mapped cannot be allowed: one line, exit 2.
    let refused = apply(
        &s,
        query,
        r#"cursor_column = "id""#,
        &format!("{FIRSTNAME}\nallow_vanished = [\"LASTNAME\"]"),
    )
    .await?;
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused.stderr.contains("mapping.allow_vanished")
            && refused
                .stderr
                .contains("\"LASTNAME\" is not a mapped attribute (mapped: FIRSTNAME)")
            && refused.stderr.trim().lines().count() == 1,
        "{}",
        refused.stderr
    );

    // Allowed, the next run sends the new rows without the attribute.
    apply(
        &s,
        query,
        r#"cursor_column = "id""#,
        &format!("{FIRSTNAME}\nallow_vanished = [\"FIRSTNAME\"]"),
    )
    .await?
    .ok()?;
    let out = s.run_foreground().await?.ok()?;
    assert!(out.stdout.contains("succeeded"), "{}", out.stdout);
    assert_eq!(s.cursor().await?.as_deref(), Some("60"));
    assert!(s.fake.requests().len() > sent);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_column_emptied_across_the_table_stops_a_diff_run_until_the_mapping_changes()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let query = "SELECT email, first_name, nickname FROM contacts";
    sqlx::raw_sql("ALTER TABLE contacts ADD COLUMN nickname text")
        .execute(&s.db.pool)
        .await?;
    apply(&s, query, r#"sync_mode = "diff""#, FIRSTNAME)
        .await?
        .ok()?;
    s.run_foreground().await?.ok()?;
    let sent = s.fake.requests().len();

    sqlx::raw_sql("UPDATE contacts SET first_name = NULL")
        .execute(&s.db.pool)
        .await?;
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 1, "{out:?}");
    let run = s.last_run().await?;
    assert_eq!(run["failure_code"], "mapped_field_vanished", "{run}");
    let detail = run["failure_detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("field \"first_name\" (attribute FIRSTNAME)")
            && detail.contains("in 0 % of the 10 read now"),
        "{detail}"
    );
    assert_eq!(s.fake.requests().len(), sent, "the run sent something");

    // The attribute mapped from the field that holds it now: measured anew.
    sqlx::raw_sql("UPDATE contacts SET nickname = 'Nick' || id")
        .execute(&s.db.pool)
        .await?;
    apply(
        &s,
        query,
        r#"sync_mode = "diff""#,
        r#"attributes = { FIRSTNAME = "nickname" }"#,
    )
    .await?
    .ok()?;
    let out = s.run_foreground().await?.ok()?;
    assert!(out.stdout.contains("succeeded"), "{}", out.stdout);
    assert!(s.fake.requests().len() > sent);
    Ok(())
}
