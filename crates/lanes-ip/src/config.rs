//! The interface's configuration: `[ip]` of lanes.toml with its defaults, and the addresses
//! a node id gives (the id is the host part of an IPv4 and an IPv6 prefix, and of the
//! link-local prefix fe80::/64).

use std::net::{Ipv4Addr, Ipv6Addr};

use lanes::config::{ConfigFile, IpSection};

pub use lanes::config::ip::{
    Prefix4, Prefix6, DEFAULT_IPV4, DEFAULT_IPV6, DEFAULT_MTU, DEFAULT_RING_KIB, MAX_MTU, MIN_MTU,
};

/// The link-local prefix: node N's link-local address is `fe80::N` (hex), so that a packet
/// to a peer's link-local address (an answer to a link-local multicast such as
/// `ping ff02::1%lanes0`) names its node.
pub const LINK_LOCAL: Prefix6 = Prefix6 { net: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), len: 64 };

/// The most queues (and rings per pair of nodes).
pub const MAX_QUEUES: usize = crate::ring::MAX_RINGS;
const _: () = assert!(MAX_QUEUES == lanes::config::ip::MAX_QUEUES as usize);

/// What `lanes ip up` sets up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpConfig {
    pub name: String,
    pub ipv4: Prefix4,
    pub ipv6: Prefix6,
    pub mtu: u32,
    /// Queues: transmit and receive threads, TUN queues, rings per pair of nodes.
    pub queues: usize,
    pub ring_bytes: u64,
    pub offloads: bool,
}

impl IpConfig {
    /// `[ip]` of the configuration file that `LANES_CONFIG` (or the default path) names, or
    /// the defaults when there is none.
    pub fn from_env() -> Result<IpConfig, String> {
        let file = ConfigFile::load_from_env().map_err(|e| e.to_string())?;
        let section = file.as_ref().and_then(ConfigFile::ip);
        IpConfig::from_section(section).map_err(|e| match &file {
            Some(f) => format!("{}: [ip] {e}", f.path().display()),
            None => format!("[ip] {e}"),
        })
    }

    /// The configuration `section` gives, with the defaults for what it leaves out (the
    /// checks are the configuration file's, [`IpSection::check`]).
    pub fn from_section(section: Option<&IpSection>) -> Result<IpConfig, String> {
        let v = section.cloned().unwrap_or_default().check([])?;
        let queues = match v.queues {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_QUEUES),
            n => n as usize,
        };
        Ok(IpConfig {
            name: v.name,
            ipv4: v.ipv4,
            ipv6: v.ipv6,
            mtu: v.mtu,
            queues,
            ring_bytes: v.ring_kib * 1024,
            offloads: v.offloads,
        })
    }

    /// This node's two addresses; an error names the node and prefix that do not fit.
    pub fn addresses(&self, node: u32) -> Result<(Ipv4Addr, Ipv6Addr), String> {
        Ok((self.ipv4.address_of(node)?, self.ipv6.address_of(node)))
    }

    /// This node's link-local address, `fe80::<node>`.
    pub fn link_local(node: u32) -> Ipv6Addr {
        LINK_LOCAL.address_of(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_give_each_node_its_addresses() {
        let c = IpConfig::from_section(None).unwrap();
        assert_eq!(c.name, "lanes0");
        assert_eq!(c.mtu, DEFAULT_MTU);
        assert!(c.queues >= 1 && c.queues <= MAX_QUEUES);
        let (v4, v6) = c.addresses(8).unwrap();
        assert_eq!(v4, "10.253.0.8".parse::<Ipv4Addr>().unwrap());
        assert_eq!(v6, "fd6c:616e:6573::8".parse::<Ipv6Addr>().unwrap());
        assert_eq!(c.addresses(260).unwrap().0, "10.253.1.4".parse::<Ipv4Addr>().unwrap());
        assert_eq!(c.ipv4.host_of("10.253.1.4".parse().unwrap()), Some(260));
        assert_eq!(c.ipv4.host_of("10.254.1.4".parse().unwrap()), None);
        assert_eq!(c.ipv6.host_of("fd6c:616e:6573::c".parse().unwrap()), Some(12));
        assert_eq!(c.ipv6.host_of("fd6c:616e:6574::c".parse().unwrap()), None);
        assert_eq!(c.ipv4.broadcast(), "10.253.255.255".parse::<Ipv4Addr>().unwrap());
        assert_eq!(IpConfig::link_local(12), "fe80::c".parse::<Ipv6Addr>().unwrap());
        assert_eq!(LINK_LOCAL.host_of("fe80::c".parse().unwrap()), Some(12));
    }

    #[test]
    fn bad_sections_are_refused_naming_the_key() {
        // The checks are the schema's (`IpSection::check`, tested there key by key); this
        // is the interface's configuration passing their errors on.
        let e = IpConfig::from_section(Some(&IpSection { mtu: Some(600), ..Default::default() })).unwrap_err();
        assert!(e.contains("mtu 600"), "{e}");
    }

    #[test]
    fn a_node_that_does_not_fit_the_prefix_is_named() {
        let c = IpConfig::from_section(Some(&IpSection { ipv4: Some("192.168.7.0/24".into()), ..Default::default() }))
            .unwrap();
        assert_eq!(c.addresses(252 - 4).unwrap().0, "192.168.7.248".parse::<Ipv4Addr>().unwrap());
        let e = c.addresses(256).unwrap_err();
        assert!(e.contains("node 256") && e.contains("192.168.7.0/24"), "{e}");
    }
}
