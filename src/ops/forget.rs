//! An erasure request: addresses taken out of the store (`store::forget`)
//! and, when asked, the contacts deleted in the Brevo accounts of one
//! workspace's syncs — every account any version of them wrote to, and no
//! other workspace's (a request must not tell one tenant's host about
//! another's people, nor delete its contacts). Only the CLI and the admin
//! token may ask: the store step reaches every workspace's rows.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{OpsError, Scope, Scoped};
use crate::config::secrets::SecretStore;
use crate::config::{SyncDefinition, WorkspaceId};
use crate::destination::brevo::{BrevoDestination, Deleted};
use crate::destination::{DESTINATION_RETRY, DestinationConfig};
use crate::store::forget::{self, Erased};

/// What one erasure did.
#[derive(Debug, Serialize)]
pub struct Forgotten {
    /// The workspace whose accounts were asked and whose webhook syncs are
    /// named (`None`: the store only, every workspace's webhook syncs named).
    pub workspace: Option<String>,
    /// The addresses' digests, as the audit log names them.
    pub addresses_sha256: Vec<String>,
    pub store: Erased,
    /// Per Brevo account (with `--destination`): what Brevo did with each address.
    pub accounts: Vec<AccountErasure>,
    /// Syncs writing to webhooks: syncward cannot delete there; their
    /// receivers' owners must be told.
    pub webhook_syncs: Vec<String>,
}

/// One Brevo account's deletions, named by the syncs that write to it
/// (never by its key).
#[derive(Debug, Serialize)]
pub struct AccountErasure {
    pub syncs: Vec<String>,
    /// Per address, in the order given: what Brevo did, or why nothing could be asked.
    pub outcomes: Vec<AccountOutcome>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "snake_case", tag = "outcome", content = "detail")]
pub enum AccountOutcome {
    Deleted,
    NotFound,
    /// Brevo refused to delete it, or the call failed: the detail says why.
    Failed(String),
}

/// The first address that is not one, as `what is wrong` (naming its place).
pub fn check_addresses(addresses: &[String]) -> Result<(), String> {
    if addresses.is_empty() {
        return Err("give at least one e-mail address".into());
    }
    for (i, address) in addresses.iter().enumerate() {
        if let Some(problem) = crate::mapping::email_problem(address.trim()) {
            return Err(format!("address {} ({address:?}): {problem}", i + 1));
        }
    }
    Ok(())
}

impl Scoped {
    /// Takes `addresses` out of the store; with `destination`, deletes them
    /// in every Brevo account a version of `workspace`'s syncs wrote to
    /// (its key from that workspace's secrets), whatever the store step
    /// found. `workspace` may be left out where only one workspace holds
    /// syncs.
    pub async fn forget(
        &self,
        addresses: &[String],
        workspace: Option<&str>,
        destination: bool,
    ) -> Result<Forgotten, OpsError> {
        if !matches!(self.scope, Scope::Cli | Scope::Admin) {
            return Err(OpsError::AdminOnly);
        }
        check_addresses(addresses).map_err(OpsError::BadInput)?;
        let destination: Option<&SecretStore> = match (destination, &self.secrets) {
            (false, _) => None,
            (true, Some(secrets)) => Some(secrets),
            (true, None) => {
                return Err(OpsError::BadInput(
                    "this door holds no secrets to call a destination with".into(),
                ));
            }
        };
        let workspaces = crate::store::syncs::workspaces_with_syncs(&self.store).await?;
        let workspace = match workspace {
            Some(given) => {
                let id = WorkspaceId::parse(given)
                    .map_err(|why| OpsError::BadInput(format!("workspace: {why}")))?;
                if !workspaces.iter().any(|w| w == id.as_str()) {
                    return Err(OpsError::BadInput(format!(
                        "workspace {id} holds no sync (workspaces with syncs: {})",
                        listed(&workspaces)
                    )));
                }
                Some(id.to_string())
            }
            None if destination.is_none() => None,
            None => match workspaces.as_slice() {
                [only] => Some(only.clone()),
                [] => None,
                _ => {
                    return Err(OpsError::BadInput(format!(
                        "more than one workspace holds syncs ({}): say whose request this is \
                         with --workspace; only that workspace's Brevo accounts are asked",
                        listed(&workspaces)
                    )));
                }
            },
        };
        let store = forget::forget_addresses(&self.store, addresses, self.scope.actor()).await?;
        let mut accounts = Vec::new();
        let mut webhook_syncs = Vec::new();
        let syncs = match &workspace {
            Some(workspace) => {
                crate::store::syncs::workspace_definitions(&self.store, workspace).await?
            }
            None => crate::store::syncs::all_definitions(&self.store).await?,
        };
        // One account per base URL and key: several syncs (and versions) may share it.
        let mut brevo: BTreeMap<(String, String), (BrevoDestination, Vec<String>)> =
            BTreeMap::new();
        let mut unopened: BTreeMap<String, (Vec<String>, String)> = BTreeMap::new();
        for crate::store::syncs::StoredDefinition { id, definition } in syncs {
            let Ok(definition) = serde_json::from_value::<SyncDefinition>(definition.0) else {
                continue;
            };
            match &definition.destination {
                DestinationConfig::Webhook(_) => {
                    if !webhook_syncs.contains(&id) {
                        webhook_syncs.push(id);
                    }
                }
                DestinationConfig::Brevo(config) => {
                    let Some(secrets) = destination else {
                        continue;
                    };
                    let workspace = secrets.workspace(&definition.workspace);
                    match BrevoDestination::open(config, DESTINATION_RETRY, &workspace) {
                        Ok(client) => {
                            let account = (config.base_url.to_string(), client.key_digest());
                            let syncs = &mut brevo.entry(account).or_insert((client, Vec::new())).1;
                            if !syncs.contains(&id) {
                                syncs.push(id);
                            }
                        }
                        Err(e) => {
                            // Named by the account's URL, never its key.
                            let entry = unopened
                                .entry(config.base_url.to_string())
                                .or_insert((Vec::new(), e.to_string()));
                            if !entry.0.contains(&id) {
                                entry.0.push(id);
                            }
                        }
                    }
                }
            }
        }
        for (client, syncs) in brevo.into_values() {
            let mut outcomes = Vec::with_capacity(addresses.len());
            for address in addresses {
                outcomes.push(
                    match client.delete_contact(&address.trim().to_lowercase()).await {
                        Ok(Deleted::Deleted) => AccountOutcome::Deleted,
                        Ok(Deleted::NotFound) => AccountOutcome::NotFound,
                        Ok(Deleted::Refused(why)) => AccountOutcome::Failed(why),
                        Err(e) => AccountOutcome::Failed(e.to_string()),
                    },
                );
            }
            accounts.push(AccountErasure { syncs, outcomes });
        }
        for (syncs, why) in unopened.into_values() {
            accounts.push(AccountErasure {
                syncs,
                outcomes: addresses
                    .iter()
                    .map(|_| AccountOutcome::Failed(why.clone()))
                    .collect(),
            });
        }
        Ok(Forgotten {
            workspace,
            addresses_sha256: addresses
                .iter()
                .map(|a| forget::address_digest(a))
                .collect(),
            store,
            accounts,
            webhook_syncs,
        })
    }
}

/// Workspace ids for a message: `acme, globex`, or `none`.
fn listed(workspaces: &[String]) -> String {
    if workspaces.is_empty() {
        "none".into()
    } else {
        workspaces.join(", ")
    }
}
