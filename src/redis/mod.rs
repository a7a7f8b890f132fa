//! Redis, and the daemon's one way to it: the pool (`RedisPool`, one server
//! or a Sentinel set's primary), one multiplexed connection for the hot
//! commands (`SharedConnection`), every key syncward writes (`keys`) and
//! every script it runs (`scripts`). What the keys mean lives with their
//! users: leases and liveness (`lease/`), dead-man markers (`deadman/`), rate
//! limits (`outbound/rate_limit.rs`). This part imports no other, so every
//! part, connectors included, may use it.

pub mod keys;
mod pool;
pub mod scripts;
mod shared;

pub use pool::{RedisConnection, RedisPool, is_demoted_primary};
pub use shared::SharedConnection;

/// A Redis command that failed, or no connection to send it on.
#[derive(Debug, thiserror::Error)]
pub enum RedisFailure {
    #[error("Redis: {0}")]
    Command(#[from] deadpool_redis::redis::RedisError),
    #[error("Redis pool: {0}")]
    Pool(#[from] deadpool_redis::PoolError),
}
