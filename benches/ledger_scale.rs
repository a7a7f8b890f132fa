//! Ledger-at-scale benchmark (prints its figures; asserts nothing about
//! speed): the ledger's lookups and stakes on an empty ledger and on one
//! holding `LEDGER_SCALE_KEYS` completed keys (default 100 million) spread
//! over the last 7 days, half as per-key rows (per-record destinations) and
//! half packed in bulk batches of 500 (bulk imports), across 1,000 syncs; then
//! the purge of one day. Every figure goes through `store::ledger` as the run
//! loop calls it, pages of 500 keys:
//!
//! - bulk: `lookup_page` of a new page, `stake_batch`, `complete_batch`, and
//!   `lookup_page` of the completed page (a replay);
//! - per key: `lookup_page` of a new page, `stake_keys`, `complete_keys`, and
//!   `lookup_page` of the completed page (probed key by key);
//! - `purge_completed` with a retention that leaves the oldest day past it.
//!
//! The fill is SQL (`generate_series`), each day's key rows written into a
//! table of their own that is then attached as the day's partition (indexes
//! built once, by sorting), and timed. `cargo bench --bench ledger_scale`
//! (needs `scripts/services`); `LEDGER_SCALE_KEYS` changes the size.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use syncward::store::ledger::{self, BatchCompletion, BatchStake, BatchStakeRequest, KeyStake};
use syncward::store::{ledger_days, runs};
use syncward::worker::PageKeys;

const SYNC: &str = "bench";
const PAGE: usize = 500;
const PAGES: i64 = 200;
const DAYS: i32 = 7;

fn main() -> anyhow::Result<()> {
    support::main(&[], 4, run_benchmarks)
}

