//! Daemon config: defaults, TOML, environment overrides, and one-line refusals.

use std::io::Write;

use crate::helpers::Syncward;

fn config_file(text: &str) -> anyhow::Result<tempfile::NamedTempFile> {
    let mut file = tempfile::Builder::new().suffix(".toml").tempfile()?;
    file.write_all(text.as_bytes())?;
    Ok(file)
}

#[tokio::test]
async fn check_config_prints_the_defaults_of_the_design() -> anyhow::Result<()> {
    let out = Syncward::bare().run(&["check-config"]).await?.ok()?;
    let printed: toml::Table = toml::from_str(
        &out.stdout
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n"),
    )?;
    assert_eq!(printed["workers"]["count"].as_integer(), Some(4));
    assert_eq!(printed["lease"]["ttl"].as_str(), Some("15m"));
    assert_eq!(printed["lease"]["renew_every"].as_str(), Some("5m"));
    assert_eq!(printed["retry"]["max_attempts"].as_integer(), Some(5));
    assert_eq!(printed["retry"]["backoff_base"].as_str(), Some("1m"));
    assert_eq!(printed["sweeper"]["stuck_after"].as_str(), Some("1h"));
    assert_eq!(printed["ledger"]["record_attempts"].as_integer(), Some(3));
    assert_eq!(
        printed["breaker"]["consecutive_failures"].as_integer(),
        Some(5)
    );
    assert_eq!(
        printed["deadman"]["schedule"].as_str(),
        Some("0 13 * * * *")
    );
    assert_eq!(printed["shutdown"]["drain_deadline"].as_str(), Some("15s"));
    assert_eq!(printed["shutdown"]["hard_exit_after"].as_str(), Some("25s"));
    assert_eq!(printed["redis"]["key_prefix"].as_str(), Some("syncward"));
    assert_eq!(printed["http"]["listen"].as_str(), Some("127.0.0.1:8080"));
    // Durations as they are written, never `2months 29days 2h 52m 48s`.
    assert_eq!(printed["ledger"]["retention"].as_str(), Some("7d"));
    assert_eq!(printed["retention"]["alerts"].as_str(), Some("90d"));
    Ok(())
}

#[tokio::test]
async fn toml_values_apply_and_an_env_variable_wins_over_the_file() -> anyhow::Result<()> {
    let file = config_file(
        "[database]\nurl = \"postgres://from-file@127.0.0.1/a\"\n[workers]\ncount = 7\npoll_interval = \"250ms\"\n",
    )?;
    let out = Syncward::bare()
        .with_config(file.path())
        .with_env("SYNCWARD__DATABASE__URL", "postgres://from-env@127.0.0.1/b")
        .with_env("SYNCWARD__LEASE__TTL", "20m")
        .run(&["check-config"])
        .await?
        .ok()?;
    assert!(
        out.stdout
            .contains("url = \"postgres://from-env@127.0.0.1/b\""),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("from-file"));
    assert!(out.stdout.contains("count = 7"));
    assert!(out.stdout.contains("poll_interval = \"250ms\""));
    assert!(out.stdout.contains("ttl = \"20m\""));
    Ok(())
}

/// A variable with one underscore (`SYNCWARD_DATABASE_URL`) is read by
/// nothing: it is named on stderr with the spelling that is read, instead
/// of the defaults applying without a word.
#[tokio::test]
async fn a_setting_variable_with_one_underscore_is_named_not_ignored() -> anyhow::Result<()> {
    let out = Syncward::bare()
        .with_env("SYNCWARD_DATABASE_URL", "postgres://meant@127.0.0.1/x")
        .run(&["check-config"])
        .await?
        .ok()?;
    assert!(
        out.stderr.contains(
            "warning: SYNCWARD_DATABASE_URL is not read: a setting's variable has two underscores"
        ) && out.stderr.contains("(SYNCWARD__DATABASE__URL)"),
        "{}",
        out.stderr
    );
    Ok(())
}

