//! Daemon settings (docs/contract.md §3): a TOML file overlaid by `SYNCWARD__SECTION__KEY`
//! environment variables, deserialized strictly (unknown keys refused) and then
//! checked for values that parse but cannot work together.

use std::path::PathBuf;

use config::{Config, Environment, File, FileFormat};
use secrecy::SecretString;
use serde::{Deserialize, Serialize};

mod alerts;
mod checks;
mod http;
mod process;
mod runs;
mod services;

pub use alerts::*;
pub use http::*;
pub use process::*;
pub use runs::*;
pub use services::*;

use super::bad_input::BadInput;
use super::url_secrets::hide_urls_in_message;

/// Where the daemon looks for its config when neither `--config` nor
/// `SYNCWARD_CONFIG` names a file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/syncward/syncward.toml";

/// Prefix of the environment variables that override settings.
pub const ENV_PREFIX: &str = "SYNCWARD";

/// Every daemon setting. Each section has defaults, so an empty file is valid.
#[derive(Debug, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub database: DatabaseSettings,
    pub redis: RedisSettings,
    pub workers: WorkerSettings,
    pub shutdown: ShutdownSettings,
    pub lease: LeaseSettings,
    pub retry: RetrySettings,
    pub sweeper: SweeperSettings,
    pub ledger: LedgerSettings,
    pub retention: RetentionSettings,
    pub breaker: BreakerSettings,
    pub deadman: DeadmanSettings,
    pub alerts: AlertSettings,
    pub http: HttpSettings,
    pub log: LogSettings,
    pub secrets: SecretsSettings,
    pub outbound: OutboundSettings,
}

impl Settings {
    /// `retry.max_attempts` as a run row keeps it (validated to at most 100,
    /// so it always fits).
    pub fn run_attempts(&self) -> i32 {
        i32::try_from(self.retry.max_attempts).unwrap_or(i32::MAX)
    }

    /// Makes `outbound.allow` the policy of this process's connectors
    /// (validated at load, so it always builds).
    pub fn install_outbound_policy(&self) {
        if let Ok(policy) = self.outbound.policy(self.http.listen) {
            crate::outbound::policy::install(policy);
        }
    }
}

/// Which file to read: an explicit path must exist; the default path may be
/// absent (then defaults and environment variables alone apply).
#[derive(Debug, Clone)]
pub struct ConfigSource {
    pub path: PathBuf,
    pub explicit: bool,
}

impl ConfigSource {
    pub fn resolve(flag: Option<PathBuf>) -> Self {
        match flag {
            Some(path) => Self {
                path,
                explicit: true,
            },
            None => Self {
                path: PathBuf::from(DEFAULT_CONFIG_PATH),
                explicit: false,
            },
        }
    }
}

impl Settings {
    /// Loads the file (if any), overlays `SYNCWARD__SECTION__KEY` variables and
    /// validates the result.
    pub fn load(source: &ConfigSource) -> Result<Self, BadInput> {
        let origin = source.path.display().to_string();
        // `SYNCWARD_DATABASE_URL` (one underscore) is read by nothing: say
        // so rather than run on defaults the operator did not mean.
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if let Some(rest) = name.strip_prefix("SYNCWARD_")
                && !rest.starts_with('_')
                && !matches!(rest, "CONFIG" | "ENV_FILE" | "ENV_FILE_LOADED")
            {
                eprintln!(
                    "warning: {name} is not read: a setting's variable has two underscores \
                     after SYNCWARD and between section and key (SYNCWARD__{})",
                    rest.replacen('_', "__", 1)
                );
            }
        }
        // A file that is there but cannot be read is an error, default path
        // or not: defaults in its place would hide the operator's settings.
        match std::fs::File::open(&source.path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if source.explicit {
                    return Err(BadInput::new(origin, "", "config file not found"));
                }
            }
            Err(e) => return Err(BadInput::unreadable(&source.path, &e)),
        }
        let config = Config::builder()
            .add_source(
                File::from(source.path.as_path())
                    .format(FileFormat::Toml)
                    .required(source.explicit),
            )
            .add_source(
                Environment::with_prefix(ENV_PREFIX)
                    .prefix_separator("__")
                    .separator("__")
                    .try_parsing(true)
                    .list_separator(",")
                    .with_list_parse_key("alerts.email.to")
                    .with_list_parse_key("http.allowed_hosts")
                    .with_list_parse_key("outbound.allow"),
            )
            .build()
            .map_err(|e| config_error(&origin, &source.path, e))?;
        let settings: Settings = serde_path_to_error::deserialize(config).map_err(|e| {
            let key = e.path().to_string();
            let problem = hide_urls_in_message(&strip_config_suffix(&e.inner().to_string()));
            BadInput::new(origin_of(&origin, &key), key, problem)
        })?;
        settings.validate(&origin)?;
        Ok(settings)
    }

    /// The settings as data for comparing two versions of them (the reload's
    /// restart diff): as `to_redacted_toml` shows them, but every secret as
    /// a digest under a key of this process, so a changed one is seen.
    pub fn to_diff_json(&self) -> serde_json::Value {
        super::shown::for_diff(self)
    }

    /// The effective settings as TOML with every secret shown as `[redacted]`
    /// (URLs keep everything but their password and secret-looking query values).
    pub fn to_redacted_toml(&self) -> String {
        // Every value is a string, number, bool, array or table, all of which
        // TOML can hold (unset options are dropped first: TOML has no null).
        toml::to_string(&strip_nulls(super::shown::for_people(self)))
            .unwrap_or_else(|e| format!("# cannot render settings: {e}\n"))
    }
}

