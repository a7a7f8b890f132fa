//! The command line (docs/contract.md §3), as clap types only; `commands/` carries them out.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "syncward",
    version,
    about = "Crash-safe sync runner: sources to destinations, never twice"
)]
pub struct Cli {
    /// Daemon config file (TOML; else /etc/syncward/syncward.toml if it exists)
    // The env value is hidden so that a line stays one line wherever the file is.
    // Listed after each subcommand's own options: they are every command's.
    #[arg(
        long,
        global = true,
        env = "SYNCWARD_CONFIG",
        hide_env_values = true,
        value_name = "PATH",
        display_order = 900
    )]
    pub config: Option<PathBuf>,

    /// Environment file read first, as the unit's (variables already set win)
    // One line in every subcommand's help; the man page and docs/usage.md
    // say the rest (a missing file is skipped, an unreadable one is exit 2).
    #[arg(long, global = true, env = "SYNCWARD_ENV_FILE", hide_env_values = true, value_name = "PATH",
          default_value = crate::config::DEFAULT_ENV_FILE, display_order = 901)]
    pub env_file: PathBuf,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: workers, scheduler and sweeper, until SIGTERM or SIGINT.
    Run,
    /// Apply the store's migrations (safe to repeat).
    Migrate(JsonFlag),
    /// Validate the config and print the effective settings, secrets redacted.
    CheckConfig(JsonFlag),
    /// Try what the daemon needs, one line each: the store (reachable, schema
    /// current), Redis, and each sync's source (a page read, nothing
    /// written) and destination credentials. Exit 1 when any fails.
    Doctor(JsonFlag),
    /// Publish and operate syncs.
    #[command(subcommand)]
    Sync(SyncCommand),
    /// Run history.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Workspace-scoped access tokens for the API and pages.
    #[command(subcommand)]
    Token(TokenCommand),
    /// The delivery ledger.
    #[command(subcommand)]
    Ledger(LedgerCommand),
    /// The dead-man check.
    #[command(subcommand)]
    Deadman(DeadmanCommand),
    /// Forget people: take each address out of everything syncward holds
    /// (rejected records, kept states, run timelines and failure messages,
    /// alerts, the audit log, cursors, the ledger's answers), and write an
    /// audit entry naming their SHA-256 digests. For an erasure request
    /// (GDPR, Shopify's customers/redact); erase them at the source first.
    Forget(ForgetArgs),
    /// What the syncs did with one address: each call that carried it
    /// (newest first: run, when, what was sent, what the destination
    /// answered, where its delivery key stands), its rejections, and a diff
    /// or mirror sync's kept state and removals of it. Looked up by a keyed
    /// digest; as far back as the ledger keeps keys (`ledger.retention`).
    Trace(TraceArgs),
    /// Live daemons and their busy workers, the queue, running runs, paused
    /// syncs and open dead-man incidents. Exit 3 when no daemon is alive.
    Status(JsonFlag),
    /// Print a shell's completion script (the package installs bash's, zsh's
    /// and fish's). It calls syncward back as you type, so sync ids are
    /// completed from the store.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff; the package installs it as syncward(1)).
    Man,
}

/// The shells complete sync ids from the store (`COMPLETE=bash syncward`).
fn sync_ids() -> clap_complete::ArgValueCompleter {
    clap_complete::ArgValueCompleter::new(crate::completion::sync_id_candidates)
}

