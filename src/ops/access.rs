//! What the admin HTTP asks of the store before any scope exists: whose a
//! presented token is (the scope it opens), whether an anonymous read may
//! see everything, and the store's own health for readiness and metrics.
//! Through the door like everything else, so `http/` holds no store.

use super::{Door, Scope};
use crate::store::{self, syncs, tokens};

pub use crate::store::syncs::SyncHealth;

impl Door {
    /// The scope a workspace token opens, by its SHA-256; `None`: no such
    /// token, or a revoked one.
    pub async fn token_scope(&self, sha256: &[u8; 32]) -> sqlx::Result<Option<Scope>> {
        Ok(tokens::find_token(&self.store, sha256)
            .await?
            .map(|t| Scope::Workspace {
                workspace: t.workspace_id,
                read_only: t.read_only,
                token: t.id,
            }))
    }

    /// The scope of a read without a token where no admin token is set:
    /// every workspace while no workspace token exists, else none (the
    /// daemon refuses to start with tokens and no admin token; one created
    /// since is caught here).
    pub async fn anonymous_scope(&self) -> sqlx::Result<Option<Scope>> {
        Ok((tokens::active_tokens(&self.store).await? == 0).then_some(Scope::Admin))
    }

    /// Whether the store answers (readiness).
    pub async fn store_ready(&self) -> sqlx::Result<()> {
        store::ping(&self.store).await
    }

    /// Every sync's health, for the metrics a scrape reads (behind the
    /// scrape token: its labels name every workspace's syncs).
    pub async fn sync_health(&self) -> sqlx::Result<Vec<SyncHealth>> {
        syncs::sync_health(&self.store).await
    }
}
