//! The failure catalogue: every failure code a run can end with, and for each
//! one sentence of what happened, one of what to do next, and whose job it is.
//! The matches are exhaustive: a code without its sentences does not compile.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Whose job it is to act on a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Owner {
    /// The workspace's people: their credentials, their data, their mapping.
    Customer,
    /// The people who run syncward: its services, its network, its bugs.
    Operator,
}

impl Owner {
    pub fn as_str(self) -> &'static str {
        match self {
            Owner::Customer => "customer",
            Owner::Operator => "operator",
        }
    }
}

/// Why a run did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureCode {
    SourceUnreachable,
    SourceQueryFailed,
    SourceAuthFailed,
    /// The source account is frozen for an unpaid balance (Shopify: 402).
    SourceAccountFrozen,
    /// The source account is locked (Shopify: 423).
    SourceAccountLocked,
    /// The source hides the fields syncward needs (Shopify: protected
    /// customer data without approval).
    SourceDataRedacted,
    /// The source does not show which of its transactions are open, so the
    /// run cannot tell which rows may still be committed behind the cursor.
    SourceTransactionsHidden,
    DestinationAuthFailed,
    /// The destination says the endpoint is gone for good (HTTP 410): the
    /// sync is paused at once.
    DestinationGone,
    DestinationRejectedAll,
    /// Mirror mode would have taken more records off the destination than
    /// `source.max_removal_share` allows.
    MirrorRemovalRefused,
    /// A mapped source field that held a value in most records of the last
    /// complete read holds none in most records of this one.
    MappedFieldVanished,
    RecordsQuarantined,
    DestinationUnavailable,
    DestinationRateLimited,
    ConfigInvalid,
    /// A secret the sync names is not in its workspace's secrets file on the
    /// machine that ran it: the operators keep those files.
    SecretMissing,
    LeaseLost,
    LeaseBusy,
    SyncPaused,
    SyncArchived,
    /// A person cancelled the run (`runs cancel`).
    RunCancelled,
    Interrupted,
    StoreUnavailable,
    Internal,
}

