//! Connections to other hosts of the cluster (docs/design/cross-host-sockets.md): the
//! library finds out whether a connected TCP socket's peer is on another host of the
//! cluster, and if so exports the objects of a fabric stream for it
//! (`lanes::sockets::fabric_stream`) and registers the socket's half, naming them, with
//! this host's daemon, which pairs it with the peer's half through the peer host's daemon
//! and writes the peer's objects into the record. No byte is written into the stream.
//!
//! - **The stream.** The first call on the socket that moves bytes after the pairing
//!   (`stream`) has the exports connected to the peer's objects in a thread of its own
//!   (three connects through the daemons; the program's calls go on through the kernel
//!   meanwhile), and the first such call after that while no other call on the connection
//!   is inside the kernel starts the stream, its kernel counts where the kernel's are
//!   (`kernel_history`); from then on the calls of `remote_io` move the bytes through it.
//!   (A call inside the kernel at the start would move bytes the counts miss: a blocked
//!   send's rest could then arrive behind ring bytes. So the program's calls on a candidate
//!   are counted while under way, [`CallUnderWay`].) A set-up that fails (the fabric to
//!   the peer's host cut between the pairing and the start, the peer's objects gone) is
//!   tried again with new objects, as a fall-forward is: the peer may have tried this end's
//!   objects, and never tries them twice. A connection that cannot get a stream (no
//!   fabric, the daemon's refusal, [`MAX_FAILED_SET_UPS`] failed set-ups in a row) stays
//!   kernel TCP for good, the reason counted (`RemoteNoStream`).
//! - **Fall-forward.** A stream that failed over (`FabricStream::failed_over_and_settled`:
//!   the fabric to the peer's host failed, and both directions went on through the kernel
//!   connection, byte-exact) is replaced: the connection exports new objects and registers
//!   its half again naming them; the daemons pair the halves again at a new generation
//!   once both sides did, and the new objects are connected and a new stream started as
//!   the first one was, from the kernel's counts. The pairing announces the new objects only
//!   once the fabric to the peer's host works again (the daemons' link runs on it).
//!
//! - **Which host.** A peer address lanes.toml gives another host is that host's, asked of
//!   nobody. Any other address (not loopback nor one of this host's, which the one-host
//!   path takes) is asked of the daemon once (`HostOf`), the answer kept for the process's
//!   life; "nobody's" is asked again after [`NOBODY_FOR`] (a host that says hello later
//!   may claim it). With remote acceleration off nothing is asked at all: a connection to
//!   a lanes.toml address is counted as `RemoteOff`, any other is not looked at.
//! - **A candidate** gets a record (`lanes::sockets::remote`: the smallest ring, unused),
//!   then one request to the daemon on a connection of its own (`RegisterHalf`), which
//!   checks it against the kernel. No daemon: the record stays, and a daemon that starts
//!   takes it over. A refusal: the record goes, and the reason is counted. A connecting
//!   end registers at once; an accepted one at its first call that moves bytes or its
//!   addition to an epoll set, made while its process is the socket's only holder: a
//!   server that forks a process per connection (PostgreSQL) hands the socket over before
//!   either, and the child, not the parent that closes its copy, exports the stream's
//!   objects and registers.
//! - **Holders.** The record's holders are the processes sharing the socket, as for a
//!   local one (dup, fork, exec adoption). When the last one closes it, the half is
//!   withdrawn (one more request) and the record removed; a half that waited all its life
//!   is counted as `RemotePeerNeverPaired`.
//! - **The fd table.** Candidates are not one-host sockets: `conn::lookup` never returns
//!   them. Their fds are marked in `conn`'s table of maybes (3), so close, dup and fork
//!   find them; until a stream is live, every call on them is the C library's.
//! - **Giving up.** A fork (the child would share the stream's state; an accepted socket
//!   not registered yet excepted), an exec, a seccomp filter, peeking, urgent data,
//!   `sendfile` and `splice` give the connection back to the kernel for good first
//!   (`FabricStream::give_up`, byte-exact; before an exec or a filter, ring bytes nobody
//!   can read any more reset the connection).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use lanes::cluster::client;
use lanes::cluster::proto::{AddressOwner, HalfRegistration, StreamHandles};
use lanes::platform::liveness::ProcessIdentity;
use lanes::sockets::endpoint::DEFAULT_RING_BYTES;
use lanes::sockets::endpoint::{this_process, MIN_RING_BYTES};
use lanes::sockets::fabric_stream::{
    established, kernel_history, syn_acked, FabricStream, KernelHistory, PendingStream, StreamExports,
};
use lanes::sockets::remote::{Pairing, PairingState, FLAG_REMOTE};
use lanes::sockets::{ConnectionKey, Endpoint};
use lanes::Fabric;

use crate::config::{config, record_failed};
use crate::conn::Opened;
use crate::reasons::{self, Reason};

/// A "nobody's" answer is asked again after this long.
const NOBODY_FOR: Duration = Duration::from_secs(10);
/// How long one request to the daemon may take (a connect, accept or close waits for it).
const CALL: Duration = Duration::from_millis(500);
/// After a daemon that did not answer in time, no request for this long: a hung daemon
/// must not slow every connection down.
const BACK_OFF: Duration = Duration::from_secs(10);
/// Addresses whose host is remembered at once; past it, the "nobody's" answers go first.
const MAX_ANSWERS: usize = 4096;

/// How long setting a stream up may take (three connects through the daemons).
const STREAM_SET_UP: Duration = Duration::from_secs(5);

