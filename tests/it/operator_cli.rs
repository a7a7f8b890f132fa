//! What an operator does with runs and syncs on day two, through the real
//! binary: pause with a reason (shown and audited), filter the run list,
//! cancel a queued run, follow a queued run to its end with the exit code of
//! its outcome, and one JSON shape for "run queued" in the CLI and the API.

use std::time::Duration;

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::install_crypto;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

const TOKEN: &str = "admin-token-for-tests-0123456789abcdef";

#[tokio::test(flavor = "multi_thread")]
async fn a_pause_reason_is_shown_with_the_pause_and_kept_in_the_audit_log() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    s.cli
        .run(&[
            "sync",
            "pause",
            SYNC_ID,
            "--reason",
            "Brevo account migration",
        ])
        .await?
        .ok()?;
    let listed = s.cli.run(&["sync", "list"]).await?.ok()?.stdout;
    assert!(
        listed.contains("paused: Brevo account migration"),
        "{listed}"
    );
    let shown = s.cli.run(&["sync", "show", SYNC_ID]).await?.ok()?.stdout;
    assert!(
        shown.contains("paused by a person: Brevo account migration since"),
        "{shown}"
    );
    let (reason, note): (Option<String>, Option<String>) = sqlx::query_as(
        "SELECT reason, detail->>'note' FROM audit_log WHERE action = 'pause' AND sync_id = $1",
    )
    .bind(SYNC_ID)
    .fetch_one(&s.db.pool)
    .await?;
    assert_eq!(
        (reason.as_deref(), note.as_deref()),
        (Some("manual"), Some("Brevo account migration"))
    );
    // Resuming clears it; a reason of two lines is refused, naming the rule.
    s.cli.run(&["sync", "resume", SYNC_ID]).await?.ok()?;
    let out = s
        .cli
        .run(&["sync", "pause", SYNC_ID, "--reason", "one\ntwo"])
        .await?;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(out.stderr.contains("one line"), "{}", out.stderr);

    // Through the API, and shown on the page.
    let cli = s.cli.clone().with_env("SYNCWARD__HTTP__ADMIN_TOKEN", TOKEN);
    let mut daemon = DaemonProcess::spawn(&cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);
    install_crypto();
    let client = reqwest::Client::new();
    let answer = client
        .post(format!("{base}/api/syncs/{SYNC_ID}/pause"))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({ "reason": "quarter close" }))
        .send()
        .await?;
    assert_eq!(answer.status().as_u16(), 200);
    let page = client
        .get(format!("{base}/syncs/{SYNC_ID}"))
        .basic_auth("ops", Some(TOKEN))
        .send()
        .await?
        .text()
        .await?;
    assert!(page.contains("paused by a person: quarter close"), "{page}");
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_list_filters_by_status_time_and_workspace_and_a_queued_run_is_cancelled()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    assert_eq!(s.run_foreground().await?.code, 0);
    let queued = s
        .cli
        .run(&["sync", "run", SYNC_ID, "--json"])
        .await?
        .ok()?
        .json()?;
    // The same fields as the API's answer (`http_api` checks those).
    let keys: Vec<&String> = queued
        .as_object()
        .map(|o| o.keys().collect())
        .unwrap_or_default();
    assert_eq!(keys, ["new", "run_id", "sync"]);
    let queued_id = queued["run_id"].as_i64().unwrap_or_default();

    let ids = |args: &'static [&'static str]| {
        let cli = s.cli.clone();
        async move {
            let mut all = vec!["runs", "list", "--json"];
            all.extend_from_slice(args);
            let list = cli.run(&all).await?.ok()?.json()?;
            anyhow::Ok(
                list.as_array()
                    .map(|a| a.iter().filter_map(|r| r["id"].as_i64()).collect())
                    .unwrap_or_else(Vec::new),
            )
        }
    };
    assert_eq!(ids(&["--status", "queued"]).await?, [queued_id]);
    assert_eq!(ids(&["--status", "succeeded"]).await?.len(), 1);
    assert_eq!(ids(&["--since", "1h"]).await?.len(), 2);
    assert!(ids(&["--since", "2999-01-01T00:00:00Z"]).await?.is_empty());
    assert_eq!(ids(&["--workspace", "acme"]).await?.len(), 2);
    assert!(ids(&["--workspace", "elsewhere"]).await?.is_empty());
    let bad = s.cli.run(&["runs", "list", "--status", "done"]).await?;
    assert_eq!(bad.code, 2, "{}", bad.stderr);

    let out = s
        .cli
        .run(&["runs", "cancel", &queued_id.to_string()])
        .await?
        .ok()?;
    assert!(out.stdout.contains("cancelled"), "{}", out.stdout);
    let run = s.last_run().await?;
    assert_eq!(
        (run["status"].clone(), run["failure_code"].clone()),
        ("skipped".into(), "run_cancelled".into())
    );
    let again = s
        .cli
        .run(&["runs", "cancel", &queued_id.to_string()])
        .await?
        .ok()?;
    assert!(
        again.stdout.contains("already ended (skipped)"),
        "{}",
        again.stdout
    );
    let audited: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_log WHERE action = 'cancel_run'")
            .fetch_one(&s.db.pool)
            .await?;
    assert_eq!(audited, 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn sync_run_wait_follows_the_queued_run_and_exits_as_it_ended() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        page_size: 5,
        rows: 20,
        ..SyncOptions::default()
    })
    .await?;
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    let out = s
        .cli
        .run(&["sync", "run", SYNC_ID, "--wait", "60s"])
        .await?;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("queued"), "{}", out.stdout);
    assert!(
        out.stdout.contains("succeeded: 20 read, 20 written"),
        "{}",
        out.stdout
    );
    // A run that fails: `runs watch` exits 1 naming its failure.
    sqlx::raw_sql("ALTER TABLE contacts RENAME TO contacts_gone")
        .execute(&s.db.pool)
        .await?;
    let queued = s
        .cli
        .run(&["sync", "run", SYNC_ID, "--json"])
        .await?
        .ok()?
        .json()?;
    let id = queued["run_id"].to_string();
    let watched = s.cli.run(&["runs", "watch", &id]).await?;
    assert_eq!(watched.code, 1, "{}\n{}", watched.stdout, watched.stderr);
    assert!(
        watched.stderr.contains("source_query_failed"),
        "{}",
        watched.stderr
    );
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn sync_apply_of_a_directory_names_every_bad_file_and_applies_none() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let dir = tempfile::tempdir()?;
    let good = std::fs::read_to_string(s.dir.path().join("sync.toml"))?
        .replace(&format!("id = \"{SYNC_ID}\""), "id = \"fine\"");
    std::fs::write(dir.path().join("a-fine.toml"), &good)?;
    std::fs::write(
        dir.path().join("b-broken.toml"),
        "id = \"broken\"\nworkspace = ",
    )?;
    std::fs::write(
        dir.path().join("c-unknown.toml"),
        good.replace("id = \"fine\"", "id = \"unknown\"\nshedule = \"@hourly\""),
    )?;
    let out = s
        .cli
        .run(&["sync", "apply", &dir.path().display().to_string()])
        .await?;
    assert_eq!(out.code, 2, "{}", out.stderr);
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(lines.len(), 2, "{}", out.stderr);
    assert!(lines[0].contains("b-broken.toml"), "{}", out.stderr);
    assert!(
        lines[1].contains("c-unknown.toml") && lines[1].contains("shedule"),
        "{}",
        out.stderr
    );
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM syncs WHERE id = 'fine'")
        .fetch_one(&s.db.pool)
        .await?;
    assert_eq!(applied, 0, "all or nothing");
    Ok(())
}

