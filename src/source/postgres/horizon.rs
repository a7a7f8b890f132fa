//! The commit horizon: how far a run may read without passing a row that a
//! transaction still open on the source may yet commit. Commit order is not
//! cursor order: a serial id is taken when a row is inserted and a `now()`
//! timestamp when its transaction starts, but both become visible at commit,
//! so a cursor saved past them would skip them for good.
//!
//! At its first page a run reads, in one statement, the largest cursor value
//! its query holds (`M`) and the server's clock after that statement's
//! snapshot was taken (`t`). Every row with a cursor value up to `M` was
//! written by a transaction that started before `t` (an id up to `M` was
//! drawn before `M` was, a `now()`, `clock_timestamp()` or trigger stamp up to
//! `M` was taken before `t`). Then it asks `pg_stat_activity` for the open
//! transactions of the source database that started at or before `t`. When
//! there are none, every such writer has ended and is visible to the page
//! queries that follow: the run reads up to `M` and never past it. When one
//! is open, the run waits for it (`source.commit_wait`); if it is still open
//! the run reads nothing new, keeps its cursor and says which transaction
//! holds it back (a notice on the run and the sync, and
//! `syncward_source_held_back_seconds`). Nothing is ever skipped; a
//! transaction left open holds the sync back for as long as it stays open.
//! See `docs/design.md` ("Late commits") for the bounds and the limits.

use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{Postgres, Row};

use crate::source::page::SourceError;

/// How far this run reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Horizon {
    /// Rows with a cursor value up to this one (text form, Postgres type),
    /// or none at all when the query has no rows.
    Settled(Option<(String, String)>),
    /// A transaction that started before the read is still open: read
    /// nothing new this run.
    Held { notice: String, open_for: Duration },
}

/// The oldest open transaction that may still commit rows behind the read.
struct OpenTransaction {
    pid: i32,
    application: String,
    since: String,
    open_for: Duration,
}

/// The largest cursor value and the clock after the snapshot, in one
/// statement (the clock is read while the statement runs, so after the
/// snapshot its scan sees). `ORDER BY … DESC LIMIT 1`, not `max()`: uuid
/// has no `max` before Postgres 16, and an index on the column serves both.
fn top_sql(query: &str, column: &str) -> String {
    format!(
        "SELECT clock_timestamp()::text AS read_at, pg_catalog.pg_is_in_recovery() AS standby,
                top.value, top.value_type
           FROM (SELECT 1) AS one
           LEFT JOIN LATERAL (
               SELECT (q.\"{column}\")::text AS value, pg_typeof(q.\"{column}\")::text AS value_type
                 FROM ({query}) AS q
                WHERE q.\"{column}\" IS NOT NULL
                ORDER BY q.\"{column}\" DESC LIMIT 1
           ) AS top ON true"
    )
}

/// Sessions of this database, other than ours, whose transaction started at
/// or before `$1`; and sessions this role may not see at all (it would not
/// know when theirs started). syncward's own source sessions (read-only from
/// their first statement, named `pools::READER_NAME`, no transaction id) are
/// left out: a diff run's long read cannot commit a row. Schema-qualified:
/// an earlier query of the operator's may have changed the search path.
const OPEN_SQL: &str = "
    SELECT pid, coalesce(application_name, '') AS application, xact_start::text AS since,
           extract(epoch FROM clock_timestamp() - xact_start)::float8 AS open_for,
           query = '<insufficient privilege>' AS hidden
      FROM pg_catalog.pg_stat_activity
     WHERE datname = pg_catalog.current_database()
       AND pid <> pg_catalog.pg_backend_pid()
       AND (query = '<insufficient privilege>'
            OR (backend_type = 'client backend' AND xact_start <= $1::timestamptz
                AND NOT (application_name = 'syncward' AND backend_xid IS NULL)))
     ORDER BY hidden DESC, xact_start
     LIMIT 1";

/// Finds how far this run may read, waiting up to `wait` for transactions
/// older than the read to end. The session must have been reset (the first
/// statement runs the operator's query).
pub(super) async fn settle(
    conn: &mut PoolConnection<Postgres>,
    query: &str,
    column: &str,
    wait: Duration,
    classify: fn(sqlx::Error) -> SourceError,
) -> Result<Horizon, SourceError> {
    let top = sqlx::query(sqlx::AssertSqlSafe(top_sql(query, column)))
        .fetch_one(&mut **conn)
        .await
        .map_err(classify)?;
    let read_at: String = top.try_get("read_at").map_err(classify)?;
    if top.try_get::<bool, _>("standby").map_err(classify)? {
        return Err(SourceError::TransactionsHidden(
            "the source database is a standby: the primary's open transactions cannot be seen from it".into(),
        ));
    }
    let value: Option<String> = top.try_get("value").map_err(classify)?;
    let value_type: Option<String> = top.try_get("value_type").map_err(classify)?;
    let Some(bound) = value.zip(value_type) else {
        // No rows: nothing to read, nothing to wait for.
        return Ok(Horizon::Settled(None));
    };
    let deadline = Instant::now() + wait;
    let mut pause = Duration::from_millis(10);
    loop {
        let Some(open) = oldest_open(conn, &read_at, classify).await? else {
            return Ok(Horizon::Settled(Some(bound)));
        };
        let now = Instant::now();
        if now >= deadline {
            return Ok(Horizon::Held {
                notice: format!(
                    "Rows after the saved cursor wait for an open source transaction (pid {}, application \"{}\", open since {}, {} s): it may still commit rows before them; they are read once it ends",
                    open.pid,
                    open.application.escape_default(),
                    open.since,
                    open.open_for.as_secs()
                ),
                open_for: open.open_for,
            });
        }
        tokio::time::sleep(pause.min(deadline - now)).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

async fn oldest_open(
    conn: &mut PoolConnection<Postgres>,
    read_at: &str,
    classify: fn(sqlx::Error) -> SourceError,
) -> Result<Option<OpenTransaction>, SourceError> {
    let Some(row) = sqlx::query(OPEN_SQL)
        .bind(read_at)
        .fetch_optional(&mut **conn)
        .await
        .map_err(classify)?
    else {
        return Ok(None);
    };
    if row.try_get::<bool, _>("hidden").map_err(classify)? {
        return Err(SourceError::TransactionsHidden(
            "the source role cannot see other sessions' transactions in pg_stat_activity (it needs pg_read_all_stats)".into(),
        ));
    }
    let open_for: f64 = row.try_get("open_for").map_err(classify)?;
    Ok(Some(OpenTransaction {
        pid: row.try_get("pid").map_err(classify)?,
        application: row.try_get("application").map_err(classify)?,
        since: row.try_get("since").map_err(classify)?,
        open_for: Duration::try_from_secs_f64(open_for).unwrap_or_default(),
    }))
}