/// Where a candidate's fabric stream stands.
enum Slot {
    /// Accepted, not registered yet: its first call that moves bytes, made while this
    /// process is the socket's only holder, exports the stream's objects and registers the
    /// half ([`RemoteConn::register_first`]). A fork-per-connection server's child is then
    /// the one that does, with objects of its own; the parent, which closes its copy, never
    /// exported any, so the peer never pairs with objects nobody serves.
    Unregistered,
    /// Exported, waiting for the pairing to name the peer's objects.
    Waiting(StreamExports),
    /// Connecting to the peer's objects, in a thread of its own (three connects through
    /// the daemons: the program's calls go on through the kernel meanwhile).
    Connecting,
    /// Connected; started by the next call that moves bytes while no other is inside the
    /// kernel.
    Ready(PendingStream),
    /// Set up: the connection's bytes go through it; what the kernel had carried before.
    Live(Arc<FabricStream>, KernelHistory),
    /// The live stream failed over and settled (every call is the kernel's own), or a
    /// set-up failed (see [`RemoteConn::set_up_failed`]): new objects are being
    /// exported and registered for the next stream, in a thread of its own (fall-forward);
    /// then `Waiting` for the pairing to name the peer's new ones.
    Renewing(Replaced),
    /// Kernel TCP for good (no objects, set-ups that kept failing, given up before it was
    /// live).
    Kernel,
}

/// What a renewal replaces: kept until the new objects are registered, so that the new
/// ones never take their numbers (a pairing naming the same objects again changes nothing).
enum Replaced {
    /// The stream that failed over.
    Stream(Arc<FabricStream>),
    /// The objects of a stream that could not start.
    Exports { _kept: StreamExports },
}

/// What the streams before the live one carried (they failed over, and were replaced).
#[derive(Default)]
struct Earlier {
    sent_fabric: AtomicU64,
    received_fabric: AtomicU64,
    failovers: AtomicU64,
    /// Streams started on the connection.
    starts: AtomicU64,
}

/// A cross-host candidate: its record and where its peer is.
pub struct RemoteConn {
    own: Endpoint,
    key: ConnectionKey,
    host: String,
    /// The daemon took the half (so withdrawing it is worth a request).
    registered: AtomicBool,
    slot: Mutex<Slot>,
    /// What the kernel counted as acked before anything was written (see
    /// `fabric_stream::kernel_history`).
    syn_acked: u64,
    /// The program's calls on the connection under way now, through a stream or the C
    /// library's ([`CallUnderWay`]): no stream starts while there is one.
    calls: AtomicUsize,
    /// The peer's objects the last stream was connected to: a pairing that names them
    /// again (the peer has not renewed its own yet) is no ground for a new stream.
    peer_used: Mutex<Option<StreamHandles>>,
    /// No set-up before then (the peer's host was out of reach at the last one).
    set_up_again_at: Mutex<Instant>,
    earlier: Earlier,
    /// Set-ups that failed since the last stream started (see [`MAX_FAILED_SET_UPS`]).
    failed_set_ups: AtomicU32,
}

/// A program's call on a candidate, counted from before its candidate's stream was looked
/// at (under the slot's lock) until the call returned, so that either the call sees the
/// live stream or the stream's start sees the call (see [`RemoteConn::stream`]).
pub struct CallUnderWay(Arc<RemoteConn>);

impl CallUnderWay {
    fn new(c: &Arc<RemoteConn>) -> CallUnderWay {
        c.calls.fetch_add(1, Ordering::AcqRel);
        CallUnderWay(c.clone())
    }
}

