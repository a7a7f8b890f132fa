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

    /// A file that exists (or may) but cannot be read, with the usual fix:
    /// the package installs its files root:syncward 0640, readable by the
    /// `syncward` user and group.
    pub fn unreadable(path: &std::path::Path, e: &std::io::Error) -> Self {
        let fix = if e.kind() == std::io::ErrorKind::PermissionDenied {
            "; run as the syncward user (`sudo -u syncward syncward …`) or a member of group \
             syncward, or give the file to that group (`chgrp syncward`, mode 0640)"
        } else {
            ""
        };
        Self::new(
            path.display().to_string(),
            "",
            format!("cannot be read: {e}{fix}"),
        )
    }

    /// Bad command-line input that is not in a file (an unknown sync id, say).
    pub fn argument(key: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::new("arguments", key, problem)
    }

    /// A TOML syntax error in `text`, named by line and column with the
    /// parser's reason. Never the text of the line: the parser's own display
    /// quotes it, and that line may hold a password.
    pub fn toml_syntax(origin: impl Into<String>, text: &str, error: &toml::de::Error) -> Self {
        let key = error
            .span()
            .map(|span| {
                let before = &text.as_bytes()[..span.start.min(text.len())];
                let line = before.iter().filter(|b| **b == b'\n').count() + 1;
                let line_start = before
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .map_or(0, |i| i + 1);
                // Characters, not bytes; a span inside a character counts it whole.
                let column = String::from_utf8_lossy(&before[line_start..])
                    .chars()
                    .count()
                    + 1;
                format!("line {line}, column {column}")
            })
            .unwrap_or_default();
        Self::new(origin, key, format!("not valid TOML: {}", error.message()))
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

    #[test]
    fn a_toml_syntax_error_names_line_and_column_but_never_the_line() {
        let text = "[database]\nurl = \"postgres://x\"\npassword = \"SECRET\n";
        let error = toml::from_str::<toml::Table>(text).expect_err("unterminated string");
        let bad = BadInput::toml_syntax("a.toml", text, &error);
        assert!(bad.key.starts_with("line 3, column "), "{bad}");
        assert!(bad.problem.starts_with("not valid TOML: "), "{bad}");
        assert!(!bad.to_string().contains("SECRET"), "{bad}");
        assert!(!bad.to_string().contains("password"), "{bad}");
    }
}

/// Several bad inputs found in one go (every bad file of a `sync apply`):
/// `main` prints each on its line and exits 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadInputs(pub Vec<BadInput>);

impl fmt::Display for BadInputs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, bad) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{bad}")?;
        }
        Ok(())
    }
}

impl std::error::Error for BadInputs {}
