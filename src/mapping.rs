//! Mapping: turns a source record into a `Contact` by the sync's `[mapping]`.
//! Field names may be dotted paths into nested objects
//! (`defaultEmailAddress.emailAddress`); values keep their JSON types. The
//! e-mail address is trimmed, then must be one a mailbox can have: a record
//! whose address is not is rejected on its own, before any call.

use email_address::{EmailAddress, Options};
use serde_json::{Map, Value};

use crate::config::MappingConfig;
use crate::destination::{Consent, Contact};

/// Why a record cannot be mapped: it is rejected, not a crash.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    #[error("the record has no e-mail address in field \"{0}\"")]
    MissingEmail(String),
    /// The message names the field and the problem, never the address (which
    /// is the record's data, and may be anything at all).
    #[error("the e-mail address in field \"{field}\" is not valid: {problem}")]
    InvalidEmail { field: String, problem: String },
}

impl MappingError {
    /// The code kept on the rejected record.
    pub fn code(&self) -> &'static str {
        match self {
            MappingError::MissingEmail(_) => "missing_email",
            MappingError::InvalidEmail { .. } => "invalid_email",
        }
    }
}

pub fn map_record(mapping: &MappingConfig, record: &Value) -> Result<Contact, MappingError> {
    let email = lookup(record, &mapping.email)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .ok_or_else(|| MappingError::MissingEmail(mapping.email.clone()))?;
    email_problem(email).map_or(Ok(()), |problem| {
        Err(MappingError::InvalidEmail {
            field: mapping.email.clone(),
            problem,
        })
    })?;
    let mut attributes = Map::new();
    for (name, field) in &mapping.attributes {
        // Absent fields are left out rather than sent as null: an upsert must not
        // blank an attribute the source simply does not have.
        if let Some(value) = lookup(record, field) {
            attributes.insert(name.clone(), value.clone());
        }
    }
    // Consent and opt-out are proven by a listed value only: another value,
    // null or a missing field is unknown (a record is never put on a list,
    // nor blocklisted, by default).
    let consent = match &mapping.consent {
        None => Consent::NotAsked,
        Some(rule) => match lookup(record, &rule.field).and_then(Value::as_str) {
            Some(state) if rule.subscribed.iter().any(|s| s == state) => Consent::Subscribed,
            Some(state) if rule.unsubscribed.iter().any(|s| s == state) => Consent::Unsubscribed,
            _ => Consent::Unknown,
        },
    };
    Ok(Contact {
        email: email.to_string(),
        attributes,
        consent,
    })
}

