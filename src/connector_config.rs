//! What every connector's config is made of, below both `config/` (which reads
//! sync files) and the connectors (whose configs it reads): the name of a
//! secret's environment variable, and naming the field behind a table's error.

use std::fmt;

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

    /// Reads the variable; `None` when it is unset or empty.
    pub fn read(&self) -> Option<String> {
        std::env::var(&self.0).ok().filter(|v| !v.is_empty())
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
    fn env_var_names_refuse_values_that_look_like_secrets() {
        assert!(EnvVarName::try_from("BREVO_API_KEY".to_string()).is_ok());
        assert!(EnvVarName::try_from("xkeysib-123".to_string()).is_err());
        assert!(EnvVarName::try_from("1ABC".to_string()).is_err());
        assert!(EnvVarName::try_from(String::new()).is_err());
    }
}
