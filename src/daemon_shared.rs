//! `Daemon`: what every part of a running daemon shares (the store pool, the
//! leases, the settings, the alerter, the source connections, the grouped
//! queue statements), and how it is built. Workers, scheduler and sweeper
//! each take a clone; the parts below them take only the piece they need.

use std::sync::Arc;

use sqlx::PgPool;

use crate::alerts::Alerter;
use crate::config::Settings;
use crate::lease::LeaseManager;
use crate::source::SourceConnections;
use crate::store::grouped::RunStatements;

/// What every part of a daemon shares.
#[derive(Debug, Clone)]
pub struct Daemon {
    pub store: PgPool,
    pub leases: LeaseManager,
    pub settings: Arc<Settings>,
    pub alerter: Alerter,
    /// Source connections shared by this daemon's runs.
    pub sources: SourceConnections,
    /// Its workers' queue statements, grouped.
    pub statements: RunStatements,
}

impl Daemon {
    /// A daemon on `store` and `leases`: its alerter sends to the channels of
    /// `settings.alerts`; its source connections open as runs ask for them.
    pub fn new(store: PgPool, leases: LeaseManager, settings: Arc<Settings>) -> Self {
        Self {
            statements: RunStatements::new(store.clone()),
            alerter: Alerter::new(store.clone(), &settings.alerts),
            sources: Default::default(),
            store,
            leases,
            settings,
        }
    }
}
