//! The overview (`/`) and a sync's page (`/syncs/{id}`, `sync show ID`):
//! each sync's status, why it is paused, its cursor, what it did not deliver
//! and its recent runs.

use serde::Serialize;
use sqlx::PgPool;

use super::REJECTED_SHOWN;
use super::failure::FailureView;
use super::layout::{Body, Cell, Page, RunBar, Section, cursor_words, run_link, sync_link, when};
use crate::states::{PauseReason, SyncStatus};
use crate::store::audit::{self, AuditRow};
use crate::store::cursors::{self, CursorRow};
use crate::store::deadman::{self, IncidentRow};
use crate::store::rejected::{self, OpenRejections, RejectedRow};
use crate::store::runs::{self, RunEventRow, RunRow};
use crate::store::syncs::{self, SyncRow, SyncSummary, SyncVersion};

/// How many recent runs the sync page lists.
const RECENT_RUNS: usize = 10;
/// How many recent runs the sync page's chart draws.
const CHARTED_RUNS: i64 = 50;
/// Latest undelivered records listed on a sync's page.
const REJECTED_ON_SYNC_PAGE: usize = 20;

fn silence_words(silence: &str) -> &'static str {
    if silence == "no_runs" {
        "no runs were recorded at all"
    } else {
        "runs were recorded but none succeeded"
    }
}

pub fn paused_words(reason: PauseReason, note: Option<&str>) -> String {
    match (reason, note) {
        (PauseReason::Manual, Some(note)) => format!("paused by a person: {note}"),
        (PauseReason::Manual, None) => format!("paused by a person ({reason})"),
        (PauseReason::Breaker, _) => format!("paused by the circuit breaker ({reason})"),
        // A failure that pauses at once names itself.
        (PauseReason::Failure(code), _) => format!(
            "paused after one failure ({reason}): {}",
            code.what_happened()
        ),
    }
}

/// `/`: every sync by workspace, with its status and last runs.
#[derive(Debug, Clone, Serialize)]
pub struct OverviewView {
    pub syncs: Vec<SyncSummary>,
}

impl OverviewView {
    /// Every sync, or `workspace`'s only.
    pub async fn load(pool: &PgPool, workspace: Option<&str>) -> sqlx::Result<Self> {
        Ok(Self {
            syncs: syncs::list_syncs(pool, workspace).await?,
        })
    }

