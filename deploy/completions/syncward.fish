# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_syncward_global_optspecs
    string join \n config= env-file= h/help V/version
end

function __fish_syncward_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_syncward_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_syncward_using_subcommand
    set -l cmd (__fish_syncward_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c syncward -n "__fish_syncward_needs_command" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_needs_command" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_needs_command" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_needs_command" -s V -l version -d 'Print version'
complete -c syncward -n "__fish_syncward_needs_command" -f -a "run" -d 'Run the daemon: workers, scheduler and sweeper, until SIGTERM or SIGINT'
complete -c syncward -n "__fish_syncward_needs_command" -f -a "migrate" -d 'Apply the store\'s migrations (safe to repeat)'
complete -c syncward -n "__fish_syncward_needs_command" -f -a "check-config" -d 'Validate the config and print the effective settings, secrets redacted'
complete -c syncward -n "__fish_syncward_needs_command" -f -a "sync" -d 'Publish and operate syncs'
complete -c syncward -n "__fish_syncward_needs_command" -f -a "runs" -d 'Run history'
complete -c syncward -n "__fish_syncward_needs_command" -f -a "token" -d 'Workspace-scoped access tokens for the API and pages'
complete -c syncward -n "__fish_syncward_needs_command" -f -a "ledger" -d 'The delivery ledger'
complete -c syncward -n "__fish_syncward_needs_command" -f -a "deadman" -d 'The dead-man check'
complete -c syncward -n "__fish_syncward_needs_command" -f -a "status" -d 'Live daemons and their busy workers, the queue, running runs, paused syncs and open dead-man incidents. Exit 3 when no daemon is alive'
complete -c syncward -n "__fish_syncward_needs_command" -f -a "completions" -d 'Print a shell completion script (the package installs bash\'s, zsh\'s and fish\'s)'
complete -c syncward -n "__fish_syncward_needs_command" -f -a "man" -d 'Print the manual page (roff; the package installs it as syncward(1))'
complete -c syncward -n "__fish_syncward_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c syncward -n "__fish_syncward_using_subcommand run" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand run" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand run" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand migrate" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand migrate" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand migrate" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand migrate" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand check-config" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand check-config" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand check-config" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand check-config" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -f -a "apply" -d 'Validate sync files and publish them, all or nothing (create or update; a publish unpauses the sync and re-arms its breaker)'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -f -a "list" -d 'List syncs with their status and last run'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -f -a "show" -d 'One sync: definition, status, why it is paused, cursor, versions'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -f -a "delete" -d 'Archive a sync: it never runs again, keeps its history and ledger until retention, and comes back when its file is applied again'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -f -a "resync" -d 'Send every record of the source once more: a new ledger epoch (keys of earlier ones no longer match) and the cursor rewound. A run in progress stops at its next checkpoint and is retried in the new epoch'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -f -a "rollback" -d 'Publish version N of a sync\'s definition again (as a new version)'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -f -a "pause" -d 'Pause a sync: no new runs until it is resumed'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -f -a "resume" -d 'Resume a paused sync (re-arms the breaker)'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -f -a "run" -d 'Run the sync now: queue a run for the daemon, or with --foreground run it in this process and print its outcome'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -f -a "preview" -d 'The next page as a run would see it: mapped records, delivery keys and their ledger state. Writes nothing anywhere'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -f -a "reset-cursor" -d 'Forget the saved cursor: the next run starts from the beginning of the source. Delivered records are still not sent twice (the ledger keeps them)'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -f -a "retry-rejected" -d 'Put quarantined and rejected records back: the next run sends them again, even though the cursor has moved past their page (it goes back to the earliest such page; the ledger replays the rest without calling the destination)'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and not __fish_seen_subcommand_from apply list show delete resync rollback pause resume run preview reset-cursor retry-rejected help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from apply" -l prune -d 'Apply every sync file in DIR too, and archive every sync whose file is in neither DIR nor FILE (same transaction; archived syncs never run, keep their history and come back when their file is applied)' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from apply" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from apply" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from apply" -l plan -d 'Write nothing: print, per sync, what would be created, changed (field by field, with what it means for delivery), left unchanged or archived. Exit 0 when nothing would change, 4 when something would'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from apply" -l skip-attribute-check -d 'Publish even when a Brevo sync maps attributes the account does not have (imports would drop them without a word). Without it, such a file is refused (exit 2) naming them; the check runs only where the sync\'s API key variable is set'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from apply" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from apply" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from list" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from list" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from list" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from show" -l version -d 'Print this published version\'s definition instead (every version is kept; `sync show ID` lists them)' -r
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from show" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from show" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from show" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from delete" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from delete" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from delete" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from delete" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from resync" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from resync" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from resync" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from resync" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from rollback" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from rollback" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from rollback" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from rollback" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from pause" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from pause" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from pause" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from pause" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from resume" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from resume" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from resume" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from resume" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from run" -l wait -d 'With --foreground: wait (up to DURATION, default 15m) for a live holder of the sync to finish instead of exiting 3' -r
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from run" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from run" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from run" -l foreground -d 'Run it here and now, on the same code path the daemon uses'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from run" -l force -d 'Run it even though the sync is paused (once; it stays paused)'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from run" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from run" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from preview" -l limit -d 'How many records of the page to show' -r
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from preview" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from preview" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from preview" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from preview" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from reset-cursor" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from reset-cursor" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from reset-cursor" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from reset-cursor" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from retry-rejected" -l run -d 'Only the records of this run' -r
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from retry-rejected" -l code -d 'Only the records with this code (e.g. attempt_budget_exhausted)' -r
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from retry-rejected" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from retry-rejected" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from retry-rejected" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from retry-rejected" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from help" -f -a "apply" -d 'Validate sync files and publish them, all or nothing (create or update; a publish unpauses the sync and re-arms its breaker)'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from help" -f -a "list" -d 'List syncs with their status and last run'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from help" -f -a "show" -d 'One sync: definition, status, why it is paused, cursor, versions'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from help" -f -a "delete" -d 'Archive a sync: it never runs again, keeps its history and ledger until retention, and comes back when its file is applied again'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from help" -f -a "resync" -d 'Send every record of the source once more: a new ledger epoch (keys of earlier ones no longer match) and the cursor rewound. A run in progress stops at its next checkpoint and is retried in the new epoch'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from help" -f -a "rollback" -d 'Publish version N of a sync\'s definition again (as a new version)'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from help" -f -a "pause" -d 'Pause a sync: no new runs until it is resumed'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from help" -f -a "resume" -d 'Resume a paused sync (re-arms the breaker)'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from help" -f -a "run" -d 'Run the sync now: queue a run for the daemon, or with --foreground run it in this process and print its outcome'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from help" -f -a "preview" -d 'The next page as a run would see it: mapped records, delivery keys and their ledger state. Writes nothing anywhere'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from help" -f -a "reset-cursor" -d 'Forget the saved cursor: the next run starts from the beginning of the source. Delivered records are still not sent twice (the ledger keeps them)'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from help" -f -a "retry-rejected" -d 'Put quarantined and rejected records back: the next run sends them again, even though the cursor has moved past their page (it goes back to the earliest such page; the ledger replays the rest without calling the destination)'
complete -c syncward -n "__fish_syncward_using_subcommand sync; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c syncward -n "__fish_syncward_using_subcommand runs; and not __fish_seen_subcommand_from list show help" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand runs; and not __fish_seen_subcommand_from list show help" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand runs; and not __fish_seen_subcommand_from list show help" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand runs; and not __fish_seen_subcommand_from list show help" -f -a "list" -d 'Recent runs, newest first'
complete -c syncward -n "__fish_syncward_using_subcommand runs; and not __fish_seen_subcommand_from list show help" -f -a "show" -d 'One run: status, attempts, cursors, counts, failure, timeline'
complete -c syncward -n "__fish_syncward_using_subcommand runs; and not __fish_seen_subcommand_from list show help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c syncward -n "__fish_syncward_using_subcommand runs; and __fish_seen_subcommand_from list" -l sync -d 'Only runs of this sync' -r
complete -c syncward -n "__fish_syncward_using_subcommand runs; and __fish_seen_subcommand_from list" -l limit -d 'How many runs to show' -r
complete -c syncward -n "__fish_syncward_using_subcommand runs; and __fish_seen_subcommand_from list" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand runs; and __fish_seen_subcommand_from list" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand runs; and __fish_seen_subcommand_from list" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand runs; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand runs; and __fish_seen_subcommand_from show" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand runs; and __fish_seen_subcommand_from show" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand runs; and __fish_seen_subcommand_from show" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand runs; and __fish_seen_subcommand_from show" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand runs; and __fish_seen_subcommand_from help" -f -a "list" -d 'Recent runs, newest first'
complete -c syncward -n "__fish_syncward_using_subcommand runs; and __fish_seen_subcommand_from help" -f -a "show" -d 'One run: status, attempts, cursors, counts, failure, timeline'
complete -c syncward -n "__fish_syncward_using_subcommand runs; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c syncward -n "__fish_syncward_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -f -a "create" -d 'Create a token that shows and acts on one workspace\'s syncs only (every other workspace is "not found"). It is printed once; only its digest is stored'
complete -c syncward -n "__fish_syncward_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -f -a "list" -d 'List tokens (never the tokens themselves): id, workspace, access, created, revoked'
complete -c syncward -n "__fish_syncward_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -f -a "revoke" -d 'Revoke a token at once'
complete -c syncward -n "__fish_syncward_using_subcommand token; and not __fish_seen_subcommand_from create list revoke help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from create" -l workspace -d 'The workspace it is for (a workspace exists once a sync of it was applied)' -r
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from create" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from create" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from create" -l read-only -d 'It may read but not pause, resume, run or retry'
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from create" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from create" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from list" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from list" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from list" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from revoke" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from revoke" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from revoke" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from revoke" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "create" -d 'Create a token that shows and acts on one workspace\'s syncs only (every other workspace is "not found"). It is printed once; only its digest is stored'
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "list" -d 'List tokens (never the tokens themselves): id, workspace, access, created, revoked'
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "revoke" -d 'Revoke a token at once'
complete -c syncward -n "__fish_syncward_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c syncward -n "__fish_syncward_using_subcommand ledger; and not __fish_seen_subcommand_from purge help" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand ledger; and not __fish_seen_subcommand_from purge help" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand ledger; and not __fish_seen_subcommand_from purge help" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand ledger; and not __fish_seen_subcommand_from purge help" -f -a "purge" -d 'Delete completed delivery keys older than ledger.retention now'
complete -c syncward -n "__fish_syncward_using_subcommand ledger; and not __fish_seen_subcommand_from purge help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c syncward -n "__fish_syncward_using_subcommand ledger; and __fish_seen_subcommand_from purge" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand ledger; and __fish_seen_subcommand_from purge" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand ledger; and __fish_seen_subcommand_from purge" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand ledger; and __fish_seen_subcommand_from purge" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand ledger; and __fish_seen_subcommand_from help" -f -a "purge" -d 'Delete completed delivery keys older than ledger.retention now'
complete -c syncward -n "__fish_syncward_using_subcommand ledger; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c syncward -n "__fish_syncward_using_subcommand deadman; and not __fish_seen_subcommand_from check help" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand deadman; and not __fish_seen_subcommand_from check help" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand deadman; and not __fish_seen_subcommand_from check help" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand deadman; and not __fish_seen_subcommand_from check help" -f -a "check" -d 'Run the dead-man check once now'
complete -c syncward -n "__fish_syncward_using_subcommand deadman; and not __fish_seen_subcommand_from check help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c syncward -n "__fish_syncward_using_subcommand deadman; and __fish_seen_subcommand_from check" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand deadman; and __fish_seen_subcommand_from check" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand deadman; and __fish_seen_subcommand_from check" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand deadman; and __fish_seen_subcommand_from check" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand deadman; and __fish_seen_subcommand_from help" -f -a "check" -d 'Run the dead-man check once now'
complete -c syncward -n "__fish_syncward_using_subcommand deadman; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c syncward -n "__fish_syncward_using_subcommand status" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand status" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand status" -l json -d 'Print JSON for machines instead of text for people'
complete -c syncward -n "__fish_syncward_using_subcommand status" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand completions" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand completions" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand completions" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand man" -l config -d 'Daemon config file (TOML). Without it, /etc/syncward/syncward.toml is read when it exists; SYNCWARD__SECTION__KEY variables override either' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand man" -l env-file -d 'Environment file read before anything else (the unit\'s `EnvironmentFile`), so commands see the daemon\'s database URL and secrets; variables already set win, an unreadable file is skipped' -r -F
complete -c syncward -n "__fish_syncward_using_subcommand man" -s h -l help -d 'Print help'
complete -c syncward -n "__fish_syncward_using_subcommand help; and not __fish_seen_subcommand_from run migrate check-config sync runs token ledger deadman status completions man help" -f -a "run" -d 'Run the daemon: workers, scheduler and sweeper, until SIGTERM or SIGINT'
complete -c syncward -n "__fish_syncward_using_subcommand help; and not __fish_seen_subcommand_from run migrate check-config sync runs token ledger deadman status completions man help" -f -a "migrate" -d 'Apply the store\'s migrations (safe to repeat)'
complete -c syncward -n "__fish_syncward_using_subcommand help; and not __fish_seen_subcommand_from run migrate check-config sync runs token ledger deadman status completions man help" -f -a "check-config" -d 'Validate the config and print the effective settings, secrets redacted'
complete -c syncward -n "__fish_syncward_using_subcommand help; and not __fish_seen_subcommand_from run migrate check-config sync runs token ledger deadman status completions man help" -f -a "sync" -d 'Publish and operate syncs'
complete -c syncward -n "__fish_syncward_using_subcommand help; and not __fish_seen_subcommand_from run migrate check-config sync runs token ledger deadman status completions man help" -f -a "runs" -d 'Run history'
complete -c syncward -n "__fish_syncward_using_subcommand help; and not __fish_seen_subcommand_from run migrate check-config sync runs token ledger deadman status completions man help" -f -a "token" -d 'Workspace-scoped access tokens for the API and pages'
complete -c syncward -n "__fish_syncward_using_subcommand help; and not __fish_seen_subcommand_from run migrate check-config sync runs token ledger deadman status completions man help" -f -a "ledger" -d 'The delivery ledger'
complete -c syncward -n "__fish_syncward_using_subcommand help; and not __fish_seen_subcommand_from run migrate check-config sync runs token ledger deadman status completions man help" -f -a "deadman" -d 'The dead-man check'
complete -c syncward -n "__fish_syncward_using_subcommand help; and not __fish_seen_subcommand_from run migrate check-config sync runs token ledger deadman status completions man help" -f -a "status" -d 'Live daemons and their busy workers, the queue, running runs, paused syncs and open dead-man incidents. Exit 3 when no daemon is alive'
complete -c syncward -n "__fish_syncward_using_subcommand help; and not __fish_seen_subcommand_from run migrate check-config sync runs token ledger deadman status completions man help" -f -a "completions" -d 'Print a shell completion script (the package installs bash\'s, zsh\'s and fish\'s)'
complete -c syncward -n "__fish_syncward_using_subcommand help; and not __fish_seen_subcommand_from run migrate check-config sync runs token ledger deadman status completions man help" -f -a "man" -d 'Print the manual page (roff; the package installs it as syncward(1))'
complete -c syncward -n "__fish_syncward_using_subcommand help; and not __fish_seen_subcommand_from run migrate check-config sync runs token ledger deadman status completions man help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from sync" -f -a "apply" -d 'Validate sync files and publish them, all or nothing (create or update; a publish unpauses the sync and re-arms its breaker)'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from sync" -f -a "list" -d 'List syncs with their status and last run'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from sync" -f -a "show" -d 'One sync: definition, status, why it is paused, cursor, versions'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from sync" -f -a "delete" -d 'Archive a sync: it never runs again, keeps its history and ledger until retention, and comes back when its file is applied again'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from sync" -f -a "resync" -d 'Send every record of the source once more: a new ledger epoch (keys of earlier ones no longer match) and the cursor rewound. A run in progress stops at its next checkpoint and is retried in the new epoch'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from sync" -f -a "rollback" -d 'Publish version N of a sync\'s definition again (as a new version)'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from sync" -f -a "pause" -d 'Pause a sync: no new runs until it is resumed'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from sync" -f -a "resume" -d 'Resume a paused sync (re-arms the breaker)'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from sync" -f -a "run" -d 'Run the sync now: queue a run for the daemon, or with --foreground run it in this process and print its outcome'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from sync" -f -a "preview" -d 'The next page as a run would see it: mapped records, delivery keys and their ledger state. Writes nothing anywhere'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from sync" -f -a "reset-cursor" -d 'Forget the saved cursor: the next run starts from the beginning of the source. Delivered records are still not sent twice (the ledger keeps them)'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from sync" -f -a "retry-rejected" -d 'Put quarantined and rejected records back: the next run sends them again, even though the cursor has moved past their page (it goes back to the earliest such page; the ledger replays the rest without calling the destination)'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from runs" -f -a "list" -d 'Recent runs, newest first'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from runs" -f -a "show" -d 'One run: status, attempts, cursors, counts, failure, timeline'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from token" -f -a "create" -d 'Create a token that shows and acts on one workspace\'s syncs only (every other workspace is "not found"). It is printed once; only its digest is stored'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from token" -f -a "list" -d 'List tokens (never the tokens themselves): id, workspace, access, created, revoked'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from token" -f -a "revoke" -d 'Revoke a token at once'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from ledger" -f -a "purge" -d 'Delete completed delivery keys older than ledger.retention now'
complete -c syncward -n "__fish_syncward_using_subcommand help; and __fish_seen_subcommand_from deadman" -f -a "check" -d 'Run the dead-man check once now'
