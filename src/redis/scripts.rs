//! Every Lua script syncward runs on Redis: each compare and write is one
//! atomic step there. Their callers: leases (`lease/redis_lease.rs`) and
//! shared request rates (`outbound/rate_limit.rs`).

use std::sync::LazyLock;

use deadpool_redis::redis::Script;

/// Extends a lease by `ARGV[2]` ms if it still holds `ARGV[1]`.
pub static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"#,
    )
});

/// Takes a lease: `SET key value NX PX ttl`, also true when the key already
/// holds exactly `value` (this very acquisition, sent again after a broken
/// connection). A lease whose holder is dead (its liveness key, `ARGV[3]`
/// (`keys::liveness_prefix`) followed by the boot id the value starts with, is
/// gone) is free: it is taken over in the same step, a compare-and-set on the
/// value read (2). The liveness key is named from the stored value, so it is
/// not among KEYS: fine on one Redis (and under Sentinel), not on a cluster.
pub static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 1
end
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  return 1
end
local boot = held and string.match(held, '^([^/]+)/')
if boot and redis.call('EXISTS', ARGV[3] .. boot) == 0 then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 2
end
return 0
"#,
    )
});

/// Deletes a lease if it still holds `ARGV[1]`.
pub static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"#,
    )
});

/// Reserves the next slot of `KEYS[1]` (the time the account's next request
/// may leave, in ms on Redis' clock) `ARGV[1]` ms after the last; returns how
/// long the caller waits for it. The key expires once its slots are past.
pub static RESERVE: LazyLock<Script> = LazyLock::new(|| {
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
