//! syncward's integration tests: one binary, a module per guarantee or part.
//! Real Postgres, real Redis, the real binary; a missing service fails loudly.

mod fakes;
mod helpers;

mod admin_security;
mod alerts;
mod breaker;
mod brevo_api;
mod brevo_fake;
mod chaos;
mod config_loading;
mod conformance;
mod daemon;
mod deadman;
mod debian_package;
mod edges;
mod fault_drills;
mod fleet;
mod harness;
mod history;
mod http_api;
mod http_source;
mod import_outcomes;
mod layout;
mod lease_fence;
mod ledger;
mod liveness;
mod logs;
mod metrics;
mod outages;
mod pages;
mod postgres_source;
mod preview;
mod quickstart;
mod run_queue;
mod schedule;
mod schema;
mod shopify_answers;
mod shopify_source;
mod signals;
mod status;
mod sync_commands;
mod sync_files;
mod sync_run;
mod systemd_unit;
mod webhook_destination;
