//! `syncward trace ADDRESS`'s answer (built by `ops`), as the terminal, the
//! page `/trace` and the API show it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::layout::{run_link, sync_link};
use super::{Body, Page, Section, when};

/// The answer to "what happened to this address".
#[derive(Debug, Serialize)]
pub struct Trace {
    pub address: String,
    /// The syncs looked in (the scope's, or the one asked for).
    pub syncs: Vec<String>,
    /// The calls that carried it, newest first.
    pub calls: Vec<TracedCall>,
    pub rejections: Vec<TracedRejection>,
    /// Diff and mirror syncs' kept state of it.
    pub kept: Vec<TracedKept>,
}

/// One call that carried the address, or a mirror run taking it off.
#[derive(Debug, Serialize)]
pub struct TracedCall {
    pub sync: String,
    pub run_id: i64,
    /// When the call was staked, just before it went out.
    pub at: DateTime<Utc>,
    /// `sent`, or `taken_off` (a mirror run's removal).
    pub kind: &'static str,
    /// What was sent for it, but the address.
    pub sent: Value,
    /// Its delivery key (hex; none once the ledger no longer holds its call).
    pub delivery_key: Option<String>,
    /// `completed`, `pending` (outcome unknown: sent again by the next run)
    /// or `gone` (no longer in the ledger).
    pub key_state: &'static str,
    pub attempts: Option<i32>,
    pub completed_at: Option<DateTime<Utc>>,
    /// What the destination answered, in words.
    pub answer: String,
    /// The destination's answer as kept.
    pub result: Option<Value>,
}

#[derive(Debug, Serialize)]
pub struct TracedRejection {
    pub sync: String,
    pub run_id: i64,
    pub at: DateTime<Utc>,
    pub code: String,
    pub message: String,
    pub delivery_key: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct TracedKept {
    pub sync: String,
    pub delivered_at: DateTime<Utc>,
    pub last_seen_by_run: Option<i64>,
}

impl Trace {
    pub fn page(&self) -> Page {
        let looked_in = crate::words::counted(self.syncs.len(), "sync", "syncs");
        let calls = if self.calls.is_empty() {
            Body::Note(format!(
                "No call of {looked_in} carried {} within the ledger's retention.",
                self.address
            ))
        } else {
            Body::Table {
                headers: vec!["at", "sync", "run", "sent", "delivery key", "answer"],
                rows: self
                    .calls
                    .iter()
                    .map(|c| {
                        let short = c
                            .delivery_key
                            .as_deref()
                            .map(|k| format!("{}… ", &k[..16.min(k.len())]))
                            .unwrap_or_default();
                        let key = match c.attempts {
                            Some(n) => format!(
                                "{short}{} ({})",
                                c.key_state,
                                crate::words::counted(n, "attempt", "attempts")
                            ),
                            None => format!("{short}{}", c.key_state),
                        };
                        vec![
                            when(Some(c.at)).into(),
                            sync_link(&c.sync),
                            run_link(c.run_id),
                            c.sent.to_string().into(),
                            key.into(),
                            c.answer.clone().into(),
                        ]
                    })
                    .collect(),
            }
        };
        let mut sections = vec![Section {
            title: "Calls that carried it (newest first)".into(),
            body: calls,
        }];
        if !self.rejections.is_empty() {
            sections.push(Section {
                title: "Rejections".into(),
                body: Body::Table {
                    headers: vec!["at", "sync", "run", "code", "message"],
                    rows: self
                        .rejections
                        .iter()
                        .map(|r| {
                            vec![
                                when(Some(r.at)).into(),
                                sync_link(&r.sync),
                                run_link(r.run_id),
                                r.code.clone().into(),
                                r.message.clone().into(),
                            ]
                        })
                        .collect(),
                },
            });
        }
        if !self.kept.is_empty() {
            sections.push(Section {
                title: "Kept by diff and mirror syncs".into(),
                body: Body::Table {
                    headers: vec!["sync", "delivered", "last seen in the query by"],
                    rows: self
                        .kept
                        .iter()
                        .map(|k| {
                            vec![
                                sync_link(&k.sync),
                                when(Some(k.delivered_at)).into(),
                                match k.last_seen_by_run {
                                    Some(run) => run_link(run),
                                    None => "-".into(),
                                },
                            ]
                        })
                        .collect(),
                },
            });
        }
        Page {
            title: format!("Trace of {}", self.address),
            sections,
            refresh: None,
        }
    }
}
