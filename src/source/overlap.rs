//! The overlap window of sources whose cursor is a time (`updated_at`-style):
//! an API's listing shows a record updated at T only once its index has
//! caught up, and clocks differ, so a record may appear after records
//! updated later than it were already read. Each run therefore starts
//! `source.overlap` before the time it saved and reads that window again;
//! such sources key records by who they are and what they hold
//! (`worker::diff_page`), so a record read again unchanged costs no request.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat};

use crate::connector_config::FieldError;

/// Five minutes: longer than the index lag and clock skew that time-based
/// incremental readers of these APIs allow for (seconds to a minute), and
/// short enough that the window re-read each run is a page or two.
pub const DEFAULT_OVERLAP: Duration = Duration::from_secs(5 * 60);

/// The longest window accepted: a day re-read every run is a resync.
pub const MAX_OVERLAP: Duration = Duration::from_secs(24 * 60 * 60);

pub const fn default_overlap() -> Duration {
    DEFAULT_OVERLAP
}

/// `text` (an RFC 3339 time) moved `overlap` earlier, written in the same
/// offset; `None` when `text` is not an RFC 3339 time.
pub fn earlier_by(text: &str, overlap: Duration) -> Option<String> {
    let at = DateTime::parse_from_rfc3339(text.trim()).ok()?;
    let back = chrono::Duration::from_std(overlap).ok()?;
    let earlier = at.checked_sub_signed(back)?;
    // `Z` where the original said so, else its own offset.
    let zulu = text.trim_end().ends_with(['Z', 'z']);
    Some(earlier.to_rfc3339_opts(SecondsFormat::AutoSi, zulu))
}

/// Checks `source.overlap`. Errors name the field under `source.`.
pub fn validate(overlap: Duration) -> Result<(), FieldError> {
    if overlap > MAX_OVERLAP {
        return Err(FieldError::new(
            "source.overlap".into(),
            format!(
                "{} is longer than {}; a window that long re-reads most of the source every \
                 run (use `syncward sync resync` to send everything again)",
                crate::words::duration_text(overlap),
                crate::words::duration_text(MAX_OVERLAP)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_moves_back_in_its_own_offset_and_anything_else_is_left_alone() {
        let five = Duration::from_secs(300);
        assert_eq!(
            earlier_by("2026-12-01T10:00:00Z", five).as_deref(),
            Some("2026-12-01T09:55:00Z")
        );
        assert_eq!(
            earlier_by("2026-12-01T10:02:00.250+01:00", five).as_deref(),
            Some("2026-12-01T09:57:00.250+01:00")
        );
        assert_eq!(
            earlier_by("2026-12-01T00:01:00Z", five).as_deref(),
            Some("2026-11-30T23:56:00Z")
        );
        for opaque in [
            "p100",
            "eyJsYXN0X2lkIjo0fQ==",
            "",
            "2026-12-01",
            "1733040000",
        ] {
            assert_eq!(earlier_by(opaque, five), None, "{opaque}");
        }
    }

    #[test]
    fn windows_longer_than_a_day_are_refused_with_the_reason() {
        assert!(validate(Duration::ZERO).is_ok());
        assert!(validate(MAX_OVERLAP).is_ok());
        let FieldError { field: key, why } =
            validate(MAX_OVERLAP + Duration::from_secs(1)).unwrap_err();
        assert_eq!(key, "source.overlap");
        assert!(why.contains("resync"), "{why}");
    }
}
