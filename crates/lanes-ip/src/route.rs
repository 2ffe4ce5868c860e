//! Which node a packet goes to: the host part of its destination address (in the IPv4 or
//! IPv6 prefix, or the link-local fe80::/64), or every node for broadcast and multicast.

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::config::{Prefix4, Prefix6, LINK_LOCAL};

/// Where a packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// The node whose address the destination is (the host part; the caller checks that
    /// such a node is connected).
    Node(u32),
    /// Every connected node (broadcast, multicast).
    All,
    /// Not an address of the prefixes: lanes0 routes for nobody.
    NoRoute,
    /// Too short, or neither IPv4 nor IPv6.
    Malformed,
}

/// The destination of IP packet `pkt` (starting at its IP header).
pub fn route(pkt: &[u8], v4: Prefix4, v6: Prefix6) -> Dest {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 => {
            let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
            if dst.is_broadcast() || dst.is_multicast() || dst == v4.broadcast() {
                return Dest::All;
            }
            v4.host_of(dst).map_or(Dest::NoRoute, Dest::Node)
        }
        Some(6) if pkt.len() >= 40 => {
            let mut b = [0u8; 16];
            b.copy_from_slice(&pkt[24..40]);
            let dst = Ipv6Addr::from(b);
            if dst.is_multicast() {
                return Dest::All;
            }
            v6.host_of(dst).or_else(|| LINK_LOCAL.host_of(dst)).map_or(Dest::NoRoute, Dest::Node)
        }
        _ => Dest::Malformed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_packet(dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; 28];
        p[0] = 0x45;
        p[16..20].copy_from_slice(&dst);
        p
    }

    fn v6_packet(dst: Ipv6Addr) -> Vec<u8> {
        let mut p = vec![0u8; 48];
        p[0] = 0x60;
        p[24..40].copy_from_slice(&dst.octets());
        p
    }

    #[test]
    fn packets_go_to_the_node_of_their_destination() {
        let v4 = Prefix4::parse("10.253.0.0/16").unwrap();
        let v6 = Prefix6::parse("fd6c:616e:6573::/64").unwrap();
        assert_eq!(route(&v4_packet([10, 253, 0, 12]), v4, v6), Dest::Node(12));
        assert_eq!(route(&v4_packet([10, 253, 1, 4]), v4, v6), Dest::Node(260));
        assert_eq!(route(&v4_packet([10, 9, 0, 12]), v4, v6), Dest::NoRoute);
        assert_eq!(route(&v4_packet([10, 253, 255, 255]), v4, v6), Dest::All);
        assert_eq!(route(&v4_packet([255, 255, 255, 255]), v4, v6), Dest::All);
        assert_eq!(route(&v4_packet([224, 0, 0, 251]), v4, v6), Dest::All);
        assert_eq!(route(&v6_packet("fd6c:616e:6573::c".parse().unwrap()), v4, v6), Dest::Node(12));
        assert_eq!(route(&v6_packet("ff02::1".parse().unwrap()), v4, v6), Dest::All);
        assert_eq!(route(&v6_packet("2001:db8::1".parse().unwrap()), v4, v6), Dest::NoRoute);
        // Link-local: fe80::<node>; one the kernel made up (an interface id wider than a
        // node id) names no node.
        assert_eq!(route(&v6_packet("fe80::c".parse().unwrap()), v4, v6), Dest::Node(12));
        assert_eq!(route(&v6_packet("fe80::4ee5:6ddc:1192:f2a5".parse().unwrap()), v4, v6), Dest::NoRoute);
        assert_eq!(route(&v6_packet("fe80:1::c".parse().unwrap()), v4, v6), Dest::NoRoute);
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        let v4 = Prefix4::parse("10.253.0.0/16").unwrap();
        let v6 = Prefix6::parse("fd6c:616e:6573::/64").unwrap();
        for p in [&[][..], &[0x45; 19][..], &[0x60; 39][..], &[0x00; 64][..], &[0xff; 64][..]] {
            assert_eq!(route(p, v4, v6), Dest::Malformed);
        }
    }
}
