//! `syncward sync …`: publish and operate syncs.

use anyhow::Context;

use crate::cli::SyncCommand;
use crate::config::{Settings, SyncDefinition, load_definitions, sync_files_in};
use crate::destination::MappingCheck;
use crate::store;
use crate::store::rejected::PutBackFilter;

use super::output::{out, outln};
use super::run_once;
use super::{print_json, when};
use crate::ops::{Door, OpsError, PublishOutcome, Runnable, Scope, Scoped};

pub async fn execute(settings: &Settings, command: SyncCommand) -> anyhow::Result<()> {
    // Before any connection (`apply` says why).
    if let SyncCommand::Apply {
        files,
        plan,
        prune,
        skip_attribute_check,
        no_source_check,
        json,
    } = command
    {
        let checks = ApplyChecks {
            attributes: !skip_attribute_check,
            source: !no_source_check,
        };
        return apply(settings, &files, plan, prune.as_deref(), checks, json).await;
    }
    let pool = match command {
        SyncCommand::Run {
            foreground: true, ..
        } => store::connect_for_one_run(&settings.database).await?,
        _ => store::connect(&settings.database).await?,
    };
    let door = Door::new(pool.clone(), settings.run_attempts())
        .with_secrets(settings.secrets.store())
        .enter(Scope::Cli);
    match command {
        SyncCommand::Apply { .. } => unreachable!("handled above"),
        SyncCommand::List(json) => list(&door, json).await,
        SyncCommand::Show {
            id,
            version: None,
            json,
        } => show(&door, &id, json.json).await,
        SyncCommand::Show {
            id,
            version: Some(version),
            json,
        } => show_version(&door, &id, version, json).await,
        SyncCommand::Delete { id, json } => delete(&door, &id, json).await,
        SyncCommand::Resync { id, json } => resync(&door, &id, json).await,
        SyncCommand::Move {
            id,
            workspace,
            json,
        } => move_to(&door, &id, &workspace, json).await,
        SyncCommand::Rollback { id, version, json } => {
            rollback(settings, &door, &id, version, json).await
        }
        SyncCommand::Pause { id, reason, json } => pause(&door, &id, reason.as_deref(), json).await,
        SyncCommand::Resume { id, json } => resume(&door, &id, json).await,
        SyncCommand::Run {
            id,
            foreground,
            only,
            force,
            wait,
            json,
        } => {
            let how = RunHow {
                foreground,
                only,
                force,
                wait,
            };
            run(settings, &pool, &door, &id, how, json).await
        }
        SyncCommand::Preview { id, limit, json } => {
            preview(settings, &pool, &door, &id, limit, json).await
        }
        SyncCommand::Removals {
            run_id,
            page,
            per_page,
            json,
        } => removals(&door, run_id, page, per_page, json).await,
        SyncCommand::ApproveRemovals { run_id, json } => {
            approve_removals(&door, run_id, json).await
        }
        SyncCommand::RetryRejected {
            id,
            run,
            code,
            json,
        } => retry_rejected(&door, &id, PutBackFilter { run_id: run, code }, json).await,
        SyncCommand::ResetCursor { id, json } => reset_cursor(&door, &id, json).await,
    }
}

/// `sync show ID --version N`: a kept version, as the file it came from.
async fn show_version(
    door: &Scoped,
    id: &str,
    version: i32,
    json: crate::cli::JsonFlag,
) -> anyhow::Result<()> {
    let kept = door
        .sync_version(id, version)
        .await
        .map_err(|e| refusal(id, e))?;
    if json.json {
        return print_json(&kept);
    }
    outln!(
        "# {id}, version {version}, published {} by {}",
        when(Some(kept.published_at)),
        kept.actor
    );
    out!("{}", definition_toml(&kept.definition.0)?);
    Ok(())
}

/// `sync delete`: archived, its history kept.
async fn delete(door: &Scoped, id: &str, json: crate::cli::JsonFlag) -> anyhow::Result<()> {
    let archived = door.archive(id).await.map_err(|e| refusal(id, e))?;
    let said = match archived {
        true => format!(
            "{id}: archived; it never runs again, keeps its history, and comes back when its file is applied."
        ),
        false => format!("{id}: already archived."),
    };
    status_changed(id, "archived", archived, json, &said)
}