async fn run_benchmarks(pool: sqlx::PgPool) -> anyhow::Result<()> {
    let keys: i64 = std::env::var("LEDGER_SCALE_KEYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000_000);
    sqlx::raw_sql(
        "INSERT INTO workspaces (id) VALUES ('acme');
         INSERT INTO syncs (id, workspace_id, definition) VALUES ('bench', 'acme', '{}');",
    )
    .execute(&pool)
    .await?;
    let (run_id, _) =
        runs::enqueue_run(&pool, SYNC, syncward::states::RunTrigger::Manual, 5).await?;
    let started = runs::begin_leased_runs(
        &pool,
        &[runs::LeaseStart {
            run_id,
            sync_id: SYNC.into(),
            lease_value: format!("bench/{run_id}"),
        }],
    )
    .await?;
    let Some(Some((fence, _))) = started.into_iter().next() else {
        anyhow::bail!("no fence for the bench sync");
    };
    let run = Run {
        pool: &pool,
        run_id,
        fence,
    };
    ledger_days::create_days(&pool, -(DAYS - 1), ledger_days::DAYS_AHEAD).await?;

    let empty = run.measure(0).await?;
    empty.print("empty ledger");

    let started = Instant::now();
    fill(&pool, keys).await?;
    println!(
        "filled {keys} completed keys over {DAYS} days in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let full = run.measure(1_000_000).await?;
    full.print(&format!("{keys} keys"));
    full.ratio(&empty);

    // The oldest filled day ended five days ago: a 5-day retention drops it.
    let started = Instant::now();
    let purged = ledger::purge_completed(&pool, Duration::from_secs(5 * 86_400), 10_000).await?;
    println!(
        "purge: {} day(s), {} keys, in {:.3} s",
        purged.days,
        purged.keys,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `keys` completed keys over the last `DAYS` days, half key rows, half bulk
/// batches of `PAGE`, across 1,000 syncs.
async fn fill(pool: &sqlx::PgPool, keys: i64) -> anyhow::Result<()> {
    let per_day = keys / i64::from(DAYS);
    let rows = per_day / 2;
    let batches = (per_day - rows) / PAGE as i64;
    for back in 0..i64::from(DAYS) {
        let started = Instant::now();
        let day: chrono::NaiveDate =
            sqlx::query_scalar("SELECT (now() AT TIME ZONE 'UTC')::date - $1::int")
                .bind(back as i32)
                .fetch_one(pool)
                .await?;
        let table = format!("deliveries_{}", day.format("%Y_%m_%d"));
        let first = back * per_day;
        // The day's key rows in a table of their own, attached afterwards:
        // its indexes are then built by one sort, not 14 million descents.
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE TABLE fill (LIKE deliveries INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
             INSERT INTO fill (sync_id, key, status, attempts, result, run_id, fence, staked_at,
                               completed_at, completed_on)
             SELECT 'fleet-' || (i % 1000), sha256(int8send(i)), 'completed', 1, '{{\"id\": 1}}',
                    1, 1, t, t, '{day}'
             FROM generate_series({first}::bigint, {first} + {rows} - 1) AS i,
                  LATERAL (SELECT '{day}'::timestamptz + (i % 86400) * interval '1 second') AS s(t);
             ALTER TABLE fill ADD CONSTRAINT fill_day
                 CHECK (completed_on >= '{day}' AND completed_on < '{day}'::date + 1);
             ALTER TABLE deliveries DETACH PARTITION {table};
             DROP TABLE {table};
             ALTER TABLE fill RENAME TO {table};
             ALTER TABLE deliveries ATTACH PARTITION {table}
                 FOR VALUES FROM ('{day}') TO ('{day}'::date + 1);
             ALTER TABLE {table} DROP CONSTRAINT fill_day;"
        )))
        .execute(pool)
        .await?;
        let first = first + rows;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "INSERT INTO delivery_batches (sync_id, run_id, fence, page, keys, packed_keys, attempts,
                                           per_key, result, created_at, completed_at, completed_on)
             SELECT 'fleet-' || (b % 1000), 1, 1, sha256(int8send(-b - 1)), '{{}}',
                    (SELECT string_agg(sha256(int8send(j)), ''::bytea ORDER BY j)
                     FROM generate_series({first} + b * {PAGE}, {first} + b * {PAGE} + {PAGE} - 1) AS j),
                    1, false, '{{\"processId\": 1}}', t, t, '{day}'
             FROM generate_series({first}::bigint / {PAGE}, {first}::bigint / {PAGE} + {batches} - 1) AS b,
                  LATERAL (SELECT '{day}'::timestamptz + (b % 86400) * interval '1 second') AS s(t)"
        )))
        .execute(pool)
        .await?;
        println!(
            "  day {day}: {rows} key rows, {batches} bulk batches in {:.0} s",
            started.elapsed().as_secs_f64()
        );
    }
    sqlx::raw_sql("ANALYZE deliveries; ANALYZE delivery_batches")
        .execute(pool)
        .await?;
    Ok(())
}

/// The bench sync's run, holding its fence.
struct Run<'a> {
    pool: &'a sqlx::PgPool,
    run_id: i64,
    fence: i64,
}

/// Mean milliseconds per page of each step.
#[derive(Debug, Default)]
struct Figures {
    bulk: [f64; 4],
    per_key: [f64; 4],
}

const STEPS: [&str; 4] = ["lookup (new page)", "stake", "complete", "lookup (replay)"];

impl Figures {
    fn print(&self, ledger: &str) {
        println!("{ledger}: ms per page of {PAGE} keys (mean of {PAGES} pages)");
        for (i, step) in STEPS.iter().enumerate() {
            println!(
                "  {step:<18} bulk {:>7.3}   per key {:>7.3}",
                self.bulk[i], self.per_key[i]
            );
        }
    }

    fn ratio(&self, empty: &Figures) {
        println!("full / empty:");
        for (i, step) in STEPS.iter().enumerate() {
            println!(
                "  {step:<18} bulk {:>6.2}x  per key {:>6.2}x",
                self.bulk[i] / empty.bulk[i],
                self.per_key[i] / empty.per_key[i]
            );
        }
    }
}

