//! Checkpoint pacing: a page replayed whole (nothing sent, staked or
//! rejected) may wait up to a second for its checkpoint, so the cursor moves
//! once for many such pages. A run killed meanwhile only replays them again.
//! This is what lets a replay reach over a million keys/s (docs/benchmarks.md)
//! instead of paying a proof and a commit per page.

use std::time::{Duration, Instant};

use serde_json::Value;

/// How long the checkpoint of pages replayed whole may wait.
const REPLAY_CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Where the last clean page ended, and whether that is written yet.
pub(super) struct CheckpointPacing {
    at: Option<Value>,
    waiting: bool,
    last_write: Instant,
}

impl CheckpointPacing {
    /// Starts at the run's saved cursor.
    pub fn new(at: Option<Value>) -> Self {
        CheckpointPacing {
            at,
            waiting: false,
            last_write: Instant::now(),
        }
    }

    /// Where the last clean page ended (written or not).
    pub fn at(&self) -> &Option<Value> {
        &self.at
    }

    /// A page ended clean at `next`. Returns true when its checkpoint may
    /// wait: replayed whole, and the last write recent.
    pub fn page_clean(&mut self, next: Option<Value>, replayed_whole: bool) -> bool {
        self.at = next;
        self.waiting = replayed_whole && self.last_write.elapsed() < REPLAY_CHECKPOINT_EVERY;
        self.waiting
    }

    /// The checkpoint at `at` was written.
    pub fn written(&mut self) {
        self.waiting = false;
        self.last_write = Instant::now();
    }

    /// Whether a checkpoint is left waiting (to write before the run ends).
    pub fn waiting(&self) -> bool {
        self.waiting
    }
}
