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
