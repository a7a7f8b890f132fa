//! syncward: a daemon that moves records from sources to destinations on
//! schedules, for many workspaces, without ever writing a record twice.
//!
//! Parts (docs/contract.md §2): `breaker` (pauses failing syncs), `alerts`, `config` (settings and sync files), `store` (every SQL
//! statement: syncs, runs, cursors, ledger, audit, alerts), `lease` (Redis
//! leases and fencing), `worker` (one run's batch loop and delivery keys),
//! `source` and `destination` (connectors), `outbound` (the HTTP client, webhook
//! signing and retry policy shared by connectors and `alerts`), `connector_config`
//! (what connector configs are made of, below them and `config`), `mapping` (record → contact), `canonical_json` (the bytes a delivery key hashes),
//! `failure` (the failure catalogue), `states` (the stored states and run
//! triggers, as enums), `scheduler` (cron → queue), `sweeper`
//! (stuck and dead runs, ledger purge), `shutdown` (the drain), `reload`
//! (SIGHUP: log filter and alert channels), `daemon_shared` (what the workers,
//! scheduler and sweeper of one daemon share, and how it is built),
//! `views` (the overview, sync and run pages, shared by `http` and
//! `commands`), `ops` (the one door of operator actions on a sync, taking
//! the caller's scope), `commands` (what the CLI does), `logging`.

/// mimalloc for every binary that links syncward (the daemon, its tests and
/// benchmarks): a run allocates many small maps and strings per record, and
/// glibc's allocator spent about a sixth of the bulk path's CPU on them.
/// Built without transparent huge pages (`no_thp`, Cargo.toml): with them a
/// first sync of 100,000 contacts peaked at 67 MiB instead of 37.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

pub mod alerts;
pub mod breaker;
pub mod canonical_json;
pub mod cli;
pub mod commands;
pub mod completion;
pub mod config;
pub mod connector_config;
pub mod daemon_shared;
pub mod deadman;
pub mod destination;
pub mod failure;
pub mod http;
pub mod lease;
pub mod logging;
pub mod mapping;
pub mod ops;
pub mod outages;
pub mod outbound;
pub mod redis;
pub mod reload;
pub mod scheduler;
pub mod shutdown;
pub mod source;
pub mod states;
pub mod store;
pub mod sweeper;
pub mod telemetry;
pub mod views;
pub mod words;
pub mod worker;
