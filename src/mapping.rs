//! Mapping: turns a source record into a `Contact` by the sync's `[mapping]`.
//! Field names may be dotted paths into nested objects
//! (`defaultEmailAddress.emailAddress`); values keep their JSON types.

use serde_json::{Map, Value};

use crate::config::MappingConfig;
use crate::destination::Contact;

/// Why a record cannot be mapped: it is rejected, not a crash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    #[error("the record has no e-mail address in field \"{0}\"")]
    MissingEmail(String),
}

impl MappingError {
    /// The code kept on the rejected record.
    pub fn code(&self) -> &'static str {
        match self {
            MappingError::MissingEmail(_) => "missing_email",
        }
    }
}

pub fn map_record(mapping: &MappingConfig, record: &Value) -> Result<Contact, MappingError> {
    let email = lookup(record, &mapping.email)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .ok_or_else(|| MappingError::MissingEmail(mapping.email.clone()))?;
    let mut attributes = Map::new();
    for (name, field) in &mapping.attributes {
        // Absent fields are left out rather than sent as null: an upsert must not
        // blank an attribute the source simply does not have.
        if let Some(value) = lookup(record, field) {
            attributes.insert(name.clone(), value.clone());
        }
    }
    Ok(Contact {
        email: email.to_string(),
        attributes,
    })
}

/// A field by name; a name with dots is tried whole first, then as a path.
fn lookup<'a>(record: &'a Value, field: &str) -> Option<&'a Value> {
    if let Some(v) = record.get(field) {
        return Some(v);
    }
    field.split('.').try_fold(record, |v, part| v.get(part))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::*;

    fn mapping(email: &str, attrs: &[(&str, &str)]) -> MappingConfig {
        MappingConfig {
            email: email.into(),
            attributes: attrs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    #[test]
    fn maps_flat_and_nested_fields_keeping_json_types() {
        let m = mapping(
            "defaultEmailAddress.emailAddress",
            &[("AGE", "age"), ("VIP", "flags.vip"), ("NAME", "name")],
        );
        let r = json!({"defaultEmailAddress": {"emailAddress": "ann@example.com"}, "age": 41, "flags": {"vip": true}, "name": null});
        let c = map_record(&m, &r).unwrap();
        assert_eq!(c.email, "ann@example.com");
        assert_eq!(c.attributes["AGE"], json!(41));
        assert_eq!(c.attributes["VIP"], json!(true));
        assert_eq!(c.attributes["NAME"], Value::Null);
    }

    #[test]
    fn a_record_without_the_email_is_a_missing_email_error() {
        let m = mapping("email", &[]);
        for r in [
            json!({}),
            json!({"email": null}),
            json!({"email": "  "}),
            json!({"email": 5}),
        ] {
            assert_eq!(map_record(&m, &r).unwrap_err().code(), "missing_email");
        }
    }

    proptest::proptest! {
        /// Any record and any (dotted) field names: mapping never panics, and
        /// a mapped contact always has a non-empty e-mail.
        #[test]
        fn any_record_maps_or_is_rejected_without_panicking(
            record in crate::worker::arbitrary_json(),
            email in "[a-z.]{0,12}",
            fields in proptest::collection::btree_map("[A-Z]{1,6}", "[a-z.]{0,12}", 0..5),
        ) {
            let mapping = MappingConfig { email, attributes: fields.into_iter().collect() };
            if let Ok(contact) = map_record(&mapping, &record) {
                proptest::prop_assert!(!contact.email.is_empty());
            }
        }
    }
}
