//! `PostgresSource`: keyset pages over the operator's query, one statement
//! per several pages (`ROWS_PER_READ`; the pages after the first are served
//! from the rows it read, and the next statement is read in the background
//! while the last two of them are sent), on a connection whose transactions
//! are all READ ONLY, with a statement timeout (see `pools`). A query
//! cannot write: an INSERT, or a function that writes, fails. Connections are shared by every sync of a source URL, so
//! each statement is preceded by a reset of the session (`pools::SESSION_RESET`):
//! a query that switched read-only or the timeout off with `set_config` has
//! switched them off for no later statement, its own sync's or another's.
//! (A read-only role is still the operator's best defence.)
//!
//! Paging: rows are ordered by the cursor column in SQL (so an index on it
//! serves the page), and rows sharing a cursor value are then ordered by their
//! JSON text here, so the order is total and repeatable. A page never splits a
//! group of rows that share a cursor value: when the row after a full page ties with the
//! page's last row, the whole tie group joins the page, and the next page starts
//! after that value. So a non-unique cursor column loses and repeats nothing;
//! only one tie group larger than memory would hurt. Rows whose cursor column
//! is NULL are never read (document this to the sync's owner).

use std::sync::Arc;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use sqlx::{Connection, Executor, PgPool, Postgres, SqlSafeStr, Statement};

use super::columns::{ColumnPlan, PostgresRows};
use super::config::PostgresSourceConfig;
use super::horizon::{self, Horizon};
use super::pools::{PostgresSourcePools, SESSION_RESET};
use crate::canonical_json::canonical_json;
use crate::connector_config::WorkspaceSecrets;
use crate::source::SyncMode;
use crate::source::page::{Page, Source, SourceError};

/// Rows one keyset statement reads at least: as many pages as fit, so a
/// source of small pages costs a session reset and a statement per several
/// pages, not per page (the reset and the statement's round trips dominate a
/// page of 1,000 small rows), while memory stays a few pages' worth.
const ROWS_PER_READ: usize = 4_000;

/// Cursor column types the source can page by: each compares and round-trips
/// through its text form exactly.
const CURSOR_TYPES: &[&str] = &[
    "smallint",
    "integer",
    "bigint",
    "numeric",
    "text",
    "character varying",
    "uuid",
    "date",
    "timestamp without time zone",
    "timestamp with time zone",
];

pub struct PostgresSource {
    /// The source URL's connect options (boxed: they are large, and read
    /// once per run) and the URL (the pools' key).
    options: Box<PgConnectOptions>,
    url: String,
    config: PostgresSourceConfig,
    /// Chosen at the run's first connection, once the outbound policy
    /// passed the address it connects to.
    pool: Option<PgPool>,
    connection: Option<PoolConnection<Postgres>>,
    pools: PostgresSourcePools,
    /// Where the column plan is cached for the runs of this process.
    plan_key: String,
    plan: Option<Arc<ColumnPlan>>,
    /// How far this run reads (`horizon`): found at its first page.
    horizon: Option<Horizon>,
    /// Diff mode: rows fetched so far from the run's open cursor over the
    /// whole query (`None`: no cursor open on the connection).
    whole_read: Option<u64>,
    /// Rows one statement read past the page it served: the next pages'.
    ahead: Option<RowsAhead>,
}

/// Rows read ahead, in the query's order, for the page that starts at `from`
/// (the cursor the page before them returned).
struct RowsAhead {
    from: Value,
    rows: Vec<sqlx::postgres::PgRow>,
    /// The statement read every row up to the horizon: none follow these.
    exhausted: bool,
    /// The statement after these rows, when it is being read.
    next_read: Option<NextRead>,
}

/// A keyset statement read in the background on the run's connection, which
/// comes back with its rows. Dropped unread, it still runs to its end and
/// the connection goes back to the pool.
type NextRead = tokio::task::JoinHandle<(
    PoolConnection<Postgres>,
    Result<Option<Vec<sqlx::postgres::PgRow>>, SourceError>,
)>;

impl Drop for PostgresSource {
    fn drop(&mut self) {
        // A connection with the run's read transaction still open (the run
        // ended early) must not serve anyone else.
        if self.whole_read.is_some()
            && let Some(mut conn) = self.connection.take()
        {
            conn.close_on_drop();
        }
    }
}

