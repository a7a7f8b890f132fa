//! `[http]`: the admin server (address, tokens, allowed hosts, limits).

use std::net::SocketAddr;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpSettings {
    /// Address of the admin HTTP server. Default `127.0.0.1:8080`.
    pub listen: SocketAddr,
    /// The admin token: `Authorization: Bearer <token>` on `/api/…`, Basic
    /// with the token as the password on the pages; needed by everything but
    /// health, readiness and metrics, and by every write (pause, resume, run,
    /// retry) even on loopback. At least 32 printable ASCII characters, no
    /// spaces. Without it the server binds loopback only and answers reads
    /// but refuses every write. Secret. Default: none (the Debian package
    /// generates one into `/etc/syncward/syncward.env`).
    #[serde(serialize_with = "crate::config::shown::optional_secret")]
    pub admin_token: Option<SecretString>,
    /// The scrape token of `/metrics` (`Authorization: Bearer`, as
    /// Prometheus' `authorization` scrape setting sends it). Once this or
    /// the admin token is set, `/metrics` needs one of the two; with
    /// neither, it is open (loopback only). Same rules as the admin token.
    /// Secret. Default: none.
    #[serde(serialize_with = "crate::config::shown::optional_secret")]
    pub metrics_token: Option<SecretString>,
    /// Host names the admin server answers to, as a browser's address bar
    /// shows them: `host` or `host:port` (`[::1]:8080` for IPv6), no scheme.
    /// Every request's `Host` header (all routes but `/healthz`) and every
    /// browser write's `Origin` (or `Referer`) must name one of them, which
    /// defeats DNS rebinding and cross-site forms. These are added to the
    /// defaults, which are always allowed: the listen address (unless it is
    /// 0.0.0.0 or ::), `localhost:PORT`, `127.0.0.1:PORT` and `[::1]:PORT`,
    /// with the port actually bound (so `listen = "127.0.0.1:0"` works). Name
    /// the host of a TLS proxy in front of the server here (e.g.
    /// `syncward.example.com`). Default: none beyond those.
    pub allowed_hosts: Vec<String>,
    /// Longest time a client may take to send a request's headers (also the
    /// idle time allowed between requests on a kept-alive connection); the
    /// connection is closed past it. Between 1s and 5m. Default 10s.
    #[serde(with = "crate::config::shown::duration")]
    pub header_read_timeout: Duration,
    /// Longest time one request may take once its headers arrived; it is
    /// answered 408 past it. Between 1s and 1h. Default 30s.
    #[serde(with = "crate::config::shown::duration")]
    pub request_timeout: Duration,
    /// Most connections open at once; further ones wait in the listen queue
    /// until one closes. Between 1 and 100000. Default 256.
    pub max_connections: usize,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_token: None,
            metrics_token: None,
            allowed_hosts: Vec::new(),
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 256,
        }
    }
}

/// Shortest admin token accepted: 32 characters.
pub const ADMIN_TOKEN_MIN_LEN: usize = 32;

impl HttpSettings {
    /// The `[http]` checks: the token's length and alphabet, the allowed
    /// hosts' form and the limits' bounds. Returns the bad key and the problem.
    pub(super) fn validate(&self) -> Result<(), (&'static str, String)> {
        for (key, token) in [
            ("http.admin_token", &self.admin_token),
            ("http.metrics_token", &self.metrics_token),
        ] {
            let Some(token) = token else { continue };
            let token = token.expose_secret();
            // The message gives the length, never the token.
            let length = token.chars().count();
            if length < ADMIN_TOKEN_MIN_LEN {
                return Err((
                    key,
                    format!(
                        "is {length} characters long; at least {ADMIN_TOKEN_MIN_LEN} are required \
                         (e.g. `head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'`)"
                    ),
                ));
            }
            if !token.chars().all(|c| c.is_ascii_graphic()) {
                return Err((
                    key,
                    "must be printable ASCII without spaces (it travels in an HTTP header)".into(),
                ));
            }
        }
        for host in &self.allowed_hosts {
            check_allowed_host(host).map_err(|problem| ("http.allowed_hosts", problem))?;
        }
        let bounded = [
            (
                "http.header_read_timeout",
                self.header_read_timeout,
                Duration::from_secs(1),
                Duration::from_secs(300),
            ),
            (
                "http.request_timeout",
                self.request_timeout,
                Duration::from_secs(1),
                Duration::from_secs(3600),
            ),
        ];
        for (key, value, min, max) in bounded {
            if value < min || value > max {
                return Err((
                    key,
                    format!(
                        "{} is out of range; it must be between {} and {}",
                        crate::words::duration_text(value),
                        crate::words::duration_text(min),
                        crate::words::duration_text(max)
                    ),
                ));
            }
        }
        if !(1..=100_000).contains(&self.max_connections) {
            return Err((
                "http.max_connections",
                format!(
                    "{} is out of range; it must be between 1 and 100000",
                    self.max_connections
                ),
            ));
        }
        Ok(())
    }
}

/// An `http.allowed_hosts` entry is `host` or `host:port`, as in a `Host`
/// header: no scheme, path, user or wildcard.
fn check_allowed_host(entry: &str) -> Result<(), String> {
    let shown = entry.escape_default();
    if entry.contains("://") {
        return Err(format!(
            "\"{shown}\" has a scheme; give the host (and port) only, e.g. \"syncward.example.com\""
        ));
    }
    if entry.is_empty() || entry.contains(|c: char| !c.is_ascii_graphic() || "/@*?#\\".contains(c))
    {
        return Err(format!(
            "\"{shown}\" is not a host name: give `host` or `host:port`, no path, user or wildcard"
        ));
    }
    match url::Url::parse(&format!("http://{entry}/")) {
        Ok(url) if url.host_str().is_some() => Ok(()),
        _ => Err(format!(
            "\"{shown}\" is not a host name: give `host` or `host:port`"
        )),
    }
}
