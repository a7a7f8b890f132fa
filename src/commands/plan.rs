//! `sync apply --plan`: what an apply would do to each sync, read from the
//! store and printed; nothing is written.

use crate::ops::{OpsError, Scoped};
use crate::states::SyncStatus;
use serde::Serialize;

use crate::config::{FieldChange, SyncDefinition, delivery_meaning, field_changes};

/// The plan found something to change: exit 4, so CI can tell.
#[derive(Debug, thiserror::Error)]
#[error("the plan has changes")]
pub struct PlanHasChanges;

/// What an apply would do to one sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PlannedAction {
    Create,
    Change,
    /// Archived now; the apply brings it back.
    Restore,
    /// Same definition, but paused: the publish makes it active again.
    Resume,
    Unchanged,
    /// Its file is gone (`--prune`): it would be archived.
    Archive,
}

#[derive(Debug, Clone, Serialize)]
pub struct SyncPlan {
    pub sync: String,
    pub action: PlannedAction,
    pub version: Option<i32>,
    pub changes: Vec<FieldChange>,
    /// What the changes mean for delivery.
    pub meaning: Vec<String>,
    /// What a sample of the source says against the destination (values
    /// it would ignore for their field's type), where this machine holds
    /// the secrets to look.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl SyncPlan {
    pub fn changes_anything(&self) -> bool {
        self.action != PlannedAction::Unchanged
    }
}

/// The plan: syncs to archive first (with `prune`), then each definition.
pub async fn plan(
    door: &Scoped,
    definitions: &[SyncDefinition],
    prune: bool,
) -> anyhow::Result<Vec<SyncPlan>> {
    let mut plans = Vec::new();
    if prune {
        for s in door.sync_list().await? {
            if s.status != SyncStatus::Archived
                && !definitions.iter().any(|d| d.id.as_str() == s.id)
            {
                plans.push(SyncPlan {
                    sync: s.id,
                    action: PlannedAction::Archive,
                    version: Some(s.version),
                    changes: Vec::new(),
                    warnings: Vec::new(),
                    meaning: vec![
                        "its file is gone: it would be archived (it never runs again, keeps its history and ledger, and comes back when its file is applied)".into(),
                    ],
                });
            }
        }
    }
    for definition in definitions {
        let id = definition.id.as_str();
        let new = serde_json::to_value(definition)?;
        let stored = match door.sync(id).await {
            Ok(stored) => Some(stored),
            Err(OpsError::NotFound) => None,
            Err(e) => return Err(e.into()),
        };
        let Some(stored) = stored else {
            plans.push(SyncPlan {
                sync: id.to_owned(),
                action: PlannedAction::Create,
                version: None,
                changes: field_changes(&serde_json::Value::Null, &new),
                warnings: Vec::new(),
                meaning: vec!["a new sync: its first run reads the source from the start".into()],
            });
            continue;
        };
        if stored.workspace_id != definition.workspace.as_str() {
            // The apply would refuse it: so does the plan.
            return Err(OpsError::BadInput(
                crate::ops::IdOfAnotherWorkspace {
                    id: id.to_owned(),
                    owner: stored.workspace_id,
                    workspace: definition.workspace.to_string(),
                }
                .to_string(),
            )
            .into());
        }
        let changes = field_changes(&stored.definition.0, &new);
        let mut meaning = delivery_meaning(&changes, definition);
        let action = if stored.status == SyncStatus::Archived {
            meaning.insert(0, "archived now: the apply brings it back".into());
            PlannedAction::Restore
        } else if !changes.is_empty() {
            PlannedAction::Change
        } else if stored.status == SyncStatus::Paused {
            meaning.push(format!(
                "same definition, but paused ({}): the apply makes it active again and re-arms its breaker",
                stored.paused_reason.map_or("paused", |r| r.as_str())
            ));
            PlannedAction::Resume
        } else {
            PlannedAction::Unchanged
        };
        plans.push(SyncPlan {
            sync: id.to_owned(),
            action,
            version: Some(stored.version),
            changes,
            meaning,
            warnings: Vec::new(),
        });
    }
    Ok(plans)
}

/// The plan as text, one block per sync, and a last line counting.
pub fn to_text(plans: &[SyncPlan]) -> String {
    let mut text = String::new();
    let shown = |v: &Option<serde_json::Value>| match v {
        None => "(none)".to_owned(),
        Some(value) => value.to_string(),
    };
    for p in plans {
        let (mark, what) = match (p.action, p.version) {
            (PlannedAction::Create, _) => ("+", "create, version 1".to_owned()),
            (PlannedAction::Change, Some(v)) => ("~", format!("change, version {v} -> {}", v + 1)),
            (PlannedAction::Restore, Some(v)) if p.changes.is_empty() => {
                ("+", format!("restore, version {v}"))
            }
            (PlannedAction::Restore, Some(v)) => {
                ("+", format!("restore, version {v} -> {}", v + 1))
            }
            (PlannedAction::Resume, Some(v)) => ("~", format!("resume, version {v}")),
            (PlannedAction::Unchanged, Some(v)) => ("=", format!("unchanged, version {v}")),
            (PlannedAction::Archive, Some(v)) => ("-", format!("archive, version {v}")),
            (_, None) => ("?", "unknown".to_owned()),
        };
        text.push_str(&format!("{mark} {}: {what}\n", p.sync));
        if p.action != PlannedAction::Create {
            for c in &p.changes {
                text.push_str(&format!(
                    "    {}: {} -> {}\n",
                    c.field,
                    shown(&c.before),
                    shown(&c.after)
                ));
            }
        }
        for m in &p.meaning {
            text.push_str(&format!("    means: {m}\n"));
        }
        for w in &p.warnings {
            text.push_str(&format!("    warning: {w}\n"));
        }
    }
    let count = |a: PlannedAction| plans.iter().filter(|p| p.action == a).count();
    text.push_str(&format!(
        "Plan: {} to create, {} to change, {} to restore, {} to resume, {} to archive, {} unchanged.\n",
        count(PlannedAction::Create),
        count(PlannedAction::Change),
        count(PlannedAction::Restore),
        count(PlannedAction::Resume),
        count(PlannedAction::Archive),
        count(PlannedAction::Unchanged),
    ));
    text
}
