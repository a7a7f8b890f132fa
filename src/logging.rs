//! Logging: tracing-subscriber to stderr, human-readable or JSON lines.

use anyhow::Context;
use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

/// Who reads the logs: the daemon logs at `log.level`; one-shot commands print
/// their results on stdout and log only warnings unless `RUST_LOG` asks for more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    Daemon,
    Command,
}

pub fn init(settings: &LogSettings, audience: Audience) -> anyhow::Result<()> {
    let filter = match (audience, std::env::var("RUST_LOG")) {
        (Audience::Command, Ok(env)) => {
            EnvFilter::try_new(env).context("RUST_LOG is not a valid filter")?
        }
        (Audience::Command, Err(_)) => EnvFilter::new("warn"),
        (Audience::Daemon, _) => {
            EnvFilter::try_new(&settings.level).context("log.level is not a valid filter")?
        }
    };
    // Colours only on a terminal: journald and log files get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    // try_init fails only when a subscriber is already set (tests that call
    // `execute` twice in one process); the first one stays.
    let _ = match settings.format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    Ok(())
}