impl Drop for CallUnderWay {
    fn drop(&mut self) {
        self.0.calls.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Which way a program's call on a candidate goes (see [`route`]).
pub enum Route {
    /// Through the live stream.
    Stream(Arc<RemoteConn>, Arc<FabricStream>, CallUnderWay),
    /// The C library's own call: counted while the stream is not live, so that none starts
    /// meanwhile; None when the stream was live and is the kernel's alone for good now.
    Kernel(Option<CallUnderWay>),
}

impl RemoteConn {
    /// A candidate whose stream starts at `slot`; `syn` as [`RemoteConn::syn_acked`];
    /// `registered`: the daemon holds its half already.
    fn new(own: Endpoint, key: ConnectionKey, host: String, slot: Slot, syn: u64, registered: bool) -> Self {
        RemoteConn {
            own,
            key,
            host,
            registered: AtomicBool::new(registered),
            slot: Mutex::new(slot),
            syn_acked: syn,
            calls: AtomicUsize::new(0),
            peer_used: Mutex::new(None),
            set_up_again_at: Mutex::new(Instant::now()),
            earlier: Earlier::default(),
            failed_set_ups: AtomicU32::new(0),
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live stream: once the pairing named the peer's objects, the first call that
    /// moves bytes has them connected in the background, and the first one after that made
    /// while no other call is inside the kernel starts the stream (its kernel counts where
    /// the kernel's are then).
    fn stream(self: &Arc<Self>, fd: i32) -> Option<Arc<FabricStream>> {
        self.stream_locked(&mut self.slot(), fd)
    }

    /// [`Self::stream`] under the slot's lock.
    fn stream_locked(self: &Arc<Self>, slot: &mut Slot, fd: i32) -> Option<Arc<FabricStream>> {
        match &*slot {
            Slot::Live(s, _) if s.failed_over_and_settled() => {
                self.renew_in_background(slot);
                return None;
            }
            Slot::Live(s, _) => return Some(s.clone()),
            Slot::Kernel | Slot::Connecting | Slot::Renewing(_) => return None,
            Slot::Unregistered => {
                self.register_first(slot);
                return None;
            }
            Slot::Waiting(_) => {
                self.connect_in_background(slot);
                return None;
            }
            Slot::Ready(_) => {}
        }
        if self.calls.load(Ordering::Acquire) > 0 {
            // Another thread's call is inside the kernel: the kernel's counts now would miss
            // what it moves from here on (a blocked send's rest, queued later), and the peer's
            // receiver, caught up with the counts, would be granted the ring ahead of those
            // bytes. A later call starts the stream.
            return None;
        }
        let Slot::Ready(pending) = std::mem::replace(slot, Slot::Kernel) else { return None };
        if failing_on_purpose() {
            let why =
                lanes::Error::IllegalOperation("the stream's start failed on purpose (LANES_SOCKETS_FAIL_SET_UPS)");
            self.set_up_failed(slot, why, Some(pending.into_exports()));
            return None;
        }
        let Some(history) = kernel_history(fd, self.syn_acked) else {
            // Shut down or reset already: nothing more for a stream to carry. Else the
            // kernel's counts kept moving while read (acks arriving): a later call starts it.
            if established(fd) {
                *slot = Slot::Ready(pending);
            }
            return None;
        };
        match pending.start(fd, history) {
            Ok(s) => {
                let s = Arc::new(s);
                // An idle connection's record says it failed over without waiting for a call.
                let me = Arc::downgrade(self);
                s.on_failover(Box::new(move |n| {
                    if let Some(c) = me.upgrade() {
                        let earlier = c.earlier.failovers.load(Ordering::Relaxed);
                        c.own.failovers().store(earlier + n, Ordering::Relaxed);
                    }
                }));
                self.earlier.starts.fetch_add(1, Ordering::Relaxed);
                self.failed_set_ups.store(0, Ordering::Relaxed);
                *slot = Slot::Live(s.clone(), history);
                Some(s)
            }
            Err(failed) => {
                let (e, exports) = *failed;
                self.set_up_failed(slot, e, exports);
                None
            }
        }
    }

    /// [`Self::stream`] for a program's call: the live stream (unless it is the kernel's
    /// alone now), else the call counted as the C library's, under the same lock.
    fn route(self: &Arc<Self>, fd: i32) -> Route {
        let mut slot = self.slot();
        match self.stream_locked(&mut slot, fd) {
            Some(s) if !s.kernel_only() => Route::Stream(self.clone(), s, CallUnderWay::new(self)),
            Some(_) => Route::Kernel(None),
            None => Route::Kernel(Some(CallUnderWay::new(self))),
        }
    }

    /// A set-up that failed (the connect to the peer's objects, or the start; `exports`
    /// given back where they outlive the failure): the peer may have connected to these
    /// objects meanwhile, and its stream then never connects to them again, so this end
    /// renews its own (as after a fail-over) and waits for the pairing to name objects of
    /// the peer's it has not tried. The fabric to the peer's host failing mid-set-up is the
    /// usual cause; past [`MAX_FAILED_SET_UPS`] in a row the connection stays kernel TCP.
    fn set_up_failed(self: &Arc<Self>, slot: &mut Slot, e: lanes::Error, exports: Option<StreamExports>) {
        let failed = self.failed_set_ups.fetch_add(1, Ordering::Relaxed) + 1;
        match exports {
            Some(exports) if failed < MAX_FAILED_SET_UPS => {
                self.renew_objects_in_background(slot, Replaced::Exports { _kept: exports });
            }
            _ => {
                *slot = Slot::Kernel;
                reasons::note_with(Reason::RemoteNoStream, Some(&self.key), &e.to_string());
            }
        }
    }

    /// A live stream that failed over and settled: its connection goes on through the
    /// kernel, and a new stream is to replace it once the fabric to the peer's host is back
    /// (fall-forward). New objects are exported and registered with the daemon in a thread
    /// of its own (the daemons pair the two halves again, naming each side's new objects,
    /// once both registered theirs); the stream then starts as a first one does, from the
    /// kernel's counts. Until then every call is the C library's. A failure leaves the
    /// connection kernel TCP for good.
    fn renew_in_background(self: &Arc<Self>, slot: &mut Slot) {
        let Slot::Live(old, history) = std::mem::replace(slot, Slot::Kernel) else { return };
        self.publish(&old, &history);
        let c = old.counts();
        self.earlier.sent_fabric.fetch_add(c.sent_fabric, Ordering::Relaxed);
        self.earlier.received_fabric.fetch_add(c.received_fabric, Ordering::Relaxed);
        self.earlier.failovers.fetch_add(c.failovers, Ordering::Relaxed);
        self.renew_objects_in_background(slot, Replaced::Stream(old));
    }

    /// Exports new objects for the next stream and registers them with the daemon, in a
    /// thread of its own (`old`: what they replace, kept until then); the slot then waits
    /// for the pairing to name the peer's. A failure leaves the connection kernel TCP for
    /// good.
    fn renew_objects_in_background(self: &Arc<Self>, slot: &mut Slot, old: Replaced) {
        *slot = Slot::Renewing(old);
        let me = self.clone();
        let spawned = lanes::platform::threads::spawn("lanes-stream-setup", move || {
            let renewed = exports().and_then(|e| me.register_again(e.handles()).map(|()| e));
            let mut slot = me.slot();
            // Given up or closed meanwhile: what was exported is dropped.
            if !matches!(*slot, Slot::Renewing(_)) {
                return;
            }
            let retired = match renewed {
                Ok(e) => std::mem::replace(&mut *slot, Slot::Waiting(e)),
                Err(why) => {
                    reasons::note_with(Reason::RemoteNoStream, Some(&me.key), &format!("renewing its objects: {why}"));
                    std::mem::replace(&mut *slot, Slot::Kernel)
                }
            };
            drop(slot);
            // Its objects go only now: the new ones are never given the old ones' numbers.
            drop(retired);
        });
        if let Err(e) = spawned {
            *slot = Slot::Kernel;
            let why = format!("renewing its objects: no set-up thread: {e}");
            reasons::note_with(Reason::RemoteNoStream, Some(&self.key), &why);
        }
    }

    /// An accepted candidate's first call that moves bytes: if this process is the socket's
    /// only holder, exports the stream's objects and registers the half (the slot then
    /// waits for the pairing); while another process holds it too (a forking server's
    /// parent that has not closed its copy yet), a later call looks again, at most every
    /// [`SHARED_LOOK_AGAIN`]. A refusal leaves the connection kernel TCP for good.
    fn register_first(&self, slot: &mut Slot) {
        let now = Instant::now();
        let mut again = self.set_up_again_at.lock().unwrap_or_else(|e| e.into_inner());
        if now < *again {
            return;
        }
        let Ok(me) = this_process() else { return };
        if !self.own.held_only_by(me, true) {
            *again = now + SHARED_LOOK_AGAIN;
            return;
        }
        drop(again);
        // After a uid change the fabric directory is not this process's any more.
        if reasons::check_uid(&self.key).is_none() {
            *slot = Slot::Kernel;
            return;
        }
        let (next, handles) = match exports() {
            Ok(e) => {
                let h = e.handles();
                self.own.set_own_handles(h);
                (Slot::Waiting(e), Some(h))
            }
            Err(why) => {
                reasons::note_with(Reason::RemoteNoStream, Some(&self.key), &why);
                (Slot::Kernel, None)
            }
        };
        // Registered without objects too: the peer then knows there will be no stream.
        *slot = if register(self, self.own.cookie(), handles) { next } else { Slot::Kernel };
    }

    /// Registers this half again with the daemon, naming new stream objects `h` (see
    /// [`Self::renew_in_background`]). A daemon that does not answer is no failure: the
    /// record names the new objects, and a daemon that starts takes it over.
    fn register_again(&self, h: StreamHandles) -> Result<(), String> {
        self.own.set_own_handles(h);
        let me = this_process().map_err(|e| e.to_string())?;
        let key = &self.key;
        let half = HalfRegistration {
            local: key.local,
            remote: key.remote,
            cookie: self.own.cookie(),
            netns: key.netns,
            process: me.bits(),
            handles: Some(h),
        };
        match client::register_half(&config().fabric_dir, &half, CALL) {
            Ok(_) => Ok(()),
            Err(lanes::cluster::Error::Refused(r)) => Err(r.to_string()),
            Err(_) => Ok(()),
        }
    }

    /// A waiting candidate whose pairing named the peer's objects: connects to them in a
    /// thread of its own (named as the fabric's threads, so its sockets are the provider's).
    fn connect_in_background(self: &Arc<Self>, slot: &mut Slot) {
        let Some(pairing) = self.own.pairing() else { return };
        let peer = match pairing.state {
            PairingState::Paired => pairing.peer_handles,
            PairingState::PeerGone => None,
            PairingState::Waiting | PairingState::Unregistered => return,
        };
        if Instant::now() < *self.set_up_again_at.lock().unwrap_or_else(|e| e.into_inner()) {
            return; // the peer's host was out of reach a moment ago
        }
        let mut used = self.peer_used.lock().unwrap_or_else(|e| e.into_inner());
        if peer.is_some() && peer == *used {
            return; // the objects of the stream that failed over: the peer renews its own
        }
        let Slot::Waiting(exports) = std::mem::replace(slot, Slot::Kernel) else { return };
        let Some(peer) = peer else {
            if pairing.state == PairingState::Paired {
                let why = "the peer's process exported no stream objects";
                reasons::note_with(Reason::RemoteNoStream, Some(&self.key), why);
            }
            return;
        };
        let used_before = used.replace(peer);
        drop(used);
        *slot = Slot::Connecting;
        let me = self.clone();
        let spawned = lanes::platform::threads::spawn("lanes-stream-setup", move || {
            let connected = connect_with_retries(exports, peer).map_err(|failed| *failed);
            let mut slot = me.slot();
            // Given up or closed meanwhile: what was connected is dropped.
            if matches!(*slot, Slot::Connecting) {
                match connected {
                    Ok(p) => *slot = Slot::Ready(p),
                    Err((e, exports)) if out_of_reach_for_now(&e) => {
                        // The peer's host is out of reach for now: the connection waits, and a
                        // call after a pause (or a new pairing once the host is back) tries
                        // again.
                        *slot = Slot::Waiting(exports);
                        *me.peer_used.lock().unwrap_or_else(|e| e.into_inner()) = used_before;
                        *me.set_up_again_at.lock().unwrap_or_else(|e| e.into_inner()) =
                            Instant::now() + SET_UP_AGAIN_AFTER;
                    }
                    Err((e, exports)) => me.set_up_failed(&mut slot, e, Some(exports)),
                }
            }
        });
        if let Err(e) = spawned {
            *slot = Slot::Kernel;
            reasons::note_with(Reason::RemoteNoStream, Some(&self.key), &format!("no set-up thread: {e}"));
        }
    }

    /// The stream if it is live (no set-up).
    fn live(&self) -> Option<Arc<FabricStream>> {
        match &*self.slot() {
            Slot::Live(s, _) => Some(s.clone()),
            _ => None,
        }
    }

    /// Writes the stream's byte counts into the record, for `lanes status`: bytes by
    /// fabric, and by kernel (what the kernel carried before the stream, and beside it).
    pub fn publish_counts(&self) {
        if let Slot::Live(s, history) = &*self.slot() {
            self.publish(s, history);
        }
    }

    fn publish(&self, s: &FabricStream, history: &KernelHistory) {
        let c = s.counts();
        let e = &self.earlier;
        let (ring, kernel) = self.own.tx_counts();
        ring.store(e.sent_fabric.load(Ordering::Relaxed) + c.sent_fabric, Ordering::Relaxed);
        kernel.store(history.written + c.sent_kernel, Ordering::Relaxed);
        self.own.rx_consumed().store(e.received_fabric.load(Ordering::Relaxed) + c.received_fabric, Ordering::Relaxed);
        self.own.rx_kernel_read().store(history.read + c.received_kernel, Ordering::Relaxed);
        self.own.failovers().store(e.failovers.load(Ordering::Relaxed) + c.failovers, Ordering::Relaxed);
        self.own.fall_forwards().store(e.starts.load(Ordering::Relaxed).saturating_sub(1), Ordering::Relaxed);
    }

    /// Gives the connection back to the kernel for good: a live stream's rest is read
    /// first; one not set up yet never is.
    fn give_up(&self) {
        let mut slot = self.slot();
        match &*slot {
            Slot::Live(s, _) => {
                let _ = s.give_up();
            }
            _ => {
                let before = std::mem::replace(&mut *slot, Slot::Kernel);
                drop(slot);
                drop(before); // (a stream that failed over waits for its service thread)
            }
        }
    }
}

/// Whether a set-up failed because the peer's host is out of reach for now (lost,
/// suspected, not heard from yet): worth trying again once it is back.
fn out_of_reach_for_now(e: &lanes::Error) -> bool {
    matches!(
        e,
        lanes::Error::SegmentLost { .. } | lanes::Error::InterruptLost { .. } | lanes::Error::NodeUnreachable { .. }
    )
}

/// Connects `exports` to the peer's objects, within [`STREAM_SET_UP`]. The pairing comes
/// through the daemons, which may learn that the peer's host is back before this process's
/// fabric does (a host it still calls lost refuses at once): such a refusal is tried again.
/// A failure gives the exports back with the error.
fn connect_with_retries(
    exports: StreamExports,
    peer: StreamHandles,
) -> Result<PendingStream, Box<(lanes::Error, StreamExports)>> {
    let started = Instant::now();
    let mut exports = exports;
    loop {
        let left = STREAM_SET_UP.saturating_sub(started.elapsed());
        match PendingStream::try_connect(exports, peer, left).map_err(|back| *back) {
            Ok(p) => return Ok(p),
            Err((e, back)) if out_of_reach_for_now(&e) && started.elapsed() + LOST_RETRY < STREAM_SET_UP => {
                exports = back;
                std::thread::sleep(LOST_RETRY);
            }
            Err(failed) => return Err(Box::new(failed)),
        }
    }
}

/// Whether this stream start is to fail as if the peer's host had gone out of reach at
/// that moment: `LANES_SOCKETS_FAIL_SET_UPS=n` fails the process's first n starts (a
/// diagnostic: the tests of [`RemoteConn::set_up_failed`] cannot time a link cut between
/// a pairing and a start).
fn failing_on_purpose() -> bool {
    static LEFT: OnceLock<AtomicU32> = OnceLock::new();
    let left = LEFT.get_or_init(|| {
        let n = std::env::var("LANES_SOCKETS_FAIL_SET_UPS").ok().and_then(|v| v.parse().ok());
        AtomicU32::new(n.unwrap_or(0))
    });
    left.load(Ordering::Relaxed) > 0
        && left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
}

/// Set-ups that may fail in a row before a connection stays kernel TCP for good.
const MAX_FAILED_SET_UPS: u32 = 8;
/// The pause before a set-up refused for a lost host is tried again.
const LOST_RETRY: Duration = Duration::from_millis(200);
/// After a set-up that found the peer's host out of reach throughout, no new one for this
/// long.
const SET_UP_AGAIN_AFTER: Duration = Duration::from_secs(1);
/// How often an accepted candidate that another process holds too looks again whether it
/// is the only holder now ([`RemoteConn::register_first`]).
const SHARED_LOOK_AGAIN: Duration = Duration::from_millis(20);

/// This process's fabric (or why it has none), opened at its first candidate; a forked
/// child opens its own (the parent's threads and endpoint are not the child's).
fn fabric() -> Result<Fabric, String> {
    type Opened = (u32, Result<Fabric, String>);
    static FABRIC: Mutex<Option<Opened>> = Mutex::new(None);
    let me = std::process::id();
    let mut g = FABRIC.lock().unwrap_or_else(|e| e.into_inner());
    match g.take() {
        Some((pid, opened)) if pid == me => {
            let answer = opened.clone();
            *g = Some((pid, opened));
            return answer;
        }
        // The parent's: never dropped here (that would close the parent's objects).
        Some(parents) => std::mem::forget(parents),
        None => {}
    }
    let opened = config()
        .fabric
        .clone()
        .and_then(|f| Fabric::open_with(f).map_err(|e| e.to_string()))
        .map_err(|e| format!("opening the fabric: {e}"));
    *g = Some((me, opened.clone()));
    opened
}

/// The objects of a stream for a new candidate.
fn exports() -> Result<StreamExports, String> {
    StreamExports::create(&fabric()?, DEFAULT_RING_BYTES).map_err(|e| format!("exporting the stream's objects: {e}"))
}

/// The live stream of candidate `fd`, set up at the first call that moves bytes after the
/// pairing; None: the C library's call serves (not a candidate, not paired yet, kernel TCP
/// for good).
pub fn stream(fd: i32) -> Option<(Arc<RemoteConn>, Arc<FabricStream>)> {
    if crate::sandbox::filtered() {
        return None;
    }
    let c = get(fd)?;
    let s = c.stream(fd)?;
    Some((c, s))
}

/// Which way a program's call that moves bytes on candidate `fd` goes: its live stream
/// (set up at the first such call after the pairing, when no other call is inside the
/// kernel), or the C library's call, counted until the returned [`Route`] is dropped. None:
/// not a candidate (or the kernel's for good under a seccomp filter).
pub fn route(fd: i32) -> Option<Route> {
    if crate::sandbox::filtered() {
        return None;
    }
    Some(get(fd)?.route(fd))
}

/// The stream of `fd` if it is live already (readiness; no set-up).
pub fn live_stream(fd: i32) -> Option<Arc<FabricStream>> {
    if crate::sandbox::filtered() {
        return None;
    }
    get(fd)?.live()
}

/// Candidate `fd` was added to an epoll set: an accepted one not registered yet registers
/// now (if this process is its only holder), so that its pairing goes on while the program
/// waits for the peer's first bytes rather than after it read them.
pub fn added_to_a_set(fd: i32) {
    if crate::sandbox::filtered() {
        return;
    }
    let Some(c) = get(fd) else { return };
    let mut slot = c.slot();
    if matches!(*slot, Slot::Unregistered) {
        c.register_first(&mut slot);
    }
}

/// Gives candidate `fd`'s connection back to the kernel for good (see `RemoteConn::give_up`).
pub fn give_up(fd: i32) {
    if let Some(c) = get(fd) {
        c.give_up();
    }
}

/// Every candidate of this process now (none if the table is being changed: the callers
/// run before a fork, an exec or a sandbox, where waiting for a lock could deadlock).
fn all() -> Vec<Arc<RemoteConn>> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    match table().try_read() {
        Ok(t) => t.values().cloned().collect(),
        Err(_) => Vec::new(),
    }
}

/// Before a fork: every candidate's connection goes back to the kernel (two processes
/// cannot share a fabric stream, nor the objects exported for one), except those not
/// registered yet, which the process that ends up their only holder registers.
pub fn before_fork() {
    for c in all() {
        if matches!(*c.slot(), Slot::Unregistered) {
            continue;
        }
        c.give_up();
    }
}

static TABLE: OnceLock<RwLock<HashMap<i32, Arc<RemoteConn>>>> = OnceLock::new();
/// Entries in the table: zero lets close skip the lock (fds past `conn`'s table of maybes).
static COUNT: AtomicUsize = AtomicUsize::new(0);

fn table() -> &'static RwLock<HashMap<i32, Arc<RemoteConn>>> {
    TABLE.get_or_init(|| RwLock::new(HashMap::new()))
}

/// The table, held across a fork ([`crate::fork_locks`]).
pub fn hold_for_fork(by: Option<std::time::Instant>) -> Option<crate::fork_locks::Held> {
    crate::fork_locks::write_by(table(), by).map(|g| Box::new(g) as crate::fork_locks::Held)
}

fn insert(fd: i32, c: Arc<RemoteConn>) {
    if let Ok(mut t) = table().write() {
        if t.insert(fd, c).is_none() {
            COUNT.fetch_add(1, Ordering::Relaxed);
        }
        crate::conn::mark_remote(fd);
    }
}

/// The candidate behind `fd`, if any.
fn get(fd: i32) -> Option<Arc<RemoteConn>> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return None;
    }
    table().read().ok()?.get(&fd).cloned()
}

