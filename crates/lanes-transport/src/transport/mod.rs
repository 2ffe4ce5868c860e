//! Layer 2: transports, the one place where "same host" and "other host" differ.
//!
//! Local objects are always shm files (their owner creates them in its fabric directory);
//! a transport is *how a remote object is reached*. The contract between the fabric model
//! (layer 3) and a transport:
//!
//! - `Transport` connects to object (kind, node, id) and hands back a
//! - `RemoteObject`: the connection. It knows what it is connected to (`ObjectInfo`),
//!   reports its `RemoteState` cheaply, rings a doorbell on every state change, opens
//!   `Window`s on the object's data, and delivers interrupts (`RemoteObject::trigger`)
//!   and data interrupts (`RemoteObject::send`).
//! - `TrackedMap`: a window the map writes and reads through (not the object's memory),
//!   and its `MapSequence`, which a `Sequence` of such a map checks.
//! - `HostTransport`: the transport to other hosts of a cluster, which also exports this
//!   process's objects (`ExportHandle`), drives its own progress (`ProgressPoll`) and
//!   carries reflective groups spanning hosts (`HostGroup`).
//! - `dma`: a DMA queue's shared state (its descriptors, completions and copies) and what
//!   the DMA engine hands to a transport instead of copying (`DmaPipe`, `DmaFar`).
//! - `vocab`: the vocabulary the fabric API shares with the transports (`Timeout`, ...).
//!
//! What stays in the fabric: the public objects and their argument checks, event reporting
//! (which state was last reported), callbacks, sequences, the DMA engine's queues and
//! channel threads, and the part of reflective groups that no transport differs in
//! (`fabric::reflective`: ids, limits, events; across hosts it drives the transport's
//! `HostGroup`).
//!
//! The fabric does not hold a `dyn RemoteObject`: it dispatches through the closed enum
//! `RemoteHandle`, one variant per transport, so the shm branch inlines and a
//! `Window::Direct` is accessed with plain volatile loads and stores. The cross-host
//! transport over libfabric is `ofi` (cargo feature `ofi`): its connections are
//! `RemoteHandle::Ofi` and its maps `Window::Tracked` (a [`TrackedMap`]). DMA has a
//! contract of its own (`dma`).

pub mod dma;
#[cfg(feature = "ofi")]
pub mod ofi;
pub mod shm;
pub mod vocab;

use std::os::fd::OwnedFd;

/// At the process's exit, before the libraries it uses are finalized: the transports'
/// background threads stop calling their providers (see the ofi transport's
/// `endpoint::quiesce_for_exit`; the shared-memory transport needs nothing).
pub fn quiesce_for_exit() {
    #[cfg(feature = "ofi")]
    ofi::endpoint::quiesce_for_exit(std::time::Duration::from_millis(200));
}
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::config::ClusterMembership;
use crate::error::{Error, Result};
use crate::platform::doorbell::Doorbell;
use crate::platform::liveness::ProcessIdentity;
use crate::platform::SharedSlice;
use crate::transport::shm::layout::HeaderView;
use crate::transport::shm::segment_file::{DataMapping, SegmentFile};
use crate::transport::shm::FabricPaths;
pub use vocab::{DmaDirection, DmaVec, MapAccess, SequenceStatus, Timeout};

/// Why a connection is lost for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// The owner process died.
    OwnerDied,
    /// The owner removed the segment.
    Removed,
    /// This side disconnected.
    Disconnected,
    /// The owner's host was lost (silent past `lost_after`, or its daemon restarted), or
    /// this host's daemon restarted: what the connection held there is gone.
    NodeLost,
}

impl LossReason {
    pub fn code(self) -> u8 {
        match self {
            LossReason::OwnerDied => 1,
            LossReason::Removed => 2,
            LossReason::Disconnected => 3,
            LossReason::NodeLost => 4,
        }
    }

    pub fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(LossReason::OwnerDied),
            2 => Some(LossReason::Removed),
            3 => Some(LossReason::Disconnected),
            4 => Some(LossReason::NodeLost),
            _ => None,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            LossReason::OwnerDied => "its owner died",
            LossReason::Removed => "its owner removed it",
            LossReason::Disconnected => "disconnected",
            LossReason::NodeLost => "the connection to its host was lost",
        }
    }
}

