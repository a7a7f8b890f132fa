//! What every connector's config is made of, below both `config/` (which reads
//! sync files) and the connectors (whose configs it reads): the name of a
//! secret's variable, a workspace's secrets (`config::secrets` says where
//! they live), and naming the field behind a table's error.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The name of an environment variable that holds a secret (`[A-Z_][A-Z0-9_]*`).
/// Sync files name secrets this way and never hold them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EnvVarName(String);

impl EnvVarName {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A name of the daemon's own (`SYNCWARD…`: its settings, its
    /// environment file's variables), which no sync may name.
    pub fn is_the_daemons(&self) -> bool {
        self.0.starts_with("SYNCWARD")
    }
}

impl TryFrom<String> for EnvVarName {
    type Error = String;
    fn try_from(value: String) -> Result<Self, String> {
        let mut chars = value.chars();
        let first_ok = chars
            .next()
            .is_some_and(|c| c.is_ascii_uppercase() || c == '_');
        if !first_ok || !chars.all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_') {
            return Err(format!(
                "\"{}\" is not an environment variable name (A-Z, 0-9 and '_', not starting with a digit); \
                 name the variable that holds the secret, never the secret itself",
                value.escape_default()
            ));
        }
        Ok(Self(value))
    }
}

impl From<EnvVarName> for String {
    fn from(name: EnvVarName) -> String {
        name.0
    }
}

impl fmt::Display for EnvVarName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A value of a sync file that deserialized but cannot work: the field as
/// the file names it (`source.query`) and why. `validate()` of every
/// connector's config answers with it; the caller adds the file's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {why}")]
pub struct FieldError {
    pub field: String,
    pub why: String,
}

impl FieldError {
    pub fn new(field: String, why: String) -> Self {
        FieldError { field, why }
    }
}

/// One workspace's secrets, read from its file.
#[derive(Clone)]
pub struct WorkspaceSecrets {
    file: PathBuf,
    /// The file's variables, or why it could not be read.
    values: Result<HashMap<String, String>, String>,
}

impl std::fmt::Debug for WorkspaceSecrets {
    // Names the file, never a value.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkspaceSecrets")
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

impl WorkspaceSecrets {
    /// Reads a workspace's file now. A file that is missing or unreadable is
    /// not an error here: each secret asked of it then says why it has none.
    pub fn read(file: PathBuf) -> Self {
        let values = read_file(&file);
        WorkspaceSecrets { file, values }
    }

    /// Secrets given directly (tests of connectors; benchmarks).
    pub fn from_values(values: impl IntoIterator<Item = (String, String)>) -> Self {
        WorkspaceSecrets {
            file: PathBuf::from("(given)"),
            values: Ok(values.into_iter().collect()),
        }
    }

    /// The value of `name`, asked for by `field` (e.g.
    /// `destination.api_key_env`); the error is one line naming the field,
    /// the variable and the file.
    pub fn get(&self, name: &EnvVarName, field: &str) -> Result<String, String> {
        self.lookup(name).map_err(|why| format!("{field}: {why}"))
    }

    /// The value of `name`; the error names the variable and the file.
    pub fn lookup(&self, name: &EnvVarName) -> Result<String, String> {
        if name.is_the_daemons() {
            return Err(format!(
                "{name} is a name of the daemon's own (its settings and environment); a sync \
                 names only secrets of its workspace's secrets file"
            ));
        }
        let file = self.file.display();
        match &self.values {
            Ok(values) => values
                .get(name.as_str())
                .filter(|v| !v.is_empty())
                .cloned()
                .ok_or_else(|| {
                    format!("{name} is not set in {file} (the workspace's secrets file)")
                }),
            Err(why) => Err(format!("{name}: {why}")),
        }
    }
}

/// Reads a secrets file; the error says why in one sentence and never
/// quotes a line (it may hold a secret).
fn read_file(file: &Path) -> Result<HashMap<String, String>, String> {
    let shown = file.display();
    let text = match std::fs::read(file) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "the workspace's secrets file {shown} does not exist"
            ));
        }
        Err(e) => {
            return Err(format!(
                "cannot read the workspace's secrets file {shown}: {e}"
            ));
        }
    };
    let text = String::from_utf8(text).map_err(|_| format!("{shown} is not UTF-8 text"))?;
    parse_secrets(&text).map_err(|line| format!("{shown}: line {line} is not a NAME=value line"))
}

/// A secrets file's variables, read literally: a value is the text after
/// the first `=`, spaces and tabs around it trimmed, and one pair of
/// matching quotes (`'…'` or `"…"`) around the whole of it removed. Nothing
/// inside is interpreted: no `$` or `${…}` expansion (a workspace's file
/// must not pull the daemon's environment into a request), no escapes, no
/// inline comments. Blank lines and lines starting with `#` are skipped; a
/// leading `export ` is allowed. dotenvy, read before, always interpolates,
/// so these few rules are written here; `docs/usage.md` states them.
/// `Err(n)`: line `n` (from 1) is not `NAME=value`.
pub fn parse_secrets(text: &str) -> Result<HashMap<String, String>, usize> {
    let mut values = HashMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim_start_matches('\u{feff}').trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        let Some((name, value)) = line.split_once('=') else {
            return Err(number + 1);
        };
        let name = name.trim();
        let name_ok = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok {
            return Err(number + 1);
        }
        let value = value.trim_matches([' ', '\t']);
        let unquoted = ['\'', '"'].iter().find_map(|&q| {
            (value.len() >= 2 && value.starts_with(q) && value.ends_with(q))
                .then(|| &value[1..value.len() - 1])
        });
        values.insert(name.to_string(), unquoted.unwrap_or(value).to_string());
    }
    Ok(values)
}

/// Deserializes one connector table (without its `kind`) to name the field of
/// the first error: `(field path, problem)`.
pub(crate) fn field_error<T: serde::de::DeserializeOwned>(
    table: toml::Table,
) -> Option<(String, String)> {
    match serde_path_to_error::deserialize::<_, T>(toml::Value::Table(table)) {
        Ok(_) => None,
        Err(e) => Some((e.path().to_string(), e.inner().message().to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_read_literally() {
        let file = "# a comment\n\nPLAIN=k${SYNCWARD__HTTP__ADMIN_TOKEN}\n\
                    export QUOTED=\"a$b 'c' #d\"\n\
                    SINGLE = 'x\\\"y$HOME'\r\n\
                    HASH=v # not a comment\n\
                    HALF=\"open\n\
                    EMPTY=\n";
        let values = parse_secrets(file).expect("a file");
        assert_eq!(values["PLAIN"], "k${SYNCWARD__HTTP__ADMIN_TOKEN}");
        assert_eq!(values["QUOTED"], "a$b 'c' #d");
        assert_eq!(values["SINGLE"], "x\\\"y$HOME");
        assert_eq!(values["HASH"], "v # not a comment");
        assert_eq!(values["HALF"], "\"open");
        assert_eq!(values["EMPTY"], "");
        assert_eq!(parse_secrets("A=1\nno equals sign\n"), Err(2));
        assert_eq!(parse_secrets("1A=1\n"), Err(1));
    }

    #[test]
    fn env_var_names_refuse_values_that_look_like_secrets() {
        assert!(EnvVarName::try_from("BREVO_API_KEY".to_string()).is_ok());
        assert!(EnvVarName::try_from("xkeysib-123".to_string()).is_err());
        assert!(EnvVarName::try_from("1ABC".to_string()).is_err());
        assert!(EnvVarName::try_from(String::new()).is_err());
    }
}
