//! Numbers and durations as people write them: `1 run`, `3 runs`; `90d`,
//! `15m`, `1h 30m`, `500ms` (humantime's own format turns 90 days into
//! `2months 29days 2h 52m 48s`; what this prints, humantime parses back).
//! A leaf: every part may use it.

use std::time::Duration;

/// `n` and its noun, singular or plural: "1 run", "3 runs", "0 runs".
pub fn counted(n: impl TryInto<u64>, one: &str, many: &str) -> String {
    let n: u64 = n.try_into().unwrap_or(0);
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The duration in years, days, hours, minutes, seconds and milliseconds, largest
/// first, each unit that is not zero; `0s` for nothing.
pub fn duration_text(d: Duration) -> String {
    const UNITS: [(u128, &str); 6] = [
        // humantime's year: 365.25 days.
        (31_557_600_000, "y"),
        (86_400_000, "d"),
        (3_600_000, "h"),
        (60_000, "m"),
        (1_000, "s"),
        (1, "ms"),
    ];
    let mut left = d.as_millis();
    let mut parts = Vec::new();
    for (size, unit) in UNITS {
        if left >= size {
            parts.push(format!("{}{unit}", left / size));
            left %= size;
        }
    }
    if parts.is_empty() {
        return "0s".into();
    }
    parts.join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_as_people_write_them_and_read_back_the_same() {
        for (text, secs) in [
            ("90d", 90 * 86_400),
            ("15m", 900),
            ("1h 30m", 5_400),
            ("7d", 604_800),
            ("1d 1s", 86_401),
            ("10y", 315_576_000),
        ] {
            let d = Duration::from_secs(secs);
            assert_eq!(duration_text(d), text);
            assert_eq!(humantime::parse_duration(text).unwrap(), d);
        }
        assert_eq!(duration_text(Duration::from_millis(1_500)), "1s 500ms");
        assert_eq!(duration_text(Duration::ZERO), "0s");
    }
}
