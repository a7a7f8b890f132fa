//! The ledger's page rule (migration 0007): every stake marks its page, so a
//! page with no mark has no key in the ledger; bulk stakes are one row whose
//! attempts every key of it spends; syncs with keys from before the rule are
//! still probed key by key.

use serde_json::json;
use syncward::store::ledger::{self, BatchStake, CallStake, KeyState, Stake};
use syncward::worker::PageKeys;

use crate::helpers::{TestDb, start_fenced_run};

async fn seed(db: &TestDb) -> anyhow::Result<i64> {
    sqlx::raw_sql(
        "INSERT INTO workspaces (id) VALUES ('acme');
         INSERT INTO syncs (id, workspace_id, definition) VALUES ('s1', 'acme', '{}');",
    )
    .execute(&db.pool)
    .await?;
    Ok(start_fenced_run(&db.pool, "s1").await?.1)
}

/// A page of `n` keys (records {"i": 0..n}) read from `cursor`.
fn page(cursor: i64, n: usize) -> ([u8; 32], Vec<Vec<u8>>) {
    let at = json!({"type": "bigint", "value": cursor.to_string()});
    let mut keys = PageKeys::new("s1", "postgres:test", Some(&at));
    let list = (0..n)
        .map(|i| keys.key(i as u64, &json!({ "i": i })).0.to_vec())
        .collect();
    (keys.page_id(), list)
}

/// Keys as the page lookup takes them.
fn arrays(keys: &[Vec<u8>]) -> Vec<[u8; 32]> {
    keys.iter()
        .map(|k| k[..].try_into().expect("a 32-byte key"))
        .collect()
}

/// A bulk stake of `packed` keys of `page`.
#[allow(clippy::too_many_arguments)]
async fn stake_batch(
    pool: &sqlx::PgPool,
    sync_id: &str,
    page: &[u8; 32],
    packed: &[u8],
    attempts: i32,
    run_id: i64,
    fence: i64,
    superseded: &[i64],
    watched: &[i64],
) -> sqlx::Result<BatchStake> {
    let request = ledger::BatchStakeRequest {
        page: *page,
        packed_keys: packed.to_vec(),
        attempts,
        superseded: superseded.to_vec(),
        watched: watched.to_vec(),
        trace: None,
    };
    ledger::stake_batch(pool, sync_id, run_id, fence, &request).await
}

/// The batch's call answered with one Brevo import.
async fn complete(db: &TestDb, batch: i64, process: i64) -> anyhow::Result<()> {
    let completion = ledger::BatchCompletion {
        batch,
        result: json!({ "processId": process }),
        import: None,
    };
    Ok(ledger::complete_batch(&db.pool, "s1", 1, &completion).await?)
}

/// Ages the rows of `table` completed today by `days`: completed that many
/// days ago, in that day's partition (or the default one when it has none).
async fn age_keys(db: &TestDb, table: &str, days: i32) -> anyhow::Result<()> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE {table} SET completed_at = now() - make_interval(days => $1),
                completed_on = ((now() - make_interval(days => $1)) AT TIME ZONE 'UTC')::date
         WHERE completed_on = (now() AT TIME ZONE 'UTC')::date"
    )))
    .bind(days)
    .execute(&db.pool)
    .await?;
    // Their per-key stakes (the batch rows marking their pages) were made
    // before they completed.
    if table == "deliveries" {
        sqlx::query(
            "UPDATE delivery_batches SET created_at = now() - make_interval(days => $1)
             WHERE per_key AND created_at > now() - interval '1 hour'",
        )
        .bind(days)
        .execute(&db.pool)
        .await?;
    }
    Ok(())
}

fn state(ledger: &ledger::PageLedger, key: &[u8]) -> KeyState {
    ledger.state(&key.try_into().expect("a 32-byte key"))
}

