//! Source `postgres`: keyset pages that lose and repeat nothing, typed cursors,
//! a read-only query, and failures classified for the run loop.

use serde_json::Value;
use syncward::canonical_json::canonical_json;
use syncward::source::postgres::{PostgresSource, PostgresSourceConfig};
use syncward::source::{Source, SourceError};

use crate::helpers::TestDb;

fn config(query: &str, cursor_column: &str, page_size: u32) -> PostgresSourceConfig {
    let text = format!(
        "url_env = \"UNUSED\"\nquery = \"{query}\"\ncursor_column = \"{cursor_column}\"\npage_size = {page_size}\n"
    );
    toml::from_str(&text).expect("a valid source table")
}

/// Reads the whole source page by page, resuming each page from the cursor the
/// previous one returned (as a run does across restarts). Checks on the way
/// that each record's canonical bytes, which its delivery key hashes and which
/// the source writes straight from the row, are those of the record's value.
async fn read_all(db: &TestDb, cfg: &PostgresSourceConfig) -> anyhow::Result<(Vec<Value>, usize)> {
    let mut records = Vec::new();
    let mut cursor: Option<Value> = None;
    let mut pages = 0;
    loop {
        // A fresh source per page: nothing but the cursor carries over.
        let mut source = PostgresSource::with_url(cfg, &db.url, &Default::default())?;
        let page = source.fetch_page(cursor.as_ref()).await?;
        if page.records.is_empty() {
            break;
        }
        pages += 1;
        let mut page_records = page.records;
        for i in 0..page_records.len() {
            let mut written = Vec::new();
            page_records.write_canonical(i, &mut written)?;
            let value = page_records.take(i)?;
            assert_eq!(
                String::from_utf8(written)?,
                canonical_json(&value),
                "canonical bytes of {value}"
            );
            records.push(value);
        }
        cursor = page.next_cursor;
        if page.last {
            break;
        }
        anyhow::ensure!(pages < 1000, "paging does not end");
    }
    Ok((records, pages))
}

fn ids(records: &[Value]) -> Vec<i64> {
    records
        .iter()
        .map(|r| r["id"].as_i64().unwrap_or(-1))
        .collect()
}

#[tokio::test]
async fn integer_cursor_pages_through_every_row_once_with_nulls_in_other_columns()
-> anyhow::Result<()> {
    let db = TestDb::new().await?;
    sqlx::raw_sql(
        "CREATE TABLE people (id int PRIMARY KEY, email text, name text, score numeric);
         INSERT INTO people SELECT i, 'p' || i || '@x.test', CASE WHEN i % 3 = 0 THEN NULL ELSE 'n' || i END,
                                   CASE WHEN i % 5 = 0 THEN NULL ELSE i * 1.5 END
         FROM generate_series(1, 95) i;",
    )
    .execute(&db.pool)
    .await?;
    let (records, pages) = read_all(&db, &config("SELECT * FROM people", "id", 10)).await?;
    assert_eq!(ids(&records), (1..=95).collect::<Vec<_>>());
    assert_eq!(pages, 10);
    assert_eq!(records[2]["name"], Value::Null);
    assert_eq!(records[4]["score"], Value::Null);
    assert_eq!(records[0]["score"], serde_json::json!(1.5));
    Ok(())
}

#[tokio::test]
async fn ties_on_a_non_unique_cursor_are_neither_lost_nor_repeated() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    // 60 rows over 7 distinct cursor values, groups straddling every page
    // boundary; by an integer and a text cursor (compared as read) and by a
    // timestamp (compared by the text the page query selects for it).
    sqlx::raw_sql(
        "CREATE TABLE events (id int PRIMARY KEY, bucket int NOT NULL, email text,
                              label text NOT NULL, at timestamptz NOT NULL);
         INSERT INTO events SELECT i, i / 9, 'e' || i || '@x.test', 'b' || (i / 9),
                                   timestamptz '2026-01-01 00:00:00+00' + (i / 9) * interval '1 day'
         FROM generate_series(1, 60) i;",
    )
    .execute(&db.pool)
    .await?;
    for cursor in ["bucket", "label", "at"] {
        let (records, _) = read_all(&db, &config("SELECT * FROM events", cursor, 4)).await?;
        let mut seen = ids(&records);
        assert_eq!(
            seen.len(),
            60,
            "by {cursor}, rows lost or repeated: {seen:?}"
        );
        seen.sort();
        assert_eq!(seen, (1..=60).collect::<Vec<_>>(), "by {cursor}");
    }
    Ok(())
}

