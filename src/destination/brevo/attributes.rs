//! Checking a sync's mapped attribute names against the Brevo account: an
//! import drops an attribute the account does not have without a word
//! (a single upsert refuses it), so `sync apply` and `sync preview` ask first,
//! and each run asks again when it opens (an attribute may be deleted after
//! apply): what the account lacks is left out and named in a run notice.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use tracing::warn;

use super::attribute_types::AttributeType;
use super::client::BrevoDestination;
use super::config::BrevoDestinationConfig;
use crate::connector_config::WorkspaceSecrets;
use crate::destination::{DESTINATION_RETRY, DestinationError};

/// What the account says of a sync's mapped attributes: those it lacks
/// (sorted), and the type of each it has.
#[derive(Debug, Default)]
pub struct AccountCheck {
    pub missing: Vec<String>,
    /// Mapped name (as the mapping writes it) → the account's type.
    pub types: HashMap<String, AttributeType>,
}

impl AccountCheck {
    /// The attributes the account lacks, in words, with what to do; `None`
    /// when it lacks none.
    pub fn missing_words(&self) -> Option<String> {
        let missing = &self.missing;
        let (it, them) = match missing.len() {
            0 => return None,
            1 => ("it", "it"),
            _ => ("them", "them"),
        };
        Some(format!(
            "the Brevo account has no attribute {} (imports drop {it} without a word, single \
             upserts are refused); create {them} in Brevo",
            missing.join(", "),
        ))
    }

    /// Values of a sample that Brevo would ignore for their attribute's
    /// type (a run leaves them out and says so): one line per attribute,
    /// with how many of the `sampled` records hold such a value and the
    /// first one's reason. `sample`: each record's position and mapped
    /// attributes.
    pub fn misfits<'a>(
        &self,
        sample: impl IntoIterator<Item = (usize, &'a serde_json::Map<String, serde_json::Value>)>,
        sampled: usize,
    ) -> Vec<String> {
        let mut by_attribute: std::collections::BTreeMap<&str, (usize, usize, String)> =
            std::collections::BTreeMap::new();
        for (position, attributes) in sample {
            for (name, value) in attributes {
                if let Some(Err(why)) = self
                    .types
                    .get(name)
                    .filter(|_| !value.is_null())
                    .map(|t| t.fit(value))
                {
                    by_attribute
                        .entry(name.as_str())
                        .or_insert((0, position, why))
                        .0 += 1;
                }
            }
        }
        by_attribute
            .into_iter()
            .map(|(name, (count, first, why))| {
                format!(
                    "mapping.attributes.{name}: {count} of {sampled} sampled records hold a value \
                     Brevo would ignore for its type (record #{first}: {why}); a run leaves it out"
                )
            })
            .collect()
    }
}

/// Why the mapped attributes could not be checked, in words.
pub fn unchecked_words(e: &DestinationError) -> String {
    format!("the mapped attributes could not be checked against Brevo: {e}")
}

/// The mapped attributes checked against the account; `None` when there is
/// nothing to check: the mapping has no attributes, or the API key is not
/// in the workspace's secrets here (the check needs the key; the daemon's
/// machine may be the only one that has it).
pub async fn account_check<'a>(
    config: &BrevoDestinationConfig,
    mapped: impl IntoIterator<Item = &'a str>,
    secrets: &WorkspaceSecrets,
) -> Option<Result<AccountCheck, DestinationError>> {
    let mapped: Vec<&str> = mapped.into_iter().collect();
    if mapped.is_empty()
        || secrets
            .get(&config.api_key_env, "destination.api_key_env")
            .is_err()
    {
        return None;
    }
    let brevo = match BrevoDestination::open(config, DESTINATION_RETRY, secrets) {
        Ok(b) => b,
        Err(e) => return Some(Err(e)),
    };
    Some(
        brevo
            .account_attributes()
            .await
            .map(|account| check(mapped.into_iter(), &account)),
    )
}

