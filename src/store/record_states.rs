//! `record_states`: what each record of a diff- or mirror-mode sync was
//! last delivered as (a digest of its identity → the digest of its content),
//! per ledger epoch. Read once per page, written once per clean page; in
//! mirror mode also which run last saw each, and the departed are read and
//! forgotten after a complete read.

use std::collections::HashMap;

use sqlx::PgPool;

/// The kept fingerprints of these identities (those never delivered are
/// absent). An identity names its sync and epoch (`identity_digest`).
pub async fn lookup_states(
    pool: &PgPool,
    identities: &[[u8; 32]],
) -> sqlx::Result<HashMap<[u8; 32], [u8; 32]>> {
    if identities.is_empty() {
        return Ok(HashMap::new());
    }
    let wanted: Vec<&[u8]> = identities.iter().map(|i| &i[..]).collect();
    struct Known {
        identity: Vec<u8>,
        fingerprint: Vec<u8>,
    }
    let rows: Vec<Known> = sqlx::query_as!(
        Known,
        "SELECT identity, fingerprint FROM record_states WHERE identity = ANY($1)",
        &wanted as _,
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|k| Some((k.identity.try_into().ok()?, k.fingerprint.try_into().ok()?)))
        .collect())
}

/// Which sync, epoch and run a page's states belong to.
#[derive(Debug, Clone, Copy)]
pub struct StateScope<'a> {
    pub sync_id: &'a str,
    pub epoch: i32,
    pub run_id: i64,
}

/// One record as delivered: who, what, and (mirror mode) its address.
#[derive(Debug, Clone)]
pub struct RecordState {
    pub identity: [u8; 32],
    pub fingerprint: [u8; 32],
    pub email: Option<String>,
}

/// Keeps what these records were delivered as, seen by this run.
pub async fn remember_states(
    pool: &PgPool,
    scope: StateScope<'_>,
    states: &[RecordState],
) -> sqlx::Result<()> {
    if states.is_empty() {
        return Ok(());
    }
    let identities: Vec<&[u8]> = states.iter().map(|s| &s.identity[..]).collect();
    let fingerprints: Vec<&[u8]> = states.iter().map(|s| &s.fingerprint[..]).collect();
    let emails: Vec<Option<&str>> = states.iter().map(|s| s.email.as_deref()).collect();
    sqlx::query!(
        "INSERT INTO record_states (sync_id, ledger_epoch, identity, fingerprint, email, seen_run)
         SELECT $1, $2, i, f, e, $6 FROM unnest($3::bytea[], $4::bytea[], $5::text[]) AS s (i, f, e)
         ON CONFLICT (identity)
         DO UPDATE SET fingerprint = excluded.fingerprint, delivered_at = now(),
                       email = excluded.email, seen_run = excluded.seen_run",
        scope.sync_id,
        scope.epoch,
        &identities as _,
        &fingerprints as _,
        &emails as _,
        scope.run_id,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Mirror mode: these records (identity, address) are in this run's read.
/// The address is kept too, so records delivered before a switch from diff
/// mode can be taken off the lists.
pub async fn mark_seen(
    pool: &PgPool,
    scope: StateScope<'_>,
    seen: &[([u8; 32], String)],
) -> sqlx::Result<()> {
    if seen.is_empty() {
        return Ok(());
    }
    let identities: Vec<&[u8]> = seen.iter().map(|(i, _)| &i[..]).collect();
    let emails: Vec<&str> = seen.iter().map(|(_, e)| e.as_str()).collect();
    sqlx::query!(
        "UPDATE record_states s SET seen_run = $1, email = v.e
         FROM unnest($2::bytea[], $3::text[]) AS v (i, e)
         WHERE s.identity = v.i",
        scope.run_id,
        &identities as _,
        &emails as _,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Mirror mode, after a complete read: how many kept records this run did
/// not see (they left the query), and how many are kept in all.
pub async fn count_departed(pool: &PgPool, scope: StateScope<'_>) -> sqlx::Result<Departures> {
    sqlx::query_as!(
        Departures,
        r#"SELECT count(*) FILTER (WHERE seen_run IS DISTINCT FROM $3) AS "left!", count(*) AS "known!"
           FROM record_states WHERE sync_id = $1 AND ledger_epoch = $2"#,
        scope.sync_id,
        scope.epoch,
        scope.run_id,
    )
    .fetch_one(pool)
    .await
}

/// Of a sync's kept records: those this run's complete read did not see, and all.
#[derive(Debug, Clone, Copy)]
pub struct Departures {
    pub left: i64,
    pub known: i64,
}

/// A record the run's complete read did not see: its identity, and its
/// address (none for a record delivered in diff mode and gone since).
#[derive(Debug, Clone)]
pub struct Departed {
    pub identity: Vec<u8>,
    pub email: Option<String>,
}

/// Up to `limit` records after identity `after` that this run's complete
/// read did not see, in identity order: identity and address (none for a
/// record delivered in diff mode and gone since).
pub async fn departed(
    pool: &PgPool,
    scope: StateScope<'_>,
    after: &[u8],
    limit: i64,
) -> sqlx::Result<Vec<Departed>> {
    sqlx::query_as!(
        Departed,
        "SELECT identity, email FROM record_states
         WHERE sync_id = $1 AND ledger_epoch = $2 AND identity > $5
           AND seen_run IS DISTINCT FROM $3
         ORDER BY sync_id, ledger_epoch, identity LIMIT $4",
        scope.sync_id,
        scope.epoch,
        scope.run_id,
        limit,
        after,
    )
    .fetch_all(pool)
    .await
}

/// Forgets records taken off the destination: a record that comes back is
/// new again.
pub async fn forget_states(pool: &PgPool, identities: &[Vec<u8>]) -> sqlx::Result<()> {
    sqlx::query!(
        "DELETE FROM record_states WHERE identity = ANY($1)",
        identities
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Diff mode: the digest kept for a page (by its ledger page id, which names
/// the sync, the source, the epoch and the page), if any.
pub async fn page_digest(pool: &PgPool, page_id: &[u8; 32]) -> sqlx::Result<Option<[u8; 32]>> {
    let digest: Option<Vec<u8>> = sqlx::query_scalar!(
        "SELECT digest FROM diff_pages WHERE page = $1",
        &page_id[..]
    )
    .fetch_optional(pool)
    .await?;
    Ok(digest.and_then(|d| d.try_into().ok()))
}

/// Keeps a clean page's digest.
pub async fn keep_page_digest(
    pool: &PgPool,
    page_id: &[u8; 32],
    digest: &[u8; 32],
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO diff_pages (page, digest) VALUES ($1, $2)
         ON CONFLICT (page) DO UPDATE SET digest = excluded.digest",
        &page_id[..],
        &digest[..],
    )
    .execute(pool)
    .await?;
    Ok(())
}