impl std::fmt::Debug for PostgresSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSource")
            .field("query", &self.config.query)
            .finish()
    }
}

impl PostgresSource {
    pub fn open(
        config: &PostgresSourceConfig,
        pools: &PostgresSourcePools,
        secrets: &WorkspaceSecrets,
    ) -> Result<Self, SourceError> {
        let url = secrets
            .get(&config.url_env, "source.url_env")
            .map_err(SourceError::InvalidConfig)?;
        Self::with_url(config, &url, pools).map_err(|e| match e {
            SourceError::InvalidConfig(why) => {
                SourceError::InvalidConfig(format!("{} (source.url_env): {why}", config.url_env))
            }
            other => other,
        })
    }

    /// A source reading from `url` instead of the variable `url_env` names.
    pub fn with_url(
        config: &PostgresSourceConfig,
        url: &str,
        pools: &PostgresSourcePools,
    ) -> Result<Self, SourceError> {
        let options = super::options::source_options(url).map_err(SourceError::InvalidConfig)?;
        Ok(Self {
            config: config.clone(),
            options: Box::new(options),
            url: url.to_owned(),
            pool: None,
            connection: None,
            pools: pools.clone(),
            // Everything a plan depends on: the columns of the query at this
            // URL, and which of them is the cursor (read in binary or not).
            plan_key: format!("{url}\n{}\n{}", config.query, config.cursor_column),
            plan: None,
            horizon: None,
            whole_read: None,
            ahead: None,
        })
    }

    async fn connection(&mut self) -> Result<&mut PoolConnection<Postgres>, SourceError> {
        if self.pool.is_none() {
            let options = checked_options(&self.options).await?;
            self.pool = Some(
                self.pools
                    .pool(&self.url, &options, self.config.statement_timeout),
            );
        }
        if self.connection.is_none() {
            // The pool's own acquire timeout bounds a connect that hangs.
            let pool = self
                .pool
                .as_ref()
                .ok_or_else(|| SourceError::Unreachable("no pool".into()))?;
            let conn = pool.acquire().await.map_err(classify_connect_error)?;
            self.connection = Some(conn);
        }
        // Set just above when it was missing.
        self.connection
            .as_mut()
            .ok_or_else(|| SourceError::Unreachable("no connection".into()))
    }
}

/// Every connection the pool may open is open and in use: other runs may be
/// waiting for one.
fn saturated(pool: &PgPool) -> bool {
    pool.num_idle() == 0 && pool.size() >= pool.options().get_max_connections()
}

/// Once per run, before the first connection: the options to connect with,
/// once the outbound policy passed the database's address. A name is
/// resolved here and the connection pinned to the address checked, so a
/// name that resolves elsewhere a moment later (DNS rebinding) cannot take
/// the run to the daemon's own store. Only `sslmode=verify-full` keeps the
/// name: TLS then proves the server is the one named, and providers that
/// route by the TLS server name (SNI) need it.
async fn checked_options(options: &PgConnectOptions) -> Result<PgConnectOptions, SourceError> {
    let policy = crate::outbound::policy::current();
    let refused = |why: String| SourceError::InvalidConfig(format!("source.url_env: {why}"));
    let port = options.get_port();
    if let Some(socket) = options.get_socket() {
        // A Unix socket reaches this machine's own server.
        let own = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        policy
            .check(&socket.display().to_string(), own)
            .map_err(refused)?;
        return Ok(options.clone());
    }
    let host = options.get_host();
    let addr = policy
        .resolve_checked(host, port)
        .await
        .map_err(|why| match why {
            Some(why) => refused(why),
            None => SourceError::Unreachable(format!(
                "the source database's host {host} does not resolve now"
            )),
        })?;
    Ok(pinned(options, addr.ip()))
}

/// `options` connecting to `ip` instead of the name it was checked under,
/// unless TLS verifies the name (see `checked_options`).
fn pinned(options: &PgConnectOptions, ip: std::net::IpAddr) -> PgConnectOptions {
    if matches!(options.get_ssl_mode(), PgSslMode::VerifyFull)
        || options.get_host().parse::<std::net::IpAddr>().is_ok()
    {
        return options.clone();
    }
    options.clone().host(&ip.to_string())
}

/// Which rows a keyset statement reads, against its cursor value.
#[derive(Clone, Copy)]
enum FromCursor {
    /// A page's rows: after the cursor.
    After,
    /// A tie group's rows.
    At,
    /// The statement read in the background: the last value read ahead may
    /// have more rows than were read.
    AtOrAfter,
}

