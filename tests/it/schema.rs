//! The schema: migrations apply once, and the tables hold what the design needs.

use std::collections::BTreeSet;

use crate::helpers::{Syncward, TestDb};

#[tokio::test]
async fn migrate_twice_is_a_no_op_the_second_time() -> anyhow::Result<()> {
    let db = TestDb::empty().await?;
    let cli = Syncward::new(&db, None);
    let all = syncward::store::MIGRATOR.iter().count() as i64;
    let first = cli.run(&["migrate"]).await?.ok()?;
    assert!(
        first
            .stdout
            .starts_with(&format!("Applied {all} migrations")),
        "{}",
        first.stdout
    );
    // Named by the latest file: the numbers are not consecutive.
    let latest = syncward::store::MIGRATOR
        .iter()
        .map(|m| m.version)
        .max()
        .unwrap_or_default();
    assert!(
        first
            .stdout
            .contains(&format!("the schema is now at {latest:04}_")),
        "{}",
        first.stdout
    );
    let tables_before = tables(&db).await?;
    let second = cli.run(&["migrate"]).await?.ok()?;
    assert!(
        second.stdout.starts_with("Schema is current"),
        "{}",
        second.stdout
    );
    assert_eq!(tables(&db).await?, tables_before);
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&db.pool)
        .await?;
    assert_eq!(applied, all);
    Ok(())
}

/// A store without syncward's schema, or behind this binary: the daemon and
/// every command that reads the store exit 2 (which the unit does not
/// restart) with one line naming the database and `syncward migrate`, never a
/// SQL error about a missing table; once migrated they work.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_behind_the_binary_is_refused_with_exit_2_naming_the_database_and_migrate()
-> anyhow::Result<()> {
    let db = TestDb::empty().await?;
    let redis = crate::helpers::TestRedis::new().await?;
    let cli = Syncward::new(&db, Some(&redis));
    let commands: [&[&str]; 8] = [
        &["run"],
        &["status"],
        &["sync", "list"],
        &["runs", "list"],
        &["ledger", "purge"],
        &["deadman", "check"],
        &["token", "list"],
        &["forget", "ann@example.com"],
    ];
    let migrator = &syncward::store::MIGRATOR;
    let versions: Vec<i64> = migrator.iter().map(|m| m.version).collect();
    for (state, words) in [
        ("empty", "holds no syncward schema yet".to_string()),
        (
            "behind",
            format!("migrations [{}] pending", versions[versions.len() - 1]),
        ),
    ] {
        if state == "behind" {
            migrator
                .run_to(versions[versions.len() - 2], &db.pool)
                .await?;
        }
        for args in commands {
            let out = cli.run(args).await?;
            let line = out.stderr.trim();
            assert_eq!(out.code, 2, "{state}: syncward {args:?}: {out:?}");
            assert_eq!(
                line.lines().count(),
                1,
                "{state}: syncward {args:?}: {line}"
            );
            assert!(
                line.contains(&db.name)
                    && line.contains(&words)
                    && line.contains("run `syncward migrate`"),
                "{state}: syncward {args:?}: {line}"
            );
            assert!(!line.contains("does not exist"), "{line}");
        }
    }
    cli.run(&["migrate"]).await?.ok()?;
    cli.run(&["sync", "list"]).await?.ok()?;
    Ok(())
}

async fn tables(db: &TestDb) -> anyhow::Result<BTreeSet<String>> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .fetch_all(&db.pool)
    .await?;
    Ok(names.into_iter().collect())
}

async fn columns(db: &TestDb, table: &str) -> anyhow::Result<BTreeSet<String>> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1",
    )
    .bind(table)
    .fetch_all(&db.pool)
    .await?;
    Ok(names.into_iter().collect())
}

