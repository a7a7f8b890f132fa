//! What a destination says of a sync's mapping before anything is sent
//! (`sync apply`, its `--plan`, `sync preview`): the mapped fields it lacks
//! and the sampled values it would ignore, in its own words. A destination
//! that takes any field answers `None`: there is nothing to ask.

use serde_json::{Map, Value};

use super::DestinationConfig;
use super::brevo::{self, AccountCheck};
use crate::connector_config::WorkspaceSecrets;

/// A destination's answer about a mapping's fields.
#[derive(Debug)]
pub enum MappingCheck {
    Brevo(AccountCheck),
}

impl MappingCheck {
    /// The mapped fields the destination lacks, in words, with what to do
    /// there; `None` when it lacks none.
    pub fn missing_words(&self) -> Option<String> {
        match self {
            MappingCheck::Brevo(found) => found.missing_words(),
        }
    }

    /// Whether the destination told the type of any mapped field (a sample
    /// is worth reading).
    pub fn knows_types(&self) -> bool {
        match self {
            MappingCheck::Brevo(found) => !found.types.is_empty(),
        }
    }

    /// One line per mapped field whose sampled values the destination would
    /// ignore; `sample`: each record's position and mapped fields.
    pub fn misfits<'a>(
        &self,
        sample: impl IntoIterator<Item = (usize, &'a Map<String, Value>)>,
        sampled: usize,
    ) -> Vec<String> {
        match self {
            MappingCheck::Brevo(found) => found.misfits(sample, sampled),
        }
    }
}

impl DestinationConfig {
    /// Asks the destination about the fields a mapping writes. `None`:
    /// nothing to ask (the destination takes any field, the mapping writes
    /// none, or its key is not among the secrets here); `Err`: why it could
    /// not be asked, in words.
    pub async fn check_mapping<'a>(
        &self,
        mapped: impl IntoIterator<Item = &'a str>,
        secrets: &WorkspaceSecrets,
    ) -> Option<Result<MappingCheck, String>> {
        match self {
            DestinationConfig::Brevo(config) => brevo::account_check(config, mapped, secrets)
                .await
                .map(|answer| {
                    answer
                        .map(MappingCheck::Brevo)
                        .map_err(|e| brevo::unchecked_words(&e))
                }),
            DestinationConfig::Webhook(_) => None,
        }
    }

    /// A setting that works but costs, said when the sync is published;
    /// `consent_rule`: the mapping has one.
    pub fn setting_warning(&self, consent_rule: bool) -> Option<&'static str> {
        match self {
            DestinationConfig::Brevo(config) => config.setting_warning(consent_rule),
            DestinationConfig::Webhook(_) => None,
        }
    }
}
