//! Validated identifiers: sync ids and workspace ids. Each refuses bad input
//! with the reason. (The names of secrets' environment variables, which
//! connector configs hold, are in `connector_config`.)

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
}
