//! `syncward token …`: workspace-scoped access to the API and pages.

use sha2::{Digest, Sha256};

use crate::cli::TokenCommand;
use crate::config::{BadInput, Settings, WorkspaceId};
use crate::store::{self, tokens};

use super::output::outln;
use super::{print_json, when};

pub async fn execute(settings: &Settings, command: TokenCommand) -> anyhow::Result<()> {
    if let TokenCommand::Create { workspace, .. } = &command {
        WorkspaceId::parse(workspace)
            .map_err(|problem| BadInput::new("--workspace", "", problem))?;
        // Without an admin token, anonymous readers would be the admin.
        if settings.http.admin_token.is_none() {
            return Err(BadInput::new(
                "token create",
                "http.admin_token",
                "is not set: workspace tokens need one (anonymous readers would otherwise see \
                 every workspace); set SYNCWARD__HTTP__ADMIN_TOKEN (at least 32 characters) first",
            )
            .into());
        }
    }
    let pool = store::connect(&settings.database).await?;
    match command {
        TokenCommand::Create {
            workspace,
            read_only,
            json,
        } => {
            // 244 random bits from two v4 UUIDs (the OS generator); the prefix
            // makes a leaked one easy to find in logs and repositories.
            let token = format!(
                "swt_{}{}",
                uuid::Uuid::new_v4().simple(),
                uuid::Uuid::new_v4().simple()
            );
            let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            let id = tokens::create_token(&pool, &workspace, &digest, read_only)
                .await?
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "workspace \"{workspace}\": no such workspace (it exists once a sync of it is applied)"
                    )
                })?;
            let access = if read_only { "read-only" } else { "read-write" };
            if json.json {
                return print_json(&serde_json::json!({
                    "id": id, "workspace": workspace, "access": access, "token": token
                }));
            }
            outln!("{token}");
            eprintln!(
                "Token {id}: {access} for workspace {workspace}. It is shown this once; only its digest is kept. \
                 Send it as `Authorization: Bearer` on /api, or as the Basic password on the pages."
            );
            Ok(())
        }
        TokenCommand::List(json) => {
            let list = tokens::list_tokens(&pool).await?;
            if json.json {
                return print_json(&list);
            }
            if list.is_empty() {
                outln!("No tokens: create one with `syncward token create --workspace W`.");
                return Ok(());
            }
            outln!(
                "{:>6} {:<24} {:<11} {:<22} REVOKED",
                "ID",
                "WORKSPACE",
                "ACCESS",
                "CREATED"
            );
            for t in list {
                outln!(
                    "{:>6} {:<24} {:<11} {:<22} {}",
                    t.id,
                    t.workspace_id,
                    if t.read_only {
                        "read-only"
                    } else {
                        "read-write"
                    },
                    when(Some(t.created_at)),
                    t.revoked_at
                        .map_or_else(|| "-".to_owned(), |at| when(Some(at)))
                );
            }
            Ok(())
        }
        TokenCommand::Revoke { id, json } => {
            let revoked = tokens::revoke_token(&pool, id).await?;
            if json.json {
                return print_json(&serde_json::json!({"id": id, "revoked": revoked}));
            }
            if !revoked {
                anyhow::bail!("token {id}: no such live token (see `syncward token list`)");
            }
            outln!("Token {id} revoked; it is refused from now on.");
            Ok(())
        }
    }
}
