//! Sending one HTTP request with the in-run retries every destination shares:
//! 429 waits for the server's reset, 5xx / timeouts / garbage back off, both a
//! bounded number of times (`DESTINATION_RETRY`).

use std::time::Duration;

use reqwest::{RequestBuilder, StatusCode};

use super::record::DestinationError;
use crate::outbound::{
    BodyError, DESTINATION_ANSWER_CAP, RetryPolicy, cap_text, describe_error, header_wait,
    read_capped, redirect_target, retry_after,
};
use crate::outbound::{RateLimit, SharedBudgets};

/// How hard a destination call tries before giving up for this run: 4 retries
/// after a 5xx, a timeout, a transport error or an unreadable body (backoff
/// from 250 ms, doubling, at most 8 s); 6 rate-limit resets waited out, each
/// at most 60 s.
pub const DESTINATION_RETRY: RetryPolicy = RetryPolicy {
    retries: 4,
    backoff_base: Duration::from_millis(250),
    backoff_max: Duration::from_secs(8),
    waits: 6,
    max_wait: Duration::from_secs(60),
};

/// How late a held slot may still be used, however short the interval. The
/// slots are spaced for 9/10 of the account's limit (`SharedBudgets`): a
/// second holds at most 0.9 × rate + 1 of them, and requests up to 20 ms late
/// add at most 0.018 × rate + 1, which the spare tenth covers wherever
/// 20 ms is more than half an interval (rates over 27 a second). Without it
/// a slot taken by a checkpoint a millisecond before its call went stale at
/// high rates, and the call took and waited for a second one.
const LATE_SLOT: Duration = Duration::from_millis(20);

/// A request rate shared by concurrent calls: each try takes the next free
/// slot of its `RateLimit` (this run's own pace, or its account's shared
/// budget), so however many calls are in flight, at most one request leaves
/// per interval. An answer saying the window's quota is spent
/// (`remaining_header` at 0) holds every slot until the window resets
/// (`reset_header`, seconds), instead of drawing 429s.
#[derive(Debug)]
pub struct Pacer {
    per_second: u32,
    /// Where the slots come from: this pacer's own, or its account's.
    limit: RateLimit,
    remaining_header: &'static str,
    reset_header: &'static str,
    /// Until when the quota is spent: a request whose slot came before the
    /// answer that said so waits for it too.
    hold: std::sync::Mutex<tokio::time::Instant>,
    /// A shared slot taken ahead (`reserve_within`), used by the next request.
    prepaid: std::sync::Mutex<Option<tokio::time::Instant>>,
}

impl Pacer {
    /// At most `per_second` requests a second.
    pub fn per_second(
        per_second: u32,
        remaining_header: &'static str,
        reset_header: &'static str,
    ) -> Self {
        Self {
            per_second,
            limit: RateLimit::local(per_second),
            remaining_header,
            reset_header,
            hold: std::sync::Mutex::new(tokio::time::Instant::now()),
            prepaid: std::sync::Mutex::new(None),
        }
    }

    /// Takes the next slot of the shared budget for the next request (unless
    /// one is held already): `Ok(wait)` when it comes within `within`, `wait`
    /// from now; else
    /// `Err(wait)`: the slot is `wait` ahead, and a caller that gives its
    /// worker back takes it along (`hold_slot` when it comes back). Without
    /// a shared budget the run paces alone and never waits on others.
    pub async fn reserve_within(&self, within: Duration) -> Result<Duration, Duration> {
        if !self.limit.is_shared() {
            return Ok(Duration::ZERO);
        }
        if let Some(slot) = *self.lock_prepaid()
            && self.on_time(slot)
        {
            return Ok(slot.saturating_duration_since(tokio::time::Instant::now()));
        }
        // A steady rate never refuses a slot.
        let wait = self.limit.take().await.unwrap_or_default();
        if wait > within {
            return Err(wait);
        }
        self.hold_slot(wait);
        Ok(wait)
    }

    /// The next request leaves in the slot reserved `wait` from now.
    pub fn hold_slot(&self, wait: Duration) {
        *self.lock_prepaid() = Some(tokio::time::Instant::now() + wait);
    }

