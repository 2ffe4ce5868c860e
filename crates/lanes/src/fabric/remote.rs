//! Remote segments: another node's memory (or interrupt), connected to and mapped.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::events::{self, CallbackAction, RemoteEvent};
use super::map::{Map, MapOrigin};
use super::{FabricInner, Timeout};
use crate::config::NodeId;
use crate::error::{Error, IoContext, Result};
use crate::transport::shm::layout::kind;
use crate::transport::shm::remote::ShmRemote;
use crate::transport::MapAccess;
use crate::transport::{
    Connection, HostTransport, ObjectAddr, RemoteHandle, RemoteObject, Transport, NO_HOST_TRANSPORT,
};
pub use crate::transport::{LossReason, RemoteState};

/// A connection to another node's segment. Dropping it disconnects.
#[derive(Debug)]
pub struct RemoteSegment {
    pub(crate) inner: Arc<RemoteInner>,
}

pub(crate) struct RemoteInner {
    pub(crate) fabric: Arc<FabricInner>,
    /// The connection, of whichever transport reached the object (and, for a member of a
    /// reflective group spanning hosts, its fan-out): `inner.remote` and `inner.group`.
    pub(crate) conn: Connection,
    /// The state the last event reported (events report changes from it).
    reported: Mutex<RemoteState>,
    poll: events::PollTime,
}

impl std::ops::Deref for RemoteInner {
    type Target = Connection;

    #[inline(always)]
    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl std::fmt::Debug for RemoteInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteInner").field("remote", &self.remote).finish_non_exhaustive()
    }
}

impl RemoteSegment {
    /// Connects to object `id` of `object_kind` on `node`, waiting up to `timeout`.
    pub(crate) fn connect(
        fabric: &Arc<FabricInner>,
        object_kind: u32,
        node: NodeId,
        id: u32,
        timeout: Timeout,
    ) -> Result<RemoteSegment> {
        let addr = ObjectAddr { kind: object_kind, node: node.get(), id };
        Ok(Self::over(fabric, Self::reach(fabric, addr, timeout)?))
    }

    /// A segment over the connection `remote` (made by the caller: a reflective group's
    /// member reaches its group's object this way, whichever host the creator is on),
    /// operational.
    pub(crate) fn over(fabric: &Arc<FabricInner>, remote: RemoteHandle) -> RemoteSegment {
        let inner = Arc::new(RemoteInner {
            fabric: fabric.clone(),
            conn: Connection { remote, group: Default::default() },
            reported: Mutex::new(RemoteState::Operational),
            poll: events::PollTime::new(),
        });
        RemoteSegment { inner }
    }

    /// Connects through the transport that reaches `addr.node`: shm on this host, the
    /// transport to other hosts for another host of the cluster. Reflective groups are joined here only on one host
    /// (a cluster's members connect through `ReflectiveMember::join`).
    fn reach(fabric: &Arc<FabricInner>, addr: ObjectAddr, timeout: Timeout) -> Result<RemoteHandle> {
        let remote = addr.kind != kind::REFLECTIVE && fabric.cluster.as_ref().is_some_and(|c| c.is_remote(addr.node));
        if let Some(c) = fabric.cluster.as_ref().filter(|c| !remote && !c.lists(addr.node)) {
            // In a cluster a node that lanes.toml does not list can only be a local one: with
            // no process acting as it here, waiting for it would be a timeout that explains
            // nothing.
            let acting = crate::platform::liveness::list_records(&fabric.paths.procs())
                .is_ok_and(|r| r.iter().any(|r| r.node == addr.node && r.alive));
            if !acting {
                return Err(Error::Cluster(format!(
                    "node {} is not in lanes.toml (no [[node]] lists it; the cluster's nodes are {}), and no \
                     process acts as it on this host",
                    addr.node,
                    c.listed_nodes()
                )));
            }
        }
        if !remote {
            return Ok(RemoteHandle::Shm(fabric.shm.connect(addr, timeout)?));
        }
        if let Some(hosts) = &fabric.hosts {
            return hosts.connect_remote(addr, timeout);
        }
        Err(Error::IllegalOperation(NO_HOST_TRANSPORT))
    }