/// `syncward doctor`: one line per check, each naming what it tried; a
/// revoked Brevo key and a source table gone fail their lines (exit 1) and
/// leave the others ok.
#[tokio::test(flavor = "multi_thread")]
async fn doctor_tries_the_store_redis_and_each_syncs_source_and_destination() -> anyhow::Result<()>
{
    let s = Scenario::new(SyncOptions::default()).await?;
    let out = s.cli.run(&["doctor"]).await?;
    assert_eq!(out.code, 0, "{}\n{}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", out.stdout);
    assert!(lines[0].starts_with("ok    store: ") && lines[0].contains("schema current"));
    assert!(lines[1].starts_with("ok    redis: "), "{}", lines[1]);
    assert!(
        lines[2].starts_with(&format!(
            "ok    {SYNC_ID} source: postgres: a page read (10 records)"
        )),
        "{}",
        lines[2]
    );
    assert!(
        lines[3].starts_with(&format!(
            "ok    {SYNC_ID} destination: brevo: the API key is accepted"
        )),
        "{}",
        lines[3]
    );

    sqlx::raw_sql("ALTER TABLE contacts RENAME TO contacts_gone")
        .execute(&s.db.pool)
        .await?;
    let broken = s
        .cli
        .clone()
        .with_secret("TEST_BREVO_KEY", "xkeysib-revoked");
    let out = broken.run(&["doctor", "--json"]).await?;
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    let checks = out.json()?;
    let verdicts: Vec<(&str, &str)> = checks
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| Some((c["what"].as_str()?, c["verdict"].as_str()?)))
        .collect();
    assert_eq!(
        verdicts,
        [
            ("store", "ok"),
            ("redis", "ok"),
            (&*format!("{SYNC_ID} source"), "fail"),
            (&*format!("{SYNC_ID} destination"), "fail"),
        ]
    );
    let detail = checks[3]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("401"), "{detail}");
    Ok(())
}

