//! The connect options of a source URL, and nothing else. sqlx, like libpq,
//! fills what a URL leaves out from the process's `PG*` variables and from
//! `~/.pgpass`: a workspace's source would then be sent the daemon's own
//! password or client certificate. So every field a URL may leave out is
//! set here from the URL or a fixed default, and the few sqlx cannot unset
//! (certificates, server options) are refused while the environment sets
//! them and the URL does not.

use std::collections::HashSet;

use sqlx::postgres::{PgConnectOptions, PgSslMode};

/// The environment's variables sqlx reads into fields it offers no way to
/// clear, with the URL parameters that override each.
const UNCLEARABLE: &[(&str, &[&str], &str)] = &[
    ("PGSSLCERT", &["sslcert", "ssl-cert"], "client certificate"),
    ("PGSSLKEY", &["sslkey", "ssl-key"], "client key"),
    (
        "PGSSLROOTCERT",
        &["sslrootcert", "ssl-root-cert", "ssl-ca"],
        "trusted root certificate",
    ),
    ("PGOPTIONS", &["options"], "server options"),
];

/// The options `url` names, with libpq's defaults for what it leaves out
/// (port 5432, the database named as the user, `sslmode=prefer`, no
/// password) and never a value from this process's environment or home.
/// The error is one sentence, without the URL (it may hold a password).
pub fn source_options(url: &str) -> Result<PgConnectOptions, String> {
    let parsed = url::Url::parse(url).map_err(|e| format!("not a Postgres URL: {e}"))?;
    if !matches!(parsed.scheme(), "postgres" | "postgresql") {
        return Err("not a Postgres URL: the scheme is not postgres:// or postgresql://".into());
    }
    let mut options: PgConnectOptions = url
        .parse()
        .map_err(|e| format!("not a Postgres URL: {e}"))?;
    let given: HashSet<String> = parsed
        .query_pairs()
        .map(|(key, _)| match key.split_once('[') {
            // `options[search_path]=…` is an `options` entry.
            Some((name, _)) => name.to_string(),
            None => key.into_owned(),
        })
        .collect();
    let has = |names: &[&str]| names.iter().any(|n| given.contains(*n));
    if parsed.host_str().is_none_or(str::is_empty) && !has(&["host", "hostaddr"]) {
        return Err(
            "the Postgres URL names no host; syncward takes none from its environment".into(),
        );
    }
    if parsed.username().is_empty() && !has(&["user"]) {
        return Err(
            "the Postgres URL names no user (user@host); syncward takes none from its environment"
                .into(),
        );
    }
    if parsed.port().is_none() && !has(&["port"]) {
        options = options.port(5432);
    }
    if parsed.path().trim_start_matches('/').is_empty() && !has(&["dbname"]) {
        let user = options.get_username().to_owned();
        options = options.database(&user);
    }
    // Empty is what a URL without one means: the server's request for a
    // password then fails, and nothing of the daemon's is sent.
    if parsed.password().is_none() && !has(&["password"]) {
        options = options.password("");
    }
    if !has(&["sslmode", "ssl-mode"]) {
        options = options.ssl_mode(PgSslMode::Prefer);
    }
    if !has(&["application_name"]) {
        options = options.application_name("syncward");
    }
    for (variable, parameters, what) in UNCLEARABLE {
        if std::env::var_os(variable).is_some() && !has(parameters) {
            return Err(format!(
                "syncward's environment sets {variable}, which would be this source's {what}; a \
                 source connects only with what its URL names: unset {variable} where syncward \
                 runs, or name `{}` in the URL",
                parameters[0]
            ));
        }
    }
    Ok(options)
}