/// `sync resync`: a new ledger epoch and the cursor rewound.
async fn resync(door: &Scoped, id: &str, json: crate::cli::JsonFlag) -> anyhow::Result<()> {
    let epoch = door.resync(id).await.map_err(|e| refusal(id, e))?;
    if json.json {
        return print_json(&serde_json::json!({"sync": id, "ledger_epoch": epoch, "cursor": null}));
    }
    outln!(
        "{id}: full resync: ledger epoch {epoch}, cursor rewound; the next run sends every record of the source once more."
    );
    Ok(())
}

/// `sync move --workspace W`: the sync and its history into another workspace.
async fn move_to(
    door: &Scoped,
    id: &str,
    workspace: &str,
    json: crate::cli::JsonFlag,
) -> anyhow::Result<()> {
    let workspace = crate::config::WorkspaceId::parse(workspace)
        .map_err(|why| crate::config::BadInput::new("--workspace", "", why))?;
    let moved = door
        .move_sync(id, &workspace)
        .await
        .map_err(|e| refusal(id, e))?;
    if json.json {
        return print_json(&moved);
    }
    outln!(
        "{id}: moved from workspace {} to {}, version {}, with {} runs, {} rejected records and {} versions; its secrets now come from {}'s file. Edit its file to say workspace = \"{}\" before applying it again.",
        moved.from,
        moved.to,
        moved.version,
        moved.runs,
        moved.rejected_records,
        moved.versions,
        moved.to,
        moved.to
    );
    Ok(())
}

/// `sync rollback ID VERSION`: a kept version published again.
async fn rollback(
    settings: &Settings,
    door: &Scoped,
    id: &str,
    version: i32,
    json: crate::cli::JsonFlag,
) -> anyhow::Result<()> {
    let (published, current) = door
        .rollback(id, version, &settings.secrets.store())
        .await
        .map_err(|e| refusal(id, e))?;
    if json.json {
        return print_json(
            &serde_json::json!({"sync": id, "version": published, "from_version": version}),
        );
    }
    if version == current {
        outln!(
            "{id}: version {version} is the current definition; republished as version {published}."
        );
    } else {
        outln!("{id}: version {version} published again as version {published}.");
    }
    Ok(())
}

/// `sync pause`: no new runs until resumed.
async fn pause(
    door: &Scoped,
    id: &str,
    reason: Option<&str>,
    json: crate::cli::JsonFlag,
) -> anyhow::Result<()> {
    let paused = door.pause(id, reason).await.map_err(|e| refusal(id, e))?;
    let said = match paused {
        true => format!("{id}: paused; no new runs start until `syncward sync resume {id}`."),
        false => format!("{id}: already paused."),
    };
    status_changed(id, "paused", paused, json, &said)
}

/// `sync resume`: active again, the breaker re-armed.
async fn resume(door: &Scoped, id: &str, json: crate::cli::JsonFlag) -> anyhow::Result<()> {
    let resumed = door.resume(id).await.map_err(|e| refusal(id, e))?;
    let said = match resumed {
        true => format!("{id}: resumed; the breaker counts failures from now on."),
        false => format!("{id}: not paused; nothing to do."),
    };
    status_changed(id, "active", resumed, json, &said)
}

/// What `delete`, `pause` and `resume` answer: the sync's status and whether
/// this asking changed it (JSON), or `said`.
fn status_changed(
    id: &str,
    status: &str,
    changed: bool,
    json: crate::cli::JsonFlag,
    said: &str,
) -> anyhow::Result<()> {
    if json.json {
        return print_json(&serde_json::json!({"sync": id, "status": status, "changed": changed}));
    }
    outln!("{said}");
    Ok(())
}

/// How `sync run` was asked to run.
struct RunHow {
    foreground: bool,
    only: Option<String>,
    force: bool,
    wait: Option<std::time::Duration>,
}

