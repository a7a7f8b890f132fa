//! Group commit for the run queue's statements: the claims, lease starts and
//! finishes that a daemon's workers ask for at the same moment go to Postgres
//! as one statement, so one round trip and one commit serve them all.
//!
//! A request goes out when no statement of its kind is in flight, and the
//! requests that arrive while one is become the next group; in a daemon of
//! many workers, claims alone wait `CLAIM_LINGER` first for the workers
//! freed meanwhile (see there). Every caller still waits for its own
//! statement's commit, so what a crash can lose is what it could lose
//! without grouping.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use sqlx::PgPool;
use tokio::sync::{mpsc, oneshot};

use super::deadman::IncidentRow;
use super::runs::{self, ClaimedRun, Executor, Finish, LeaseStart};

/// Most requests one statement carries.
const MOST_PER_GROUP: usize = 64;

/// How long a claim waits for other workers' claims to go out with it, in
/// a daemon of at least `LINGER_FROM_WORKERS` workers: as long as the claim
/// before it took, within these bounds. A claim costs Postgres about the
/// same for one worker as for sixteen (its planning and its walk of the
/// workspaces), and in a burst the workers free up one by one: without the
/// wait a claim carried 1.3 workers on average and the claims were two
/// thirds of Postgres's time (fleet bench, 2026-12-04). A slow claim means a
/// busy server, where gathering more saves the most; a fixed 10 ms wait
/// gained there but cost one daemon of 16 workers a third of its runs a
/// second (run-queue bench, 2026-12-05). With few workers there is little to
/// gather, and the wait is added to each run's start (run-queue bench at 4
/// workers: no gain).
const CLAIM_LINGER: Linger = Linger {
    least: std::time::Duration::from_millis(2),
    most: std::time::Duration::from_millis(10),
};
const LINGER_FROM_WORKERS: usize = 16;

/// The wait of a group for more requests: as long as the statement before
/// it took, from `least` to `most`.
#[derive(Debug, Clone, Copy)]
struct Linger {
    least: std::time::Duration,
    most: std::time::Duration,
}

type Reply<T> = oneshot::Sender<sqlx::Result<T>>;
type GroupFuture<T> = Pin<Box<dyn Future<Output = sqlx::Result<Vec<T>>> + Send>>;
type GroupStatement<Req, Resp> = Arc<dyn Fn(PgPool, Vec<Req>) -> GroupFuture<Resp> + Send + Sync>;

/// Requests of one kind, sent as groups by a task of their own, one statement
/// at a time: what arrives meanwhile waits and goes out as the next group
/// (measured: allowing two in flight made the groups so small that grouping
/// gained nothing). The task ends when the last handle is dropped.
struct Grouped<Req, Resp> {
    requests: mpsc::UnboundedSender<(Req, Reply<Resp>)>,
}

impl<Req, Resp> Clone for Grouped<Req, Resp> {
    fn clone(&self) -> Self {
        Self {
            requests: self.requests.clone(),
        }
    }
}

impl<Req, Resp> Grouped<Req, Resp>
where
    Req: Clone + Send + 'static,
    Resp: Send + 'static,
{
    /// `statement` answers a group in request order, one answer per request;
    /// a group waits (`linger`) after its first request for more.
    fn new(pool: PgPool, statement: GroupStatement<Req, Resp>, linger: Option<Linger>) -> Self {
        let (requests, mut incoming) = mpsc::unbounded_channel::<(Req, Reply<Resp>)>();
        // Not on the shutdown's tracker: it serves the tracked tasks while they
        // drain, and ends by itself once they (and every other holder of a
        // handle) are gone; on the tracker, the drain would wait for the
        // daemon's own handle.
        tokio::spawn(async move {
            let mut last = std::time::Duration::ZERO;
            while let Some(first) = incoming.recv().await {
                if let Some(linger) = linger {
                    tokio::time::sleep(last.clamp(linger.least, linger.most)).await;
                }
                let mut group = vec![first];
                while group.len() < MOST_PER_GROUP
                    && let Ok(next) = incoming.try_recv()
                {
                    group.push(next);
                }
                let sent = tokio::time::Instant::now();
                send_group(&pool, &statement, group).await;
                last = sent.elapsed();
            }
        });
        Self { requests }
    }

    async fn call(&self, request: Req) -> sqlx::Result<Resp> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send((request, reply))
            .map_err(|_| sqlx::Error::PoolClosed)?;
        answer.await.map_err(|_| sqlx::Error::PoolClosed)?
    }
}

