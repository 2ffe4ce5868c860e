//! Local segments: memory this node exports, and the events of peers connecting to it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::events::{self, CallbackAction, LocalEvent};
use super::map::{Map, MapOrigin};
use super::slot_tracker::{Ringer, SlotTracker};
use super::{FabricInner, Timeout};
use crate::error::{Error, IoContext, Result};
use crate::platform::doorbell::WaitError;
use crate::platform::files::DirLock;
use crate::platform::liveness::ProcessIdentity;
use crate::transport::shm::layout::{create_flags, kind, state, HeaderSnapshot};
use crate::transport::shm::remote::direct_mapping;
use crate::transport::shm::segment_file::{OpenError, RegisteredMemory, SegmentFile};
use crate::transport::MapAccess;
use crate::transport::{ExportHandle, HostTransport, Hosts, Window};

/// Automatic segment ids are drawn from this range, clear of typical user-chosen ids.
const AUTO_ID_BASE: u32 = 0x8000_0000;
/// Automatic interrupt numbers start here.
const AUTO_INTNO_BASE: u32 = 0x100;
const AUTO_ID_ATTEMPTS: u32 = 4096;

/// Which role this handle plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Created the segment; removing removes it for everyone.
    Owner,
    /// Attached to a segment another process of this node shared.
    Attached,
}

/// A segment of this node's memory that other nodes may connect to and map.
/// Dropping the owner's handle removes the segment (forcibly).
#[derive(Debug)]
pub struct LocalSegment {
    pub(crate) inner: Arc<LocalInner>,
}

/// The object's export to other hosts (cluster processes), while there is one.
type ExportSlot = std::sync::Mutex<Option<<Hosts as HostTransport>::Export>>;

#[derive(Debug)]
pub(crate) struct LocalInner {
    pub(crate) fabric: Arc<FabricInner>,
    /// Shared (weakly) with the tasks of the transport's service thread, which never hold
    /// the segment itself: holding it, and through it the fabric, they could be the last to
    /// let go of it, leaving the process record's removal to a thread the exit does not wait
    /// for.
    pub(crate) file: Arc<SegmentFile>,
    role: Role,
    removed: AtomicBool,
    events: SlotTracker,
    poll: events::PollTime,
    /// Withdrawn at removal; shared with the service thread as `file` is.
    export: Arc<ExportSlot>,
}

impl LocalInner {
    fn new(fabric: &Arc<FabricInner>, file: SegmentFile, role: Role) -> Arc<LocalInner> {
        Arc::new(LocalInner {
            fabric: fabric.clone(),
            file: Arc::new(file),
            role,
            removed: false.into(),
            events: SlotTracker::new(None),
            poll: events::PollTime::new(),
            export: Arc::new(std::sync::Mutex::new(None)),
        })
    }

    /// Exports the object to the other hosts of the cluster, when this process is part of
    /// one (segments, interrupts, data interrupts and reflective groups).
    fn export_if_clustered(self: &Arc<Self>) -> Result<()> {
        let Some(hosts) = &self.fabric.hosts else { return Ok(()) };
        // Keys of slots whose claim is over are revoked within a service tick, whether or
        // not the program looks at its events (revocation, `ExportHandle::renew_keys`).
        let (file, export) = (Arc::downgrade(&self.file), Arc::downgrade(&self.export));
        let renew = Arc::new(move || {
            if let (Some(file), Some(export)) = (file.upgrade(), export.upgrade()) {
                renew_keys(&export, &file);
            }
        });
        if let Some(exported) = hosts.export_object(&self.file, renew)? {
            *self.export.lock().unwrap_or_else(|e| e.into_inner()) = Some(exported);
        }
        Ok(())
    }

    /// Revokes the keys of the connection slots whose claim is over (peers of other hosts
    /// that left, died or were lost): nothing they sent can land once this returned.
    fn renew_keys(&self) {
        renew_keys(&self.export, &self.file);
    }

