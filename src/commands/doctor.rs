//! `syncward doctor`: tries what the daemon needs, one line each — the
//! store (reachable, schema current), Redis, and each sync's source (a page
//! read as `sync preview` reads it: nothing written) and destination
//! credentials (asked by a call that sends nothing, where the destination
//! has one: `DestinationConfig::check_key`). Exit 1 when any check fails.

use serde::Serialize;

use super::output::outln;
use super::print_json;
use crate::config::{Settings, redact_url};
use crate::destination::KeyCheck;
use crate::states::SyncStatus;
use crate::store;

/// One check's verdict.
#[derive(Debug, Serialize)]
struct Check {
    /// `store`, `redis`, or `SYNC source` / `SYNC destination`.
    what: String,
    /// `ok`, `fail`, or `skip` (cannot be tried from here).
    verdict: &'static str,
    detail: String,
}

/// Some checks failed (exit 1); each was printed on its line.
#[derive(Debug, thiserror::Error)]
#[error("{0} of the checks failed")]
pub struct ChecksFailed(usize);

pub async fn doctor(settings: &Settings, json: bool) -> anyhow::Result<()> {
    let mut checks = Vec::new();
    let store_at = redact_url(&settings.database.url);
    let pool = match store::connect_for_migrate(&settings.database).await {
        Ok(pool) => match store::pending_migrations(&pool).await {
            Ok(pending) if pending.is_empty() => {
                checks.push(ok(
                    "store",
                    format!("{store_at}: reachable, schema current"),
                ));
                Some(pool)
            }
            Ok(pending) => {
                checks.push(fail(
                    "store",
                    format!(
                        "{store_at}: schema behind (migrations {pending:?} pending): run `syncward migrate`"
                    ),
                ));
                None
            }
            Err(e) => {
                checks.push(fail("store", format!("{store_at}: {e:#}")));
                None
            }
        },
        Err(e) => {
            checks.push(fail("store", format!("{e:#}")));
            None
        }
    };
    let redis_at = redact_url(&settings.redis.url);
    match super::connect_redis(&settings.redis).await {
        Ok(_) => checks.push(ok("redis", format!("{redis_at}: answers"))),
        Err(e) => checks.push(fail("redis", format!("{e:#}"))),
    }
    if let Some(pool) = &pool {
        check_syncs(pool, settings, &mut checks).await?;
    }
    let failed = checks.iter().filter(|c| c.verdict == "fail").count();
    if json {
        print_json(&checks)?;
    } else {
        for c in &checks {
            outln!("{:<4}  {}: {}", c.verdict, c.what, c.detail);
        }
    }
    if failed > 0 {
        return Err(ChecksFailed(failed).into());
    }
    Ok(())
}

/// Each sync that is not archived: its source, then its destination.
async fn check_syncs(
    pool: &sqlx::PgPool,
    settings: &Settings,
    checks: &mut Vec<Check>,
) -> anyhow::Result<()> {
    let secrets = settings.secrets.store();
    let door =
        crate::ops::Door::new(pool.clone(), settings.run_attempts()).enter(crate::ops::Scope::Cli);
    for summary in door.sync_list().await? {
        if summary.status == SyncStatus::Archived {
            continue;
        }
        let sync = door.sync(&summary.id).await?;
        let id = &sync.id;
        let definition = match sync.definition() {
            Ok(d) => d,
            Err(e) => {
                checks.push(fail(
                    &format!("{id} definition"),
                    format!("no longer validates: {e}; apply its file again"),
                ));
                continue;
            }
        };
        let workspace = secrets.workspace(&definition.workspace);
        let context = sync.failure_context(Some(&secrets));
        let source = format!("{id} source");
        match crate::worker::preview(pool, &definition, &workspace, sync.ledger_epoch, 0).await {
            Ok(page) => checks.push(ok(
                &source,
                format!(
                    "{}: a page read ({})",
                    definition.source.kind(),
                    crate::words::counted(page.page_records, "record", "records")
                ),
            )),
            Err(e) => {
                let advice = e
                    .downcast_ref::<crate::source::SourceError>()
                    .map(|e| three_sentences(crate::worker::source_failure_code(e), &context))
                    .unwrap_or_default();
                checks.push(fail(&source, format!("{e:#}{advice}")))
            }
        }
        let destination = format!("{id} destination");
        let kind = definition.destination.kind();
        match definition.destination.check_key(&workspace).await {
            KeyCheck::Accepted(what) => checks.push(ok(&destination, format!("{kind}: {what}"))),
            KeyCheck::Refused(e) => {
                let code = crate::worker::destination_failure_code(&e);
                checks.push(fail(
                    &destination,
                    format!("{kind}: {e}{}", three_sentences(code, &context)),
                ))
            }
            KeyCheck::NotAsked(why) => checks.push(Check {
                what: destination,
                verdict: "skip",
                detail: format!("{kind}: {why}"),
            }),
        }
    }
    Ok(())
}

/// A failure's code and three sentences, as a run would record them, to
/// follow a failed check's detail.
fn three_sentences(
    code: crate::failure::FailureCode,
    context: &crate::failure::FailureContext,
) -> String {
    format!(
        " ({code}) What happened: {} What next: {} Whose job: {}.",
        code.what_happened(),
        code.what_next_for(context),
        crate::views::whose_job(code.owner())
    )
}

fn ok(what: &str, detail: String) -> Check {
    Check {
        what: what.into(),
        verdict: "ok",
        detail,
    }
}

fn fail(what: &str, detail: String) -> Check {
    Check {
        what: what.into(),
        verdict: "fail",
        detail,
    }
}
