//! `sync preview`: the next page as a run would see it — mapped records, their
//! delivery keys and what the ledger holds for each — writing nothing.

use serde::Serialize;
use serde_json::{Map, Value};
use sqlx::PgPool;

use super::delivery_key::{DeliveryKey, PageKeys, keyed_fingerprint};
use crate::config::SyncDefinition;
use crate::destination::Consent;
use crate::mapping::map_record;
use crate::source::{AnySource, Source};
use crate::store::cursors;
use crate::store::ledger::{self, KeyState};

/// One record of the preview.
#[derive(Debug, Clone, Serialize)]
pub struct PreviewRecord {
    pub position: usize,
    pub key: String,
    pub email: Option<String>,
    pub attributes: Map<String, Value>,
    /// Marketing consent by the mapping's `consent` rule (`given` or
    /// `withheld`); left out when the mapping has none.
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

/// Reads the page after the saved cursor and describes its first `limit`
/// records. Read-only: the source is read in a READ ONLY transaction and the
/// store is only queried.
pub async fn preview(
    store: &PgPool,
    definition: &SyncDefinition,
    ledger_epoch: i32,
    limit: usize,
) -> anyhow::Result<Preview> {
    let sync_id = definition.id.as_str();
    let cursor = cursors::get_cursor(store, sync_id)
        .await?
        .and_then(|c| c.cursor.map(|v| v.0));
    let mut source = AnySource::open(&definition.source, &Default::default())?;
    let fingerprint = keyed_fingerprint(source.fingerprint(), ledger_epoch);
    let page = source.fetch_page(cursor.as_ref()).await?;
    let page_records = page.records.len();
    let values = page.records.into_values()?;
    // Keys over the whole page: a record's position is its place on the page.
    let mut page_keys = PageKeys::new(sync_id, &fingerprint, cursor.as_ref());
    let keyed: Vec<(usize, DeliveryKey, &Value)> = values
        .iter()
        .enumerate()
        .map(|(i, r)| (i, page_keys.key(i as u64, r), r))
        .take(limit)
        .collect();
    let keys: Vec<[u8; 32]> = keyed.iter().map(|(_, k, _)| k.0).collect();
    let known = ledger::lookup_page(store, sync_id, &page_keys.page_id(), &keys).await?;
    let records = keyed
        .into_iter()
        .map(|(position, key, record)| {
            let ledger = match known.state(&key.0) {
                KeyState::Absent => "new".to_string(),
                KeyState::Completed => "completed".to_string(),
                KeyState::Pending { attempts, .. } => format!("pending ({attempts} attempts)"),
            };
            match map_record(&definition.mapping, record) {
                Ok(contact) => PreviewRecord {
                    position,
                    key: key.hex(),
                    email: Some(contact.email),
                    attributes: contact.attributes,
                    consent: contact.consent,
                    ledger,
                    rejected: None,
                },
                Err(e) => PreviewRecord {
                    position,
                    key: key.hex(),
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