/// One page as a run sees it: where it starts, its rows' ids and cursor
/// values, and whether it is the last.
type SeenPage = (Option<Value>, Vec<(i64, i64)>, bool);

/// Every page of the source, read from `cursor` on by one source (as one run
/// reads them) or by a fresh source per page (as runs resumed at each
/// checkpoint read them).
async fn pages_of(
    db: &TestDb,
    cfg: &PostgresSourceConfig,
    one_source: bool,
) -> anyhow::Result<Vec<SeenPage>> {
    let mut source = PostgresSource::with_url(cfg, &db.url, &Default::default())?;
    let mut cursor: Option<Value> = None;
    let mut pages = Vec::new();
    loop {
        if !one_source {
            source = PostgresSource::with_url(cfg, &db.url, &Default::default())?;
        }
        let page = source.fetch_page(cursor.as_ref()).await?;
        let rows = page
            .records
            .into_values()?
            .iter()
            .map(|r| {
                (
                    r["id"].as_i64().unwrap_or(-1),
                    r["c"].as_i64().unwrap_or(-1),
                )
            })
            .collect();
        pages.push((cursor.clone(), rows, page.last));
        if page.last {
            return Ok(pages);
        }
        cursor = page.next_cursor;
        anyhow::ensure!(pages.len() < 5000, "paging does not end");
    }
}

#[tokio::test]
async fn pages_read_ahead_by_one_statement_are_the_pages_a_resumed_run_reads() -> anyhow::Result<()>
{
    let db = TestDb::new().await?;
    // Cursor values shared by three rows (groups straddle page boundaries),
    // and one group of 31 rows across the end of the first statement's rows
    // (pages of 499: a statement reads 8 pages, rows 1-3992, and one more).
    sqlx::raw_sql(
        "CREATE TABLE ticks (id int PRIMARY KEY, c bigint NOT NULL);
         INSERT INTO ticks SELECT i, CASE WHEN i BETWEEN 3985 AND 4015 THEN 3985 / 3 ELSE i / 3 END
         FROM generate_series(1, 9000) i;",
    )
    .execute(&db.pool)
    .await?;
    // 499: the group straddles a statement's last page; 1,000 and 1,333: the
    // rows left ahead are fewer than a page, and the page joins them with the
    // statement read meanwhile from the group's value on.
    for page_size in [499, 1_000, 1_333] {
        same_pages_either_way(&db, page_size).await?;
    }
    Ok(())
}

