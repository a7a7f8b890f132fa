//! Rate limits: how often syncward may call something, and where that is
//! counted. One type, `RateLimit`, and its three cases:
//!
//! - **shared**: a steady rate for every sync and daemon that call one
//!   destination account (a Brevo API key). Each request reserves the
//!   account's next slot, `1/(0.9 × rate)` after the last one, in one Redis
//!   script (GCRA with the slots queued), so syncs on one key together stay
//!   under the account's limit instead of drawing 429s in turns. With Redis
//!   away, each process paces the account alone at half the rate: slower,
//!   never unlimited.
//! - **local**: a steady rate of this process alone (a run's own pace when it
//!   shares no budget).
//! - **hourly**: at most N a clock hour for every daemon on one Redis (the
//!   import checks an account allows, `sweeper/imports.rs`); with Redis away
//!   none is taken.
//!
//! `SharedBudgets` is where they are kept: it hands out the shared and hourly
//! limits of an account.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool_redis::redis;
use tokio::time::Instant;

use crate::redis::{RedisFailure, SharedConnection, keys, scripts};

/// The share of an account's limit its shared slots are spaced for: 9/10.
const HEADROOM_NUMERATOR: u32 = 9;
const HEADROOM_DENOMINATOR: u32 = 10;

/// Waits longer than this are not queued behind: the reservation is made
/// anyway (the slot is the caller's), but a wait this long means the account
/// is oversubscribed and the destination's own 429 handling takes over.
const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// A limit's budget is spent until the next window (the next clock hour).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent;

/// One rate limit (see the module's doc for its cases).
#[derive(Clone)]
pub struct RateLimit {
    kind: Kind,
}

#[derive(Clone)]
enum Kind {
    Shared {
        budgets: SharedBudgets,
        account: String,
        interval: Duration,
    },
    Local {
        interval: Duration,
        next: Arc<Mutex<Instant>>,
    },
    Hourly {
        redis: Option<(SharedConnection, String)>,
        budget: String,
        per_hour: u32,
    },
}

impl std::fmt::Debug for RateLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            Kind::Shared {
                account, interval, ..
            } => write!(f, "RateLimit::Shared({account}, every {interval:?})"),
            Kind::Local { interval, .. } => write!(f, "RateLimit::Local(every {interval:?})"),
            Kind::Hourly {
                budget, per_hour, ..
            } => write!(f, "RateLimit::Hourly({budget}, {per_hour}/h)"),
        }
    }
}

impl RateLimit {
    /// At most `per_second` a second in this process alone.
    pub fn local(per_second: u32) -> Self {
        RateLimit {
            kind: Kind::Local {
                interval: Duration::from_secs(1) / per_second.max(1),
                next: Arc::new(Mutex::new(Instant::now())),
            },
        }
    }

    /// Whether other processes count against this limit too.
    pub fn is_shared(&self) -> bool {
        !matches!(self.kind, Kind::Local { .. })
    }

    /// Takes the next slot: how long from now it comes (zero: at once).
    /// The slot is the caller's however far it is. An hourly limit answers
    /// zero, or `Spent` once this hour's count is used (or cannot be counted).
    pub async fn take(&self) -> Result<Duration, Spent> {
        match &self.kind {
            Kind::Shared {
                budgets,
                account,
                interval,
            } => Ok(budgets.reserve(account, *interval).await),
            Kind::Local { interval, next } => Ok(take_local(next, *interval)),
            Kind::Hourly {
                redis,
                budget,
                per_hour,
            } => match take_hourly(redis.as_ref(), budget, *per_hour).await {
                Ok(true) => Ok(Duration::ZERO),
                Ok(false) => Err(Spent),
                Err(e) => {
                    tracing::warn!(budget = %budget, error = %e, "Hourly budget unavailable; taking none this time");
                    Err(Spent)
                }
            },
        }
    }

    /// Takes the next slot and waits for it (a steady rate never refuses;
    /// a wait past a minute is cut short, see `LONGEST_WAIT`).
    pub async fn wait(&self) -> Result<(), Spent> {
        let wait = self.take().await?;
        // A slot already due is taken at once: a timer, even of zero, costs a
        // millisecond on the bulk path.
        if !wait.is_zero() {
            tokio::time::sleep(wait.min(LONGEST_WAIT)).await;
        }
        Ok(())
    }

    /// The interval of a steady rate (none for an hourly count).
    pub fn interval(&self) -> Option<Duration> {
        match &self.kind {
            Kind::Shared { interval, .. } | Kind::Local { interval, .. } => Some(*interval),
            Kind::Hourly { .. } => None,
        }
    }
}

/// The next slot of a local pace `interval` apart: how far it is.
fn take_local(next: &Mutex<Instant>, interval: Duration) -> Duration {
    // The lock holds a plain instant: a panic elsewhere cannot leave it
    // half-written.
    let mut next = next.lock().unwrap_or_else(|e| e.into_inner());
    let now = Instant::now();
    let slot = (*next).max(now);
    *next = slot + interval;
    slot - now
}

/// Where an account's limits are kept: Redis (shared by every process on
/// it), and a local pace per account for when Redis does not answer.
#[derive(Clone, Default)]
pub struct SharedBudgets {
    /// The shared connection, not the pool: a checkout from the pool costs
    /// a PING round trip, and a slot is taken on every request's way out.
    redis: Option<(SharedConnection, String)>,
    local: Arc<Mutex<HashMap<String, Arc<Mutex<Instant>>>>>,
}