/// What a connected peer can see of a remote segment now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteState {
    /// Connected and available.
    Operational,
    /// Connected, but the owner made it unavailable (maps still work), or its host does not
    /// respond now (work towards it fails until it does again).
    NotOperational,
    /// Gone for good.
    Lost(LossReason),
}

/// The object a connection names: its kind (`shm::layout::kind`), node and id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectAddr {
    pub kind: u32,
    pub node: u32,
    pub id: u32,
}

/// What a connection knows about its object, fixed when it connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    pub addr: ObjectAddr,
    /// Bytes of object data.
    pub size: u64,
    /// The process that created the object.
    pub owner: ProcessIdentity,
}

/// A window of a remote object's data in this process's address space.
///
/// `Direct` is the object's own memory, mapped (shm): stores are the peer's stores, a flush
/// is a store barrier. `Tracked` is memory of this process written through to the object
/// (with feature `ofi`: a mirror window of an object on another host, or the write map of a
/// reflective group spanning hosts): the map's methods tell it what they write and read
/// through ([`TrackedMap`]). The `Direct` arm stays first in every match: it is the inlined
/// fast path.
#[derive(Debug)]
pub enum Window {
    Direct(DataMapping),
    /// Opened by the transports of other hosts only.
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    Tracked(TrackedWindow),
}

impl Window {
    /// The window's bytes, for the map's own accesses (no side effects).
    #[inline(always)]
    pub fn slice(&self) -> SharedSlice<'_> {
        match self {
            Window::Direct(m) => m.slice(),
            Window::Tracked(m) => m.slice(),
        }
    }

    /// The window's first byte, handed to a program for its own loads and stores: a tracked
    /// window then finds what changed by itself (`TrackedMap::as_ptr`).
    #[inline(always)]
    pub fn as_ptr(&self) -> *mut u8 {
        match self {
            Window::Direct(m) => m.as_ptr(),
            Window::Tracked(m) => m.as_ptr(),
        }
    }

    /// Bytes in the window.
    #[allow(clippy::len_without_is_empty)] // a window covers at least one byte: never empty
    #[inline(always)]
    pub fn len(&self) -> usize {
        match self {
            Window::Direct(m) => m.len(),
            Window::Tracked(m) => m.len(),
        }
    }

    /// Orders every earlier store through the window before every later one
    /// (`SCIStoreBarrier`); a tracked window posts what was written, in order.
    #[inline]
    pub fn store_barrier(&self) {
        match self {
            Window::Direct(_) => crate::platform::memory::store_barrier(),
            Window::Tracked(m) => m.barrier(),
        }
    }

    /// Makes every earlier store through the window visible to the object's owner and its
    /// other peers before any later one (`SCIFlush`); a tracked window also waits (bounded)
    /// until its writes are delivered, remembering failures for sequences.
    #[inline]
    pub fn flush(&self) {
        match self {
            Window::Direct(_) => crate::platform::memory::store_barrier(),
            Window::Tracked(m) => m.flush(),
        }
    }
}

/// A window written through to its object (`Window::Tracked`): private memory of this
/// process whose accesses the map reports, so that writes are posted and reads fetched.
#[allow(clippy::len_without_is_empty)] // a window covers at least one byte: never empty
pub trait TrackedMap: std::fmt::Debug + Send + Sync {
    /// What checks a burst of PIO through the window.
    type Sequence: MapSequence;

    /// The window's bytes, for the map's own accesses (no side effects).
    fn slice(&self) -> SharedSlice<'_>;

    /// The window's first byte, handed to a program for its own loads and stores: from then
    /// on the window finds what changed itself (at barriers, flushes and periodically).
    fn as_ptr(&self) -> *mut u8;

    /// Bytes in the window.
    fn len(&self) -> usize;

    /// Posts what was written since the last barrier, in order, without waiting.
    fn barrier(&self);

    /// A barrier, then a bounded wait until every write is delivered; a failure is
    /// remembered for [`TrackedMap::flush_checked`] and sequences.
    fn flush(&self);

    /// `store` wrote `len` bytes at `offset` of the window (in its bytes): track them.
    fn tracked(&self, offset: usize, len: usize, store: impl FnOnce()) -> Result<()>;

