//! Syncs as code, with the real binary: a plan before an apply, pruning a
//! directory's removed files, archiving, a full resync in a new ledger
//! epoch, and every definition kept with its version (show, rollback).

use std::path::Path;
use std::time::Duration;

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::install_crypto;
use crate::helpers::scenario::{QUIET_SCHEDULE, SYNC_ID, Scenario, SyncOptions};

const TOKEN: &str = "syncs-as-code-token-0123456789abcdef";

/// The scenario's sync file, as published.
fn scenario_file(s: &Scenario) -> anyhow::Result<String> {
    Ok(std::fs::read_to_string(s.dir.path().join("sync.toml"))?)
}

fn write(dir: &Path, name: &str, text: &str) -> anyhow::Result<()> {
    std::fs::write(dir.join(name), text)?;
    Ok(())
}

async fn scalar(s: &Scenario, sql: &'static str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sql).fetch_one(&s.db.pool).await?)
}

/// A directory of sync files kept in git: the plan lists what would be
/// created, changed (field by field, with what it means for delivery) and
/// archived, exits 4 and writes nothing; the apply with `--prune` does it
/// (archives first); the next plan finds nothing to do and exits 0.
#[tokio::test(flavor = "multi_thread")]
async fn plan_then_apply_then_prune_makes_the_store_match_the_directory() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let repo = tempfile::tempdir()?;
    let base = scenario_file(&s)?;
    let with_id =
        |id: &str| base.replacen(&format!("id = \"{SYNC_ID}\""), &format!("id = \"{id}\""), 1);
    write(repo.path(), "contacts.toml", &base)?;
    write(repo.path(), "old.toml", &with_id("acme-old"))?;
    s.cli
        .run(&["sync", "apply", repo.path().to_str().unwrap_or_default()])
        .await?
        .ok()?;

    // The change under review: a new query and attribute, a new sync, a removed file.
    let changed = base
        .replacen(
            "SELECT id, email, first_name FROM contacts",
            "SELECT id, email, first_name, 'x' AS last_name FROM contacts",
            1,
        )
        .replacen(
            "attributes = { FIRSTNAME = \"first_name\" }",
            "attributes = { FIRSTNAME = \"first_name\", LASTNAME = \"last_name\" }",
            1,
        );
    write(repo.path(), "contacts.toml", &changed)?;
    write(repo.path(), "new.toml", &with_id("acme-new"))?;
    std::fs::remove_file(repo.path().join("old.toml"))?;
    let dir = repo.path().to_str().unwrap_or_default();

    let plan = s
        .cli
        .run(&["sync", "apply", "--plan", "--prune", dir])
        .await?;
    assert_eq!(plan.code, 4, "{plan:?}");
    let text = &plan.stdout;
    assert!(text.contains("- acme-old: archive, version 1"), "{text}");
    assert!(
        text.contains("~ acme-contacts: change, version 1 -> 2"),
        "{text}"
    );
    assert!(
        text.contains("    mapping.attributes.LASTNAME: (none) -> \"last_name\""),
        "{text}"
    );
    assert!(
        text.contains("    source.query: \"SELECT id, email, first_name FROM contacts\" -> "),
        "{text}"
    );
    assert!(
        text.contains("means: source.query changed: delivery keys change"),
        "{text}"
    );
    assert!(
        text.contains("`syncward sync resync acme-contacts` sends everything again"),
        "{text}"
    );
    assert!(text.contains("+ acme-new: create, version 1"), "{text}");
    assert!(
        text.contains(
            "Plan: 1 to create, 1 to change, 0 to restore, 0 to resume, 1 to archive, 0 unchanged."
        ),
        "{text}"
    );
    // A plan runs the apply's checks: without the secrets set it refuses,
    // one line per file naming the variable and the file, as an apply would.
    let bare = crate::helpers::Syncward::new(&s.db, None);
    let refused = bare
        .run(&["sync", "apply", "--plan", "--prune", dir, "--json"])
        .await?;
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused
            .stderr
            .contains("source.url_env: TEST_SOURCE_URL is not set in"),
        "{}",
        refused.stderr
    );
    let json = s
        .cli
        .run(&["sync", "apply", "--plan", "--prune", dir, "--json"])
        .await?;
    assert_eq!(json.code, 4, "{json:?}");
    let plans: serde_json::Value = serde_json::from_str(&json.stdout)?;
    let actions: Vec<(&str, &str)> = plans
        .as_array()
        .map(|a| {
            a.iter()
                .map(|p| {
                    (
                        p["sync"].as_str().unwrap_or(""),
                        p["action"].as_str().unwrap_or(""),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        actions,
        [
            ("acme-old", "archive"),
            ("acme-contacts", "change"),
            ("acme-new", "create")
        ]
    );
    // Nothing was written by either plan.
    assert_eq!(scalar(&s, "SELECT count(*) FROM syncs").await?, 2);
    assert_eq!(
        scalar(&s, "SELECT max(version)::bigint FROM syncs").await?,
        1
    );

    let applied = s.cli.run(&["sync", "apply", "--prune", dir]).await?.ok()?;
    let lines: Vec<&str> = applied.stdout.lines().collect();
    assert!(
        lines[0].starts_with("acme-old: archived"),
        "archived first: {lines:?}"
    );
    assert!(
        applied.stdout.contains("acme-contacts: updated, version 2"),
        "{}",
        applied.stdout
    );
    assert!(
        applied.stdout.contains("acme-new: created, version 1"),
        "{}",
        applied.stdout
    );
    let listed = s.cli.run(&["sync", "list"]).await?.ok()?.stdout;
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("acme-old") && l.contains("archived")),
        "{listed}"
    );

    let again = s
        .cli
        .run(&["sync", "apply", "--plan", "--prune", dir])
        .await?;
    assert_eq!(again.code, 0, "{again:?}");
    assert!(
        again.stdout.contains(
            "Plan: 0 to create, 0 to change, 0 to restore, 0 to resume, 0 to archive, 2 unchanged."
        ),
        "{}",
        again.stdout
    );
    // An empty directory is refused, never read as "archive everything".
    let empty = tempfile::tempdir()?;
    let refused = s
        .cli
        .run(&[
            "sync",
            "apply",
            "--prune",
            empty.path().to_str().unwrap_or_default(),
        ])
        .await?;
    assert_eq!(refused.code, 2, "{refused:?}");
    assert!(
        refused.stderr.contains("holds no *.toml sync files"),
        "{}",
        refused.stderr
    );
    Ok(())
}

/// `sync delete` archives: its queued run ends skipped, it cannot be run,
/// its due tick enqueues nothing, its history stays; applying its file brings
/// it back, active, with the same version.
#[tokio::test(flavor = "multi_thread")]
async fn an_archived_sync_never_runs_and_comes_back_when_its_file_is_applied() -> anyhow::Result<()>
{
    let s = Scenario::new(SyncOptions::default()).await?;
    s.run_foreground().await?.ok()?;
    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let deleted = s.cli.run(&["sync", "delete", SYNC_ID]).await?.ok()?;
    assert!(deleted.stdout.contains("archived"), "{}", deleted.stdout);
    assert_eq!(
        scalar(
            &s,
            "SELECT count(*) FROM runs WHERE status = 'skipped' AND failure_code = 'sync_archived'"
        )
        .await?,
        1,
        "the queued run ended skipped"
    );
    let refused = s.cli.run(&["sync", "run", SYNC_ID, "--force"]).await?;
    assert_eq!(refused.code, 1, "{refused:?}");
    assert!(
        refused.stderr.contains("is archived; apply its file again"),
        "{}",
        refused.stderr
    );
    // Its tick comes: nothing is enqueued.
    sqlx::query(
        "UPDATE sync_schedule SET next_due_at = now() - interval '1 second' WHERE sync_id = $1",
    )
    .bind(SYNC_ID)
    .execute(&s.db.pool)
    .await?;
    let runs_before = scalar(&s, "SELECT count(*) FROM runs").await?;
    let daemon = DaemonProcess::spawn(&s.cli).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(scalar(&s, "SELECT count(*) FROM runs").await?, runs_before);
    drop(daemon);
    let shown = s.cli.run(&["sync", "show", SYNC_ID]).await?.ok()?.stdout;
    assert!(shown.contains("archived since"), "{shown}");
    assert!(shown.contains("succeeded"), "history kept: {shown}");

    let path = s.dir.path().join("sync.toml");
    let restored = s
        .cli
        .run(&["sync", "apply", path.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    assert!(
        restored
            .stdout
            .contains("restored from the archive, version 1"),
        "{}",
        restored.stdout
    );
    s.run_foreground().await?.ok()?;
    Ok(())
}

/// `sync resync` re-sends every record once: after a full run, a rewind
/// alone sends nothing (the ledger remembers), a resync sends each contact
/// once more, and the run after it nothing again. It is audited and shown.
#[tokio::test(flavor = "multi_thread")]
async fn a_resync_sends_every_record_once_more_in_a_new_ledger_epoch() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.run_foreground().await?.ok()?;
    assert!(s.writes_per_email().values().all(|n| *n == 1));
    s.cli.run(&["sync", "reset-cursor", SYNC_ID]).await?.ok()?;
    s.run_foreground().await?.ok()?;
    assert!(
        s.writes_per_email().values().all(|n| *n == 1),
        "a rewind replays from the ledger"
    );

    let out = s.cli.run(&["sync", "resync", SYNC_ID]).await?.ok()?;
    assert!(out.stdout.contains("ledger epoch 1"), "{}", out.stdout);
    s.run_foreground().await?.ok()?;
    let writes = s.writes_per_email();
    assert_eq!(writes.len(), 30);
    assert!(
        writes.values().all(|n| *n == 2),
        "each once more: {writes:?}"
    );
    s.cli.run(&["sync", "reset-cursor", SYNC_ID]).await?.ok()?;
    s.run_foreground().await?.ok()?;
    assert!(
        s.writes_per_email().values().all(|n| *n == 2),
        "once per epoch"
    );

    assert_eq!(
        scalar(&s, "SELECT count(*) FROM audit_log WHERE action = 'resync'").await?,
        1
    );
    let shown = s.cli.run(&["sync", "show", SYNC_ID]).await?.ok()?.stdout;
    assert!(shown.contains("1 (a full resync requested"), "{shown}");
    let last = s.last_run().await?;
    assert_eq!(last["ledger_epoch"], 1, "{last}");
    Ok(())
}

/// Every published definition is kept: a run records the version it ran,
/// `sync show --version N` and the page show any version, and `sync rollback`
/// publishes an earlier one again as a new version.
#[tokio::test(flavor = "multi_thread")]
async fn every_version_is_kept_and_a_rollback_publishes_one_again() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let path = s.dir.path().join("sync.toml");
    let first = scenario_file(&s)?;
    std::fs::write(
        &path,
        first.replacen(
            &format!("schedule = \"{QUIET_SCHEDULE}\""),
            "schedule = \"0 0 4 * * *\"",
            1,
        ),
    )?;
    s.cli
        .run(&["sync", "apply", path.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    s.run_foreground().await?.ok()?;
    let last = s.last_run().await?;
    assert_eq!(last["sync_version"], 2, "{last}");

    let v1 = s
        .cli
        .run(&["sync", "show", SYNC_ID, "--version", "1"])
        .await?
        .ok()?
        .stdout;
    assert!(
        v1.starts_with("# acme-contacts, version 1, published"),
        "{v1}"
    );
    assert!(v1.contains(QUIET_SCHEDULE), "{v1}");
    let missing = s
        .cli
        .run(&["sync", "show", SYNC_ID, "--version", "9"])
        .await?;
    assert_eq!(missing.code, 1, "{missing:?}");
    assert!(
        missing.stderr.contains("has no version 9"),
        "{}",
        missing.stderr
    );

    let rolled = s.cli.run(&["sync", "rollback", SYNC_ID, "1"]).await?.ok()?;
    assert!(
        rolled
            .stdout
            .contains("version 1 published again as version 3"),
        "{}",
        rolled.stdout
    );
    let (version, schedule): (i32, String) =
        sqlx::query_as("SELECT version, definition->>'schedule' FROM syncs WHERE id = $1")
            .bind(SYNC_ID)
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!((version, schedule.as_str()), (3, QUIET_SCHEDULE));
    assert_eq!(
        scalar(
            &s,
            "SELECT count(*) FROM audit_log WHERE action = 'rollback'"
        )
        .await?,
        1
    );

    // The page: the run links to the version it ran, which the page shows.
    let cli = s.cli.clone().with_env("SYNCWARD__HTTP__ADMIN_TOKEN", TOKEN);
    let daemon = DaemonProcess::spawn(&cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);
    install_crypto();
    let get = |url: String| async move {
        let response = reqwest::Client::new()
            .get(url)
            .basic_auth("admin", Some(TOKEN))
            .send()
            .await?;
        Ok::<_, anyhow::Error>((response.status().as_u16(), response.text().await?))
    };
    let run_id = last["id"].as_i64().unwrap_or_default();
    let (status, run_page) = get(format!("{base}/runs/{run_id}")).await?;
    assert_eq!(status, 200);
    assert!(
        run_page.contains("/syncs/acme-contacts?version=2"),
        "{run_page}"
    );
    let (status, page) = get(format!("{base}/syncs/{SYNC_ID}?version=2")).await?;
    assert_eq!(status, 200);
    assert!(page.contains("Definition, version 2 of 3"), "{page}");
    assert!(page.contains("0 0 4 * * *"), "{page}");
    Ok(())
}
