//! The request loop the HTTP sources share: an answer is a page, a throttle
//! (wait as told, then ask again), a failure worth retrying after a backoff,
//! or a final failure. Waits are bounded per page.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::page::{Page, SourceError};

/// Throttled answers waited out per page before the attempt gives up.
const THROTTLE_WAITS: u32 = 20;
/// Transport errors, 5xx and unreadable bodies retried per page.
const SERVER_RETRIES: u32 = 4;
/// Longest single wait, whatever the server says.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// What one answer said.
#[derive(Debug)]
pub enum Answer {
    /// A page, and how long to pause before the next request (pacing).
    Page(Page, Option<Duration>),
    /// Throttled: wait this long and ask again.
    Throttled(Duration),
    /// Worth another try after a backoff (5xx, garbage, transport).
    Retry(String),
    Fail(SourceError),
}

/// Asks until an answer is a page or a final failure. `next_send` carries the
/// pacing between pages: the next request waits for it.
pub async fn fetch_with_retries<F, Fut>(
    service: &str,
    next_send: &mut Option<Instant>,
    mut ask: F,
) -> Result<Page, SourceError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Answer>,
{
    let (mut throttles, mut failures) = (0, 0);
    loop {
        if let Some(at) = next_send.take() {
            tokio::time::sleep_until(at).await;
        }
        match ask().await {
            Answer::Page(page, pause) => {
                *next_send = pause.map(|p| Instant::now() + p.min(MAX_WAIT));
                return Ok(page);
            }
            Answer::Throttled(wait) => {
                throttles += 1;
                if throttles > THROTTLE_WAITS {
                    return Err(SourceError::Unreachable(format!(
                        "{service} kept throttling after {THROTTLE_WAITS} waits"
                    )));
                }
                tracing::info!(
                    wait_ms = wait.as_millis() as u64,
                    "{service} throttled the request; waiting"
                );
                *next_send = Some(Instant::now() + wait.min(MAX_WAIT));
            }
            Answer::Retry(why) => {
                failures += 1;
                if failures > SERVER_RETRIES {
                    return Err(SourceError::Unreachable(format!(
                        "{why} (gave up after {} tries)",
                        SERVER_RETRIES + 1
                    )));
                }
                let backoff = Duration::from_millis(250) * (1 << (failures - 1));
                tracing::info!(problem = %why, backoff_ms = backoff.as_millis() as u64, "{service} call failed; retrying");
                *next_send = Some(Instant::now() + backoff);
            }
            Answer::Fail(e) => return Err(e),
        }
    }
}

/// Seconds from a `Retry-After` header (delta-seconds form).
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        // Clamped before the conversion, which panics on huge values.
        .map(|s| Duration::from_secs_f64(s.min(MAX_WAIT.as_secs_f64())))
}
