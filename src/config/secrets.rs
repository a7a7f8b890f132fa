//! Secrets per workspace: a sync names a secret by variable name
//! (`api_key_env = "BREVO_API_KEY"`), and the value comes from its own
//! workspace's file, `<secrets.dir>/<workspace>.env` (`NAME=value` lines,
//! as the unit's environment file) — never from the daemon's environment,
//! which holds the daemon's own settings (the store's URL, the admin
//! token). So a sync file written by one workspace can name nothing of
//! another's, nor of the daemon's. The file is read when a run opens its
//! connectors (and by `sync apply`'s checks), so an edited file applies to
//! the next run without a reload.

use std::path::{Path, PathBuf};

use crate::config::WorkspaceId;
use crate::connector_config::WorkspaceSecrets;

/// Where the package keeps the files: one per workspace, 0640 root:syncward.
pub const DEFAULT_SECRETS_DIR: &str = "/etc/syncward/secrets";

/// The directory of the workspaces' secrets files (`secrets.dir`).
#[derive(Debug, Clone)]
pub struct SecretStore {
    dir: PathBuf,
}

impl SecretStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        SecretStore { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file of `workspace`.
    pub fn file_of(&self, workspace: &WorkspaceId) -> PathBuf {
        self.dir.join(format!("{workspace}.env"))
    }

    /// Reads `workspace`'s file now. A file that is missing or unreadable
    /// is not an error here: each secret asked of it then says why it has
    /// none.
    pub fn workspace(&self, workspace: &WorkspaceId) -> WorkspaceSecrets {
        WorkspaceSecrets::read(self.file_of(workspace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connector_config::EnvVarName;

    fn name(n: &str) -> EnvVarName {
        EnvVarName::try_from(n.to_string()).expect("a variable name")
    }

    #[test]
    fn a_workspace_reads_only_its_own_file_and_errors_name_file_variable_and_field() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(
            dir.path().join("acme.env"),
            "# acme\nBREVO_KEY=acme-key\nEMPTY=\n",
        )
        .expect("write");
        std::fs::write(
            dir.path().join("globex.env"),
            "BREVO_KEY=globex-key\nOTHER=1\n",
        )
        .expect("write");
        let store = SecretStore::new(dir.path());
        let acme = store.workspace(&WorkspaceId::parse("acme").expect("id"));
        assert_eq!(
            acme.get(&name("BREVO_KEY"), "destination.api_key_env")
                .as_deref(),
            Ok("acme-key")
        );
        let missing = acme.get(&name("OTHER"), "source.auth_env").unwrap_err();
        assert!(
            missing.starts_with("source.auth_env: OTHER is not set in"),
            "{missing}"
        );
        assert!(missing.contains("acme.env"), "{missing}");
        assert!(acme.get(&name("EMPTY"), "f").is_err());
        // The process environment is never read.
        assert!(acme.get(&name("PATH"), "f").is_err());
        let none = store.workspace(&WorkspaceId::parse("initech").expect("id"));
        let why = none
            .get(&name("BREVO_KEY"), "destination.api_key_env")
            .unwrap_err();
        assert!(why.contains("initech.env does not exist"), "{why}");
        assert!(!format!("{acme:?}").contains("acme-key"));
    }
}
