//! How the columns of the operator's query become a record: the JSON object
//! `row_to_json` would give, built without asking Postgres to write (and us to
//! parse) JSON text for columns whose JSON form is plain. Integers, booleans
//! and text are read in binary and become JSON numbers, booleans and strings,
//! exactly as `row_to_json` renders them; every other type is read as
//! `to_json(column)::text`, the very text `row_to_json` embeds for it. Records
//! (and so delivery keys) are the same either way: `tests/it/postgres_source.rs`
//! compares them with `row_to_json` over many types.
//!
//! A query with two columns of one name is read through `row_to_json` whole.
//!
//! A page keeps its rows (`PostgresRows`): a record's canonical JSON, which its
//! delivery key hashes, is written straight from the row, and the record is
//! built as a JSON value only when the run needs it (to map and send it).
//!
//! Text is checked as UTF-8 where it is read. A database in `SQL_ASCII`
//! stores any bytes and sends them as they are: a row holding bytes that are
//! not UTF-8 is `SourceError::Undecodable`, which rejects that record alone.

use std::sync::Arc;

use serde_json::{Map, Value};
use sqlx::postgres::{PgColumn, PgRow, PgTypeInfo};
use sqlx::{Column, Row, TypeInfo, ValueRef};

use crate::canonical_json::{write_str, write_value};
use crate::source::page::{PageRecords, SourceError};

/// How one column is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    Bool,
    Int2,
    Int4,
    Int8,
    /// text, varchar, char(n), name.
    Text,
    /// `to_json(column)::text`, parsed.
    Json,
}

impl Read {
    fn of(type_info: &PgTypeInfo) -> Self {
        match type_info.name() {
            "BOOL" => Read::Bool,
            "INT2" => Read::Int2,
            "INT4" => Read::Int4,
            "INT8" => Read::Int8,
            "TEXT" | "VARCHAR" | "BPCHAR" | "NAME" => Read::Text,
            _ => Read::Json,
        }
    }

    /// The type a binary read expects back (a changed table no longer matches).
    fn expects(self, type_info: &PgTypeInfo) -> bool {
        match self {
            // to_json(...)::text is always text.
            Read::Json => type_info.name() == "TEXT",
            read => Read::of(type_info) == read,
        }
    }
}

/// The record columns of a page query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnPlan {
    /// Column names and reads, in the query's order; empty when the whole row
    /// is read through `row_to_json`.
    columns: Vec<(String, Read)>,
    /// The record's canonical order: column indexes by name, each with its
    /// name as canonical JSON writes it (`"name":`).
    canonical: Vec<(usize, Vec<u8>)>,
    /// The cursor column, when it is read in binary and its text form is its
    /// JSON value's: its index and Postgres type name. Otherwise the page
    /// query selects the cursor's text and type besides the record.
    cursor: Option<(usize, &'static str)>,
}

