//! Syncs: publishing definitions, listing, pausing and resuming.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};

use super::audit::{Actor, record_audit};
use crate::config::SyncDefinition;
use crate::states::{PauseReason, RunStatus, SyncStatus};

/// A definition whose id is a sync of another workspace: a sync id belongs
/// to one workspace, and only `sync move` changes which (its runs, rejected
/// records and versions would otherwise become the other workspace's).
#[derive(Debug, thiserror::Error)]
#[error(
    "sync id \"{id}\" belongs to workspace {owner}, not {workspace}: choose another id, or \
     move the sync with `syncward sync move {id} --workspace {workspace}` (admin only; its \
     history moves with it)"
)]
pub struct IdOfAnotherWorkspace {
    pub id: String,
    pub owner: String,
    pub workspace: String,
}

/// A sync as stored.
#[derive(Debug, Clone, Serialize)]
pub struct SyncRow {
    pub id: String,
    pub workspace_id: String,
    pub definition: Json<serde_json::Value>,
    pub version: i32,
    pub status: SyncStatus,
    pub paused_reason: Option<PauseReason>,
    /// What the person who paused it wrote (`sync pause --reason`); read
    /// only while `paused_reason` is `manual` (the next pause rewrites it).
    pub paused_note: Option<String>,
    pub paused_at: Option<DateTime<Utc>>,
    pub last_error: Option<Json<serde_json::Value>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub changed_at: DateTime<Utc>,
    pub activated_at: Option<DateTime<Utc>>,
    /// When the schedule next enqueues a run; `None` until the next tick arms it.
    pub next_due_at: Option<DateTime<Utc>>,
    /// When it was archived (its file pruned, or `sync delete`); `None` otherwise.
    pub archived_at: Option<DateTime<Utc>>,
    /// Part of every delivery key; a full resync starts the next one.
    pub ledger_epoch: i32,
}

impl SyncRow {
    /// The stored definition, parsed back. Fails only if a definition written by
    /// an older syncward no longer validates.
    pub fn definition(&self) -> Result<SyncDefinition, serde_json::Error> {
        serde_json::from_value(self.definition.0.clone())
    }

    /// What its failures' advice names (`SyncDefinition::failure_context`),
    /// paused as it is now; its id alone when the stored definition no
    /// longer validates.
    pub fn failure_context(
        &self,
        secrets: Option<&crate::config::secrets::SecretStore>,
    ) -> crate::failure::FailureContext {
        let paused = self.status == SyncStatus::Paused;
        match self.definition() {
            Ok(definition) => definition.failure_context(secrets, paused),
            Err(_) => crate::failure::FailureContext {
                sync_id: self.id.clone(),
                paused,
                ..Default::default()
            },
        }
    }
}

/// A sync with its latest run, for listings.
#[derive(Debug, Clone, Serialize)]
pub struct SyncSummary {
    pub id: String,
    pub workspace_id: String,
    pub version: i32,
    pub status: SyncStatus,
    pub paused_reason: Option<PauseReason>,
    pub paused_note: Option<String>,
    pub schedule: Option<String>,
    pub last_run_id: Option<i64>,
    pub last_run_status: Option<RunStatus>,
    pub last_run_finished_at: Option<DateTime<Utc>>,
    pub last_success_at: Option<DateTime<Utc>>,
    /// The silence of an open dead-man incident touching this sync (its own or
    /// its workspace's): `no_runs` or `no_success`.
    pub silence: Option<String>,
    /// When the schedule enqueues its next run; `None` until a daemon's tick
    /// arms it.
    pub next_due_at: Option<DateTime<Utc>>,
}

/// What a publish did to one sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PublishOutcome {
    Created,
    Updated,
    /// Same definition; still a publish: the sync is active and its breaker re-armed.
    Unchanged,
    /// It was archived; applying its file brought it back (its definition may
    /// have changed too: the version says).
    Restored,
}

impl PublishOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            PublishOutcome::Created => "created",
            PublishOutcome::Updated => "updated",
            PublishOutcome::Unchanged => "unchanged",
            PublishOutcome::Restored => "restored",
        }
    }
}

