//! The metrics syncward exports at `/metrics`: every name with its HELP text
//! in one place, latency metrics as histograms with buckets (so they add up
//! across daemons and work with `histogram_quantile`), and every counter
//! present at zero from the start (so `increase(...[1h]) > 0` can fire on the
//! first event). Label values are bounded by the number of syncs: no run ids,
//! no e-mail addresses.

use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::states::PauseReason;
use crate::states::SyncStatus;
use crate::store::runs::RunCounts;
use crate::store::syncs::SyncHealth;

/// Buckets of every `_seconds` histogram: from a fast HTTP answer to a long run.
const SECONDS_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];

/// Per-sync record counters (labels `sync`, `workspace`), registered at zero
/// for every sync the daemon knows.
const RECORD_COUNTERS: &[(&str, &str)] = &[
    (
        "syncward_records_written_total",
        "Records the destination confirmed as written.",
    ),
    (
        "syncward_records_replayed_total",
        "Records found completed in the ledger and not sent again.",
    ),
    (
        "syncward_records_rejected_total",
        "Records refused for good (by the destination or the mapping), quarantined ones included.",
    ),
    (
        "syncward_records_resent_total",
        "Records left pending by an earlier run whose outcome was unknown, sent again.",
    ),
    (
        "syncward_records_quarantined_total",
        "Records quarantined after their writes died with the worker ledger.record_attempts times.",
    ),
];

/// Counters without labels, registered at zero.
const COUNTERS: &[(&str, &str)] = &[
    (
        "syncward_lease_losses_total",
        "Runs that stopped because they lost their sync's lease (lease_lost).",
    ),
    (
        "syncward_lease_takeovers_total",
        "Leases taken over from a holder whose liveness key was gone.",
    ),
];

/// How an import check (a follow-up of an asynchronous import) went:
/// `ended` (the import finished, as completed, failed or unknown), `running`
/// (asked again later), `failed` (no answer), `budget_spent` (not asked: this
/// hour's budget of the account is spent).
pub const IMPORT_CHECK_OUTCOMES: &[&str] = &["ended", "running", "failed", "budget_spent"];

/// Counts one import check by how it went (`IMPORT_CHECK_OUTCOMES`).
pub fn record_import_check(outcome: &'static str) {
    metrics::counter!("syncward_import_checks_total", "outcome" => outcome).increment(1);
}

/// Installs the Prometheus recorder with syncward's buckets and HELP texts,
/// and registers the counters at zero. `None` when a recorder is already
/// installed in this process (tests running two daemons in one process).
pub fn install() -> Option<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
        .ok()?
        .install_recorder()
        .ok()?;
    describe();
    for (name, _) in COUNTERS {
        metrics::counter!(*name).increment(0);
    }
    metrics::counter!("syncward_ledger_purged_keys_total").increment(0);
    metrics::counter!("syncward_ledger_partitions_dropped_total").increment(0);
    for outcome in IMPORT_CHECK_OUTCOMES {
        metrics::counter!("syncward_import_checks_total", "outcome" => *outcome).increment(0);
    }
    for table in ["runs", "alerts", "audit_log"] {
        metrics::counter!("syncward_history_purged_total", "table" => table).increment(0);
    }
    for channel in ["log", "sentry", "webhook", "email"] {
        for outcome in ["sent", "failed"] {
            metrics::counter!("syncward_alerts_total", "channel" => channel, "outcome" => outcome)
                .increment(0);
        }
    }
    for outcome in ["succeeded", "failed", "skipped"] {
        metrics::counter!("syncward_runs_finished_total", "outcome" => outcome, "failure_code" => "")
            .increment(0);
    }
    metrics::gauge!("syncward_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    process_collector().describe();
    Some(handle)
}

fn process_collector() -> &'static metrics_process::Collector {
    static COLLECTOR: std::sync::OnceLock<metrics_process::Collector> = std::sync::OnceLock::new();
    COLLECTOR.get_or_init(metrics_process::Collector::default)
}

/// Reads the process' own figures (`process_cpu_seconds_total`,
/// `process_resident_memory_bytes`, …) for the scrape about to be rendered.
pub fn collect_process() {
    process_collector().collect();
}

