//! The README's first command, run as a new user would: from a fresh clone of
//! what is committed, with nothing but the script.

use std::path::PathBuf;

#[tokio::test(flavor = "multi_thread")]
async fn the_quick_start_syncs_every_sample_contact_from_a_fresh_clone() -> anyhow::Result<()> {
    let repo = env!("CARGO_MANIFEST_DIR");
    // The clone builds into a target dir of its own (kept between test runs so
    // only syncward itself is compiled again), never into this checkout's, whose
    // binary the other tests are running.
    let base = PathBuf::from(repo).join("target").join("quickstart-clone");
    let clone = base.join("syncward");
    if clone.exists() {
        std::fs::remove_dir_all(&clone)?;
    }
    std::fs::create_dir_all(&base)?;
    let status = tokio::process::Command::new("git")
        .args(["clone", "--quiet", repo])
        .arg(&clone)
        .status()
        .await?;
    anyhow::ensure!(status.success(), "git clone failed");
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg("scripts/quickstart").current_dir(&clone);
    for (key, _) in std::env::vars() {
        if key.starts_with("SYNCWARD") || key.starts_with("CARGO_") {
            cmd.env_remove(key);
        }
    }
    // The status page on a port of its own: other tests' daemons run beside it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let output = cmd
        .env("CARGO_TARGET_DIR", base.join("target"))
        .env("QUICKSTART_HTTP", format!("127.0.0.1:{port}"))
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "quickstart failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("Run 1 succeeded: 3000 read, 3000 written"),
        "{stdout}"
    );
    assert!(
        stdout.contains("The destination now holds 3000 contacts (the source has 3000)."),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "GET http://127.0.0.1:{port}/syncs/example-contacts: 200"
        )),
        "the status page is served:\n{stdout}"
    );
    assert!(stdout.contains("Sync example-contacts"), "{stdout}");

    // The hand-over: the printed line makes this shell's CLI use the quick
    // start's store, Redis prefix and secrets.
    let env_file = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("export SYNCWARD_ENV_FILE="))
        .ok_or_else(|| anyhow::anyhow!("no hand-over line:\n{stdout}"))?
        .to_string();
    let binary = base.join("target").join("debug").join("syncward");
    let cli = |args: &'static [&'static str]| {
        let mut cmd = tokio::process::Command::new(&binary);
        for (key, _) in std::env::vars() {
            if key.starts_with("SYNCWARD") {
                cmd.env_remove(key);
            }
        }
        cmd.args(args)
            .env("SYNCWARD_ENV_FILE", &env_file)
            .current_dir(std::env::temp_dir());
        async move { anyhow::Ok(cmd.output().await?) }
    };
    let listed = cli(&["sync", "list"]).await?;
    let listed_out = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success() && listed_out.contains("example-contacts"),
        "{listed:?}"
    );
    let runs = cli(&["runs", "list"]).await?;
    let runs_out = String::from_utf8_lossy(&runs.stdout);
    assert!(
        runs.status.success() && runs_out.contains("succeeded"),
        "{runs:?}"
    );
    // No daemon runs now (exit 3 says so), but it is the quick start's store
    // that answers.
    let status = cli(&["status"]).await?;
    let status_err = String::from_utf8_lossy(&status.stderr);
    assert!(
        matches!(status.status.code(), Some(0 | 3)) && !status_err.contains("schema"),
        "{status:?}"
    );
    Ok(())
}
