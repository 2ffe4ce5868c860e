//! Which host of the cluster an IP address is on: sans-IO, fed with this host's interface
//! addresses and the addresses each other host's daemon claims at its hello.
//!
//! lanes.toml's address of a host is that host's, always; another host claiming it is
//! refused. Addresses are claimed at hello only on authenticated links (a stranger cannot
//! claim anything), and a claim is refused when the address is one of this host's own, or
//! another host holds it. A host's new hello replaces its claims; a host that is Lost
//! keeps them, stale: they still answer (its connections may come back), but the first other
//! host to claim one takes it over (the address moved). Loopback, link-local, multicast and
//! unspecified addresses are nobody's: they cannot name one host of a cluster.

use std::collections::{BTreeSet, HashMap};
use std::net::IpAddr;

use crate::cluster::config::ClusterConfig;
use crate::cluster::proto::AddressOwner;
use crate::platform::net::is_host_address;

/// A claimed address: whose, and whether its host has been Lost since it claimed it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Claim {
    host: String,
    stale: bool,
}

/// Every address a host of the cluster is known by.
#[derive(Clone, Debug)]
pub(super) struct AddressBook {
    me: String,
    own: BTreeSet<IpAddr>,
    /// lanes.toml's address of this host (when it can name a host).
    configured_own: Option<IpAddr>,
    /// lanes.toml's addresses of the other hosts.
    configured: HashMap<IpAddr, String>,
    claims: HashMap<IpAddr, Claim>,
    /// lanes.toml's nodes, by the host they act on.
    nodes: HashMap<u32, String>,
}

/// An address a host's hello claimed and this book refused, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct RefusedClaim {
    pub(super) address: IpAddr,
    pub(super) why: String,
}

/// IPv4-mapped IPv6 addresses are IPv4 addresses (as sockets report them).
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

impl AddressBook {
    /// The book of host `me` of `cluster`, whose interfaces have the addresses `own`.
    pub(super) fn new(cluster: &ClusterConfig, me: &str, own: &[IpAddr]) -> AddressBook {
        let mut book = AddressBook {
            me: me.to_string(),
            own: BTreeSet::new(),
            configured_own: None,
            configured: HashMap::new(),
            claims: HashMap::new(),
            nodes: HashMap::new(),
        };
        for h in &cluster.hosts {
            book.nodes.extend(h.nodes.iter().map(|n| (n.get(), h.name.clone())));
            let ip = canonical(h.address.ip());
            if h.name == me {
                book.configured_own = Some(ip).filter(|ip| is_host_address(*ip));
            } else if is_host_address(ip) {
                book.configured.insert(ip, h.name.clone());
            }
        }
        book.set_own(own);
        book
    }

    /// Whether lanes.toml places `node` on host `host`.
    pub(super) fn node_is_of(&self, host: &str, node: u32) -> bool {
        self.nodes.get(&node).is_some_and(|h| h == host)
    }

    /// This host's interface addresses now (they may change: DHCP, an added link).
    pub(super) fn set_own(&mut self, own: &[IpAddr]) {
        self.own = own.iter().map(|ip| canonical(*ip)).filter(|ip| is_host_address(*ip)).collect();
        // lanes.toml's address of this host stays this host's even if no interface has it.
        self.own.extend(self.configured_own);
    }

    /// This host's own addresses (interfaces, and its address in lanes.toml).
    #[cfg(test)]
    pub(super) fn own(&self) -> Vec<IpAddr> {
        self.own.iter().copied().collect()
    }

    /// Host `host`'s daemon claimed `addresses` at a hello on an authenticated link: they
    /// replace its earlier claims. Returns the claims refused, with why (to log and count).
    pub(super) fn on_hello(&mut self, host: &str, addresses: &[IpAddr]) -> Vec<RefusedClaim> {
        self.claims.retain(|_, c| c.host != host);
        let mut refused = Vec::new();
        for &address in addresses {
            let address = canonical(address);
            let why = if !is_host_address(address) {
                Some("it cannot name one host (loopback, link-local, multicast or unspecified)".to_string())
            } else if self.own.contains(&address) {
                Some(format!("it is an address of this host ({})", self.me))
            } else if let Some(other) = self.configured.get(&address).filter(|o| o.as_str() != host) {
                Some(format!("lanes.toml gives it to host {other}"))
            } else {
                let holder = self.claims.get(&address).filter(|c| c.host != host && !c.stale);
                holder.map(|c| format!("host {} claimed it first", c.host))
            };
            match why {
                Some(why) => refused.push(RefusedClaim { address, why }),
                None => {
                    self.claims.insert(address, Claim { host: host.to_string(), stale: false });
                }
            }
        }
        refused
    }

    /// Host `host` is Lost: its claims still answer, but another host may take them over.
    pub(super) fn on_lost(&mut self, host: &str) {
        for c in self.claims.values_mut().filter(|c| c.host == host) {
            c.stale = true;
        }
    }

