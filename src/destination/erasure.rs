//! An erasure request at the destinations: which syncs' accounts can be
//! asked to delete a contact (one client per account, however many syncs
//! share it) and which cannot be asked at all (their owners must be told).

use serde::Serialize;

use super::brevo::{BrevoDestination, Deleted};
use super::{DESTINATION_RETRY, DestinationConfig, DestinationError};
use crate::connector_config::WorkspaceSecrets;

/// Where one sync's destination stands for an erasure request.
#[derive(Debug)]
pub enum Erasure {
    /// An account that deletes contacts, opened with the sync's key.
    Account(ErasingAccount),
    /// An account that deletes contacts but could not be opened here:
    /// the account's URL (never its key), and why.
    Unopened {
        url: String,
        label: &'static str,
        why: String,
    },
    /// An account that deletes contacts, not asked: no secrets were given.
    NotAsked,
    /// The destination cannot be asked to delete (its owner must be told).
    CannotDelete,
}

/// An opened account that deletes contacts.
#[derive(Debug)]
pub struct ErasingAccount {
    /// Tells one account from another: kind, base URL and the key's
    /// digest, never the key.
    pub account: String,
    /// The destination's name in words ("Brevo").
    pub label: &'static str,
    // Boxed: the client is hundreds of bytes, the other answers a few words.
    client: Box<BrevoDestination>,
}

/// What one account did with one address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome", content = "detail")]
pub enum ErasureOutcome {
    Deleted,
    NotFound,
    /// The destination refused to delete it, or the call failed: the
    /// detail says why.
    Failed(String),
}

impl ErasingAccount {
    /// Deletes the contact `address` (trimmed, lower case) from the account.
    pub async fn delete(&self, address: &str) -> ErasureOutcome {
        let answer: Result<Deleted, DestinationError> = self
            .client
            .delete_contact(&address.trim().to_lowercase())
            .await;
        match answer {
            Ok(Deleted::Deleted) => ErasureOutcome::Deleted,
            Ok(Deleted::NotFound) => ErasureOutcome::NotFound,
            Ok(Deleted::Refused(why)) => ErasureOutcome::Failed(why),
            Err(e) => ErasureOutcome::Failed(e.to_string()),
        }
    }
}

impl DestinationConfig {
    /// How an erasure request reaches this destination; `secrets`: the
    /// sync's workspace's, or `None` when the accounts are not to be asked.
    pub fn erasure(&self, secrets: Option<&WorkspaceSecrets>) -> Erasure {
        match self {
            DestinationConfig::Webhook(_) => Erasure::CannotDelete,
            DestinationConfig::Brevo(config) => {
                let Some(secrets) = secrets else {
                    return Erasure::NotAsked;
                };
                match BrevoDestination::open(config, DESTINATION_RETRY, secrets) {
                    Ok(client) => Erasure::Account(ErasingAccount {
                        account: format!("brevo {} {}", config.base_url, client.key_digest()),
                        label: "Brevo",
                        client: Box::new(client),
                    }),
                    Err(e) => Erasure::Unopened {
                        url: config.base_url.to_string(),
                        label: "Brevo",
                        why: e.to_string(),
                    },
                }
            }
        }
    }
}

/// The syncs whose destination cannot be asked to delete, per kind: their
/// receivers' owners must be told.
#[derive(Debug, Default, Serialize)]
pub struct NotDeletable {
    pub webhook_syncs: Vec<String>,
}

impl NotDeletable {
    /// Names `sync` (once) under its destination's kind; a destination that
    /// can delete is not named.
    pub fn add(&mut self, destination: &DestinationConfig, sync: &str) {
        let syncs = match destination {
            DestinationConfig::Webhook(_) => &mut self.webhook_syncs,
            DestinationConfig::Brevo(_) => return,
        };
        if !syncs.iter().any(|s| s == sync) {
            syncs.push(sync.to_string());
        }
    }

    /// What to tell the requester, a line per kind named.
    pub fn words(&self) -> Vec<String> {
        let mut said = Vec::new();
        if !self.webhook_syncs.is_empty() {
            said.push(format!(
                "Webhook receivers of {} got these records: syncward cannot delete there; \
                 forward the request to their owners.",
                self.webhook_syncs.join(", ")
            ));
        }
        said
    }
}
