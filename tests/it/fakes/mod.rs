//! Local fakes of third-party services, built from specs: real HTTP
//! servers on ephemeral ports that record every request and take scripted faults.

pub mod brevo;
pub mod paged_api;
pub mod sentry;
pub mod shopify;
pub mod smtp;
pub mod webhook;

/// Serves `app` on an ephemeral loopback port until the returned task is
/// aborted (each fake aborts it when dropped).
pub async fn serve(
    app: axum::Router,
) -> anyhow::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = tokio::spawn(async move {
        // The server only ends when the fake is dropped (aborted).
        let _ = axum::serve(listener, app).await;
    });
    Ok((addr, server))
}