/// Whether the account takes the sync's API key: the number of attributes
/// it lists (`syncward doctor`). A key missing from the workspace's secrets
/// here, or refused (401/403), is the error.
pub async fn key_check(
    config: &BrevoDestinationConfig,
    secrets: &WorkspaceSecrets,
) -> Result<usize, DestinationError> {
    let brevo = BrevoDestination::open(config, DESTINATION_RETRY, secrets)?;
    Ok(brevo.account_attributes().await?.len())
}

/// How long a run reuses the account's attribute list another run of this
/// process fetched: `GET /contacts/attributes` is outside the contacts limit,
/// in Brevo's ~100 requests/h budget, which process checks also spend.
const ATTRIBUTES_FRESH_FOR: Duration = Duration::from_secs(300);

/// Attribute lists per account (base URL and key digest), with when fetched.
type AttributesCache = Mutex<HashMap<(String, String), (Instant, Vec<(String, AttributeType)>)>>;

fn cache() -> &'static AttributesCache {
    static CACHE: OnceLock<AttributesCache> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Issue 19.2, "a run should not report as written what Brevo dropped": at
/// the start of a run, the mapped `attributes` the account lacks are left
/// out of every body the run sends, and returned as one run notice. One GET
/// per account per five minutes per process; when it fails the run goes on
/// unchecked (a WARN), as before the check existed: the check must not stop
/// syncs that would otherwise work. A refused key (401/403) is the one
/// answer that fails the run: every write with it would be refused too, and
/// a run with nothing to send would otherwise succeed on a revoked key.
pub(super) async fn check_at_start(
    brevo: &mut BrevoDestination,
    attributes: &[String],
) -> Result<Vec<String>, DestinationError> {
    if attributes.is_empty() {
        return Ok(Vec::new());
    }
    let key = (brevo.base_url().to_string(), brevo.key_digest());
    // The lock is never held across an await; a poisoned one only follows a
    // panic elsewhere, and the cached lists are still whole.
    let cached = cache()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&key)
        .filter(|(at, _)| at.elapsed() < ATTRIBUTES_FRESH_FOR)
        .map(|(_, names)| names.clone());
    let account = match cached {
        Some(names) => names,
        None => match brevo.account_attributes().await {
            Ok(names) => {
                cache()
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key, (Instant::now(), names.clone()));
                names
            }
            Err(e @ DestinationError::Unauthorized(_)) => return Err(e),
            Err(e) => {
                warn!(error = %e, "Could not list the Brevo account's attributes; not checked this run");
                return Ok(Vec::new());
            }
        },
    };
    let AccountCheck { missing, types } = check(attributes.iter().map(String::as_str), &account);
    let notices = if missing.is_empty() {
        Vec::new()
    } else {
        vec![format!(
            "attributes {} are not in the Brevo account and were not written",
            missing.join(", ")
        )]
    };
    brevo.fit_to(missing, types);
    Ok(notices)
}

/// Mapped names with no account attribute of that name, and the type of
/// each the account has. Brevo names are upper case and matched without
/// regard to case, as Brevo does.
fn check<'a>(
    mapped: impl Iterator<Item = &'a str>,
    account: &[(String, AttributeType)],
) -> AccountCheck {
    let mut result = AccountCheck::default();
    for name in mapped {
        match account.iter().find(|(a, _)| a.eq_ignore_ascii_case(name)) {
            Some((_, kind)) => {
                result.types.insert(name.to_string(), kind.clone());
            }
            None => result.missing.push(name.to_string()),
        }
    }
    result.missing.sort();
    result.missing.dedup();
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_attributes_the_account_lacks_and_types_the_others() {
        let account = vec![
            ("FIRSTNAME".to_string(), AttributeType::Text),
            ("DOB".to_string(), AttributeType::Date),
        ];
        let found = check(["FIRSTNAME", "SHOPIFY_ID", "dob"].into_iter(), &account);
        assert_eq!(found.missing, vec!["SHOPIFY_ID".to_string()]);
        assert_eq!(found.types.get("dob"), Some(&AttributeType::Date));
        assert_eq!(found.types.get("FIRSTNAME"), Some(&AttributeType::Text));
        assert!(check(std::iter::empty(), &account).missing.is_empty());
    }
}
