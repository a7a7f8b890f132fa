//! The fence's SQL (guarantee 3), written once: how a fence is issued and how
//! a write checks that its fence is still the newest. Every statement that
//! issues or checks a fence is composed from these fragments with
//! `compose::composed!`, which checks it at compile time.
//!
//! Each fragment answers `@sql` with its parts (string literals, and other
//! fragments), so a statement built from it is one literal text: the same
//! every time, which sqlx's per-connection statement cache keys on. The
//! arguments are the statement's placeholders (`"$3"`) or the names of its
//! CTEs.

/// Issues the next fence of each sync in `from` (a row source with a
/// `sync_id` column): one more than the last issued, or 1 for a sync never
/// fenced. Durable and only growing, so a fence outlives any Redis lease: the
/// holder of a lease Redis forgot still holds an older fence than the next
/// holder. Append `RETURNING` as the statement needs.
#[rustfmt::skip]
macro_rules! issue_fence {
    (@sql $k:tt from: $from:tt) => { $crate::store::compose::composed!(@resume $k ["
       INSERT INTO sync_cursors (sync_id, fence_issued) SELECT sync_id, 1 FROM ", $from, "
       ON CONFLICT (sync_id) DO UPDATE SET fence_issued = ",
           next_fence!(row: "sync_cursors"),
    ]) };
}
pub(crate) use issue_fence;

/// The fence after the last one issued on `row` (a `sync_cursors` row or its
/// alias): fences only grow, one at a time.
macro_rules! next_fence {
    (@sql $k:tt row: $row:tt) => {
        $crate::store::compose::composed!(@resume $k [$row, ".fence_issued + 1",])
    };
}
pub(crate) use next_fence;

/// For an operator's write to the cursor (a reset, a rewind), as `SET` items
/// on the sync's `sync_cursors` row `row`: issues the next fence and records
/// it as the cursor's writer. No run holds that fence, so every run under an
/// older one is refused from then on and cannot write its position back.
#[rustfmt::skip]
macro_rules! take_fence {
    (@sql $k:tt row: $row:tt) => { $crate::store::compose::composed!(@resume $k [
        "fence_issued = ", next_fence!(row: $row),
        ", fence = ", next_fence!(row: $row),
    ]) };
}
pub(crate) use take_fence;

/// The fence check, as a condition on a `sync_cursors` row: the sync's row,
/// and `fence` still the newest issued. A write made under it is refused once
/// a newer fence exists (a lease taken over, a cursor reset), which is what
/// keeps a stale run from moving the cursor or staking keys.
macro_rules! fence_held {
    (@sql $k:tt sync: $sync:tt, fence: $fence:tt) => {
        $crate::store::compose::composed!(@resume $k [
            "sync_id = ", $sync, " AND fence_issued = ", $fence,
        ])
    };
}
pub(crate) use fence_held;

/// The fence check for a write to other tables (a stake): one row when the
/// fence is still the newest, none otherwise, to select the write from.
/// `FOR SHARE` holds off a new fence until the write commits, so no newer
/// fence can be issued between the check and the write.
#[rustfmt::skip]
macro_rules! fence_guard {
    (@sql $k:tt sync: $sync:tt, fence: $fence:tt) => { $crate::store::compose::composed!(@resume $k [
        "SELECT 1 FROM sync_cursors WHERE ",
        fence_held!(sync: $sync, fence: $fence),
        " FOR SHARE",
    ]) };
}
pub(crate) use fence_guard;