/// `sync run`: queued for the daemons (and watched with `--wait`), or run
/// here in the foreground.
async fn run(
    settings: &Settings,
    pool: &sqlx::PgPool,
    door: &Scoped,
    id: &str,
    how: RunHow,
    json: crate::cli::JsonFlag,
) -> anyhow::Result<()> {
    let RunHow {
        foreground,
        only,
        force,
        wait,
    } = how;
    let runnable = door.runnable(id, force).await.map_err(|e| refusal(id, e))?;
    if foreground {
        let Runnable { sync, forced } = runnable;
        let only = match only {
            Some(address) => Some(run_once::only_address(&sync, address)?),
            None => None,
        };
        run_once::foreground(settings, pool, sync, forced, wait, only, json.json).await
    } else {
        let run_id = run_once::enqueue(pool, door, &runnable, json.json).await?;
        match wait {
            Some(limit) => super::runs::watch(door, run_id, Some(limit), json.json).await,
            None => Ok(()),
        }
    }
}

/// `sync approve-removals RUN`: a mirror run's held removals approved.
async fn approve_removals(
    door: &Scoped,
    run_id: i64,
    json: crate::cli::JsonFlag,
) -> anyhow::Result<()> {
    let approved = door
        .approve_removals(run_id)
        .await
        .map_err(|e| run_refusal(run_id, e))?;
    if json.json {
        return print_json(&serde_json::json!({ "run_id": run_id, "approved": approved }));
    }
    outln!(
        "run {run_id}: {} approved; the sync's next run takes off those still absent from the query.",
        crate::words::counted(approved, "removal", "removals")
    );
    Ok(())
}

/// `sync reset-cursor`: the next run reads from the start (the ledger
/// keeps delivered records from being sent again).
async fn reset_cursor(door: &Scoped, id: &str, json: crate::cli::JsonFlag) -> anyhow::Result<()> {
    door.reset_cursor(id).await.map_err(|e| refusal(id, e))?;
    if json.json {
        return print_json(&serde_json::json!({"sync": id, "cursor": null}));
    }
    outln!(
        "{id}: cursor reset; the next run reads the source from the start (delivered records are not sent again)."
    );
    Ok(())
}

/// What `sync apply` asks of each file beyond its own checks.
#[derive(Debug, Clone, Copy)]
struct ApplyChecks {
    /// The destination has the fields the mapping writes.
    attributes: bool,
    /// The source's query runs and names the mapped columns.
    source: bool,
}

