//! The ofi transport's remote side: a connection to an object another process exported,
//! reached by RMA through this process's endpoint.
//!
//! A connection knows the exported range ([`RemoteRange`]), what it is connected to, and
//! its own state: lost (first reason wins) or live, and while live whether the owner offers
//! the object and whether its host responds. The process's node watch
//! (`super::transport`) sets those from the daemon's notices; the state doorbell is
//! private memory of the connection (there is no shared header to ring across hosts), and
//! whoever changes the state rings it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::endpoint::{Op, ProcessEndpoint, RemoteRange};
use super::fi;
use super::notify::Notifier;
use super::window::{MirrorWindow, TrackedWindow};
use crate::error::{Error, Result};
use crate::platform::doorbell::Doorbell;
use crate::transport::shm::layout::kind;
use crate::transport::{LossReason, ObjectInfo, RemoteObject, RemoteState, Window};
use crate::transport::{MapAccess, Timeout};

/// How often a post the provider keeps refusing with -FI_EAGAIN looks at the connection:
/// tcp;ofi_rxm refuses posts towards a dead peer for as long as one retries, and a
/// connection the daemons meanwhile reported lost or unreachable must not wait out the
/// post's whole bound.
const FAULT_CHECK: Duration = Duration::from_millis(10);

/// What runs when the connection ends: giving its slot at the owner back.
pub type OnDisconnect = Box<dyn FnOnce() + Send>;

/// The daemon connection a grant lives on, and the node this process acts as: replaced
/// when this host's daemon restarted and the grant was registered with the new one.
#[derive(Clone)]
pub struct DaemonLink {
    pub client: Arc<Mutex<Option<crate::cluster::Client>>>,
    pub peer_node: u32,
}

/// A connection to an object of another host (or, forced, of this one) over ofi.
#[derive(Debug, Clone)]
pub struct OfiRemote(pub Arc<OfiConn>);

/// The connection's shared state.
pub struct OfiConn {
    pub endpoint: Arc<ProcessEndpoint>,
    pub range: RemoteRange,
    pub info: ObjectInfo,
    /// The connection slot the owner's daemon claimed for us.
    pub slot: u32,
    /// Names the grant in the daemon's notices (0: none, as in tests without a daemon).
    pub grant: u64,
    /// 0 while connected, else a [`LossReason`] code.
    lost: AtomicU8,
    /// The owner made the object unavailable.
    unavailable: AtomicBool,
    /// The owner's host does not respond (its daemon calls it Suspect, or this host's
    /// daemon is unreachable): work towards it fails at once.
    unreachable: AtomicBool,
    /// The state doorbell's two words (seq, sleepers), boxed so their address is stable.
    bell_words: Box<[AtomicU32; 2]>,
    on_disconnect: Mutex<Option<OnDisconnect>>,
    /// Where the grant lives (None: no daemon, as in tests).
    pub daemon_link: std::sync::OnceLock<DaemonLink>,
    /// Triggers or messages: what this connection sent and has in flight.
    notify: Notifier,
}

impl std::fmt::Debug for OfiConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OfiConn")
            .field("info", &self.info)
            .field("range", &self.range)
            .field("slot", &self.slot)
            .finish()
    }
}

impl OfiRemote {
    /// A connection to `info`'s object, exported as `range` at the peer `range.peer` of
    /// `endpoint`; `on_disconnect` gives the slot back.
    pub fn new(
        endpoint: Arc<ProcessEndpoint>,
        range: RemoteRange,
        info: ObjectInfo,
        slot: u32,
        grant: u64,
        on_disconnect: Option<OnDisconnect>,
    ) -> OfiRemote {
        OfiRemote(Arc::new(OfiConn {
            endpoint,
            range,
            info,
            slot,
            grant,
            lost: AtomicU8::new(0),
            unavailable: AtomicBool::new(false),
            unreachable: AtomicBool::new(false),
            bell_words: Box::new([AtomicU32::new(0), AtomicU32::new(0)]),
            on_disconnect: Mutex::new(on_disconnect),
            daemon_link: std::sync::OnceLock::new(),
            notify: Notifier::default(),
        }))
    }

    /// The connection's shared state.
    pub fn conn(&self) -> &Arc<OfiConn> {
        &self.0
    }

    /// Makes this connection's triggers or messages publish `how`: what the owner's export
    /// record allows (and, in tests, either way on tcp). Before the first trigger or send.
    pub fn publish_by(&self, how: super::notify::Publish) {
        self.0.notify.publish_by(how);
    }
}

impl OfiConn {
    /// The state doorbell.
    pub fn bell(&self) -> Doorbell {
        let [seq, sleepers] = &*self.bell_words;
        // SAFETY: both words live in this connection's box, are only accessed atomically, and
        // the doorbell is used only while the connection (held by its user) lives.
        unsafe { Doorbell::new(seq.as_ptr(), sleepers.as_ptr()) }
    }

    /// Marks the connection lost (the first reason wins) and wakes waiters on its events.
    pub fn mark_lost(&self, reason: LossReason) {
        let _ = self.lost.compare_exchange(0, reason.code(), Ordering::AcqRel, Ordering::Relaxed);
        self.bell().ring();
    }