/// The page query over the operator's query: rows after (or at) the cursor
/// and up to the run's horizon (`bound_type`: the next parameter holds the
/// bound), in a total order; the record's columns as `plan` reads them, then
/// the cursor's value and type.
fn page_sql(
    config: &PostgresSourceConfig,
    plan: &ColumnPlan,
    cursor_type: Option<&str>,
    bound_type: Option<&str>,
    limit_clause: &str,
    from: FromCursor,
) -> String {
    let column = format!("q.\"{}\"", config.cursor_column);
    let compare = match from {
        FromCursor::After => ">",
        FromCursor::At => "=",
        FromCursor::AtOrAfter => ">=",
    };
    let mut filter = match cursor_type {
        Some(t) => format!("AND {column} {compare} CAST($1::text AS {t})"),
        None => String::new(),
    };
    if let Some(t) = bound_type {
        let n = if cursor_type.is_some() { 2 } else { 1 };
        filter.push_str(&format!(" AND {column} <= CAST(${n}::text AS {t})"));
    }
    let cursor = if plan.selects_cursor() {
        format!(", ({column})::text AS cursor_value, pg_typeof({column})::text AS cursor_type")
    } else {
        String::new()
    };
    format!(
        "SELECT {record}{cursor}
             FROM ({query}) AS q
             WHERE {column} IS NOT NULL {filter}
             ORDER BY {column} {limit_clause}",
        query = config.query,
        record = plan.select_list(),
    )
}

impl PostgresSource {
    /// The query's column names, found by preparing it (no row is read):
    /// what `sync apply` checks the cursor column and the mapping against.
    pub async fn column_names(&mut self) -> Result<Vec<String>, SourceError> {
        let sql = format!("SELECT * FROM ({}) AS q", self.config.query);
        let conn = self.connection().await?;
        reset_session(conn).await?;
        let statement = (&mut **conn)
            .prepare(sqlx::AssertSqlSafe(sql).into_sql_str())
            .await
            .map_err(classify_query_error)?;
        Ok(statement
            .columns()
            .iter()
            .map(|c| sqlx::Column::name(c).to_owned())
            .collect())
    }

    /// How the query's columns are read: cached per source URL and query in
    /// this process, else found by preparing the query (one round trip).
    async fn plan(&mut self) -> Result<Arc<ColumnPlan>, SourceError> {
        if let Some(plan) = &self.plan {
            return Ok(plan.clone());
        }
        if let Some(plan) = self.pools.plan(&self.plan_key) {
            self.plan = Some(plan.clone());
            return Ok(plan);
        }
        let sql = format!("SELECT * FROM ({}) AS q", self.config.query);
        // Inside a diff run's read transaction, a reset would be refused.
        let in_read = self.whole_read.is_some();
        let conn = self.connection().await?;
        if !in_read {
            reset_session(conn).await?;
        }
        let statement = (&mut **conn)
            .prepare(sqlx::AssertSqlSafe(sql).into_sql_str())
            .await
            .map_err(classify_query_error)?;
        // Said in the sync file's words before a page statement would say
        // it as `column q.updated does not exist`.
        let cursor = &self.config.cursor_column;
        if !cursor.is_empty()
            && !statement
                .columns()
                .iter()
                .any(|c| sqlx::Column::name(c) == cursor.as_str())
        {
            return Err(SourceError::Query(format!(
                "source.cursor_column: \"{cursor}\" is not among the columns of source.query"
            )));
        }
        let plan = Arc::new(ColumnPlan::for_columns(
            statement.columns(),
            &self.config.cursor_column,
        ));
        self.pools.keep_plan(&self.plan_key, plan.clone());
        self.plan = Some(plan.clone());
        Ok(plan)
    }

    async fn read(&mut self, cursor: Option<&Value>) -> Result<Page, SourceError> {
        match self.read_with_plan(cursor).await? {
            Some(page) => Ok(page),
            None => {
                // The query's columns changed since they were planned: plan
                // again, and drop the statements prepared for the old ones.
                self.pools.forget_plan(&self.plan_key);
                self.plan = None;
                if let Some(conn) = self.connection.as_mut() {
                    conn.clear_cached_statements()
                        .await
                        .map_err(classify_query_error)?;
                }
                self.read_with_plan(cursor).await?.ok_or_else(|| {
                    SourceError::Query(
                        "the source query's columns changed while it was read".into(),
                    )
                })
            }
        }
    }

