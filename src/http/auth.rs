//! Bearer-token check for the API, compared in constant time.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use secrecy::ExposeSecret;
use subtle::ConstantTimeEq;

use super::HttpState;

pub async fn require_token(
    State(state): State<HttpState>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = &state.token else {
        return next.run(request).await;
    };
    let presented = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    if bool::from(presented.as_bytes().ct_eq(token.expose_secret().as_bytes())) {
        next.run(request).await
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [("www-authenticate", "Bearer")],
            axum::Json(
                serde_json::json!({"error": "a valid Authorization: Bearer token is required"}),
            ),
        )
            .into_response()
    }
}
