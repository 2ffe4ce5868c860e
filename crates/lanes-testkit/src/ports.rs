//! Free TCP ports on 127.0.0.1, chosen below the kernel's ephemeral range.

use std::hash::{BuildHasher, Hasher};

/// `n` distinct free ports on 127.0.0.1, chosen below the kernel's ephemeral range
/// (`ip_local_port_range`), each held until all are picked: a socket that binds port 0 or
/// connects, as other tests' programs do by the hundred, is never given one between its
/// choice and the server's bind.
pub fn free_ports(n: usize) -> Vec<u16> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10000u16, ephemeral_low.max(10001));
    let mut held = Vec::new();
    for _ in 0..1000 {
        if held.len() == n {
            break;
        }
        let r = std::collections::hash_map::RandomState::new().build_hasher().finish();
        let port = low + (r % u64::from(high - low)) as u16;
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
        }
    }
    assert_eq!(held.len(), n, "no {n} free ports between {low} and {high}");
    held.iter().map(|l| l.local_addr().expect("its address").port()).collect()
}

/// One port as [`free_ports`] picks them.
pub fn free_port() -> u16 {
    free_ports(1)[0]
}