    /// `store` wrote into `ranges` (offset, length) of the window, in order, and returns how
    /// many bytes it wrote: track those (a read from a file straight into the window).
    fn tracked_ranges(&self, ranges: &[(usize, usize)], store: impl FnOnce() -> usize) -> Result<usize>;

    /// A release store of `bytes` at `offset` (`store` puts them in the window): a barrier,
    /// then the word as its own write.
    fn release(&self, offset: usize, bytes: &[u8], store: impl FnOnce()) -> Result<()>;

    /// Reads `len` bytes at `offset` from the object into the window, then `load`s them.
    fn read_with<T>(&self, offset: usize, len: usize, load: impl FnOnce() -> T) -> Result<T>;

    /// A flush, then `Err` if a write or read failed since the previous `flush_checked`.
    fn flush_checked(&self) -> Result<()>;

    /// Makes `len` bytes at `offset` of the window current (`SCICacheSync`).
    fn refresh(&self, offset: usize, len: usize) -> Result<()>;

    /// A sequence over the window, started now.
    fn sequence(&self) -> Self::Sequence;
}

/// Checks bursts of PIO through a tracked window (what a fabric's `Sequence` of its map checks).
pub trait MapSequence: Clone + std::fmt::Debug + Send + Sync {
    /// Starts a burst (`SCIStartSequence`).
    fn start(&self) -> SequenceStatus;

    /// Ends a burst: did every access since `start` reach the object? (`SCICheckSequence`)
    fn check(&self) -> SequenceStatus;
}

#[cfg(not(feature = "ofi"))]
pub use direct_only::{TrackedSequence, TrackedWindow};
#[cfg(feature = "ofi")]
pub use ofi::window::{TrackedSequence, TrackedWindow};

/// A build whose only transport is shm maps every object directly: no window is tracked.
#[cfg(not(feature = "ofi"))]
mod direct_only {
    use super::{MapSequence, SequenceStatus, TrackedMap};
    use crate::error::Result;
    use crate::platform::SharedSlice;

    /// No tracked window exists.
    #[derive(Debug)]
    pub enum TrackedWindow {}

    /// The sequence of a tracked window: never made, as there is none.
    #[derive(Clone, Debug)]
    pub struct TrackedSequence {}

    impl TrackedMap for TrackedWindow {
        type Sequence = TrackedSequence;

        fn slice(&self) -> SharedSlice<'_> {
            match *self {}
        }
        fn as_ptr(&self) -> *mut u8 {
            match *self {}
        }
        fn len(&self) -> usize {
            match *self {}
        }
        fn barrier(&self) {
            match *self {}
        }
        fn flush(&self) {
            match *self {}
        }
        fn tracked(&self, _offset: usize, _len: usize, _store: impl FnOnce()) -> Result<()> {
            match *self {}
        }
        fn tracked_ranges(&self, _ranges: &[(usize, usize)], _store: impl FnOnce() -> usize) -> Result<usize> {
            match *self {}
        }
        fn release(&self, _offset: usize, _bytes: &[u8], _store: impl FnOnce()) -> Result<()> {
            match *self {}
        }
        fn read_with<T>(&self, _offset: usize, _len: usize, _load: impl FnOnce() -> T) -> Result<T> {
            match *self {}
        }
        fn flush_checked(&self) -> Result<()> {
            match *self {}
        }
        fn refresh(&self, _offset: usize, _len: usize) -> Result<()> {
            match *self {}
        }
        fn sequence(&self) -> TrackedSequence {
            match *self {}
        }
    }

    impl MapSequence for TrackedSequence {
        fn start(&self) -> SequenceStatus {
            SequenceStatus::Ok
        }
        fn check(&self) -> SequenceStatus {
            SequenceStatus::Ok
        }
    }
}

/// How a transport reaches remote objects.
pub trait Transport: Send + Sync {
    type Remote: RemoteObject;

    /// Connects to `addr`, waiting up to `timeout` while the object is missing or not
    /// available ([`Error::NoSuchSegment`], [`Error::NotAvailable`]); other refusals
    /// (corrupt, too many connections, I/O) fail at once.
    fn connect(&self, addr: ObjectAddr, timeout: Timeout) -> Result<Self::Remote>;
}

