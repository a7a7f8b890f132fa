//! Erasure (`syncward forget EMAIL…`, `POST /api/forget`): every address
//! given leaves every table of the store (a data-only dump holds none of
//! them), the audit log names their SHA-256 digests, and with the
//! destination the contacts are deleted in the syncs' Brevo account.

use sha2::{Digest, Sha256};

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::install_crypto;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

const ADMIN: &str = "erasure-admin-token-0123456789abcdef";

fn digest(address: &str) -> String {
    hex::encode(Sha256::digest(address))
}

/// The store's data as `pg_dump --data-only` writes it, without the
/// scenario's source table (`contacts`: the customer's database, which the
/// tests keep beside the store).
async fn data_dump(s: &Scenario) -> anyhow::Result<String> {
    let out = tokio::process::Command::new("pg_dump")
        .args(["--data-only", "--exclude-table=public.contacts", &s.db.url])
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "pg_dump: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?.to_lowercase())
}

/// A sync that delivered user7 and had user3 refused, with both addresses
/// also standing in the text syncward keeps elsewhere (as a destination's
/// message, a failure detail, a notice, an alert, the audit log or a kept
/// answer can name one).
async fn store_holding_two_people() -> anyhow::Result<Scenario> {
    let s = Scenario::new(SyncOptions {
        mode: "single",
        rows: 10,
        ..SyncOptions::default()
    })
    .await?;
    s.fake.reject_emails(|e| e == "user3@example.com");
    s.run_foreground().await?.ok()?;
    let run = s.last_run().await?["id"].as_i64().unwrap_or_default();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        r#"
        UPDATE rejected_records SET message = message || ' (User3@Example.com)';
        UPDATE runs SET failure_detail = 'Brevo refused user3@example.com' WHERE id = {run};
        INSERT INTO run_events (run_id, kind, detail)
          VALUES ({run}, 'destination_notice', '{{"message": "user7@example.com bounced"}}');
        INSERT INTO alerts (kind, severity, sync_id, message)
          VALUES ('records_quarantined', 'critical', '{SYNC_ID}', 'user3@example.com was quarantined');
        INSERT INTO audit_log (actor, action, sync_id, reason, detail)
          VALUES ('cli', 'pause', '{SYNC_ID}', 'asked by USER7@example.com', '{{"by": "user7@example.com"}}');
        UPDATE syncs SET last_error = '{{"detail": "user3@example.com, user7@example.com"}}';
        UPDATE deliveries SET result = '{{"email": "user7@example.com"}}'
          WHERE ctid = (SELECT ctid FROM deliveries LIMIT 1);
        "#
    )))
    .execute(&s.db.pool)
    .await?;
    let dump = data_dump(&s).await?;
    anyhow::ensure!(
        dump.contains("user3@example.com") && dump.contains("user7@example.com"),
        "the store holds both before"
    );
    anyhow::ensure!(s.fake.contacts().contains_key("user7@example.com"));
    Ok(s)
}

