//! Local fakes of third-party services, built from ../shared/specs: real HTTP
//! servers on ephemeral ports that record every request and take scripted faults.

pub mod brevo;
pub mod paged_api;
pub mod sentry;
pub mod shopify;
pub mod smtp;
pub mod webhook;
