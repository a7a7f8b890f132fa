//! Leases and fencing: one run owns a sync at a time. The lease lives in Redis
//! (`SET NX PX` with a random token and the holder's boot id); the fencing
//! token comes from Postgres so it only ever grows, whatever Redis forgets.

mod liveness;
mod redis_lease;
mod shared;

pub use liveness::{clear_liveness, is_alive, liveness_key, refresh_liveness};
pub use redis_lease::{Lease, LeaseError, LeaseHolder, LeaseManager, connect_redis};
pub use shared::SharedConnection;
