//! Secrets inside URLs: the password of the user-info and query values whose
//! names look secret (`?token=…`, `?api_key=…`). The daemon's own URLs are
//! shown with both redacted; a sync file may hold neither (its secrets come
//! from `*_env` settings only).

use secrecy::{ExposeSecret, SecretString};

/// Shown in place of any secret.
pub const REDACTED: &str = "[redacted]";

/// Parts of query parameter names that mark the value as a secret, matched
/// anywhere in the lower-cased name (`access_token`, `X-Amz-Signature`,
/// `apikey`, `client_secret`, …). Broad on purpose: hiding a harmless value
/// costs little, showing a secret cannot be undone.
const SECRET_NAME_PARTS: &[&str] = &[
    "password",
    "pass",
    "pwd",
    "token",
    "secret",
    "key",
    "auth",
    "signature",
    "sig",
    "credential",
];

/// Whether a query parameter of this name carries a secret (case-insensitive,
/// substring match against `SECRET_NAME_PARTS`).
pub fn is_secret_parameter(name: &str) -> bool {
    let name = name.to_lowercase();
    SECRET_NAME_PARTS.iter().any(|part| name.contains(part))
}

/// A URL with its password and its secret-looking query values replaced by
/// `[redacted]`, for messages and `check-config`. A value that is not a URL is
/// redacted whole.
pub fn redact_url(url: &SecretString) -> String {
    redact_url_text(url.expose_secret())
}

/// `redact_url` for a URL that is not held as a secret (the alert webhook's).
pub fn redact_url_text(text: &str) -> String {
    // Placeholders without brackets, because the URL would percent-encode
    // `[redacted]` in the user-info.
    const PASSWORD: &str = "REDACTEDPASSWORD";
    // A Sentinel set's list of hosts is no URL the url crate reads.
    if let Some(shown) = super::redis_address::redact_sentinel_url(text) {
        return shown;
    }
    let Ok(mut parsed) = url::Url::parse(text) else {
        return REDACTED.to_string();
    };
    if parsed.password().is_some() {
        // set_password fails only for URLs that cannot have one, and this one has one.
        let _ = parsed.set_password(Some(PASSWORD));
    }
    if let Some(query) = parsed.query() {
        // Rewritten by hand rather than with `query_pairs_mut`, so every other
        // parameter is shown exactly as written.
        let redacted = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if is_secret_parameter(&decoded(name)) => {
                    format!("{name}={REDACTED}")
                }
                _ => pair.to_string(),
            })
            .collect::<Vec<_>>()
            .join("&");
        parsed.set_query(Some(&redacted));
    }
    parsed.to_string().replace(PASSWORD, REDACTED)
}

/// What makes a URL unfit for a sync file, if anything: a user-info (a user
/// name alone is often a token, as in `https://TOKEN@api.example.com`) or a
/// query parameter whose name looks secret. The message never quotes a value.
pub fn credential_in_url(url: &url::Url) -> Option<String> {
    if url.password().is_some() {
        return Some("holds a password (user:password@)".to_string());
    }
    if !url.username().is_empty() {
        return Some("holds a user name (user@), which is sent as a credential".to_string());
    }
    url.query_pairs()
        .find(|(name, _)| is_secret_parameter(name))
        .map(|(name, _)| {
            format!(
                "has the query parameter \"{}\", whose name looks like a secret",
                name.escape_default()
            )
        })
}

/// A deserializer's message with every quoted URL in it redacted: the `url`
/// crate refuses a malformed URL as `invalid port number: "<the URL>"`, and a
/// malformed URL may still hold a password (which is then hidden whole).
pub fn hide_urls_in_message(message: &str) -> String {
    // Odd pieces are the insides of "…" pairs.
    message
        .split('"')
        .enumerate()
        .map(|(i, piece)| {
            // `@` opening the text is no user-info (`@hourly`).
            if i % 2 == 1 && (piece.contains("://") || piece.find('@').is_some_and(|at| at > 0)) {
                redact_url_text(piece)
            } else {
                piece.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\"")
}

/// A query name with `%xx` and `+` decoded, so `api%5Fkey` is seen as `api_key`.
fn decoded(name: &str) -> String {
    url::form_urlencoded::parse(format!("{name}=").as_bytes())
        .next()
        .map(|(name, _)| name.into_owned())
        .unwrap_or_else(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_url_keeps_host_and_hides_password() {
        let url = SecretString::from("postgres://app:hunter2@db.internal:5432/sync");
        let shown = redact_url(&url);
        assert_eq!(shown, "postgres://app:[redacted]@db.internal:5432/sync");
    }

    #[test]
    fn secret_looking_query_values_are_redacted_and_others_kept_as_written() {
        let url = SecretString::from(
            "postgres://u@h/db?sslmode=require&password=SECRET&Access_Token=T0K&api%5Fkey=K&x=a%20b",
        );
        let shown = redact_url(&url);
        assert_eq!(
            shown,
            "postgres://u@h/db?sslmode=require&password=[redacted]&Access_Token=[redacted]&api%5Fkey=[redacted]&x=a%20b"
        );
    }

    #[test]
    fn every_listed_name_is_secret_whatever_its_case() {
        for name in [
            "password",
            "PASS",
            "pwd",
            "token",
            "client_secret",
            "key",
            "api_key",
            "ApiKey",
            "access_token",
            "auth",
            "X-Amz-Signature",
            "sig",
            "credential",
            "X-Amz-Credentials",
        ] {
            assert!(is_secret_parameter(name), "{name}");
        }
        for name in ["sslmode", "page", "limit", "cursor", "application_name"] {
            assert!(!is_secret_parameter(name), "{name}");
        }
    }

    #[test]
    fn a_quoted_malformed_url_is_hidden_in_a_message() {
        let shown = hide_urls_in_message("invalid port number: \"https://u:hunter2@h:99999/v3\"");
        assert_eq!(shown, "invalid port number: \"[redacted]\"");
        let shown = hide_urls_in_message("bad: \"https://u:hunter2@h/v3?x=1\" and \"plain\"");
        assert_eq!(
            shown,
            "bad: \"https://u:[redacted]@h/v3?x=1\" and \"plain\""
        );
        let plain = "invalid type: string \"lots\", expected u32";
        assert_eq!(hide_urls_in_message(plain), plain);
    }

    #[test]
    fn a_value_that_is_not_a_url_is_redacted_whole() {
        assert_eq!(redact_url_text("not a url password=x"), REDACTED);
    }

    #[test]
    fn credentials_in_a_url_are_named_without_their_value() {
        let found = |u: &str| credential_in_url(&url::Url::parse(u).expect("test URL"));
        assert!(found("https://user:pw@host/v3").is_some_and(|m| m.contains("password")));
        assert!(found("https://tok@host/v3").is_some_and(|m| m.contains("user name")));
        let problem = found("https://host/v3?api_key=X").unwrap_or_default();
        assert!(problem.contains("\"api_key\""), "{problem}");
        assert!(!problem.contains('X'), "{problem}");
        assert_eq!(found("https://host/v3?page=2"), None);
    }
}
