//! The cluster part of `lanes.toml`: the `[cluster]` section and the hosts its `[[node]]`
//! entries span.
//!
//! ```toml
//! [cluster]
//! provider = "tcp;ofi_rxm"    # for the data path (libfabric)
//! progress = "wake"           # or "poll": see IdleProgress
//! poll_us = 500               # with progress = "poll"
//! port = 7470                 # the daemons' control port; an address may carry its own
//! heartbeat_ms = 100
//! suspect_after_ms = 500      # no heartbeat for this long: the host is Suspect
//! lost_after_ms = 10000       # still silent: Lost
//! key_file = "/etc/lanes/host.key"           # this host's private key (the default for root)
//! secret_file = "/etc/lanes/cluster.secret"   # optional: also a pre-shared key of the links
//! [[node]]
//! id = 8
//! host = "alpha"
//! address = "10.77.0.1"
//! public_key = "<64 hex digits from `lanes keygen` on alpha>"
//! [[node]]
//! id = 12
//! host = "beta"
//! address = "10.77.0.2:7471"
//! public_key = "<64 hex digits from `lanes keygen` on beta>"
//! ```
//!
//! Either every host has a `public_key` (daemons then talk only over authenticated,
//! encrypted links: the control plane's `link`) or none has (daemons then serve loopback only).
//!
//! The file is parsed and validated once, by [`super::ConfigFile`]; this module
//! turns a valid file into a [`ClusterConfig`]: one [`HostEntry`] per host with its
//! address and nodes. Addresses are IP literals: the daemon binds them, and name
//! resolution would make start-up depend on a resolver.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{NodeEntry, NodeId};
use crate::platform::{hex, unhex};

/// The daemons' control port when neither `[cluster] port` nor the address names one.
pub const DEFAULT_PORT: u16 = 7470;
/// The libfabric provider when none is configured.
pub const DEFAULT_PROVIDER: &str = "tcp;ofi_rxm";
/// Default heartbeat interval.
pub const DEFAULT_HEARTBEAT_MS: u64 = 100;
/// Default silence after which a host is Suspect.
pub const DEFAULT_SUSPECT_AFTER_MS: u64 = 500;
/// Default silence after which a host is Lost.
pub const DEFAULT_LOST_AFTER_MS: u64 = 10_000;
/// Default interval of [`IdleProgress::Poll`].
pub const DEFAULT_POLL_US: u64 = 500;
/// Bounds of `poll_us`: below, the service thread would be a spinning core; above, a
/// sleeping waiter would wait longer than the service thread's own tick.
const POLL_US_RANGE: std::ops::RangeInclusive<u64> = 1..=10_000;

/// How a process's libfabric endpoint makes progress while none of its threads drives it
/// (nobody spins on a completion, a mapped word or an interrupt): remote writes must be
/// placed, remote interrupts counted, peers' reads answered all the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IdleProgress {
    /// The receive completion queue has a wait object and the service thread sleeps on it,
    /// waking when traffic arrives: nothing runs while the process is idle. On the tcp
    /// providers every completion then also signals that wait object (a write and a read
    /// of a socket pair inside libfabric), which a ping-pong pays on each message.
    Wake,
    /// No wait objects (as `fi_pingpong` runs by default): completions cost no signal, and
    /// the service thread drives progress every interval instead of sleeping until traffic
    /// arrives, so an idle process wakes that often and a sleeping waiter may wait up to
    /// one interval longer.
    Poll(Duration),
}

impl IdleProgress {
    /// `"wake"`, or `"poll"` with `poll_us` (default [`DEFAULT_POLL_US`]). The error is a
    /// sentence naming what was wrong.
    pub fn parse(mode: &str, poll_us: Option<u64>) -> Result<IdleProgress, String> {
        match mode.trim() {
            "wake" if poll_us.is_some() => Err("poll_us applies only to progress = \"poll\"".into()),
            "wake" => Ok(IdleProgress::Wake),
            "poll" => {
                let us = poll_us.unwrap_or(DEFAULT_POLL_US);
                if !POLL_US_RANGE.contains(&us) {
                    return Err(format!(
                        "poll_us = {us} is outside {}..={}",
                        POLL_US_RANGE.start(),
                        POLL_US_RANGE.end()
                    ));
                }
                Ok(IdleProgress::Poll(Duration::from_micros(us)))
            }
            other => Err(format!("progress = {other:?} is neither \"wake\" nor \"poll\"")),
        }
    }
}