impl ColumnPlan {
    /// The plan for a query whose result has these columns, paged by
    /// `cursor_column`.
    pub fn for_columns(columns: &[PgColumn], cursor_column: &str) -> Self {
        let mut names: Vec<&str> = columns.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        let unique = names.windows(2).all(|w| w[0] != w[1]);
        if !unique {
            return Self {
                columns: Vec::new(),
                canonical: Vec::new(),
                cursor: None,
            };
        }
        let cursor = columns
            .iter()
            .position(|c| c.name() == cursor_column)
            .and_then(|i| {
                let name = match columns[i].type_info().name() {
                    "INT2" => "smallint",
                    "INT4" => "integer",
                    "INT8" => "bigint",
                    "TEXT" => "text",
                    "VARCHAR" => "character varying",
                    _ => return None,
                };
                Some((i, name))
            });
        let mut canonical: Vec<(usize, Vec<u8>)> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut name = Vec::new();
                write_str(c.name(), &mut name);
                name.push(b':');
                (i, name)
            })
            .collect();
        canonical.sort_by(|a, b| columns[a.0].name().cmp(columns[b.0].name()));
        Self {
            columns: columns
                .iter()
                .map(|c| (c.name().to_string(), Read::of(c.type_info())))
                .collect(),
            canonical,
            cursor,
        }
    }

    /// Whether the page query needs the cursor's text and type selected.
    pub fn selects_cursor(&self) -> bool {
        self.cursor.is_none()
    }

    /// The cursor's text form and type: read from the row's record columns,
    /// or from the two the page query selects besides them.
    pub fn cursor_of(&self, row: &PgRow) -> Result<(String, String), SourceError> {
        let Some((i, type_name)) = self.cursor else {
            let at = self.width();
            return Ok((
                row.try_get(at).map_err(decode_error)?,
                row.try_get(at + 1).map_err(decode_error)?,
            ));
        };
        let text = match self.columns[i].1 {
            Read::Int2 => row
                .try_get_unchecked::<Option<i16>, _>(i)
                .map(|v| v.map(|v| v.to_string())),
            Read::Int4 => row
                .try_get_unchecked::<Option<i32>, _>(i)
                .map(|v| v.map(|v| v.to_string())),
            Read::Int8 => row
                .try_get_unchecked::<Option<i64>, _>(i)
                .map(|v| v.map(|v| v.to_string())),
            Read::Text => row.try_get_unchecked::<Option<String>, _>(i),
            // `for_columns` makes only integer and text columns the cursor.
            Read::Bool | Read::Json => {
                return Err(SourceError::Query(
                    "the cursor column is not read as an integer or text".into(),
                ));
            }
        }
        .map_err(decode_error)?;
        // The page query reads no row whose cursor is NULL.
        let text = text.unwrap_or_else(|| "null".into());
        Ok((text, type_name.to_string()))
    }

    /// The bytes of the row's cursor value as read: equal exactly when the
    /// cursor values are (binary integers and text, or the value's text).
    /// Compares rows for ties without rendering the value.
    pub fn cursor_bytes<'r>(&self, row: &'r PgRow) -> Result<&'r [u8], SourceError> {
        let at = match self.cursor {
            Some((i, _)) => i,
            None => self.width(),
        };
        let raw = row.try_get_raw(at).map_err(decode_error)?;
        if raw.is_null() {
            return Ok(&[]);
        }
        raw.as_bytes()
            .map_err(|e| SourceError::Query(format!("reading the cursor value failed: {e}")))
    }

    /// How many result columns hold the record.
    pub fn width(&self) -> usize {
        self.columns.len().max(1)
    }

    /// The select list that reads the record from the subquery `q`.
    pub fn select_list(&self) -> String {
        if self.columns.is_empty() {
            return "row_to_json(q)::text".into();
        }
        let items: Vec<String> = self
            .columns
            .iter()
            .map(|(name, read)| {
                let column = format!("q.\"{}\"", name.replace('"', "\"\""));
                match read {
                    Read::Json => format!("to_json({column})::text"),
                    _ => column,
                }
            })
            .collect();
        items.join(", ")
    }

    /// False when the row's columns are no longer what the plan was made for
    /// (the table changed since): plan again.
    pub fn matches(&self, row: &PgRow) -> bool {
        if self.columns.is_empty() {
            return true;
        }
        row.columns().len() >= self.columns.len()
            && self
                .columns
                .iter()
                .zip(row.columns())
                .all(|((_, read), column)| read.expects(column.type_info()))
    }

    /// The record of one row.
    pub fn record(&self, row: &PgRow) -> Result<Value, SourceError> {
        if self.columns.is_empty() {
            let text = text_at(row, 0, WHOLE_ROW)?.unwrap_or("null");
            return serde_json::from_str(text)
                .map_err(|e| SourceError::Query(format!("row is not JSON: {e}")));
        }
        let mut record = Map::new();
        for (i, (name, read)) in self.columns.iter().enumerate() {
            record.insert(name.clone(), value(row, i, name, *read)?);
        }
        Ok(Value::Object(record))
    }

    /// Appends the canonical JSON of the row's record to `out`: the bytes
    /// `write_value(&self.record(row)?)` writes, without building the record.
    pub fn write_canonical(&self, row: &PgRow, out: &mut Vec<u8>) -> Result<(), SourceError> {
        if self.columns.is_empty() {
            write_value(&self.record(row)?, out);
            return Ok(());
        }
        out.push(b'{');
        for (n, (i, name)) in self.canonical.iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(name);
            let (column, read) = &self.columns[*i];
            write_column(row, *i, column, *read, out)?;
        }
        out.push(b'}');
        Ok(())
    }

    /// The row as `row_to_json` writes it: the order of rows that share a
    /// cursor value. Bytes that are not UTF-8 are read as U+FFFD here, so such
    /// a row still has its place in the order (and is rejected when keyed).
    pub fn row_text(&self, row: &PgRow) -> Result<String, SourceError> {
        if self.columns.is_empty() {
            return Ok(lossy_text_at(row, 0)?.unwrap_or_else(|| "null".into()));
        }
        let mut out = String::from("{");
        for (i, (name, read)) in self.columns.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&Value::String(name.clone()).to_string());
            out.push(':');
            match read {
                Read::Json => {
                    let text = lossy_text_at(row, i)?;
                    out.push_str(text.as_deref().unwrap_or("null"));
                }
                Read::Text => {
                    let text = lossy_text_at(row, i)?.map(Value::String);
                    out.push_str(&text.unwrap_or(Value::Null).to_string());
                }
                read => out.push_str(&value(row, i, name, *read)?.to_string()),
            }
        }
        out.push('}');
        Ok(out)
    }
}

