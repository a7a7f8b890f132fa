//! The one retry policy: every outbound loop (sources, destinations, the alert webhook) and the
//! backoff between failed runs of a sync use it. Exponential backoff with one jitter and a cap;
//! waits a server asks for (`Retry-After`, a rate-limit reset) read by one parser, honoured up to a limit.

use std::time::Duration;

use reqwest::header::HeaderMap;

/// How much longer than its nominal length a wait may last: up to 10 %, never
/// shorter. A server's reset is a floor (retrying before it only draws
/// another 429) and a backoff is at least what was configured; the spread
/// keeps callers that failed together from retrying together.
pub const JITTER: f64 = 0.1;

/// Longest wait a header is read as: 24 h. A longer (or absurd, `1e300`)
/// value is read as this, so converting it cannot overflow; each policy's
/// `max_wait` then decides how much of it is honoured.
pub const HEADER_WAIT_LIMIT: Duration = Duration::from_secs(24 * 3600);

/// How hard a caller tries: retries after failures, with exponential backoff,
/// and waits a server asks for, each honoured up to a limit. Every wait is
/// stretched by up to [`JITTER`] and never exceeds its cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after a failure worth another try (a 5xx, a timeout, an
    /// unreadable answer, a retryable run failure).
    pub retries: u32,
    /// First backoff; doubles per retry.
    pub backoff_base: Duration,
    /// Longest backoff, jitter included.
    pub backoff_max: Duration,
    /// Waits a server asks for (a 429, a throttled answer) honoured before
    /// the caller gives up.
    pub waits: u32,
    /// Longest single wait a server can ask for, jitter included.
    pub max_wait: Duration,
}

impl RetryPolicy {
    /// The wait before retry `retry` (1 for the first):
    /// `backoff_base × 2^(retry−1)`, jittered, at most `backoff_max`; `None`
    /// once the policy's retries are spent.
    pub fn backoff(&self, retry: u32) -> Option<Duration> {
        if retry > self.retries {
            return None;
        }
        let exponent = retry.saturating_sub(1).min(20);
        let nominal = self
            .backoff_base
            .saturating_mul(1 << exponent)
            .min(self.backoff_max);
        Some(stretch(nominal, self.backoff_max))
    }

    /// The wait a server asked for (`told`) before asking again for the
    /// `wait`-th time (1 for the first), jittered, at most `max_wait`; `None`
    /// once the policy's waits are spent.
    pub fn told_wait(&self, wait: u32, told: Duration) -> Option<Duration> {
        if wait > self.waits {
            return None;
        }
        Some(stretch(told.min(self.max_wait), self.max_wait))
    }

    /// One more wait a server asked for (`told`): counts it in `waits_so_far`
    /// and logs it (`what` says who asked); `None` once the waits are spent.
    pub fn wait_as_told(
        &self,
        waits_so_far: &mut u32,
        told: Duration,
        what: &str,
    ) -> Option<Duration> {
        *waits_so_far += 1;
        let wait = self.told_wait(*waits_so_far, told)?;
        tracing::info!(wait_ms = wait.as_millis() as u64, "{what}; waiting");
        Some(wait)
    }
}

/// `wait` stretched by a random share of up to [`JITTER`], at most `cap`.
fn stretch(wait: Duration, cap: Duration) -> Duration {
    let factor = 1.0 + rand::random_range(0.0..=JITTER);
    Duration::try_from_secs_f64(wait.as_secs_f64() * factor)
        .unwrap_or(cap)
        .min(cap)
}

/// The `Retry-After` of an answer (see [`header_wait`]).
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    header_wait(headers, "retry-after")
}

/// The wait header `name` asks for, in either form of `Retry-After` (RFC 9110
/// §10.2.3): seconds (fractions accepted: Brevo's reset has them) or an
/// HTTP-date (a date past is no wait). At most [`HEADER_WAIT_LIMIT`]; `None`
/// when the header is missing, negative or unreadable.
pub fn header_wait(headers: &HeaderMap, name: &str) -> Option<Duration> {
    let text = headers.get(name)?.to_str().ok()?;
    parse_wait(text, chrono::Utc::now())
}