impl IdleProgress {
    /// What a process uses: `LANES_OFI_PROGRESS` (`wake` or `poll`) and
    /// `LANES_OFI_POLL_US` where set, else `configured` (the file's). The error is a
    /// sentence naming the variable.
    pub fn from_env(configured: IdleProgress) -> Result<IdleProgress, String> {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let poll_us = match var("LANES_OFI_POLL_US") {
            Some(v) => Some(v.trim().parse::<u64>().map_err(|_| format!("LANES_OFI_POLL_US={v:?} is not a number"))?),
            None => None,
        };
        match (var("LANES_OFI_PROGRESS"), poll_us, configured) {
            (Some(mode), us, _) => IdleProgress::parse(&mode, us).map_err(|why| format!("LANES_OFI_PROGRESS: {why}")),
            (None, Some(us), IdleProgress::Poll(_)) => {
                IdleProgress::parse("poll", Some(us)).map_err(|why| format!("LANES_OFI_POLL_US: {why}"))
            }
            (None, Some(_), IdleProgress::Wake) => Err("LANES_OFI_POLL_US needs progress \"poll\"".into()),
            (None, None, configured) => Ok(configured),
        }
    }
}

impl std::fmt::Display for IdleProgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IdleProgress::Wake => f.write_str("wake"),
            IdleProgress::Poll(every) => write!(f, "poll every {} us", every.as_micros()),
        }
    }
}

/// The `[cluster]` table as written.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    pub provider: Option<String>,
    pub progress: Option<String>,
    pub poll_us: Option<u64>,
    pub port: Option<u16>,
    pub heartbeat_ms: Option<u64>,
    pub suspect_after_ms: Option<u64>,
    pub lost_after_ms: Option<u64>,
    pub secret_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

/// One host of the cluster: where its daemon listens and which nodes it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostEntry {
    /// The host's name (`LANES_HOST` or the system's host name on that host).
    pub name: String,
    /// Its fabric address: the daemon listens on it, processes' endpoints bind it.
    pub address: SocketAddr,
    /// The nodes acting on it, in the order the file lists them.
    pub nodes: Vec<NodeId>,
    /// Its daemon's public key (`public_key`); None only when no host has one.
    pub public_key: Option<PublicKey>,
}

/// Bytes of an X25519 key, private or public (a host key's halves).
pub const KEY_LEN: usize = 32;

/// A host's public key, as `lanes.toml` lists it (`public_key`, 64 hex digits): the key
/// its daemon proves it holds the private half of when the daemons' links are set up.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey([u8; KEY_LEN]);

impl PublicKey {
    /// Parses 64 hex digits. The error is a sentence.
    pub fn parse(text: &str) -> Result<PublicKey, String> {
        let t = text.trim();
        let bytes = unhex(t).filter(|b| b.len() == KEY_LEN).ok_or_else(|| {
            format!("public_key {t:?} is not {} hex digits (the line `lanes keygen` prints)", 2 * KEY_LEN)
        })?;
        let mut k = [0u8; KEY_LEN];
        k.copy_from_slice(&bytes);
        if k == [0u8; KEY_LEN] {
            return Err("public_key is all zeros".into());
        }
        Ok(PublicKey(k))
    }

    /// From the bytes a handshake reports; None if they are not a key's length.
    pub fn from_bytes(bytes: &[u8]) -> Option<PublicKey> {
        <[u8; KEY_LEN]>::try_from(bytes).ok().map(PublicKey)
    }

    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

/// The validated cluster: timing, provider and hosts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The libfabric provider string for the data path (unused by the control plane).
    pub provider: String,
    /// How processes' endpoints progress while idle (`LANES_OFI_PROGRESS` and
    /// `LANES_OFI_POLL_US` override it per process).
    pub progress: IdleProgress,
    /// The default control port.
    pub port: u16,
    /// How often each daemon sends a heartbeat on each control connection.
    pub heartbeat: Duration,
    /// Silence after which a host is Suspect.
    pub suspect_after: Duration,
    /// Silence after which a host is Lost.
    pub lost_after: Duration,
    /// A file every host's daemon reads the cluster secret from (absolute): daemons then
    /// prove to each other that they know it before they talk (the control plane's `secret`).
    pub secret_file: Option<PathBuf>,
    /// This host's key file (`[cluster] key_file`, absolute). `LANES_KEY_FILE` overrides
    /// it; when neither names one, the control plane's host identity has a default per user.
    pub key_file: Option<PathBuf>,
    /// The hosts, in the order the file first names them.
    pub hosts: Vec<HostEntry>,
}

