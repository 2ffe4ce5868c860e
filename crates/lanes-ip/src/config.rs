//! The interface's configuration: `[ip]` of lanes.toml with its defaults, and the addresses
//! a node id gives (the id is the host part of an IPv4 and an IPv6 prefix).

use std::net::{Ipv4Addr, Ipv6Addr};

use lanes::config::{ConfigFile, IpSection};

/// The default IPv4 prefix: node 8 is 10.253.0.8.
pub const DEFAULT_IPV4: &str = "10.253.0.0/16";
/// The default IPv6 prefix (a unique local one; its global id spells "lanes").
pub const DEFAULT_IPV6: &str = "fd6c:616e:6573::/64";
/// The default MTU: large packets cost one record each, whatever their size.
pub const DEFAULT_MTU: u32 = 65520;
/// The smallest MTU: IPv6 needs 1280.
pub const MIN_MTU: u32 = 1280;
/// The largest MTU a TUN device takes.
pub const MAX_MTU: u32 = 65535;
/// The most queues (and rings per pair of nodes).
pub const MAX_QUEUES: usize = crate::ring::MAX_RINGS;
/// The default receive ring: 2 MiB holds 32 packets of 64 KiB.
pub const DEFAULT_RING_KIB: u64 = 2048;

/// An IPv4 prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix4 {
    pub net: Ipv4Addr,
    pub len: u8,
}

/// An IPv6 prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix6 {
    pub net: Ipv6Addr,
    pub len: u8,
}

fn split_prefix(text: &str) -> Result<(&str, u8), String> {
    let (addr, len) = text.trim().split_once('/').ok_or_else(|| format!("{text:?}: not ADDRESS/LENGTH"))?;
    let len = len.parse::<u8>().map_err(|_| format!("{text:?}: the prefix length is not a number"))?;
    Ok((addr, len))
}

impl Prefix4 {
    /// Parses `a.b.c.d/len`; the host bits must be zero and hold at least a node id of 4.
    pub fn parse(text: &str) -> Result<Prefix4, String> {
        let (addr, len) = split_prefix(text)?;
        let net: Ipv4Addr = addr.parse().map_err(|_| format!("{text:?}: not an IPv4 address"))?;
        if len > 29 {
            return Err(format!("{text:?}: /{len} leaves no room for node ids (at most /29)"));
        }
        let p = Prefix4 { net, len };
        if u32::from(net) & !p.mask() != 0 {
            return Err(format!("{text:?}: the host bits are not zero"));
        }
        Ok(p)
    }

    fn mask(self) -> u32 {
        if self.len == 0 {
            0
        } else {
            u32::MAX << (32 - self.len)
        }
    }

    /// The netmask, as the kernel's SIOCSIFNETMASK takes it.
    pub fn netmask(self) -> Ipv4Addr {
        Ipv4Addr::from(self.mask())
    }

    /// The address of `node`: the prefix with the node id as host part.
    pub fn address_of(self, node: u32) -> Result<Ipv4Addr, String> {
        let host_bits = 32 - u32::from(self.len);
        if host_bits < 32 && u64::from(node) >= (1u64 << host_bits) - 1 {
            return Err(format!(
                "node {node} does not fit the host part of {}/{} ({host_bits} bits; the last address is the \
                 broadcast address): use a shorter prefix in [ip] ipv4",
                self.net, self.len
            ));
        }
        Ok(Ipv4Addr::from(u32::from(self.net) | node))
    }

    /// The node whose address `a` is, if `a` is in the prefix (the host part may be any
    /// number; the caller checks it against the connected nodes).
    pub fn host_of(self, a: Ipv4Addr) -> Option<u32> {
        let a = u32::from(a);
        (a & self.mask() == u32::from(self.net)).then_some(a & !self.mask())
    }

    /// The prefix's broadcast address.
    pub fn broadcast(self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.net) | !self.mask())
    }
}

impl Prefix6 {
    /// Parses `addr/len`; the host bits must be zero and hold a 16-bit node id (/112 at most).
    pub fn parse(text: &str) -> Result<Prefix6, String> {
        let (addr, len) = split_prefix(text)?;
        let net: Ipv6Addr = addr.parse().map_err(|_| format!("{text:?}: not an IPv6 address"))?;
        if len > 112 {
            return Err(format!("{text:?}: /{len} leaves no room for 16-bit node ids (at most /112)"));
        }
        let p = Prefix6 { net, len };
        if u128::from(net) & !p.mask() != 0 {
            return Err(format!("{text:?}: the host bits are not zero"));
        }
        Ok(p)
    }

