//! `[ip]` of `lanes.toml`: the IP interface over the fabric (`lanes ip up`, crates/lanes-ip,
//! docs/ip-interface.md). The section is checked when the file is parsed, so a bad value is
//! an error of every command that reads the file, naming the key, not only of `lanes ip
//! up`; the interface takes the defaults for what the section leaves out.

use std::net::{Ipv4Addr, Ipv6Addr};

use serde::Deserialize;

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
pub const MAX_QUEUES: u32 = 16;
/// The default receive ring: 2 MiB holds 32 packets of 64 KiB.
pub const DEFAULT_RING_KIB: u64 = 2048;
/// The interface's default name.
pub const DEFAULT_NAME: &str = "lanes0";

/// `[ip]`: what `lanes ip up` sets up. Every key is optional.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IpSection {
    /// The interface's name (default `lanes0`).
    pub name: Option<String>,
    /// The IPv4 prefix whose host part is the node id, as `"10.253.0.0/16"`.
    pub ipv4: Option<String>,
    /// The IPv6 prefix whose host part is the node id, as `"fd6c:616e:6573::/64"`.
    pub ipv6: Option<String>,
    /// The interface's MTU, 1280 to 65535.
    pub mtu: Option<u32>,
    /// Queues (one transmit and one receive thread each); 0: one per CPU.
    pub queues: Option<u32>,
    /// KiB of each receive ring (per peer and queue).
    pub ring_kib: Option<u64>,
    /// TSO/USO and checksum offload through the virtio-net header.
    pub offloads: Option<bool>,
}

/// A section's values, checked, with the defaults for what it leaves out (`queues` stays
/// 0 for "one per CPU", which the interface resolves).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpValues {
    pub name: String,
    pub ipv4: Prefix4,
    pub ipv6: Prefix6,
    pub mtu: u32,
    pub queues: u32,
    pub ring_kib: u64,
    pub offloads: bool,
}

impl IpSection {
    /// Checks every value (an error names the key and why), and that each of `nodes` has an
    /// address in the IPv4 prefix.
    pub fn check(&self, nodes: impl IntoIterator<Item = u32>) -> std::result::Result<IpValues, String> {
        let name = self.name.clone().unwrap_or_else(|| DEFAULT_NAME.into());
        if name.is_empty() || name.len() >= 16 || name.contains(['/', ' ', ':']) || name == "." || name == ".." {
            return Err(format!("name {name:?}: an interface name is 1 to 15 characters without '/', ':' or spaces"));
        }
        let ipv4 = Prefix4::parse(self.ipv4.as_deref().unwrap_or(DEFAULT_IPV4)).map_err(|e| format!("ipv4 {e}"))?;
        let ipv6 = Prefix6::parse(self.ipv6.as_deref().unwrap_or(DEFAULT_IPV6)).map_err(|e| format!("ipv6 {e}"))?;
        let mtu = self.mtu.unwrap_or(DEFAULT_MTU);
        if !(MIN_MTU..=MAX_MTU).contains(&mtu) {
            return Err(format!("mtu {mtu}: {MIN_MTU} (IPv6's least) to {MAX_MTU}"));
        }
        let queues = self.queues.unwrap_or(0);
        if queues > MAX_QUEUES {
            return Err(format!("queues {queues}: at most {MAX_QUEUES}"));
        }
        let ring_kib = self.ring_kib.unwrap_or(DEFAULT_RING_KIB);
        if !ring_kib.is_power_of_two() || !(256..=65536).contains(&ring_kib) {
            return Err(format!("ring_kib {ring_kib}: a power of two from 256 (three 64 KiB packets) to 65536"));
        }
        for node in nodes {
            ipv4.address_of(node).map_err(|e| format!("ipv4: {e}"))?;
        }
        Ok(IpValues { name, ipv4, ipv6, mtu, queues, ring_kib, offloads: self.offloads.unwrap_or(true) })
    }
}

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

fn split_prefix(text: &str) -> std::result::Result<(&str, u8), String> {
    let (addr, len) = text.trim().split_once('/').ok_or_else(|| format!("{text:?}: not ADDRESS/LENGTH"))?;
    let len = len.parse::<u8>().map_err(|_| format!("{text:?}: the prefix length is not a number"))?;
    Ok((addr, len))
}

impl Prefix4 {
    /// Parses `a.b.c.d/len`; the host bits must be zero and hold at least a node id of 4.
    pub fn parse(text: &str) -> std::result::Result<Prefix4, String> {
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
    pub fn address_of(self, node: u32) -> std::result::Result<Ipv4Addr, String> {
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
    pub fn parse(text: &str) -> std::result::Result<Prefix6, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_sections_are_refused_naming_the_key() {
        let bad = |s: IpSection| s.check([]).unwrap_err();
        assert!(bad(IpSection { mtu: Some(600), ..Default::default() }).contains("mtu 600"));
        assert!(bad(IpSection { mtu: Some(70000), ..Default::default() }).contains("mtu"));
        assert!(bad(IpSection { ipv4: Some("10.0.0.1/16".into()), ..Default::default() }).contains("host bits"));
        assert!(bad(IpSection { ipv4: Some("10.0.0.0".into()), ..Default::default() }).contains("ADDRESS/LENGTH"));
        assert!(bad(IpSection { ipv6: Some("fd00::/120".into()), ..Default::default() }).contains("at most /112"));
        assert!(bad(IpSection { ring_kib: Some(100), ..Default::default() }).contains("ring_kib"));
        assert!(bad(IpSection { queues: Some(99), ..Default::default() }).contains("queues"));
        assert!(bad(IpSection { name: Some("a/b".into()), ..Default::default() }).contains("name"));
        assert!(bad(IpSection { name: Some("x".repeat(16)), ..Default::default() }).contains("name"));
        let small = IpSection { ipv4: Some("192.168.7.0/24".into()), ..Default::default() };
        assert!(small.check([4, 248]).is_ok());
        let e = small.check([4, 256]).unwrap_err();
        assert!(e.contains("ipv4") && e.contains("node 256") && e.contains("192.168.7.0/24"), "{e}");
    }

    #[test]
    fn defaults_fill_what_the_section_leaves_out() {
        let v = IpSection::default().check([4, 0xFFFC]).unwrap();
        assert_eq!(v.name, DEFAULT_NAME);
        assert_eq!((v.mtu, v.queues, v.ring_kib, v.offloads), (DEFAULT_MTU, 0, DEFAULT_RING_KIB, true));
        assert_eq!(v.ipv4, Prefix4::parse(DEFAULT_IPV4).unwrap());
        assert_eq!(v.ipv6, Prefix6::parse(DEFAULT_IPV6).unwrap());
    }
}