    /// A held slot still usable: a request sent late beside others in their
    /// slots could pass the account's limit, so one more than half an
    /// interval past (or `LATE_SLOT`, if longer) is not used.
    fn on_time(&self, slot: tokio::time::Instant) -> bool {
        let interval = self.limit.interval().unwrap_or_default();
        slot + (interval / 2).max(LATE_SLOT) >= tokio::time::Instant::now()
    }

    fn lock_prepaid(&self) -> std::sync::MutexGuard<'_, Option<tokio::time::Instant>> {
        // A plain instant: a panic elsewhere cannot leave it half-written.
        self.prepaid.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes slots from `account`'s budget in `budgets` instead of this
    /// pacer's own, at the same rate: every sync and daemon on one account
    /// then shares it.
    pub fn share(&mut self, budgets: &SharedBudgets, account: String) {
        self.limit = budgets.per_second(&account, self.per_second);
    }

    /// Waits for this request's slot; a hold that began meanwhile is waited
    /// out, then a new slot taken (so the requests held leave paced, too).
    pub async fn wait(&self) {
        let prepaid = self
            .lock_prepaid()
            .take()
            .filter(|slot| self.on_time(*slot));
        if let Some(slot) = prepaid
            && slot > tokio::time::Instant::now()
        {
            tokio::time::sleep_until(slot).await;
        }
        let mut paid = prepaid.is_some();
        loop {
            if !std::mem::take(&mut paid) {
                // A steady rate never refuses a slot.
                let _ = self.limit.wait().await;
            }
            let hold = *self.lock_hold();
            if hold <= tokio::time::Instant::now() {
                return;
            }
            tokio::time::sleep_until(hold).await;
        }
    }

    fn lock_hold(&self) -> std::sync::MutexGuard<'_, tokio::time::Instant> {
        // A plain instant: a panic elsewhere cannot leave it half-written.
        self.hold.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the quota headers of an answer: none left holds the next slot
    /// until the reset (at most `max_wait`).
    pub fn observe(&self, headers: &reqwest::header::HeaderMap, max_wait: Duration) {
        let remaining = headers
            .get(self.remaining_header)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<f64>().ok());
        if remaining != Some(0.0) {
            return;
        }
        let reset = header_wait(headers, self.reset_header)
            .unwrap_or(Duration::from_secs(1))
            .min(max_wait);
        let until = tokio::time::Instant::now() + reset;
        let mut hold = self.lock_hold();
        *hold = (*hold).max(until);
    }
}

/// What the caller makes of an answer that is neither 429 nor 5xx.
#[derive(Debug)]
pub enum Verdict<T> {
    Done(T),
    /// Try again like a 5xx: the answer was unusable (garbage body), or
    /// means an outage (a webhook's 404 or 409 during a deploy).
    Retry(String),
    Fail(DestinationError),
}

impl<T> Verdict<T> {
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Verdict<U> {
        match self {
            Verdict::Done(v) => Verdict::Done(f(v)),
            Verdict::Retry(why) => Verdict::Retry(why),
            Verdict::Fail(e) => Verdict::Fail(e),
        }
    }
}

