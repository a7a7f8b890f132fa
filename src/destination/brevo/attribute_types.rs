//! Attribute types: Brevo ignores a value that does not match its
//! attribute's type ("Values that don't match the attribute type (e.g. text
//! or string in a date attribute) will be ignored", `createContact`), so a
//! run would count as written what Brevo dropped. Each mapped value is fitted
//! to its attribute's type (`GET /contacts/attributes` lists it with the
//! name): converted where nothing is lost, otherwise left out of the body and
//! reported with the attribute and the reason.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Mutex;

use serde_json::Value;

/// An attribute's type, as `getAttributes` lists it (spec 2026-02: `type`
/// text, date, float, id, boolean, multiple-choice, user; `category`
/// attributes carry an `enumeration` of `{value, label}`).
#[derive(Debug, Clone, PartialEq)]
pub enum AttributeType {
    Text,
    /// `YYYY-MM-DD`.
    Date,
    Float,
    Boolean,
    /// A category: the values Brevo keeps, with their labels.
    Category(Vec<(i64, String)>),
    /// The options a multiple-choice attribute allows.
    MultipleChoice(Vec<String>),
    /// `id`, `user` or a type this version does not know: sent as it is.
    Unchecked,
}

impl AttributeType {
    /// The type of one `attributes[]` entry of `GET /contacts/attributes`.
    pub fn of_listing(entry: &Value) -> Self {
        if let Some(enumeration) = entry.get("enumeration").and_then(Value::as_array) {
            return AttributeType::Category(
                enumeration
                    .iter()
                    .filter_map(|e| {
                        Some((
                            e.get("value")?.as_i64()?,
                            e.get("label")?.as_str()?.to_string(),
                        ))
                    })
                    .collect(),
            );
        }
        match entry.get("type").and_then(Value::as_str) {
            Some("text") => AttributeType::Text,
            Some("date") => AttributeType::Date,
            Some("float") => AttributeType::Float,
            Some("boolean") => AttributeType::Boolean,
            Some("multiple-choice") => AttributeType::MultipleChoice(
                entry
                    .get("multiCategoryOptions")
                    .and_then(Value::as_array)
                    .map(|o| {
                        o.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            _ => AttributeType::Unchecked,
        }
    }

    /// Whether a value may need fitting: a text attribute keeps any scalar
    /// as it is (and the API's schema refuses the rest), so a run checks
    /// none of its values (no lookup on the bulk path for the usual case).
    pub fn needs_fitting(&self) -> bool {
        !matches!(self, AttributeType::Text | AttributeType::Unchecked)
    }

    /// `value` as this attribute keeps it: as it is, converted without loss,
    /// or the reason it cannot be (one short phrase naming the value's kind,
    /// never the value itself, which is a person's data).
    pub fn fit<'a>(&self, value: &'a Value) -> Result<Cow<'a, Value>, String> {
        match (self, value) {
            (AttributeType::Unchecked, _) => Ok(Cow::Borrowed(value)),
            (_, Value::Object(_)) => Err("an object is not an attribute value".into()),
            (AttributeType::Text, Value::Array(_)) => Err("a list in a text attribute".into()),
            (AttributeType::Text, _) => Ok(Cow::Borrowed(value)),
            (AttributeType::Date, Value::String(s)) => date(s)
                .map(|d| match d {
                    Some(day) => Cow::Owned(Value::String(day)),
                    None => Cow::Borrowed(value),
                })
                .ok_or_else(|| "text that is not a date (YYYY-MM-DD) in a date attribute".into()),
            (AttributeType::Date, _) => Err("a non-text value in a date attribute".into()),
            (AttributeType::Float, Value::Number(_)) => Ok(Cow::Borrowed(value)),
            (AttributeType::Float, Value::String(s)) => s
                .trim()
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map(|n| Cow::Owned(Value::Number(n)))
                .ok_or_else(|| "text that is not a number in a float attribute".into()),
            (AttributeType::Float, _) => Err("a non-number in a float attribute".into()),
            (AttributeType::Boolean, Value::Bool(_)) => Ok(Cow::Borrowed(value)),
            (AttributeType::Boolean, Value::String(s)) => {
                match s.trim().to_ascii_lowercase().as_str() {
                    "true" => Ok(Cow::Owned(Value::Bool(true))),
                    "false" => Ok(Cow::Owned(Value::Bool(false))),
                    _ => Err("text other than true or false in a boolean attribute".into()),
                }
            }
            (AttributeType::Boolean, Value::Number(n)) => match n.as_i64() {
                Some(1) => Ok(Cow::Owned(Value::Bool(true))),
                Some(0) => Ok(Cow::Owned(Value::Bool(false))),
                _ => Err("a number other than 0 or 1 in a boolean attribute".into()),
            },
            (AttributeType::Boolean, _) => Err("a list in a boolean attribute".into()),
            (AttributeType::Category(values), v) => category(values, v)
                .map(|id| Cow::Owned(Value::from(id)))
                .ok_or_else(|| "a value that is not one of the category's".into()),
            (AttributeType::MultipleChoice(options), Value::String(s)) => {
                if options.iter().any(|o| o == s) {
                    Ok(Cow::Owned(Value::Array(vec![value.clone()])))
                } else {
                    Err("a value that is not one of the attribute's options".into())
                }
            }
            (AttributeType::MultipleChoice(options), Value::Array(items)) => {
                if items
                    .iter()
                    .all(|i| i.as_str().is_some_and(|s| options.iter().any(|o| o == s)))
                {
                    Ok(Cow::Borrowed(value))
                } else {
                    Err("a value that is not one of the attribute's options".into())
                }
            }
            (AttributeType::MultipleChoice(_), _) => {
                Err("a non-text value in a multiple-choice attribute".into())
            }
        }
    }
}

/// A date as Brevo keeps it: `Some(None)` when `s` is one already,
/// `Some(Some(day))` for an RFC 3339 timestamp (its date as written, in its
/// own offset), `None` for anything else.
fn date(s: &str) -> Option<Option<String>> {
    if chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok() && s.len() == 10 {
        return Some(None);
    }
    let at = chrono::DateTime::parse_from_rfc3339(s.trim()).ok()?;
    Some(Some(at.date_naive().format("%Y-%m-%d").to_string()))
}

/// The category value `v` names: its id, or a label (compared without
/// regard to case), or an id written as text.
fn category(values: &[(i64, String)], v: &Value) -> Option<i64> {
    let id = match v {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => values
            .iter()
            .find(|(_, label)| label.eq_ignore_ascii_case(s.trim()))
            .map(|(id, _)| *id)
            .or_else(|| s.trim().parse().ok()),
        _ => None,
    }?;
    values.iter().any(|(known, _)| *known == id).then_some(id)
}

/// The values a run left out because they do not fit their attribute: per
/// attribute, how many and the first reason. Filled while bodies are
/// written (rarely: only on a mismatch), drained into run notices.
#[derive(Debug, Default)]
pub struct Dropped(Mutex<BTreeMap<String, (u64, String)>>);

impl Dropped {
    pub fn note(&self, attribute: &str, why: String) {
        // A poisoned lock only follows a panic elsewhere; the counts are whole.
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(attribute.to_string())
            .and_modify(|(n, _)| *n += 1)
            .or_insert((1, why));
    }

