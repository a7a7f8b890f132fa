//! An erasure request: addresses taken out of the store (`store::forget`)
//! and, when asked, the contacts deleted in the destination accounts of one
//! workspace's syncs — every account any version of them wrote to, and no
//! other workspace's (a request must not tell one tenant's host about
//! another's people, nor delete its contacts). Only the CLI and the admin
//! token may ask: the store step reaches every workspace's rows.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{OpsError, Scope, Scoped};
use crate::config::secrets::SecretStore;
use crate::config::{SyncDefinition, WorkspaceId};
use crate::destination::{ErasingAccount, Erasure, ErasureOutcome, NotDeletable};
use crate::store::forget::{self, Erased};

/// What one erasure did.
#[derive(Debug, Serialize)]
pub struct Forgotten {
    /// The workspace whose accounts were asked and whose syncs that cannot
    /// be asked are named (`None`: the store only, every workspace's named).
    pub workspace: Option<String>,
    /// The addresses' digests, as the audit log names them.
    pub addresses_sha256: Vec<String>,
    pub store: Erased,
    /// Per destination account (with `--destination`): what it did with
    /// each address.
    pub accounts: Vec<AccountErasure>,
    /// Syncs whose destination cannot be asked to delete, per kind.
    #[serde(flatten)]
    pub not_deletable: NotDeletable,
}

/// One destination account's deletions, named by the syncs that write to
/// it (never by its key).
#[derive(Debug, Serialize)]
pub struct AccountErasure {
    /// The destination's name in words.
    #[serde(skip)]
    pub label: &'static str,
    pub syncs: Vec<String>,
    /// Per address, in the order given: what the account did, or why
    /// nothing could be asked.
    pub outcomes: Vec<ErasureOutcome>,
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
    /// Whether this scope may ask for an erasure at all (the CLI and the
    /// admin token: the store step reaches every workspace's rows), asked
    /// before the request is read.
    pub fn may_forget(&self) -> Result<(), OpsError> {
        match self.scope {
            Scope::Cli | Scope::Admin => Ok(()),
            Scope::Workspace { .. } => Err(OpsError::AdminOnly),
        }
    }

    /// Takes `addresses` out of the store; with `destination`, deletes them
    /// in every destination account a version of `workspace`'s syncs wrote to
    /// (its key from that workspace's secrets), whatever the store step
    /// found. `workspace` may be left out where only one workspace holds
    /// syncs.
    pub async fn forget(
        &self,
        addresses: &[String],
        workspace: Option<&str>,
        destination: bool,
    ) -> Result<Forgotten, OpsError> {
        self.may_forget()?;
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
                         with --workspace; only that workspace's destination accounts are asked",
                        listed(&workspaces)
                    )));
                }
            },
        };
        let store = forget::forget_addresses(&self.store, addresses, self.scope.actor()).await?;
        let mut not_deletable = NotDeletable::default();
        let syncs = match &workspace {
            Some(workspace) => {
                crate::store::syncs::workspace_definitions(&self.store, workspace).await?
            }
            None => crate::store::syncs::all_definitions(&self.store).await?,
        };
        // One account per kind, URL and key: several syncs (and versions) may share it.
        let mut open: BTreeMap<String, (ErasingAccount, Vec<String>)> = BTreeMap::new();
        let mut unopened: BTreeMap<String, (Vec<String>, &'static str, String)> = BTreeMap::new();
        for crate::store::syncs::StoredDefinition { id, definition } in syncs {
            let Ok(definition) = serde_json::from_value::<SyncDefinition>(definition.0) else {
                continue;
            };
            let secrets = destination.map(|s| s.workspace(&definition.workspace));
            let syncs = match definition.destination.erasure(secrets.as_ref()) {
                Erasure::CannotDelete => {
                    not_deletable.add(&definition.destination, &id);
                    continue;
                }
                Erasure::NotAsked => continue,
                Erasure::Account(account) => {
                    &mut open
                        .entry(account.account.clone())
                        .or_insert((account, Vec::new()))
                        .1
                }
                Erasure::Unopened { url, label, why } => {
                    &mut unopened.entry(url).or_insert((Vec::new(), label, why)).0
                }
            };
            if !syncs.contains(&id) {
                syncs.push(id);
            }
        }
        let mut accounts = Vec::new();
        for (account, syncs) in open.into_values() {
            let mut outcomes = Vec::with_capacity(addresses.len());
            for address in addresses {
                outcomes.push(account.delete(address).await);
            }
            accounts.push(AccountErasure {
                label: account.label,
                syncs,
                outcomes,
            });
        }
        for (syncs, label, why) in unopened.into_values() {
            accounts.push(AccountErasure {
                label,
                syncs,
                outcomes: addresses
                    .iter()
                    .map(|_| ErasureOutcome::Failed(why.clone()))
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
            not_deletable,
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