/// Publishes definitions in one transaction: all land or none. Each becomes
/// active with `changed_at = now()` (re-arming the breaker); the version grows
/// when the definition changed.
pub async fn publish_syncs(
    pool: &PgPool,
    definitions: &[SyncDefinition],
    actor: Actor,
) -> anyhow::Result<Vec<(String, i32, PublishOutcome)>> {
    Ok(apply_syncs(pool, definitions, false, actor)
        .await?
        .published)
}

/// What an apply did: the syncs it archived (their files are gone), then what
/// each publish did.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    pub archived: Vec<String>,
    pub published: Vec<(String, i32, PublishOutcome)>,
}

/// Publishes definitions as `publish_syncs` does and, with `prune`, archives
/// every other sync not archived yet, all in one transaction.
pub async fn apply_syncs(
    pool: &PgPool,
    definitions: &[SyncDefinition],
    prune: bool,
    actor: Actor,
) -> anyhow::Result<Applied> {
    let mut tx = pool.begin().await?;
    let archived = if prune {
        let kept: Vec<&str> = definitions.iter().map(|d| d.id.as_str()).collect();
        let gone = syncs_not_in(&mut tx, &kept).await?;
        archive_in(&mut tx, &gone, "pruned", actor).await?
    } else {
        Vec::new()
    };
    let published = publish_in(&mut tx, definitions, actor).await?;
    tx.commit().await?;
    Ok(Applied {
        archived,
        published,
    })
}

/// Publishes one earlier version's definition again (a new version with its
/// content), recorded as a rollback in the audit log.
pub async fn rollback_sync(
    pool: &PgPool,
    definition: &SyncDefinition,
    to_version: i32,
    actor: Actor,
) -> anyhow::Result<(i32, PublishOutcome)> {
    let mut tx = pool.begin().await?;
    let published = publish_in(&mut tx, std::slice::from_ref(definition), actor).await?;
    let (_, version, outcome) = published
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("nothing was published"))?;
    record_audit(
        &mut tx,
        actor,
        "rollback",
        definition.id.as_str(),
        None,
        serde_json::json!({ "to_version": to_version, "version": version }),
    )
    .await?;
    tx.commit().await?;
    Ok((version, outcome))
}

