//! `Reload`: what SIGHUP does. `main` asks for a reload; the daemon re-reads
//! its config from where it read it at start and puts in force what can change
//! while it runs (the log filter, the alert channels and the outbound
//! allow-list). Every other changed
//! key is named in a warning: it takes a restart. A config that does not load
//! changes nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::Notify;
use tracing::{error, info, warn};

use crate::alerts::Alerter;
use crate::config::{ConfigSource, Settings};
use crate::logging::LogFilter;

/// The daemon's side of SIGHUP: where its config comes from, the log filter
/// to replace, and the asks from `main`.
#[derive(Debug, Clone)]
pub struct Reload {
    source: ConfigSource,
    log: LogFilter,
    asked: Arc<Notify>,
}

impl Reload {
    pub fn new(source: ConfigSource, log: LogFilter) -> Self {
        Self {
            source,
            log,
            asked: Arc::new(Notify::new()),
        }
    }

    /// Asks for a reload. Asks made while one is being handled fold into one
    /// more reload, which reads the file as it is then.
    pub fn request(&self) {
        self.asked.notify_one();
    }

    /// Resolves at the next ask (at once if one is pending).
    pub async fn requested(&self) {
        self.asked.notified().await
    }

    /// Re-reads the config and puts the reloadable part in force; `running`
    /// are the settings the daemon started with. Returns whether the new
    /// config was taken.
    pub fn apply(&self, running: &Settings, alerter: &Alerter) -> bool {
        let path = self.source.path.display().to_string();
        let fresh = match Settings::load(&self.source) {
            Ok(fresh) => fresh,
            Err(bad) => {
                // The reason names the file (or variable), the key and the problem.
                error!(error = %bad, "Config reload refused; the running settings stay");
                return false;
            }
        };
        // The filter first: it was validated with the settings, so this fails
        // only if the subscriber is gone, and then nothing else changes either.
        if let Err(e) = self.log.set(&fresh.log.level) {
            error!(config = %path, error = %e, "Config reload refused; the running settings stay");
            return false;
        }
        // Validated with the settings, so it always builds.
        if let Err(e) = crate::outbound::policy::replace_allow(&fresh.outbound.allow) {
            error!(config = %path, error = %e, "outbound.allow not reloaded; the running list stays");
        }
        let channels = alerter.reload(&fresh.alerts);
        let restart = needing_restart(running, &fresh);
        for key in &restart {
            warn!(key = %key, "Changed setting needs a restart; the running value stays");
        }
        info!(
            config = %path,
            // Not `log.level`: fmt hides fields named `log.*` (the log crate's).
            log_level = %fresh.log.level,
            alerts = %channels.join(","),
            restart_needed = restart.len(),
            "Config reloaded"
        );
        true
    }
}

/// Whether a reload puts a changed key in force. Everything else (database,
/// redis, workers, http, log.format, …) is read once at start.
pub fn reloadable(key: &str) -> bool {
    key == "log.level" || key == "alerts" || key.starts_with("alerts.") || key == "outbound.allow"
}

/// The keys whose value differs between `running` and `fresh` and that only a
/// restart puts in force: names only, since some values are secrets.
pub fn needing_restart(running: &Settings, fresh: &Settings) -> Vec<String> {
    let (old, new) = (
        flatten(running.to_diff_json()),
        flatten(fresh.to_diff_json()),
    );
    let changed: BTreeSet<String> = old
        .keys()
        .chain(new.keys())
        .filter(|key| old.get(*key) != new.get(*key))
        .cloned()
        .collect();
    changed.into_iter().filter(|key| !reloadable(key)).collect()
}

/// Every setting as `section.key` → its value, from the settings' own
/// serialization (`config::shown`): a setting added to a section is compared
/// here with no list to extend, and a secret compares by its digest.
fn flatten(settings: serde_json::Value) -> BTreeMap<String, serde_json::Value> {
    fn walk(prefix: &str, value: serde_json::Value, out: &mut BTreeMap<String, serde_json::Value>) {
        match value {
            serde_json::Value::Object(table) => {
                for (key, inner) in table {
                    let key = if prefix.is_empty() {
                        key
                    } else {
                        format!("{prefix}.{key}")
                    };
                    walk(&key, inner, out);
                }
            }
            other => {
                out.insert(prefix.to_string(), other);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk("", settings, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Settings {
        Settings::with_services(
            "postgres://app:one@db:5432/sync",
            "redis://127.0.0.1:6379",
            "syncward",
        )
    }

    #[test]
    fn unchanged_settings_need_no_restart() {
        assert!(needing_restart(&base(), &base()).is_empty());
    }

    #[test]
    fn log_level_and_alert_channels_reload_in_place() {
        let mut fresh = base();
        fresh.log.level = "debug".into();
        fresh.alerts.webhook_url = Some("http://127.0.0.1:9/hook".parse().unwrap());
        fresh.alerts.webhook_secret = Some("s".to_string().into());
        fresh.alerts.sentry_dsn = Some("http://key@127.0.0.1:9/42".to_string().into());
        assert!(needing_restart(&base(), &fresh).is_empty());
    }

    #[test]
    fn every_other_changed_key_is_named() {
        let mut fresh = base();
        fresh.workers.count = 8;
        fresh.http.listen = "127.0.0.1:9090".parse().unwrap();
        fresh.log.format = crate::config::LogFormat::Json;
        fresh.lease.ttl = std::time::Duration::from_secs(60);
        assert_eq!(
            needing_restart(&base(), &fresh),
            ["http.listen", "lease.ttl", "log.format", "workers.count"]
        );
    }

    #[test]
    fn a_changed_secret_is_named_though_its_value_is_redacted() {
        let mut fresh = base();
        fresh.database.url = "postgres://app:two@db:5432/sync".to_string().into();
        fresh.http.admin_token = Some("a".repeat(32).into());
        assert_eq!(
            needing_restart(&base(), &fresh),
            ["database.url", "http.admin_token"]
        );
    }
}