/// Whether `fd` is a cross-host candidate of this process.
pub fn knows(fd: i32) -> bool {
    get(fd).is_some()
}

/// Whether this process holds any cross-host candidate (no lock, no allocation).
pub fn any() -> bool {
    COUNT.load(Ordering::Relaxed) > 0
}

/// Every candidate fd of this process.
pub fn fds() -> Vec<i32> {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return Vec::new();
    }
    table().read().map(|t| t.keys().copied().collect()).unwrap_or_default()
}

/// The daemon's answers: per address, its host (None: nobody's) and when it was asked.
type Answers = HashMap<IpAddr, (Option<String>, Instant)>;
static ANSWERS: Mutex<Option<Answers>> = Mutex::new(None);
/// Until then (ns on the monotonic clock since the first call), no request to the daemon.
static QUIET_UNTIL: AtomicU64 = AtomicU64::new(0);

fn clock() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

fn daemon_quiet() -> bool {
    clock() < QUIET_UNTIL.load(Ordering::Relaxed)
}

/// A request timed out or the daemon is busy: leave it alone for a while.
fn back_off() {
    QUIET_UNTIL.store(clock() + BACK_OFF.as_nanos() as u64, Ordering::Relaxed);
}

/// Which other host of the cluster `ip` is on, as the daemon says (cached).
fn host_by_daemon(ip: IpAddr) -> Option<String> {
    let now = Instant::now();
    if let Ok(g) = ANSWERS.lock() {
        match g.as_ref().and_then(|m| m.get(&ip)) {
            Some((Some(h), _)) => return Some(h.clone()),
            Some((None, at)) if now.saturating_duration_since(*at) < NOBODY_FOR => return None,
            _ => {}
        }
    }
    if daemon_quiet() {
        return None;
    }
    let answer = match client::host_of(&config().fabric_dir, ip, CALL) {
        Ok(AddressOwner::Host { host }) => Some(host),
        Ok(_) => None,
        Err(e) => {
            if matches!(e, lanes::cluster::Error::Timeout { .. }) {
                back_off();
            }
            None
        }
    };
    if let Ok(mut g) = ANSWERS.lock() {
        let m = g.get_or_insert_with(HashMap::new);
        if m.len() >= MAX_ANSWERS {
            m.retain(|_, (h, _)| h.is_some());
            if m.len() >= MAX_ANSWERS {
                m.clear();
            }
        }
        m.insert(ip, (answer.clone(), now));
    }
    answer
}

