//! The ledger's day partitions (migration 0016): completed keys live in the
//! partition of the UTC day they completed on, so retention drops whole days
//! (DETACH + DROP: no DELETE, no dead rows for vacuum). Days are created
//! ahead; a row whose day has no partition lands in the default partition,
//! whose rows the purge deletes one by one.

use std::time::Duration;

use sqlx::PgPool;
use tracing::{info, warn};

use super::compose::composed;

/// Days of partitions kept ready after today.
pub const DAYS_AHEAD: i32 = 3;

/// The UTC day a row completing now completes on (its partition), as SQL.
#[rustfmt::skip]
macro_rules! completion_day {
    (@sql $k:tt) => {
        $crate::store::compose::composed!(@resume $k ["(now() AT TIME ZONE 'UTC')::date",])
    };
}
pub(crate) use completion_day;

/// Creates the partitions of the UTC days from `first` to `last` days after
/// today (negative: before), in both ledger tables, where they are missing.
/// A day the default partition already holds rows of keeps them there (the
/// purge deletes them past retention): it is skipped with a warning. Returns
/// how many days were created.
pub async fn create_days(pool: &PgPool, first: i32, last: i32) -> sqlx::Result<u64> {
    let days = composed!(query_scalar [
        "SELECT d::date AS \"day!\" FROM generate_series(",
        completion_day!(),
        " + $1::int, ",
        completion_day!(),
        " + $2::int, interval '1 day') AS d
         WHERE to_regclass('deliveries_' || to_char(d, 'YYYY_MM_DD')) IS NULL
            OR to_regclass('delivery_batches_' || to_char(d, 'YYYY_MM_DD')) IS NULL",
    ], first, last)
    .fetch_all(pool)
    .await?;
    let mut created = 0;
    for day in days {
        // One statement (and transaction) per day: a day refused because the
        // default partition holds its rows does not stop the others.
        match sqlx::query_scalar!(r#"SELECT ledger_create_day($1) AS "created!""#, day)
            .fetch_one(pool)
            .await
        {
            Ok(true) => created += 1,
            Ok(false) => {}
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("23514") => {
                warn!(day = %day, "Ledger rows of this day are in the default partition; it keeps them");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(created)
}

/// Key-row partitions Postgres' statistics put at fewer rows than this are
/// counted exactly (a few milliseconds); bigger ones are taken at their
/// statistics, which autovacuum's analyse keeps within a tenth.
const EXACT_BELOW: f32 = 100_000.0;

/// One day partition of a ledger table.
#[derive(Debug)]
struct DayPartition {
    parent: String,
    name: String,
    day: chrono::NaiveDate,
    /// Planner statistics of its row count; negative when never analysed.
    estimated_rows: f32,
}

/// Drops the day partitions of both ledger tables whose whole day ended more
/// than `retention` ago: a completed key is kept at least `retention`, at
/// most a day longer. Each partition is detached and dropped in one
/// transaction that waits at most `lock_wait` for the table lock (lookups and
/// stakes are not held up behind it; the next purge tries again). Returns the
/// days dropped and the keys they held: packed bulk keys counted exactly,
/// key rows too unless Postgres' statistics put them past `EXACT_BELOW` (a
/// count would read a day of rows; the statistics are used instead).
pub async fn drop_days_past(
    pool: &PgPool,
    retention: Duration,
    lock_wait: Duration,
) -> sqlx::Result<(u64, u64)> {
    let partitions = sqlx::query_as!(
        DayPartition,
        r#"SELECT p.relname::text AS "parent!", c.relname::text AS "name!",
                to_date(right(c.relname, 10), 'YYYY_MM_DD') AS "day!",
                c.reltuples AS "estimated_rows!"
         FROM pg_inherits i
         JOIN pg_class c ON c.oid = i.inhrelid
         JOIN pg_class p ON p.oid = i.inhparent
         WHERE p.relname IN ('deliveries', 'delivery_batches')
           AND p.relnamespace = to_regnamespace(current_schema())
           AND c.relname = p.relname || '_' || right(c.relname, 10)
           AND right(c.relname, 10) ~ '^\d{4}_\d{2}_\d{2}$'
           AND to_date(right(c.relname, 10), 'YYYY_MM_DD') + 1
               <= ((now() - make_interval(secs => $1)) AT TIME ZONE 'UTC')::date
         ORDER BY 3, 1"#,
        retention.as_secs_f64(),
    )
    .fetch_all(pool)
    .await?;
    let (mut days, mut keys) = (std::collections::BTreeSet::new(), 0u64);
    for partition in partitions {
        // Names come from pg_class and match the day pattern above.
        let table = format!("\"{}\"", partition.name);
        let count = if partition.parent == "delivery_batches" {
            // The packed keys' length is read from each value's header.
            format!(
                "SELECT coalesce(sum(octet_length(packed_keys) / 32), 0)::bigint
                 FROM {table} WHERE NOT per_key"
            )
        } else if partition.estimated_rows >= EXACT_BELOW {
            format!("SELECT {}::bigint", partition.estimated_rows as i64)
        } else {
            format!("SELECT count(*) FROM {table}")
        };
        let mut tx = pool.begin().await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SET LOCAL lock_timeout = '{}ms'",
            lock_wait.as_millis()
        )))
        .execute(&mut *tx)
        .await?;
        let held: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(count))
            .fetch_one(&mut *tx)
            .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "ALTER TABLE {} DETACH PARTITION {table}",
            partition.parent
        )))
        .execute(&mut *tx)
        .await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        info!(partition = %partition.name, keys = held, "Dropped a ledger day past retention");
        days.insert(partition.day);
        keys += u64::try_from(held).unwrap_or(0);
    }
    Ok((days.len() as u64, keys))
}
