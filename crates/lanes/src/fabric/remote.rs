//! Remote segments: another node's memory, connected to and mapped.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::map::{Map, MapAccess, MapOrigin};
use super::{FabricInner, Timeout};
use crate::config::NodeId;
use crate::error::{Error, Result};
use crate::platform::death_watch::{self, Watch};
use crate::platform::liveness;
use crate::transport::shm::layout::state;
use crate::transport::shm::segment_file::{OpenError, SegmentFile};

/// Why a connection is lost for good.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossReason {
    /// The owner process died.
    OwnerDied,
    /// The owner removed the segment.
    Removed,
    /// This side disconnected.
    Disconnected,
}

impl LossReason {
    fn code(self) -> u8 {
        match self {
            LossReason::OwnerDied => 1,
            LossReason::Removed => 2,
            LossReason::Disconnected => 3,
        }
    }

    fn from_code(c: u8) -> Option<Self> {
        match c {
            1 => Some(LossReason::OwnerDied),
            2 => Some(LossReason::Removed),
            3 => Some(LossReason::Disconnected),
            _ => None,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            LossReason::OwnerDied => "its owner died",
            LossReason::Removed => "its owner removed it",
            LossReason::Disconnected => "disconnected",
        }
    }
}

/// What a connected peer can see of a remote segment now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteState {
    /// Connected and available.
    Operational,
    /// Connected, but the owner made it unavailable; maps still work.
    NotOperational,
    /// Gone for good.
    Lost(LossReason),
}

/// A connection to another node's segment. Dropping it disconnects.
#[derive(Debug)]
pub struct RemoteSegment {
    inner: Arc<RemoteInner>,
}

pub(crate) struct RemoteInner {
    fabric: Arc<FabricInner>,
    file: SegmentFile,
    slot: usize,
    /// 0 while connected, else a [`LossReason`] code; set by the death watch or by checks.
    lost: Arc<AtomicU8>,
    watch: Mutex<Option<Watch>>,
}

impl std::fmt::Debug for RemoteInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteInner").field("file", &self.file).field("slot", &self.slot).finish()
    }
}

/// Waits between connection attempts: short at first (a peer that is about to make its
/// segment available is usually quick), then at most 10 ms.
fn backoff(attempt: u32) -> Duration {
    Duration::from_micros((200u64 << attempt.min(6)).min(10_000))
}

