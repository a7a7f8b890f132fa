//! Request budgets shared by every sync and daemon that call one destination
//! account (a Brevo API key): each request reserves the account's next slot,
//! `1/(0.9 × rate)` after the last one, in one Redis script (GCRA with the slots
//! queued), so syncs on one key together stay under the account's limit
//! instead of drawing 429s in turns. With Redis away, each process paces the
//! account alone at half the rate: slower, never unlimited.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use deadpool_redis::redis::{Script, ScriptInvocation};
use tokio::time::Instant;

/// What `ScriptHost::invoke` returns.
pub type ScriptAnswer<'a> = Pin<Box<dyn Future<Output = anyhow::Result<i64>> + Send + 'a>>;

/// Where shared budgets are kept: runs the budget's script on Redis. The
/// daemon's one pool (`lease::RedisPool`, one server or a Sentinel set's
/// primary) implements it; connectors and this part do not name it.
pub trait ScriptHost: Send + Sync {
    /// Runs `script` once and returns its integer answer.
    fn invoke<'a>(&'a self, script: &'a ScriptInvocation<'a>) -> ScriptAnswer<'a>;
}

/// Reserves the next slot of `KEYS[1]` (the time the account's next request
/// may leave, in ms on Redis' clock) `ARGV[1]` ms after the last; returns how
/// long the caller waits for it. The key expires once its slots are past.
static RESERVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local slot = tonumber(redis.call('GET', KEYS[1]) or now)
if slot < now then slot = now end
local interval = tonumber(ARGV[1])
redis.call('SET', KEYS[1], slot + interval, 'PX', slot + interval - now + 1000)
return slot - now
"#,
    )
});

/// The share of an account's limit its slots are spaced for: 9/10.
const HEADROOM_NUMERATOR: u32 = 9;
const HEADROOM_DENOMINATOR: u32 = 10;

/// Waits longer than this are not queued behind: the reservation is made
/// anyway (the slot is the caller's), but a wait this long means the account
/// is oversubscribed and the destination's own 429 handling takes over.
const LONGEST_WAIT: Duration = Duration::from_secs(60);

/// Where budgets are kept: Redis (shared), and a local pace per account for
/// when Redis does not answer.
#[derive(Clone, Default)]
pub struct SharedBudgets {
    redis: Option<(Arc<dyn ScriptHost>, String)>,
    local: Arc<Mutex<HashMap<String, Instant>>>,
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
    pub fn in_redis(redis: impl ScriptHost + 'static, prefix: &str) -> Self {
        Self {
            redis: Some((Arc::new(redis), format!("{prefix}:budget:"))),
            local: Arc::default(),
        }
    }

    /// Waits for the next request slot of `account`, at most `per_second`
    /// requests a second across every process sharing these budgets. Slots
    /// are spaced for nine tenths of `per_second`: a request delayed on its
    /// way (a busy machine, a slow connection) then never lands one more than
    /// the limit in any second the destination counts, which at the full
    /// rate a delay of one slot would (measured: 1 in 600 imports drew a 429).
    pub async fn wait(&self, account: &str, per_second: u32) {
        let wait = self.reserve(account, per_second).await;
        // A slot already due is taken at once: a timer, even of zero, costs a
        // millisecond on the bulk path.
        if !wait.is_zero() {
            tokio::time::sleep(wait.min(LONGEST_WAIT)).await;
        }
    }

    /// Reserves the next request slot of `account`, as `wait` does, without
    /// waiting for it: how far ahead it is. The slot is the caller's, however
    /// far: a run that would wait longer than it may hold a worker gives the
    /// worker back and comes back for its slot.
    pub async fn reserve(&self, account: &str, per_second: u32) -> Duration {
        let per_second = per_second.max(1);
        let interval = Duration::from_secs(1) * HEADROOM_DENOMINATOR
            / (per_second * HEADROOM_NUMERATOR).max(1);
        if let Some((redis, prefix)) = &self.redis {
            match reserve(redis.as_ref(), &format!("{prefix}{account}"), interval).await {
                Ok(wait) => return wait,
                Err(e) => tracing::warn!(
                    account,
                    error = %e,
                    "Shared request budget unavailable; pacing at half the rate locally"
                ),
            }
        }
        // Alone, or without Redis: this process's own pace (half the rate
        // when the budget should have been shared, as other daemons may be
        // sending too).
        let interval = if self.redis.is_some() {
            interval * 2
        } else {
            interval
        };
        // The map holds plain instants: a panic elsewhere cannot leave it
        // half-written.
        let mut local = self.local.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let next = local.entry(account.to_string()).or_insert(now);
        let slot = (*next).max(now);
        *next = slot + interval;
        slot - now
    }
}

async fn reserve(
    redis: &dyn ScriptHost,
    key: &str,
    interval: Duration,
) -> anyhow::Result<Duration> {
    let interval_ms = u64::try_from(interval.as_millis())
        .unwrap_or(u64::MAX)
        .max(1);
    let mut invocation = RESERVE.key(key);
    invocation.arg(interval_ms);
    // A connection and the script's answer, within one bound.
    let wait_ms = tokio::time::timeout(Duration::from_secs(4), redis.invoke(&invocation)).await??;
    Ok(Duration::from_millis(u64::try_from(wait_ms).unwrap_or(0)))
}
