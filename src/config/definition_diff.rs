//! What publishing a definition over the stored one would change: a
//! field-level diff, and what each change means for delivery (`sync apply
//! --plan`). Secrets are env var names in definitions, so a diff shows names.

use std::collections::BTreeMap;

use chrono::Utc;
use serde::Serialize;
use serde_json::Value;

use super::sync_file::SyncDefinition;
use crate::source::SyncMode;

/// One field that differs: its dotted path and both values (`None`: absent).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldChange {
    pub field: String,
    pub before: Option<Value>,
    pub after: Option<Value>,
}

/// Fields that differ between two stored definitions, in path order. Tables
/// are walked; arrays and values are compared whole.
pub fn field_changes(before: &Value, after: &Value) -> Vec<FieldChange> {
    let (mut old, mut new) = (BTreeMap::new(), BTreeMap::new());
    flatten("", before, &mut old);
    flatten("", after, &mut new);
    let mut fields: Vec<&String> = old.keys().chain(new.keys()).collect();
    fields.sort();
    fields.dedup();
    fields
        .into_iter()
        .filter(|f| old.get(*f) != new.get(*f))
        .map(|f| FieldChange {
            field: f.clone(),
            before: old.get(f).cloned(),
            after: new.get(f).cloned(),
        })
        .collect()
}

fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                flatten(&path, inner, out);
            }
        }
        other => {
            out.insert(prefix.to_owned(), other.clone());
        }
    }
}