/// One connection to a remote object.
///
/// Losing the connection (owner death, removal, [`RemoteObject::disconnect`]) is final:
/// [`RemoteObject::state`] reports `Lost` from then on and [`RemoteObject::state_bell`]
/// rings once for it. Windows stay valid memory after a loss (reads see the last data,
/// writes go nowhere visible).
pub trait RemoteObject: Send + Sync + std::fmt::Debug {
    /// What this connection is connected to.
    fn info(&self) -> &ObjectInfo;

    /// The state now; costs at most two atomic loads and no system call.
    fn state(&self) -> RemoteState;

    /// The doorbell rung on every state change of the object and on loss.
    fn state_bell(&self) -> Doorbell;

    /// Opens a window of `len` bytes from `offset` of the object's data. An empty or
    /// out-of-bounds range fails with [`Error::InvalidSize`] or [`Error::OutOfRange`].
    fn window(&self, offset: u64, len: u64, access: MapAccess) -> Result<Window>;

    /// Triggers an interrupt object: one wait of its owner returns for it. Fails once the
    /// connection is lost ([`Error::SegmentLost`]), or on an object of another kind.
    fn trigger(&self) -> Result<()>;

    /// Sends one message (at most `MAX_DATA_INTERRUPT_PAYLOAD` bytes, else
    /// [`Error::PayloadTooLarge`]) to a data interrupt object; messages of one connection
    /// arrive whole and in order. A full queue makes it wait (spinning `poll`, then
    /// sleeping) up to `timeout`, then fail with [`Error::QueueFull`] having sent nothing.
    fn send(&self, data: &[u8], timeout: Timeout, poll: Duration) -> Result<()>;

    /// Ends the connection: it becomes `Lost(Disconnected)` and frees its slot at the
    /// owner. Windows stay mapped.
    fn disconnect(&self);

    /// `Ok` while the connection lives, else [`Error::SegmentLost`] with the reason.
    #[inline]
    fn check(&self) -> Result<()> {
        match self.state() {
            RemoteState::Lost(r) => {
                let a = self.info().addr;
                Err(Error::SegmentLost { node: a.node, segment: a.id, reason: r.describe() })
            }
            _ => Ok(()),
        }
    }
}

/// A connection of whichever transport reached the object: the closed set the fabric
/// dispatches over (no `dyn`, so each branch inlines).
#[derive(Debug)]
pub enum RemoteHandle {
    Shm(shm::remote::ShmRemote),
    #[cfg(feature = "ofi")]
    Ofi(ofi::remote::OfiRemote),
}

/// Calls `$body` with `$r` bound to the connection of whichever transport `$h` holds.
macro_rules! dispatch {
    ($h:expr, $r:ident => $body:expr) => {
        match $h {
            RemoteHandle::Shm($r) => $body,
            #[cfg(feature = "ofi")]
            RemoteHandle::Ofi($r) => $body,
        }
    };
}

impl RemoteHandle {
    /// The shm connection, if that is what this is.
    pub fn as_shm(&self) -> Option<&shm::remote::ShmRemote> {
        match self {
            RemoteHandle::Shm(r) => Some(r),
            #[cfg(feature = "ofi")]
            RemoteHandle::Ofi(_) => None,
        }
    }
}

impl RemoteObject for RemoteHandle {
    #[inline(always)]
    fn info(&self) -> &ObjectInfo {
        dispatch!(self, r => r.info())
    }

    #[inline(always)]
    fn state(&self) -> RemoteState {
        dispatch!(self, r => r.state())
    }

    #[inline]
    fn state_bell(&self) -> Doorbell {
        dispatch!(self, r => r.state_bell())
    }

    fn window(&self, offset: u64, len: u64, access: MapAccess) -> Result<Window> {
        dispatch!(self, r => r.window(offset, len, access))
    }

    #[inline]
    fn trigger(&self) -> Result<()> {
        dispatch!(self, r => r.trigger())
    }

    fn send(&self, data: &[u8], timeout: Timeout, poll: Duration) -> Result<()> {
        dispatch!(self, r => r.send(data, timeout, poll))
    }

    fn disconnect(&self) {
        dispatch!(self, r => r.disconnect())
    }
}