async fn publish_in(
    tx: &mut PgConnection,
    definitions: &[SyncDefinition],
    actor: Actor,
) -> anyhow::Result<Vec<(String, i32, PublishOutcome)>> {
    let mut outcomes = Vec::with_capacity(definitions.len());
    for definition in definitions {
        let json = serde_json::to_value(definition)?;
        // Locked: a concurrent move cannot slip between this check and the upsert.
        let owner = sqlx::query_scalar!(
            "SELECT workspace_id FROM syncs WHERE id = $1 FOR UPDATE",
            definition.id.as_str(),
        )
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(owner) = owner.filter(|owner| owner != definition.workspace.as_str()) {
            return Err(IdOfAnotherWorkspace {
                id: definition.id.to_string(),
                owner,
                workspace: definition.workspace.to_string(),
            }
            .into());
        }
        sqlx::query!(
            "INSERT INTO workspaces (id) VALUES ($1) ON CONFLICT (id) DO NOTHING",
            definition.workspace.as_str(),
        )
        .execute(&mut *tx)
        .await?;
        // `before` reads the row as the statement's snapshot saw it, i.e. before the
        // upsert, to tell created / updated / unchanged apart in one statement. (No
        // FOR UPDATE there: locking a row this same statement updates yields nothing.)
        let published = sqlx::query!(
            r#"WITH before AS (SELECT definition, status FROM syncs WHERE id = $1),
             upserted AS (
               INSERT INTO syncs (id, workspace_id, definition) VALUES ($1, $2, $3)
               ON CONFLICT (id) DO UPDATE SET
                 definition = EXCLUDED.definition,
                 version = syncs.version + CASE WHEN syncs.definition = EXCLUDED.definition THEN 0 ELSE 1 END,
                 activated_at = CASE WHEN syncs.status <> 'active' THEN now() ELSE syncs.activated_at END,
                 status = 'active', paused_reason = NULL, paused_at = NULL, archived_at = NULL,
                 changed_at = now(), updated_at = now()
               RETURNING version),
             kept AS (
               INSERT INTO sync_versions (sync_id, version, definition, actor)
               SELECT $1, version, $3, $4 FROM upserted
               ON CONFLICT (sync_id, version) DO NOTHING)
             SELECT upserted.version AS "version!",
                    -- A new schedule, or a sync coming back from a pause or the
                    -- archive, is armed afresh: no catch-up of ticks from before.
                    coalesce((SELECT status <> 'active'
                                  OR definition->'schedule' IS DISTINCT FROM $3->'schedule'
                                  OR definition->'timezone' IS DISTINCT FROM $3->'timezone'
                              FROM before), true) AS "rearm!",
                    CASE WHEN NOT EXISTS (SELECT 1 FROM before) THEN 'created'
                         WHEN (SELECT status FROM before) = 'archived' THEN 'restored'
                         WHEN (SELECT definition FROM before) = $3 THEN 'unchanged'
                         ELSE 'updated' END AS "outcome!"
             FROM upserted"#,
            definition.id.as_str(),
            definition.workspace.as_str(),
            Json(&json) as _,
            actor.label(),
        )
        .fetch_one(&mut *tx)
        .await?;
        let (version, rearm, outcome) = (published.version, published.rearm, published.outcome);
        sqlx::query!(
            "INSERT INTO sync_cursors (sync_id) VALUES ($1) ON CONFLICT (sync_id) DO NOTHING",
            definition.id.as_str(),
        )
        .execute(&mut *tx)
        .await?;
        sqlx::query!(
            "INSERT INTO sync_schedule (sync_id) VALUES ($1)
             ON CONFLICT (sync_id) DO UPDATE SET next_due_at = '-infinity' WHERE $2",
            definition.id.as_str(),
            rearm,
        )
        .execute(&mut *tx)
        .await?;
        let outcome = match outcome.as_str() {
            "created" => PublishOutcome::Created,
            "updated" => PublishOutcome::Updated,
            "restored" => PublishOutcome::Restored,
            _ => PublishOutcome::Unchanged,
        };
        record_audit(
            &mut *tx,
            actor,
            "publish",
            definition.id.as_str(),
            None,
            serde_json::json!({ "version": version, "outcome": outcome }),
        )
        .await?;
        outcomes.push((definition.id.to_string(), version, outcome));
    }
    Ok(outcomes)
}

/// Syncs not archived whose ids are not in `kept`, locked for the apply.
async fn syncs_not_in(tx: &mut PgConnection, kept: &[&str]) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!(
        "SELECT id FROM syncs WHERE status <> 'archived' AND NOT (id = ANY($1))
         ORDER BY id FOR UPDATE",
        kept as _,
    )
    .fetch_all(tx)
    .await
}

/// What moved with a sync to another workspace (`sync move`).
#[derive(Debug, Clone, Serialize)]
pub struct Moved {
    pub from: String,
    pub to: String,
    /// The version the move published (the definition naming `to`).
    pub version: i32,
    pub runs: u64,
    pub rejected_records: u64,
    pub versions: u64,
}