impl std::fmt::Debug for SharedBudgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBudgets")
            .field("shared", &self.redis.is_some())
            .finish()
    }
}

impl SharedBudgets {
    /// Budgets kept in Redis under `prefix`, shared by every process there.
    pub fn in_redis(redis: SharedConnection, prefix: &str) -> Self {
        Self {
            redis: Some((redis, prefix.to_string())),
            local: Arc::default(),
        }
    }

    /// `account`'s steady rate of `per_second` requests a second, shared by
    /// every process using these budgets. Slots are spaced for nine tenths
    /// of `per_second`: a request delayed on its way (a busy machine, a slow
    /// connection) then never lands one more than the limit in any second
    /// the destination counts, which at the full rate a delay of one slot
    /// would (measured: 1 in 600 imports drew a 429).
    pub fn per_second(&self, account: &str, per_second: u32) -> RateLimit {
        let interval = Duration::from_secs(1) * HEADROOM_DENOMINATOR
            / (per_second.max(1) * HEADROOM_NUMERATOR).max(1);
        RateLimit {
            kind: Kind::Shared {
                budgets: self.clone(),
                account: account.to_string(),
                interval,
            },
        }
    }

    /// `budget`'s count of `per_hour` a clock hour, across every process on
    /// these budgets' Redis.
    pub fn per_hour(&self, budget: &str, per_hour: u32) -> RateLimit {
        RateLimit {
            kind: Kind::Hourly {
                redis: self.redis.clone(),
                budget: budget.to_string(),
                per_hour,
            },
        }
    }

    /// Reserves `account`'s next slot, `interval` after its last: how far
    /// ahead it is. In Redis when these budgets are kept there; else (or
    /// with Redis away) this process's own pace, at half the rate when the
    /// budget should have been shared, as other daemons may be sending too.
    async fn reserve(&self, account: &str, interval: Duration) -> Duration {
        if let Some((redis, prefix)) = &self.redis {
            match reserve(redis, &keys::request_slots(prefix, account), interval).await {
                Ok(wait) => return wait,
                Err(e) => tracing::warn!(
                    account,
                    error = %e,
                    "Shared request budget unavailable; pacing at half the rate locally"
                ),
            }
        }
        let interval = if self.redis.is_some() {
            interval * 2
        } else {
            interval
        };
        let next = self
            .local
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(account.to_string())
            .or_insert_with(|| Arc::new(Mutex::new(Instant::now())))
            .clone();
        take_local(&next, interval)
    }
}

async fn reserve(
    redis: &SharedConnection,
    key: &str,
    interval: Duration,
) -> anyhow::Result<Duration> {
    let interval_ms = u64::try_from(interval.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    // A connection and the script's answer, within one bound. Sent again
    // on a fresh connection after a broken one, a reservation takes one
    // slot more than it uses: the account is called less, never more.
    let wait_ms: i64 = tokio::time::timeout(
        Duration::from_secs(4),
        redis.run(|mut conn| async move {
            scripts::RESERVE
                .key(key)
                .arg(interval_ms)
                .invoke_async(&mut conn)
                .await
        }),
    )
    .await??;
    Ok(Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0)))
}

/// Counts one against `budget` in this clock hour; false when the hour's
/// `per_hour` was already used. Without Redis nothing is counted: false.
async fn take_hourly(
    redis: Option<&(SharedConnection, String)>,
    budget: &str,
    per_hour: u32,
) -> Result<bool, RedisFailure> {
    let Some((redis, prefix)) = redis else {
        return Ok(false);
    };
    let hour = chrono::Utc::now().timestamp() / 3600;
    let key = keys::hourly_count(prefix, budget, hour);
    // Counted twice when sent again after a broken connection: one check
    // fewer this hour, never one more.
    let (used,): (u64,) = redis
        .run(|mut conn| {
            let key = &key;
            async move {
                redis::pipe()
                    .atomic()
                    .incr(key, 1u64)
                    .expire(key, 3600 + 60)
                    .ignore()
                    .query_async(&mut conn)
                    .await
            }
        })
        .await?;
    Ok(used <= u64::from(per_hour))
}

#[cfg(test)]
mod tests {
    use super::*;

    // On tokio's paused clock: the spacing is exact whatever the load.
    #[tokio::test(start_paused = true)]
    async fn local_and_unshared_paces_space_slots_by_their_interval() {
        let local = RateLimit::local(20);
        assert_eq!(local.take().await, Ok(Duration::ZERO));
        assert_eq!(local.take().await, Ok(Duration::from_millis(50)));
        assert_eq!(local.take().await, Ok(Duration::from_millis(100)));
        // Without Redis an account's pace is this process's, with headroom:
        // 10 a second spaced for 9.
        let account = SharedBudgets::default().per_second("acct", 10);
        assert!(account.is_shared());
        assert_eq!(account.take().await, Ok(Duration::ZERO));
        assert_eq!(account.take().await, Ok(Duration::from_secs(10) / 90));
        // Without Redis no hourly count can be shared: none is taken.
        let hourly = SharedBudgets::default().per_hour("checks", 100);
        assert_eq!(hourly.take().await, Err(Spent));
    }
}
