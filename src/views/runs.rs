//! A run's page (`/runs/{id}`, `runs show ID`): its status, attempt, cursors
//! and counts, its failure's three sentences, its timeline, the records it
//! rejected and the Brevo imports it started.

use serde::Serialize;
use sqlx::PgPool;

use super::REJECTED_SHOWN;
use super::failure::FailureView;
use super::layout::{
    Body, Cell, Page, RunBar, Section, cursor_words, duration_words, sync_link, when,
};
use crate::config::secrets::SecretStore;
use crate::states::RunStatus;
use crate::store::imports::{self, ImportProcessRow};
use crate::store::rejected::{self, RejectedRow};
use crate::store::runs::{self, RunEventRow, RunRow};

/// `/runs/{id}` and `runs show ID`.
#[derive(Debug, Clone, Serialize)]
pub struct RunView {
    pub run: RunRow,
    pub failure: Option<FailureView>,
    pub events: Vec<RunEventRow>,
    pub rejected_records: Vec<RejectedRow>,
    /// Brevo imports the run started, and how each ended.
    pub imports: Vec<ImportProcessRow>,
    /// Contacts Brevo's completed imports counted as invalid e-mails (not
    /// imported); `None` when no import of the run has reported its counts.
    pub import_invalid_emails: Option<i64>,
}

impl RunView {
    /// The run's page; its failure's advice names the sync's secrets and
    /// their file where `secrets` says where the files are.
    pub async fn load(
        pool: &PgPool,
        id: i64,
        secrets: Option<&SecretStore>,
    ) -> sqlx::Result<Option<Self>> {
        let Some(run) = runs::get_run(pool, id).await? else {
            return Ok(None);
        };
        let context = crate::store::syncs::get_sync(pool, &run.sync_id)
            .await?
            .map(|sync| sync.failure_context(secrets))
            .unwrap_or_else(|| crate::failure::FailureContext {
                sync_id: run.sync_id.clone(),
                ..Default::default()
            });
        Ok(Some(Self {
            failure: FailureView::of_in(run.failure_code.as_deref(), &context),
            events: runs::list_run_events(pool, id).await?,
            rejected_records: rejected::list_rejections(pool, id, REJECTED_SHOWN).await?,
            imports: imports::list_import_processes(pool, id).await?,
            import_invalid_emails: None,
            run,
        })
        .map(|mut view| {
            view.import_invalid_emails = view
                .imports
                .iter()
                .filter_map(|p| p.invalid_emails)
                .map(i64::from)
                .reduce(|a, b| a + b);
            view
        }))
    }

    /// The whole page, every import listed (the HTML page, `runs show --all`).
    pub fn page(&self) -> Page {
        self.page_for(true)
    }

