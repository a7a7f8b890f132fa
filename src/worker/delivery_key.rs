//! Delivery keys: the identity of one record's delivery, stable across runs and
//! versions, and holding no record data in clear.
//!
//! Encoding (version 1), hashed with SHA-256:
//!
//! ```text
//! "syncward.delivery-key.v1"            domain tag, raw bytes
//! field(sync id)                        UTF-8
//! field(source fingerprint)             UTF-8
//! field(page cursor)                    canonical JSON of the cursor the page was read from (`null` at the start)
//! field(position on the page)           u64 big-endian, 8 bytes
//! field(record)                         canonical JSON of the record
//! field(x) = u64 big-endian length of x ‖ x
//! ```
//!
//! Canonical JSON: object keys sorted by their UTF-8 bytes, no whitespace,
//! strings and numbers as serde_json writes them. `tests/vectors/delivery_keys.json`
//! pins the output; changing it would make every replay send again.

use std::fmt;

use serde_json::Value;
use sha2::{Digest, Sha256};

const DOMAIN: &[u8] = b"syncward.delivery-key.v1";

/// A 32-byte SHA-256 delivery key.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeliveryKey(pub [u8; 32]);

impl DeliveryKey {
    pub fn derive(
        sync_id: &str,
        fingerprint: &str,
        page_cursor: Option<&Value>,
        position: u64,
        record: &Value,
    ) -> Self {
        let mut hash = Sha256::new();
        hash.update(DOMAIN);
        let mut field = |bytes: &[u8]| {
            hash.update((bytes.len() as u64).to_be_bytes());
            hash.update(bytes);
        };
        field(sync_id.as_bytes());
        field(fingerprint.as_bytes());
        field(canonical_json(page_cursor.unwrap_or(&Value::Null)).as_bytes());
        field(&position.to_be_bytes());
        field(canonical_json(record).as_bytes());
        Self(hash.finalize().into())
    }

    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }
}

impl fmt::Debug for DeliveryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeliveryKey({})", self.hex())
    }
}

impl fmt::Display for DeliveryKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.hex())
    }
}

/// JSON with object keys sorted and no whitespace, whatever order the value
/// was built in.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(serde::Deserialize)]
    struct Vector {
        sync_id: String,
        fingerprint: String,
        page_cursor: Value,
        position: u64,
        record: Value,
        key: String,
    }

    #[test]
    fn committed_test_vectors_match() {
        let text = include_str!("../../tests/vectors/delivery_keys.json");
        let vectors: Vec<Vector> = serde_json::from_str(text).unwrap();
        assert!(vectors.len() >= 5);
        for v in vectors {
            let cursor = (!v.page_cursor.is_null()).then_some(&v.page_cursor);
            let key =
                DeliveryKey::derive(&v.sync_id, &v.fingerprint, cursor, v.position, &v.record);
            assert_eq!(
                key.hex(),
                v.key,
                "vector for {} at {}",
                v.sync_id,
                v.position
            );
        }
    }

    #[test]
    fn key_order_does_not_matter_but_every_field_does() {
        let a =
            json!({"email": "ann@example.com", "id": 1, "name": {"first": "Ann", "last": "Lee"}});
        let b: Value = serde_json::from_str(
            r#"{"name":{"last":"Lee","first":"Ann"},"id":1,"email":"ann@example.com"}"#,
        )
        .unwrap();
        let cursor = json!({"type": "bigint", "value": "0"});
        let k = |sync: &str, fp: &str, c: Option<&Value>, pos: u64, r: &Value| {
            DeliveryKey::derive(sync, fp, c, pos, r)
        };
        let base = k("s", "fp", Some(&cursor), 3, &a);
        assert_eq!(base, k("s", "fp", Some(&cursor), 3, &b));
        assert_ne!(base, k("t", "fp", Some(&cursor), 3, &a));
        assert_ne!(base, k("s", "fq", Some(&cursor), 3, &a));
        assert_ne!(base, k("s", "fp", None, 3, &a));
        assert_ne!(base, k("s", "fp", Some(&cursor), 4, &a));
        assert_ne!(
            base,
            k(
                "s",
                "fp",
                Some(&cursor),
                3,
                &json!({"email": "ann@example.com", "id": 2})
            )
        );
    }

    #[test]
    fn length_prefixes_keep_field_boundaries_apart() {
        let r = json!({});
        assert_ne!(
            DeliveryKey::derive("ab", "c", None, 0, &r),
            DeliveryKey::derive("a", "bc", None, 0, &r)
        );
    }

    #[test]
    fn canonical_json_sorts_keys_and_drops_whitespace() {
        let v: Value =
            serde_json::from_str(r#"{ "b": [1, {"z": null, "a": "x\"y"}], "a": 1.5 }"#).unwrap();
        assert_eq!(
            canonical_json(&v),
            r#"{"a":1.5,"b":[1,{"a":"x\"y","z":null}]}"#
        );
    }
}
