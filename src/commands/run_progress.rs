//! How a foreground run shows itself while it goes: a progress line on a
//! terminal (indicatif), a line per page when piped (logs keep every page),
//! and with `--json` one JSON object per line: `started`, each `page`, and
//! `finished` with the outcome and the failure's three sentences.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use super::output::outln;
use crate::failure::FailureCode;
use crate::store::runs::RunCounts;
use crate::worker::{PageProgress, RunOutcome};

/// Where a foreground run's progress goes.
#[derive(Debug)]
pub enum RunProgress {
    /// A terminal: one line, redrawn.
    Bar(ProgressBar),
    /// Piped: a line per page.
    Lines,
    /// `--json`: an object per line.
    Json,
}

impl RunProgress {
    pub fn new(json: bool) -> Self {
        if json {
            RunProgress::Json
        } else if std::io::stdout().is_terminal() {
            let bar = ProgressBar::new_spinner();
            // The template is a constant; it parses.
            if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed} {msg}") {
                bar.set_style(style);
            }
            bar.enable_steady_tick(Duration::from_millis(200));
            RunProgress::Bar(bar)
        } else {
            RunProgress::Lines
        }
    }

    pub fn started(&self, run: i64, sync: &str) {
        match self {
            RunProgress::Json => {
                outln!("{}", json!({"event": "started", "run": run, "sync": sync}))
            }
            RunProgress::Bar(bar) => {
                bar.println(format!(
                    "Run {run} of sync {sync}: started in the foreground."
                ));
                bar.set_message("reading the first page");
            }
            RunProgress::Lines => {
                outln!("Run {run} of sync {sync}: started in the foreground.")
            }
        }
    }

    pub fn page(&self, p: &PageProgress, started: Instant) {
        let seconds = started.elapsed().as_secs_f64();
        let rate = p.counts.read as f64 / seconds.max(0.001);
        let c = &p.counts;
        match self {
            RunProgress::Json => outln!(
                "{}",
                json!({
                    "event": "page", "page": p.page, "records": p.records,
                    "counts": counts_json(c), "seconds": round(seconds),
                    "records_per_second": rate.round(),
                })
            ),
            RunProgress::Bar(bar) => bar.set_message(format!(
                "page {}: {} read, {} written, {} replayed, {} rejected; {rate:.0} records/s",
                p.page, c.read, c.written, c.replayed, c.rejected
            )),
            RunProgress::Lines => outln!(
                "  page {}: {} records; so far {} read, {} written, {} replayed, {} rejected, {} re-sent; {seconds:.1} s, {rate:.0} records/s",
                p.page,
                p.records,
                c.read,
                c.written,
                c.replayed,
                c.rejected,
                c.resent
            ),
        }
    }

    /// The run's end: its outcome, counts and, for a failure, what happened,
    /// what next and whose job it is.
    pub fn finished(
        &self,
        run: i64,
        outcome: &RunOutcome,
        counts: &RunCounts,
        took: f64,
        context: &crate::failure::FailureContext,
    ) {
        if let RunProgress::Bar(bar) = self {
            bar.finish_and_clear();
        }
        let rate = counts.read as f64 / took.max(0.001);
        if let RunProgress::Json = self {
            let (status, failure) = match outcome {
                RunOutcome::Succeeded => ("succeeded", None),
                // A foreground run never defers; counted as stopped should it.
                RunOutcome::Stopped | RunOutcome::Deferred(_) => ("stopped", None),
                RunOutcome::Skipped(code) => ("skipped", Some((*code, String::new()))),
                RunOutcome::Failed { code, detail } => ("failed", Some((*code, detail.clone()))),
            };
            let failure = failure.map(|(code, detail)| {
                json!({
                    "code": code.to_string(), "detail": detail,
                    "what_happened": code.what_happened(), "what_next": code.what_next_for(context),
                    "whose_job": owner_words(code),
                })
            });
            outln!(
                "{}",
                json!({
                    "event": "finished", "run": run, "status": status,
                    "counts": counts_json(counts), "seconds": round(took),
                    "records_per_second": rate.round(), "failure": failure,
                })
            );
            return;
        }
        let summary = format!(
            "{} read, {} written, {} replayed, {} rejected, {} re-sent in {took:.1} s ({rate:.0} records/s)",
            counts.read, counts.written, counts.replayed, counts.rejected, counts.resent,
        );
        match outcome {
            RunOutcome::Succeeded => outln!("Run {run} succeeded: {summary}."),
            RunOutcome::Skipped(code) => outln!("Run {run} skipped: {}", code.what_happened()),
            RunOutcome::Stopped | RunOutcome::Deferred(_) => {
                outln!("Run {run} stopped before the end of the source: {summary}.")
            }
            RunOutcome::Failed { code, detail } => {
                outln!("Run {run} failed ({code}): {summary}.");
                outln!("  What happened: {}", code.what_happened());
                outln!("  Detail:        {detail}");
                outln!("  What next:     {}", code.what_next_for(context));
                outln!("  Whose job:     {}", owner_words(*code));
            }
        }
    }
}

fn counts_json(c: &RunCounts) -> serde_json::Value {
    json!({
        "read": c.read, "written": c.written, "replayed": c.replayed,
        "rejected": c.rejected, "resent": c.resent,
    })
}

/// Seconds to the millisecond.
fn round(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

pub fn owner_words(code: FailureCode) -> &'static str {
    crate::views::whose_job(code.owner())
}