/// `sync apply` (and `--plan`): files read and checked before any
/// connection (bad input never waits on the network, and nothing is written
/// unless every file is good), then published, or their plan printed.
async fn apply(
    settings: &Settings,
    files: &[std::path::PathBuf],
    plan: bool,
    prune: Option<&std::path::Path>,
    checks: ApplyChecks,
    json: crate::cli::JsonFlag,
) -> anyhow::Result<()> {
    let mut named = files.to_vec();
    named.extend(prune.iter().map(|p| p.to_path_buf()));
    let paths = sync_files_in(&named)?;
    // A plan runs every check an apply runs, so a green plan in CI is a
    // clean apply: secrets, hosts, the source's query and columns, the
    // destination's fields.
    let secrets = settings.secrets.store();
    let definitions = load_definitions(&paths, Some(&secrets))?;
    let pool = store::connect(&settings.database).await?;
    let mut warnings = Vec::with_capacity(definitions.len());
    for (file, definition) in paths.iter().zip(&definitions) {
        let found = secrets.workspace(&definition.workspace);
        check_outbound(file, definition, &found).await?;
        if checks.source {
            check_source(file, definition, &found).await?;
        }
        check_attributes(file, definition, &found, !checks.attributes).await?;
        let mut said: Vec<String> = definition
            .destination
            .setting_warning(definition.mapping.consent.is_some())
            .map(str::to_string)
            .into_iter()
            .collect();
        // A sample reads records (an export, an API's pages): a plan looks
        // at one, an apply does not.
        if plan && checks.source {
            said.extend(sample_warnings(&pool, definition, &found).await);
        }
        warnings.push(said);
    }
    if plan {
        let door = Door::new(pool.clone(), settings.run_attempts()).enter(Scope::Cli);
        let mut plans = super::plan::plan(&door, &definitions, prune.is_some()).await?;
        for (definition, said) in definitions.iter().zip(warnings) {
            if let Some(p) = plans.iter_mut().find(|p| p.sync == definition.id.as_str()) {
                p.warnings = said;
            }
        }
        if json.json {
            print_json(&plans)?;
        } else {
            out!("{}", super::plan::to_text(&plans));
        }
        if plans.iter().any(|p| p.changes_anything()) {
            return Err(super::PlanHasChanges.into());
        }
        return Ok(());
    }
    for (file, said) in paths.iter().zip(&warnings) {
        for warning in said {
            eprintln!("warning: {}: {warning}", file.display());
        }
    }
    let door = Door::new(pool, settings.run_attempts()).enter(Scope::Cli);
    let applied = door
        .apply(&definitions, prune.is_some())
        .await
        .context("publishing failed")?;
    if json.json {
        let archived = applied
            .archived
            .iter()
            .map(|id| serde_json::json!({"sync": id, "outcome": "archived"}));
        let published = applied.published.iter().map(|(id, version, outcome)| {
        serde_json::json!({"sync": id, "version": version, "outcome": outcome.as_str()})
    });
        return print_json(&archived.chain(published).collect::<Vec<_>>());
    }
    for id in &applied.archived {
        outln!("{id}: archived (its file is gone; apply it again to restore it)");
    }
    for (id, version, outcome) in applied.published {
        let what = match outcome {
            PublishOutcome::Created => "created",
            PublishOutcome::Updated => "updated",
            PublishOutcome::Restored => "restored from the archive",
            PublishOutcome::Unchanged => "unchanged (republished: active, breaker re-armed)",
        };
        outln!("{id}: {what}, version {version}");
    }
    Ok(())
}

/// `sync list`: every sync the caller sees, a line each.
async fn list(door: &Scoped, json: crate::cli::JsonFlag) -> anyhow::Result<()> {
    let list = door.sync_list().await?;
    if json.json {
        return print_json(&list);
    }
    if list.is_empty() {
        outln!("No syncs yet: publish one with `syncward sync apply FILE`.");
        return Ok(());
    }
    outln!(
        "{:<24} {:<16} {:<32} {:>4} {:<18} {:<20} {:<20} {:<20}",
        "SYNC",
        "WORKSPACE",
        "STATUS",
        "VER",
        "SCHEDULE",
        "NEXT RUN",
        "LAST RUN",
        "LAST SUCCESS"
    );
    for s in list {
        let status = match (&s.paused_reason, &s.paused_note) {
            (Some(_), Some(note)) => format!("paused: {note}"),
            (Some(reason), None) => format!("paused ({reason})"),
            (None, _) => s.status.to_string(),
        };
        let last = match (&s.last_run_id, &s.last_run_status) {
            (Some(id), Some(status)) => format!("#{id} {status}"),
            _ => "-".into(),
        };
        // None while paused or archived; else set at a daemon's tick.
        let next = match (s.status, s.next_due_at) {
            (crate::states::SyncStatus::Active, Some(at)) => when(Some(at)),
            (crate::states::SyncStatus::Active, None) => "at the next tick".into(),
            _ => "-".into(),
        };
        outln!(
            "{:<24} {:<16} {:<32} {:>4} {:<18} {:<20} {:<20} {:<20}",
            s.id,
            s.workspace_id,
            status,
            s.version,
            s.schedule.unwrap_or_default(),
            next,
            last,
            when(s.last_success_at)
        );
    }
    Ok(())
}