/// What is wrong with a (trimmed) address, if anything. The syntax is the
/// `email_address` crate's (RFC 5321 local part, a domain name of at least
/// two labels), narrowed to what a mailing service takes: no display name
/// (`Ann <ann@example.com>`), no `[IP]` domain, no quoted local part (which
/// RFC 5321 allows, and which is how `"<script>"@x.example` gets through).
/// Spaces and control characters are named first, as they are the common
/// cases.
pub fn email_problem(address: &str) -> Option<String> {
    if address.chars().any(char::is_control) {
        return Some("it contains a control character".into());
    }
    if address.chars().any(char::is_whitespace) {
        return Some("it contains a space".into());
    }
    if address.starts_with('"') {
        return Some("a quoted local part is not accepted".into());
    }
    let options = Options::default()
        .with_required_tld()
        .without_domain_literal()
        .without_display_text();
    EmailAddress::parse_with_options(address, options)
        .err()
        .map(|e| {
            // The crate's sentences end with a period and start upper case.
            let text = e.to_string();
            let text = text.trim_end_matches('.');
            let mut chars = text.chars();
            match chars.next() {
                Some(first) => first.to_lowercase().chain(chars).collect(),
                None => "it is not an e-mail address".into(),
            }
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
            consent: None,
            allow_vanished: Vec::new(),
        }
    }

    #[test]
    fn consent_has_three_states_and_only_listed_values_subscribe_or_opt_out() {
        let mut m = mapping("defaultEmailAddress.emailAddress", &[]);
        assert_eq!(
            map_record(
                &m,
                &json!({"defaultEmailAddress": {"emailAddress": "a@example.com"}})
            )
            .unwrap()
            .consent,
            Consent::NotAsked
        );
        m.consent = Some(crate::config::ConsentRule {
            field: "defaultEmailAddress.marketingState".into(),
            subscribed: vec!["SUBSCRIBED".into()],
            unsubscribed: vec!["UNSUBSCRIBED".into()],
        });
        // Shopify's CustomerEmailAddressMarketingState values, plus null and
        // absent.
        for (state, consent) in [
            (json!("SUBSCRIBED"), Consent::Subscribed),
            (json!("UNSUBSCRIBED"), Consent::Unsubscribed),
            (json!("NOT_SUBSCRIBED"), Consent::Unknown),
            (json!("PENDING"), Consent::Unknown),
            (json!("INVALID"), Consent::Unknown),
            (json!("REDACTED"), Consent::Unknown),
            (json!("subscribed"), Consent::Unknown),
            (json!("unsubscribed"), Consent::Unknown),
            (Value::Null, Consent::Unknown),
        ] {
            let r = json!({"defaultEmailAddress": {"emailAddress": "a@example.com", "marketingState": state}});
            assert_eq!(map_record(&m, &r).unwrap().consent, consent, "{state}");
        }
        let absent = json!({"defaultEmailAddress": {"emailAddress": "a@example.com"}});
        assert_eq!(map_record(&m, &absent).unwrap().consent, Consent::Unknown);
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

    #[test]
    fn addresses_that_are_not_mailboxes_are_invalid_email_naming_the_problem_not_the_address() {
        let m = mapping("email", &[]);
        for (address, problem) in [
            ("ann smith@example.com", "contains a space"),
            ("ann@exam ple.com", "contains a space"),
            ("ann\u{a0}@example.com", "contains a space"),
            ("ann\u{7}@example.com", "control character"),
            ("ann@example.com\u{0}", "control character"),
            ("ann\r\nBcc: eve@example.com", "control character"),
            ("\"<script>\"@x", "quoted local part"),
            ("\"<script>\"@x.example", "quoted local part"),
            ("<script>@x.example", "invalid character"),
            ("Ann <ann@example.com>", "contains a space"),
            ("<ann@example.com>", "invalid character"),
            ("ann@localhost", "too few parts in the domain"),
            ("ann@[127.0.0.1]", "domain literals are not supported"),
            ("ann@@example.com", "invalid character"),
            ("ann.example.com", "missing separator"),
            ("@example.com", "local part is empty"),
            ("ann@", "domain is empty"),
            ("ann@example..com", "sub-domain is empty"),
        ] {
            let err = map_record(&m, &json!({ "email": address })).unwrap_err();
            assert_eq!(err.code(), "invalid_email", "{address:?}");
            let message = err.to_string();
            assert!(message.contains(problem), "{address:?}: {message}");
            assert!(message.contains("field \"email\""), "{message}");
            assert!(!message.contains(address), "{message}");
        }
    }

    #[test]
    fn real_addresses_are_kept_trimmed() {
        let m = mapping("email", &[]);
        for (address, kept) in [
            ("ann@example.com", "ann@example.com"),
            ("  ann@example.com\t", "ann@example.com"),
            (
                "o'neil+tag@mail.example.co.uk",
                "o'neil+tag@mail.example.co.uk",
            ),
            ("user_1.x@sub-domain.example", "user_1.x@sub-domain.example"),
            ("jörg@bücher.example", "jörg@bücher.example"),
        ] {
            let contact = map_record(&m, &json!({ "email": address })).unwrap();
            assert_eq!(contact.email, kept);
        }
    }

    proptest::proptest! {
        /// Any record and any (dotted) field names: mapping never panics, and
        /// a mapped contact always has a non-empty e-mail.
        #[test]
        fn any_record_maps_or_is_rejected_without_panicking(
            record in crate::canonical_json::arbitrary_json(),
            email in "[a-z.]{0,12}",
            fields in proptest::collection::btree_map("[A-Z]{1,6}", "[a-z.]{0,12}", 0..5),
        ) {
            let mapping = MappingConfig { email, attributes: fields.into_iter().collect(), consent: None, allow_vanished: Vec::new() };
            if let Ok(contact) = map_record(&mapping, &record) {
                proptest::prop_assert!(!contact.email.is_empty());
            }
        }
    }
}
