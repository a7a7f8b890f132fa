//! Delivery keys: the identity of one record's delivery, stable across runs and
//! versions, and holding no record data in clear.
//!
//! Encoding (version 1), hashed with SHA-256:
//!
//! ```text
//! "syncward.delivery-key.v1"            domain tag, raw bytes
//! field(sync id)                        UTF-8
//! field(source fingerprint)             UTF-8; from a sync's first full resync on, followed by
//!                                       `#epoch=N` (`keyed_fingerprint`; epoch 0 adds nothing)
//! field(page cursor)                    canonical JSON of the cursor the page was read from (`null` at the start)
//! field(position on the page)           u64 big-endian, 8 bytes
//! field(record)                         canonical JSON of the record
//! field(x) = u64 big-endian length of x ‖ x
//! ```
//!
//! Canonical JSON is `crate::canonical_json`'s. `tests/vectors/delivery_keys.json`
//! pins the output; changing it would make every replay send again.

use std::fmt;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::canonical_json::{canonical_json, write_value};
use crate::source::{Records, SourceError};

const DOMAIN: &[u8] = b"syncward.delivery-key.v1";
/// A page's identity in the ledger (`store::ledger`): the same first fields as
/// its keys, under another tag. Persisted: changing it would make every page
/// look unstaked.
const PAGE_DOMAIN: &[u8] = b"syncward.ledger-page.v1";
/// Diff mode's keys and digests (`diff_page`).
const DIFF_DOMAIN: &[u8] = b"syncward.diff-key.v1";
const IDENTITY_DOMAIN: &[u8] = b"syncward.record-identity.v1";

/// The fingerprint a run keys its records with: the source's, in the sync's
/// ledger epoch. A full resync starts a new epoch, so no key of an earlier one
/// matches and every record is sent once more; epoch 0 leaves the source's
/// fingerprint as it is, so keys from before epochs existed still match.
pub fn keyed_fingerprint(source_fingerprint: String, epoch: i32) -> String {
    if epoch == 0 {
        source_fingerprint
    } else {
        format!("{source_fingerprint}#epoch={epoch}")
    }
}

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
        PageKeys::new(sync_id, fingerprint, page_cursor).key(position, record)
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

/// Derives the keys of one page: the fields its keys share are hashed once,
/// and one buffer serves every record's canonical bytes.
pub struct PageKeys {
    /// The hash state after the domain tag and the shared fields.
    prefix: Sha256,
    page: [u8; 32],
    buffer: Vec<u8>,
}

impl fmt::Debug for PageKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PageKeys({})", hex::encode(self.page))
    }
}

impl PageKeys {
    pub fn new(sync_id: &str, fingerprint: &str, page_cursor: Option<&Value>) -> Self {
        let cursor = canonical_json(page_cursor.unwrap_or(&Value::Null));
        let shared = |domain: &[u8]| {
            let mut hash = Sha256::new();
            hash.update(domain);
            for bytes in [
                sync_id.as_bytes(),
                fingerprint.as_bytes(),
                cursor.as_bytes(),
            ] {
                field(&mut hash, bytes);
            }
            hash
        };
        Self {
            prefix: shared(DOMAIN),
            page: shared(PAGE_DOMAIN).finalize().into(),
            buffer: Vec::new(),
        }
    }

    /// The page's identity in the ledger.
    pub fn page_id(&self) -> [u8; 32] {
        self.page
    }

    pub fn key(&mut self, position: u64, record: &Value) -> DeliveryKey {
        self.buffer.clear();
        write_value(record, &mut self.buffer);
        self.hash_buffer(position)
    }

    /// The key of record `position` of a page, from the canonical bytes its
    /// source writes for it (a record the ledger replays is never built).
    pub fn key_of(
        &mut self,
        records: &Records,
        position: usize,
    ) -> Result<DeliveryKey, SourceError> {
        self.buffer.clear();
        records.write_canonical(position, &mut self.buffer)?;
        Ok(self.hash_buffer(position as u64))
    }

    fn hash_buffer(&self, position: u64) -> DeliveryKey {
        let mut hash = self.prefix.clone();
        field(&mut hash, &position.to_be_bytes());
        field(&mut hash, &self.buffer);
        DeliveryKey(hash.finalize().into())
    }
}