    /// The page; without `every_import`, Brevo's imports are summarised by
    /// status, one row each (a big run has thousands).
    pub fn page_for(&self, every_import: bool) -> Page {
        let r = &self.run;
        let cursor = |c: &Option<sqlx::types::Json<serde_json::Value>>| {
            cursor_words(c.as_ref().map(|v| &v.0))
        };
        let running = r.status == RunStatus::Running;
        let bar = RunBar::of(r, chrono::Utc::now());
        let mut sections = vec![Section {
            title: "Run".into(),
            body: Body::Facts(vec![
                ("sync", sync_link(&r.sync_id)),
                (
                    "definition",
                    Cell::linked(
                        format!("version {}", r.sync_version),
                        format!("/syncs/{}?version={}", r.sync_id, r.sync_version),
                    ),
                ),
                ("ledger epoch", r.ledger_epoch.to_string().into()),
                ("workspace", r.workspace_id.clone().into()),
                ("status", r.status.as_str().into()),
                ("trigger", r.trigger.as_str().into()),
                (
                    "attempt",
                    format!("{} of {}", r.attempt, r.max_attempts).into(),
                ),
                ("scheduled", when(Some(r.scheduled_at)).into()),
                ("started", when(r.started_at).into()),
                ("finished", when(r.finished_at).into()),
                ("last heartbeat", when(r.heartbeat_at).into()),
                (
                    if running { "elapsed" } else { "duration" },
                    duration_words(bar.seconds).into(),
                ),
                ("pages", r.pages.to_string().into()),
                ("rate", rate(r.records_read, bar.seconds).into()),
                (
                    "cursor",
                    format!(
                        "from {} to {}",
                        cursor(&r.cursor_start),
                        cursor(&r.cursor_end)
                    )
                    .into(),
                ),
            ]),
        }];
        sections.push(Section {
            title: "Records".into(),
            body: Body::Facts(vec![
                ("read", r.records_read.to_string().into()),
                ("written", r.records_written.to_string().into()),
                ("replayed", r.records_replayed.to_string().into()),
                ("rejected", r.records_rejected.to_string().into()),
                ("re-sent pending", r.records_resent.to_string().into()),
            ]),
        });
        if let Some(invalid) = self.import_invalid_emails {
            // Inside `rejected` too: Brevo counts them but does not name them.
            if let Body::Facts(facts) = &mut sections[1].body {
                facts.push((
                    "invalid e-mails (Brevo imports)",
                    invalid.to_string().into(),
                ));
            }
        }
        if let Some(failure) = &self.failure {
            sections.push(Section {
                title: "Failure".into(),
                body: Body::Facts(failure.facts(r.failure_detail.as_deref())),
            });
        } else if let Some(code) = &r.failure_code {
            // A code this build does not know (written by a newer version).
            sections.push(Section {
                title: "Failure".into(),
                body: Body::Facts(vec![
                    ("failure", code.clone().into()),
                    (
                        "detail",
                        r.failure_detail.clone().unwrap_or_default().into(),
                    ),
                ]),
            });
        }
        // Summarised, each import's outcome is left to the imports' table.
        let events: Vec<_> = self
            .events
            .iter()
            .filter(|e| every_import || e.kind != "import_outcome")
            .collect();
        let timeline = if events.is_empty() {
            Body::Note("No events recorded.".into())
        } else {
            Body::Table {
                headers: vec!["at", "event", "detail"],
                rows: events
                    .iter()
                    .map(|e| {
                        vec![
                            when(Some(e.at)).into(),
                            e.kind.clone().into(),
                            event_words(&e.kind, &e.detail.0).into(),
                        ]
                    })
                    .collect(),
            }
        };
        sections.push(Section {
            title: "Timeline".into(),
            body: timeline,
        });
        let rejected = if self.rejected_records.is_empty() {
            Body::Note("No records were rejected.".into())
        } else {
            Body::Table {
                headers: vec!["email", "source key", "code", "message"],
                rows: self
                    .rejected_records
                    .iter()
                    .map(|x| {
                        vec![
                            x.email.clone().unwrap_or_else(|| "-".into()).into(),
                            x.source_key.clone().unwrap_or_else(|| "-".into()).into(),
                            x.code.clone().into(),
                            x.message.clone().into(),
                        ]
                    })
                    .collect(),
            }
        };
        let quarantined = self
            .rejected_records
            .iter()
            .filter(|x| x.code == rejected::ATTEMPT_BUDGET_EXHAUSTED)
            .count();
        sections.push(Section {
            title: if quarantined > 0 {
                format!(
                    "Rejected records ({quarantined} quarantined; syncward sync retry-rejected {} --run {} puts them back)",
                    self.run.sync_id, self.run.id
                )
            } else {
                "Rejected records".into()
            },
            body: rejected,
        });
        if !self.imports.is_empty() && !every_import {
            sections.push(self.imports_summary());
        } else if !self.imports.is_empty() {
            let rows = self
                .imports
                .iter()
                .map(|p| {
                    let counts = p
                        .counts
                        .as_ref()
                        .map(|c| counts_words(&c.0))
                        .unwrap_or_default();
                    let status = match &p.error {
                        Some(e) => format!("{} ({e})", p.status),
                        None => p.status.to_string(),
                    };
                    vec![
                        p.process_id.to_string().into(),
                        p.records.to_string().into(),
                        status.into(),
                        p.invalid_emails
                            .map(|n| n.to_string())
                            .unwrap_or_default()
                            .into(),
                        counts.into(),
                        when(p.checked_at).into(),
                    ]
                })
                .collect();
            sections.push(Section {
                title: "Brevo imports".into(),
                body: Body::Table {
                    headers: vec![
                        "process",
                        "records",
                        "status",
                        "invalid e-mails",
                        "counts",
                        "last checked",
                    ],
                    rows,
                },
            });
        }
        Page {
            title: format!("Run {} of sync {}", r.id, r.sync_id),
            sections,
            // A run in progress is watched: its page follows it.
            refresh: running.then_some(5),
        }
    }
}

