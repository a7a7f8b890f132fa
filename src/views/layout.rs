//! The shape every view renders to: a page of titled sections holding facts,
//! tables, text or a note, with the links between pages. `to_text` is the
//! terminal's rendering; `http::pages` renders the same value as HTML.

use crate::states::RunStatus;

/// One page: a title and its sections, in reading order.
#[derive(Debug, Clone)]
pub struct Page {
    pub title: String,
    pub sections: Vec<Section>,
    /// Seconds after which the HTML page reloads itself (a run in progress);
    /// `None` for a page that does not change by itself.
    pub refresh: Option<u32>,
}

#[derive(Debug, Clone)]
pub struct Section {
    pub title: String,
    pub body: Body,
}

#[derive(Debug, Clone)]
pub enum Body {
    /// Label and value pairs.
    Facts(Vec<(&'static str, Cell)>),
    Table {
        headers: Vec<&'static str>,
        rows: Vec<Vec<Cell>>,
    },
    /// Preformatted text (the definition).
    Text(String),
    /// A sentence standing for an empty list.
    Note(String),
    /// Recent runs, oldest first: drawn as bars in HTML, summed up in text.
    Chart(Vec<RunBar>),
}

/// One run in a chart of recent runs.
#[derive(Debug, Clone)]
pub struct RunBar {
    pub run: i64,
    pub status: RunStatus,
    /// From start to finish (or to now, while running); 0 when it never started.
    pub seconds: f64,
    /// Records read.
    pub records: i64,
}

/// A value, with the page it links to where there is one.
#[derive(Debug, Clone)]
pub struct Cell {
    pub text: String,
    pub link: Option<String>,
}

impl Cell {
    pub(super) fn linked(text: impl Into<String>, link: String) -> Self {
        Self {
            text: text.into(),
            link: Some(link),
        }
    }
}

impl<T: Into<String>> From<T> for Cell {
    fn from(text: T) -> Self {
        Self {
            text: text.into(),
            link: None,
        }
    }
}

impl Page {
    /// The page as terminal text: the title, then each section indented.
    pub fn to_text(&self) -> String {
        let mut out = format!("{}\n", self.title);
        for section in &self.sections {
            out.push_str(&format!("\n{}\n", section.title));
            match &section.body {
                Body::Facts(facts) => {
                    let width = facts.iter().map(|(l, _)| l.len()).max().unwrap_or(0);
                    for (label, value) in facts {
                        out.push_str(&format!(
                            "  {:<width$}  {}\n",
                            format!("{label}:"),
                            value.text,
                            width = width + 1
                        ));
                    }
                }
                Body::Table { headers, rows } => {
                    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
                    for row in rows {
                        for (i, cell) in row.iter().enumerate() {
                            widths[i] = widths[i].max(cell.text.chars().count());
                        }
                    }
                    let line = |cells: Vec<&str>| {
                        let mut l = String::from(" ");
                        for (i, c) in cells.iter().enumerate() {
                            l.push_str(&format!(" {:<w$}", c, w = widths[i]));
                        }
                        format!("{}\n", l.trim_end())
                    };
                    out.push_str(&line(headers.to_vec()));
                    for row in rows {
                        out.push_str(&line(row.iter().map(|c| c.text.as_str()).collect()));
                    }
                }
                Body::Text(text) => {
                    for l in text.lines() {
                        if l.is_empty() {
                            out.push('\n');
                        } else {
                            out.push_str(&format!("  {l}\n"));
                        }
                    }
                }
                Body::Note(note) => out.push_str(&format!("  {note}\n")),
                Body::Chart(bars) => out.push_str(&format!("  {}\n", chart_words(bars))),
            }
        }
        out
    }
}

/// A chart of runs in one line: how they ended, how long they took, how
/// much they read.
pub fn chart_words(bars: &[RunBar]) -> String {
    if bars.is_empty() {
        return "No runs yet.".into();
    }
    let mut ended: Vec<(RunStatus, usize)> = Vec::new();
    for bar in bars {
        match ended.iter_mut().find(|(s, _)| *s == bar.status) {
            Some((_, n)) => *n += 1,
            None => ended.push((bar.status, 1)),
        }
    }
    let ended: Vec<String> = ended.iter().map(|(s, n)| format!("{n} {s}")).collect();
    let mut seconds: Vec<f64> = bars.iter().map(|b| b.seconds).collect();
    seconds.sort_by(f64::total_cmp);
    let records: i64 = bars.iter().map(|b| b.records).sum();
    format!(
        "last {} runs: {}; duration median {:.1} s, longest {:.1} s; {records} records read",
        bars.len(),
        ended.join(", "),
        seconds[seconds.len() / 2],
        seconds[seconds.len() - 1],
    )
}

/// A saved cursor in words. Sources write `{"type", "value"}` (a column's
/// last value), `{"cursor"}` (an API's next-page token) or `{"after"}` (a
/// GraphQL end cursor); anything else is shown as it is stored.
pub fn cursor_words(cursor: Option<&serde_json::Value>) -> String {
    let Some(cursor) = cursor else {
        return "the source's start".into();
    };
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Some(value) = cursor.get("value") {
        return match cursor.get("type").and_then(|t| t.as_str()) {
            Some(kind) => format!("after {} ({kind})", text(value)),
            None => format!("after {}", text(value)),
        };
    }
    if let Some(token) = cursor.get("cursor") {
        return format!("page token {}", text(token));
    }
    if let Some(after) = cursor.get("after") {
        return format!("after {}", text(after));
    }
    cursor.to_string()
}

/// A duration for people: `42.1 s`, `3 min 20 s`, `2 h 5 min`.
pub fn duration_words(seconds: f64) -> String {
    let s = seconds.max(0.0);
    if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{} min {} s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{} h {} min",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

/// Formats a timestamp for people: UTC, to the second.
pub fn when(at: Option<chrono::DateTime<chrono::Utc>>) -> String {
    at.map(|t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_else(|| "-".into())
}

/// A run's number, linking to its page.
pub(super) fn run_link(id: i64) -> Cell {
    Cell::linked(format!("#{id}"), format!("/runs/{id}"))
}

/// A sync's id, linking to its page.
pub(super) fn sync_link(id: &str) -> Cell {
    Cell::linked(id, format!("/syncs/{id}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn cursors_read_as_words() {
        assert_eq!(cursor_words(None), "the source's start");
        assert_eq!(
            cursor_words(Some(&json!({"type": "int8", "value": "10"}))),
            "after 10 (int8)"
        );
        assert_eq!(
            cursor_words(Some(&json!({"cursor": "abc"}))),
            "page token abc"
        );
        assert_eq!(cursor_words(Some(&json!({"after": "Y3"}))), "after Y3");
        assert_eq!(cursor_words(Some(&json!({"x": 1}))), r#"{"x":1}"#);
    }

    #[test]
    fn a_chart_sums_up_its_runs_in_one_line() {
        let bar = |run, status, seconds, records| RunBar {
            run,
            status,
            seconds,
            records,
        };
        let bars = [
            bar(1, RunStatus::Succeeded, 1.0, 10),
            bar(2, RunStatus::Failed, 3.0, 0),
            bar(3, RunStatus::Succeeded, 2.0, 5),
        ];
        assert_eq!(
            chart_words(&bars),
            "last 3 runs: 2 succeeded, 1 failed; duration median 2.0 s, longest 3.0 s; 15 records read"
        );
        assert_eq!(duration_words(200.0), "3 min 20 s");
    }
}