/// The rows of one page, read with one plan; each becomes a record on demand.
pub struct PostgresRows {
    plan: Arc<ColumnPlan>,
    rows: Vec<PgRow>,
}

impl std::fmt::Debug for PostgresRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PostgresRows({})", self.rows.len())
    }
}

impl PostgresRows {
    /// Rows whose record columns `plan` reads (checked on the first row: the
    /// rows of one statement share their columns).
    pub fn new(plan: Arc<ColumnPlan>, rows: Vec<PgRow>) -> Self {
        Self { plan, rows }
    }
}

impl PageRecords for PostgresRows {
    fn len(&self) -> usize {
        self.rows.len()
    }

    fn write_canonical(&self, i: usize, out: &mut Vec<u8>) -> Result<(), SourceError> {
        self.plan.write_canonical(&self.rows[i], out)
    }

    /// Built from the row on each call: the row stays for `write_canonical`.
    fn take(&mut self, i: usize) -> Result<Value, SourceError> {
        self.plan.record(&self.rows[i])
    }
}

// Reads below skip sqlx's per-value type check: `ColumnPlan::matches` checked
// the statement's columns once for all its rows.

fn value(row: &PgRow, i: usize, name: &str, read: Read) -> Result<Value, SourceError> {
    let value = match read {
        Read::Bool => row
            .try_get_unchecked::<Option<bool>, _>(i)
            .map(|v| v.map(Value::from)),
        Read::Int2 => row
            .try_get_unchecked::<Option<i16>, _>(i)
            .map(|v| v.map(Value::from)),
        Read::Int4 => row
            .try_get_unchecked::<Option<i32>, _>(i)
            .map(|v| v.map(Value::from)),
        Read::Int8 => row
            .try_get_unchecked::<Option<i64>, _>(i)
            .map(|v| v.map(Value::from)),
        Read::Text => return Ok(text_at(row, i, name)?.map_or(Value::Null, Value::from)),
        Read::Json => {
            return match text_at(row, i, name)? {
                Some(text) => parse_json(i, text),
                None => Ok(Value::Null),
            };
        }
    };
    Ok(value.map_err(decode_error)?.unwrap_or(Value::Null))
}

