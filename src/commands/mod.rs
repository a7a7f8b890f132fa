//! What each CLI command does: load settings, call the library, print for a
//! person (or JSON with `--json`).

mod doctor;
mod exit_code;
mod forget;
pub mod output;
mod plan;
pub mod run_daemon;
mod run_once;
mod run_progress;

pub use exit_code::exit_code;
pub use plan::PlanHasChanges;
pub use run_once::SyncBusy;
mod runs;
mod status;
mod sync;
mod tokens;
mod trace;

pub use status::NoLiveDaemon;

use anyhow::Context;

use crate::cli::{Cli, Command, DeadmanCommand, LedgerCommand};
use crate::config::{ConfigSource, Settings};
use crate::store;
use output::{out, outln};

/// Runs one command. Bad input comes back as a `BadInput` in the error chain
/// (exit 2); anything else is exit 1.
pub async fn execute(cli: Cli) -> anyhow::Result<()> {
    let source = ConfigSource::resolve(cli.config);
    let settings = Settings::load(&source)?;
    settings.install_outbound_policy();
    crate::logging::init(&settings.log, crate::logging::Audience::Command)?;
    match cli.command {
        Command::Run | Command::Completions { .. } | Command::Man => {
            anyhow::bail!("`syncward run`, `completions` and `man` are handled by main")
        }
        Command::CheckConfig(json) => {
            if json.json {
                // The same redacted settings, as JSON.
                let table: toml::Table = toml::from_str(&settings.to_redacted_toml())
                    .context("rendering the settings")?;
                return print_json(&table);
            }
            let from = if source.path.exists() {
                source.path.display().to_string()
            } else {
                format!("{} (not found: defaults)", source.path.display())
            };
            outln!("# Effective syncward config from {from} and SYNCWARD__* variables.");
            outln!("# Secrets are shown as [redacted].");
            out!("{}", settings.to_redacted_toml());
            Ok(())
        }
        Command::Migrate(json) => {
            let pool = store::connect_for_migrate(&settings.database).await?;
            let applied = store::migrate(&pool).await?;
            let (latest, name) = store::MIGRATOR
                .iter()
                .max_by_key(|m| m.version)
                .map(|m| (m.version, m.description.to_string()))
                .unwrap_or_default();
            if json.json {
                return print_json(&serde_json::json!({"applied": applied, "schema": latest}));
            }
            // Named by the latest file: numbers are not consecutive (0011
            // was never shipped), so a count and a number need not match.
            let at = format!("{latest:04}_{}", name.replace(' ', "_"));
            if applied == 0 {
                outln!("Schema is current (at {at}); nothing to apply.");
            } else {
                outln!(
                    "Applied {}; the schema is now at {at}.",
                    crate::words::counted(applied, "migration", "migrations")
                );
            }
            Ok(())
        }
        Command::Sync(command) => sync::execute(&settings, command).await,
        Command::Token(command) => tokens::execute(&settings, command).await,
        Command::Status(json) => status::execute(&settings, json.json).await,
        Command::Forget(args) => forget::execute(&settings, args).await,
        Command::Trace(args) => trace::execute(&settings, args).await,
        Command::Ledger(LedgerCommand::Purge(json)) => {
            let pool = store::connect(&settings.database).await?;
            let purged =
                store::ledger::purge_completed(&pool, settings.ledger.retention, 10_000).await?;
            if json.json {
                let retention = crate::words::duration_text(settings.ledger.retention);
                return print_json(&serde_json::json!({
                    "deleted_keys": purged.keys,
                    "dropped_days": purged.days,
                    "retention": retention,
                }));
            }
            outln!(
                "Deleted {} older than {} ({} dropped).",
                crate::words::counted(
                    purged.keys,
                    "completed delivery key",
                    "completed delivery keys"
                ),
                crate::words::duration_text(settings.ledger.retention),
                crate::words::counted(purged.days, "day partition", "day partitions")
            );
            Ok(())
        }
        Command::Deadman(DeadmanCommand::Check(json)) => {
            let pool = store::connect(&settings.database).await?;
            let redis = connect_redis(&settings.redis).await?;
            let report = crate::deadman::check(
                &crate::alerts::Alerter::new(pool.clone(), &settings.alerts),
                &redis,
                &settings.redis.key_prefix,
                &settings.deadman,
            )
            .await?;
            if json.json {
                return print_json(&serde_json::json!({
                    "alerted": report.alerted, "still_silent": report.still_silent,
                }));
            }
            for target in &report.alerted {
                outln!("{target}: silent; alert raised");
            }
            for target in &report.still_silent {
                outln!("{target}: still silent; already alerted");
            }
            if report.alerted.is_empty() && report.still_silent.is_empty() {
                outln!(
                    "No silence: every workspace and sync old enough to judge had a successful run."
                );
            }
            Ok(())
        }
        Command::Doctor(json) => doctor::doctor(&settings, json.json).await,
        Command::Runs(command) => {
            let pool = store::connect(&settings.database).await?;
            let door = crate::ops::Door::new(pool, settings.run_attempts())
                .with_secrets(settings.secrets.store());
            runs::execute(&door.enter(crate::ops::Scope::Cli), command)
                .await
                .context("runs command failed")
        }
    }
}

pub(crate) use crate::views::when;

/// Prints a value as pretty JSON.
pub(crate) fn print_json(value: &impl serde::Serialize) -> anyhow::Result<()> {
    outln!("{}", serde_json::to_string_pretty(value)?);
    Ok(())
}

/// Opens the Redis pool (one server, or a Sentinel set's primary) and proves
/// the server answers; the error names the server with its password redacted.
pub async fn connect_redis(
    settings: &crate::config::RedisSettings,
) -> anyhow::Result<crate::redis::RedisPool> {
    let unreachable = || {
        format!(
            "cannot reach Redis at {}",
            crate::config::redact_url(&settings.url)
        )
    };
    let address = settings
        .address()
        .map_err(|problem| anyhow::anyhow!("redis.url: {problem}"))?;
    let pool = address.open_pool().with_context(unreachable)?;
    tokio::time::timeout(std::time::Duration::from_secs(10), pool.ping())
        .await
        .map_err(|_| anyhow::anyhow!("no answer within 10s"))
        .with_context(unreachable)?
        .with_context(unreachable)?;
    Ok(pool)
}
