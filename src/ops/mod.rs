//! One door for every read and write of a sync or run — the lists, a sync's
//! page, versions and runs, a run's page; pause, resume, run now, put
//! rejected records back, reset the cursor, resync, roll back, archive —
//! whoever asks: the API, the pages or the CLI. `Door` holds the store and
//! lends it to nothing: the only way in is `Door::enter(scope)`, so code
//! without a `Scope` reaches no sync or run (the HTTP handlers get a `Door`
//! as their state and nothing else). Each action refuses by default (a sync
//! or run outside the scope is not found, a read-only scope writes nothing),
//! applies the rules of an archived or paused sync here once, and records
//! who acted in the audit log.

mod access;
mod forget;
mod scope;
mod trace;

/// What the door's actions answer with.
pub use crate::store::syncs::{
    Applied, IdOfAnotherWorkspace, Moved, PublishOutcome, SyncRow, SyncVersion,
};
pub use crate::views::Trace;
pub use access::SyncHealth;
pub use forget::{AccountErasure, Forgotten, check_addresses};
pub use scope::Scope;
pub use trace::DEFAULT_CALLS;

pub use crate::store::held_removals::HeldRemovals;
pub use crate::store::rejected::PutBackFilter;
pub use crate::store::runs::{Cancel, RunFilter, RunRow};
use sqlx::PgPool;

use crate::config::SyncDefinition;
use crate::config::secrets::SecretStore;
use crate::states::{PauseReason, RunStatus, RunTrigger, SyncStatus};
use crate::store::cursors;
use crate::store::held_removals;
use crate::store::rejected::{self, PutBack};
use crate::store::runs;
use crate::store::syncs;
use crate::views::{OverviewView, RunView, SyncView};

/// Why an action was not done. Every surface words these its own way (a
/// status code, a page, a line and an exit code).
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// No such sync, or one the scope does not see (the same answer, so a
    /// scope cannot learn which ids exist).
    #[error("no such sync")]
    NotFound,
    /// The sync has no such kept version.
    #[error("no version {0}")]
    NoVersion(i32),
    /// A read-only scope asked to change something.
    #[error("this token is read-only: it cannot pause, resume, run or retry")]
    ReadOnly,
    /// Only the CLI and the admin token publish sync files (a workspace
    /// scope's `--prune` would reach other workspaces' syncs).
    #[error("this scope cannot publish sync files")]
    CannotPublish,
    /// Only the CLI and the admin token may do this (it reaches across
    /// workspaces).
    #[error("only the command line and the admin token can do this")]
    AdminOnly,
    /// What the caller gave is not usable (what is wrong, and where).
    #[error("{0}")]
    BadInput(String),
    /// The sync is archived: it runs nothing and takes no action until its
    /// file is applied again.
    #[error("the sync is archived; apply its file again to restore it")]
    Archived,
    /// The sync is paused and the run was not forced.
    #[error("the sync is paused ({reason})")]
    Paused { reason: String },
    /// A kept version can no longer be published as it is (it no longer
    /// validates, or names a secret its workspace lacks).
    #[error("{0}")]
    Unpublishable(String),
    #[error(transparent)]
    Store(#[from] sqlx::Error),
}

/// The answer to "run it now", the API's and `sync run --json`'s alike:
/// the sync, the queued run, and whether this ask queued it (false: one was
/// queued already).
pub fn run_queued(sync: &str, run_id: i64, new: bool) -> serde_json::Value {
    serde_json::json!({ "sync": sync, "run_id": run_id, "new": new })
}

/// Longest pause reason a person may give (it is shown on the pages).
const MAX_PAUSE_NOTE: usize = 500;

/// The store, behind the door. Cheap to clone (the pool is shared).
#[derive(Clone, Debug)]
pub struct Door {
    store: PgPool,
    /// The attempts a run queued here gets (`run.max_attempts`).
    max_attempts: i32,
    /// The workspaces' secrets, for actions that call a destination
    /// (`forget` with the destination); `None` where none may.
    secrets: Option<SecretStore>,
}

impl Door {
    pub fn new(store: PgPool, max_attempts: i32) -> Self {
        Self {
            store,
            max_attempts,
            secrets: None,
        }
    }