#[tokio::test]
async fn a_bulk_claim_is_one_row_that_each_claim_of_the_page_supersedes() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let fence = seed(&db).await?;
    let (page_id, keys) = page(0, 5);
    let looked = ledger::lookup_page(&db.pool, "s1", &page_id, &arrays(&keys)).await?;
    assert!(keys.iter().all(|k| state(&looked, k) == KeyState::Absent));

    let BatchStake::Staked { batch: first, .. } = stake_batch(
        &db.pool,
        "s1",
        &page_id,
        &keys.concat(),
        1,
        1,
        fence,
        &[],
        &[],
    )
    .await?
    else {
        anyhow::bail!("fenced");
    };
    // Staked only: the attempt is reserved, not spent, until the call starts.
    let looked = ledger::lookup_page(&db.pool, "s1", &page_id, &arrays(&keys)).await?;
    assert_eq!(
        state(&looked, &keys[0]),
        KeyState::Pending {
            attempts: 0,
            per_key: false
        }
    );
    ledger::start_call(&db.pool, CallStake::Batch(first)).await?;
    let looked = ledger::lookup_page(&db.pool, "s1", &page_id, &arrays(&keys)).await?;
    assert_eq!(
        state(&looked, &keys[0]),
        KeyState::Pending {
            attempts: 1,
            per_key: false
        }
    );
    assert_eq!(looked.open_batches.len(), 1);
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM deliveries")
        .fetch_one(&db.pool)
        .await?;
    assert_eq!(rows, 0, "a bulk stake writes no row per key");

    // The run died; the next stakes the page again, spending a second attempt,
    // and the first stake (all of whose keys it holds) goes.
    let BatchStake::Staked {
        batch: second,
        completed_meanwhile,
        ..
    } = stake_batch(
        &db.pool,
        "s1",
        &page_id,
        &keys.concat(),
        2,
        2,
        fence,
        &[first],
        &[first],
    )
    .await?
    else {
        anyhow::bail!("fenced");
    };
    assert!(completed_meanwhile.is_empty());
    ledger::start_call(&db.pool, CallStake::Batch(second)).await?;
    let looked = ledger::lookup_page(&db.pool, "s1", &page_id, &arrays(&keys)).await?;
    assert_eq!(
        state(&looked, &keys[4]),
        KeyState::Pending {
            attempts: 2,
            per_key: false
        }
    );
    assert_eq!(looked.open_batches.len(), 1);

    complete(&db, second, 7).await?;
    let looked = ledger::lookup_page(&db.pool, "s1", &page_id, &arrays(&keys)).await?;
    assert!(
        keys.iter()
            .all(|k| state(&looked, k) == KeyState::Completed)
    );
    assert!(looked.open_batches.is_empty());
    let states: Vec<(String, i64)> = sqlx::query_as(
        "SELECT status, count(*) FROM delivery_states GROUP BY status ORDER BY status",
    )
    .fetch_all(&db.pool)
    .await?;
    assert_eq!(states, vec![("completed".to_string(), 5)]);

    // A stale fence stakes nothing.
    start_fenced_run(&db.pool, "s1").await?;
    let (other_page, other_keys) = page(5, 2);
    assert!(matches!(
        stake_batch(
            &db.pool,
            "s1",
            &other_page,
            &other_keys.concat(),
            1,
            3,
            fence,
            &[],
            &[]
        )
        .await?,
        BatchStake::Fenced
    ));
    Ok(())
}

