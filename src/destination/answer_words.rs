//! What a destination answered a call, in words (`syncward trace`). Read
//! from the stored answer's shape, not from the sync's destination today:
//! a sync may have changed destinations since the call.

use serde_json::Value;

use super::{brevo, webhook};

/// What the store knows of an asynchronous import a call started, as the
/// sweeper last read it.
#[derive(Debug, Default)]
pub struct ImportReport<'a> {
    /// `None`: never reported on; else the import's status.
    pub status: Option<&'a str>,
    /// Records the import carried.
    pub records: i64,
    /// The destination's counts for the import.
    pub counts: Option<&'a Value>,
    /// Why it failed, where it did.
    pub error: Option<&'a str>,
}

/// The completed call's answer `result`, in words.
pub fn answer_words(result: Option<&Value>, import: &ImportReport<'_>) -> String {
    let result = result.filter(|r| !r.is_null());
    brevo::answer_words(result, import)
        .or_else(|| webhook::answer_words(result))
        .unwrap_or_else(|| "accepted".into())
}