/// Diff mode's key of a record: the sync and source, who the record is
/// (`identity`), what it was last delivered as (`previous`) and what it is
/// now (`content`), with no page or position: the same change of the same
/// record has one key whichever page it is read on, so a run that died
/// after sending it finds it completed; and a record changed back to an
/// earlier content (A, B, A) gets a new key, as it must be sent again.
pub fn diff_key(
    sync_id: &str,
    fingerprint: &str,
    identity: &[u8; 32],
    previous: Option<&[u8; 32]>,
    content: &[u8; 32],
) -> DeliveryKey {
    let mut hash = Sha256::new();
    hash.update(DIFF_DOMAIN);
    field(&mut hash, sync_id.as_bytes());
    field(&mut hash, fingerprint.as_bytes());
    field(&mut hash, identity);
    field(&mut hash, previous.map_or(&[][..], |p| &p[..]));
    field(&mut hash, content);
    DeliveryKey(hash.finalize().into())
}

/// Who a record is, in diff mode: a digest of its mapped e-mail address
/// (lower-cased), salted with the sync id and ledger epoch, so the store
/// keeps no address and the digest alone names the record's state.
pub fn identity_digest(sync_id: &str, epoch: i32, email: &str) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(IDENTITY_DOMAIN);
    field(&mut hash, sync_id.as_bytes());
    field(&mut hash, &epoch.to_be_bytes());
    field(&mut hash, email.to_lowercase().as_bytes());
    hash.finalize().into()
}

fn field(hash: &mut Sha256, bytes: &[u8]) {
    hash.update((bytes.len() as u64).to_be_bytes());
    hash.update(bytes);
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
    fn page_ids_are_pinned_and_shared_by_a_pages_keys_only() {
        let cursor = json!({"type": "bigint", "value": "1000"});
        let page = PageKeys::new("contacts", "postgres:fp", Some(&cursor)).page_id();
        // Persisted in the ledger: this value must never change.
        assert_eq!(
            hex::encode(page),
            "4597fa90d3c0353d40979a0216022a70585aed85253dfce9b2807421f7ae3fb8"
        );
        assert_eq!(
            page,
            PageKeys::new("contacts", "postgres:fp", Some(&cursor)).page_id()
        );
        assert_ne!(
            page,
            PageKeys::new("contacts", "postgres:fp", None).page_id()
        );
        assert_ne!(
            page,
            PageKeys::new("other", "postgres:fp", Some(&cursor)).page_id()
        );
        // Not any key of the page.
        let mut keys = PageKeys::new("contacts", "postgres:fp", Some(&cursor));
        assert_ne!(keys.key(0, &json!({})).0, page);
    }

    #[test]
    fn length_prefixes_keep_field_boundaries_apart() {
        let r = json!({});
        assert_ne!(
            DeliveryKey::derive("ab", "c", None, 0, &r),
            DeliveryKey::derive("a", "bc", None, 0, &r)
        );
    }

    proptest::proptest! {
        /// Equal records give equal keys; any change to one field, the
        /// position, the cursor or the sync gives another key; and the key
        /// holds no value of the record in clear.
        #[test]
        fn keys_are_stable_sensitive_to_every_field_and_opaque(
            fields in proptest::collection::btree_map("[a-z_]{1,8}", ".{1,16}", 1..8),
            pick in proptest::prelude::any::<proptest::sample::Index>(),
            position in 0u64..10_000,
        ) {
            let record = Value::Object(
                fields.iter().map(|(k, v)| (k.clone(), Value::from(v.clone()))).collect(),
            );
            let rebuilt = Value::Object(
                fields.iter().rev().map(|(k, v)| (k.clone(), Value::from(v.clone()))).collect(),
            );
            let cursor = json!({"type": "bigint", "value": "41"});
            let key = DeliveryKey::derive("s", "fp", Some(&cursor), position, &record);
            proptest::prop_assert_eq!(key, DeliveryKey::derive("s", "fp", Some(&cursor), position, &rebuilt));

            let (name, value) = fields.iter().nth(pick.index(fields.len())).unwrap();
            let mut changed = record.clone();
            changed[name.as_str()] = Value::from(format!("{value}!"));
            proptest::prop_assert_ne!(key, DeliveryKey::derive("s", "fp", Some(&cursor), position, &changed));
            proptest::prop_assert_ne!(key, DeliveryKey::derive("s", "fp", Some(&cursor), position + 1, &record));
            proptest::prop_assert_ne!(key, DeliveryKey::derive("s", "fp", None, position, &record));
            proptest::prop_assert_ne!(key, DeliveryKey::derive("t", "fp", Some(&cursor), position, &record));

            let hex = key.hex();
            proptest::prop_assert_eq!(hex.len(), 64);
            proptest::prop_assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
            for v in fields.values().filter(|v| v.chars().any(|c| !c.is_ascii_hexdigit())) {
                proptest::prop_assert!(!hex.contains(v.as_str()));
            }
        }
    }
}