/// A TCP socket `fd` connected between `key.local` and `key.remote`, the peer on another
/// host (not loopback, not this host's address), allowed by the port lists: pair it if the
/// peer is on another host of the cluster (module documentation). A connecting end
/// registers now; an accepted one at its first call that moves bytes ([`Slot::Unregistered`]).
/// Every failure leaves the socket as it is: kernel TCP.
pub fn on_connected(fd: i32, key: ConnectionKey, opened: Opened) {
    let cfg = config();
    let Some(remote) = &cfg.remote else { return };
    let configured = remote.hosts.iter().find(|(ip, _)| *ip == key.remote.ip()).map(|(_, h)| h.clone());
    if let Err(why) = &remote.decided {
        // Off: nothing asked of the daemon; only a peer lanes.toml places is known to be
        // a cluster host's, and counted.
        if configured.is_some() {
            reasons::note_with(Reason::RemoteOff, Some(&key), why);
        }
        return;
    }
    // Under a seccomp filter the library makes no system call of its own.
    if crate::sandbox::filtered() {
        return;
    }
    let Some(host) = configured.or_else(|| host_by_daemon(key.remote.ip())) else { return };
    if reasons::check_uid(&key).is_none() {
        return;
    }
    let Some(cookie) = crate::sock_diag::own_cookie(fd) else { return };
    let own = match Endpoint::create(&cfg.fabric_dir, &key, cookie, MIN_RING_BYTES) {
        Ok(own) => own,
        Err(why) => return record_failed(&why, &key),
    };
    // Marked before the daemon hears of it, so that what it finds is a cross-host record.
    own.set_pairing(&Pairing {
        state: PairingState::Unregistered,
        peer_host: host.clone(),
        generation: 0,
        peer_cookie: 0,
        peer_handles: None,
    });
    own.set_flags(FLAG_REMOTE);
    // Nothing was written yet: what the kernel counts as acked is its SYN's, if ours.
    let syn = syn_acked(fd).unwrap_or(0);
    // A low-water mark or a kernel-only feature the socket has already (inherited from
    // its listener, or set before connect) is the kernel queue's: no stream.
    let lowat = crate::stream::kernel_lowat(fd).is_some_and(|l| l > 1);
    let kernel_only = lowat || crate::stream::inherited_kernel_features(fd);
    if opened == Opened::Accepted && !kernel_only {
        insert(fd, Arc::new(RemoteConn::new(own, key, host, Slot::Unregistered, syn, false)));
        return;
    }
    let (slot, handles) = match exports() {
        _ if kernel_only => {
            reasons::note(Reason::KernelFeature, Some(&key));
            (Slot::Kernel, None)
        }
        Ok(e) => {
            let h = e.handles();
            own.set_own_handles(h);
            (Slot::Waiting(e), Some(h))
        }
        Err(why) => {
            reasons::note_with(Reason::RemoteNoStream, Some(&key), &why);
            (Slot::Kernel, None)
        }
    };
    let c = Arc::new(RemoteConn::new(own, key, host, slot, syn, false));
    if register(&c, cookie, handles) {
        insert(fd, c);
    }
}