    /// The door, with the workspaces' secrets for actions that call a destination.
    pub fn with_secrets(mut self, secrets: SecretStore) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// The actions open to `scope`.
    pub fn enter(&self, scope: Scope) -> Scoped {
        Scoped {
            store: self.store.clone(),
            max_attempts: self.max_attempts,
            secrets: self.secrets.clone(),
            scope,
        }
    }
}

/// The door entered by one scope: every action it may try.
#[derive(Debug)]
pub struct Scoped {
    store: PgPool,
    max_attempts: i32,
    secrets: Option<SecretStore>,
    scope: Scope,
}

/// A sync cleared to run now: `forced` when it is paused and the caller
/// forced it (it stays paused).
#[derive(Debug)]
pub struct Runnable {
    pub sync: SyncRow,
    pub forced: bool,
}

impl Scoped {
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The syncs the scope sees.
    pub async fn sync_list(&self) -> Result<Vec<syncs::SyncSummary>, OpsError> {
        Ok(syncs::list_syncs(&self.store, self.scope.workspace()).await?)
    }

    /// The overview page's content, of the syncs the scope sees.
    pub async fn overview(&self) -> Result<OverviewView, OpsError> {
        Ok(OverviewView::load(&self.store, self.scope.workspace()).await?)
    }

    /// The sync `id`, if the scope sees it.
    pub async fn sync(&self, id: &str) -> Result<SyncRow, OpsError> {
        match syncs::get_sync(&self.store, id).await? {
            Some(sync) if self.scope.sees(&sync.workspace_id) => Ok(sync),
            _ => Err(OpsError::NotFound),
        }
    }

    /// A sync's page (at `version`, or as it is), if the scope sees the sync.
    pub async fn sync_view(&self, id: &str, version: Option<i32>) -> Result<SyncView, OpsError> {
        self.sync(id).await?;
        let view = match version {
            Some(version) => SyncView::load_version(&self.store, id, version).await?,
            None => SyncView::load(&self.store, id).await?,
        };
        view.ok_or(OpsError::NotFound)
    }

    /// A kept version of a sync's definition, if the scope sees the sync.
    pub async fn sync_version(&self, id: &str, version: i32) -> Result<SyncVersion, OpsError> {
        self.sync(id).await?;
        syncs::get_version(&self.store, id, version)
            .await?
            .ok_or(OpsError::NoVersion(version))
    }

    /// A sync's latest runs, if the scope sees the sync.
    pub async fn sync_runs(&self, id: &str, limit: i64) -> Result<Vec<runs::RunRow>, OpsError> {
        self.run_list(&runs::RunFilter {
            sync: Some(id),
            limit,
            ..Default::default()
        })
        .await
    }

    /// The latest runs `filter` asks for, of the syncs the scope sees (a
    /// sync it does not see is "not found"; `filter.seen_by` is the scope's).
    pub async fn run_list(
        &self,
        filter: &runs::RunFilter<'_>,
    ) -> Result<Vec<runs::RunRow>, OpsError> {
        if let Some(id) = filter.sync {
            self.sync(id).await?;
        }
        if let Some(status) = filter.status
            && let Err(e) = status.parse::<RunStatus>()
        {
            return Err(OpsError::BadInput(format!("--status: {e}")));
        }
        let filter = runs::RunFilter {
            seen_by: self.scope.workspace(),
            ..*filter
        };
        Ok(runs::list_runs(&self.store, &filter).await?)
    }

    /// Cancels a run the scope may change (`runs cancel`): a queued one ends
    /// now, a running one stops at its next checkpoint.
    pub async fn cancel_run(&self, id: i64) -> Result<runs::Cancel, OpsError> {
        let run = self.run(id).await?;
        self.writable_sync(&run.sync_id).await?;
        runs::cancel_run(&self.store, id, self.scope.actor())
            .await?
            .ok_or(OpsError::NotFound)
    }

    /// One run the scope sees, as stored.
    pub async fn run(&self, id: i64) -> Result<runs::RunRow, OpsError> {
        match runs::get_run(&self.store, id).await? {
            Some(run) if self.scope.sees(&run.workspace_id) => Ok(run),
            _ => Err(OpsError::NotFound),
        }
    }

    /// The runs in progress now, of the syncs the scope sees.
    pub async fn running_runs(&self) -> Result<Vec<runs::RunRow>, OpsError> {
        Ok(runs::running_runs(&self.store, None, self.scope.workspace()).await?)
    }

