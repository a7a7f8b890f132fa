//! `Daemon`: what every part of a running daemon shares (the store pool, the
//! leases, the settings, the alerter, the source connections, the grouped
//! queue statements), and how it is built. Workers, scheduler and sweeper
//! each take a clone; the parts below them take only the piece they need.

use std::sync::Arc;

use sqlx::PgPool;

use crate::alerts::Alerter;
use crate::config::Settings;
use crate::lease::LeaseManager;
use crate::outbound::SharedBudgets;
use crate::redis::SharedConnection;
use crate::source::SourceConnections;
use crate::store::grouped::RunStatements;

/// What every part of a daemon shares.
#[derive(Debug, Clone)]
pub struct Daemon {
    pub store: PgPool,
    /// The daemon's one way to Redis (leases take theirs from it too).
    pub redis: SharedConnection,
    pub leases: LeaseManager,
    /// Destination request budgets (shared in Redis; while Redis is away,
    /// this process's own pace): one set for all its runs and checks.
    pub budgets: SharedBudgets,
    pub settings: Arc<Settings>,
    pub alerter: Alerter,
    /// Source connections shared by this daemon's runs.
    pub sources: SourceConnections,
    /// Its workers' queue statements, grouped.
    pub statements: RunStatements,
}

impl Daemon {
    /// A daemon on `store` and `redis`, its leases under `settings`'s key
    /// prefix and lease TTL for process `boot_id`: its alerter sends to the
    /// channels of `settings.alerts`; its source connections open as runs ask
    /// for them.
    pub fn new(
        store: PgPool,
        redis: SharedConnection,
        boot_id: uuid::Uuid,
        settings: Arc<Settings>,
    ) -> Self {
        let leases = LeaseManager::new(
            redis.clone(),
            &settings.redis.key_prefix,
            boot_id,
            settings.lease.ttl,
        );
        Self {
            budgets: SharedBudgets::in_redis(redis.clone(), &settings.redis.key_prefix),
            redis,
            statements: RunStatements::for_workers(store.clone(), settings.workers.count),
            alerter: Alerter::new(store.clone(), &settings.alerts),
            sources: Default::default(),
            store,
            leases,
            settings,
        }
    }
}
