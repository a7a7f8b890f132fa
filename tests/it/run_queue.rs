//! The run queue's grouped statements: one claim, lease start or finish
//! statement serves several workers, and each still gets exactly its own run,
//! fence and outcome.

use std::collections::BTreeSet;

use syncward::states::RunStatus;
use syncward::store::grouped::RunStatements;
use syncward::store::runs::{self, Executor, Finish, RunCounts};
use uuid::Uuid;

use crate::helpers::TestDb;

async fn seed_syncs(db: &TestDb, ids: &[&str]) -> anyhow::Result<()> {
    sqlx::query("INSERT INTO workspaces (id) VALUES ('acme')")
        .execute(&db.pool)
        .await?;
    for id in ids {
        sqlx::query("INSERT INTO syncs (id, workspace_id, definition) VALUES ($1, 'acme', '{}')")
            .bind(id)
            .execute(&db.pool)
            .await?;
    }
    Ok(())
}

fn executor(name: &str) -> Executor {
    Executor {
        worker_id: name.into(),
        boot_id: Uuid::new_v4(),
    }
}

#[tokio::test]
async fn one_claim_statement_gives_each_worker_a_different_run_oldest_first() -> anyhow::Result<()>
{
    let db = TestDb::new().await?;
    seed_syncs(&db, &["s1", "s2", "s3"]).await?;
    let (older, _) =
        runs::enqueue_run(&db.pool, "s1", syncward::states::RunTrigger::Manual, 5).await?;
    let (newer, _) =
        runs::enqueue_run(&db.pool, "s2", syncward::states::RunTrigger::Manual, 5).await?;
    // Not due yet: never claimed, even with an executor left over.
    sqlx::query(
        "INSERT INTO runs (sync_id, workspace_id, sync_version, trigger, max_attempts, scheduled_at)
         VALUES ('s3', 'acme', 1, 'retry', 5, now() + interval '1 hour')",
    )
    .execute(&db.pool)
    .await?;

    let workers = [executor("w0"), executor("w1"), executor("w2")];
    let claimed = runs::claim_runs(&db.pool, &workers).await?;

    assert_eq!(claimed.len(), 3, "one answer per executor");
    let first = claimed[0].as_ref().expect("the first worker gets a run");
    let second = claimed[1].as_ref().expect("the second worker gets a run");
    assert!(claimed[2].is_none(), "only two runs were due");
    assert_eq!(first.run.id, older, "the oldest due run goes first");
    assert_eq!(second.run.id, newer);
    for (claim, worker) in [(first, &workers[0]), (second, &workers[1])] {
        assert_eq!(claim.run.status, RunStatus::Running);
        assert_eq!(claim.run.attempt, 1, "the claim spends an attempt");
        assert_eq!(
            claim.run.worker_id.as_deref(),
            Some(worker.worker_id.as_str())
        );
        assert_eq!(claim.run.boot_id, Some(worker.boot_id));
        assert!(
            claim.sync_definition.is_some(),
            "the definition comes along"
        );
    }
    let events: Vec<(i64, String)> = sqlx::query_as(
        "SELECT run_id, detail->>'worker' FROM run_events WHERE kind = 'claimed' ORDER BY run_id",
    )
    .fetch_all(&db.pool)
    .await?;
    assert_eq!(
        events,
        vec![(older, "w0".to_string()), (newer, "w1".to_string())]
    );
    // Nothing is left to claim; the future run stays queued.
    assert_eq!(
        runs::claim_next_run(&db.pool, &workers[2])
            .await?
            .map(|c| c.run.id),
        None
    );
    Ok(())
}

