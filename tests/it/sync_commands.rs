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
async fn unknown_ids_are_bad_input() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    for args in [
        &["sync", "show", "nope"][..],
        &["sync", "pause", "nope"],
        &["runs", "show", "999"],
    ] {
        let out = runner(&db).run(args).await?;
        assert_eq!(out.code, 2, "{args:?}: {out:?}");
        assert_eq!(out.stderr.trim_end().lines().count(), 1);
        assert!(out.stderr.contains("no such"), "{}", out.stderr);
    }
    let out = runner(&db).run(&["runs", "list", "--json"]).await?.ok()?;
    assert_eq!(out.json()?, serde_json::json!([]));
    Ok(())
}