    /// Withdraws the export (peers of other hosts lose access).
    fn withdraw(&self) {
        self.export.lock().unwrap_or_else(|e| e.into_inner()).take();
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    pub(crate) fn poll_time(&self) -> Duration {
        self.poll.get()
    }
}

fn renew_keys(export: &ExportSlot, file: &SegmentFile) {
    if let Some(e) = &*export.lock().unwrap_or_else(|e| e.into_inner()) {
        ExportHandle::renew_keys(e, file.header());
    }
}

impl LocalSegment {
    pub(crate) fn create(
        fabric: &Arc<FabricInner>,
        object_kind: u32,
        id: Option<u32>,
        size: u64,
        registered: Option<RegisteredMemory>,
    ) -> Result<LocalSegment> {
        if size == 0 {
            return Err(Error::InvalidSize { size, reason: "segments hold at least one byte" });
        }
        if size > i64::MAX as u64 / 2 {
            return Err(Error::InvalidSize { size, reason: "larger than the address space" });
        }
        match id {
            Some(id) => Self::create_with_id(fabric, object_kind, id, size, registered),
            None => {
                let start = std::process::id().wrapping_mul(2654435761);
                for i in 0..AUTO_ID_ATTEMPTS {
                    let id = if object_kind == kind::SEGMENT {
                        AUTO_ID_BASE | (start.wrapping_add(i) & !AUTO_ID_BASE)
                    } else {
                        AUTO_INTNO_BASE + (start.wrapping_add(i) % 0x10000)
                    };
                    match Self::create_with_id(fabric, object_kind, id, size, registered) {
                        Err(Error::SegmentIdInUse { .. }) => continue,
                        other => return other,
                    }
                }
                Err(Error::IllegalOperation("no free automatic id"))
            }
        }
    }

    fn create_with_id(
        fabric: &Arc<FabricInner>,
        object_kind: u32,
        id: u32,
        size: u64,
        registered: Option<RegisteredMemory>,
    ) -> Result<LocalSegment> {
        let node = fabric.node.get();
        let snap = HeaderSnapshot {
            kind: object_kind,
            node_id: node,
            segment_id: id,
            segment_size: size,
            data_offset: 0,
            owner: fabric.identity,
            create_flags: if registered.is_some() { create_flags::REGISTERED_MEMORY } else { 0 },
        };
        // If a stale object holds the id, one round replaces it and the next creates; racing
        // creators may each take a round, so a few are allowed.
        for _ in 0..3 {
            // SAFETY: `registered`, when given, carries the contract of
            // Fabric::register_segment_memory, which the caller accepted.
            match unsafe { SegmentFile::create(&fabric.paths, snap, registered) } {
                Ok(file) => {
                    let inner = LocalInner::new(fabric, file, Role::Owner);
                    // A failed export drops the new object again (removing its file).
                    inner.export_if_clustered()?;
                    return Ok(LocalSegment { inner });
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    replace_if_stale(fabric, object_kind, node, id)?;
                }
                Err(e) => {
                    return Err(Error::io(format!("creating {} {id:#x} on node {node}", kind::name(object_kind)), e))
                }
            }
        }
        Err(Error::SegmentIdInUse { node, segment: id })
    }

    pub(crate) fn attach(fabric: &Arc<FabricInner>, id: u32) -> Result<LocalSegment> {
        let node = fabric.node.get();
        let file = match SegmentFile::open(&fabric.paths, kind::SEGMENT, node, id) {
            Ok(f) => f,
            Err(OpenError::Missing) => return Err(Error::NoSuchSegment { node, segment: id }),
            Err(OpenError::Corrupt(reason)) => {
                return Err(Error::CorruptSegment { path: fabric.paths.segment(node, id), reason })
            }
            Err(OpenError::Io(e)) => return Err(Error::io(format!("opening segment {id:#x}"), e)),
        };
        let st = file.header().state();
        if st & state::REMOVED != 0 || !fabric.is_alive(node, file.snapshot().owner) {
            return Err(Error::NoSuchSegment { node, segment: id });
        }
        if st & state::SHARED == 0 {
            return Err(Error::IllegalOperation("the segment's owner has not shared it"));
        }
        Ok(LocalSegment { inner: LocalInner::new(fabric, file, Role::Attached) })
    }

    /// The segment id.
    pub fn id(&self) -> u32 {
        self.inner.file.snapshot().segment_id
    }

    /// The size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.file.snapshot().segment_size
    }

    /// The node that exports it.
    pub fn node_id(&self) -> u32 {
        self.inner.file.snapshot().node_id
    }