    /// How far this run reads: found once, before its first page.
    async fn horizon(&mut self) -> Result<Horizon, SourceError> {
        if let Some(horizon) = &self.horizon {
            return Ok(horizon.clone());
        }
        let (query, column) = (self.config.query.clone(), self.config.cursor_column.clone());
        let wait = self.config.commit_wait;
        let conn = self.connection().await?;
        reset_session(conn).await?;
        let horizon = horizon::settle(conn, &query, &column, wait, classify_query_error).await?;
        self.horizon = Some(horizon.clone());
        Ok(horizon)
    }

    /// A page, or `None` when the rows do not match the column plan.
    async fn read_with_plan(
        &mut self,
        cursor: Option<&Value>,
    ) -> Result<Option<Page>, SourceError> {
        let plan = self.plan().await?;
        let cursor_json = cursor;
        let cursor = match cursor {
            Some(c) => Some(parse_cursor(c)?),
            None => None,
        };
        let page_size = self.config.page_size as usize;
        let config = self.config.clone();
        let bound = match self.horizon().await? {
            Horizon::Settled(Some(bound)) => bound,
            Horizon::Settled(None) => return Ok(Some(Page::default_last())),
            Horizon::Held { notice, open_for } => {
                return Ok(Some(Page {
                    last: true,
                    notices: vec![notice],
                    held_back: Some(open_for),
                    ..Page::default()
                }));
            }
        };
        // The page's rows, and the rows after them that the same statement
        // read: from what an earlier statement read ahead when it covers the
        // page (with the statement after it, when that was read meanwhile),
        // else from a new statement of several pages.
        let per_read = (ROWS_PER_READ / page_size).max(1) * page_size;
        let ahead = self
            .ahead
            .take()
            .filter(|ahead| cursor_json.is_some_and(|c| *c == ahead.from));
        let (mut buffered, exhausted, mut next_read) = match ahead {
            Some(ahead) if ahead.covers_page(page_size) => {
                (ahead.rows, ahead.exhausted, ahead.next_read)
            }
            Some(RowsAhead {
                rows,
                next_read: Some(next_read),
                ..
            }) => {
                let Some(read) = self.finish_next_read(next_read).await? else {
                    return Ok(None);
                };
                if read.first().is_some_and(|row| !plan.matches(row)) {
                    return Ok(None);
                }
                let exhausted = read.len() <= per_read;
                (joined(&plan, rows, read)?, exhausted, None)
            }
            _ => {
                let limit = i64::try_from(per_read + 1).unwrap_or(i64::MAX);
                let sql = page_sql(
                    &config,
                    &plan,
                    cursor.as_ref().map(|c| c.0.as_str()),
                    Some(&bound.1),
                    &format!("LIMIT {limit}"),
                    FromCursor::After,
                );
                let conn = self.connection().await?;
                let from = cursor.as_ref().map(|(_, value)| value.clone());
                let Some(rows) = keyset_rows(conn, sql, from, bound.0.clone()).await? else {
                    return Ok(None);
                };
                if rows.first().is_some_and(|row| !plan.matches(row)) {
                    return Ok(None);
                }
                let exhausted = rows.len() <= per_read;
                (rows, exhausted, None)
            }
        };
        // The page: `page_size` rows, and the rest of a tie group that
        // crosses its end. Either the buffer holds the whole group (a row of
        // another value follows it, or no row follows at all), or the group is
        // read by itself and nothing is kept ahead.
        let mut after = if buffered.len() > page_size {
            buffered.split_off(page_size)
        } else {
            Vec::new()
        };
        let mut rows: Vec<TiedRow> = buffered.into_iter().map(TiedRow::from).collect();
        if let Some(page_end) = rows.last()
            && let Some(next) = after.first()
            && let boundary = plan.cursor_bytes(&page_end.row)?.to_vec()
            && plan.cursor_bytes(next)? == boundary
        {
            let mut group_end = 0;
            while group_end < after.len() && plan.cursor_bytes(&after[group_end])? == boundary {
                group_end += 1;
            }
            if group_end < after.len() || exhausted {
                let rest = after.split_off(group_end);
                rows.extend(after.into_iter().map(TiedRow::from));
                after = rest;
            } else {
                // The tie group may go on past what was read: read all of it.
                let (value, cursor_type) = pageable_cursor(&config, &plan, &after[0])?;
                let mut kept = Vec::with_capacity(rows.len());
                for r in rows {
                    if plan.cursor_bytes(&r.row)? != boundary {
                        kept.push(r);
                    }
                }
                rows = kept;
                after = Vec::new();
                // The statement read in the background started inside the
                // group: not used, but its connection is this run's.
                if let Some(next_read) = next_read.take() {
                    self.finish_next_read(next_read).await?;
                }
                let conn = self.connection().await?;
                // The page's own statement ran the operator's query: reset again.
                reset_session(conn).await?;
                let group = sqlx::query(sqlx::AssertSqlSafe(page_sql(
                    &config,
                    &plan,
                    Some(&cursor_type),
                    None,
                    "",
                    FromCursor::At,
                )))
                .bind(&value)
                .fetch_all(&mut **conn)
                .await
                .map_err(classify_query_error)?;
                rows.extend(group.into_iter().map(TiedRow::from));
            }
        }
        // The last page: nothing read after it, and nothing left to read.
        let last = after.is_empty() && exhausted;
        order_ties(&plan, &mut rows)?;
        let next_cursor = match rows.last() {
            Some(r) => {
                let (value, cursor_type) = pageable_cursor(&config, &plan, &r.row)?;
                Some(json!({ "type": cursor_type, "value": value }))
            }
            None => None,
        };
        if let Some(from) = &next_cursor
            && !after.is_empty()
        {
            // The statement after the rows read ahead is read now, in the
            // background, while those pages are sent: read any later, a
            // replay (which sends nothing) waited for it every few pages.
            if next_read.is_none() && !exhausted {
                next_read = self.start_next_read(&config, &plan, &after, &bound, per_read)?;
            }
            self.ahead = Some(RowsAhead {
                from: from.clone(),
                rows: after,
                exhausted,
                next_read,
            });
        }
        let rows = rows.into_iter().map(|r| r.row).collect();
        Ok(Some(Page {
            records: PostgresRows::new(plan, rows).into(),
            next_cursor,
            last,
            notices: Vec::new(),
            held_back: None,
        }))
    }
}

