//! The admin token check, compared in constant time. Scripts send
//! `Authorization: Bearer <token>`; a browser, which cannot add that header to
//! a link or a form, answers the Basic prompt with the token as the password.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use secrecy::ExposeSecret;
use subtle::ConstantTimeEq;

use super::HttpState;

/// The token a request presents, from either scheme.
fn presented(request: &Request) -> Option<String> {
    let header = request.headers().get("authorization")?.to_str().ok()?;
    if let Some(token) = header.strip_prefix("Bearer ") {
        return Some(token.to_string());
    }
    let encoded = header.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    // `user:password`; the user name is not checked.
    text.split_once(':')
        .map(|(_, password)| password.to_string())
}

pub async fn require_token(
    State(state): State<HttpState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = &state.token else {
        return next.run(request).await;
    };
    let presented = presented(&request).unwrap_or_default();
    if bool::from(presented.as_bytes().ct_eq(token.expose_secret().as_bytes())) {
        return next.run(request).await;
    }
    if request.uri().path().starts_with("/api/") {
        (
            StatusCode::UNAUTHORIZED,
            [("www-authenticate", "Bearer")],
            axum::Json(
                serde_json::json!({"error": "a valid Authorization: Bearer token is required"}),
            ),
        )
            .into_response()
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(
                "www-authenticate",
                r#"Basic realm="syncward admin (any user name, the admin token as password)""#,
            )],
            "The admin token is required: any user name, the token as the password.",
        )
            .into_response()
    }
}
