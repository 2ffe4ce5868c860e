//! Reflective memory: one write lands in the memory of every member of a group.
//!
//! On one host a group is one shared object that every member maps: a store by any member
//! is seen by all, in order per writer, and reads are local loads. Each member maps it twice,
//! a read-only *read* map and a *write* map, the two addresses the hardware gives. The
//! creator may restrict which nodes receive; a fabric holds at most [`MAX_GROUPS`] groups.
//! Members hear of others joining, leaving and dying, and of the group's loss. In the SISCI
//! API this is the broadcast flag: node id 252 (`DIS_BROADCAST_NODEID_GROUP_ALL`) with the
//! group id as segment id.
//!
//! A group is an object of its own kind in its creator's node directory (so liveness, stale
//! replacement and clean-up are the segment code); joining finds it by id in any node.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::events::{self, LocalEvent};
use super::local::LocalSegment;
use super::map::{Map, MapAccess};
use super::remote::{LossReason, RemoteSegment, RemoteState};
use super::slot_tracker::{Ringer, SlotTracker};
use super::{FabricInner, Timeout};
use crate::config::NodeId;
use crate::error::{Error, IoContext, Result};
use crate::platform::doorbell::WaitError;
use crate::platform::files::DirLock;
use crate::transport::shm::layout::{kind, state, MAX_RECEIVERS};
use crate::transport::shm::segment_file::SegmentFile;
use crate::transport::shm::FabricPaths;

/// Reflective groups a fabric holds at once.
pub const MAX_GROUPS: usize = 4;

/// What a member (or the creator) of a group hears.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupEvent {
    /// A node process joined.
    Joined { node: u32, pid: u32 },
    /// A node process left; `died` when it went away without leaving.
    Left { node: u32, pid: u32, died: bool },
    /// The group is gone (its creator removed it or died). The last event.
    Lost(LossReason),
}

impl From<LocalEvent> for GroupEvent {
    fn from(e: LocalEvent) -> Self {
        match e {
            LocalEvent::Connected { node, pid } => GroupEvent::Joined { node, pid },
            LocalEvent::Disconnected { node, pid, died } => GroupEvent::Left { node, pid, died },
        }
    }
}

/// Live groups as (creator node, group id), found in every node directory.
fn live_groups(fabric: &FabricInner) -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    let Ok(nodes) = std::fs::read_dir(fabric.paths.nodes()) else { return out };
    for n in nodes.flatten() {
        let Some(node) = n.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(files) = std::fs::read_dir(n.path()) else { continue };
        for f in files.flatten() {
            let Some((k, id)) = f.file_name().to_str().and_then(FabricPaths::parse_object_file_name) else { continue };
            if k != kind::REFLECTIVE {
                continue;
            }
            if let Ok(file) = SegmentFile::open(&fabric.paths, kind::REFLECTIVE, node, id) {
                let alive = file.header().state() & state::REMOVED == 0 && fabric.is_alive(node, file.snapshot().owner);
                if alive {
                    out.push((node, id));
                }
            }
        }
    }
    out
}

fn group_lock(fabric: &FabricInner) -> Result<DirLock> {
    let path = fabric.paths.nodes().join(".reflective.lock");
    DirLock::acquire(&path).context(|| format!("locking {}", path.display()))
}

/// The read-only and the writable map of the whole group.
fn maps(map: impl Fn(MapAccess) -> Result<Map>) -> Result<(Map, Map)> {
    Ok((map(MapAccess::ReadOnly)?, map(MapAccess::ReadWrite)?))
}

/// A group this process created; it is a member too. Dropping it removes the group.
#[derive(Debug)]
pub struct ReflectiveGroup {
    seg: LocalSegment,
    read: Map,
    write: Map,
}

impl ReflectiveGroup {
    pub(crate) fn create(fabric: &Arc<FabricInner>, group: u32, size: u64, receivers: &[u32]) -> Result<Self> {
        if receivers.len() > MAX_RECEIVERS {
            return Err(Error::InvalidSize {
                size: receivers.len() as u64,
                reason: "a receiver list names at most 64 nodes",
            });
        }
        for &r in receivers {
            NodeId::new(r)?;
        }
        let _lock = group_lock(fabric)?;
        let live = live_groups(fabric);
        if let Some(&(node, _)) = live.iter().find(|&&(_, id)| id == group) {
            return Err(Error::GroupInUse { group, node });
        }
        if live.len() >= MAX_GROUPS {
            return Err(Error::TooManyGroups { max: MAX_GROUPS });
        }
        let seg = LocalSegment::create(fabric, kind::REFLECTIVE, Some(group), size, None).map_err(|e| match e {
            Error::SegmentIdInUse { node, .. } => Error::GroupInUse { group, node },
            other => other,
        })?;
        seg.inner.file.header().set_receivers(receivers);
        seg.prepare()?;
        let (read, write) = maps(|a| seg.map(0, size, a))?;
        seg.set_available()?;
        Ok(ReflectiveGroup { seg, read, write })
    }

    /// The group id.
    pub fn id(&self) -> u32 {
        self.seg.id()
    }

    /// Bytes of reflective memory.
    pub fn size(&self) -> u64 {
        self.seg.size()
    }

    /// The local, read-only view: loads see every member's stores.
    pub fn read_map(&self) -> &Map {
        &self.read
    }

    /// The multicast view: stores reach every member.
    pub fn write_map(&self) -> &Map {
        &self.write
    }

    /// The group's memory as a local segment (the source or target of DMA on this node).
    pub fn local_segment(&self) -> &LocalSegment {
        &self.seg
    }