fn describe() {
    for (name, help) in COUNTERS.iter().chain(RECORD_COUNTERS) {
        describe_counter!(*name, Unit::Count, *help);
    }
    describe_counter!(
        "syncward_alerts_total",
        Unit::Count,
        "Alerts and recovery notices handed to each channel (log, sentry, webhook, email), by outcome (sent, failed)."
    );
    describe_counter!(
        "syncward_history_purged_total",
        Unit::Count,
        "Rows purged past retention.*, by table (runs, alerts, audit_log)."
    );
    describe_counter!(
        "syncward_attribute_values_dropped_total",
        Unit::Count,
        "Mapped values left out because they do not fit their destination attribute's type (Brevo would ignore them), by sync, workspace and attribute."
    );
    describe_counter!(
        "syncward_import_checks_total",
        Unit::Count,
        "Checks of asynchronous imports (Brevo processes), by outcome (ended, running, failed, budget_spent); Brevo allows ~100 an hour per key."
    );
    describe_counter!(
        "syncward_ledger_purged_keys_total",
        Unit::Count,
        "Completed delivery keys purged past ledger.retention."
    );
    describe_counter!(
        "syncward_ledger_partitions_dropped_total",
        Unit::Count,
        "Day partitions of completed delivery keys dropped past ledger.retention."
    );
    describe_counter!(
        "syncward_runs_finished_total",
        Unit::Count,
        "Runs that ended, by outcome (succeeded, failed, skipped) and failure code."
    );
    describe_counter!(
        "syncward_destination_requests_total",
        Unit::Count,
        "Requests to destinations, by connector kind (brevo, webhook) and HTTP status (or timeout, error)."
    );
    describe_histogram!(
        "syncward_destination_request_seconds",
        Unit::Seconds,
        "Time for one destination request, by connector kind and HTTP status."
    );
    describe_histogram!(
        "syncward_source_request_seconds",
        Unit::Seconds,
        "Time to read one source page (retries and throttle waits included), by connector kind (postgres, shopify, http) and status (ok, or the failure)."
    );
    describe_histogram!(
        "syncward_run_duration_seconds",
        Unit::Seconds,
        "Time from a run's claim to its recorded end, by outcome (succeeded, failed, skipped, stopped)."
    );
    describe_histogram!(
        "syncward_schedule_lag_seconds",
        Unit::Seconds,
        "Time from a sync's due time to the tick that enqueued its run (a caught-up tick counts its whole wait)."
    );
    describe_gauge!(
        "syncward_queue_depth",
        Unit::Count,
        "Runs waiting in the queue (refreshed each sweep)."
    );
    describe_gauge!(
        "syncward_queue_oldest_age_seconds",
        Unit::Seconds,
        "Age of the oldest due queued run (refreshed each sweep)."
    );
    describe_gauge!(
        "syncward_deadman_incidents_open",
        Unit::Count,
        "Open dead-man incidents (silent workspaces and syncs)."
    );
    describe_gauge!(
        "syncward_workers_busy",
        Unit::Count,
        "Workers of this daemon running a run now."
    );
    describe_gauge!(
        "syncward_workers",
        Unit::Count,
        "Workers of this daemon (workers.count)."
    );
    describe_gauge!(
        "syncward_sync_last_success_timestamp_seconds",
        Unit::Seconds,
        "When each sync's last run succeeded (Unix time; 0 until its first success), from the store: the dead-man's own signal."
    );
    describe_gauge!(
        "syncward_source_held_back_seconds",
        Unit::Seconds,
        "At each sync's last run start: how long the source transaction holding its new rows back had been open (0: none)."
    );
    describe_gauge!(
        "syncward_sync_state",
        Unit::Count,
        "Each sync's state from the store: 1 for the one it is in (active, paused_by_breaker, paused_by_person, paused_by_failure, archived), 0 for the others."
    );
    describe_gauge!(
        "syncward_sync_active_since_timestamp_seconds",
        Unit::Seconds,
        "When each sync was last made active (published, resumed; Unix time): a sync younger than a day is not silent yet."
    );
    describe_gauge!(
        "syncward_sync_failure_streak",
        Unit::Count,
        "Failed runs of each sync since its last success (the breaker pauses it at breaker.consecutive_failures)."
    );
    describe_counter!(
        "syncward_breaker_trips_total",
        Unit::Count,
        "Times the circuit breaker paused each sync, from the store's audit log (within retention.audit_log)."
    );
    describe_gauge!(
        "syncward_build_info",
        Unit::Count,
        "Always 1, labelled with the running version."
    );
}

/// The states of `syncward_sync_state`: 1 for the one a sync is in, 0 for
/// the others.
pub const SYNC_STATES: [&str; 5] = [
    "active",
    "paused_by_breaker",
    "paused_by_person",
    "paused_by_failure",
    "archived",
];