#[tokio::test]
async fn a_grouped_finish_ends_only_current_claims_and_closes_a_shared_incident_once()
-> anyhow::Result<()> {
    let db = TestDb::new().await?;
    seed_syncs(&db, &["s1", "s2", "s3"]).await?;
    let worker = executor("w0");
    let mut claimed = Vec::new();
    for sync in ["s1", "s2", "s3"] {
        claimed.push(
            runs::create_claimed_run(
                &db.pool,
                sync,
                syncward::states::RunTrigger::Manual,
                5,
                &worker,
            )
            .await?,
        );
    }
    sqlx::query(
        "INSERT INTO deadman_incidents (scope, workspace_id, sync_id, silence)
         VALUES ('workspace', 'acme', NULL, 'no_runs'), ('sync', 'acme', 's2', 'no_runs')",
    )
    .execute(&db.pool)
    .await?;
    let finish = |run: &runs::RunRow, status: RunStatus, failure: Option<(&str, &str)>| Finish {
        run_id: run.id,
        started_at: run.started_at,
        status,
        counts: RunCounts {
            read: 3,
            written: 2,
            ..RunCounts::default()
        },
        failure: failure.map(|(c, d)| (c.into(), d.into())),
        event: serde_json::json!({"by": "test"}),
    };
    let stale = Finish {
        started_at: Some(chrono::Utc::now() - chrono::Duration::hours(2)),
        ..finish(&claimed[2], RunStatus::Succeeded, None)
    };
    let answers = runs::finish_runs(
        &db.pool,
        &[
            finish(&claimed[0], RunStatus::Succeeded, None),
            finish(&claimed[1], RunStatus::Succeeded, None),
            stale,
        ],
    )
    .await?;

    assert_eq!(answers.len(), 3);
    assert!(
        answers[2].is_none(),
        "a finish from an old view of the claim changes nothing"
    );
    let closed: Vec<(i64, String, Option<String>)> = answers[..2]
        .iter()
        .enumerate()
        .flat_map(|(i, a)| {
            a.as_ref()
                .expect("a current claim is ended")
                .iter()
                .map(move |inc| (i as i64, inc.scope.clone(), inc.sync_id.clone()))
        })
        .collect();
    let scopes: BTreeSet<(String, Option<String>)> = closed
        .iter()
        .map(|(_, s, id)| (s.clone(), id.clone()))
        .collect();
    assert_eq!(closed.len(), 2, "each incident reported once: {closed:?}");
    assert_eq!(
        scopes,
        BTreeSet::from([
            ("sync".to_string(), Some("s2".to_string())),
            ("workspace".to_string(), None)
        ])
    );
    assert!(
        closed.contains(&(1, "sync".into(), Some("s2".into()))),
        "the sync's own incident goes with its run: {closed:?}"
    );
    let ended: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT sync_id, status, records_written FROM runs ORDER BY sync_id")
            .fetch_all(&db.pool)
            .await?;
    assert_eq!(
        ended,
        vec![
            ("s1".into(), "succeeded".into(), 2),
            ("s2".into(), "succeeded".into(), 2),
            ("s3".into(), "running".into(), 0)
        ]
    );
    let open: i64 =
        sqlx::query_scalar("SELECT count(*) FROM deadman_incidents WHERE closed_at IS NULL")
            .fetch_one(&db.pool)
            .await?;
    assert_eq!(open, 0);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn lease_starts_that_cannot_share_a_statement_are_sent_one_at_a_time() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    seed_syncs(&db, &["s1"]).await?;
    let start = |run_id: i64| syncward::store::runs::LeaseStart {
        run_id,
        sync_id: "s1".into(),
        lease_value: format!("boot/{run_id}"),
    };
    // Two fences for one sync in one statement is an error...
    let together = runs::begin_leased_runs(&db.pool, &[start(1), start(2)]).await;
    assert!(together.is_err(), "{together:?}");

    // ...so a group holding them fails, and each is sent again alone: every
    // caller still gets its own fence.
    let statements = RunStatements::new(db.pool.clone());
    let calls = (1..=20).map(|id| statements.begin_leased(start(id)));
    let fences: BTreeSet<i64> = futures::future::try_join_all(calls)
        .await?
        .into_iter()
        .map(|started| started.map(|(fence, _)| fence))
        .collect::<Option<_>>()
        .ok_or_else(|| anyhow::anyhow!("a start was judged busy with no live process"))?;
    assert_eq!(fences, (1..=20).collect::<BTreeSet<i64>>());
    Ok(())
}

