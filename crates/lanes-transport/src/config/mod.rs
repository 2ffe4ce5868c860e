//! Who this process is on the fabric (its node id) and where the fabric's files live.
//!
//! Node id: `LANES_NODE_ID`, else the (first) entry for this host name (`LANES_HOST`, else
//! the system's host name) in the configuration file (`LANES_CONFIG`, default
//! `/etc/lanes/lanes.toml`), else node 4.
//! Fabric directory: `LANES_DIR`, else `dir` in the configuration file, else
//! `/dev/shm/lanes-<uid>` (private to the user), or the user's runtime directory when
//! another user took that name first ([`default_fabric_dir`]).
//! The file's `[cluster]` section and node addresses, which describe a fabric across hosts,
//! are validated here too and interpreted by [`cluster`]; its `[ip]` section (the IP
//! interface's) by [`ip`]: this module and its parts are the one schema of `lanes.toml`
//! (the control plane names it `cluster::config`).

pub mod cluster;
pub mod ip;

pub use ip::IpSection;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Deserialize;

use crate::error::{Error, Result};
use cluster::{parse_address, ClusterConfig, ClusterSection, DEFAULT_PORT};

/// The default configuration file, read when `LANES_CONFIG` is not set and the file exists.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/lanes/lanes.toml";

/// The node id used when nothing else names one.
pub const DEFAULT_NODE_ID: NodeId = NodeId(4);

/// `DIS_BROADCAST_NODEID_GROUP_ALL`: the node id that addresses a reflective-memory group.
pub const BROADCAST_NODE_ID: u32 = 252;

/// The largest node id: node ids are 16-bit multiples of 4.
pub const MAX_NODE_ID: u32 = 0xFFFC;

/// A fabric endpoint's id: a multiple of 4 from 4 to 65532, except 252 (the broadcast group).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(u32);

impl NodeId {
    /// Validates a node id.
    pub fn new(value: u32) -> Result<Self> {
        let reason = if value == 0 {
            Some("node ids start at 4")
        } else if value % 4 != 0 {
            Some("node ids are multiples of 4")
        } else if value > MAX_NODE_ID {
            Some("node ids are at most 65532")
        } else if value == BROADCAST_NODE_ID {
            Some("252 is the broadcast group address (DIS_BROADCAST_NODEID_GROUP_ALL)")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(Error::InvalidNodeId { value: value.to_string(), reason }),
            None => Ok(NodeId(value)),
        }
    }

    /// The raw id.
    pub fn get(self) -> u32 {
        self.0
    }

    /// The next valid node id after this one, wrapping round to 4: a peer for a
    /// two-node measurement started from this node.
    pub fn next_after(self) -> NodeId {
        let mut n = self.0;
        loop {
            n = if n >= MAX_NODE_ID { 4 } else { n + 4 };
            if let Ok(id) = NodeId::new(n) {
                return id;
            }
        }
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for NodeId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let value: u32 = s
            .trim()
            .parse()
            .map_err(|_| Error::InvalidNodeId { value: s.to_string(), reason: "not a non-negative integer" })?;
        NodeId::new(value)
    }
}

/// Where a fabric lives and which node this process is on it.
#[derive(Clone, Debug)]
pub struct FabricConfig {
    /// The node this process acts as.
    pub node_id: NodeId,
    /// The directory holding the fabric's shared-memory files.
    pub dir: PathBuf,
    /// The cluster this host belongs to, when the configuration file has a `[cluster]`
    /// naming this host: nodes of other hosts are then reached over libfabric (with the
    /// `ofi` feature). `None`: every node is on this host.
    pub cluster: Option<ClusterMembership>,
}

/// This host's place in a cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMembership {
    /// The whole cluster as configured.
    pub config: ClusterConfig,
    /// The name of this host in it.
    pub host: String,
}

