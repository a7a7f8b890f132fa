//! Logging: tracing-subscriber to stderr, human-readable or JSON lines. The
//! daemon's filter sits behind a reload layer, so SIGHUP can change
//! `log.level` without a restart (the format is fixed at start). Under
//! journald (stderr is the stream `JOURNAL_STREAM` names) each line starts
//! with its syslog priority (`<3>` for ERROR: `journalctl -p err` finds it)
//! and carries no timestamp of its own (journald stamps it).

use std::borrow::Cow;
use std::fmt;

use anyhow::Context;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::{Context as LayerContext, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
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
        let filter = quiet_neighbours(
            EnvFilter::try_new(level).context("log.level is not a valid filter")?,
            level,
        );
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
    let asked = match audience {
        Audience::Daemon => settings.level.clone(),
        Audience::Command => std::env::var("RUST_LOG").unwrap_or_default(),
    };
    let filter = quiet_neighbours(filter, &asked);
    let (filter, handle) = reload::Layer::new(filter);
    // Colours only on a terminal: journald and log files get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let journal = stderr_is_journal();
    let output = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(|| AddressesMasked(std::io::stderr()));
    let sentry_errors = (audience == Audience::Daemon).then_some(SentryErrors);
    let registry = tracing_subscriber::registry()
        .with(filter)
        .with(sentry_errors);
    // try_init fails only when a subscriber is already set (tests that call
    // `execute` twice in one process); the first one stays.
    let installed = match (settings.format, journal) {
        (LogFormat::Human, false) => registry.with(output).try_init(),
        (LogFormat::Human, true) => registry
            .with(output.event_format(JournalPriority(
                tracing_subscriber::fmt::format().without_time(),
            )))
            .try_init(),
        (LogFormat::Json, false) => registry
            .with(output.json().event_format(SpanFieldsOnTop(
                tracing_subscriber::fmt::format().json().flatten_event(true),
            )))
            .try_init(),
        (LogFormat::Json, true) => registry
            .with(output.json().event_format(JournalPriority(SpanFieldsOnTop(
                tracing_subscriber::fmt::format().json().flatten_event(true),
            ))))
            .try_init(),
    };
    Ok(LogFilter {
        handle: installed.is_ok().then_some(handle),
    })
}

/// Third-party crates that log their inner workings at info (the cron
/// scheduler's "Uninited", "Job creator created") speak at warn and above,
/// unless the filter names them.
fn quiet_neighbours(filter: EnvFilter, asked: &str) -> EnvFilter {
    ["tokio_cron_scheduler", "hyper", "sqlx", "reqwest"]
        .into_iter()
        .filter(|target| !asked.contains(target))
        .fold(filter, |filter, target| {
            match format!("{target}=warn").parse() {
                Ok(directive) => filter.add_directive(directive),
                // A fixed, valid directive: never taken.
                Err(_) => filter,
            }
        })
}

/// Whether stderr is the journald stream systemd connected it to:
/// `JOURNAL_STREAM` holds its `device:inode` (systemd.exec(5)).
fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(stderr) = std::fs::metadata("/proc/self/fd/2") else {
        return false;
    };
    stream.to_string_lossy() == format!("{}:{}", stderr.dev(), stderr.ino())
}

/// Prefixes each line with its syslog priority, which journald takes off and
/// keeps as the entry's PRIORITY (sd-daemon(3)).
struct JournalPriority<F>(F);

impl<S, N, F> FormatEvent<S, N> for JournalPriority<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let priority = match *event.metadata().level() {
            Level::ERROR => 3,
            Level::WARN => 4,
            Level::INFO => 6,
            Level::DEBUG | Level::TRACE => 7,
        };
        write!(writer, "<{priority}>")?;
        self.0.format_event(ctx, writer, event)
    }
}

/// `text` with every e-mail address in it replaced by `[address]`. Failure
/// details quote what a source or destination said (a Postgres cast error,
/// an API's error body), which may name a person; the journal and Sentry
/// outlive an erasure, so what is written there is masked (the run's page,
/// which `forget` reaches, keeps the detail whole).
pub fn mask_addresses(text: &str) -> Cow<'_, str> {
    if !text.contains('@') {
        return Cow::Borrowed(text);
    }
    let local = |c: char| c.is_alphanumeric() || "._%+-".contains(c);
    let domain = |c: char| c.is_alphanumeric() || c == '.' || c == '-';
    let mut masked = String::with_capacity(text.len());
    let mut copied = 0;
    let mut from = 0;
    while let Some(at) = text[from..].find('@').map(|i| i + from) {
        let start = text[copied..at]
            .char_indices()
            .rev()
            .take_while(|(_, c)| local(*c))
            .last()
            .map_or(at, |(i, _)| copied + i);
        let rest = &text[at + 1..];
        let length = rest
            .char_indices()
            .find(|(_, c)| !domain(*c))
            .map_or(rest.len(), |(i, _)| i);
        let name = rest[..length].trim_end_matches(['.', '-']);
        let end = at + 1 + name.len();
        if start < at && name.contains('.') && !name.starts_with(['.', '-']) {
            masked.push_str(&text[copied..start]);
            masked.push_str("[address]");
            copied = end;
            from = end;
        } else {
            from = at + 1;
        }
    }
    if copied == 0 {
        return Cow::Borrowed(text);
    }
    masked.push_str(&text[copied..]);
    Cow::Owned(masked)
}

