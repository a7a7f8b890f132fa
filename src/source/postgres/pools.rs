//! `PostgresSourcePools`: connections to source databases, shared by every run
//! in a process. One small lazy pool per source URL (and statement timeout),
//! so a schedule of many short runs does not fork a new backend on the
//! customer's server each time.
//!
//! Every connection starts read-only, in UTC and with the statement timeout,
//! as startup parameters. Those are the session's defaults, which `RESET ALL`
//! goes back to, and any query may change them for the rest of the session
//! (`set_config('default_transaction_read_only', 'off', false)`): so each
//! statement (of several pages, see `client`) is preceded by `SESSION_RESET`,
//! two round trips, and still no BEGIN/COMMIT around it (which would make three).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use super::columns::ColumnPlan;

/// Connections one source URL may hold open at once (per process).
const MAX_PER_SOURCE: u32 = 4;
/// An idle connection is closed after this long: a quiet source holds nothing.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a run waits for a connection (or to open one).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(15);

/// Sent (one simple-query round trip) before every statement that runs an
/// operator's query: back to the startup parameters above, whatever an earlier
/// query on this connection set. `RESET ALL` leaves the role alone, hence
/// `RESET ROLE`. Not `DISCARD ALL`: it would also drop the prepared page
/// statements every page reuses.
///
/// A `SQL_ASCII` database stores any bytes, and the server refuses to send a
/// value that is not valid in the client's encoding (UTF-8), failing the
/// whole statement for one bad row. From such a database the bytes are taken
/// as they are stored instead (client encoding `SQL_ASCII`: no conversion, no
/// check), and the reader checks each value as UTF-8, rejecting only the
/// records that are not (`columns`). Other databases keep converting to UTF-8.
pub(super) const SESSION_RESET: &str = "RESET ALL; RESET ROLE; \
    SELECT set_config('client_encoding', 'SQL_ASCII', false) \
    WHERE current_setting('server_encoding') = 'SQL_ASCII'";

/// `application_name` of every source connection.
pub(super) const READER_NAME: &str = "syncward";

#[derive(Debug, Clone, Default)]
pub struct PostgresSourcePools {
    pools: Arc<Mutex<HashMap<String, PgPool>>>,
    /// How each source query's columns are read, by URL and query: planned
    /// once per process, not once per run.
    plans: Arc<Mutex<HashMap<String, Arc<ColumnPlan>>>>,
}

impl PostgresSourcePools {
    /// The pool for `url` connecting to `options`' host (the address the
    /// outbound policy checked) with this statement timeout, created
    /// (without connecting) on first use.
    pub fn pool(
        &self,
        url: &str,
        options: &PgConnectOptions,
        statement_timeout: Duration,
    ) -> PgPool {
        let timeout_ms = statement_timeout.as_millis().to_string();
        // A poisoned lock only means another thread panicked while inserting;
        // the map itself is still whole.
        let mut pools = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        pools
            .entry(format!("{url}\n{}\n{timeout_ms}", options.get_host()))
            .or_insert_with(|| {
                // Read-only for every transaction: a query that writes (by
                // mistake) fails. UTC: timestamp cursors round-trip through
                // text the same way every time.
                // Named, so another sync's commit horizon can tell these
                // read-only sessions (a diff run's long read) from writers.
                let options = options.clone().application_name(READER_NAME).options([
                    ("default_transaction_read_only", "on"),
                    ("statement_timeout", timeout_ms.as_str()),
                    ("TimeZone", "UTC"),
                ]);
                PgPoolOptions::new()
                    .max_connections(MAX_PER_SOURCE)
                    .min_connections(0)
                    .idle_timeout(Some(IDLE_TIMEOUT))
                    .acquire_timeout(ACQUIRE_TIMEOUT)
                    // No ping per page: a dead connection fails the page as
                    // `source_unreachable` (retried) and is dropped.
                    .test_before_acquire(false)
                    .connect_lazy_with(options)
            })
            .clone()
    }

    pub(super) fn plan(&self, key: &str) -> Option<Arc<ColumnPlan>> {
        let plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        plans.get(key).cloned()
    }

    pub(super) fn keep_plan(&self, key: &str, plan: Arc<ColumnPlan>) {
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        plans.insert(key.to_string(), plan);
    }

    pub(super) fn forget_plan(&self, key: &str) {
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        plans.remove(key);
    }
}
