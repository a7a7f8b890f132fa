//! Ids taken from the path, checked before any handler reads the store: a
//! sync id that breaks the `SyncId` rule (`%00`, 100 KB, upper case) or a run
//! id that is not a positive integer cannot name anything, so it is a 404 at
//! once (a NUL byte sent to Postgres was a 500 and an ERROR log line).

use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::response::Response;

use super::{api, pages};
use crate::config::SyncId;

/// `{id}` of `/api/syncs/{id}…` and `/syncs/{id}`.
#[derive(Debug)]
pub struct SyncIdPath(pub SyncId);

/// `{id}` of `/api/runs/{id}` and `/runs/{id}`.
#[derive(Debug)]
pub struct RunIdPath(pub i64);

/// `{id}/{verb}` of the page buttons, `/syncs/{id}/{verb}`.
#[derive(Debug)]
pub struct SyncActionPath {
    pub id: SyncId,
    pub verb: String,
}

/// A 404 in the surface's format: JSON on `/api`, HTML on the pages.
fn not_found(parts: &Parts, what: &str) -> Response {
    if parts.uri.path().starts_with("/api/") {
        api::not_found(what)
    } else {
        pages::not_found(what)
    }
}

impl<S: Send + Sync> FromRequestParts<S> for SyncIdPath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        // A path that is not UTF-8 once decoded is a rejection too: no such sync.
        match Path::<String>::from_request_parts(parts, state).await {
            Ok(Path(raw)) => SyncId::parse(&raw)
                .map(Self)
                .map_err(|_| not_found(parts, "sync")),
            Err(_) => Err(not_found(parts, "sync")),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for RunIdPath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match Path::<String>::from_request_parts(parts, state).await {
            // Why it does not parse makes no difference: no such run.
            Ok(Path(raw)) => raw
                .parse::<i64>()
                .ok()
                .filter(|id| *id > 0)
                .map(Self)
                .ok_or_else(|| not_found(parts, "run")),
            Err(_) => Err(not_found(parts, "run")),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for SyncActionPath {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        match Path::<(String, String)>::from_request_parts(parts, state).await {
            Ok(Path((raw, verb))) => match SyncId::parse(&raw) {
                Ok(id) => Ok(Self { id, verb }),
                Err(_) => Err(not_found(parts, "sync")),
            },
            Err(_) => Err(not_found(parts, "sync")),
        }
    }
}
