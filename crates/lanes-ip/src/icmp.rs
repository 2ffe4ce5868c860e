//! "Destination unreachable" for a packet to an address of the prefixes that no connected
//! node has: an ICMP (type 3, code 1: host unreachable) or ICMPv6 (type 1, code 3: address
//! unreachable) error written back into the TUN device, as a router on the path would send
//! it, so that programs see an error (ping's "Destination Host Unreachable", a connect that
//! fails with EHOSTUNREACH) instead of silence until their own timeout.
//!
//! The error comes from the unreachable address itself: lanes0 has no router address, and
//! the kernel drops, as martian, a packet that claims to come from one of its own
//! addresses. As RFC 1122 (3.2.2) and RFC 4443 (2.4) require, no error answers an error,
//! a packet from an address that is not unicast, or (IPv4) a fragment other than the first.
//! The error quotes as much of the packet as keeps it within 576 bytes (IPv4) or 1280
//! (IPv6), the least MTUs.

use std::net::{Ipv4Addr, Ipv6Addr};

/// The hop limit of the errors.
const TTL: u8 = 64;
/// IPv4 errors are at most this long (RFC 1812 4.3.2.3).
const MAX_V4: usize = 576;
/// IPv6 errors are at most this long (RFC 4443 2.4 (c)).
const MAX_V6: usize = 1280;

/// The error answering `pkt` (an IP packet from its first byte), or `None` when none may be
/// sent for it.
pub fn unreachable(pkt: &[u8]) -> Option<Vec<u8>> {
    match pkt.first()? >> 4 {
        4 => v4(pkt),
        6 => v6(pkt),
        _ => None,
    }
}

