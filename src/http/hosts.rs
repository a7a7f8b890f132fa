//! The Host check: a request whose `Host` is not one of `http.allowed_hosts`
//! (plus the loopback names of the bound port) is answered 421 before it
//! reaches a handler. A browser on a page of `evil.example` whose DNS now
//! points at 127.0.0.1 (DNS rebinding) still sends `Host: evil.example:PORT`,
//! so it never reads or presses anything. `/healthz` alone is exempt: probes
//! (systemd, a load balancer) may use any name, and it says nothing.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::http::header::HOST;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The `host[:port]` names the server answers to, lower case.
#[derive(Debug, Clone)]
pub struct AllowedHosts(Arc<[String]>);

impl AllowedHosts {
    /// The defaults for the bound address — the listen address itself (unless
    /// it is 0.0.0.0 or ::, which no browser should use), `localhost`,
    /// `127.0.0.1` and `[::1]`, each with the bound port — then `configured`.
    pub fn new(bound: SocketAddr, configured: &[String]) -> Self {
        let port = bound.port();
        let mut hosts = Vec::new();
        if !bound.ip().is_unspecified() {
            hosts.push(bound.to_string());
        }
        hosts.extend([
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            format!("[::1]:{port}"),
        ]);
        hosts.extend(configured.iter().map(|h| h.to_ascii_lowercase()));
        hosts.sort();
        hosts.dedup();
        Self(hosts.into())
    }

    /// Whether `authority` (`host` or `host:port`, as in a `Host` header or
    /// an `Origin`) is one of them. Names are case-insensitive.
    pub fn allows(&self, authority: &str) -> bool {
        let authority = authority.trim_end_matches('.');
        self.0.iter().any(|h| h.eq_ignore_ascii_case(authority))
    }

    pub fn as_slice(&self) -> &[String] {
        &self.0
    }
}

/// Every request but `/healthz` must name an allowed host: in its `Host`
/// header and, if it uses the absolute form (`GET http://host/…`), in its URI.
pub async fn require_allowed_host(
    State(hosts): State<AllowedHosts>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    let header = request.headers().get(HOST).map(|v| v.to_str());
    let refused = match header {
        Some(Ok(host)) if hosts.allows(host) => request
            .uri()
            .authority()
            .filter(|a| !hosts.allows(a.as_str()))
            .map(|a| a.as_str().to_string()),
        Some(Ok(host)) => Some(host.to_string()),
        Some(Err(_)) => Some("(not text)".to_string()),
        None => Some("(none)".to_string()),
    };
    let Some(host) = refused else {
        return next.run(request).await;
    };
    let reason = format!(
        "Host \"{}\" is not one this server answers to; add it to http.allowed_hosts if it should be",
        host.escape_default()
    );
    let api = request.uri().path().starts_with("/api/");
    misdirected(api, &reason)
}

/// 421 Misdirected Request, JSON on `/api`, one line of text elsewhere.
fn misdirected(api: bool, reason: &str) -> Response {
    if api {
        (
            StatusCode::MISDIRECTED_REQUEST,
            axum::Json(serde_json::json!({ "error": reason })),
        )
            .into_response()
    } else {
        (StatusCode::MISDIRECTED_REQUEST, format!("{reason}\n")).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_name_the_bound_port_and_configured_hosts_are_added() {
        let hosts = AllowedHosts::new(
            "127.0.0.1:4321".parse().unwrap(),
            &["Syncward.Example.com".to_string()],
        );
        for allowed in [
            "127.0.0.1:4321",
            "localhost:4321",
            "LOCALHOST:4321",
            "[::1]:4321",
            "syncward.example.com",
            "syncward.example.com.",
        ] {
            assert!(hosts.allows(allowed), "{allowed}");
        }
        for refused in [
            "evil.example:4321",
            "127.0.0.1:4322",
            "localhost",
            "syncward.example.com:8080",
            "",
        ] {
            assert!(!hosts.allows(refused), "{refused}");
        }
    }

    #[test]
    fn an_unspecified_listen_address_is_not_a_host_name() {
        let hosts = AllowedHosts::new("0.0.0.0:8080".parse().unwrap(), &[]);
        assert!(!hosts.allows("0.0.0.0:8080"));
        assert!(hosts.allows("localhost:8080"));
    }
}