/// A connection the fabric holds to a remote object, as the DMA contract names it: the
/// transport's handle and, for a member of a reflective group spanning hosts, the member's
/// fan-out, through which DMA reaches every member's copy (set once, by the join).
pub struct Connection {
    /// The connection, of whichever transport reached the object.
    pub remote: RemoteHandle,
    pub group: std::sync::OnceLock<Arc<GroupFanout>>,
}

impl Connection {
    /// The connection's state; a check costs two atomic loads and no system call.
    #[inline]
    pub fn state(&self) -> RemoteState {
        self.remote.state()
    }
}

/// The transport that reaches the objects of other hosts of a cluster and exports this
/// process's objects to them: the fabric holds one when its configuration names a cluster.
/// With feature `ofi` it is `ofi::transport::OfiTransport`; a build without has none
/// ([`Hosts`] is then a type with no values).
pub trait HostTransport: Send + Sync + Sized + std::fmt::Debug {
    /// What keeps one local object exported; dropping it withdraws the export.
    type Export: ExportHandle;
    /// What drives the transport's progress from a spinning thread while it lives.
    type Driver: ProgressPoll;

    /// Whether the build has one (false: [`HostTransport::open`] gives none).
    const AVAILABLE: bool;

    /// The transport of a process acting as `node` on the host `membership` names; `None`
    /// in a build without one.
    fn open(
        membership: &ClusterMembership,
        paths: &FabricPaths,
        node: u32,
        identity: ProcessIdentity,
    ) -> Result<Option<Self>>;

    /// Connects to `addr` on another host (as [`Transport::connect`]).
    fn connect_remote(&self, addr: ObjectAddr, timeout: Timeout) -> Result<RemoteHandle>;

    /// Exports the object of `file` (segments, interrupts, data interrupts and reflective
    /// groups; `None` for other kinds) to the other hosts. `renew` runs on the transport's
    /// service thread every tick while the export lives (it should call
    /// [`ExportHandle::renew_keys`]).
    fn export_object(&self, file: &SegmentFile, renew: Arc<dyn Fn() + Send + Sync>) -> Result<Option<Self::Export>>;

    /// A driver of the transport's progress, when the process already has what it drives
    /// (something was exported or connected across hosts).
    fn driver(&self) -> Option<Self::Driver>;

    /// Runs `task` on the transport's service thread every tick while it lives.
    fn add_periodic(&self, task: Weak<dyn Fn() + Send + Sync>) -> Result<()>;

    /// The data size of the object of a reflective group of `size` bytes spanning hosts:
    /// the group's bytes, then what the transport keeps after them (the roster).
    fn group_object_size(size: u64) -> u64;

    /// The creator's fan-out of a group of `size` bytes spanning hosts, for a process acting
    /// as `node`: `object` is all of the group object's data, mapped read-write, which it
    /// created and has not made available yet. Writes what members read of the group
    /// (`receivers` among it) after the group's bytes.
    fn create_group(&self, object: DataMapping, size: u64, receivers: &[u32], node: u32) -> Result<Arc<GroupFanout>>;

    /// Joins the group `group` that `creator` created (on any host), for a process acting
    /// as `node`: connects to its object, fills this member's replica and announces the
    /// member. Returns the connection, the member's fan-out and the replica's file.
    fn join_group(&self, creator: u32, group: u32, node: u32) -> Result<(RemoteHandle, Arc<GroupFanout>, OwnedFd)>;
}

/// A reflective group spanning hosts as this process takes part in it: the creator's or a
/// member's fan-out (a member's holds its replica and its roster entry).
pub trait HostGroup: Send + Sync + std::fmt::Debug {
    /// Bytes of the group.
    fn group_size(&self) -> usize;

    /// A write map's window of group bytes `[offset, offset + size)`: stores reach every
    /// member's copy.
    fn write_window(self: &Arc<Self>, offset: u64, size: u64) -> Result<Window>;

    /// The other participants, as (node, pid).
    fn participants(&self) -> Result<Vec<(u32, u32)>>;

    /// The creator's sweep: marks dead the members whose connection slot `holds` says is
    /// no longer held, and tells the rest.
    fn sweep_members(&self, holds: &dyn Fn(usize) -> bool);

    /// The creator's: tells every member the group is removed.
    fn announce_group_removal(&self);

    /// A member's: leaves the group.
    fn leave_group(&self);