impl Run<'_> {
    /// The four steps on `PAGES` new pages of each kind, read from cursors
    /// `from` onwards.
    async fn measure(&self, from: i64) -> anyhow::Result<Figures> {
        let mut figures = Figures::default();
        for n in 0..PAGES {
            let (page, keys) = page_keys(from + n);
            let bulk = self.bulk_page(&page, &keys).await?;
            let (page, keys) = page_keys(from + PAGES + n);
            let per_key = self.per_key_page(&page, &keys).await?;
            for i in 0..4 {
                figures.bulk[i] += bulk[i] / PAGES as f64;
                figures.per_key[i] += per_key[i] / PAGES as f64;
            }
        }
        Ok(figures)
    }

    async fn bulk_page(&self, page: &[u8; 32], keys: &[[u8; 32]]) -> anyhow::Result<[f64; 4]> {
        let mut t = [0.0; 4];
        let started = Instant::now();
        let known = ledger::lookup_page(self.pool, SYNC, page, keys).await?;
        t[0] = ms(started);
        anyhow::ensure!(known.open_batches.is_empty(), "a new page has no stake");
        let request = BatchStakeRequest {
            page: *page,
            packed_keys: keys.concat(),
            attempts: 1,
            superseded: vec![],
            watched: vec![],
            trace: None,
        };
        let started = Instant::now();
        let stake = ledger::stake_batch(self.pool, SYNC, self.run_id, self.fence, &request).await?;
        t[1] = ms(started);
        let BatchStake::Staked { batch, .. } = stake else {
            anyhow::bail!("fenced");
        };
        let completion = BatchCompletion {
            batch,
            result: json!({"processId": 1}),
            import: None,
        };
        let started = Instant::now();
        ledger::complete_batch(self.pool, SYNC, self.run_id, &completion).await?;
        t[2] = ms(started);
        let started = Instant::now();
        let known = ledger::lookup_page(self.pool, SYNC, page, keys).await?;
        t[3] = ms(started);
        anyhow::ensure!(
            known.state(&keys[0]) == ledger::KeyState::Completed,
            "a completed page replays"
        );
        Ok(t)
    }

    async fn per_key_page(&self, page: &[u8; 32], keys: &[[u8; 32]]) -> anyhow::Result<[f64; 4]> {
        let mut t = [0.0; 4];
        let started = Instant::now();
        ledger::lookup_page(self.pool, SYNC, page, keys).await?;
        t[0] = ms(started);
        let fresh: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        let spent = vec![0; fresh.len()];
        let stake = KeyStake {
            sync_id: SYNC,
            page,
            fresh: &fresh,
            spent: &spent,
            again: &[],
            run_id: self.run_id,
            fence: self.fence,
            trace: None,
        };
        let started = Instant::now();
        let staked = ledger::stake_keys(self.pool, &stake).await?;
        t[1] = ms(started);
        anyhow::ensure!(matches!(staked, ledger::Stake::Staked { .. }), "fenced");
        let results = vec![json!({"id": 1}); fresh.len()];
        let started = Instant::now();
        ledger::complete_keys(self.pool, SYNC, &fresh, &results).await?;
        t[2] = ms(started);
        let started = Instant::now();
        let known = ledger::lookup_page(self.pool, SYNC, page, keys).await?;
        t[3] = ms(started);
        anyhow::ensure!(
            known.state(&keys[PAGE - 1]) == ledger::KeyState::Completed,
            "a completed page replays"
        );
        Ok(t)
    }
}

fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1_000.0
}

/// The keys of a page of `PAGE` records read from cursor `cursor`.
fn page_keys(cursor: i64) -> ([u8; 32], Vec<[u8; 32]>) {
    let at = json!({"type": "bigint", "value": cursor.to_string()});
    let mut keys = PageKeys::new(SYNC, "postgres:bench", Some(&at));
    let list = (0..PAGE)
        .map(|i| keys.key(i as u64, &json!({ "i": i })).0)
        .collect();
    (keys.page_id(), list)
}
