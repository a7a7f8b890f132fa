//! The `syncward` binary: parse the command line, run the command, and exit
//! with the code its outcome has (`commands::exit_code`).

use std::process::ExitCode;

use clap::Parser;
use clap::error::ErrorKind;
use syncward::cli::{Cli, Command};

fn main() -> ExitCode {
    // A shell asking for completions (`COMPLETE=bash syncward …`): the unit's
    // env file first, where the store's URL usually is, then the answer.
    if std::env::var_os("COMPLETE").is_some_and(|v| !v.is_empty() && v != "0") {
        let env_file = std::env::var_os("SYNCWARD_ENV_FILE")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| syncward::config::DEFAULT_ENV_FILE.into());
        // An unreadable file only means no ids to offer.
        let _ = restart_with_env_file(&env_file);
        clap_complete::CompleteEnv::with_factory(<Cli as clap::CommandFactory>::command)
            .completer("syncward")
            .complete();
    }
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
            // block after it would break the one-line promise. Its suggestion
            // ("tip: a similar subcommand exists: 'status'") joins that line.
            let rendered = e.render().to_string();
            let first = rendered.lines().next().unwrap_or("error: bad arguments");
            match rendered
                .lines()
                .map(str::trim)
                .find(|l| l.starts_with("tip:"))
            {
                Some(tip) => eprintln!("{first} ({tip})"),
                None => eprintln!("{first}"),
            }
            return ExitCode::from(2);
        }
    };
    // Printed from the command line's own description: no config, no services.
    match &cli.command {
        Command::Completions { shell } => {
            return match completion_registration(*shell) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot write the completion script: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        Command::Man => {
            return match syncward::cli::render_man(&mut std::io::stdout()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: cannot write the manual page: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        _ => {}
    }
    // The unit's environment file, for commands run by hand: this process is
    // replaced by itself with the file's variables added (exec keeps the pid,
    // which systemd's notify socket needs), so every part sees one environment.
    if let Err(code) = restart_with_env_file(&cli.env_file) {
        return code;
    }
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
    let result = match cli.command {
        Command::Run => runtime.block_on(run_daemon(cli.config)),
        _ => runtime.block_on(syncward::commands::execute(cli)),
    };
    // Dropping a runtime waits for its blocking tasks without limit; the work is
    // done, so give them a moment and no more.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    syncward::commands::exit_code(result)
}

/// `syncward run`: the only place that touches OS signals. The first SIGTERM or
/// SIGINT starts the drain and arms the hard exit; a second one exits at once.
/// SIGHUP asks the daemon to reload its config; during the drain it is ignored.
async fn run_daemon(config: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    use futures::StreamExt;
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    use syncward::config::{ConfigSource, Settings};
    use syncward::reload::Reload;
    use syncward::shutdown::Shutdown;

    let source = ConfigSource::resolve(config);
    let settings = Settings::load(&source)?;
    settings.install_outbound_policy();
    let log = syncward::logging::init(&settings.log, syncward::logging::Audience::Daemon)?;
    let reload = Reload::new(source, log);
    let shutdown = Shutdown::new(settings.shutdown.drain_deadline);
    let hard_exit_after = settings.shutdown.hard_exit_after;
    let mut signals = signal_hook_tokio::Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    let on_signal = shutdown.clone();
    let on_hangup = reload.clone();
    // Not on the shutdown's tracker: this task waits for a second signal for as
    // long as the drain lasts, so the drain must not wait for it.
    tokio::spawn(async move {
        while let Some(signal) = signals.next().await {
            if signal == SIGHUP {
                if on_signal.is_stopping() {
                    tracing::info!("SIGHUP during the drain; ignored");
                } else {
                    on_hangup.request();
                }
                continue;
            }
            if on_signal.is_stopping() {
                eprintln!("syncward: second signal; exiting now");
                std::process::exit(130);
            }
            tracing::info!(signal, "Signal received; draining");
            on_signal.begin();
            // A plain thread, so the hard exit happens even if the runtime is
            // stuck in blocking code.
            std::thread::spawn(move || {
                std::thread::sleep(hard_exit_after);
                eprintln!(
                    "syncward: still running {}s after the signal; exiting now",
                    hard_exit_after.as_secs()
                );
                std::process::exit(1);
            });
        }
    });
    let result = syncward::commands::run_daemon::run(settings, shutdown.clone(), reload).await;
    if result.is_err() {
        // Startup failed: stop the signal task too.
        shutdown.begin();
    }
    result
}

/// Replaces this process by itself with `env_file`'s variables added (exec
/// keeps the pid, which systemd's notify socket needs), once; returns when
/// there is nothing to add. An error is printed, and its exit code returned.
fn restart_with_env_file(env_file: &std::path::Path) -> Result<(), ExitCode> {
    if std::env::var_os(syncward::config::ENV_FILE_LOADED).is_some() {
        return Ok(());
    }
    match syncward::config::variables_to_add(env_file) {
        Ok(Some(add)) if !add.is_empty() => {
            use std::os::unix::process::CommandExt;
            let error = std::process::Command::new("/proc/self/exe")
                .arg0(std::env::args_os().next().unwrap_or_default())
                .args(std::env::args_os().skip(1))
                .envs(add)
                .env(syncward::config::ENV_FILE_LOADED, "1")
                .exec();
            // exec returns only when it failed.
            eprintln!("error: cannot restart with {}: {error}", env_file.display());
            Err(ExitCode::FAILURE)
        }
        Ok(_) => Ok(()),
        Err(bad) => Err(syncward::commands::exit_code(Err(bad.into()))),
    }
}

/// The shell's registration of dynamic completion: the script calls
/// `syncward` back for each completion, so sync ids come from the store.
fn completion_registration(shell: clap_complete::Shell) -> std::io::Result<()> {
    use clap_complete::env::{Bash, Elvish, EnvCompleter, Fish, Powershell, Zsh};
    let completer: &dyn EnvCompleter = match shell {
        clap_complete::Shell::Bash => &Bash,
        clap_complete::Shell::Zsh => &Zsh,
        clap_complete::Shell::Fish => &Fish,
        clap_complete::Shell::Elvish => &Elvish,
        clap_complete::Shell::PowerShell => &Powershell,
        _ => return Err(std::io::Error::other("this shell is not supported")),
    };
    completer.write_registration(
        "COMPLETE",
        "syncward",
        "syncward",
        "syncward",
        &mut std::io::stdout(),
    )
}