/// Registers `c`'s half with the daemon; false if the daemon refused it (the record is
/// then gone).
fn register(c: &RemoteConn, cookie: u64, handles: Option<StreamHandles>) -> bool {
    let key = &c.key;
    if daemon_quiet() {
        reasons::note_with(Reason::NoDaemon, Some(key), "the daemon did not answer lately");
        return true;
    }
    let Ok(me) = this_process() else { return true };
    let half = HalfRegistration {
        local: key.local,
        remote: key.remote,
        cookie,
        netns: key.netns,
        process: me.bits(),
        handles,
    };
    match client::register_half(&config().fabric_dir, &half, CALL) {
        Ok(_) => {
            c.registered.store(true, Ordering::Relaxed);
            true
        }
        Err(lanes::cluster::Error::Refused(r)) => {
            reasons::note_with(Reason::RegistrationRefused, Some(key), &r.to_string());
            c.own.unlink();
            false
        }
        Err(e @ lanes::cluster::Error::NoDaemon { .. }) => {
            // The record stays: a daemon that starts takes it over.
            reasons::note_with(Reason::NoDaemon, Some(key), &e.to_string());
            true
        }
        Err(e) => {
            if matches!(e, lanes::cluster::Error::Timeout { .. }) {
                back_off();
            }
            reasons::note_with(Reason::NoDaemon, Some(key), &e.to_string());
            true
        }
    }
}

