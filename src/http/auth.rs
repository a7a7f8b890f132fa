//! Who may read and who may write. Scripts send `Authorization: Bearer
//! <token>` to `/api/…`; a browser, which cannot add that header to a link or
//! a form, answers the pages' Basic prompt with the token as the password.
//! Each surface takes its own scheme only, so credentials a browser saved for
//! the pages never work on the API. Every write (any method but GET and HEAD)
//! needs the token even on loopback, and one from a browser needs an
//! `Origin` (or `Referer`) naming an allowed host: a browser attaches saved
//! Basic credentials to any form a foreign page submits.
//!
//! Besides the admin token, a workspace token (`syncward token create`)
//! opens the same surfaces for one workspace. This layer only establishes
//! the `Scope` the presented token opens; what that scope may see and do is
//! decided once, by `ops` (another workspace's sync or run is "not found",
//! lists show its own only, a read-only scope writes nothing).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, ORIGIN, REFERER, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use base64::Engine;
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::hosts::AllowedHosts;
use crate::ops::{Door, Scope, Scoped};

/// Whether the caller may change anything (pause, resume, run, retry): an
/// admin token is configured and the caller's token is not read-only.
#[derive(Debug, Clone, Copy)]
pub struct CanWrite(pub bool);

/// A handler's only way to the store: the door entered with the scope this
/// module decided. A request that reached a handler without one (a route
/// left outside the access layer) is refused, never served unscoped.
impl axum::extract::FromRequestParts<Door> for Scoped {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        door: &Door,
    ) -> Result<Self, Self::Rejection> {
        match parts.extensions.get::<Scope>() {
            Some(scope) => Ok(door.enter(scope.clone())),
            None => {
                tracing::error!(path = %parts.uri.path(), "A handler was reached without a scope; refused");
                Err(StatusCode::FORBIDDEN.into_response())
            }
        }
    }
}

/// The admin token (as its SHA-256, so that comparing takes the same time
/// whatever the length of what is presented), the door that knows the
/// workspace tokens, and the hosts a browser write may come from.
#[derive(Debug)]
pub struct AdminAccess {
    token: Option<[u8; 32]>,
    door: Door,
    hosts: AllowedHosts,
}

/// The two surfaces and their one scheme each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Surface {
    /// `/api/…`: `Authorization: Bearer <token>`.
    Api,
    /// The HTML pages and their buttons: Basic, the token as the password.
    Pages,
}

impl AdminAccess {
    pub fn new(token: Option<&SecretString>, door: Door, hosts: AllowedHosts) -> Self {
        Self {
            token: token.map(|t| digest(t.expose_secret().as_bytes())),
            door,
            hosts,
        }
    }

    async fn check(&self, surface: Surface, mut request: Request, next: Next) -> Response {
        let write = !matches!(*request.method(), Method::GET | Method::HEAD);
        let headers = request.headers();
        let scope = match (&self.token, presented(headers, surface)) {
            (Some(admin), Some(presented)) if bool::from(presented.ct_eq(admin)) => Scope::Admin,
            (_, Some(presented)) => match self.door.token_scope(&presented).await {
                Ok(Some(scope)) => scope,
                Ok(None) => return unauthorized(surface),
                Err(e) => return store_failed(surface, e),
            },
            (None, None) if write => {
                return refused(
                    surface,
                    "Writes need the admin token, and none is configured: set http.admin_token \
                     (SYNCWARD__HTTP__ADMIN_TOKEN, at least 32 characters) and restart the daemon",
                );
            }
            (None, None) => match self.door.anonymous_scope().await {
                Ok(Some(scope)) => scope,
                Ok(None) => return unauthorized(surface),
                Err(e) => return store_failed(surface, e),
            },
            (Some(_), None) => return unauthorized(surface),
        };
        if write && let Err(reason) = self.browser_write_allowed(headers) {
            return refused(surface, &reason);
        }
        // The pages offer their buttons only where a press could succeed.
        let can_write = self.token.is_some() && !scope.read_only();
        request.extensions_mut().insert(CanWrite(can_write));
        request.extensions_mut().insert(scope);
        next.run(request).await
    }

