//! The Brevo fake of the test suite as a stand-alone server, for the quick
//! start and for trying syncward without a Brevo account.
//!
//! `cargo run --example brevo_fake -- [ADDR]` (default 127.0.0.1:8025); the API
//! key it accepts is `$BREVO_FAKE_API_KEY` (default `xkeysib-local-fake`).
//! `GET /_fake/contacts` shows what it holds.

#[allow(dead_code)]
#[path = "../tests/it/fakes/brevo.rs"]
mod brevo;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:8025".into());
    let key = std::env::var("BREVO_FAKE_API_KEY").unwrap_or_else(|_| "xkeysib-local-fake".into());
    let fake = brevo::BrevoFake::start_on(addr.parse()?, &key).await?;
    println!(
        "Brevo fake listening on {} (base_url {})",
        fake.addr, fake.base_url
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
}
