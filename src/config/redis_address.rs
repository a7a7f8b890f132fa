//! Where the daemon's Redis is: one server (`redis://`, `rediss://`), or the
//! primary a Sentinel set names (`redis+sentinel://`), read from `redis.url`.
//!
//! The Sentinel form is the one Redis-Sentinel-Url, RedisVL and Prefect share:
//! `redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service_name[/db]`.
//! Each host is a Sentinel (port 26379 when left out); the user-info and the
//! database number are for the primary the Sentinels name, never sent to the
//! Sentinels themselves.

use deadpool_redis::CreatePoolError;

use super::url_secrets::redact_url_text;
use crate::redis::RedisPool;

/// The scheme of a Sentinel set.
pub const SENTINEL_SCHEME: &str = "redis+sentinel";

/// The port a Sentinel listens on unless the URL says otherwise.
pub const SENTINEL_PORT: u16 = 26379;

/// A parsed `redis.url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisAddress {
    /// One server, as the redis crate reads its URL.
    Server(String),
    /// A Sentinel set and the name of the primary it watches.
    Sentinel(SentinelAddress),
}

/// `redis+sentinel://…`, taken apart.
#[derive(Clone, PartialEq, Eq)]
pub struct SentinelAddress {
    /// Every Sentinel as `(host, port)`, in the order written.
    pub sentinels: Vec<(String, u16)>,
    /// The primary's name in the Sentinels' configuration (`mymaster`).
    pub service_name: String,
    /// `redis://[user-info@]sentinel-primary/db`: how to log in to the primary
    /// (and its replicas), in the form the redis crate parses, so its
    /// percent-decoding of the user-info applies. The host is a placeholder:
    /// the Sentinels give the real one.
    pub primary_login: String,
}

impl std::fmt::Debug for SentinelAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelAddress")
            .field("sentinels", &self.sentinels)
            .field("service_name", &self.service_name)
            .field("primary_login", &redact_url_text(&self.primary_login))
            .finish()
    }
}

impl RedisAddress {
    /// A pool of connections to this address; connects to nothing yet.
    pub fn open_pool(&self) -> Result<RedisPool, CreatePoolError> {
        match self {
            Self::Server(url) => RedisPool::server(url),
            Self::Sentinel(s) => {
                RedisPool::sentinel(&s.sentinels, &s.service_name, &s.primary_login)
            }
        }
    }

    /// Reads `redis.url`. The error never quotes the URL (it may hold a password).
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err("not a valid URL: it has no scheme (redis://…)".into());
        };
        match scheme.to_ascii_lowercase().as_str() {
            "redis" | "rediss" => match url::Url::parse(text) {
                Ok(_) => Ok(Self::Server(text.to_string())),
                // The parse error never echoes the URL.
                Err(e) => Err(format!("not a valid URL: {e}")),
            },
            SENTINEL_SCHEME => parse_sentinel(rest).map(Self::Sentinel),
            other => Err(format!(
                "scheme \"{}\" is not supported; use redis, rediss or {SENTINEL_SCHEME}",
                other.escape_default()
            )),
        }
    }
}

/// `rest` is everything after `redis+sentinel://`.
fn parse_sentinel(rest: &str) -> Result<SentinelAddress, String> {
    if rest.contains(['?', '#']) {
        return Err(format!(
            "a {SENTINEL_SCHEME} URL takes no query or fragment: \
             redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/service_name[/db]"
        ));
    }
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    // The user-info ends at the last `@`: a password may hold one, encoded or not.
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let sentinels = hosts
        .split(',')
        .map(parse_host)
        .collect::<Result<Vec<_>, _>>()?;
    let mut segments = path.split('/');
    let service_name = segments.next().unwrap_or_default();
    if service_name.is_empty() {
        return Err(format!(
            "a {SENTINEL_SCHEME} URL names the primary's service after the hosts \
             (…:26379/mymaster)"
        ));
    }
    let db = match segments.next() {
        None | Some("") => 0,
        Some(db) => db.parse::<u32>().map_err(|_| {
            format!(
                "the database after the service name must be a number, not \"{}\"",
                db.escape_default()
            )
        })?,
    };
    if segments.any(|s| !s.is_empty()) {
        return Err(format!(
            "a {SENTINEL_SCHEME} URL's path is /service_name[/db], nothing more"
        ));
    }
    let login = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
    let primary_login = format!("redis://{login}sentinel-primary/{db}");
    if let Err(e) = url::Url::parse(&primary_login) {
        return Err(format!("the user-info is not valid: {e}"));
    }
    Ok(SentinelAddress {
        sentinels,
        service_name: service_name.to_string(),
        primary_login,
    })
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn parse_host(text: &str) -> Result<(String, u16), String> {
    let (host, port) = if let Some(v6) = text.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(|| {
            format!(
                "the Sentinel host \"{}\" lacks its ']'",
                text.escape_default()
            )
        })?;
        (host, after.strip_prefix(':'))
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() || host.contains(|c: char| c.is_whitespace() || "@[]".contains(c)) {
        return Err(format!(
            "\"{}\" is not a Sentinel host; write host[:port] entries separated by commas",
            text.escape_default()
        ));
    }
    let port = match port {
        None => SENTINEL_PORT,
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| {
                format!(
                    "the port of the Sentinel \"{}\" must be a number from 1 to 65535",
                    text.escape_default()
                )
            })?,
    };
    Ok((host.to_string(), port))
}

