//! Bulk-path benchmark (prints its figures; asserts nothing about speed):
//! a Postgres source of 200,000 contacts → the ledger → the Brevo fake on
//! loopback, pages of 1,000, in one process on the run code path the daemon
//! uses. Three figures:
//!
//! 1. records/s with the ledger (the real path),
//! 2. records/s of a bare loop written here (`bare_loop`): the same source,
//!    keys, mapping and destination calls (each import within the account's
//!    shared budget, as the run's), pages read ahead, but no ledger, lease or
//!    checkpoint; and of the same loop plus the one durable commit a page
//!    that the guarantee needs between a page's answer and the next page's
//!    call (the page's keys inserted and a cursor updated in one
//!    transaction, on the same store): the floor. Each repetition runs the
//!    bare loop, the loop with its commit and the run, back to back, for the
//!    ratios,
//! 3. keys/s replayed when the whole range is run again (no destination call).
//!
//! Beside the times, the CPU a page of the bare loop and of the run costs
//! (this process with its fake, and Postgres, from /proc): a steadier figure
//! than wall time on a shared machine.
//!
//! `cargo bench --bench bulk_path` (needs `scripts/services`); `BENCH_ROWS`
//! changes the size. Targets on a 2-core machine: ≥ 50k records/s with the
//! ledger; the run ≤ 1.0× the loop with its commit (everything beyond the
//! guarantee's own commit is free) and ≤ 1.15× the bare loop; replay ≥ 1M
//! keys/s.

#[allow(dead_code)]
#[path = "../tests/it/fakes/brevo.rs"]
mod brevo;
mod support;

use std::time::Instant;

use syncward::config::{Settings, SyncDefinition};
use syncward::destination::{AnyDestination, DESTINATION_RETRY, Destination, Go, Outbound};
use syncward::mapping::map_record;
use syncward::source::{AnySource, Source};
use syncward::store::audit::Actor;
use syncward::store::runs;
use syncward::store::{cursors, syncs};
use syncward::worker::{PageKeys, RunOutcome, execute_run};

const KEY: &str = "xkeysib-bench";

fn main() -> anyhow::Result<()> {
    support::main(&[("BENCH_BREVO_KEY", KEY)], 8, run_benchmarks)
}

