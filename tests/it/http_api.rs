//! The admin HTTP server of the real daemon: health, readiness, the JSON API
//! and its token.

use std::time::Duration;

use crate::helpers::daemon::DaemonProcess;
use crate::helpers::install_crypto;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

/// Admin tokens are at least 32 characters.
const TOKEN: &str = "admin-token-for-tests-0123456789abcdef";

async fn get(url: &str, token: Option<&str>) -> anyhow::Result<(u16, serde_json::Value)> {
    install_crypto();
    let mut request = reqwest::Client::new().get(url);
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    ))
}

async fn post(url: &str, token: Option<&str>) -> anyhow::Result<(u16, serde_json::Value)> {
    install_crypto();
    let mut request = reqwest::Client::new().post(url);
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let response = request.send().await?;
    Ok((
        response.status().as_u16(),
        response.json().await.unwrap_or_default(),
    ))
}

#[tokio::test(flavor = "multi_thread")]
async fn every_endpoint_answers_and_the_api_requires_the_token() -> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions::default()).await?;
    sqlx::raw_sql("ALTER TABLE contacts RENAME TO contacts_gone")
        .execute(&s.db.pool)
        .await?;
    assert_eq!(s.run_foreground().await?.code, 1);
    let run_id = s.last_run().await?["id"].as_i64().unwrap_or_default();
    let cli = s.cli.clone().with_env("SYNCWARD__HTTP__ADMIN_TOKEN", TOKEN);
    let mut daemon = DaemonProcess::spawn(&cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);

    assert_eq!(get(&format!("{base}/healthz"), None).await?.0, 200);
    let (status, ready) = get(&format!("{base}/readyz"), None).await?;
    assert_eq!(
        (status, ready["postgres"].clone(), ready["redis"].clone()),
        (200, "ok".into(), "ok".into())
    );

    for path in [
        "/api/syncs",
        &format!("/api/syncs/{SYNC_ID}"),
        &format!("/api/syncs/{SYNC_ID}/runs"),
        &format!("/api/runs/{run_id}"),
    ] {
        assert_eq!(
            get(&format!("{base}{path}"), None).await?.0,
            401,
            "{path} without a token"
        );
        assert_eq!(
            get(&format!("{base}{path}"), Some("wrong")).await?.0,
            401,
            "{path} with a wrong token"
        );
        assert_eq!(
            get(&format!("{base}{path}"), Some(TOKEN)).await?.0,
            200,
            "{path} with the token"
        );
    }
    assert_eq!(
        post(&format!("{base}/api/syncs/{SYNC_ID}/pause"), None)
            .await?
            .0,
        401
    );

    let (_, list) = get(&format!("{base}/api/syncs"), Some(TOKEN)).await?;
    assert_eq!(list[0]["id"], SYNC_ID);
    let (_, run) = get(&format!("{base}/api/runs/{run_id}"), Some(TOKEN)).await?;
    assert_eq!(run["run"]["status"], "failed");
    assert_eq!(run["failure"]["code"], "source_query_failed");
    assert_eq!(run["failure"]["owner"], "customer");
    assert!(
        run["failure"]["what_next"]
            .as_str()
            .is_some_and(|t| !t.is_empty())
    );
    assert_eq!(
        get(&format!("{base}/api/syncs/nope"), Some(TOKEN)).await?.0,
        404
    );
    assert_eq!(
        get(&format!("{base}/api/runs/999999"), Some(TOKEN))
            .await?
            .0,
        404
    );

    let (status, paused) = post(&format!("{base}/api/syncs/{SYNC_ID}/pause"), Some(TOKEN)).await?;
    assert_eq!((status, paused["status"].clone()), (200, "paused".into()));
    let (_, shown) = get(&format!("{base}/api/syncs/{SYNC_ID}"), Some(TOKEN)).await?;
    assert_eq!(shown["sync"]["status"], "paused");
    assert_eq!(shown["sync"]["paused_reason"], "manual");
    let (status, _) = post(&format!("{base}/api/syncs/{SYNC_ID}/resume"), Some(TOKEN)).await?;
    assert_eq!(status, 200);
    sqlx::raw_sql("ALTER TABLE contacts_gone RENAME TO contacts")
        .execute(&s.db.pool)
        .await?;
    let (status, queued) = post(&format!("{base}/api/syncs/{SYNC_ID}/run"), Some(TOKEN)).await?;
    assert_eq!(status, 202);
    let queued_id = queued["run_id"].as_i64().unwrap_or_default();
    crate::helpers::daemon::eventually(
        Duration::from_secs(20),
        "the queued run succeeding",
        || async {
            let (_, r) = get(&format!("{base}/api/runs/{queued_id}"), Some(TOKEN)).await?;
            Ok(r["run"]["status"] == "succeeded")
        },
    )
    .await?;
    // Metrics name every workspace's syncs: with a token set, an anonymous
    // scrape is refused; the admin token (or http.metrics_token) reads them,
    // and the run moved the counters.
    assert_eq!(get(&format!("{base}/metrics"), None).await?.0, 401);
    let (status, text) = get(&format!("{base}/metrics"), Some(TOKEN)).await?;
    assert_eq!(status, 200);
    let text = text.as_str().unwrap_or_default().to_string();
    let value = |prefix: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(-1.0)
    };
    assert_eq!(
        value("syncward_records_written_total{sync=\"acme-contacts\",workspace=\"acme\"} "),
        30.0,
        "{text}"
    );
    assert!(
        text.contains("syncward_runs_finished_total{outcome=\"succeeded\""),
        "{text}"
    );
    assert!(
        value("syncward_destination_requests_total{kind=\"brevo\",status=\"202\"}") >= 3.0,
        "{text}"
    );
    assert!(text.contains("syncward_run_duration_seconds"), "{text}");
    crate::helpers::daemon::eventually(Duration::from_secs(5), "the queue gauge", || async {
        let (_, t) = get(&format!("{base}/metrics"), Some(TOKEN)).await?;
        Ok(t.as_str()
            .unwrap_or_default()
            .contains("syncward_queue_depth 0"))
    })
    .await?;
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_is_503_when_redis_stops() -> anyhow::Result<()> {
    // A Redis of this test's own, on a free port, that the test stops.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut redis = tokio::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let url = format!("redis://127.0.0.1:{port}");
    crate::helpers::daemon::eventually(
        Duration::from_secs(10),
        "the test Redis answering",
        || async { Ok(crate::helpers::TestRedis::at(&url).await.is_ok()) },
    )
    .await?;
    let s = Scenario::new(SyncOptions::default()).await?;
    let cli = s.cli.clone().with_env("SYNCWARD__REDIS__URL", &url);
    let mut daemon = DaemonProcess::spawn(&cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);
    assert_eq!(get(&format!("{base}/readyz"), None).await?.0, 200);
    redis.kill().await?;
    let (status, body) = get(&format!("{base}/readyz"), None).await?;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["postgres"], "ok");
    assert_ne!(body["redis"], "ok");
    assert_eq!(
        get(&format!("{base}/healthz"), None).await?.0,
        200,
        "the process itself is alive"
    );
    daemon.signal("KILL")?;
    daemon.wait(Duration::from_secs(10)).await?;
    Ok(())
}