#[tokio::test]
async fn check_config_never_prints_a_secret() -> anyhow::Result<()> {
    let file = config_file(
        r#"
[database]
url = "postgres://app:db-secret-pw@127.0.0.1:5432/sync"
[redis]
url = "redis://:redis-secret-pw@127.0.0.1:6379"
[alerts]
sentry_dsn = "https://sentrykey123@o1.ingest.sentry.io/42"
webhook_url = "https://hooks.example.com/syncward"
webhook_secret = "hmac-secret-value-of-24-bytes"
email = { smtp_url = "smtps://mailer:smtp-secret-pw@smtp.example.com:465", from = "syncward@example.com", to = ["ops@example.com"] }
[http]
admin_token = "admin-token-value-0123456789abcdef"
"#,
    )?;
    let out = Syncward::bare()
        .with_config(file.path())
        .run(&["check-config"])
        .await?
        .ok()?;
    for secret in [
        "db-secret-pw",
        "redis-secret-pw",
        "sentrykey123",
        "hmac-secret-value-of-24-bytes",
        "smtp-secret-pw",
        "admin-token-value-0123456789abcdef",
    ] {
        assert!(
            !out.stdout.contains(secret),
            "{secret} printed:\n{}",
            out.stdout
        );
        assert!(!out.stderr.contains(secret));
    }
    assert!(
        out.stdout
            .contains("postgres://app:[redacted]@127.0.0.1:5432/sync"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("admin_token = \"[redacted]\""));
    assert!(out.stdout.contains("webhook_secret = \"[redacted]\""));
    Ok(())
}

/// Each bad config exits 2 with one line naming the file (or variable), the key
/// and the problem.
#[tokio::test]
async fn bad_config_exits_2_with_one_line_naming_file_key_and_problem() -> anyhow::Result<()> {
    let cases: &[(&str, &str)] = &[
        ("[lease]\ntll = \"5m\"\n", "lease.tll: unknown field `tll`"),
        (
            "[workers]\nspeed = 3\n",
            "workers.speed: unknown field `speed`",
        ),
        ("[nonsense]\na = 1\n", "nonsense: unknown field `nonsense`"),
        (
            "[lease]\nttl = \"5 parsecs\"\n",
            "lease.ttl: invalid value: string \"5 parsecs\", expected a duration",
        ),
        (
            "[deadman]\nschedule = \"*/5 * * * *\"\n",
            "deadman.schedule: \"*/5 * * * *\" has 5 fields",
        ),
        (
            "[deadman]\nschedule = \"0 99 * * * *\"\n",
            "deadman.schedule: \"0 99 * * * *\": minute 99 is out of range (minute is 0–59)",
        ),
        (
            "[lease]\nttl = \"5m\"\nrenew_every = \"5m\"\n",
            "lease.renew_every: 5m is not shorter than lease.ttl (5m)",
        ),
        (
            "[workers]\ncount = 0\n",
            "workers.count: must be at least 1",
        ),
        (
            "[alerts]\nsentry_dsn = \"not a dsn\"\n",
            "alerts.sentry_dsn: not a valid Sentry DSN",
        ),
        (
            "[alerts]\nwebhook_url = \"https://x.example/h\"\n",
            "alerts.webhook_secret: is required when alerts.webhook_url is set",
        ),
        (
            "[database]\nurl = \"mysql://x@y/z\"\n",
            "database.url: scheme \"mysql\" is not supported",
        ),
        ("[workers\ncount = 1\n", "not valid TOML"),
        (
            "[redis]\nurl = \"redis+sentinel://s1:26379,s2:26379\"\n",
            "redis.url: a redis+sentinel URL names the primary's service",
        ),
        (
            "[redis]\nurl = \"memcached://h\"\n",
            "redis.url: scheme \"memcached\" is not supported; use redis, rediss or redis+sentinel",
        ),
    ];
    for (text, expected) in cases {
        let file = config_file(text)?;
        let out = Syncward::bare()
            .with_config(file.path())
            .run(&["check-config"])
            .await?;
        assert_eq!(out.code, 2, "{text}: {out:?}");
        let line = out.stderr.trim_end();
        assert_eq!(line.lines().count(), 1, "{text}: not one line: {line}");
        let origin = format!("error: {}: ", file.path().display());
        assert!(
            line.starts_with(&origin),
            "{text}: does not name the file: {line}"
        );
        assert!(
            line.contains(expected),
            "{text}: expected {expected:?} in {line}"
        );
    }
    Ok(())
}

/// An absurd duration once passed check-config and then panicked the daemon
/// on SIGTERM; every duration and count has an upper limit, named in the refusal.
#[tokio::test]
async fn absurd_durations_and_counts_are_refused_naming_key_and_limit() -> anyhow::Result<()> {
    let cases: &[(&str, &str)] = &[
        (
            "[shutdown]\ndrain_deadline = \"500000000000y\"\n",
            "shutdown.drain_deadline: 500000000000y is longer than the limit of 1h",
        ),
        (
            "[ledger]\nretention = \"11y\"\n",
            "ledger.retention: 11y is longer than the limit of 10y",
        ),
        (
            "[lease]\nttl = \"2d\"\n",
            "lease.ttl: 2d is longer than the limit of 1d",
        ),
        (
            "[workers]\ncount = 100000\n",
            "workers.count: 100000 is more than the limit of 1024",
        ),
        (
            "[retry]\nmax_attempts = 1000\n",
            "retry.max_attempts: 1000 is more than the limit of 100",
        ),
    ];
    for (text, expected) in cases {
        let file = config_file(text)?;
        let out = Syncward::bare()
            .with_config(file.path())
            .run(&["check-config"])
            .await?;
        assert_eq!(out.code, 2, "{text}: {out:?}");
        assert_eq!(
            out.stderr.trim_end(),
            format!("error: {}: {expected}", file.path().display()),
            "{text}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_bad_env_override_names_the_variable() -> anyhow::Result<()> {
    let out = Syncward::bare()
        .with_env("SYNCWARD__WORKERS__COUNT", "many")
        .run(&["check-config"])
        .await?;
    assert_eq!(out.code, 2);
    assert_eq!(
        out.stderr.trim_end(),
        "error: environment variable SYNCWARD__WORKERS__COUNT: workers.count: invalid type: string \"many\", expected an integer"
    );
    Ok(())
}

#[tokio::test]
async fn a_missing_explicit_config_file_is_bad_input() -> anyhow::Result<()> {
    let out = Syncward::bare()
        .with_config(std::path::Path::new("/nonexistent/syncward.toml"))
        .run(&["check-config"])
        .await?;
    assert_eq!(out.code, 2);
    assert_eq!(
        out.stderr.trim_end(),
        "error: /nonexistent/syncward.toml: config file not found"
    );
    Ok(())
}

#[tokio::test]
async fn unreachable_postgres_exits_1_naming_the_address_without_the_password() -> anyhow::Result<()>
{
    let out = Syncward::bare()
        .with_env(
            "SYNCWARD__DATABASE__URL",
            "postgres://app:topsecret@127.0.0.1:1/syncward",
        )
        .run(&["sync", "list"])
        .await?;
    assert_eq!(out.code, 1, "{out:?}");
    let line = out.stderr.trim_end();
    assert_eq!(line.lines().count(), 1);
    assert!(
        line.starts_with(
            "error: cannot reach Postgres at postgres://app:[redacted]@127.0.0.1:1/syncward"
        ),
        "{line}"
    );
    assert!(!line.contains("topsecret"));
    Ok(())
}

#[tokio::test]
async fn check_config_hides_secret_looking_query_values() -> anyhow::Result<()> {
    let file = config_file(
        r#"
[database]
url = "postgres://u@h/db?sslmode=prefer&password=SECRET"
[redis]
url = "redis://127.0.0.1:6379/?token=SECRET"
[alerts]
webhook_url = "https://hooks.example.com/h?sig=SECRET&channel=ops"
webhook_secret = "whsec_c2lnbmluZy1rZXktb2YtdHdlbnR5LWZvdXItYnl0ZXM="
"#,
    )?;
    let out = Syncward::bare()
        .with_config(file.path())
        .run(&["check-config"])
        .await?
        .ok()?;
    assert!(!out.stdout.contains("SECRET"), "{}", out.stdout);
    assert!(!out.stderr.contains("SECRET"), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("postgres://u@h/db?sslmode=prefer&password=[redacted]"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("https://hooks.example.com/h?sig=[redacted]&channel=ops"),
        "{}",
        out.stdout
    );
    Ok(())
}

#[tokio::test]
async fn a_connection_error_hides_a_password_in_the_query() -> anyhow::Result<()> {
    let out = Syncward::bare()
        .with_env(
            "SYNCWARD__DATABASE__URL",
            "postgres://app@127.0.0.1:1/syncward?password=SECRET",
        )
        .run(&["sync", "list"])
        .await?;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(!out.stderr.contains("SECRET"), "{}", out.stderr);
    assert!(
        out.stderr.contains(
            "cannot reach Postgres at postgres://app@127.0.0.1:1/syncward?password=[redacted]"
        ),
        "{}",
        out.stderr
    );
    // Redis past a reachable store: `deadman check` opens both.
    let db = crate::helpers::TestDb::new().await?;
    let out = Syncward::new(&db, None)
        .with_env(
            "SYNCWARD__REDIS__URL",
            "redis://127.0.0.1:1/?password=SECRET",
        )
        .run(&["deadman", "check"])
        .await?;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(!out.stderr.contains("SECRET"), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("cannot reach Redis at redis://127.0.0.1:1/?password=[redacted]"),
        "{}",
        out.stderr
    );
    Ok(())
}

#[tokio::test]
async fn a_sentinel_url_is_shown_with_its_hosts_and_without_its_password() -> anyhow::Result<()> {
    let url = "redis+sentinel://app:SECRET@127.0.0.1:1,127.0.0.1:2/mymaster/0";
    let shown = "redis+sentinel://app:[redacted]@127.0.0.1:1,127.0.0.1:2/mymaster/0";
    let out = Syncward::bare()
        .with_env("SYNCWARD__REDIS__URL", url)
        .run(&["check-config"])
        .await?
        .ok()?;
    assert!(!out.stdout.contains("SECRET"), "{}", out.stdout);
    assert!(out.stdout.contains(shown), "{}", out.stdout);
    // No Sentinel answers on those ports: the error names the set, redacted.
    let db = crate::helpers::TestDb::new().await?;
    let out = Syncward::new(&db, None)
        .with_env("SYNCWARD__REDIS__URL", url)
        .run(&["deadman", "check"])
        .await?;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(!out.stderr.contains("SECRET"), "{}", out.stderr);
    assert!(
        out.stderr
            .contains(&format!("cannot reach Redis at {shown}")),
        "{}",
        out.stderr
    );
    Ok(())
}

#[tokio::test]
async fn a_toml_syntax_error_names_the_line_but_never_echoes_it() -> anyhow::Result<()> {
    let file = config_file("[database]\nmax_connections = 3\npassword = \"SECRET\n[redis]\n")?;
    let out = Syncward::bare()
        .with_config(file.path())
        .run(&["check-config"])
        .await?;
    assert_eq!(out.code, 2, "{out:?}");
    let line = out.stderr.trim_end();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(!line.contains("SECRET"), "{line}");
    assert!(
        line.starts_with(&format!(
            "error: {}: line 3, column ",
            file.path().display()
        )),
        "{line}"
    );
    assert!(line.contains("not valid TOML: "), "{line}");
    Ok(())
}

#[tokio::test]
async fn bad_arguments_exit_2_with_one_line() -> anyhow::Result<()> {
    let out = Syncward::bare().run(&["sync", "frobnicate"]).await?;
    assert_eq!(out.code, 2);
    assert_eq!(out.stderr.trim_end().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("frobnicate"));
    Ok(())
}

/// Commands run by hand read the unit's environment file, as the unit does:
/// the file's values apply, the environment's win, a bad line is one line of
/// bad input naming the file and the line (never its text).
#[tokio::test]
async fn commands_read_the_units_environment_file_and_the_environment_wins() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let env_file = dir.path().join("syncward.env");
    std::fs::write(
        &env_file,
        "# as the package writes it\n\
         SYNCWARD__DATABASE__URL=postgres://from-the-file@127.0.0.1:5432/syncward\n\
         SYNCWARD__WORKERS__COUNT=7\n",
    )?;
    let path = env_file.to_str().unwrap_or_default();
    let runner = Syncward::bare().with_env("SYNCWARD_ENV_FILE", path);
    let printed = runner
        .run(&["check-config", "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(
        printed["database"]["url"],
        "postgres://from-the-file@127.0.0.1:5432/syncward"
    );
    assert_eq!(printed["workers"]["count"], 7);
    let printed = runner
        .clone()
        .with_env("SYNCWARD__WORKERS__COUNT", "3")
        .run(&["check-config", "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(printed["workers"]["count"], 3, "the environment wins");
    // The same through the flag.
    let printed = Syncward::bare()
        .run(&["--env-file", path, "check-config", "--json"])
        .await?
        .ok()?
        .json()?;
    assert_eq!(printed["workers"]["count"], 7);

    std::fs::write(
        &env_file,
        "SYNCWARD__WORKERS__COUNT=7\nthe-secret-is hunter2\n",
    )?;
    let out = runner.run(&["check-config"]).await?;
    assert_eq!(out.code, 2, "{out:?}");
    assert_eq!(out.stderr.trim_end().lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("syncward.env") && out.stderr.contains("line 2"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("hunter2"), "{}", out.stderr);
    Ok(())
}

/// A config or env file that is there but that the user cannot read stops
/// the command with exit 2, one line naming the file and the fix (group
/// `syncward`), instead of going on with defaults or without the file's
/// variables. Run as `nobody` (root reads every file).
#[tokio::test]
async fn an_unreadable_config_or_env_file_is_an_error_naming_it_and_the_fix() -> anyhow::Result<()>
{
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    let config = dir.path().join("syncward.toml");
    let env = dir.path().join("syncward.env");
    std::fs::write(&config, "[log]\nlevel = \"info\"\n")?;
    std::fs::write(&env, "SYNCWARD__LOG__LEVEL=warn\n")?;
    let readable = dir.path().join("readable.env");
    std::fs::write(&readable, "SYNCWARD__LOG__LEVEL=warn\n")?;
    // Not the machine's /etc/syncward/syncward.toml (a package test may
    // have installed one this user cannot read).
    let readable_config = dir.path().join("readable.toml");
    std::fs::write(&readable_config, "[log]\nlevel = \"info\"\n")?;
    std::fs::set_permissions(&readable_config, std::fs::Permissions::from_mode(0o644))?;
    let other_config = readable_config.to_str().unwrap_or_default();
    for file in [&config, &env] {
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600))?;
    }
    std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644))?;
    let as_nobody = |args: &[&str]| {
        let mut command = std::process::Command::new("setpriv");
        command
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(crate::helpers::cli::BINARY)
            .args(args)
            .env_remove("SYNCWARD_CONFIG")
            .env_remove("SYNCWARD_ENV_FILE");
        command.output()
    };
    let cases: [(Vec<&str>, &std::path::Path); 2] = [
        (
            vec![
                "check-config",
                "--config",
                config.to_str().unwrap_or_default(),
                "--env-file",
                readable.to_str().unwrap_or_default(),
            ],
            &config,
        ),
        (
            vec![
                "check-config",
                "--config",
                other_config,
                "--env-file",
                env.to_str().unwrap_or_default(),
            ],
            &env,
        ),
    ];
    for (args, file) in cases {
        let out = as_nobody(&args)?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&file.display().to_string())
                && stderr.contains("Permission denied")
                && stderr.contains("group syncward"),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "no defaults printed instead");
    }
    // Readable, the same command works as nobody.
    let out = as_nobody(&[
        "check-config",
        "--config",
        other_config,
        "--env-file",
        readable.to_str().unwrap_or_default(),
    ])?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
