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

/// The package, assembled from the debug build into `out`.
async fn build_deb(out: &Path) -> anyhow::Result<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = out.display().to_string();
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
    let deb = std::fs::read_dir(out)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or_else(|| anyhow::anyhow!("cargo deb wrote no .deb"))?;
    Ok(deb.display().to_string())
}

#[tokio::test]
async fn cargo_deb_packages_the_binary_the_unit_the_config_and_the_user() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir()?;
    let deb = build_deb(out.path()).await?;

    let contents = run("dpkg-deb", &["--contents", &deb], root).await?;
    for path in [
        "./usr/bin/syncward",
        "./usr/lib/systemd/system/syncward.service",
        "./etc/syncward/syncward.toml",
        "./usr/share/doc/syncward/examples/syncs/example.toml",
        "./usr/share/doc/syncward/copyright",
        "./usr/share/doc/syncward/changelog.Debian.gz",
        "./usr/share/man/man1/syncward.1.gz",
        "./usr/share/bash-completion/completions/syncward",
        "./usr/share/zsh/vendor-completions/_syncward",
        "./usr/share/fish/vendor_completions.d/syncward.fish",
        "./usr/share/doc/syncward/docs/images/sync-page.png",
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
    // The config may hold secrets: not world-readable (postinst gives it to
    // the syncward group).
    assert!(
        contents
            .lines()
            .any(|l| l.starts_with("-rw-r----- ") && l.ends_with(" ./etc/syncward/syncward.toml")),
        "the config is 0640:\n{contents}"
    );

    // Debian's own judge. The one tag left out is the test's doing: it
    // packages the dev build with --no-strip (cargo deb strips a release).
    let lintian = tokio::process::Command::new("lintian")
        .args([
            "--fail-on",
            "error,warning",
            "--suppress-tags",
            "unstripped-binary-or-object",
            &deb,
        ])
        .output()
        .await
        .map_err(|e| anyhow::anyhow!("lintian (scripts/test installs it): {e}"))?;
    assert!(
        lintian.status.success(),
        "lintian: {}{}",
        String::from_utf8_lossy(&lintian.stdout),
        String::from_utf8_lossy(&lintian.stderr)
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
    // Installed, not enabled: an unconfigured daemon would only fail and
    // restart. An upgrade stops it, migrates, and starts it again.
    assert!(
        !postinst.contains("Enables the unit on first installation")
            && postinst.contains("deb-systemd-helper debian-installed syncward.service"),
        "{postinst}"
    );
    assert!(
        postinst.contains("runuser -u syncward -- /usr/bin/syncward migrate")
            && postinst.contains("chmod 0640 /etc/syncward/syncward.toml"),
        "{postinst}"
    );
    let postrm = read("postrm")?;
    assert!(
        postrm.contains("rm -f /etc/syncward/syncward.env"),
        "purge removes the env file postinst made:\n{postrm}"
    );
    run(
        "sh",
        &["-n", &control.join("postrm").display().to_string()],
        root,
    )
    .await?;
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
    let fields = run(
        "dpkg-deb",
        &[
            "--field",
            &deb,
            "Package",
            "Depends",
            "Recommends",
            "Maintainer",
        ],
        root,
    )
    .await?;
    assert!(
        fields.contains("Package: syncward") && fields.contains("adduser"),
        "{fields}"
    );
    assert!(
        fields.contains("Recommends: postgresql, redis-server"),
        "{fields}"
    );
    assert!(!fields.contains("localhost"), "a real maintainer: {fields}");

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

/// The man page and completions the package ships are the ones the binary
/// prints (regenerate with `syncward man > deploy/syncward.1` and
/// `syncward completions bash|zsh|fish > deploy/completions/...`).
#[tokio::test]
async fn the_shipped_man_page_and_completions_match_the_command_line() -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cli = crate::helpers::Syncward::bare();
    for (args, file) in [
        (&["man"][..], "deploy/syncward.1"),
        (&["completions", "bash"], "deploy/completions/syncward.bash"),
        (&["completions", "zsh"], "deploy/completions/_syncward"),
        (&["completions", "fish"], "deploy/completions/syncward.fish"),
    ] {
        let printed = cli.run(args).await?.ok()?.stdout;
        let shipped = std::fs::read_to_string(root.join(file))?;
        assert!(
            printed == shipped,
            "{file} is stale: regenerate it with `syncward {}`",
            args.join(" ")
        );
    }
    Ok(())
}

/// The README's install commands, run as printed on this machine (root, no
/// systemd as PID 1): a real `apt install` of the package, the env file
/// filled as a person would in `sudoedit` (this test's database and Redis),
/// `sudo -u syncward syncward migrate` as printed (the CLI reads the env file
/// the unit reads), and, for `systemctl enable --now`, what the unit runs:
/// its `ExecStart` as its `User`. The daemon passes `/readyz`; `apt purge`
/// then removes the config and the env file. The machine's own syncward
/// package state is what it was before (purged at the start and the end).
#[tokio::test(flavor = "multi_thread")]
async fn the_readmes_install_commands_work_as_printed_and_the_daemon_passes_readyz()
-> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md"))?;
    let install = readme
        .split("## Install")
        .nth(1)
        .and_then(|section| section.split("```sh\n").nth(1))
        .and_then(|block| block.split("```").next())
        .ok_or_else(|| anyhow::anyhow!("the README has no install block"))?;
    let commands: Vec<&str> = install.lines().filter(|l| !l.trim().is_empty()).collect();

    // The package where the README's first command expects it.
    let work = tempfile::tempdir()?;
    let built = build_deb(work.path()).await?;
    let debian = work.path().join("target/debian");
    std::fs::create_dir_all(&debian)?;
    let name = Path::new(&built)
        .file_name()
        .ok_or_else(|| anyhow::anyhow!("no file name"))?;
    std::fs::rename(&built, debian.join(name))?;

    let purge = || async {
        // A leftover from an interrupted run must not change what is tested.
        let _ = tokio::process::Command::new("dpkg")
            .args(["--purge", "syncward"])
            .output()
            .await;
    };
    purge().await;
    let db = crate::helpers::TestDb::empty().await?;
    let redis = crate::helpers::TestRedis::new().await?;
    let mut daemon = None;
    let mut result = Ok(());
    for command in &commands {
        let step: anyhow::Result<()> = async {
            if command.starts_with("sudoedit ") {
                // What a person types into the two files.
                let mut env = std::fs::OpenOptions::new()
                    .append(true)
                    .open("/etc/syncward/syncward.env")?;
                use std::io::Write;
                writeln!(env, "SYNCWARD__DATABASE__URL={}", db.url)?;
                writeln!(env, "SYNCWARD__REDIS__KEY_PREFIX={}", redis.prefix)?;
                writeln!(env, "SYNCWARD__HTTP__LISTEN=127.0.0.1:0")?;
                return Ok(());
            }
            if command.starts_with("sudo systemctl enable --now syncward") {
                // The unit's ExecStart as its User (it reads the env file);
                // setpriv execs it, so killing the child kills the daemon.
                let log = work.path().join("daemon.log");
                let child = tokio::process::Command::new("setpriv")
                    .args([
                        "--reuid=syncward",
                        "--regid=syncward",
                        "--init-groups",
                        "/usr/bin/syncward",
                        "run",
                    ])
                    .stderr(std::fs::File::create(&log)?)
                    .kill_on_drop(true)
                    .spawn()?;
                daemon = Some((child, log));
                return Ok(());
            }
            if command.starts_with("journalctl ") {
                return Ok(());
            }
            run("sh", &["-c", command], work.path()).await.map(drop)
        }
        .await;
        if let Err(e) = step {
            result = Err(e.context(format!("README install command: {command}")));
            break;
        }
    }
    let readyz = match (&result, &daemon) {
        (Ok(()), Some((_, log))) => ready(log).await,
        (Ok(()), None) => Err(anyhow::anyhow!("the README never starts the daemon")),
        (Err(_), _) => Ok(()),
    };
    if let Some((mut child, _)) = daemon {
        let _ = child.kill().await;
    }
    // Purge removes what the package and its postinst made.
    let purged = run(
        "sh",
        &["-c", "sudo apt-get purge -y -qq syncward"],
        work.path(),
    )
    .await;
    let leftovers = Path::new("/etc/syncward").exists();
    purge().await;
    result?;
    readyz?;
    purged?;
    assert!(!leftovers, "purge left /etc/syncward behind");
    Ok(())
}

/// Waits for the daemon that logs to `log` to answer `/readyz` with 200.
async fn ready(log: &Path) -> anyhow::Result<()> {
    crate::helpers::install_crypto();
    for _ in 0..300 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let address = text
            .lines()
            .find(|l| l.contains("Admin HTTP listening"))
            .and_then(|l| l.split("address=").nth(1))
            .and_then(|rest| rest.split_whitespace().next());
        if let Some(address) = address
            && let Ok(response) = reqwest::get(format!("http://{address}/readyz")).await
            && response.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    anyhow::bail!(
        "the installed daemon never passed /readyz:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    )
}