#[tokio::test]
async fn the_schema_has_every_table_and_column_the_design_names() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let expected: &[(&str, &[&str])] = &[
        ("workspaces", &["id", "created_at"]),
        (
            "syncs",
            &[
                "id",
                "workspace_id",
                "definition",
                "version",
                "status",
                "paused_reason",
                "last_error",
                "changed_at",
                "activated_at",
            ],
        ),
        (
            "runs",
            &[
                "id",
                "sync_id",
                "status",
                "attempt",
                "max_attempts",
                "scheduled_at",
                "started_at",
                "finished_at",
                "heartbeat_at",
                "worker_id",
                "trigger",
                "cursor_start",
                "cursor_end",
                "records_read",
                "records_written",
                "records_replayed",
                "records_rejected",
                "records_resent",
                "failure_code",
                "failure_detail",
                "boot_id",
                "lease_token",
                "fence",
            ],
        ),
        (
            "sync_cursors",
            &[
                "sync_id",
                "cursor",
                "fence",
                "fence_issued",
                "updated_at",
                "run_id",
            ],
        ),
        (
            "deliveries",
            &[
                "sync_id",
                "key",
                "status",
                "attempts",
                "result",
                "run_id",
                "fence",
                "staked_at",
                "completed_at",
                "batch_id",
            ],
        ),
        (
            "delivery_batches",
            &[
                "sync_id",
                "run_id",
                "keys",
                "result",
                "created_at",
                "completed_at",
                "page",
                "per_key",
                "attempts",
                "fence",
            ],
        ),
        ("ledger_unpaged_syncs", &["sync_id"]),
        (
            "rejected_records",
            &["run_id", "key", "code", "message", "email"],
        ),
        (
            "audit_log",
            &["at", "actor", "action", "sync_id", "reason", "detail"],
        ),
        (
            "alerts",
            &[
                "at",
                "kind",
                "severity",
                "workspace_id",
                "sync_id",
                "message",
                "failure_code",
                "owner",
                "channels",
            ],
        ),
        ("run_events", &["run_id", "at", "kind", "detail"]),
        (
            "deadman_incidents",
            &[
                "scope",
                "workspace_id",
                "sync_id",
                "silence",
                "opened_at",
                "closed_at",
            ],
        ),
    ];
    for (table, wanted) in expected {
        let have = columns(&db, table).await?;
        for column in *wanted {
            assert!(
                have.contains(*column),
                "{table}.{column} is missing; have {have:?}"
            );
        }
    }
    Ok(())
}

async fn seed_sync(db: &TestDb) -> anyhow::Result<()> {
    sqlx::query("INSERT INTO workspaces (id) VALUES ('acme')")
        .execute(&db.pool)
        .await?;
    sqlx::query("INSERT INTO syncs (id, workspace_id, definition) VALUES ('s1', 'acme', '{}')")
        .execute(&db.pool)
        .await?;
    Ok(())
}

#[tokio::test]
async fn the_queue_holds_one_queued_run_per_sync() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    seed_sync(&db).await?;
    let enqueue = "INSERT INTO runs (sync_id, workspace_id, sync_version, trigger, max_attempts) VALUES ('s1', 'acme', 1, 'manual', 5)";
    sqlx::query(enqueue).execute(&db.pool).await?;
    let second = sqlx::query(enqueue).execute(&db.pool).await;
    let err = second.expect_err("a second queued run of one sync must be refused");
    assert!(
        err.to_string().contains("runs_one_queued_per_sync"),
        "{err}"
    );
    // Once the first is running, a new one may queue behind it.
    sqlx::query("UPDATE runs SET status = 'running', attempt = 1, started_at = now()")
        .execute(&db.pool)
        .await?;
    sqlx::query(enqueue).execute(&db.pool).await?;
    // A failed run must say why.
    let no_code = sqlx::query(
        "UPDATE runs SET status = 'failed', finished_at = now() WHERE status = 'running'",
    )
    .execute(&db.pool)
    .await;
    assert!(
        no_code.is_err(),
        "a failed run without a failure code was accepted"
    );
    Ok(())
}