fn parse_wait(text: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let text = text.trim();
    let seconds = match text.parse::<f64>() {
        Ok(seconds) => seconds,
        // IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) is RFC 2822's form.
        Err(_) => {
            let at = chrono::DateTime::parse_from_rfc2822(text).ok()?;
            ((at.to_utc() - now).num_milliseconds() as f64 / 1000.0).max(0.0)
        }
    };
    (seconds.is_finite() && seconds >= 0.0)
        // Clamped before the conversion, which panics on huge values.
        .then(|| Duration::from_secs_f64(seconds.min(HEADER_WAIT_LIMIT.as_secs_f64())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RetryPolicy = RetryPolicy {
        retries: 30,
        backoff_base: Duration::from_secs(60),
        backoff_max: Duration::from_secs(3600),
        waits: 3,
        max_wait: Duration::from_secs(60),
    };

    /// Moved from the run backoff (`worker/outcome.rs`).
    #[test]
    fn backoff_doubles_from_the_base_and_stops_at_the_cap() {
        let backoff = |retry| POLICY.backoff(retry).expect("retries left");
        let near = |d: Duration, secs: f64| (d.as_secs_f64() - secs).abs() <= secs * 0.1 + 1e-9;
        assert!(near(backoff(1), 60.0));
        assert!(near(backoff(2), 120.0));
        assert!(near(backoff(4), 480.0));
        assert!(backoff(30) <= Duration::from_secs(3600));
        assert!(near(backoff(30), 3600.0));
    }

    #[test]
    fn jitter_only_lengthens_a_wait_by_up_to_a_tenth_and_never_past_the_cap() {
        for _ in 0..1000 {
            let wait = POLICY.backoff(3).expect("retries left");
            assert!(wait >= Duration::from_secs(240), "{wait:?}");
            assert!(wait <= Duration::from_secs(264), "{wait:?}");
            assert!(POLICY.backoff(7).expect("retries left") <= POLICY.backoff_max);
            let told = POLICY
                .told_wait(1, Duration::from_secs(10))
                .expect("waits left");
            assert!(told >= Duration::from_secs(10) && told <= Duration::from_secs(11));
            let capped = POLICY
                .told_wait(1, Duration::from_secs(59))
                .expect("waits left");
            assert!(capped >= Duration::from_secs(59) && capped <= POLICY.max_wait);
        }
    }

    #[test]
    fn retries_and_waits_run_out() {
        assert!(POLICY.backoff(30).is_some());
        assert_eq!(POLICY.backoff(31), None);
        assert!(POLICY.told_wait(3, Duration::ZERO).is_some());
        assert_eq!(POLICY.told_wait(4, Duration::ZERO), None);
    }

    #[test]
    fn a_told_wait_is_honoured_up_to_the_policys_limit() {
        let told = POLICY.told_wait(1, Duration::from_secs(3600));
        assert_eq!(told, Some(POLICY.max_wait));
        let short = RetryPolicy {
            max_wait: Duration::from_secs(5),
            ..POLICY
        };
        assert_eq!(
            short.told_wait(1, Duration::from_secs(60)),
            Some(Duration::from_secs(5))
        );
    }

    #[test]
    fn retry_after_reads_seconds() {
        let mut h = HeaderMap::new();
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", " 3 ".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(3)));
        h.insert("retry-after", "0.5".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_millis(500)));
        h.insert("retry-after", "-1".parse().unwrap());
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
        h.insert("x-sib-ratelimit-reset", "2".parse().unwrap());
        assert_eq!(
            header_wait(&h, "x-sib-ratelimit-reset"),
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn retry_after_reads_an_http_date() {
        let now = chrono::DateTime::parse_from_rfc3339("1994-11-06T08:49:00Z")
            .unwrap()
            .to_utc();
        assert_eq!(
            parse_wait("Sun, 06 Nov 1994 08:49:37 GMT", now),
            Some(Duration::from_secs(37))
        );
        // A date already past: ask again at once.
        assert_eq!(
            parse_wait("Sun, 06 Nov 1994 08:48:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_wait("Sunday, 06-Nov-94 08:49:37 GMT", now), None);
    }

    #[test]
    fn a_header_wait_is_read_as_at_most_the_documented_limit() {
        let now = chrono::Utc::now();
        assert_eq!(parse_wait("1e300", now), Some(HEADER_WAIT_LIMIT));
        assert_eq!(parse_wait("inf", now), None);
        assert_eq!(
            parse_wait("Fri, 31 Dec 9999 23:59:59 GMT", now),
            Some(HEADER_WAIT_LIMIT)
        );
    }
}