    fn mask(self) -> u128 {
        if self.len == 0 {
            0
        } else {
            u128::MAX << (128 - self.len)
        }
    }

    /// The address of `node` (node ids are at most 16 bits, and the prefix leaves 16).
    pub fn address_of(self, node: u32) -> Ipv6Addr {
        Ipv6Addr::from(u128::from(self.net) | u128::from(node))
    }

    /// The host part of `a`, if `a` is in the prefix and the host part fits a node id.
    pub fn host_of(self, a: Ipv6Addr) -> Option<u32> {
        let a = u128::from(a);
        if a & self.mask() != u128::from(self.net) {
            return None;
        }
        u32::try_from(a & !self.mask()).ok()
    }
}

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

    /// The configuration `section` gives, with the defaults for what it leaves out.
    pub fn from_section(section: Option<&IpSection>) -> Result<IpConfig, String> {
        let d = IpSection::default();
        let s = section.unwrap_or(&d);
        let name = s.name.clone().unwrap_or_else(|| "lanes0".into());
        if name.is_empty() || name.len() >= 16 || name.contains(['/', ' ', ':']) || name == "." || name == ".." {
            return Err(format!("name {name:?}: an interface name is 1 to 15 characters without '/', ':' or spaces"));
        }
        let ipv4 = Prefix4::parse(s.ipv4.as_deref().unwrap_or(DEFAULT_IPV4)).map_err(|e| format!("ipv4 {e}"))?;
        let ipv6 = Prefix6::parse(s.ipv6.as_deref().unwrap_or(DEFAULT_IPV6)).map_err(|e| format!("ipv6 {e}"))?;
        let mtu = s.mtu.unwrap_or(DEFAULT_MTU);
        if !(MIN_MTU..=MAX_MTU).contains(&mtu) {
            return Err(format!("mtu {mtu}: {MIN_MTU} (IPv6's least) to {MAX_MTU}"));
        }
        let queues = match s.queues.unwrap_or(0) {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()).min(MAX_QUEUES),
            n if n as usize > MAX_QUEUES => return Err(format!("queues {n}: at most {MAX_QUEUES}")),
            n => n as usize,
        };
        let kib = s.ring_kib.unwrap_or(DEFAULT_RING_KIB);
        if !kib.is_power_of_two() || !(256..=65536).contains(&kib) {
            return Err(format!("ring_kib {kib}: a power of two from 256 (three 64 KiB packets) to 65536"));
        }
        Ok(IpConfig { name, ipv4, ipv6, mtu, queues, ring_bytes: kib * 1024, offloads: s.offloads.unwrap_or(true) })
    }

    /// This node's two addresses; an error names the node and prefix that do not fit.
    pub fn addresses(&self, node: u32) -> Result<(Ipv4Addr, Ipv6Addr), String> {
        Ok((self.ipv4.address_of(node)?, self.ipv6.address_of(node)))
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
    }

    #[test]
    fn bad_sections_are_refused_naming_the_key() {
        let bad = |s: IpSection| IpConfig::from_section(Some(&s)).unwrap_err();
        assert!(bad(IpSection { mtu: Some(600), ..Default::default() }).contains("mtu 600"));
        assert!(bad(IpSection { mtu: Some(70000), ..Default::default() }).contains("mtu"));
        assert!(bad(IpSection { ipv4: Some("10.0.0.1/16".into()), ..Default::default() }).contains("host bits"));
        assert!(bad(IpSection { ipv4: Some("10.0.0.0".into()), ..Default::default() }).contains("ADDRESS/LENGTH"));
        assert!(bad(IpSection { ipv6: Some("fd00::/120".into()), ..Default::default() }).contains("at most /112"));
        assert!(bad(IpSection { ring_kib: Some(100), ..Default::default() }).contains("ring_kib"));
        assert!(bad(IpSection { queues: Some(99), ..Default::default() }).contains("queues"));
        assert!(bad(IpSection { name: Some("a/b".into()), ..Default::default() }).contains("name"));
        assert!(bad(IpSection { name: Some("x".repeat(16)), ..Default::default() }).contains("name"));
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
