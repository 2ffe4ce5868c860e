//! What is on a fabric (for `lanes status`) and tidying up after dead processes
//! (for `lanes cleanup`).

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::error::{IoContext, Result};
use crate::platform::files::{verify_fabric_dir, DirLock};
use crate::platform::liveness::{self, ProcessIdentity};
use crate::transport::shm::layout::{kind, state};
use crate::transport::shm::segment_file::{OpenError, SegmentFile};
use crate::transport::shm::FabricPaths;

/// Everything on one fabric directory.
#[derive(Clone, Debug, Serialize)]
pub struct FabricStatus {
    pub dir: PathBuf,
    pub nodes: Vec<NodeStatus>,
    pub segments: Vec<SegmentStatus>,
}

/// A node and the live processes acting as it.
#[derive(Clone, Debug, Serialize)]
pub struct NodeStatus {
    pub node: u32,
    pub pids: Vec<u32>,
    /// Records of processes that died without unregistering.
    pub stale_records: usize,
}

/// One fabric object file: a segment, an interrupt or a data interrupt.
#[derive(Clone, Debug, Serialize)]
pub struct SegmentStatus {
    /// "segment", "interrupt" or "data-interrupt".
    pub kind: &'static str,
    pub node: u32,
    pub id: u32,
    pub size: u64,
    pub owner_pid: u32,
    /// The owner lives and has not removed the segment.
    pub alive: bool,
    /// "prepared", "available", "shared", "removed", joined by '+'.
    pub state: String,
    /// Live connected peers as (node, pid).
    pub connections: Vec<(u32, u32)>,
    /// Why the file is not a usable segment, if it is not.
    pub corrupt: Option<String>,
}

fn state_name(bits: u32) -> String {
    let names: Vec<&str> = [
        (state::PREPARED, "prepared"),
        (state::AVAILABLE, "available"),
        (state::SHARED, "shared"),
        (state::REMOVED, "removed"),
    ]
    .iter()
    .filter(|(b, _)| bits & b != 0)
    .map(|(_, n)| *n)
    .collect();
    if names.is_empty() {
        "created".into()
    } else {
        names.join("+")
    }
}

fn kind_label(k: u32) -> &'static str {
    match k {
        kind::INTERRUPT => "interrupt",
        kind::DATA_INTERRUPT => "data-interrupt",
        kind::REFLECTIVE => "reflective",
        _ => "segment",
    }
}