/// `sync preview`: the next page as a run would send it; writes nothing.
async fn preview(
    settings: &Settings,
    pool: &sqlx::PgPool,
    door: &Scoped,
    id: &str,
    limit: usize,
    json: crate::cli::JsonFlag,
) -> anyhow::Result<()> {
    let sync = door.sync(id).await.map_err(|e| refusal(id, e))?;
    let definition = sync
        .definition()
        .context("the stored definition no longer validates")?;
    let secrets = settings.secrets.store().workspace(&definition.workspace);
    let preview =
        crate::worker::preview(pool, &definition, &secrets, sync.ledger_epoch, limit).await?;
    let check = definition
        .destination
        .check_mapping(mapped_attributes(&definition), &secrets)
        .await;
    let mut warnings = Vec::new();
    match &check {
        Some(Ok(found)) => {
            if let Some(missing) = found.missing_words() {
                warnings.push(format!("warning: {missing}, or change the mapping"));
            }
            warnings.extend(
                misfits(found, &preview)
                    .into_iter()
                    .map(|m| format!("warning: {m}")),
            );
        }
        Some(Err(why)) => warnings.push(format!("warning: {why}")),
        None => {}
    }
    let warning = (!warnings.is_empty()).then(|| warnings.join("\n"));
    if json.json {
        if let Some(warning) = &warning {
            eprintln!("{warning}");
        }
        return print_json(&preview);
    }
    if let Some(warning) = &warning {
        outln!("{warning}");
    }
    // In words, as the pages say a cursor ("after 3000 (bigint)").
    let from = crate::views::cursor_words(preview.cursor.as_ref());
    outln!(
        "{id}: next page from {from}: {}; showing {}",
        crate::words::counted(preview.page_records, "record", "records"),
        preview.records.len()
    );
    for r in &preview.records {
        let what = match (&r.email, &r.rejected) {
            (_, Some(why)) => format!("rejected ({why})"),
            // As a run sends it: a null attribute is left out.
            (Some(email), None) => format!(
                "{email} {}",
                serde_json::Value::Object(
                    r.attributes
                        .iter()
                        .filter(|(_, v)| !v.is_null())
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                )
            ),
            (None, None) => String::new(),
        };
        outln!(
            "  #{:<4} {}  {:<22} {what}",
            r.position,
            &r.key[..16],
            r.ledger
        );
    }
    outln!("Nothing was written.");
    Ok(())
}

/// `sync removals`: what a refused mirror run holds, a page of it.
async fn removals(
    door: &Scoped,
    run_id: i64,
    page: i64,
    per_page: i64,
    json: crate::cli::JsonFlag,
) -> anyhow::Result<()> {
    let offset = (page - 1).saturating_mul(per_page);
    let held = door
        .held_removals(run_id, offset, per_page)
        .await
        .map_err(|e| run_refusal(run_id, e))?;
    if json.json {
        return print_json(&held);
    }
    let state = match (held.approved_at, &held.approved_by) {
        (Some(at), Some(by)) => format!("approved {} by {by}", when(Some(at))),
        _ => format!("awaiting approval (`syncward sync approve-removals {run_id}`)"),
    };
    outln!(
        "run {run_id} of {}: {} held, {state}",
        held.sync_id,
        crate::words::counted(held.held as u64, "removal", "removals")
    );
    for address in &held.addresses {
        outln!("  {}", address.as_deref().unwrap_or("(address forgotten)"));
    }
    let shown = offset + held.addresses.len() as i64;
    if shown < held.held {
        outln!("  … {} more: --page {}", held.held - shown, page + 1);
    }
    Ok(())
}

/// `sync retry-rejected`: quarantined and rejected records put back.
async fn retry_rejected(
    door: &Scoped,
    id: &str,
    filter: PutBackFilter,
    json: crate::cli::JsonFlag,
) -> anyhow::Result<()> {
    let done = door
        .retry_rejected(id, &filter)
        .await
        .map_err(|e| refusal(id, e))?;
    if json.json {
        return print_json(&done);
    }
    if done.records() == 0 {
        outln!("{id}: no quarantined or rejected records to put back.");
        return Ok(());
    }
    let codes: Vec<String> = done
        .by_code
        .iter()
        .map(|(code, n)| format!("{n} {code}"))
        .collect();
    outln!(
        "{id}: put back {} ({}); the next run sends them again.",
        crate::words::counted(done.records(), "record", "records"),
        codes.join(", ")
    );
    for record in &done.listed {
        outln!(
            "  {}  source key {}  {}",
            record.email.as_deref().unwrap_or("-"),
            record.source_key.as_deref().unwrap_or("-"),
            record.code
        );
    }
    let unlisted = done.records() - done.listed.len() as i64;
    if unlisted > 0 {
        outln!(
            "  … and {} more: `syncward runs show RUN_ID` lists each run's.",
            unlisted
        );
    }
    if let Some(cursor) = &done.rewound_to {
        let at = if cursor.is_null() {
            "the start of the source".to_string()
        } else {
            cursor.to_string()
        };
        outln!(
            "  The cursor went back to {at}; the pages since are replayed from the ledger, not sent again."
        );
    }
    Ok(())
}