fn v4(pkt: &[u8]) -> Option<Vec<u8>> {
    let ihl = usize::from(pkt[0] & 0xf) * 4;
    if ihl < 20 || pkt.len() < ihl {
        return None;
    }
    let fragment_offset = u16::from_be_bytes([pkt[6], pkt[7]]) & 0x1fff;
    let src = Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]);
    let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
    let proto = pkt[9];
    // ICMP errors: destination unreachable, source quench, redirect, time exceeded,
    // parameter problem.
    let is_error = proto == 1 && pkt.get(ihl).is_some_and(|t| matches!(t, 3 | 4 | 5 | 11 | 12));
    if fragment_offset != 0 || is_error || !unicast4(src) || !unicast4(dst) {
        return None;
    }
    let quote = &pkt[..pkt.len().min(MAX_V4 - 28)];
    let len = 28 + quote.len();
    let mut out = Vec::with_capacity(len);
    out.extend_from_slice(&[0x45, 0, (len >> 8) as u8, len as u8, 0, 0, 0, 0, TTL, 1, 0, 0]);
    out.extend_from_slice(&dst.octets());
    out.extend_from_slice(&src.octets());
    let sum = checksum(0, &out);
    out[10..12].copy_from_slice(&sum.to_be_bytes());
    out.extend_from_slice(&[3, 1, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(quote);
    let sum = checksum(0, &out[20..]);
    out[22..24].copy_from_slice(&sum.to_be_bytes());
    Some(out)
}

fn unicast4(a: Ipv4Addr) -> bool {
    !(a.is_unspecified() || a.is_broadcast() || a.is_multicast() || a.is_loopback())
}

fn v6(pkt: &[u8]) -> Option<Vec<u8>> {
    if pkt.len() < 40 {
        return None;
    }
    let addr = |at: usize| {
        let mut b = [0u8; 16];
        b.copy_from_slice(&pkt[at..at + 16]);
        Ipv6Addr::from(b)
    };
    let (src, dst) = (addr(8), addr(24));
    // An ICMPv6 error right after the fixed header (types below 128 are errors).
    let is_error = pkt[6] == 58 && pkt.get(40).is_some_and(|&t| t < 128);
    let unicast = |a: Ipv6Addr| !(a.is_unspecified() || a.is_multicast() || a.is_loopback());
    if is_error || !unicast(src) || !unicast(dst) {
        return None;
    }
    let quote = &pkt[..pkt.len().min(MAX_V6 - 48)];
    let plen = 8 + quote.len();
    let mut out = Vec::with_capacity(40 + plen);
    out.extend_from_slice(&[0x60, 0, 0, 0, (plen >> 8) as u8, plen as u8, 58, TTL]);
    out.extend_from_slice(&dst.octets());
    out.extend_from_slice(&src.octets());
    out.extend_from_slice(&[1, 3, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(quote);
    // The pseudo-header: source, destination, upper-layer length, next header.
    let mut pseudo = Vec::with_capacity(40);
    pseudo.extend_from_slice(&out[8..40]);
    pseudo.extend_from_slice(&(plen as u32).to_be_bytes());
    pseudo.extend_from_slice(&[0, 0, 0, 58]);
    let sum = checksum(sum_words(0, &pseudo), &out[40..]);
    out[42..44].copy_from_slice(&sum.to_be_bytes());
    Some(out)
}

/// The ones' complement sum of `bytes` as 16-bit big-endian words (odd length padded),
/// added to `acc`.
fn sum_words(mut acc: u32, bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(2);
    for w in &mut chunks {
        acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = chunks.remainder() {
        acc += u32::from(*last) << 8;
    }
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc
}

/// The Internet checksum of `bytes` over the partial sum `acc`.
fn checksum(acc: u32, bytes: &[u8]) -> u16 {
    !(sum_words(acc, bytes) as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_udp(src: [u8; 4], dst: [u8; 4], payload: usize) -> Vec<u8> {
        let len = 28 + payload;
        let mut p = vec![0x45, 0, (len >> 8) as u8, len as u8, 0, 1, 0x40, 0, 64, 17, 0, 0];
        p.extend_from_slice(&src);
        p.extend_from_slice(&dst);
        p.extend_from_slice(&[0x30, 0x39, 0, 9, ((8 + payload) >> 8) as u8, (8 + payload) as u8, 0, 0]);
        p.extend((0..payload).map(|i| i as u8));
        p
    }

    fn ipv6_icmp(src: &str, dst: &str, icmp_type: u8) -> Vec<u8> {
        let mut p = vec![0x60, 0, 0, 0, 0, 8, 58, 64];
        p.extend_from_slice(&src.parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(&dst.parse::<Ipv6Addr>().unwrap().octets());
        p.extend_from_slice(&[icmp_type, 0, 0, 0, 0, 1, 0, 1]);
        p
    }

    /// An independent check: a correct checksum makes the sum of the whole come out 0xffff.
    fn sums_to_ones(acc: u32, bytes: &[u8]) -> bool {
        sum_words(acc, bytes) == 0xffff
    }

    #[test]
    fn an_ipv4_packet_gets_host_unreachable_from_its_destination() {
        let p = ipv4_udp([10, 253, 0, 4], [10, 253, 0, 40], 1000);
        let e = unreachable(&p).expect("an error");
        assert_eq!(e.len(), MAX_V4, "quoted up to 576 bytes");
        assert_eq!(&e[12..16], &[10, 253, 0, 40], "from the unreachable address");
        assert_eq!(&e[16..20], &[10, 253, 0, 4], "to the sender");
        assert_eq!((e[9], e[20], e[21]), (1, 3, 1), "ICMP host unreachable");
        assert_eq!(usize::from(u16::from_be_bytes([e[2], e[3]])), e.len());
        assert!(sums_to_ones(0, &e[..20]), "IPv4 header checksum");
        assert!(sums_to_ones(0, &e[20..]), "ICMP checksum");
        assert_eq!(&e[28..], &p[..MAX_V4 - 28], "the packet's start, quoted");
        let small = ipv4_udp([10, 253, 0, 4], [10, 253, 0, 40], 3);
        let e = unreachable(&small).unwrap();
        assert_eq!(&e[28..], &small[..], "a short packet quoted whole");
        assert!(sums_to_ones(0, &e[20..]), "odd-length ICMP checksum");
    }

    #[test]
    fn an_ipv6_packet_gets_address_unreachable_from_its_destination() {
        let p = ipv6_icmp("fd6c:616e:6573::4", "fd6c:616e:6573::28", 128);
        let e = unreachable(&p).expect("an error");
        assert_eq!(&e[8..24], &"fd6c:616e:6573::28".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!(&e[24..40], &"fd6c:616e:6573::4".parse::<Ipv6Addr>().unwrap().octets());
        assert_eq!((e[6], e[40], e[41]), (58, 1, 3));
        assert_eq!(usize::from(u16::from_be_bytes([e[4], e[5]])), e.len() - 40);
        let mut pseudo = e[8..40].to_vec();
        pseudo.extend_from_slice(&((e.len() - 40) as u32).to_be_bytes());
        pseudo.extend_from_slice(&[0, 0, 0, 58]);
        assert!(sums_to_ones(sum_words(0, &pseudo), &e[40..]), "ICMPv6 checksum");
        assert_eq!(&e[48..], &p[..]);
    }

    #[test]
    fn no_error_answers_an_error_a_non_unicast_source_or_a_later_fragment() {
        let mut err4 = ipv4_udp([10, 253, 0, 4], [10, 253, 0, 40], 8);
        err4[9] = 1;
        err4[20] = 3;
        assert!(unreachable(&err4).is_none(), "ICMP error");
        err4[20] = 8;
        assert!(unreachable(&err4).is_some(), "ICMP echo request");
        assert!(unreachable(&ipv4_udp([0, 0, 0, 0], [10, 253, 0, 40], 8)).is_none());
        assert!(unreachable(&ipv4_udp([224, 0, 0, 1], [10, 253, 0, 40], 8)).is_none());
        let mut frag = ipv4_udp([10, 253, 0, 4], [10, 253, 0, 40], 8);
        frag[7] = 1;
        assert!(unreachable(&frag).is_none(), "a later fragment");
        assert!(unreachable(&ipv6_icmp("fd6c:616e:6573::4", "fd6c:616e:6573::28", 1)).is_none());
        assert!(unreachable(&ipv6_icmp("::", "fd6c:616e:6573::28", 128)).is_none());
        assert!(unreachable(&ipv6_icmp("ff02::1", "fd6c:616e:6573::28", 128)).is_none());
        for garbage in [&[][..], &[0x45; 10][..], &[0x4f; 19][..], &[0x60; 39][..], &[0x30; 64][..]] {
            assert!(unreachable(garbage).is_none());
        }
    }
}