    /// Whether this handle created the segment (rather than attached to it).
    pub fn is_owner(&self) -> bool {
        self.inner.role == Role::Owner
    }

    fn owner_only(&self, what: &'static str) -> Result<()> {
        if self.inner.is_removed() {
            return Err(Error::IllegalOperation("the segment was removed"));
        }
        if self.inner.role != Role::Owner {
            return Err(Error::IllegalOperation(what));
        }
        Ok(())
    }

    /// Prepares the segment for access through an adapter (`SCIPrepareSegment`).
    pub fn prepare(&self) -> Result<()> {
        self.owner_only("only the owner prepares a segment")?;
        self.inner.file.header().update_state(state::PREPARED, 0);
        Ok(())
    }

    /// Lets peers connect (`SCISetSegmentAvailable`). The segment must be prepared.
    /// Connected peers get an `Operational` event.
    pub fn set_available(&self) -> Result<()> {
        self.owner_only("only the owner makes a segment available")?;
        if self.inner.file.header().state() & state::PREPARED == 0 {
            return Err(Error::NotPrepared { segment: self.id() });
        }
        self.inner.file.header().update_state(state::AVAILABLE, 0);
        Ok(())
    }

    /// Refuses new connections (`SCISetSegmentUnavailable`); existing ones stay and get a
    /// `NotOperational` event.
    pub fn set_unavailable(&self) -> Result<()> {
        self.owner_only("only the owner makes a segment unavailable")?;
        self.inner.file.header().update_state(0, state::AVAILABLE);
        Ok(())
    }

    /// Whether peers may connect now.
    pub fn is_available(&self) -> bool {
        self.inner.file.header().state() & state::AVAILABLE != 0
    }

    /// Lets other processes of this node attach (`SCIShareSegment`).
    pub fn share(&self) -> Result<()> {
        self.owner_only("only the owner shares a segment")?;
        self.inner.file.header().update_state(state::SHARED, 0);
        Ok(())
    }

    /// The live peers connected now, as (node id, pid).
    pub fn connected_peers(&self) -> Vec<(u32, u32)> {
        live_connections(&self.inner.fabric, &self.inner.file)
    }

    /// Maps `size` bytes from `offset` of the segment. Refused once this handle removed (or
    /// detached from) the segment; maps made before stay valid.
    pub fn map(&self, offset: u64, size: u64, access: MapAccess) -> Result<Map> {
        if self.inner.is_removed() {
            return Err(Error::IllegalOperation("the segment was removed"));
        }
        let window = Window::Direct(direct_mapping(&self.inner.file, offset, size, access)?);
        Ok(Map::new(window, offset, access, MapOrigin::Local(self.inner.clone())))
    }

    /// Sets how long waits on this object spin before they sleep (default: `LANES_POLL_US`).
    pub fn set_poll_time(&self, poll: Duration) {
        self.inner.poll.set(poll);
    }

    /// Waits for the next peer event: a connection, a disconnection, or a connected peer's
    /// death (noticed through its pidfd at once). Events queue from the segment's creation.
    pub fn wait_event(&self, timeout: Timeout) -> Result<LocalEvent> {
        self.inner.wait_event(timeout)
    }

    /// Calls `cb` from a library thread for every peer event until it returns
    /// [`CallbackAction::Cancel`] or the segment is removed.
    pub fn on_event(&self, cb: impl FnMut(LocalEvent) -> CallbackAction + Send + 'static) -> Result<()> {
        let inner = self.inner.clone();
        events::spawn_callback_thread("lanes-segment-events", move || inner.wait_event(Timeout::Infinite), cb)
            .context(|| "starting the event callback thread".into())
    }

    /// Removes the segment (`SCIRemoveSegment`). Refused with [`Error::SegmentBusy`] while
    /// live peers are connected, unless `force`; their sequences then fail and their maps
    /// stay readable. An attached handle only detaches. A refused removal leaves the segment
    /// and this handle as they were (the handle is borrowed, so dropping it later is not a
    /// forced removal behind the caller's back).
    pub fn remove(&self, force: bool) -> Result<()> {
        self.inner.remove(force)
    }
}

