//! Following imports to their end (a destination that answers before it
//! writes, as Brevo's `POST /contacts/import`): the destination says later
//! whether the rows arrived. Checks are spread out
//! (`sweeper.import_check_after`) and budgeted per account and hour across
//! every daemon (`sweeper.import_checks_per_hour`; Brevo allows 100/h).

use tracing::{info, warn};

use crate::alerts::Alert;
use crate::daemon_shared::Daemon;
use std::collections::HashMap;

use crate::destination::{AnyDestination, DESTINATION_RETRY, Destination, ImportOutcome};
use crate::states::ImportStatus;
use crate::store::imports::ImportProcessRow;
use crate::store::{imports, syncs};

/// Imports looked at per sweep, at most: a few list pages' worth.
const PER_SWEEP: i64 = 500;

/// List pages read per account and sweep, at most (each is one request of
/// the hourly budget, and settles up to 50 imports).
const PAGES_PER_SWEEP: u32 = 20;

/// Checks of one import after which syncward stops asking and records its
/// outcome as unknown. Checks are at least `sweeper.import_check_after` apart
/// (1 min by default), so this follows an import for an hour or more, far
/// longer than Brevo takes for an 8 MB page; past it the process is lost, and
/// asking on would spend the key's checks on it forever.
pub const MAX_CHECKS_PER_IMPORT: i32 = 60;

/// Kind of the alert raised when an import's outcome cannot be learned.
pub const IMPORT_UNKNOWN_ALERT: &str = "import_outcome_unknown";

/// Takes one check from this hour's budget of the account; false when spent
/// (or when Redis cannot count it: no check is better than one too many).
async fn take_check(daemon: &Daemon, budget: &str) -> bool {
    let per_hour = daemon.settings.sweeper.import_checks_per_hour;
    daemon
        .budgets
        .per_hour(budget, per_hour)
        .take()
        .await
        .is_ok()
}

/// The due imports of one destination account, with a destination to ask.
struct Account {
    destination: AnyDestination,
    budget: Option<String>,
    /// Each import with its sync's workspace (for the alert).
    imports: Vec<(ImportProcessRow, String)>,
}

/// What one sweep learned of an import.
enum Learned {
    /// Listed: ended (`Some`) or still running.
    Listed(Option<ImportOutcome>),
    /// The listing went past where it would be, without it: the
    /// destination no longer knows it.
    Unlisted,
    /// The listing could not be read.
    Failed(String),
    /// Not reached this sweep (the budget ran out first).
    NotAsked,
}

/// Checks the imports that are due; returns how many ended. The imports of
/// one account are settled from its list of processes (`GET /processes`, 50
/// a request, newest first), so 4,000 imports an hour need 80 requests of
/// the account's ~100.
pub async fn check_imports(daemon: &Daemon) -> anyhow::Result<usize> {
    let due = imports::due_import_processes(
        &daemon.store,
        daemon.settings.sweeper.import_check_after,
        PER_SWEEP,
    )
    .await?;
    let mut accounts: Vec<Account> = Vec::new();
    // Each sync's account slot and workspace, looked up once per sweep.
    let mut opened: HashMap<String, Option<(usize, String)>> = HashMap::new();
    for process in due {
        if !opened.contains_key(&process.sync_id) {
            let slot = open_account(daemon, &process.sync_id, &mut accounts).await?;
            opened.insert(process.sync_id.clone(), slot);
        }
        if let Some(Some((slot, workspace))) = opened.get(&process.sync_id) {
            accounts[*slot].imports.push((process, workspace.clone()));
        }
    }
    let mut ended = 0;
    for account in accounts {
        ended += check_account(daemon, account).await?;
    }
    Ok(ended)
}

/// The account a sync's imports are checked with: an existing one with the
/// same budget (API key), or a new one, with the sync's workspace. `None`
/// when its destination cannot be opened (logged; its imports wait for a
/// later sweep).
async fn open_account(
    daemon: &Daemon,
    sync_id: &str,
    accounts: &mut Vec<Account>,
) -> anyhow::Result<Option<(usize, String)>> {
    let Some(sync) = syncs::get_sync(&daemon.store, sync_id).await? else {
        return Ok(None);
    };
    let Ok(definition) = sync.definition() else {
        return Ok(None);
    };
    let secrets = daemon
        .settings
        .secrets
        .store()
        .workspace(&definition.workspace);
    let destination =
        match AnyDestination::open(&definition.destination, DESTINATION_RETRY, &secrets) {
            Ok(d) => d,
            Err(e) => {
                warn!(sync.id = %sync_id, error = %e, "Cannot check imports");
                return Ok(None);
            }
        };
    let workspace = sync.workspace_id;
    let budget = destination.follow_up_budget();
    if budget.is_some()
        && let Some(i) = accounts.iter().position(|a| a.budget == budget)
    {
        return Ok(Some((i, workspace)));
    }
    accounts.push(Account {
        destination,
        budget,
        imports: Vec::new(),
    });
    Ok(Some((accounts.len() - 1, workspace)))
}

