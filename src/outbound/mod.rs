//! Outbound HTTP below every part that calls out (sources, destinations, alerts): the one client
//! (no redirects, capped reads, errors without URLs), Standard Webhooks signing, the one retry
//! policy, and rate limits (shared per destination account through Redis, or a process's own). It
//! imports no connector, store or worker.

mod client;
pub mod policy;
mod rate_limit;
mod retry;
mod signature;

pub use client::{
    BodyError, ClientError, DESTINATION_ANSWER_CAP, SOURCE_PAGE_CAP, cap_text, describe_error,
    http_client, operator_client, read_capped, redirect_target,
};
pub use policy::OutboundPolicy;
pub use rate_limit::{RateLimit, SharedBudgets, Spent};
pub use retry::{HEADER_WAIT_LIMIT, JITTER, RetryPolicy, header_wait, retry_after};
pub use signature::{ID_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, WebhookSigner};
