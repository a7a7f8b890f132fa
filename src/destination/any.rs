//! `AnyDestination`: the configured destination, opened; dispatches to each kind.

use super::DestinationConfig;
use super::brevo::BrevoDestination;
use super::delivery::Destination;
use super::record::{DestinationError, Outbound, RecordOutcome};
use super::webhook::WebhookDestination;
use crate::outbound::RetryPolicy;

#[derive(Debug)]
pub enum AnyDestination {
    Brevo(BrevoDestination),
    Webhook(WebhookDestination),
}

impl AnyDestination {
    /// Resolves secrets from the environment and builds the HTTP client.
    pub fn open(config: &DestinationConfig, policy: RetryPolicy) -> Result<Self, DestinationError> {
        match config {
            DestinationConfig::Brevo(c) => {
                BrevoDestination::open(c, policy).map(AnyDestination::Brevo)
            }
            DestinationConfig::Webhook(c) => {
                WebhookDestination::open(c, policy).map(AnyDestination::Webhook)
            }
        }
    }
}

impl Destination for AnyDestination {
    async fn start(&mut self, attributes: &[String]) -> Vec<String> {
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

    async fn deliver(&self, records: &[Outbound]) -> Result<Vec<RecordOutcome>, DestinationError> {
        match self {
            AnyDestination::Brevo(d) => d.deliver(records).await,
            AnyDestination::Webhook(d) => d.deliver(records).await,
        }
    }
}