#[tokio::test]
async fn a_claim_completed_by_an_older_run_meanwhile_is_not_sent_again() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let fence = seed(&db).await?;
    let (page_id, keys) = page(0, 3);
    let BatchStake::Staked { batch: old, .. } = stake_batch(
        &db.pool,
        "s1",
        &page_id,
        &keys[..2].concat(),
        1,
        1,
        fence,
        &[],
        &[],
    )
    .await?
    else {
        anyhow::bail!("fenced");
    };
    // Looked up while open; the older run's answer lands before the stake.
    let looked = ledger::lookup_page(&db.pool, "s1", &page_id, &arrays(&keys)).await?;
    assert_eq!(looked.open_batches.len(), 1);
    complete(&db, old, 1).await?;
    let BatchStake::Staked {
        completed_meanwhile,
        ..
    } = stake_batch(
        &db.pool,
        "s1",
        &page_id,
        &keys.concat(),
        2,
        2,
        fence,
        &[old],
        &[old],
    )
    .await?
    else {
        anyhow::bail!("fenced");
    };
    let mut meanwhile: Vec<Vec<u8>> = completed_meanwhile
        .chunks_exact(32)
        .map(<[u8]>::to_vec)
        .collect();
    meanwhile.sort();
    let mut expected = keys[..2].to_vec();
    expected.sort();
    assert_eq!(meanwhile, expected);
    let open: i64 = sqlx::query_scalar("SELECT count(*) FROM delivery_batches WHERE id = $1")
        .bind(old)
        .fetch_one(&db.pool)
        .await?;
    assert_eq!(open, 1, "a completed stake is never deleted as superseded");
    Ok(())
}

#[tokio::test]
async fn answers_per_key_and_per_record_claims_keep_the_page_mark() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    let fence = seed(&db).await?;
    let (page_id, keys) = page(0, 4);
    // A bulk call whose answer came key by key: two delivered, two refused.
    let BatchStake::Staked { batch, .. } = stake_batch(
        &db.pool,
        "s1",
        &page_id,
        &keys.concat(),
        1,
        1,
        fence,
        &[],
        &[],
    )
    .await?
    else {
        anyhow::bail!("fenced");
    };
    ledger::settle_batch_per_key(
        &db.pool,
        batch,
        &keys[..2],
        &[json!({"id": 1}), json!({"id": 2})],
        &[],
        false,
    )
    .await?;
    let looked = ledger::lookup_page(&db.pool, "s1", &page_id, &arrays(&keys)).await?;
    assert_eq!(state(&looked, &keys[0]), KeyState::Completed);
    assert_eq!(state(&looked, &keys[1]), KeyState::Completed);
    assert_eq!(
        state(&looked, &keys[2]),
        KeyState::Absent,
        "refused: forgotten"
    );

    // Per-record stakes of the refused keys: one row each, in a batch that
    // marks the page; a key pending in a bulk stake keeps what it spent.
    let Stake::Staked { keys: staked, .. } = ledger::stake_keys(
        &db.pool,
        &ledger::KeyStake {
            sync_id: "s1",
            page: &page_id,
            fresh: &keys[2..],
            spent: &[0, 2],
            again: &[],
            run_id: 2,
            fence,
            trace: None,
        },
    )
    .await?
    else {
        anyhow::bail!("fenced");
    };
    let mut attempts: Vec<i32> = staked.iter().map(|(_, a)| *a).collect();
    attempts.sort();
    assert_eq!(attempts, vec![1, 3]);
    let call = CallStake::Keys {
        sync_id: "s1",
        run_id: 2,
        keys: &keys[2..],
    };
    ledger::start_call(&db.pool, call).await?;
    let looked = ledger::lookup_page(&db.pool, "s1", &page_id, &arrays(&keys)).await?;
    assert_eq!(
        state(&looked, &keys[2]),
        KeyState::Pending {
            attempts: 1,
            per_key: true
        }
    );
    Ok(())
}

