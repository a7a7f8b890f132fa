//! What the overview, sync and run pages show, loaded from the store once and
//! laid out as titled sections of facts and tables. The HTML pages, the CLI's
//! `sync show` / `runs show` and the JSON API all render these same values, so
//! the terminal and the browser cannot drift apart.

mod failure;
mod layout;
mod runs;
mod syncs;
mod trace;

pub use failure::{FailureView, whose_job};
pub use layout::{Body, Cell, Page, RunBar, Section, chart_words, cursor_words, when};
pub use runs::RunView;
pub use syncs::{OverviewView, SyncView, paused_words};
pub use trace::{Trace, TracedCall, TracedKept, TracedRejection};

/// How many rejected records a run's page lists (and a sync's page reads).
const REJECTED_SHOWN: i64 = 100;