impl RemoteSegment {
    pub(crate) fn connect(
        fabric: &Arc<FabricInner>,
        node: NodeId,
        segment: u32,
        timeout: Timeout,
    ) -> Result<RemoteSegment> {
        let node = node.get();
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            let refusal = match Self::try_connect(fabric, node, segment)? {
                Ok(seg) => return Ok(seg),
                Err(refusal) => refusal,
            };
            let waited = started.elapsed();
            match timeout {
                Timeout::Immediate => return Err(refusal),
                Timeout::After(t) if waited >= t => {
                    return Err(Error::Timeout {
                        what: format!("segment {segment:#x} on node {node} ({refusal})"),
                        waited_ms: waited.as_millis() as u64,
                    })
                }
                _ => {}
            }
            let mut pause = backoff(attempt);
            if let Timeout::After(t) = timeout {
                pause = pause.min(t.saturating_sub(waited));
            }
            std::thread::sleep(pause);
            attempt += 1;
        }
    }

    /// One attempt: `Ok(Ok(seg))` connected, `Ok(Err(e))` a refusal worth waiting out,
    /// `Err(e)` a failure that waiting cannot cure.
    fn try_connect(fabric: &Arc<FabricInner>, node: u32, segment: u32) -> Result<Result<RemoteSegment>> {
        let file = match SegmentFile::open(&fabric.paths, node, segment) {
            Ok(f) => f,
            Err(OpenError::Missing) => return Ok(Err(Error::NoSuchSegment { node, segment })),
            Err(OpenError::Corrupt(reason)) => {
                return Err(Error::CorruptSegment { path: fabric.paths.segment(node, segment), reason })
            }
            Err(OpenError::Io(e)) => return Err(Error::io(format!("opening segment {segment:#x} of node {node}"), e)),
        };
        let owner = file.snapshot().owner;
        let st = file.header().state();
        if st & state::REMOVED != 0 || !fabric.is_alive(node, owner) {
            // A leftover of a dead owner: as good as absent (it is cleaned when re-created).
            return Ok(Err(Error::NoSuchSegment { node, segment }));
        }
        if st & state::AVAILABLE == 0 {
            return Ok(Err(Error::NotAvailable { node, segment }));
        }
        let me = fabric.identity;
        let my_node = fabric.node.get();
        let slot = file
            .header()
            .claim_slot(me, my_node, |n, id| !fabric.is_alive(n, id))
            .ok_or(Error::TooManyConnections { node, segment })?;
        if file.header().state() & state::REMOVED != 0 {
            file.header().release_slot(slot, me);
            return Ok(Err(Error::NoSuchSegment { node, segment }));
        }
        let lost = Arc::new(AtomicU8::new(0));
        let procs = fabric.paths.procs();
        let flag = lost.clone();
        let watch = death_watch::watch(
            owner.pid(),
            move || liveness::is_alive(&procs, node, owner),
            move || {
                let _ = flag.compare_exchange(0, LossReason::OwnerDied.code(), Ordering::AcqRel, Ordering::Relaxed);
            },
        )
        .map_err(|e| Error::io("watching the segment owner", e))?;
        Ok(Ok(RemoteSegment {
            inner: Arc::new(RemoteInner { fabric: fabric.clone(), file, slot, lost, watch: Mutex::new(Some(watch)) }),
        }))
    }

    /// The segment id.
    pub fn id(&self) -> u32 {
        self.inner.file.snapshot().segment_id
    }

    /// The node that exports it.
    pub fn node_id(&self) -> u32 {
        self.inner.file.snapshot().node_id
    }

    /// The size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.file.snapshot().segment_size
    }

    /// The connection's state now.
    pub fn state(&self) -> RemoteState {
        self.inner.state()
    }

    /// `Ok` while the connection lives, else [`Error::SegmentLost`] with the reason.
    pub fn check(&self) -> Result<()> {
        match self.inner.state() {
            RemoteState::Lost(r) => {
                Err(Error::SegmentLost { node: self.node_id(), segment: self.id(), reason: r.describe() })
            }
            _ => Ok(()),
        }
    }

    /// Maps `size` bytes from `offset` of the remote segment.
    pub fn map(&self, offset: u64, size: u64, access: MapAccess) -> Result<Map> {
        self.check()?;
        Map::new(&self.inner.file, offset, size, access, MapOrigin::Remote(self.inner.clone()))
    }

    /// Disconnects (`SCIDisconnectSegment`). Existing maps stay readable; their sequences fail.
    pub fn disconnect(self) {
        drop(self)
    }
}

impl RemoteInner {
    /// The connection's state; a check costs two atomic loads and no system call.
    pub(crate) fn state(&self) -> RemoteState {
        if let Some(r) = LossReason::from_code(self.lost.load(Ordering::Acquire)) {
            return RemoteState::Lost(r);
        }
        let st = self.file.header().state();
        if st & state::REMOVED != 0 {
            let _ = self.lost.compare_exchange(0, LossReason::Removed.code(), Ordering::AcqRel, Ordering::Relaxed);
            return RemoteState::Lost(LossReason::Removed);
        }
        if st & state::AVAILABLE == 0 {
            RemoteState::NotOperational
        } else {
            RemoteState::Operational
        }
    }
}

impl Drop for RemoteSegment {
    fn drop(&mut self) {
        let inner = &self.inner;
        let _ = inner.lost.compare_exchange(0, LossReason::Disconnected.code(), Ordering::AcqRel, Ordering::Relaxed);
        inner.file.header().release_slot(inner.slot, inner.fabric.identity);
        inner.watch.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}
