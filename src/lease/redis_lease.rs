//! `LeaseManager`: acquire, prove, renew, release and break a sync's lease.
//! Every ownership command is a compare on the stored value, done in Lua so the
//! compare and the write are one step.

use std::time::Duration;

use deadpool_redis::redis::{self, AsyncCommands};

use uuid::Uuid;

use crate::redis::scripts::{ACQUIRE, RELEASE, RENEW};
use crate::redis::{RedisFailure, SharedConnection, keys};

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("Redis pool: {0}")]
    Pool(#[from] deadpool_redis::PoolError),
    #[error("allocating a fence: {0}")]
    Store(#[from] sqlx::Error),
}

impl From<RedisFailure> for LeaseError {
    fn from(failure: RedisFailure) -> Self {
        match failure {
            RedisFailure::Command(e) => Self::Redis(e),
            RedisFailure::Pool(e) => Self::Pool(e),
        }
    }
}

/// A held lease: the value we stored, and the fence this acquisition took.
#[derive(Debug, Clone)]
pub struct Lease {
    pub sync_id: String,
    /// `{boot id}/{token}`, what the Redis key holds while the lease is ours.
    pub value: String,
    pub token: String,
    pub fence: i64,
}

/// Who holds a lease, read from its stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    pub value: String,
    pub boot_id: Option<Uuid>,
}

/// Leases of one daemon process (one boot id).
#[derive(Clone)]
pub struct LeaseManager {
    redis: SharedConnection,
    prefix: String,
    boot_id: Uuid,
    ttl: Duration,
}

impl std::fmt::Debug for LeaseManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseManager")
            .field("prefix", &self.prefix)
            .field("boot_id", &self.boot_id)
            .finish()
    }
}

impl LeaseManager {
    /// Leases under `prefix`, taken over `redis` (the process's shared
    /// connection) for process `boot_id`, each for `ttl`.
    pub fn new(redis: SharedConnection, prefix: &str, boot_id: Uuid, ttl: Duration) -> Self {
        Self {
            redis,
            prefix: prefix.to_owned(),
            boot_id,
            ttl,
        }
    }

    pub fn boot_id(&self) -> Uuid {
        self.boot_id
    }

    /// The Redis key of a sync's lease.
    pub fn key(&self, sync_id: &str) -> String {
        keys::lease(&self.prefix, sync_id)
    }

    /// Takes the lease if it is free or its holder is dead, then runs `begin`
    /// with the lease's value: one store statement that issues the fence
    /// (returned first) and may do more in the same round trip (a run records
    /// its lease and reads its cursor). If `begin` fails, or answers `None`
    /// (the store knows a live holder Redis forgot), the lease is given back
    /// at once.
    pub async fn acquire_with<T, F, Fut>(
        &self,
        sync_id: &str,
        begin: F,
    ) -> Result<Option<(Lease, T)>, LeaseError>
    where
        F: FnOnce(String) -> Fut,
        Fut: std::future::Future<Output = sqlx::Result<Option<(i64, T)>>>,
    {
        let token = Uuid::new_v4().simple().to_string();
        let value = format!("{}/{token}", self.boot_id.simple());
        let taken: i64 = self
            .redis
            .run(|mut conn| {
                let value = &value;
                async move {
                    ACQUIRE
                        .key(self.key(sync_id))
                        .arg(value)
                        .arg(ttl_millis(self.ttl))
                        .arg(keys::liveness_prefix(&self.prefix))
                        .invoke_async(&mut conn)
                        .await
                }
            })
            .await?;
        match taken {
            1 => {}
            2 => {
                tracing::info!("Took over the lease of sync {sync_id} from a dead holder");
                metrics::counter!("syncward_lease_takeovers_total").increment(1);
            }
            _ => return Ok(None),
        }
        let lease = Lease {
            sync_id: sync_id.to_owned(),
            value: value.clone(),
            token,
            fence: 0,
        };
        match begin(value).await {
            Ok(Some((fence, more))) => Ok(Some((Lease { fence, ..lease }, more))),
            Ok(None) => {
                // Best effort: left alone it expires after a TTL.
                let _ = self.release(&lease).await;
                Ok(None)
            }
            Err(e) => {
                // Without a fence the lease is useless: give it back at once rather
                // than block the sync for a whole TTL. The store error is what matters.
                let _ = self.release(&lease).await;
                Err(e.into())
            }
        }
    }

    /// Whether the lease is still ours.
    pub async fn prove(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let current: Option<String> = self
            .redis
            .run(|mut conn| async move { conn.get(self.key(&lease.sync_id)).await })
            .await?;
        Ok(current.as_deref() == Some(lease.value.as_str()))
    }

    /// Extends the lease by a full TTL if it is still ours; false if it is gone.
    pub async fn renew(&self, lease: &Lease) -> Result<bool, LeaseError> {
        let renewed: i64 = self
            .redis
            .run(|mut conn| async move {
                RENEW
                    .key(self.key(&lease.sync_id))
                    .arg(&lease.value)
                    .arg(ttl_millis(self.ttl))
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        Ok(renewed == 1)
    }

    /// Gives the lease back if it is still ours.
    pub async fn release(&self, lease: &Lease) -> Result<bool, LeaseError> {
        self.delete_if(&lease.sync_id, &lease.value).await
    }

    /// Who holds the sync's lease now, if anyone.
    pub async fn holder(&self, sync_id: &str) -> Result<Option<LeaseHolder>, LeaseError> {
        let value: Option<String> = self
            .redis
            .run(|mut conn| async move { conn.get(self.key(sync_id)).await })
            .await?;
        Ok(value.map(|value| {
            let boot_id = value
                .split_once('/')
                .and_then(|(boot, _)| Uuid::parse_str(boot).ok());
            LeaseHolder { value, boot_id }
        }))
    }

    /// Deletes a dead holder's lease, only if it still holds exactly `value`.
    pub async fn break_lease(&self, sync_id: &str, value: &str) -> Result<bool, LeaseError> {
        self.delete_if(sync_id, value).await
    }

    async fn delete_if(&self, sync_id: &str, value: &str) -> Result<bool, LeaseError> {
        let deleted: i64 = self
            .redis
            .run(|mut conn| async move {
                RELEASE
                    .key(self.key(sync_id))
                    .arg(value)
                    .invoke_async(&mut conn)
                    .await
            })
            .await?;
        Ok(deleted == 1)
    }
}

fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}
