//! Erasure: every trace of some e-mail addresses taken out of the store, in
//! one transaction. The records that exist for an address (a rejected
//! record, a diff or mirror sync's kept state) are deleted; wherever else an
//! address can appear in text (failure messages, run timelines, alerts, the
//! audit log, cursors, the ledger's kept answers) it is replaced by
//! `[forgotten]`. The audit entry names SHA-256 digests, never an address.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use sqlx::PgPool;
use sqlx::types::Json;

use super::audit::Actor;

/// What stands where an address stood.
pub const FORGOTTEN: &str = "[forgotten]";

/// Rows that exist for one address: deleted whole.
const OWN_ROWS: [&str; 2] = ["rejected_records", "record_states"];

/// Columns that may carry an address inside other text: `(table, column,
/// jsonb)`. A column added that can hold one belongs here (the erasure test
/// dumps every table's data and finds none of the addresses).
const TEXT_COLUMNS: [(&str, &str, bool); 16] = [
    ("rejected_records", "message", false),
    ("rejected_records", "page_cursor", true),
    ("runs", "failure_detail", false),
    ("runs", "cursor_start", true),
    ("runs", "cursor_end", true),
    ("run_events", "detail", true),
    ("alerts", "message", false),
    ("alerts", "channels", true),
    ("audit_log", "reason", false),
    ("audit_log", "detail", true),
    ("syncs", "last_error", true),
    ("sync_cursors", "cursor", true),
    ("import_processes", "error", false),
    ("import_processes", "counts", true),
    // The ledger keeps the destination's answers; none names an address
    // today, but a destination's answer is not ours to vouch for.
    ("deliveries", "result", true),
    ("delivery_batches", "result", true),
];

/// How many rows each table lost or had rewritten (tables with none left out).
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct Erased {
    pub deleted: BTreeMap<String, u64>,
    pub rewritten: BTreeMap<String, u64>,
}

/// The digest the audit log names an address by: SHA-256 of the address in
/// lower case, in hex. Whoever holds the request can check it was done.
pub fn address_digest(address: &str) -> String {
    hex::encode(Sha256::digest(address.trim().to_lowercase()))
}

/// A case-insensitive pattern matching any of `addresses` literally.
fn pattern(addresses: &[String]) -> String {
    let escaped: Vec<String> = addresses
        .iter()
        .map(|a| {
            a.chars()
                .flat_map(|c| {
                    let escape = (!c.is_ascii_alphanumeric()).then_some('\\');
                    escape.into_iter().chain(std::iter::once(c))
                })
                .collect()
        })
        .collect();
    format!("({})", escaped.join("|"))
}

/// Takes `addresses` (already checked to be addresses) out of every table,
/// and writes one audit entry by `actor` naming their digests.
pub async fn forget_addresses(
    pool: &PgPool,
    addresses: &[String],
    actor: Actor,
) -> sqlx::Result<Erased> {
    let lowered: Vec<String> = addresses.iter().map(|a| a.trim().to_lowercase()).collect();
    let pattern = pattern(&lowered);
    let mut erased = Erased::default();
    let mut tx = pool.begin().await?;
    for table in OWN_ROWS {
        let sql = format!("DELETE FROM {table} WHERE lower(email) = ANY($1)");
        let n = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&lowered)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n > 0 {
            erased.deleted.insert(table.to_string(), n);
        }
    }
    for (table, column, jsonb) in TEXT_COLUMNS {
        // Inside JSON the address is a string's text (an address holds no
        // quote or backslash), so the rewritten text is JSON still.
        let (text, back) = if jsonb {
            (format!("{column}::text"), "::jsonb")
        } else {
            (column.to_string(), "")
        };
        let sql = format!(
            "UPDATE {table} SET {column} = regexp_replace({text}, $1, $2, 'gi'){back}
             WHERE {text} ~* $1"
        );
        let n = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(&pattern)
            .bind(FORGOTTEN)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        if n > 0 {
            *erased
                .rewritten
                .entry(format!("{table}.{column}"))
                .or_default() += n;
        }
    }
    let digests: Vec<String> = lowered.iter().map(|a| address_digest(a)).collect();
    let detail = serde_json::json!({
        "addresses_sha256": digests,
        "deleted": erased.deleted,
        "rewritten": erased.rewritten,
    });
    sqlx::query!(
        "INSERT INTO audit_log (actor, action, workspace_id, sync_id, reason, detail)
         VALUES ($1, 'forget', NULL, NULL, 'erasure request', $2)",
        actor.label(),
        Json(detail) as _,
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(erased)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_takes_each_address_literally() {
        let p = pattern(&["a.b+c@x.example".into(), "d@y.example".into()]);
        assert_eq!(p, r"(a\.b\+c\@x\.example|d\@y\.example)");
    }

    #[test]
    fn the_digest_is_of_the_trimmed_lower_case_address() {
        assert_eq!(
            address_digest(" Ann@Example.com "),
            hex::encode(Sha256::digest("ann@example.com"))
        );
    }
}
