//! Layer 3: the fabric API.
//!
//! A [`Fabric`] is an open descriptor on the fabric as one node. Through it a program
//! creates [`LocalSegment`]s that other nodes connect to as [`RemoteSegment`]s, maps either
//! kind as a bounds-checked [`Map`], and checks bursts of programmed I/O with a
//! [`Sequence`]. [`status`] and [`cleanup`] inspect and tidy a fabric directory.

mod data_interrupt;
mod dma;
pub(crate) mod dma_engine;
mod events;
mod interrupt;
mod local;
mod map;
mod reflective;
pub(crate) mod remote;
mod sequence;
mod slot_tracker;
mod status;
#[cfg(test)]
mod tests;

/// The vocabulary the fabric shares with the transports (defined there, below it).
pub use crate::transport::vocab::{DmaDirection, DmaVec, MapAccess, SequenceStatus, Timeout};
pub use data_interrupt::{LocalDataInterrupt, RemoteDataInterrupt, MAX_DATA_INTERRUPT_PAYLOAD};
pub use dma::{CopyPath, DmaCallback, DmaChannel, DmaQueue, DmaQueueState};
pub use dma_engine::MAX_CHANNELS as MAX_DMA_CHANNELS;
pub use events::{CallbackAction, LocalEvent, RemoteEvent};
pub use interrupt::{LocalInterrupt, RemoteInterrupt};
pub use local::LocalSegment;
pub use map::Map;
pub use reflective::{GroupEvent, GroupReceiver, ReflectiveGroup, ReflectiveMember, MAX_GROUPS};
pub use remote::{LossReason, RemoteSegment, RemoteState};
pub use sequence::Sequence;
pub use status::{cleanup, status, CleanupReport, FabricStatus, NodeStatus, SegmentStatus};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::config::{FabricConfig, NodeId};
use crate::error::{Error, IoContext, Result};
use crate::platform::files::ensure_private_dir;
use crate::platform::liveness::{self, ProcessIdentity, ProcessRecord};
use crate::transport::shm::layout::kind;
use crate::transport::shm::remote::ShmTransport;
use crate::transport::shm::FabricPaths;
use crate::transport::{HostTransport, Hosts, ProgressPoll};

/// An open descriptor on the fabric, acting as one node. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Fabric {
    inner: Arc<FabricInner>,
}

#[derive(Debug)]
pub(crate) struct FabricInner {
    pub(crate) node: NodeId,
    pub(crate) paths: FabricPaths,
    pub(crate) identity: ProcessIdentity,
    /// How this process reaches other nodes' objects on this host.
    pub(crate) shm: ShmTransport,
    /// The cluster this host is part of, if any.
    pub(crate) cluster: Option<crate::config::ClusterMembership>,
    /// How this process reaches objects of other hosts, and exports its own to them.
    pub(crate) hosts: Option<Hosts>,
    _record: Arc<ProcessRecord>,
}

impl FabricInner {
    /// Whether the process `identity`, registered as `node`, is alive.
    pub(crate) fn is_alive(&self, node: u32, identity: ProcessIdentity) -> bool {
        liveness::is_alive(&self.paths.procs(), node, identity)
    }

    /// The spin phase of a library wait (an interrupt's or a data interrupt's), driving the
    /// progress of the transport to other hosts from the waiting thread when this process
    /// already has what it drives (`HostTransport::driver`): a trigger or message from another host is then counted by the waiter itself
    /// instead of by the service thread (after a wake-up, or with `progress = "poll"` up to
    /// an interval later). Checks `check` and `abort` between polls for up to `poll`, never
    /// past `deadline`. A wait that cannot be driven (no endpoint, no spin time, a deadline
    /// already reached) is left to the doorbell wait as it was.
    pub(crate) fn spin_driving_progress<T, E>(
        &self,
        poll: Duration,
        deadline: Option<Instant>,
        mut check: impl FnMut() -> Option<T>,
        mut abort: impl FnMut() -> Option<E>,
    ) -> DrivenSpin<T, E> {
        // The condition first: a waiter whose trigger is already there looks nothing up.
        if Hosts::AVAILABLE {
            if let Some(v) = check() {
                return DrivenSpin::Found(v);
            }
        }
        if let Some(hosts) = &self.hosts {
            let now = Instant::now();
            let until = deadline.map_or(now + poll, |d| d.min(now + poll));
            if poll.is_zero() || until <= now {
                return DrivenSpin::Undriven;
            }
            let Some(driver) = hosts.driver() else { return DrivenSpin::Undriven };
            loop {
                ProgressPoll::poll(&driver);
                if let Some(v) = check() {
                    return DrivenSpin::Found(v);
                }
                if let Some(e) = abort() {
                    return DrivenSpin::Aborted(e);
                }
                if Instant::now() >= until {
                    return DrivenSpin::SpunOut;
                }
            }
        }
        let _ = (poll, deadline, &mut check, &mut abort);
        DrivenSpin::Undriven
    }
}

