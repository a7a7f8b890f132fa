//! Every failure says what to do next in the sync's own words: the secret's
//! variable and the file it lives in, the sync's id in the commands, and a
//! resume only for a sync that is paused; a failed run is logged at WARN.

use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_brevo_key_names_its_variable_and_file_and_resumes_only_a_paused_sync()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        rows: 5,
        ..SyncOptions::default()
    })
    .await?;
    let cli = s
        .cli
        .without_secret("TEST_BREVO_KEY")
        .with_secret("TEST_BREVO_KEY", "xkeysib-revoked");
    let file = cli.secrets_dir().join("acme.env").display().to_string();
    let advice = format!(
        "Renew the API key in TEST_BREVO_KEY (destination.api_key_env) in {file}, then run the sync again (`syncward sync run {SYNC_ID}`)."
    );
    let out = cli.run(&["sync", "run", SYNC_ID, "--foreground"]).await?;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(
        out.stdout.contains("destination_auth_failed"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!("What next:     {advice}")),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("resume"), "{}", out.stdout);
    assert!(
        !out.stdout.contains("environment variable"),
        "{}",
        out.stdout
    );

    // The run's page in the terminal says the same.
    let run_id = s.last_run().await?["id"].as_i64().unwrap_or_default();
    let shown = cli
        .run(&["runs", "show", &run_id.to_string()])
        .await?
        .ok()?;
    assert!(
        shown
            .stdout
            .contains("TEST_BREVO_KEY (destination.api_key_env)"),
        "{}",
        shown.stdout
    );
    assert!(!shown.stdout.contains("resume"), "{}", shown.stdout);

    // `doctor` says the same of the key, with the three sentences.
    let doctor = cli.run(&["doctor"]).await?;
    assert_eq!(doctor.code, 1, "{doctor:?}");
    assert!(
        doctor
            .stdout
            .contains("(destination_auth_failed) What happened:")
            && doctor.stdout.contains(&format!("What next: {advice}"))
            && doctor.stdout.contains("Whose job: the sync's owner."),
        "{}",
        doctor.stdout
    );

    // Paused, the advice adds the resume.
    cli.run(&["sync", "pause", SYNC_ID]).await?.ok()?;
    let shown = cli
        .run(&["runs", "show", &run_id.to_string(), "--json"])
        .await?
        .ok()?
        .json()?;
    let next = shown["failure"]["what_next"].as_str().unwrap_or_default();
    assert!(
        next.starts_with(&advice)
            && next.ends_with(&format!(
                "resume it first (`syncward sync resume {SYNC_ID}`)."
            )),
        "{next}"
    );
    cli.run(&["sync", "resume", SYNC_ID]).await?.ok()?;

    // The daemon logs the failed run at WARN (journalctl -p warning sees it).
    let daemon = crate::helpers::daemon::DaemonProcess::spawn(&cli).await?;
    cli.run(&["sync", "run", SYNC_ID]).await?.ok()?;
    daemon
        .eventually(
            std::time::Duration::from_secs(60),
            "the failed run's WARN line",
            || async {
                Ok(std::fs::read_to_string(daemon.log.path())?
                    .lines()
                    .any(|l| {
                        l.contains("WARN")
                            && l.contains("Run finished")
                            && l.contains("destination_auth_failed")
                    }))
            },
        )
        .await?;
    daemon.signal("TERM")?;
    let mut daemon = daemon;
    daemon.wait(std::time::Duration::from_secs(30)).await?;
    Ok(())
}