    /// A run's page, if the scope sees its sync's workspace as it is now.
    pub async fn run_view(&self, id: i64) -> Result<RunView, OpsError> {
        match runs::workspace_of_run(&self.store, id).await? {
            Some(workspace) if self.scope.sees(&workspace) => {}
            _ => return Err(OpsError::NotFound),
        }
        RunView::load(&self.store, id, self.secrets.as_ref())
            .await?
            .ok_or(OpsError::NotFound)
    }

    /// The sync `id`, if the scope may change it: seen, and not read-only.
    async fn writable_sync(&self, id: &str) -> Result<SyncRow, OpsError> {
        let sync = self.sync(id).await?;
        if self.scope.read_only() {
            return Err(OpsError::ReadOnly);
        }
        Ok(sync)
    }

    /// The sync `id`, if the scope may act on it: seen, writable, not archived.
    async fn actionable_sync(&self, id: &str) -> Result<SyncRow, OpsError> {
        let sync = self.writable_sync(id).await?;
        if sync.status == SyncStatus::Archived {
            return Err(OpsError::Archived);
        }
        Ok(sync)
    }

    /// Pauses the sync; false when it was paused already.
    pub async fn pause(&self, id: &str, note: Option<&str>) -> Result<bool, OpsError> {
        let note = note.map(str::trim).filter(|n| !n.is_empty());
        if let Some(note) = note
            && (note.chars().count() > MAX_PAUSE_NOTE || note.contains(['\n', '\r']))
        {
            return Err(OpsError::BadInput(format!(
                "the pause reason must be one line of at most {MAX_PAUSE_NOTE} characters"
            )));
        }
        self.actionable_sync(id).await?;
        let actor = self.scope.actor();
        Ok(syncs::pause_sync(&self.store, id, PauseReason::Manual, note, actor).await?)
    }

    /// Resumes the sync (re-arming its breaker); false when it was not paused.
    pub async fn resume(&self, id: &str) -> Result<bool, OpsError> {
        self.actionable_sync(id).await?;
        Ok(syncs::resume_sync(&self.store, id, self.scope.actor()).await?)
    }

    /// Whether the sync may run now: a paused one only when `force` is given.
    pub async fn runnable(&self, id: &str, force: bool) -> Result<Runnable, OpsError> {
        let sync = self.actionable_sync(id).await?;
        let paused = sync.status == SyncStatus::Paused;
        if paused && !force {
            let reason = sync
                .paused_reason
                .map_or_else(|| "paused by a person".into(), |r| r.to_string());
            return Err(OpsError::Paused { reason });
        }
        Ok(Runnable {
            sync,
            forced: paused,
        })
    }

    /// Queues a run of the sync now (see `runnable`): the run's id, and
    /// whether it is new (false: one was queued already).
    pub async fn run_now(&self, id: &str, force: bool) -> Result<(i64, bool), OpsError> {
        let runnable = self.runnable(id, force).await?;
        self.enqueue(&runnable).await
    }

    /// Queues a run of a sync `runnable` cleared.
    pub async fn enqueue(&self, runnable: &Runnable) -> Result<(i64, bool), OpsError> {
        let trigger = if runnable.forced {
            RunTrigger::Forced
        } else {
            RunTrigger::Manual
        };
        Ok(runs::enqueue_run(&self.store, &runnable.sync.id, trigger, self.max_attempts).await?)
    }

    /// Puts the sync's quarantined and rejected records back for its next run.
    pub async fn retry_rejected(
        &self,
        id: &str,
        filter: &PutBackFilter,
    ) -> Result<PutBack, OpsError> {
        self.actionable_sync(id).await?;
        Ok(rejected::put_back(&self.store, id, filter, self.scope.actor()).await?)
    }

    /// The removals a mirror run held when it refused for
    /// `source.max_removal_share`: `limit` of them after the first `offset`.
    pub async fn held_removals(
        &self,
        run_id: i64,
        offset: i64,
        limit: i64,
    ) -> Result<HeldRemovals, OpsError> {
        let run = self.run(run_id).await?;
        let held = held_removals::list(&self.store, run_id, &run.sync_id, offset, limit).await?;
        if held.held == 0 {
            return Err(OpsError::BadInput(format!(
                "run {run_id} holds no removals (a mirror run refused for \
                 source.max_removal_share holds them, until its sync's next refusal or clean run)"
            )));
        }
        Ok(held)
    }

