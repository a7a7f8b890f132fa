//! The test harness itself: isolation between tests, cleanup, and loud failure
//! when a service is missing.

use crate::helpers::{TestDb, TestRedis};

#[tokio::test]
async fn each_test_gets_its_own_migrated_database_dropped_afterwards() -> anyhow::Result<()> {
    let a = TestDb::new().await?;
    let b = TestDb::new().await?;
    assert_ne!(a.name, b.name);
    sqlx::query("INSERT INTO workspaces (id) VALUES ('only-in-a')")
        .execute(&a.pool)
        .await?;
    let in_b: i64 = sqlx::query_scalar("SELECT count(*) FROM workspaces")
        .fetch_one(&b.pool)
        .await?;
    assert_eq!(in_b, 0);
    let name = a.name.clone();
    drop(a);
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(&name)
            .fetch_one(&b.pool)
            .await?;
    assert!(!exists, "{name} was not dropped");
    Ok(())
}

#[tokio::test]
async fn each_test_gets_its_own_redis_prefix_cleaned_afterwards() -> anyhow::Result<()> {
    let a = TestRedis::new().await?;
    let b = TestRedis::new().await?;
    assert_ne!(a.prefix, b.prefix);
    let mut conn = a.pool.get().await?;
    let _: () = deadpool_redis::redis::cmd("SET")
        .arg(format!("{}:lease:x", a.prefix))
        .arg("1")
        .query_async(&mut conn)
        .await?;
    assert_eq!(a.keys().await?.len(), 1);
    assert!(b.keys().await?.is_empty());
    let pattern_owner = a.prefix.clone();
    drop(conn);
    drop(a);
    let mut conn = b.pool.get().await?;
    let left: Vec<String> = deadpool_redis::redis::cmd("KEYS")
        .arg(format!("{pattern_owner}:*"))
        .query_async(&mut conn)
        .await?;
    assert!(left.is_empty(), "keys left behind: {left:?}");
    Ok(())
}

#[tokio::test]
async fn a_missing_service_fails_loudly() -> anyhow::Result<()> {
    let redis = TestRedis::at("redis://127.0.0.1:1")
        .await
        .expect_err("no Redis listens on port 1");
    assert!(redis.to_string().contains("not reachable"), "{redis:#}");
    let db = TestDb::at("postgres://syncward:syncward@127.0.0.1:1/syncward")
        .await
        .expect_err("no Postgres on port 1");
    assert!(db.to_string().contains("not reachable"), "{db:#}");
    Ok(())
}
