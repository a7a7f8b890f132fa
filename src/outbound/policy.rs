//! Where a workspace's sources and destinations may connect: anywhere on the
//! internet, and nowhere inside unless the operator lists it
//! (`outbound.allow`). Loopback, link-local (169.254.0.0/16 holds the cloud
//! metadata service), private, shared (CGNAT), unspecified and multicast
//! addresses, and the daemon's own admin address, are refused. The check runs
//! on the address actually connected to — the connectors' HTTP client
//! resolves names through `PolicyResolver` — so a name that resolved to a
//! public address when the sync was applied and to 127.0.0.1 now (DNS
//! rebinding) is refused at connect time; `sync apply` checks too, to say so
//! early. The operator's own endpoints (the alert webhook, the store) are not
//! subject to it.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock, RwLock};

use ipnet::IpNet;

/// The installed policy; `None` until `install` (the strict default then).
static POLICY: OnceLock<RwLock<Arc<OutboundPolicy>>> = OnceLock::new();

/// The operator's allow-list and the daemon's own address.
#[derive(Debug, Clone, Default)]
pub struct OutboundPolicy {
    hosts: Vec<String>,
    nets: Vec<IpNet>,
    /// The admin HTTP address: never a destination, even when allowed.
    own: Option<SocketAddr>,
}

impl OutboundPolicy {
    /// From `outbound.allow`: host names (exact, case-insensitive) and
    /// addresses or CIDR ranges. The error names the entry.
    pub fn new(allow: &[String], own: Option<SocketAddr>) -> Result<Self, String> {
        let mut policy = OutboundPolicy {
            own,
            ..OutboundPolicy::default()
        };
        for entry in allow {
            let entry = entry.trim();
            // `SYNCWARD__OUTBOUND__ALLOW=` (empty) lists nothing.
            if entry.is_empty() {
                continue;
            }
            if let Ok(net) = entry.parse::<IpNet>() {
                policy.nets.push(net);
            } else if let Ok(ip) = entry.parse::<IpAddr>() {
                policy.nets.push(IpNet::from(ip));
            } else if entry
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
            {
                policy.hosts.push(entry.to_ascii_lowercase());
            } else {
                return Err(format!(
                    "\"{}\" is not a host name, an address or a CIDR range",
                    entry.escape_default()
                ));
            }
        }
        Ok(policy)
    }

    /// Whether `host` is listed by name.
    fn host_listed(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    /// Checks one address `host` resolved to; the error is one sentence.
    pub fn check(&self, host: &str, addr: SocketAddr) -> Result<(), String> {
        let ip = canonical(addr.ip());
        if self.own.is_some_and(|own| {
            own.port() == addr.port() && (own.ip() == ip || own.ip().is_unspecified())
        }) {
            return Err(format!(
                "{host} ({addr}) is syncward's own admin address; no sync may call it"
            ));
        }
        let Some(kind) = inside(ip) else {
            return Ok(());
        };
        if self.host_listed(host) || self.nets.iter().any(|net| net.contains(&ip)) {
            return Ok(());
        }
        Err(format!(
            "{host} resolves to {ip}, a {kind} address, which syncs may not reach unless \
             outbound.allow lists the host or the address"
        ))
    }

    /// Checks every address `host` resolves to now (what `sync apply`
    /// does; a run checks the address it connects to). A name that does not
    /// resolve here passes: it may resolve where the daemon runs, and is
    /// checked there when connected to.
    pub async fn check_host(&self, host: &str, port: u16) -> Result<(), String> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            return self.check(host, SocketAddr::new(ip, port));
        }
        let Ok(addrs) = tokio::net::lookup_host((host, port)).await else {
            return Ok(());
        };
        let addrs: Vec<SocketAddr> = addrs.collect();
        for addr in addrs {
            self.check(host, addr)?;
        }
        Ok(())
    }

    /// Resolves `host` once, checks every address it gave, and returns the
    /// one to connect to: a client that connects to it (not to the name,
    /// which could resolve elsewhere a moment later) reaches what was
    /// checked. `Err(None)`: the name does not resolve now (an outage,
    /// retried); `Err(Some(why))`: the policy refuses it.
    pub async fn resolve_checked(
        &self,
        host: &str,
        port: u16,
    ) -> Result<SocketAddr, Option<String>> {
        if let Ok(ip) = host.parse::<IpAddr>() {
            let addr = SocketAddr::new(ip, port);
            return self.check(host, addr).map(|()| addr).map_err(Some);
        }
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
            .await
            .map_err(|_| None)?
            .collect();
        for addr in &addrs {
            self.check(host, *addr).map_err(Some)?;
        }
        addrs.first().copied().ok_or(None)
    }

    /// Checks a URL whose host is an address literal, which the client's
    /// resolver never sees (a name is checked when it is resolved, at
    /// connect time). A connector checks its URL when it opens.
    pub fn check_literal(&self, url: &url::Url) -> Result<(), String> {
        let port = url.port_or_known_default().unwrap_or(0);
        match url.host() {
            Some(url::Host::Ipv4(ip)) => {
                self.check(&ip.to_string(), SocketAddr::new(ip.into(), port))
            }
            Some(url::Host::Ipv6(ip)) => {
                self.check(&ip.to_string(), SocketAddr::new(ip.into(), port))
            }
            Some(url::Host::Domain(_)) => Ok(()),
            None => Err("the URL names no host".into()),
        }
    }

    /// Checks a URL's host (an address literal directly, a name by
    /// resolving it).
    pub async fn check_url(&self, url: &url::Url) -> Result<(), String> {
        match url.host() {
            Some(url::Host::Domain(name)) => {
                self.check_host(name, url.port_or_known_default().unwrap_or(0))
                    .await
            }
            _ => self.check_literal(url),
        }
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// What kind of inside address `ip` is; `None` for a public one.
fn inside(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Some("loopback")
            } else if v4.is_link_local() {
                Some("link-local (cloud metadata)")
            } else if v4.is_private() {
                Some("private")
            } else if a == 100 && (64..128).contains(&b) {
                Some("shared (CGNAT)")
            } else if v4.is_unspecified() || a == 0 {
                Some("unspecified")
            } else if v4.is_multicast() || v4.is_broadcast() || a >= 240 {
                Some("multicast or reserved")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_unspecified() {
                Some("unspecified")
            } else if first & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if first & 0xfe00 == 0xfc00 {
                Some("private (unique local)")
            } else if v6.is_multicast() {
                Some("multicast")
            } else {
                None
            }
        }
    }
}

