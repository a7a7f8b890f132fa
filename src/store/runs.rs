//! Runs: the queue and the history.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;
use sqlx::types::Json;

use super::audit::{Actor, record_audit};
use super::compose::composed;
use super::deadman::IncidentRow;
use crate::failure::FailureCode;
use crate::states::{RunStatus, RunTrigger};

/// A run as stored.
#[derive(Debug, Clone, Serialize)]
pub struct RunRow {
    pub id: i64,
    pub sync_id: String,
    pub workspace_id: String,
    pub sync_version: i32,
    /// The sync's ledger epoch the run keys its records in (set at its claim).
    pub ledger_epoch: i32,
    pub status: RunStatus,
    pub trigger: RunTrigger,
    pub attempt: i32,
    pub max_attempts: i32,
    pub created_at: DateTime<Utc>,
    pub scheduled_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub heartbeat_at: Option<DateTime<Utc>>,
    pub worker_id: Option<String>,
    pub boot_id: Option<uuid::Uuid>,
    #[serde(skip)]
    pub lease_token: Option<String>,
    pub fence: Option<i64>,
    pub cursor_start: Option<Json<serde_json::Value>>,
    pub cursor_end: Option<Json<serde_json::Value>>,
    pub records_read: i64,
    pub records_written: i64,
    pub records_replayed: i64,
    pub records_rejected: i64,
    pub records_resent: i64,
    /// Pages checkpointed so far.
    pub pages: i32,
    pub failure_code: Option<String>,
    pub failure_detail: Option<String>,
    /// The account request slot the run reserved before it gave its worker
    /// back (`RunOutcome::Deferred`): its first request leaves then.
    pub slot_at: Option<DateTime<Utc>>,
}

impl RunRow {
    /// The counts recorded so far.
    pub fn counts(&self) -> RunCounts {
        RunCounts {
            read: self.records_read,
            written: self.records_written,
            replayed: self.records_replayed,
            rejected: self.records_rejected,
            resent: self.records_resent,
        }
    }
}

/// `sqlx::query_as!(RunRow, …)` with a run's columns (what `RunRow` reads)
/// between `$head` and `$tail` (or another sqlx macro, named first).
/// `query_as!` reads only string literals, so the list lives here once. Each
/// column says whether it is nullable (`!` no, `?` yes): read from a CTE, a
/// column's nullability is only guessed.
macro_rules! query_runs {
    ($kind:ident $($row:ident)?, $head:tt, $tail:tt $($args:tt)*) => {
        sqlx::$kind!(
            $($row,)?
            $head
                + r#"id AS "id!", sync_id AS "sync_id!", workspace_id AS "workspace_id!",
                     sync_version AS "sync_version!", ledger_epoch AS "ledger_epoch!",
                     status AS "status!: RunStatus", trigger AS "trigger!: RunTrigger",
                     attempt AS "attempt!", max_attempts AS "max_attempts!",
                     created_at AS "created_at!", scheduled_at AS "scheduled_at!",
                     started_at AS "started_at?", finished_at AS "finished_at?",
                     heartbeat_at AS "heartbeat_at?", worker_id AS "worker_id?",
                     boot_id AS "boot_id?", lease_token AS "lease_token?", fence AS "fence?",
                     cursor_start AS "cursor_start?: Json<serde_json::Value>",
                     cursor_end AS "cursor_end?: Json<serde_json::Value>",
                     records_read AS "records_read!", records_written AS "records_written!",
                     records_replayed AS "records_replayed!",
                     records_rejected AS "records_rejected!",
                     records_resent AS "records_resent!", pages AS "pages!",
                     failure_code AS "failure_code?", failure_detail AS "failure_detail?",
                     slot_at AS "slot_at?""#
                + $tail
                $($args)*
        )
    };
    ($head:tt, $tail:tt $($args:tt)*) => {
        query_runs!(query_as RunRow, $head, $tail $($args)*)
    };
}

/// One entry of a run's timeline.
#[derive(Debug, Clone, Serialize)]
pub struct RunEventRow {
    pub id: i64,
    pub run_id: i64,
    pub at: DateTime<Utc>,
    pub kind: String,
    pub detail: Json<serde_json::Value>,
}

