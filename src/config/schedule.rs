//! `Schedule`: a cron expression with seconds, checked by the same parser and
//! settings tokio-cron-scheduler uses, so what validates here is what runs.

use std::fmt;

use chrono::{DateTime, Utc};
use croner::Cron;
use croner::parser::{CronParser, Seconds};
use serde::{Deserialize, Serialize};

/// A validated cron expression with six fields (seconds first), e.g.
/// `0 */15 * * * *`. Day-of-month and day-of-week must both match when both are
/// set, as in tokio-cron-scheduler.
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Schedule {
    expression: String,
    cron: Cron,
}

impl Schedule {
    pub fn parse(expression: &str) -> Result<Self, String> {
        let fields = expression.split_whitespace().count();
        if fields != 6 {
            return Err(format!(
                "\"{expression}\" has {fields} fields; a schedule needs 6 (seconds minutes hours day-of-month month day-of-week), e.g. \"0 */15 * * * *\""
            ));
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Required)
            .dom_and_dow(true)
            .build()
            .parse(expression)
            .map_err(|e| format!("\"{expression}\" is not a valid cron expression: {e}"))?;
        // A pattern that parses but never fires (30 February) is refused too.
        cron.find_next_occurrence(&Utc::now(), false)
            .map_err(|e| format!("\"{expression}\" never fires: {e}"))?;
        Ok(Self {
            expression: expression.to_owned(),
            cron,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.expression
    }

    /// The first fire time strictly after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        self.cron.find_next_occurrence(&after, false).ok()
    }
}

impl TryFrom<String> for Schedule {
    type Error = String;
    fn try_from(value: String) -> Result<Self, String> {
        Self::parse(&value)
    }
}

impl From<Schedule> for String {
    fn from(s: Schedule) -> String {
        s.expression
    }
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Schedule").field(&self.expression).finish()
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.expression)
    }
}

impl PartialEq for Schedule {
    fn eq(&self, other: &Self) -> bool {
        self.expression == other.expression
    }
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Timelike};

    use super::*;

    #[test]
    fn minute_13_of_every_hour_fires_at_minute_13() {
        let s = Schedule::parse("0 13 * * * *").unwrap();
        let start = Utc.with_ymd_and_hms(2026, 3, 1, 10, 20, 0).unwrap();
        let first = s.next_after(start).unwrap();
        assert_eq!(first, Utc.with_ymd_and_hms(2026, 3, 1, 11, 13, 0).unwrap());
        let second = s.next_after(first).unwrap();
        assert_eq!(
            (second.hour(), second.minute(), second.second()),
            (12, 13, 0)
        );
    }

    #[test]
    fn five_field_cron_is_refused_with_the_reason() {
        let err = Schedule::parse("*/15 * * * *").unwrap_err();
        assert!(err.contains("has 5 fields; a schedule needs 6"), "{err}");
    }

    #[test]
    fn garbage_and_impossible_dates_are_refused() {
        assert!(Schedule::parse("0 61 * * * *").is_err());
        assert!(Schedule::parse("a b c d e f").is_err());
        assert!(Schedule::parse("0 0 0 30 2 *").is_err());
    }
}
