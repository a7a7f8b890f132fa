//! The `syncward` binary: parse the command line, run the command, and map the
//! outcome to an exit code: 0 success, 2 bad input, 1 anything else.

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;
use syncward::cli::Cli;
use syncward::config::BadInput;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            // Printing help can only fail on a closed stdout; nothing to report then.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            // `syncward sync` alone: the help is the useful answer, but it is still
            // incomplete input.
            let _ = e.print();
            return ExitCode::from(2);
        }
        Err(e) => {
            // clap's first line names the argument and the problem; the usage
            // block after it would break the one-line promise.
            let rendered = e.render().to_string();
            eprintln!(
                "{}",
                rendered.lines().next().unwrap_or("error: bad arguments")
            );
            return ExitCode::from(2);
        }
    };
    // reqwest, sqlx and sentry are built without a default crypto provider: pick
    // ring once, before any of them opens a connection. It fails only if one is
    // already installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(syncward::commands::execute(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            if let Some(bad) = error.chain().find_map(|e| e.downcast_ref::<BadInput>()) {
                eprintln!("error: {bad}");
                ExitCode::from(2)
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
