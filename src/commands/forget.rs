//! `syncward forget EMAIL…`: an erasure request, through `ops` as the CLI.

use crate::cli::ForgetArgs;
use crate::config::{BadInput, Settings};
use crate::destination::ErasureOutcome;
use crate::ops::{Door, OpsError, Scope};
use crate::store;

use super::output::outln;

pub async fn execute(settings: &Settings, args: ForgetArgs) -> anyhow::Result<()> {
    // Bad addresses are refused before anything is touched (exit 2).
    crate::ops::check_addresses(&args.addresses)
        .map_err(|why| BadInput::new("arguments", "EMAIL", why))?;
    let pool = store::connect(&settings.database).await?;
    let door = Door::new(pool, settings.run_attempts()).with_secrets(settings.secrets.store());
    let done = match door
        .enter(Scope::Cli)
        .forget(&args.addresses, args.workspace.as_deref(), args.destination)
        .await
    {
        Ok(done) => done,
        Err(OpsError::BadInput(why)) => return Err(BadInput::new("arguments", "", why).into()),
        Err(e) => return Err(e.into()),
    };
    let failed = done
        .accounts
        .iter()
        .flat_map(|a| &a.outcomes)
        .any(|o| matches!(o, ErasureOutcome::Failed(_)));
    if args.json {
        super::print_json(&done)?;
    } else {
        let deleted: u64 = done.store.deleted.values().sum();
        let rewritten: u64 = done.store.rewritten.values().sum();
        outln!(
            "Forgot {} in the store: {} deleted, {rewritten} rewritten with [forgotten]; audit entry written with their SHA-256 digests.",
            crate::words::counted(args.addresses.len(), "address", "addresses"),
            crate::words::counted(deleted, "row", "rows")
        );
        for (table, n) in done.store.deleted.iter() {
            outln!("  deleted {n} from {table}");
        }
        for (column, n) in done.store.rewritten.iter() {
            outln!("  rewrote {n} in {column}");
        }
        if let (Some(workspace), true) = (&done.workspace, args.destination) {
            outln!(
                "Destination accounts of workspace {workspace} (no other workspace's is asked):"
            );
        }
        for account in &done.accounts {
            outln!("{} account of {}:", account.label, account.syncs.join(", "));
            for (address, outcome) in args.addresses.iter().zip(&account.outcomes) {
                let what = match outcome {
                    ErasureOutcome::Deleted => "deleted".to_string(),
                    ErasureOutcome::NotFound => "not there".to_string(),
                    ErasureOutcome::Failed(why) => format!("NOT deleted: {why}"),
                };
                outln!("  {}: {what}", address.trim().to_lowercase());
            }
        }
        for line in done.not_deletable.words() {
            outln!("{line}");
        }
        if !args.destination {
            outln!(
                "Destination accounts were not asked (add --destination to delete the contacts there too)."
            );
        }
    }
    anyhow::ensure!(
        !failed,
        "some contacts could not be deleted at their destination (see above); the store is clean, run again with --destination once fixed"
    );
    Ok(())
}