/// Newest runs first, of one sync or of all.
/// Which runs a listing shows (every condition given must hold), and how
/// many at most.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunFilter<'a> {
    pub sync: Option<&'a str>,
    /// Only runs of the syncs this workspace holds now (a workspace
    /// token's scope; a moved sync's runs go with it).
    pub seen_by: Option<&'a str>,
    pub workspace: Option<&'a str>,
    pub status: Option<&'a str>,
    /// Queued at or after this time.
    pub since: Option<DateTime<Utc>>,
    pub limit: i64,
}

/// Newest runs first, as `filter` says.
pub async fn list_runs(pool: &PgPool, filter: &RunFilter<'_>) -> sqlx::Result<Vec<RunRow>> {
    query_runs!(
        "SELECT ",
        " FROM runs
         WHERE ($1::text IS NULL OR sync_id = $1)
           AND ($2::text IS NULL OR sync_id IN (SELECT id FROM syncs WHERE workspace_id = $2))
           AND ($3::text IS NULL OR workspace_id = $3) AND ($4::text IS NULL OR status = $4)
           AND ($5::timestamptz IS NULL OR created_at >= $5)
         ORDER BY id DESC LIMIT $6",
        filter.sync,
        filter.seen_by,
        filter.workspace,
        filter.status,
        filter.since,
        filter.limit,
    )
    .fetch_all(pool)
    .await
}

pub async fn get_run(pool: &PgPool, id: i64) -> sqlx::Result<Option<RunRow>> {
    query_runs!("SELECT ", " FROM runs WHERE id = $1", id)
        .fetch_optional(pool)
        .await
}

pub async fn list_run_events(pool: &PgPool, run_id: i64) -> sqlx::Result<Vec<RunEventRow>> {
    sqlx::query_as!(
        RunEventRow,
        r#"SELECT id, run_id, at, kind, detail AS "detail: Json<serde_json::Value>"
           FROM run_events WHERE run_id = $1 ORDER BY id"#,
        run_id,
    )
    .fetch_all(pool)
    .await
}

/// The source notices (`source_notice` events, e.g. Shopify serving another
/// API version than the pinned one) of the sync's latest started run: shown
/// on the sync's page until a run goes without them.
pub async fn latest_source_notices(pool: &PgPool, sync_id: &str) -> sqlx::Result<Vec<RunEventRow>> {
    sqlx::query_as!(
        RunEventRow,
        r#"SELECT id, run_id, at, kind, detail AS "detail: Json<serde_json::Value>"
           FROM run_events WHERE kind = 'source_notice' AND run_id =
             (SELECT id FROM runs WHERE sync_id = $1 AND started_at IS NOT NULL
               ORDER BY id DESC LIMIT 1)
           ORDER BY id"#,
        sync_id,
    )
    .fetch_all(pool)
    .await
}

/// Counts a run accumulates, written after each batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RunCounts {
    pub read: i64,
    pub written: i64,
    pub replayed: i64,
    pub rejected: i64,
    pub resent: i64,
}

/// Who executes a run: the worker's name and its daemon's boot id.
#[derive(Debug, Clone)]
pub struct Executor {
    pub worker_id: String,
    pub boot_id: uuid::Uuid,
}

/// Creates a run already claimed by `executor` (attempt 1 spent at once): the
/// entry point of `sync run --foreground`, which runs it in-process.
pub async fn create_claimed_run(
    pool: &PgPool,
    sync_id: &str,
    trigger: RunTrigger,
    max_attempts: i32,
    executor: &Executor,
) -> sqlx::Result<RunRow> {
    query_runs!(
        "INSERT INTO runs (sync_id, workspace_id, sync_version, ledger_epoch, trigger, max_attempts,
                           status, attempt, started_at, heartbeat_at, worker_id, boot_id)
         SELECT id, workspace_id, version, ledger_epoch, $2, $3, 'running', 1, now(), now(), $4, $5
         FROM syncs WHERE id = $1
         RETURNING ",
        "",
        sync_id,
        trigger as _,
        max_attempts,
        &executor.worker_id,
        executor.boot_id,
    )
    .fetch_one(pool)
    .await
}

/// What a run that took its sync's lease records: the run, its sync and the
/// lease's value.
#[derive(Debug, Clone)]
pub struct LeaseStart {
    pub run_id: i64,
    pub sync_id: String,
    pub lease_value: String,
}