/// Installs the policy the connectors' client enforces (at start, and again
/// on a reload).
pub fn install(policy: OutboundPolicy) {
    let slot = POLICY.get_or_init(|| RwLock::new(Arc::new(OutboundPolicy::default())));
    // A poisoned lock only follows a panic elsewhere; the value is whole.
    *slot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
}

/// Puts a new `outbound.allow` in force (SIGHUP), keeping the daemon's own
/// address. Connections made from then on are checked against it; one the
/// connectors' client keeps alive from before lasts until it idles out.
pub fn replace_allow(allow: &[String]) -> Result<(), String> {
    let own = current().own;
    install(OutboundPolicy::new(allow, own)?);
    Ok(())
}

/// What a connector checks when it opens: its URL `field` (`source.url`,
/// …) under the policy in force; the error names the field.
pub fn check_connector_url(url: &url::Url, field: &str) -> Result<(), String> {
    current()
        .check_literal(url)
        .map_err(|why| format!("{field}: {why}"))
}

/// The policy in force (the strict default when none was installed).
pub fn current() -> Arc<OutboundPolicy> {
    match POLICY.get() {
        Some(slot) => slot.read().unwrap_or_else(|e| e.into_inner()).clone(),
        None => Arc::new(OutboundPolicy::default()),
    }
}

/// A connection the policy refused (inside the client's error chain).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PolicyRefused(pub String);

/// The policy's refusal behind a client error, if that is what it is: a
/// setting to change, not an outage to wait out.
pub fn refused(e: &reqwest::Error) -> Option<String> {
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        if let Some(refused) = err.downcast_ref::<PolicyRefused>() {
            return Some(refused.0.clone());
        }
        source = err.source();
    }
    None
}

/// The connectors' resolver: the system's, then the policy on every address.
#[derive(Debug, Default)]
pub struct PolicyResolver;

impl reqwest::dns::Resolve for PolicyResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let policy = current();
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            for addr in &addrs {
                policy.check(&host, *addr).map_err(
                    |why| -> Box<dyn std::error::Error + Send + Sync> {
                        Box::new(PolicyRefused(why))
                    },
                )?;
            }
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().expect("an address"), 443)
    }

    #[test]
    fn inside_addresses_are_refused_unless_listed_and_the_own_address_always() {
        let strict = OutboundPolicy::default();
        for ip in [
            "127.0.0.1",
            "169.254.169.254",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
        ] {
            let why = strict.check("h", at(ip)).expect_err(ip);
            assert!(why.contains("outbound.allow"), "{why}");
        }
        for ip in ["93.184.216.34", "2606:2800:220:1::1", "8.8.8.8"] {
            assert!(strict.check("h", at(ip)).is_ok(), "{ip}");
        }
        let own: SocketAddr = "127.0.0.1:8080".parse().expect("an address");
        let allowed = OutboundPolicy::new(
            &[
                "127.0.0.1".into(),
                "10.0.0.0/8".into(),
                "Hooks.Internal".into(),
            ],
            Some(own),
        )
        .expect("a policy");
        assert!(allowed.check("x", at("127.0.0.1")).is_ok());
        assert!(allowed.check("x", at("10.9.9.9")).is_ok());
        assert!(allowed.check("hooks.internal", at("192.168.5.5")).is_ok());
        assert!(allowed.check("other.internal", at("192.168.5.5")).is_err());
        let why = allowed.check("x", own).expect_err("own address");
        assert!(why.contains("own admin address"), "{why}");
        assert!(OutboundPolicy::new(&["http://x".into()], None).is_err());
    }
}
