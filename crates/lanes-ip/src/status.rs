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
    /// Receive threads' sleeps that ended with packets to take (woken by a peer).
    pub wakeups: u64,
    /// Packets a transmit thread took off the rings while it spun for an answer.
    pub caught: u64,
    /// Packets a receive thread sent right after it delivered (the kernel's answers).
    pub answered: u64,
    /// ICMP/ICMPv6 "destination unreachable" written back for packets to a node of the
    /// prefixes without the interface (of the `drop_no_peer` ones).
    pub unreachable: u64,
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
    // Not through a link or into a FIFO someone left under the temporary name.
    let _ = std::fs::remove_file(&tmp);
    let f = lanes::platform::files::open_or_create(&tmp)?;
    std::io::Write::write_all(&mut &*f, &text)?;
    std::fs::rename(&tmp, d.join(format!("{}.json", s.node)))
}

/// Removes the status files of interfaces whose process is gone (`lanes cleanup`);
/// returns the nodes whose files went.
pub fn cleanup(fabric: &Path) -> Vec<u32> {
    list(fabric)
        .into_iter()
        .filter(|s| !s.alive)
        .map(|s| {
            remove(fabric, s.node);
            s.node
        })
        .collect()
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
            (&*f).take(1 << 20).read_to_string(&mut text).ok()?;
            let mut s: IfaceStatus = serde_json::from_str(&text).ok()?;
            s.alive = lanes::platform::liveness::pid_running(s.pid);
            Some(s)
        })
        .collect();
    v.sort_by_key(|s| s.node);
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes_testkit::TestDir;

    fn exited_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().expect("spawn true");
        let pid = child.id();
        child.wait().expect("wait true");
        pid
    }

    #[test]
    fn cleanup_removes_the_files_of_ended_interfaces_only() {
        let dir = TestDir::new("ip-status");
        let fabric = dir.root();
        let live = IfaceStatus { node: 8, pid: std::process::id(), name: "lanes0".into(), ..Default::default() };
        let dead = IfaceStatus { node: 12, pid: exited_pid(), name: "lanes0".into(), ..Default::default() };
        write(fabric, &live).unwrap();
        write(fabric, &dead).unwrap();
        assert_eq!(list(fabric).iter().map(|s| (s.node, s.alive)).collect::<Vec<_>>(), [(8, true), (12, false)]);
        assert_eq!(cleanup(fabric), [12]);
        assert_eq!(list(fabric).iter().map(|s| s.node).collect::<Vec<_>>(), [8]);
    }

    #[test]
    fn a_link_under_the_temporary_name_is_not_followed() {
        let dir = TestDir::new("ip-status-link");
        let fabric = dir.root();
        std::fs::create_dir_all(super::dir(fabric)).unwrap();
        std::fs::set_permissions(super::dir(fabric), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
        let victim = fabric.join("victim");
        std::fs::write(&victim, b"untouched").unwrap();
        let s = IfaceStatus { node: 8, pid: std::process::id(), ..Default::default() };
        let tmp = super::dir(fabric).join(format!(".8.json.{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        write(fabric, &s).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"untouched");
        assert_eq!(list(fabric).len(), 1);
    }
}