/// Values of a preview's sample that the destination would ignore for their
/// field's type: one line per field.
fn misfits(found: &MappingCheck, preview: &crate::worker::Preview) -> Vec<String> {
    let sample = preview.records.iter().map(|r| (r.position, &r.attributes));
    found.misfits(sample, preview.records.len())
}

/// Records of the next page that the checks fit to the attribute types, at
/// most.
const PLAN_SAMPLE: usize = 20;

/// `--plan`'s look at a sample: the next page's first records are mapped
/// and their values fitted to the destination's field types; one line per
/// field that does not fit. A sample that cannot be read says so in one
/// line.
async fn sample_warnings(
    pool: &sqlx::PgPool,
    definition: &SyncDefinition,
    secrets: &crate::connector_config::WorkspaceSecrets,
) -> Vec<String> {
    let Some(check) = definition
        .destination
        .check_mapping(mapped_attributes(definition), secrets)
        .await
    else {
        return Vec::new();
    };
    let found = match check {
        Ok(found) if found.knows_types() => found,
        Ok(_) => return Vec::new(),
        Err(why) => return vec![format!("field types not checked: {why}")],
    };
    match crate::worker::preview(pool, definition, secrets, 0, PLAN_SAMPLE).await {
        Ok(preview) => misfits(&found, &preview),
        Err(e) => vec![format!(
            "field types not checked: the source could not be sampled: {e:#}"
        )],
    }
}

/// What a run would fail on at the source, found before publishing: its
/// settings open, its query is prepared (no row read), and the cursor
/// column and every mapped field are among the fields it yields. A source
/// that cannot be reached from here refuses the file too, saying how to
/// publish anyway (`--no-source-check`).
async fn check_source(
    file: &std::path::Path,
    definition: &SyncDefinition,
    secrets: &crate::connector_config::WorkspaceSecrets,
) -> anyhow::Result<()> {
    use crate::source::SourceError;
    let refuse = |field: &str, why: String| {
        crate::config::BadInput::new(file.display().to_string(), field, why)
    };
    let mut source = crate::source::AnySource::open(
        &definition.source,
        &Default::default(),
        secrets,
        &Default::default(),
    )
    .map_err(|e| refuse("source", e.to_string()))?;
    match source.fields().await {
        Ok(Some(fields)) => match definition.field_not_in(&fields) {
            Some((key, why)) => Err(refuse(&key, why).into()),
            None => Ok(()),
        },
        Ok(None) => Ok(()),
        Err(SourceError::Query(why)) => Err(refuse("source.query", why).into()),
        Err(SourceError::InvalidConfig(why)) => Err(refuse("source", why).into()),
        Err(e) => Err(refuse(
            "source",
            format!(
                "{e}; the source could not be checked from here: make it reachable, or publish anyway with --no-source-check"
            ),
        )
        .into()),
    }
}

/// The attribute names a sync's mapping writes.
fn mapped_attributes(definition: &crate::config::SyncDefinition) -> impl Iterator<Item = &str> {
    definition.mapping.attributes.keys().map(String::as_str)
}

