//! Leases and fences (guarantee 3): one holder at a time, and a stale holder
//! can neither move the cursor nor stake records once a newer fence exists.
//! Driven through the statements the daemon runs: the lease start
//! (`RunStatements::begin_leased`), the page checkpoint
//! (`checkpoint::record_clean_page`) and the stakes.

use std::time::Duration;

use serde_json::{Value, json};
use syncward::lease::{Lease, LeaseManager};
use syncward::store::audit::Actor;
use syncward::store::checkpoint::{self, CleanPage};
use syncward::store::cursors;
use syncward::store::grouped::RunStatements;
use syncward::store::ledger::{self, BatchCompletion, BatchStake, BatchStakeRequest, Stake};
use syncward::store::runs::{LeaseStart, RunCounts};
use uuid::Uuid;

use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};
use crate::helpers::{TestDb, TestRedis};

/// A store with a sync `s1` and two runs of it, 1 (running, in no live
/// process) and 2 (queued), no fence issued yet; Redis; and the daemon's
/// grouped run statements.
struct Rig {
    db: TestDb,
    redis: TestRedis,
    statements: RunStatements,
}

impl Rig {
    async fn new() -> anyhow::Result<Self> {
        let db = TestDb::new().await?;
        sqlx::raw_sql(
            "INSERT INTO workspaces (id) VALUES ('acme');
             INSERT INTO syncs (id, workspace_id, definition) VALUES ('s1', 'acme', '{}');
             INSERT INTO runs (id, sync_id, workspace_id, sync_version, trigger, max_attempts, status)
               OVERRIDING SYSTEM VALUE
               VALUES (1, 's1', 'acme', 1, 'manual', 5, 'running'),
                      (2, 's1', 'acme', 1, 'manual', 5, 'queued');",
        )
        .execute(&db.pool)
        .await?;
        let statements = RunStatements::new(db.pool.clone());
        Ok(Self {
            db,
            redis: TestRedis::new().await?,
            statements,
        })
    }

    /// A daemon's lease manager, with leases that outlive the test.
    fn daemon(&self) -> LeaseManager {
        LeaseManager::new(
            syncward::redis::SharedConnection::new(self.redis.pool.clone()),
            &self.redis.prefix,
            Uuid::new_v4(),
            Duration::from_secs(600),
        )
    }

    /// Marks a daemon alive, as its liveness loop does.
    async fn alive(&self, leases: &LeaseManager) -> anyhow::Result<()> {
        let (pool, prefix) = (&self.redis.pool, &self.redis.prefix);
        syncward::lease::refresh_liveness(pool, prefix, leases.boot_id(), Duration::from_secs(60))
            .await?;
        Ok(())
    }

    /// Starts run `run_id` of `s1` as a worker does: the Redis lease, then in
    /// one statement the fence, the lease recorded on the run and the saved
    /// cursor. `None` when the lease is held.
    async fn start(
        &self,
        leases: &LeaseManager,
        run_id: i64,
    ) -> anyhow::Result<Option<(Lease, Option<Value>)>> {
        Ok(leases
            .acquire_with("s1", |lease_value| {
                self.statements.begin_leased(LeaseStart {
                    run_id,
                    sync_id: "s1".into(),
                    lease_value,
                })
            })
            .await?)
    }

    /// Forgets a lease in Redis, as a Redis restart or an expiry would.
    async fn forget(&self, leases: &LeaseManager) -> anyhow::Result<()> {
        let mut conn = self.redis.pool.get().await?;
        let _: () = deadpool_redis::redis::cmd("DEL")
            .arg(leases.key("s1"))
            .query_async(&mut conn)
            .await?;
        Ok(())
    }
}

fn at(value: i64) -> Value {
    json!({"type": "bigint", "value": value.to_string()})
}

/// A bulk stake of one key on page `n`.
fn next_stake(n: u8) -> BatchStakeRequest {
    BatchStakeRequest {
        page: [n; 32],
        packed_keys: vec![n; 32],
        attempts: 1,
        superseded: Vec::new(),
        watched: Vec::new(),
        trace: None,
    }
}

