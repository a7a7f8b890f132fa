//! Leases and fencing: one run owns a sync at a time. The lease lives in Redis
//! (`SET NX PX` with a random token and the holder's boot id); the fencing
//! token comes from Postgres so it only ever grows, whatever Redis forgets.
//! `RedisPool` is the daemon's one way to Redis: a server or a Sentinel set.

mod liveness;
mod redis_lease;
mod redis_pool;
mod shared;

pub use liveness::{
    clear_liveness, is_alive, liveness_key, reap_dead_on_this_machine, refresh_liveness,
};
pub use redis_lease::{Lease, LeaseError, LeaseHolder, LeaseManager, connect_redis};
pub use redis_pool::{RedisConnection, RedisPool, is_demoted_primary};
pub use shared::SharedConnection;
