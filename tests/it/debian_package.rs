//! `cargo deb` packages the daemon like any Debian service: the binary, the
//! unit, the config as a conffile, and a postinst that creates the user.
//!
//! The package is assembled from the debug binary this suite already built
//! (`--profile dev --no-build`): the metadata is what is under test, and a
//! release build here would double the suite's build time. `cargo deb` alone
//! (README "Install") makes the release package from the same metadata.

use std::path::Path;

async fn run(program: &str, args: &[&str], dir: &Path) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .await
        .map_err(|e| anyhow::anyhow!("cannot start {program}: {e}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{program} {} failed: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

#[tokio::test]
async fn cargo_deb_packages_the_binary_the_unit_the_config_and_the_user() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir()?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = out.path().display().to_string();
    run(
        &cargo,
        &[
            "deb",
            "--profile",
            "dev",
            "--no-build",
            "--no-strip",
            "--fast",
            "--quiet",
            "-o",
            &output,
        ],
        root,
    )
    .await
    .map_err(|e| e.context("cargo deb (scripts/test installs cargo-deb 3.8.0)"))?;
    let deb = std::fs::read_dir(out.path())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| anyhow::anyhow!("cargo deb wrote no .deb"))?;
    let deb = deb.display().to_string();

    let contents = run("dpkg-deb", &["--contents", &deb], root).await?;
    for path in [
        "./usr/bin/syncward",
        "./usr/lib/systemd/system/syncward.service",
        "./etc/syncward/syncward.toml",
        "./usr/share/doc/syncward/examples/syncs/example.toml",
    ] {
        assert!(
            contents.lines().any(|l| l.ends_with(&format!(" {path}"))),
            "the package lacks {path}:\n{contents}"
        );
    }
    assert!(
        contents
            .lines()
            .any(|l| l.starts_with("-rwxr-xr-x") && l.ends_with(" ./usr/bin/syncward")),
        "the binary is executable:\n{contents}"
    );

    let control = out.path().join("control");
    run(
        "dpkg-deb",
        &["-e", &deb, &control.display().to_string()],
        root,
    )
    .await?;
    let read = |name: &str| std::fs::read_to_string(control.join(name));
    assert_eq!(read("conffiles")?.trim(), "/etc/syncward/syncward.toml");
    let postinst = read("postinst")?;
    assert!(
        postinst.contains("adduser --system --group") && postinst.contains("syncward >/dev/null"),
        "postinst creates the syncward system user:\n{postinst}"
    );
    assert!(
        postinst.contains("deb-systemd-helper enable syncward.service"),
        "{postinst}"
    );
    assert!(
        !postinst.contains("#DEBHELPER#"),
        "cargo-deb filled in its systemd steps"
    );
    run(
        "sh",
        &["-n", &control.join("postinst").display().to_string()],
        root,
    )
    .await?;
    let fields = run("dpkg-deb", &["--field", &deb, "Package", "Depends"], root).await?;
    assert!(
        fields.contains("Package: syncward") && fields.contains("adduser"),
        "{fields}"
    );

    // The unit in the package is the one in deploy/ (tested by systemd_unit).
    let unpacked = out.path().join("root");
    run(
        "dpkg-deb",
        &["-x", &deb, &unpacked.display().to_string()],
        root,
    )
    .await?;
    assert_eq!(
        std::fs::read_to_string(unpacked.join("usr/lib/systemd/system/syncward.service"))?,
        std::fs::read_to_string(root.join("deploy/syncward.service"))?
    );
    Ok(())
}
