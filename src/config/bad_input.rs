//! The one error type for bad input (config file, sync file, arguments): `main`
//! maps it to exit code 2 and prints it as a single line.

use std::fmt;

/// Bad input, named by where it is (a file, or an environment variable), the key
/// or field inside it, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadInput {
    /// The file (or `environment`, or `arguments`) that holds the bad value.
    pub origin: String,
    /// The key or field path, e.g. `lease.ttl` or `source.url_env`; empty when the
    /// whole input is wrong (an unreadable file).
    pub key: String,
    /// What is wrong, in words an operator can act on.
    pub problem: String,
}

impl BadInput {
    pub fn new(
        origin: impl Into<String>,
        key: impl Into<String>,
        problem: impl Into<String>,
    ) -> Self {
        Self {
            origin: origin.into(),
            key: key.into(),
            problem: problem.into(),
        }
    }

    /// Bad command-line input that is not in a file (an unknown sync id, say).
    pub fn argument(key: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::new("arguments", key, problem)
    }
}

impl fmt::Display for BadInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // One line, always: newlines from parser messages would break log lines and
        // the "one line naming what is wrong" promise.
        let problem = self
            .problem
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if self.key.is_empty() {
            write!(f, "{}: {}", self.origin, problem)
        } else {
            write!(f, "{}: {}: {}", self.origin, self.key, problem)
        }
    }
}

impl std::error::Error for BadInput {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_one_line_naming_origin_key_and_problem() {
        let e = BadInput::new(
            "syncs/a.toml",
            "id \"a:b\"",
            "only a-z, 0-9, '-' and '_' are allowed\nsecond",
        );
        assert_eq!(
            e.to_string(),
            "syncs/a.toml: id \"a:b\": only a-z, 0-9, '-' and '_' are allowed second"
        );
    }
}
