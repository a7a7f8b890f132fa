//! Leases and fences (guarantee 3): one holder at a time, and a stale holder
//! cannot move the cursor once a newer fence exists.

use std::time::Duration;

use syncward::lease::LeaseManager;
use syncward::store::cursors;
use uuid::Uuid;

use crate::helpers::{TestDb, TestRedis};

async fn seed(db: &TestDb) -> anyhow::Result<()> {
    sqlx::raw_sql(
        "INSERT INTO workspaces (id) VALUES ('acme');
         INSERT INTO syncs (id, workspace_id, definition) VALUES ('s1', 'acme', '{}');
         INSERT INTO sync_cursors (sync_id) VALUES ('s1');
         INSERT INTO runs (sync_id, workspace_id, sync_version, trigger, max_attempts) VALUES ('s1', 'acme', 1, 'manual', 5);",
    )
    .execute(&db.pool)
    .await?;
    Ok(())
}

#[tokio::test]
async fn an_older_fence_cannot_move_the_cursor_after_a_newer_one_was_issued() -> anyhow::Result<()>
{
    let db = TestDb::new().await?;
    let redis = TestRedis::new().await?;
    seed(&db).await?;
    let old_daemon = LeaseManager::new(
        redis.pool.clone(),
        &redis.prefix,
        Uuid::new_v4(),
        Duration::from_secs(60),
    );
    let new_daemon = LeaseManager::new(
        redis.pool.clone(),
        &redis.prefix,
        Uuid::new_v4(),
        Duration::from_secs(60),
    );

    // The first holder is alive: its liveness key is there.
    syncward::lease::refresh_liveness(
        &redis.pool,
        &redis.prefix,
        old_daemon.boot_id(),
        Duration::from_secs(60),
    )
    .await?;
    let first = old_daemon
        .acquire(&db.pool, "s1")
        .await?
        .expect("the lease is free");
    assert!(
        new_daemon.acquire(&db.pool, "s1").await?.is_none(),
        "one holder at a time"
    );
    let page_1 = serde_json::json!({"type": "bigint", "value": "10"});
    assert!(cursors::checkpoint_cursor(&db.pool, "s1", Some(&page_1), first.fence, 1).await?);

    // The first holder's lease is gone (expired, or Redis lost it); a new one takes over.
    let mut conn = redis.pool.get().await?;
    let _: () = deadpool_redis::redis::cmd("DEL")
        .arg(old_daemon.key("s1"))
        .query_async(&mut conn)
        .await?;
    let second = new_daemon
        .acquire(&db.pool, "s1")
        .await?
        .expect("free again");
    assert!(second.fence > first.fence);
    assert!(
        !old_daemon.prove(&first).await?,
        "the old holder can tell it lost the lease"
    );

    let page_2 = serde_json::json!({"type": "bigint", "value": "20"});
    assert!(cursors::checkpoint_cursor(&db.pool, "s1", Some(&page_2), second.fence, 1).await?);
    let stale = serde_json::json!({"type": "bigint", "value": "30"});
    assert!(
        !cursors::checkpoint_cursor(&db.pool, "s1", Some(&stale), first.fence, 1).await?,
        "the stale fence wrote"
    );
    let saved = cursors::get_cursor(&db.pool, "s1")
        .await?
        .expect("cursor row");
    assert_eq!(saved.cursor.map(|c| c.0), Some(page_2));
    assert_eq!(saved.fence, second.fence);

    // Renew and release act only on one's own lease.
    assert!(!old_daemon.renew(&first).await?);
    assert!(!old_daemon.release(&first).await?);
    assert!(new_daemon.renew(&second).await?);
    assert!(new_daemon.release(&second).await?);
    assert!(new_daemon.holder("s1").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn fences_only_grow_even_when_redis_forgets_everything() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let redis = TestRedis::new().await?;
    seed(&db).await?;
    let leases = LeaseManager::new(
        redis.pool.clone(),
        &redis.prefix,
        Uuid::new_v4(),
        Duration::from_secs(60),
    );
    let mut last = 0;
    for _ in 0..3 {
        let lease = leases.acquire(&db.pool, "s1").await?.expect("free");
        assert!(lease.fence > last);
        last = lease.fence;
        // Simulates a Redis restart: the key is simply gone.
        let mut conn = redis.pool.get().await?;
        let _: () = deadpool_redis::redis::cmd("DEL")
            .arg(leases.key("s1"))
            .query_async(&mut conn)
            .await?;
    }
    let holder_value = {
        let lease = leases.acquire(&db.pool, "s1").await?.expect("free");
        lease.value
    };
    let holder = leases.holder("s1").await?.expect("held");
    assert_eq!(holder.value, holder_value);
    assert_eq!(
        holder.boot_id,
        Some(leases.boot_id()),
        "the lease value names the holder's boot id"
    );
    assert!(leases.break_lease("s1", &holder.value).await?);
    Ok(())
}

#[tokio::test]
async fn a_lease_whose_holder_is_dead_is_taken_over_at_once_with_a_newer_fence()
-> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let redis = TestRedis::new().await?;
    seed(&db).await?;
    let manager = |boot| {
        LeaseManager::new(
            redis.pool.clone(),
            &redis.prefix,
            boot,
            Duration::from_secs(600),
        )
    };
    let (dead, next) = (manager(Uuid::new_v4()), manager(Uuid::new_v4()));
    syncward::lease::refresh_liveness(
        &redis.pool,
        &redis.prefix,
        dead.boot_id(),
        Duration::from_secs(60),
    )
    .await?;
    let held = dead.acquire(&db.pool, "s1").await?.expect("free");
    assert!(
        next.acquire(&db.pool, "s1").await?.is_none(),
        "alive: not free"
    );
    // The holder dies: its liveness key goes; its lease (10 min) stays.
    syncward::lease::clear_liveness(&redis.pool, &redis.prefix, dead.boot_id()).await?;
    let taken = next
        .acquire(&db.pool, "s1")
        .await?
        .expect("a dead holder's lease is free");
    assert!(taken.fence > held.fence);
    assert!(!dead.prove(&held).await?, "the old holder can tell it lost");
    assert!(next.prove(&taken).await?);
    Ok(())
}
