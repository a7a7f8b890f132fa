//! One door for every read and write of a sync or run — the lists, a sync's
//! page and runs, a run's page; pause, resume, run now, put rejected records
//! back — whoever asks: the API, the pages or the CLI. Each takes the
//! caller's `Scope` (there is no way in without one), refuses by default (a
//! sync or run outside the scope is not found, a read-only scope writes
//! nothing), applies the rules of an archived or paused sync here once, and
//! records who acted in the audit log.

mod scope;

pub use scope::Scope;

use crate::store::rejected::{self, PutBack, PutBackFilter};
use crate::store::runs::{self, FORCED_TRIGGER};
use crate::store::syncs::{self, PAUSED_MANUAL, SyncRow};
use crate::views::{OverviewView, RunView, SyncView};

/// Why an action was not done. Every surface words these its own way (a
/// status code, a page, a line and an exit code).
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// No such sync, or one the scope does not see (the same answer, so a
    /// scope cannot learn which ids exist).
    #[error("no such sync")]
    NotFound,
    /// A read-only scope asked to change something.
    #[error("this token is read-only: it cannot pause, resume, run or retry")]
    ReadOnly,
    /// The sync is archived: it runs nothing and takes no action until its
    /// file is applied again.
    #[error("the sync is archived; apply its file again to restore it")]
    Archived,
    /// The sync is paused and the run was not forced.
    #[error("the sync is paused ({reason})")]
    Paused { reason: String },
    #[error(transparent)]
    Store(#[from] sqlx::Error),
}

/// The syncs the scope sees.
pub async fn sync_list(
    store: &sqlx::PgPool,
    scope: &Scope,
) -> Result<Vec<syncs::SyncSummary>, OpsError> {
    let mut list = syncs::list_syncs(store).await?;
    list.retain(|s| scope.sees(&s.workspace_id));
    Ok(list)
}

/// The overview page's content, of the syncs the scope sees.
pub async fn overview(store: &sqlx::PgPool, scope: &Scope) -> Result<OverviewView, OpsError> {
    let mut view = OverviewView::load(store).await?;
    view.syncs.retain(|s| scope.sees(&s.workspace_id));
    Ok(view)
}

/// A sync's page (at `version`, or as it is), if the scope sees the sync.
pub async fn sync_view(
    store: &sqlx::PgPool,
    scope: &Scope,
    id: &str,
    version: Option<i32>,
) -> Result<SyncView, OpsError> {
    visible_sync(store, scope, id).await?;
    let view = match version {
        Some(version) => SyncView::load_version(store, id, version).await?,
        None => SyncView::load(store, id).await?,
    };
    view.ok_or(OpsError::NotFound)
}

/// A sync's latest runs, if the scope sees the sync.
pub async fn sync_runs(
    store: &sqlx::PgPool,
    scope: &Scope,
    id: &str,
    limit: i64,
) -> Result<Vec<runs::RunRow>, OpsError> {
    visible_sync(store, scope, id).await?;
    Ok(runs::list_runs(store, Some(id), limit).await?)
}

/// A run's page, if the scope sees its sync's workspace as it is now.
pub async fn run_view(store: &sqlx::PgPool, scope: &Scope, id: i64) -> Result<RunView, OpsError> {
    match runs::workspace_of_run(store, id).await? {
        Some(workspace) if scope.sees(&workspace) => {}
        _ => return Err(OpsError::NotFound),
    }
    RunView::load(store, id).await?.ok_or(OpsError::NotFound)
}

/// The sync `id`, if the scope sees it.
pub async fn visible_sync(
    store: &sqlx::PgPool,
    scope: &Scope,
    id: &str,
) -> Result<SyncRow, OpsError> {
    match syncs::get_sync(store, id).await? {
        Some(sync) if scope.sees(&sync.workspace_id) => Ok(sync),
        _ => Err(OpsError::NotFound),
    }
}

/// The sync `id`, if the scope may act on it: seen, writable, not archived.
async fn actionable_sync(
    store: &sqlx::PgPool,
    scope: &Scope,
    id: &str,
) -> Result<SyncRow, OpsError> {
    let sync = visible_sync(store, scope, id).await?;
    if scope.read_only() {
        return Err(OpsError::ReadOnly);
    }
    if sync.status == "archived" {
        return Err(OpsError::Archived);
    }
    Ok(sync)
}

/// Pauses the sync; false when it was paused already.
pub async fn pause(store: &sqlx::PgPool, scope: &Scope, id: &str) -> Result<bool, OpsError> {
    actionable_sync(store, scope, id).await?;
    Ok(syncs::pause_sync(store, id, PAUSED_MANUAL, scope.actor()).await?)
}

/// Resumes the sync (re-arming its breaker); false when it was not paused.
pub async fn resume(store: &sqlx::PgPool, scope: &Scope, id: &str) -> Result<bool, OpsError> {
    actionable_sync(store, scope, id).await?;
    Ok(syncs::resume_sync(store, id, scope.actor()).await?)
}

/// A sync cleared to run now: `forced` when it is paused and the caller
/// forced it (it stays paused).
#[derive(Debug)]
pub struct Runnable {
    pub sync: SyncRow,
    pub forced: bool,
}

/// Whether the sync may run now: a paused one only when `force` is given.
pub async fn runnable(
    store: &sqlx::PgPool,
    scope: &Scope,
    id: &str,
    force: bool,
) -> Result<Runnable, OpsError> {
    let sync = actionable_sync(store, scope, id).await?;
    let paused = sync.status == "paused";
    if paused && !force {
        let reason = sync
            .paused_reason
            .clone()
            .unwrap_or_else(|| "paused by a person".into());
        return Err(OpsError::Paused { reason });
    }
    Ok(Runnable {
        sync,
        forced: paused,
    })
}

/// Queues a run of the sync now (see `runnable`): the run's id, and whether
/// it is new (false: one was queued already).
pub async fn run_now(
    store: &sqlx::PgPool,
    scope: &Scope,
    id: &str,
    force: bool,
    max_attempts: i32,
) -> Result<(i64, bool), OpsError> {
    let runnable = runnable(store, scope, id, force).await?;
    let trigger = if runnable.forced {
        FORCED_TRIGGER
    } else {
        "manual"
    };
    Ok(runs::enqueue_run(store, id, trigger, max_attempts).await?)
}

/// Puts the sync's quarantined and rejected records back for its next run.
pub async fn retry_rejected(
    store: &sqlx::PgPool,
    scope: &Scope,
    id: &str,
    filter: &PutBackFilter,
) -> Result<PutBack, OpsError> {
    actionable_sync(store, scope, id).await?;
    Ok(rejected::put_back(store, id, filter, scope.actor()).await?)
}