/// Sets every sync's gauges from the store (`syncs::sync_health`): its state,
/// last success (0 until its first; archived syncs keep none), when it was
/// last made active, its failure streak and its breaker trips. Read by every
/// daemon when scraped, so a success or a trip in any process shows.
pub fn record_sync_health(syncs: &[SyncHealth]) {
    let seconds = |at: Option<chrono::DateTime<chrono::Utc>>| {
        at.map_or(0.0, |at| at.timestamp_millis() as f64 / 1000.0)
    };
    for s in syncs {
        let labels = [
            ("sync", s.id.clone()),
            ("workspace", s.workspace_id.clone()),
        ];
        let state = match (s.status, s.paused_reason) {
            (SyncStatus::Archived, _) => "archived",
            (SyncStatus::Paused, Some(PauseReason::Breaker)) => "paused_by_breaker",
            (SyncStatus::Paused, Some(PauseReason::Manual) | None) => "paused_by_person",
            (SyncStatus::Paused, Some(PauseReason::Failure(_))) => "paused_by_failure",
            (SyncStatus::Active, _) => "active",
        };
        for candidate in SYNC_STATES {
            let mut with_state = labels.to_vec();
            with_state.push(("state", candidate.to_string()));
            metrics::gauge!("syncward_sync_state", &with_state).set(if candidate == state {
                1.0
            } else {
                0.0
            });
        }
        if s.status != SyncStatus::Archived {
            metrics::gauge!("syncward_sync_last_success_timestamp_seconds", &labels)
                .set(seconds(s.last_success_at));
            metrics::gauge!("syncward_sync_active_since_timestamp_seconds", &labels)
                .set(seconds(s.activated_at));
        }
        metrics::gauge!("syncward_sync_failure_streak", &labels).set(s.failure_streak as f64);
        metrics::counter!("syncward_breaker_trips_total", &labels)
            .absolute(u64::try_from(s.breaker_trips).unwrap_or(0));
        register_sync(&s.id, &s.workspace_id);
    }
}

/// A sync's run succeeded at `at`.
pub fn record_success(sync: &str, workspace: &str, at: chrono::DateTime<chrono::Utc>) {
    metrics::gauge!(
        "syncward_sync_last_success_timestamp_seconds",
        "sync" => sync.to_owned(),
        "workspace" => workspace.to_owned()
    )
    .set(at.timestamp_millis() as f64 / 1000.0);
}

/// Mapped values of `attribute` a run left out for not fitting its type.
pub fn record_values_dropped(sync: &str, workspace: &str, attribute: &str, count: u64) {
    metrics::counter!(
        "syncward_attribute_values_dropped_total",
        "sync" => sync.to_owned(),
        "workspace" => workspace.to_owned(),
        "attribute" => attribute.to_owned()
    )
    .increment(count);
}

/// At a run's first page: how long a source transaction that holds the
/// sync's new rows back has been open (none: 0).
pub fn record_source_hold(sync: &str, workspace: &str, held_back: Option<std::time::Duration>) {
    metrics::gauge!(
        "syncward_source_held_back_seconds",
        "sync" => sync.to_owned(),
        "workspace" => workspace.to_owned()
    )
    .set(held_back.map_or(0.0, |d| d.as_secs_f64()));
}

/// Registers a sync's record counters at zero (so an alert on their
/// increase can fire on the first record).
pub fn register_sync(sync: &str, workspace: &str) {
    for (name, _) in RECORD_COUNTERS {
        metrics::counter!(*name, "sync" => sync.to_owned(), "workspace" => workspace.to_owned())
            .increment(0);
    }
}

/// The records a clean page moved, by sync.
pub fn record_page(sync: &str, workspace: &str, before: &RunCounts, now: &RunCounts) {
    let delta = |now: i64, then: i64| u64::try_from(now - then).unwrap_or(0);
    for (name, moved) in [
        (
            "syncward_records_written_total",
            delta(now.written, before.written),
        ),
        (
            "syncward_records_replayed_total",
            delta(now.replayed, before.replayed),
        ),
        (
            "syncward_records_rejected_total",
            delta(now.rejected, before.rejected),
        ),
        (
            "syncward_records_resent_total",
            delta(now.resent, before.resent),
        ),
    ] {
        metrics::counter!(name, "sync" => sync.to_owned(), "workspace" => workspace.to_owned())
            .increment(moved);
    }
}