/// Moves sync `id` to `workspace`, with everything of its own: the
/// definition (a new version naming the workspace, whose secrets file it
/// reads from now on), its runs, rejected records, kept versions, cursor
/// and ledger (all kept by sync id) and its alerts. `None` when there is no
/// such sync. Touches syncs, workspaces, runs, alerts and sync_versions in
/// one transaction, audited.
pub async fn move_sync(
    pool: &PgPool,
    id: &str,
    workspace: &str,
    actor: Actor,
) -> sqlx::Result<Option<Moved>> {
    let mut tx = pool.begin().await?;
    let Some(from) = sqlx::query_scalar!(
        "SELECT workspace_id FROM syncs WHERE id = $1 FOR UPDATE",
        id
    )
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };
    sqlx::query!(
        "INSERT INTO workspaces (id) VALUES ($1) ON CONFLICT (id) DO NOTHING",
        workspace
    )
    .execute(&mut *tx)
    .await?;
    let version = sqlx::query_scalar!(
        r#"UPDATE syncs SET workspace_id = $2,
                definition = jsonb_set(definition, '{workspace}', to_jsonb($2::text)),
                version = version + CASE WHEN workspace_id = $2 THEN 0 ELSE 1 END,
                changed_at = now(), updated_at = now()
           WHERE id = $1 RETURNING version"#,
        id,
        workspace
    )
    .fetch_one(&mut *tx)
    .await?;
    sqlx::query!(
        "INSERT INTO sync_versions (sync_id, version, definition, actor)
         SELECT id, version, definition, $2 FROM syncs WHERE id = $1
         ON CONFLICT (sync_id, version) DO NOTHING",
        id,
        actor.label()
    )
    .execute(&mut *tx)
    .await?;
    let runs = sqlx::query!(
        "UPDATE runs SET workspace_id = $2 WHERE sync_id = $1 AND workspace_id <> $2",
        id,
        workspace
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query!(
        "UPDATE alerts SET workspace_id = $2 WHERE sync_id = $1",
        id,
        workspace
    )
    .execute(&mut *tx)
    .await?;
    let rejected_records = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM rejected_records WHERE sync_id = $1"#,
        id
    )
    .fetch_one(&mut *tx)
    .await? as u64;
    let versions = sqlx::query_scalar!(
        r#"SELECT count(*) AS "n!" FROM sync_versions WHERE sync_id = $1"#,
        id
    )
    .fetch_one(&mut *tx)
    .await? as u64;
    let moved = Moved {
        from,
        to: workspace.to_owned(),
        version,
        runs,
        rejected_records,
        versions,
    };
    record_audit(
        &mut tx,
        actor,
        "move",
        id,
        None,
        serde_json::to_value(&moved).unwrap_or_default(),
    )
    .await?;
    tx.commit().await?;
    Ok(Some(moved))
}

/// Archives one sync (`sync delete`): it never runs again until its file is
/// applied again; its history and ledger stay. Returns false when it was
/// archived already.
pub async fn archive_sync(pool: &PgPool, id: &str, actor: Actor) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let archived = archive_in(&mut tx, &[id.to_owned()], "deleted", actor).await?;
    tx.commit().await?;
    Ok(!archived.is_empty())
}

/// Touches `syncs` and `runs` in one statement: the syncs become archived and
/// their queued runs end `skipped`, so nothing of theirs is left to claim.
/// Each archive is audited with `reason` (`pruned` or `deleted`).
async fn archive_in(
    tx: &mut PgConnection,
    ids: &[String],
    reason: &str,
    actor: Actor,
) -> sqlx::Result<Vec<String>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let archived = sqlx::query_scalar!(
        r#"WITH archived AS (
           UPDATE syncs SET status = 'archived', archived_at = now(), paused_reason = NULL,
                  paused_at = NULL, updated_at = now()
           WHERE id = ANY($1) AND status <> 'archived'
           RETURNING id),
         cancelled AS (
           UPDATE runs SET status = 'skipped', finished_at = now(), failure_code = 'sync_archived',
                  failure_detail = 'the sync was archived before this run started'
           WHERE status = 'queued' AND sync_id IN (SELECT id FROM archived))
         SELECT id AS "id!" FROM archived ORDER BY 1"#,
        ids,
    )
    .fetch_all(&mut *tx)
    .await?;
    for id in &archived {
        record_audit(
            &mut *tx,
            actor,
            "archive",
            id,
            Some(reason),
            serde_json::json!({}),
        )
        .await?;
    }
    Ok(archived)
}

