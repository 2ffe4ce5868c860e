//! Remote segments: another node's memory (or interrupt), connected to and mapped.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use super::events::{self, CallbackAction, RemoteEvent};
use super::map::{Map, MapAccess, MapOrigin};
use super::{FabricInner, Timeout};
use crate::config::NodeId;
use crate::error::{Error, IoContext, Result};
use crate::platform::death_watch::{self, Watch};
use crate::platform::doorbell::Doorbell;
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

    pub(crate) fn describe(self) -> &'static str {
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
    pub(crate) inner: Arc<RemoteInner>,
}

pub(crate) struct RemoteInner {
    pub(crate) fabric: Arc<FabricInner>,
    pub(crate) file: SegmentFile,
    pub(crate) slot: usize,
    /// 0 while connected, else a [`LossReason`] code; set by the death watch or by checks.
    lost: AtomicU8,
    watch: Mutex<Option<Watch>>,
    /// The state the last event reported (events report changes from it).
    reported: Mutex<RemoteState>,
    poll: events::PollTime,
    /// Further doorbells that waiters on this connection sleep on (a data interrupt
    /// sender's ring), rung when the connection is lost.
    loss_bells: Mutex<Vec<Doorbell>>,
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
    /// Connects to object `id` of `object_kind` on `node`, waiting up to `timeout`.
    pub(crate) fn connect(
        fabric: &Arc<FabricInner>,
        object_kind: u32,
        node: NodeId,
        id: u32,
        timeout: Timeout,
    ) -> Result<RemoteSegment> {
        let node = node.get();
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            let refusal = match Self::try_connect(fabric, object_kind, node, id)? {
                Ok(seg) => return Ok(seg),
                Err(refusal) => refusal,
            };
            let waited = started.elapsed();
            match timeout {
                Timeout::Immediate => return Err(refusal),
                Timeout::After(t) if waited >= t => {
                    return Err(Error::Timeout {
                        what: format!("{} {id:#x} on node {node} ({refusal})", super::local::kind_name(object_kind)),
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
    fn try_connect(
        fabric: &Arc<FabricInner>,
        object_kind: u32,
        node: u32,
        segment: u32,
    ) -> Result<Result<RemoteSegment>> {
        let file = match SegmentFile::open(&fabric.paths, object_kind, node, segment) {
            Ok(f) => f,
            Err(OpenError::Missing) => return Ok(Err(Error::NoSuchSegment { node, segment })),
            Err(OpenError::Corrupt(reason)) => {
                return Err(Error::CorruptSegment { path: fabric.paths.object(object_kind, node, segment), reason })
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
        let inner = Arc::new(RemoteInner {
            fabric: fabric.clone(),
            file,
            slot,
            lost: AtomicU8::new(0),
            watch: Mutex::new(None),
            reported: Mutex::new(RemoteState::Operational),
            poll: events::PollTime::new(),
            loss_bells: Mutex::new(Vec::new()),
        });
        // The watch holds the connection weakly: it marks it lost and rings the state
        // doorbell so that waiters on this segment's events wake up.
        let weak: Weak<RemoteInner> = Arc::downgrade(&inner);
        let procs = fabric.paths.procs();
        let watch = death_watch::watch(
            owner.pid(),
            move || liveness::is_alive(&procs, node, owner),
            move || {
                if let Some(inner) = weak.upgrade() {
                    inner.mark_lost(LossReason::OwnerDied);
                }
            },
        )
        .map_err(|e| Error::io("watching the segment owner", e))?;
        *inner.watch.lock().unwrap_or_else(|e| e.into_inner()) = Some(watch);
        Ok(Ok(RemoteSegment { inner }))
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
        self.inner.check()
    }

    /// Maps `size` bytes from `offset` of the remote segment.
    pub fn map(&self, offset: u64, size: u64, access: MapAccess) -> Result<Map> {
        self.check()?;
        Map::new(&self.inner.file, offset, size, access, MapOrigin::Remote(self.inner.clone()))
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
    /// Marks the connection lost (first reason wins) and wakes every waiter on its events.
    fn mark_lost(&self, reason: LossReason) {
        let _ = self.lost.compare_exchange(0, reason.code(), Ordering::AcqRel, Ordering::Relaxed);
        // Ringing the owner's header is harmless even after the owner died: the page stays
        // mapped; other peers' waiters merely re-check.
        self.file.header().state_doorbell().ring();
        for b in self.loss_bells.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            b.ring();
        }
    }

    /// Also rings `bell` when the connection is lost.
    ///
    /// # Safety
    /// The doorbell's words must lie in a mapping that lives as long as this connection.
    pub(crate) unsafe fn ring_on_loss(&self, bell: Doorbell) {
        self.loss_bells.lock().unwrap_or_else(|e| e.into_inner()).push(bell);
    }

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

    pub(crate) fn check(&self) -> Result<()> {
        match self.state() {
            RemoteState::Lost(r) => {
                let s = self.file.snapshot();
                Err(Error::SegmentLost { node: s.node_id, segment: s.segment_id, reason: r.describe() })
            }
            _ => Ok(()),
        }
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
        let r = self.file.header().state_doorbell().wait(
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
            what: format!("an event of remote segment {:#x}", self.file.snapshot().segment_id),
            waited_ms: match timeout {
                Timeout::After(d) => d.as_millis() as u64,
                _ => 0,
            },
        })
    }
}

impl Drop for RemoteSegment {
    fn drop(&mut self) {
        let inner = &self.inner;
        inner.mark_lost(LossReason::Disconnected);
        inner.file.header().release_slot(inner.slot, inner.fabric.identity);
        inner.watch.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}
