//! `TestRedis`: the local Redis with a key prefix of the test's own, whose keys
//! are deleted when the test ends.

use anyhow::Context;
use syncward::config::RedisAddress;
use syncward::redis::RedisPool;

pub fn redis_url() -> String {
    std::env::var("SYNCWARD_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

#[derive(Debug)]
pub struct TestRedis {
    /// The daemon's own pool type, so a test reaches a Sentinel set's
    /// primary as the daemon does.
    pub pool: RedisPool,
    pub url: String,
    pub prefix: String,
}

impl TestRedis {
    pub async fn new() -> anyhow::Result<Self> {
        Self::at(&redis_url()).await
    }

    /// Redis at `url` (a server, or a Sentinel set as `redis.url` names one);
    /// an unreachable server is an error that says so.
    pub async fn at(url: &str) -> anyhow::Result<Self> {
        let url = url.to_string();
        let address = RedisAddress::parse(&url).map_err(anyhow::Error::msg)?;
        let pool = address.open_pool()?;
        let mut conn = pool.get().await.with_context(|| {
            format!("tests need Redis at {url} (run scripts/services); it is not reachable")
        })?;
        let pong: String = deadpool_redis::redis::cmd("PING")
            .query_async(&mut conn)
            .await?;
        anyhow::ensure!(pong == "PONG", "Redis at {url} answered {pong:?} to PING");
        let prefix = format!("syncward-test-{}", uuid::Uuid::new_v4().simple());
        Ok(Self { pool, url, prefix })
    }

    /// Every key under this test's prefix.
    pub async fn keys(&self) -> anyhow::Result<Vec<String>> {
        let mut conn = self.pool.get().await?;
        let keys: Vec<String> = deadpool_redis::redis::cmd("KEYS")
            .arg(format!("{}:*", self.prefix))
            .query_async(&mut conn)
            .await?;
        Ok(keys)
    }
}

impl Drop for TestRedis {
    fn drop(&mut self) {
        let url = self.url.clone();
        let pattern = format!("{}:*", self.prefix);
        // Cleanup on a private thread (Drop cannot await). A failure only leaves
        // keys under a unique prefix that nothing reads again. A Sentinel
        // set's URL opens no plain client: its servers are the test's own and
        // end with it.
        let handle = std::thread::spawn(move || {
            let Ok(client) = deadpool_redis::redis::Client::open(url) else {
                return;
            };
            let Ok(mut conn) = client.get_connection() else {
                return;
            };
            let keys: Vec<String> = deadpool_redis::redis::cmd("KEYS")
                .arg(&pattern)
                .query(&mut conn)
                .unwrap_or_default();
            if !keys.is_empty() {
                let _: Result<(), _> = deadpool_redis::redis::cmd("DEL").arg(keys).query(&mut conn);
            }
        });
        let _ = handle.join();
    }
}
