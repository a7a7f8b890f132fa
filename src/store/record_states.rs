//! `record_states`: what each record of a diff-mode sync was last delivered
//! as (a digest of its identity → the digest of its content), per ledger
//! epoch. Read once per page, written once per clean page.

use std::collections::HashMap;

use sqlx::PgPool;

/// The kept fingerprints of these identities (those never delivered are
/// absent).
pub async fn lookup_states(
    pool: &PgPool,
    sync_id: &str,
    epoch: i32,
    identities: &[[u8; 32]],
) -> sqlx::Result<HashMap<[u8; 32], [u8; 32]>> {
    if identities.is_empty() {
        return Ok(HashMap::new());
    }
    let wanted: Vec<&[u8]> = identities.iter().map(|i| &i[..]).collect();
    let rows: Vec<(Vec<u8>, Vec<u8>)> = sqlx::query_as(
        "SELECT identity, fingerprint FROM record_states
         WHERE sync_id = $1 AND ledger_epoch = $2 AND identity = ANY($3)",
    )
    .bind(sync_id)
    .bind(epoch)
    .bind(&wanted)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(i, f)| Some((i.try_into().ok()?, f.try_into().ok()?)))
        .collect())
}

/// Keeps what these records were delivered as (identity, fingerprint).
pub async fn remember_states(
    pool: &PgPool,
    sync_id: &str,
    epoch: i32,
    states: &[([u8; 32], [u8; 32])],
) -> sqlx::Result<()> {
    if states.is_empty() {
        return Ok(());
    }
    let (identities, fingerprints): (Vec<&[u8]>, Vec<&[u8]>) =
        states.iter().map(|(i, f)| (&i[..], &f[..])).unzip();
    sqlx::query(
        "INSERT INTO record_states (sync_id, ledger_epoch, identity, fingerprint)
         SELECT $1, $2, i, f FROM unnest($3::bytea[], $4::bytea[]) AS s (i, f)
         ON CONFLICT (sync_id, ledger_epoch, identity)
         DO UPDATE SET fingerprint = excluded.fingerprint, delivered_at = now()",
    )
    .bind(sync_id)
    .bind(epoch)
    .bind(&identities)
    .bind(&fingerprints)
    .execute(pool)
    .await?;
    Ok(())
}