async fn same_pages_either_way(db: &TestDb, page_size: usize) -> anyhow::Result<()> {
    let cfg = config("SELECT id, c FROM ticks", "c", page_size as u32);
    let one_run = pages_of(db, &cfg, true).await?;
    let resumed = pages_of(db, &cfg, false).await?;
    assert_eq!(one_run.len(), resumed.len(), "as many pages either way");
    for (a, b) in one_run.iter().zip(&resumed) {
        assert_eq!(a, b, "pages of {page_size}: the page at {:?} differs", a.0);
    }
    // Every row once, in cursor order; no cursor value in two pages; a page
    // is `page_size` rows and the rest of the tie group at its end.
    let all: Vec<(i64, i64)> = one_run.iter().flat_map(|p| p.1.clone()).collect();
    let mut ids: Vec<i64> = all.iter().map(|r| r.0).collect();
    ids.sort();
    assert_eq!(ids, (1..=9000).collect::<Vec<_>>(), "pages of {page_size}");
    assert!(
        all.windows(2).all(|w| w[0].1 <= w[1].1),
        "pages of {page_size}: out of cursor order"
    );
    for pair in one_run.windows(2) {
        let (end, start) = (pair[0].1.last(), pair[1].1.first());
        assert_ne!(
            end.map(|r| r.1),
            start.map(|r| r.1),
            "pages of {page_size}: a tie group split at {:?}",
            pair[1].0
        );
    }
    let full = page_size - 1;
    for (at, rows, last) in &one_run {
        if !last {
            assert!(rows.len() > full, "a short page at {at:?}");
            assert!(
                rows[full..].iter().all(|r| r.1 == rows[full].1),
                "pages of {page_size}: a page longer than its ties at {at:?}"
            );
        }
    }
    let long_group: Vec<usize> = one_run
        .iter()
        .map(|p| p.1.iter().filter(|r| r.1 == 3985 / 3).count())
        .filter(|n| *n > 0)
        .collect();
    assert_eq!(
        long_group,
        vec![32],
        "pages of {page_size}: the long tie group is in one page"
    );
    Ok(())
}

#[tokio::test]
async fn text_and_timestamp_cursors_compare_in_their_own_types() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    sqlx::raw_sql(
        "CREATE TABLE tagged (id int, code text UNIQUE, changed timestamptz UNIQUE, email text);
         INSERT INTO tagged SELECT i, 'code-' || lpad(i::text, 3, '0'), timestamptz '2026-01-01 00:00:00.123456+00' + i * interval '1 minute 0.000001 second', 'x@y.z'
         FROM generate_series(1, 25) i;",
    )
    .execute(&db.pool)
    .await?;
    let (by_text, _) = read_all(&db, &config("SELECT * FROM tagged", "code", 7)).await?;
    assert_eq!(ids(&by_text), (1..=25).collect::<Vec<_>>());
    let (by_time, pages) = read_all(&db, &config("SELECT * FROM tagged", "changed", 7)).await?;
    assert_eq!(ids(&by_time), (1..=25).collect::<Vec<_>>());
    assert_eq!(pages, 4);
    // The cursor keeps the type and the exact text form, microseconds included.
    let mut source = PostgresSource::with_url(
        &config("SELECT * FROM tagged", "changed", 7),
        &db.url,
        &Default::default(),
    )?;
    let page = source.fetch_page(None).await?;
    let cursor = page.next_cursor.expect("a cursor after a full page");
    assert_eq!(cursor["type"], "timestamp with time zone");
    assert_eq!(cursor["value"], "2026-01-01 00:07:00.123463+00");
    Ok(())
}

#[tokio::test]
async fn the_query_cannot_write() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    sqlx::raw_sql(
        "CREATE TABLE t (id int PRIMARY KEY, email text); INSERT INTO t VALUES (1, 'a@b.c');",
    )
    .execute(&db.pool)
    .await?;
    let writing = "WITH w AS (INSERT INTO t VALUES (2, 'x@y.z') RETURNING *) SELECT * FROM w";
    let mut source =
        PostgresSource::with_url(&config(writing, "id", 10), &db.url, &Default::default())?;
    let err = source
        .fetch_page(None)
        .await
        .expect_err("a writing query must fail");
    assert!(matches!(err, SourceError::Query(_)), "{err:?}");
    sqlx::raw_sql("CREATE FUNCTION sneaky() RETURNS int LANGUAGE sql AS $$ INSERT INTO t VALUES (3, 'q@q.q') RETURNING id $$")
        .execute(&db.pool)
        .await?;
    let mut source = PostgresSource::with_url(
        &config("SELECT sneaky() AS id, 'e' AS email", "id", 10),
        &db.url,
        &Default::default(),
    )?;
    let err = source
        .fetch_page(None)
        .await
        .expect_err("a writing function must fail");
    assert!(err.to_string().contains("read-only transaction"), "{err}");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM t")
        .fetch_one(&db.pool)
        .await?;
    assert_eq!(count, 1);
    Ok(())
}

