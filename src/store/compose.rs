//! Statements composed from SQL fragments (the fence's, the ledger's), checked
//! at compile time like every other statement.
//!
//! sqlx's `query!` reads its SQL only as string literals joined with `+`: it
//! cannot expand a fragment macro inside it (sqlx issues 388, 1569). So
//! `composed!` expands the fragments first and then calls the sqlx macro with
//! the whole text. A fragment is a macro answering `@sql $k …` by handing its
//! parts back through `composed!(@resume $k [parts,])`; its parts may name
//! other fragments. Usage:
//!
//! ```ignore
//! composed!(query_scalar [
//!     "UPDATE sync_cursors c SET ", take_fence!(row: "c"), " WHERE …",
//! ], sync_id)
//! ```
//!
//! The first word is the sqlx macro (`query`, `query_scalar`, or `query_as`
//! followed by the row type); each part ends with a comma; the arguments
//! follow the list as in the sqlx macro.

macro_rules! composed {
    // A fragment: expanded by its own macro, which resumes here.
    (@go $k:tt [$($done:tt)*] [$frag:ident ! ($($a:tt)*), $($rest:tt)*] $args:tt) => {
        $crate::store::compose::$frag!(@sql ($k [$($done)*] [$($rest)*] $args) $($a)*)
    };
    // A literal: kept as it is.
    (@go $k:tt [$($done:tt)*] [$lit:tt, $($rest:tt)*] $args:tt) => {
        $crate::store::compose::composed!(@go $k [$($done)* $lit] [$($rest)*] $args)
    };
    // A fragment's parts, put in its place.
    (@resume ($k:tt [$($done:tt)*] [$($rest:tt)*] $args:tt) [$($parts:tt)*]) => {
        $crate::store::compose::composed!(@go $k [$($done)*] [$($parts)* $($rest)*] $args)
    };
    // The whole text: to sqlx.
    (@go (query_as $row:ident) [$first:tt $($lit:tt)*] [] [$($args:tt)*]) => {
        sqlx::query_as!($row, $first $(+ $lit)* $($args)*)
    };
    (@go ($kind:ident) [$first:tt $($lit:tt)*] [] [$($args:tt)*]) => {
        sqlx::$kind!($first $(+ $lit)* $($args)*)
    };
    (query_as $row:ident [$($parts:tt)*] $($args:tt)*) => {
        $crate::store::compose::composed!(@go (query_as $row) [] [$($parts)*] [$($args)*])
    };
    ($kind:ident [$($parts:tt)*] $($args:tt)*) => {
        $crate::store::compose::composed!(@go ($kind) [] [$($parts)*] [$($args)*])
    };
}
pub(crate) use composed;

// Every fragment, where `composed!` finds it.
pub(crate) use super::cursors::move_cursor;
pub(crate) use super::fence::{fence_guard, fence_held, issue_fence, next_fence, take_fence};
pub(crate) use super::ledger::{
    complete_batch_ctes, completed_meanwhile, insert_batch, stake_batch_ctes,
};
pub(crate) use super::ledger_days::completion_day;
pub(crate) use super::trace::trace_page;