impl ClusterMembership {
    /// The entry of this host.
    pub fn me(&self) -> Option<&cluster::HostEntry> {
        self.config.host(&self.host)
    }

    /// Whether a `[[node]]` of the cluster lists `node`.
    pub fn lists(&self, node: u32) -> bool {
        NodeId::new(node).ok().and_then(|n| self.config.host_of(n)).is_some()
    }

    /// The cluster's nodes, for messages ("4, 8, 12").
    pub fn listed_nodes(&self) -> String {
        self.config.listed_nodes()
    }

    /// Whether `node` is served by another host than this one (unlisted nodes are local).
    pub fn is_remote(&self, node: u32) -> bool {
        NodeId::new(node).ok().and_then(|n| self.config.host_of(n)).is_some_and(|h| h.name != self.host)
    }
}

impl FabricConfig {
    /// A configuration with an explicit directory and node (tests, tools); single host.
    pub fn new(dir: impl Into<PathBuf>, node_id: NodeId) -> Self {
        FabricConfig { node_id, dir: dir.into(), cluster: None }
    }

    /// The configuration from the environment and the configuration file.
    pub fn from_env() -> Result<Self> {
        let file = ConfigFile::load_from_env()?;
        let node_id = match std::env::var("LANES_NODE_ID") {
            Ok(v) => v.parse::<NodeId>().map_err(|e| match e {
                Error::InvalidNodeId { reason, .. } => {
                    Error::InvalidNodeId { value: format!("LANES_NODE_ID={v:?}"), reason }
                }
                other => other,
            })?,
            Err(_) => match &file {
                Some(f) => f.node_for_host(&host_name())?.unwrap_or(DEFAULT_NODE_ID),
                None => DEFAULT_NODE_ID,
            },
        };
        let dir = fabric_dir(file.as_ref());
        let host = host_name();
        let cluster = file
            .as_ref()
            .and_then(|f| f.cluster())
            .filter(|c| c.host(&host).is_some())
            .map(|c| ClusterMembership { config: c.clone(), host });
        Ok(FabricConfig { node_id, dir, cluster })
    }
}

/// The fabric directory: `LANES_DIR`, else `dir` of the configuration file, else
/// [`default_fabric_dir`].
pub fn fabric_dir(file: Option<&ConfigFile>) -> PathBuf {
    match std::env::var_os("LANES_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => match file.and_then(ConfigFile::dir) {
            Some(d) => d.to_path_buf(),
            None => default_fabric_dir(),
        },
    }
}

/// The configuration file `LANES_CONFIG` names, else the default path.
pub fn config_path_from_env() -> PathBuf {
    match std::env::var_os("LANES_CONFIG") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(DEFAULT_CONFIG_PATH),
    }
}

/// The fabric directory used when none is configured: private to the user, and not a name
/// another user can take first.
///
/// `/dev/shm/lanes-<uid>`, made with mode 0700 by the user's first program. Every user may
/// create names in /dev/shm, so another user can take that one first (a directory or a link
/// of theirs): then the user's runtime directory serves, `/run/user/<uid>/lanes`
/// (`/run/lanes` for root), where nobody else can create anything. The choice depends only
/// on what is on disk, never on the environment, so all programs of the user make the same
/// one; once the fallback exists it is kept, so programs started before and after the
/// squatter left still agree. Where neither serves, the squatted name is returned and
/// opening it fails with an error naming its owner. Without /dev/shm: the temporary directory.
pub fn default_fabric_dir() -> PathBuf {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        return std::env::temp_dir().join(format!("lanes-{uid}"));
    }
    let runtime = if uid == 0 { PathBuf::from("/run") } else { PathBuf::from(format!("/run/user/{uid}")) };
    choose_default_dir(uid, shm, &runtime)
}

