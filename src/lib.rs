//! syncward: a daemon that moves records from sources to destinations on
//! schedules, for many workspaces, without ever writing a record twice.
//!
//! Parts (DESIGN §2): `config` (settings and sync files), `store` (every SQL
//! statement: syncs, runs, cursors, ledger, audit, alerts), `source` and
//! `destination` (connectors), `commands` (what the CLI does), `logging`.

pub mod cli;
pub mod commands;
pub mod config;
pub mod destination;
pub mod logging;
pub mod source;
pub mod store;