/// Names the environment variable instead of the file when the bad key came from one.
fn origin_of(file: &str, key: &str) -> String {
    let var = format!("{ENV_PREFIX}__{}", key.replace('.', "__").to_uppercase());
    if std::env::var_os(&var).is_some() {
        format!("environment variable {var}")
    } else {
        file.to_string()
    }
}

/// `config` appends " for key `x` in FILE" to its messages; the key and file are
/// already in ours.
fn strip_config_suffix(message: &str) -> String {
    let cut = [" for key `", " in "]
        .iter()
        .filter_map(|p| message.find(p))
        .min()
        .unwrap_or(message.len());
    message[..cut].to_string()
}

fn config_error(origin: &str, path: &std::path::Path, error: config::ConfigError) -> BadInput {
    match error {
        // The parser's own message quotes the offending line, which may hold a
        // password: name the line and column and give only its reason.
        config::ConfigError::FileParse { cause, .. } => {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            match cause.downcast_ref::<toml::de::Error>() {
                Some(error) => BadInput::toml_syntax(origin, &text, error),
                None => BadInput::new(origin, "", "not valid TOML"),
            }
        }
        config::ConfigError::NotFound(key) => BadInput::new(origin, key, "is required"),
        other => BadInput::new(origin, "", other.to_string()),
    }
}

fn strip_nulls(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        other => other,
    }
}

impl Settings {
    /// Settings for tests and tools: defaults with the given store and Redis.
    pub fn with_services(database_url: &str, redis_url: &str, key_prefix: &str) -> Self {
        let mut s = Settings::default();
        s.database.url = SecretString::from(database_url.to_owned());
        s.redis.url = SecretString::from(redis_url.to_owned());
        s.redis.key_prefix = key_prefix.to_owned();
        s
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn defaults_match_the_design() {
        let s = Settings::default();
        assert_eq!(s.workers.count, 4);
        assert_eq!(s.lease.ttl, Duration::from_secs(900));
        assert_eq!(s.lease.renew_every, Duration::from_secs(300));
        assert_eq!(s.retry.max_attempts, 5);
        assert_eq!(s.ledger.retention, Duration::from_secs(7 * 86400));
        assert_eq!(s.deadman.schedule.as_str(), "0 13 * * * *");
        assert_eq!(s.shutdown.drain_deadline, Duration::from_secs(15));
        assert_eq!(s.shutdown.hard_exit_after, Duration::from_secs(25));
        s.validate("test").unwrap();
    }

    #[test]
    fn absurd_durations_and_counts_are_refused_with_the_limit() {
        let mut s = Settings::default();
        s.shutdown.drain_deadline = Duration::from_secs(500_000_000_000 * 365 * 86400 / 1000);
        let err = s.validate("t.toml").unwrap_err();
        assert_eq!(err.key, "shutdown.drain_deadline");
        assert!(
            err.problem.ends_with("is longer than the limit of 1h"),
            "{err}"
        );
        let mut s = Settings::default();
        s.workers.count = 5000;
        let err = s.validate("t.toml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "t.toml: workers.count: 5000 is more than the limit of 1024"
        );
        let mut s = Settings::default();
        s.ledger.retention = Duration::from_secs(10 * 365 * 86400);
        s.retry.max_attempts = 100;
        s.validate("t.toml").unwrap();
        // One store connection would be LISTEN's alone.
        let mut s = Settings::default();
        s.database.max_connections = 1;
        let err = s.validate("t.toml").unwrap_err();
        assert_eq!(err.key, "database.max_connections");
        assert!(err.problem.contains("at least 2"), "{err}");
    }

    #[test]
    fn http_settings_refuse_short_tokens_and_hosts_that_are_urls() {
        let check = |token: Option<&str>, hosts: &[&str]| {
            let http = HttpSettings {
                admin_token: token.map(|t| SecretString::from(t.to_owned())),
                allowed_hosts: hosts.iter().map(|h| h.to_string()).collect(),
                ..HttpSettings::default()
            };
            http.validate()
                .map_err(|(key, problem)| format!("{key}: {problem}"))
        };
        assert!(check(None, &[]).is_ok());
        assert!(check(Some(&"t".repeat(32)), &[]).is_ok());
        let short = check(Some(&"secret-".repeat(4)), &[]).unwrap_err();
        assert!(
            short.starts_with("http.admin_token: is 28 characters long; at least 32"),
            "{short}"
        );
        assert!(!short.contains("secret-"), "{short}");
        let spaced = check(Some(&format!("{} x", "t".repeat(32))), &[]).unwrap_err();
        assert!(spaced.contains("without spaces"), "{spaced}");
        for good in ["syncward.example.com", "10.0.0.5:8080", "[::1]:9000"] {
            assert!(check(None, &[good]).is_ok(), "{good}");
        }
        for bad in [
            "https://x.example",
            "x.example/admin",
            "*.example",
            "",
            "a b",
        ] {
            let problem = check(None, &[bad]).unwrap_err();
            assert!(problem.starts_with("http.allowed_hosts: "), "{problem}");
        }
    }
}
