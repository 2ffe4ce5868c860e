//! Which connections are accelerated, read once from the environment.
//!
//! - `LANES_SOCKETS=0`: pass everything to the kernel untouched.
//! - `LANES_SOCKETS_INCLUDE=5201,6379,8000-8100`: only these ports (either end's) are
//!   accelerated; default all local TCP.
//! - `LANES_SOCKETS_EXCLUDE=...`: never these ports.
//! - `LANES_SOCKETS_RING=bytes`: ring per direction (default 1 MiB).
//! - `LANES_POLL_US`: how long a waiting call spins before it sleeps in the kernel.
//! - `LANES_DIR`: the fabric directory; records go to its `sockets/`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

pub struct Config {
    pub enabled: bool,
    pub include: Option<Vec<(u16, u16)>>,
    pub exclude: Vec<(u16, u16)>,
    pub ring_bytes: usize,
    pub poll_time: Duration,
    pub fabric_dir: PathBuf,
    pub netns: u64,
}

fn parse_ports(text: &str) -> Vec<(u16, u16)> {
    text.split(',')
        .filter_map(|p| {
            let p = p.trim();
            match p.split_once('-') {
                Some((a, b)) => Some((a.trim().parse().ok()?, b.trim().parse().ok()?)),
                None => p.parse().ok().map(|v| (v, v)),
            }
        })
        .collect()
}

fn load() -> Config {
    let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
    let fabric_dir = match var("LANES_DIR") {
        Some(d) => PathBuf::from(d),
        None => lanes::FabricConfig::from_env().map(|c| c.dir).unwrap_or_else(|_| lanes::config::default_fabric_dir()),
    };
    Config {
        enabled: var("LANES_SOCKETS").is_none_or(|v| v != "0"),
        include: var("LANES_SOCKETS_INCLUDE").map(|v| parse_ports(&v)),
        exclude: var("LANES_SOCKETS_EXCLUDE").map(|v| parse_ports(&v)).unwrap_or_default(),
        ring_bytes: var("LANES_SOCKETS_RING")
            .and_then(|v| v.parse().ok())
            .unwrap_or(lanes::sockets::endpoint::DEFAULT_RING_BYTES),
        poll_time: lanes::platform::doorbell::default_poll_time(),
        fabric_dir,
        netns: crate::sock_diag::netns_inode(),
    }
}

static CONFIG: OnceLock<Config> = OnceLock::new();

pub fn config() -> &'static Config {
    CONFIG.get_or_init(load)
}

fn in_ranges(ranges: &[(u16, u16)], port: u16) -> bool {
    ranges.iter().any(|&(a, b)| (a..=b).contains(&port))
}

/// Whether a connection between these addresses may be accelerated: both ends on this
/// host (loopback, or the same address on both ends) and allowed by the port lists.
pub fn wanted(local: SocketAddr, remote: SocketAddr) -> bool {
    let c = config();
    if !c.enabled {
        return false;
    }
    let local_host = remote.ip().is_loopback() || remote.ip() == local.ip();
    if !local_host {
        return false;
    }
    let ports = [local.port(), remote.port()];
    if ports.iter().any(|&p| in_ranges(&c.exclude, p)) {
        return false;
    }
    match &c.include {
        Some(inc) => ports.iter().any(|&p| in_ranges(inc, p)),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn port_lists_parse_single_ports_and_ranges() {
        assert_eq!(super::parse_ports("5201, 8000-8100,x"), vec![(5201, 5201), (8000, 8100)]);
    }
}
