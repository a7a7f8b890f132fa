//! Workspace-scoped access tokens: created (stored as their SHA-256), looked
//! up by the admin surface on each request, listed and revoked.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgPool;

/// A token as stored: never the token itself.
#[derive(Debug, Clone, Serialize)]
pub struct TokenRow {
    pub id: i64,
    pub workspace_id: String,
    pub read_only: bool,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

/// What a live token may reach.
#[derive(Debug, Clone)]
pub struct TokenScope {
    pub id: i64,
    pub workspace_id: String,
    pub read_only: bool,
}

/// Stores a new token's digest for `workspace`; `None` when the workspace
/// does not exist. Returns the token's id.
pub async fn create_token(
    pool: &PgPool,
    workspace: &str,
    sha256: &[u8; 32],
    read_only: bool,
) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar!(
        "INSERT INTO api_tokens (workspace_id, token_sha256, read_only)
         SELECT id, $2, $3 FROM workspaces WHERE id = $1
         RETURNING id",
        workspace,
        sha256.as_slice(),
        read_only,
    )
    .fetch_optional(pool)
    .await
}

/// The live (not revoked) token with this digest.
pub async fn find_token(pool: &PgPool, sha256: &[u8; 32]) -> sqlx::Result<Option<TokenScope>> {
    sqlx::query_as!(
        TokenScope,
        "SELECT id, workspace_id, read_only FROM api_tokens
         WHERE token_sha256 = $1 AND revoked_at IS NULL",
        sha256.as_slice(),
    )
    .fetch_optional(pool)
    .await
}

pub async fn list_tokens(pool: &PgPool) -> sqlx::Result<Vec<TokenRow>> {
    sqlx::query_as!(
        TokenRow,
        "SELECT id, workspace_id, read_only, created_at, revoked_at FROM api_tokens
         ORDER BY workspace_id, id",
    )
    .fetch_all(pool)
    .await
}

/// Revokes a token at once; false when there is no live token with that id.
pub async fn revoke_token(pool: &PgPool, id: i64) -> sqlx::Result<bool> {
    Ok(sqlx::query!(
        "UPDATE api_tokens SET revoked_at = now() WHERE id = $1 AND revoked_at IS NULL",
        id,
    )
    .execute(pool)
    .await?
    .rows_affected()
        == 1)
}

/// How many workspace tokens are not revoked.
pub async fn active_tokens(pool: &PgPool) -> sqlx::Result<i64> {
    sqlx::query_scalar!(r#"SELECT count(*) AS "count!" FROM api_tokens WHERE revoked_at IS NULL"#)
        .fetch_one(pool)
        .await
}
