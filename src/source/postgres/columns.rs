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

use serde_json::{Map, Value};
use sqlx::postgres::{PgColumn, PgRow, PgTypeInfo};
use sqlx::{Column, Row, TypeInfo};

use crate::source::page::SourceError;

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
        Self {
            columns: columns
                .iter()
                .map(|c| (c.name().to_string(), Read::of(c.type_info())))
                .collect(),
            cursor,
        }
    }

    /// Whether the page query needs the cursor's text and type selected.
    pub fn selects_cursor(&self) -> bool {
        self.cursor.is_none()
    }

    /// The cursor's text form and type, from a record read with this plan
    /// (`None` when the page query selects them).
    pub fn cursor_of(&self, record: &Value) -> Option<(String, String)> {
        let (i, type_name) = self.cursor?;
        let value = record.get(&self.columns[i].0)?;
        let text = match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        Some((text, type_name.to_string()))
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
            let text: String = row.try_get(0).map_err(decode_error)?;
            return serde_json::from_str(&text)
                .map_err(|e| SourceError::Query(format!("row is not JSON: {e}")));
        }
        let mut record = Map::new();
        for (i, (name, read)) in self.columns.iter().enumerate() {
            record.insert(name.clone(), value(row, i, *read)?);
        }
        Ok(Value::Object(record))
    }

    /// The row as `row_to_json` writes it: the order of rows that share a
    /// cursor value.
    pub fn row_text(&self, row: &PgRow) -> Result<String, SourceError> {
        if self.columns.is_empty() {
            return row.try_get(0).map_err(decode_error);
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
                    let text: Option<String> = row.try_get(i).map_err(decode_error)?;
                    out.push_str(text.as_deref().unwrap_or("null"));
                }
                read => out.push_str(&value(row, i, *read)?.to_string()),
            }
        }
        out.push('}');
        Ok(out)
    }
}

fn value(row: &PgRow, i: usize, read: Read) -> Result<Value, SourceError> {
    let value = match read {
        Read::Bool => row
            .try_get::<Option<bool>, _>(i)
            .map(|v| v.map(Value::from)),
        Read::Int2 => row.try_get::<Option<i16>, _>(i).map(|v| v.map(Value::from)),
        Read::Int4 => row.try_get::<Option<i32>, _>(i).map(|v| v.map(Value::from)),
        Read::Int8 => row.try_get::<Option<i64>, _>(i).map(|v| v.map(Value::from)),
        Read::Text => row
            .try_get::<Option<String>, _>(i)
            .map(|v| v.map(Value::from)),
        Read::Json => {
            let text: Option<String> = row.try_get(i).map_err(decode_error)?;
            return match text {
                Some(text) => serde_json::from_str(&text)
                    .map_err(|e| SourceError::Query(format!("column {i} is not JSON: {e}"))),
                None => Ok(Value::Null),
            };
        }
    };
    Ok(value.map_err(decode_error)?.unwrap_or(Value::Null))
}

fn decode_error(e: sqlx::Error) -> SourceError {
    SourceError::Query(format!("reading the source rows failed: {e}"))
}
