//! Validated identifiers: sync ids, workspace ids and the names of environment
//! variables that hold secrets. Each refuses bad input with the reason.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Checks an identifier against `[a-z0-9_-]{1,64}` and says exactly what is wrong.
fn check_identifier(value: &str) -> Result<(), String> {
    check_identifier_chars(value)
        .map_err(|problem| format!("\"{}\" {problem}", value.escape_default()))
}

fn check_identifier_chars(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Err("must not be empty".into());
    }
    if value.len() > 64 {
        return Err(format!(
            "is {} characters long; at most 64 are allowed",
            value.len()
        ));
    }
    if let Some(bad) = value
        .chars()
        .find(|c| !matches!(c, 'a'..='z' | '0'..='9' | '-' | '_'))
    {
        let what = match bad {
            ':' => "a colon".to_string(),
            ' ' => "a space".to_string(),
            c if c.is_uppercase() => format!("upper case '{c}'"),
            c => format!("'{}'", c.escape_default()),
        };
        return Err(format!(
            "contains {what}; only a-z, 0-9, '-' and '_' are allowed"
        ));
    }
    Ok(())
}

macro_rules! identifier {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub fn parse(value: &str) -> Result<Self, String> {
                check_identifier(value).map(|()| Self(value.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = String;
            fn try_from(value: String) -> Result<Self, String> {
                check_identifier(&value).map(|()| Self(value))
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

identifier!(
    /// A sync's id: `[a-z0-9_-]{1,64}`. It appears in Redis keys, so a colon or a
    /// space is refused.
    SyncId
);
identifier!(
    /// A workspace's id, with the same rules as a sync id.
    WorkspaceId
);

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifier_rules_give_the_reason() {
        assert!(SyncId::parse("acme-contacts_2").is_ok());
        assert_eq!(SyncId::parse("").unwrap_err(), "\"\" must not be empty");
        assert!(
            SyncId::parse("acme:contacts")
                .unwrap_err()
                .contains("a colon")
        );
        assert!(
            SyncId::parse("acme contacts")
                .unwrap_err()
                .contains("a space")
        );
        assert!(
            SyncId::parse("Acme")
                .unwrap_err()
                .contains("upper case 'A'")
        );
        assert!(
            SyncId::parse(&"a".repeat(65))
                .unwrap_err()
                .contains("at most 64")
        );
        assert!(SyncId::parse(&"a".repeat(64)).is_ok());
    }

    #[test]
    fn env_var_names_refuse_values_that_look_like_secrets() {
        assert!(EnvVarName::try_from("BREVO_API_KEY".to_string()).is_ok());
        assert!(EnvVarName::try_from("xkeysib-123".to_string()).is_err());
        assert!(EnvVarName::try_from("1ABC".to_string()).is_err());
        assert!(EnvVarName::try_from(String::new()).is_err());
    }
}