/// Runs that took their syncs' leases: for each, issues the next fence,
/// records the lease and the starting cursor on the run (with a `lease` event)
/// and returns the fence and the saved cursor. Several runs (of different
/// syncs) in one statement, one round trip; answers in request order.
///
/// Postgres is the second judge of who runs a sync (guarantee 3): a run whose
/// sync has another run `running` under a live process (`processes`, fresh
/// heartbeat) gets no fence, whatever Redis said: `None`.
pub async fn begin_leased_runs(
    pool: &PgPool,
    starts: &[LeaseStart],
) -> sqlx::Result<Vec<Option<(i64, Option<serde_json::Value>)>>> {
    let rows = composed!(query [
        "WITH want AS (
           SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[]) AS w(run_id, sync_id, lease_value)),
         free AS (
           SELECT w.* FROM want w WHERE NOT EXISTS (
             SELECT 1 FROM runs r JOIN processes p ON p.boot_id = r.boot_id
             WHERE r.sync_id = w.sync_id AND r.status = 'running' AND r.id <> w.run_id
               AND p.heartbeat_at > now() - make_interval(secs => p.liveness_ttl_ms / 1000.0))),
         f AS (",
        issue_fence!(from: "free"),
        " RETURNING sync_id, fence_issued, cursor),
         held AS (
           UPDATE runs SET lease_token = w.lease_value, fence = f.fence_issued, cursor_start = f.cursor,
                  cursor_end = f.cursor, heartbeat_at = now()
           FROM free w JOIN f USING (sync_id) WHERE runs.id = w.run_id
           RETURNING runs.id, f.fence_issued),
         event AS (
           INSERT INTO run_events (run_id, kind, detail)
           SELECT id, 'lease', jsonb_build_object('fence', fence_issued) FROM held)
         SELECT w.run_id AS \"run_id!\", f.fence_issued AS fence,
                f.cursor AS \"cursor: Json<serde_json::Value>\"
         FROM want w LEFT JOIN f USING (sync_id)",
    ],
        &starts.iter().map(|s| s.run_id).collect::<Vec<_>>(),
        &starts.iter().map(|s| s.sync_id.as_str()).collect::<Vec<_>>() as _,
        &starts.iter().map(|s| s.lease_value.as_str()).collect::<Vec<_>>() as _,
    )
    .fetch_all(pool)
    .await?;
    let mut answers: std::collections::HashMap<i64, Option<(i64, Option<serde_json::Value>)>> =
        rows.into_iter()
            .map(|r| (r.run_id, r.fence.map(|f| (f, r.cursor.map(|c| c.0)))))
            .collect();
    starts
        .iter()
        .map(|s| {
            answers
                .remove(&s.run_id)
                .ok_or_else(|| sqlx::Error::RowNotFound)
        })
        .collect()
}

/// The one answer of a one-request group.
fn one<T>(mut answers: Vec<T>) -> sqlx::Result<T> {
    answers.pop().ok_or(sqlx::Error::RowNotFound)
}

/// The run proved itself alive (its lease was renewed).
pub async fn touch_heartbeat(pool: &PgPool, run_id: i64) -> sqlx::Result<()> {
    sqlx::query!("UPDATE runs SET heartbeat_at = now() WHERE id = $1", run_id)
        .execute(pool)
        .await?;
    Ok(())
}

/// How a run ends: `finish_run`'s arguments, owned, for `finish_runs`.
#[derive(Debug, Clone)]
pub struct Finish {
    pub run_id: i64,
    /// The claim the caller saw (`RunRow::started_at`).
    pub started_at: Option<DateTime<Utc>>,
    pub status: RunStatus,
    pub counts: RunCounts,
    /// Failure code and detail.
    pub failure: Option<(String, String)>,
    /// The detail of the timeline event.
    pub event: serde_json::Value,
}