/// Fairness: a workspace with a backlog of 30 due runs does not hold back
/// another workspace's run that became due later. With one worker finishing
/// each run before the next claim, the other workspace's run is the very
/// next one claimed after it becomes due; with three workers, it is in the
/// first claim. The backlog then goes on, oldest first.
#[tokio::test]
async fn a_workspaces_backlog_delays_another_workspaces_due_run_by_at_most_one_run_per_worker()
-> anyhow::Result<()> {
    let db = TestDb::new().await?;
    for (workspace, syncs) in [("busy", 30), ("calm", 1)] {
        sqlx::query("INSERT INTO workspaces (id) VALUES ($1)")
            .bind(workspace)
            .execute(&db.pool)
            .await?;
        for i in 0..syncs {
            sqlx::query("INSERT INTO syncs (id, workspace_id, definition) VALUES ($1, $2, '{}')")
                .bind(format!("{workspace}-{i}"))
                .bind(workspace)
                .execute(&db.pool)
                .await?;
        }
    }
    let mut backlog = Vec::new();
    for i in 0..30 {
        backlog.push(
            runs::enqueue_run(
                &db.pool,
                &format!("busy-{i}"),
                syncward::states::RunTrigger::Schedule,
                5,
            )
            .await?
            .0,
        );
    }
    let finish = |run: &runs::RunRow| Finish {
        run_id: run.id,
        started_at: run.started_at,
        status: RunStatus::Succeeded,
        counts: RunCounts::default(),
        failure: None,
        event: serde_json::json!({}),
    };
    // One worker serves the backlog for a while.
    let worker = [executor("w0")];
    for expected in &backlog[..3] {
        let claimed = runs::claim_runs(&db.pool, &worker).await?;
        let run = &claimed[0].as_ref().expect("a due run").run;
        assert_eq!(run.id, *expected, "oldest first within a workspace");
        runs::finish_runs(&db.pool, &[finish(run)]).await?;
    }
    // The calm workspace's run becomes due, newer than the whole backlog:
    // it is the next one claimed.
    let (calm, _) = runs::enqueue_run(
        &db.pool,
        "calm-0",
        syncward::states::RunTrigger::Schedule,
        5,
    )
    .await?;
    let claimed = runs::claim_runs(&db.pool, &worker).await?;
    let run = &claimed[0].as_ref().expect("a due run").run;
    assert_eq!(run.id, calm, "served before the rest of the backlog");
    runs::finish_runs(&db.pool, &[finish(run)]).await?;
    let claimed = runs::claim_runs(&db.pool, &worker).await?;
    assert_eq!(claimed[0].as_ref().map(|c| c.run.id), Some(backlog[3]));

    // Three workers: the calm workspace's next run is in the first claim.
    let claimed_run = claimed[0].as_ref().map(|c| c.run.clone()).expect("claimed");
    runs::finish_runs(&db.pool, &[finish(&claimed_run)]).await?;
    let (calm, _) = runs::enqueue_run(
        &db.pool,
        "calm-0",
        syncward::states::RunTrigger::Schedule,
        5,
    )
    .await?;
    let workers = [executor("w0"), executor("w1"), executor("w2")];
    let claimed = runs::claim_runs(&db.pool, &workers).await?;
    let ids: Vec<i64> = claimed.iter().flatten().map(|c| c.run.id).collect();
    assert_eq!(ids.len(), 3);
    assert!(ids.contains(&calm), "{ids:?}");
    Ok(())
}