/// `sync apply --plan` on a page-size change says what a rewind would do,
/// and a rewind does that: with the size halved, the records of the new
/// pages that start where no old page did are sent again, the rest replayed.
#[tokio::test(flavor = "multi_thread")]
async fn a_page_size_change_is_planned_as_what_a_rewind_then_does() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        page_size: 10,
        rows: 40,
        ..SyncOptions::default()
    })
    .await?;
    assert_eq!(s.run_foreground().await?.code, 0);
    assert_eq!(s.fake.writes().len(), 40);
    let file = s.dir.path().join("sync.toml");
    let halved = std::fs::read_to_string(&file)?.replace("page_size = 10", "page_size = 5");
    let halved_file = s.dir.path().join("halved.toml");
    std::fs::write(&halved_file, halved)?;
    let path = halved_file.display().to_string();
    let plan = s.cli.run(&["sync", "apply", "--plan", &path]).await?;
    assert_eq!(plan.code, 4, "{}", plan.stderr);
    assert!(
        plan.stdout.contains("halving the size: about half of them"),
        "{}",
        plan.stdout
    );
    s.cli.run(&["sync", "apply", &path]).await?.ok()?;
    s.cli.run(&["sync", "reset-cursor", SYNC_ID]).await?.ok()?;
    assert_eq!(s.run_foreground().await?.code, 0);
    let again = s.writes_per_email().values().filter(|n| **n == 2).count();
    assert_eq!(again, 20, "half of the 40 records sent again");
    assert_eq!(s.fake.writes().len(), 60);
    Ok(())
}

/// The shells complete sync ids from the store: the completion script calls
/// `syncward` back (`COMPLETE=fish syncward -- WORDS`), which answers with
/// the ids that start with what is typed.
#[tokio::test(flavor = "multi_thread")]
async fn the_shell_completes_sync_ids_from_the_store() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    let completed = s
        .cli
        .clone()
        .with_env("COMPLETE", "fish")
        .run(&["--", "syncward", "sync", "show", "acme-c"])
        .await?;
    assert_eq!(completed.code, 0, "{}", completed.stderr);
    let words: Vec<&str> = completed
        .stdout
        .lines()
        .map(|l| l.split('\t').next().unwrap_or_default())
        .collect();
    assert_eq!(words, [SYNC_ID], "{}", completed.stdout);
    let script = s.cli.run(&["completions", "bash"]).await?.ok()?.stdout;
    assert!(
        script.contains("COMPLETE=\"bash\"") && script.contains("syncward"),
        "{script}"
    );
    Ok(())
}

/// A running run asked to stop ends at its next clean batch, `skipped`
/// (`run_cancelled`), its cursor kept: the next run goes on from there and
/// sends nothing twice.
#[tokio::test(flavor = "multi_thread")]
async fn a_running_run_cancelled_stops_at_its_next_checkpoint_and_keeps_its_cursor()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        page_size: 2,
        rows: 60,
        ..SyncOptions::default()
    })
    .await?;
    s.fake.slow_writes(Duration::from_millis(100));
    let mut daemon = DaemonProcess::spawn(&s.cli).await?;
    let queued = s
        .cli
        .run(&["sync", "run", SYNC_ID, "--json"])
        .await?
        .ok()?
        .json()?;
    let id = queued["run_id"].to_string();
    daemon
        .eventually(
            Duration::from_secs(30),
            "the run a few pages in",
            || async { Ok(s.fake.writes().len() >= 6) },
        )
        .await?;
    let out = s.cli.run(&["runs", "cancel", &id]).await?.ok()?;
    assert!(out.stdout.contains("asked to stop"), "{}", out.stdout);
    let watched = s.cli.run(&["runs", "watch", &id]).await?;
    assert_eq!(watched.code, 0, "{}\n{}", watched.stdout, watched.stderr);
    let run = s.last_run().await?;
    assert_eq!(
        (run["status"].clone(), run["failure_code"].clone()),
        ("skipped".into(), "run_cancelled".into())
    );
    let written = run["records_written"].as_i64().unwrap_or_default();
    assert!(written > 0 && written < 60, "stopped part-way: {run}");
    // The next run goes on from the cursor the cancelled one wrote.
    s.cli
        .run(&["sync", "run", SYNC_ID, "--wait", "60s"])
        .await?
        .ok()?;
    let sends = s.writes_per_email();
    assert_eq!(sends.len(), 60);
    assert!(
        sends.values().all(|n| *n == 1),
        "nothing sent twice: {sends:?}"
    );
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