impl FailureCode {
    pub const ALL: [FailureCode; 25] = [
        FailureCode::SourceUnreachable,
        FailureCode::SourceQueryFailed,
        FailureCode::SourceAuthFailed,
        FailureCode::SourceAccountFrozen,
        FailureCode::SourceAccountLocked,
        FailureCode::SourceDataRedacted,
        FailureCode::SourceTransactionsHidden,
        FailureCode::DestinationAuthFailed,
        FailureCode::DestinationGone,
        FailureCode::DestinationRejectedAll,
        FailureCode::MirrorRemovalRefused,
        FailureCode::MappedFieldVanished,
        FailureCode::RecordsQuarantined,
        FailureCode::DestinationUnavailable,
        FailureCode::DestinationRateLimited,
        FailureCode::ConfigInvalid,
        FailureCode::SecretMissing,
        FailureCode::LeaseLost,
        FailureCode::LeaseBusy,
        FailureCode::SyncPaused,
        FailureCode::SyncArchived,
        FailureCode::RunCancelled,
        FailureCode::Interrupted,
        FailureCode::StoreUnavailable,
        FailureCode::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureCode::SourceUnreachable => "source_unreachable",
            FailureCode::SourceQueryFailed => "source_query_failed",
            FailureCode::SourceAuthFailed => "source_auth_failed",
            FailureCode::SourceAccountFrozen => "source_account_frozen",
            FailureCode::SourceAccountLocked => "source_account_locked",
            FailureCode::SourceDataRedacted => "source_data_redacted",
            FailureCode::SourceTransactionsHidden => "source_transactions_hidden",
            FailureCode::DestinationAuthFailed => "destination_auth_failed",
            FailureCode::DestinationGone => "destination_gone",
            FailureCode::DestinationRejectedAll => "destination_rejected_all",
            FailureCode::MirrorRemovalRefused => "mirror_removal_refused",
            FailureCode::MappedFieldVanished => "mapped_field_vanished",
            FailureCode::RecordsQuarantined => "records_quarantined",
            FailureCode::DestinationUnavailable => "destination_unavailable",
            FailureCode::DestinationRateLimited => "destination_rate_limited",
            FailureCode::ConfigInvalid => "config_invalid",
            FailureCode::SecretMissing => "secret_missing",
            FailureCode::LeaseLost => "lease_lost",
            FailureCode::LeaseBusy => "lease_busy",
            FailureCode::SyncPaused => "sync_paused",
            FailureCode::SyncArchived => "sync_archived",
            FailureCode::RunCancelled => "run_cancelled",
            FailureCode::Interrupted => "interrupted",
            FailureCode::StoreUnavailable => "store_unavailable",
            FailureCode::Internal => "internal",
        }
    }

    pub fn parse(code: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == code)
    }

    /// One sentence: what happened.
    pub fn what_happened(self) -> &'static str {
        match self {
            FailureCode::SourceUnreachable => {
                "The source could not be reached, so no records were read."
            }
            FailureCode::SourceQueryFailed => {
                "The source refused or failed the query that reads the records."
            }
            FailureCode::SourceAuthFailed => "The source refused the credentials this sync uses.",
            FailureCode::SourceAccountFrozen => {
                "The source account is frozen (Shopify: the shop has an unpaid balance), so no records were read."
            }
            FailureCode::SourceAccountLocked => {
                "The source account is locked (Shopify: the shop is locked, e.g. for repeated rate-limit abuse or a fraud or security review), so no records were read."
            }
            FailureCode::SourceDataRedacted => {
                "The source hid the fields this sync needs: a whole page came back without any e-mail address (Shopify redacts protected customer data for apps not approved to read it)."
            }
            FailureCode::SourceTransactionsHidden => {
                "The source database does not show which of its transactions are still open, so syncward cannot tell which rows may yet be committed behind the ones it would read, and read nothing."
            }
            FailureCode::DestinationAuthFailed => {
                "The destination refused the API key this sync uses."
            }
            FailureCode::DestinationGone => {
                "The destination answered 410 Gone: its owner says the endpoint no longer exists, so the sync was paused and sends nothing more to it."
            }
            FailureCode::MirrorRemovalRefused => {
                "More of the records this sync delivered left its query than source.max_removal_share allows one run to take off the destination, so the run took nobody off (a broken query would otherwise empty the lists)."
            }
            FailureCode::MappedFieldVanished => {
                "A source field the mapping reads held a value in most records of the sync's last complete read and is missing or empty in most records read now (a renamed or emptied column), so the run stopped before sending them rather than quietly stop updating its attribute."
            }
            FailureCode::DestinationRejectedAll => {
                "The destination rejected every record of a batch."
            }
            FailureCode::RecordsQuarantined => {
                "Every record of a batch that was not rejected is quarantined: sending each of them killed the worker as many times as `ledger.record_attempts` allows."
            }
            FailureCode::DestinationUnavailable => {
                "The destination kept failing or timing out, so the batch could not be delivered."
            }
            FailureCode::DestinationRateLimited => {
                "The destination kept answering that the rate limit was exceeded, longer than the run waits."
            }
            FailureCode::ConfigInvalid => "The sync's definition could not be turned into a run.",
            FailureCode::SecretMissing => {
                "A secret the sync names is not in its workspace's secrets file on the machine that ran it, so the run read and sent nothing."
            }
            FailureCode::LeaseLost => {
                "The run lost its slot part-way through and stopped to avoid writing twice."
            }
            FailureCode::LeaseBusy => "Another run of this sync was already in progress",
            FailureCode::SyncPaused => {
                "The sync was paused before this run started, so the run read and sent nothing."
            }
            FailureCode::SyncArchived => {
                "The sync was archived (its file pruned, or deleted) before this run started, so the run read and sent nothing."
            }
            FailureCode::RunCancelled => {
                "A person cancelled the run; a queued run read nothing, a running one stopped at its next clean batch."
            }
            FailureCode::Interrupted => {
                "The run was stopped before it finished (the daemon was shutting down)."
            }
            FailureCode::StoreUnavailable => {
                "syncward's own database or Redis stopped answering during the run."
            }
            FailureCode::Internal => "syncward hit an internal error while running this sync.",
        }
    }

    /// One sentence: what to do next.
    pub fn what_next(self) -> &'static str {
        match self {
            FailureCode::SourceUnreachable => {
                "Check that the source is up and that the URL in the variable the sync names (in its workspace's secrets file) is right; the run is retried."
            }
            FailureCode::SourceQueryFailed => {
                "Fix the sync's query (the detail gives the database's error) and publish the sync again."
            }
            FailureCode::SourceAuthFailed => {
                "Renew the source credentials in the variable the sync names, in its workspace's secrets file, then run the sync again."
            }
            FailureCode::SourceAccountFrozen => {
                "The shop owner pays the outstanding balance in the shop's admin to unfreeze it; then run the sync again."
            }
            FailureCode::SourceAccountLocked => {
                "The shop owner contacts Shopify support to unlock the shop; then run the sync again."
            }
            FailureCode::SourceDataRedacted => {
                "Get the app approved for protected customer data (level 2: name and e-mail fields) in the Shopify Partner Dashboard, or use a custom app that has it, then run the sync again."
            }
            FailureCode::SourceTransactionsHidden => {
                "Grant the source role the right to see every session (GRANT pg_read_all_stats TO <role>), or point the sync at the primary rather than a standby; then run the sync again."
            }
            FailureCode::DestinationAuthFailed => {
                "Renew the API key in the variable the sync names, in its workspace's secrets file, then run the sync again."
            }
            FailureCode::DestinationGone => {
                "Ask the receiver's owner where it moved, set destination.url to it and apply the sync file (or have the endpoint restored): the apply makes the sync active again; nothing was lost, the records are sent then."
            }
            FailureCode::MirrorRemovalRefused => {
                "Check the query and its source (the run's detail gives the counts); if the records really left, approve exactly them (`syncward sync removals RUN_ID` lists them, `syncward sync approve-removals RUN_ID`) or raise source.max_removal_share in the sync file and apply it, then run the sync again."
            }
            FailureCode::MappedFieldVanished => {
                "Check the source query and the mapping (the run's detail names the field and its shares): map the attribute from the field that holds it now, or, if the field really is empty now, list the attribute in [mapping] allow_vanished; apply the sync file, then run the sync again."
            }
            FailureCode::DestinationRejectedAll => {
                "Check the mapping: the rejected records on this run say what the destination objected to."
            }
            FailureCode::RecordsQuarantined => {
                "Find what kills the worker on these records (the daemon's log and the quarantined records on this run), fix it, then run `syncward sync retry-rejected SYNC_ID`."
            }
            FailureCode::DestinationUnavailable => {
                "Nothing to change: the run is retried with backoff; if it persists, check the destination's status page."
            }
            FailureCode::DestinationRateLimited => {
                "Nothing to change: the run is retried later; if it persists, lower the sync's schedule frequency or concurrency."
            }
            FailureCode::ConfigInvalid => {
                "Fix the sync file (the detail names the field), or the secret it names in its workspace's secrets file, then apply it again."
            }
            FailureCode::SecretMissing => {
                "Add the variable the detail names to that file (/etc/syncward/secrets/WORKSPACE.env, root:syncward 0640) on every machine that runs syncward; the next run reads it."
            }
            FailureCode::LeaseLost => {
                "Nothing to fix in the sync: the run is retried; if it recurs, check Redis and that runs renew their lease in time."
            }
            FailureCode::LeaseBusy => "Nothing to do: the next scheduled run starts normally.",
            FailureCode::SyncArchived => {
                "Nothing, if it was meant to go; to bring it back, apply its file again (`syncward sync apply FILE`)."
            }
            FailureCode::SyncPaused => {
                "Resume the sync (`syncward sync resume SYNC_ID`) once the reason it was paused for is dealt with; `sync run SYNC_ID --force` runs it once while paused."
            }
            FailureCode::RunCancelled => {
                "Nothing to do: the next scheduled run starts normally from the last clean batch."
            }
            FailureCode::Interrupted => {
                "Nothing to do: the run carries on from its last clean batch."
            }
            FailureCode::StoreUnavailable => {
                "Check Postgres and Redis; the run is retried from its last clean batch once they answer."
            }
            FailureCode::Internal => {
                "Report it to the operators with the run id; the run is retried."
            }
        }
    }

    /// Whose job it is to act.
    pub fn owner(self) -> Owner {
        match self {
            FailureCode::SourceQueryFailed
            | FailureCode::SourceAuthFailed
            | FailureCode::SourceAccountFrozen
            | FailureCode::SourceAccountLocked
            | FailureCode::SourceDataRedacted
            | FailureCode::SourceTransactionsHidden
            | FailureCode::DestinationAuthFailed
            | FailureCode::DestinationGone
            | FailureCode::DestinationRejectedAll
            | FailureCode::MirrorRemovalRefused
            | FailureCode::MappedFieldVanished
            | FailureCode::ConfigInvalid => Owner::Customer,
            FailureCode::SecretMissing
            | FailureCode::SourceUnreachable
            | FailureCode::DestinationUnavailable
            | FailureCode::DestinationRateLimited
            | FailureCode::RecordsQuarantined
            | FailureCode::LeaseLost
            | FailureCode::LeaseBusy
            | FailureCode::SyncPaused
            | FailureCode::SyncArchived
            | FailureCode::RunCancelled
            | FailureCode::Interrupted
            | FailureCode::StoreUnavailable
            | FailureCode::Internal => Owner::Operator,
        }
    }

    /// Whether another attempt can help. Customer-owned failures wait for a
    /// person; `lease_busy` ends the run as skipped.
    pub fn is_retryable(self) -> bool {
        match self {
            FailureCode::SourceUnreachable
            | FailureCode::DestinationUnavailable
            | FailureCode::DestinationRateLimited
            | FailureCode::LeaseLost
            | FailureCode::Interrupted
            | FailureCode::StoreUnavailable
            | FailureCode::Internal => true,
            FailureCode::SourceQueryFailed
            | FailureCode::SourceAuthFailed
            | FailureCode::SourceAccountFrozen
            | FailureCode::SourceAccountLocked
            | FailureCode::SourceDataRedacted
            | FailureCode::SourceTransactionsHidden
            | FailureCode::DestinationAuthFailed
            | FailureCode::DestinationGone
            | FailureCode::DestinationRejectedAll
            | FailureCode::MirrorRemovalRefused
            | FailureCode::MappedFieldVanished
            | FailureCode::RecordsQuarantined
            | FailureCode::ConfigInvalid
            | FailureCode::SecretMissing
            | FailureCode::LeaseBusy
            | FailureCode::SyncPaused
            | FailureCode::SyncArchived
            | FailureCode::RunCancelled => false,
        }
    }
}

