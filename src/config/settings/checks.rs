//! What the settings are checked for once they deserialize: values that
//! parse but cannot work together (zero workers, a renewal slower than the
//! lease, a bad DSN, absurd durations and counts).

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

use super::{Settings, origin_of};
use crate::config::BadInput;

impl Settings {
    /// Checks values that deserialize but cannot work (zero workers, a renewal
    /// slower than the lease, a bad DSN, …).
    pub(super) fn validate(&self, origin: &str) -> Result<(), BadInput> {
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
        if let Some(proxy) = &self.outbound.proxy
            && (!matches!(proxy.scheme(), "http" | "https") || proxy.host_str().is_none())
        {
            return bad(
                "outbound.proxy",
                "must be an http:// or https:// URL with a host (a proxy's address)".into(),
            );
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
    pub(super) fn duration_limits(&self) -> [(&'static str, Duration, Duration); 16] {
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
    pub(super) fn count_limits(&self) -> [(&'static str, u64, u64); 6] {
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
