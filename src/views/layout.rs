//! The shape every view renders to: a page of titled sections holding facts,
//! tables, text or a note, with the links between pages. `to_text` is the
//! terminal's rendering; `http::pages` renders the same value as HTML.

/// One page: a title and its sections, in reading order.
#[derive(Debug, Clone)]
pub struct Page {
    pub title: String,
    pub sections: Vec<Section>,
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
            }
        }
        out
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
