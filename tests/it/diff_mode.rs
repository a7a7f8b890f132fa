//! Diff and mirror modes (`source.sync_mode`): a query with no column that
//! moves forward is read whole every run, only records whose content is new
//! or changed since they were last delivered are sent, and (mirror) records
//! that left the query are taken off the destination's lists, guarded
//! against a broken query emptying them (the real binary, the Brevo fake).

use crate::helpers::scenario::{BREVO_KEY, SYNC_ID, Scenario, SyncOptions};

/// Publishes the scenario's sync in diff mode over an audience query: no
/// cursor column.
async fn publish_diff(s: &Scenario, query: &str) -> anyhow::Result<()> {
    publish_mode(s, query, "sync_mode = \"diff\"").await
}

async fn publish_mode(s: &Scenario, query: &str, mode: &str) -> anyhow::Result<()> {
    let text = format!(
        r#"
id = "{SYNC_ID}"
workspace = "acme"
schedule = "{schedule}"

[source]
kind = "postgres"
url_env = "TEST_SOURCE_URL"
{mode}
query = "{query}"
page_size = 7

[destination]
kind = "brevo"
api_key_env = "TEST_BREVO_KEY"
base_url = "{base}"
mode = "bulk"
list_ids = [12]

[mapping]
email = "email"
attributes = {{ FIRSTNAME = "first_name" }}
"#,
        schedule = crate::helpers::scenario::QUIET_SCHEDULE,
        base = s.fake.base_url,
    );
    s.apply_text("diff.toml", &text).await?.ok()?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn diff_mode_sends_only_new_and_changed_records_and_a_record_changed_back()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    assert_eq!(BREVO_KEY, "xkeysib-test-key");
    // An audience: rows enter and leave it without any column moving forward.
    publish_diff(
        &s,
        "SELECT email, first_name FROM contacts WHERE first_name NOT LIKE 'gone%'",
    )
    .await?;
    s.run_foreground().await?.ok()?;
    assert_eq!(s.fake.writes().len(), 30, "the first run sends everyone");

    s.run_foreground().await?.ok()?;
    assert_eq!(s.fake.writes().len(), 30, "nothing changed: nothing sent");
    let run = s.last_run().await?;
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["records_replayed"], 30, "{run}");
    assert_eq!(s.cursor().await?, None, "diff mode keeps no cursor");

    // Two change, one arrives, one leaves the audience.
    sqlx::raw_sql(
        "UPDATE contacts SET first_name = 'Changed' || id WHERE id IN (3, 17);
         INSERT INTO contacts VALUES (31, 'user31@example.com', 'First31');
         UPDATE contacts SET first_name = 'gone' WHERE id = 5;",
    )
    .execute(&s.db.pool)
    .await?;
    s.run_foreground().await?.ok()?;
    let writes = s.fake.writes();
    let new: Vec<(String, String)> = writes[30..]
        .iter()
        .map(|w| (w.email.clone(), w.attributes["FIRSTNAME"].to_string()))
        .collect();
    assert_eq!(new.len(), 3, "{new:?}");
    for email in [
        "user3@example.com",
        "user17@example.com",
        "user31@example.com",
    ] {
        assert!(new.iter().any(|(e, _)| e == email), "{email} in {new:?}");
    }

    // A record changed and then changed back is sent both times: the
    // destination ends up with what the source holds.
    sqlx::raw_sql("UPDATE contacts SET first_name = 'Other' WHERE id = 3")
        .execute(&s.db.pool)
        .await?;
    s.run_foreground().await?.ok()?;
    sqlx::raw_sql("UPDATE contacts SET first_name = 'Changed3' WHERE id = 3")
        .execute(&s.db.pool)
        .await?;
    s.run_foreground().await?.ok()?;
    let writes = s.fake.writes();
    assert_eq!(writes.len(), 35, "one write per change of row 3");
    let last = writes.last().expect("a write");
    assert_eq!(last.email, "user3@example.com");
    assert_eq!(last.attributes["FIRSTNAME"], "Changed3");
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn diff_mode_needs_no_cursor_column_and_cursor_mode_needs_one() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let path = s.dir.path().join("bad.toml");
    for (source, complaint) in [
        (
            "sync_mode = \"diff\"\ncursor_column = \"id\"",
            "source.cursor_column",
        ),
        ("page_size = 5", "source.cursor_column"),
    ] {
        std::fs::write(
            &path,
            format!(
                "id = \"bad\"\nworkspace = \"acme\"\nschedule = \"0 0 * * * *\"\n\n[source]\nkind = \"postgres\"\nurl_env = \"TEST_SOURCE_URL\"\nquery = \"SELECT email FROM contacts\"\n{source}\n\n[destination]\nkind = \"brevo\"\napi_key_env = \"TEST_BREVO_KEY\"\nlist_ids = [1]\n\n[mapping]\nemail = \"email\"\n"
            ),
        )?;
        let out = s
            .cli
            .run(&["sync", "apply", path.to_str().unwrap_or_default()])
            .await?;
        assert_eq!(out.code, 2, "{}", out.stderr);
        assert!(out.stderr.contains(complaint), "{}", out.stderr);
        assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    }
    Ok(())
}