/// `fd` was closed: if it was this process's last reference to a candidate and no other
/// process holds it, withdraw the half and remove the record.
pub fn forget(fd: i32) {
    forget_as(fd, false);
}

/// As [`forget`] for a descriptor that was closed where the library could not see it and
/// whose number now names another file (see `conn::forget_stale`): nothing is done on
/// `fd` (no reset, no record on it: a live stream's anchor is taken away first).
pub fn forget_stale(fd: i32) {
    if let Some(s) = get(fd).and_then(|c| c.live()) {
        s.set_anchor(-1);
    }
    forget_as(fd, true);
}

fn forget_as(fd: i32, stale: bool) {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let removed = match table().write() {
        Ok(mut t) => {
            let c = t.remove(&fd);
            if c.is_some() {
                COUNT.fetch_sub(1, Ordering::Relaxed);
            }
            let other = c.as_ref().and_then(|c| t.iter().find(|(_, o)| Arc::ptr_eq(o, c)).map(|(fd, _)| *fd));
            if let (Some(c), Some(other)) = (&c, other) {
                // A duplicate stays open: the stream uses it from now on.
                if let Some(s) = c.live() {
                    s.set_anchor(other);
                }
            }
            c.filter(|_| other.is_none())
        }
        Err(_) => None,
    };
    let Some(c) = removed else { return };
    // Before the kernel's close: the peer reads every ring byte before the kernel's end.
    let slot = std::mem::replace(&mut *c.slot(), Slot::Kernel);
    if let Slot::Live(s, history) = slot {
        c.publish(&s, &history);
        if crate::sandbox::filtered() {
            // Given up before the filter: closing it would take system calls of ours.
            std::mem::forget(s);
            return;
        }
        if !stale && s.readable_without_kernel() && !s.kernel_only() {
            // Closing with unread data resets a TCP connection; ring bytes are unread data.
            reset_on_close(fd);
        }
        s.close();
    }
    let others = match this_process() {
        Ok(me) => c.own.remove_holder(me),
        Err(_) => c.own.holders().len(),
    };
    if others == 0 {
        release(&c);
    }
}