/// Paused means paused through the API too, and rejected records are put
/// back from it.
#[tokio::test(flavor = "multi_thread")]
async fn the_api_refuses_to_run_a_paused_sync_without_force_and_puts_rejected_records_back()
-> anyhow::Result<()> {
    let s = Scenario::new(SyncOptions {
        mode: "single",
        ..SyncOptions::default()
    })
    .await?;
    s.fake.reject_emails(|e| e.starts_with("user7@"));
    s.run_foreground().await?.ok()?;
    let cli = s.cli.clone().with_env("SYNCWARD__HTTP__ADMIN_TOKEN", TOKEN);
    let mut daemon = DaemonProcess::spawn(&cli).await?;
    let base = format!("http://{}", daemon.http_address().await?);

    let (status, sync) = get(&format!("{base}/api/syncs/{SYNC_ID}"), Some(TOKEN)).await?;
    assert_eq!(status, 200);
    assert_eq!(sync["rejections"]["rejected"], 1, "{sync}");

    s.cli.run(&["sync", "pause", SYNC_ID]).await?.ok()?;
    let (status, refused) = post(&format!("{base}/api/syncs/{SYNC_ID}/run"), Some(TOKEN)).await?;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]
            .as_str()
            .is_some_and(|e| e.contains("paused")),
        "{refused}"
    );
    let (status, forced) = post(
        &format!("{base}/api/syncs/{SYNC_ID}/run?force=true"),
        Some(TOKEN),
    )
    .await?;
    assert_eq!(status, 202, "{forced}");

    s.fake.reject_emails(|_| false);
    let (status, put_back) = post(
        &format!("{base}/api/syncs/{SYNC_ID}/retry-rejected?code=invalid_parameter"),
        Some(TOKEN),
    )
    .await?;
    assert_eq!(status, 200, "{put_back}");
    assert_eq!(put_back["put_back"], 1, "{put_back}");
    daemon.signal("TERM")?;
    daemon.wait(Duration::from_secs(30)).await?;
    Ok(())
}