#[tokio::test]
async fn the_ledger_keeps_one_32_byte_key_per_sync() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let key = vec![7u8; 32];
    let insert =
        "INSERT INTO deliveries (sync_id, key, status, fence) VALUES ('s1', $1, 'pending', 1)";
    sqlx::query(insert).bind(&key).execute(&db.pool).await?;
    assert!(
        sqlx::query(insert)
            .bind(&key)
            .execute(&db.pool)
            .await
            .is_err(),
        "duplicate key accepted"
    );
    assert!(
        sqlx::query(insert)
            .bind(vec![1u8; 31])
            .execute(&db.pool)
            .await
            .is_err(),
        "31-byte key accepted"
    );
    let completed_without_time = sqlx::query("UPDATE deliveries SET status = 'completed'")
        .execute(&db.pool)
        .await;
    assert!(completed_without_time.is_err());
    // A completed key must say the day it completed on (its partition).
    let completed_without_day =
        sqlx::query("UPDATE deliveries SET status = 'completed', completed_at = now()")
            .execute(&db.pool)
            .await;
    assert!(completed_without_day.is_err());
    sqlx::query(
        "UPDATE deliveries SET status = 'completed', completed_at = now(),
                completed_on = (now() AT TIME ZONE 'UTC')::date",
    )
    .execute(&db.pool)
    .await?;
    Ok(())
}

/// `syncward runs list | head -3`: the reader closes the pipe after a line;
/// the command stops writing and exits quietly instead of panicking.
#[tokio::test]
async fn runs_list_into_a_pipe_closed_early_exits_quietly() -> anyhow::Result<()> {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt};
    let db = TestDb::new().await?;
    seed_sync(&db).await?;
    // Far more than a pipe buffers (64 KiB), so writes go on after the close.
    sqlx::query(
        "INSERT INTO runs (sync_id, workspace_id, sync_version, trigger, max_attempts, status,
                           attempt, started_at, finished_at)
         SELECT 's1', 'acme', 1, 'manual', 5, 'succeeded', 1, now(), now()
         FROM generate_series(1, 3000)",
    )
    .execute(&db.pool)
    .await?;
    let mut child = Syncward::new(&db, None)
        .command(&["runs", "list", "--limit", "3000"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut reader = tokio::io::BufReader::new(stdout);
    let mut first = String::new();
    reader.read_line(&mut first).await?;
    assert!(first.starts_with("RUN"), "{first}");
    drop(reader); // the read end closes here, as `head` does
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr).await?;
    }
    let status = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait()).await??;
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.trim().is_empty(), "nothing to report: {stderr}");
    use std::os::unix::process::ExitStatusExt;
    assert!(
        status.code() == Some(0) || status.signal() == Some(13),
        "{status:?}"
    );
    Ok(())
}

