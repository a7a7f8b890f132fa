//! A page keyed by who each record is and what it holds, made ready to
//! send: diff mode's pages of the whole query (`source.sync_mode = "diff"`),
//! and every page of a source that re-reads an overlap window before its
//! time cursor (`source::overlap`), so that a record read again unchanged
//! costs no request wherever on a page it comes back. Every record is mapped to learn who it is (a digest of its
//! e-mail address); one query reads what each was last delivered as
//! (`record_states`); a record whose content is unchanged is counted as
//! replayed and dropped, and only new or changed ones are keyed (`diff_key`:
//! who, what before, what now), looked up in the ledger and sent, exactly as
//! a cursor-mode page is. What each sent record becomes is kept once its
//! page is clean (`run::send_page`).
//!
//! The fast path (diff mode): a digest of the whole page — the mapping and
//! every record's canonical bytes, in order — is kept per page once the page
//! is clean. A page read again with the same digest holds the very records
//! last delivered from it, so it is counted as replayed without mapping a
//! record or looking one up: one hash pass and one probe per page. Any
//! change (a row inserted before it shifts every later page) falls back to
//! the record-by-record path, which is always right. Mirror mode must mark
//! every record it reads as seen, so it takes the record-by-record path.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::delivery_key::{PageKeys, diff_key, identity_digest};
use super::page::{DiffState, PageHead, PreparedPage, SortedRecords, undecodable};
use super::run_env::RunContext;
use super::run_failure::RunFailure;
use crate::mapping::map_record;
use crate::source::{Records, SourceError, SyncMode};
use crate::store::ledger::{self, KeyState};
use crate::store::record_states::{self, RecordState, StateScope};
use crate::store::rejected::Rejection;

