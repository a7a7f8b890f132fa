//! When a sync runs: `Schedule`, a cron expression with seconds (checked by the
//! same parser and settings tokio-cron-scheduler uses), the `Timezone` it is
//! read in, and `CatchUp`, what a tick missed while no daemon ran becomes.

use std::fmt;

use chrono::{DateTime, Timelike, Utc};
use chrono_tz::Tz;
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
        if let Some(fields) = macro_fields(expression) {
            return Err(format!(
                "{} is a shorthand; write its six fields (seconds first): \"{fields}\"",
                expression.trim()
            ));
        }
        let fields = expression.split_whitespace().count();
        if fields != 6 {
            return Err(format!(
                "\"{expression}\" has {fields} {}; a schedule needs 6 (seconds minutes hours day-of-month month day-of-week), e.g. \"0 */15 * * * *\"",
                if fields == 1 { "field" } else { "fields" }
            ));
        }
        out_of_range(expression)?;
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

    /// The first fire time strictly after `after`, the expression read as wall
    /// clock time in `timezone` (daylight saving followed, as croner does: a
    /// time skipped by the spring change fires once at the jump, a repeated
    /// one fires once).
    pub fn next_after_in(
        &self,
        after: DateTime<Utc>,
        timezone: Option<&Timezone>,
    ) -> Option<DateTime<Utc>> {
        // croner keeps the start's fraction of a second; fire times are whole.
        let after = after.with_nanosecond(0).unwrap_or(after);
        match timezone {
            None => self.next_after(after),
            Some(zone) => self
                .cron
                .find_next_occurrence(&after.with_timezone(&zone.0), false)
                .ok()
                .map(|local| local.with_timezone(&Utc)),
        }
    }
}

/// The six fields a cron shorthand (`@hourly`, …) stands for, if it is one.
fn macro_fields(expression: &str) -> Option<&'static str> {
    Some(match expression.trim().to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 0 1 1 *",
        "@monthly" => "0 0 0 1 * *",
        "@weekly" => "0 0 0 * * 0",
        "@daily" | "@midnight" => "0 0 0 * * *",
        "@hourly" => "0 0 * * * *",
        _ => return None,
    })
}

/// The first number outside its field's range, named with the field and
/// the range (`minute 61: 0–59`): the parser's own message names neither.
fn out_of_range(expression: &str) -> Result<(), String> {
    const FIELDS: [(&str, u32, u32); 6] = [
        ("second", 0, 59),
        ("minute", 0, 59),
        ("hour", 0, 23),
        ("day-of-month", 1, 31),
        ("month", 1, 12),
        ("day-of-week", 0, 7),
    ];
    for (field, (name, low, high)) in expression.split_whitespace().zip(FIELDS) {
        for part in field.split(',') {
            // `a-b/step`: the step is a count, not a value of the field; in
            // `5#2` (the second Friday) the number after `#` is the week.
            let values = part.split(['/', '#']).next().unwrap_or(part);
            for value in values.split('-') {
                let digits: String = value.chars().take_while(char::is_ascii_digit).collect();
                let Ok(number) = digits.parse::<u32>() else {
                    continue;
                };
                if number < low || number > high {
                    return Err(format!(
                        "\"{expression}\": {name} {number} is out of range ({name} is {low}–{high})"
                    ));
                }
            }
        }
    }
    Ok(())
}

/// An IANA time zone name (`Europe/Paris`, `America/New_York`) a schedule is
/// read in. Without one, schedules are UTC.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Timezone(Tz);

impl Timezone {
    pub fn parse(name: &str) -> Result<Self, String> {
        name.parse::<Tz>().map(Self).map_err(|_| {
            format!("\"{name}\" is not a time zone name; use an IANA name such as \"Europe/Paris\" or \"UTC\"")
        })
    }

    pub fn name(&self) -> &'static str {
        self.0.name()
    }
}

impl TryFrom<String> for Timezone {
    type Error = String;
    fn try_from(value: String) -> Result<Self, String> {
        Self::parse(&value)
    }
}

impl From<Timezone> for String {
    fn from(zone: Timezone) -> String {
        zone.name().to_owned()
    }
}

impl fmt::Debug for Timezone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What a tick that fell while no daemon ran becomes when one starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// One run at once, however many ticks were missed.
    #[default]
    Once,
    /// No run: the sync waits for its next tick.
    Skip,
}

impl CatchUp {
    pub fn is_once(&self) -> bool {
        *self == Self::Once
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
    fn a_daily_three_oclock_in_new_york_follows_daylight_saving() {
        let s = Schedule::parse("0 0 3 * * *").unwrap();
        let zone = Timezone::parse("America/New_York").unwrap();
        // Winter: UTC-5.
        let winter = Utc.with_ymd_and_hms(2026, 1, 10, 12, 0, 0).unwrap();
        assert_eq!(
            s.next_after_in(winter, Some(&zone)).unwrap(),
            Utc.with_ymd_and_hms(2026, 1, 11, 8, 0, 0).unwrap()
        );
        // Summer: UTC-4.
        let summer = Utc.with_ymd_and_hms(2026, 7, 10, 12, 0, 0).unwrap();
        assert_eq!(
            s.next_after_in(summer, Some(&zone)).unwrap(),
            Utc.with_ymd_and_hms(2026, 7, 11, 7, 0, 0).unwrap()
        );
        let fraction = summer + chrono::TimeDelta::milliseconds(250);
        assert_eq!(
            s.next_after_in(fraction, None).unwrap(),
            Utc.with_ymd_and_hms(2026, 7, 11, 3, 0, 0).unwrap()
        );
    }

    #[test]
    fn an_unknown_time_zone_is_refused_with_an_example() {
        let err = Timezone::parse("Mars/Olympus").unwrap_err();
        assert!(err.contains("IANA name such as"), "{err}");
        assert_eq!(
            Timezone::parse("Europe/Paris").unwrap().name(),
            "Europe/Paris"
        );
    }

    #[test]
    fn five_field_cron_is_refused_with_the_reason() {
        let err = Schedule::parse("*/15 * * * *").unwrap_err();
        assert!(err.contains("has 5 fields; a schedule needs 6"), "{err}");
    }

    #[test]
    fn a_number_out_of_range_names_its_field_and_the_range() {
        let err = Schedule::parse("0 61 * * * *").unwrap_err();
        assert!(
            err.contains("minute 61 is out of range (minute is 0–59)"),
            "{err}"
        );
        let err = Schedule::parse("0 0 0 1 13 *").unwrap_err();
        assert!(err.contains("month 13"), "{err}");
        let err = Schedule::parse("0 0 9-25 * * *").unwrap_err();
        assert!(err.contains("hour 25"), "{err}");
        assert!(Schedule::parse("0 */15 * * * *").is_ok());
        assert!(Schedule::parse("0 0 12 * * 5#2").is_ok());
        assert!(Schedule::parse("0 0 12 * JAN-MAR MON-FRI").is_ok());
    }

    #[test]
    fn a_shorthand_is_refused_with_its_six_fields() {
        let err = Schedule::parse("@hourly").unwrap_err();
        assert!(
            err.contains("@hourly") && err.contains("\"0 0 * * * *\""),
            "{err}"
        );
        let err = Schedule::parse("@Daily").unwrap_err();
        assert!(err.contains("\"0 0 0 * * *\""), "{err}");
    }

    #[test]
    fn garbage_and_impossible_dates_are_refused() {
        assert!(Schedule::parse("0 61 * * * *").is_err());
        assert!(Schedule::parse("a b c d e f").is_err());
        assert!(Schedule::parse("0 0 0 30 2 *").is_err());
    }
}