/// A full resync (`sync resync`): the sync's next ledger epoch, so no key of
/// the earlier ones matches and every record is sent once more, and its
/// cursor rewound under a new fence (a run in flight loses its checkpoint and
/// is retried in the new epoch), audited. Returns the new epoch.
pub async fn resync_sync(pool: &PgPool, id: &str, actor: Actor) -> sqlx::Result<i32> {
    let mut tx = pool.begin().await?;
    let epoch: i32 = sqlx::query_scalar!(
        "UPDATE syncs SET ledger_epoch = ledger_epoch + 1, updated_at = now()
         WHERE id = $1 RETURNING ledger_epoch",
        id,
    )
    .fetch_one(&mut *tx)
    .await?;
    let previous = super::cursors::rewind_cursor(&mut tx, id).await?;
    record_audit(
        &mut tx,
        actor,
        "resync",
        id,
        None,
        serde_json::json!({ "epoch": epoch, "previous_cursor": previous }),
    )
    .await?;
    tx.commit().await?;
    Ok(epoch)
}

/// One kept definition.
#[derive(Debug, Clone, Serialize)]
pub struct SyncVersion {
    pub sync_id: String,
    pub version: i32,
    pub definition: Json<serde_json::Value>,
    pub published_at: DateTime<Utc>,
    pub actor: String,
}

pub async fn get_version(
    pool: &PgPool,
    id: &str,
    version: i32,
) -> sqlx::Result<Option<SyncVersion>> {
    sqlx::query_as!(
        SyncVersion,
        r#"SELECT sync_id, version, definition AS "definition: Json<serde_json::Value>",
                  published_at, actor
           FROM sync_versions WHERE sync_id = $1 AND version = $2"#,
        id,
        version,
    )
    .fetch_optional(pool)
    .await
}

/// Every kept version of a sync, newest first.
pub async fn list_versions(pool: &PgPool, id: &str) -> sqlx::Result<Vec<SyncVersion>> {
    sqlx::query_as!(
        SyncVersion,
        r#"SELECT sync_id, version, definition AS "definition: Json<serde_json::Value>",
                  published_at, actor
           FROM sync_versions WHERE sync_id = $1 ORDER BY version DESC"#,
        id,
    )
    .fetch_all(pool)
    .await
}

pub async fn get_sync(pool: &PgPool, id: &str) -> sqlx::Result<Option<SyncRow>> {
    sqlx::query_as!(
        SyncRow,
        r#"SELECT s.id, s.workspace_id, s.definition AS "definition: Json<serde_json::Value>",
                  s.version, s.status AS "status: SyncStatus",
                  s.paused_reason AS "paused_reason: PauseReason", s.paused_note,
                  s.paused_at, s.last_error AS "last_error: Json<serde_json::Value>",
                  s.created_at, s.updated_at, s.changed_at, s.activated_at,
                  nullif(d.next_due_at, '-infinity') AS next_due_at, s.archived_at,
                  s.ledger_epoch
           FROM syncs s LEFT JOIN sync_schedule d ON d.sync_id = s.id WHERE s.id = $1"#,
        id,
    )
    .fetch_optional(pool)
    .await
}

/// A sync's id and current definition.
#[derive(Debug, Clone)]
pub struct StoredDefinition {
    pub id: String,
    pub definition: Json<serde_json::Value>,
}

/// Every sync's id and current definition, archived ones too, by id.
pub async fn all_definitions(pool: &PgPool) -> sqlx::Result<Vec<StoredDefinition>> {
    sqlx::query_as!(
        StoredDefinition,
        r#"SELECT id, definition AS "definition: Json<serde_json::Value>" FROM syncs ORDER BY id"#,
    )
    .fetch_all(pool)
    .await
}

/// Every definition workspace `workspace` has published: its syncs'
/// current ones (archived syncs too) and every kept version that named it,
/// each once. What an erasure for the workspace must reach: the accounts
/// earlier versions wrote to as well.
pub async fn workspace_definitions(
    pool: &PgPool,
    workspace: &str,
) -> sqlx::Result<Vec<StoredDefinition>> {
    sqlx::query_as!(
        StoredDefinition,
        r#"SELECT id AS "id!", definition AS "definition!: Json<serde_json::Value>" FROM (
             SELECT id, definition FROM syncs WHERE workspace_id = $1
             UNION
             SELECT sync_id, definition FROM sync_versions WHERE definition->>'workspace' = $1
           ) d ORDER BY id"#,
        workspace,
    )
    .fetch_all(pool)
    .await
}