/// [`default_fabric_dir`]'s choice for user `uid` between `<shm>/lanes-<uid>` and
/// `<runtime>/lanes`.
fn choose_default_dir(uid: u32, shm: &Path, runtime: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let primary = shm.join(format!("lanes-{uid}"));
    let fallback = runtime.join("lanes");
    let ours_dir = |p: &Path| crate::platform::files::verify_own_dir(p, uid).is_ok();
    if ours_dir(&fallback) {
        return fallback;
    }
    match std::fs::symlink_metadata(&primary) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return primary,
        _ if ours_dir(&primary) => return primary,
        _ => {}
    }
    // Squatted. The runtime directory serves only if nobody but the user (or root) can
    // create names in it.
    let private_parent = std::fs::metadata(runtime)
        .is_ok_and(|m| m.is_dir() && (m.uid() == uid || m.uid() == 0) && m.mode() & 0o022 == 0);
    if private_parent {
        fallback
    } else {
        primary
    }
}

/// This machine's host name, as `gethostname` gives it.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for writes of its length; gethostname NUL-terminates
    // within it or truncates, and we read up to the first NUL only.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// The name this host goes by in the configuration: `LANES_HOST` when set (network
/// namespaces share one UTS namespace, so test "hosts" need it), else [`hostname`].
pub fn host_name() -> String {
    match std::env::var("LANES_HOST") {
        Ok(h) if !h.is_empty() => h,
        _ => hostname(),
    }
}

/// One `[[node]]` entry of `lanes.toml`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeEntry {
    /// The node id.
    pub id: u32,
    /// The host name (as `hostname` prints it, or `LANES_HOST`) that acts as this node.
    pub host: String,
    /// The host's fabric address, an IP address with an optional `:port` (needed with
    /// `[cluster]`). Entries naming the same host must agree on it.
    #[serde(default)]
    pub address: Option<String>,
    /// The host's public key (64 hex digits, as `lanes keygen` prints it), with
    /// `[cluster]`: its daemon must prove it holds the private half. Entries naming the
    /// same host must agree on it (later ones may leave it out).
    #[serde(default)]
    pub public_key: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ParsedConfig {
    dir: Option<PathBuf>,
    cluster: Option<ClusterSection>,
    sockets: Option<SocketsSection>,
    ip: Option<IpSection>,
    #[serde(default)]
    node: Vec<NodeEntry>,
}

/// `[sockets]`: what the socket accelerator (`liblanes_sockets.so`) accelerates. Each key
/// has an environment variable that overrides it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SocketsSection {
    /// `false`: every connection stays kernel TCP (`LANES_SOCKETS=0`).
    pub enabled: Option<bool>,
    /// Only connections with one of these ports at either end, as `"5201,8000-8100"`
    /// (`LANES_SOCKETS_INCLUDE`); default all local TCP.
    pub include: Option<String>,
    /// Never connections with one of these ports (`LANES_SOCKETS_EXCLUDE`).
    pub exclude: Option<String>,
    /// Ring bytes per direction, rounded up to a power of two between 4 KiB and 64 MiB
    /// (`LANES_SOCKETS_RING`; default 1 MiB).
    pub ring_bytes: Option<usize>,
    /// Connections to other hosts of the cluster: `"auto"` (default), `"on"` or `"off"`
    /// (`LANES_SOCKETS_REMOTE`); see [`RemoteMode`].
    pub remote: Option<String>,
}

/// Whether TCP connections to other hosts of the cluster are paired through the daemons
/// (docs/design/cross-host-sockets.md): `[sockets] remote`, `LANES_SOCKETS_REMOTE`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RemoteMode {
    /// Only when the cluster's libfabric provider moves bytes without the host CPU's TCP
    /// stack ([`ACCELERATING_PROVIDERS`]): over the tcp provider the fabric cannot beat the
    /// kernel connection it would stand in front of.
    #[default]
    Auto,
    /// Always (the tests force it on the tcp provider).
    On,
    /// Never: cross-host connections stay kernel TCP and cost nothing (no registration, no
    /// question to the daemon).
    Off,
}

