//! Erasure: every trace of some e-mail addresses taken out of the store, in
//! one transaction. The records that exist for an address (a rejected
//! record, a diff or mirror sync's kept state) are deleted; wherever else an
//! address can appear in text (failure messages, run timelines, alerts, the
//! audit log, cursors, the ledger's kept answers) it is replaced by
//! `[forgotten]`; the trace's entries of an address are blanked
//! (`store::trace::forget`). The audit entry names SHA-256 digests, never an
//! address.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use sqlx::PgPool;
use sqlx::types::Json;

use super::audit::Actor;

/// What stands where an address stood.
pub const FORGOTTEN: &str = "[forgotten]";

/// Rows that exist for one address: deleted whole.
pub const OWN_ROWS: [&str; 2] = ["rejected_records", "record_states"];

/// Columns that may carry an address inside other text: `(table, column,
/// jsonb)`. Every text or JSON column of the store is here or in
/// `KEPT_COLUMNS` with the reason it holds no address (a test reads the
/// schema and fails on a column in neither).
pub const TEXT_COLUMNS: [(&str, &str, bool); 20] = [
    ("rejected_records", "message", false),
    // A source's key may be an address (an API keyed by e-mail).
    ("rejected_records", "source_key", false),
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
    // What the person who paused it wrote: anything, an address included.
    ("syncs", "paused_note", false),
    ("sync_cursors", "cursor", true),
    ("import_processes", "error", false),
    ("import_processes", "counts", true),
    // The ledger keeps the destination's answers; none names an address
    // today, but a destination's answer is not ours to vouch for.
    ("deliveries", "result", true),
    ("delivery_batches", "result", true),
    // A run's event carries its failure's detail, whatever that names.
    ("run_notifications", "event", true),
    ("run_notifications", "last_error", false),
];

/// Text and JSON columns an erasure leaves as they are, and why none can
/// hold an address: `(table, column, reason)`. (The address columns of
/// `OWN_ROWS` go with their rows.)
pub const KEPT_COLUMNS: &[(&str, &str, &str)] = &[
    ("syncs", "id", IDENTIFIER),
    ("syncs", "workspace_id", IDENTIFIER),
    ("syncs", "status", CODE),
    ("syncs", "paused_reason", CODE),
    ("syncs", "definition", DEFINITION),
    ("sync_versions", "sync_id", IDENTIFIER),
    ("sync_versions", "definition", DEFINITION),
    ("sync_versions", "actor", ACTOR),
    ("workspaces", "id", IDENTIFIER),
    ("api_tokens", "workspace_id", IDENTIFIER),
    ("runs", "sync_id", IDENTIFIER),
    ("runs", "workspace_id", IDENTIFIER),
    ("runs", "status", CODE),
    ("runs", "trigger", CODE),
    ("runs", "failure_code", CODE),
    ("runs", "worker_id", MACHINE),
    ("runs", "lease_token", MACHINE),
    ("run_events", "kind", CODE),
    ("sync_cursors", "sync_id", IDENTIFIER),
    ("sync_schedule", "sync_id", IDENTIFIER),
    ("deliveries", "sync_id", IDENTIFIER),
    ("deliveries", "status", CODE),
    ("delivery_batches", "sync_id", IDENTIFIER),
    ("ledger_unpaged_syncs", "sync_id", IDENTIFIER),
    ("rejected_records", "sync_id", IDENTIFIER),
    ("rejected_records", "code", CODE),
    ("record_states", "sync_id", IDENTIFIER),
    ("import_processes", "sync_id", IDENTIFIER),
    ("import_processes", "status", CODE),
    ("audit_log", "actor", ACTOR),
    ("audit_log", "action", CODE),
    ("audit_log", "sync_id", IDENTIFIER),
    ("audit_log", "workspace_id", IDENTIFIER),
    ("alerts", "kind", CODE),
    ("alerts", "severity", CODE),
    ("alerts", "workspace_id", IDENTIFIER),
    ("alerts", "sync_id", IDENTIFIER),
    ("alerts", "failure_code", CODE),
    ("alerts", "owner", CODE),
    ("deadman_incidents", "scope", CODE),
    ("deadman_incidents", "silence", CODE),
    ("deadman_incidents", "workspace_id", IDENTIFIER),
    ("deadman_incidents", "sync_id", IDENTIFIER),
    ("processes", "kind", CODE),
    ("processes", "host", MACHINE),
    ("processes", "machine_boot", MACHINE),
    ("processes", "version", MACHINE),
    ("mapped_field_presence", "sync_id", IDENTIFIER),
    ("held_removals", "sync_id", IDENTIFIER),
    ("run_notifications", "sync_id", IDENTIFIER),
    ("trace_pages", "sync_id", IDENTIFIER),
    ("held_removals", "approved_by", ACTOR),
    ("mapped_field_presence", "attribute", MAPPING_NAME),
    ("mapped_field_presence", "field", MAPPING_NAME),
];

const IDENTIFIER: &str = "a sync or workspace id: [a-z0-9_-] only, no '@'";
const CODE: &str = "one of syncward's fixed codes";
const ACTOR: &str = "cli, api:admin or api:token:N: syncward's own labels";
const MACHINE: &str = "a name syncward makes for a machine, process or worker";
const MAPPING_NAME: &str = "an attribute or source field name copied from the sync's mapping, \
                            which its definition keeps as it is";
const DEFINITION: &str = "the sync as its file says: rewriting it would change what the sync \
                          does; a definition naming a person is its owner's to edit and apply";

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
    // The trace: each address's own entries blanked, and the address taken
    // out of what was sent for anyone else (an attribute may hold it).
    let key = super::trace::TraceKey::load(&mut tx).await?;
    let keyed: Vec<_> = lowered.iter().map(|a| key.digest(a)).collect();
    let own = super::trace::forget(&mut tx, &keyed).await?;
    let others = sqlx::query!(
        "UPDATE trace_pages
         SET sent = convert_to(regexp_replace(convert_from(sent, 'UTF8'), $1, $2, 'gi'), 'UTF8')
         WHERE convert_from(sent, 'UTF8') ~* $1",
        &pattern,
        FORGOTTEN,
    )
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if own + others > 0 {
        erased
            .rewritten
            .insert("trace_pages.sent".to_string(), own + others);
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
