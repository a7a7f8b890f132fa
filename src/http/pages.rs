//! Server-rendered HTML pages (`/`, `/syncs/{id}`, `/runs/{id}`, `/trace`) and the
//! sync page's buttons. Content comes from `views`, shared with the CLI; this
//! file only lays it out. No JavaScript: the buttons are plain form POSTs, a
//! running run's page reloads itself (a meta refresh), and the chart of recent
//! runs is inline SVG.

use axum::Extension;
use axum::extract::Query;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};
use maud::{DOCTYPE, Markup, PreEscaped, html};

use super::auth::CanWrite;
use super::path_ids::{RunIdPath, SyncActionPath, SyncIdPath};
use crate::ops::{OpsError, PutBackFilter, Scoped};
use crate::states::{RunStatus, SyncStatus};
use crate::views::{Body, Cell, Page, RunBar, chart_words};

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:72rem;padding:0 1rem;color:#1b1f24}
h1{font-size:1.5rem}h2{font-size:1.1rem;margin-top:2rem;border-bottom:1px solid #d0d7de}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:.3rem .6rem;border-bottom:1px solid #eaeef2;vertical-align:top}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.3rem 1rem}dt{font-weight:600}dd{margin:0}
pre{background:#f6f8fa;padding:1rem;overflow:auto}.actions form{display:inline;margin-right:.5rem}
button{padding:.4rem .9rem}nav a{margin-right:1rem}";

fn layout(page: &Page, actions: Option<Markup>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                @if let Some(seconds) = page.refresh {
                    meta http-equiv="refresh" content=(seconds);
                }
                title { (page.title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                nav { a href="/" { "All syncs" } a href="/trace" { "Trace an address" } }
                h1 { (page.title) }
                @if let Some(actions) = actions { div.actions { (actions) } }
                @for section in &page.sections {
                    section {
                        h2 { (section.title) }
                        (body(&section.body))
                    }
                }
            }
        }
    }
}

fn cell(c: &Cell) -> Markup {
    html! {
        @match &c.link {
            Some(link) => a href=(link) { (c.text) },
            None => (c.text),
        }
    }
}

fn body(b: &Body) -> Markup {
    html! {
        @match b {
            Body::Facts(facts) => dl {
                @for (label, value) in facts { dt { (label) ":" } dd { (cell(value)) } }
            },
            Body::Table { headers, rows } => table {
                thead { tr { @for h in headers { th { (h) } } } }
                tbody { @for row in rows { tr { @for c in row { td { (cell(c)) } } } } }
            },
            Body::Text(text) => pre { (text) },
            Body::Note(note) => p { (note) },
            Body::Chart(bars) => (chart(bars)),
        }
    }
}

/// Colour of a run's bar by how it ended.
fn colour(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Succeeded => "#2da44e",
        RunStatus::Failed => "#cf222e",
        RunStatus::Running => "#0969da",
        RunStatus::Queued | RunStatus::Skipped => "#8c959f",
    }
}

/// Recent runs as two rows of bars, oldest on the left: duration above,
/// records read below, each coloured by outcome and linking to its run. The
/// summary line says the same in words.
fn chart(bars: &[RunBar]) -> Markup {
    const WIDTH: f64 = 600.0;
    const ROW: f64 = 60.0;
    // At least 25 slots, so a few runs are bars, not blocks.
    let slot = WIDTH / bars.len().max(25) as f64;
    let longest = bars
        .iter()
        .map(|b| b.seconds)
        .fold(0.0, f64::max)
        .max(0.001);
    let most = bars.iter().map(|b| b.records).max().unwrap_or(0).max(1) as f64;
    html! {
        figure {
            svg.runs xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(2.0 * ROW + 30.0)
                role="img" aria-label="duration and records read of recent runs" {
                text x="0" y="12" font-size="11" { "duration (longest " (format!("{longest:.1}")) " s)" }
                text x="0" y=(ROW + 27.0) font-size="11" { "records read (most " (most) ")" }
                @for (i, bar) in bars.iter().enumerate() {
                    @let x = i as f64 * slot + 1.0;
                    @let w = (slot - 2.0).max(1.0);
                    @let h1 = (bar.seconds / longest * (ROW - 16.0)).max(1.0);
                    @let h2 = (bar.records as f64 / most * (ROW - 16.0)).max(1.0);
                    a href={ "/runs/" (bar.run) } {
                        title { "run #" (bar.run) ": " (bar.status) ", " (format!("{:.1}", bar.seconds)) " s, " (bar.records) " records" }
                        rect x=(x) y=(ROW - h1 + 14.0) width=(w) height=(h1) fill=(colour(bar.status)) {}
                        rect x=(x) y=(2.0 * ROW - h2 + 28.0) width=(w) height=(h2) fill=(colour(bar.status)) {}
                    }
                }
            }
            figcaption { (chart_words(bars)) }
        }
    }
}

pub(super) fn not_found(what: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Html(format!(
            "<!DOCTYPE html><title>Not found</title><p>No such {what}.</p>"
        )),
    )
        .into_response()
}

fn internal(e: impl Into<OpsError>) -> Response {
    let e = e.into();
    if let OpsError::Store(store) = &e
        && crate::outages::unreachable(store)
    {
        // The outage itself is logged once by the watcher.
        return crate::outages::unavailable_page(&crate::outages::Outage::unseen(store));
    }
    tracing::error!(error = %e, "Page request failed");
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        Html("<!DOCTYPE html><title>Error</title><p>Internal error; see the daemon's log.</p>"),
    )
        .into_response()
}

