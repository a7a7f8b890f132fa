//! What a call's stake writes for `syncward trace` (`store::trace`): each
//! record's address as a keyed digest, and what was sent for it but the
//! address (attributes, consent, the lists it goes on), in the order the
//! stake keeps their keys.

use serde_json::{Map, Value};

use super::page::Pending;
use super::run_env::RunContext;
use crate::destination::Consent;
use crate::store::trace::{SentColumns, TraceEntries};

/// The trace entries of one call's records, in the order the stake keeps
/// their keys.
pub(super) fn trace_entries<'a>(
    cx: &RunContext<'_>,
    records: impl Iterator<Item = &'a Pending> + Clone,
) -> TraceEntries {
    let digests: Vec<_> = records
        .clone()
        .map(|p| cx.trace.digest(&p.outbound.contact.email))
        .collect();
    let mut sent = SentColumns::new(digests.len(), lists_by_consent(cx));
    for p in records {
        let contact = &p.outbound.contact;
        sent.push(&contact.attributes, consent_state(contact.consent));
    }
    TraceEntries::new(digests.into_iter(), sent.finish())
}

/// A consent state as the trace names it (none without a rule).
fn consent_state(consent: Consent) -> Option<&'static str> {
    match consent {
        Consent::NotAsked => None,
        Consent::Subscribed => Some("subscribed"),
        Consent::Unsubscribed => Some("unsubscribed"),
        Consent::Unknown => Some("unknown"),
    }
}

/// The destination's lists for each consent state, once per call.
fn lists_by_consent(cx: &RunContext<'_>) -> Option<Value> {
    let mut by = Map::new();
    for consent in [
        Consent::NotAsked,
        Consent::Subscribed,
        Consent::Unsubscribed,
        Consent::Unknown,
    ] {
        let lists = cx.destination.lists_for(consent)?;
        let state = consent_state(consent).unwrap_or("not_asked");
        by.insert(state.to_string(), Value::from(lists));
    }
    Some(Value::Object(by))
}
