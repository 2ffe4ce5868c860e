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
//!
//! In a process whose fabric is part of a cluster (it has a transport to other hosts),
//! groups span hosts: the object holds the group's bytes and a roster, every member keeps
//! its own copy, read maps are that copy and write maps post to every other copy at
//! barriers, in order per writer (the transport's [`HostGroup`], through
//! [`HostTransport::create_group`] and [`HostTransport::join_group`]; docs/ARCHITECTURE.md,
//! "Reflective memory"). Ids are unique and at most four groups exist in the whole cluster.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::events::{self, LocalEvent};
use super::local::LocalSegment;
use super::map::{Map, MapOrigin};
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
use crate::transport::MapAccess;
use crate::transport::{GroupFanout, HostGroup, HostTransport, Hosts, RosterSlot};

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
        let Some(node) = n.file_name().to_str().and_then(FabricPaths::parse_node_dir_name) else { continue };
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
    // The maps drop before the segment they map.
    read: Map,
    write: Map,
    seg: LocalSegment,
    size: u64,
    /// A group of a cluster: its fan-out (members' copies) and the creator's sweep of
    /// members that died, run by the transport's service thread while this holds it.
    across: Option<(Arc<GroupFanout>, Sweep)>,
}

/// The creator's sweep task (held: the transport keeps only a weak reference).
struct Sweep(#[allow(dead_code)] Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Sweep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sweep")
    }
}

/// Refuses `group` when `groups` ((creator node, id) pairs) has it already or is full.
fn refuse_taken(groups: &[(u32, u32)], group: u32) -> Result<()> {
    if let Some(&(node, _)) = groups.iter().find(|&&(_, id)| id == group) {
        return Err(Error::GroupInUse { group, node });
    }
    if groups.len() >= MAX_GROUPS {
        return Err(Error::TooManyGroups { max: MAX_GROUPS });
    }
    Ok(())
}

/// Refuses a map of `size` bytes at `offset` that does not lie inside a group of `bytes`.
fn check_group_range(offset: u64, size: u64, bytes: u64) -> Result<()> {
    if size == 0 {
        return Err(Error::InvalidSize { size, reason: "maps cover at least one byte" });
    }
    if offset.checked_add(size).is_none_or(|end| end > bytes) {
        return Err(Error::OutOfRange { offset, len: size, size: bytes, what: "reflective group" });
    }
    Ok(())
}

/// A write map of group bytes `[offset, offset + size)` of a cluster's group: stores fan out.
fn fanout_map(fan: &Arc<GroupFanout>, offset: u64, size: u64, origin: MapOrigin) -> Result<Map> {
    Ok(Map::new(fan.write_window(offset, size)?, offset, MapAccess::ReadWrite, origin))
}

/// A map of group bytes `[offset, offset + size)` of a member's replica (its file): read-only
/// (the read map), or writable (the member's own copy, whose stores stay in it).
fn replica_map(
    replica: &std::os::fd::OwnedFd,
    offset: u64,
    size: u64,
    access: MapAccess,
    origin: MapOrigin,
) -> Result<Map> {
    use std::os::fd::AsFd;

    use crate::platform::mapping::Access;
    use crate::transport::shm::segment_file::DataMapping;
    use crate::transport::Window;
    let a = match access {
        MapAccess::ReadOnly => Access::ReadOnly,
        MapAccess::ReadWrite => Access::ReadWrite,
    };
    let view = DataMapping::of_file(replica.as_fd(), offset, size, a)
        .map_err(|e| Error::io(format!("mapping {size} bytes at offset {offset} of a replica"), e))?;
    Ok(Map::new(Window::Direct(view), offset, access, origin))
}