/// The libfabric providers (the core provider, before any `;` utility layer) with which
/// `remote = "auto"` pairs cross-host connections: RDMA NICs that move bytes without the
/// host CPU's TCP stack. (The design's list had `shm` too; it serves one host only, so it
/// never carries a connection between hosts.)
pub const ACCELERATING_PROVIDERS: [&str; 4] = ["verbs", "efa", "cxi", "psm3"];

impl RemoteMode {
    /// `"auto"`, `"on"` or `"off"`; the error is a sentence.
    pub fn parse(text: &str) -> std::result::Result<RemoteMode, String> {
        match text.trim() {
            "auto" => Ok(RemoteMode::Auto),
            "on" => Ok(RemoteMode::On),
            "off" => Ok(RemoteMode::Off),
            other => Err(format!("remote = {other:?} is none of \"auto\", \"on\", \"off\"")),
        }
    }

    /// Whether cross-host connections are paired with the cluster's `provider`: `Ok(())`
    /// when they are, else why not, in words.
    pub fn decide(self, provider: &str) -> std::result::Result<(), String> {
        match self {
            RemoteMode::On => Ok(()),
            RemoteMode::Off => Err("remote acceleration is off ([sockets] remote or LANES_SOCKETS_REMOTE)".into()),
            RemoteMode::Auto => {
                let core = provider.split(';').next().unwrap_or_default().trim();
                if ACCELERATING_PROVIDERS.contains(&core) {
                    Ok(())
                } else {
                    Err(format!(
                        "remote acceleration is off for provider {provider:?}: it cannot beat kernel TCP \
                         (remote = \"auto\" pairs on {}; \"on\" forces it)",
                        ACCELERATING_PROVIDERS.join(", ")
                    ))
                }
            }
        }
    }
}

impl fmt::Display for RemoteMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RemoteMode::Auto => "auto",
            RemoteMode::On => "on",
            RemoteMode::Off => "off",
        })
    }
}

/// Parses a port list: ports and ranges separated by commas, `"5201, 8000-8100"`.
pub fn parse_port_list(text: &str) -> std::result::Result<Vec<(u16, u16)>, String> {
    let port = |p: &str| p.trim().parse::<u16>().map_err(|_| format!("{:?} is not a port (0-65535)", p.trim()));
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (port(a)?, port(b)?);
                if a > b {
                    return Err(format!("range {:?} ends before it starts", p.trim()));
                }
                Ok((a, b))
            }
            None => port(p).map(|v| (v, v)),
        })
        .collect()
}

/// A parsed and validated `lanes.toml`.
#[derive(Clone, Debug)]
pub struct ConfigFile {
    path: PathBuf,
    parsed: ParsedConfig,
    cluster: Option<ClusterConfig>,
}

impl ConfigFile {
    /// Reads `LANES_CONFIG` (which must exist when set), else the default path if present.
    pub fn load_from_env() -> Result<Option<Self>> {
        match std::env::var_os("LANES_CONFIG") {
            Some(p) if !p.is_empty() => Self::load(Path::new(&p)).map(Some),
            _ => {
                let p = Path::new(DEFAULT_CONFIG_PATH);
                if p.exists() {
                    Self::load(p).map(Some)
                } else {
                    Ok(None)
                }
            }
        }
    }