#[tokio::test(flavor = "multi_thread")]
async fn forget_leaves_no_address_in_a_data_only_dump_and_deletes_the_brevo_contact()
-> anyhow::Result<()> {
    let s = store_holding_two_people().await?;
    // Behind `sudo -u syncward`, the audit names the person who asked.
    let out = s
        .cli
        .clone()
        .with_env("SUDO_USER", "alice")
        .run(&[
            "forget",
            "user3@example.com",
            " User7@Example.com ",
            "--destination",
        ])
        .await?
        .ok()?;
    assert!(out.stdout.contains("Forgot 2 addresses"), "{}", out.stdout);
    assert!(
        out.stdout.contains("user7@example.com: deleted"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("user3@example.com: not there"),
        "{}",
        out.stdout
    );

    let dump = data_dump(&s).await?;
    for gone in ["user3@example.com", "user7@example.com"] {
        assert!(!dump.contains(gone), "{gone} is still in the dump");
        assert!(
            dump.contains(&digest(gone)),
            "the audit names {gone}'s digest"
        );
    }
    // Nobody else was touched, in the store or in Brevo.
    let rejected: i64 = sqlx::query_scalar("SELECT count(*) FROM rejected_records")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(rejected, 0);
    let contacts = s.fake.contacts();
    assert!(!contacts.contains_key("user7@example.com"));
    assert_eq!(contacts.len(), 8, "the other eight contacts stay");
    let deletes: Vec<(String, u16)> = s
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE")
        .map(|r| (r.path, r.status))
        .collect();
    assert_eq!(
        deletes,
        [
            ("/v3/contacts/user3@example.com".to_string(), 404),
            ("/v3/contacts/user7@example.com".to_string(), 204),
        ]
    );
    let (actor, detail): (String, serde_json::Value) =
        sqlx::query_as("SELECT actor, detail FROM audit_log WHERE action = 'forget'")
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(actor, "cli:alice");
    assert_eq!(
        detail["addresses_sha256"],
        serde_json::json!([digest("user3@example.com"), digest("user7@example.com")])
    );

    // The sync goes on where it was: nothing is sent again (the ledger
    // holds digests, not addresses, and is untouched).
    let writes_before = s.fake.writes().len();
    s.run_foreground().await?.ok()?;
    assert_eq!(s.fake.writes().len(), writes_before);

    // Bad input: one line naming which argument, nothing touched.
    let bad = s
        .cli
        .run(&["forget", "ann@example.com", "not an address"])
        .await?;
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(bad.stderr.contains("address 2"), "{}", bad.stderr);
    assert_eq!(bad.stderr.trim().lines().count(), 1, "{}", bad.stderr);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_token_forgets_over_the_api_and_a_workspace_token_cannot() -> anyhow::Result<()> {
    let s = store_holding_two_people().await?;
    let cli = s.cli.clone().with_env("SYNCWARD__HTTP__ADMIN_TOKEN", ADMIN);
    let created = cli
        .run(&["token", "create", "--workspace", "acme", "--json"])
        .await?
        .ok()?;
    let token: serde_json::Value = serde_json::from_str(&created.stdout)?;
    let token = token["token"].as_str().unwrap_or_default().to_string();
    let daemon = DaemonProcess::spawn(&cli).await?;
    install_crypto();
    let url = format!("http://{}/api/forget", daemon.http_address().await?);
    let http = reqwest::Client::new();
    let body = serde_json::json!({
        "addresses": ["user3@example.com", "user7@example.com"],
        "destination": true,
    });

    let refused = http
        .post(&url)
        .bearer_auth(&token)
        .json(&body)
        .send()
        .await?;
    assert_eq!(
        refused.status().as_u16(),
        404,
        "a workspace token does not see the route"
    );
    let bad = http
        .post(&url)
        .bearer_auth(ADMIN)
        .json(&serde_json::json!({"addresses": ["nobody"]}))
        .send()
        .await?;
    assert_eq!(bad.status().as_u16(), 400);
    assert!(bad.text().await?.contains("address 1"));
    assert!(
        data_dump(&s).await?.contains("user7@example.com"),
        "nothing forgotten yet"
    );

    let done = http
        .post(&url)
        .bearer_auth(ADMIN)
        .json(&body)
        .send()
        .await?;
    assert_eq!(done.status().as_u16(), 200);
    let done: serde_json::Value = done.json().await?;
    assert_eq!(done["accounts"][0]["syncs"], serde_json::json!([SYNC_ID]));
    assert_eq!(
        done["accounts"][0]["outcomes"],
        serde_json::json!([{"outcome": "not_found"}, {"outcome": "deleted"}])
    );
    let dump = data_dump(&s).await?;
    assert!(!dump.contains("user3@example.com") && !dump.contains("user7@example.com"));
    let actor: String = sqlx::query_scalar("SELECT actor FROM audit_log WHERE action = 'forget'")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(actor, "api:admin");
    Ok(())
}

/// Every text or JSON column of the store is either rewritten by an
/// erasure or listed with the reason it holds no address: a column added
/// to the schema without either fails here.
#[tokio::test(flavor = "multi_thread")]
async fn every_text_column_is_erased_or_says_why_it_holds_no_address() -> anyhow::Result<()> {
    use syncward::store::forget::{KEPT_COLUMNS, OWN_ROWS, TEXT_COLUMNS};
    let db = crate::helpers::TestDb::new().await?;
    let columns: Vec<(String, String)> = sqlx::query_as(
        "SELECT c.table_name::text, c.column_name::text
           FROM information_schema.columns c
           JOIN pg_class k ON k.relname = c.table_name
                          AND k.relnamespace = 'public'::regnamespace
          WHERE c.table_schema = 'public'
            AND (c.data_type IN ('text', 'jsonb', 'json', 'character varying', 'character')
                 OR c.udt_name IN ('_text', '_varchar', '_jsonb'))
            AND NOT k.relispartition AND k.relkind IN ('r', 'p')
            AND c.table_name <> '_sqlx_migrations'
          ORDER BY 1, 2",
    )
    .fetch_all(&db.pool)
    .await?;
    assert!(columns.len() > 40, "{columns:?}");
    let mut unlisted = Vec::new();
    for (table, column) in &columns {
        let erased = TEXT_COLUMNS
            .iter()
            .any(|(t, c, _)| t == table && c == column)
            || (OWN_ROWS.contains(&table.as_str()) && column == "email");
        let kept = KEPT_COLUMNS
            .iter()
            .any(|(t, c, _)| t == table && c == column);
        assert!(!(erased && kept), "{table}.{column} is listed twice");
        if !erased && !kept {
            unlisted.push(format!("{table}.{column}"));
        }
    }
    assert!(
        unlisted.is_empty(),
        "text columns neither erased nor kept with a reason (store/forget.rs): {unlisted:?}"
    );
    // And no listed column is gone from the schema.
    for (table, column) in TEXT_COLUMNS
        .iter()
        .map(|(t, c, _)| (t, c))
        .chain(KEPT_COLUMNS.iter().map(|(t, c, _)| (t, c)))
    {
        assert!(
            columns.iter().any(|(t, c)| t == table && c == column),
            "{table}.{column} is listed but not in the schema"
        );
    }
    Ok(())
}

/// What a person wrote when pausing a sync may name someone: `forget`
/// takes it out like any other text.
#[tokio::test(flavor = "multi_thread")]
async fn a_pause_reason_is_erased() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.cli
        .run(&[
            "sync",
            "pause",
            SYNC_ID,
            "--reason",
            "Ann@Example.org asked us to stop",
        ])
        .await?
        .ok()?;
    assert!(data_dump(&s).await?.contains("ann@example.org"));
    s.cli.run(&["forget", "ann@example.org"]).await?.ok()?;
    assert!(!data_dump(&s).await?.contains("ann@example.org"));
    let show = s
        .cli
        .run(&["sync", "show", SYNC_ID, "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(
        show["sync"]["paused_note"], "[forgotten] asked us to stop",
        "{show}"
    );
    Ok(())
}