#[tokio::test]
async fn keys_from_before_page_marks_are_still_found_key_by_key() -> anyhow::Result<()> {
    let db = TestDb::new().await?;
    seed(&db).await?;
    let (page_id, keys) = page(0, 2);
    // A key row as version 0.1 wrote it (as migration 0016 carried it
    // over): no batch, so no page mark.
    sqlx::query(
        "INSERT INTO deliveries (sync_id, key, status, fence, result, completed_at, completed_on)
         VALUES ('s1', $1, 'completed', 1, '{}', now(), (now() AT TIME ZONE 'UTC')::date)",
    )
    .bind(&keys[0])
    .execute(&db.pool)
    .await?;
    let looked = ledger::lookup_page(&db.pool, "s1", &page_id, &arrays(&keys)).await?;
    assert_eq!(
        state(&looked, &keys[0]),
        KeyState::Absent,
        "without the migration's list, an unmarked page is taken as never staked"
    );
    // Migration 0007 lists the syncs that had keys: those are probed per key.
    sqlx::query("INSERT INTO ledger_unpaged_syncs VALUES ('s1')")
        .execute(&db.pool)
        .await?;
    let looked = ledger::lookup_page(&db.pool, "s1", &page_id, &arrays(&keys)).await?;
    assert_eq!(state(&looked, &keys[0]), KeyState::Completed);
    assert_eq!(state(&looked, &keys[1]), KeyState::Absent);
    // Once its old keys are purged, the sync leaves the list.
    age_keys(&db, "deliveries", 8).await?;
    ledger::purge_completed(&db.pool, std::time::Duration::from_secs(7 * 86_400), 100).await?;
    let listed: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_unpaged_syncs")
        .fetch_one(&db.pool)
        .await?;
    assert_eq!(listed, 0);
    Ok(())
}

/// What became of one destination call in the budget property.
#[derive(Debug, Clone, Copy)]
enum CallEnd {
    /// The process died between the stake and the call: nothing was sent.
    DeathBeforeCall,
    /// The process died mid-call: no run saw the outcome.
    Death,
    /// Any answer (401, 429, 5xx) or a refused connection: nothing written.
    Refused,
    /// A timeout or a reset after the request went out: maybe written.
    Unanswered,
    Delivered,
}

fn call_end() -> impl proptest::strategy::Strategy<Value = CallEnd> {
    use proptest::prelude::*;
    prop_oneof![
        Just(CallEnd::DeathBeforeCall),
        Just(CallEnd::Death),
        Just(CallEnd::Refused),
        Just(CallEnd::Unanswered),
        Just(CallEnd::Delivered),
    ]
}