    pub fn page(&self) -> Page {
        let mut sections = Vec::new();
        // Paused and silent syncs first: they are what a person must act on.
        let attention: Vec<Vec<Cell>> = self
            .syncs
            .iter()
            .filter(|s| s.paused_reason.is_some() || s.silence.is_some())
            .map(|s| {
                vec![
                    sync_link(&s.id),
                    s.workspace_id.clone().into(),
                    status_words(s).into(),
                    when(s.last_success_at).into(),
                ]
            })
            .collect();
        if !attention.is_empty() {
            sections.push(Section {
                title: format!("Needs attention: {} paused or silent", attention.len()),
                body: Body::Table {
                    headers: vec!["sync", "workspace", "status", "last success"],
                    rows: attention,
                },
            });
        }
        let mut workspaces: Vec<&str> =
            self.syncs.iter().map(|s| s.workspace_id.as_str()).collect();
        workspaces.dedup();
        for workspace in workspaces {
            let rows = self
                .syncs
                .iter()
                .filter(|s| s.workspace_id == workspace)
                .map(|s| {
                    let status = status_words(s);
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
        if self.syncs.is_empty() {
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
            refresh: None,
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
    /// The latest runs, newest first (the chart's; the table lists fewer).
    pub recent_runs: Vec<RunRow>,
    /// What the source said on its latest run that the operator should know
    /// (e.g. Shopify serving another API version than the pinned one).
    pub source_notices: Vec<RunEventRow>,
    /// Every kept definition, newest first.
    pub versions: Vec<SyncVersion>,
    /// The version whose definition the page shows (`?version=N`); `None`:
    /// the current one.
    pub shown_version: Option<SyncVersion>,
    /// The latest full resync (`sync resync`), from the audit log.
    pub last_resync: Option<AuditRow>,
}

/// When the schedule fires this sync next, in words.
fn next_due_words(s: &syncs::SyncRow) -> String {
    match (s.status.as_str(), s.next_due_at) {
        ("paused", _) => "none while paused".into(),
        (_, Some(at)) => when(Some(at)),
        (_, None) => "set at the daemon's next tick".into(),
    }
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
            recent_runs: runs::list_runs(
                pool,
                &runs::RunFilter {
                    sync: Some(id),
                    limit: CHARTED_RUNS,
                    ..Default::default()
                },
            )
            .await?,
            source_notices: runs::latest_source_notices(pool, id).await?,
            versions: syncs::list_versions(pool, id).await?,
            shown_version: None,
            last_resync: audit::latest_action_for_sync(pool, id, "resync").await?,
            sync,
        }))
    }

    /// The page showing version `version`'s definition; `None` when the sync
    /// or that version does not exist.
    pub async fn load_version(pool: &PgPool, id: &str, version: i32) -> sqlx::Result<Option<Self>> {
        let Some(shown) = syncs::get_version(pool, id, version).await? else {
            return Ok(None);
        };
        Ok(Self::load(pool, id).await?.map(|view| Self {
            shown_version: Some(shown),
            ..view
        }))
    }

    pub fn page(&self) -> Page {
        let s = &self.sync;
        let mut sections = Vec::new();
        let status = match s.paused_reason {
            Some(reason) => format!(
                "{} since {}",
                paused_words(reason, s.paused_note.as_deref()),
                when(s.paused_at)
            ),
            None if s.status == SyncStatus::Archived => format!(
                "archived since {} (it never runs; applying its file restores it)",
                when(s.archived_at)
            ),
            None => format!("active since {}", when(s.activated_at)),
        };
        let cursor = match self
            .cursor
            .as_ref()
            .and_then(|c| c.cursor.as_ref().map(|v| (c, v)))
        {
            Some((c, value)) => format!(
                "{} (written by run {} with fence {}, {})",
                cursor_words(Some(&value.0)),
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
                ("next scheduled run", next_due_words(s).into()),
                ("cursor", cursor.into()),
                ("ledger epoch", self.epoch_words().into()),
            ]),
        });
        if let Some(error) = &s.last_error {
            let error = &error.0;
            let title = if s.paused_reason == Some(PauseReason::Breaker) {
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
            if let Some(view) = FailureView::of_in(error["code"].as_str(), &s.failure_context(None))
            {
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
                    "Records not delivered: {} quarantined, {} rejected (syncward sync retry-rejected {} puts them back)",
                    open.quarantined, open.rejected, s.id
                ),
                body: Body::Table {
                    headers: vec!["run", "email", "source key", "code", "message", "at"],
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
                rows: self
                    .recent_runs
                    .iter()
                    .take(RECENT_RUNS)
                    .map(run_row)
                    .collect(),
            }
        };
        if !self.recent_runs.is_empty() {
            let now = chrono::Utc::now();
            let bars = self.recent_runs.iter().rev().map(|r| RunBar::of(r, now));
            sections.push(Section {
                title: match self.recent_runs.len() {
                    1 => "The last run: duration and records read".to_string(),
                    n => format!("The last {n} runs: duration and records read"),
                },
                body: Body::Chart(bars.collect()),
            });
        }
        sections.push(Section {
            title: "Recent runs".into(),
            body,
        });
        // The stored JSON came from a validated definition, so it renders as TOML.
        let (title, json) = match &self.shown_version {
            Some(v) => (
                format!(
                    "Definition, version {} of {} (published {} by {}; secrets are named by environment variable only)",
                    v.version,
                    s.version,
                    when(Some(v.published_at)),
                    v.actor
                ),
                &v.definition.0,
            ),
            None => (
                format!(
                    "Definition, version {} (secrets are named by environment variable only)",
                    s.version
                ),
                &s.definition.0,
            ),
        };
        let definition =
            toml::to_string(json).unwrap_or_else(|e| format!("# cannot render: {e}\n"));
        sections.push(Section {
            title,
            body: Body::Text(definition),
        });
        sections.push(Section {
            title: format!(
                "Versions (syncward sync rollback {} N publishes one again)",
                s.id
            ),
            body: Body::Table {
                headers: vec!["version", "published", "by"],
                rows: self
                    .versions
                    .iter()
                    .map(|v| {
                        vec![
                            Cell::linked(
                                v.version.to_string(),
                                format!("/syncs/{}?version={}", s.id, v.version),
                            ),
                            when(Some(v.published_at)).into(),
                            v.actor.clone().into(),
                        ]
                    })
                    .collect(),
            },
        });
        Page {
            title: format!("Sync {}", s.id),
            sections,
            refresh: None,
        }
    }
}

impl SyncView {
    /// The ledger epoch in words: 0, or which resync started it.
    fn epoch_words(&self) -> String {
        let epoch = self.sync.ledger_epoch;
        match &self.last_resync {
            Some(resync) if epoch > 0 => format!(
                "{epoch} (a full resync requested {} by {}: every record is sent once more)",
                when(Some(resync.at)),
                resync.actor
            ),
            _ => format!("{epoch} (no full resync yet)"),
        }
    }
}

/// A sync's status in words: paused (and by whom), silent, or as stored.
fn status_words(s: &SyncSummary) -> String {
    let mut status = match s.paused_reason {
        Some(reason) => paused_words(reason, s.paused_note.as_deref()),
        None => s.status.to_string(),
    };
    if let Some(silence) = &s.silence {
        status.push_str(&format!("; silent: {}", silence_words(silence)));
    }
    status
}

fn run_row(r: &RunRow) -> Vec<Cell> {
    vec![
        run_link(r.id),
        r.status.as_str().into(),
        r.trigger.as_str().into(),
        format!("{}/{}", r.attempt, r.max_attempts).into(),
        when(r.finished_at.or(r.started_at).or(Some(r.scheduled_at))).into(),
        r.failure_code.clone().unwrap_or_default().into(),
    ]
}

/// One undelivered record on a sync's page.
fn rejected_row(x: &RejectedRow) -> Vec<Cell> {
    vec![
        run_link(x.run_id),
        x.email.clone().unwrap_or_else(|| "-".into()).into(),
        x.source_key.clone().unwrap_or_else(|| "-".into()).into(),
        x.code.clone().into(),
        x.message.clone().into(),
        when(Some(x.created_at)).into(),
    ]
}