#[tokio::test]
async fn a_bad_query_is_source_query_failed_and_a_dead_server_is_source_unreachable()
-> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let mut source = PostgresSource::with_url(
        &config("SELECT * FROM no_such_table", "id", 10),
        &db.url,
        &Default::default(),
    )?;
    let err = source.fetch_page(None).await.expect_err("missing table");
    assert!(
        matches!(&err, SourceError::Query(m) if m.contains("no_such_table")),
        "{err:?}"
    );

    let mut source = PostgresSource::with_url(
        &config("SELECT 1 AS id", "id", 10),
        "postgres://x@127.0.0.1:1/none",
        &Default::default(),
    )?;
    let err = source
        .fetch_page(None)
        .await
        .expect_err("nothing listens on port 1");
    assert!(matches!(err, SourceError::Unreachable(_)), "{err:?}");
    Ok(())
}

#[tokio::test]
async fn the_fingerprint_names_the_query_not_the_page_size() -> anyhow::Result<()> {
    let a = PostgresSource::with_url(
        &config("SELECT * FROM a", "id", 10),
        "postgres://u@h/d",
        &Default::default(),
    )?;
    let b = PostgresSource::with_url(
        &config("SELECT * FROM a", "id", 500),
        "postgres://u@h/d",
        &Default::default(),
    )?;
    let c = PostgresSource::with_url(
        &config("SELECT * FROM b", "id", 10),
        "postgres://u@h/d",
        &Default::default(),
    )?;
    assert_eq!(a.fingerprint(), b.fingerprint());
    assert_ne!(a.fingerprint(), c.fingerprint());
    assert!(a.fingerprint().starts_with("postgres:"));
    Ok(())
}

/// The source's records, in order, as `row_to_json` gives them: rows ordered
/// by the cursor, rows that tie by their `row_to_json` text.
async fn as_row_to_json(db: &TestDb, query: &str, cursor: &str) -> anyhow::Result<Vec<Value>> {
    // Ties in byte order, as the source sorts them.
    let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT row_to_json(q)::text FROM ({query}) AS q
         ORDER BY {cursor}, row_to_json(q)::text COLLATE \"C\""
    )))
    .fetch_all(&db.pool)
    .await?;
    rows.into_iter()
        .map(|text| Ok(serde_json::from_str(&text)?))
        .collect()
}