/// Index tuples read so far from each of `indexes` (`pg_stat_user_indexes`).
async fn index_reads(db: &TestDb, indexes: &[&str]) -> anyhow::Result<Vec<i64>> {
    let mut conn = db.pool.acquire().await?;
    sqlx::query("SELECT pg_stat_clear_snapshot()")
        .execute(&mut *conn)
        .await?;
    let mut reads = Vec::new();
    for index in indexes {
        let read: i64 = sqlx::query_scalar(
            "SELECT idx_tup_read FROM pg_stat_user_indexes WHERE indexrelname = $1",
        )
        .bind(index)
        .fetch_one(&mut *conn)
        .await?;
        reads.push(read);
    }
    Ok(reads)
}

/// 50 workspaces of 100 syncs each, every sync with one due queued run,
/// analysed.
async fn seed_fifty_due_workspaces(db: &TestDb) -> anyhow::Result<()> {
    for statement in [
        "INSERT INTO workspaces (id) SELECT 'ws' || g FROM generate_series(1, 50) g",
        "INSERT INTO syncs (id, workspace_id, definition)
         SELECT 's' || g, 'ws' || (g % 50 + 1), '{}' FROM generate_series(1, 5000) g",
        "INSERT INTO runs (sync_id, workspace_id, sync_version, trigger, max_attempts, scheduled_at)
         SELECT id, workspace_id, 1, 'schedule', 3, now() - interval '1 second' FROM syncs",
        "ANALYZE runs",
    ] {
        sqlx::query(statement).execute(&db.pool).await?;
    }
    Ok(())
}

/// Claims for `workers` on a connection of its own and flushes its
/// statistics: the claims, and the index tuples the claim read from each of
/// `indexes`.
async fn claim_counting_reads(
    db: &TestDb,
    workers: &[Executor],
    indexes: &[&str],
) -> anyhow::Result<(Vec<Option<runs::ClaimedRun>>, Vec<i64>)> {
    let before = index_reads(db, indexes).await?;
    let one = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(&db.url)
        .await?;
    let claimed = runs::claim_runs(&one, workers).await?;
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&one)
        .await?;
    one.close().await;
    let after = index_reads(db, indexes).await?;
    let read = after.iter().zip(&before).map(|(a, b)| a - b).collect();
    Ok((claimed, read))
}

/// A claim judges which workspace was served longest ago by each
/// workspace's own index, whatever the statistics say. Planned while the
/// store had no finished run (a fresh store's first burst of runs, before
/// autovacuum's next analyse), the by-sync indexes, which hold the same
/// rows, looked as cheap: every claim then read every finished and running
/// run once per workspace (41 ms a claim with 5,000 finished runs and 50
/// workspaces, instead of 2).
#[tokio::test]
async fn a_claim_reads_no_run_by_sync_even_on_statistics_from_before_any_run_finished()
-> anyhow::Result<()> {
    let db = TestDb::new().await?;
    seed_fifty_due_workspaces(&db).await?;
    for statement in [
        // Then, with no analyse since, half of them finish and a few run.
        "UPDATE runs SET status = 'succeeded', attempt = 1, started_at = now() - interval '2 s',
                finished_at = now() - interval '1 s'
         WHERE id IN (SELECT id FROM runs ORDER BY id LIMIT 2500)",
        "UPDATE runs SET status = 'running', attempt = 1, started_at = now()
         WHERE id IN (SELECT id FROM runs WHERE status = 'queued' ORDER BY id LIMIT 20)",
    ] {
        sqlx::query(statement).execute(&db.pool).await?;
    }
    let indexes = [
        "runs_claimable_by_workspace",
        "runs_finished_by_sync",
        "runs_running_by_sync",
    ];
    let (claimed, read) =
        claim_counting_reads(&db, &[executor("w0"), executor("w1")], &indexes).await?;
    assert!(
        claimed.iter().all(Option::is_some),
        "both workers get a run"
    );
    assert!(read[0] > 0, "the claim's statistics are flushed");
    assert_eq!(
        read[1..],
        [0, 0],
        "the claim read runs through a by-sync index (finished, running)"
    );
    Ok(())
}