impl PostgresSource {
    /// Starts the statement after `after` (rows read ahead, in order) on
    /// this run's connection, in a task of its own; `None` when the run holds
    /// no connection or the source's pool is saturated (the connection goes
    /// back to the pool between pages then, see `fetch_page`).
    fn start_next_read(
        &mut self,
        config: &PostgresSourceConfig,
        plan: &ColumnPlan,
        after: &[sqlx::postgres::PgRow],
        bound: &(String, String),
        per_read: usize,
    ) -> Result<Option<NextRead>, SourceError> {
        let Some(last) = after.last() else {
            return Ok(None);
        };
        if self.pool.as_ref().is_none_or(saturated) {
            return Ok(None);
        }
        let (value, cursor_type) = pageable_cursor(config, plan, last)?;
        let Some(mut conn) = self.connection.take() else {
            return Ok(None);
        };
        let limit = i64::try_from(per_read + 1).unwrap_or(i64::MAX);
        let sql = page_sql(
            config,
            plan,
            Some(&cursor_type),
            Some(&bound.1),
            &format!("LIMIT {limit}"),
            FromCursor::AtOrAfter,
        );
        let bound = bound.0.clone();
        Ok(Some(tokio::spawn(async move {
            let rows = keyset_rows(&mut conn, sql, Some(value), bound).await;
            (conn, rows)
        })))
    }

    /// The rows of the statement read in the background, once it is done;
    /// its connection is the run's again.
    async fn finish_next_read(
        &mut self,
        next_read: NextRead,
    ) -> Result<Option<Vec<sqlx::postgres::PgRow>>, SourceError> {
        let (conn, rows) = next_read.await.map_err(|e| {
            SourceError::Unreachable(format!("reading the source rows stopped: {e}"))
        })?;
        self.connection = Some(conn);
        rows
    }
}