#[tokio::test]
async fn records_are_what_row_to_json_gives_for_every_column_type() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    // Columns read in binary (integers, booleans, text kinds) beside columns
    // read through to_json; odd strings, NULLs, and ties on the cursor.
    sqlx::raw_sql(
        r#"CREATE TABLE odd (
             id bigint PRIMARY KEY, grp int NOT NULL, small smallint, flag boolean,
             t text, v varchar(20), c char(5), n name, "Mixed ""Case""" text,
             num numeric, f8 double precision, f4 real, ts timestamp, tz timestamptz,
             d date, u uuid, jb jsonb, js json, ints int[], texts text[], iv interval, b bytea,
             jt json);
           INSERT INTO odd SELECT i, i / 4,
             CASE WHEN i % 7 = 0 THEN NULL ELSE (i * 13 % 500 - 250)::smallint END,
             CASE WHEN i % 5 = 0 THEN NULL ELSE i % 2 = 0 END,
             CASE i % 6 WHEN 0 THEN NULL WHEN 1 THEN 'quote " back \ slash'
                        WHEN 2 THEN E'tab\tnew\nline\u0001ctl' WHEN 3 THEN 'ünïcødé ✓ 😀'
                        WHEN 4 THEN '' ELSE 'plain ' || i END,
             'v' || i, 'c' || (i % 3), ('name' || i)::name, 'm' || (i % 2),
             CASE WHEN i % 4 = 0 THEN NULL ELSE i * 1.25 - 3.50 END,
             CASE i % 5 WHEN 0 THEN 'NaN'::float8 WHEN 1 THEN 'Infinity' ELSE i / 3.0 END,
             (i / 7.0)::real,
             timestamp '2026-01-02 03:04:05.678' + i * interval '1 hour 1 second',
             timestamptz '2026-01-02 03:04:05+02' + i * interval '1 day',
             date '2026-03-01' + i, md5(i::text)::uuid,
             jsonb_build_object('k', i, 'arr', jsonb_build_array(i, 'x', NULL)),
             json_build_object('z', i, 'a', 'y'), ARRAY[i, i + 1], ARRAY['a' || i, NULL],
             i * interval '90 minutes', decode(lpad(to_hex(i), 4, '0'), 'hex'),
             -- json keeps its text as written: strings escaped otherwise
             -- than serde_json would, and padded.
             (CASE i % 4 WHEN 0 THEN '"caf\u00e9 \/ x"' WHEN 1 THEN ' "padded" '
                         WHEN 2 THEN '"plain"' ELSE '{"b": 1, "a": "\u0041"}' END)::json
           FROM generate_series(1, 57) i;"#,
    )
    .execute(&db.pool)
    .await?;
    for (query, cursor) in [
        ("SELECT * FROM odd", "grp"),
        ("SELECT * FROM odd", "id"),
        // Two columns of one name: read through row_to_json whole.
        ("SELECT id, grp, t, t AS t2, flag AS t FROM odd", "grp"),
    ] {
        let (records, _) = read_all(&db, &config(query, cursor, 5)).await?;
        let expected = as_row_to_json(&db, query, cursor).await?;
        assert_eq!(records.len(), 57, "{query} by {cursor}");
        for (i, (got, want)) in records.iter().zip(&expected).enumerate() {
            assert_eq!(got, want, "{query} by {cursor}: record {i}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_column_whose_type_changed_is_read_in_its_new_type() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    sqlx::raw_sql(
        "CREATE TABLE shifting (id int PRIMARY KEY, score int);
         INSERT INTO shifting SELECT i, i * 10 FROM generate_series(1, 20) i;",
    )
    .execute(&db.pool)
    .await?;
    let cfg = config("SELECT * FROM shifting", "id", 10);
    // One set of pools, as in a daemon: the column plan is kept between runs.
    let pools = Default::default();
    let mut source = PostgresSource::with_url(&cfg, &db.url, &pools)?;
    let first = source.fetch_page(None).await?;
    assert_eq!(
        first.records.into_values()?[0]["score"],
        serde_json::json!(10)
    );
    sqlx::raw_sql("ALTER TABLE shifting ALTER COLUMN score TYPE text USING 's' || score")
        .execute(&db.pool)
        .await?;
    let mut source = PostgresSource::with_url(&cfg, &db.url, &pools)?;
    let second = source.fetch_page(first.next_cursor.as_ref()).await?;
    let second = second.records.into_values()?;
    assert_eq!(second.len(), 10);
    assert_eq!(second[0]["score"], serde_json::json!("s110"));
    Ok(())
}

/// A source config with a short commit wait, for tests that hold
/// transactions open.
fn waiting_config(query: &str, cursor_column: &str, page_size: u32) -> PostgresSourceConfig {
    let mut cfg = config(query, cursor_column, page_size);
    cfg.commit_wait = std::time::Duration::from_millis(300);
    cfg
}

/// One run's reading: every page from `cursor` to the end, one source (so one
/// horizon) for the whole run, as a run reads. Returns the records, the
/// cursor to save, and the notices.
async fn read_run(
    db: &TestDb,
    cfg: &PostgresSourceConfig,
    mut cursor: Option<Value>,
) -> anyhow::Result<(Vec<Value>, Option<Value>, Vec<String>)> {
    let mut source = PostgresSource::with_url(cfg, &db.url, &Default::default())?;
    let mut records = Vec::new();
    let mut notices = Vec::new();
    loop {
        let page = source.fetch_page(cursor.as_ref()).await?;
        notices.extend(page.notices);
        records.extend(page.records.into_values()?);
        if page.next_cursor.is_some() {
            cursor = page.next_cursor;
        }
        if page.last {
            return Ok((records, cursor, notices));
        }
    }
}

/// Writer A opens a transaction and inserts (taking the next id and its
/// `now()`), writer B inserts after it and commits, and A commits only after
/// several runs have read. For each way a cursor column is filled, every row
/// arrives exactly once and the runs in between say what holds them back.
#[tokio::test]
async fn a_row_committed_late_is_read_once_it_commits_for_every_kind_of_cursor()
-> anyhow::Result<()> {
    let db = TestDb::new().await?;
    sqlx::raw_sql(
        "CREATE TABLE by_serial (id bigserial PRIMARY KEY, email text NOT NULL);
         CREATE TABLE by_now (id bigserial PRIMARY KEY, email text NOT NULL,
                              updated_at timestamptz NOT NULL DEFAULT now());
         CREATE TABLE by_clock (id bigserial PRIMARY KEY, email text NOT NULL,
                                updated_at timestamptz NOT NULL DEFAULT clock_timestamp());
         CREATE TABLE by_trigger (id bigserial PRIMARY KEY, email text NOT NULL,
                                  updated_at timestamp);
         CREATE FUNCTION stamp() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN NEW.updated_at := now(); RETURN NEW; END $$;
         CREATE TRIGGER stamp BEFORE INSERT OR UPDATE ON by_trigger
           FOR EACH ROW EXECUTE FUNCTION stamp();",
    )
    .execute(&db.pool)
    .await?;
    for (table, cursor) in [
        ("by_serial", "id"),
        ("by_now", "updated_at"),
        ("by_clock", "updated_at"),
        ("by_trigger", "updated_at"),
    ] {
        let insert = format!(
            "INSERT INTO {table} (email) SELECT 'u' || i || '@x.test' FROM generate_series(1, $1) i"
        );
        sqlx::query(sqlx::AssertSqlSafe(insert.clone()))
            .bind(20)
            .execute(&db.pool)
            .await?;
        let columns = if cursor == "id" {
            "id, email".to_string()
        } else {
            format!("id, email, {cursor}")
        };
        let cfg = waiting_config(&format!("SELECT {columns} FROM {table}"), cursor, 7);
        let (mut seen, saved, notices) = read_run(&db, &cfg, None).await?;
        assert_eq!(seen.len(), 20, "{table}: the first run reads what is there");
        assert!(notices.is_empty(), "{table}: {notices:?}");

        // A takes the next id (and its now()) first, B commits after it.
        let mut writer_a = db.pool.begin().await?;
        sqlx::query(sqlx::AssertSqlSafe(insert.clone()))
            .bind(1)
            .execute(&mut *writer_a)
            .await?;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        sqlx::query(sqlx::AssertSqlSafe(insert.clone()))
            .bind(3)
            .execute(&db.pool)
            .await?;

        // Runs while A is open read nothing new and say why.
        let mut cursor = saved;
        for run in 0..3 {
            let (records, saved, notices) = read_run(&db, &cfg, cursor.clone()).await?;
            assert!(
                records.is_empty(),
                "{table}, run {run} while A is open read {records:?}: it would save a cursor past A's row"
            );
            assert_eq!(saved, cursor, "{table}: the cursor stays");
            assert!(
                notices
                    .iter()
                    .any(|n| n.contains("open source transaction")),
                "{table}: {notices:?}"
            );
            cursor = saved;
        }
        writer_a.commit().await?;

        let (records, _, notices) = read_run(&db, &cfg, cursor).await?;
        assert!(notices.is_empty(), "{table}: {notices:?}");
        seen.extend(records);
        let mut got = ids(&seen);
        got.sort();
        assert_eq!(
            got,
            (1..=24).collect::<Vec<_>>(),
            "{table}: every committed row exactly once"
        );
    }
    Ok(())
}

/// Four writers commit out of order (each holds its transaction a random
/// while after taking its id and stamp) while a reader runs again and again
/// from the cursor it saved: every committed row is read exactly once.
#[tokio::test]
async fn writers_committing_out_of_order_lose_no_row_to_a_reader_running_meanwhile()
-> anyhow::Result<()> {
    let db = TestDb::new().await?;
    sqlx::raw_sql(
        "CREATE TABLE stream (id bigserial PRIMARY KEY, email text NOT NULL,
                              updated_at timestamptz NOT NULL DEFAULT now())",
    )
    .execute(&db.pool)
    .await?;
    for cursor in ["id", "updated_at"] {
        sqlx::raw_sql("TRUNCATE stream").execute(&db.pool).await?;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut writers = Vec::new();
        for w in 0..4u64 {
            let pool = db.pool.clone();
            writers.push(tokio::spawn(async move {
                for i in 0..40u64 {
                    let mut tx = pool.begin().await?;
                    sqlx::query("INSERT INTO stream (email) VALUES ('w@x.test')")
                        .execute(&mut *tx)
                        .await?;
                    // A spread of hold times, so commits overtake each other.
                    let hold = (w * 7 + i * 13) % 30;
                    tokio::time::sleep(std::time::Duration::from_millis(hold)).await;
                    tx.commit().await?;
                }
                anyhow::Ok(())
            }));
        }
        let cfg = waiting_config("SELECT id, email, updated_at FROM stream", cursor, 5);
        let reader = {
            let (db_url, done) = (db.url.clone(), done.clone());
            let cfg = cfg.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut cursor = None;
                loop {
                    let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                    let mut source = PostgresSource::with_url(&cfg, &db_url, &Default::default())?;
                    loop {
                        let page = source.fetch_page(cursor.as_ref()).await?;
                        seen.extend(page.records.into_values()?);
                        if page.next_cursor.is_some() {
                            cursor = page.next_cursor;
                        }
                        if page.last {
                            break;
                        }
                    }
                    if finished {
                        return anyhow::Ok(seen);
                    }
                }
            })
        };
        for writer in writers {
            writer.await??;
        }
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        // A hang guard only: the reader's last pass takes well under a second.
        let seen = tokio::time::timeout(std::time::Duration::from_secs(60), reader).await???;
        let mut got = ids(&seen);
        got.sort();
        let committed: Vec<i64> = sqlx::query_scalar("SELECT id FROM stream ORDER BY id")
            .fetch_all(&db.pool)
            .await?;
        assert_eq!(committed.len(), 160);
        assert_eq!(
            got, committed,
            "by {cursor}: every committed row exactly once"
        );
    }
    Ok(())
}