/// The workspaces that hold a sync (archived ones included), by id.
pub async fn workspaces_with_syncs(pool: &PgPool) -> sqlx::Result<Vec<String>> {
    sqlx::query_scalar!("SELECT DISTINCT workspace_id FROM syncs ORDER BY workspace_id")
        .fetch_all(pool)
        .await
}

/// Every sync with its latest run and latest success, ordered by workspace and id.
pub async fn list_syncs(pool: &PgPool, workspace: Option<&str>) -> sqlx::Result<Vec<SyncSummary>> {
    sqlx::query_as!(
        SyncSummary,
        r#"SELECT s.id, s.workspace_id, s.version, s.status AS "status: SyncStatus",
                s.paused_reason AS "paused_reason: PauseReason", s.paused_note,
                s.definition->>'schedule' AS schedule,
                last.id AS "last_run_id?", last.status AS "last_run_status?: RunStatus",
                last.finished_at AS "last_run_finished_at?",
                (SELECT max(finished_at) FROM runs
                  WHERE sync_id = s.id AND status = 'succeeded') AS last_success_at,
                (SELECT i.silence FROM deadman_incidents i
                  WHERE i.closed_at IS NULL AND i.workspace_id = s.workspace_id
                    AND (i.scope = 'workspace' OR i.sync_id = s.id)
                  ORDER BY i.id LIMIT 1) AS silence,
                (SELECT nullif(d.next_due_at, '-infinity') FROM sync_schedule d
                  WHERE d.sync_id = s.id) AS next_due_at
         FROM syncs s
         LEFT JOIN LATERAL (SELECT id, status, finished_at FROM runs
                            WHERE sync_id = s.id ORDER BY id DESC LIMIT 1) last ON true
         WHERE ($1::text IS NULL OR s.workspace_id = $1)
         ORDER BY s.workspace_id, s.id"#,
        workspace,
    )
    .fetch_all(pool)
    .await
}