/// Sends the request built by `build` until `judge` accepts an answer or the
/// policy runs out; every try waits for `pacer`'s slot first, when there is
/// one. `reset_header` names the header holding seconds until a
/// rate limit resets (`Retry-After` is honoured too); `url_setting` names the
/// setting that holds the destination's address (for a redirect's message).
/// Redirects are not followed (`http_client`) and answers are read up to
/// `DESTINATION_ANSWER_CAP`; both end the call at once.
pub async fn send_with_retry<T>(
    kind: &'static str,
    build: impl Fn() -> RequestBuilder,
    policy: &RetryPolicy,
    pacer: Option<&Pacer>,
    reset_header: &str,
    url_setting: &str,
    judge: impl Fn(StatusCode, &[u8]) -> Verdict<T>,
) -> Result<T, DestinationError> {
    let mut server_failures = 0;
    let mut rate_limited = 0;
    // Whether any try may have been written (sent, then left unanswered).
    let mut maybe_written = false;
    loop {
        if let Some(pacer) = pacer {
            pacer.wait().await;
        }
        let started = std::time::Instant::now();
        let sent = build().send().await;
        if let (Some(pacer), Ok(response)) = (pacer, &sent) {
            pacer.observe(response.headers(), policy.max_wait);
        }
        let status_label = match &sent {
            Ok(r) => r.status().as_u16().to_string(),
            Err(e) if e.is_timeout() => "timeout".to_string(),
            Err(_) => "error".to_string(),
        };
        metrics::counter!(
            "syncward_destination_requests_total", "kind" => kind, "status" => status_label.clone()
        )
        .increment(1);
        metrics::histogram!(
            "syncward_destination_request_seconds", "kind" => kind, "status" => status_label
        )
        .record(started.elapsed().as_secs_f64());
        let problem = match sent {
            Err(e) => {
                // The outbound policy refused the address: a setting to fix.
                if let Some(why) = crate::outbound::policy::refused(&e) {
                    return Err(DestinationError::InvalidConfig(format!(
                        "{url_setting}: {why}"
                    )));
                }
                // A refused connection never reached the destination.
                maybe_written |= !e.is_connect();
                describe_transport_error(e)
            }
            Ok(response) => {
                let status = response.status();
                if status == StatusCode::TOO_MANY_REQUESTS {
                    let told = reset_wait(response.headers(), reset_header);
                    let what = "Destination rate limited (HTTP 429)";
                    let Some(wait) = policy.wait_as_told(&mut rate_limited, told, what) else {
                        return Err(DestinationError::RateLimited(format!(
                            "still rate limited (HTTP 429) after waiting {} times",
                            policy.waits
                        )));
                    };
                    tokio::time::sleep(wait).await;
                    continue;
                }
                if status.is_redirection() {
                    return Err(redirect_refused(&response, url_setting));
                }
                match read_capped(response, DESTINATION_ANSWER_CAP).await {
                    Err(BodyError::CutOff(e)) => {
                        maybe_written = true;
                        format!("the answer was cut off: {e}")
                    }
                    Err(BodyError::TooLarge) => {
                        // Asking again would only read as much again. An
                        // accepted write may have happened: its keys stay
                        // pending, and the next run sends them again.
                        let detail = format!(
                            "the destination's answer (HTTP {}) exceeded {}; not read further",
                            status.as_u16(),
                            cap_text(DESTINATION_ANSWER_CAP)
                        );
                        return Err(if maybe_written || status.is_success() {
                            DestinationError::Unanswered(detail)
                        } else {
                            DestinationError::Unavailable(detail)
                        });
                    }
                    Ok(_) if status.is_server_error() => format!("HTTP {status}"),
                    Ok(body) => match judge(status, &body) {
                        Verdict::Done(value) => return Ok(value),
                        Verdict::Fail(error) => return Err(error),
                        Verdict::Retry(why) => {
                            // A success status whose body we cannot read
                            // may have written; an outage's answer did not.
                            maybe_written |= status.is_success();
                            why
                        }
                    },
                }
            }
        };
        server_failures += 1;
        let Some(backoff) = policy.backoff(server_failures) else {
            let detail = format!("{problem} (gave up after {} tries)", policy.retries + 1);
            return Err(if maybe_written {
                DestinationError::Unanswered(detail)
            } else {
                DestinationError::Unavailable(detail)
            });
        };
        tracing::info!(problem = %problem, backoff_ms = backoff.as_millis() as u64, "Destination call failed; retrying");
        tokio::time::sleep(backoff).await;
    }
}

/// A transport error for a failure detail (and the log): without the URL,
/// which may carry a secret.
fn describe_transport_error(e: reqwest::Error) -> String {
    if e.is_timeout() {
        "the request timed out".to_string()
    } else if e.is_connect() {
        format!("cannot connect: {}", describe_error(e))
    } else {
        format!("the request failed: {}", describe_error(e))
    }
}

/// A 3xx answer: the request carried a credential, so it is not followed.
/// The settings are wrong (or the server hostile): final, the owner's to fix.
pub fn redirect_refused(response: &reqwest::Response, url_setting: &str) -> DestinationError {
    DestinationError::InvalidConfig(format!(
        "the destination answered a redirect (HTTP {}) to {}; syncward does not follow \
         redirects with credentials: set {url_setting} to the final address",
        response.status().as_u16(),
        redirect_target(response)
    ))
}