impl ClusterConfig {
    /// Builds the cluster from its section and the node entries (already checked for
    /// valid, unique ids and consistent addresses). The error is a sentence for
    /// [`crate::Error::Config`].
    pub fn build(section: &ClusterSection, nodes: &[NodeEntry]) -> Result<ClusterConfig, String> {
        let port = section.port.unwrap_or(DEFAULT_PORT);
        if port == 0 {
            return Err("[cluster] port must not be 0".into());
        }
        let ms = |v: Option<u64>, default: u64| Duration::from_millis(v.unwrap_or(default));
        let heartbeat = ms(section.heartbeat_ms, DEFAULT_HEARTBEAT_MS);
        let suspect_after = ms(section.suspect_after_ms, DEFAULT_SUSPECT_AFTER_MS);
        let lost_after = ms(section.lost_after_ms, DEFAULT_LOST_AFTER_MS);
        if heartbeat.is_zero() {
            return Err("[cluster] heartbeat_ms must be at least 1".into());
        }
        if suspect_after <= heartbeat {
            return Err(format!(
                "[cluster] suspect_after_ms ({}) must exceed heartbeat_ms ({}): one late heartbeat \
                 would make a host Suspect",
                suspect_after.as_millis(),
                heartbeat.as_millis()
            ));
        }
        if lost_after <= suspect_after {
            return Err(format!(
                "[cluster] lost_after_ms ({}) must exceed suspect_after_ms ({})",
                lost_after.as_millis(),
                suspect_after.as_millis()
            ));
        }
        let provider = match &section.provider {
            Some(p) if p.trim().is_empty() => return Err("[cluster] provider is empty".into()),
            Some(p) => p.trim().to_string(),
            None => DEFAULT_PROVIDER.to_string(),
        };
        let progress = match &section.progress {
            Some(mode) => IdleProgress::parse(mode, section.poll_us),
            None if section.poll_us.is_some() => Err("poll_us needs progress = \"poll\"".into()),
            None => Ok(IdleProgress::Wake),
        }
        .map_err(|why| format!("[cluster] {why}"))?;
        if let Some(f) = &section.secret_file {
            if !f.is_absolute() {
                return Err(format!("[cluster] secret_file {f:?} must be an absolute path"));
            }
        }
        if let Some(f) = &section.key_file {
            if !f.is_absolute() {
                return Err(format!("[cluster] key_file {f:?} must be an absolute path"));
            }
        }
        let mut hosts: Vec<HostEntry> = Vec::new();
        for n in nodes {
            let key = match &n.public_key {
                Some(k) => {
                    Some(PublicKey::parse(k).map_err(|why| format!("node {} (host {:?}): {why}", n.id, n.host))?)
                }
                None => None,
            };
            let id = NodeId::new(n.id).map_err(|e| e.to_string())?;
            let text = n.address.as_deref().ok_or_else(|| {
                format!("node {} (host {:?}) has no address; with [cluster] every host needs one", n.id, n.host)
            })?;
            let address = parse_address(text, port).map_err(|why| format!("node {}: address {text:?}: {why}", n.id))?;
            match hosts.iter_mut().find(|h| h.name == n.host) {
                Some(h) if h.address != address => {
                    return Err(format!("host {:?} has two addresses: {} and {address}", n.host, h.address))
                }
                Some(h) => {
                    match (h.public_key, key) {
                        (Some(a), Some(b)) if a != b => {
                            return Err(format!("host {:?} has two public keys: {a} and {b}", n.host))
                        }
                        (None, Some(b)) => h.public_key = Some(b),
                        _ => {}
                    }
                    h.nodes.push(id)
                }
                None => {
                    if let Some(other) = hosts.iter().find(|h| h.address == address) {
                        return Err(format!(
                            "hosts {:?} and {:?} both have address {address}: each daemon needs its own",
                            other.name, n.host
                        ));
                    }
                    hosts.push(HostEntry { name: n.host.clone(), address, nodes: vec![id], public_key: key });
                }
            }
        }
        let keyed: Vec<&str> = hosts.iter().filter(|h| h.public_key.is_some()).map(|h| h.name.as_str()).collect();
        if !keyed.is_empty() {
            if let Some(h) = hosts.iter().find(|h| h.public_key.is_none()) {
                return Err(format!(
                    "host {:?} has no public_key but {:?} has one: list every host's key (run `lanes keygen` \
                     on {:?}), or none (daemons then serve loopback only)",
                    h.name, keyed[0], h.name
                ));
            }
        }
        for (k, h) in hosts.iter().enumerate() {
            if let Some(other) = hosts[..k].iter().find(|o| o.public_key == h.public_key && o.public_key.is_some()) {
                return Err(format!(
                    "hosts {:?} and {:?} have the same public_key: each host needs its own key",
                    other.name, h.name
                ));
            }
        }
        Ok(ClusterConfig {
            provider,
            progress,
            port,
            heartbeat,
            suspect_after,
            lost_after,
            secret_file: section.secret_file.clone(),
            key_file: section.key_file.clone(),
            hosts,
        })
    }