/// Pauses an active sync, with what the person wrote (`note`). Returns false
/// when it was already paused (the reason it already has is kept).
pub async fn pause_sync(
    pool: &PgPool,
    id: &str,
    reason: PauseReason,
    note: Option<&str>,
    actor: Actor,
) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let paused = sqlx::query!(
        "UPDATE syncs SET status = 'paused', paused_reason = $2, paused_note = $3,
                paused_at = now(), updated_at = now()
         WHERE id = $1 AND status = 'active'",
        id,
        reason as _,
        note,
    )
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if paused {
        record_audit(
            &mut tx,
            actor,
            "pause",
            id,
            Some(reason.as_str()),
            serde_json::json!({ "note": note }),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(paused)
}

/// Resumes a paused sync: active again, `changed_at` and `activated_at` now, so
/// the breaker only counts runs from here on. Returns false when it was not paused.
pub async fn resume_sync(pool: &PgPool, id: &str, actor: Actor) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let previous = sqlx::query_scalar!(
        "UPDATE syncs s SET status = 'active', paused_reason = NULL, paused_note = NULL,
                paused_at = NULL,
                changed_at = now(), activated_at = now(), updated_at = now()
         FROM (SELECT id, paused_reason FROM syncs WHERE id = $1 FOR UPDATE) old
         WHERE s.id = old.id AND s.status = 'paused'
         RETURNING old.paused_reason",
        id,
    )
    .fetch_optional(&mut *tx)
    .await?;
    if let Some(previous) = &previous {
        // Armed afresh: the ticks that fell while it was paused are not made up.
        sqlx::query!(
            "UPDATE sync_schedule SET next_due_at = '-infinity' WHERE sync_id = $1",
            id,
        )
        .execute(&mut *tx)
        .await?;
        record_audit(
            &mut tx,
            actor,
            "resume",
            id,
            None,
            serde_json::json!({ "was_paused_for": previous }),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(previous.is_some())
}

/// Why and on what the breaker pauses a sync.
#[derive(Debug, Clone, Copy)]
pub struct Trip<'a> {
    /// When the sync last changed: a sync edited or resumed since is not paused.
    pub changed_at: DateTime<Utc>,
    /// The breaker, or the failure that pauses at once.
    pub reason: PauseReason,
    pub last_error: &'a serde_json::Value,
    /// The failed runs it counted.
    pub run_ids: &'a [i64],
}

/// Pauses the sync for the breaker, only if it is still active and unchanged
/// since `trip.changed_at` (so two daemons trip it once), with the last error
/// and an audit row naming the failed runs, in one transaction. Returns
/// whether this call tripped it.
pub async fn trip_breaker(pool: &PgPool, sync_id: &str, trip: &Trip<'_>) -> sqlx::Result<bool> {
    let mut tx = pool.begin().await?;
    let tripped = sqlx::query!(
        "UPDATE syncs SET status = 'paused', paused_reason = $2, paused_note = NULL, paused_at = now(),
                last_error = $3, updated_at = now()
         WHERE id = $1 AND status = 'active' AND changed_at = $4",
        sync_id,
        trip.reason as _,
        Json(trip.last_error) as _,
        trip.changed_at,
    )
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if tripped {
        record_audit(
            &mut tx,
            Actor::Breaker,
            "pause",
            sync_id,
            Some(trip.reason.as_str()),
            serde_json::json!({ "failed_runs": trip.run_ids }),
        )
        .await?;
    }
    tx.commit().await?;
    Ok(tripped)
}

/// Keeps a failure as the sync's last error.
pub async fn set_last_error(
    pool: &PgPool,
    sync_id: &str,
    last_error: &serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query!(
        "UPDATE syncs SET last_error = $2 WHERE id = $1",
        sync_id,
        Json(last_error) as _,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// The workspace a sync belongs to.
pub async fn workspace_of_sync(pool: &PgPool, sync_id: &str) -> sqlx::Result<Option<String>> {
    sqlx::query_scalar!("SELECT workspace_id FROM syncs WHERE id = $1", sync_id)
        .fetch_optional(pool)
        .await
}

/// What the per-sync gauges of `/metrics` say of one sync, read from the
/// store, so every process (and a run in a foreground command) counts.
#[derive(Debug, Clone)]
pub struct SyncHealth {
    pub id: String,
    pub workspace_id: String,
    pub status: SyncStatus,
    pub paused_reason: Option<PauseReason>,
    /// When it was last made active (published, resumed).
    pub activated_at: Option<DateTime<Utc>>,
    pub last_success_at: Option<DateTime<Utc>>,
    /// Failed runs since its last success.
    pub failure_streak: i64,
    /// Times the breaker paused it (within the audit log's retention).
    pub breaker_trips: i64,
}

/// Every sync's health, archived ones too (their state says so).
pub async fn sync_health(pool: &PgPool) -> sqlx::Result<Vec<SyncHealth>> {
    sqlx::query_as!(
        SyncHealth,
        r#"SELECT s.id, s.workspace_id, s.status AS "status: SyncStatus",
                s.paused_reason AS "paused_reason: PauseReason", s.activated_at, ok.last_success_at,
                (SELECT count(*) FROM runs r
                  WHERE r.sync_id = s.id AND r.status = 'failed'
                    AND r.finished_at > coalesce(ok.last_success_at, '-infinity'))
                  AS "failure_streak!",
                (SELECT count(*) FROM audit_log a
                  WHERE a.sync_id = s.id AND a.action = 'pause' AND a.actor = 'breaker')
                  AS "breaker_trips!"
         FROM syncs s
         LEFT JOIN LATERAL (SELECT max(finished_at) AS last_success_at FROM runs
                            WHERE sync_id = s.id AND status = 'succeeded') ok ON true
         ORDER BY s.id"#,
    )
    .fetch_all(pool)
    .await
}