/// Ends a run: `succeeded`, `failed` or `skipped`, with its final counts —
/// only if it is still in the claim `run` describes (same `started_at`): a
/// caller working from an old view (a sweeper that saw a claim which has since
/// been put back and claimed again) changes nothing. The end goes into the
/// run's timeline (kind = `status`, with `event` as its detail) in the same
/// statement. A success also closes the open dead-man incidents of the sync
/// and its workspace, still in that statement. Returns `None` when the run
/// was not in that claim any more, else the incidents it closed.
pub async fn finish_run(
    pool: &PgPool,
    run: &RunRow,
    status: RunStatus,
    counts: &RunCounts,
    failure: Option<(&str, &str)>,
    event: &serde_json::Value,
) -> sqlx::Result<Option<Vec<IncidentRow>>> {
    let finish = Finish {
        run_id: run.id,
        started_at: run.started_at,
        status,
        counts: *counts,
        failure: failure.map(|(code, detail)| (code.to_owned(), detail.to_owned())),
        event: event.clone(),
    };
    one(finish_runs(pool, &[finish]).await?)
}

/// `finish_run` for several runs in one statement; answers in request order.
/// An incident that two successes of one group would close is closed (and
/// reported) once.
pub async fn finish_runs(
    pool: &PgPool,
    finishes: &[Finish],
) -> sqlx::Result<Vec<Option<Vec<IncidentRow>>>> {
    let rows = sqlx::query!(
        r#"WITH want AS (
           SELECT * FROM unnest($1::bigint[], $2::text[], $3::int8[], $4::int8[], $5::int8[], $6::int8[],
                                $7::int8[], $8::text[], $9::text[], $10::timestamptz[], $11::jsonb[])
             AS w(id, status, read, written, replayed, rejected, resent, failure_code, failure_detail,
                  started_at, event)),
         ended AS (
           UPDATE runs r SET status = w.status, finished_at = now(), records_read = w.read,
                  records_written = w.written, records_replayed = w.replayed,
                  records_rejected = w.rejected, records_resent = w.resent,
                  failure_code = w.failure_code, failure_detail = w.failure_detail
           FROM want w
           WHERE r.id = w.id AND r.status = 'running' AND r.started_at IS NOT DISTINCT FROM w.started_at
           RETURNING r.id, r.workspace_id, r.sync_id, r.status, w.event),
         event AS (
           INSERT INTO run_events (run_id, kind, detail) SELECT id, status, event FROM ended),
         closed AS (
           UPDATE deadman_incidents i SET closed_at = now()
           FROM ended e
           WHERE e.status = 'succeeded' AND i.closed_at IS NULL AND i.workspace_id = e.workspace_id
             AND (i.scope = 'workspace' OR i.sync_id = e.sync_id)
           RETURNING i.*, e.id AS closed_by)
         SELECT e.id AS "id!",
                coalesce((SELECT jsonb_agg(to_jsonb(c) - 'closed_by') FROM closed c
                          WHERE c.closed_by = e.id), '[]'::jsonb) AS "closed!: Json<Vec<IncidentRow>>"
         FROM ended e"#,
        &finishes.iter().map(|f| f.run_id).collect::<Vec<_>>(),
        &finishes.iter().map(|f| f.status.as_str()).collect::<Vec<_>>() as _,
        &finishes.iter().map(|f| f.counts.read).collect::<Vec<_>>(),
        &finishes.iter().map(|f| f.counts.written).collect::<Vec<_>>(),
        &finishes.iter().map(|f| f.counts.replayed).collect::<Vec<_>>(),
        &finishes.iter().map(|f| f.counts.rejected).collect::<Vec<_>>(),
        &finishes.iter().map(|f| f.counts.resent).collect::<Vec<_>>(),
        &finishes.iter().map(|f| f.failure.as_ref().map(|x| x.0.as_str())).collect::<Vec<_>>() as _,
        &finishes.iter().map(|f| f.failure.as_ref().map(|x| x.1.as_str())).collect::<Vec<_>>() as _,
        &finishes.iter().map(|f| f.started_at).collect::<Vec<_>>() as _,
        &finishes.iter().map(|f| Json(&f.event)).collect::<Vec<_>>() as _,
    )
    .fetch_all(pool)
    .await?;
    let mut closed: std::collections::HashMap<i64, Vec<IncidentRow>> =
        rows.into_iter().map(|e| (e.id, e.closed.0)).collect();
    Ok(finishes.iter().map(|f| closed.remove(&f.run_id)).collect())
}