/// Two syncs read one query at one URL, paging by different columns: each
/// pages by its own (a plan cached for one is not used for the other).
#[tokio::test]
async fn syncs_differing_only_in_cursor_column_each_page_by_their_own() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    // `seq` runs backwards against `id`: a plan paging by the wrong one
    // reads a fraction of the rows.
    sqlx::raw_sql(
        "CREATE TABLE members (id int PRIMARY KEY, seq int UNIQUE NOT NULL, email text);
         INSERT INTO members SELECT i, 1000 - i * 3, 'm' || i || '@x.test' FROM generate_series(1, 50) i;",
    )
    .execute(&db.pool)
    .await?;
    let pools = syncward::source::postgres::PostgresSourcePools::default();
    let query = "SELECT id, seq, email FROM members";
    for cursor in ["id", "seq", "id"] {
        let cfg = config(query, cursor, 7);
        let mut seen = Vec::new();
        let mut at = None;
        loop {
            // One process's pools (and plans), as two workspaces' syncs share.
            let mut source = PostgresSource::with_url(&cfg, &db.url, &pools)?;
            let page = source.fetch_page(at.as_ref()).await?;
            seen.extend(page.records.into_values()?);
            at = page.next_cursor.or(at);
            if page.last {
                break;
            }
        }
        let mut got = ids(&seen);
        got.sort();
        assert_eq!(got, (1..=50).collect::<Vec<_>>(), "paging by {cursor}");
    }
    Ok(())
}