/// Creates the `refl-` object of `group` with `bytes` of data; an id in use is the group's.
fn create_object(fabric: &Arc<FabricInner>, group: u32, bytes: u64) -> Result<LocalSegment> {
    LocalSegment::create(fabric, kind::REFLECTIVE, Some(group), bytes, None).map_err(|e| match e {
        Error::SegmentIdInUse { node, .. } => Error::GroupInUse { group, node },
        other => other,
    })
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
        if let Some(hosts) = &fabric.hosts {
            return Self::create_across(fabric, hosts, group, size, receivers);
        }
        let _lock = group_lock(fabric)?;
        refuse_taken(&live_groups(fabric), group)?;
        let seg = create_object(fabric, group, size)?;
        seg.inner.file.header().set_receivers(receivers);
        seg.prepare()?;
        let (read, write) = maps(|a| seg.map(0, size, a))?;
        seg.set_available()?;
        Ok(ReflectiveGroup { seg, read, write, size, across: None })
    }

    /// Creates a group of a cluster: unique among the hosts that answer (refused while one
    /// cannot answer), with a roster after its data, exported; its write map fans out.
    fn create_across(
        fabric: &Arc<FabricInner>,
        hosts: &Hosts,
        group: u32,
        size: u64,
        receivers: &[u32],
    ) -> Result<Self> {
        use crate::platform::mapping::Access;

        if size == 0 {
            return Err(Error::InvalidSize { size, reason: "a group holds at least one byte" });
        }
        if size > i64::MAX as u64 / 4 {
            return Err(Error::InvalidSize { size, reason: "larger than the address space" });
        }
        let me = fabric.node.get();
        refuse_taken(&across::cluster_groups(fabric, group)?, group)?;
        let lock = group_lock(fabric)?;
        refuse_taken(&live_groups(fabric), group)?;
        let object = Hosts::group_object_size(size);
        let seg = create_object(fabric, group, object)?;
        seg.inner.file.header().set_receivers(receivers);
        seg.prepare()?;
        let whole = seg
            .inner
            .file
            .map_data(0, object, Access::ReadWrite)
            .map_err(|e| Error::io("mapping a reflective group's roster", e))?;
        let read = seg.map(0, size, MapAccess::ReadOnly)?;
        let fan = hosts.create_group(whole, size, receivers, me)?;
        let write = fanout_map(&fan, 0, size, MapOrigin::Local(seg.inner.clone()))?;
        let sweep: Arc<dyn Fn() + Send + Sync> = {
            // The segment's file, not the segment: see `LocalInner::file`.
            let (fan, file) = (Arc::downgrade(&fan), Arc::downgrade(&seg.inner.file));
            Arc::new(move || {
                if let (Some(f), Some(file)) = (fan.upgrade(), file.upgrade()) {
                    let header = file.header();
                    f.sweep_members(&|slot| header.slot(slot).is_none_or(|sl| sl.holder.is_some()));
                }
            })
        };
        hosts.add_periodic(Arc::downgrade(&sweep))?;
        seg.set_available()?;
        drop(lock);
        let g = ReflectiveGroup { seg, read, write, size, across: Some((fan, Sweep(sweep))) };
        // Two hosts may have created the same id (or a fifth group) at once, each before
        // seeing the other's. Same id: the lower node keeps it; one that sees a lower creator
        // gives up at once, one that sees a higher one gives it time to see us and give up,
        // then gives up itself, so at most one survives even when only one saw the other.
        // Too many: the groups after the first four by (node, id) give up.
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let mut all = across::cluster_groups(fabric, group)?;
            all.sort_unstable();
            if all.iter().position(|&g| g == (me, group)).is_some_and(|i| i >= MAX_GROUPS) {
                return Err(Error::TooManyGroups { max: MAX_GROUPS });
            }
            let Some(&(node, _)) = all.iter().find(|&&(n, id)| id == group && n != me) else { break };
            if node < me || Instant::now() >= deadline {
                return Err(Error::GroupInUse { group, node });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(g)
    }

    /// The group id.
    pub fn id(&self) -> u32 {
        self.seg.id()
    }

    /// Bytes of reflective memory.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The local, read-only view: loads see every member's stores.
    pub fn read_map(&self) -> &Map {
        &self.read
    }

    /// The multicast view: stores reach every member.
    pub fn write_map(&self) -> &Map {
        &self.write
    }

    /// Maps `size` bytes of the group from `offset` (for programs that map part of a group,
    /// as SISCI's do): read-only, a view like [`Self::read_map`]'s; read-write, a multicast
    /// view like [`Self::write_map`]'s.
    pub fn map(&self, offset: u64, size: u64, access: MapAccess) -> Result<Map> {
        check_group_range(offset, size, self.size)?;
        if let (Some((fan, _)), MapAccess::ReadWrite) = (&self.across, access) {
            return fanout_map(fan, offset, size, MapOrigin::Local(self.seg.inner.clone()));
        }
        self.seg.map(offset, size, access)
    }

    /// Maps `size` bytes from `offset` of this participant's own copy of the group, as a
    /// receiver's local segment is on reflective hardware: loads see every member's stores,
    /// and stores through a writable map stay in this copy (they are not multicast). On one
    /// host every participant shares one copy, so there such stores are seen by all; across
    /// hosts the creator's copy is its object and each member's its replica.
    pub fn local_map(&self, offset: u64, size: u64, access: MapAccess) -> Result<Map> {
        check_group_range(offset, size, self.size)?;
        self.seg.map(offset, size, access)
    }

    /// The group's memory as a local segment (the source or target of DMA on this node).
    /// For a group spanning hosts it is the creator's object (the group's bytes, then the
    /// roster) and writes to it reach only the creator's copy.
    pub fn local_segment(&self) -> &LocalSegment {
        &self.seg
    }

    /// The members other than this creator, as (node, pid).
    pub fn members(&self) -> Vec<(u32, u32)> {
        if let Some((fan, _)) = &self.across {
            return fan.participants().unwrap_or_default();
        }
        self.seg.connected_peers()
    }

    /// Waits for a member to join or leave.
    pub fn wait_event(&self, timeout: Timeout) -> Result<GroupEvent> {
        self.seg.wait_event(timeout).map(GroupEvent::from)
    }

    /// Removes the group: members get `Lost(Removed)`.
    pub fn remove(&self) -> Result<()> {
        if let Some((fan, _)) = &self.across {
            fan.announce_group_removal();
        }
        self.seg.remove(true)
    }
}