/// One run over a page of keys, as the run loop makes it: look the page up,
/// quarantine keys whose spent attempts reached `budget`, stake the rest
/// (one bulk stake, or one row per key), mark the call started as it goes
/// out (unless the process died first), then end it as `end` says.
/// Returns the keys quarantined by this run.
async fn budget_run(
    pool: &sqlx::PgPool,
    sync: &str,
    fence: i64,
    run_id: i64,
    bulk: bool,
    budget: i32,
    end: CallEnd,
) -> anyhow::Result<Vec<Vec<u8>>> {
    let (page_id, keys) = page(0, 3);
    let looked = ledger::lookup_page(pool, sync, &page_id, &arrays(&keys)).await?;
    let mut quarantined = Vec::new();
    let mut send: Vec<(Vec<u8>, i32, bool)> = Vec::new();
    for key in &keys {
        match state(&looked, key) {
            KeyState::Completed => {}
            KeyState::Pending { attempts, .. } if attempts >= budget => {
                quarantined.push(key.clone())
            }
            KeyState::Pending { attempts, per_key } => send.push((key.clone(), attempts, per_key)),
            KeyState::Absent => send.push((key.clone(), 0, false)),
        }
    }
    if send.is_empty() {
        return Ok(quarantined);
    }
    let sent: Vec<Vec<u8>> = send.iter().map(|s| s.0.clone()).collect();
    if bulk {
        let packed = sent.concat();
        let staking: std::collections::HashSet<&[u8]> = packed.chunks_exact(32).collect();
        let attempts = send.iter().map(|s| s.1).max().unwrap_or(0) + 1;
        let mut superseded = Vec::new();
        let mut watched = Vec::new();
        for (id, open) in &looked.open_batches {
            if open.chunks_exact(32).any(|k| staking.contains(k)) {
                watched.push(*id);
                if open.chunks_exact(32).all(|k| staking.contains(k)) {
                    superseded.push(*id);
                }
            }
        }
        let BatchStake::Staked { batch, .. } = stake_batch(
            pool,
            sync,
            &page_id,
            &packed,
            attempts,
            run_id,
            fence,
            &superseded,
            &watched,
        )
        .await?
        else {
            anyhow::bail!("fenced");
        };
        if !matches!(end, CallEnd::DeathBeforeCall) {
            ledger::start_call(pool, CallStake::Batch(batch)).await?;
        }
        match end {
            CallEnd::DeathBeforeCall | CallEnd::Death => {}
            CallEnd::Refused => ledger::give_back_batch(pool, batch, false).await?,
            CallEnd::Unanswered => ledger::give_back_batch(pool, batch, true).await?,
            CallEnd::Delivered => {
                let completion = ledger::BatchCompletion {
                    batch,
                    result: json!({"processId": run_id}),
                    import: None,
                };
                ledger::complete_batch(pool, sync, run_id, &completion).await?
            }
        }
    } else {
        let (again, fresh): (Vec<_>, Vec<_>) = send.iter().partition(|s| s.2);
        let fresh_keys: Vec<Vec<u8>> = fresh.iter().map(|s| s.0.clone()).collect();
        let spent: Vec<i32> = fresh.iter().map(|s| s.1).collect();
        let again: Vec<Vec<u8>> = again.iter().map(|s| s.0.clone()).collect();
        let request = ledger::KeyStake {
            sync_id: sync,
            page: &page_id,
            fresh: &fresh_keys,
            spent: &spent,
            again: &again,
            run_id,
            fence,
            trace: None,
        };
        let stake = ledger::stake_keys(pool, &request).await?;
        anyhow::ensure!(matches!(stake, Stake::Staked { .. }), "fenced");
        if !matches!(end, CallEnd::DeathBeforeCall) {
            let call = CallStake::Keys {
                sync_id: sync,
                run_id,
                keys: &sent,
            };
            ledger::start_call(pool, call).await?;
        }
        match end {
            CallEnd::DeathBeforeCall | CallEnd::Death => {}
            CallEnd::Refused => ledger::give_back_keys(pool, sync, run_id, &sent, false).await?,
            CallEnd::Unanswered => ledger::give_back_keys(pool, sync, run_id, &sent, true).await?,
            CallEnd::Delivered => {
                let results = vec![json!({"id": run_id}); sent.len()];
                ledger::complete_keys(pool, sync, &sent, &results).await?;
            }
        }
    }
    Ok(quarantined)
}