#[derive(Debug, Args)]
pub struct ForgetArgs {
    /// The e-mail addresses to forget.
    #[arg(required = true, value_name = "EMAIL")]
    pub addresses: Vec<String>,
    /// Also delete each contact in every Brevo account the workspace's syncs
    /// write to or wrote to (`DELETE /contacts/{email}`), and no other
    /// workspace's. Webhook receivers are named, not called.
    #[arg(long)]
    pub destination: bool,
    /// The workspace whose request this is: only its syncs' accounts are
    /// asked. Needed with --destination when more than one workspace holds
    /// syncs. (The store step takes the addresses out of every workspace's
    /// rows either way.)
    #[arg(long)]
    pub workspace: Option<String>,
    /// Print JSON for machines instead of text for people.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct TraceArgs {
    /// The e-mail address.
    #[arg(value_name = "ADDRESS")]
    pub address: String,
    /// Look in this sync only.
    #[arg(long, add = sync_ids())]
    pub sync: Option<String>,
    /// Show at most this many calls (newest first).
    #[arg(long, default_value_t = crate::ops::DEFAULT_CALLS)]
    pub calls: usize,
    /// Print JSON for machines instead of text for people.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum DeadmanCommand {
    /// Run the dead-man check once now.
    Check(JsonFlag),
}

#[derive(Debug, Subcommand)]
pub enum LedgerCommand {
    /// Delete completed delivery keys older than ledger.retention now.
    Purge(JsonFlag),
}

