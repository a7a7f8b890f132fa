//! What the overview, sync and run pages show, loaded from the store once and
//! laid out as titled sections of facts and tables. The HTML pages, the CLI's
//! `sync show` / `runs show` and the JSON API all render these same values, so
//! the terminal and the browser cannot drift apart.

use serde::Serialize;
use sqlx::PgPool;

use crate::failure::{FailureCode, Owner};
use crate::store::cursors::{self, CursorRow};
use crate::store::deadman::{self, IncidentRow};
use crate::store::imports::{self, ImportProcessRow};
use crate::store::rejected::{self, OpenRejections, RejectedRow};
use crate::store::runs::{self, RunEventRow, RunRow};
use crate::store::syncs::{self, PAUSED_BY_BREAKER, PAUSED_MANUAL, SyncRow, SyncSummary};

/// How many recent runs the sync page lists.
const RECENT_RUNS: i64 = 10;
/// How many rejected records the run page lists.
const REJECTED_SHOWN: i64 = 100;
/// Latest undelivered records listed on a sync's page.
const REJECTED_ON_SYNC_PAGE: usize = 20;

/// One page: a title and its sections, in reading order.
#[derive(Debug, Clone)]
pub struct Page {
    pub title: String,
    pub sections: Vec<Section>,
}

#[derive(Debug, Clone)]
pub struct Section {
    pub title: String,
    pub body: Body,
}

#[derive(Debug, Clone)]
pub enum Body {
    /// Label and value pairs.
    Facts(Vec<(&'static str, Cell)>),
    Table {
        headers: Vec<&'static str>,
        rows: Vec<Vec<Cell>>,
    },
    /// Preformatted text (the definition).
    Text(String),
    /// A sentence standing for an empty list.
    Note(String),
}

/// A value, with the page it links to where there is one.
#[derive(Debug, Clone)]
pub struct Cell {
    pub text: String,
    pub link: Option<String>,
}

impl Cell {
    fn linked(text: impl Into<String>, link: String) -> Self {
        Self {
            text: text.into(),
            link: Some(link),
        }
    }
}

impl<T: Into<String>> From<T> for Cell {
    fn from(text: T) -> Self {
        Self {
            text: text.into(),
            link: None,
        }
    }
}

impl Page {
    /// The page as terminal text: the title, then each section indented.
    pub fn to_text(&self) -> String {
        let mut out = format!("{}\n", self.title);
        for section in &self.sections {
            out.push_str(&format!("\n{}\n", section.title));
            match &section.body {
                Body::Facts(facts) => {
                    let width = facts.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
                    for (label, value) in facts {
                        out.push_str(&format!(
                            "  {:<width$}  {}\n",
                            format!("{label}:"),
                            value.text,
                            width = width + 1
                        ));
                    }
                }
                Body::Table { headers, rows } => {
                    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
                    for row in rows {
                        for (i, cell) in row.iter().enumerate() {
                            widths[i] = widths[i].max(cell.text.chars().count());
                        }
                    }
                    let line = |cells: Vec<&str>| {
                        let mut l = String::from(" ");
                        for (i, c) in cells.iter().enumerate() {
                            l.push_str(&format!(" {:<w$}", c, w = widths[i]));
                        }
                        format!("{}\n", l.trim_end())
                    };
                    out.push_str(&line(headers.to_vec()));
                    for row in rows {
                        out.push_str(&line(row.iter().map(|c| c.text.as_str()).collect()));
                    }
                }
                Body::Text(text) => {
                    for l in text.lines() {
                        if l.is_empty() {
                            out.push('\n');
                        } else {
                            out.push_str(&format!("  {l}\n"));
                        }
                    }
                }
                Body::Note(note) => out.push_str(&format!("  {note}\n")),
            }
        }
        out
    }
}

/// Formats a timestamp for people: UTC, to the second.
pub fn when(at: Option<chrono::DateTime<chrono::Utc>>) -> String {
    at.map(|t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_else(|| "-".into())
}

/// Whose job a failure is, addressed to the page's reader.
pub fn whose_job(owner: Owner) -> &'static str {
    match owner {
        Owner::Customer => "you",
        Owner::Operator => "the operators",
    }
}

fn silence_words(silence: &str) -> &'static str {
    if silence == "no_runs" {
        "no runs were recorded at all"
    } else {
        "runs were recorded but none succeeded"
    }
}

fn paused_words(reason: &str) -> String {
    match reason {
        PAUSED_BY_BREAKER => format!("paused by the circuit breaker ({reason})"),
        PAUSED_MANUAL => format!("paused by a person ({reason})"),
        other => format!("paused ({other})"),
    }
}

fn run_link(id: i64) -> Cell {
    Cell::linked(format!("#{id}"), format!("/runs/{id}"))
}

fn sync_link(id: &str) -> Cell {
    Cell::linked(id, format!("/syncs/{id}"))
}

/// A failure code with its three sentences.
#[derive(Debug, Clone, Serialize)]
pub struct FailureView {
    pub code: FailureCode,
    pub what_happened: &'static str,
    pub what_next: &'static str,
    pub owner: Owner,
}

impl FailureView {
    pub fn of(code: Option<&str>) -> Option<Self> {
        let code = FailureCode::parse(code?)?;
        Some(Self {
            code,
            what_happened: code.what_happened(),
            what_next: code.what_next(),
            owner: code.owner(),
        })
    }