async fn send_group<Req: Clone, Resp>(
    pool: &PgPool,
    statement: &GroupStatement<Req, Resp>,
    group: Vec<(Req, Reply<Resp>)>,
) {
    let (asked, replies): (Vec<Req>, Vec<Reply<Resp>>) = group.into_iter().unzip();
    match statement(pool.clone(), asked.clone()).await {
        Ok(answers) => {
            // One answer per request, by construction of each statement.
            debug_assert_eq!(answers.len(), replies.len());
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(Ok(answer));
            }
        }
        // A failed statement changed nothing: each request is sent
        // again alone, so one bad request cannot fail the others
        // and each caller gets its own error.
        Err(_) => {
            for (request, reply) in asked.into_iter().zip(replies) {
                let answer = statement(pool.clone(), vec![request])
                    .await
                    .and_then(|mut one| {
                        one.pop().ok_or_else(|| {
                            sqlx::Error::Protocol("a grouped statement answered nothing".into())
                        })
                    });
                let _ = reply.send(answer);
            }
        }
    }
}

/// A daemon's grouped run-queue statements (cheap to clone; one set per daemon).
#[derive(Clone)]
pub struct RunStatements {
    claims: Grouped<Executor, Option<ClaimedRun>>,
    lease_starts: Grouped<LeaseStart, Option<(i64, Option<Value>)>>,
    finishes: Grouped<Finish, Option<Vec<IncidentRow>>>,
}

impl std::fmt::Debug for RunStatements {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunStatements").finish_non_exhaustive()
    }
}

impl RunStatements {
    /// Starts the three group tasks (needs a Tokio runtime). The claims,
    /// lease starts and finishes go through three connections of their own
    /// beside `pool` that plan them once (one statement of each kind is in
    /// flight at a time). Planned at every call, a finish cost 1.30 ms of
    /// the server's time, planned once 0.86 ms (2026-12-04); a lease start
    /// 0.43 ms of planning and 0.98 of execution, planned once 0.71; a claim
    /// 1.2 ms of planning and 2.5 of execution, planned once 2.1 (fleet
    /// bench, 2026-12-05).
    pub fn new(pool: PgPool) -> Self {
        Self::for_workers(pool, 1)
    }

    /// `new` for a daemon of `workers` workers (see `CLAIM_LINGER`).
    pub fn for_workers(pool: PgPool, workers: usize) -> Self {
        let linger = (workers >= LINGER_FROM_WORKERS).then_some(CLAIM_LINGER);
        Self::through(super::generic_plan_pool(&pool, 3), linger)
    }

    /// For a process that makes one run (`sync run --foreground`): the
    /// statements go through `pool` itself. Each is made once, so planning
    /// once saves nothing, and sessions of their own would cost the server
    /// two more connections to open and end.
    pub fn for_one_run(pool: PgPool) -> Self {
        Self::through(pool, None)
    }

    /// The three group tasks, their statements through `sessions`.
    fn through(sessions: PgPool, linger: Option<Linger>) -> Self {
        Self {
            claims: Grouped::new(
                sessions.clone(),
                Arc::new(|pool, executors| {
                    Box::pin(async move { runs::claim_runs(&pool, &executors).await })
                }),
                linger,
            ),
            lease_starts: Grouped::new(
                sessions.clone(),
                Arc::new(|pool, starts| {
                    Box::pin(async move { runs::begin_leased_runs(&pool, &starts).await })
                }),
                None,
            ),
            finishes: Grouped::new(
                sessions,
                Arc::new(|pool, finishes| {
                    Box::pin(async move { runs::finish_runs(&pool, &finishes).await })
                }),
                None,
            ),
        }
    }

    /// As `runs::claim_runs` for one executor.
    pub async fn claim(&self, executor: &Executor) -> sqlx::Result<Option<ClaimedRun>> {
        self.claims.call(executor.clone()).await
    }

    /// As `runs::begin_leased_runs` for one run: its fence and saved cursor,
    /// or `None` when another run of the sync is alive in Postgres.
    pub async fn begin_leased(
        &self,
        start: LeaseStart,
    ) -> sqlx::Result<Option<(i64, Option<Value>)>> {
        self.lease_starts.call(start).await
    }

    /// As `runs::finish_runs` for one run.
    pub async fn finish(&self, finish: Finish) -> sqlx::Result<Option<Vec<IncidentRow>>> {
        self.finishes.call(finish).await
    }
}