/// Appends one column's canonical JSON: what `write_value(&value(row, i, read)?)`
/// writes, read from the row without building the value.
fn write_column(
    row: &PgRow,
    i: usize,
    name: &str,
    read: Read,
    out: &mut Vec<u8>,
) -> Result<(), SourceError> {
    fn number(n: Option<impl itoa::Integer>, out: &mut Vec<u8>) {
        match n {
            Some(n) => out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes()),
            None => out.extend_from_slice(b"null"),
        }
    }
    match read {
        Read::Bool => {
            let v = row
                .try_get_unchecked::<Option<bool>, _>(i)
                .map_err(decode_error)?;
            out.extend_from_slice(match v {
                Some(true) => b"true",
                Some(false) => b"false",
                None => b"null",
            });
        }
        Read::Int2 => number(
            row.try_get_unchecked::<Option<i16>, _>(i)
                .map_err(decode_error)?,
            out,
        ),
        Read::Int4 => number(
            row.try_get_unchecked::<Option<i32>, _>(i)
                .map_err(decode_error)?,
            out,
        ),
        Read::Int8 => number(
            row.try_get_unchecked::<Option<i64>, _>(i)
                .map_err(decode_error)?,
            out,
        ),
        Read::Text => match text_at(row, i, name)? {
            Some(text) => write_str(text, out),
            None => out.extend_from_slice(b"null"),
        },
        Read::Json => match text_at(row, i, name)? {
            // A JSON string with nothing escaped is already as serde_json
            // writes it (it escapes only quotes, backslashes and control
            // characters, which valid JSON text holds only escaped).
            Some(text) if is_plain_string(text) => out.extend_from_slice(text.as_bytes()),
            Some(text) => write_value(&parse_json(i, text)?, out),
            None => out.extend_from_slice(b"null"),
        },
    }
    Ok(())
}

/// What `text_at` names when the whole row is read through `row_to_json`.
const WHOLE_ROW: &str = "row_to_json";

/// Column `i` (text in either format: its bytes are the text's) as UTF-8.
/// Bytes that are not UTF-8 make the record undecodable; the message names
/// the column, never the bytes.
fn text_at<'r>(row: &'r PgRow, i: usize, name: &str) -> Result<Option<&'r str>, SourceError> {
    let Some(bytes) = raw_text(row, i)? else {
        return Ok(None);
    };
    std::str::from_utf8(bytes).map(Some).map_err(|e| {
        SourceError::Undecodable(format!(
            "column \"{}\" holds bytes that are not UTF-8 (at byte {}; a SQL_ASCII \
             database stores any bytes): the record cannot be read",
            name.escape_default(),
            e.valid_up_to()
        ))
    })
}

/// Column `i` as text, bytes that are not UTF-8 read as U+FFFD.
fn lossy_text_at(row: &PgRow, i: usize) -> Result<Option<String>, SourceError> {
    Ok(raw_text(row, i)?.map(|bytes| String::from_utf8_lossy(bytes).into_owned()))
}

fn raw_text(row: &PgRow, i: usize) -> Result<Option<&[u8]>, SourceError> {
    let raw = row.try_get_raw(i).map_err(decode_error)?;
    if raw.is_null() {
        return Ok(None);
    }
    raw.as_bytes()
        .map(Some)
        .map_err(|e| SourceError::Query(format!("reading the source rows failed: {e}")))
}

fn parse_json(i: usize, text: &str) -> Result<Value, SourceError> {
    serde_json::from_str(text)
        .map_err(|e| SourceError::Query(format!("column {i} is not JSON: {e}")))
}

fn is_plain_string(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() >= 2
        && bytes[0] == b'"'
        && bytes[bytes.len() - 1] == b'"'
        && !bytes[1..bytes.len() - 1]
            .iter()
            .any(|&b| b == b'"' || b == b'\\' || b < 0x20)
}

fn decode_error(e: sqlx::Error) -> SourceError {
    SourceError::Query(format!("reading the source rows failed: {e}"))
}
