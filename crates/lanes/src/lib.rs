//! Lanes: the programming model of a PCIe host-to-host fabric on ordinary Linux machines.
//!
//! A [`Fabric`] is opened as a node (`LANES_NODE_ID`, default 4). A node exports
//! [`LocalSegment`]s; other nodes (other processes, possibly on other hosts) connect to
//! them as [`RemoteSegment`]s and move data with plain CPU loads and stores through a
//! [`Map`] — programmed I/O — checking bursts with a [`Sequence`].
//!
//! ```no_run
//! use lanes::{Fabric, MapAccess, Timeout};
//! # fn main() -> lanes::Result<()> {
//! let fabric = Fabric::open()?;
//! let seg = fabric.create_segment(1, 4096)?;
//! seg.prepare()?;
//! seg.set_available()?;
//! // ... in another process acting as another node:
//! let remote = fabric.connect_segment(4, 1, Timeout::Infinite)?;
//! let map = remote.map(0, 4096, MapAccess::ReadWrite)?;
//! map.write::<u64>(0, 42)?;
//! map.store_barrier();
//! # Ok(()) }
//! ```
//!
//! Layers (see docs/ARCHITECTURE.md), one crate each, so that an upward import does not
//! compile: [`platform`] building blocks (the crate `lanes-platform`), [`transport`]s (the
//! crate `lanes-transport`, with [`config`], [`error`] and the control plane's client), and
//! the fabric API here, re-exported from [`fabric`]; the daemon ([`cluster::daemon`]) and the
//! socket accelerator's shared half ([`sockets`]) are services on top.

pub mod cluster;
pub mod fabric;
pub mod sockets;

/// Layer 1, the crate `lanes-platform`: re-exported so that `lanes::platform::...` and
/// `crate::platform::...` name it as they did when it was a module here.
pub use lanes_platform as platform;
/// Layer 2, the crate `lanes-transport`: its modules, re-exported so that `lanes::transport`,
/// `lanes::config` and `lanes::error` (and `crate::...` here) name them as they did when
/// they were modules of this crate.
pub use lanes_transport::{config, error, transport};

/// Whether this build has the cross-host transport (the feature re-exported from
/// `lanes-transport`), so that nodes of other hosts of a cluster can be reached; without it,
/// connecting to one is refused.
pub use lanes_transport::OFI_TRANSPORT;

pub use config::{FabricConfig, NodeId};
pub use error::{Error, Result};
pub use fabric::{
    cleanup, status, CallbackAction, CleanupReport, CopyPath, DmaCallback, DmaChannel, DmaDirection, DmaQueue,
    DmaQueueState, DmaVec, Fabric, FabricStatus, GroupEvent, GroupReceiver, LocalDataInterrupt, LocalEvent,
    LocalInterrupt, LocalSegment, LossReason, Map, MapAccess, ProgressDriver, ReflectiveGroup, ReflectiveMember,
    RemoteDataInterrupt, RemoteEvent, RemoteInterrupt, RemoteSegment, RemoteState, Sequence, SequenceStatus, Timeout,
    MAX_DATA_INTERRUPT_PAYLOAD, MAX_DMA_CHANNELS, MAX_GROUPS,
};