/// Guarantee 4's budget, over random sequences of call ends in both stake
/// shapes: a key is quarantined exactly when `budget` of its sends died with
/// their process; answers, refusals, timeouts and deaths before the call
/// never count, and a key that may have been written stays pending until it
/// is delivered.
#[tokio::test(flavor = "multi_thread")]
async fn a_record_is_given_up_only_after_budget_sends_no_run_saw_end() -> anyhow::Result<()> {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestCaseError, TestRunner};

    let db = TestDb::new().await?;
    sqlx::raw_sql("INSERT INTO workspaces (id) VALUES ('acme')")
        .execute(&db.pool)
        .await?;
    let handle = tokio::runtime::Handle::current();
    let case = std::sync::atomic::AtomicUsize::new(0);
    let mut runner = TestRunner::new(Config {
        cases: 96,
        ..Config::default()
    });
    let strategy = (
        any::<bool>(),
        1i32..=4,
        proptest::collection::vec(call_end(), 1..14),
    );
    let result = runner.run(&strategy, |(bulk, budget, ends)| {
        let n = case.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let sync = format!("p{n}");
        let outcome: anyhow::Result<()> = tokio::task::block_in_place(|| {
            handle.block_on(async {
                let pool = &db.pool;
                sqlx::query(
                    "INSERT INTO syncs (id, workspace_id, definition) VALUES ($1, 'acme', '{}')",
                )
                .bind(&sync)
                .execute(pool)
                .await?;
                let (_, fence) = start_fenced_run(pool, &sync).await?;
                // Per key: sends that died, whether it may have been written
                // since, whether it arrived.
                let mut deaths = 0;
                let mut maybe_written = false;
                let mut delivered = false;
                let mut given_up = false;
                for (run, end) in ends.iter().enumerate() {
                    if delivered || given_up {
                        break;
                    }
                    let run_id = run as i64 + 1;
                    let out = budget_run(pool, &sync, fence, run_id, bulk, budget, *end).await?;
                    if !out.is_empty() {
                        anyhow::ensure!(
                            out.len() == 3 && deaths >= budget,
                            "given up after {deaths} deaths with a budget of {budget}"
                        );
                        given_up = true;
                        continue;
                    }
                    anyhow::ensure!(
                        deaths < budget,
                        "{deaths} deaths and still sent (budget {budget})"
                    );
                    // The last stake's call never left: its keys stay staked.
                    let claimed_unsent = matches!(end, CallEnd::DeathBeforeCall);
                    match end {
                        CallEnd::DeathBeforeCall => {}
                        CallEnd::Death => {
                            deaths += 1;
                            maybe_written = true;
                        }
                        CallEnd::Refused => {}
                        CallEnd::Unanswered => maybe_written = true,
                        CallEnd::Delivered => delivered = true,
                    }
                    let (page_id, keys) = page(0, 3);
                    let looked = ledger::lookup_page(pool, &sync, &page_id, &arrays(&keys)).await?;
                    for key in &keys {
                        let now = state(&looked, key);
                        let ok = match now {
                            KeyState::Completed => delivered,
                            KeyState::Pending { attempts, .. } => {
                                !delivered
                                    && attempts == deaths
                                    && (maybe_written || deaths > 0 || claimed_unsent)
                            }
                            // A key that may have been written is never forgotten.
                            KeyState::Absent => {
                                !delivered
                                    && deaths == 0
                                    && !claimed_unsent
                                    && !matches!(end, CallEnd::Unanswered)
                            }
                        };
                        anyhow::ensure!(
                            ok,
                            "after {end:?}: {now:?} with {deaths} deaths, maybe written {maybe_written}"
                        );
                    }
                }
                Ok(())
            })
        });
        outcome.map_err(|e| TestCaseError::fail(format!("{e:#}")))
    });
    result.map_err(|e| anyhow::anyhow!("{e}"))
}

/// Stakes `keys` of `page` per key (none in the ledger before) for run 1.
async fn claim_fresh(
    db: &TestDb,
    page_id: &[u8; 32],
    keys: &[Vec<u8>],
    fence: i64,
) -> anyhow::Result<Stake> {
    let spent = vec![0; keys.len()];
    let stake = ledger::KeyStake {
        sync_id: "s1",
        page: page_id,
        fresh: keys,
        spent: &spent,
        again: &[],
        run_id: 1,
        fence,
        trace: None,
    };
    Ok(ledger::stake_keys(&db.pool, &stake).await?)
}

