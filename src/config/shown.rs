//! How settings are serialized, for the two readers of the settings as data:
//! people (`check-config`, with every secret redacted) and the reload's
//! restart diff (every secret as a digest, so a changed password is named
//! without its value being kept or compared in the clear). A setting's
//! fields say which helper they take (`#[serde(serialize_with = ...)]`);
//! the rest serialize as themselves. So a key added to a settings struct is
//! shown and diffed with nothing else to update.

use std::cell::Cell;
use std::sync::OnceLock;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use super::url_secrets::{REDACTED, redact_url, redact_url_text};

/// Who the serialization is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    /// A person: secrets redacted (a URL keeps all but its password).
    Person,
    /// The restart diff: secrets as digests under this process's key.
    Diff,
}

thread_local! {
    static READER: Cell<Reader> = const { Cell::new(Reader::Person) };
}

/// `value` as JSON for a person: every secret redacted.
pub fn for_people<T: Serialize>(value: &T) -> serde_json::Value {
    as_json(value, Reader::Person)
}

/// `value` as JSON for comparing two versions of it: every secret replaced by
/// a digest under a key of this process (equal secrets, equal digests; the
/// digest is never shown, and a guess cannot be checked against it elsewhere).
pub fn for_diff<T: Serialize>(value: &T) -> serde_json::Value {
    as_json(value, Reader::Diff)
}

fn as_json<T: Serialize>(value: &T, reader: Reader) -> serde_json::Value {
    let before = READER.with(|r| r.replace(reader));
    // Settings are plain data: only a map with non-string keys could fail,
    // and there is none.
    let json = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
    READER.with(|r| r.set(before));
    json
}

fn reader() -> Reader {
    READER.with(Cell::get)
}

fn digest(secret: &str) -> String {
    static KEY: OnceLock<[u8; 32]> = OnceLock::new();
    let key = KEY.get_or_init(rand::random);
    let mut hash = Sha256::new();
    hash.update(key);
    hash.update(secret.as_bytes());
    hex::encode(hash.finalize())
}

/// A secret: `[redacted]`, or its digest for the diff.
pub fn secret<S: Serializer>(value: &SecretString, s: S) -> Result<S::Ok, S::Error> {
    match reader() {
        Reader::Person => s.serialize_str(REDACTED),
        Reader::Diff => s.serialize_str(&digest(value.expose_secret())),
    }
}

/// An optional secret, absent when unset.
pub fn optional_secret<S: Serializer>(
    value: &Option<SecretString>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => secret(value, s),
        None => s.serialize_none(),
    }
}

/// A URL that may hold a password: shown without it, or its digest for the diff.
pub fn secret_url<S: Serializer>(value: &SecretString, s: S) -> Result<S::Ok, S::Error> {
    match reader() {
        Reader::Person => s.serialize_str(&redact_url(value)),
        Reader::Diff => s.serialize_str(&digest(value.expose_secret())),
    }
}

/// An optional URL that may hold a secret in its query or user-info.
pub fn optional_url<S: Serializer>(value: &Option<url::Url>, s: S) -> Result<S::Ok, S::Error> {
    match (value, reader()) {
        (None, _) => s.serialize_none(),
        (Some(url), Reader::Person) => s.serialize_str(&redact_url_text(url.as_str())),
        (Some(url), Reader::Diff) => s.serialize_str(&digest(url.as_str())),
    }
}

/// Durations read as humantime (`90s`, `1h 30m`) and shown in the words of
/// `words::duration_text` (`10y`, `7d`).
pub mod duration {
    use super::*;

    pub fn serialize<S: Serializer>(value: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&crate::words::duration_text(*value))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        humantime_serde::deserialize(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A settings section as a new one would be written: its secret and its
    /// URL take the helpers, and nothing else names them.
    #[derive(Serialize)]
    struct NewSection {
        #[serde(serialize_with = "secret")]
        api_key: SecretString,
        #[serde(serialize_with = "secret_url")]
        upstream: SecretString,
        #[serde(with = "duration")]
        every: Duration,
        plain: u32,
    }

    fn section(key: &str, password: &str) -> NewSection {
        NewSection {
            api_key: key.to_string().into(),
            upstream: format!("https://user:{password}@example.test/x").into(),
            every: Duration::from_secs(90),
            plain: 3,
        }
    }

    #[test]
    fn a_new_key_is_redacted_for_people_and_its_change_is_seen_by_the_diff() {
        let shown = for_people(&section("k-one", "p-one"));
        assert_eq!(shown["api_key"], REDACTED);
        assert_eq!(
            shown["upstream"],
            format!("https://user:{REDACTED}@example.test/x")
        );
        assert_eq!(shown["every"], "1m 30s");
        assert_eq!(shown["plain"], 3);
        assert!(!shown.to_string().contains("one"), "{shown}");

        let (a, b) = (
            for_diff(&section("k-one", "p-one")),
            for_diff(&section("k-two", "p-one")),
        );
        assert_ne!(a["api_key"], b["api_key"], "a changed secret differs");
        assert_eq!(a["upstream"], b["upstream"], "an unchanged one does not");
        assert!(
            !a.to_string().contains("one"),
            "no secret in the clear: {a}"
        );
        // The reader goes back to people once the diff is made.
        assert_eq!(for_people(&section("k-one", "p-one"))["api_key"], REDACTED);
    }
}