/// Object files of every node directory: (node, kind, id, path). A missing directory holds
/// none; one that cannot be read is an error naming it.
fn object_files(paths: &FabricPaths) -> Result<Vec<(u32, u32, u32, PathBuf)>> {
    let mut out = Vec::new();
    let nodes_dir = paths.nodes();
    let Some(nodes) = read_dir_if_present(&nodes_dir)? else { return Ok(out) };
    for n in nodes {
        let n = n.context(|| format!("reading {}", nodes_dir.display()))?;
        let Some(node) = n.file_name().to_str().and_then(FabricPaths::parse_node_dir_name) else { continue };
        let node_dir = n.path();
        if !n.file_type().is_ok_and(|t| t.is_dir()) {
            continue; // not a node directory (and never followed if it is a link)
        }
        let Some(segs) = read_dir_if_present(&node_dir)? else { continue };
        for s in segs {
            let s = s.context(|| format!("reading {}", node_dir.display()))?;
            if let Some((k, id)) = s.file_name().to_str().and_then(FabricPaths::parse_object_file_name) {
                out.push((node, k, id, s.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Checks that `dir` is a fabric directory this user may read: ours (or, for root, any
/// user's), readable. A missing one is an empty fabric.
fn check_fabric_dir(dir: &Path) -> Result<()> {
    match verify_fabric_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(crate::error::Error::io("fabric directory", e)),
        Ok(()) => {}
    }
    read_dir_if_present(dir).map(drop)
}

/// `read_dir(dir)`, `None` if it does not exist.
fn read_dir_if_present(dir: &Path) -> Result<Option<fs::ReadDir>> {
    match fs::read_dir(dir) {
        Ok(d) => Ok(Some(d)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(crate::error::Error::io(format!("reading {}", dir.display()), e)),
    }
}

/// The process records of `procs`, or an error naming the directory.
fn records(procs: &Path) -> Result<Vec<liveness::RecordInfo>> {
    liveness::list_records(procs).context(|| "reading the process records".to_string())
}

fn alive(procs: &Path, node: u32, id: ProcessIdentity) -> bool {
    liveness::is_alive(procs, node, id)
}

/// Reads the fabric directory `dir`: nodes, their processes, and every segment.
pub fn status(dir: &Path) -> Result<FabricStatus> {
    let paths = FabricPaths::new(dir);
    // An unreadable or foreign fabric is an error, not "none".
    check_fabric_dir(dir)?;
    let procs = paths.procs();
    let mut nodes: Vec<NodeStatus> = Vec::new();
    for r in records(&procs)? {
        let i = match nodes.iter().position(|n| n.node == r.node) {
            Some(i) => i,
            None => {
                nodes.push(NodeStatus { node: r.node, pids: Vec::new(), stale_records: 0 });
                nodes.len() - 1
            }
        };
        if r.alive {
            nodes[i].pids.push(r.pid);
        } else {
            nodes[i].stale_records += 1;
        }
    }
    let mut segments = Vec::new();
    for (node, k, id, path) in object_files(&paths)? {
        segments.push(match SegmentFile::open_path(&path, k, node, id) {
            Ok(f) => {
                let snap = *f.snapshot();
                let st = f.header().state();
                let connections = f
                    .header()
                    .connections()
                    .into_iter()
                    .filter(|&(n, p, proxy)| proxy || n == 0 || alive(&procs, n, p))
                    .map(|(n, p, _)| (n, p.pid()))
                    .collect();
                SegmentStatus {
                    kind: kind_label(k),
                    node,
                    id,
                    size: snap.segment_size,
                    owner_pid: snap.owner.pid(),
                    alive: st & state::REMOVED == 0 && alive(&procs, node, snap.owner),
                    state: state_name(st),
                    connections,
                    corrupt: None,
                }
            }
            Err(e) => SegmentStatus {
                kind: kind_label(k),
                node,
                id,
                size: 0,
                owner_pid: 0,
                alive: false,
                state: "unreadable".into(),
                connections: Vec::new(),
                corrupt: Some(match e {
                    OpenError::Missing => "vanished while listing".into(),
                    OpenError::Corrupt(r) => r,
                    OpenError::Io(e) => e.to_string(),
                }),
            },
        });
    }
    nodes.sort_by_key(|n| n.node);
    Ok(FabricStatus { dir: dir.to_path_buf(), nodes, segments })
}

/// What [`cleanup`] removed.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CleanupReport {
    /// (node, object id, why): segments, interrupts and data interrupts.
    pub segments: Vec<(u32, u32, String)>,
    /// Process records of dead processes, as (node, pid).
    pub records: Vec<(u32, u32)>,
    /// Export records (cross-host access to objects) no live owner stands behind, as (file
    /// name, why).
    pub exports: Vec<(String, String)>,
}

/// Removes what dead processes left: segments whose owner died (or that are corrupt), their
/// export records, and stale process records. Live segments are never touched; peers that still map a removed
/// segment keep reading it (files are unlinked, never truncated).
pub fn cleanup(dir: &Path) -> Result<CleanupReport> {
    let paths = FabricPaths::new(dir);
    let procs = paths.procs();
    let mut report = CleanupReport::default();
    check_fabric_dir(dir)?;
    for (node, k, id, path) in object_files(&paths)? {
        let _lock = DirLock::acquire(&paths.node_lock(node)).context(|| format!("locking node directory {node}"))?;
        let why = match SegmentFile::open_path(&path, k, node, id) {
            Ok(f) => {
                let st = f.header().state();
                if st & state::REMOVED != 0 {
                    Some("removed".to_string())
                } else if !alive(&procs, node, f.snapshot().owner) {
                    Some(format!("owner pid {} is dead", f.snapshot().owner.pid()))
                } else {
                    None
                }
            }
            Err(OpenError::Corrupt(r)) => Some(format!("corrupt: {r}")),
            Err(_) => None,
        };
        if let Some(why) = why {
            fs::remove_file(&path).context(|| format!("removing {}", path.display()))?;
            let why = if k == kind::SEGMENT { why } else { format!("{} {why}", kind_label(k)) };
            report.segments.push((node, id, why));
        }
    }
    report.exports = crate::cluster::exports::sweep(dir, |node, pid, bits| {
        ProcessIdentity::from_bits(bits).is_some_and(|id| id.pid() == pid && alive(&procs, node, id))
    });
    for r in records(&procs)? {
        if !r.alive {
            // A record is recreated (and relocked) by its owner, so unlinking a dead one is safe.
            if fs::remove_file(&r.path).is_ok() {
                report.records.push((r.node, r.pid));
            }
        }
    }
    Ok(report)
}