    fn facts(&self, detail: Option<&str>) -> Vec<(&'static str, Cell)> {
        let mut facts = vec![
            ("failure", Cell::from(self.code.as_str())),
            ("what happened", self.what_happened.into()),
            ("what next", self.what_next.into()),
            ("whose job", whose_job(self.owner).into()),
        ];
        if let Some(detail) = detail {
            facts.push(("detail", detail.into()));
        }
        facts
    }
}

/// `/`: every sync by workspace, with its status and last runs.
#[derive(Debug, Clone, Serialize)]
pub struct OverviewView {
    pub syncs: Vec<SyncSummary>,
}

impl OverviewView {
    pub async fn load(pool: &PgPool) -> sqlx::Result<Self> {
        Ok(Self {
            syncs: syncs::list_syncs(pool).await?,
        })
    }

    pub fn page(&self) -> Page {
        let mut sections = Vec::new();
        let mut workspaces: Vec<&str> =
            self.syncs.iter().map(|s| s.workspace_id.as_str()).collect();
        workspaces.dedup();
        for workspace in workspaces {
            let rows = self
                .syncs
                .iter()
                .filter(|s| s.workspace_id == workspace)
                .map(|s| {
                    let mut status = match &s.paused_reason {
                        Some(reason) => paused_words(reason),
                        None => s.status.clone(),
                    };
                    if let Some(silence) = &s.silence {
                        status.push_str(&format!("; silent: {}", silence_words(silence)));
                    }
                    let last = match (s.last_run_id, &s.last_run_status) {
                        (Some(id), Some(st)) => {
                            Cell::linked(format!("#{id} {st}"), format!("/runs/{id}"))
                        }
                        _ => "-".into(),
                    };
                    vec![
                        sync_link(&s.id),
                        status.into(),
                        s.schedule.clone().unwrap_or_default().into(),
                        last,
                        when(s.last_success_at).into(),
                    ]
                })
                .collect();
            sections.push(Section {
                title: format!("Workspace {workspace}"),
                body: Body::Table {
                    headers: vec!["sync", "status", "schedule", "last run", "last success"],
                    rows,
                },
            });
        }
        if sections.is_empty() {
            sections.push(Section {
                title: "Syncs".into(),
                body: Body::Note(
                    "No syncs yet: publish one with `syncward sync apply FILE`.".into(),
                ),
            });
        }
        Page {
            title: "syncward: workspaces and syncs".into(),
            sections,
        }
    }
}

/// `/syncs/{id}` and `sync show ID`.
#[derive(Debug, Clone, Serialize)]
pub struct SyncView {
    pub sync: SyncRow,
    pub cursor: Option<CursorRow>,
    pub deadman_incidents: Vec<IncidentRow>,
    /// Quarantined and rejected records not put back yet.
    pub rejections: OpenRejections,
    pub recent_runs: Vec<RunRow>,
    /// What the source said on its latest run that the operator should know
    /// (e.g. Shopify serving another API version than the pinned one).
    pub source_notices: Vec<RunEventRow>,
}

impl SyncView {
    pub async fn load(pool: &PgPool, id: &str) -> sqlx::Result<Option<Self>> {
        let Some(sync) = syncs::get_sync(pool, id).await? else {
            return Ok(None);
        };
        Ok(Some(Self {
            cursor: cursors::get_cursor(pool, id).await?,
            deadman_incidents: deadman::open_incidents_for_sync(pool, id).await?,
            rejections: rejected::open_rejections(pool, id, REJECTED_SHOWN).await?,
            recent_runs: runs::list_runs(pool, Some(id), RECENT_RUNS).await?,
            source_notices: runs::latest_source_notices(pool, id).await?,
            sync,
        }))
    }