    /// A segment connected through `remote` (made by the caller), for the tests of a
    /// transport below the fabric (crates/lanes-transport/tests).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn from_handle(fabric: &super::Fabric, remote: RemoteHandle) -> RemoteSegment {
        Self::over(&fabric.inner, remote)
    }

    /// The segment id.
    pub fn id(&self) -> u32 {
        self.inner.remote.info().addr.id
    }

    /// The node that exports it.
    pub fn node_id(&self) -> u32 {
        self.inner.remote.info().addr.node
    }

    /// The size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.remote.info().size
    }

    /// The connection's state now.
    pub fn state(&self) -> RemoteState {
        self.inner.state()
    }

    /// `Ok` while the connection lives, else [`Error::SegmentLost`] with the reason.
    pub fn check(&self) -> Result<()> {
        self.inner.check()
    }

    /// Maps `size` bytes from `offset` of the remote segment.
    pub fn map(&self, offset: u64, size: u64, access: MapAccess) -> Result<Map> {
        self.check()?;
        // A member's connection to a group spanning hosts reaches the creator's copy (and
        // the roster after the group's bytes) only; the member's maps are the group's.
        if self.inner.group.get().is_some() {
            return Err(Error::IllegalOperation(
                "maps of a reflective group spanning hosts are its member's read and write maps",
            ));
        }
        let window = self.inner.remote.window(offset, size, access)?;
        Ok(Map::new(window, offset, access, MapOrigin::Remote(self.inner.clone())))
    }

    /// Sets how long waits on this object spin before they sleep (default: `LANES_POLL_US`).
    pub fn set_poll_time(&self, poll: Duration) {
        self.inner.poll.set(poll);
    }

    /// Waits for the segment's next state change: not operational, operational again, or
    /// lost (the last event; further waits fail with [`Error::SegmentLost`]).
    pub fn wait_event(&self, timeout: Timeout) -> Result<RemoteEvent> {
        self.inner.wait_event(timeout)
    }

    /// Calls `cb` from a library thread for every state change until it cancels, the
    /// segment is lost (that event is delivered, then the callback ends) or this side
    /// disconnects.
    pub fn on_event(&self, cb: impl FnMut(RemoteEvent) -> CallbackAction + Send + 'static) -> Result<()> {
        let inner = self.inner.clone();
        events::spawn_callback_thread(
            "lanes-remote-events",
            move || match inner.wait_event(Timeout::Infinite) {
                Ok(RemoteEvent::Lost(LossReason::Disconnected)) => Err(()),
                Ok(ev) => Ok(ev),
                Err(_) => Err(()),
            },
            cb,
        )
        .context(|| "starting the event callback thread".into())
    }

    /// Disconnects (`SCIDisconnectSegment`). Existing maps stay readable; their sequences fail.
    pub fn disconnect(self) {
        drop(self)
    }
}

impl RemoteInner {
    /// The connection, as DMA descriptors name it.
    #[inline]
    pub(crate) fn connection(&self) -> *const Connection {
        &self.conn
    }

    /// The connection's state; a check costs two atomic loads and no system call.
    #[inline]
    pub(crate) fn state(&self) -> RemoteState {
        self.remote.state()
    }

    /// `Ok` while the connection lives, else [`Error::SegmentLost`] with the reason.
    #[inline]
    pub(crate) fn check(&self) -> Result<()> {
        self.remote.check()
    }

    /// The shm connection of a member of a single-host reflective group (members of a
    /// cluster's groups never call this: they hold a connection of the transport to other
    /// hosts).
    pub(crate) fn shm(&self) -> &ShmRemote {
        self.remote.as_shm().expect("single-host reflective groups are reached over shm")
    }

    pub(crate) fn poll_time(&self) -> Duration {
        self.poll.get()
    }

    fn wait_event(&self, timeout: Timeout) -> Result<RemoteEvent> {
        {
            let reported = *self.reported.lock().unwrap_or_else(|e| e.into_inner());
            if matches!(reported, RemoteState::Lost(_)) {
                return self.check().map(|_| RemoteEvent::Operational);
            }
        }
        let r = self.remote.state_bell().wait(
            || {
                let now = self.state();
                let mut reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
                (now != *reported).then(|| {
                    *reported = now;
                    match now {
                        RemoteState::Operational => RemoteEvent::Operational,
                        RemoteState::NotOperational => RemoteEvent::NotOperational,
                        RemoteState::Lost(r) => RemoteEvent::Lost(r),
                    }
                })
            },
            || None::<()>,
            self.poll_time(),
            events::deadline(timeout),
        );
        r.map_err(|_| Error::Timeout {
            what: format!("an event of remote segment {:#x}", self.remote.info().addr.id),
            waited_ms: timeout.as_millis(),
        })
    }
}

impl Drop for RemoteSegment {
    fn drop(&mut self) {
        self.inner.remote.disconnect();
    }
}