/// The rows read ahead (`before`, whose last value's tie group may go on past
/// them) joined with the statement read after them from that value on.
fn joined(
    plan: &ColumnPlan,
    mut before: Vec<sqlx::postgres::PgRow>,
    read: Vec<sqlx::postgres::PgRow>,
) -> Result<Vec<sqlx::postgres::PgRow>, SourceError> {
    if let Some(last) = before.last() {
        let last = plan.cursor_bytes(last)?.to_vec();
        while let Some(row) = before.last()
            && plan.cursor_bytes(row)? == last.as_slice()
        {
            before.pop();
        }
    }
    before.extend(read);
    Ok(before)
}

/// One keyset statement on `conn`, after a reset of its session; `None`
/// when the query's columns changed type since it was prepared.
async fn keyset_rows(
    conn: &mut PoolConnection<Postgres>,
    sql: String,
    from: Option<String>,
    bound: String,
) -> Result<Option<Vec<sqlx::postgres::PgRow>>, SourceError> {
    reset_session(conn).await?;
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
    if let Some(value) = from {
        query = query.bind(value);
    }
    match query.bind(bound).fetch_all(&mut **conn).await {
        Ok(rows) => Ok(Some(rows)),
        Err(e) if result_type_changed(&e) => Ok(None),
        Err(e) => Err(classify_query_error(e)),
    }
}

impl RowsAhead {
    /// Whether these rows decide the page that starts with them: more rows
    /// than a page (so the page's end and the row after it are known), or
    /// every row left to read.
    fn covers_page(&self, page_size: usize) -> bool {
        self.exhausted || self.rows.len() > page_size
    }
}

/// The name of a diff run's cursor over the whole query.
const WHOLE_CURSOR: &str = "syncward_whole";

impl PostgresSource {
    /// Diff mode: the next page of the whole query, from one cursor over it
    /// in a read-only repeatable-read transaction that lasts the run, so the
    /// run reads one snapshot with flat memory and needs no cursor column.
    /// The page cursor is the count of rows fetched before the page (it
    /// names the page in the ledger; the next run starts again at 0).
    async fn read_whole(&mut self) -> Result<Page, SourceError> {
        let plan = self.plan().await?;
        let page_size = self.config.page_size as usize;
        let query = self.config.query.clone();
        let fetched = self.whole_read;
        let before = fetched.unwrap_or(0);
        // Marked before the transaction opens: a failure from here on closes
        // the connection rather than pool it mid-transaction.
        self.whole_read = Some(before);
        let conn = self.connection().await?;
        if fetched.is_none() {
            reset_session(conn).await?;
            let declare = format!(
                "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
                 DECLARE {WHOLE_CURSOR} NO SCROLL CURSOR FOR SELECT {} FROM ({query}) AS q",
                plan.select_list()
            );
            sqlx::raw_sql(sqlx::AssertSqlSafe(declare))
                .execute(&mut **conn)
                .await
                .map_err(classify_query_error)?;
        }
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "FETCH FORWARD {page_size} FROM {WHOLE_CURSOR}"
        )))
        .fetch_all(&mut **conn)
        .await
        .map_err(classify_query_error)?;
        if rows.first().is_some_and(|row| !plan.matches(row)) {
            return Err(SourceError::Query(
                "the source query's columns changed while it was read".into(),
            ));
        }
        let last = rows.len() < page_size;
        let after = before + rows.len() as u64;
        if last {
            sqlx::raw_sql("COMMIT")
                .execute(&mut **conn)
                .await
                .map_err(classify_query_error)?;
        }
        self.whole_read = (!last).then_some(after);
        Ok(Page {
            records: PostgresRows::new(plan, rows).into(),
            next_cursor: Some(json!({ "row": after })),
            last,
            notices: Vec::new(),
            held_back: None,
        })
    }
}

impl PostgresSource {
    /// The rows of the query whose `field` holds `address`, ignoring case
    /// (at most a hundred): `sync run --only`.
    pub async fn fetch_by_address(
        &mut self,
        field: &str,
        address: &str,
    ) -> Result<Page, SourceError> {
        let plan = self.plan().await?;
        let query = self.config.query.clone();
        let conn = self.connection().await?;
        reset_session(conn).await?;
        let column = field.replace('"', "\"\"");
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {} FROM ({query}) AS q WHERE lower((q.\"{column}\")::text) = lower($1) LIMIT 100",
            plan.select_list()
        )))
        .bind(address.trim())
        .fetch_all(&mut **conn)
        .await
        .map_err(classify_query_error)?;
        Ok(Page {
            records: PostgresRows::new(plan, rows).into(),
            next_cursor: None,
            last: true,
            notices: Vec::new(),
            held_back: None,
        })
    }
}

