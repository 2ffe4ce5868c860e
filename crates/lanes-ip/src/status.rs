//! What a running interface reports: `ip/<node>.json` in the fabric directory, rewritten
//! every second (temp file and rename), read by `lanes status` and `lanes ip down`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Counters of one interface (since it came up).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct Counters {
    pub tx_packets: u64,
    pub tx_bytes: u64,
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Dropped: the receiver's ring stayed full.
    pub drop_full: u64,
    /// Dropped: no connected node has the destination's address.
    pub drop_no_peer: u64,
    /// Dropped: the destination is outside the prefixes, or the packet is not IP.
    pub drop_no_route: u64,
    /// Dropped: larger than a record holds.
    pub drop_too_big: u64,
    /// Records refused by the local TUN device on delivery.
    pub drop_rejected: u64,
    /// Pairs taken down because a peer's ring words could not be valid.
    pub bad_ring: u64,
}

/// One peer as the interface sees it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct PeerStatus {
    pub node: u32,
    /// "connected" or "waiting" (its hello is there, its rings not yet).
    pub state: String,
    pub tx_packets: u64,
    pub rx_packets: u64,
}

/// One interface.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct IfaceStatus {
    pub node: u32,
    pub pid: u32,
    pub name: String,
    pub ipv4: String,
    pub ipv6: String,
    pub mtu: u32,
    pub queues: usize,
    pub offloads: String,
    pub carrier: bool,
    pub peers: Vec<PeerStatus>,
    pub counters: Counters,
    /// Whether the process still lives (filled in by [`list`], not written).
    #[serde(skip_serializing)]
    pub alive: bool,
}

/// `<fabric>/ip`.
pub fn dir(fabric: &Path) -> PathBuf {
    fabric.join("ip")
}

/// Writes `s` as `<fabric>/ip/<node>.json`.
pub fn write(fabric: &Path, s: &IfaceStatus) -> std::io::Result<()> {
    let d = dir(fabric);
    lanes::platform::files::ensure_private_dir(&d)?;
    let tmp = d.join(format!(".{}.json.{}", s.node, std::process::id()));
    let text = serde_json::to_vec_pretty(s).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, d.join(format!("{}.json", s.node)))
}

/// Removes this node's file (when the interface goes down).
pub fn remove(fabric: &Path, node: u32) {
    let _ = std::fs::remove_file(dir(fabric).join(format!("{node}.json")));
}

/// Every interface's status file, with whether its process lives; files that are not
/// status files (not regular, not ours, not parsable) are skipped.
pub fn list(fabric: &Path) -> Vec<IfaceStatus> {
    let Ok(entries) = std::fs::read_dir(dir(fabric)) else { return Vec::new() };
    let mut v: Vec<IfaceStatus> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.ends_with(".json") && !n.starts_with('.')))
        .filter_map(|e| {
            use std::io::Read;
            let mut text = String::new();
            let f = lanes::platform::files::open_existing(&e.path(), false).ok()?;
            f.take(1 << 20).read_to_string(&mut text).ok()?;
            let mut s: IfaceStatus = serde_json::from_str(&text).ok()?;
            s.alive = lanes::platform::liveness::pid_alive(s.pid);
            Some(s)
        })
        .collect();
    v.sort_by_key(|s| s.node);
    v
}
