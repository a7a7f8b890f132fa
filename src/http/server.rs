//! The admin server's connection loop: at most `http.max_connections` open at
//! once (the rest wait in the listen queue), each closed if its request
//! headers take longer than `http.header_read_timeout` (which also bounds the
//! idle time between kept-alive requests). Without these, 500 connections
//! trickling a byte at a time stayed open 45 s before any authentication.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::shutdown::Shutdown;

/// How long an open connection may finish its request once the drain began.
const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// Pause after a failed accept (e.g. out of file descriptors) before the next.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Limits of the connection loop.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
}

/// Accepts connections until the drain begins, each served on a task of
/// the shutdown tracker that holds one connection permit.
pub async fn accept_loop(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: Shutdown,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    loop {
        // The permit first: at the limit, new connections wait in the kernel's
        // listen queue instead of being accepted and starved.
        let permit = tokio::select! {
            () = shutdown.stopping() => return,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                // The semaphore is never closed; stop serving if it somehow is.
                Err(_) => return,
            },
        };
        let (stream, peer) = tokio::select! {
            () = shutdown.stopping() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "Accepting an admin HTTP connection failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
        };
        let app = app.clone();
        let stopping = shutdown.clone();
        shutdown.spawn(async move {
            serve_connection(stream, peer, app, limits, stopping).await;
            drop(permit);
        });
    }
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: ConnectionLimits,
    shutdown: Shutdown,
) {
    let service = TowerToHyperService::new(app);
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let outcome = tokio::select! {
        outcome = connection.as_mut() => outcome,
        () = shutdown.stopping() => {
            // Finish the request in flight, then close; an idle connection
            // closes at once.
            connection.as_mut().graceful_shutdown();
            match tokio::time::timeout(DRAIN_GRACE, connection.as_mut()).await {
                Ok(outcome) => outcome,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = outcome {
        // Timeouts, resets and garbage from clients: not the daemon's fault.
        tracing::debug!(peer = %peer, error = %e, "Admin HTTP connection ended");
    }
}