    /// A member's: if the creator wrote the group's removal into this member's copy, marks
    /// `member` (the member's connection to the creator's object) lost.
    fn lose_if_removed(&self, member: &RemoteHandle);

    /// A member's: the word that changes whenever another member joined or left.
    fn roster_control(&self) -> u64;

    /// A member's: the roster, read within `bound`.
    fn roster_slots(&self, bound: Duration) -> Result<Vec<RosterSlot>>;
}

/// A roster slot of a group spanning hosts as a member reads it for membership events.
pub struct RosterSlot {
    pub slot: usize,
    /// The member's generation (a random value per join), or `None` where a member died
    /// (the creator's sweep marked the entry).
    pub generation: Option<u64>,
    pub node: u32,
    pub pid: u32,
}

/// An export of a local object to other hosts.
pub trait ExportHandle: Send + Sync + std::fmt::Debug {
    /// Revokes the keys of the connection slots of `header` whose claim is over: nothing
    /// their holders send can land once this returned.
    fn renew_keys(&self, header: &HeaderView);
}

/// Drives a transport's progress from the thread that holds it.
pub trait ProgressPoll {
    /// Reads the transport's completion queues once and dispatches what they held; returns
    /// how many entries it read.
    fn poll(&self) -> usize;
}

/// Why an object of another host cannot be reached: the fabric has no transport to it.
pub const NO_HOST_TRANSPORT: &str = "the node is on another host and this build has no ofi transport (feature `ofi`)";

#[cfg(not(feature = "ofi"))]
pub use no_hosts::{GroupFanout, Hosts};
#[cfg(feature = "ofi")]
pub use ofi::{reflective::Fanout as GroupFanout, transport::OfiTransport as Hosts};

/// A build without a transport to other hosts.
#[cfg(not(feature = "ofi"))]
mod no_hosts {
    use std::os::fd::OwnedFd;
    use std::sync::{Arc, Weak};
    use std::time::Duration;

    use super::{ExportHandle, HostGroup, HostTransport, ObjectAddr, ProgressPoll, RemoteHandle, RosterSlot, Window};
    use crate::config::ClusterMembership;
    use crate::error::Result;
    use crate::platform::liveness::ProcessIdentity;
    use crate::transport::shm::layout::HeaderView;
    use crate::transport::shm::segment_file::{DataMapping, SegmentFile};
    use crate::transport::shm::FabricPaths;
    use crate::transport::Timeout;

    /// No transport to other hosts exists: none is ever opened.
    #[derive(Debug)]
    pub enum Hosts {}

    /// No export exists.
    #[derive(Debug)]
    pub enum NoExport {}

    /// No reflective group spans hosts: a member's connection never has a fan-out.
    #[derive(Debug)]
    pub enum GroupFanout {}

    /// No driver exists.
    #[derive(Debug)]
    pub enum NoDriver {}

    impl HostTransport for Hosts {
        type Export = NoExport;
        type Driver = NoDriver;

        const AVAILABLE: bool = false;

        fn open(_: &ClusterMembership, _: &FabricPaths, _: u32, _: ProcessIdentity) -> Result<Option<Self>> {
            Ok(None)
        }
        fn connect_remote(&self, _: ObjectAddr, _: Timeout) -> Result<RemoteHandle> {
            match *self {}
        }
        fn export_object(&self, _: &SegmentFile, _: Arc<dyn Fn() + Send + Sync>) -> Result<Option<NoExport>> {
            match *self {}
        }
        fn driver(&self) -> Option<NoDriver> {
            match *self {}
        }
        fn add_periodic(&self, _: Weak<dyn Fn() + Send + Sync>) -> Result<()> {
            match *self {}
        }
        fn group_object_size(size: u64) -> u64 {
            size
        }
        fn create_group(&self, _: DataMapping, _: u64, _: &[u32], _: u32) -> Result<Arc<GroupFanout>> {
            match *self {}
        }
        fn join_group(&self, _: u32, _: u32, _: u32) -> Result<(RemoteHandle, Arc<GroupFanout>, OwnedFd)> {
            match *self {}
        }
    }