#[tokio::test]
async fn runs_list_and_show_print_a_stored_run() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    seed_sync(&db).await?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO runs (sync_id, workspace_id, sync_version, trigger, max_attempts, status, attempt,
                           started_at, finished_at, records_read, records_written, failure_code, failure_detail)
         VALUES ('s1', 'acme', 1, 'manual', 5, 'failed', 2, now(), now(), 10, 7, 'destination_auth_failed', 'HTTP 401')
         RETURNING id",
    )
    .fetch_one(&db.pool)
    .await?;
    sqlx::query(
        "INSERT INTO run_events (run_id, kind, detail) VALUES ($1, 'claimed', '{\"attempt\": 2}')",
    )
    .bind(id)
    .execute(&db.pool)
    .await?;
    let cli = Syncward::new(&db, None);
    let list = cli
        .run(&["runs", "list", "--sync", "s1", "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(list[0]["id"], id);
    assert_eq!(list[0]["failure_code"], "destination_auth_failed");
    let text = cli
        .run(&["runs", "show", &id.to_string()])
        .await?
        .ok()?
        .stdout;
    // Facts are aligned for the eye; compare with the spacing collapsed.
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for expected in [
        "attempt: 2 of 5",
        "read: 10",
        "written: 7",
        "failure: destination_auth_failed",
        "what next: Renew the API key",
        "whose job: the sync's owner",
    ] {
        assert!(flat.contains(expected), "{expected:?} in:\n{text}");
    }
    assert!(text.contains("claimed"), "{text}");
    let json = cli
        .run(&["runs", "show", &id.to_string(), "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(json["run"]["records_written"], 7);
    assert_eq!(json["failure"]["owner"], "customer");
    assert_eq!(json["events"][0]["kind"], "claimed");
    Ok(())
}

/// An upgrade: a store on the previous release's schema (every migration but
/// the newest), holding a sync, its cursor and a finished run, takes the new
/// package's `syncward migrate`; the new daemon then resumes the sync from its
/// cursor, and the old history is still there.
#[tokio::test(flavor = "multi_thread")]
async fn an_upgrade_migrates_a_store_with_data_and_the_daemon_resumes_its_syncs()
-> anyhow::Result<()> {
    use std::time::Duration;

    use crate::helpers::TestRedis;
    use crate::helpers::daemon::DaemonProcess;
    use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

    let db = TestDb::empty().await?;
    let migrator = &syncward::store::MIGRATOR;
    let versions: Vec<i64> = migrator.iter().map(|m| m.version).collect();
    let previous = versions[versions.len() - 2];
    migrator.run_to(previous, &db.pool).await?;
    // The previous release published the sync (this release's commands
    // refuse a store behind them, so it is published in this process).
    let s = Scenario::unpublished(db, TestRedis::new().await?, 30).await?;
    let options = SyncOptions::default();
    let text = s.sync_file(options.page_size, &s.brevo_destination(&options));
    let definition = syncward::config::SyncDefinition::parse("sync.toml", &text)?;
    syncward::store::syncs::publish_syncs(
        &s.db.pool,
        &[definition],
        syncward::store::audit::Actor::Cli,
    )
    .await?;
    let refused = s.cli.run(&["sync", "list"]).await?;
    assert_eq!(
        refused.code, 2,
        "a command on the older schema: {refused:?}"
    );
    // What the previous release left: ten rows delivered, its run finished.
    sqlx::query(
        "UPDATE sync_cursors SET cursor = '{\"type\": \"bigint\", \"value\": \"10\"}',
                fence_issued = 1, fence = 1 WHERE sync_id = $1",
    )
    .bind(SYNC_ID)
    .execute(&s.db.pool)
    .await?;
    let old_run: i64 = sqlx::query_scalar(
        "INSERT INTO runs (sync_id, workspace_id, sync_version, status, trigger, attempt,
                           max_attempts, started_at, finished_at, records_read, records_written)
         VALUES ($1, 'acme', 1, 'succeeded', 'schedule', 1, 5, now() - interval '1 hour',
                 now() - interval '1 hour', 10, 10)
         RETURNING id",
    )
    .bind(SYNC_ID)
    .fetch_one(&s.db.pool)
    .await?;

    let migrated = s.cli.run(&["migrate", "--json"]).await?.ok()?.json()?;
    assert_eq!(migrated["applied"], 1, "{migrated}");
    assert_eq!(migrated["schema"], versions[versions.len() - 1]);

    s.cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    let daemon = DaemonProcess::spawn(&s.cli).await?;
    daemon
        .eventually(
            Duration::from_secs(60),
            "the resumed run succeeding",
            || async { Ok(s.last_run().await?["status"] == "succeeded") },
        )
        .await?;
    let written = s.writes_per_email();
    assert_eq!(written.len(), 20, "rows 11 to 30 only: {written:?}");
    assert!(!written.contains_key("user10@example.com"), "{written:?}");
    let listed = s
        .cli
        .run(&["runs", "list", "--sync", SYNC_ID, "--json"])
        .await?
        .ok()?
        .json()?;
    assert!(
        listed
            .as_array()
            .is_some_and(|runs| runs.iter().any(|r| r["id"] == old_run)),
        "the previous release's run is kept: {listed}"
    );
    Ok(())
}

/// Migration 0016 (the ledger by day) carries every key over: completed ones
/// into the partition of their day, pending ones and open claims into the
/// pending partition, a per-key row whose batch completed as completed; and
/// batch ids go on from where they were.
#[tokio::test]
async fn the_ledger_by_day_migration_carries_every_key_into_its_day() -> anyhow::Result<()> {
    let db = TestDb::empty().await?;
    let migrator = &syncward::store::MIGRATOR;
    migrator.run_to(14, &db.pool).await?;
    sqlx::raw_sql(
        "INSERT INTO deliveries (sync_id, key, status, fence, completed_at, result)
         VALUES ('s1', sha256('done'), 'completed', 1, now() - interval '2 days', '{}'),
                ('s1', sha256('open'), 'pending', 1, NULL, NULL);
         INSERT INTO delivery_batches (sync_id, keys, packed_keys, per_key, page, fence, completed_at, result)
         VALUES ('s1', '{}', sha256('a') || sha256('b'), false, sha256('p1'), 1,
                 now() - interval '1 day', '{\"processId\": 3}'),
                ('s1', '{}', sha256('c'), false, sha256('p2'), 1, NULL, NULL),
                ('s1', ARRAY[sha256('per-key')], NULL, true, sha256('p3'), 1, now(), '{}');
         INSERT INTO deliveries (sync_id, key, status, fence, batch_id)
         VALUES ('s1', sha256('per-key'), 'pending', 1, 3);",
    )
    .execute(&db.pool)
    .await?;
    migrator.run(&db.pool).await?;
    let keys: Vec<(String, String, bool)> = sqlx::query_as(
        "SELECT tableoid::regclass::text, status,
                completed_on = coalesce((completed_at AT TIME ZONE 'UTC')::date, 'infinity')
         FROM deliveries ORDER BY key",
    )
    .fetch_all(&db.pool)
    .await?;
    let day = |back: i64| {
        format!(
            "{}_{}",
            "deliveries",
            (chrono::Utc::now() - chrono::Duration::days(back))
                .date_naive()
                .format("%Y_%m_%d")
        )
    };
    let mut expected = vec![
        (day(2), "completed".to_string(), true),
        (
            "deliveries_pending".to_string(),
            "pending".to_string(),
            true,
        ),
        (day(0), "completed".to_string(), true),
    ];
    // Ordered by key as the query is.
    let order: Vec<Vec<u8>> = sqlx::query_scalar(
        "SELECT k FROM unnest(ARRAY[sha256('done'), sha256('open'), sha256('per-key')]) AS k",
    )
    .fetch_all(&db.pool)
    .await?;
    let mut paired: Vec<_> = order.into_iter().zip(expected.drain(..)).collect();
    paired.sort_by(|a, b| a.0.cmp(&b.0));
    let expected: Vec<_> = paired.into_iter().map(|(_, e)| e).collect();
    assert_eq!(keys, expected);
    let batches: Vec<(String, i64)> = sqlx::query_as(
        "SELECT replace(tableoid::regclass::text, 'delivery_batches', 'deliveries'), id
         FROM delivery_batches ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await?;
    assert_eq!(
        batches,
        vec![
            (day(1), 1),
            ("deliveries_pending".to_string(), 2),
            (day(0), 3)
        ]
    );
    let next: i64 = sqlx::query_scalar(
        "INSERT INTO delivery_batches (sync_id, keys) VALUES ('s1', '{}') RETURNING id",
    )
    .fetch_one(&db.pool)
    .await?;
    assert_eq!(next, 4);
    Ok(())
}