/// How [`FabricInner::spin_driving_progress`] ended.
pub(crate) enum DrivenSpin<T, E> {
    Found(T),
    Aborted(E),
    /// It spun for the whole spin time: the doorbell wait should not spin again.
    SpunOut,
    /// It did not spin: the doorbell wait spins as it would have.
    Undriven,
}

impl<T, E> DrivenSpin<T, E> {
    /// The spin time left for the doorbell wait that follows, when nothing was found.
    pub(crate) fn remaining_poll(&self, poll: Duration) -> Duration {
        match self {
            DrivenSpin::Undriven => poll,
            _ => Duration::ZERO,
        }
    }
}

/// This process's registrations, one per (directory, node): a second record-lock holder
/// for the same file in one process would release the lock when it closed. The cluster
/// daemon registers its proxy records (one per remote peer node) through the same table.
type RecordKey = (PathBuf, u32, u32);
static RECORDS: Mutex<Option<HashMap<RecordKey, Weak<ProcessRecord>>>> = Mutex::new(None);

pub(crate) fn register(paths: &FabricPaths, node: NodeId) -> Result<Arc<ProcessRecord>> {
    let key = (paths.root().to_path_buf(), node.get(), std::process::id());
    let mut guard = RECORDS.lock().unwrap_or_else(|e| e.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    if let Some(r) = map.get(&key).and_then(Weak::upgrade) {
        return Ok(r);
    }
    let r = Arc::new(
        ProcessRecord::register(&paths.procs(), node.get())
            .context(|| format!("registering as node {node} in {}", paths.root().display()))?,
    );
    map.retain(|_, w| w.strong_count() > 0);
    map.insert(key, Arc::downgrade(&r));
    Ok(r)
}

impl Fabric {
    /// Opens the fabric as configured by the environment (`LANES_NODE_ID`, `LANES_CONFIG`,
    /// `LANES_DIR`): zero configuration gives node 4 in the user's private directory.
    pub fn open() -> Result<Fabric> {
        Self::open_with(FabricConfig::from_env()?)
    }

    /// Opens the fabric with an explicit configuration.
    pub fn open_with(config: FabricConfig) -> Result<Fabric> {
        let paths = FabricPaths::new(&config.dir);
        for d in [paths.root().to_path_buf(), paths.procs(), paths.nodes(), paths.node_dir(config.node_id.get())] {
            ensure_private_dir(&d).context(|| format!("fabric directory {}", d.display()))?;
        }
        let record = register(&paths, config.node_id)?;
        let identity = record.identity();
        let shm = ShmTransport::new(paths.clone(), identity, config.node_id.get());
        let hosts = match &config.cluster {
            Some(m) => Hosts::open(m, &paths, config.node_id.get(), identity)?,
            None => None,
        };
        Ok(Fabric {
            inner: Arc::new(FabricInner {
                node: config.node_id,
                identity,
                paths,
                shm,
                cluster: config.cluster,
                hosts,
                _record: record,
            }),
        })
    }

    /// The transport this descriptor reaches other nodes' objects with, for the transport
    /// conformance suite (crates/lanes-transport/tests).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn shm_transport(&self) -> &ShmTransport {
        &self.inner.shm
    }

    /// This process's node id.
    pub fn node_id(&self) -> NodeId {
        self.inner.node
    }

    /// The fabric directory.
    pub fn dir(&self) -> &Path {
        self.inner.paths.root()
    }

    /// Creates a segment of `size` bytes with the chosen id.
    pub fn create_segment(&self, id: u32, size: u64) -> Result<LocalSegment> {
        LocalSegment::create(&self.inner, kind::SEGMENT, Some(id), size, None)
    }

    /// Creates a segment of `size` bytes with an id the library picks (`SCI_FLAG_AUTO_ID`).
    pub fn create_segment_auto_id(&self, size: u64) -> Result<LocalSegment> {
        LocalSegment::create(&self.inner, kind::SEGMENT, None, size, None)
    }

    /// Makes `len` bytes of the caller's memory at `addr` a segment that peers can map
    /// (`SCIRegisterSegmentMemory`). The pages holding the range are re-backed in place by
    /// shared memory with the same contents; they stay so after the segment is removed.
    ///
    /// # Safety
    /// The memory must be the caller's, mapped, and valid for reads and writes of `len`
    /// bytes; nobody may write the pages containing it during this call; the caller must
    /// keep it mapped while the segment exists; and it should be page aligned (the whole
    /// pages containing the range become visible to this user's processes).
    pub unsafe fn register_segment_memory(&self, id: u32, addr: *mut u8, len: usize) -> Result<LocalSegment> {
        let addr = std::ptr::NonNull::new(addr).ok_or(Error::IllegalOperation("null address"))?;
        let mem = crate::transport::shm::segment_file::RegisteredMemory { addr, len };
        LocalSegment::create(&self.inner, kind::SEGMENT, Some(id), len as u64, Some(mem))
    }

    /// Attaches to a segment that another process of this node created and shared
    /// (`SCIAttachLocalSegment`). Removing the attached handle only detaches.
    pub fn attach_local_segment(&self, id: u32) -> Result<LocalSegment> {
        LocalSegment::attach(&self.inner, id)
    }

    /// Connects to segment `segment` of node `node`, waiting up to `timeout` for it to
    /// exist and become available.
    pub fn connect_segment(&self, node: u32, segment: u32, timeout: Timeout) -> Result<RemoteSegment> {
        let node = NodeId::new(node)?;
        RemoteSegment::connect(&self.inner, kind::SEGMENT, node, segment, timeout)
    }

    /// Creates an interrupt with number `number`, or one the library picks if `None`.
    pub fn create_interrupt(&self, number: Option<u32>) -> Result<LocalInterrupt> {
        LocalInterrupt::create(&self.inner, number)
    }

    /// Connects to interrupt `number` of `node`, waiting up to `timeout` for it to exist.
    pub fn connect_interrupt(&self, node: u32, number: u32, timeout: Timeout) -> Result<RemoteInterrupt> {
        RemoteInterrupt::connect(&self.inner, NodeId::new(node)?, number, timeout)
    }

    /// Creates a data interrupt with number `number`, or one the library picks if `None`.
    pub fn create_data_interrupt(&self, number: Option<u32>) -> Result<LocalDataInterrupt> {
        LocalDataInterrupt::create(&self.inner, number)
    }

    /// Connects to data interrupt `number` of `node`, waiting up to `timeout` for it to exist.
    pub fn connect_data_interrupt(&self, node: u32, number: u32, timeout: Timeout) -> Result<RemoteDataInterrupt> {
        RemoteDataInterrupt::connect(&self.inner, NodeId::new(node)?, number, timeout)
    }

    /// A DMA queue for at most `max_entries` outstanding transfers (`SCICreateDMAQueue`).
    pub fn create_dma_queue(&self, max_entries: usize) -> Result<DmaQueue> {
        DmaQueue::new(max_entries)
    }

    /// A DMA channel: `Some(id)` that channel, `None` the least loaded (`SCIRequestDMAChannel`).
    pub fn request_dma_channel(&self, id: Option<u32>) -> Result<DmaChannel> {
        DmaChannel::request(id)
    }

    /// Creates reflective group `group` with `size` bytes of reflective memory. `receivers`
    /// names the nodes that may join (empty: any). At most [`MAX_GROUPS`] per fabric.
    pub fn create_reflective_group(&self, group: u32, size: u64, receivers: &[u32]) -> Result<ReflectiveGroup> {
        ReflectiveGroup::create(&self.inner, group, size, receivers)
    }

    /// Creates reflective group `group` as [`Self::create_reflective_group`] (any node may
    /// join), or joins it when another process created it first: the set-up of reflective
    /// memory in which every receiver "creates" the group (SISCI's broadcast segments).
    pub fn receive_reflective_group(&self, group: u32, size: u64) -> Result<GroupReceiver> {
        GroupReceiver::receive(&self.inner, group, size)
    }

    /// Joins reflective group `group`, waiting up to `timeout` for it to exist.
    pub fn join_reflective_group(&self, group: u32, timeout: Timeout) -> Result<ReflectiveMember> {
        ReflectiveMember::join(&self.inner, group, timeout)
    }

    /// A driver of the progress of this process's transport to other hosts, for a thread
    /// that spins on local memory (or on interrupts) which peers of other hosts write: while
    /// the driver lives, the transport's service thread leaves the completion queues to it,
    /// so each remote write is placed (and each remote interrupt counted) by the spinning
    /// thread itself instead of after a wake-up of the service thread. The holder must call
    /// [`ProgressDriver::poll`] in its loop and drop the driver before it blocks or does
    /// anything else for long, since nothing else places remote writes meanwhile. On one
    /// host (or in a build without a transport to other hosts, or before anything was
    /// exported or connected across hosts) `poll` does nothing.
    pub fn progress_driver(&self) -> ProgressDriver {
        ProgressDriver { driver: self.inner.hosts.as_ref().and_then(HostTransport::driver) }
    }

    /// The host serving `node` when that is another host of this fabric's cluster (its
    /// objects are reached over the network); None for a node of this host, or one no
    /// `[[node]]` lists (local, as on one host).
    pub fn remote_host_of(&self, node: u32) -> Option<String> {
        let c = self.inner.cluster.as_ref().filter(|c| c.is_remote(node))?;
        NodeId::new(node).ok().and_then(|n| c.config.host_of(n)).map(|h| h.name.clone())
    }

    /// Whether any live process acts as `node` on this fabric. For a node of another host
    /// of the cluster, this host's daemon asks that host's (`SCIProbeNode`): the node is
    /// there when its host is Operational and a live process acts as it there. A daemon
    /// that cannot be asked, or does not answer within a second, means no.
    pub fn probe_node(&self, node: u32) -> bool {
        match &self.inner.cluster {
            Some(c) if c.is_remote(node) => {
                const PROBE: std::time::Duration = std::time::Duration::from_secs(1);
                let Ok(id) = NodeId::new(node) else { return false };
                crate::cluster::Client::connect(self.inner.paths.root(), PROBE)
                    .and_then(|mut client| client.probe_node(id, PROBE))
                    .is_ok_and(|probe| probe.is_up())
            }
            _ => liveness::list_records(&self.inner.paths.procs())
                .is_ok_and(|r| r.iter().any(|r| r.node == node && r.alive)),
        }
    }

    /// Node events of the cluster this host is part of: one per node of a host whose state
    /// changes (operational, suspect, lost), as this host's daemon sees it, with the
    /// reason; [`crate::cluster::Subscription::initial`] is the picture they start from.
    /// Fails with [`Error::Cluster`] on a fabric that is not part of a cluster or whose
    /// daemon does not answer within two seconds.
    pub fn node_events(&self) -> Result<crate::cluster::Subscription> {
        const CALL: std::time::Duration = std::time::Duration::from_secs(2);
        if self.inner.cluster.is_none() {
            return Err(Error::Cluster("node events need a cluster: [cluster] in lanes.toml, naming this host".into()));
        }
        crate::cluster::Client::connect(self.inner.paths.root(), CALL)
            .and_then(|c| c.subscribe(CALL))
            .map_err(|e| Error::Cluster(e.to_string()))
    }

    /// The fabric's nodes and segments.
    pub fn status(&self) -> Result<FabricStatus> {
        status(self.dir())
    }
}

/// Drives the progress of the transport to other hosts from the thread that holds it; see
/// [`Fabric::progress_driver`].
pub struct ProgressDriver {
    driver: Option<<Hosts as HostTransport>::Driver>,
}

impl ProgressDriver {
    /// Reads the transport's completion queues once and dispatches what they held (remote
    /// writes placed, remote interrupts counted, own operations completed); returns how many
    /// entries it read. Costs a system call or two on a tcp provider, as reading a completion
    /// queue does there.
    #[inline]
    pub fn poll(&self) -> usize {
        self.driver.as_ref().map_or(0, ProgressPoll::poll)
    }
}

impl std::fmt::Debug for ProgressDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let active = self.driver.is_some();
        f.debug_struct("ProgressDriver").field("active", &active).finish()
    }
}