    pub fn page(&self) -> Page {
        let s = &self.sync;
        let mut sections = Vec::new();
        let status = match &s.paused_reason {
            Some(reason) => format!("{} since {}", paused_words(reason), when(s.paused_at)),
            None => format!("active since {}", when(s.activated_at)),
        };
        let cursor = match self
            .cursor
            .as_ref()
            .and_then(|c| c.cursor.as_ref().map(|v| (c, v)))
        {
            Some((c, value)) => format!(
                "{} (written by run {} with fence {}, {})",
                value.0,
                c.run_id
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "-".into()),
                c.fence,
                when(Some(c.updated_at))
            ),
            None => "none (the next run starts at the beginning of the source)".into(),
        };
        sections.push(Section {
            title: "Sync".into(),
            body: Body::Facts(vec![
                ("workspace", s.workspace_id.clone().into()),
                ("status", status.into()),
                (
                    "version",
                    format!("{} (last changed {})", s.version, when(Some(s.changed_at))).into(),
                ),
                ("cursor", cursor.into()),
            ]),
        });
        if let Some(error) = &s.last_error {
            let error = &error.0;
            let title = if s.paused_reason.as_deref() == Some(PAUSED_BY_BREAKER) {
                "Why it is paused: the last failure"
            } else {
                "Last failure"
            };
            let mut facts = Vec::new();
            if let Some(run) = error["run_id"].as_i64() {
                facts.push(("run", run_link(run)));
            }
            let at = error["at"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc));
            facts.push(("at", when(at).into()));
            if let Some(view) = FailureView::of(error["code"].as_str()) {
                facts.extend(view.facts(error["detail"].as_str()));
            }
            sections.push(Section {
                title: title.into(),
                body: Body::Facts(facts),
            });
        }
        if !self.deadman_incidents.is_empty() {
            let rows = self
                .deadman_incidents
                .iter()
                .map(|i| {
                    vec![
                        format!(
                            "{} {}",
                            i.scope,
                            i.sync_id.as_deref().unwrap_or(&i.workspace_id)
                        )
                        .into(),
                        silence_words(&i.silence).into(),
                        when(Some(i.opened_at)).into(),
                    ]
                })
                .collect();
            sections.push(Section {
                title: "Silent (dead-man incidents open)".into(),
                body: Body::Table {
                    headers: vec!["scope", "silence", "since"],
                    rows,
                },
            });
        }
        let open = &self.rejections;
        if open.quarantined + open.rejected > 0 {
            let mut rows: Vec<Vec<Cell>> = open.latest.iter().map(rejected_row).collect();
            rows.truncate(REJECTED_ON_SYNC_PAGE);
            sections.push(Section {
                title: format!(
                    "Records not delivered: {} quarantined, {} rejected (`syncward sync retry-rejected {}` puts them back)",
                    open.quarantined, open.rejected, s.id
                ),
                body: Body::Table {
                    headers: vec!["run", "email", "code", "message", "at"],
                    rows,
                },
            });
        }
        if !self.source_notices.is_empty() {
            sections.push(Section {
                title: "Source notices (latest run)".into(),
                body: Body::Table {
                    headers: vec!["run", "at", "notice"],
                    rows: self
                        .source_notices
                        .iter()
                        .map(|e| {
                            vec![
                                e.run_id.to_string().into(),
                                when(Some(e.at)).into(),
                                e.detail.0["message"]
                                    .as_str()
                                    .unwrap_or_default()
                                    .to_string()
                                    .into(),
                            ]
                        })
                        .collect(),
                },
            });
        }
        let body = if self.recent_runs.is_empty() {
            Body::Note("No runs yet.".into())
        } else {
            Body::Table {
                headers: vec!["run", "status", "trigger", "attempt", "at", "failure"],
                rows: self.recent_runs.iter().map(run_row).collect(),
            }
        };
        sections.push(Section {
            title: "Recent runs".into(),
            body,
        });
        // The stored JSON came from a validated definition, so it renders as TOML.
        let definition =
            toml::to_string(&s.definition.0).unwrap_or_else(|e| format!("# cannot render: {e}\n"));
        sections.push(Section {
            title: "Definition (secrets are named by environment variable only)".into(),
            body: Body::Text(definition),
        });
        Page {
            title: format!("Sync {}", s.id),
            sections,
        }
    }
}