pub async fn overview(door: Scoped) -> Response {
    match door.overview().await {
        Ok(view) => Html(layout(&view.page(), None).into_string()).into_response(),
        Err(e) => internal(e),
    }
}

/// `/syncs/{id}?version=N`: the page with version N's definition.
#[derive(Debug, serde::Deserialize)]
pub struct VersionQuery {
    version: Option<i32>,
}

pub async fn sync_page(
    door: Scoped,
    Extension(CanWrite(can_write)): Extension<CanWrite>,
    SyncIdPath(id): SyncIdPath,
    Query(query): Query<VersionQuery>,
) -> Response {
    match door.sync_view(id.as_str(), query.version).await {
        Ok(view) if view.sync.status == SyncStatus::Archived => {
            Html(layout(&view.page(), None).into_string()).into_response()
        }
        // Buttons that could only be refused are not offered.
        Ok(view) if !can_write => {
            let note = html! {
                p { "Read-only here: pausing, resuming and running need the admin token (http.admin_token) or a workspace token that is not read-only." }
            };
            Html(layout(&view.page(), Some(note)).into_string()).into_response()
        }
        Ok(view) => {
            let paused = view.sync.status == SyncStatus::Paused;
            let actions = html! {
                @if paused {
                    form method="post" action={ "/syncs/" (id) "/resume" } { button type="submit" { "Resume" } }
                } @else {
                    form method="post" action={ "/syncs/" (id) "/pause" } {
                        label { "Why (optional) " input type="text" name="reason" maxlength="500"; }
                        " "
                        button type="submit" { "Pause" }
                    }
                }
                // A paused sync runs nothing: resume it first.
                @if !paused {
                    form method="post" action={ "/syncs/" (id) "/run" } { button type="submit" { "Run now" } }
                }
                @if view.rejections.quarantined + view.rejections.rejected > 0 {
                    form method="post" action={ "/syncs/" (id) "/retry-rejected" } {
                        button type="submit" { "Retry quarantined and rejected records" }
                    }
                }
            };
            Html(layout(&view.page(), Some(actions)).into_string()).into_response()
        }
        Err(OpsError::NotFound) => not_found("sync"),
        Err(e) => internal(e),
    }
}

pub async fn run_page(door: Scoped, RunIdPath(id): RunIdPath) -> Response {
    match door.run_view(id).await {
        Ok(view) => Html(layout(&view.page(), None).into_string()).into_response(),
        Err(OpsError::NotFound) => not_found("run"),
        Err(e) => internal(e),
    }
}

/// `POST /syncs/{id}/pause|resume|run|retry-rejected`: the sync page's
/// buttons, then back to it. The token and the form's origin were checked
/// before this runs (`auth`).
pub async fn action(
    door: Scoped,
    SyncActionPath { id, verb }: SyncActionPath,
    form: axum::body::Bytes,
) -> Response {
    let id = id.as_str();
    let done = match verb.as_str() {
        "pause" => {
            let reason = url::form_urlencoded::parse(&form)
                .find(|(k, _)| k == "reason")
                .map(|(_, v)| v.into_owned());
            door.pause(id, reason.as_deref()).await.map(drop)
        }
        "resume" => door.resume(id).await.map(drop),
        // The page offers no force: a paused sync is resumed first.
        "run" => door.run_now(id, false).await.map(drop),
        "retry-rejected" => door
            .retry_rejected(id, &PutBackFilter::default())
            .await
            .map(drop),
        _ => return not_found("action"),
    };
    match done {
        Ok(()) => Redirect::to(&format!("/syncs/{id}")).into_response(),
        Err(OpsError::NotFound) => not_found("sync"),
        Err(OpsError::Store(e)) => internal(e),
        Err(OpsError::Paused { .. }) => (
            StatusCode::CONFLICT,
            "the sync is paused; resume it before running it",
        )
            .into_response(),
        Err(OpsError::BadInput(why)) => (StatusCode::BAD_REQUEST, why).into_response(),
        Err(
            e @ (OpsError::NoVersion(_)
            | OpsError::Unpublishable(_)
            | OpsError::CannotPublish
            | OpsError::AdminOnly),
        ) => internal(e),
        Err(e @ (OpsError::Archived | OpsError::ReadOnly)) => {
            let status = if matches!(e, OpsError::ReadOnly) {
                StatusCode::FORBIDDEN
            } else {
                StatusCode::CONFLICT
            };
            (status, e.to_string()).into_response()
        }
    }
}

/// `/trace?email=…[&sync=ID]`: the trace of one address (a form without one).
#[derive(Debug, serde::Deserialize)]
pub struct TraceQuery {
    #[serde(default)]
    email: String,
    sync: Option<String>,
}

pub async fn trace_page(door: Scoped, Query(query): Query<TraceQuery>) -> Response {
    let form = html! {
        form method="get" action="/trace" {
            label { "E-mail address " input type="email" name="email" value=(query.email) required; }
            " "
            button type="submit" { "Trace" }
        }
    };
    if query.email.trim().is_empty() {
        let page = Page {
            title: "Trace an address".into(),
            sections: Vec::new(),
            refresh: None,
        };
        return Html(layout(&page, Some(form)).into_string()).into_response();
    }
    match door
        .trace(
            &query.email,
            query.sync.as_deref(),
            crate::ops::DEFAULT_CALLS,
        )
        .await
    {
        Ok(trace) => Html(layout(&trace.page(), Some(form)).into_string()).into_response(),
        Err(OpsError::NotFound) => not_found("sync"),
        Err(OpsError::BadInput(why)) => (StatusCode::BAD_REQUEST, why).into_response(),
        Err(e) => internal(e),
    }
}