/// A page of a whole read made ready to send (its notices are recorded by
/// `prepared_page::prepare_page`, which hands it here).
pub(super) async fn prepare_diff_page(
    cx: &RunContext<'_>,
    fingerprint: &str,
    page_cursor: Option<&Value>,
    mut page_records: Records,
    next_cursor: Option<Value>,
) -> Result<PreparedPage, RunFailure> {
    let (env, run) = (cx.env, cx.run);
    let sync_id = run.sync_id.as_str();
    let records = page_records.len();
    let page_id = PageKeys::new(sync_id, fingerprint, page_cursor).page_id();
    let mode = cx.definition.source.sync_mode();
    let mirror = mode == SyncMode::Mirror;
    // Only diff mode reads the same pages run after run; a cursor's pages
    // start somewhere new each run, so their digests would only pile up.
    let digest = if mode == SyncMode::Diff {
        page_digest(cx, &page_records)?
    } else {
        None
    };
    if let Some(digest) = digest
        && records > 0
        && record_states::page_digest(&env.store, &page_id).await? == Some(digest)
    {
        let mut sorted = SortedRecords::new(Vec::new());
        sorted.replayed = records as i64;
        return Ok(sorted.into_page(PageHead {
            records,
            cursor: page_cursor.cloned(),
            next_cursor,
            page_id,
            open_batches: Vec::new(),
        }));
    }
    let mut sorted = SortedRecords::new(Vec::new());
    sorted.page_digest = digest;
    let mut on_page = HashMap::with_capacity(records);
    let mut candidates = Vec::with_capacity(records);
    let mut bytes = Vec::new();
    for position in 0..records {
        super::page::now_and_then(position).await;
        bytes.clear();
        let read = page_records
            .write_canonical(position, &mut bytes)
            .and_then(|()| page_records.take(position));
        let record = match read {
            Ok(record) => record,
            Err(SourceError::Undecodable(why)) => {
                sorted.rejections.push(undecodable(None, why));
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let content: [u8; 32] = Sha256::digest(&bytes).into();
        let source_key = cx.definition.source.record_key(&record);
        let contact = match map_record(&cx.definition.mapping, &record) {
            Ok(contact) => contact,
            Err(e) => {
                sorted.rejections.push(Rejection {
                    key: None,
                    email: None,
                    source_key,
                    code: e.code().to_string(),
                    message: e.to_string(),
                });
                continue;
            }
        };
        let identity = identity_digest(sync_id, run.ledger_epoch, &contact.email);
        // One person twice on one page: in a whole read the first row is
        // theirs; read by a cursor, the later row is the newer.
        match on_page.entry(identity) {
            Entry::Occupied(earlier) => {
                sorted.replayed += 1;
                if mode.is_cursor() {
                    candidates[*earlier.get()] = (identity, content, contact, source_key);
                }
                continue;
            }
            Entry::Vacant(slot) => {
                slot.insert(candidates.len());
            }
        }
        if mirror {
            sorted.seen.push((identity, contact.email.clone()));
        }
        candidates.push((identity, content, contact, source_key));
    }
    let identities: Vec<[u8; 32]> = candidates.iter().map(|c| c.0).collect();
    let kept = record_states::lookup_states(&env.store, &identities).await?;
    let mut changed = Vec::with_capacity(candidates.len());
    for (identity, content, contact, source_key) in candidates {
        let previous = kept.get(&identity);
        if previous == Some(&content) {
            sorted.replayed += 1;
            continue;
        }
        let key = diff_key(sync_id, fingerprint, &identity, previous, &content);
        changed.push((key, identity, content, contact, source_key));
    }
    let packed: Vec<[u8; 32]> = changed.iter().map(|c| c.0.0).collect();
    let known = ledger::lookup_page(&env.store, sync_id, &page_id, &packed).await?;
    for (key, identity, content, contact, source_key) in changed {
        sorted.states.push(DiffState {
            key,
            identity,
            content,
            email: mirror.then(|| contact.email.clone()),
        });
        let state = known.state(&key.0);
        if state == KeyState::Completed {
            // Sent by a run that died before keeping its state: kept now.
            sorted.replayed += 1;
            continue;
        }
        sorted.fields.count(&cx.definition.mapping, &contact);
        sorted.add(key, state, contact, source_key, env.record_attempts);
    }
    Ok(sorted.into_page(PageHead {
        records,
        cursor: page_cursor.cloned(),
        next_cursor,
        page_id,
        open_batches: known.open_batches,
    }))
}

/// The digest of a page as diff mode reads it: the mapping and each record's
/// canonical bytes, length-prefixed, in order. `None` when a record cannot
/// be decoded (such a page always takes the record-by-record path).
fn page_digest(cx: &RunContext<'_>, records: &Records) -> Result<Option<[u8; 32]>, RunFailure> {
    let mut hash = Sha256::new();
    hash.update(b"syncward.diff-page.v1");
    // A mapping of strings always serializes; the default is never taken.
    let mapping = serde_json::to_vec(&cx.definition.mapping).unwrap_or_default();
    hash.update((mapping.len() as u64).to_be_bytes());
    hash.update(&mapping);
    let mut bytes = Vec::new();
    for position in 0..records.len() {
        bytes.clear();
        match records.write_canonical(position, &mut bytes) {
            Ok(()) => {}
            Err(SourceError::Undecodable(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        hash.update((bytes.len() as u64).to_be_bytes());
        hash.update(&bytes);
    }
    Ok(Some(hash.finalize().into()))
}

/// What a clean page delivered, kept for the next run: diff mode keeps every
/// record sent and not refused as delivered, so the next run sends it again
/// only if it changes (a call that failed returned before this: its records
/// are sent again next run, as completed keys if they did arrive), and the
/// page's digest once nothing of it was refused (the next read of the same
/// page skips it whole; one with a refused record is looked at record by
/// record again). Mirror mode marks every record read as seen by this run.
pub(super) async fn remember_delivered(
    cx: &RunContext<'_>,
    page_id: &[u8; 32],
    states: Vec<DiffState>,
    seen: Vec<([u8; 32], String)>,
    page_digest: Option<[u8; 32]>,
    rejections: &[Rejection],
) -> Result<(), RunFailure> {
    let run = cx.run;
    if !states.is_empty() || !seen.is_empty() {
        let refused: std::collections::HashSet<&[u8]> =
            rejections.iter().filter_map(|r| r.key.as_deref()).collect();
        let kept: Vec<RecordState> = states
            .into_iter()
            .filter(|s| !refused.contains(&s.key.0[..]))
            .map(|s| RecordState {
                identity: s.identity,
                fingerprint: s.content,
                email: s.email,
            })
            .collect();
        let scope = StateScope {
            sync_id: &run.sync_id,
            epoch: run.ledger_epoch,
            run_id: run.id,
        };
        record_states::remember_states(&cx.env.store, scope, &kept).await?;
        record_states::mark_seen(&cx.env.store, scope, &seen).await?;
    }
    if let Some(digest) = page_digest
        && rejections.is_empty()
    {
        record_states::keep_page_digest(&cx.env.store, page_id, &digest).await?;
    }
    Ok(())
}
