//! Who may read and who may write. Scripts send `Authorization: Bearer
//! <token>` to `/api/…`; a browser, which cannot add that header to a link or
//! a form, answers the pages' Basic prompt with the token as the password.
//! Each surface takes its own scheme only, so credentials a browser saved for
//! the pages never work on the API. Every write (any method but GET and HEAD)
//! needs the token even on loopback, and one from a browser needs an
//! `Origin` (or `Referer`) naming an allowed host: a browser attaches saved
//! Basic credentials to any form a foreign page submits.

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

/// The admin token (as its SHA-256, so that comparing takes the same time
/// whatever the length of what is presented) and the hosts a browser write
/// may come from.
#[derive(Debug)]
pub struct AdminAccess {
    token: Option<[u8; 32]>,
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
    pub fn new(token: Option<&SecretString>, hosts: AllowedHosts) -> Self {
        Self {
            token: token.map(|t| digest(t.expose_secret().as_bytes())),
            hosts,
        }
    }

    async fn check(&self, surface: Surface, request: Request, next: Next) -> Response {
        let write = !matches!(*request.method(), Method::GET | Method::HEAD);
        let headers = request.headers();
        match &self.token {
            None if write => {
                return refused(
                    surface,
                    "Writes need the admin token, and none is configured: set http.admin_token \
                     (SYNCWARD__HTTP__ADMIN_TOKEN, at least 32 characters) and restart the daemon",
                );
            }
            Some(token) if !presents(headers, surface, token) => return unauthorized(surface),
            None | Some(_) => {}
        }
        if write && let Err(reason) = self.browser_write_allowed(headers) {
            return refused(surface, &reason);
        }
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

/// Whether the request carries the token in its surface's scheme. The
/// scheme name is case-insensitive (RFC 9110 §11.1); the token is compared
/// as SHA-256 digests in constant time, so neither its bytes nor its length
/// show in the timing.
fn presents(headers: &HeaderMap, surface: Surface, token: &[u8; 32]) -> bool {
    let Some(header) = headers.get(AUTHORIZATION) else {
        return false;
    };
    let Some((scheme, credentials)) = split_once(header.as_bytes(), b' ') else {
        return false;
    };
    let credentials = credentials.trim_ascii();
    let presented = match surface {
        Surface::Api if scheme.eq_ignore_ascii_case(b"bearer") => credentials.to_vec(),
        Surface::Pages if scheme.eq_ignore_ascii_case(b"basic") => {
            let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(credentials) else {
                return false;
            };
            // `user:password`; the user name is not checked.
            match split_once(&decoded, b':') {
                Some((_, password)) => password.to_vec(),
                None => return false,
            }
        }
        _ => return false,
    };
    bool::from(digest(&presented).ct_eq(token))
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
        let token = digest(TOKEN.as_bytes());
        let bearer = with(AUTHORIZATION, &format!("Bearer {TOKEN}"));
        let lower = with(AUTHORIZATION, &format!("bearer {TOKEN}"));
        let basic_auth = with(AUTHORIZATION, &basic(&format!("admin:{TOKEN}")));
        assert!(presents(&bearer, Surface::Api, &token));
        assert!(presents(&lower, Surface::Api, &token));
        assert!(!presents(&basic_auth, Surface::Api, &token));
        assert!(presents(&basic_auth, Surface::Pages, &token));
        assert!(!presents(&bearer, Surface::Pages, &token));
        let wrong = with(AUTHORIZATION, &format!("Bearer {TOKEN}x"));
        assert!(!presents(&wrong, Surface::Api, &token));
        assert!(!presents(&HeaderMap::new(), Surface::Api, &token));
        let no_colon = with(AUTHORIZATION, &basic(TOKEN));
        assert!(!presents(&no_colon, Surface::Pages, &token));
    }

    #[test]
    fn a_browser_write_must_come_from_an_allowed_host() {
        let access = AdminAccess::new(
            Some(&SecretString::from(TOKEN)),
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
