//! `syncward trace ADDRESS`: what the syncs did with one address, through
//! `ops` as the CLI (every workspace).

use crate::cli::TraceArgs;
use crate::config::{BadInput, Settings};
use crate::ops::{Door, OpsError, Scope};
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
    outln!("{}", trace.page().to_text().trim_end());
    Ok(())
}
