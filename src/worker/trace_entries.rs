//! What a call's stake writes for `syncward trace` (`store::trace`): each
//! record's address as a keyed digest, and what was sent for it but the
//! address (attributes, consent, the lists it goes on), in the order the
//! stake keeps their keys.

use serde::Serialize;
use serde_json::{Map, Value};

use super::prepared_page::Pending;
use super::run::RunContext;
use crate::destination::Consent;
use crate::store::trace::TraceEntries;

/// What was sent for one record, as `trace` shows it.
#[derive(Serialize)]
struct Sent<'a> {
    attributes: &'a Map<String, Value>,
    #[serde(skip_serializing_if = "Consent::is_not_asked")]
    consent: Consent,
    /// The destination's lists it was put on (none for a webhook).
    #[serde(skip_serializing_if = "Option::is_none")]
    lists: Option<Vec<u64>>,
}

/// The trace entries of one call's records, in the order the stake keeps
/// their keys.
pub(super) fn trace_entries<'a>(
    cx: &RunContext<'_>,
    records: impl Iterator<Item = &'a Pending> + Clone,
) -> TraceEntries {
    let sent: Vec<Sent<'_>> = records
        .clone()
        .map(|p| {
            let contact = &p.outbound.contact;
            Sent {
                attributes: &contact.attributes,
                consent: contact.consent,
                lists: cx.destination.lists_for(contact.consent),
            }
        })
        .collect();
    let sent = serde_json::to_vec(&sent).unwrap_or_else(|_| b"[]".to_vec());
    let digested: Vec<_> = records
        .map(|p| cx.trace.digest(&p.outbound.contact.email))
        .collect();
    TraceEntries::new(digested.into_iter(), sent)
}
