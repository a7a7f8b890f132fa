//! A fleet: syncs that share one destination account pace as one, across
//! processes, through the account's budget in Redis.

use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

/// Two syncs on one Brevo key, run at the same moment by two processes, share
/// the account's budget: the fake, enforcing Brevo's limit of 10 requests in
/// each second, never answers 429, and every contact of both arrives. (Each
/// run alone would send its 9 a second: 18 together.)
#[tokio::test(flavor = "multi_thread")]
async fn syncs_sharing_a_destination_account_never_draw_a_429_together() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        mode: "single",
        ..SyncOptions::default()
    })
    .await?;
    let destination = format!(
        "kind = \"brevo\"\napi_key_env = \"TEST_BREVO_KEY\"\nbase_url = \"{}\"\nmode = \"single\"\n\
         list_ids = [12]\nconcurrency = 4\nrequests_per_second = 9\ntimeout = \"5s\"",
        s.fake.base_url
    );
    s.publish_with_destination(10, &destination).await?;
    // The second sync: the same file under another id.
    let first = std::fs::read_to_string(s.dir.path().join("sync.toml"))?;
    let second = s.dir.path().join("second.toml");
    std::fs::write(
        &second,
        first.replacen(
            &format!("id = \"{SYNC_ID}\""),
            "id = \"acme-contacts-2\"",
            1,
        ),
    )?;
    s.cli
        .run(&["sync", "apply", second.to_str().unwrap_or_default()])
        .await?
        .ok()?;
    s.fake.enforce_rate_limit(10);

    let run = |id: &'static str| {
        let cli = s.cli.clone();
        async move { cli.run(&["sync", "run", id, "--foreground"]).await?.ok() }
    };
    let (a, b) = tokio::join!(run(SYNC_ID), run("acme-contacts-2"));
    a?;
    b?;
    assert_eq!(
        s.fake.rate_limited(),
        0,
        "the account's limit was never hit"
    );
    let written = s.writes_per_email();
    assert_eq!(written.len(), 30, "{written:?}");
    assert!(
        written.values().all(|n| *n == 2),
        "each contact once per sync: {written:?}"
    );
    Ok(())
}
