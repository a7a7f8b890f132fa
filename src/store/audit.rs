//! The audit log: who changed a sync, how, and why.

use serde::Serialize;
use sqlx::PgConnection;

/// Who made a change.
#[derive(Debug, Clone, Copy)]
pub enum Actor {
    Cli,
    /// The admin token over HTTP (API or pages).
    Admin,
    /// A workspace token over HTTP, by id (`syncward token list`).
    Token(i64),
    Breaker,
    Daemon,
}

impl Actor {
    /// As the audit log writes it: `cli:alice` (the person at the command
    /// line: `SUDO_USER` behind `sudo -u syncward`, else `USER`; `cli` when
    /// neither says), `api:admin`, `api:token:17`, `breaker`, `daemon`.
    pub fn label(self) -> String {
        match self {
            Actor::Cli => match command_line_user() {
                Some(user) => format!("cli:{user}"),
                None => "cli".into(),
            },
            Actor::Admin => "api:admin".into(),
            Actor::Token(id) => format!("api:token:{id}"),
            Actor::Breaker => "breaker".into(),
            Actor::Daemon => "daemon".into(),
        }
    }
}

/// Who runs this command, as their login names them: a name of letters,
/// digits, `.`, `_` and `-` only (anything else is not a login name).
fn command_line_user() -> Option<String> {
    ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .filter_map(|var| std::env::var(var).ok())
        .find(|name| {
            !name.is_empty()
                && name.len() <= 32
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        })
}

#[derive(Debug, Clone, Serialize)]
pub struct AuditRow {
    pub id: i64,
    pub at: chrono::DateTime<chrono::Utc>,
    pub actor: String,
    pub action: String,
    pub workspace_id: Option<String>,
    pub sync_id: Option<String>,
    pub reason: Option<String>,
    pub detail: sqlx::types::Json<serde_json::Value>,
}

/// One audit entry, written in the caller's transaction so it lands with the
/// change it describes.
pub async fn record_audit(
    conn: &mut PgConnection,
    actor: Actor,
    action: &str,
    sync_id: &str,
    reason: Option<&str>,
    detail: serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query!(
        "INSERT INTO audit_log (actor, action, workspace_id, sync_id, reason, detail)
         SELECT $1, $2, (SELECT workspace_id FROM syncs WHERE id = $3), $3, $4, $5",
        actor.label(),
        action,
        sync_id,
        reason,
        sqlx::types::Json(detail) as _,
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// The newest audit entries of a sync.
pub async fn list_audit_for_sync(
    pool: &sqlx::PgPool,
    sync_id: &str,
    limit: i64,
) -> sqlx::Result<Vec<AuditRow>> {
    sqlx::query_as!(
        AuditRow,
        r#"SELECT id, at, actor, action, workspace_id, sync_id, reason,
                  detail AS "detail: sqlx::types::Json<serde_json::Value>"
           FROM audit_log WHERE sync_id = $1 ORDER BY id DESC LIMIT $2"#,
        sync_id,
        limit,
    )
    .fetch_all(pool)
    .await
}

/// The newest audit entry of one action on a sync (e.g. its last `resync`).
pub async fn latest_action_for_sync(
    pool: &sqlx::PgPool,
    sync_id: &str,
    action: &str,
) -> sqlx::Result<Option<AuditRow>> {
    sqlx::query_as!(
        AuditRow,
        r#"SELECT id, at, actor, action, workspace_id, sync_id, reason,
                  detail AS "detail: sqlx::types::Json<serde_json::Value>"
           FROM audit_log WHERE sync_id = $1 AND action = $2 ORDER BY id DESC LIMIT 1"#,
        sync_id,
        action,
    )
    .fetch_optional(pool)
    .await
}
