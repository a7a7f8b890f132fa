//! How often each mapped attribute's source field held a value in a sync's
//! last complete read (migration 0031): the vanished-field guard's yardstick.

use sqlx::PgPool;

/// One attribute's count in one read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPresence {
    pub attribute: String,
    /// The source field it was mapped from.
    pub field: String,
    /// Records in which the field held a value (present, not null).
    pub present: i64,
    /// Records mapped.
    pub read: i64,
}

/// The counts of the sync's last complete read.
pub async fn last_read(pool: &PgPool, sync_id: &str) -> sqlx::Result<Vec<FieldPresence>> {
    sqlx::query_as!(
        FieldPresence,
        "SELECT attribute, field, present, read FROM mapped_field_presence WHERE sync_id = $1",
        sync_id
    )
    .fetch_all(pool)
    .await
}

/// Keeps a complete read's counts as the sync's yardstick, in place of the
/// last one (attributes no longer mapped go).
pub async fn remember(
    pool: &PgPool,
    sync_id: &str,
    run_id: i64,
    counts: &[FieldPresence],
) -> sqlx::Result<()> {
    let attributes: Vec<&str> = counts.iter().map(|c| c.attribute.as_str()).collect();
    let fields: Vec<&str> = counts.iter().map(|c| c.field.as_str()).collect();
    let present: Vec<i64> = counts.iter().map(|c| c.present).collect();
    let read: Vec<i64> = counts.iter().map(|c| c.read).collect();
    sqlx::query!(
        "WITH gone AS (
           DELETE FROM mapped_field_presence
           WHERE sync_id = $1 AND attribute <> ALL($3::text[]))
         INSERT INTO mapped_field_presence (sync_id, run_id, attribute, field, present, read)
         SELECT $1, $2, a, f, p, r
         FROM unnest($3::text[], $4::text[], $5::bigint[], $6::bigint[]) AS c(a, f, p, r)
         ON CONFLICT (sync_id, attribute) DO UPDATE
           SET field = EXCLUDED.field, present = EXCLUDED.present, read = EXCLUDED.read,
               run_id = EXCLUDED.run_id, measured_at = now()",
        sync_id,
        run_id,
        &attributes as &[&str],
        &fields as &[&str],
        &present,
        &read,
    )
    .execute(pool)
    .await?;
    Ok(())
}
