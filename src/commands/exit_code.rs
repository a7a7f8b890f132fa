//! The one place a command's outcome becomes its exit code, its error
//! printed on one line (or one line per bad input): 0 success, 2 bad input
//! (a store whose schema is behind included), 3 a foreground run found a
//! live holder of its sync or `status` no live daemon, 4 `sync apply --plan`
//! found changes, 1 anything else.

use std::process::ExitCode;

use super::{NoLiveDaemon, PlanHasChanges, SyncBusy};
use crate::config::{BadInput, BadInputs};
use crate::ops::OpsError;

/// The exit code of a command that ended with `result`, its error printed.
pub fn exit_code(result: anyhow::Result<()>) -> ExitCode {
    // A reader that closed stdout (`syncward runs list | head -3`) only ended
    // the output early: exit as if it had all been read. Any other failure to
    // write it is an error.
    let output_failed =
        super::output::take_failure().filter(|e| e.kind() != std::io::ErrorKind::BrokenPipe);
    match result {
        Ok(()) => match output_failed {
            None => ExitCode::SUCCESS,
            Some(e) => {
                eprintln!("error: cannot write to standard output: {e}");
                ExitCode::FAILURE
            }
        },
        Err(error) => {
            if error.chain().any(|e| e.is::<PlanHasChanges>()) {
                // The plan is printed; 4 tells a script there is something to apply.
                ExitCode::from(4)
            } else if let Some(bad) = error.chain().find_map(|e| e.downcast_ref::<BadInput>()) {
                eprintln!("error: {bad}");
                ExitCode::from(2)
            } else if let Some(all) = error.chain().find_map(|e| e.downcast_ref::<BadInputs>()) {
                for bad in &all.0 {
                    eprintln!("error: {bad}");
                }
                ExitCode::from(2)
            } else if let Some(OpsError::BadInput(why)) =
                error.chain().find_map(|e| e.downcast_ref::<OpsError>())
            {
                eprintln!("error: {why}");
                ExitCode::from(2)
            } else if let Some(busy) = error.chain().find_map(|e| e.downcast_ref::<SyncBusy>()) {
                eprintln!("error: {busy}");
                ExitCode::from(3)
            } else if let Some(none) = error.chain().find_map(|e| e.downcast_ref::<NoLiveDaemon>())
            {
                eprintln!("error: {none}");
                ExitCode::from(3)
            } else {
                eprintln!("error: {}", one_line(&error));
                ExitCode::FAILURE
            }
        }
    }
}

/// The error chain on one line, without the repeats that arise when an error's
/// message already quotes its source (sqlx does).
fn one_line(error: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in error.chain() {
        let message = cause.to_string().replace('\n', " ");
        let repeated = parts.last().is_some_and(|previous: &String| {
            let tail = previous.rsplit(": ").next().unwrap_or(previous);
            previous.contains(&message) || message.contains(tail)
        });
        if !repeated {
            parts.push(message);
        }
    }
    parts.join(": ")
}