/// The wait the reset header (or `Retry-After`) asks for, at least 50 ms;
/// 1 s when neither parses.
fn reset_wait(headers: &reqwest::header::HeaderMap, reset_header: &str) -> Duration {
    header_wait(headers, reset_header)
        .or_else(|| retry_after(headers))
        .map(|wait| wait.max(Duration::from_millis(50)))
        .unwrap_or(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    // On tokio's paused clock: the spacing is exact, whatever the machine's
    // load (on the wall clock this test failed on a busy machine).
    #[tokio::test(start_paused = true)]
    async fn the_pacer_spaces_requests_and_holds_when_the_quota_is_spent() {
        let pacer = std::sync::Arc::new(Pacer::per_second(
            20,
            "x-sib-ratelimit-remaining",
            "x-sib-ratelimit-reset",
        ));
        let start = tokio::time::Instant::now();
        let mut sent: Vec<Duration> = futures::future::join_all((0..5).map(|_| {
            let pacer = pacer.clone();
            async move {
                pacer.wait().await;
                tokio::time::Instant::now() - start
            }
        }))
        .await;
        sent.sort();
        // 50 ms apart however many wait at once.
        for pair in sent.windows(2) {
            assert!(pair[1] - pair[0] >= Duration::from_millis(45), "{sent:?}");
        }
        // Quota left: no hold beyond the interval.
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("x-sib-ratelimit-remaining", "3".parse().unwrap());
        h.insert("x-sib-ratelimit-reset", "0.4".parse().unwrap());
        pacer.observe(&h, Duration::from_secs(60));
        tokio::time::sleep(Duration::from_millis(60)).await;
        let before = tokio::time::Instant::now();
        pacer.wait().await;
        assert!(before.elapsed() < Duration::from_millis(40));
        // None left: the next request waits for the reset.
        h.insert("x-sib-ratelimit-remaining", "0".parse().unwrap());
        pacer.observe(&h, Duration::from_secs(60));
        let before = tokio::time::Instant::now();
        pacer.wait().await;
        assert!(before.elapsed() >= Duration::from_millis(380));
    }

    // A slot held ahead (by a checkpoint, say) and used a few milliseconds
    // late is used, not wasted for a new one behind everyone else's; much
    // later it is given up.
    #[tokio::test(start_paused = true)]
    async fn a_held_slot_is_used_a_little_late_but_not_much() {
        let budgets = SharedBudgets::default();
        let paced = |budgets: &SharedBudgets| {
            let mut pacer =
                Pacer::per_second(1000, "x-sib-ratelimit-remaining", "x-sib-ratelimit-reset");
            pacer.share(budgets, "account".into());
            pacer
        };
        let (pacer, other) = (paced(&budgets), paced(&budgets));
        for late in [5, 30] {
            assert_eq!(
                pacer.reserve_within(Duration::MAX).await,
                Ok(Duration::ZERO)
            );
            // Another sync on the account takes the next 40 slots meanwhile.
            for _ in 0..40 {
                let _ = other.reserve_within(Duration::MAX).await;
                other.lock_prepaid().take();
            }
            tokio::time::sleep(Duration::from_millis(late)).await;
            let before = tokio::time::Instant::now();
            pacer.wait().await;
            if late < 20 {
                assert_eq!(before.elapsed(), Duration::ZERO, "{late} ms late");
            } else {
                // Behind the other sync's slots, ~44 ms from the first.
                assert!(
                    before.elapsed() >= Duration::from_millis(10),
                    "{late} ms late"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    #[test]
    fn reset_header_wins_and_falls_back_to_one_second() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(
            reset_wait(&h, "x-sib-ratelimit-reset"),
            Duration::from_secs(1)
        );
        h.insert("retry-after", "3".parse().unwrap());
        assert_eq!(
            reset_wait(&h, "x-sib-ratelimit-reset"),
            Duration::from_secs(3)
        );
        h.insert("x-sib-ratelimit-reset", "2".parse().unwrap());
        assert_eq!(
            reset_wait(&h, "x-sib-ratelimit-reset"),
            Duration::from_secs(2)
        );
        // A reset no one could wait for is not a crash.
        h.insert("x-sib-ratelimit-reset", "1e300".parse().unwrap());
        assert_eq!(
            reset_wait(&h, "x-sib-ratelimit-reset"),
            Duration::from_secs(24 * 3600)
        );
    }
}
