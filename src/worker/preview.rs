//! `sync preview`: the next page as a run would see it — mapped records, their
//! delivery keys and what the ledger holds for each — writing nothing.

use serde::Serialize;
use serde_json::{Map, Value};
use sqlx::PgPool;

use sha2::{Digest, Sha256};

use super::delivery_key::{DeliveryKey, PageKeys, diff_key, identity_digest, keyed_fingerprint};
use crate::canonical_json::canonical_json;
use crate::config::SyncDefinition;
use crate::connector_config::WorkspaceSecrets;
use crate::destination::Consent;
use crate::mapping::map_record;
use crate::source::{AnySource, Source};
use crate::store::cursors;
use crate::store::ledger::{self, KeyState};
use crate::store::record_states;

/// One record of the preview.
#[derive(Debug, Clone, Serialize)]
pub struct PreviewRecord {
    pub position: usize,
    pub key: String,
    pub email: Option<String>,
    pub attributes: Map<String, Value>,
    /// Marketing consent by the mapping's `consent` rule (`subscribed`,
    /// `unsubscribed` or `unknown`); left out when the mapping has none.
    #[serde(skip_serializing_if = "Consent::is_not_asked")]
    pub consent: Consent,
    /// `new`, `pending (N attempts)`, `completed` — or why it would be rejected.
    pub ledger: String,
    pub rejected: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Preview {
    pub cursor: Option<Value>,
    pub next_cursor: Option<Value>,
    pub page_records: usize,
    pub records: Vec<PreviewRecord>,
}

/// Keys as `diff_page` derives them: who the record is, what it was last
/// delivered as, what it is now. `None` for a record unchanged since it was
/// delivered: a run counts it as replayed and sends nothing.
async fn identity_keys<'v>(
    store: &PgPool,
    definition: &SyncDefinition,
    fingerprint: &str,
    ledger_epoch: i32,
    values: &'v [Value],
    limit: usize,
) -> anyhow::Result<Vec<(usize, Option<DeliveryKey>, &'v Value)>> {
    let sync_id = definition.id.as_str();
    let shown: Vec<(usize, &Value, [u8; 32], [u8; 32])> = values
        .iter()
        .enumerate()
        .take(limit)
        .map(|(i, record)| {
            let content: [u8; 32] = Sha256::digest(canonical_json(record).as_bytes()).into();
            // A record without an address is refused before it is keyed.
            let email = map_record(&definition.mapping, record)
                .map(|c| c.email)
                .unwrap_or_default();
            let identity = identity_digest(sync_id, ledger_epoch, &email);
            (i, record, content, identity)
        })
        .collect();
    let identities: Vec<[u8; 32]> = shown.iter().map(|s| s.3).collect();
    let kept = record_states::lookup_states(store, &identities).await?;
    Ok(shown
        .into_iter()
        .map(|(i, record, content, identity)| {
            let key = match kept.get(&identity) {
                Some(previous) if *previous == content => None,
                previous => Some(diff_key(
                    sync_id,
                    fingerprint,
                    &identity,
                    previous,
                    &content,
                )),
            };
            (i, key, record)
        })
        .collect())
}

/// Reads the page after the saved cursor and describes its first `limit`
/// records. Read-only: the source is read in a READ ONLY transaction and the
/// store is only queried.
pub async fn preview(
    store: &PgPool,
    definition: &SyncDefinition,
    secrets: &WorkspaceSecrets,
    ledger_epoch: i32,
    limit: usize,
) -> anyhow::Result<Preview> {
    let sync_id = definition.id.as_str();
    let saved = cursors::get_cursor(store, sync_id)
        .await?
        .and_then(|c| c.cursor.map(|v| v.0));
    let mut source = AnySource::open(
        &definition.source,
        &Default::default(),
        secrets,
        &Default::default(),
    )?;
    // Where a run would start: the top of a whole read, or the overlap
    // window before a time cursor.
    let cursor = if definition.source.sync_mode().reads_whole() {
        None
    } else {
        source.rewind(saved)
    };
    let fingerprint = keyed_fingerprint(source.fingerprint(), ledger_epoch);
    let page = source.fetch_page(cursor.as_ref()).await?;
    let page_records = page.records.len();
    let values = page.records.into_values()?;
    let mut page_keys = PageKeys::new(sync_id, &fingerprint, cursor.as_ref());
    let keyed: Vec<(usize, Option<DeliveryKey>, &Value)> = if definition.source.keys_by_identity() {
        identity_keys(
            store,
            definition,
            &fingerprint,
            ledger_epoch,
            &values,
            limit,
        )
        .await?
    } else {
        // Keys over the whole page: a record's position is its place on the page.
        values
            .iter()
            .enumerate()
            .map(|(i, r)| (i, Some(page_keys.key(i as u64, r)), r))
            .take(limit)
            .collect()
    };
    let keys: Vec<[u8; 32]> = keyed
        .iter()
        .filter_map(|(_, k, _)| k.map(|k| k.0))
        .collect();
    let known = ledger::lookup_page(store, sync_id, &page_keys.page_id(), &keys).await?;
    let records = keyed
        .into_iter()
        .map(|(position, key, record)| {
            let ledger = match key.map(|k| known.state(&k.0)) {
                None => "unchanged since delivered".to_string(),
                Some(KeyState::Absent) => "new".to_string(),
                Some(KeyState::Completed) => "completed".to_string(),
                Some(KeyState::Pending { attempts, .. }) => {
                    format!("pending ({attempts} attempts)")
                }
            };
            let key = key.map_or_else(|| "-".to_string(), |k| k.hex());
            match map_record(&definition.mapping, record) {
                Ok(contact) => PreviewRecord {
                    position,
                    key,
                    email: Some(contact.email),
                    attributes: contact.attributes,
                    consent: contact.consent,
                    ledger,
                    rejected: None,
                },
                Err(e) => PreviewRecord {
                    position,
                    key,
                    email: None,
                    attributes: Map::new(),
                    consent: Consent::NotAsked,
                    ledger,
                    rejected: Some(format!("{}: {e}", e.code())),
                },
            }
        })
        .collect();
    Ok(Preview {
        cursor,
        next_cursor: page.next_cursor,
        page_records,
        records,
    })
}
