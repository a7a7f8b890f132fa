//! `AnyDestination`: the configured destination, opened; dispatches to each kind.

use super::DestinationConfig;
use super::brevo::BrevoDestination;
use super::delivery::{Destination, Go};
use serde_json::Value;

use super::record::{DestinationError, FollowUp, FollowUpPage, Outbound, RecordOutcome};
use super::webhook::WebhookDestination;
use crate::connector_config::WorkspaceSecrets;
use crate::outbound::RetryPolicy;

#[derive(Debug)]
pub enum AnyDestination {
    // Boxed: one per run, and the variants differ in size by hundreds of bytes.
    Brevo(Box<BrevoDestination>),
    Webhook(Box<WebhookDestination>),
}

impl AnyDestination {
    /// Resolves secrets from the workspace's and builds the HTTP client.
    pub fn open(
        config: &DestinationConfig,
        policy: RetryPolicy,
        secrets: &WorkspaceSecrets,
    ) -> Result<Self, DestinationError> {
        match config {
            DestinationConfig::Brevo(c) => BrevoDestination::open(c, policy, secrets)
                .map(|d| AnyDestination::Brevo(Box::new(d))),
            DestinationConfig::Webhook(c) => WebhookDestination::open(c, policy, secrets)
                .map(|d| AnyDestination::Webhook(Box::new(d))),
        }
    }
}

impl AnyDestination {
    /// Paces requests through the destination account's budget, shared by
    /// every sync and daemon on it: per API key for Brevo (the account's
    /// limit, whoever holds the key), per workspace and host for a webhook
    /// with `requests_per_second` (one workspace's pace is its own).
    pub fn share_budgets(&mut self, budgets: &crate::outbound::SharedBudgets, workspace: &str) {
        match self {
            AnyDestination::Brevo(d) => d.share_budgets(budgets),
            AnyDestination::Webhook(d) => d.share_budgets(budgets, workspace),
        }
    }
}

impl AnyDestination {
    /// The destination's lists a contact of this consent goes on; `None`
    /// where the destination has no lists (a webhook).
    pub fn lists_for(&self, consent: super::Consent) -> Option<Vec<u64>> {
        match self {
            AnyDestination::Brevo(d) => Some(d.lists_for(consent)),
            AnyDestination::Webhook(_) => None,
        }
    }
}

impl Destination for AnyDestination {
    async fn start(&mut self, attributes: &[String]) -> Result<Vec<String>, DestinationError> {
        match self {
            AnyDestination::Brevo(d) => d.start(attributes).await,
            AnyDestination::Webhook(d) => d.start(attributes).await,
        }
    }

    fn batch_size(&self) -> Option<usize> {
        match self {
            AnyDestination::Brevo(d) => d.batch_size(),
            AnyDestination::Webhook(d) => d.batch_size(),
        }
    }

    async fn deliver(
        &self,
        records: &[Outbound],
        go: Go<'_>,
    ) -> Result<Vec<RecordOutcome>, DestinationError> {
        match self {
            AnyDestination::Brevo(d) => d.deliver(records, go).await,
            AnyDestination::Webhook(d) => d.deliver(records, go).await,
        }
    }

    async fn remove(&self, emails: &[String], key: &str) -> Result<(), DestinationError> {
        match self {
            AnyDestination::Brevo(d) => d.remove(emails, key).await,
            AnyDestination::Webhook(d) => d.remove(emails, key).await,
        }
    }

    fn follow_up(&self, answer: &Value) -> Option<FollowUp> {
        match self {
            AnyDestination::Brevo(d) => d.follow_up(answer),
            AnyDestination::Webhook(d) => d.follow_up(answer),
        }
    }

    fn follow_up_budget(&self) -> Option<String> {
        match self {
            AnyDestination::Brevo(d) => d.follow_up_budget(),
            AnyDestination::Webhook(d) => d.follow_up_budget(),
        }
    }

    async fn reserve_slot(
        &self,
        within: std::time::Duration,
    ) -> Result<std::time::Duration, std::time::Duration> {
        match self {
            AnyDestination::Brevo(d) => d.reserve_slot(within).await,
            AnyDestination::Webhook(d) => d.reserve_slot(within).await,
        }
    }

    fn hold_slot(&self, wait: std::time::Duration) {
        match self {
            AnyDestination::Brevo(d) => d.hold_slot(wait),
            AnyDestination::Webhook(d) => d.hold_slot(wait),
        }
    }

    fn take_dropped(&self) -> Vec<(String, u64, String)> {
        match self {
            AnyDestination::Brevo(d) => d.take_dropped(),
            AnyDestination::Webhook(d) => d.take_dropped(),
        }
    }

    async fn follow_up_page(&self, page: u32) -> Result<FollowUpPage, DestinationError> {
        match self {
            AnyDestination::Brevo(d) => d.follow_up_page(page).await,
            AnyDestination::Webhook(d) => d.follow_up_page(page).await,
        }
    }
}

/// What `doctor` learns of a destination without delivering anything.
#[derive(Debug)]
pub enum KeyCheck {
    /// The key is accepted; what the account holds, in words.
    Accepted(String),
    /// The key was refused, or the destination could not be asked.
    Refused(DestinationError),
    /// The destination cannot be asked without delivering; why, in words.
    NotAsked(&'static str),
}

impl DestinationConfig {
    /// Asks the destination whether the sync's key works, sending nothing.
    pub async fn check_key(&self, secrets: &WorkspaceSecrets) -> KeyCheck {
        match self {
            DestinationConfig::Brevo(config) => {
                match super::brevo::key_check(config, secrets).await {
                    Ok(attributes) => KeyCheck::Accepted(format!(
                        "the API key is accepted ({} in the account)",
                        crate::words::counted(attributes, "attribute", "attributes")
                    )),
                    Err(e) => KeyCheck::Refused(e),
                }
            }
            DestinationConfig::Webhook(_) => {
                KeyCheck::NotAsked("not called (every call delivers); its first run tells")
            }
        }
    }
}
