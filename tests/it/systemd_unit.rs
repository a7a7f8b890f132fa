//! The systemd unit passes `systemd-analyze verify` with nothing on stderr
//! (the tool exits 0 on unknown keys, so its silence is the check).

use crate::helpers::cli::BINARY;

#[tokio::test]
async fn the_unit_file_passes_systemd_analyze_verify() -> anyhow::Result<()> {
    let unit = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/syncward.service"
    ))?;
    for required in [
        "Type=notify",
        "KillSignal=SIGTERM",
        "TimeoutStopSec=45",
        "Restart=on-failure",
        "User=syncward",
        "EnvironmentFile=",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
        "WatchdogSec=",
    ] {
        assert!(unit.contains(required), "the unit lacks {required}");
    }
    // verify checks that ExecStart exists; the package installs /usr/bin/syncward,
    // here the freshly built binary stands in for it. Nothing else changes.
    assert!(unit.contains("ExecStart=/usr/bin/syncward "));
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("syncward.service");
    std::fs::write(
        &path,
        unit.replace(
            "ExecStart=/usr/bin/syncward ",
            &format!("ExecStart={BINARY} "),
        ),
    )?;
    let out = tokio::process::Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed: {stderr}"
    );
    assert!(
        stderr.trim().is_empty(),
        "systemd-analyze verify complained: {stderr}"
    );
    Ok(())
}
