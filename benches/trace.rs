//! Trace benchmark (prints its figures; asserts nothing about speed): one
//! sync holding `TRACE_RECORDS` delivered records (default 10 million), in
//! bulk calls of 1,000, each staked and completed through `store::ledger` as
//! the run loop does (the trace row written by the stake's own statement),
//! then `syncward trace`'s lookup (`ops`, the CLI's scope) of an address in
//! the newest call, one in the oldest, and one no call carried: the median
//! of five, and the trace's size on disk. Target on a 2-core machine: ≤ 1 s.
//!
//! `cargo bench --bench trace` (needs `scripts/services`); `TRACE_OFF=1`
//! fills the same ledger without the trace rows (what the fill's time owes
//! to them).

mod support;

use std::time::{Duration, Instant};

use syncward::ops::{Door, Scope};
use syncward::store::ledger::{self, BatchCompletion, BatchStake, BatchStakeRequest};
use syncward::store::runs;
use syncward::store::trace::{SentColumns, TraceEntries, TraceKey};

const SYNC: &str = "bench";
const CALL: usize = 1000;
/// Calls staked at once (the store's connections).
const WRITERS: usize = 4;

fn main() -> anyhow::Result<()> {
    support::main(&[], WRITERS as u32 + 1, run_benchmarks)
}

fn address(i: usize) -> String {
    format!("person{i}@example.com")
}

async fn run_benchmarks(pool: sqlx::PgPool) -> anyhow::Result<()> {
    let records: usize = std::env::var("TRACE_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    sqlx::raw_sql(
        "INSERT INTO workspaces (id) VALUES ('acme');
         INSERT INTO syncs (id, workspace_id, definition) VALUES ('bench', 'acme', '{}');",
    )
    .execute(&pool)
    .await?;
    let (run_id, _) =
        runs::enqueue_run(&pool, SYNC, syncward::states::RunTrigger::Manual, 5).await?;
    let started = runs::begin_leased_runs(
        &pool,
        &[runs::LeaseStart {
            run_id,
            sync_id: SYNC.into(),
            lease_value: format!("bench/{run_id}"),
        }],
    )
    .await?;
    let Some(Some((fence, _))) = started.into_iter().next() else {
        anyhow::bail!("no fence for the bench sync");
    };
    let key = TraceKey::load(&mut *pool.acquire().await?).await?;

    // What a run's process spends on a call's trace (digests, filter and
    // what was sent), apart from the store: the records are mapped already.
    let (addresses, attributes) = call_records(0);
    let built = Instant::now();
    for _ in 0..200 {
        std::hint::black_box(call_trace(&key, &addresses, &attributes));
    }
    println!(
        "a call's trace built in {:.0} us ({CALL} records: digests, filter, what was sent)",
        built.elapsed().as_secs_f64() * 1e6 / 200.0
    );
    let digested = Instant::now();
    for _ in 0..200 {
        for a in &addresses {
            std::hint::black_box(key.digest(a));
        }
    }
    println!(
        "  of which digests: {:.0} us",
        digested.elapsed().as_secs_f64() * 1e6 / 200.0
    );
    let calls = records.div_ceil(CALL);
    let filled = Instant::now();
    let mut writers = tokio::task::JoinSet::new();
    for writer in 0..WRITERS {
        let (pool, key) = (pool.clone(), key.clone());
        writers.spawn(async move {
            for call in (writer..calls).step_by(WRITERS) {
                stake_and_complete(&pool, &key, run_id, fence, call).await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = writers.join_next().await {
        done??;
    }
    sqlx::raw_sql("VACUUM ANALYZE trace_pages")
        .execute(&pool)
        .await?;
    let size: i64 = sqlx::query_scalar("SELECT pg_total_relation_size('trace_pages')")
        .fetch_one(&pool)
        .await?;
    println!(
        "trace of {records} delivered records in {calls} bulk calls of {CALL}: filled in {:.2} s, \
         {:.0} MB on disk ({:.1} bytes a record)",
        filled.elapsed().as_secs_f64(),
        size as f64 / 1e6,
        size as f64 / records as f64
    );

    if std::env::var_os("TRACE_OFF").is_some() {
        return Ok(());
    }
    let door = Door::new(pool.clone(), 5).enter(Scope::Cli);
    let newest = address((calls - 1) * CALL + 7);
    let oldest = address(3);
    for (what, address, expect) in [
        ("an address of the newest call", newest.as_str(), 1),
        ("an address of the oldest call", oldest.as_str(), 1),
        ("an address no call carried", "nobody@example.com", 0),
    ] {
        let mut times = Vec::new();
        for _ in 0..5 {
            let started = Instant::now();
            let trace = door.trace(address, None, 20).await?;
            times.push(started.elapsed());
            anyhow::ensure!(
                trace.calls.len() == expect,
                "{what}: {} calls found",
                trace.calls.len()
            );
        }
        times.sort();
        println!(
            "  trace, {what}: {:>7.1} ms median of 5 ({:.1}-{:.1})   target <= 1000 ms",
            ms(times[2]),
            ms(times[0]),
            ms(times[4])
        );
    }
    Ok(())
}

type Attributes = serde_json::Map<String, serde_json::Value>;

/// Call `call`'s records, mapped: addresses and attributes.
fn call_records(call: usize) -> (Vec<String>, Vec<Attributes>) {
    let first = call * CALL;
    let attributes = (first..first + CALL)
        .map(|i| {
            let mut record = Attributes::new();
            record.insert("FIRSTNAME".into(), format!("First{i}").into());
            record.insert("LASTNAME".into(), format!("Last{i}").into());
            record
        })
        .collect();
    ((first..first + CALL).map(address).collect(), attributes)
}

/// A call's trace entries, as a run builds them.
fn call_trace(key: &TraceKey, addresses: &[String], attributes: &[Attributes]) -> TraceEntries {
    let lists = serde_json::json!({"not_asked": [12], "subscribed": [12], "unsubscribed": [], "unknown": []});
    let mut sent = SentColumns::new(attributes.len(), Some(lists));
    for record in attributes {
        sent.push(record, None);
    }
    TraceEntries::new(addresses.iter().map(|a| key.digest(a)), sent.finish())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Call `call`: its thousand records staked with their trace (the stake's
/// statement, as the run makes it) and completed as a Brevo import.
async fn stake_and_complete(
    pool: &sqlx::PgPool,
    key: &TraceKey,
    run_id: i64,
    fence: i64,
    call: usize,
) -> anyhow::Result<()> {
    let first = call * CALL;
    let delivery_keys: Vec<[u8; 32]> = (first..first + CALL)
        .map(|i| {
            use sha2::Digest;
            sha2::Sha256::digest(i.to_le_bytes()).into()
        })
        .collect();
    let (addresses, attributes) = call_records(call);
    let trace = call_trace(key, &addresses, &attributes);
    let mut page = [0u8; 32];
    page[..8].copy_from_slice(&(call as u64).to_le_bytes());
    let request = BatchStakeRequest {
        page,
        packed_keys: delivery_keys.concat(),
        attempts: 1,
        superseded: Vec::new(),
        watched: Vec::new(),
        trace: std::env::var_os("TRACE_OFF").is_none().then_some(trace),
    };
    let BatchStake::Staked { batch, .. } =
        ledger::stake_batch(pool, SYNC, run_id, fence, &request).await?
    else {
        anyhow::bail!("the stake was fenced");
    };
    let completion = BatchCompletion {
        batch,
        result: serde_json::json!({"processId": call}),
        import: None,
    };
    ledger::complete_batch(pool, SYNC, run_id, &completion).await?;
    Ok(())
}