/// A log line's writer that masks e-mail addresses (`mask_addresses`):
/// every line syncward logs goes through it, whichever call site wrote a
/// detail into it. The formatter hands it one whole line per write.
struct AddressesMasked<W>(W);

impl<W: std::io::Write> std::io::Write for AddressesMasked<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !buf.contains(&b'@') {
            return self.0.write(buf);
        }
        let text = String::from_utf8_lossy(buf);
        self.0.write_all(mask_addresses(&text).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// A Sentry event with every string in it masked (`mask_addresses`): its
/// message and the fields and span fields it carries.
pub fn event_with_addresses_masked(
    event: sentry::protocol::Event<'static>,
) -> sentry::protocol::Event<'static> {
    fn mask(value: &mut serde_json::Value) {
        match value {
            serde_json::Value::String(text) => {
                if let Cow::Owned(masked) = mask_addresses(text) {
                    *text = masked;
                }
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(mask),
            serde_json::Value::Object(fields) => fields.values_mut().for_each(mask),
            _ => {}
        }
    }
    let Ok(mut value) = serde_json::to_value(&event) else {
        return event;
    };
    mask(&mut value);
    // The event's own serialisation read back: only strings changed.
    serde_json::from_value(value).unwrap_or(event)
}

/// Where ERROR lines go as Sentry events: set once by the daemon when
/// `alerts.sentry_dsn` is configured. A hub of our own rather than the
/// thread-local ones, which tokio's worker threads may have made before the
/// client existed.
static SENTRY_HUB: std::sync::OnceLock<std::sync::Arc<sentry::Hub>> = std::sync::OnceLock::new();

/// Sends this process's ERROR log lines to Sentry through `client` from now on.
pub fn send_errors_to_sentry(client: std::sync::Arc<sentry::Client>) {
    let hub = sentry::Hub::new(Some(client), std::sync::Arc::new(sentry::Scope::default()));
    // Set once per process; a second daemon in one test process keeps the first.
    let _ = SENTRY_HUB.set(std::sync::Arc::new(hub));
}

/// ERROR lines as Sentry events (with the run and sync of their span as
/// fields). Alerts' own log lines are left out: alerts reach Sentry through
/// their channel already.
struct SentryErrors;

impl<S> Layer<S> for SentryErrors
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_event(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) {
        let meta = event.metadata();
        if *meta.level() != Level::ERROR || meta.target().starts_with("syncward::alerts") {
            return;
        }
        if let Some(hub) = SENTRY_HUB.get() {
            // The converter the crate's own ErrorLayer uses; that layer reports
            // to the thread-local hub, which tokio's workers may have made
            // before the daemon had a client.
            #[allow(deprecated)]
            let converted = sentry::integrations::tracing::event_from_event(event, &ctx);
            hub.capture_event(event_with_addresses_masked(converted));
        }
    }
}

/// JSON lines with the fields of the spans around the event (`run_id`,
/// `sync_id`, `workspace`, `attempt`, `worker`) at the top level, beside the
/// event's own, so a log pipeline can filter on them without digging into
/// span objects; dotted span field names become underscored.
struct SpanFieldsOnTop<F>(F);

impl<S, N, F> FormatEvent<S, N> for SpanFieldsOnTop<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        let Ok(serde_json::Value::Object(mut object)) = serde_json::from_str(line.trim_end())
        else {
            // Not an object (cannot happen with the JSON format): as it came.
            return writer.write_str(&line);
        };
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                let Some(fields) = extensions.get::<tracing_subscriber::fmt::FormattedFields<N>>()
                else {
                    continue;
                };
                if let Ok(serde_json::Value::Object(fields)) =
                    serde_json::from_str::<serde_json::Value>(fields)
                {
                    for (name, value) in fields {
                        object.entry(name.replace('.', "_")).or_insert(value);
                    }
                }
            }
        }
        let text = serde_json::to_string(&object).map_err(|_| fmt::Error)?;
        writeln!(writer, "{text}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_masked_and_nothing_else() {
        for (text, masked) in [
            (
                "invalid input syntax for type integer: \"Ann.Lee+x@Example.org\"",
                "invalid input syntax for type integer: \"[address]\"",
            ),
            ("a@b.co, jörg@bücher.de.", "[address], [address]."),
            (
                "{\"email\":\"x_y@sub.example.com\"}",
                "{\"email\":\"[address]\"}",
            ),
            ("email=ann@example.org;", "email=[address];"),
            (
                "no address @ all, user@localhost, @example.org",
                "no address @ all, user@localhost, @example.org",
            ),
            ("plain text", "plain text"),
        ] {
            assert_eq!(mask_addresses(text), masked, "{text}");
        }
    }
}