/// Reads the account's list of processes, newest first, until every due
/// import is found or listed past, within the hourly budget; then records
/// what was learned of each.
async fn check_account(daemon: &Daemon, account: Account) -> anyhow::Result<usize> {
    let mut learned: HashMap<i64, Learned> = account
        .imports
        .iter()
        .map(|(p, _)| (p.process_id, Learned::NotAsked))
        .collect();
    let oldest = account.imports.iter().map(|(p, _)| p.process_id).min();
    let mut newest = None;
    let mut page = 0;
    while page < PAGES_PER_SWEEP && learned.values().any(|l| matches!(l, Learned::NotAsked)) {
        if let Some(budget) = &account.budget
            && !take_check(daemon, budget).await
        {
            info!(budget = %budget, "This hour's import-check budget is spent; later");
            break;
        }
        let listing = match account.destination.follow_up_page(page).await {
            Ok(listing) => listing,
            Err(e) => {
                warn!(error = %e, "Listing the account's imports failed");
                for l in learned.values_mut() {
                    if matches!(l, Learned::NotAsked) {
                        *l = Learned::Failed(e.to_string());
                    }
                }
                break;
            }
        };
        let smallest = listing.listed.iter().map(|(id, _)| *id).min();
        if page == 0 {
            newest = listing.listed.iter().map(|(id, _)| *id).max();
        }
        for (id, outcome) in listing.listed {
            if let Some(l) = learned.get_mut(&id) {
                *l = Learned::Listed(outcome);
            }
        }
        // Ids only grow and the list is newest first: a due import newer
        // than anything listed is not listed yet (still running); one in the
        // range read so far, or any once the list ends, is one the account
        // no longer knows.
        let end = !listing.more;
        for (id, l) in learned.iter_mut() {
            if !matches!(l, Learned::NotAsked) {
                continue;
            }
            if newest.is_some_and(|n| *id > n) {
                *l = Learned::Listed(None);
            } else if end || smallest.is_some_and(|s| *id >= s) {
                *l = Learned::Unlisted;
            }
        }
        if end || smallest.is_some_and(|s| oldest.is_some_and(|o| s <= o)) {
            break;
        }
        page += 1;
    }
    let mut ended = 0;
    for (process, workspace) in account.imports {
        let learned = learned
            .remove(&process.process_id)
            .unwrap_or(Learned::NotAsked);
        if record(daemon, &process, &workspace, learned).await? {
            ended += 1;
        }
    }
    Ok(ended)
}

/// Records what one sweep learned of an import; true when it ended.
async fn record(
    daemon: &Daemon,
    process: &ImportProcessRow,
    workspace: &str,
    learned: Learned,
) -> anyhow::Result<bool> {
    crate::telemetry::record_import_check(match &learned {
        Learned::Listed(Some(_)) | Learned::Unlisted => "ended",
        Learned::Listed(None) => "running",
        Learned::Failed(_) => "failed",
        Learned::NotAsked => "budget_spent",
    });
    // This check is the last one allowed: an import still unfinished (or
    // unreadable) after it is given up as unknown.
    let last_check = process.checks + 1 >= MAX_CHECKS_PER_IMPORT;
    let unknown = |error: String| ImportOutcome {
        status: ImportStatus::Unknown,
        counts: None,
        error: Some(error),
    };
    let outcome = match learned {
        Learned::NotAsked => return Ok(false),
        Learned::Listed(Some(outcome)) => outcome,
        Learned::Unlisted => {
            unknown("Brevo no longer lists this import among the account's processes".into())
        }
        Learned::Listed(None) if last_check => unknown(format!(
            "still not finished after {MAX_CHECKS_PER_IMPORT} checks; syncward stopped asking"
        )),
        Learned::Failed(e) if last_check => unknown(format!(
            "no answer after {MAX_CHECKS_PER_IMPORT} checks (last: {e}); syncward stopped asking"
        )),
        Learned::Listed(None) | Learned::Failed(_) => {
            imports::mark_import_checked(&daemon.store, process.id).await?;
            return Ok(false);
        }
    };
    let recorded = imports::finish_import_process(
        &daemon.store,
        process,
        outcome.status,
        outcome.counts.as_ref(),
        outcome.error.as_deref(),
    )
    .await?;
    if !recorded {
        return Ok(false);
    }
    if outcome.status != ImportStatus::Completed {
        warn!(
            run.id = process.run_id, sync.id = %process.sync_id,
            process = process.process_id, status = %outcome.status,
            "An import did not complete; its page is recorded as rejected"
        );
    }
    if outcome.status == ImportStatus::Unknown {
        alert_unknown(daemon, workspace, process, outcome.error.as_deref()).await;
    }
    Ok(true)
}

/// One critical alert per import whose outcome cannot be learned: its page
/// may or may not have arrived, and only a person can tell (Brevo's import
/// history) or decide to send it again.
async fn alert_unknown(
    daemon: &Daemon,
    workspace: &str,
    process: &ImportProcessRow,
    why: Option<&str>,
) {
    let sync = &process.sync_id;
    daemon
        .alerter
        .raise(&Alert {
            kind: IMPORT_UNKNOWN_ALERT,
            workspace: Some(workspace.to_string()),
            sync: Some(sync.clone()),
            run_id: Some(process.run_id),
            message: format!(
                "Sync {sync}: the outcome of Brevo import process {} (run {}, {} records) is unknown{}. \
                 Its records are shown as rejected (import_unknown) and left the ledger. Next: check the \
                 import in Brevo's contact import history; to send them again, reset the cursor \
                 (`syncward sync reset-cursor {sync}`) and run the sync (Brevo writes are upserts).",
                process.process_id,
                process.run_id,
                process.records,
                why.map(|w| format!(" ({w})")).unwrap_or_default(),
            ),
            failure: None,
        })
        .await;
}
