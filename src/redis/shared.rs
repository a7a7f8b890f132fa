//! One multiplexed Redis connection shared by a daemon's hot commands (leases,
//! dead-man markers, request slots). Concurrent commands are pipelined on it,
//! and using it skips the pool checkout, which costs a PING round trip every
//! time.

use std::sync::{Arc, Mutex};

use deadpool_redis::redis::RedisError;
use deadpool_redis::redis::aio::MultiplexedConnection;

use super::{RedisConnection, RedisFailure, RedisPool, is_demoted_primary};

/// Takes a connection from the pool once and hands out clones of it; after an
/// I/O error it is dropped, and the next command takes a checked one from the
/// pool again.
#[derive(Clone)]
pub struct SharedConnection {
    pool: RedisPool,
    current: Arc<Mutex<Option<MultiplexedConnection>>>,
}

impl std::fmt::Debug for SharedConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedConnection").finish_non_exhaustive()
    }
}

impl SharedConnection {
    pub fn new(pool: RedisPool) -> Self {
        Self {
            pool,
            current: Arc::new(Mutex::new(None)),
        }
    }

    pub fn pool(&self) -> &RedisPool {
        &self.pool
    }

    /// Runs `command` on the shared connection. When the connection turns out
    /// to be broken (Redis restarted, say) or to reach a replica (a Sentinel
    /// failover demoted its primary: `READONLY`), it is dropped and `command`
    /// runs once more on a fresh one, as the pool's checkout would have found
    /// it broken before sending: so every command sent here must be safe to
    /// repeat (a compare-and-set, a read, or a count whose repeat errs
    /// towards less: a request slot or an hourly check taken twice).
    pub async fn run<T, F, Fut>(&self, command: F) -> Result<T, RedisFailure>
    where
        F: Fn(MultiplexedConnection) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let first = command(self.connection().await?).await;
        match first {
            Err(e)
                if e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_unrecoverable_error()
                    || is_demoted_primary(&e) =>
            {
                self.current
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                Ok(command(self.connection().await?).await?)
            }
            other => Ok(other?),
        }
    }

    async fn connection(&self) -> Result<MultiplexedConnection, RedisFailure> {
        if let Some(connection) = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        {
            return Ok(connection);
        }
        let connection = RedisConnection::take(self.pool.get().await?);
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(connection.clone());
        Ok(connection)
    }
}