    /// The members other than this creator, as (node, pid).
    pub fn members(&self) -> Vec<(u32, u32)> {
        self.seg.connected_peers()
    }

    /// Waits for a member to join or leave.
    pub fn wait_event(&self, timeout: Timeout) -> Result<GroupEvent> {
        self.seg.wait_event(timeout).map(GroupEvent::from)
    }

    /// Removes the group: members get `Lost(Removed)`.
    pub fn remove(&self) -> Result<()> {
        self.seg.remove(true)
    }
}

/// Membership of a group another process created. Dropping it leaves the group.
pub struct ReflectiveMember {
    seg: RemoteSegment,
    read: Map,
    write: Map,
    tracker: SlotTracker,
    reported_lost: AtomicBool,
}

impl std::fmt::Debug for ReflectiveMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReflectiveMember").field("group", &self.seg.id()).finish_non_exhaustive()
    }
}

impl ReflectiveMember {
    pub(crate) fn join(fabric: &Arc<FabricInner>, group: u32, timeout: Timeout) -> Result<Self> {
        let start = Instant::now();
        let mut pause = Duration::from_micros(200);
        loop {
            if let Some(&(node, _)) = live_groups(fabric).iter().find(|&&(_, id)| id == group) {
                match Self::join_at(fabric, node, group) {
                    Err(Error::NoSuchSegment { .. } | Error::NotAvailable { .. }) => {}
                    other => return other,
                }
            }
            let waited = start.elapsed();
            match timeout {
                Timeout::Immediate => return Err(Error::NoSuchGroup { group }),
                Timeout::After(t) if waited >= t => {
                    return Err(Error::Timeout {
                        what: format!("reflective group {group}"),
                        waited_ms: waited.as_millis() as u64,
                    })
                }
                _ => {}
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }

    fn join_at(fabric: &Arc<FabricInner>, node: u32, group: u32) -> Result<Self> {
        let seg = RemoteSegment::connect(fabric, kind::REFLECTIVE, NodeId::new(node)?, group, Timeout::Immediate)?;
        let header = seg.inner.shm().file().header();
        let receivers = header.receivers().map_err(Error::Malformed)?;
        let me = fabric.node.get();
        if !receivers.is_empty() && !receivers.contains(&me) {
            return Err(Error::NotAReceiver { node: me, group });
        }
        // Losing the group must wake a member waiting for membership events.
        // SAFETY: the doorbell lies in the header page of `seg`'s own file, which lives as
        // long as the connection the doorbell is registered with.
        unsafe { seg.inner.shm().ring_on_loss(header.conn_doorbell()) };
        let size = seg.size();
        let (read, write) = maps(|a| seg.map(0, size, a))?;
        Ok(ReflectiveMember {
            seg,
            read,
            write,
            tracker: SlotTracker::new(Some(fabric.identity)),
            reported_lost: AtomicBool::new(false),
        })
    }

    /// The group id.
    pub fn id(&self) -> u32 {
        self.seg.id()
    }

    /// The creator's node.
    pub fn creator_node(&self) -> u32 {
        self.seg.node_id()
    }

    /// Bytes of reflective memory.
    pub fn size(&self) -> u64 {
        self.seg.size()
    }

    /// The local, read-only view.
    pub fn read_map(&self) -> &Map {
        &self.read
    }

    /// The multicast view.
    pub fn write_map(&self) -> &Map {
        &self.write
    }

    /// The group as a remote segment: the target of DMA writes to the group.
    pub fn segment(&self) -> &RemoteSegment {
        &self.seg
    }

    /// Every other member, creator included, as (node, pid).
    pub fn members(&self) -> Vec<(u32, u32)> {
        let inner = &self.seg.inner;
        let me = inner.fabric.identity;
        let file = inner.shm().file();
        let snap = file.snapshot();
        let mut out = vec![(snap.node_id, snap.owner.pid())];
        out.extend(
            file.header()
                .connections()
                .into_iter()
                .filter(|&(n, id)| id != me && inner.fabric.is_alive(n, id))
                .map(|(n, id)| (n, id.pid())),
        );
        out
    }

    /// Waits for another member to join or leave, or for the group's loss (reported once;
    /// later waits fail with [`Error::SegmentLost`]).
    pub fn wait_event(&self, timeout: Timeout) -> Result<GroupEvent> {
        let inner = &self.seg.inner;
        if self.reported_lost.load(Ordering::Acquire) {
            inner.check()?;
        }
        let weak: Weak<_> = Arc::downgrade(inner);
        let ring: Ringer = Arc::new(move || {
            if let Some(i) = weak.upgrade() {
                i.shm().file().header().conn_doorbell().ring();
            }
        });
        let header = inner.shm().file().header();
        let r = header.conn_doorbell().wait(
            || {
                if let RemoteState::Lost(reason) = inner.state() {
                    self.reported_lost.store(true, Ordering::Release);
                    return Some(GroupEvent::Lost(reason));
                }
                self.tracker.next(&inner.fabric, header, &ring).map(GroupEvent::from)
            },
            || None::<()>,
            inner.poll_time(),
            events::deadline(timeout),
        );
        r.map_err(|e| match e {
            WaitError::TimedOut | WaitError::Aborted(()) => Error::Timeout {
                what: format!("an event of reflective group {}", self.seg.id()),
                waited_ms: super::interrupt::timeout_ms(timeout),
            },
        })
    }

    /// Leaves the group.
    pub fn leave(self) {
        drop(self)
    }
}