/// `sync apply`'s outbound check of one file: every host its source and
/// destination reach must be one the outbound policy allows (runs check
/// again, on the address they connect to).
async fn check_outbound(
    file: &std::path::Path,
    definition: &crate::config::SyncDefinition,
    secrets: &crate::connector_config::WorkspaceSecrets,
) -> anyhow::Result<()> {
    use crate::source::OutboundTarget;
    let policy = crate::outbound::policy::current();
    let refuse = |field: &str, why: String| {
        crate::config::BadInput::new(file.display().to_string(), field, why)
    };
    let mut urls: Vec<(&str, url::Url)> = vec![definition.destination.outbound_url()];
    match definition.source.outbound_target(secrets) {
        Some(OutboundTarget::Url(field, url)) => urls.push((field, url)),
        Some(OutboundTarget::Host(field, host, port)) => policy
            .check_host(&host, port)
            .await
            .map_err(|why| refuse(field, why))?,
        None => {}
    }
    if let Some(notify) = &definition.notify {
        urls.push(("notify.url", notify.url.clone()));
    }
    for (field, url) in urls {
        policy
            .check_url(&url)
            .await
            .map_err(|why| refuse(field, why))?;
    }
    Ok(())
}

/// `sync apply`'s check of one file's mapped fields at the destination:
/// fields it lacks refuse the file unless `skip`; a check that cannot be
/// made (the destination unreachable, the key refused) is a warning, so
/// publishing never depends on the destination being up.
async fn check_attributes(
    file: &std::path::Path,
    definition: &crate::config::SyncDefinition,
    secrets: &crate::connector_config::WorkspaceSecrets,
    skip: bool,
) -> anyhow::Result<()> {
    if skip {
        return Ok(());
    }
    match definition
        .destination
        .check_mapping(mapped_attributes(definition), secrets)
        .await
    {
        Some(Ok(found)) => match found.missing_words() {
            Some(missing) => Err(crate::config::BadInput::new(
                file.display().to_string(),
                "mapping.attributes",
                format!(
                    "{missing}, change the mapping, or publish anyway with --skip-attribute-check"
                ),
            )
            .into()),
            None => Ok(()),
        },
        Some(Err(why)) => {
            eprintln!("warning: {}: {why}", file.display());
            Ok(())
        }
        None => Ok(()),
    }
}

async fn show(door: &Scoped, id: &str, json: bool) -> anyhow::Result<()> {
    let view = door.sync_view(id, None).await.map_err(|e| refusal(id, e))?;
    if json {
        return print_json(&view);
    }
    out!("{}", view.page().to_text());
    Ok(())
}

/// An archived sync is operated on only by applying its file again.
/// An action `ops` refused, as the CLI says it.
fn refusal(id: &str, e: OpsError) -> anyhow::Error {
    match e {
        OpsError::NotFound => {
            anyhow::anyhow!("sync \"{id}\": no such sync (see `syncward sync list`)")
        }
        OpsError::Archived => anyhow::anyhow!(
            "sync {id} is archived; apply its file again (`syncward sync apply FILE`) to restore it"
        ),
        OpsError::Paused { reason } => anyhow::anyhow!(
            "sync {id} is paused ({reason}); resume it with `syncward sync resume {id}`, or run it once anyway with --force"
        ),
        OpsError::NoVersion(version) => anyhow::anyhow!(
            "sync \"{id}\" has no version {version} (`syncward sync show {id}` lists them)"
        ),
        OpsError::Unpublishable(why) => anyhow::anyhow!("sync {id}: {why}"),
        e @ (OpsError::ReadOnly
        | OpsError::CannotPublish
        | OpsError::AdminOnly
        | OpsError::BadInput(_)
        | OpsError::Store(_)) => e.into(),
    }
}

/// A refusal about run `run_id`, in one line.
fn run_refusal(run_id: i64, e: OpsError) -> anyhow::Error {
    match e {
        OpsError::NotFound => {
            anyhow::anyhow!("run {run_id}: no such run (see `syncward runs list`)")
        }
        e => refusal(&format!("of run {run_id}"), e),
    }
}

/// A stored definition as the TOML file it came from (same keys and values).
fn definition_toml(definition: &serde_json::Value) -> anyhow::Result<String> {
    let parsed: SyncDefinition = serde_json::from_value(definition.clone())
        .context("the stored definition no longer validates")?;
    Ok(toml::to_string(&parsed)?)
}