    /// Whether the owner offers the object (a change rings the state doorbell).
    pub fn set_available(&self, available: bool) {
        if self.unavailable.swap(!available, Ordering::AcqRel) == available {
            self.bell().ring();
        }
    }

    /// Whether the owner's host responds (a change rings the state doorbell).
    pub fn set_reachable(&self, reachable: bool) {
        if self.unreachable.swap(!reachable, Ordering::AcqRel) == reachable {
            self.bell().ring();
        }
    }

    pub fn state(&self) -> RemoteState {
        match LossReason::from_code(self.lost.load(Ordering::Acquire)) {
            Some(r) => RemoteState::Lost(r),
            None if self.unavailable.load(Ordering::Acquire) || self.unreachable.load(Ordering::Acquire) => {
                RemoteState::NotOperational
            }
            None => RemoteState::Operational,
        }
    }

    /// Why work towards the object fails now, if it does: lost, or its host not responding.
    pub fn fault(&self) -> Option<Error> {
        let a = self.info.addr;
        if let Some(r) = LossReason::from_code(self.lost.load(Ordering::Acquire)) {
            return Some(Error::SegmentLost { node: a.node, segment: a.id, reason: r.describe() });
        }
        self.unreachable.load(Ordering::Acquire).then(|| Error::NodeUnreachable {
            node: a.node,
            reason: "its host does not respond (Suspect, not yet heard from, or no daemon here)".into(),
        })
    }

    /// `Ok` while work towards the object can succeed ([`OfiConn::fault`]).
    pub fn check_reachable(&self) -> Result<()> {
        self.fault().map_or(Ok(()), Err)
    }

    /// Posts one operation with `post(deadline)`, retrying the provider's -FI_EAGAIN for at
    /// most `bound` in slices of `FAULT_CHECK`; between slices a connection that became
    /// lost or unreachable ends the wait with its fault.
    pub fn post_until(&self, bound: Duration, mut post: impl FnMut(Instant) -> Result<Arc<Op>>) -> Result<Arc<Op>> {
        // One clock read for a post the provider takes at once.
        let started = Instant::now();
        let deadline = fi::after(started, bound);
        let mut now = started;
        loop {
            match post(deadline.min(fi::after(now, FAULT_CHECK))) {
                Err(Error::Timeout { what, .. }) => {
                    if let Some(fault) = self.fault() {
                        return Err(fault);
                    }
                    now = Instant::now();
                    if now >= deadline {
                        let waited_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                        return Err(Error::Timeout { what, waited_ms });
                    }
                }
                r => return r,
            }
        }
    }

    /// Whether the owner's cores see the ranges of one write in the order the provider fills
    /// them (its export record's `in_place`), so that a word written last in a write is
    /// seen after the ranges before it.
    pub fn owner_sees_ranges_in_order(&self) -> bool {
        self.notify.owner_sees_ranges_in_order(&self.endpoint)
    }

    /// `Ok` while connected, else [`Error::SegmentLost`] with the reason.
    pub fn check_lost(&self) -> Result<()> {
        match self.state() {
            RemoteState::Lost(r) => {
                let a = self.info.addr;
                Err(Error::SegmentLost { node: a.node, segment: a.id, reason: r.describe() })
            }
            _ => Ok(()),
        }
    }
}

impl RemoteObject for OfiRemote {
    fn info(&self) -> &ObjectInfo {
        &self.0.info
    }

    fn state(&self) -> RemoteState {
        self.0.state()
    }

    fn state_bell(&self) -> Doorbell {
        self.0.bell()
    }

    /// A mirror window (`super::window`), filled from the object before it is returned.
    fn window(&self, offset: u64, len: u64, access: MapAccess) -> Result<Window> {
        MirrorWindow::open(&self.0, offset, len, access).map(|w| Window::Tracked(TrackedWindow::Mirror(w)))
    }

    /// One RMA write, not waited for (`super::notify`); fails if an earlier one failed.
    fn trigger(&self) -> Result<()> {
        let c = &self.0;
        c.check_reachable()?;
        if c.info.addr.kind != kind::INTERRUPT {
            return Err(Error::IllegalOperation("a trigger of an object that is not an interrupt"));
        }
        c.notify.trigger(c)
    }

    /// One RMA write into this connection's ring (`super::notify`).
    fn send(&self, data: &[u8], timeout: Timeout, poll: Duration) -> Result<()> {
        let c = &self.0;
        if c.info.addr.kind != kind::DATA_INTERRUPT {
            return Err(Error::IllegalOperation("a message to an object that is not a data interrupt"));
        }
        c.notify.send(c, data, timeout, poll, || c.check_reachable())
    }

    /// Also fails once a trigger or message of this connection failed after its call had
    /// returned.
    fn check(&self) -> Result<()> {
        self.0.check_lost()?;
        self.0.notify.check(&self.0)
    }

    /// Waits (bounded) for this connection's writes to be placed before the slot goes back:
    /// see [`super::notify::Notifier::settle`].
    fn disconnect(&self) {
        self.0.notify.settle(&self.0);
        self.0.mark_lost(LossReason::Disconnected);
        if let Some(f) = self.0.on_disconnect.lock().unwrap_or_else(|e| e.into_inner()).take() {
            f();
        }
    }
}