impl RunBar {
    /// A run as a bar of a chart, as of `now`.
    pub fn of(run: &RunRow, now: chrono::DateTime<chrono::Utc>) -> Self {
        let seconds = match run.started_at {
            Some(start) => {
                let end = run.finished_at.unwrap_or(now);
                (end - start).num_milliseconds().max(0) as f64 / 1000.0
            }
            None => 0.0,
        };
        RunBar {
            run: run.id,
            status: run.status,
            seconds,
            records: run.records_read,
        }
    }
}

/// Records read per second, in words.
fn rate(records: i64, seconds: f64) -> String {
    if seconds <= 0.0 {
        return "-".into();
    }
    format!("{:.0} records/s", records as f64 / seconds)
}

/// A timeline event's detail in words (the stored detail is JSON).
fn event_words(kind: &str, detail: &serde_json::Value) -> String {
    let text = |key: &str| match &detail[key] {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.clone()),
        other => Some(other.to_string()),
    };
    match kind {
        "claimed" => format!(
            "attempt {} taken by worker {}",
            text("attempt").unwrap_or_else(|| "?".into()),
            text("worker").unwrap_or_else(|| "?".into())
        ),
        "lease" => format!(
            "lease taken with fence {}",
            text("fence").unwrap_or_else(|| "?".into())
        ),
        "requeued" => {
            let mut words = format!(
                "queued again ({})",
                text("reason").unwrap_or_else(|| "no reason given".into())
            );
            if let Some(due) = detail["due_in_s"].as_f64() {
                words.push_str(&format!(", due in {}", duration_words(due)));
            }
            words
        }
        "source_notice" | "destination_notice" => text("message").unwrap_or_default(),
        // Brevo's counts of one import, in words; zeros left out.
        "import_outcome" => detail
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match (k.as_str(), v) {
                ("counts", serde_json::Value::Object(counts)) => counts
                    .iter()
                    .filter(|(_, n)| n.as_i64() != Some(0))
                    .map(|(c, n)| format!("{} {n}", c.replace('_', " ")))
                    .collect::<Vec<_>>()
                    .join(", "),
                (_, serde_json::Value::String(s)) => format!("{} {s}", k.replace('_', " ")),
                (_, other) => format!("{} {other}", k.replace('_', " ")),
            })
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(", "),
        _ => {
            // Finishes (`succeeded`, `failed`, ...) and anything newer: each
            // field as `name value`, without the JSON punctuation.
            let Some(fields) = detail.as_object() else {
                return match detail {
                    serde_json::Value::Null => String::new(),
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
            };
            fields
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| match v {
                    serde_json::Value::String(s) => format!("{} {s}", k.replace('_', " ")),
                    other => format!("{} {other}", k.replace('_', " ")),
                })
                .collect::<Vec<_>>()
                .join(", ")
        }
    }
}

impl RunView {
    /// Brevo's imports by status: how many, carrying how many records, with
    /// how many invalid e-mails, and the last check.
    fn imports_summary(&self) -> Section {
        let mut by_status: std::collections::BTreeMap<&str, (usize, i64, i64, Option<_>)> =
            std::collections::BTreeMap::new();
        for p in &self.imports {
            let row = by_status.entry(p.status.as_str()).or_default();
            row.0 += 1;
            row.1 += i64::from(p.records);
            row.2 += p.invalid_emails.map(i64::from).unwrap_or(0);
            row.3 = row.3.max(p.checked_at);
        }
        Section {
            title: format!(
                "Brevo imports ({}; runs show {} --all lists each)",
                crate::words::counted(self.imports.len(), "import", "imports"),
                self.run.id
            ),
            body: Body::Table {
                headers: vec![
                    "status",
                    "imports",
                    "records",
                    "invalid e-mails",
                    "last checked",
                ],
                rows: by_status
                    .into_iter()
                    .map(|(status, (n, records, invalid, checked))| {
                        vec![
                            status.to_string().into(),
                            n.to_string().into(),
                            records.to_string().into(),
                            invalid.to_string().into(),
                            when(checked).into(),
                        ]
                    })
                    .collect(),
            },
        }
    }
}

/// An import's counts (`{"created": 3, "updated": 5}`) as words.
fn counts_words(counts: &serde_json::Value) -> String {
    match counts.as_object() {
        Some(map) => map
            .iter()
            .map(|(k, v)| format!("{} {v}", k.replace('_', " ")))
            .collect::<Vec<_>>()
            .join(", "),
        None => counts.to_string(),
    }
}