impl Source for PostgresSource {
    fn fingerprint(&self) -> String {
        // Diff mode is named only when on, so cursor-mode keys stay as they were.
        let identity = match self.config.sync_mode {
            SyncMode::Cursor => {
                json!({ "query": self.config.query, "cursor_column": self.config.cursor_column })
            }
            // Mirror reads and keys as diff does: a switch between them keeps
            // what was delivered.
            SyncMode::Diff | SyncMode::Mirror => {
                json!({ "query": self.config.query, "sync_mode": "diff" })
            }
        };
        let digest = Sha256::digest(canonical_json(&identity).as_bytes());
        format!("postgres:{}", hex::encode(digest))
    }

    async fn fetch_page(&mut self, cursor: Option<&Value>) -> Result<Page, SourceError> {
        let result = if self.config.sync_mode.reads_whole() {
            self.read_whole().await
        } else {
            self.read(cursor).await
        };
        if result.is_err() && self.whole_read.is_some() {
            // The read transaction is in an unknown state: nobody reuses it.
            self.whole_read = None;
            if let Some(mut conn) = self.connection.take() {
                conn.close_on_drop();
            }
        } else if matches!(result, Err(SourceError::Unreachable(_))) {
            // A broken connection goes back to no one: the next page takes
            // another (or a new) one from the pool.
            if let Some(mut conn) = self.connection.take() {
                conn.close_on_drop();
            }
        } else if self.whole_read.is_none() && self.pool.as_ref().is_some_and(saturated) {
            // Between keyset pages, while every connection of the source is
            // out, this run's goes back to the pool: a run waiting on its
            // destination (an account's budget, a slow answer) must not keep
            // the source's few connections from the other runs of the
            // process. (Otherwise it stays: taking one back costs a run alone
            // several percent per page.)
            self.connection = None;
        }
        result
    }
}

/// Puts the session back as the pool opened it (read-only, the statement
/// timeout, UTC, no role) before a statement runs the operator's query: one
/// round trip. A failure leaves the session in an unknown state, so it is
/// `Unreachable`: the connection is closed and the page retried on another.
async fn reset_session(conn: &mut PoolConnection<Postgres>) -> Result<(), SourceError> {
    sqlx::raw_sql(SESSION_RESET)
        .execute(&mut **conn)
        .await
        .map(|_| ())
        .map_err(|e| SourceError::Unreachable(format!("resetting the source session failed: {e}")))
}

/// A row of a page, with its text where it ties with a neighbour.
struct TiedRow {
    row: sqlx::postgres::PgRow,
    /// The tie-break order, rendered only where rows tie.
    text: Option<String>,
}

impl From<sqlx::postgres::PgRow> for TiedRow {
    fn from(row: sqlx::postgres::PgRow) -> Self {
        Self { row, text: None }
    }
}

/// Orders rows of equal cursor value by their JSON text as `row_to_json`
/// writes it. Such rows are contiguous (SQL ordered them by the cursor), so
/// sorting each run is enough, and a page keeps its records at the same
/// positions on every read.
fn order_ties(plan: &ColumnPlan, rows: &mut [TiedRow]) -> Result<(), SourceError> {
    let mut start = 0;
    while start < rows.len() {
        let mut end = start + 1;
        let value = plan.cursor_bytes(&rows[start].row)?;
        while end < rows.len() && plan.cursor_bytes(&rows[end].row)? == value {
            end += 1;
        }
        if end - start > 1 {
            let group = &mut rows[start..end];
            for r in group.iter_mut() {
                r.text = Some(plan.row_text(&r.row)?);
            }
            group.sort_by(|a, b| a.text.cmp(&b.text));
        }
        start = end;
    }
    Ok(())
}

/// A stored cursor: `{"type": <postgres type>, "value": <text form>}`.
fn parse_cursor(cursor: &Value) -> Result<(String, String), SourceError> {
    let t = cursor.get("type").and_then(Value::as_str);
    let v = cursor.get("value").and_then(Value::as_str);
    match (t, v) {
        (Some(t), Some(v)) if CURSOR_TYPES.contains(&t) => Ok((t.to_string(), v.to_string())),
        _ => Err(SourceError::InvalidConfig(format!(
            "the saved cursor {cursor} is not a postgres cursor; reset it with `syncward sync reset-cursor`"
        ))),
    }
}

