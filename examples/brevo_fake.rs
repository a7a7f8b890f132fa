//! The Brevo fake of the test suite as a stand-alone server, for the quick
//! start and for trying syncward without a Brevo account.
//!
//! `cargo run --example brevo_fake -- serve [ADDR]` (default 127.0.0.1:8025)
//! serves it; the API key it accepts is `$BREVO_FAKE_API_KEY` (default
//! `xkeysib-local-fake`). `... -- count [ADDR]` prints how many contacts a
//! running fake holds (from its `GET /_fake/contacts`). With
//! `BREVO_FAKE_LEAN=1` it keeps the contacts but no log of request bodies
//! (benchmarks: the fake's own bookkeeping is not the client's cost). With
//! `BREVO_FAKE_BACKGROUND_IMPORTS=1` it answers an import at once and applies
//! its rows after, as Brevo's background import process does.

#[allow(dead_code)]
#[path = "../tests/it/fakes/brevo.rs"]
mod brevo;

// Linked for its allocator (mimalloc, `src/lib.rs`), so the fake out of
// process allocates as it does inside the tests and benchmarks: with
// glibc's, parsing an import of 1,000 rows cost it about 9 ms of CPU.
extern crate syncward;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "serve".into());
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8025".into());
    match mode.as_str() {
        "serve" => {
            let key =
                std::env::var("BREVO_FAKE_API_KEY").unwrap_or_else(|_| "xkeysib-local-fake".into());
            let fake = brevo::BrevoFake::start_on(addr.parse()?, &key).await?;
            if std::env::var("BREVO_FAKE_LEAN").is_ok_and(|v| v == "1") {
                fake.lean();
            }
            if std::env::var("BREVO_FAKE_BACKGROUND_IMPORTS").is_ok_and(|v| v == "1") {
                fake.background_imports();
            }
            println!(
                "Brevo fake listening on {} (base_url {})",
                fake.addr, fake.base_url
            );
            tokio::signal::ctrl_c().await?;
            Ok(())
        }
        "count" => {
            // reqwest is built without a default crypto provider.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let state: serde_json::Value = reqwest::get(format!("http://{addr}/_fake/contacts"))
                .await?
                .error_for_status()?
                .json()
                .await?;
            println!("{}", state["count"]);
            Ok(())
        }
        other => anyhow::bail!("unknown mode {other:?}: use serve or count"),
    }
}