/// What the changes mean for delivery, one sentence per kind of change.
pub fn delivery_meaning(changes: &[FieldChange], new: &SyncDefinition) -> Vec<String> {
    let id = new.id.as_str();
    let under = |section: &str| {
        changes
            .iter()
            .filter(|c| c.field == section || c.field.starts_with(&format!("{section}.")))
            .map(|c| c.field.as_str())
            .collect::<Vec<_>>()
    };
    let mut meanings = Vec::new();
    // A mode change says what it means for the cursor and the keys itself.
    let mode_changed = !under("source.sync_mode").is_empty();
    if mode_changed {
        meanings.push(match new.source.sync_mode() {
            SyncMode::Diff => format!(
                "source.sync_mode changed to diff: every run reads the whole query and sends only records that are new or changed since this mode last delivered them, so the first run sends every record once; the cursor is no longer used (`syncward sync show {id}` keeps the history)"
            ),
            SyncMode::Mirror => "source.sync_mode changed to mirror: every run reads the whole query, sends records new or changed since they were last delivered, and takes records that left the query off the destination's lists (at most source.max_removal_share of them per run); what diff mode delivered is kept, a switch from cursor mode sends every record once".to_string(),
            SyncMode::Cursor => "source.sync_mode changed to cursor: runs read from the cursor on, starting from the beginning (diff mode kept none), so the first run sends every record once; rows are then read as the cursor column moves forward".to_string(),
        });
    }
    let key_fields = new.source.key_fields();
    let (keyed, other_source): (Vec<&str>, Vec<&str>) = under("source")
        .into_iter()
        .filter(|f| !(mode_changed && (*f == "source.sync_mode" || *f == "source.cursor_column")))
        .partition(|f| {
            key_fields
                .iter()
                .any(|k| f.strip_prefix("source.") == Some(*k))
        });
    // A page's keys hash where it starts and each record's place on it: a
    // new page size keeps the keys of records on pages that still start
    // where an old one did.
    let (paged, keyed): (Vec<&str>, Vec<&str>) =
        keyed.into_iter().partition(|f| *f == "source.page_size");
    if !paged.is_empty() {
        meanings.push(format!(
            "source.page_size changed: the cursor stays, so only records read from now on are sent; a rewind (`syncward sync reset-cursor {id}`) would send again the records of every page that now starts where no old page started (halving the size: about half of them), and replay the rest"
        ));
    }
    if !keyed.is_empty() {
        meanings.push(format!(
            "{} changed: delivery keys change; the cursor stays, so only records read from now on are sent, and a rewind (`syncward sync reset-cursor {id}`) would send every record again",
            keyed.join(", ")
        ));
    }
    if !other_source.is_empty() {
        meanings.push(format!(
            "{} changed: how the source is reached, not what is read; delivery keys stay",
            other_source.join(", ")
        ));
    }
    // Which attributes may lose their field changes no record: only what
    // the vanished-field guard stops for.
    let (guard, mapping): (Vec<&str>, Vec<&str>) = under("mapping")
        .into_iter()
        .partition(|f| f.starts_with("mapping.allow_vanished"));
    if !guard.is_empty() {
        meanings.push(format!(
            "mapping.allow_vanished changed: the vanished-field guard lets {} through; what is sent does not change",
            match new.mapping.allow_vanished.is_empty() {
                true => "no attribute".to_string(),
                false => new.mapping.allow_vanished.join(", "),
            }
        ));
    }
    if !mapping.is_empty() {
        meanings.push(format!(
            "{} changed: only records read from now on get it; `syncward sync resync {id}` sends everything again",
            mapping.join(", ")
        ));
    }
    let notify = under("notify");
    if !notify.is_empty() {
        meanings.push(match &new.notify {
            Some(_) => format!(
                "{} changed: each run that ends from now on is announced there, and so are events not yet delivered; what is sent to the destination does not change",
                notify.join(", ")
            ),
            None => "notify removed: runs are no longer announced, and events not yet delivered are dropped; what is sent to the destination does not change".to_string(),
        });
    }
    let destination = under("destination");
    if !destination.is_empty() {
        meanings.push(format!(
            "{} changed: records already delivered are not sent again (the ledger keeps them); `syncward sync resync {id}` sends everything again",
            destination.join(", ")
        ));
    }
    let timing: Vec<&str> = ["schedule", "timezone", "catch_up"]
        .into_iter()
        .filter(|f| !under(f).is_empty())
        .collect();
    if !timing.is_empty() {
        let next = new
            .schedule
            .next_after_in(Utc::now(), new.timezone.as_ref())
            .map(|at| at.format("%Y-%m-%d %H:%M:%SZ").to_string())
            .unwrap_or_else(|| "never".into());
        meanings.push(format!(
            "{} changed: the schedule is armed afresh; next run at {next}",
            timing.join(", ")
        ));
    }
    let guards: Vec<&str> = ["breaker_failures", "silence_window"]
        .into_iter()
        .filter(|f| !under(f).is_empty())
        .collect();
    if !guards.is_empty() {
        meanings.push(format!(
            "{} changed: applies from the next run",
            guards.join(", ")
        ));
    }
    if !under("workspace").is_empty() {
        meanings.push(
            "workspace changed: runs, alerts and the dead-man check count it under the new workspace"
                .into(),
        );
    }
    meanings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NotifyConfig;

    fn definition(extra: &str) -> SyncDefinition {
        SyncDefinition::parse(
            "t.toml",
            &format!(
                r#"id = "s"
workspace = "w"
schedule = "0 0 3 * * *"
{extra}
[source]
kind = "postgres"
url_env = "DB_URL"
query = "SELECT id, email FROM t"
cursor_column = "id"
[destination]
kind = "brevo"
api_key_env = "KEY"
list_ids = [1]
[mapping]
email = "email"
"#
            ),
        )
        .unwrap()
    }

    #[test]
    fn a_mode_change_says_what_it_means_for_delivery() {
        let before = definition("");
        let mut after = serde_json::to_value(&before).unwrap();
        after["source"]["sync_mode"] = "diff".into();
        after["source"]
            .as_object_mut()
            .unwrap()
            .remove("cursor_column");
        let changes = field_changes(&serde_json::to_value(&before).unwrap(), &after);
        let parsed: SyncDefinition = serde_json::from_value(after).unwrap();
        let meaning = delivery_meaning(&changes, &parsed);
        assert_eq!(meaning.len(), 1, "{meaning:?}");
        assert!(
            meaning[0]
                .starts_with("source.sync_mode changed to diff: every run reads the whole query"),
            "{meaning:?}"
        );
        // And back.
        let back = delivery_meaning(&changes, &before);
        assert!(back[0].contains("changed to cursor"), "{back:?}");
    }

    #[test]
    fn a_changed_query_and_a_new_attribute_are_named_with_what_they_mean() {
        let before = definition("");
        let mut after = before.clone();
        after
            .mapping
            .attributes
            .insert("LASTNAME".into(), "last_name".into());
        let mut after = serde_json::to_value(&after).unwrap();
        after["source"]["query"] = "SELECT id, email, last_name FROM t".into();
        let changes = field_changes(&serde_json::to_value(&before).unwrap(), &after);
        let fields: Vec<&str> = changes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["mapping.attributes.LASTNAME", "source.query"]);
        assert_eq!(changes[0].before, None);
        let parsed: SyncDefinition = serde_json::from_value(after).unwrap();
        let meaning = delivery_meaning(&changes, &parsed).join("\n");
        assert!(
            meaning.contains("source.query changed: delivery keys change"),
            "{meaning}"
        );
        assert!(
            meaning.contains("`syncward sync resync s` sends everything again"),
            "{meaning}"
        );
    }

    #[test]
    fn allowing_an_attribute_to_vanish_says_it_sends_nothing_new() {
        let before = definition("");
        let mut after = before.clone();
        after
            .mapping
            .attributes
            .insert("FIRSTNAME".into(), "first_name".into());
        let with_attribute = serde_json::to_value(&after).unwrap();
        after.mapping.allow_vanished = vec!["FIRSTNAME".into()];
        let changes = field_changes(&with_attribute, &serde_json::to_value(&after).unwrap());
        let meaning = delivery_meaning(&changes, &after);
        assert_eq!(
            meaning,
            [
                "mapping.allow_vanished changed: the vanished-field guard lets FIRSTNAME through; what is sent does not change"
            ]
        );
    }

    #[test]
    fn a_new_notify_receiver_says_where_runs_are_announced() {
        let before = definition("");
        let mut after = before.clone();
        after.notify = Some(NotifyConfig {
            url: url::Url::parse("https://ci.example.com/hooks/syncward").unwrap(),
            secret_env: serde_json::from_value("CI_HOOK_SECRET".into()).unwrap(),
        });
        let changes = field_changes(
            &serde_json::to_value(&before).unwrap(),
            &serde_json::to_value(&after).unwrap(),
        );
        let meaning = delivery_meaning(&changes, &after).join("\n");
        assert!(
            meaning.contains("changed: each run that ends from now on is announced there"),
            "{meaning}"
        );
        assert!(
            delivery_meaning(&changes, &before)[0].starts_with("notify removed"),
            "{changes:?}"
        );
    }

    #[test]
    fn a_new_url_variable_keeps_the_keys() {
        let before = serde_json::to_value(definition("")).unwrap();
        let mut after = before.clone();
        after["source"]["url_env"] = "OTHER_URL".into();
        let changes = field_changes(&before, &after);
        let parsed: SyncDefinition = serde_json::from_value(after).unwrap();
        let meaning = delivery_meaning(&changes, &parsed);
        assert_eq!(
            meaning,
            [
                "source.url_env changed: how the source is reached, not what is read; delivery keys stay"
            ]
        );
    }

    #[test]
    fn identical_definitions_have_no_changes() {
        let v = serde_json::to_value(definition("timezone = \"Europe/Paris\"")).unwrap();
        assert!(field_changes(&v, &v).is_empty());
    }
}