#[tokio::test]
async fn a_purge_drops_days_past_retention_and_keeps_keys_completed_within_it() -> anyhow::Result<()>
{
    let db = TestDb::new().await?;
    let fence = seed(&db).await?;
    // Partitions for the last nine days, as a daemon running all week left them.
    syncward::store::ledger_days::create_days(&db.pool, -9, 0).await?;
    let old = ((chrono::Utc::now() - chrono::Duration::days(8)).date_naive())
        .format("%Y_%m_%d")
        .to_string();
    let recent = ((chrono::Utc::now() - chrono::Duration::days(6)).date_naive())
        .format("%Y_%m_%d")
        .to_string();

    // Eight days ago: a per-key page and a bulk page completed.
    let (old_page, old_keys) = page(0, 3);
    claim_fresh(&db, &old_page, &old_keys, fence).await?;
    ledger::complete_keys(&db.pool, "s1", &old_keys, &vec![json!({"id": 1}); 3]).await?;
    let (old_bulk_page, old_bulk) = page(10, 4);
    let BatchStake::Staked { batch, .. } = stake_batch(
        &db.pool,
        "s1",
        &old_bulk_page,
        &old_bulk.concat(),
        1,
        1,
        fence,
        &[],
        &[],
    )
    .await?
    else {
        anyhow::bail!("fenced");
    };
    complete(&db, batch, 7).await?;
    age_keys(&db, "deliveries", 8).await?;
    age_keys(&db, "delivery_batches", 8).await?;
    let in_old_day: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT (SELECT count(*) FROM deliveries_{old}) + (SELECT count(*) FROM delivery_batches_{old})"
    )))
    .fetch_one(&db.pool)
    .await?;
    assert_eq!(in_old_day, 4, "the aged rows sit in their day's partition");

    // Six days ago: a per-key page completed; today: a bulk page completed;
    // and one key staked eight days ago that never completed.
    let (recent_page, recent_keys) = page(20, 2);
    claim_fresh(&db, &recent_page, &recent_keys, fence).await?;
    ledger::complete_keys(&db.pool, "s1", &recent_keys, &vec![json!({"id": 2}); 2]).await?;
    age_keys(&db, "deliveries", 6).await?;
    let (today_page, today_keys) = page(30, 2);
    let BatchStake::Staked { batch, .. } = stake_batch(
        &db.pool,
        "s1",
        &today_page,
        &today_keys.concat(),
        1,
        1,
        fence,
        &[],
        &[],
    )
    .await?
    else {
        anyhow::bail!("fenced");
    };
    complete(&db, batch, 8).await?;
    let (pending_page, pending_keys) = page(40, 1);
    claim_fresh(&db, &pending_page, &pending_keys, fence).await?;
    let call = CallStake::Keys {
        sync_id: "s1",
        run_id: 1,
        keys: &pending_keys,
    };
    ledger::start_call(&db.pool, call).await?;
    sqlx::query(
        "UPDATE deliveries SET staked_at = now() - interval '8 days' WHERE status = 'pending'",
    )
    .execute(&db.pool)
    .await?;

    let purged =
        ledger::purge_completed(&db.pool, std::time::Duration::from_secs(7 * 86_400), 100).await?;
    assert_eq!(purged.keys, 3 + 4, "{purged:?}");
    assert!(purged.days >= 2, "eight and nine days ago: {purged:?}");
    let gone: (bool, bool, bool) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT to_regclass('deliveries_{old}') IS NULL, to_regclass('delivery_batches_{old}') IS NULL,
                to_regclass('deliveries_{recent}') IS NULL"
    )))
    .fetch_one(&db.pool)
    .await?;
    assert_eq!(
        gone,
        (true, true, false),
        "the old day dropped, the recent one kept"
    );

    for (page_id, keys, expected) in [
        (&old_page, &old_keys, KeyState::Absent),
        (&old_bulk_page, &old_bulk, KeyState::Absent),
        (&recent_page, &recent_keys, KeyState::Completed),
        (&today_page, &today_keys, KeyState::Completed),
        (
            &pending_page,
            &pending_keys,
            KeyState::Pending {
                attempts: 1,
                per_key: true,
            },
        ),
    ] {
        let looked = ledger::lookup_page(&db.pool, "s1", page_id, &arrays(keys)).await?;
        for key in keys {
            assert_eq!(state(&looked, key), expected);
        }
    }

    // A purged key may be staked again, per key and in bulk.
    let Stake::Staked { keys, .. } = claim_fresh(&db, &old_page, &old_keys, fence).await? else {
        anyhow::bail!("a purged key's stake was fenced");
    };
    assert_eq!(keys.len(), 3);
    let again = stake_batch(
        &db.pool,
        "s1",
        &old_bulk_page,
        &old_bulk.concat(),
        1,
        1,
        fence,
        &[],
        &[],
    )
    .await?;
    assert!(matches!(again, BatchStake::Staked { .. }), "{again:?}");
    Ok(())
}
