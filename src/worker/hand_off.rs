//! A daemon run waiting for its destination account's request slot gives its
//! worker back and goes on alone when the slot comes: the worker claims the
//! next run meanwhile (runs of other accounts, runs with nothing to send).
//! Such runs are bounded per daemon (`workers.count` of them at once, beside
//! the runs on workers); past that a run waits on its worker, as before.

use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// How long a wait for a slot must be before a run gives its worker back for
/// it: a shorter one costs the worker less than a claim would.
pub const HAND_OFF_FROM: std::time::Duration = std::time::Duration::from_millis(200);

/// The places for runs that gave their worker back, one set per daemon.
#[derive(Debug, Clone)]
pub struct HandOffPlaces(Arc<Semaphore>);

impl HandOffPlaces {
    pub fn new(places: usize) -> Self {
        HandOffPlaces(Arc::new(Semaphore::new(places)))
    }

    /// The hand-off of one run claimed by a worker: `released` resolves once
    /// the run gave the worker back (an error if the run ended first).
    pub fn for_run(&self) -> (WorkerHandOff, oneshot::Receiver<()>) {
        let (tell, released) = oneshot::channel();
        let state = HandOffState {
            tell: Some(tell),
            place: None,
        };
        let hand_off = WorkerHandOff(Some(Arc::new(HandOff {
            places: self.0.clone(),
            state: Mutex::new(state),
        })));
        (hand_off, released)
    }
}

/// What one run holds to give its worker back; `default()` (a foreground run,
/// a benchmark) has no worker to give.
#[derive(Debug, Clone, Default)]
pub struct WorkerHandOff(Option<Arc<HandOff>>);

#[derive(Debug)]
struct HandOff {
    places: Arc<Semaphore>,
    state: Mutex<HandOffState>,
}

#[derive(Debug)]
struct HandOffState {
    /// Tells the worker, once.
    tell: Option<oneshot::Sender<()>>,
    /// Held until the run ends (with the last clone of its environment).
    place: Option<OwnedSemaphorePermit>,
}

impl WorkerHandOff {
    /// Gives the worker back if a place is free (or it was given already);
    /// false when the run keeps its worker.
    pub fn give_worker_back(&self) -> bool {
        let Some(hand_off) = &self.0 else {
            return false;
        };
        // A plain pair of options: a panic elsewhere cannot leave it half-written.
        let mut state = hand_off.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.place.is_some() {
            return true;
        }
        let Ok(place) = hand_off.places.clone().try_acquire_owned() else {
            return false;
        };
        state.place = Some(place);
        if let Some(tell) = state.tell.take() {
            // A worker that stopped listening (shutdown) needs no word.
            let _ = tell.send(());
        }
        true
    }

    /// Whether the run could wait without its worker: given back already,
    /// or a place is free to give it back now.
    pub fn can_wait_alone(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|h| h.places.available_permits() > 0 || self.given_back())
    }

    /// Whether the run gave its worker back.
    pub fn given_back(&self) -> bool {
        self.0.as_ref().is_some_and(|h| {
            h.state
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .place
                .is_some()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run gives its worker back once; past the daemon's places it keeps
    /// it; a place comes free when its run's hand-off is dropped (the run
    /// ended), and a run that ended without giving it back tells no one.
    #[tokio::test]
    async fn runs_give_their_worker_back_within_the_daemons_places() {
        let places = HandOffPlaces::new(1);
        let (first, first_released) = places.for_run();
        let (second, mut second_released) = places.for_run();
        assert!(first.give_worker_back());
        assert!(first.give_worker_back(), "given back already");
        assert_eq!(first_released.await, Ok(()));
        assert!(first.can_wait_alone(), "given back already");
        assert!(!second.can_wait_alone(), "no place left");
        assert!(!second.give_worker_back(), "no place left");
        assert!(!second.given_back());
        assert!(second_released.try_recv().is_err());
        drop(first);
        assert!(second.can_wait_alone(), "the first run's place is free");
        assert!(second.give_worker_back(), "the first run's place is free");
        assert_eq!(second_released.await, Ok(()));
        let (third, third_released) = places.for_run();
        drop(third);
        assert!(third_released.await.is_err(), "ended on its worker");
        assert!(!WorkerHandOff::default().give_worker_back());
        assert!(!WorkerHandOff::default().can_wait_alone());
    }
}
