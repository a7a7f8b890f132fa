//! Workers: one run's batch loop (the single run code path, shared by the
//! daemon and `sync run --foreground`) and the delivery keys it derives.

mod delivery_key;
mod outcome;
mod pool;
mod preview;
mod run;

#[cfg(test)]
pub(crate) use delivery_key::arbitrary_json;
pub use delivery_key::{DeliveryKey, PageKeys};
pub use outcome::{QUARANTINE_ALERT, Recorded, Thresholds, record_outcome, run_retry};
pub use pool::{Daemon, FORCED_TRIGGER, start_workers};
pub use preview::{Preview, PreviewRecord, preview};
pub use run::{PageProgress, RunEnv, RunOutcome, RunReport, execute_run};
