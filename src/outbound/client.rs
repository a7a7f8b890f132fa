//! The HTTP client every outbound request shares (connectors, the alert webhook) and how it reads
//! answers. Requests carry a credential or a signed body, so no redirect is followed (a 3xx names
//! where it pointed); answers are read up to a cap; errors leave out the URL, which may hold a secret.

use std::collections::HashMap;
use std::error::Error as _;

/// The client could not be built (the TLS roots cannot be loaded): the
/// machine's setup, not a request, is at fault.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the HTTP client: {0}")]
pub struct ClientError(String);

/// Largest destination answer read. Brevo answers a write with a few hundred
/// bytes and the webhook's answer is only kept as a short message, so 16 MiB
/// is far beyond any real answer and bounds what a broken or hostile server
/// can make a run hold (400 MB once took a run to 906 MB RSS).
pub const DESTINATION_ANSWER_CAP: usize = 16 * 1024 * 1024;

/// Largest source page read: a page of the largest size an API serves is far
/// below this (the http source keeps a page as its bytes and parses a record
/// at a time; Shopify's pages are small). Past it the page size, not the
/// run, has to give.
pub const SOURCE_PAGE_CAP: usize = 64 * 1024 * 1024;

/// The HTTP client the connectors use to reach `url` (a User-Agent naming
/// syncward; no redirects; no proxy from the environment; timeouts are set
/// per request), whose every connection goes to an address the outbound
/// policy allows with the port it goes to (`policy::PolicyResolver`; an
/// address literal in a connector's URL is checked when it opens). The
/// resolver sees only a name, so there is one client per port, built once
/// per process and port: building one loads the TLS roots, which costs more
/// than a whole no-op run (and per `outbound.proxy`). A request through it
/// must go to `url`'s port.
pub fn http_client(url: &url::Url) -> Result<reqwest::Client, ClientError> {
    type Clients = HashMap<(u16, Option<url::Url>), reqwest::Client>;
    static CLIENTS: std::sync::OnceLock<std::sync::Mutex<Clients>> = std::sync::OnceLock::new();
    let port = url.port_or_known_default().unwrap_or(0);
    let proxy = super::policy::current().proxy().cloned();
    let key = (port, proxy);
    let clients = CLIENTS.get_or_init(Default::default);
    // A poisoned lock only follows a panic elsewhere; the map is whole.
    if let Some(client) = clients.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(client.clone());
    }
    let mut builder = builder().no_proxy().dns_resolver(std::sync::Arc::new(
        super::policy::PolicyResolver::for_port(port),
    ));
    if let Some(proxy) = &key.1 {
        // `outbound.proxy`, never the environment's.
        builder = builder.proxy(
            reqwest::Proxy::all(proxy.as_str()).map_err(|e| ClientError(describe_error(e)))?,
        );
    }
    let client = builder
        .build()
        .map_err(|e| ClientError(describe_error(e)))?;
    Ok(clients
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key)
        .or_insert(client)
        .clone())
}

/// The client of the operator's own endpoints (the alert webhook): the same,
/// without the outbound policy, which binds what workspaces configure.
pub fn operator_client() -> Result<reqwest::Client, ClientError> {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client.clone());
    }
    let client = builder()
        .build()
        .map_err(|e| ClientError(describe_error(e)))?;
    Ok(CLIENT.get_or_init(|| client).clone())
}

fn builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .user_agent(concat!("syncward/", env!("CARGO_PKG_VERSION")))
        // A redirect would hand the request's credential (and body) to
        // whoever the Location names.
        .redirect(reqwest::redirect::Policy::none())
}

/// Why an answer's body was not read whole.
#[derive(Debug)]
pub enum BodyError {
    /// Longer than the cap: not read further.
    TooLarge,
    /// The transport failed part-way (described without the URL).
    CutOff(String),
}

/// Reads the body of `response`, at most `cap` bytes: a longer body (as its
/// `Content-Length` announces, or as it arrives) is not read further.
pub async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
) -> Result<Vec<u8>, BodyError> {
    let announced = response.content_length().unwrap_or(0);
    if announced > cap as u64 {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::with_capacity(announced as usize);
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > cap {
                    return Err(BodyError::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(BodyError::CutOff(describe_error(e))),
        }
    }
}

/// A cap as people read it: `16 MiB`.
pub fn cap_text(cap: usize) -> String {
    format!("{} MiB", cap / (1024 * 1024))
}

/// Where a 3xx answer pointed, for the failure message: its `Location`
/// against the request's URL, without user-info, query or fragment (the
/// server chose it, and it may carry a secret of the server's).
pub fn redirect_target(response: &reqwest::Response) -> String {
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|l| l.to_str().ok());
    let Some(location) = location else {
        return "nowhere (no Location header)".to_string();
    };
    match response.url().join(location) {
        Ok(mut target) => {
            target.set_query(None);
            target.set_fragment(None);
            // Fails only for URLs that cannot have user-info: then they have none.
            let _ = target.set_username("");
            let _ = target.set_password(None);
            target.to_string()
        }
        Err(_) => "an address that is not a URL".to_string(),
    }
}

/// A transport error as text, without the request's URL (which may carry a
/// secret in its path or query) and with its causes, which say what failed
/// (`tcp connect error: Connection refused`).
pub fn describe_error(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let part = c.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_read_in_mebibytes() {
        assert_eq!(cap_text(DESTINATION_ANSWER_CAP), "16 MiB");
        assert_eq!(cap_text(SOURCE_PAGE_CAP), "64 MiB");
    }
}