/// A row's cursor value and type, refused unless the source can page by
/// that type.
fn pageable_cursor(
    config: &PostgresSourceConfig,
    plan: &ColumnPlan,
    row: &sqlx::postgres::PgRow,
) -> Result<(String, String), SourceError> {
    let (value, cursor_type) = plan.cursor_of(row)?;
    if !CURSOR_TYPES.contains(&cursor_type.as_str()) {
        return Err(unsupported_type(&config.cursor_column, &cursor_type));
    }
    Ok((value, cursor_type))
}

fn unsupported_type(column: &str, t: &str) -> SourceError {
    SourceError::Query(format!(
        "cursor column \"{column}\" has type {t}; supported: {}",
        CURSOR_TYPES.join(", ")
    ))
}

fn classify_connect_error(e: sqlx::Error) -> SourceError {
    match &e {
        sqlx::Error::Database(db) if db.code().is_some_and(|c| c.starts_with("28")) => {
            SourceError::Unauthorized(format!(
                "the source database refused the login: {}",
                db.message()
            ))
        }
        sqlx::Error::Database(db) if is_transient(db.as_ref()) => {
            SourceError::Unreachable(format!(
                "the source database cannot take connections now: {}",
                db.message()
            ))
        }
        sqlx::Error::Database(db) if db.code().as_deref() == Some("3D000") => SourceError::Query(
            format!("the source database does not exist: {}", db.message()),
        ),
        _ => SourceError::Unreachable(format!("cannot connect to the source database: {e}")),
    }
}

/// Errors the server raises about itself rather than about the query: it is
/// shutting down or restarting (57P0x), the connection broke (08), it ran out
/// of connections or memory (53), or a transaction lost a race (40001, 40P01).
/// They say nothing about the sync, so the attempt is retried.
fn is_transient(db: &dyn sqlx::error::DatabaseError) -> bool {
    db.code().is_some_and(|code| {
        code.starts_with("57P")
            || code.starts_with("08")
            || code.starts_with("53")
            || code == "40001"
            || code == "40P01"
    })
}

/// Postgres refuses a prepared statement whose result columns changed type
/// ("cached plan must not change result type").
fn result_type_changed(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("0A000"))
}

fn classify_query_error(e: sqlx::Error) -> SourceError {
    match e {
        sqlx::Error::Database(db) if is_transient(db.as_ref()) => {
            SourceError::Unreachable(format!("the source database went away: {}", db.message()))
        }
        sqlx::Error::Database(db) => {
            SourceError::Query(format!("the source query failed: {}", db.message()))
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut => {
            SourceError::Unreachable(format!("the source connection failed: {e}"))
        }
        other => SourceError::Query(format!("reading the source rows failed: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(url: &str) -> PgConnectOptions {
        url.parse().expect("a test URL")
    }

    #[test]
    fn a_checked_name_is_connected_to_by_the_address_checked() {
        let ip: std::net::IpAddr = "203.0.113.7".parse().unwrap();
        for mode in ["disable", "prefer", "require", "verify-ca"] {
            let url = format!("postgres://u@db.example.com:6543/app?sslmode={mode}");
            let pinned = pinned(&options(&url), ip);
            assert_eq!(pinned.get_host(), "203.0.113.7", "sslmode={mode}");
            assert_eq!(pinned.get_port(), 6543);
            assert_eq!(pinned.get_database(), Some("app"));
        }
    }

    #[test]
    fn verify_full_keeps_the_name_tls_proves() {
        let ip: std::net::IpAddr = "203.0.113.7".parse().unwrap();
        let url = "postgres://u@db.example.com/app?sslmode=verify-full";
        assert_eq!(pinned(&options(url), ip).get_host(), "db.example.com");
    }

    #[tokio::test]
    async fn a_name_that_resolves_inside_is_refused_before_any_connection() {
        // No policy installed in this process: the strict default.
        let refused = checked_options(&options("postgres://u@localhost:5432/syncward")).await;
        match refused {
            Err(SourceError::InvalidConfig(why)) => {
                assert!(
                    why.contains("source.url_env") && why.contains("loopback"),
                    "{why}"
                )
            }
            other => panic!("not refused: {other:?}"),
        }
    }
}
