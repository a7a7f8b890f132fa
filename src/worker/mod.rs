//! Workers: one run's page loop (the single run code path, shared by the
//! daemon and `sync run --foreground`) and the delivery keys it derives.
//! `run` is the guarantee path; `prepared_page`, `stakes`, `read_ahead`,
//! `send_page`, `clean_checkpoint` and `checkpoint_pacing` are what it is
//! made of, each behind a small type, over the run's context (`run_env`) and
//! its page types (`page`). They import each other one way (a layout test).

mod checkpoint_pacing;
mod clean_checkpoint;
mod delivery_key;
mod diff_page;
mod field_guard;
mod hand_off;
mod mirror;
mod only_record;
mod outcome;
mod page;
mod pool;
mod prepared_page;
mod preview;
mod read_ahead;
mod run;
mod run_env;
mod run_failure;
mod send_page;
mod slots;
mod stakes;
mod trace_entries;

pub use delivery_key::{DeliveryKey, PageKeys};
pub use outcome::{QUARANTINE_ALERT, Recorded, Thresholds, record_outcome, run_retry};
pub use pool::{catching_panic, start_workers};
pub use preview::{Preview, PreviewRecord, preview};
pub use run::{execute_run, run_span};
pub use run_env::{PageProgress, RunEnv, RunOutcome, RunReport};
pub use run_failure::{destination_failure_code, source_failure_code};
