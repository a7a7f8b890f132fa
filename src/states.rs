//! The states and triggers kept in text columns, as enums: a misspelt state
//! is a compile error, and a stored value the code does not know fails the
//! row's decoding by name. The columns stay `text` with a CHECK (a Postgres
//! enum type would make adding a state a migration that locks the table),
//! so the sqlx mapping is written here rather than derived (the derive
//! expects a Postgres enum type of the same name).

use sqlx::Postgres;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueRef};

use crate::failure::FailureCode;

/// An enum whose variants are stored as the given words; `$noun` names one
/// in errors ("a run status").
macro_rules! text_enum {
    ($(#[$meta:meta])* pub enum $name:ident ($noun:literal) { $($(#[$vmeta:meta])* $variant:ident = $text:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant,)+
        }

        impl $name {
            /// Every state, in declaration order.
            pub const ALL: &[$name] = &[$($name::$variant),+];

            /// The word stored (and shown) for it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;

            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($text => Ok($name::$variant),)+
                    other => Err(format!(
                        "{other:?} is not {} (one of: {})",
                        $noun,
                        [$($text),+].join(", ")
                    )),
                }
            }
        }

        impl sqlx::Type<Postgres> for $name {
            fn type_info() -> PgTypeInfo {
                <str as sqlx::Type<Postgres>>::type_info()
            }

            fn compatible(ty: &PgTypeInfo) -> bool {
                <str as sqlx::Type<Postgres>>::compatible(ty)
            }
        }

        impl PgHasArrayType for $name {
            fn array_type_info() -> PgTypeInfo {
                <&str as PgHasArrayType>::array_type_info()
            }

            fn array_compatible(ty: &PgTypeInfo) -> bool {
                <&str as PgHasArrayType>::array_compatible(ty)
            }
        }

        impl<'r> sqlx::Decode<'r, Postgres> for $name {
            fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
                Ok(<&str as sqlx::Decode<Postgres>>::decode(value)?.parse::<$name>()?)
            }
        }

        impl sqlx::Encode<'_, Postgres> for $name {
            fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
                <&str as sqlx::Encode<Postgres>>::encode(self.as_str(), buf)
            }
        }
    };
}

text_enum! {
    /// `syncs.status`.
    pub enum SyncStatus ("a sync status") {
        Active = "active",
        /// Paused by a person, the breaker or a failure that pauses at once
        /// (`paused_reason` says which).
        Paused = "paused",
        /// Its file was removed: it keeps its history and runs no more.
        Archived = "archived",
    }
}

text_enum! {
    /// `runs.status`.
    pub enum RunStatus ("a run status") {
        Queued = "queued",
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        Skipped = "skipped",
    }
}

impl RunStatus {
    /// Ended: it has a `finished_at` and runs no more.
    pub fn is_finished(self) -> bool {
        matches!(
            self,
            RunStatus::Succeeded | RunStatus::Failed | RunStatus::Skipped
        )
    }
}

text_enum! {
    /// `runs.trigger`: what queued (or started) the run.
    pub enum RunTrigger ("a run trigger") {
        /// The sync's schedule (the scheduler's tick).
        Schedule = "schedule",
        /// A person (`sync run`, the API or the page).
        Manual = "manual",
        /// A person, on a paused sync (`sync run --force`): it runs although
        /// the sync is paused.
        Forced = "forced",
        /// `sync run --foreground`, in the CLI's own process.
        Foreground = "foreground",
        /// Put back after a failed attempt, to be tried again.
        Retry = "retry",
        /// Put back when its daemon stopped at a clean batch boundary.
        Shutdown = "shutdown",
        /// Put back by the sweeper when its daemon stopped showing signs of life.
        Recovery = "recovery",
        /// Put back by the sweeper after running too long with a free lease.
        Sweeper = "sweeper",
    }
}

text_enum! {
    /// `deliveries.status` and the state of a ledger entry.
    pub enum DeliveryStatus ("a delivery status") {
        /// Staked by a run; sent or not, the outcome is not recorded.
        Pending = "pending",
        /// Delivered, with the answer kept.
        Completed = "completed",
    }
}

text_enum! {
    /// `import_processes.status`: a Brevo import followed to its end.
    pub enum ImportStatus ("an import status") {
        Pending = "pending",
        Completed = "completed",
        Failed = "failed",
        Cancelled = "cancelled",
        /// Its end cannot be learned (Brevo answers 404 for its process, or it
        /// never finished within the checks allowed).
        Unknown = "unknown",
    }
}

/// `syncs.paused_reason`: why a paused sync is paused. Stored as a word
/// (`manual`, `circuit_breaker_tripped`) or the code of the failure that
/// paused it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PauseReason {
    /// A person paused it; `paused_note` holds what they wrote.
    Manual,
    /// The circuit breaker, after failed runs in a row.
    Breaker,
    /// One failure of a code that pauses at once
    /// (`FailureCode::pauses_at_once`).
    Failure(FailureCode),
}

impl PauseReason {
    /// The word stored (and shown) for it.
    pub fn as_str(self) -> &'static str {
        match self {
            PauseReason::Manual => "manual",
            PauseReason::Breaker => "circuit_breaker_tripped",
            PauseReason::Failure(code) => code.as_str(),
        }
    }
}

impl std::fmt::Display for PauseReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PauseReason {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "manual" => Ok(PauseReason::Manual),
            "circuit_breaker_tripped" => Ok(PauseReason::Breaker),
            other => FailureCode::parse(other)
                .map(PauseReason::Failure)
                .ok_or_else(|| {
                    format!(
                        "{other:?} is not a pause reason (manual, circuit_breaker_tripped or a failure code)"
                    )
                }),
        }
    }
}

impl serde::Serialize for PauseReason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl sqlx::Type<Postgres> for PauseReason {
    fn type_info() -> PgTypeInfo {
        <str as sqlx::Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <str as sqlx::Type<Postgres>>::compatible(ty)
    }
}

impl<'r> sqlx::Decode<'r, Postgres> for PauseReason {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        Ok(<&str as sqlx::Decode<Postgres>>::decode(value)?.parse::<PauseReason>()?)
    }
}

impl sqlx::Encode<'_, Postgres> for PauseReason {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <&str as sqlx::Encode<Postgres>>::encode(self.as_str(), buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_reads_back_from_its_word_and_a_stranger_is_named() {
        for s in RunStatus::ALL {
            assert_eq!(s.as_str().parse::<RunStatus>(), Ok(*s));
        }
        for s in RunTrigger::ALL {
            assert_eq!(s.as_str().parse::<RunTrigger>(), Ok(*s));
        }
        assert_eq!(
            "paused ".parse::<SyncStatus>(),
            Err("\"paused \" is not a sync status (one of: active, paused, archived)".to_string())
        );
        assert_eq!(
            serde_json::to_string(&ImportStatus::Unknown).unwrap(),
            "\"unknown\""
        );
        for reason in [
            PauseReason::Manual,
            PauseReason::Breaker,
            PauseReason::Failure(FailureCode::DestinationGone),
        ] {
            assert_eq!(reason.as_str().parse::<PauseReason>(), Ok(reason));
        }
        assert!("paused".parse::<PauseReason>().is_err());
    }
}
