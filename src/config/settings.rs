//! Daemon settings (docs/contract.md §3): a TOML file overlaid by `SYNCWARD__SECTION__KEY`
//! environment variables, deserialized strictly (unknown keys refused) and then
//! checked for values that parse but cannot work together.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use config::{Config, Environment, File, FileFormat};
use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

use super::bad_input::BadInput;
use super::redis_address::RedisAddress;
use super::schedule::Schedule;
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

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseSettings {
    /// Postgres URL of the store. Secret (it may hold a password): printed with the
    /// password redacted. Default `postgres://syncward@127.0.0.1:5432/syncward`.
    #[serde(serialize_with = "super::shown::secret_url")]
    pub url: SecretString,
    /// Most connections the daemon opens to the store. Default 10.
    pub max_connections: u32,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        Self {
            url: SecretString::from("postgres://syncward@127.0.0.1:5432/syncward"),
            max_connections: 10,
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisSettings {
    /// Redis URL for leases, liveness keys, dead-man markers and shared request
    /// budgets. Secret (it may hold a password). Default `redis://127.0.0.1:6379`.
    ///
    /// One server: `redis://[[user]:password@]host[:port][/db]` (`rediss://`
    /// for TLS). A Sentinel set, whose current primary is used and followed
    /// through a failover:
    /// `redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service_name[/db]`,
    /// each host a Sentinel (port 26379 when left out), `service_name` the
    /// primary's name in the Sentinels' configuration (`mymaster`); the
    /// user-info and database are the primary's, the Sentinels are asked
    /// without a password. `check-config` shows either form with its password
    /// redacted.
    #[serde(serialize_with = "super::shown::secret_url")]
    pub url: SecretString,
    /// Prefix of every Redis key; isolates deployments (and tests) sharing one
    /// Redis. Default `syncward`.
    pub key_prefix: String,
}

impl RedisSettings {
    /// `url` read as one server or a Sentinel set; the error names the problem
    /// without quoting the URL.
    pub fn address(&self) -> Result<RedisAddress, String> {
        RedisAddress::parse(self.url.expose_secret())
    }
}

impl Default for RedisSettings {
    fn default() -> Self {
        Self {
            url: SecretString::from("redis://127.0.0.1:6379"),
            key_prefix: "syncward".into(),
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerSettings {
    /// Runs executed at once by this daemon. Default 4.
    pub count: usize,
    /// How often an idle worker looks for work when no NOTIFY arrived. Default 1s.
    #[serde(with = "super::shown::duration")]
    pub poll_interval: Duration,
    /// Lifetime of this daemon's liveness key in Redis, refreshed every third of
    /// it (with a heartbeat in Postgres); a run whose holder's key is gone
    /// and whose heartbeat is stale is taken over. Default 10s: with
    /// `sweeper.every` it bounds SIGKILL-to-resumed (12 s).
    #[serde(with = "super::shown::duration")]
    pub liveness_ttl: Duration,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            count: 4,
            poll_interval: Duration::from_secs(1),
            liveness_ttl: Duration::from_secs(10),
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownSettings {
    /// After SIGTERM, time for busy runs to stop at a clean batch boundary.
    /// Default 15s.
    #[serde(with = "super::shown::duration")]
    pub drain_deadline: Duration,
    /// After SIGTERM, the process exits at this point whatever still runs.
    /// Default 25s.
    #[serde(with = "super::shown::duration")]
    pub hard_exit_after: Duration,
}

impl Default for ShutdownSettings {
    fn default() -> Self {
        Self {
            drain_deadline: Duration::from_secs(15),
            hard_exit_after: Duration::from_secs(25),
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseSettings {
    /// Lifetime of a run's lease on its sync. Default 15m.
    #[serde(with = "super::shown::duration")]
    pub ttl: Duration,
    /// How often a run renews its lease; must be shorter than `ttl`. Default 5m.
    #[serde(with = "super::shown::duration")]
    pub renew_every: Duration,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(15 * 60),
            renew_every: Duration::from_secs(5 * 60),
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetrySettings {
    /// Attempts a run gets, the first included. Default 5.
    pub max_attempts: u32,
    /// Wait before the second attempt; doubles for each further one. Default 60s.
    #[serde(with = "super::shown::duration")]
    pub backoff_base: Duration,
    /// Longest wait between attempts. Default 1h.
    #[serde(with = "super::shown::duration")]
    pub backoff_max: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            backoff_base: Duration::from_secs(60),
            backoff_max: Duration::from_secs(3600),
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SweeperSettings {
    /// How often the sweeper looks for runs of dead processes and stuck runs
    /// (the ledger is purged at most once a minute). Default 2s.
    #[serde(with = "super::shown::duration")]
    pub every: Duration,
    /// A `running` run started longer ago than this, with a free lease, is
    /// re-queued. Default 1h.
    #[serde(with = "super::shown::duration")]
    pub stuck_after: Duration,
    /// A Brevo import is first asked about this long after it was accepted,
    /// and again this long after each answer that it is still running.
    /// Default 1m.
    #[serde(with = "super::shown::duration")]
    pub import_check_after: Duration,
    /// Import-process checks per hour and Brevo API key, across daemons
    /// (Brevo allows 100/h on `GET /processes`; keep room for people). Default 90.
    pub import_checks_per_hour: u32,
}

impl Default for SweeperSettings {
    fn default() -> Self {
        Self {
            every: Duration::from_secs(2),
            stuck_after: Duration::from_secs(3600),
            import_check_after: Duration::from_secs(60),
            import_checks_per_hour: 90,
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LedgerSettings {
    /// How long completed delivery keys are kept. Default 7d.
    #[serde(with = "super::shown::duration")]
    pub retention: Duration,
    /// Times one record may be sent before it is rejected as
    /// `attempt_budget_exhausted`. Default 3.
    pub record_attempts: u32,
}

impl Default for LedgerSettings {
    fn default() -> Self {
        Self {
            retention: Duration::from_secs(7 * 24 * 3600),
            record_attempts: 3,
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionSettings {
    /// How long finished runs are kept, with their timelines, rejected
    /// records and import processes. Each sync's newest finished run and runs
    /// holding records not yet put back are kept whatever their age.
    /// Default 30d.
    #[serde(with = "super::shown::duration")]
    pub runs: Duration,
    /// How long alerts are kept. Default 90d.
    #[serde(with = "super::shown::duration")]
    pub alerts: Duration,
    /// How long audit rows (publishes, pauses, resumes, resets) are kept.
    /// Default 1y.
    #[serde(with = "super::shown::duration")]
    pub audit_log: Duration,
}

impl Default for RetentionSettings {
    fn default() -> Self {
        Self {
            runs: Duration::from_secs(30 * 24 * 3600),
            alerts: Duration::from_secs(90 * 24 * 3600),
            audit_log: Duration::from_secs(365 * 24 * 3600),
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerSettings {
    /// Consecutive failed runs that pause a sync (a sync file may override it).
    /// Default 5.
    pub consecutive_failures: u32,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            consecutive_failures: 5,
        }
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeadmanSettings {
    /// When the dead-man check runs: cron with seconds. Default `0 13 * * * *`
    /// (minute 13 of every hour).
    pub schedule: Schedule,
    /// A workspace or sync with no successful run for this long is silent
    /// (a sync file may override it). Default 24h.
    #[serde(with = "super::shown::duration")]
    pub silence_window: Duration,
    /// Also check each sync on its own, so a healthy sync does not hide a silent
    /// sibling. Default true.
    pub per_sync: bool,
}

impl Default for DeadmanSettings {
    fn default() -> Self {
        Self {
            // The literal is a valid six-field expression; covered by a test.
            schedule: Schedule::parse("0 13 * * * *").expect("default dead-man schedule is valid"),
            silence_window: Duration::from_secs(24 * 3600),
            per_sync: true,
        }
    }
}

#[derive(Debug, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AlertSettings {
    /// Sentry DSN for critical alerts. Secret. Default: none (no Sentry).
    #[serde(serialize_with = "super::shown::optional_secret")]
    pub sentry_dsn: Option<SecretString>,
    /// URL that receives each alert as signed JSON. Default: none.
    #[serde(serialize_with = "super::shown::optional_url")]
    pub webhook_url: Option<url::Url>,
    /// Key of the alert webhook's signature (Standard Webhooks: `webhook-id`,
    /// `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256>`):
    /// `whsec_<base64>` is the decoded bytes, any other value its raw bytes.
    /// Required with `webhook_url`. Secret. Default: none.
    #[serde(serialize_with = "super::shown::optional_secret")]
    pub webhook_secret: Option<SecretString>,
    /// E-mail over SMTP. Default: none.
    pub email: Option<EmailSettings>,
    /// Owner routing: workspace id → address that also receives the alerts
    /// whose failure is the customer's (a revoked key, a mapping every record is
    /// rejected for). Needs `alerts.email`. Default: none.
    pub workspace_email: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSettings {
    /// SMTP server, e.g. `smtps://user:pass@smtp.example.com:465` or
    /// `smtp://127.0.0.1:2525` (plain, local). Secret (it may hold a password).
    #[serde(serialize_with = "super::shown::secret_url")]
    pub smtp_url: SecretString,
    /// Sender address.
    pub from: String,
    /// Recipients; at least one.
    pub to: Vec<String>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSettings {
    /// Address of the admin HTTP server. Default `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// The admin token: `Authorization: Bearer <token>` on `/api/…`, Basic
    /// with the token as the password on the pages; needed by everything but
    /// health, readiness and metrics, and by every write (pause, resume, run,
    /// retry) even on loopback. At least 32 printable ASCII characters, no
    /// spaces. Without it the server binds loopback only and answers reads
    /// but refuses every write. Secret. Default: none (the Debian package
    /// generates one into `/etc/syncward/syncward.env`).
    #[serde(serialize_with = "super::shown::optional_secret")]
    pub admin_token: Option<SecretString>,
    /// The scrape token of `/metrics` (`Authorization: Bearer`, as
    /// Prometheus' `authorization` scrape setting sends it). Once this or
    /// the admin token is set, `/metrics` needs one of the two; with
    /// neither, it is open (loopback only). Same rules as the admin token.
    /// Secret. Default: none.
    #[serde(serialize_with = "super::shown::optional_secret")]
    pub metrics_token: Option<SecretString>,
    /// Host names the admin server answers to, as a browser's address bar
    /// shows them: `host` or `host:port` (`[::1]:8080` for IPv6), no scheme.
    /// Every request's `Host` header (all routes but `/healthz`) and every
    /// browser write's `Origin` (or `Referer`) must name one of them, which
    /// defeats DNS rebinding and cross-site forms. These are added to the
    /// defaults, which are always allowed: the listen address (unless it is
    /// 0.0.0.0 or ::), `localhost:PORT`, `127.0.0.1:PORT` and `[::1]:PORT`,
    /// with the port actually bound (so `listen = "127.0.0.1:0"` works). Name
    /// the host of a TLS proxy in front of the server here (e.g.
    /// `syncward.example.com`). Default: none beyond those.
    pub allowed_hosts: Vec<String>,
    /// Longest time a client may take to send a request's headers (also the
    /// idle time allowed between requests on a kept-alive connection); the
    /// connection is closed past it. Between 1s and 5m. Default 10s.
    #[serde(with = "super::shown::duration")]
    pub header_read_timeout: Duration,
    /// Longest time one request may take once its headers arrived; it is
    /// answered 408 past it. Between 1s and 1h. Default 30s.
    #[serde(with = "super::shown::duration")]
    pub request_timeout: Duration,
    /// Most connections open at once; further ones wait in the listen queue
    /// until one closes. Between 1 and 100000. Default 256.
    pub max_connections: usize,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_token: None,
            metrics_token: None,
            allowed_hosts: Vec::new(),
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 256,
        }
    }
}

/// Shortest admin token accepted: 32 characters.
pub const ADMIN_TOKEN_MIN_LEN: usize = 32;

impl HttpSettings {
    /// The `[http]` checks: the token's length and alphabet, the allowed
    /// hosts' form and the limits' bounds. Returns the bad key and the problem.
    fn validate(&self) -> Result<(), (&'static str, String)> {
        for (key, token) in [
            ("http.admin_token", &self.admin_token),
            ("http.metrics_token", &self.metrics_token),
        ] {
            let Some(token) = token else { continue };
            let token = token.expose_secret();
            // The message gives the length, never the token.
            let length = token.chars().count();
            if length < ADMIN_TOKEN_MIN_LEN {
                return Err((
                    key,
                    format!(
                        "is {length} characters long; at least {ADMIN_TOKEN_MIN_LEN} are required \
                         (e.g. `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'`)"
                    ),
                ));
            }
            if !token.chars().all(|c| c.is_ascii_graphic()) {
                return Err((
                    key,
                    "must be printable ASCII without spaces (it travels in an HTTP header)".into(),
                ));
            }
        }
        for host in &self.allowed_hosts {
            check_allowed_host(host).map_err(|problem| ("http.allowed_hosts", problem))?;
        }
        let bounded = [
            (
                "http.header_read_timeout",
                self.header_read_timeout,
                Duration::from_secs(1),
                Duration::from_secs(300),
            ),
            (
                "http.request_timeout",
                self.request_timeout,
                Duration::from_secs(1),
                Duration::from_secs(3600),
            ),
        ];
        for (key, value, min, max) in bounded {
            if value < min || value > max {
                return Err((
                    key,
                    format!(
                        "{} is out of range; it must be between {} and {}",
                        crate::words::duration_text(value),
                        crate::words::duration_text(min),
                        crate::words::duration_text(max)
                    ),
                ));
            }
        }
        if !(1..=100_000).contains(&self.max_connections) {
            return Err((
                "http.max_connections",
                format!(
                    "{} is out of range; it must be between 1 and 100000",
                    self.max_connections
                ),
            ));
        }
        Ok(())
    }
}

/// An `http.allowed_hosts` entry is `host` or `host:port`, as in a `Host`
/// header: no scheme, path, user or wildcard.
fn check_allowed_host(entry: &str) -> Result<(), String> {
    let shown = entry.escape_default();
    if entry.contains("://") {
        return Err(format!(
            "\"{shown}\" has a scheme; give the host (and port) only, e.g. \"syncward.example.com\""
        ));
    }
    if entry.is_empty() || entry.contains(|c: char| !c.is_ascii_graphic() || "/@*?#\\".contains(c))
    {
        return Err(format!(
            "\"{shown}\" is not a host name: give `host` or `host:port`, no path, user or wildcard"
        ));
    }
    match url::Url::parse(&format!("http://{entry}/")) {
        Ok(url) if url.host_str().is_some() => Ok(()),
        _ => Err(format!(
            "\"{shown}\" is not a host name: give `host` or `host:port`"
        )),
    }
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct OutboundSettings {
    /// Host names, addresses and CIDR ranges inside the network (loopback,
    /// link-local, private, CGNAT) that sources and destinations may reach
    /// anyway (`outbound::policy`), e.g. `["warehouse.internal",
    /// "10.20.0.0/16"]`. Default: none (only public addresses).
    pub allow: Vec<String>,
}

impl OutboundSettings {
    /// The policy the connectors' client enforces; `own` is the admin
    /// address, which no sync may call.
    pub fn policy(
        &self,
        own: std::net::SocketAddr,
    ) -> Result<crate::outbound::OutboundPolicy, String> {
        crate::outbound::OutboundPolicy::new(&self.allow, Some(own))
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SecretsSettings {
    /// The directory of the workspaces' secrets files, `<workspace>.env`
    /// each (`config::secrets`). Default `/etc/syncward/secrets`.
    pub dir: std::path::PathBuf,
}

impl Default for SecretsSettings {
    fn default() -> Self {
        Self {
            dir: crate::config::secrets::DEFAULT_SECRETS_DIR.into(),
        }
    }
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

impl SecretsSettings {
    /// The workspaces' secrets, where this daemon reads them.
    pub fn store(&self) -> crate::config::secrets::SecretStore {
        crate::config::secrets::SecretStore::new(&self.dir)
    }
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogSettings {
    /// Filter in `RUST_LOG` syntax, e.g. `info` or `syncward=debug,sqlx=warn`.
    /// Default `info`.
    pub level: String,
    /// `human` (default) or `json` (one JSON object per line, for journald
    /// shippers).
    pub format: LogFormat,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            level: "info".into(),
            format: LogFormat::Human,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Human,
    Json,
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

    /// Checks values that deserialize but cannot work (zero workers, a renewal
    /// slower than the lease, a bad DSN, …).
    fn validate(&self, origin: &str) -> Result<(), BadInput> {
        let bad =
            |key: &str, problem: String| Err(BadInput::new(origin_of(origin, key), key, problem));
        check_url(
            origin,
            "database.url",
            &self.database.url,
            &["postgres", "postgresql"],
        )?;
        if let Err(problem) = self.redis.address() {
            return bad("redis.url", problem);
        }
        // LISTEN for queued runs holds one of the pool's connections for
        // good: with one alone, no run would ever get one.
        if self.database.max_connections < 2 {
            return bad(
                "database.max_connections",
                "must be at least 2 (LISTEN for queued runs holds one of them)".into(),
            );
        }
        if let Err(problem) = self.outbound.policy(self.http.listen) {
            return bad("outbound.allow", problem);
        }
        if self.redis.key_prefix.is_empty() || self.redis.key_prefix.contains(char::is_whitespace) {
            return bad(
                "redis.key_prefix",
                "must be non-empty and contain no whitespace".into(),
            );
        }
        if self.workers.count == 0 {
            return bad("workers.count", "must be at least 1".into());
        }
        let positive = [
            ("workers.poll_interval", self.workers.poll_interval),
            ("workers.liveness_ttl", self.workers.liveness_ttl),
            ("shutdown.drain_deadline", self.shutdown.drain_deadline),
            ("shutdown.hard_exit_after", self.shutdown.hard_exit_after),
            ("lease.ttl", self.lease.ttl),
            ("lease.renew_every", self.lease.renew_every),
            ("retry.backoff_base", self.retry.backoff_base),
            ("retry.backoff_max", self.retry.backoff_max),
            ("sweeper.every", self.sweeper.every),
            ("sweeper.stuck_after", self.sweeper.stuck_after),
            (
                "sweeper.import_check_after",
                self.sweeper.import_check_after,
            ),
            ("ledger.retention", self.ledger.retention),
            ("retention.runs", self.retention.runs),
            ("retention.alerts", self.retention.alerts),
            ("retention.audit_log", self.retention.audit_log),
            ("deadman.silence_window", self.deadman.silence_window),
        ];
        for (key, value) in positive {
            if value.is_zero() {
                return bad(key, "must be longer than zero".into());
            }
        }
        for (key, value, limit) in self.duration_limits() {
            if value > limit {
                return bad(
                    key,
                    format!(
                        "{} is longer than the limit of {}",
                        crate::words::duration_text(value),
                        crate::words::duration_text(limit)
                    ),
                );
            }
        }
        for (key, value, limit) in self.count_limits() {
            if value > limit {
                return bad(key, format!("{value} is more than the limit of {limit}"));
            }
        }
        if self.workers.liveness_ttl < Duration::from_secs(1) {
            return bad("workers.liveness_ttl", "must be at least 1s".into());
        }
        if self.lease.renew_every >= self.lease.ttl {
            return bad(
                "lease.renew_every",
                format!(
                    "{} is not shorter than lease.ttl ({}); the lease would expire between renewals",
                    crate::words::duration_text(self.lease.renew_every),
                    crate::words::duration_text(self.lease.ttl)
                ),
            );
        }
        if self.shutdown.drain_deadline >= self.shutdown.hard_exit_after {
            return bad(
                "shutdown.drain_deadline",
                "must be shorter than shutdown.hard_exit_after".into(),
            );
        }
        if self.retry.max_attempts == 0 {
            return bad("retry.max_attempts", "must be at least 1".into());
        }
        if self.retry.backoff_max < self.retry.backoff_base {
            return bad(
                "retry.backoff_max",
                "must not be shorter than retry.backoff_base".into(),
            );
        }
        if self.ledger.record_attempts == 0 {
            return bad("ledger.record_attempts", "must be at least 1".into());
        }
        if self.breaker.consecutive_failures == 0 {
            return bad("breaker.consecutive_failures", "must be at least 1".into());
        }
        if let Some(dsn) = &self.alerts.sentry_dsn {
            // sentry's ClientOptions panics on a bad DSN: refuse it here instead.
            if let Err(e) = dsn.expose_secret().parse::<sentry::types::Dsn>() {
                return bad("alerts.sentry_dsn", format!("not a valid Sentry DSN: {e}"));
            }
        }
        if self.alerts.webhook_url.is_some() && self.alerts.webhook_secret.is_none() {
            return bad(
                "alerts.webhook_secret",
                "is required when alerts.webhook_url is set".into(),
            );
        }
        if let Some(secret) = &self.alerts.webhook_secret
            && let Err(problem) = crate::outbound::WebhookSigner::from_secret(secret)
        {
            return bad("alerts.webhook_secret", problem);
        }
        if let Some(email) = &self.alerts.email {
            check_url(
                origin,
                "alerts.email.smtp_url",
                &email.smtp_url,
                &["smtp", "smtps"],
            )?;
            if !email.from.contains('@') {
                return bad(
                    "alerts.email.from",
                    format!("\"{}\" is not an e-mail address", email.from),
                );
            }
            if email.to.is_empty() {
                return bad("alerts.email.to", "needs at least one recipient".into());
            }
            if let Some(to) = email.to.iter().find(|a| !a.contains('@')) {
                return bad(
                    "alerts.email.to",
                    format!("\"{to}\" is not an e-mail address"),
                );
            }
        }
        if !self.alerts.workspace_email.is_empty() && self.alerts.email.is_none() {
            return bad(
                "alerts.workspace_email",
                "needs alerts.email (the SMTP server) to be set".into(),
            );
        }
        if let Some((ws, to)) = self
            .alerts
            .workspace_email
            .iter()
            .find(|(_, to)| !to.contains('@'))
        {
            return bad(
                &format!("alerts.workspace_email.{ws}"),
                format!("\"{to}\" is not an e-mail address"),
            );
        }
        if let Err((key, problem)) = self.http.validate() {
            return bad(key, problem);
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log.level) {
            return bad(
                "log.level",
                format!("\"{}\" is not a valid filter: {e}", self.log.level),
            );
        }
        Ok(())
    }

    /// The longest value each duration may take: generous for any real
    /// deployment, and far from where adding it to a clock could overflow
    /// (a `500000000000y` drain deadline once panicked on SIGTERM).
    fn duration_limits(&self) -> [(&'static str, Duration, Duration); 16] {
        const HOUR: Duration = Duration::from_secs(3600);
        const DAY: Duration = Duration::from_secs(24 * 3600);
        // humantime's year (365.25 days), so the limit prints as `10y`.
        const YEAR: Duration = Duration::from_secs(31_557_600);
        [
            ("workers.poll_interval", self.workers.poll_interval, HOUR),
            ("workers.liveness_ttl", self.workers.liveness_ttl, HOUR),
            (
                "shutdown.drain_deadline",
                self.shutdown.drain_deadline,
                HOUR,
            ),
            (
                "shutdown.hard_exit_after",
                self.shutdown.hard_exit_after,
                HOUR,
            ),
            ("lease.ttl", self.lease.ttl, DAY),
            ("lease.renew_every", self.lease.renew_every, DAY),
            ("retry.backoff_base", self.retry.backoff_base, DAY),
            ("retry.backoff_max", self.retry.backoff_max, DAY),
            ("sweeper.every", self.sweeper.every, HOUR),
            ("sweeper.stuck_after", self.sweeper.stuck_after, 30 * DAY),
            (
                "sweeper.import_check_after",
                self.sweeper.import_check_after,
                DAY,
            ),
            ("ledger.retention", self.ledger.retention, 10 * YEAR),
            ("retention.runs", self.retention.runs, 10 * YEAR),
            ("retention.alerts", self.retention.alerts, 10 * YEAR),
            ("retention.audit_log", self.retention.audit_log, 10 * YEAR),
            ("deadman.silence_window", self.deadman.silence_window, YEAR),
        ]
    }

    /// The largest value each count may take.
    fn count_limits(&self) -> [(&'static str, u64, u64); 6] {
        [
            (
                "database.max_connections",
                self.database.max_connections.into(),
                1000,
            ),
            (
                "workers.count",
                u64::try_from(self.workers.count).unwrap_or(u64::MAX),
                1024,
            ),
            ("retry.max_attempts", self.retry.max_attempts.into(), 100),
            (
                "ledger.record_attempts",
                self.ledger.record_attempts.into(),
                100,
            ),
            (
                "breaker.consecutive_failures",
                self.breaker.consecutive_failures.into(),
                1000,
            ),
            (
                "sweeper.import_checks_per_hour",
                self.sweeper.import_checks_per_hour.into(),
                100_000,
            ),
        ]
    }

    /// The effective settings as TOML with every secret shown as `[redacted]`
    /// (URLs keep everything but their password and secret-looking query values).
    /// The settings as data for comparing two versions of them (the reload's
    /// restart diff): as `to_redacted_toml` shows them, but every secret as
    /// a digest under a key of this process, so a changed one is seen.
    pub fn to_diff_json(&self) -> serde_json::Value {
        super::shown::for_diff(self)
    }

    pub fn to_redacted_toml(&self) -> String {
        // Every value is a string, number, bool, array or table, all of which
        // TOML can hold (unset options are dropped first: TOML has no null).
        toml::to_string(&strip_nulls(super::shown::for_people(self)))
            .unwrap_or_else(|e| format!("# cannot render settings: {e}\n"))
    }
}

fn check_url(
    origin: &str,
    key: &str,
    url: &SecretString,
    schemes: &[&str],
) -> Result<(), BadInput> {
    match url::Url::parse(url.expose_secret()) {
        Ok(u) if schemes.contains(&u.scheme()) => Ok(()),
        Ok(u) => Err(BadInput::new(
            origin_of(origin, key),
            key,
            format!(
                "scheme \"{}\" is not supported; use {}",
                u.scheme(),
                schemes.join(" or ")
            ),
        )),
        // The parse error never echoes the URL, so no secret leaks into the message.
        Err(e) => Err(BadInput::new(
            origin_of(origin, key),
            key,
            format!("not a valid URL: {e}"),
        )),
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