    /// Lets the sync's next run take off exactly the removals run `run_id`
    /// held that are still absent from the query; returns how many were
    /// approved.
    pub async fn approve_removals(&self, run_id: i64) -> Result<u64, OpsError> {
        let run = self.run(run_id).await?;
        self.actionable_sync(&run.sync_id).await?;
        let approved =
            held_removals::approve(&self.store, run_id, &run.sync_id, self.scope.actor()).await?;
        if approved == 0 {
            return Err(OpsError::BadInput(format!(
                "run {run_id} holds no removals awaiting approval (none held, approved \
                 already, or replaced by a later run's)"
            )));
        }
        Ok(approved)
    }

    /// Rewinds the sync's cursor to the start of the source (delivered
    /// records are replayed from the ledger, not sent again).
    pub async fn reset_cursor(&self, id: &str) -> Result<(), OpsError> {
        self.writable_sync(id).await?;
        cursors::reset_cursor(&self.store, id, self.scope.actor()).await?;
        Ok(())
    }

    /// A full resync: a new ledger epoch and the cursor rewound, so the next
    /// run sends every record once more. The new epoch.
    pub async fn resync(&self, id: &str) -> Result<i32, OpsError> {
        self.actionable_sync(id).await?;
        Ok(syncs::resync_sync(&self.store, id, self.scope.actor()).await?)
    }

    /// Archives the sync (it never runs again and keeps its history); false
    /// when it was archived already.
    pub async fn archive(&self, id: &str) -> Result<bool, OpsError> {
        self.writable_sync(id).await?;
        Ok(syncs::archive_sync(&self.store, id, self.scope.actor()).await?)
    }

    /// Publishes the definitions (with `prune`, archives every sync whose
    /// file is not among them), in one transaction.
    pub async fn apply(
        &self,
        definitions: &[SyncDefinition],
        prune: bool,
    ) -> Result<Applied, OpsError> {
        if !matches!(self.scope, Scope::Cli | Scope::Admin) {
            return Err(OpsError::CannotPublish);
        }
        syncs::apply_syncs(&self.store, definitions, prune, self.scope.actor())
            .await
            .map_err(unpublishable)
    }

    /// Moves the sync to `workspace` with its history (`store::syncs::move_sync`).
    /// Only the CLI and the admin token: it reaches two workspaces.
    pub async fn move_sync(
        &self,
        id: &str,
        workspace: &crate::config::WorkspaceId,
    ) -> Result<syncs::Moved, OpsError> {
        if !matches!(self.scope, Scope::Cli | Scope::Admin) {
            return Err(OpsError::AdminOnly);
        }
        syncs::move_sync(&self.store, id, workspace.as_str(), self.scope.actor())
            .await?
            .ok_or(OpsError::NotFound)
    }

    /// Publishes kept `version` of the sync again, once it still validates
    /// and its workspace holds every secret it names: the new version
    /// number and the one that was current before.
    pub async fn rollback(
        &self,
        id: &str,
        version: i32,
        secrets: &SecretStore,
    ) -> Result<(i32, i32), OpsError> {
        let sync = self.writable_sync(id).await?;
        let kept = self.sync_version(id, version).await?;
        let definition: SyncDefinition = serde_json::from_value(kept.definition.0)
            .map_err(|e| OpsError::Unpublishable(format!("it no longer validates: {e}")))?;
        // A kept version may have been moved to another workspace since;
        // the scope must see the one it would publish into too.
        if !self.scope.sees(definition.workspace.as_str()) {
            return Err(OpsError::NotFound);
        }
        definition
            .check_secrets(&format!("{id} version {version}"), secrets)
            .map_err(|e| OpsError::Unpublishable(e.to_string()))?;
        let (published, _) =
            syncs::rollback_sync(&self.store, &definition, version, self.scope.actor())
                .await
                .map_err(unpublishable)?;
        Ok((published, sync.version))
    }
}

/// A publishing failure: the store's, an id of another workspace's sync
/// (bad input), or what the definition could not be.
fn unpublishable(e: anyhow::Error) -> OpsError {
    let e = match e.downcast::<syncs::IdOfAnotherWorkspace>() {
        Ok(taken) => return OpsError::BadInput(taken.to_string()),
        Err(e) => e,
    };
    match e.downcast::<sqlx::Error>() {
        Ok(e) => OpsError::Store(e),
        Err(e) => OpsError::Unpublishable(format!("{e:#}")),
    }
}
