//! An outage costs time, never a record (guarantee 4): a destination that
//! answers 401, 429, 500 or nothing for longer than `ledger.record_attempts`
//! runs spends no record's attempt budget; once it recovers every contact is
//! delivered and none is quarantined.

use std::time::Duration;

use crate::fakes::brevo::Fault;
use crate::helpers::daemon::DaemonProcess;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

fn email(i: i64) -> String {
    format!("user{i}@example.com")
}

async fn count(s: &Scenario, sql: &str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .fetch_one(&s.db.pool)
        .await?)
}

/// Every contact of the scenario reached the fake, and nothing was given up.
async fn assert_all_delivered_none_given_up(s: &Scenario, rows: i64) -> anyhow::Result<()> {
    let contacts = s.fake.contacts();
    let missing: Vec<String> = (1..=rows)
        .map(email)
        .filter(|e| !contacts.contains_key(e))
        .collect();
    assert!(missing.is_empty(), "never delivered: {missing:?}");
    assert_eq!(
        count(s, "SELECT count(*) FROM rejected_records").await?,
        0,
        "an outage quarantines or rejects nothing"
    );
    assert_eq!(s.cursor().await?, Some(rows.to_string()));
    Ok(())
}

/// Foreground runs against a destination failing with `fault` for `runs`
/// runs (each exits 1 with `code`), then healed: the next run delivers all.
async fn outage_then_recovery(
    options: SyncOptions,
    fault: Fault,
    code: &str,
    runs: usize,
) -> anyhow::Result<Scenario> {
    let s = Scenario::new(options.clone()).await?;
    s.fake.set_fault_always(Some(fault));
    for n in 0..runs {
        let out = s.run_foreground().await?;
        assert_eq!(out.code, 1, "outage run {n} must fail: {out:?}");
        assert_eq!(s.last_run().await?["failure_code"], code);
    }
    s.fake.set_fault_always(None);
    let out = s.run_foreground().await?;
    assert_eq!(out.code, 0, "the run after recovery succeeds: {out:?}");
    assert_all_delivered_none_given_up(&s, options.rows).await?;
    Ok(s)
}

const FAST_TIMEOUT: SyncOptions = SyncOptions {
    mode: "bulk",
    page_size: 10,
    rows: 30,
    concurrency: 4,
    timeout: "300ms",
};

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_key_for_more_runs_than_record_attempts_gives_up_no_record_in_bulk()
-> anyhow::Result<()> {
    outage_then_recovery(
        SyncOptions::default(),
        Fault::Unauthorized,
        "destination_auth_failed",
        4,
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_key_for_more_runs_than_record_attempts_gives_up_no_record_in_single()
-> anyhow::Result<()> {
    let s = outage_then_recovery(
        SyncOptions {
            mode: "single",
            ..SyncOptions::default()
        },
        Fault::Unauthorized,
        "destination_auth_failed",
        4,
    )
    .await?;
    // Refused answers wrote nothing: each contact was written once.
    assert!(s.writes_per_email().values().all(|n| *n == 1));
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn server_errors_for_more_runs_than_record_attempts_give_up_no_record() -> anyhow::Result<()>
{
    for mode in ["bulk", "single"] {
        outage_then_recovery(
            SyncOptions {
                mode,
                ..SyncOptions::default()
            },
            Fault::ServerError,
            "destination_unavailable",
            4,
        )
        .await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rate_limit_storm_for_more_runs_than_record_attempts_gives_up_no_record()
-> anyhow::Result<()> {
    for mode in ["bulk", "single"] {
        outage_then_recovery(
            SyncOptions {
                mode,
                ..SyncOptions::default()
            },
            Fault::RateLimited { reset_secs: 0 },
            "destination_rate_limited",
            4,
        )
        .await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_destination_that_hangs_for_more_runs_than_record_attempts_gives_up_no_record()
-> anyhow::Result<()> {
    for mode in ["bulk", "single"] {
        let s = outage_then_recovery(
            SyncOptions {
                mode,
                ..FAST_TIMEOUT
            },
            Fault::Hang,
            "destination_unavailable",
            4,
        )
        .await?;
        // A request that timed out may have been written: its keys stayed
        // pending and were re-sent, counted as such.
        let run = s.last_run().await?;
        assert!(run["records_resent"].as_i64() > Some(0), "{run}");
    }
    Ok(())
}