    /// Reads and validates one configuration file.
    pub fn load(path: &Path) -> Result<Self> {
        use std::io::Read;
        /// Far more than any cluster's description; a larger file is a mistake.
        const MAX_CONFIG_BYTES: u64 = 1 << 20;
        let err = |message: String| Error::Config { path: path.to_path_buf(), message };
        // Opened without blocking: a FIFO at the configured path is refused, not waited on.
        let file = crate::platform::files::open_config(path).map_err(|e| err(format!("cannot read: {e}")))?;
        let mut text = String::new();
        (&*file).take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text).map_err(|e| err(format!("cannot read: {e}")))?;
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(err(format!("larger than {MAX_CONFIG_BYTES} bytes")));
        }
        Self::parse(path, &text)
    }

    /// Parses configuration text; `path` names it in errors.
    pub fn parse(path: &Path, text: &str) -> Result<Self> {
        let err = |message: String| Error::Config { path: path.to_path_buf(), message };
        let parsed: ParsedConfig = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        let default_port = parsed.cluster.as_ref().and_then(|c| c.port).unwrap_or(DEFAULT_PORT);
        let mut seen_ids = std::collections::HashSet::new();
        // Per host: the first node listing it and the address it gave (parsed).
        let mut hosts: std::collections::HashMap<&str, (u32, Option<std::net::SocketAddr>)> =
            std::collections::HashMap::new();
        for n in &parsed.node {
            NodeId::new(n.id).map_err(|e| err(format!("node entry for host {:?}: {e}", n.host)))?;
            if n.host.is_empty() {
                return Err(err(format!("node {} has an empty host name", n.id)));
            }
            if !seen_ids.insert(n.id) {
                return Err(err(format!("node id {} is listed twice", n.id)));
            }
            let address = match &n.address {
                Some(a) => Some(
                    parse_address(a, default_port)
                        .map_err(|why| err(format!("node {} (host {:?}): address {a:?}: {why}", n.id, n.host)))?,
                ),
                None => None,
            };
            match hosts.get(n.host.as_str()) {
                Some(&(first, other)) if other != address => {
                    let show = |a: Option<std::net::SocketAddr>| a.map_or("none".to_string(), |a| a.to_string());
                    return Err(err(format!(
                        "host {:?} has two addresses: {} (node {first}) and {} (node {}); nodes of one host \
                         must agree on its address",
                        n.host,
                        show(other),
                        show(address),
                        n.id
                    )));
                }
                Some(_) => {}
                None => {
                    hosts.insert(&n.host, (n.id, address));
                }
            }
        }
        let cluster = match &parsed.cluster {
            Some(section) => Some(ClusterConfig::build(section, &parsed.node).map_err(err)?),
            None => None,
        };
        if let Some(ip) = &parsed.ip {
            ip.check(parsed.node.iter().map(|n| n.id)).map_err(|why| err(format!("[ip] {why}")))?;
        }
        if let Some(sockets) = &parsed.sockets {
            for (key, list) in [("include", &sockets.include), ("exclude", &sockets.exclude)] {
                if let Some(list) = list {
                    parse_port_list(list).map_err(|why| err(format!("[sockets] {key}: {why}")))?;
                }
            }
            if let Some(remote) = &sockets.remote {
                RemoteMode::parse(remote).map_err(|why| err(format!("[sockets] {why}")))?;
            }
        }
        Ok(ConfigFile { path: path.to_path_buf(), parsed, cluster })
    }

    /// The node id configured for `host`, if any: the first entry naming it (a host with
    /// several nodes picks one with `LANES_NODE_ID`).
    pub fn node_for_host(&self, host: &str) -> Result<Option<NodeId>> {
        self.parsed.node.iter().find(|n| n.host == host).map(|n| NodeId::new(n.id)).transpose()
    }

    /// The nodes listed in the file.
    pub fn nodes(&self) -> &[NodeEntry] {
        &self.parsed.node
    }

    /// Where the file was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The `[cluster]` section with the hosts it spans, if the file has one.
    pub fn cluster(&self) -> Option<&ClusterConfig> {
        self.cluster.as_ref()
    }

    /// The fabric directory the file names, if it names one.
    pub fn dir(&self) -> Option<&Path> {
        self.parsed.dir.as_deref()
    }

    /// The `[sockets]` section, if the file has one (its port lists are valid).
    pub fn sockets(&self) -> Option<&SocketsSection> {
        self.parsed.sockets.as_ref()
    }

    /// The `[ip]` section, if the file has one (its values are valid, and every listed
    /// node has an address in its IPv4 prefix).
    pub fn ip(&self) -> Option<&IpSection> {
        self.parsed.ip.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_validated() {
        assert!(NodeId::new(4).is_ok());
        assert!(NodeId::new(65532).is_ok());
        for bad in [0, 3, 6, 252, 65536] {
            assert!(matches!(NodeId::new(bad), Err(Error::InvalidNodeId { .. })), "{bad}");
        }
        assert!("x".parse::<NodeId>().is_err());
        assert_eq!(" 8 ".parse::<NodeId>().unwrap().get(), 8);
        assert_eq!(NodeId(4).next_after(), NodeId(8));
        assert_eq!(NodeId(248).next_after(), NodeId(256), "skips the broadcast id 252");
        assert_eq!(NodeId(65532).next_after(), NodeId(4));
    }

    #[test]
    fn sockets_section_and_port_lists() {
        let p = Path::new("lanes.toml");
        let f = ConfigFile::parse(p, "[sockets]\nenabled = true\ninclude = \"5201, 8000-8100\"\nring_bytes = 65536\n")
            .unwrap();
        let s = f.sockets().unwrap();
        assert_eq!(s.enabled, Some(true));
        assert_eq!(parse_port_list(s.include.as_deref().unwrap()).unwrap(), vec![(5201, 5201), (8000, 8100)]);
        assert_eq!(s.ring_bytes, Some(65536));
        for bad in ["[sockets]\ninclude = \"x\"\n", "[sockets]\nexclude = \"9-3\"\n", "[sockets]\nports = 1\n"] {
            let e = ConfigFile::parse(p, bad).unwrap_err().to_string();
            assert!(e.contains("lanes.toml"), "{bad}: {e}");
        }
        let f = ConfigFile::parse(p, "[sockets]\nremote = \"on\"\n").unwrap();
        assert_eq!(f.sockets().unwrap().remote.as_deref(), Some("on"));
        let e = ConfigFile::parse(p, "[sockets]\nremote = \"fast\"\n").unwrap_err().to_string();
        assert!(e.contains("remote = \"fast\" is none of"), "{e}");
        assert_eq!(parse_port_list("70000").unwrap_err(), "\"70000\" is not a port (0-65535)");
        assert_eq!(parse_port_list("").unwrap(), vec![]);
    }

    #[test]
    fn remote_mode_pairs_only_on_providers_that_beat_kernel_tcp() {
        assert_eq!(RemoteMode::parse(" auto ").unwrap(), RemoteMode::Auto);
        assert_eq!(RemoteMode::default(), RemoteMode::Auto);
        assert!(RemoteMode::parse("yes").is_err());
        for p in ["verbs;ofi_rxm", "efa", "cxi", "psm3"] {
            assert_eq!(RemoteMode::Auto.decide(p), Ok(()), "{p}");
        }
        let why = RemoteMode::Auto.decide("tcp;ofi_rxm").unwrap_err();
        assert!(why.contains("\"tcp;ofi_rxm\"") && why.contains("cannot beat kernel TCP"), "{why}");
        assert!(RemoteMode::Auto.decide("shm").is_err(), "shm serves one host only");
        assert_eq!(RemoteMode::On.decide("tcp;ofi_rxm"), Ok(()));
        assert!(RemoteMode::Off.decide("verbs").is_err());
    }

    #[test]
    fn config_maps_hosts_and_rejects_nonsense() {
        let p = Path::new("lanes.toml");
        let c = ConfigFile::parse(p, "[[node]]\nid = 8\nhost = \"a\"\n[[node]]\nid = 12\nhost = \"b\"\n").unwrap();
        assert_eq!(c.node_for_host("b").unwrap(), Some(NodeId(12)));
        assert_eq!(c.node_for_host("zz").unwrap(), None);
        assert!(c.cluster().is_none());
        // Several nodes on one host, agreeing on its address: the first is the host's node.
        let c = ConfigFile::parse(
            p,
            "[[node]]\nid = 8\nhost = \"a\"\n[[node]]\nid = 12\nhost = \"a\"\n[[node]]\nid = 16\nhost = \"b\"\n",
        )
        .unwrap();
        assert_eq!(c.node_for_host("a").unwrap(), Some(NodeId(8)));
        for bad in [
            "[[node]]\nid = 7\nhost = \"a\"\n",
            "[[node]]\nid = 8\nhost = \"a\"\n[[node]]\nid = 8\nhost = \"b\"\n",
            // Two addresses for one host, or an address that is not one.
            "[[node]]\nid = 8\nhost = \"a\"\naddress = \"10.0.0.1\"\n[[node]]\nid = 12\nhost = \"a\"\naddress = \"10.0.0.2\"\n",
            "[[node]]\nid = 8\nhost = \"a\"\naddress = \"10.0.0.1\"\n[[node]]\nid = 12\nhost = \"a\"\n",
            "[[node]]\nid = 8\nhost = \"a\"\naddress = \"alpha.example\"\n",
            "[[node]]\nid = 8\n",
            "nodes = 3\n",
            "[[node]\n",
        ] {
            let e = ConfigFile::parse(p, bad).unwrap_err();
            assert!(matches!(e, Error::Config { .. }), "{bad:?} gave {e}");
            assert!(e.to_string().contains("lanes.toml"), "{e}");
        }
    }

    #[test]
    fn the_default_directory_moves_to_the_runtime_directory_only_when_squatted() {
        use std::os::unix::fs::MetadataExt;
        let base = std::env::temp_dir().join(format!("lanes-defdir-{}", std::process::id()));
        let shm = base.join("shm");
        let runtime = base.join("runtime");
        std::fs::create_dir_all(&shm).unwrap();
        std::fs::create_dir_all(&runtime).unwrap();
        let me = std::fs::metadata(&base).unwrap().uid();
        // Nothing there yet: the shared name.
        assert_eq!(choose_default_dir(me, &shm, &runtime), shm.join(format!("lanes-{me}")));
        // Ours already: kept.
        std::fs::create_dir(shm.join(format!("lanes-{me}"))).unwrap();
        assert_eq!(choose_default_dir(me, &shm, &runtime), shm.join(format!("lanes-{me}")));
        // Another user (here: a uid that is not the owner) finds the name taken by the
        // owner of these directories. Its runtime directory belongs to somebody else and is
        // not root's (unless the test runs as root): only a private parent is used.
        let other = me.wrapping_add(1);
        std::fs::create_dir(shm.join(format!("lanes-{other}"))).unwrap();
        let chosen = choose_default_dir(other, &shm, &runtime);
        if me == 0 {
            assert_eq!(chosen, runtime.join("lanes"), "a root-owned private runtime directory serves");
        } else {
            assert_eq!(chosen, shm.join(format!("lanes-{other}")), "no private fallback: the error names the owner");
        }
        // A writable-by-others runtime directory never serves.
        std::fs::set_permissions(&runtime, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        assert_eq!(choose_default_dir(other, &shm, &runtime), shm.join(format!("lanes-{other}")));
        // A link squatting the name is no better than a directory.
        std::fs::remove_dir(shm.join(format!("lanes-{other}"))).unwrap();
        std::os::unix::fs::symlink(&runtime, shm.join(format!("lanes-{other}"))).unwrap();
        assert_eq!(choose_default_dir(other, &shm, &runtime), shm.join(format!("lanes-{other}")));
        // Once the user's fallback exists it is kept, whatever the shared name holds.
        std::fs::set_permissions(&runtime, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        std::fs::create_dir(runtime.join("lanes")).unwrap();
        assert_eq!(choose_default_dir(me, &shm, &runtime), runtime.join("lanes"));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