/// A `redis+sentinel://` URL with its password (and nothing else) hidden;
/// `None` for any other URL.
pub(super) fn redact_sentinel_url(text: &str) -> Option<String> {
    let (scheme, rest) = text.split_once("://")?;
    if !scheme.eq_ignore_ascii_case(SENTINEL_SCHEME) {
        return None;
    }
    // A query might hold a secret: such a URL (refused by `parse`) is left
    // to the general redaction, which hides it whole or hides the value.
    if rest.contains(['?', '#']) {
        return None;
    }
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let Some((userinfo, hosts)) = authority.rsplit_once('@') else {
        return Some(text.to_string());
    };
    // The user-info goes through the same redaction as any URL's, on a twin
    // whose one host the url crate can read (a list of hosts it cannot).
    let twin = redact_url_text(&format!("redis://{userinfo}@sentinel-hosts/"));
    let shown = twin
        .strip_prefix("redis://")
        .and_then(|t| t.strip_suffix("@sentinel-hosts/"))?;
    Some(format!("{scheme}://{shown}@{hosts}{tail}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sentinel(text: &str) -> SentinelAddress {
        match RedisAddress::parse(text) {
            Ok(RedisAddress::Sentinel(s)) => s,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn a_plain_redis_url_is_one_server_kept_as_written() {
        for url in ["redis://127.0.0.1:6379", "rediss://u:p@h:6380/2"] {
            assert_eq!(
                RedisAddress::parse(url),
                Ok(RedisAddress::Server(url.into()))
            );
        }
    }

    #[test]
    fn a_sentinel_url_names_every_sentinel_the_service_and_the_database() {
        let s = sentinel("redis+sentinel://s1:26380,s2,[::1]:26381/mymaster/3");
        assert_eq!(
            s.sentinels,
            [
                ("s1".to_string(), 26380),
                ("s2".to_string(), SENTINEL_PORT),
                ("::1".to_string(), 26381)
            ]
        );
        assert_eq!(s.service_name, "mymaster");
        assert_eq!(s.primary_login, "redis://sentinel-primary/3");
        let s = sentinel("redis+sentinel://app:p%40ss@s1:26379/mymaster");
        assert_eq!(s.primary_login, "redis://app:p%40ss@sentinel-primary/0");
    }

    #[test]
    fn a_sentinel_url_without_its_service_or_with_a_bad_port_is_refused_without_quoting_the_password()
     {
        for (url, why) in [
            ("redis+sentinel://u:hunter2@s1:26379", "service"),
            ("redis+sentinel://u:hunter2@s1:26379/", "service"),
            ("redis+sentinel://u:hunter2@s1:99999/m", "port"),
            ("redis+sentinel://u:hunter2@s1,,s2/m", "Sentinel host"),
            ("redis+sentinel://u:hunter2@s1/m/x", "number"),
            ("redis+sentinel://u:hunter2@s1/m/0/extra", "nothing more"),
            ("redis+sentinel://u:hunter2@s1/m?password=x", "no query"),
            ("memcached://u:hunter2@h", "not supported"),
        ] {
            let error = RedisAddress::parse(url).expect_err(url);
            assert!(error.contains(why), "{url}: {error}");
            assert!(!error.contains("hunter2"), "{url}: {error}");
        }
    }

    #[test]
    fn a_sentinel_url_is_shown_with_its_password_redacted_and_its_hosts_kept() {
        assert_eq!(
            redact_sentinel_url("redis+sentinel://app:hunter2@s1:26379,s2:26380/mymaster/1")
                .as_deref(),
            Some("redis+sentinel://app:[redacted]@s1:26379,s2:26380/mymaster/1")
        );
        assert_eq!(
            redact_sentinel_url("redis+sentinel://:hunter2@s1/mymaster").as_deref(),
            Some("redis+sentinel://:[redacted]@s1/mymaster")
        );
        assert_eq!(
            redact_sentinel_url("redis+sentinel://s1,s2/mymaster").as_deref(),
            Some("redis+sentinel://s1,s2/mymaster")
        );
        assert_eq!(redact_sentinel_url("redis://u:p@h"), None);
        assert_eq!(
            redact_sentinel_url("redis+sentinel://s1/m?password=x"),
            None
        );
        for url in [
            "redis+sentinel://u:hunter2@s1,s2/m?password=hunter2",
            "redis+sentinel://u:hunter2@s1:26379,s2:26379/m?password=hunter2",
        ] {
            let shown = redact_url_text(url);
            assert!(!shown.contains("hunter2"), "{shown}");
        }
    }
}
