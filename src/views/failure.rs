//! A failure code as the pages and the CLI show it: the code with its three
//! sentences (what happened, what next, whose job).

use serde::Serialize;

use super::layout::Cell;
use crate::failure::{FailureCode, FailureContext, Owner};

/// Whose job a failure is, in the third person wherever it is read (a page,
/// the CLI, an alert): the reader may be either.
pub fn whose_job(owner: Owner) -> &'static str {
    match owner {
        Owner::Customer => "the sync's owner",
        Owner::Operator => "the operators",
    }
}

/// A failure code with its three sentences.
#[derive(Debug, Clone, Serialize)]
pub struct FailureView {
    pub code: FailureCode,
    pub what_happened: &'static str,
    /// In the words of the sync where it is known (`of_in`).
    pub what_next: String,
    pub owner: Owner,
}

impl FailureView {
    pub fn of(code: Option<&str>) -> Option<Self> {
        let code = FailureCode::parse(code?)?;
        Some(Self {
            code,
            what_happened: code.what_happened(),
            what_next: code.what_next().to_string(),
            owner: code.owner(),
        })
    }

    /// The same, its advice naming the sync's own secrets, file and id.
    pub fn of_in(code: Option<&str>, context: &FailureContext) -> Option<Self> {
        let mut view = Self::of(code)?;
        view.what_next = view.code.what_next_for(context);
        Some(view)
    }

    pub(super) fn facts(&self, detail: Option<&str>) -> Vec<(&'static str, Cell)> {
        let mut facts = vec![
            ("failure", Cell::from(self.code.as_str())),
            ("what happened", self.what_happened.into()),
            ("what next", self.what_next.clone().into()),
            ("whose job", whose_job(self.owner).into()),
        ];
        if let Some(detail) = detail {
            facts.push(("detail", detail.into()));
        }
        facts
    }
}
