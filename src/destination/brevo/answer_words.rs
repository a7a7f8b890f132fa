//! A Brevo call's stored answer, in words (`syncward trace`).

use serde_json::Value;

use crate::destination::answer_words::ImportReport;

/// `None` when `result` is not a Brevo answer.
pub fn answer_words(result: Option<&Value>, import: &ImportReport<'_>) -> Option<String> {
    let result = result?;
    if let Some(process) = result.get("processId") {
        Some(import_answer(process, import))
    } else {
        result
            .get("id")
            .map(|id| format!("created: Brevo answered 201 with contact id {id}"))
    }
}

/// A Brevo import's outcome for one of its addresses: Brevo reports counts
/// per import, never which addresses they were.
fn import_answer(process: &Value, import: &ImportReport<'_>) -> String {
    let records = import.records;
    match import.status {
        None => format!("accepted in Brevo import {process}, not reported on"),
        Some("pending") => {
            format!("accepted in Brevo import {process}; Brevo has not finished it yet")
        }
        Some("completed") => {
            let count = |name: &str| {
                import
                    .counts
                    .and_then(|c| c.get(name))
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
            };
            let invalid = count("invalid_emails");
            let duplicates = count("duplicate_email_id") + count("duplicate_contact_id");
            if invalid + duplicates == 0 {
                format!(
                    "imported: Brevo import {process} completed with no invalid address or \
                     duplicate among its {records} records"
                )
            } else {
                format!(
                    "Brevo import {process} completed: Brevo reported {invalid} invalid \
                     address(es) and {duplicates} duplicate(s) among its {records} records, \
                     without naming them"
                )
            }
        }
        Some(status) => format!(
            "Brevo import {process} ended {status}{}",
            import.error.map(|e| format!(": {e}")).unwrap_or_default()
        ),
    }
}
