//! Checking a sync's mapped attribute names against the Brevo account: an
//! import drops an attribute the account does not have without a word
//! (a single upsert refuses it), so `sync apply` and `sync preview` ask first.

use super::client::BrevoDestination;
use crate::config::SyncDefinition;
use crate::destination::{DestinationConfig, DestinationError, RetryPolicy};

/// The mapped attributes the account lacks, sorted; `None` when there is
/// nothing to check: the destination is not Brevo, the mapping has no
/// attributes, or the API key's variable is not set here (the check needs the
/// key; the daemon's machine may be the only one that has it).
pub async fn missing_attributes(
    definition: &SyncDefinition,
) -> Option<Result<Vec<String>, DestinationError>> {
    let DestinationConfig::Brevo(config) = &definition.destination else {
        return None;
    };
    if definition.mapping.attributes.is_empty() || config.api_key_env.read().is_none() {
        return None;
    }
    let brevo = match BrevoDestination::open(config, RetryPolicy::default()) {
        Ok(b) => b,
        Err(e) => return Some(Err(e)),
    };
    Some(brevo.attribute_names().await.map(|names| {
        missing(
            definition.mapping.attributes.keys().map(String::as_str),
            &names,
        )
    }))
}

/// Mapped names with no account attribute of that name. Brevo names are
/// upper case and matched without regard to case, as Brevo does.
fn missing<'a>(mapped: impl Iterator<Item = &'a str>, account: &[String]) -> Vec<String> {
    let mut absent: Vec<String> = mapped
        .filter(|m| !account.iter().any(|a| a.eq_ignore_ascii_case(m)))
        .map(str::to_string)
        .collect();
    absent.sort();
    absent.dedup();
    absent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_attributes_the_account_lacks() {
        let account = vec!["FIRSTNAME".to_string(), "LASTNAME".to_string()];
        assert_eq!(
            missing(
                ["FIRSTNAME", "SHOPIFY_ID", "lastname"].into_iter(),
                &account
            ),
            vec!["SHOPIFY_ID".to_string()]
        );
        assert!(missing(std::iter::empty(), &account).is_empty());
    }
}
