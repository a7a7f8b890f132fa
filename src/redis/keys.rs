//! Every key syncward keeps in Redis, under the deployment's `redis.key_prefix`
//! (so deployments and tests sharing a server never meet). Nothing in them is
//! needed beyond a lease's lifetime: Redis may lose them all on a restart.

use uuid::Uuid;

/// A sync's lease: `{boot id}/{token}` of the run holding it.
pub fn lease(prefix: &str, sync_id: &str) -> String {
    format!("{prefix}:lease:{sync_id}")
}

/// What every liveness key starts with; the lease's takeover script appends
/// a holder's boot id to it (`scripts::ACQUIRE`).
pub fn liveness_prefix(prefix: &str) -> String {
    format!("{prefix}:daemon:")
}

/// A process's liveness key (a daemon, or a foreground run), kept alive
/// while it runs.
pub fn liveness(prefix: &str, boot_id: Uuid) -> String {
    format!("{}{}", liveness_prefix(prefix), boot_id.simple())
}

/// The dead-man marker of a silent target (`workspace:acme`, `sync:…`).
pub fn deadman_marker(prefix: &str, target: &str) -> String {
    format!("{prefix}:deadman:{target}")
}

/// When a destination account's next request may leave (`scripts::RESERVE`).
pub fn request_slots(prefix: &str, account: &str) -> String {
    format!("{prefix}:budget:{account}")
}

/// Requests of a per-hour budget spent in clock hour `hour` (hours since the
/// epoch).
pub fn hourly_count(prefix: &str, budget: &str, hour: i64) -> String {
    format!("{prefix}:{budget}:{hour}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_liveness_key_is_its_prefix_and_the_boot_id() {
        let boot = Uuid::nil();
        assert_eq!(
            liveness("sw", boot),
            format!("{}{}", liveness_prefix("sw"), boot.simple())
        );
        assert_eq!(
            liveness("sw", boot),
            "sw:daemon:00000000000000000000000000000000"
        );
    }
}
