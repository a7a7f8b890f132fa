//! The destination account's request slots, as a run meets them: a slot
//! reserved before the run gave its worker away is used first; a slot too
//! far for a daemon run sends it back to the queue; a long wait for a near
//! one is spent without the worker (`hand_off`).

use std::time::Duration;

use tracing::debug;

use super::hand_off::HAND_OFF_FROM;
use super::read_ahead::ReadAhead;
use super::run_env::RunContext;
use crate::destination::Destination;

/// A run back from giving its worker away sends first in the slot it
/// reserved then. One already past is not used: the account's line has
/// moved on, and a request sent late beside the ones in their slots could
/// pass the account's limit.
pub(super) fn use_reserved_slot(cx: &RunContext<'_>) {
    if let Some(Ok(wait)) = cx
        .run
        .slot_at
        .map(|slot| (slot - chrono::Utc::now()).to_std())
    {
        cx.destination.hold_slot(wait);
        give_worker_back_for(cx, wait);
    }
}

/// A daemon run about to send a page takes the account's next request slot
/// if it comes soon enough
/// (and waits for it without its worker); else the wait, for the run to go
/// back in the queue. Pages with nothing to send, and foreground runs, never
/// wait here.
pub(super) async fn slot_too_far(
    cx: &RunContext<'_>,
    pages: &mut ReadAhead<'_>,
) -> Option<Duration> {
    cx.env.hold_worker_for_slot?;
    let page = pages.next_mut()?;
    if page.sorted.fresh.is_empty() && page.sorted.suspects.is_empty() {
        return None;
    }
    match cx.destination.reserve_slot(slot_within(cx)).await {
        Ok(wait) => {
            give_worker_back_for(cx, wait);
            None
        }
        Err(wait) => Some(wait),
    }
}

/// How near the account's request slot must be for a run to keep it and
/// wait (`reserve_slot`): a foreground run always waits; a daemon run up to
/// `hold_worker_for_slot`, or, with no place to wait alone, up to a wait
/// worth a hand-off (which would hold the worker itself: the run goes back
/// in the queue instead, with its slot, and the worker starts another run).
fn slot_within(cx: &RunContext<'_>) -> Duration {
    match cx.env.hold_worker_for_slot {
        None => Duration::MAX,
        Some(within) if !cx.env.hand_off.can_wait_alone() => within.min(HAND_OFF_FROM),
        Some(within) => within,
    }
}

/// A wait this long for the account's slot is not spent on a worker: the
/// run gives it back (once, while the daemon has a place) and goes on alone.
pub(super) fn give_worker_back_for(cx: &RunContext<'_>, wait: Duration) {
    if wait >= HAND_OFF_FROM && !cx.env.hand_off.given_back() && cx.env.hand_off.give_worker_back()
    {
        debug!(
            wait_s = wait.as_secs_f64(),
            "Waiting for the destination account's request slot; the worker is free meanwhile"
        );
    }
}
