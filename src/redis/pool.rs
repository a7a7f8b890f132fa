//! `RedisPool`: the one pool every Redis user of the daemon takes connections
//! from (leases, liveness keys, dead-man markers, rate limits, readiness):
//! one server, or the primary of a Sentinel set, asked of the Sentinels anew
//! for every new connection, so a failover is followed at the next one.

use deadpool_redis::redis::aio::{ConnectionLike, MultiplexedConnection};
use deadpool_redis::redis::{
    Cmd, ErrorKind, IntoConnectionInfo, Pipeline, RedisError, RedisFuture, ServerErrorKind, Value,
};
use deadpool_redis::sentinel::{SentinelNodeConnectionInfo, SentinelServerType};
use deadpool_redis::{ConfigError, CreatePoolError, PoolError, Runtime};

/// Connections to one Redis server, or to a Sentinel set's primary.
#[derive(Clone)]
pub enum RedisPool {
    Server(deadpool_redis::Pool),
    Sentinel(deadpool_redis::sentinel::Pool),
}

impl std::fmt::Debug for RedisPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Server(_) => "RedisPool::Server",
            Self::Sentinel(_) => "RedisPool::Sentinel",
        })
    }
}

impl RedisPool {
    /// A pool of connections to the server at `url`; connects to nothing yet.
    pub fn server(url: &str) -> Result<Self, CreatePoolError> {
        Ok(Self::Server(
            deadpool_redis::Config::from_url(url).create_pool(Some(Runtime::Tokio1))?,
        ))
    }

    /// A pool of connections to the primary that the Sentinels (`host`,
    /// `port`) name `service_name`, logged in as `primary_login` says
    /// (`redis://[user-info@]placeholder/db`); connects to nothing yet.
    pub fn sentinel(
        sentinels: &[(String, u16)],
        service_name: &str,
        primary_login: &str,
    ) -> Result<Self, CreatePoolError> {
        Ok(Self::Sentinel(
            sentinel_config(sentinels, service_name, primary_login)
                .map_err(CreatePoolError::Config)?
                .create_pool(Some(Runtime::Tokio1))?,
        ))
    }

    /// A connection from the pool: checked with a PING when it was used
    /// before, opened (after asking the Sentinels for the primary) when new.
    pub async fn get(&self) -> Result<RedisConnection, PoolError> {
        let pooled = match self {
            Self::Server(pool) => Pooled::Server(pool.get().await?),
            Self::Sentinel(pool) => Pooled::Sentinel(pool.get().await?),
        };
        Ok(RedisConnection {
            pooled: Some(pooled),
            demoted: false,
        })
    }

    /// Whether the server answers a command now (readiness, outage probes,
    /// `doctor`).
    pub async fn ping(&self) -> Result<(), super::RedisFailure> {
        let mut conn = self.get().await?;
        let _: String = deadpool_redis::redis::cmd("PING")
            .query_async(&mut conn)
            .await?;
        Ok(())
    }
}

fn sentinel_config(
    sentinels: &[(String, u16)],
    service_name: &str,
    primary_login: &str,
) -> Result<deadpool_redis::sentinel::Config, ConfigError> {
    let urls: Vec<String> = sentinels
        .iter()
        .map(|(host, port)| match host.contains(':') {
            true => format!("redis://[{host}]:{port}"),
            false => format!("redis://{host}:{port}"),
        })
        .collect();
    // The redis crate reads the login (user, password, database) from a URL,
    // percent-decoding it as for any server.
    let login = primary_login
        .into_connection_info()?
        .redis_settings()
        .clone();
    Ok(deadpool_redis::sentinel::Config::from_urls(
        urls,
        service_name.to_string(),
        SentinelServerType::Master,
    )
    .with_node_connection_info(Some(SentinelNodeConnectionInfo {
        tls_mode: None,
        redis_connection_info: Some(login.into()),
    })))
}

enum Pooled {
    Server(deadpool_redis::Connection),
    Sentinel(deadpool_redis::sentinel::Connection),
}

/// A connection taken from a `RedisPool`, given back when dropped. One that
/// met a `READONLY` answer is dropped instead: it reaches a primary that a
/// failover made a replica, and the pool's PING check would keep it forever.
pub struct RedisConnection {
    /// `Some` until dropped.
    pooled: Option<Pooled>,
    demoted: bool,
}

impl std::fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConnection")
            .field("demoted", &self.demoted)
            .finish_non_exhaustive()
    }
}

/// A `READONLY` answer: the server is a replica now.
pub fn is_demoted_primary(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

impl RedisConnection {
    /// Takes the connection out of its pool for good (the pool opens another).
    pub fn take(mut this: Self) -> MultiplexedConnection {
        match this.pooled.take() {
            Some(Pooled::Server(c)) => deadpool_redis::Connection::take(c),
            Some(Pooled::Sentinel(c)) => deadpool_redis::sentinel::Connection::take(c),
            // `pooled` is `None` only inside `drop`, which runs after this.
            None => unreachable!("a RedisConnection is taken at most once"),
        }
    }

    fn inner(&mut self) -> &mut MultiplexedConnection {
        match self.pooled.as_mut() {
            Some(Pooled::Server(c)) => c,
            Some(Pooled::Sentinel(c)) => c,
            // `pooled` is `None` only inside `drop` and after `take`, both of
            // which consume the connection.
            None => unreachable!("a RedisConnection is used after it was given back"),
        }
    }

    fn note<T>(&mut self, result: &Result<T, RedisError>) {
        if let Err(e) = result
            && is_demoted_primary(e)
        {
            self.demoted = true;
        }
    }
}

impl Drop for RedisConnection {
    fn drop(&mut self) {
        if self.demoted
            && let Some(pooled) = self.pooled.take()
        {
            // Taken out of the pool, then dropped: the connection closes.
            match pooled {
                Pooled::Server(c) => drop(deadpool_redis::Connection::take(c)),
                Pooled::Sentinel(c) => drop(deadpool_redis::sentinel::Connection::take(c)),
            }
        }
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let result = self.inner().req_packed_command(cmd).await;
            self.note(&result);
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let result = self.inner().req_packed_commands(cmd, offset, count).await;
            self.note(&result);
            result
        })
    }

    fn get_db(&self) -> i64 {
        match self.pooled.as_ref() {
            Some(Pooled::Server(c)) => c.get_db(),
            Some(Pooled::Sentinel(c)) => c.get_db(),
            None => 0,
        }
    }
}
