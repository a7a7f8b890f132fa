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

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
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
    /// `outbound.proxy`: the operator's own endpoint, which the connectors'
    /// client connects to whatever the allow-list says.
    proxy: Option<url::Url>,
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

    /// The same policy, with the connectors' requests going through `proxy`.
    pub fn with_proxy(mut self, proxy: Option<url::Url>) -> Self {
        self.proxy = proxy;
        self
    }

    /// The proxy the connectors' requests go through, if any.
    pub fn proxy(&self) -> Option<&url::Url> {
        self.proxy.as_ref()
    }

    /// Whether `host` is the proxy's host (resolved to connect to the proxy).
    fn is_proxy(&self, host: &str) -> bool {
        self.proxy
            .as_ref()
            .and_then(|p| p.host_str())
            .is_some_and(|p| {
                p.trim_matches(['[', ']'])
                    .eq_ignore_ascii_case(host.trim_end_matches('.'))
            })
    }

    /// Whether `host` is listed by name.
    fn host_listed(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        self.hosts.contains(&host)
    }

    /// Checks one address `host` resolved to (with the port the connection
    /// goes to); the error is one sentence.
    pub fn check(&self, host: &str, addr: SocketAddr) -> Result<(), String> {
        let (ip, wrapping) = judged(addr.ip());
        let carried = match wrapping {
            Some(wrapping) => format!("{} ({wrapping}, carrying {ip})", addr.ip()),
            None => ip.to_string(),
        };
        if self.own.is_some_and(|own| {
            own.port() == addr.port()
                && (own.ip() == ip
                    || own.ip() == addr.ip()
                    // Listening everywhere: any address of this machine;
                    // those a sync can name are the inside ones.
                    || (own.ip().is_unspecified() && inside(ip).is_some()))
        }) {
            return Err(format!(
                "{host} ({carried}, port {}) is syncward's own admin address; no sync may call it",
                addr.port()
            ));
        }
        let Some(kind) = inside(ip) else {
            return Ok(());
        };
        let listed = |ip: IpAddr| self.nets.iter().any(|net| net.contains(&ip));
        if self.host_listed(host) || listed(ip) || listed(addr.ip()) {
            return Ok(());
        }
        Err(format!(
            "{host} resolves to {carried}, a {kind} address, which syncs may not reach unless \
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

/// The IPv4 address an IPv6 address carries, with the name of the wrapping:
/// a packet to it reaches (or is translated to) that IPv4 address, so the
/// policy judges that one. IPv4-mapped and -translated (SIIT), IPv4-
/// compatible, NAT64 (64:ff9b::/96; behind a NAT64 gateway it reaches the
/// IPv4 address, and DNS64 answers any name of an inside host that way),
/// 6to4 (2002::/16) and Teredo (2001::/32, the client's address inverted).
fn embedded_v4(v6: Ipv6Addr) -> Option<(Ipv4Addr, &'static str)> {
    let s = v6.segments();
    let o = v6.octets();
    let last = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some((v4, "IPv4-mapped"));
    }
    if s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0 {
        return Some((last, "IPv4-translated"));
    }
    // `::` and `::1` are the unspecified and loopback addresses themselves.
    if s[..6] == [0; 6] && !v6.is_unspecified() && !v6.is_loopback() {
        return Some((last, "IPv4-compatible"));
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        return Some((last, "NAT64"));
    }
    if s[0] == 0x2002 {
        return Some((Ipv4Addr::new(o[2], o[3], o[4], o[5]), "6to4"));
    }
    if s[0] == 0x2001 && s[1] == 0 {
        return Some((Ipv4Addr::from(!u32::from(last)), "Teredo"));
    }
    None
}

/// The address the policy judges: `ip` itself, or the IPv4 address an IPv6
/// address carries (`embedded_v4`), with how it was carried.
fn judged(ip: IpAddr) -> (IpAddr, Option<&'static str>) {
    match ip {
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some((v4, wrapping)) => (IpAddr::V4(v4), Some(wrapping)),
            None => (ip, None),
        },
        v4 => (v4, None),
    }
}

/// Special-purpose IPv4 ranges (IANA's IPv4 Special-Purpose Address
/// Registry, and multicast) that are not globally reachable, with what they
/// are. Checked after `V4_GLOBAL`, the registry's global entries inside them.
const V4_INSIDE: &[(&str, &str)] = &[
    ("0.0.0.0/8", "unspecified (this network)"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared (CGNAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local (cloud metadata)"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignment"),
    ("192.0.2.0/24", "documentation"),
    ("192.88.99.0/24", "deprecated 6to4 relay"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved or broadcast"),
];

/// Entries of the IPv4 registry that are globally reachable although a
/// wider range in `V4_INSIDE` holds them (PCP and TURN anycast).
const V4_GLOBAL: &[&str] = &["192.0.0.9/32", "192.0.0.10/32"];

/// The same for IPv6 (IANA's IPv6 Special-Purpose Address Registry, and
/// site-local, link-local, multicast). The wrappings of IPv4 never get here:
/// they are judged as the IPv4 address they carry.
const V6_INSIDE: &[(&str, &str)] = &[
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "local-use NAT64"),
    ("100::/64", "discard-only"),
    ("100:0:0:1::/64", "dummy"),
    ("2001::/23", "IETF protocol assignment"),
    ("2001:db8::/32", "documentation"),
    ("3fff::/20", "documentation"),
    ("5f00::/16", "segment routing (SRv6)"),
    ("fc00::/7", "private (unique local)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
];

/// Entries of the IPv6 registry that are globally reachable although
/// 2001::/23 holds them (anycast services, AMT, AS112, ORCHIDv2, drone IDs).
const V6_GLOBAL: &[&str] = &[
    "2001:1::1/128",
    "2001:1::2/128",
    "2001:1::3/128",
    "2001:3::/32",
    "2001:4:112::/48",
    "2001:20::/28",
    "2001:30::/28",
];

/// The ranges above, parsed once.
struct SpecialRanges {
    inside: Vec<(IpNet, &'static str)>,
    global: Vec<IpNet>,
}

fn special_ranges() -> &'static SpecialRanges {
    static RANGES: OnceLock<SpecialRanges> = OnceLock::new();
    RANGES.get_or_init(|| {
        // The tables are constants of this file; the unit test parses each.
        let net = |text: &str| text.parse::<IpNet>().expect("a CIDR range of the table");
        SpecialRanges {
            inside: V4_INSIDE
                .iter()
                .chain(V6_INSIDE)
                .map(|(range, kind)| (net(range), *kind))
                .collect(),
            global: V4_GLOBAL.iter().chain(V6_GLOBAL).map(|r| net(r)).collect(),
        }
    })
}

/// What kind of inside address `ip` (already unwrapped by `judged`) is;
/// `None` for a public one.
fn inside(ip: IpAddr) -> Option<&'static str> {
    let ranges = special_ranges();
    if ranges.global.iter().any(|net| net.contains(&ip)) {
        return None;
    }
    ranges
        .inside
        .iter()
        .find(|(net, _)| net.contains(&ip))
        .map(|(_, kind)| *kind)
}

/// Installs the policy the connectors' client enforces (at start, and again
/// on a reload).
pub fn install(policy: OutboundPolicy) {
    let slot = POLICY.get_or_init(|| RwLock::new(Arc::new(OutboundPolicy::default())));
    // A poisoned lock only follows a panic elsewhere; the value is whole.
    *slot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
}

/// Puts a new `outbound.allow` in force (SIGHUP), keeping the daemon's own
/// address and proxy. Connections made from then on are checked against it;
/// one the connectors' client keeps alive from before lasts until it idles
/// out.
pub fn replace_allow(allow: &[String]) -> Result<(), String> {
    let now = current();
    install(OutboundPolicy::new(allow, now.own)?.with_proxy(now.proxy.clone()));
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

/// The connectors' resolver: the system's, then the policy on every address
/// with the port the connection goes to (reqwest hands a resolver only the
/// name, so each client resolves for one port: `client::http_client`).
#[derive(Debug, Default)]
pub struct PolicyResolver {
    port: u16,
}

impl PolicyResolver {
    pub fn for_port(port: u16) -> Self {
        PolicyResolver { port }
    }
}

impl reqwest::dns::Resolve for PolicyResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        let port = self.port;
        Box::pin(async move {
            let policy = current();
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
                .await?
                .collect();
            // The proxy is the operator's own endpoint, resolved to reach it.
            let checked = if policy.is_proxy(&host) {
                &[][..]
            } else {
                &addrs[..]
            };
            for addr in checked {
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

    /// Every entry of IANA's IPv4 and IPv6 Special-Purpose Address
    /// Registries (as of 2025), and the other ranges that are not global
    /// (multicast, site-local), with its verdict under an empty allow-list:
    /// `true` refused, `false` reachable. The first and the last address of
    /// each range are judged.
    #[test]
    fn every_special_purpose_range_has_its_verdict() {
        let registry: &[(&str, bool)] = &[
            // IPv4 (RFC 6890 and successors).
            ("0.0.0.0/8", true),
            ("0.0.0.0/32", true),
            ("10.0.0.0/8", true),
            ("100.64.0.0/10", true),
            ("127.0.0.0/8", true),
            ("169.254.0.0/16", true),
            ("172.16.0.0/12", true),
            ("192.0.0.0/24", true),
            ("192.0.0.0/29", true),
            ("192.0.0.8/32", true),
            ("192.0.0.9/32", false),
            ("192.0.0.10/32", false),
            ("192.0.0.170/32", true),
            ("192.0.0.171/32", true),
            ("192.0.2.0/24", true),
            ("192.31.196.0/24", false),
            ("192.52.193.0/24", false),
            ("192.88.99.0/24", true),
            ("192.168.0.0/16", true),
            ("192.175.48.0/24", false),
            ("198.18.0.0/15", true),
            ("198.51.100.0/24", true),
            ("203.0.113.0/24", true),
            ("224.0.0.0/4", true),
            ("240.0.0.0/4", true),
            ("255.255.255.255/32", true),
            // IPv6 (RFC 6890 and successors).
            ("::1/128", true),
            ("::/128", true),
            ("64:ff9b:1::/48", true),
            ("100::/64", true),
            ("100:0:0:1::/64", true),
            ("2001::/23", true),
            ("2001:1::1/128", false),
            ("2001:1::2/128", false),
            ("2001:1::3/128", false),
            ("2001:2::/48", true),
            ("2001:3::/32", false),
            ("2001:4:112::/48", false),
            ("2001:10::/28", true),
            ("2001:20::/28", false),
            ("2001:30::/28", false),
            ("2001:db8::/32", true),
            ("2620:4f:8000::/48", false),
            ("3fff::/20", true),
            ("5f00::/16", true),
            ("fc00::/7", true),
            ("fe80::/10", true),
            ("fec0::/10", true),
            ("ff00::/8", true),
        ];
        let strict = OutboundPolicy::default();
        for (range, refused) in registry {
            let net: IpNet = range.parse().expect("a range");
            for ip in [net.network(), net.broadcast()] {
                let verdict = strict.check("h", SocketAddr::new(ip, 443));
                assert_eq!(verdict.is_err(), *refused, "{range}: {ip}: {verdict:?}");
            }
        }
        // The wrappings of IPv4 (IPv4-mapped and -translated, -compatible,
        // NAT64, 6to4, Teredo) are judged as the IPv4 address they carry:
        // the metadata address refused, a public one reachable.
        for (wrapped, carried) in [
            ("::ffff:a9fe:a9fe", "169.254.169.254"),
            ("::ffff:0:a9fe:a9fe", "169.254.169.254"),
            ("::a9fe:a9fe", "169.254.169.254"),
            ("64:ff9b::a9fe:a9fe", "169.254.169.254"),
            ("2002:a9fe:a9fe::1", "169.254.169.254"),
            ("2001:0:4136:e378:8000:63bf:5601:5601", "169.254.169.254"),
            ("64:ff9b::7f00:1", "127.0.0.1"),
            ("2002:c0a8:101::", "192.168.1.1"),
        ] {
            let why = strict.check("h", at(wrapped)).expect_err(wrapped);
            assert!(why.contains(carried), "{wrapped}: {why}");
        }
        for public in [
            "::ffff:808:808",
            "64:ff9b::808:808",
            "2002:808:808::",
            "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
        ] {
            assert!(strict.check("h", at(public)).is_ok(), "{public}");
        }
        // The tables parse whole.
        assert_eq!(
            special_ranges().inside.len(),
            V4_INSIDE.len() + V6_INSIDE.len()
        );
    }

    /// The own address is judged with the port the connection goes to, as
    /// the address it carries, and an admin server listening everywhere is
    /// every inside address of this machine with that port.
    #[test]
    fn the_own_address_is_matched_by_port_and_carried_address() {
        let loopback = vec!["127.0.0.0/8".to_string(), "::1".to_string()];
        let own: SocketAddr = "127.0.0.1:8080".parse().expect("an address");
        let policy = OutboundPolicy::new(&loopback, Some(own)).expect("a policy");
        let port = |ip: &str, port: u16| SocketAddr::new(ip.parse().expect("an address"), port);
        assert!(policy.check("localhost", port("127.0.0.1", 8080)).is_err());
        assert!(policy.check("h", port("::ffff:127.0.0.1", 8080)).is_err());
        assert!(policy.check("localhost", port("127.0.0.1", 8081)).is_ok());
        let everywhere: SocketAddr = "0.0.0.0:8080".parse().expect("an address");
        let policy = OutboundPolicy::new(&loopback, Some(everywhere)).expect("a policy");
        assert!(policy.check("localhost", port("127.0.0.2", 8080)).is_err());
        assert!(policy.check("localhost", port("::1", 8080)).is_err());
        assert!(
            policy
                .check("example.com", port("93.184.216.34", 8080))
                .is_ok()
        );
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
