//! Test harness: a fresh database per test, a unique Redis prefix per test, and
//! the real `syncward` binary as a subprocess.

pub mod cli;
pub mod daemon;
mod db;
mod redis;
pub mod scenario;
pub mod servers;

pub use cli::Syncward;
pub use db::{TestDb, start_fenced_run};
pub use redis::TestRedis;

/// reqwest, sqlx and sentry are built without a default crypto provider; every
/// test process installs ring once (an error only means it is already there).
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Lets connectors run in this process reach loopback (where every fake
/// and test database is), as `SYNCWARD__OUTBOUND__ALLOW` does for the binary.
pub fn allow_loopback() {
    let allow: Vec<String> = cli::LOOPBACK.split(',').map(str::to_string).collect();
    if let Ok(policy) = syncward::outbound::OutboundPolicy::new(&allow, None) {
        syncward::outbound::policy::install(policy);
    }
}