impl LocalInner {
    fn remove(&self, force: bool) -> Result<()> {
        if self.role == Role::Attached {
            self.removed.store(true, Ordering::Release);
            return Ok(());
        }
        if self.is_removed() {
            return Ok(());
        }
        let peers = live_connections(&self.fabric, &self.file);
        if !peers.is_empty() && !force {
            let s = self.file.snapshot();
            return Err(Error::SegmentBusy { node: s.node_id, segment: s.segment_id, connections: peers.len() });
        }
        // The lock first: a removal that cannot have it (no descriptor left at the fd limit)
        // changes nothing and can be retried once the program has freed some.
        let node = self.file.snapshot().node_id;
        let _lock = DirLock::acquire(&self.fabric.paths.node_lock(node))
            .context(|| format!("locking node directory {node}"))?;
        self.removed.store(true, Ordering::Release);
        // Peers' waits and sequences see REMOVED; our own event waiters are woken too.
        self.file.header().update_state(state::REMOVED, state::AVAILABLE | state::SHARED);
        self.withdraw();
        self.file.header().conn_doorbell().ring();
        if self.file.is_current_at(self.file.path()) {
            std::fs::remove_file(self.file.path()).context(|| format!("removing {}", self.file.path().display()))?;
        }
        Ok(())
    }

    pub(crate) fn wait_event(self: &Arc<Self>, timeout: Timeout) -> Result<LocalEvent> {
        let bell = self.file.header().conn_doorbell();
        let weak: Weak<LocalInner> = Arc::downgrade(self);
        let ring: Ringer = Arc::new(move || {
            if let Some(inner) = weak.upgrade() {
                inner.file.header().conn_doorbell().ring();
            }
        });
        let r = bell.wait(
            || {
                let ev = self.events.next(&self.fabric, self.file.header(), &ring);
                if ev.is_some() {
                    // Before the program hears of a peer's leaving, that peer's key is
                    // closed: every slot change the tracker saw is in the header now.
                    self.renew_keys();
                }
                ev
            },
            || self.is_removed().then_some(()),
            self.poll_time(),
            events::deadline(timeout),
        );
        match r {
            Ok(ev) => Ok(ev),
            Err(WaitError::Aborted(())) => Err(Error::IllegalOperation("the segment was removed")),
            Err(WaitError::TimedOut) => Err(Error::Timeout {
                what: format!("an event of segment {:#x}", self.file.snapshot().segment_id),
                waited_ms: super::interrupt::timeout_ms(timeout),
            }),
        }
    }
}

impl Drop for LocalSegment {
    fn drop(&mut self) {
        // Maps may still hold the inner data; the segment itself goes now.
        let _ = self.inner.remove(true);
    }
}

/// Live peers holding connection slots of `file`, as (node, pid).
pub(crate) fn live_connections(fabric: &FabricInner, file: &SegmentFile) -> Vec<(u32, u32)> {
    file.header()
        .connections()
        .into_iter()
        .filter(|&(node, id, proxy): &(u32, ProcessIdentity, bool)| proxy || node == 0 || fabric.is_alive(node, id))
        .map(|(node, id, _)| (node, id.pid()))
        .collect()
}

/// Called when creating `id` found the name taken: under the node lock, removes the file if
/// its owner is dead, it was removed, or it is not a valid object; else reports the id in use.
fn replace_if_stale(fabric: &FabricInner, object_kind: u32, node: u32, id: u32) -> Result<()> {
    let _lock = DirLock::acquire(&fabric.paths.node_lock(node)).context(|| format!("locking node directory {node}"))?;
    let path = fabric.paths.object(object_kind, node, id);
    match SegmentFile::open(&fabric.paths, object_kind, node, id) {
        Err(OpenError::Missing) => Ok(()),
        Err(OpenError::Io(e)) => Err(Error::io(format!("opening {}", path.display()), e)),
        Err(OpenError::Corrupt(_)) => {
            // A file that was never a valid object (published files are always complete).
            std::fs::remove_file(&path).context(|| format!("removing corrupt {}", path.display()))
        }
        Ok(existing) => {
            let live =
                existing.header().state() & state::REMOVED == 0 && fabric.is_alive(node, existing.snapshot().owner);
            if live {
                return Err(Error::SegmentIdInUse { node, segment: id });
            }
            if existing.is_current_at(&path) {
                std::fs::remove_file(&path).context(|| format!("removing stale {}", path.display()))?;
            }
            Ok(())
        }
    }
}
