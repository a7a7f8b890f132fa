//! The request loop the HTTP sources share: an answer is a page, a throttle
//! (wait as told, then ask again), a failure worth retrying after a backoff,
//! or a final failure. Waits are bounded per page (`SOURCE_RETRY`).

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::page::{Page, SourceError};
use crate::outbound::RetryPolicy;

/// How hard a source tries per page: 4 retries after transport errors, 5xx
/// and unreadable bodies (backoff from 250 ms, doubling); 20 throttled answers
/// waited out. No single wait (nor pause between pages) is longer than 60 s,
/// whatever the server says.
pub const SOURCE_RETRY: RetryPolicy = RetryPolicy {
    retries: 4,
    backoff_base: Duration::from_millis(250),
    backoff_max: Duration::from_secs(8),
    waits: 20,
    max_wait: Duration::from_secs(60),
};

/// What one answer said: a page, or another kind of answer `T` (a Shopify
/// bulk operation's state).
#[derive(Debug)]
pub enum Answer<T = Page> {
    /// A page, and how long to pause before the next request (pacing).
    Page(T, Option<Duration>),
    /// Throttled: wait this long and ask again.
    Throttled(Duration),
    /// Worth another try after a backoff (5xx, garbage, transport).
    Retry(String),
    Fail(SourceError),
}

impl<T> Answer<T> {
    /// Goes on from a successful answer to what it means (`f`); every other
    /// answer stays what it was.
    pub fn then<U>(self, f: impl FnOnce(T, Option<Duration>) -> Answer<U>) -> Answer<U> {
        match self {
            Answer::Page(value, pause) => f(value, pause),
            Answer::Throttled(wait) => Answer::Throttled(wait),
            Answer::Retry(why) => Answer::Retry(why),
            Answer::Fail(e) => Answer::Fail(e),
        }
    }
}

/// Asks until an answer is a page or a final failure. `next_send` carries the
/// pacing between pages: the next request waits for it.
pub async fn fetch_with_retries<T, F, Fut>(
    service: &str,
    next_send: &mut Option<Instant>,
    mut ask: F,
) -> Result<T, SourceError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Answer<T>>,
{
    let (mut throttles, mut failures) = (0, 0);
    loop {
        if let Some(at) = next_send.take() {
            tokio::time::sleep_until(at).await;
        }
        match ask().await {
            Answer::Page(page, pause) => {
                *next_send = pause.map(|p| Instant::now() + p.min(SOURCE_RETRY.max_wait));
                return Ok(page);
            }
            Answer::Throttled(told) => {
                let what = format!("{service} throttled the request");
                let Some(wait) = SOURCE_RETRY.wait_as_told(&mut throttles, told, &what) else {
                    return Err(SourceError::Unreachable(format!(
                        "{service} kept throttling after {} waits",
                        SOURCE_RETRY.waits
                    )));
                };
                *next_send = Some(Instant::now() + wait);
            }
            Answer::Retry(why) => {
                failures += 1;
                let Some(backoff) = SOURCE_RETRY.backoff(failures) else {
                    return Err(SourceError::Unreachable(format!(
                        "{why} (gave up after {} tries)",
                        SOURCE_RETRY.retries + 1
                    )));
                };
                tracing::info!(problem = %why, backoff_ms = backoff.as_millis() as u64, "{service} call failed; retrying");
                *next_send = Some(Instant::now() + backoff);
            }
            Answer::Fail(e) => return Err(e),
        }
    }
}