    /// Whose `ip` is.
    pub(super) fn owner(&self, ip: IpAddr) -> AddressOwner {
        let ip = canonical(ip);
        if ip.is_loopback() || self.own.contains(&ip) {
            return AddressOwner::ThisHost;
        }
        if let Some(h) = self.configured.get(&ip) {
            return AddressOwner::Host { host: h.clone() };
        }
        match self.claims.get(&ip) {
            Some(c) => AddressOwner::Host { host: c.host.clone() },
            None => AddressOwner::Nobody,
        }
    }

    /// Whether `ip` is host `host`'s.
    pub(super) fn is_of(&self, host: &str, ip: IpAddr) -> bool {
        matches!(self.owner(ip), AddressOwner::Host { host: h } if h == host)
    }

    /// Whether `ip` is this host's.
    pub(super) fn is_mine(&self, ip: IpAddr) -> bool {
        self.owner(ip) == AddressOwner::ThisHost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Hosts a, b, c at 10.77.0.1-3 in lanes.toml; this is a, whose interfaces have
    /// 10.77.0.1 and 192.168.5.1.
    fn book() -> AddressBook {
        let cluster = super::super::pairing::tests::cluster();
        AddressBook::new(&cluster, "a", &[ip("10.77.0.1"), ip("192.168.5.1"), ip("127.0.0.1"), ip("fe80::1")])
    }

    fn host(h: &str) -> AddressOwner {
        AddressOwner::Host { host: h.into() }
    }

    #[test]
    fn lanes_toml_and_interfaces_answer_before_any_hello() {
        let b = book();
        assert_eq!(b.owner(ip("10.77.0.1")), AddressOwner::ThisHost);
        assert_eq!(b.owner(ip("192.168.5.1")), AddressOwner::ThisHost);
        assert_eq!(b.owner(ip("127.0.0.5")), AddressOwner::ThisHost, "loopback is always local");
        assert_eq!(b.owner(ip("10.77.0.2")), host("b"));
        assert_eq!(b.owner(ip("::ffff:10.77.0.3")), host("c"), "IPv4-mapped as IPv4");
        assert_eq!(b.owner(ip("10.77.0.9")), AddressOwner::Nobody);
        assert_eq!(b.own(), vec![ip("10.77.0.1"), ip("192.168.5.1")], "no loopback or link-local");
        assert!(b.is_of("b", ip("10.77.0.2")) && !b.is_of("c", ip("10.77.0.2")));
        assert!(b.is_mine(ip("10.77.0.1")));
    }

    #[test]
    fn claims_at_hello_are_refused_for_another_hosts_addresses() {
        let mut b = book();
        // b claims its Ethernet address and an IPv6 one.
        assert!(b.on_hello("b", &[ip("10.77.0.2"), ip("10.88.0.2"), ip("fd77::2")]).is_empty());
        assert_eq!(b.owner(ip("10.88.0.2")), host("b"));
        assert_eq!(b.owner(ip("fd77::2")), host("b"));
        // c claims b's configured address, one b claimed, one of ours and a link-local one.
        let refused =
            b.on_hello("c", &[ip("10.77.0.3"), ip("10.77.0.2"), ip("10.88.0.2"), ip("192.168.5.1"), ip("fe80::3")]);
        let whys: Vec<(IpAddr, &str)> = refused.iter().map(|r| (r.address, r.why.as_str())).collect();
        assert_eq!(
            whys,
            vec![
                (ip("10.77.0.2"), "lanes.toml gives it to host b"),
                (ip("10.88.0.2"), "host b claimed it first"),
                (ip("192.168.5.1"), "it is an address of this host (a)"),
                (ip("fe80::3"), "it cannot name one host (loopback, link-local, multicast or unspecified)"),
            ]
        );
        assert_eq!(b.owner(ip("10.88.0.2")), host("b"), "the refused claim changed nothing");
        assert_eq!(b.owner(ip("10.77.0.3")), host("c"));
        // b's next hello replaces its claims: the address it gave up is nobody's.
        assert!(b.on_hello("b", &[ip("10.77.0.2")]).is_empty());
        assert_eq!(b.owner(ip("10.88.0.2")), AddressOwner::Nobody);
        assert_eq!(b.owner(ip("fd77::2")), AddressOwner::Nobody);
    }

    #[test]
    fn a_lost_hosts_claims_answer_until_another_host_takes_them_over() {
        let mut b = book();
        assert!(b.on_hello("b", &[ip("10.88.0.2")]).is_empty());
        b.on_lost("b");
        assert_eq!(b.owner(ip("10.88.0.2")), host("b"), "still answered: its connections may come back");
        assert!(b.on_hello("c", &[ip("10.88.0.2")]).is_empty(), "the address moved to c");
        assert_eq!(b.owner(ip("10.88.0.2")), host("c"));
        // lanes.toml's addresses never move.
        b.on_lost("b");
        assert_eq!(b.on_hello("c", &[ip("10.77.0.2")]).len(), 1);
    }
}