/// Appends to a run's timeline.
pub async fn add_run_event(
    pool: &PgPool,
    run_id: i64,
    kind: &str,
    detail: serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO run_events (run_id, kind, detail) VALUES ($1, $2, $3)",
        run_id,
        kind,
        Json(detail) as _,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Puts a run of the sync in the queue, due now. The queue holds one queued run
/// per sync: if one is already there, its id comes back instead.
pub async fn enqueue_run(
    pool: &PgPool,
    sync_id: &str,
    trigger: RunTrigger,
    max_attempts: i32,
) -> sqlx::Result<(i64, bool)> {
    let inserted = sqlx::query_scalar!(
        "INSERT INTO runs (sync_id, workspace_id, sync_version, trigger, max_attempts)
         SELECT id, workspace_id, version, $2, $3 FROM syncs WHERE id = $1
         ON CONFLICT (sync_id) WHERE status = 'queued' AND sync_id IS NOT NULL DO NOTHING
         RETURNING id",
        sync_id,
        trigger as _,
        max_attempts,
    )
    .fetch_optional(pool)
    .await?;
    if let Some(id) = inserted {
        return Ok((id, true));
    }
    let existing = sqlx::query_scalar!(
        "SELECT id FROM runs WHERE sync_id = $1 AND status = 'queued'",
        sync_id,
    )
    .fetch_one(pool)
    .await?;
    Ok((existing, false))
}

/// A claimed run with its sync's stored definition (absent if the sync is gone).
#[derive(Debug, Clone)]
pub struct ClaimedRun {
    pub run: RunRow,
    pub sync_definition: Option<Json<serde_json::Value>>,
    /// The sync is paused: the run ends skipped unless it was forced.
    pub sync_paused: Option<bool>,
    /// The sync is archived: the run ends skipped.
    pub sync_archived: Option<bool>,
}

/// Claims the oldest due queued run for `executor`: one short transaction that
/// sets it `running` and spends an attempt before anything external happens.
pub async fn claim_next_run(
    pool: &PgPool,
    executor: &Executor,
) -> sqlx::Result<Option<ClaimedRun>> {
    one(claim_runs(pool, std::slice::from_ref(executor)).await?)
}

/// `claim_next_run` for several executors in one statement, fair across
/// workspaces: each workspace's oldest due runs take turns (first every
/// workspace's oldest, then every second oldest, ...), and among equals the
/// workspace served longest ago (whose last claim is oldest) goes first. So
/// a workspace's backlog delays another workspace's due run by at most one
/// run per worker. One each, in request order; `None` for those left over
/// when fewer runs are due.
pub async fn claim_runs(
    pool: &PgPool,
    executors: &[Executor],
) -> sqlx::Result<Vec<Option<ClaimedRun>>> {
    // One statement, so one round trip and one commit. Workspaces are
    // walked in their fairness order (`served_at`, which the claim stamps),
    // each probed by one look at its queue's index, until enough have a due
    // run (a semi-join let stale statistics scan every due run: 28 of a
    // claim's 35 ms with 10,000 queued; reading each workspace's running
    // and finished runs to order them was most of a claim's time in a burst).
    // Only the workspaces whose turn it is are locked in: as many as the
    // executors, with a margin for rows a concurrent claim holds (locking a
    // row in every workspace cost a WAL record each). Each workspace's inner
    // query keeps its LIMIT honoured under SKIP LOCKED (crates.io worker
    // style; a concurrent claim's rows are passed over, not counted),
    // the runs are ranked and numbered outside it (a window cannot sit beside
    // FOR UPDATE) to pair each with an executor; rows locked but not taken
    // are free again at the commit. The claims, their workspaces' turn and
    // their timeline events commit together, and each sync's definition
    // comes along. A workspace another claim is stamping is left to it (no
    // wait, no deadlock); NO KEY UPDATE lets runs and syncs be inserted
    // for it meanwhile.
    let rows = query_runs!(
        query,
        "WITH want AS (
           SELECT * FROM unnest($1::text[], $2::uuid[]) WITH ORDINALITY AS w(worker_id, boot_id, slot)),
         due AS MATERIALIZED (
           SELECT ws.id, ws.served_at AS served
           FROM (SELECT id, served_at FROM workspaces ORDER BY served_at NULLS FIRST, id OFFSET 0) ws
           WHERE (SELECT true FROM runs
                  WHERE workspace_id = ws.id AND status = 'queued' AND scheduled_at <= now()
                  LIMIT 1)
           LIMIT 2 * $3 + 8),
         share AS (SELECT ceil($3::float8 / greatest(count(*), 1))::bigint AS n FROM due),
         heads AS (
           SELECT q.id, q.scheduled_at, due.served,
                  row_number() OVER (PARTITION BY due.id ORDER BY q.scheduled_at, q.id) AS rank
           FROM due CROSS JOIN share
           CROSS JOIN LATERAL (
             SELECT id, scheduled_at FROM runs
             WHERE workspace_id = due.id AND status = 'queued' AND scheduled_at <= now()
             ORDER BY scheduled_at, id LIMIT share.n FOR UPDATE SKIP LOCKED) q),
         next AS (
           SELECT id, row_number() OVER (ORDER BY rank, served NULLS FIRST, scheduled_at, id) AS slot
           FROM heads ORDER BY rank, served NULLS FIRST, scheduled_at, id LIMIT $3),
         claimed AS (
           UPDATE runs r SET status = 'running', attempt = r.attempt + 1, started_at = now(),
                  heartbeat_at = now(), worker_id = w.worker_id, boot_id = w.boot_id,
                  lease_token = NULL, finished_at = NULL,
                  -- What it runs with: the definition and ledger epoch of now,
                  -- whatever they were when it was queued.
                  sync_version = s.version, ledger_epoch = s.ledger_epoch
           FROM next JOIN want w USING (slot), syncs s WHERE r.id = next.id AND s.id = r.sync_id
           RETURNING r.*, w.slot),
         served AS (
           UPDATE workspaces ws SET served_at = now()
           FROM (SELECT id FROM workspaces WHERE id IN (SELECT workspace_id FROM claimed)
                 FOR NO KEY UPDATE SKIP LOCKED) turn
           WHERE ws.id = turn.id),
         event AS (
           INSERT INTO run_events (run_id, kind, detail)
           SELECT id, 'claimed', jsonb_build_object('attempt', attempt, 'worker', worker_id) FROM claimed)
         SELECT ",
        r#", sync_definition AS "sync_definition?: Json<serde_json::Value>",
             sync_paused AS "sync_paused?", sync_archived AS "sync_archived?", slot AS "slot!"
         FROM (SELECT c.*, s.definition AS sync_definition, s.status = 'paused' AS sync_paused,
                      s.status = 'archived' AS sync_archived
               FROM claimed c LEFT JOIN syncs s ON s.id = c.sync_id) AS c"#,
        &executors.iter().map(|e| e.worker_id.as_str()).collect::<Vec<_>>() as _,
        &executors.iter().map(|e| e.boot_id).collect::<Vec<_>>(),
        i32::try_from(executors.len()).unwrap_or(i32::MAX),
    )
    .fetch_all(pool)
    .await?;
    let mut answers: Vec<Option<ClaimedRun>> = executors.iter().map(|_| None).collect();
    for r in rows {
        let Some(answer) = usize::try_from(r.slot - 1)
            .ok()
            .and_then(|i| answers.get_mut(i))
        else {
            continue;
        };
        let run = RunRow {
            id: r.id,
            sync_id: r.sync_id,
            workspace_id: r.workspace_id,
            sync_version: r.sync_version,
            ledger_epoch: r.ledger_epoch,
            status: r.status,
            trigger: r.trigger,
            attempt: r.attempt,
            max_attempts: r.max_attempts,
            created_at: r.created_at,
            scheduled_at: r.scheduled_at,
            started_at: r.started_at,
            finished_at: r.finished_at,
            heartbeat_at: r.heartbeat_at,
            worker_id: r.worker_id,
            boot_id: r.boot_id,
            lease_token: r.lease_token,
            fence: r.fence,
            cursor_start: r.cursor_start,
            cursor_end: r.cursor_end,
            records_read: r.records_read,
            records_written: r.records_written,
            records_replayed: r.records_replayed,
            records_rejected: r.records_rejected,
            records_resent: r.records_resent,
            pages: r.pages,
            failure_code: r.failure_code,
            failure_detail: r.failure_detail,
            slot_at: r.slot_at,
        };
        *answer = Some(ClaimedRun {
            run,
            sync_definition: r.sync_definition,
            sync_paused: r.sync_paused,
            sync_archived: r.sync_archived,
        });
    }
    Ok(answers)
}

