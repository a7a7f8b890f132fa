//! `Shutdown`: how the daemon stops. One token says "stop claiming, and stop
//! every run at its next clean batch boundary"; one shared drain deadline
//! bounds that; every task is spawned through one tracker so the daemon knows
//! when all have ended. Only `main` touches OS signals; it calls `begin`.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

#[derive(Debug, Clone)]
pub struct Shutdown {
    stopping: CancellationToken,
    /// When the drain began.
    began: Arc<OnceLock<Instant>>,
    tracker: TaskTracker,
    drain_deadline: Duration,
    cut_off: Arc<AtomicUsize>,
}

impl Shutdown {
    pub fn new(drain_deadline: Duration) -> Self {
        Self {
            stopping: CancellationToken::new(),
            began: Arc::new(OnceLock::new()),
            tracker: TaskTracker::new(),
            drain_deadline,
            cut_off: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Starts the drain: nothing new is claimed, runs stop at their next clean
    /// batch boundary, and after `drain_deadline` the ones still busy are cut off.
    pub fn begin(&self) {
        // The first call sets the start; later calls change nothing.
        let _ = self.began.set(Instant::now());
        self.stopping.cancel();
    }

    pub fn is_stopping(&self) -> bool {
        self.stopping.is_cancelled()
    }

    /// Resolves when the drain has begun.
    pub async fn stopping(&self) {
        self.stopping.cancelled().await
    }

    /// The token runs watch to stop at a batch boundary.
    pub fn stop_token(&self) -> CancellationToken {
        self.stopping.clone()
    }

    /// Resolves when the drain deadline has passed.
    pub async fn drain_expired(&self) {
        self.stopping.cancelled().await;
        let began = self.began.get().copied().unwrap_or_else(Instant::now);
        // Settings bound the deadline to an hour; should a larger one ever get
        // here, the drain waits for its runs rather than panic on the sum.
        match began.checked_add(self.drain_deadline) {
            Some(deadline) => tokio::time::sleep_until(deadline).await,
            None => std::future::pending().await,
        }
    }

    /// Counts a run that was still busy at the drain deadline.
    pub fn record_cut_off(&self) {
        self.cut_off.fetch_add(1, Ordering::SeqCst);
    }

    /// How many runs the drain deadline cut off: a shutdown that cut any off
    /// was not clean.
    pub fn cut_off_runs(&self) -> usize {
        self.cut_off.load(Ordering::SeqCst)
    }

    /// Spawns a task that the daemon waits for before it exits.
    pub fn spawn<F>(&self, task: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker.spawn(task)
    }

    /// Waits until every tracked task has ended (call after `begin`).
    pub async fn wait(&self) {
        self.tracker.close();
        self.tracker.wait().await
    }
}