#[derive(Debug, Subcommand)]
pub enum SyncCommand {
    /// Validate sync files and publish them, all or nothing (create or update; a
    /// publish unpauses the sync and re-arms its breaker).
    Apply {
        /// Sync definition files (TOML), or directories whose `*.toml` files
        /// (subdirectories included) are all read.
        #[arg(required_unless_present = "prune", value_name = "FILE|DIR")]
        files: Vec<PathBuf>,
        /// Write nothing: print, per sync, what would be created, changed (field
        /// by field, with what it means for delivery), left unchanged or
        /// archived. Exit 0 when nothing would change, 4 when something would.
        #[arg(long)]
        plan: bool,
        /// Apply every sync file in DIR too, and archive every sync whose file
        /// is in neither DIR nor FILE (same transaction; archived syncs never
        /// run, keep their history and come back when their file is applied).
        #[arg(long, value_name = "DIR")]
        prune: Option<PathBuf>,
        /// Publish even when a Brevo sync maps attributes the account does not
        /// have (imports would drop them without a word). Without it, such a
        /// file is refused (exit 2) naming them; the check runs only where the
        /// sync's API key variable is set.
        #[arg(long)]
        skip_attribute_check: bool,
        /// Publish without checking the source from here (its query, its
        /// columns against the cursor and the mapping, a sample of its
        /// records): for a source this machine cannot reach. Without it, a
        /// source that cannot be checked refuses the file (exit 2).
        #[arg(long)]
        no_source_check: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// List syncs with their status and last run.
    List(JsonFlag),
    /// One sync: definition, status, why it is paused, cursor, versions.
    Show {
        /// The sync's id (`syncward sync list` shows them).
        #[arg(add = sync_ids())]
        id: String,
        /// Print this published version's definition instead (every version
        /// is kept; `sync show ID` lists them).
        #[arg(long, value_name = "N")]
        version: Option<i32>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Archive a sync: it never runs again, keeps its history and ledger until
    /// retention, and comes back when its file is applied again.
    Delete {
        /// The sync's id (`syncward sync list` shows them).
        #[arg(add = sync_ids())]
        id: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Send every record of the source once more: a new ledger epoch (keys of
    /// earlier ones no longer match) and the cursor rewound. A run in progress
    /// stops at its next checkpoint and is retried in the new epoch.
    Resync {
        /// The sync's id (`syncward sync list` shows them).
        #[arg(add = sync_ids())]
        id: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Move a sync to another workspace (the command line only): its
    /// definition (a new version; its secrets then come from that
    /// workspace's file), runs, rejected records, versions, cursor and
    /// ledger go with it. `sync apply` never moves a sync.
    Move {
        /// The sync's id (`syncward sync list` shows them).
        #[arg(add = sync_ids())]
        id: String,
        /// The workspace it moves to.
        #[arg(long)]
        workspace: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Publish version N of a sync's definition again (as a new version).
    Rollback {
        /// The sync's id (`syncward sync list` shows them).
        #[arg(add = sync_ids())]
        id: String,
        /// The version to publish again (`syncward sync show ID` lists them).
        version: i32,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Pause a sync: no new runs until it is resumed.
    Pause {
        /// The sync's id (`syncward sync list` shows them).
        #[arg(add = sync_ids())]
        id: String,
        /// Why, in one line: shown with the pause (pages, `sync list`,
        /// `sync show`) until it is resumed, and kept in the audit log.
        #[arg(long, value_name = "TEXT")]
        reason: Option<String>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Resume a paused sync (re-arms the breaker).
    Resume {
        /// The sync's id (`syncward sync list` shows them).
        #[arg(add = sync_ids())]
        id: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Run the sync now: queue a run for the daemon, or with --foreground run it
    /// in this process and print its outcome.
    Run {
        /// The sync's id (`syncward sync list` shows them).
        #[arg(add = sync_ids())]
        id: String,
        /// Run it here and now, on the same code path the daemon uses.
        #[arg(long)]
        foreground: bool,
        /// With --foreground: read only the record(s) whose mapped e-mail is
        /// ADDRESS (a Postgres query filtered on that column, Shopify's
        /// search by e-mail; an http source cannot) and send them through
        /// the same path (ledger, consent, attribute checks), printing what
        /// was sent and what came back. The cursor does not move.
        #[arg(long, value_name = "ADDRESS", requires = "foreground")]
        only: Option<String>,
        /// Run it even though the sync is paused (once; it stays paused).
        #[arg(long)]
        force: bool,
        /// Queued: follow the run to its end (up to DURATION, default 15m)
        /// as `runs watch` does, and exit as it ended. With --foreground:
        /// wait up to DURATION for a live holder of the sync to finish
        /// instead of exiting 3.
        #[arg(long, value_name = "DURATION", num_args = 0..=1, default_missing_value = "15m",
              value_parser = humantime::parse_duration)]
        wait: Option<std::time::Duration>,
        /// Print JSON: the queued run (`{"sync", "run_id", "new"}`, as the
        /// API answers), or with --foreground or --wait one object per line.
        #[command(flatten)]
        json: JsonFlag,
    },
    /// The next page as a run would see it: mapped records, delivery keys and
    /// their ledger state. Writes nothing anywhere.
    Preview {
        /// The sync's id (`syncward sync list` shows them).
        #[arg(add = sync_ids())]
        id: String,
        /// How many records of the page to show.
        #[arg(long, default_value_t = 10)]
        limit: usize,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Forget the saved cursor: the next run starts from the beginning of the
    /// source. Delivered records are still not sent twice (the ledger keeps them).
    ResetCursor {
        /// The sync's id (`syncward sync list` shows them).
        #[arg(add = sync_ids())]
        id: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Put quarantined and rejected records back: the next run sends them
    /// again, even though the cursor has moved past their page (it goes back
    /// to the earliest such page; the ledger replays the rest without
    /// calling the destination).
    RetryRejected {
        /// The sync's id (`syncward sync list` shows them).
        #[arg(add = sync_ids())]
        id: String,
        /// Only the records of this run.
        #[arg(long, value_name = "RUN_ID")]
        run: Option<i64>,
        /// Only the records with this code (e.g. attempt_budget_exhausted).
        #[arg(long)]
        code: Option<String>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// The records a mirror run refused to take off the destination
    /// (`mirror_removal_refused`), by address, a page at a time.
    Removals {
        /// The refused run's number (`syncward runs list` shows them).
        run_id: i64,
        /// Which page of addresses (from 1).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(i64).range(1..))]
        page: i64,
        /// Addresses a page (1–10000).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..=10000))]
        per_page: i64,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Approve the removals a mirror run held: the sync's next run takes
    /// off exactly those still absent from the query (recorded in the
    /// audit log with who approved them).
    ApproveRemovals {
        /// The refused run's number.
        run_id: i64,
        #[command(flatten)]
        json: JsonFlag,
    },
}

#[derive(Debug, Subcommand)]
pub enum RunsCommand {
    /// Recent runs, newest first.
    List {
        /// Only runs of this sync.
        #[arg(long, value_name = "ID", add = sync_ids())]
        sync: Option<String>,
        /// Only runs of this workspace's syncs.
        #[arg(long, value_name = "WORKSPACE")]
        workspace: Option<String>,
        /// Only runs in this state: queued, running, succeeded, failed or skipped.
        #[arg(long, value_name = "STATUS",
              value_parser = ["queued", "running", "succeeded", "failed", "skipped"])]
        status: Option<String>,
        /// Only runs queued since then: a duration ago (`2h`, `7d`) or a time
        /// (`2026-12-01T08:00:00Z`).
        #[arg(long, value_name = "WHEN", value_parser = parse_since)]
        since: Option<chrono::DateTime<chrono::Utc>>,
        /// How many runs to show.
        #[arg(long, default_value_t = 50)]
        limit: i64,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// One run: status, attempts, cursors, counts, failure, imports and
    /// timeline (imports summarised; every one with --all).
    Show {
        /// The run's number (`syncward runs list` shows them).
        run_id: i64,
        /// List every import and timeline event instead of a summary.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Follow a run to its end, a line per change (queued, each page,
    /// retries); exit 0 when it succeeds, 1 when it fails, 3 when it was
    /// skipped for a busy sync.
    Watch {
        /// The run's number (`syncward sync run ID` prints it).
        run_id: i64,
        /// Print one JSON object per change.
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Cancel a run: a queued one ends now, a running one stops at its next
    /// clean batch (both end `skipped`, `run_cancelled`; the cursor keeps
    /// every batch sent).
    Cancel {
        /// The run's number (`syncward runs list` shows them).
        run_id: i64,
        #[command(flatten)]
        json: JsonFlag,
    },
}

/// `--since`: a duration ago, or an RFC 3339 time.
fn parse_since(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    if let Ok(at) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(at.with_timezone(&chrono::Utc));
    }
    let ago = humantime::parse_duration(text).map_err(|e| {
        format!("{e}: give a duration ago (2h, 7d) or a time (2026-12-01T08:00:00Z)")
    })?;
    chrono::Duration::from_std(ago)
        .ok()
        .and_then(|ago| chrono::Utc::now().checked_sub_signed(ago))
        .ok_or_else(|| format!("{text} ago is before any time there can be a run"))
}

#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Print JSON for machines instead of text for people.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token that shows and acts on one workspace's syncs only
    /// (every other workspace is "not found"). It is printed once; only its
    /// digest is stored.
    Create {
        /// The workspace it is for (a workspace exists once a sync of it was applied).
        #[arg(long)]
        workspace: String,
        /// It may read but not pause, resume, run or retry.
        #[arg(long)]
        read_only: bool,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// List tokens (never the tokens themselves): id, workspace, access, created, revoked.
    List(JsonFlag),
    /// Revoke a token at once.
    Revoke {
        /// The token's id (`syncward token list` shows them).
        id: i64,
        #[command(flatten)]
        json: JsonFlag,
    },
}

/// The manual page: clap's own sections, then every command with what it
/// does (one page: no `syncward-sync(1)` pages exist to point to), then
/// EXIT STATUS, FILES and ENVIRONMENT.
pub fn render_man(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    let command = <Cli as clap::CommandFactory>::command();
    let man = clap_mangen::Man::new(command.clone());
    man.render_title(out)?;
    man.render_name_section(out)?;
    man.render_synopsis_section(out)?;
    man.render_description_section(out)?;
    man.render_options_section(out)?;
    writeln!(out, ".SH COMMANDS")?;
    for sub in command.get_subcommands() {
        commands_of(out, "syncward", sub)?;
    }
    out.write_all(MAN_TAIL.as_bytes())?;
    man.render_version_section(out)
}

/// A command, or each of its own commands, as `.TP` entries.
fn commands_of(
    out: &mut dyn std::io::Write,
    parent: &str,
    command: &clap::Command,
) -> std::io::Result<()> {
    let path = format!("{parent} {}", command.get_name());
    if command.has_subcommands() {
        for sub in command.get_subcommands() {
            commands_of(out, &path, sub)?;
        }
        return Ok(());
    }
    let about = command
        .get_long_about()
        .or_else(|| command.get_about())
        .map(|a| a.to_string())
        .unwrap_or_default();
    writeln!(out, ".TP\n\\fB{}\\fR", roff_text(&path))?;
    writeln!(out, "{}", roff_text(&about.replace('\n', " ")))?;
    // The command's own arguments and flags (the global two are listed once,
    // under OPTIONS).
    for arg in command
        .get_arguments()
        .filter(|a| !a.is_global_set() && !a.is_hide_set() && a.get_id() != "help")
    {
        let name = match (arg.get_long(), arg.get_value_names()) {
            (Some(long), Some(values)) => format!("--{long} <{}>", values.join(" ")),
            (Some(long), None) if arg.get_action().takes_values() => {
                format!("--{long} <{}>", arg.get_id().as_str().to_uppercase())
            }
            (Some(long), None) => format!("--{long}"),
            (None, _) => format!("<{}>", arg.get_id().as_str().to_uppercase()),
        };
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        writeln!(
            out,
            ".RS\n.TP\n\\fI{}\\fR\n{}\n.RE",
            roff_text(&name),
            roff_text(&help.replace('\n', " "))
        )?;
    }
    Ok(())
}

/// Text safe in a roff body: backslashes escaped, no line starting with a
/// control character.
fn roff_text(text: &str) -> String {
    let escaped = text.replace('\\', "\\e").replace('-', "\\-");
    if escaped.starts_with(['.', '\'']) {
        format!("\\&{escaped}")
    } else {
        escaped
    }
}

const MAN_TAIL: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Success.
.TP
\fB1\fR
Failure: a run failed, a check of \fBdoctor\fR failed, a service could not be reached.
.TP
\fB2\fR
Bad input, named by file and key: the config, a sync file, an argument; also a store whose schema is behind the binary (run \fBsyncward migrate\fR). The unit's RestartPreventExitStatus=2 keeps systemd from restarting on it.
.TP
\fB3\fR
Busy: a foreground run (or \fBruns watch\fR) found another run of the sync in progress; \fBstatus\fR found no live daemon.
.TP
\fB4\fR
\fBsync apply \-\-plan\fR found changes to apply.
.SH FILES
.TP
\fB/etc/syncward/syncward.toml\fR
The daemon's config (root:syncward, mode 0640); \fB\-\-config\fR or SYNCWARD_CONFIG names another.
.TP
\fB/etc/syncward/syncward.env\fR
The unit's EnvironmentFile (database and Redis URLs, tokens); commands read it too (\fB\-\-env\-file\fR).
.TP
\fB/etc/syncward/secrets/\fR
Each workspace's secrets file (API keys, source URLs) that its sync files name by variable (secrets.dir).
.TP
\fB/usr/share/doc/syncward/\fR
The README, the docs, and examples: sync files, env files, the alert rules and the Grafana dashboard.
.SH ENVIRONMENT
.TP
\fBSYNCWARD__SECTION__KEY\fR
Overrides one config key (e.g. SYNCWARD__DATABASE__URL, SYNCWARD__HTTP__ADMIN_TOKEN).
.TP
\fBSYNCWARD_CONFIG\fR
The config file to read instead of /etc/syncward/syncward.toml.
.TP
\fBSYNCWARD_ENV_FILE\fR
The environment file read before anything else.
.TP
\fBNOTIFY_SOCKET\fR, \fBJOURNAL_STREAM\fR
Set by systemd: readiness and watchdog notifications; log lines with their priority.
.SH "SEE ALSO"
\fBsystemctl\fR(1), \fBjournalctl\fR(1); /usr/share/doc/syncward/README.md.
"#;