    impl HostGroup for GroupFanout {
        fn group_size(&self) -> usize {
            match *self {}
        }
        fn write_window(self: &Arc<Self>, _: u64, _: u64) -> Result<Window> {
            match **self {}
        }
        fn participants(&self) -> Result<Vec<(u32, u32)>> {
            match *self {}
        }
        fn sweep_members(&self, _: &dyn Fn(usize) -> bool) {
            match *self {}
        }
        fn announce_group_removal(&self) {
            match *self {}
        }
        fn leave_group(&self) {
            match *self {}
        }
        fn lose_if_removed(&self, _: &RemoteHandle) {
            match *self {}
        }
        fn roster_control(&self) -> u64 {
            match *self {}
        }
        fn roster_slots(&self, _: Duration) -> Result<Vec<RosterSlot>> {
            match *self {}
        }
    }

    impl ExportHandle for NoExport {
        fn renew_keys(&self, _: &HeaderView) {
            match *self {}
        }
    }

    impl ProgressPoll for NoDriver {
        fn poll(&self) -> usize {
            match *self {}
        }
    }
}

/// Waits between connection attempts: short at first (a peer that is about to make its
/// object available is usually quick), then at most 10 ms.
fn backoff(attempt: u32) -> Duration {
    Duration::from_micros((200u64 << attempt.min(6)).min(10_000))
}

/// The connect policy every transport shares: calls `attempt` until it connects, fails for
/// good, or `timeout` runs out. `attempt` returns `Ok(Ok(conn))` when connected, `Ok(Err(e))`
/// for a refusal worth waiting out, `Err(e)` for a failure that waiting cannot cure. A
/// refusal that is [`Error::Timeout`] (an attempt's own question went unanswered in time, a
/// busy daemon) says nothing new about the object: the answer before it, if any, is the
/// one a caller whose time runs out is told.
pub fn connect_with_retry<R>(
    addr: ObjectAddr,
    timeout: Timeout,
    mut attempt: impl FnMut() -> Result<Result<R>>,
) -> Result<R> {
    let started = Instant::now();
    let mut tries = 0;
    let mut last: Option<Error> = None;
    loop {
        let refusal = match (attempt()?, last.take()) {
            (Ok(conn), _) => return Ok(conn),
            (Err(Error::Timeout { .. }), Some(answer)) => answer,
            (Err(refusal), _) => refusal,
        };
        let waited = started.elapsed();
        match timeout {
            Timeout::Immediate => return Err(refusal),
            Timeout::After(t) if waited >= t => {
                return Err(Error::Timeout {
                    what: format!(
                        "{} {:#x} on node {} ({refusal})",
                        shm::layout::kind::name(addr.kind),
                        addr.id,
                        addr.node
                    ),
                    waited_ms: waited.as_millis() as u64,
                })
            }
            _ => {}
        }
        last = Some(refusal);
        let mut pause = backoff(tries);
        if let Timeout::After(t) = timeout {
            pause = pause.min(t.saturating_sub(waited));
        }
        std::thread::sleep(pause);
        tries += 1;
    }
}

#[cfg(test)]
mod connect_policy_tests {
    use super::*;

    fn addr() -> ObjectAddr {
        ObjectAddr { kind: vocab::kind::SEGMENT, node: 8, id: 0x10 }
    }

    fn busy() -> Error {
        Error::Timeout { what: "an answer from this host's daemon".into(), waited_ms: 40 }
    }

    #[test]
    fn a_busy_daemon_at_the_deadline_reports_the_last_real_answer_as_a_timeout() {
        let mut n = 0;
        let r: Result<()> = connect_with_retry(addr(), Timeout::After(Duration::from_millis(30)), || {
            n += 1;
            Ok(Err(if n == 1 { Error::NotAvailable { node: 8, segment: 0x10 } } else { busy() }))
        });
        match r {
            Err(Error::Timeout { what, waited_ms }) => {
                assert!(waited_ms >= 30, "{waited_ms}");
                assert!(what.contains("not available"), "{what}");
            }
            other => panic!("expected a timeout naming the refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_busy_daemon_is_retried_until_the_object_connects() {
        let mut n = 0;
        let r = connect_with_retry(addr(), Timeout::After(Duration::from_secs(5)), || {
            n += 1;
            Ok(if n < 3 { Err(busy()) } else { Ok(n) })
        });
        assert_eq!(r.unwrap(), 3);
    }
}
