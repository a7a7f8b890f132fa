//! `RunFailure`: why a run stops early, as the failure code its reader sees,
//! raised anywhere in the page loop and recorded once by the caller.

use crate::destination::DestinationError;
use crate::failure::FailureCode;
use crate::source::SourceError;

/// A failure with its code and a one-line detail.
#[derive(Debug)]
pub(super) struct RunFailure(pub FailureCode, pub String);

impl RunFailure {
    /// The run no longer owns its sync: it must not move the cursor.
    pub(super) fn lease_lost(detail: &str) -> Self {
        RunFailure(FailureCode::LeaseLost, detail.to_string())
    }

    /// A stake statement found a newer fence: another run owns the sync.
    pub(super) fn fenced_before_stake() -> Self {
        Self::lease_lost("a newer fence was issued before the records were staked")
    }
}

impl From<sqlx::Error> for RunFailure {
    fn from(e: sqlx::Error) -> Self {
        RunFailure(
            FailureCode::StoreUnavailable,
            format!("syncward's database: {e}"),
        )
    }
}

/// The failure code a run records for a source error (`doctor` names the
/// same).
pub fn source_failure_code(e: &SourceError) -> FailureCode {
    match e {
        SourceError::Unreachable(_) => FailureCode::SourceUnreachable,
        SourceError::Unauthorized(_) => FailureCode::SourceAuthFailed,
        SourceError::Query(_) => FailureCode::SourceQueryFailed,
        SourceError::InvalidConfig(_) => FailureCode::ConfigInvalid,
        SourceError::AccountFrozen(_) => FailureCode::SourceAccountFrozen,
        SourceError::AccountLocked(_) => FailureCode::SourceAccountLocked,
        SourceError::Redacted(_) => FailureCode::SourceDataRedacted,
        SourceError::TransactionsHidden(_) => FailureCode::SourceTransactionsHidden,
        // Only where a record could not be rejected alone.
        SourceError::Undecodable(_) => FailureCode::SourceQueryFailed,
    }
}

impl From<SourceError> for RunFailure {
    fn from(e: SourceError) -> Self {
        RunFailure(source_failure_code(&e), e.to_string())
    }
}

/// The failure code a run records for a destination error.
pub fn destination_failure_code(e: &DestinationError) -> FailureCode {
    match e {
        DestinationError::Unauthorized(_) => FailureCode::DestinationAuthFailed,
        DestinationError::Gone(_) => FailureCode::DestinationGone,
        DestinationError::Unavailable(_) | DestinationError::Unanswered(_) => {
            FailureCode::DestinationUnavailable
        }
        DestinationError::RateLimited(_) => FailureCode::DestinationRateLimited,
        DestinationError::InvalidConfig(_) => FailureCode::ConfigInvalid,
    }
}

impl From<DestinationError> for RunFailure {
    fn from(e: DestinationError) -> Self {
        RunFailure(destination_failure_code(&e), e.to_string())
    }
}