/// A subcommand's `--help` lists its own options first and every command's
/// two (`--config`, `--env-file`) last, on one line each; the man page
/// lists each subcommand's own options.
#[tokio::test]
async fn a_subcommands_help_puts_its_own_flags_first_and_the_man_page_lists_them()
-> anyhow::Result<()> {
    let cli = crate::helpers::Syncward::bare();
    let help = cli.run(&["sync", "pause", "--help"]).await?.ok()?.stdout;
    let position = |flag: &str| help.find(flag).unwrap_or(usize::MAX);
    assert!(
        position("--reason") < position("--config") && position("--json") < position("--config"),
        "{help}"
    );
    for global in ["--config <PATH>", "--env-file <PATH>"] {
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with(global))
            .unwrap_or_default();
        assert!(!line.is_empty() && line.len() < 200, "{global}: {help}");
        let next = help
            .lines()
            .skip_while(|l| !l.trim_start().starts_with(global))
            .nth(1)
            .unwrap_or_default();
        assert!(
            next.trim_start().starts_with('-'),
            "{global} takes one line: {help}"
        );
    }
    let man = cli.run(&["man"]).await?.ok()?.stdout;
    let pause = man
        .split("\\fBsyncward sync pause\\fR")
        .nth(1)
        .unwrap_or_default();
    let pause = pause.split(".TP\n\\fB").next().unwrap_or_default();
    assert!(pause.contains("\\-\\-reason <TEXT>"), "{pause}");
    Ok(())
}

/// A rejected record names where it is in the source (the cursor column's
/// value): in `runs show`, its JSON, the run's page and what
/// `retry-rejected` puts back. One refused by Brevo, one whose address is
/// not one (the source row's id is all there is to find it by).
#[tokio::test(flavor = "multi_thread")]
async fn rejected_records_name_their_source_key_wherever_they_are_shown() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        mode: "single",
        ..SyncOptions::default()
    })
    .await?;
    sqlx::query("UPDATE contacts SET email = 'not an address' WHERE id = 13")
        .execute(&s.db.pool)
        .await?;
    s.fake.reject_emails(|e| e.starts_with("user7@"));
    s.run_foreground().await?.ok()?;
    let run_id = s.last_run().await?["id"].as_i64().unwrap_or_default();
    let run = run_id.to_string();

    let text = s.cli.run(&["runs", "show", &run]).await?.ok()?.stdout;
    assert!(text.contains("source key"), "{text}");
    let row = |email: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(email))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    assert_eq!(row("user7@example.com").get(1), Some(&"7"), "{text}");
    assert_eq!(row("-").get(1), Some(&"13"), "{text}");

    let json: serde_json::Value = serde_json::from_str(
        &s.cli
            .run(&["runs", "show", &run, "--json"])
            .await?
            .ok()?
            .stdout,
    )?;
    let mut keys: Vec<(String, String)> = json["rejected_records"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["code"].as_str().unwrap_or_default().to_string(),
                r["source_key"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    keys.sort();
    assert_eq!(keys.len(), 2, "{json}");
    assert_eq!(keys[1].1, "7", "{json}");
    assert_eq!(keys[0], ("invalid_email".into(), "13".into()), "{json}");

    let cli = s.cli.clone().with_env("SYNCWARD__HTTP__ADMIN_TOKEN", TOKEN);
    let daemon = DaemonProcess::spawn(&cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);
    install_crypto();
    for path in [format!("/runs/{run_id}"), format!("/syncs/{SYNC_ID}")] {
        let html = reqwest::Client::new()
            .get(format!("{base}{path}"))
            .basic_auth("admin", Some(TOKEN))
            .send()
            .await?
            .text()
            .await?;
        let cells: Vec<&str> = html
            .split('<')
            .filter_map(|tag| tag.strip_prefix("td>").or_else(|| tag.strip_prefix("th>")))
            .map(str::trim)
            .collect();
        assert!(cells.contains(&"source key"), "{path}: {cells:?}");
        let email = cells.iter().position(|c| *c == "user7@example.com");
        assert_eq!(
            email.and_then(|i| cells.get(i + 1)),
            Some(&"7"),
            "{path}: {cells:?}"
        );
    }

    let put_back = s
        .cli
        .run(&["sync", "retry-rejected", SYNC_ID])
        .await?
        .ok()?
        .stdout;
    assert!(
        put_back.contains("user7@example.com  source key 7")
            && put_back.contains("-  source key 13  invalid_email"),
        "{put_back}"
    );
    Ok(())
}