/// A claim finds each workspace's due runs through that workspace's own
/// queue index, whatever the statistics say of the queue. Analysed while
/// nothing was queued (most of the time, for a store whose bursts come and
/// go between autovacuum's analyses), every index of queued runs looked
/// empty and so alike; the planner took the smallest, by sync, and each
/// claim read the whole queue once per workspace it probed (250 ms a claim
/// at 10,000 queued runs and 50 workspaces, instead of 2-20).
#[tokio::test]
async fn a_claim_reads_only_its_workspaces_queues_even_on_statistics_of_an_empty_queue()
-> anyhow::Result<()> {
    let db = TestDb::new().await?;
    seed_fifty_due_workspaces(&db).await?;
    for statement in [
        // An earlier burst, all finished, is what autovacuum sees ...
        "UPDATE runs SET status = 'succeeded', attempt = 1, started_at = now() - interval '2 s',
                finished_at = now() - interval '1 s'",
        "VACUUM ANALYZE runs",
        // ... and then the next burst is queued.
        "INSERT INTO runs (sync_id, workspace_id, sync_version, trigger, max_attempts, scheduled_at)
         SELECT id, workspace_id, 1, 'schedule', 3, now() - interval '1 second' FROM syncs",
    ] {
        sqlx::query(statement).execute(&db.pool).await?;
    }
    let others: Vec<String> = sqlx::query_scalar(
        "SELECT indexrelname::text FROM pg_stat_user_indexes
         WHERE relname = 'runs' AND indexrelname NOT IN ('runs_claimable_by_workspace', 'runs_pkey')
         ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await?;
    let mut indexes = vec!["runs_claimable_by_workspace"];
    indexes.extend(others.iter().map(String::as_str));
    let workers: Vec<Executor> = (0..16).map(|w| executor(&format!("w{w}"))).collect();
    let (claimed, read) = claim_counting_reads(&db, &workers, &indexes).await?;
    assert!(
        claimed.iter().all(Option::is_some),
        "every worker gets a run"
    );
    let through_others: Vec<(&str, i64)> = indexes[1..]
        .iter()
        .copied()
        .zip(read[1..].iter().copied())
        .filter(|(_, read)| *read > 0)
        .collect();
    assert!(
        through_others.is_empty(),
        "the claim read runs through other indexes: {through_others:?}"
    );
    assert!(
        (1..=500).contains(&read[0]),
        "the claim read {} entries of the workspaces' queues (5,000 queued)",
        read[0]
    );
    Ok(())
}

/// A claim walks the workspaces in their turn and stops once it has
/// enough with a due run: with 50 workspaces all due, a claim for one
/// worker probes the queues of the first ten (its margin), not all 50, and
/// reads no workspace's running or finished runs to order them (the turn
/// is each workspace's `served_at`, which the claim stamps).
#[tokio::test]
async fn a_claim_probes_the_queues_of_the_workspaces_whose_turn_it_is_only() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    seed_fifty_due_workspaces(&db).await?;
    let indexes = [
        "runs_claimable_by_workspace",
        "runs_finished_by_workspace",
        "runs_running",
    ];
    let (claimed, read) = claim_counting_reads(&db, &[executor("w0")], &indexes).await?;
    let run = claimed[0].as_ref().expect("a due run").run.clone();
    let queue_reads = read[0];
    assert!(
        (1..=2 * 10 + 5).contains(&queue_reads),
        "the claim read {queue_reads} queue entries: it probed more than ten workspaces"
    );
    assert_eq!(read[1..], [0, 0], "running or finished runs were read");

    // The claim stamped its workspace's turn: the next claim serves another.
    let served: Vec<String> =
        sqlx::query_scalar("SELECT id FROM workspaces WHERE served_at IS NOT NULL ORDER BY id")
            .fetch_all(&db.pool)
            .await?;
    assert_eq!(served, vec![run.workspace_id.clone()]);
    let next = runs::claim_runs(&db.pool, &[executor("w1")]).await?;
    let next = &next[0].as_ref().expect("a due run").run;
    assert_ne!(
        next.workspace_id, run.workspace_id,
        "the same workspace twice in a row"
    );
    Ok(())
}
