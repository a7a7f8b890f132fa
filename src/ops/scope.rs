//! `Scope`: who an action speaks for, and so what it may see and change.

use crate::store::audit::Actor;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// A person at the command line, with the store's credentials: every
    /// workspace.
    Cli,
    /// The admin token (or, with none configured and no workspace token in
    /// existence, an anonymous read): every workspace.
    Admin,
    /// A workspace token: that workspace's syncs and runs only.
    Workspace {
        workspace: String,
        read_only: bool,
        /// The token's id, recorded as the actor of what it changes.
        token: i64,
    },
}

impl Scope {
    /// Whether this scope sees `workspace`.
    pub fn sees(&self, workspace: &str) -> bool {
        match self {
            Scope::Cli | Scope::Admin => true,
            Scope::Workspace { workspace: own, .. } => own == workspace,
        }
    }

    /// The one workspace this scope sees; `None`: every workspace. What the
    /// store's lists filter on, in SQL.
    pub fn workspace(&self) -> Option<&str> {
        match self {
            Scope::Cli | Scope::Admin => None,
            Scope::Workspace { workspace, .. } => Some(workspace),
        }
    }

    /// Whether this scope may only read.
    pub fn read_only(&self) -> bool {
        matches!(
            self,
            Scope::Workspace {
                read_only: true,
                ..
            }
        )
    }

    /// Who the audit log names for what this scope changes.
    pub fn actor(&self) -> Actor {
        match self {
            Scope::Cli => Actor::Cli,
            Scope::Admin => Actor::Admin,
            Scope::Workspace { token, .. } => Actor::Token(*token),
        }
    }
}
