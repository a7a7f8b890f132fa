//! Outbound HTTP below every part that calls out (sources, destinations, alerts): the one client
//! (no redirects, capped reads, errors without URLs), Standard Webhooks signing, the one retry
//! policy, and request budgets shared per destination account. It imports no connector, store or worker.

mod budget;
mod client;
pub mod policy;
mod retry;
mod signature;

pub use budget::{ScriptAnswer, ScriptHost, SharedBudgets};
pub use client::{
    BodyError, ClientError, DESTINATION_ANSWER_CAP, SOURCE_PAGE_CAP, cap_text, describe_error,
    http_client, operator_client, read_capped, redirect_target,
};
pub use policy::OutboundPolicy;
pub use retry::{HEADER_WAIT_LIMIT, JITTER, RetryPolicy, header_wait, retry_after};
pub use signature::{ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, WebhookSigner};