/// Makes the kernel's close of `fd` send a reset (`SO_LINGER` with no time).
pub fn reset_on_close(fd: i32) {
    let lin = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: a valid linger structure, passed with its size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&lin as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
}

/// The last holder closed the socket.
fn release(c: &RemoteConn) {
    let pairing = c.own.pairing();
    let never = pairing.as_ref().is_some_and(|p| p.state == PairingState::Waiting && p.generation == 0);
    if never {
        let detail = format!(
            "the peer on host {} never paired: it runs without the library, as another user, or its daemon never \
             vouched for it",
            c.host
        );
        reasons::note_with(Reason::RemotePeerNeverPaired, Some(&c.key), &detail);
    }
    let held = c.registered.load(Ordering::Relaxed) || pairing.is_some_and(|p| p.state != PairingState::Unregistered);
    let (fabric_sent, _) = c.own.tx_counts();
    let fabric = (fabric_sent.load(Ordering::Relaxed), c.own.rx_consumed().load(Ordering::Relaxed));
    c.own.unlink();
    // Under a seccomp filter the library makes no system call of its own (a socket to the
    // daemon and a send could be what kills the program): the daemon's sweep withdraws
    // halves whose socket is gone within a second.
    if held && !daemon_quiet() && !crate::sandbox::filtered() {
        // A failure is no harm: the daemon withdraws halves whose socket is gone.
        let k = &c.key;
        if let Err(lanes::cluster::Error::Timeout { .. }) =
            client::withdraw_half(&config().fabric_dir, k.local, k.remote, c.own.cookie(), fabric, CALL)
        {
            back_off();
        }
    }
}

/// `newfd` now refers to the same socket as `oldfd`; false if `oldfd` is no candidate.
pub fn duplicated(oldfd: i32, newfd: i32) -> bool {
    let Some(c) = get(oldfd) else { return false };
    insert(newfd, c);
    true
}

/// In the parent, as `fork` returned `child`: the child holds every candidate too.
pub fn adopt_for_child(child: ProcessIdentity) {
    for fd in fds() {
        if let Some(c) = get(fd) {
            c.own.add_holder(child);
        }
    }
}

/// In a forked child: the streams (given up before the fork) and the objects exported for
/// them are the parent's: this process leaves them alone (never drops them: that would
/// remove the parent's objects and join threads that do not exist here), and its calls on
/// those connections are the kernel's. A candidate not registered yet stays so (nothing of
/// it is the parent's): this child registers it once it is the only holder. One whose lock
/// a thread of the parent held at the fork is no candidate here (its lock stays held).
pub fn after_fork_in_child() {
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let Ok(t) = table().try_read() else { return };
    let mut locked = Vec::new();
    for (fd, c) in t.iter() {
        let Ok(mut slot) = c.slot.try_lock() else {
            locked.push(*fd);
            continue;
        };
        match &*slot {
            Slot::Unregistered => {
                // Calls of the parent's other threads under way at the fork never end here.
                c.calls.store(0, Ordering::Relaxed);
                continue;
            }
            Slot::Live(s, _) | Slot::Renewing(Replaced::Stream(s)) => s.abandon(),
            _ => {}
        }
        std::mem::forget(std::mem::replace(&mut *slot, Slot::Kernel));
    }
    drop(t);
    if locked.is_empty() {
        return;
    }
    let Ok(mut t) = table().try_write() else { return };
    for fd in locked {
        if let Some(c) = t.remove(&fd) {
            COUNT.fetch_sub(1, Ordering::Relaxed);
            std::mem::forget(c);
        }
    }
}

/// Before an exec (not in a vfork child, which runs in its parent's memory): every
/// connection goes back to the kernel, whose image the new one is. Ring bytes left unread
/// cannot reach the new image: such a connection is reset at both ends (`ECONNRESET`),
/// never silently short.
pub fn before_exec() {
    let vforked = this_process().map_or(true, |me| me.pid() != std::process::id());
    if !vforked {
        give_up_for_good("an exec", Reason::ExecWithoutLibrary);
    }
}

/// Before the program installs a seccomp filter (or prepares for one): as before an exec,
/// since reading a ring needs system calls of the library's own.
pub fn before_sandbox() {
    give_up_for_good("a seccomp filter", Reason::Sandbox);
}

/// When the program sets up an io_uring, whose receives would read the kernel socket past
/// what the fabric stream holds (see `io_uring`): as before an exec.
pub fn before_io_uring() {
    give_up_for_good("an io_uring's set-up", Reason::IoUring);
}

/// Every connection back to the kernel for good; one whose ring holds bytes nobody can
/// read after `what` is reset at both ends.
fn give_up_for_good(what: &str, reason: Reason) {
    for c in all() {
        c.give_up();
        if let Some(s) = c.live() {
            if !s.kernel_only() {
                s.reset();
                let why = format!("bytes from another host waited in the fabric stream at {what}: reset");
                reasons::note_with(reason, Some(&c.key), &why);
            }
        }
    }
}

/// In a forked child: this process holds every candidate it inherited.
pub fn adopt_after_fork(me: ProcessIdentity) {
    // try_read: a thread of the parent may have held the lock at fork.
    if COUNT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let Ok(t) = table().try_read() else { return };
    for c in t.values() {
        c.own.add_holder(me);
    }
}

/// An inherited fd whose record (`own`, its cookie checked) is a cross-host one: the new
/// image takes it over.
pub fn adopt_inherited(fd: i32, own: Endpoint, key: ConnectionKey) {
    if let Ok(me) = this_process() {
        own.add_holder(me);
    }
    let host = own.pairing().map(|p| p.peer_host).unwrap_or_default();
    // The image before the exec gave the connection up (its stream's objects were its own):
    // kernel TCP for good.
    insert(fd, Arc::new(RemoteConn::new(own, key, host, Slot::Kernel, 0, true)));
}
