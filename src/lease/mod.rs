//! Leases and fencing: one run owns a sync at a time. The lease lives in Redis
//! (`SET NX PX` with a random token and the holder's boot id); the fencing
//! token comes from Postgres so it only ever grows, whatever Redis forgets.
//! Liveness keys live here too: they are how a lease's holder is judged dead.
//! Redis itself (pool, key formats, scripts) is `crate::redis`'s.

mod liveness;
mod redis_lease;

pub use liveness::{clear_liveness, is_alive, reap_dead_on_this_machine, refresh_liveness};
pub use redis_lease::{Lease, LeaseError, LeaseHolder, LeaseManager};