/// What makes a failure's advice one sync's own: its id, whether it is
/// paused now, the secrets its source and destination name and the file
/// they are read from (`what_next_for`).
#[derive(Debug, Clone, Default)]
pub struct FailureContext {
    pub sync_id: String,
    pub paused: bool,
    /// `(field, variable)`: `("source.url_env", "WAREHOUSE_URL")`.
    pub source_secrets: Vec<(String, String)>,
    pub destination_secrets: Vec<(String, String)>,
    /// The workspace's secrets file, `/etc/syncward/secrets/acme.env`.
    pub secrets_file: Option<String>,
}

impl FailureContext {
    /// `VAR (field)[, …] in FILE`, or the generic words when unknown.
    fn secrets_in(&self, secrets: &[(String, String)]) -> String {
        if secrets.is_empty() {
            return "the variable the sync names, in its workspace's secrets file".into();
        }
        let named: Vec<String> = secrets
            .iter()
            .map(|(field, var)| format!("{var} ({field})"))
            .collect();
        match &self.secrets_file {
            Some(file) => format!("{} in {file}", named.join(", ")),
            None => format!("{} in the workspace's secrets file", named.join(", ")),
        }
    }
}

impl FailureCode {
    /// `what_next` in the words of one sync: the secret's variable and file
    /// where a secret is the fix, its id in the commands, and a resume only
    /// when it is paused.
    pub fn what_next_for(self, cx: &FailureContext) -> String {
        let id = &cx.sync_id;
        let again = format!("then run the sync again (`syncward sync run {id}`)");
        let mut next = match self {
            FailureCode::SourceUnreachable => format!(
                "Check that the source is up and that {} holds its right URL; the run is retried.",
                cx.secrets_in(&cx.source_secrets)
            ),
            FailureCode::SourceAuthFailed => format!(
                "Renew the source credentials in {}, {again}.",
                cx.secrets_in(&cx.source_secrets)
            ),
            FailureCode::DestinationAuthFailed => format!(
                "Renew the API key in {}, {again}.",
                cx.secrets_in(&cx.destination_secrets)
            ),
            FailureCode::SecretMissing => match &cx.secrets_file {
                Some(file) => format!(
                    "Add the variable the detail names to {file} (root:syncward 0640) on every machine that runs syncward; the next run reads it."
                ),
                None => self.what_next().to_string(),
            },
            FailureCode::ConfigInvalid => match &cx.secrets_file {
                Some(file) => format!(
                    "Fix the sync file (the detail names the field), or the secret it names in {file}, then apply it again."
                ),
                None => self.what_next().to_string(),
            },
            _ => self.what_next().replace("SYNC_ID", id),
        };
        // Advice that ends in a run needs a paused sync resumed first.
        let needs_a_run = matches!(
            self,
            FailureCode::SourceAuthFailed
                | FailureCode::DestinationAuthFailed
                | FailureCode::SourceAccountFrozen
                | FailureCode::SourceAccountLocked
                | FailureCode::SourceDataRedacted
                | FailureCode::SourceTransactionsHidden
                | FailureCode::MirrorRemovalRefused
                | FailureCode::MappedFieldVanished
                | FailureCode::RecordsQuarantined
        );
        if cx.paused && needs_a_run {
            next.push_str(&format!(
                " The sync is paused: resume it first (`syncward sync resume {id}`)."
            ));
        }
        next
    }

