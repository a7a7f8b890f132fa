//! The unit's environment file (`EnvironmentFile=` in syncward.service), read
//! by the CLI too, so `syncward migrate` or `sync apply` run by hand see the
//! same database URL and secrets as the daemon. Values already in the
//! environment win; a file the user cannot read is skipped (the operator's
//! own environment then applies, as before).

use std::path::Path;

use super::BadInput;

/// Where the package keeps it; `--env-file` / `SYNCWARD_ENV_FILE` name another.
pub const DEFAULT_ENV_FILE: &str = "/etc/syncward/syncward.env";

/// Set on the process that runs with the file's values, so it is read once.
pub const ENV_FILE_LOADED: &str = "SYNCWARD_ENV_FILE_LOADED";

/// The file's variables that the environment does not set yet, in file order.
/// `None` when the file does not exist; a file this user cannot read, or a
/// line that cannot be parsed, is bad input naming the file (and the line).
pub fn variables_to_add(path: &Path) -> Result<Option<Vec<(String, String)>>, BadInput> {
    let origin = path.display().to_string();
    let lines = match dotenvy::from_path_iter(path) {
        Ok(lines) => lines,
        // Only a missing file is skipped: an unreadable one would leave the
        // command without the daemon's database URL and secrets, unsaid.
        Err(dotenvy::Error::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(dotenvy::Error::Io(e)) => return Err(BadInput::unreadable(path, &e)),
        Err(e) => return Err(BadInput::new(origin, "", e.to_string())),
    };
    let mut add = Vec::new();
    for line in lines {
        let (key, value) = line.map_err(|e| match e {
            // Named by its number, never by its text (it may hold a secret).
            dotenvy::Error::LineParse(text, _) => {
                let number = std::fs::read_to_string(path)
                    .ok()
                    .and_then(|all| all.lines().position(|l| l.trim() == text.trim()))
                    .map(|i| format!("line {}: ", i + 1))
                    .unwrap_or_default();
                BadInput::new(
                    &origin,
                    "",
                    format!("{number}not a VARIABLE=value line (quote values with spaces)"),
                )
            }
            other => BadInput::new(&origin, "", other.to_string()),
        })?;
        if std::env::var_os(&key).is_none() {
            add.push((key, value));
        }
    }
    Ok(Some(add))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_adds_what_the_environment_lacks_and_names_a_bad_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("syncward.env");
        // PATH is always set: the environment wins over the file.
        std::fs::write(
            &path,
            "# comment\nSYNCWARD_TEST_ONLY_A=one\nPATH=/nowhere\nSYNCWARD_TEST_ONLY_B='two words'\n",
        )
        .expect("write");
        let add = variables_to_add(&path).expect("parses").expect("readable");
        assert_eq!(
            add,
            vec![
                ("SYNCWARD_TEST_ONLY_A".to_string(), "one".to_string()),
                ("SYNCWARD_TEST_ONLY_B".to_string(), "two words".to_string()),
            ]
        );
        assert_eq!(
            variables_to_add(&dir.path().join("absent")).expect("ok"),
            None
        );
        std::fs::write(&path, "GOOD=1\nNOT A LINE\n").expect("write");
        let bad = variables_to_add(&path).expect_err("a bad line");
        assert!(bad.to_string().contains("syncward.env"), "{bad}");
        assert!(bad.to_string().contains("line 2"), "{bad}");
        assert!(!bad.to_string().contains("NOT A LINE"), "{bad}");
    }
}