    /// The host called `name`.
    pub fn host(&self, name: &str) -> Option<&HostEntry> {
        self.hosts.iter().find(|h| h.name == name)
    }

    /// Every host has a public key: daemons authenticate each other and encrypt their links.
    /// Without keys they serve loopback only.
    pub fn keyed(&self) -> bool {
        !self.hosts.is_empty() && self.hosts.iter().all(|h| h.public_key.is_some())
    }

    /// The host whose public key is `key`.
    pub fn host_with_key(&self, key: &PublicKey) -> Option<&HostEntry> {
        self.hosts.iter().find(|h| h.public_key.as_ref() == Some(key))
    }

    /// Every node the hosts list, in order, for messages ("4, 8, 12").
    pub fn listed_nodes(&self) -> String {
        let mut all: Vec<u32> = self.hosts.iter().flat_map(|h| h.nodes.iter().map(|n| n.get())).collect();
        all.sort_unstable();
        all.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    }

    /// The host that `node` acts on.
    pub fn host_of(&self, node: NodeId) -> Option<&HostEntry> {
        self.hosts.iter().find(|h| h.nodes.contains(&node))
    }
}

/// Parses an address as the configuration writes it: `10.77.0.1`, `10.77.0.1:7471`, `::1`,
/// `[::1]` or `[::1]:7471`. Without a port, `default_port`. Host names are not resolved.
pub fn parse_address(text: &str, default_port: u16) -> Result<SocketAddr, String> {
    let t = text.trim();
    let addr = if let Ok(a) = t.parse::<SocketAddr>() {
        a
    } else if let Ok(ip) = t.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
        SocketAddr::new(ip, default_port)
    } else {
        return Err("not an IP address with an optional :port (host names are not resolved)".into());
    };
    if addr.port() == 0 {
        return Err("port 0 cannot be dialled".into());
    }
    if addr.ip().is_unspecified() || addr.ip().is_multicast() {
        return Err("a host's address must be one of its own unicast addresses".into());
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ConfigFile;
    use crate::Error;
    use std::path::Path;

    fn parse(text: &str) -> crate::Result<ConfigFile> {
        ConfigFile::parse(Path::new("lanes.toml"), text)
    }

    const DESIGN_EXAMPLE: &str = r#"
dir = "/dev/shm/lanes-fabric"
[cluster]
provider = "tcp;ofi_rxm"
port = 7470
heartbeat_ms = 100
suspect_after_ms = 500
lost_after_ms = 10000
[[node]]
id = 8
host = "alpha"
address = "10.77.0.1"
[[node]]
id = 12
host = "beta"
address = "10.77.0.2:7471"
[[node]]
id = 16
host = "alpha"
address = "10.77.0.1:7470"
"#;

    #[test]
    fn the_design_example_parses_into_hosts() {
        let file = parse(DESIGN_EXAMPLE).unwrap();
        let c = file.cluster().expect("a cluster");
        assert_eq!(c.provider, "tcp;ofi_rxm");
        assert_eq!(
            (c.heartbeat, c.suspect_after, c.lost_after),
            (Duration::from_millis(100), Duration::from_millis(500), Duration::from_secs(10))
        );
        assert_eq!(c.hosts.len(), 2);
        let alpha = c.host("alpha").unwrap();
        assert_eq!(alpha.address, "10.77.0.1:7470".parse().unwrap());
        assert_eq!(alpha.nodes, [NodeId::new(8).unwrap(), NodeId::new(16).unwrap()]);
        assert_eq!(c.host("beta").unwrap().address, "10.77.0.2:7471".parse().unwrap());
        assert_eq!(c.host_of(NodeId::new(16).unwrap()).unwrap().name, "alpha");
        assert!(c.host_of(NodeId::new(20).unwrap()).is_none());
        assert_eq!(file.node_for_host("alpha").unwrap(), NodeId::new(8).ok());
    }

    #[test]
    fn defaults_fill_an_empty_section() {
        let file = parse("[cluster]\n[[node]]\nid = 8\nhost = \"a\"\naddress = \"::1\"\n").unwrap();
        let c = file.cluster().unwrap();
        assert_eq!(c.port, DEFAULT_PORT);
        assert_eq!(c.provider, DEFAULT_PROVIDER);
        assert_eq!(c.progress, IdleProgress::Wake);
        assert_eq!(c.hosts[0].address, SocketAddr::new("::1".parse().unwrap(), DEFAULT_PORT));
        // The section's port is the default for addresses without one.
        let file = parse("[cluster]\nport = 9000\n[[node]]\nid = 8\nhost = \"a\"\naddress = \"127.0.0.1\"\n").unwrap();
        assert_eq!(file.cluster().unwrap().hosts[0].address.port(), 9000);
    }

    #[test]
    fn progress_is_wake_or_poll_with_an_interval() {
        let with = |extra: &str| {
            let text = format!("[cluster]\n{extra}\n[[node]]\nid = 8\nhost = \"a\"\naddress = \"10.0.0.1\"\n");
            parse(&text).unwrap().cluster().unwrap().progress
        };
        assert_eq!(with("progress = \"wake\""), IdleProgress::Wake);
        assert_eq!(with("progress = \"poll\""), IdleProgress::Poll(Duration::from_micros(DEFAULT_POLL_US)));
        assert_eq!(with("progress = \"poll\"\npoll_us = 250"), IdleProgress::Poll(Duration::from_micros(250)));
        assert_eq!(IdleProgress::parse(" poll ", Some(10_000)), Ok(IdleProgress::Poll(Duration::from_millis(10))));
        assert!(IdleProgress::parse("poll", Some(10_001)).is_err());
        assert_eq!(IdleProgress::Poll(Duration::from_micros(100)).to_string(), "poll every 100 us");
    }

    #[test]
    fn addresses_are_ip_literals_with_optional_ports() {
        for (text, want) in [
            ("10.0.0.1", "10.0.0.1:7470"),
            (" 10.0.0.1:80 ", "10.0.0.1:80"),
            ("::1", "[::1]:7470"),
            ("[fe80::1]", "[fe80::1]:7470"),
            ("[::1]:81", "[::1]:81"),
        ] {
            assert_eq!(parse_address(text, 7470).unwrap(), want.parse::<SocketAddr>().unwrap(), "{text}");
        }
        for bad in ["", "alpha", "10.0.0.1:", "10.0.0.1:99999", "10.0.0.256", "10.0.0.1:0", "0.0.0.0", "224.0.0.1"] {
            assert!(parse_address(bad, 7470).is_err(), "{bad:?} accepted");
        }
    }

    const K1: &str = "1111111111111111111111111111111111111111111111111111111111111111";
    const K2: &str = "2222222222222222222222222222222222222222222222222222222222222222";

    #[test]
    fn public_keys_are_listed_per_host() {
        let text = format!(
            "[cluster]\n[[node]]\nid = 8\nhost = \"a\"\naddress = \"10.0.0.1\"\npublic_key = \"{K1}\"\n\
             [[node]]\nid = 16\nhost = \"a\"\naddress = \"10.0.0.1\"\n\
             [[node]]\nid = 12\nhost = \"b\"\naddress = \"10.0.0.2\"\npublic_key = \"{K2}\"\n"
        );
        let file = parse(&text).unwrap();
        let c = file.cluster().unwrap();
        assert!(c.keyed());
        assert_eq!(c.host("a").unwrap().public_key.unwrap().to_string(), K1);
        assert_eq!(c.host_with_key(&PublicKey::parse(K2).unwrap()).unwrap().name, "b");
        assert!(!parse(DESIGN_EXAMPLE).unwrap().cluster().unwrap().keyed(), "no keys: loopback only");
    }

    #[test]
    fn nonsense_is_refused_with_a_reason() {
        let node =
            |id: u32, host: &str, addr: &str| format!("[[node]]\nid = {id}\nhost = \"{host}\"\naddress = \"{addr}\"\n");
        for (text, says) in [
            (format!("[cluster]\n{}{}", node(8, "a", "10.0.0.1"), node(8, "b", "10.0.0.2")), "listed twice"),
            (format!("[cluster]\n{}", node(8, "a", "alpha.example")), "not an IP address"),
            (format!("[cluster]\n{}{}", node(8, "a", "10.0.0.1"), node(12, "a", "10.0.0.9")), "two addresses"),
            (format!("[cluster]\n{}{}", node(8, "a", "10.0.0.1"), node(12, "b", "10.0.0.1")), "both have address"),
            ("[cluster]\n[[node]]\nid = 8\nhost = \"a\"\n".to_string(), "has no address"),
            (format!("[cluster]\nheartbeat_ms = 0\n{}", node(8, "a", "10.0.0.1")), "heartbeat_ms"),
            (format!("[cluster]\nsuspect_after_ms = 50\n{}", node(8, "a", "10.0.0.1")), "must exceed heartbeat_ms"),
            (format!("[cluster]\nlost_after_ms = 400\n{}", node(8, "a", "10.0.0.1")), "must exceed suspect_after_ms"),
            (format!("[cluster]\nport = 0\n{}", node(8, "a", "10.0.0.1")), "port"),
            (format!("[cluster]\nprovider = \" \"\n{}", node(8, "a", "10.0.0.1")), "provider"),
            (format!("[cluster]\nheartbeat = 5\n{}", node(8, "a", "10.0.0.1")), "unknown field"),
            (format!("[cluster]\nsecret_file = \"s\"\n{}", node(8, "a", "10.0.0.1")), "absolute"),
            (format!("[cluster]\nprogress = \"spin\"\n{}", node(8, "a", "10.0.0.1")), "neither"),
            (format!("[cluster]\nprogress = \"poll\"\npoll_us = 0\n{}", node(8, "a", "10.0.0.1")), "outside"),
            (format!("[cluster]\nprogress = \"wake\"\npoll_us = 50\n{}", node(8, "a", "10.0.0.1")), "only to"),
            (format!("[cluster]\npoll_us = 50\n{}", node(8, "a", "10.0.0.1")), "needs progress"),
            (format!("[cluster]\nkey_file = \"k\"\n{}", node(8, "a", "10.0.0.1")), "absolute"),
            (format!("[cluster]\n{}public_key = \"abcd\"\n", node(8, "a", "10.0.0.1")), "hex digits"),
            (
                format!("[cluster]\n{}public_key = \"{K1}\"\n{}", node(8, "a", "10.0.0.1"), node(12, "b", "10.0.0.2")),
                "has no public_key",
            ),
            (
                format!(
                    "[cluster]\n{}public_key = \"{K1}\"\n{}public_key = \"{K1}\"\n",
                    node(8, "a", "10.0.0.1"),
                    node(12, "b", "10.0.0.2")
                ),
                "the same public_key",
            ),
            (
                format!(
                    "[cluster]\n{}public_key = \"{K1}\"\n{}public_key = \"{K2}\"\n",
                    node(8, "a", "10.0.0.1"),
                    node(12, "a", "10.0.0.1")
                ),
                "two public keys",
            ),
        ] {
            let e = parse(&text).unwrap_err();
            assert!(matches!(e, Error::Config { .. }), "{text:?} gave {e}");
            let msg = e.to_string();
            assert!(msg.contains(says) && msg.contains("lanes.toml"), "{text:?}: {msg}");
        }
    }
}
