//! An http source's page kept as the bytes it arrived in: the JSON pointers
//! are followed over borrowed raw values (`serde_json::value::RawValue`), so
//! nothing but the path to the records is parsed, and each record is parsed
//! only when the run asks for it. A page's memory is then its body plus a
//! span per record, not a tree of values several times its size (a 52 MB
//! page once took a run to 1.45 GB).

use std::collections::HashMap;
use std::ops::Range;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::canonical_json::write_value;
use crate::source::page::{PageRecords, SourceError};

/// The records of one answer: its body and where each record lies in it.
pub struct RawRecords {
    body: String,
    spans: Vec<Range<usize>>,
}

impl std::fmt::Debug for RawRecords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawRecords")
            .field("bytes", &self.body.len())
            .field("records", &self.spans.len())
            .finish()
    }
}

/// What a page's body holds at the two pointers.
pub struct RawPage {
    pub records: RawRecords,
    /// The value at the next-cursor pointer, parsed (it is small).
    pub next: Option<Value>,
}

/// Why a body could not be read as a page.
#[derive(Debug, PartialEq, Eq)]
pub enum RawPageError {
    /// Not UTF-8 JSON.
    NotJson,
    /// No array at the items pointer.
    NoArray,
}

/// Follows `pointer` (RFC 6901) from `raw`, parsing only the objects and
/// arrays on the way, borrowing every value from the body.
fn follow<'a>(raw: &'a RawValue, pointer: &str) -> Option<&'a RawValue> {
    if pointer.is_empty() {
        return Some(raw);
    }
    let mut at = raw;
    for token in pointer.strip_prefix('/')?.split('/') {
        let token = token.replace("~1", "/").replace("~0", "~");
        at = match at.get().trim_start().as_bytes().first()? {
            b'{' => {
                let object: HashMap<std::borrow::Cow<'a, str>, &'a RawValue> =
                    serde_json::from_str(at.get()).ok()?;
                object.get(token.as_str()).copied()?
            }
            b'[' => {
                let array: Vec<&'a RawValue> = serde_json::from_str(at.get()).ok()?;
                array.get(token.parse::<usize>().ok()?).copied()?
            }
            _ => return None,
        };
    }
    Some(at)
}

/// Reads `body` as a page: the array at `items_pointer` (as spans) and the
/// value at `next_pointer`.
pub fn read_page(
    body: Vec<u8>,
    items_pointer: &str,
    next_pointer: &str,
) -> Result<RawPage, RawPageError> {
    let body = String::from_utf8(body).map_err(|_| RawPageError::NotJson)?;
    let (spans, next) = {
        let root: &RawValue = serde_json::from_str(&body).map_err(|_| RawPageError::NotJson)?;
        let items = follow(root, items_pointer).ok_or(RawPageError::NoArray)?;
        let items: Vec<&RawValue> =
            serde_json::from_str(items.get()).map_err(|_| RawPageError::NoArray)?;
        let start = body.as_ptr() as usize;
        let spans = items
            .iter()
            .map(|raw| {
                let at = raw.get().as_ptr() as usize - start;
                at..at + raw.get().len()
            })
            .collect();
        let next = follow(root, next_pointer).and_then(|raw| serde_json::from_str(raw.get()).ok());
        (spans, next)
    };
    Ok(RawPage {
        records: RawRecords { body, spans },
        next,
    })
}

impl RawRecords {
    fn parse(&self, i: usize) -> Result<Value, SourceError> {
        // Each span was parsed once already, as part of the array.
        serde_json::from_str(&self.body[self.spans[i].clone()])
            .map_err(|e| SourceError::Query(format!("record {i} of the page: {e}")))
    }
}

impl PageRecords for RawRecords {
    fn len(&self) -> usize {
        self.spans.len()
    }

    fn write_canonical(&self, i: usize, out: &mut Vec<u8>) -> Result<(), SourceError> {
        write_value(&self.parse(i)?, out);
        Ok(())
    }

    fn take(&mut self, i: usize) -> Result<Value, SourceError> {
        self.parse(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_are_followed_and_records_parsed_one_at_a_time() {
        let body =
            br#"{"meta":{"next":"abc","a/b":[1,{"c":2}]},"data":[{"id":1,"x":"y"},{"id":2}]}"#;
        let page = read_page(body.to_vec(), "/data", "/meta/next").expect("a page");
        assert_eq!(page.next, Some(Value::from("abc")));
        let mut records = page.records;
        assert_eq!(records.len(), 2);
        let mut bytes = Vec::new();
        records.write_canonical(0, &mut bytes).expect("canonical");
        assert_eq!(bytes, br#"{"id":1,"x":"y"}"#);
        assert_eq!(
            records.take(1).expect("a record"),
            serde_json::json!({"id": 2})
        );
        // Escaped tokens and array indexes.
        let page = read_page(body.to_vec(), "/meta/a~1b", "/meta/a~1b/1/c").expect("a page");
        assert_eq!(page.records.len(), 2);
        assert_eq!(page.next, Some(Value::from(2)));
        // A whole-body array, a missing pointer, not JSON.
        assert_eq!(
            read_page(b"[{}]".to_vec(), "", "/next").map(|p| p.records.len()),
            Ok(1)
        );
        assert_eq!(
            read_page(body.to_vec(), "/nothing", "").err(),
            Some(RawPageError::NoArray)
        );
        assert_eq!(
            read_page(body.to_vec(), "/meta/next", "").err(),
            Some(RawPageError::NoArray)
        );
        assert_eq!(
            read_page(b"{\"data\":".to_vec(), "/data", "").err(),
            Some(RawPageError::NotJson)
        );
        assert_eq!(
            read_page(vec![0xff, 0xfe], "/data", "").err(),
            Some(RawPageError::NotJson)
        );
    }
}