const AUDIENCE: &str = "SELECT email, first_name FROM contacts WHERE first_name NOT LIKE 'gone%'";

/// Contacts on list 12 in the fake.
fn on_list(s: &Scenario) -> usize {
    s.fake
        .contacts()
        .values()
        .filter(|c| c.list_ids.contains(&12))
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn mirror_mode_takes_who_left_the_query_off_the_list_and_refuses_to_empty_it()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    publish_mode(&s, AUDIENCE, "sync_mode = \"mirror\"").await?;
    s.run_foreground().await?.ok()?;
    assert_eq!(on_list(&s), 30);

    // Two leave the audience: taken off list 12, neither deleted nor
    // blocklisted; nothing else is sent.
    sqlx::raw_sql("UPDATE contacts SET first_name = 'gone' WHERE id IN (4, 9)")
        .execute(&s.db.pool)
        .await?;
    s.run_foreground().await?.ok()?;
    assert_eq!(on_list(&s), 28);
    let contacts = s.fake.contacts();
    for email in ["user4@example.com", "user9@example.com"] {
        let c = &contacts[email];
        assert!(!c.list_ids.contains(&12), "{email} still on the list");
        assert!(!c.email_blacklisted, "{email} was blocklisted");
    }
    let removals = s.fake.requests_to("/v3/contacts/lists/12/contacts/remove");
    assert_eq!(removals.len(), 1);
    assert_eq!(removals[0].status, 201);
    assert_eq!(s.fake.writes().len(), 30, "no contact written again");
    // `trace` tells when user4 was taken off, newest first, before when it
    // was sent; a kept one shows which run last saw it in the query.
    let run_id = s.last_run().await?["id"].as_i64().unwrap_or_default();
    let traced = s
        .cli
        .run(&["trace", "user4@example.com", "--json"])
        .await?
        .ok()?
        .json()?;
    let calls = traced["calls"].as_array().cloned().unwrap_or_default();
    assert_eq!(calls.len(), 2, "{traced}");
    assert_eq!(calls[0]["kind"], "taken_off", "{traced}");
    assert_eq!(calls[0]["run_id"], run_id, "{traced}");
    assert_eq!(calls[0]["sent"]["taken_off"], "left the query", "{traced}");
    assert_eq!(calls[1]["kind"], "sent", "{traced}");
    let kept = s
        .cli
        .run(&["trace", "user5@example.com", "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(kept["kept"][0]["last_seen_by_run"], run_id, "{kept}");
    // A diff or mirror sync keys a record by its content: `--only` of one
    // unchanged since delivered replays it and says so.
    let again = s
        .cli
        .run(&[
            "sync",
            "run",
            SYNC_ID,
            "--foreground",
            "--only",
            "user5@example.com",
        ])
        .await?
        .ok()?;
    assert!(
        again.stdout.contains("unchanged since it was delivered"),
        "{}",
        again.stdout
    );
    assert_eq!(s.fake.writes().len(), 30, "nothing written");

    // Nothing left since: nothing removed again.
    s.run_foreground().await?.ok()?;
    assert_eq!(
        s.fake
            .requests_to("/v3/contacts/lists/12/contacts/remove")
            .len(),
        1
    );

    // One who left comes back: written (and on the list) again.
    sqlx::raw_sql("UPDATE contacts SET first_name = 'First4' WHERE id = 4")
        .execute(&s.db.pool)
        .await?;
    s.run_foreground().await?.ok()?;
    assert_eq!(on_list(&s), 29);

    // A broken query (most of the audience gone at once) removes nobody and
    // fails the run, owned by the customer, until the share is raised.
    sqlx::raw_sql("UPDATE contacts SET first_name = 'gone' WHERE id > 10")
        .execute(&s.db.pool)
        .await?;
    let refused = s.run_foreground().await?;
    assert_ne!(refused.code, 0);
    let run = s.last_run().await?;
    assert_eq!(run["failure_code"], "mirror_removal_refused", "{run}");
    assert_eq!(on_list(&s), 29, "nobody taken off");
    publish_mode(
        &s,
        AUDIENCE,
        "sync_mode = \"mirror\"\nmax_removal_share = 1.0",
    )
    .await?;
    s.run_foreground().await?.ok()?;
    assert_eq!(on_list(&s), 9);
    Ok(())
}

/// SIGKILL in the middle of a changed page, then in the middle of the
/// removals: every change arrives, at most the page in flight is sent twice,
/// and the removals repeat at most the call in flight.
#[tokio::test(flavor = "multi_thread")]
async fn mirror_mode_killed_mid_run_resends_at_most_the_page_in_flight() -> anyhow::Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let s = Scenario::new(SyncOptions::default()).await?;
    publish_mode(&s, AUDIENCE, "sync_mode = \"mirror\"").await?;
    s.run_foreground().await?.ok()?;
    let first_writes = s.fake.writes().len();
    assert_eq!(first_writes, 30);
    sqlx::raw_sql(
        "UPDATE contacts SET first_name = 'Changed' || id WHERE id <= 14;
         UPDATE contacts SET first_name = 'gone' WHERE id IN (20, 21);",
    )
    .execute(&s.db.pool)
    .await?;
    // Kill once at the second import of the changes (the fake has applied
    // it), and once at the removal (applied too).
    let kills = Arc::new(AtomicUsize::new(0));
    let imports = Arc::new(AtomicUsize::new(0));
    let kill = s.killer();
    let (k, n) = (kills.clone(), imports.clone());
    s.fake.on_write(move |event| {
        let removal = event.emails.iter().any(|e| e == "user20@example.com");
        let import = !removal && n.fetch_add(1, Ordering::SeqCst) == 1;
        let due =
            (import && k.load(Ordering::SeqCst) == 0) || (removal && k.load(Ordering::SeqCst) == 1);
        if due {
            k.fetch_add(1, Ordering::SeqCst);
            kill();
        }
    });
    for attempt in 0..6 {
        let outcome = s.run_foreground().await?;
        if outcome.code == 0 {
            break;
        }
        anyhow::ensure!(attempt < 5, "never finished: {outcome:?}");
        s.wait_for_lease_free().await?;
    }
    assert_eq!(kills.load(Ordering::SeqCst), 2, "both kills happened");
    // Everyone changed arrived with the new content; at most one page (7)
    // was sent twice.
    let contacts = s.fake.contacts();
    for id in 1..=14 {
        let c = &contacts[&format!("user{id}@example.com")];
        assert_eq!(
            c.attributes["FIRSTNAME"],
            format!("Changed{id}"),
            "user{id}"
        );
    }
    let resent = s.fake.writes().len() - first_writes - 14;
    assert!(
        resent <= 7,
        "{resent} changes sent twice: more than the page in flight"
    );
    for id in [20, 21] {
        let c = &contacts[&format!("user{id}@example.com")];
        assert!(!c.list_ids.contains(&12), "user{id} still on the list");
    }
    let removals = s
        .fake
        .requests_to("/v3/contacts/lists/12/contacts/remove")
        .len();
    assert!(
        removals <= 2,
        "{removals} removal calls: more than the call in flight again"
    );
    // And nothing is removed or sent after that.
    s.run_foreground().await?.ok()?;
    assert_eq!(
        s.fake
            .requests_to("/v3/contacts/lists/12/contacts/remove")
            .len(),
        removals
    );
    Ok(())
}

/// A mirror run refused for its share holds exactly who it would have taken
/// off: a person lists them (paged), approves them, and the next run takes
/// off exactly those still absent — not one who came back — with the
/// approval in the audit log.
#[tokio::test(flavor = "multi_thread")]
async fn refused_removals_are_held_listed_and_taken_off_exactly_once_approved() -> anyhow::Result<()>
{
    let s = Scenario::new(SyncOptions::default()).await?;
    publish_mode(&s, AUDIENCE, "sync_mode = \"mirror\"").await?;
    s.run_foreground().await?.ok()?;
    sqlx::raw_sql("UPDATE contacts SET first_name = 'gone' WHERE id <= 5")
        .execute(&s.db.pool)
        .await?;
    assert_ne!(s.run_foreground().await?.code, 0);
    let run = s.last_run().await?;
    assert_eq!(run["failure_code"], "mirror_removal_refused", "{run}");
    let refused = run["id"].to_string();
    let detail = run["failure_detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(&format!("syncward sync approve-removals {refused}")),
        "{detail}"
    );
    assert_eq!(on_list(&s), 30, "nobody taken off");

    let listed = s
        .cli
        .run(&["sync", "removals", &refused, "--json"])
        .await?
        .ok()?;
    let held: serde_json::Value = serde_json::from_str(&listed.stdout)?;
    assert_eq!(held["held"], 5, "{held}");
    assert!(held["approved_at"].is_null(), "{held}");
    let mut addresses: Vec<String> = serde_json::from_value(held["addresses"].clone())?;
    addresses.sort();
    let gone: Vec<String> = (1..=5).map(|i| format!("user{i}@example.com")).collect();
    assert_eq!(addresses, gone);
    let last_page = s
        .cli
        .run(&[
            "sync",
            "removals",
            &refused,
            "--per-page",
            "2",
            "--page",
            "3",
        ])
        .await?
        .ok()?;
    assert!(
        last_page
            .stdout
            .contains("5 removals held, awaiting approval")
            && last_page.stdout.matches("@example.com").count() == 1,
        "{}",
        last_page.stdout
    );

    // One comes back before the approval; the rest stay gone.
    sqlx::raw_sql("UPDATE contacts SET first_name = 'First3' WHERE id = 3")
        .execute(&s.db.pool)
        .await?;
    let approved = s
        .cli
        .run(&["sync", "approve-removals", &refused])
        .await?
        .ok()?;
    assert!(
        approved.stdout.contains("5 removals approved"),
        "{}",
        approved.stdout
    );
    let again = s.cli.run(&["sync", "approve-removals", &refused]).await?;
    assert_ne!(again.code, 0);
    assert!(
        again.stderr.contains("holds no removals awaiting approval")
            && again.stderr.trim().lines().count() == 1,
        "{}",
        again.stderr
    );
    let (actor, records): (String, i64) = sqlx::query_as(
        "SELECT actor, (detail->>'records')::bigint FROM audit_log WHERE action = 'approve_removals'",
    )
    .fetch_one(&s.db.pool)
    .await?;
    assert!(actor == "cli" || actor.starts_with("cli:"), "{actor}");
    assert_eq!(records, 5);

    s.run_foreground().await?.ok()?;
    let contacts = s.fake.contacts();
    for i in 1..=5 {
        let email = format!("user{i}@example.com");
        assert_eq!(
            contacts[&email].list_ids.contains(&12),
            i == 3,
            "{email}: taken off only if still gone"
        );
    }
    assert_eq!(on_list(&s), 26);
    // Done with: the run's removals are no longer held.
    let after = s.cli.run(&["sync", "removals", &refused]).await?;
    assert_ne!(after.code, 0);
    assert!(
        after.stderr.contains("holds no removals"),
        "{}",
        after.stderr
    );
    Ok(())
}
