//! A workspace reaches only its own at the joins between parts too: the
//! resolver and the port, IPv4 inside IPv6, the environment's proxy and
//! `PG*` variables, the secrets parser, erasure, sync ids. Each attack is
//! performed against the real binary and seen to fail, with nothing
//! reaching the other side.

use crate::fakes::brevo::BrevoFake;
use crate::helpers::scenario::{SYNC_ID, Scenario, SyncOptions};

const ADMIN_TOKEN: &str = "admin-token-0123456789abcdef0123456789";

/// A Brevo key holding `$`, `${…}` naming the daemon's admin token, quotes
/// and `#`: what a workspace's secrets file says is what Brevo receives,
/// quoted or not, and no variable of the daemon's is expanded into it.
#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_secret_is_read_literally_and_never_expanded() -> anyhow::Result<()> {
    let key = "k${SYNCWARD__HTTP__ADMIN_TOKEN}$HOME\"q'#h";
    let s = Scenario::new(SyncOptions {
        rows: 5,
        ..SyncOptions::default()
    })
    .await?;
    let fake = BrevoFake::start(key).await?;
    s.publish_with_destination(
        100,
        &format!(
            "kind = \"brevo\"\napi_key_env = \"TEST_BREVO_KEY\"\nbase_url = \"{}\"\nmode = \"bulk\"\nlist_ids = [12]",
            fake.base_url
        ),
    )
    .await?;
    let secrets = tempfile::tempdir()?;
    let run = |line: String| {
        let cli = s
            .cli
            .clone()
            .with_env(
                "SYNCWARD__SECRETS__DIR",
                &secrets.path().display().to_string(),
            )
            .with_env("SYNCWARD__HTTP__ADMIN_TOKEN", ADMIN_TOKEN);
        let file = secrets.path().join("acme.env");
        let source = format!("TEST_SOURCE_URL={}\n", s.db.url);
        async move {
            std::fs::write(&file, format!("{source}{line}\n"))?;
            cli.run(&["sync", "resync", SYNC_ID]).await?.ok()?;
            cli.run(&["sync", "run", SYNC_ID, "--foreground"])
                .await?
                .ok()
        }
    };
    run(format!("TEST_BREVO_KEY={key}")).await?;
    run(format!("TEST_BREVO_KEY=\"{key}\"")).await?;
    let requests = fake.requests();
    assert!(requests.len() >= 2, "{requests:?}");
    for request in &requests {
        assert_eq!(request.api_key.as_deref(), Some(key), "{request:?}");
        assert_eq!(request.status / 100, 2, "{request:?}");
    }
    assert_eq!(fake.contacts().len(), 5);
    Ok(())
}