    /// Takes what was noted: `(attribute, values left out, first reason)`.
    pub fn take(&self) -> Vec<(String, u64, String)> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        std::mem::take(&mut *map)
            .into_iter()
            .map(|(a, (n, why))| (a, n, why))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fit(t: &AttributeType, v: Value) -> Result<Value, String> {
        t.fit(&v).map(Cow::into_owned)
    }

    #[test]
    fn a_date_keeps_its_day_and_text_that_is_no_date_is_refused() {
        let d = AttributeType::Date;
        assert_eq!(fit(&d, json!("2025-03-04")), Ok(json!("2025-03-04")));
        assert_eq!(
            fit(&d, json!("2025-03-04T23:30:00-05:00")),
            Ok(json!("2025-03-04"))
        );
        assert_eq!(
            fit(&d, json!("2025-03-04T10:00:00Z")),
            Ok(json!("2025-03-04"))
        );
        assert!(fit(&d, json!("next tuesday")).is_err());
        assert!(fit(&d, json!("2025-13-01")).is_err());
        assert!(fit(&d, json!(20250304)).is_err());
    }

    #[test]
    fn numbers_booleans_and_categories_convert_only_without_loss() {
        assert_eq!(fit(&AttributeType::Float, json!("12.5")), Ok(json!(12.5)));
        assert_eq!(fit(&AttributeType::Float, json!(3)), Ok(json!(3)));
        assert!(fit(&AttributeType::Float, json!("12,5 €")).is_err());
        assert_eq!(fit(&AttributeType::Boolean, json!("TRUE")), Ok(json!(true)));
        assert_eq!(fit(&AttributeType::Boolean, json!(0)), Ok(json!(false)));
        assert!(fit(&AttributeType::Boolean, json!("yes please")).is_err());
        let gender = AttributeType::of_listing(&json!({"name": "GENDER", "type": "text",
            "category": "category",
            "enumeration": [{"value": 1, "label": "Men"}, {"value": 2, "label": "Women"}]}));
        assert_eq!(fit(&gender, json!("women")), Ok(json!(2)));
        assert_eq!(fit(&gender, json!(1)), Ok(json!(1)));
        assert_eq!(fit(&gender, json!("2")), Ok(json!(2)));
        assert!(fit(&gender, json!("Kid")).is_err());
        assert!(fit(&gender, json!(7)).is_err());
    }

    #[test]
    fn text_takes_scalars_and_choices_take_their_options() {
        assert_eq!(fit(&AttributeType::Text, json!(42)), Ok(json!(42)));
        assert!(fit(&AttributeType::Text, json!(["a"])).is_err());
        let c = AttributeType::of_listing(&json!({"name": "COUNTRY", "type": "multiple-choice",
            "multiCategoryOptions": ["USA", "France"]}));
        assert_eq!(fit(&c, json!("USA")), Ok(json!(["USA"])));
        assert_eq!(
            fit(&c, json!(["USA", "France"])),
            Ok(json!(["USA", "France"]))
        );
        assert!(fit(&c, json!(["Spain"])).is_err());
        assert_eq!(
            AttributeType::of_listing(&json!({"name": "X", "type": "user"})),
            AttributeType::Unchecked
        );
        assert!(fit(&AttributeType::Date, json!({"a": 1})).is_err());
    }

    #[test]
    fn a_reason_never_holds_the_value() {
        let why = fit(&AttributeType::Date, json!("secret@example.com")).unwrap_err();
        assert!(!why.contains("secret"), "{why}");
    }

    #[test]
    fn dropped_values_are_counted_per_attribute_with_the_first_reason() {
        let dropped = Dropped::default();
        dropped.note("DOB", "first".into());
        dropped.note("DOB", "second".into());
        dropped.note("AGE", "why".into());
        assert_eq!(
            dropped.take(),
            vec![
                ("AGE".to_string(), 1, "why".to_string()),
                ("DOB".to_string(), 2, "first".to_string())
            ]
        );
        assert!(dropped.take().is_empty());
    }
}