/// How a run goes back in the queue.
#[derive(Debug, Clone, Copy)]
pub struct Requeue<'a> {
    /// Due this long from now.
    pub due_in: std::time::Duration,
    /// The attempt it spent is returned (a clean stop at a batch boundary,
    /// or a wait for its account, is not a failed attempt).
    pub give_back_attempt: bool,
    pub trigger: RunTrigger,
    /// Why, on the run's timeline.
    pub reason: &'a str,
    /// The account slot it reserved, this long from now (`runs.slot_at`).
    pub slot_in: Option<std::time::Duration>,
}

/// Puts a running run back in the queue with the counts it reached. A queued
/// run of the same sync that appeared meanwhile (the schedule's) is merged
/// into this one: it ends `skipped`, so the queue keeps one queued run per
/// sync. Like `finish_run`, it acts only on the claim `run` describes;
/// returns whether it did.
pub async fn requeue_run(
    pool: &PgPool,
    run: &RunRow,
    counts: &RunCounts,
    requeue: Requeue<'_>,
) -> sqlx::Result<bool> {
    let Requeue {
        due_in,
        give_back_attempt,
        trigger,
        reason,
        slot_in,
    } = requeue;
    let mut tx = pool.begin().await?;
    sqlx::query!(
        "UPDATE runs SET status = 'skipped', finished_at = now(),
                failure_detail = 'merged into run ' || $1::bigint || ', which was put back in the queue'
         WHERE status = 'queued' AND sync_id = (SELECT sync_id FROM runs WHERE id = $1)
           AND EXISTS (SELECT 1 FROM runs WHERE id = $1 AND status = 'running'
                         AND started_at IS NOT DISTINCT FROM $2)",
        run.id,
        run.started_at,
    )
    .execute(&mut *tx)
    .await?;
    let requeued = sqlx::query!(
        "UPDATE runs SET status = 'queued', trigger = $2,
                attempt = CASE WHEN $3 THEN greatest(attempt - 1, 0) ELSE attempt END,
                scheduled_at = now() + make_interval(secs => $4), worker_id = NULL, boot_id = NULL,
                lease_token = NULL, records_read = $5, records_written = $6, records_replayed = $7,
                records_rejected = $8, records_resent = $9,
                slot_at = now() + make_interval(secs => $11)
         WHERE id = $1 AND status = 'running' AND started_at IS NOT DISTINCT FROM $10",
        run.id,
        trigger as _,
        give_back_attempt,
        due_in.as_secs_f64(),
        counts.read,
        counts.written,
        counts.replayed,
        counts.rejected,
        counts.resent,
        run.started_at,
        slot_in.map(|d| d.as_secs_f64()),
    )
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if requeued {
        let detail = serde_json::json!({
            "trigger": trigger, "reason": reason, "due_in_s": due_in.as_secs_f64(),
        });
        sqlx::query!(
            "INSERT INTO run_events (run_id, kind, detail) VALUES ($1, 'requeued', $2)",
            run.id,
            Json(detail) as _,
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(requeued)
}

/// `running` runs started before `started_before` (candidates for the
/// sweeper), of the syncs workspace `seen_by` holds only when given.
pub async fn running_runs(
    pool: &PgPool,
    started_before: Option<chrono::DateTime<chrono::Utc>>,
    seen_by: Option<&str>,
) -> sqlx::Result<Vec<RunRow>> {
    query_runs!(
        "SELECT ",
        " FROM runs WHERE status = 'running' AND ($1::timestamptz IS NULL OR started_at < $1)
            AND ($2::text IS NULL OR sync_id IN (SELECT id FROM syncs WHERE workspace_id = $2))
          ORDER BY id",
        started_before,
        seen_by,
    )
    .fetch_all(pool)
    .await
}

/// Records a run that failed before it reached the queue (the schedule could
/// not build it): the failure is counted like any other.
pub async fn record_failed_enqueue(
    pool: &PgPool,
    sync_id: &str,
    trigger: RunTrigger,
    code: &str,
    detail: &str,
) -> sqlx::Result<i64> {
    sqlx::query_scalar!(
        "INSERT INTO runs (sync_id, workspace_id, sync_version, trigger, max_attempts, status, attempt,
                           finished_at, failure_code, failure_detail)
         SELECT id, workspace_id, version, $2, 1, 'failed', 0, now(), $3, $4 FROM syncs WHERE id = $1
         RETURNING id",
        sync_id,
        trigger as _,
        code,
        detail,
    )
    .fetch_one(pool)
    .await
}

/// The last `limit` finished runs (succeeded or failed; skipped ones do not
/// count) of a sync that finished after `since`, newest first.
pub async fn last_finished_runs(
    pool: &PgPool,
    sync_id: &str,
    since: DateTime<Utc>,
    limit: i64,
) -> sqlx::Result<Vec<RunRow>> {
    query_runs!(
        "SELECT ",
        " FROM runs WHERE sync_id = $1 AND status IN ('succeeded', 'failed') AND finished_at > $2
          ORDER BY finished_at DESC, id DESC LIMIT $3",
        sync_id,
        since,
        limit,
    )
    .fetch_all(pool)
    .await
}

/// Queued runs, and how long the oldest due one has waited (seconds).
pub async fn queue_stats(pool: &PgPool) -> sqlx::Result<(i64, f64)> {
    let stats = sqlx::query!(
        r#"SELECT count(*) AS "queued!",
                  coalesce(extract(epoch FROM now() - min(scheduled_at)
                                   FILTER (WHERE scheduled_at <= now())), 0)::float8 AS "waited!"
           FROM runs WHERE status = 'queued'"#,
    )
    .fetch_one(pool)
    .await?;
    Ok((stats.queued, stats.waited))
}

/// The workspace a run belongs to.
pub async fn workspace_of_run(pool: &PgPool, run_id: i64) -> sqlx::Result<Option<String>> {
    // The sync's workspace now, not the one recorded when the run was
    // queued: a sync that moved takes its history along.
    sqlx::query_scalar!(
        "SELECT s.workspace_id FROM runs r JOIN syncs s ON s.id = r.sync_id WHERE r.id = $1",
        run_id,
    )
    .fetch_optional(pool)
    .await
}

/// What `runs cancel` did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cancel {
    /// It was queued: ended now, `skipped` (`run_cancelled`), nothing read.
    Ended,
    /// It is running: it stops at its next checkpoint, ended the same way.
    Requested,
    /// It had ended already, as this.
    AlreadyEnded(RunStatus),
}