fn run_row(r: &RunRow) -> Vec<Cell> {
    vec![
        run_link(r.id),
        r.status.clone().into(),
        r.trigger.clone().into(),
        format!("{}/{}", r.attempt, r.max_attempts).into(),
        when(r.finished_at.or(r.started_at).or(Some(r.scheduled_at))).into(),
        r.failure_code.clone().unwrap_or_default().into(),
    ]
}

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
    pub async fn load(pool: &PgPool, id: i64) -> sqlx::Result<Option<Self>> {
        let Some(run) = runs::get_run(pool, id).await? else {
            return Ok(None);
        };
        Ok(Some(Self {
            failure: FailureView::of(run.failure_code.as_deref()),
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

    pub fn page(&self) -> Page {
        let r = &self.run;
        let cursor = |c: &Option<sqlx::types::Json<serde_json::Value>>| {
            c.as_ref()
                .map(|v| v.0.to_string())
                .unwrap_or_else(|| "start".into())
        };
        let mut sections = vec![Section {
            title: "Run".into(),
            body: Body::Facts(vec![
                ("sync", sync_link(&r.sync_id)),
                ("workspace", r.workspace_id.clone().into()),
                ("status", r.status.clone().into()),
                ("trigger", r.trigger.clone().into()),
                (
                    "attempt",
                    format!("{} of {}", r.attempt, r.max_attempts).into(),
                ),
                ("scheduled", when(Some(r.scheduled_at)).into()),
                ("started", when(r.started_at).into()),
                ("finished", when(r.finished_at).into()),
                ("last heartbeat", when(r.heartbeat_at).into()),
                (
                    "cursor",
                    format!("{} -> {}", cursor(&r.cursor_start), cursor(&r.cursor_end)).into(),
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
        let timeline = if self.events.is_empty() {
            Body::Note("No events recorded.".into())
        } else {
            Body::Table {
                headers: vec!["at", "event", "detail"],
                rows: self
                    .events
                    .iter()
                    .map(|e| {
                        vec![
                            when(Some(e.at)).into(),
                            e.kind.clone().into(),
                            e.detail.0.to_string().into(),
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
                headers: vec!["email", "code", "message"],
                rows: self
                    .rejected_records
                    .iter()
                    .map(|x| {
                        vec![
                            x.email.clone().unwrap_or_else(|| "-".into()).into(),
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
                    "Rejected records ({quarantined} quarantined: `syncward sync retry-rejected {} --run {}` puts them back)",
                    self.run.sync_id, self.run.id
                )
            } else {
                "Rejected records".into()
            },
            body: rejected,
        });
        if !self.imports.is_empty() {
            let rows = self
                .imports
                .iter()
                .map(|p| {
                    let counts = p
                        .counts
                        .as_ref()
                        .map(|c| c.0.to_string())
                        .unwrap_or_default();
                    let status = match &p.error {
                        Some(e) => format!("{} ({e})", p.status),
                        None => p.status.clone(),
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
        }
    }
}

/// One undelivered record on a sync's page.
fn rejected_row(x: &RejectedRow) -> Vec<Cell> {
    vec![
        run_link(x.run_id),
        x.email.clone().unwrap_or_else(|| "-".into()).into(),
        x.code.clone().into(),
        x.message.clone().into(),
        when(Some(x.created_at)).into(),
    ]
}