async fn run_benchmarks(pool: sqlx::PgPool) -> anyhow::Result<()> {
    let rows: i64 = std::env::var("BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    sqlx::raw_sql("CREATE TABLE contacts (id bigint PRIMARY KEY, email text NOT NULL, first_name text, last_name text)")
        .execute(&pool)
        .await?;
    sqlx::query(
        "INSERT INTO contacts SELECT i, 'contact' || i || '@example.com', 'First' || i, 'Last' || i
         FROM generate_series(1, $1) i",
    )
    .bind(rows)
    .execute(&pool)
    .await?;
    sqlx::raw_sql("VACUUM ANALYZE contacts")
        .execute(&pool)
        .await?;
    // What the floor loop commits a page: its keys and a cursor.
    sqlx::raw_sql(
        "CREATE TABLE floor_keys (key bytea PRIMARY KEY);
         CREATE TABLE floor_cursor (id int PRIMARY KEY, cursor jsonb);
         INSERT INTO floor_cursor VALUES (1, NULL);",
    )
    .execute(&pool)
    .await?;

    let fake = brevo::BrevoFake::start(KEY).await?;
    // The fake keeps its contacts but no log of bodies: Brevo's own work is
    // not syncward's, and on this machine it shares the two cores.
    fake.lean();
    // The source is this benchmark's own database (BENCH_SOURCE_URL).
    let text = format!(
        r#"
id = "bench"
workspace = "bench"
schedule = "0 0 * * * *"
[source]
kind = "postgres"
url_env = "BENCH_SOURCE_URL"
query = "SELECT id, email, first_name, last_name FROM contacts"
cursor_column = "id"
page_size = 1000
[destination]
kind = "brevo"
api_key_env = "BENCH_BREVO_KEY"
base_url = "{}"
mode = "bulk"
list_ids = [1]
# The fake on loopback, not Brevo: the account budget is set to its maximum
# so the figures measure syncward, not Brevo's 10 requests a second.
requests_per_second = 1000
[mapping]
email = "email"
attributes = {{ FIRSTNAME = "first_name", LASTNAME = "last_name" }}
"#,
        fake.base_url
    );
    let reps: usize = std::env::var("BENCH_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let replays: usize = std::env::var("BENCH_REPLAYS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let definition = SyncDefinition::parse("bench.toml", &text)?;
    // More syncs over the same source, one per repetition: new keys in a ledger
    // whose statistics are current, as in a daemon that has been running for
    // a while.
    let others = (0..reps)
        .map(|r| {
            SyncDefinition::parse(
                "bench-n.toml",
                &text.replacen("id = \"bench\"", &format!("id = \"bench{r}\""), 1),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut all = vec![definition.clone()];
    all.extend(others.iter().cloned());
    syncs::publish_syncs(&pool, &all, Actor::Cli).await?;
    let mut settings = Settings::default();
    settings.lease.renew_every = std::time::Duration::from_secs(300);
    settings.secrets.dir = support::secrets_dir();
    let (env, executor) = support::run_env(&pool, &settings)?;

    let timed = |definition: &SyncDefinition| {
        let env = env.clone();
        let pool = pool.clone();
        let executor = executor.clone();
        let definition = definition.clone();
        async move {
            let id = definition.id.to_string();
            cursors::reset_cursor(&pool, &id, Actor::Cli).await?;
            let run = runs::create_claimed_run(
                &pool,
                &id,
                syncward::states::RunTrigger::Foreground,
                1,
                &executor,
            )
            .await?;
            let started = Instant::now();
            let report = execute_run(&env, &run, &definition, &mut |_| {}).await;
            let elapsed = started.elapsed();
            if let Some(lease) = &report.lease {
                env.leases.release(lease).await?;
            }
            anyhow::ensure!(
                report.outcome == RunOutcome::Succeeded,
                "run failed: {:?}",
                report.outcome
            );
            anyhow::Ok((elapsed, report.counts))
        }
    };

    // The machine is shared and noisy: each figure is the median of `reps`
    // runs (BENCH_REPS, default 3), with the range beside it.
    let (cold, cold_counts) = timed(&definition).await?;
    anyhow::ensure!(cold_counts.written == rows, "not every record was written");
    // What autovacuum does once a table has grown.
    sqlx::raw_sql("ANALYZE deliveries").execute(&pool).await?;
    // Each repetition runs without the ledger, then with it on a new sync,
    // back to back, so the pair sees the same machine: the ratio is the
    // median of the pairs' ratios (the shared machine drifts between pairs).
    let mut off = Vec::new();
    let mut floor = Vec::new();
    let mut on = Vec::new();
    let mut pair_ratios = Vec::new();
    let mut floor_ratios = Vec::new();
    let mut replay = Vec::new();
    // CPU seconds of the bare loop and of the run (this process, Postgres):
    // steadier than wall time on a shared machine.
    let mut off_cpu = Vec::new();
    let mut on_cpu = Vec::new();
    let cpu_now = || (support::own_cpu_seconds(), support::cpu_seconds("postgres"));
    for other in &others {
        let before = cpu_now();
        let (off_elapsed, written) = bare_loop(&definition, &env.budgets, None).await?;
        off_cpu.push(cpu_since(before, cpu_now()));
        anyhow::ensure!(written == rows, "not every record was written");
        off.push(off_elapsed);
        sqlx::raw_sql("TRUNCATE floor_keys").execute(&pool).await?;
        let (floor_elapsed, written) = bare_loop(&definition, &env.budgets, Some(&pool)).await?;
        anyhow::ensure!(written == rows, "not every record was written");
        floor.push(floor_elapsed);
        let before = cpu_now();
        let (elapsed, counts) = timed(other).await?;
        on_cpu.push(cpu_since(before, cpu_now()));
        anyhow::ensure!(counts.written == rows, "not every record was written");
        on.push(elapsed);
        pair_ratios.push(elapsed.as_secs_f64() / off_elapsed.as_secs_f64());
        floor_ratios.push(elapsed.as_secs_f64() / floor_elapsed.as_secs_f64());
        // BENCH_REPLAYS: replay the range this many times (for profiles).
        for _ in 0..replays {
            let (elapsed, counts) = timed(other).await?;
            anyhow::ensure!(
                counts.replayed == rows && counts.written == 0,
                "the replay sent records"
            );
            replay.push(elapsed);
        }
    }
    pair_ratios.sort_by(f64::total_cmp);
    floor_ratios.sort_by(f64::total_cmp);

    let rate = |d: std::time::Duration| rows as f64 / d.as_secs_f64();
    // (median, slowest, fastest) as rates.
    let figures = |runs: &mut Vec<std::time::Duration>| {
        runs.sort();
        (
            rate(runs[runs.len() / 2]),
            rate(runs[runs.len() - 1]),
            rate(runs[0]),
        )
    };
    let (on_rate, on_low, on_high) = figures(&mut on);
    let (off_rate, off_low, off_high) = figures(&mut off);
    let (floor_rate, floor_low, floor_high) = figures(&mut floor);
    let (replay_rate, replay_low, replay_high) = figures(&mut replay);
    println!("bulk path, {rows} records, pages of 1000, Brevo fake on loopback, median of {reps}");
    println!(
        "  with ledger:    {on_rate:>9.0} records/s ({on_low:.0}-{on_high:.0})   target >= 50000"
    );
    println!(
        "  (empty ledger, no statistics yet: {:.0} records/s)",
        rate(cold)
    );
    println!("  bare loop:      {off_rate:>9.0} records/s ({off_low:.0}-{off_high:.0})");
    println!("  bare + commit:  {floor_rate:>9.0} records/s ({floor_low:.0}-{floor_high:.0})");
    println!(
        "  ledger/floor:   {:>9.2}x ({:.2}-{:.2})     target <= 1.00   (run / bare loop with its commit, median of the pairs' ratios)",
        floor_ratios[floor_ratios.len() / 2],
        floor_ratios[0],
        floor_ratios[floor_ratios.len() - 1],
    );
    println!(
        "  ledger/bare:    {:>9.2}x ({:.2}-{:.2})     target <= 1.15   (median of the pairs' ratios)",
        pair_ratios[pair_ratios.len() / 2],
        pair_ratios[0],
        pair_ratios[pair_ratios.len() - 1],
    );
    // CPU milliseconds a page of 1,000 records, medians.
    let per_page = |cpu: &[(f64, f64)], part: fn(&(f64, f64)) -> f64| {
        let mut v: Vec<f64> = cpu.iter().map(part).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] * 1000.0 / (rows as f64 / 1000.0)
    };
    let mut cpu_ratios: Vec<f64> = on_cpu
        .iter()
        .zip(&off_cpu)
        .map(|(on, off)| (on.0 + on.1) / (off.0 + off.1))
        .collect();
    cpu_ratios.sort_by(f64::total_cmp);
    println!(
        "  CPU a page:     bare loop {:.2} ms here (the fake's with it) + {:.2} ms Postgres; run {:.2} + {:.2} ms",
        per_page(&off_cpu, |c| c.0),
        per_page(&off_cpu, |c| c.1),
        per_page(&on_cpu, |c| c.0),
        per_page(&on_cpu, |c| c.1),
    );
    println!(
        "  CPU run/bare:   {:>9.2}x ({:.2}-{:.2})                      (both together, median of the pairs' ratios)",
        cpu_ratios[cpu_ratios.len() / 2],
        cpu_ratios[0],
        cpu_ratios[cpu_ratios.len() - 1],
    );
    println!(
        "  replay:         {replay_rate:>9.0} keys/s    ({replay_low:.0}-{replay_high:.0})   target >= 1000000"
    );
    println!("  destination calls: {}", fake.requests().len());
    Ok(())
}

/// CPU seconds used between two readings of (this process, Postgres).
fn cpu_since(before: (f64, f64), after: (f64, f64)) -> (f64, f64) {
    (after.0 - before.0, after.1 - before.1)
}

/// What the run loop does without its guarantees: read pages (the next one
/// while the current is sent), key and map every record, send each page in
/// one call within the account's shared budget, as any client of the account
/// must. No ledger, lease or cursor. With `commit`, the floor: once a page's
/// call has answered and before the next page's call, its keys and the next
/// cursor are committed in one transaction on that store. Returns the time
/// and records sent.
async fn bare_loop(
    definition: &SyncDefinition,
    budgets: &syncward::outbound::SharedBudgets,
    commit: Option<&sqlx::PgPool>,
) -> anyhow::Result<(std::time::Duration, i64)> {
    let started = Instant::now();
    let secrets = syncward::config::secrets::SecretStore::new(support::secrets_dir())
        .workspace(&definition.workspace);
    let mut source = AnySource::open(
        &definition.source,
        &Default::default(),
        &secrets,
        &Default::default(),
    )?;
    let mut destination =
        AnyDestination::open(&definition.destination, DESTINATION_RETRY, &secrets)?;
    destination.share_budgets(budgets, definition.workspace.as_str());
    let fingerprint = source.fingerprint();
    let id = definition.id.to_string();
    let mut cursor = None;
    let mut page = source.fetch_page(None).await?;
    let mut written = 0;
    while !page.records.is_empty() {
        let mut keys = PageKeys::new(&id, &fingerprint, cursor.as_ref());
        let mut outbound = Vec::with_capacity(page.records.len());
        for position in 0..page.records.len() {
            let key = keys.key_of(&page.records, position)?;
            let record = page.records.take(position)?;
            let contact = map_record(&definition.mapping, &record)?;
            outbound.push(Outbound {
                key: key.0,
                contact,
            });
        }
        cursor = page.next_cursor.clone();
        let read = async {
            match (&cursor, page.last) {
                (Some(at), false) => source.fetch_page(Some(at)).await,
                _ => Ok(Default::default()),
            }
        };
        let (sent, next) = tokio::join!(destination.deliver(&outbound, Go::now()), read);
        written += sent?.len() as i64;
        page = next?;
        if let Some(store) = commit {
            let keys: Vec<&[u8]> = outbound.iter().map(|o| &o.key[..]).collect();
            let mut tx = store.begin().await?;
            sqlx::query("INSERT INTO floor_keys SELECT unnest($1::bytea[])")
                .bind(&keys)
                .execute(&mut *tx)
                .await?;
            sqlx::query("UPDATE floor_cursor SET cursor = $1 WHERE id = 1")
                .bind(sqlx::types::Json(&cursor))
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }
    }
    Ok((started.elapsed(), written))
}