    /// A write from a browser must say where it comes from, and that must be
    /// one of our hosts: the `Origin`, else the `Referer`. With neither, a
    /// form body is refused (a cross-site form cannot be told from ours); a
    /// script (curl with a token, JSON or no body) has nothing to forge.
    fn browser_write_allowed(&self, headers: &HeaderMap) -> Result<(), String> {
        for (name, header) in [("Origin", ORIGIN), ("Referer", REFERER)] {
            let Some(value) = headers.get(&header) else {
                continue;
            };
            let value = value.to_str().unwrap_or("(not text)");
            return match authority_of(value) {
                Some(authority) if self.hosts.allows(&authority) => Ok(()),
                _ => Err(format!(
                    "Cross-site write refused: {name} \"{}\" is not one of http.allowed_hosts",
                    value.escape_default()
                )),
            };
        }
        if is_form(headers) {
            return Err(
                "A form posted without Origin or Referer is refused: it may come from another site"
                    .into(),
            );
        }
        Ok(())
    }
}

/// Middleware for `/api/…`.
pub async fn api_access(
    State(access): State<Arc<AdminAccess>>,
    request: Request,
    next: Next,
) -> Response {
    access.check(Surface::Api, request, next).await
}

/// Middleware for the pages and their buttons.
pub async fn page_access(
    State(access): State<Arc<AdminAccess>>,
    request: Request,
    next: Next,
) -> Response {
    access.check(Surface::Pages, request, next).await
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The SHA-256 of the token the request carries in its surface's scheme.
/// The scheme name is case-insensitive (RFC 9110 §11.1); the admin token is
/// compared as digests in constant time, so neither its bytes nor its length
/// show in the timing.
fn presented(headers: &HeaderMap, surface: Surface) -> Option<[u8; 32]> {
    let header = headers.get(AUTHORIZATION)?;
    let (scheme, credentials) = split_once(header.as_bytes(), b' ')?;
    let credentials = credentials.trim_ascii();
    let presented = match surface {
        Surface::Api if scheme.eq_ignore_ascii_case(b"bearer") => credentials.to_vec(),
        Surface::Pages if scheme.eq_ignore_ascii_case(b"basic") => {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(credentials)
                .ok()?;
            // `user:password`; the user name is not checked.
            split_once(&decoded, b':')?.1.to_vec()
        }
        _ => return None,
    };
    Some(digest(&presented))
}

fn split_once(bytes: &[u8], at: u8) -> Option<(&[u8], &[u8])> {
    let i = bytes.iter().position(|b| *b == at)?;
    Some((&bytes[..i], &bytes[i + 1..]))
}

/// `host[:port]` of an `Origin` or `Referer` URL, the port only when it is
/// not the scheme's default (as a browser's `Host` header has it). `None` for
/// `null` and anything but http(s).
fn authority_of(url: &str) -> Option<String> {
    let url = url::Url::parse(url).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}

/// The content types a page of another site can POST without asking (the
/// CORS-safelisted ones).
fn is_form(headers: &HeaderMap) -> bool {
    let Some(value) = headers.get(CONTENT_TYPE) else {
        return false;
    };
    let essence = value
        .as_bytes()
        .split(|b| *b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii();
    [
        b"application/x-www-form-urlencoded".as_slice(),
        b"multipart/form-data",
        b"text/plain",
    ]
    .iter()
    .any(|form| essence.eq_ignore_ascii_case(form))
}

/// 401 with the surface's challenge.
fn unauthorized(surface: Surface) -> Response {
    match surface {
        Surface::Api => (
            StatusCode::UNAUTHORIZED,
            [(WWW_AUTHENTICATE, "Bearer")],
            axum::Json(serde_json::json!({
                "error": "A valid Authorization: Bearer <admin token> is required on /api (Basic is for the pages)"
            })),
        )
            .into_response(),
        Surface::Pages => (
            StatusCode::UNAUTHORIZED,
            [(
                WWW_AUTHENTICATE,
                r#"Basic realm="syncward admin (any user name, the admin token as password)""#,
            )],
            "The admin token is required: Basic credentials with any user name and the token as the password.\n",
        )
            .into_response(),
    }
}

fn store_failed(surface: Surface, e: sqlx::Error) -> Response {
    // An outage: say so, as the pages do once the watcher has seen it.
    if crate::outages::unreachable(&e) {
        let outage = crate::outages::Outage::unseen(&e);
        return match surface {
            Surface::Api => crate::outages::unavailable_api(&outage),
            Surface::Pages => crate::outages::unavailable_page(&outage),
        };
    }
    tracing::error!(error = %e, "Checking an access token failed");
    let body = "The store could not be reached to check the token; see the daemon's log";
    match surface {
        Surface::Api => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(serde_json::json!({ "error": body })),
        )
            .into_response(),
        Surface::Pages => (StatusCode::SERVICE_UNAVAILABLE, body).into_response(),
    }
}

/// 403 with one line saying why: JSON on the API, HTML on the pages.
fn refused(surface: Surface, reason: &str) -> Response {
    match surface {
        Surface::Api => (
            StatusCode::FORBIDDEN,
            axum::Json(serde_json::json!({ "error": reason })),
        )
            .into_response(),
        Surface::Pages => (
            StatusCode::FORBIDDEN,
            Html(
                maud::html! {
                    (maud::DOCTYPE) title { "Refused" } p { (reason) }
                }
                .into_string(),
            ),
        )
            .into_response(),
    }
}

/// Whether a request may read `/metrics`: anyone while neither the admin nor
/// the scrape token (`http.metrics_token`) is set, else `Authorization:
/// Bearer` with either (compared as digests, in constant time).
pub fn scrape_allowed(
    headers: &HeaderMap,
    admin: Option<&SecretString>,
    metrics: Option<&SecretString>,
) -> bool {
    let tokens: Vec<[u8; 32]> = [admin, metrics]
        .into_iter()
        .flatten()
        .map(|t| digest(t.expose_secret().as_bytes()))
        .collect();
    if tokens.is_empty() {
        return true;
    }
    let Some(presented) = presented(headers, Surface::Api) else {
        return false;
    };
    // Both compared, whichever matches, so the timing says nothing.
    tokens
        .iter()
        .fold(false, |ok, t| ok | bool::from(presented.ct_eq(t)))
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    fn with(name: axum::http::HeaderName, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_str(value).unwrap());
        headers
    }

    fn basic(user_password: &str) -> String {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(user_password)
        )
    }

    #[test]
    fn each_surface_takes_its_own_scheme_only() {
        let token = Some(digest(TOKEN.as_bytes()));
        let bearer = with(AUTHORIZATION, &format!("Bearer {TOKEN}"));
        let lower = with(AUTHORIZATION, &format!("bearer {TOKEN}"));
        let basic_auth = with(AUTHORIZATION, &basic(&format!("admin:{TOKEN}")));
        assert_eq!(presented(&bearer, Surface::Api), token);
        assert_eq!(presented(&lower, Surface::Api), token);
        assert_eq!(presented(&basic_auth, Surface::Api), None);
        assert_eq!(presented(&basic_auth, Surface::Pages), token);
        assert_eq!(presented(&bearer, Surface::Pages), None);
        let wrong = with(AUTHORIZATION, &format!("Bearer {TOKEN}x"));
        assert_ne!(presented(&wrong, Surface::Api), token);
        assert_eq!(presented(&HeaderMap::new(), Surface::Api), None);
        let no_colon = with(AUTHORIZATION, &basic(TOKEN));
        assert_eq!(presented(&no_colon, Surface::Pages), None);
    }

    // A runtime for the (never used) store pool.
    #[tokio::test]
    async fn a_browser_write_must_come_from_an_allowed_host() {
        let access = AdminAccess::new(
            Some(&SecretString::from(TOKEN)),
            Door::new(
                sqlx::PgPool::connect_lazy("postgres://unused@127.0.0.1/unused").unwrap(),
                1,
            ),
            AllowedHosts::new("127.0.0.1:8080".parse().unwrap(), &[]),
        );
        let ok = |h: &HeaderMap| access.browser_write_allowed(h).is_ok();
        assert!(ok(&with(ORIGIN, "http://127.0.0.1:8080")));
        assert!(ok(&with(ORIGIN, "http://localhost:8080")));
        assert!(!ok(&with(ORIGIN, "http://evil.example")));
        assert!(!ok(&with(ORIGIN, "http://127.0.0.1:9090")));
        assert!(!ok(&with(ORIGIN, "null")));
        assert!(ok(&with(REFERER, "http://127.0.0.1:8080/syncs/a")));
        assert!(!ok(&with(REFERER, "http://evil.example/x")));
        assert!(!ok(&with(
            CONTENT_TYPE,
            "application/x-www-form-urlencoded"
        )));
        assert!(!ok(&with(CONTENT_TYPE, "Text/Plain; charset=utf-8")));
        assert!(!ok(&with(CONTENT_TYPE, "multipart/form-data; boundary=x")));
        assert!(ok(&with(CONTENT_TYPE, "application/json")));
        assert!(ok(&HeaderMap::new()));
    }
}