impl Drop for ReflectiveGroup {
    fn drop(&mut self) {
        // Dropping removes the group (the segment's drop): members of other hosts hear it.
        if let Some((fan, _)) = &self.across {
            if !self.seg.inner.is_removed() {
                fan.announce_group_removal();
            }
        }
    }
}

/// This process's part in a group it asked to receive ([`super::Fabric::receive_reflective_group`]):
/// it created the group, or the group existed and it joined as one more member.
#[derive(Debug)]
pub enum GroupReceiver {
    /// The group did not exist: this process created it (and removes it when this drops).
    Created(ReflectiveGroup),
    /// Another process created the group first: this one joined it (and leaves when this
    /// drops).
    Joined(Box<ReflectiveMember>),
}

impl GroupReceiver {
    /// Creates group `group` of `size` bytes, or joins it if another process created it:
    /// several receivers "creating" one group id is how reflective memory is set up on the
    /// hardware (every receiver creates a broadcast segment with the group's id, SISCI
    /// `SCI_FLAG_BROADCAST`). A joiner's `size` must fit in the group. A creator that went
    /// away between the two tries is taken over by the next create.
    pub(crate) fn receive(fabric: &Arc<FabricInner>, group: u32, size: u64) -> Result<GroupReceiver> {
        let mut last = None;
        for attempt in 0..64u32 {
            match ReflectiveGroup::create(fabric, group, size, &[]) {
                Ok(g) => return Ok(GroupReceiver::Created(g)),
                Err(e @ Error::GroupInUse { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
            match ReflectiveMember::join(fabric, group, Timeout::Immediate) {
                Ok(m) if size > m.size() => {
                    return Err(Error::InvalidSize {
                        size,
                        reason: "larger than the reflective group another receiver created",
                    })
                }
                Ok(m) => return Ok(GroupReceiver::Joined(Box::new(m))),
                // The creator went away, or has not made the group available yet.
                Err(Error::NoSuchGroup { .. } | Error::NoSuchSegment { .. } | Error::NotAvailable { .. }) => {}
                Err(e) => return Err(e),
            }
            std::thread::sleep(Duration::from_micros(200 << attempt.min(5)));
        }
        Err(last.unwrap_or(Error::GroupInUse { group, node: fabric.node.get() }))
    }

    /// The group id.
    pub fn id(&self) -> u32 {
        match self {
            GroupReceiver::Created(g) => g.id(),
            GroupReceiver::Joined(m) => m.id(),
        }
    }

    /// Bytes of reflective memory.
    pub fn size(&self) -> u64 {
        match self {
            GroupReceiver::Created(g) => g.size(),
            GroupReceiver::Joined(m) => m.size(),
        }
    }

    /// This receiver's own copy ([`ReflectiveGroup::local_map`], [`ReflectiveMember::local_map`]).
    pub fn local_map(&self, offset: u64, size: u64, access: MapAccess) -> Result<Map> {
        match self {
            GroupReceiver::Created(g) => g.local_map(offset, size, access),
            GroupReceiver::Joined(m) => m.local_map(offset, size, access),
        }
    }

    /// A multicast map (read-write) or a read map of part of the group ([`ReflectiveGroup::map`]).
    pub fn map(&self, offset: u64, size: u64, access: MapAccess) -> Result<Map> {
        match self {
            GroupReceiver::Created(g) => g.map(offset, size, access),
            GroupReceiver::Joined(m) => m.map(offset, size, access),
        }
    }
}

/// Membership of a group another process created. Dropping it leaves the group.
pub struct ReflectiveMember {
    // The maps drop before the connection.
    read: Map,
    write: Map,
    seg: RemoteSegment,
    size: u64,
    tracker: SlotTracker,
    reported_lost: AtomicBool,
    /// A group of a cluster: the replica's file (for read-only maps of part of it).
    replica: Option<std::os::fd::OwnedFd>,
    /// A group of a cluster: the other members as last read from the roster.
    roster_events: Box<std::sync::Mutex<RosterEvents>>,
}

/// Membership events of a cluster's group, found by comparing roster reads: a member's
/// control word changes whenever another joined or left (the roster was written first), and
/// then the roster is read again.
#[derive(Debug, Default)]
struct RosterEvents {
    /// The control word at the last roster read (`None`: never read).
    control: Option<u64>,
    /// Members in the roster then: slot -> (generation, node, pid).
    seen: std::collections::BTreeMap<usize, (u64, u32, u32)>,
    queue: std::collections::VecDeque<GroupEvent>,
}

impl RosterEvents {
    /// Reads the roster if the control word moved, queueing who left (first) and who joined.
    /// A roster that cannot be read now is read at a later look.
    fn refresh(&mut self, fan: &GroupFanout, bound: Duration) {
        let control = fan.roster_control();
        if self.control == Some(control) {
            return;
        }
        let Ok(roster) = fan.roster_slots(bound) else { return };
        self.control = Some(control);
        let mut now = std::collections::BTreeMap::new();
        let mut died = std::collections::BTreeSet::new();
        for e in roster {
            let e: RosterSlot = e;
            match e.generation {
                Some(g) => {
                    now.insert(e.slot, (g, e.node, e.pid));
                }
                None => {
                    died.insert(e.slot);
                }
            }
        }
        for (slot, &(g, node, pid)) in &self.seen {
            if now.get(slot).is_none_or(|e| e.0 != g) {
                // A slot taken by a new member before the sweep marked it: not known to have
                // died, reported as a leave.
                self.queue.push_back(GroupEvent::Left { node, pid, died: died.contains(slot) });
            }
        }
        for (slot, &(g, node, pid)) in &now {
            if self.seen.get(slot).is_none_or(|e| e.0 != g) {
                self.queue.push_back(GroupEvent::Joined { node, pid });
            }
        }
        self.seen = now;
    }
}

impl Drop for ReflectiveMember {
    fn drop(&mut self) {
        if let Some(f) = self.fan() {
            f.leave_group();
        }
    }
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
            if let Some(hosts) = &fabric.hosts {
                if let Some(node) = across::creator_of(fabric, group)? {
                    match Self::join_across(fabric, hosts, node, group) {
                        Err(Error::NoSuchSegment { .. } | Error::NotAvailable { .. }) => {}
                        other => return other,
                    }
                }
            }
            let single_host = fabric.hosts.is_none();
            if let Some(&(node, _)) = live_groups(fabric).iter().find(|&&(_, id)| id == group && single_host) {
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
            size,
            tracker: SlotTracker::new(Some(fabric.identity)),
            reported_lost: AtomicBool::new(false),
            replica: None,
            roster_events: Default::default(),
        })
    }

    /// Joins a group of a cluster created by `node` (on any host): the transport connects
    /// to its object, fills a replica from it and announces this member
    /// ([`HostTransport::join_group`]).
    fn join_across(fabric: &Arc<FabricInner>, hosts: &Hosts, node: u32, group: u32) -> Result<Self> {
        let (remote, fan, fd) = hosts.join_group(node, group, fabric.node.get())?;
        let seg = RemoteSegment::over(fabric, remote);
        // The member's fan-out lives with its connection (DMA through it goes through it).
        let _ = seg.inner.group.set(fan.clone());
        let size = fan.group_size() as u64;
        let read = replica_map(&fd, 0, size, MapAccess::ReadOnly, MapOrigin::Remote(seg.inner.clone()))?;
        let write = fanout_map(&fan, 0, size, MapOrigin::Remote(seg.inner.clone()))?;
        Ok(ReflectiveMember {
            seg,
            read,
            write,
            size,
            tracker: SlotTracker::new(Some(fabric.identity)),
            reported_lost: AtomicBool::new(false),
            replica: Some(fd),
            roster_events: Default::default(),
        })
    }

    /// A group of a cluster: this member's fan-out (its replica and roster entry), which its
    /// connection holds.
    fn fan(&self) -> Option<&Arc<GroupFanout>> {
        self.seg.inner.group.get()
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
        self.size
    }

    /// The local, read-only view.
    pub fn read_map(&self) -> &Map {
        &self.read
    }

    /// Maps `size` bytes of the group from `offset` (for programs that map part of a group,
    /// as SISCI's do): read-only, a view like [`Self::read_map`]'s; read-write, a multicast
    /// view like [`Self::write_map`]'s.
    pub fn map(&self, offset: u64, size: u64, access: MapAccess) -> Result<Map> {
        check_group_range(offset, size, self.size)?;
        if let (Some(fan), Some(replica)) = (self.fan(), &self.replica) {
            self.seg.check()?;
            let origin = MapOrigin::Remote(self.seg.inner.clone());
            return match access {
                MapAccess::ReadWrite => fanout_map(fan, offset, size, origin),
                MapAccess::ReadOnly => replica_map(replica, offset, size, MapAccess::ReadOnly, origin),
            };
        }
        self.seg.map(offset, size, access)
    }

    /// Maps `size` bytes from `offset` of this member's own copy of the group (see
    /// [`ReflectiveGroup::local_map`]): across hosts its replica, on one host the group's
    /// one copy.
    pub fn local_map(&self, offset: u64, size: u64, access: MapAccess) -> Result<Map> {
        check_group_range(offset, size, self.size)?;
        if let Some(replica) = &self.replica {
            self.seg.check()?;
            return replica_map(replica, offset, size, access, MapOrigin::Remote(self.seg.inner.clone()));
        }
        self.seg.map(offset, size, access)
    }

    /// The multicast view.
    pub fn write_map(&self) -> &Map {
        &self.write
    }

    /// The group as a remote segment: the target of DMA writes to the group. For a group
    /// spanning hosts this is the connection to the creator's object (whose size includes
    /// the roster after the group's bytes: [`ReflectiveMember::size`] is the group's). DMA
    /// through it reaches the group's bytes only: a write goes into this member's copy and
    /// then to every other, and completes once every member it reaches has it (a flush of
    /// the member's fan-out: docs/ARCHITECTURE.md, "Reflective memory"); a read copies
    /// from this member's copy. Plain maps of it are refused (they would reach the creator's copy
    /// only): [`Self::map`] gives the group's.
    pub fn segment(&self) -> &RemoteSegment {
        &self.seg
    }

    /// Every other member, creator included, as (node, pid).
    pub fn members(&self) -> Vec<(u32, u32)> {
        if let Some(f) = self.fan() {
            return f.participants().unwrap_or_else(|_| {
                use crate::transport::RemoteObject;
                vec![(self.seg.node_id(), self.seg.inner.remote.info().owner.pid())]
            });
        }
        let inner = &self.seg.inner;
        let me = inner.fabric.identity;
        let file = inner.shm().file();
        let snap = file.snapshot();
        let mut out = vec![(snap.node_id, snap.owner.pid())];
        out.extend(
            file.header()
                .connections()
                .into_iter()
                .filter(|&(n, id, proxy)| id != me && (proxy || inner.fabric.is_alive(n, id)))
                .map(|(n, id, _)| (n, id.pid())),
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
        if let Some(fan) = self.fan() {
            return self.wait_across(fan, timeout);
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

    /// A member of a cluster's group hears others join and leave through the roster
    /// ([`RosterEvents`]), and the loss of its connection to the creator: the group's removal,
    /// which the creator writes into this member's copy (polled here), the creator's death
    /// (the daemons mark the connection lost), or this side's disconnection.
    fn wait_across(&self, fan: &GroupFanout, timeout: Timeout) -> Result<GroupEvent> {
        let inner = &self.seg.inner;
        let deadline = events::deadline(timeout);
        let mut pause = Duration::from_micros(100);
        loop {
            // The creator may have written its removal into our copy: then the connection is
            // lost.
            fan.lose_if_removed(&inner.remote);
            if let RemoteState::Lost(reason) = inner.state() {
                self.reported_lost.store(true, Ordering::Release);
                return Ok(GroupEvent::Lost(reason));
            }
            {
                let mut ev = self.roster_events.lock().unwrap_or_else(|e| e.into_inner());
                let left = deadline.map_or(Duration::MAX, |d| d.saturating_duration_since(Instant::now()));
                ev.refresh(fan, left.max(Duration::from_millis(10)));
                if let Some(e) = ev.queue.pop_front() {
                    return Ok(e);
                }
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(Error::Timeout {
                    what: format!("an event of reflective group {}", self.seg.id()),
                    waited_ms: super::interrupt::timeout_ms(timeout),
                });
            }
            // Nothing rings for a word another host writes into our copy: poll, gently.
            let left = deadline.map_or(pause, |d| d - now);
            std::thread::sleep(pause.min(left));
            pause = (pause * 2).min(Duration::from_millis(5));
        }
    }

    /// Leaves the group.
    pub fn leave(self) {
        drop(self)
    }
}

/// Finding a cluster's groups on the other hosts, through this host's daemon.
mod across {
    use std::time::Duration;

    use super::{live_groups, FabricInner};
    use crate::cluster::{self, Client, ObjectKind, Refusal};
    use crate::config::NodeId;
    use crate::error::{Error, Result};

    /// How long one question to the daemon may take.
    const CALL: Duration = Duration::from_secs(2);

    /// The nodes listed on the other hosts of the cluster.
    fn other_nodes(fabric: &FabricInner) -> Vec<u32> {
        let Some(m) = &fabric.cluster else { return Vec::new() };
        m.config.hosts.iter().filter(|h| h.name != m.host).flat_map(|h| h.nodes.iter().map(|n| n.get())).collect()
    }

    fn client(fabric: &FabricInner) -> Result<Client> {
        Client::connect(fabric.paths.root(), CALL).map_err(|e| Error::Cluster(e.to_string()))
    }

    /// Every live group of the cluster as (creator node, id), from every host's daemon. A
    /// host that cannot answer makes this fail: a group may not be created while a host is
    /// unreachable, since it might hold the id or the fourth group.
    pub(super) fn cluster_groups(fabric: &FabricInner, group: u32) -> Result<Vec<(u32, u32)>> {
        if other_nodes(fabric).is_empty() {
            return Ok(live_groups(fabric));
        }
        match client(fabric)?.groups(CALL) {
            Ok(groups) => Ok(groups.into_iter().map(|g| (g.node, g.id)).collect()),
            Err(cluster::Error::Refused(r @ Refusal::HostUnreachable { node, .. })) => Err(Error::NodeUnreachable {
                node,
                reason: format!("reflective group {group} cannot be created while {r}"),
            }),
            Err(e) => Err(Error::Cluster(format!("asking the cluster's groups: {e}"))),
        }
    }

    /// The node that created group `group`, on this host or another (hosts that cannot
    /// answer are skipped: their groups cannot be joined now).
    pub(super) fn creator_of(fabric: &FabricInner, group: u32) -> Result<Option<u32>> {
        if let Some(&(node, _)) = live_groups(fabric).iter().find(|&&(_, id)| id == group) {
            return Ok(Some(node));
        }
        let nodes = other_nodes(fabric);
        if nodes.is_empty() {
            return Ok(None);
        }
        let mut c = client(fabric)?;
        for node in nodes {
            match c.lookup(NodeId::new(node)?, ObjectKind::Reflective, group, CALL) {
                Ok(info) if info.available => return Ok(Some(node)),
                Ok(_) => {}
                Err(e) if e.is_not_found() => {}
                Err(cluster::Error::Refused(Refusal::HostUnreachable { .. })) => {}
                Err(cluster::Error::Refused(Refusal::Timeout { .. })) => {}
                Err(e) => return Err(Error::Cluster(e.to_string())),
            }
            if !c.is_usable() {
                c = client(fabric)?;
            }
        }
        Ok(None)
    }
}
