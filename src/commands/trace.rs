//! `syncward trace ADDRESS`: what the syncs did with one address, through
//! `ops` as the CLI (every workspace).

use crate::cli::TraceArgs;
use crate::config::{BadInput, Settings};
use crate::ops::{Door, OpsError, Scope, Trace};
use crate::store;

use super::output::outln;

pub async fn execute(settings: &Settings, args: TraceArgs) -> anyhow::Result<()> {
    let pool = store::connect(&settings.database).await?;
    let door = Door::new(pool, settings.run_attempts());
    let trace = match door
        .enter(Scope::Cli)
        .trace(&args.address, args.sync.as_deref(), args.calls)
        .await
    {
        Ok(trace) => trace,
        Err(OpsError::BadInput(why)) => {
            return Err(BadInput::new("arguments", "ADDRESS", why).into());
        }
        Err(OpsError::NotFound) => {
            let sync = args.sync.unwrap_or_default();
            return Err(BadInput::new("arguments", "--sync", format!("no sync {sync:?}")).into());
        }
        Err(e) => return Err(e.into()),
    };
    if args.json {
        return super::print_json(&trace);
    }
    print_trace(&trace);
    Ok(())
}

/// The trace for people: newest first, one block per call.
fn print_trace(trace: &Trace) {
    let nothing = trace.calls.is_empty() && trace.rejections.is_empty() && trace.kept.is_empty();
    if nothing {
        outln!(
            "No sync of {} has sent, rejected or kept {} within the ledger's retention.",
            crate::words::counted(trace.syncs.len(), "sync", "syncs"),
            trace.address
        );
        return;
    }
    for call in &trace.calls {
        outln!(
            "{}  sync {}  run {}  {}",
            call.at.format("%Y-%m-%d %H:%M:%S UTC"),
            call.sync,
            call.run_id,
            call.kind.replace('_', " ")
        );
        if call.kind == "sent" {
            outln!("  sent: {}", call.sent);
            outln!(
                "  delivery key {}: {}{}",
                &call.delivery_key[..16],
                call.key_state,
                call.attempts
                    .map(|a| format!(" ({})", crate::words::counted(a, "attempt", "attempts")))
                    .unwrap_or_default()
            );
        }
        outln!("  {}", call.answer);
    }
    for rejection in &trace.rejections {
        outln!(
            "{}  sync {}  run {}  rejected: {} — {}",
            rejection.at.format("%Y-%m-%d %H:%M:%S UTC"),
            rejection.sync,
            rejection.run_id,
            rejection.code,
            rejection.message
        );
    }
    for kept in &trace.kept {
        outln!(
            "sync {} keeps it as delivered {}{}",
            kept.sync,
            kept.delivered_at.format("%Y-%m-%d %H:%M:%S UTC"),
            kept.last_seen_by_run
                .map(|r| format!("; last seen in the query by run {r}"))
                .unwrap_or_default()
        );
    }
}