fn counts(read: i64) -> RunCounts {
    RunCounts {
        read,
        written: read,
        ..RunCounts::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_older_fence_cannot_move_the_cursor_after_a_newer_one_was_issued() -> anyhow::Result<()>
{
    let rig = Rig::new().await?;
    let (old_daemon, new_daemon) = (rig.daemon(), rig.daemon());
    rig.alive(&old_daemon).await?;

    let (first, saved) = rig.start(&old_daemon, 1).await?.expect("the lease is free");
    assert_eq!(saved, None, "a sync never run starts at the source's start");
    assert!(
        rig.start(&new_daemon, 2).await?.is_none(),
        "one holder at a time"
    );
    // While page 1's call is in flight, page 2's call is staked (fenced).
    let staked = ledger::stake_batch(&rig.db.pool, "s1", 1, first.fence, &next_stake(2)).await?;
    let BatchStake::Staked { batch: page_2, .. } = staked else {
        anyhow::bail!("page 2 was not staked: {staked:?}");
    };
    // Page 1 is clean: the cursor moves, and page 2's call is marked
    // started in the same statement, just before it leaves.
    let (moved, _) = checkpoint::record_clean_page(
        &rig.db.pool,
        &CleanPage {
            run_id: 1,
            sync_id: "s1",
            fence: first.fence,
            counts: &counts(10),
            pages: 1,
            cursor: Some(&at(10)),
            completion: None,
            mark: Some(page_2),
        },
    )
    .await?;
    assert!(moved);
    // Its call was marked started: its attempt is spent.
    let started: bool =
        sqlx::query_scalar("SELECT call_started FROM delivery_batches WHERE id = $1")
            .bind(page_2)
            .fetch_one(&rig.db.pool)
            .await?;
    assert!(started, "the stake's call was not marked started");

    // The first holder's lease is gone; a new one takes over with a newer
    // fence and the saved cursor, and moves it on.
    rig.forget(&old_daemon).await?;
    let (second, saved) = rig.start(&new_daemon, 2).await?.expect("free again");
    assert!(second.fence > first.fence);
    assert_eq!(saved, Some(at(10)));
    assert!(
        !old_daemon.prove(&first).await?,
        "the old holder can tell it lost the lease"
    );
    // It stakes page 4's call and its checkpoint moves the cursor on.
    let staked = ledger::stake_batch(&rig.db.pool, "s1", 2, second.fence, &next_stake(4)).await?;
    let BatchStake::Staked { batch: page_4, .. } = staked else {
        anyhow::bail!("page 4 was not staked: {staked:?}");
    };
    let (moved, _) = checkpoint::record_clean_page(
        &rig.db.pool,
        &CleanPage {
            run_id: 2,
            sync_id: "s1",
            fence: second.fence,
            counts: &counts(20),
            pages: 2,
            cursor: Some(&at(20)),
            completion: None,
            mark: None,
        },
    )
    .await?;
    assert!(moved);

    // The old holder finishes page 2 regardless: its checkpoint is refused
    // (the run stops: "a newer fence wrote the cursor"). The call it made is
    // still recorded; its counts are not, and it marks no call started (the
    // new holder's page 4 stands as staked, not sent).
    let completion = BatchCompletion {
        batch: page_2,
        result: json!({"processId": 7}),
        import: None,
    };
    let (moved, _) = checkpoint::record_clean_page(
        &rig.db.pool,
        &CleanPage {
            run_id: 1,
            sync_id: "s1",
            fence: first.fence,
            counts: &counts(30),
            pages: 3,
            cursor: Some(&at(30)),
            completion: Some(&completion),
            mark: Some(page_4),
        },
    )
    .await?;
    assert!(!moved, "the stale fence wrote the cursor");
    let started: bool =
        sqlx::query_scalar("SELECT call_started FROM delivery_batches WHERE id = $1")
            .bind(page_4)
            .fetch_one(&rig.db.pool)
            .await?;
    assert!(!started, "the stale fence marked a call started");
    let staked = ledger::stake_batch(&rig.db.pool, "s1", 1, first.fence, &next_stake(3)).await?;
    assert!(
        matches!(staked, BatchStake::Fenced),
        "the stale fence staked: {staked:?}"
    );
    // So is its last attempt to save its cursor on the way out.
    assert!(!cursors::checkpoint_cursor(&rig.db.pool, "s1", Some(&at(30)), first.fence, 1).await?);

    let saved = cursors::get_cursor(&rig.db.pool, "s1")
        .await?
        .expect("cursor row");
    assert_eq!(saved.cursor.map(|c| c.0), Some(at(20)));
    assert_eq!((saved.fence, saved.run_id), (second.fence, Some(2)));
    let old_run: (i64, Option<sqlx::types::Json<Value>>) =
        sqlx::query_as("SELECT records_read, cursor_end FROM runs WHERE id = 1")
            .fetch_one(&rig.db.pool)
            .await?;
    assert_eq!((old_run.0, old_run.1.map(|c| c.0)), (10, Some(at(10))));
    let batches: Vec<(i64, bool)> = sqlx::query_as(
        "SELECT id, completed_at IS NOT NULL FROM delivery_batches WHERE run_id = 1 ORDER BY id",
    )
    .fetch_all(&rig.db.pool)
    .await?;
    assert_eq!(batches, vec![(page_2, true)], "the call made is completed");

    // Renew and release act only on one's own lease.
    assert!(!old_daemon.renew(&first).await?);
    assert!(!old_daemon.release(&first).await?);
    assert!(new_daemon.renew(&second).await?);
    assert!(new_daemon.release(&second).await?);
    assert!(new_daemon.holder("s1").await?.is_none());
    Ok(())
}

/// Stakes page 1's two records both ways the run does, for run `run_id`
/// under `fence`: as a bulk call's batch, and key by key.
async fn claim_page_1(
    pool: &sqlx::PgPool,
    run_id: i64,
    fence: i64,
) -> sqlx::Result<(BatchStake, Stake)> {
    let batch = ledger::stake_batch(pool, "s1", run_id, fence, &next_stake(1)).await?;
    let keys = [vec![1; 32], vec![2; 32]];
    let per_key = ledger::stake_keys(
        pool,
        &ledger::KeyStake {
            sync_id: "s1",
            page: &[1; 32],
            fresh: &keys,
            spent: &[0, 0],
            again: &[],
            run_id,
            fence,
            trace: None,
        },
    )
    .await?;
    Ok((batch, per_key))
}

#[tokio::test(flavor = "multi_thread")]
async fn an_older_fence_cannot_claim_records_after_a_newer_one_was_issued() -> anyhow::Result<()> {
    let rig = Rig::new().await?;
    let leases = rig.daemon();
    let (first, _) = rig.start(&leases, 1).await?.expect("free");
    rig.forget(&leases).await?;
    let (second, _) = rig.start(&leases, 2).await?.expect("free");

    let stale = claim_page_1(&rig.db.pool, 1, first.fence).await?;
    assert!(
        matches!(stale, (BatchStake::Fenced, Stake::Fenced)),
        "{stale:?}"
    );
    let staked: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM delivery_batches) + (SELECT count(*) FROM deliveries)",
    )
    .fetch_one(&rig.db.pool)
    .await?;
    assert_eq!(staked, 0, "nothing was staked under the stale fence");

    // The newest fence stakes.
    let fresh = claim_page_1(&rig.db.pool, 2, second.fence).await?;
    assert!(
        matches!(fresh, (BatchStake::Staked { .. }, Stake::Staked { .. })),
        "{fresh:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn fences_only_grow_even_when_redis_forgets_everything() -> anyhow::Result<()> {
    let rig = Rig::new().await?;
    let leases = rig.daemon();
    let mut last = 0;
    for _ in 0..3 {
        let (lease, _) = rig.start(&leases, 2).await?.expect("free");
        assert!(lease.fence > last);
        last = lease.fence;
        // Simulates a Redis restart: the key is simply gone.
        rig.forget(&leases).await?;
    }
    let (lease, _) = rig.start(&leases, 2).await?.expect("free");
    let holder = leases.holder("s1").await?.expect("held");
    assert_eq!(holder.value, lease.value);
    assert_eq!(
        holder.boot_id,
        Some(leases.boot_id()),
        "the lease value names the holder's boot id"
    );
    let recorded: (Option<String>, Option<i64>) =
        sqlx::query_as("SELECT lease_token, fence FROM runs WHERE id = 2")
            .fetch_one(&rig.db.pool)
            .await?;
    assert_eq!(
        recorded,
        (Some(lease.value.clone()), Some(lease.fence)),
        "the run records the lease it holds"
    );
    assert!(leases.break_lease("s1", &holder.value).await?);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_whose_holder_is_dead_is_taken_over_at_once_with_a_newer_fence()
-> anyhow::Result<()> {
    let rig = Rig::new().await?;
    let (dead, next) = (rig.daemon(), rig.daemon());
    rig.alive(&dead).await?;
    let (held, _) = rig.start(&dead, 1).await?.expect("free");
    assert!(rig.start(&next, 2).await?.is_none(), "alive: not free");
    // The holder dies: its liveness key goes; its lease (10 min) stays.
    syncward::lease::clear_liveness(&rig.redis.pool, &rig.redis.prefix, dead.boot_id()).await?;
    let (taken, _) = rig
        .start(&next, 2)
        .await?
        .expect("a dead holder's lease is free");
    assert!(taken.fence > held.fence);
    assert!(!dead.prove(&held).await?, "the old holder can tell it lost");
    assert!(next.prove(&taken).await?);
    Ok(())
}

/// Resets the sync's cursor as an operator would, from a fake's hook (which
/// cannot await): on a thread and runtime of its own, done before it returns.
fn reset_cursor_now(url: String) {
    let reset = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let pool = sqlx::PgPool::connect(&url)
                .await
                .expect("the test database");
            cursors::reset_cursor(&pool, SYNC_ID, Actor::Cli)
                .await
                .expect("the reset");
        });
    });
    reset.join().expect("the reset thread");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_whose_cursor_is_reset_mid_run_stops_at_its_next_checkpoint_and_writes_nothing_back()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let url = s.db.url.clone();
    // The reset issues a newer fence while page 2's call is answered; the
    // run still holds its Redis lease, so only the fence check refuses it.
    s.fake.on_write(move |event| {
        if event.request == 2 {
            reset_cursor_now(url.clone());
        }
    });
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 1, "{out:?}");
    let run = s.last_run().await?;
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["failure_code"], "lease_lost", "{run}");
    assert_eq!(
        run["failure_detail"], "a newer fence wrote the cursor",
        "{run}"
    );
    assert_eq!(s.cursor().await?, None, "the reset stands");
    Ok(())
}
