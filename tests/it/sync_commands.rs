//! `sync apply / show / list / pause / resume / reset-cursor` against a real store.

use crate::helpers::TestDb;
use crate::sync_files::{GOOD_SYNC, runner, write};

async fn show(db: &TestDb, id: &str) -> anyhow::Result<serde_json::Value> {
    runner(db)
        .run(&["sync", "show", id, "--json"])
        .await?
        .ok()?
        .json()
}

#[tokio::test]
async fn apply_then_show_json_round_trips_the_definition() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    crate::sync_files::source_table(&db).await?;
    let dir = tempfile::tempdir()?;
    let path = write(dir.path(), "acme.toml", GOOD_SYNC)?;
    let out = runner(&db)
        .run(&["sync", "apply", path.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    assert_eq!(out.stdout.trim(), "acme-contacts: created, version 1");

    let shown = show(&db, "acme-contacts").await?;
    let stored: syncward::config::SyncDefinition =
        serde_json::from_value(shown["sync"]["definition"].clone())?;
    let applied = syncward::config::SyncDefinition::parse("acme.toml", GOOD_SYNC)?;
    assert_eq!(stored, applied);
    assert_eq!(shown["sync"]["status"], "active");
    assert_eq!(shown["sync"]["version"], 1);
    assert_eq!(shown["sync"]["workspace_id"], "acme");
    assert!(shown["cursor"]["cursor"].is_null());

    // The same file again: unchanged, same version. An edit: a new version.
    let out = runner(&db)
        .run(&["sync", "apply", path.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    assert!(
        out.stdout.starts_with("acme-contacts: unchanged"),
        "{}",
        out.stdout
    );
    let edited = write(
        dir.path(),
        "acme.toml",
        &GOOD_SYNC.replace("page_size = 500", "page_size = 200"),
    )?;
    let out = runner(&db)
        .run(&["sync", "apply", edited.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    assert_eq!(out.stdout.trim(), "acme-contacts: updated, version 2");
    let shown = show(&db, "acme-contacts").await?;
    assert_eq!(shown["sync"]["definition"]["source"]["page_size"], 200);

    let listed = runner(&db)
        .run(&["sync", "list", "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(listed.as_array().map(Vec::len), Some(1));
    assert_eq!(listed[0]["id"], "acme-contacts");
    assert_eq!(listed[0]["schedule"], "0 */15 * * * *");
    Ok(())
}

#[tokio::test]
async fn pause_and_resume_change_status_and_resume_sets_changed_at() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    crate::sync_files::source_table(&db).await?;
    let dir = tempfile::tempdir()?;
    let path = write(dir.path(), "acme.toml", GOOD_SYNC)?;
    runner(&db)
        .run(&["sync", "apply", path.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    let before = show(&db, "acme-contacts").await?;

    runner(&db)
        .run(&["sync", "pause", "acme-contacts"])
        .await?
        .ok()?;
    let paused = show(&db, "acme-contacts").await?;
    assert_eq!(paused["sync"]["status"], "paused");
    assert_eq!(paused["sync"]["paused_reason"], "manual");
    assert_eq!(
        paused["sync"]["changed_at"], before["sync"]["changed_at"],
        "pausing is not a change of the sync"
    );
    let again = runner(&db)
        .run(&["sync", "pause", "acme-contacts"])
        .await?
        .ok()?;
    assert!(again.stdout.contains("already paused"));

    runner(&db)
        .run(&["sync", "resume", "acme-contacts"])
        .await?
        .ok()?;
    let resumed = show(&db, "acme-contacts").await?;
    assert_eq!(resumed["sync"]["status"], "active");
    assert!(resumed["sync"]["paused_reason"].is_null());
    let t = |v: &serde_json::Value| {
        chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap_or_default())
    };
    assert!(t(&resumed["sync"]["changed_at"])? > t(&before["sync"]["changed_at"])?);
    assert!(t(&resumed["sync"]["activated_at"])? > t(&before["sync"]["activated_at"])?);

    let actions: Vec<String> = sqlx::query_scalar(
        "SELECT action FROM audit_log WHERE sync_id = 'acme-contacts' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await?;
    assert_eq!(actions, ["publish", "pause", "resume"]);
    Ok(())
}

#[tokio::test]
async fn reset_cursor_forgets_the_position_and_fences_out_the_old_writer() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    crate::sync_files::source_table(&db).await?;
    let dir = tempfile::tempdir()?;
    let path = write(dir.path(), "acme.toml", GOOD_SYNC)?;
    runner(&db)
        .run(&["sync", "apply", path.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    sqlx::query("UPDATE sync_cursors SET cursor = '{\"int\": 42}', fence_issued = 3, fence = 3 WHERE sync_id = 'acme-contacts'")
        .execute(&db.pool)
        .await?;
    runner(&db)
        .run(&["sync", "reset-cursor", "acme-contacts"])
        .await?
        .ok()?;
    let shown = show(&db, "acme-contacts").await?;
    assert!(shown["cursor"]["cursor"].is_null());
    assert_eq!(shown["cursor"]["fence_issued"], 4);
    Ok(())
}

#[tokio::test]
async fn unknown_ids_exit_1_with_one_line_naming_what_is_missing() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    crate::sync_files::source_table(&db).await?;
    for args in [
        &["sync", "show", "nope"][..],
        &["sync", "pause", "nope"],
        &["runs", "show", "999"],
    ] {
        let out = runner(&db).run(args).await?;
        // Well-formed input naming nothing that exists: "not found" is 1, as
        // peers answer it; 2 stays for input that cannot be read.
        assert_eq!(out.code, 1, "{args:?}: {out:?}");
        assert_eq!(out.stderr.trim_end().lines().count(), 1);
        assert!(out.stderr.contains("no such"), "{}", out.stderr);
    }
    let out = runner(&db).run(&["runs", "list", "--json"]).await?.ok()?;
    assert_eq!(out.json()?, serde_json::json!([]));
    Ok(())
}

/// Every command that prints takes `--json` and prints one JSON value there.
#[tokio::test]
async fn every_printing_command_answers_in_json_with_json() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    crate::sync_files::source_table(&db).await?;
    let dir = tempfile::tempdir()?;
    let path = write(dir.path(), "acme.toml", GOOD_SYNC)?;
    let file = path.to_str().unwrap_or_default();
    let json = |args: &'static [&'static str]| {
        let runner = runner(&db);
        async move {
            let out = runner.run(args).await?.ok()?;
            anyhow::Ok(out.json()?)
        }
    };
    let applied = runner(&db)
        .run(&["sync", "apply", file, "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(
        applied,
        serde_json::json!([{"sync": "acme-contacts", "version": 1, "outcome": "created"}])
    );
    assert_eq!(
        json(&["sync", "pause", "acme-contacts", "--json"]).await?,
        serde_json::json!({"sync": "acme-contacts", "status": "paused", "changed": true})
    );
    assert_eq!(
        json(&["sync", "resume", "acme-contacts", "--json"]).await?["changed"],
        true
    );
    assert!(json(&["sync", "reset-cursor", "acme-contacts", "--json"]).await?["cursor"].is_null());
    assert_eq!(json(&["migrate", "--json"]).await?["applied"], 0);
    assert!(json(&["check-config", "--json"]).await?["database"]["url"].is_string());
    assert_eq!(
        json(&["ledger", "purge", "--json"]).await?["deleted_keys"],
        0
    );
    assert_eq!(
        json(&["sync", "list", "--json"]).await?[0]["id"],
        "acme-contacts"
    );

    // With no daemon alive, a queued run says it waits for one.
    let out = runner(&db)
        .run(&["sync", "run", "acme-contacts", "--json"])
        .await?
        .ok()?;
    assert_eq!(out.json()?["new"], true);
    assert!(
        out.stderr.contains("no syncward daemon is alive to run it"),
        "{}",
        out.stderr
    );
    Ok(())
}

/// A mistyped command keeps clap's suggestion on its one line; every
/// argument has help text.
#[tokio::test]
async fn a_mistyped_command_gets_a_suggestion_and_every_argument_has_help() -> anyhow::Result<()> {
    let out = crate::helpers::Syncward::bare().run(&["stauts"]).await?;
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(out.stderr.trim_end().lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("tip: a similar subcommand exists: 'status'"),
        "{}",
        out.stderr
    );
    for command in [
        &["sync", "show", "--help"][..],
        &["sync", "pause", "--help"],
        &["sync", "run", "--help"],
        &["runs", "show", "--help"],
    ] {
        let help = crate::helpers::Syncward::bare()
            .run(command)
            .await?
            .ok()?
            .stdout;
        let arguments = help
            .split("Arguments:")
            .nth(1)
            .and_then(|a| a.split("Options:").next())
            .unwrap_or_default();
        for line in arguments
            .lines()
            .filter(|l| l.trim_start().starts_with('<'))
        {
            assert!(
                line.split_whitespace().count() > 1,
                "{command:?}: an argument without help: {line:?}"
            );
        }
    }
    Ok(())
}
