//! Source `postgres`: keyset pages that lose and repeat nothing, typed cursors,
//! a read-only query, and failures classified for the run loop.

use serde_json::Value;
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
/// previous one returned (as a run does across restarts).
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
        records.extend(page.records);
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
    // 60 rows over 7 distinct cursor values, groups straddling every page boundary.
    sqlx::raw_sql(
        "CREATE TABLE events (id int PRIMARY KEY, bucket int NOT NULL, email text);
         INSERT INTO events SELECT i, i / 9, 'e' || i || '@x.test' FROM generate_series(1, 60) i;",
    )
    .execute(&db.pool)
    .await?;
    let (records, _) = read_all(&db, &config("SELECT * FROM events", "bucket", 4)).await?;
    let mut seen = ids(&records);
    assert_eq!(seen.len(), 60, "rows lost or repeated: {seen:?}");
    seen.sort();
    assert_eq!(seen, (1..=60).collect::<Vec<_>>());
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