    /// Whether one failure pauses the sync, without waiting for the
    /// breaker's count: the destination said no later run can succeed.
    pub fn pauses_at_once(self) -> bool {
        matches!(self, FailureCode::DestinationGone)
    }
}

impl fmt::Display for FailureCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_has_both_sentences() {
        for code in FailureCode::ALL {
            assert_eq!(FailureCode::parse(code.as_str()), Some(code));
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
            assert!(!code.what_happened().is_empty() && !code.what_next().is_empty());
        }
    }

    #[test]
    fn a_secret_missing_on_the_daemons_machine_is_the_operators_and_a_gone_endpoint_the_customers()
    {
        assert_eq!(FailureCode::SecretMissing.owner(), Owner::Operator);
        assert!(!FailureCode::SecretMissing.is_retryable());
        assert_eq!(FailureCode::DestinationGone.owner(), Owner::Customer);
        assert!(FailureCode::DestinationGone.pauses_at_once());
        assert!(!FailureCode::DestinationAuthFailed.pauses_at_once());
    }

    #[test]
    fn the_advice_names_the_syncs_secret_its_file_and_resumes_only_a_paused_sync() {
        let cx = FailureContext {
            sync_id: "acme-contacts".into(),
            paused: false,
            source_secrets: vec![("source.url_env".into(), "WAREHOUSE_URL".into())],
            destination_secrets: vec![("destination.api_key_env".into(), "BREVO_API_KEY".into())],
            secrets_file: Some("/etc/syncward/secrets/acme.env".into()),
        };
        let next = FailureCode::DestinationAuthFailed.what_next_for(&cx);
        assert_eq!(
            next,
            "Renew the API key in BREVO_API_KEY (destination.api_key_env) in \
             /etc/syncward/secrets/acme.env, then run the sync again \
             (`syncward sync run acme-contacts`)."
        );
        let paused = FailureContext {
            paused: true,
            ..cx.clone()
        };
        assert!(
            FailureCode::DestinationAuthFailed
                .what_next_for(&paused)
                .ends_with("resume it first (`syncward sync resume acme-contacts`).")
        );
        assert!(
            FailureCode::SourceUnreachable
                .what_next_for(&cx)
                .contains("WAREHOUSE_URL (source.url_env) in /etc/syncward/secrets/acme.env")
        );
        for code in FailureCode::ALL {
            let next = code.what_next_for(&cx);
            assert!(!next.contains("SYNC_ID"), "{code}: {next}");
            assert!(!next.contains("environment variable"), "{code}: {next}");
            if code != FailureCode::SyncPaused {
                assert!(!next.contains("resume"), "{code}: {next}");
            }
        }
    }

    #[test]
    fn the_exact_sentences_of_the_design() {
        assert_eq!(
            FailureCode::LeaseLost.what_happened(),
            "The run lost its slot part-way through and stopped to avoid writing twice."
        );
        assert_eq!(
            FailureCode::LeaseBusy.what_happened(),
            "Another run of this sync was already in progress"
        );
        assert_eq!(FailureCode::DestinationRejectedAll.owner(), Owner::Customer);
        assert_eq!(FailureCode::LeaseLost.owner(), Owner::Operator);
    }
}
