//! Logging: tracing-subscriber to stderr, human-readable or JSON lines. The
//! daemon's filter sits behind a reload layer, so SIGHUP can change
//! `log.level` without a restart (the format is fixed at start).

use anyhow::Context;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

use crate::config::{LogFormat, LogSettings};

/// Who reads the logs: the daemon logs at `log.level`; one-shot commands print
/// their results on stdout and log only warnings unless `RUST_LOG` asks for more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    Daemon,
    Command,
}

/// Replaces the filter of the subscriber `init` installed.
#[derive(Debug, Clone)]
pub struct LogFilter {
    /// `None` when `init` found a subscriber already installed (tests that
    /// call `execute` twice in one process): that one is not ours to change.
    handle: Option<reload::Handle<EnvFilter, Registry>>,
}

impl LogFilter {
    /// Puts `level` (`RUST_LOG` syntax, as `log.level`) in force from the next event on.
    pub fn set(&self, level: &str) -> anyhow::Result<()> {
        let Some(handle) = &self.handle else {
            return Ok(());
        };
        let filter = EnvFilter::try_new(level).context("log.level is not a valid filter")?;
        handle
            .reload(filter)
            .context("the log filter cannot be replaced")
    }
}

pub fn init(settings: &LogSettings, audience: Audience) -> anyhow::Result<LogFilter> {
    let filter = match (audience, std::env::var("RUST_LOG")) {
        (Audience::Command, Ok(env)) => {
            EnvFilter::try_new(env).context("RUST_LOG is not a valid filter")?
        }
        (Audience::Command, Err(_)) => EnvFilter::new("warn"),
        (Audience::Daemon, _) => {
            EnvFilter::try_new(&settings.level).context("log.level is not a valid filter")?
        }
    };
    let (filter, handle) = reload::Layer::new(filter);
    // Colours only on a terminal: journald and log files get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let output = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    // try_init fails only when a subscriber is already set (tests that call
    // `execute` twice in one process); the first one stays.
    let installed = match settings.format {
        LogFormat::Human => registry.with(output).try_init(),
        LogFormat::Json => registry.with(output.json().flatten_event(true)).try_init(),
    };
    Ok(LogFilter {
        handle: installed.is_ok().then_some(handle),
    })
}