/// Cancels run `id` for `actor` (recorded in the audit log and the run's
/// timeline): a queued run ends at once, a running one is asked to stop
/// at its next checkpoint (`checkpoint::record_clean_page` answers it).
pub async fn cancel_run(pool: &PgPool, id: i64, actor: Actor) -> sqlx::Result<Option<Cancel>> {
    let mut tx = pool.begin().await?;
    let Some(found) = sqlx::query!(
        r#"SELECT sync_id, status AS "status: RunStatus" FROM runs WHERE id = $1 FOR UPDATE"#,
        id,
    )
    .fetch_optional(&mut *tx)
    .await?
    else {
        return Ok(None);
    };
    let (sync_id, status) = (found.sync_id, found.status);
    let done = match status {
        RunStatus::Queued => {
            sqlx::query!(
                "UPDATE runs SET status = 'skipped', failure_code = 'run_cancelled',
                        failure_detail = $2, finished_at = now()
                 WHERE id = $1",
                id,
                FailureCode::RunCancelled.what_happened(),
            )
            .execute(&mut *tx)
            .await?;
            Cancel::Ended
        }
        RunStatus::Running => {
            sqlx::query!(
                "UPDATE runs SET cancel_requested_at = coalesce(cancel_requested_at, now())
                 WHERE id = $1",
                id,
            )
            .execute(&mut *tx)
            .await?;
            Cancel::Requested
        }
        _ => return Ok(Some(Cancel::AlreadyEnded(status))),
    };
    let kind = match done {
        Cancel::Ended => "cancelled",
        _ => "cancel_requested",
    };
    sqlx::query!(
        "INSERT INTO run_events (run_id, kind, detail) VALUES ($1, $2, $3)",
        id,
        kind,
        Json(serde_json::json!({ "by": actor.label() })) as _,
    )
    .execute(&mut *tx)
    .await?;
    record_audit(
        &mut tx,
        actor,
        "cancel_run",
        &sync_id,
        None,
        serde_json::json!({ "run": id, "was": status }),
    )
    .await?;
    tx.commit().await?;
    Ok(Some(done))
}
