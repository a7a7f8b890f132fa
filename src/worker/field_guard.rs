//! The vanished-field guard: a mapped attribute whose source field held a
//! value in most records of the sync's last complete read, and holds none in
//! most records this run has mapped, stops the run before the page is sent
//! (`mapped_field_vanished`). A renamed or emptied column would otherwise
//! leave its attribute out of every record, which then quietly stops
//! updating. `[mapping] allow_vanished` lets an attribute through, and so
//! does mapping it from another field (the yardstick is per field).

use sqlx::PgPool;

use super::run_failure::RunFailure;
use crate::config::MappingConfig;
use crate::destination::Contact;
use crate::failure::FailureCode;
use crate::store::field_presence::{self, FieldPresence};

/// Fewer records than this, in the last read or in this run so far, prove
/// nothing either way.
const MIN_RECORDS: i64 = 10;

/// How many mapped records held a value in each attribute's field, in the
/// order of `[mapping] attributes`.
#[derive(Debug, Default, Clone)]
pub(super) struct FieldCounts {
    pub mapped: i64,
    pub present: Vec<i64>,
}

impl FieldCounts {
    /// Counts one mapped record.
    pub fn count(&mut self, mapping: &MappingConfig, contact: &Contact) {
        self.present.resize(mapping.attributes.len(), 0);
        self.mapped += 1;
        for (present, name) in self.present.iter_mut().zip(mapping.attributes.keys()) {
            if contact.attributes.get(name).is_some_and(|v| !v.is_null()) {
                *present += 1;
            }
        }
    }

    fn add(&mut self, other: &FieldCounts) {
        self.present
            .resize(self.present.len().max(other.present.len()), 0);
        self.mapped += other.mapped;
        for (mine, theirs) in self.present.iter_mut().zip(&other.present) {
            *mine += theirs;
        }
    }
}

/// The run's counts beside the last complete read's.
pub(super) struct FieldGuard<'m> {
    mapping: &'m MappingConfig,
    /// Per attribute (mapping order): the last read's counts, when they were
    /// measured on the field it is mapped from now and it is not allowed to
    /// vanish.
    last: Vec<Option<(i64, i64)>>,
    run: FieldCounts,
}

impl<'m> FieldGuard<'m> {
    /// Reads the sync's last complete read's counts.
    pub async fn load(
        store: &PgPool,
        sync_id: &str,
        mapping: &'m MappingConfig,
    ) -> Result<Self, RunFailure> {
        let known = field_presence::last_read(store, sync_id).await?;
        let last = mapping
            .attributes
            .iter()
            .map(|(attribute, field)| {
                known
                    .iter()
                    .find(|k| &k.attribute == attribute && &k.field == field)
                    .filter(|_| !mapping.allow_vanished.contains(attribute))
                    .map(|k| (k.present, k.read))
            })
            .collect();
        Ok(FieldGuard {
            mapping,
            last,
            run: FieldCounts::default(),
        })
    }

    /// Adds the counts of page `number`, about to be sent; the failure,
    /// naming each vanished field and its shares, when the run so far shows
    /// one.
    pub fn check(&mut self, number: u64, page: &FieldCounts) -> Result<(), RunFailure> {
        self.run.add(page);
        let run = &self.run;
        if run.mapped < MIN_RECORDS {
            return Ok(());
        }
        let vanished: Vec<String> = self
            .mapping
            .attributes
            .iter()
            .zip(&self.last)
            .zip(run.present.iter().chain(std::iter::repeat(&0)))
            .filter_map(|(((attribute, field), last), &now)| {
                let (was, read) = (*last)?;
                (read >= MIN_RECORDS && 2 * was > read && 2 * now < run.mapped).then(|| {
                    format!(
                        "field \"{field}\" (attribute {attribute}) held a value in {} of the \
                         last complete read's {read} records and in {} of the {} read now",
                        share(was, read),
                        share(now, run.mapped),
                        run.mapped
                    )
                })
            })
            .collect();
        if vanished.is_empty() {
            return Ok(());
        }
        Err(RunFailure(
            FailureCode::MappedFieldVanished,
            format!(
                "{}; stopped before sending page {number}",
                vanished.join("; ")
            ),
        ))
    }

    /// After a complete read: its counts become the sync's yardstick.
    pub async fn remember(
        &self,
        store: &PgPool,
        sync_id: &str,
        run_id: i64,
    ) -> Result<(), sqlx::Error> {
        if self.run.mapped < MIN_RECORDS {
            return Ok(());
        }
        let counts: Vec<FieldPresence> = self
            .mapping
            .attributes
            .iter()
            .zip(self.run.present.iter().chain(std::iter::repeat(&0)))
            .map(|((attribute, field), &present)| FieldPresence {
                attribute: attribute.clone(),
                field: field.clone(),
                present,
                read: self.run.mapped,
            })
            .collect();
        field_presence::remember(store, sync_id, run_id, &counts).await
    }
}

/// `97 %`, rounded down but never to 0 % when any held a value.
fn share(part: i64, whole: i64) -> String {
    let percent = (part * 100).checked_div(whole).unwrap_or(0);
    if percent == 0 && part > 0 {
        "under 1 %".into()
    } else {
        format!("{percent} %")
    }
}
