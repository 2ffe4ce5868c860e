//! One TCP connection's bytes over the fabric between hosts: the ring across hosts of
//! docs/design/cross-host-sockets.md, sections 3 and 4, over the fabric API (segments,
//! maps and interrupts), beside the connection's kernel socket (the *anchor*).
//!
//! Each end exports one *inbound* segment, which only its peer writes:
//!
//! | offset | contents (written by the peer, over the fabric) |
//! |---|---|
//! | 0 | ready: the peer's set-up is complete, it serves requests and answers them |
//! | 64 | `R`: ring bytes the peer published into this end's ring (a full 64-bit count) |
//! | 128 | the peer's answer to this end's last request as a receiver |
//! | 192 | the peer's request to this end as the sender of the other direction |
//! | 256 | `H`: ring bytes the peer consumed of this end's sending direction |
//! | 320 | the peer's sender finished cleanly (shutdown or close) at `R` |
//! | 384 | the peer reads nothing more (its receiving side is closed) |
//! | 448 | the peer, reading this end's bytes from the kernel, would take the ring back: a sequence number (high half) and `KR` (low) |
//! | 512 | the key of the peer's fail-over records (random, per stream) |
//! | 4096 | the ring of the direction peer → this end |
//!
//! So per direction the ring lives on the receiver's host, written by the sender with
//! ordered RMA writes (bytes, then `R`), and the direction's state word
//! ([`super::direction`]) stays in the sender's process, where only local compare-and-swaps
//! change it. The receiver cannot CAS it: it *asks* (a [`Request`] with a sequence number,
//! written into the sender's inbound segment, and the sender's request doorbell rung), and
//! the sender (its service thread, or a sending thread at its next send) carries the
//! request out with a local CAS and answers with an [`Answer`] naming the request (written
//! into the receiver's inbound segment, the receiver's answer doorbell rung):
//!
//! - **kernel**: the receiver found its ring empty and will sleep in the kernel. The
//!   sender switches to kernel mode and answers with `R` at the switch: the receiver reads
//!   its ring up to that count (waiting for writes still in flight to land), then only the
//!   anchor. A sleeper has the anchor to wake it, so no wake-up is lost;
//! - **ring**: the receiver is caught up (every kernel byte read, `KR`; nothing readable in
//!   the kernel) and would take the ring back. The sender switches back to ring mode only
//!   if it reserved exactly `KR` kernel bytes (none of its bytes is in the kernel), else it
//!   refuses. A receiver reading a steady kernel stream is never caught up; every 1 MiB
//!   it reads from the kernel (more after ring stints that delivered less) it says it
//!   wants the ring (a word, no answer, with its `KR`, which it updates every 64 KiB read
//!   after that until it has the ring), and the sender holds its kernel sends back while
//!   the receiver's `KR` moves, so that the receiver can catch up, however much the
//!   kernels buffer.
//!
//! The one-host rules hold unchanged: only the receiver switches a direction to the ring,
//! the receiver reads ring bytes before kernel bytes, and a sender never sends through the
//! kernel while its word says ring. A direction starts in kernel mode; a receiver asks for
//! the ring only once its peer wrote *ready*, so an end whose set-up failed is never asked
//! and every byte stays on the anchor.
//!
//! **Fail-over.** When the fabric to the peer fails (a write or a checked flush fails, the
//! fabric suspects or loses the peer's host while the anchor stands, an answer or announced
//! ring bytes do not come within [`FABRIC_BOUND`]), both directions go on over the anchor
//! alone, byte-exact, for the rest of the connection:
//!
//! - a sender sends kernel bytes after ring bytes only once a checked flush proved those
//!   landed; so a receiver that reads the anchor after its ring never misses a ring byte,
//!   except where the sender failed over;
//! - a sender that fails over with ring bytes published (or the ring granted) since its
//!   last kernel send puts a *record* into the anchor before anything else: a header
//!   (magic, the sender's random key, the ring count `H` the receiver last told, a length)
//!   and the ring bytes from `H` to its `R`, kept in the sender's copy of the ring;
//! - a receiver looks for a record at the first kernel bytes after each ring stint (a
//!   peek), and when it fails over itself, reads the ring's landed bytes and then the
//!   anchor: a record (its bytes up to what the ring gave are dropped), or program bytes
//!   (the sender proved its ring bytes landed before those), or the peer's end with
//!   neither a record nor its finish, which is a reset: a killed peer's last ring bytes
//!   may never have landed, and that is never a silent loss.
//!
//! A record never reaches the program, and program bytes are never taken for one (the key).
//! Kernel counts that see the anchor's bytes (`TCP_INFO`, `FIONREAD` while a record
//! waits) count a record's header and its bytes. A connection stays on its anchor after a
//! fail-over (fall-forward is not built), and a failure only one end sees (its writes fail,
//! the peer's land) waits until the peer sees it too.
//!
//! A peer process that disappears (killed) ends its anchor too: the receiver reads the
//! landed ring bytes and then `ECONNRESET`, as above.
//!
//! The socket library (`lanes-sockets`) sets a stream up beside a program's connection in
//! two steps ([`PendingStream::connect`], slow, then [`PendingStream::start`] with the
//! kernel's counts so far, [`kernel_history`]) and makes the program's calls through it
//! ([`FabricStream::send_with`], [`FabricStream::recv_with`], blocking or not, readiness
//! with [`FabricStream::prepare_to_wait`]); what it does not do itself goes back to the
//! kernel for good ([`FabricStream::give_up`]). A receiver's ring stint that delivered less
//! than 64 KiB, and a refused ring request, make it ask for the ring less often (up to once
//! per 64 sleeps): each request is a fabric round trip.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::direction::{DirectionWord, MAX_RING_BYTES};
use crate::error::{Error, Result};
use crate::fabric::{
    Fabric, LocalInterrupt, LocalSegment, Map, MapAccess, ProgressDriver, RemoteInterrupt, RemoteSegment, RemoteState,
    Timeout,
};

/// Where the ring starts in an inbound segment.
pub const HEADER_BYTES: usize = 4096;
/// The smallest ring.
pub const MIN_RING: usize = 4096;

const OFF_READY: usize = 0;
const OFF_PUBLISHED: usize = 64;
const OFF_ANSWER: usize = 128;
const OFF_REQUEST: usize = 192;
const OFF_CONSUMED: usize = 256;
const OFF_TX_FINISHED: usize = 320;
const OFF_RX_CLOSED: usize = 384;
const OFF_RING_WANTED: usize = 448;
const OFF_RECORD_KEY: usize = 512;

const READY_MAGIC: u64 = u64::from_le_bytes(*b"LNFSRDY1");
/// The first word of a fail-over record on the anchor (see the module's notes).
const RECORD_MAGIC: u64 = u64::from_le_bytes(*b"LNFSFOV1");
/// A fail-over record's header: magic, the sender's key, the ring count its bytes start
/// at, their number.
const RECORD_HEADER: usize = 32;
/// No ring granted since the last kernel send.
const NO_GRANT: u64 = u64::MAX;
const FINISHED_BIT: u64 = 1 << 63;
const COUNT_MASK: u64 = (1 << 28) - 1;
const KIND_RING: u64 = 1 << 31;
const ACCEPTED: u64 = 1 << 31;

/// How long a receiver that found its ring empty spins (driving the fabric's progress)
/// before it asks for kernel mode.
const RECEIVE_SPIN: Duration = Duration::from_micros(100);
/// How long a sender waiting for ring room spins before it sleeps in short steps.
const ROOM_SPIN: Duration = Duration::from_micros(100);
/// Each step of a wait that sleeps (ring room, an answer, landed bytes).
const WAIT_STEP: Duration = Duration::from_millis(1);
/// A sender whose receiver wants the ring back holds its kernel sends back until the
/// receiver, caught up, took it, or the receiver's reading stalled for this long, or ...
const RING_WANTED_STALL: Duration = Duration::from_millis(20);
/// ... this long in all: the kernels' buffers (megabytes) read at tens of MB/s.
const RING_WANTED_PAUSE: Duration = Duration::from_millis(500);
/// The bound on waiting for an answer or for announced ring bytes to land while the peer's
/// process lives: past it the fabric is taken as failed (a reset, see the module's notes).
const FABRIC_BOUND: Duration = Duration::from_secs(20);
/// Ring bytes unread for this long make an idle sender check that they landed.
const STALL_CHECK: Duration = Duration::from_millis(200);
/// What a stint in ring mode must deliver to have paid for the two requests (the ring, then
/// kernel mode) it cost: less (a request/response load's message or two) and the receiver
/// asks for the ring less often.
const RING_PAYS: u64 = 64 * 1024;
/// Ring bytes a receiver consumes before it tells the sender, within one receive call.
const CONSUMED_BATCH: u64 = 64 * 1024;
/// Kernel bytes a receiver reads between two "ring wanted" words, at first; each stint
/// in the ring that ends with less than this delivered doubles it, up to the largest.
const RING_WANTED_EVERY: u64 = 1 << 20;
const RING_WANTED_EVERY_MAX: u64 = 64 << 20;

/// What a receiver asks of its peer's sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request {
    /// Switch to kernel mode: the receiver will sleep in the kernel.
    Kernel { seq: u32 },
    /// Switch back to ring mode if exactly `kernel_read` kernel bytes were reserved.
    Ring { seq: u32, kernel_read: u64 },
}

impl Request {
    /// The word written into the sender's inbound segment (0 is no request).
    pub fn encode(self) -> u64 {
        match self {
            Request::Kernel { seq } => u64::from(seq) << 32,
            Request::Ring { seq, kernel_read } => u64::from(seq) << 32 | KIND_RING | (kernel_read & COUNT_MASK),
        }
    }

    /// The request a word holds; None for 0 (none yet) or sequence 0.
    pub fn decode(word: u64) -> Option<Request> {
        let seq = (word >> 32) as u32;
        if seq == 0 {
            return None;
        }
        Some(if word & KIND_RING != 0 {
            Request::Ring { seq, kernel_read: word & COUNT_MASK }
        } else {
            Request::Kernel { seq }
        })
    }

    fn is_ring(self) -> bool {
        matches!(self, Request::Ring { .. })
    }

    /// The request's sequence number.
    pub fn seq(self) -> u32 {
        match self {
            Request::Kernel { seq } | Request::Ring { seq, .. } => seq,
        }
    }
}

/// The sender's answer to a [`Request`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The request answered.
    pub seq: u32,
    /// Whether the direction is now in the mode asked for.
    pub accepted: bool,
    /// For kernel mode: `R` at the switch (ring bytes published, modulo 2^28); for the
    /// ring: `K` (kernel bytes reserved, modulo 2^28).
    pub count: u64,
}

impl Answer {
    /// The word written into the receiver's inbound segment.
    pub fn encode(self) -> u64 {
        u64::from(self.seq) << 32 | if self.accepted { ACCEPTED } else { 0 } | (self.count & COUNT_MASK)
    }

    /// The answer a word holds; None for sequence 0 (no answer yet).
    pub fn decode(word: u64) -> Option<Answer> {
        let seq = (word >> 32) as u32;
        (seq != 0).then_some(Answer { seq, accepted: word & ACCEPTED != 0, count: word & COUNT_MASK })
    }
}

/// Carries out a receiver's request on the sender's state word, with local CASes only
/// (the sans-IO heart of the sender's side). `sender_finished`: the sender will send
/// nothing more, so the ring is not taken back.
pub fn carry_out(word: &DirectionWord<'_>, request: Request, sender_finished: bool) -> Answer {
    match request {
        Request::Kernel { seq } => {
            word.to_kernel_mode();
            // The word is in kernel mode from here on (only a ring request, which comes
            // from this same receiver after this answer, brings it back): its R is final
            // for the ring segment the receiver must read first.
            Answer { seq, accepted: true, count: word.load().published() }
        }
        Request::Ring { seq, kernel_read } => {
            // The receiver asks only with its ring read up to the R of the last kernel
            // switch, and nothing was published since (kernel mode): consumed == R.
            let published = word.load().published();
            let accepted = !sender_finished && word.try_ring_mode(published, kernel_read, || true);
            Answer { seq, accepted, count: word.load().kernel_reserved() }
        }
    }
}

/// The ids a peer needs to reach one end's objects: the node they belong to, the inbound
/// segment (header and ring), the doorbell the peer rings after writing a request and the
/// one it rings after writing an answer. The daemons carry them in their pairing.
pub use crate::cluster::proto::StreamHandles;

/// One end's exported objects, made before the peer's handles are known.
pub struct StreamExports {
    fabric: Fabric,
    segment: LocalSegment,
    inbound: Map,
    request_bell: LocalInterrupt,
    answer_bell: LocalInterrupt,
    ring_bytes: usize,
}

impl StreamExports {
    /// Exports an inbound segment with a ring of `ring_bytes` (a power of two, clamped
    /// between [`MIN_RING`] and the direction word's largest ring) and two doorbells.
    pub fn create(fabric: &Fabric, ring_bytes: usize) -> Result<StreamExports> {
        let ring_bytes = ring_bytes.clamp(MIN_RING, MAX_RING_BYTES).next_power_of_two();
        let segment = fabric.create_segment_auto_id((HEADER_BYTES + ring_bytes) as u64)?;
        segment.prepare()?;
        segment.set_available()?;
        let inbound = segment.map(0, (HEADER_BYTES + ring_bytes) as u64, MapAccess::ReadWrite)?;
        let request_bell = fabric.create_interrupt(None)?;
        let answer_bell = fabric.create_interrupt(None)?;
        Ok(StreamExports { fabric: fabric.clone(), segment, inbound, request_bell, answer_bell, ring_bytes })
    }

    /// What the peer connects to.
    pub fn handles(&self) -> StreamHandles {
        StreamHandles {
            node: self.segment.node_id(),
            segment: self.segment.id(),
            request_bell: self.request_bell.number(),
            answer_bell: self.answer_bell.number(),
        }
    }
}

impl Drop for StreamExports {
    fn drop(&mut self) {
        let _ = self.request_bell.remove();
        let _ = self.answer_bell.remove();
        let _ = self.segment.remove(true);
    }
}

/// How a program's call on the stream behaves (see [`FabricStream::send_with`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct CallMode {
    pub nonblocking: bool,
    pub kernel_flags: i32,
    /// How a blocking call learns that a signal handler ran on its thread since it started:
    /// a receive spins and waits in user space before its kernel sleep, so that sleep would
    /// not be interrupted by such a handler, and a send waits for ring room there. None:
    /// never asked.
    pub interrupts: Option<Interrupts>,
}

/// A call's look at the signal handlers run on its thread (kept by the socket library,
/// which runs the program's handlers): `ran(since, fd)` says whether one ran after the
/// count `since` that ends the blocking call on `fd` where it would sleep, as it would have
/// interrupted the kernel's (a send that waits for room fails with EINTR, and its caller
/// decides what the program's call returns).
#[derive(Clone, Copy, Debug)]
pub struct Interrupts {
    pub since: u64,
    pub ran: fn(since: u64, fd: RawFd) -> bool,
}

impl CallMode {
    /// Whether the call never waits (`O_NONBLOCK`, or `MSG_DONTWAIT` in its flags).
    fn never_waits(self) -> bool {
        self.nonblocking || self.kernel_flags & libc::MSG_DONTWAIT != 0
    }

    /// Whether a handler ran that ends this blocking call on `fd` before it sleeps.
    fn interrupted(self, fd: RawFd) -> bool {
        !self.never_waits() && self.interrupts.is_some_and(|i| (i.ran)(i.since, fd))
    }
}

/// Where an end's counts start (see [`FabricStream::connect_after`]).
struct Starts {
    ring: u64,
    written: u64,
    read: u64,
}

/// What one end of a connection wrote into its kernel socket and read from it so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelHistory {
    pub written: u64,
    pub read: u64,
}

/// The kernel's own counts of an established connection `fd` (`TCP_INFO`'s bytes acked
/// and received, less what its queues still hold): what this end's programs wrote and
/// read, whoever wrote it (a child, `sendfile`, an image before an exec). `syn_acked` is
/// what the kernel counted as acked before any byte was written: 1 for the end that
/// connected (its SYN), 0 for the end that accepted. None unless the connection is
/// established (no FIN sent or received, whose sequence numbers the counts include), or
/// if acks and segments kept arriving between every reading. The caller makes sure no
/// call of the program's moves bytes meanwhile.
pub fn kernel_history(fd: RawFd, syn_acked: u64) -> Option<KernelHistory> {
    // The queues' sizes are read apart from TCP_INFO: an ack that arrives in between
    // takes its bytes off the send queue after the acked count was read, and the sum
    // comes out short (a sender's K short of what its receiver reads lets that receiver
    // be granted the ring ahead of bytes still on their way). So the counts are read on
    // both sides of the queues, and taken only when they did not move.
    const TRIES: usize = 1000;
    let queue = |request: libc::Ioctl| {
        let mut n: libc::c_int = 0;
        // SAFETY: SIOCOUTQ and SIOCINQ write one int into `n`.
        (unsafe { libc::ioctl(fd, request, &mut n) } == 0 && n >= 0).then_some(n as u64)
    };
    for _ in 0..TRIES {
        let (acked, received) = tcp_counts(fd)?;
        let unsent = queue(libc::TIOCOUTQ)?;
        let unread = queue(libc::FIONREAD)?;
        if tcp_counts(fd)? != (acked, received) {
            continue;
        }
        let written = (acked + unsent).checked_sub(syn_acked)?;
        let read = received.checked_sub(unread)?;
        return Some(KernelHistory { written, read });
    }
    None
}

/// Whether `fd` is an established TCP connection (no FIN sent or received yet).
pub fn established(fd: RawFd) -> bool {
    tcp_counts(fd).is_some()
}

/// `TCP_INFO`'s bytes acked and bytes received of `fd`, if it is an established TCP
/// connection.
fn tcp_counts(fd: RawFd) -> Option<(u64, u64)> {
    const TCPI_BYTES_ACKED: usize = 120;
    const TCPI_BYTES_RECEIVED: usize = 128;
    // The first byte of `struct tcp_info` (tcpi_state) for an established connection.
    const TCP_ESTABLISHED: u8 = 1;
    let mut info = [0u8; 232];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: TCP_INFO writes at most `len` bytes into our buffer and its length into `len`.
    let r = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, info.as_mut_ptr().cast(), &mut len) };
    if r != 0 || (len as usize) < TCPI_BYTES_RECEIVED + 8 || info[0] != TCP_ESTABLISHED {
        return None;
    }
    let word = |at: usize| u64::from_ne_bytes(info[at..at + 8].try_into().expect("8 bytes"));
    Some((word(TCPI_BYTES_ACKED), word(TCPI_BYTES_RECEIVED)))
}

/// The kernel's count of bytes acked on a connection `fd` that nothing was written into
/// yet: the `syn_acked` of [`kernel_history`] (None: not a TCP socket).
pub fn syn_acked(fd: RawFd) -> Option<u64> {
    let mut info = [0u8; 232];
    let mut len = info.len() as libc::socklen_t;
    // SAFETY: TCP_INFO writes at most `len` bytes into our buffer and its length into `len`.
    let r = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_INFO, info.as_mut_ptr().cast(), &mut len) };
    (r == 0 && len as usize >= 128).then(|| u64::from_ne_bytes(info[120..128].try_into().expect("8 bytes")))
}

/// Bytes moved so far, by path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamCounts {
    pub sent_fabric: u64,
    pub sent_kernel: u64,
    pub received_fabric: u64,
    pub received_kernel: u64,
    /// Receiver requests for kernel mode and for the ring made by this end.
    pub kernel_requests: u64,
    pub ring_requests: u64,
    /// Ring requests the peer refused.
    pub ring_refusals: u64,
    /// Directions of this end that failed over to the anchor (0, 1 or 2).
    pub failovers: u64,
}

#[derive(Debug)]
enum RxMode {
    /// Reading the ring; the kernel holds nothing of this direction.
    Ring { delivered: u64 },
    /// Reading the ring up to `ring_until` (modulo 2^28), then the anchor.
    Kernel { ring_until: u64 },
    /// The fabric to the peer failed: the ring's landed bytes (the sender may still be
    /// writing them, if it did not see the failure), and on the anchor either the
    /// sender's fail-over record or, if it sent none, the kernel's bytes after the ring's.
    FailedOver,
    /// The peer vanished: the landed ring bytes, then `ECONNRESET` unless a call reported
    /// it already, then the end of the stream.
    Reset,
}

/// What the anchor holds first, for a receiver that may find a fail-over record there.
enum Look {
    Record { start: u64, len: u64 },
    Data,
    End,
    Nothing,
    Error(io::Error),
}

struct Receiver {
    mode: RxMode,
    consumed: u64,
    consumed_told: u64,
    kernel_read: u64,
    next_seq: u32,
    /// Sleeps left before the next ring request (a stint in ring mode that delivered
    /// nothing doubles it, up to 64).
    ring_backoff: u32,
    ring_skip: u32,
    /// Kernel bytes read since the last "ring wanted" word, the words written, and the
    /// kernel bytes between two words now.
    kernel_since_wanted: u64,
    wanted_told: u64,
    wanted_every: u64,
    /// After a "ring wanted" word until the ring is taken: `KR` as last told with it.
    wanted_read_told: Option<u64>,
    /// The next kernel read may find a fail-over record first: this receiver was in the
    /// ring (or asked for it) since its last kernel read.
    checkpoint: bool,
    /// Bytes of a fail-over record still to come on the anchor, and the ring count the
    /// next of them stands for (those below `consumed` were read from the ring already).
    resent: Option<(u64, u64)>,
    /// The back-off's bounds: at most this many sleeps without asking for the ring, and
    /// "ring wanted" words between these many kernel bytes (the tests' switching stress
    /// sets them low, [`FabricStream::switch_eagerly`]).
    backoff_max: u32,
    wanted_every_min: u64,
    wanted_every_max: u64,
}

struct Sender {
    published: u64,
    /// The sequence number of the last "ring wanted" word this sender paused for.
    wanted_seen: u32,
    /// What this end wrote into the peer's ring, at the same places: the bytes a
    /// fail-over sends again through the anchor (allocated at the first ring write).
    copy: Vec<u8>,
    /// Ring bytes were published since this sender's last kernel send: its next kernel
    /// send must first know they landed (a checked flush), or fail over.
    ring_since_kernel: bool,
    /// This direction failed over: it sends through the anchor alone, for good.
    failed_over: bool,
    /// The part of the fail-over record not in the anchor yet: it goes before any other
    /// kernel byte (a non-blocking call that finds the anchor full leaves it here).
    record: Vec<u8>,
}

struct Shared {
    exports: StreamExports,
    /// The anchor: one of the program's descriptors of the connection (another one when the
    /// program closes this one and keeps a duplicate).
    anchor: AtomicI32,
    _peer_segment: RemoteSegment,
    outbound: Map,
    peer_request_bell: RemoteInterrupt,
    peer_answer_bell: RemoteInterrupt,
    peer_ring_bytes: usize,
    state: AtomicU64,
    tx: Mutex<Sender>,
    rx: Mutex<Receiver>,
    serve_lock: Mutex<u32>,
    finished: AtomicBool,
    /// Given back to the kernel for good ([`FabricStream::give_up`]).
    given_up: AtomicBool,
    /// Inherited by a forked child, which leaves it alone ([`FabricStream::abandon`]).
    abandoned: AtomicBool,
    broken: AtomicBool,
    /// The fabric to the peer failed: both directions use the anchor alone from now on.
    failed: AtomicBool,
    /// `K` when this sender last granted the ring, until its next kernel send ([`NO_GRANT`]
    /// then): a receiver granted the ring takes the first kernel bytes after for a
    /// possible fail-over record, so a fail-over before any kernel send sends one.
    granted_at: AtomicU64,
    /// This end's key, in each fail-over record it sends (the peer has it in its inbound
    /// segment): program bytes are never taken for a record.
    record_key: u64,
    /// The tests' fabric failure: every write to the peer fails.
    #[cfg(test)]
    cut: AtomicBool,
    /// A call reported the connection's reset (`ECONNRESET`).
    reset_reported: AtomicBool,
    stop: AtomicBool,
    receive_spin_ns: AtomicU64,
    /// The tests' pause in a receiver's wait for an answer, between its look at the answer
    /// and its look at the sender's finish (the window a finish that follows the answer
    /// must not fall into).
    #[cfg(test)]
    answer_look_pause: Mutex<Duration>,
    sent_fabric: AtomicU64,
    sent_kernel: AtomicU64,
    received_fabric: AtomicU64,
    received_kernel: AtomicU64,
    kernel_requests: AtomicU64,
    ring_requests: AtomicU64,
    ring_refusals: AtomicU64,
    failovers: AtomicU64,
    /// Told the new count each time a direction fails over ([`FabricStream::on_failover`]).
    failover_watcher: OnceLock<Box<dyn Fn(u64) + Send + Sync>>,
}

/// The pacing of a wait: spins first, driving the fabric's progress from this thread (so
/// remote writes are placed without a wake-up of the transport's service thread), then
/// sleeps in short steps with the driver dropped (the service thread places them then).
struct Pace<'a> {
    fabric: &'a Fabric,
    start: Instant,
    driver: Option<ProgressDriver>,
    looked: Duration,
}

impl<'a> Pace<'a> {
    fn new(fabric: &'a Fabric) -> Self {
        Pace { fabric, start: Instant::now(), driver: None, looked: Duration::ZERO }
    }

    /// True once per millisecond after the first [`RECEIVE_SPIN`]: time for a look at
    /// something that costs a system call.
    fn look_due(&mut self) -> bool {
        let now = self.start.elapsed();
        if now < RECEIVE_SPIN || now - self.looked < Duration::from_millis(1) {
            return false;
        }
        self.looked = now;
        true
    }

    fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// One step: a progress poll while within `spin`, else `sleep` (with no driver held).
    fn step(&mut self, spin: Duration, sleep: impl FnOnce()) {
        if self.start.elapsed() < spin {
            self.driver.get_or_insert_with(|| self.fabric.progress_driver()).poll();
        } else {
            self.driver = None;
            sleep();
        }
    }
}

/// A connection's two directions over the fabric and its anchor (see the module's notes).
pub struct FabricStream {
    shared: Arc<Shared>,
    service: Option<JoinHandle<()>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn reset_error() -> io::Error {
    io::Error::from_raw_os_error(libc::ECONNRESET)
}

fn fabric_io(e: Error) -> io::Error {
    io::Error::other(e.to_string())
}

impl FabricStream {
    /// Connects `exports` to the peer's objects (`peer`, waiting up to `timeout` for them)
    /// beside the anchor `fd` (a connected, blocking TCP socket the caller keeps open while
    /// the stream lives), starts the service thread and tells the peer this end is ready.
    /// An error leaves nothing behind: the connection then stays on its anchor.
    pub fn connect(exports: StreamExports, peer: StreamHandles, fd: RawFd, timeout: Duration) -> Result<FabricStream> {
        Self::connect_counting_from(exports, peer, fd, timeout, 0)
    }

    /// [`Self::connect`] for a connection whose bytes went through the kernel so far:
    /// `history` is what this end wrote into the anchor and read from it before (the
    /// kernel's own counts, [`kernel_history`]), where its kernel counts start, so that a
    /// receiver's "every kernel byte read" compares with the sender's "kernel bytes sent"
    /// whichever end set its stream up first.
    pub fn connect_after(
        exports: StreamExports,
        peer: StreamHandles,
        fd: RawFd,
        timeout: Duration,
        history: KernelHistory,
    ) -> Result<FabricStream> {
        Self::connect_with(exports, peer, fd, timeout, Starts { ring: 0, written: history.written, read: history.read })
    }

    /// [`Self::connect`] with every count (R, K, H, KR, both directions) starting at
    /// `start` instead of 0, as both ends agree: the tests' way to cross the counters'
    /// wrap-around at 2^28 without moving that many bytes.
    fn connect_counting_from(
        exports: StreamExports,
        peer: StreamHandles,
        fd: RawFd,
        timeout: Duration,
        start: u64,
    ) -> Result<FabricStream> {
        Self::connect_with(exports, peer, fd, timeout, Starts { ring: start, written: start, read: start })
    }

    fn connect_with(
        exports: StreamExports,
        peer: StreamHandles,
        fd: RawFd,
        timeout: Duration,
        starts: Starts,
    ) -> Result<FabricStream> {
        PendingStream::connect(exports, peer, timeout)?.start_with(fd, starts).map_err(|back| back.0)
    }
}

/// Why a stream did not start, with its exports when they outlive the failure (see
/// [`PendingStream::start`]).
pub type StartFailed = Box<(Error, Option<StreamExports>)>;

/// A stream whose objects are connected to the peer's (the slow part of a set-up: three
/// connects through the daemons), not started yet: nothing was written to the peer, and
/// the connection's bytes still go through the kernel alone.
pub struct PendingStream {
    exports: StreamExports,
    peer_segment: RemoteSegment,
    outbound: Map,
    peer_request_bell: RemoteInterrupt,
    peer_answer_bell: RemoteInterrupt,
    peer_ring_bytes: usize,
}

impl PendingStream {
    /// Connects `exports` to the peer's objects `peer`, waiting up to `timeout` for them.
    /// An error leaves nothing behind.
    pub fn connect(exports: StreamExports, peer: StreamHandles, timeout: Duration) -> Result<PendingStream> {
        Self::try_connect(exports, peer, timeout).map_err(|back| back.0)
    }

    /// [`Self::connect`], giving `exports` back with the error (to try again with them).
    pub fn try_connect(
        exports: StreamExports,
        peer: StreamHandles,
        timeout: Duration,
    ) -> std::result::Result<PendingStream, Box<(Error, StreamExports)>> {
        let fabric = exports.fabric.clone();
        let t = Timeout::After(timeout);
        let connected = (|| {
            let peer_segment = fabric.connect_segment(peer.node, peer.segment, t)?;
            let size = peer_segment.size() as usize;
            let peer_ring_bytes = size.saturating_sub(HEADER_BYTES);
            if !peer_ring_bytes.is_power_of_two() || !(MIN_RING..=MAX_RING_BYTES).contains(&peer_ring_bytes) {
                return Err(Error::IllegalOperation("the peer's inbound segment has an impossible ring size"));
            }
            let outbound = peer_segment.map(0, size as u64, MapAccess::ReadWrite)?;
            let peer_request_bell = fabric.connect_interrupt(peer.node, peer.request_bell, t)?;
            let peer_answer_bell = fabric.connect_interrupt(peer.node, peer.answer_bell, t)?;
            Ok((peer_segment, outbound, peer_request_bell, peer_answer_bell, peer_ring_bytes))
        })();
        match connected {
            Ok((peer_segment, outbound, peer_request_bell, peer_answer_bell, peer_ring_bytes)) => Ok(PendingStream {
                exports,
                peer_segment,
                outbound,
                peer_request_bell,
                peer_answer_bell,
                peer_ring_bytes,
            }),
            Err(e) => Err(Box::new((e, exports))),
        }
    }

    /// Gives the exports back without starting: nothing was written to the peer.
    pub fn into_exports(self) -> StreamExports {
        self.exports
    }

    /// Starts the stream beside the anchor `fd` for a connection whose bytes went through
    /// the kernel so far (`history`, see [`FabricStream::connect_after`]): *ready* to the
    /// peer, then its service thread. A failure gives the exports back with the error
    /// where it can (the peer's host went out of reach since the connect: the caller keeps
    /// them until new ones are registered, so that the new ones never take their numbers).
    pub fn start(self, fd: RawFd, history: KernelHistory) -> std::result::Result<FabricStream, StartFailed> {
        self.start_with(fd, Starts { ring: 0, written: history.written, read: history.read })
    }

    fn start_with(self, fd: RawFd, starts: Starts) -> std::result::Result<FabricStream, StartFailed> {
        let Starts { ring: start, written, read } = starts;
        let PendingStream { exports, peer_segment, outbound, peer_request_bell, peer_answer_bell, peer_ring_bytes } =
            self;
        let record_key = random_key();
        // Our inbound counts start where the peer's do; nothing writes them before it
        // reads our ready (it sends through the ring only when our receiver asks, and
        // reads our ring only after we sent through it). A request the peer makes once it
        // read the ready waits on the doorbell for the service thread, started next.
        let ready = (|| {
            exports.inbound.store_release_u64(OFF_PUBLISHED, start)?;
            exports.inbound.store_release_u64(OFF_CONSUMED, start)?;
            outbound.store_release_u64(OFF_RECORD_KEY, record_key)?;
            outbound.store_release_u64(OFF_READY, READY_MAGIC)?;
            outbound.flush_checked()
        })();
        if let Err(e) = ready {
            return Err(Box::new((e, Some(exports))));
        }
        let shared = Arc::new(Shared {
            exports,
            anchor: AtomicI32::new(fd),
            _peer_segment: peer_segment,
            outbound,
            peer_request_bell,
            peer_answer_bell,
            peer_ring_bytes,
            state: AtomicU64::new(((start & COUNT_MASK) << 28) | (written & COUNT_MASK)),
            tx: Mutex::new(Sender {
                published: start,
                wanted_seen: 0,
                copy: Vec::new(),
                ring_since_kernel: false,
                failed_over: false,
                record: Vec::new(),
            }),
            rx: Mutex::new(Receiver {
                mode: RxMode::Kernel { ring_until: start & COUNT_MASK },
                consumed: start,
                consumed_told: start,
                kernel_read: read,
                next_seq: 1,
                ring_backoff: 0,
                ring_skip: 0,
                kernel_since_wanted: 0,
                wanted_told: 0,
                wanted_every: RING_WANTED_EVERY,
                wanted_read_told: None,
                checkpoint: false,
                resent: None,
                backoff_max: 64,
                wanted_every_min: RING_WANTED_EVERY,
                wanted_every_max: RING_WANTED_EVERY_MAX,
            }),
            serve_lock: Mutex::new(0),
            finished: AtomicBool::new(false),
            given_up: AtomicBool::new(false),
            abandoned: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            granted_at: AtomicU64::new(NO_GRANT),
            record_key,
            #[cfg(test)]
            cut: AtomicBool::new(false),
            reset_reported: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            receive_spin_ns: AtomicU64::new(RECEIVE_SPIN.as_nanos() as u64),
            #[cfg(test)]
            answer_look_pause: Mutex::new(Duration::ZERO),
            sent_fabric: AtomicU64::new(0),
            sent_kernel: AtomicU64::new(0),
            received_fabric: AtomicU64::new(0),
            received_kernel: AtomicU64::new(0),
            kernel_requests: AtomicU64::new(0),
            ring_requests: AtomicU64::new(0),
            ring_refusals: AtomicU64::new(0),
            failovers: AtomicU64::new(0),
            failover_watcher: OnceLock::new(),
        });
        let for_thread = shared.clone();
        let spawned = crate::platform::threads::spawn("lanes-fabric-stream", move || for_thread.service());
        match spawned {
            Ok(service) => Ok(FabricStream { shared, service: Some(service) }),
            // The peer's stream, ready, sees these objects go (as when this process ends)
            // and fails over: the connection stays on the kernel.
            Err(e) => Err(Box::new((Error::io("starting the fabric stream's service thread", e), None))),
        }
    }
}

impl FabricStream {
    /// Bytes moved so far, by path.
    pub fn counts(&self) -> StreamCounts {
        let s = &self.shared;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StreamCounts {
            sent_fabric: get(&s.sent_fabric),
            sent_kernel: get(&s.sent_kernel),
            received_fabric: get(&s.received_fabric),
            received_kernel: get(&s.received_kernel),
            kernel_requests: get(&s.kernel_requests),
            ring_requests: get(&s.ring_requests),
            ring_refusals: get(&s.ring_refusals),
            failovers: get(&s.failovers),
        }
    }

    /// Sets how long a receive that found the ring empty spins before the receiver asks
    /// for kernel mode and sleeps there (default 100 us).
    pub fn set_receive_spin(&self, spin: Duration) {
        self.shared.receive_spin_ns.store(spin.as_nanos().min(u128::from(u64::MAX)) as u64, Ordering::Relaxed);
    }

    /// For the tests' switching stress: no back-off (a caught-up receiver asks for the ring
    /// at once, however little its last stint delivered) and "ring wanted" every 16 KiB
    /// read from the kernel, so that the directions switch as often as they can.
    #[cfg(test)]
    fn switch_eagerly(&self) {
        let mut rx = lock(&self.shared.rx);
        rx.backoff_max = 0;
        rx.wanted_every_min = 16 * 1024;
        rx.wanted_every_max = 16 * 1024;
        rx.wanted_every = 16 * 1024;
    }

    /// Sends some of `buf` (at least one byte, unless `buf` is empty), blocking while
    /// neither the ring nor the kernel has room. Kernel errors are the anchor's own.
    pub fn send(&self, buf: &[u8]) -> io::Result<usize> {
        self.shared.send(buf, CallMode::default())
    }

    /// [`Self::send`] as a program's call makes it: `mode.nonblocking` (`O_NONBLOCK` or
    /// `MSG_DONTWAIT`) never waits for ring room (a full ring sends the rest through the
    /// kernel, which answers `EAGAIN` as kernel TCP would), and `mode.kernel_flags` go
    /// with the kernel's send (`MSG_NOSIGNAL` is always added: the caller raises
    /// `SIGPIPE` itself when the program asked for it).
    pub fn send_with(&self, buf: &[u8], mode: CallMode) -> io::Result<usize> {
        self.shared.send(buf, mode)
    }

    /// [`Self::recv`] as a program's call makes it: `mode.nonblocking` answers
    /// `EAGAIN` when neither the ring nor the kernel has a byte (it never waits but for
    /// ring bytes the sender announced, which are in flight), and `mode.kernel_flags`
    /// go with the kernel's receive.
    pub fn recv_with(&self, buf: &mut [u8], mode: CallMode) -> io::Result<usize> {
        self.shared.recv(buf, mode)
    }

    /// Copies the bytes a receive would return, without consuming them (`MSG_PEEK`), on a
    /// stream given up ([`Self::give_up`]): the ring's bytes left from before, then the
    /// kernel's (peeked with `mode`'s flags). None once the ring is read: the kernel's
    /// own peek is then exact.
    pub fn peek_ring(&self, buf: &mut [u8], mode: CallMode) -> Option<io::Result<usize>> {
        self.shared.peek_ring(buf, mode)
    }

    /// Gives the connection back to the kernel for good, byte-exact: this end's sending
    /// direction finishes its ring (the peer reads it to its end, then the kernel), and
    /// this end's receiving direction is switched to kernel mode and never asks for the
    /// ring again (its ring bytes left are read first). For what the stream does not do
    /// itself: peeking, urgent data, and sharing the connection with another process.
    pub fn give_up(&self) -> io::Result<()> {
        self.shared.give_up()
    }

    /// Whether this end gave the connection up ([`Self::give_up`]) and read its ring to
    /// the end: every call is then the kernel's own.
    pub fn kernel_only(&self) -> bool {
        let s = &self.shared;
        s.abandoned.load(Ordering::Relaxed) || s.given_up.load(Ordering::Acquire) && s.ring_drained()
    }

    /// Has `watch` told the stream's count of failed-over directions each time one fails
    /// over (from whichever thread saw the failure: the service thread for an idle
    /// connection), so that what the connection's record says needs no call of the
    /// program's. Once per stream; a second watcher is ignored.
    pub fn on_failover(&self, watch: Box<dyn Fn(u64) + Send + Sync>) {
        let _ = self.shared.failover_watcher.set(watch);
    }

    /// Whether the stream failed over and is done with the fabric for good: both directions
    /// go through the anchor alone, this end's fail-over record (if any) is in the anchor
    /// whole, and the peer's was read (or none can come: the first kernel bytes after the
    /// last ring stint were looked at). Every call on the connection is then the kernel's
    /// own, and a new stream may start from the kernel's counts (fall-forward). False while
    /// another thread is inside a call of the stream.
    pub fn failed_over_and_settled(&self) -> bool {
        let s = &self.shared;
        if !s.failed.load(Ordering::Acquire) || s.broken.load(Ordering::Acquire) || s.abandoned.load(Ordering::Relaxed)
        {
            return false;
        }
        let Ok(tx) = s.tx.try_lock() else { return false };
        if !tx.failed_over || !tx.record.is_empty() {
            return false;
        }
        let Ok(rx) = s.rx.try_lock() else { return false };
        let ring_read = matches!(rx.mode, RxMode::Kernel { ring_until } if rx.consumed & COUNT_MASK == ring_until);
        ring_read && rx.resent.is_none() && !rx.checkpoint
    }

    /// In a forked child: the stream (its threads, its fabric endpoint) is the parent's, and
    /// this process's calls on the connection are the kernel's from now on
    /// ([`Self::kernel_only`]). The caller must never drop it here (it would close the
    /// parent's objects and join a thread that does not exist in this process).
    pub fn abandon(&self) {
        self.shared.abandoned.store(true, Ordering::Relaxed);
    }

    /// Ring bytes landed that a receive returns before any of the kernel's (0 while another
    /// thread receives).
    pub fn ring_readable(&self) -> u64 {
        let s = &self.shared;
        if s.abandoned.load(Ordering::Relaxed) {
            return 0;
        }
        let Ok(rx) = s.rx.try_lock() else { return 0 };
        if rx.resent.is_some() {
            return 0; // the ring is read: the record's bytes are in the kernel
        }
        let available = s.ring_available(&rx).min(s.exports.ring_bytes as u64);
        match rx.mode {
            RxMode::Ring { .. } | RxMode::FailedOver | RxMode::Reset => available,
            RxMode::Kernel { ring_until } => available.min(ring_until.wrapping_sub(rx.consumed) & COUNT_MASK),
        }
    }

    /// Whether a receive would find bytes without the kernel's help now (ring bytes, or a
    /// reset to report): readiness for reading that the kernel cannot see.
    pub fn readable_without_kernel(&self) -> bool {
        !self.shared.abandoned.load(Ordering::Relaxed) && self.shared.readable_without_kernel()
    }

    /// Before a wait in the kernel for readability: true if the stream is readable now
    /// (as [`Self::readable_without_kernel`], or ring bytes announced and in flight);
    /// else this end's receiving direction is in kernel mode with its ring read, so the
    /// kernel's readiness is the stream's until the next receive.
    pub fn prepare_to_wait(&self) -> bool {
        !self.shared.abandoned.load(Ordering::Relaxed) && self.shared.prepare_to_wait()
    }

    /// A value that changes whenever ring bytes arrive (edge-triggered readiness).
    pub fn arrivals(&self) -> u64 {
        self.shared.inbound(OFF_PUBLISHED)
    }

    /// The program's descriptor the stream uses now becomes `fd` (another descriptor of the
    /// same connection: the one it used is being closed).
    pub fn set_anchor(&self, fd: RawFd) {
        self.shared.anchor.store(fd, Ordering::Relaxed);
    }

    /// Sends all of `buf`.
    pub fn send_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self.send(buf)?;
            buf = &buf[n..];
        }
        Ok(())
    }

    /// Receives up to `buf.len()` bytes, blocking until at least one is there; 0 at the end
    /// of the stream.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.shared.recv(buf, CallMode::default())
    }

    /// Ends this end's sending direction: the peer reads every ring byte, then the
    /// anchor's end of stream (`shutdown(SHUT_WR)` on the anchor).
    pub fn shutdown_write(&self) -> io::Result<()> {
        self.shared.finish_sending()?;
        // SAFETY: shutdown on the caller's descriptor, no memory involved.
        if unsafe { libc::shutdown(self.shared.fd(), libc::SHUT_WR) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl FabricStream {
    /// The program closes the connection (its last descriptor, before the kernel's close):
    /// the sender finishes cleanly, and the receiver reads nothing more (its peer's sender
    /// then goes to the anchor, whose kernel answers as for a closed socket). Once only;
    /// dropping the stream does it too.
    pub fn close(&self) {
        let s = &self.shared;
        if s.stop.swap(true, Ordering::AcqRel) {
            return;
        }
        let _ = s.finish_sending();
        let _ = s.outbound.store_release_u64(OFF_RX_CLOSED, 1);
        s.outbound.flush();
        let _ = s.peer_request_bell.trigger();
        let _ = s.exports.request_bell.remove();
    }

    /// Ends this end's sending direction in the ring (the peer reads it to its end, then
    /// the kernel's bytes and end), before the program's own `shutdown` of the anchor.
    pub fn finish_sending(&self) -> io::Result<()> {
        self.shared.finish_sending()
    }

    /// Resets the connection (the kernel sends the peer a reset): where bytes in this end's
    /// ring cannot reach the program that reads next (an exec).
    pub fn reset(&self) {
        self.shared.break_connection();
    }
}

impl Drop for FabricStream {
    fn drop(&mut self) {
        self.close();
        if let Some(t) = self.service.take() {
            let _ = t.join();
        }
    }
}

impl Shared {
    fn fd(&self) -> RawFd {
        self.anchor.load(Ordering::Relaxed)
    }

    fn word(&self) -> DirectionWord<'_> {
        DirectionWord::new(&self.state)
    }

    fn inbound(&self, off: usize) -> u64 {
        self.exports.inbound.load_acquire_u64(off).unwrap_or(0)
    }

    fn peer_alive(&self) -> bool {
        !matches!(self._peer_segment.state(), RemoteState::Lost(_))
    }

    /// Whether the fabric reaches the peer now: not lost, and its host not suspected (the
    /// fabric fails work towards a suspected host at once). Not reachable, with the anchor
    /// standing, is a fabric failure: within the host-suspect bound, the stream fails over.
    fn peer_reachable(&self) -> bool {
        matches!(self._peer_segment.state(), RemoteState::Operational)
    }

    /// The service thread: carries out requests as they arrive, until the stream ends.
    fn service(&self) {
        let mut consumed_seen = (u64::MAX, Instant::now());
        while !self.stop.load(Ordering::Acquire) {
            let _ = self.exports.request_bell.wait(Timeout::After(Duration::from_millis(50)));
            self.serve();
            self.watch_fabric(&mut consumed_seen);
        }
    }

    /// The service thread's look at the fabric: a sender that does not send (the program
    /// waits for an answer to what it sent) must still fail over when the fabric fails,
    /// or its ring bytes that did not land would never reach the peer. `consumed_seen`:
    /// the receiver's last told count `H` and when it last moved; ring bytes unread while
    /// it stands still are when a checked flush is worth its round trip.
    fn watch_fabric(&self, consumed_seen: &mut (u64, Instant)) {
        let consumed = self.inbound(OFF_CONSUMED);
        if consumed != consumed_seen.0 {
            *consumed_seen = (consumed, Instant::now());
        }
        let Ok(mut tx) = self.tx.try_lock() else { return }; // a send is under way: it sees
        if !tx.record.is_empty() {
            // The rest of a record a non-blocking call left (nothing else is waiting for it).
            let _ = self.send_record(&mut tx, Some(Duration::ZERO));
        }
        if tx.failed_over || self.broken.load(Ordering::Acquire) {
            return;
        }
        let stalled = tx.ring_since_kernel && tx.published != consumed && consumed_seen.1.elapsed() > STALL_CHECK;
        // A peer that closed (its objects go before its kernel's FIN) reads nothing more:
        // that is no failure.
        let peer_lost = !self.peer_reachable() && !anchor_ended(self.fd()) && self.inbound(OFF_RX_CLOSED) == 0;
        let failed = self.failed.load(Ordering::Acquire) || peer_lost || stalled && self.flush_out().is_err();
        if failed {
            let _ = self.fail_over_tx(&mut tx, true);
        }
    }

    /// The writes to the peer's segment (the tests' cut fails them).
    fn out(&self) -> Result<&Map> {
        #[cfg(test)]
        if self.cut.load(Ordering::Relaxed) {
            return Err(Error::IllegalOperation("the tests cut the fabric"));
        }
        Ok(&self.outbound)
    }

    /// A flush of the writes to the peer, `Err` if one of them failed since the last check
    /// (which another thread may have made: then `failed` says it): `Ok` proves every
    /// earlier write landed.
    fn flush_out(&self) -> Result<()> {
        self.out()?.flush_checked()?;
        if self.failed.load(Ordering::Acquire) {
            return Err(Error::IllegalOperation("the fabric to the peer failed"));
        }
        Ok(())
    }

    /// Under the sender's lock: the fabric to the peer failed, and this direction goes on
    /// through the anchor alone, for good (both directions: the receiver asks for the ring
    /// no more). If ring bytes were published since the last kernel send, the receiver reads
    /// the anchor next only after them, and may not have them all: the anchor first carries
    /// a record, the ring bytes from the last count the receiver told (it drops those it
    /// read already). Err: the record could not be sent whole (the kernel's error, or
    /// `EAGAIN` for a `nonblocking` call: the rest goes at the next send).
    fn fail_over_tx(&self, tx: &mut Sender, nonblocking: bool) -> io::Result<()> {
        self.failed.store(true, Ordering::Release);
        if tx.failed_over {
            return Ok(());
        }
        let granted = {
            // A request served from now on sees `failed` (no ring is granted); one served
            // before is undone here.
            let _serving = lock(&self.serve_lock);
            self.word().to_kernel_mode();
            self.granted_at.load(Ordering::Acquire) == self.word().load().kernel_reserved()
        };
        tx.failed_over = true;
        self.count_failover();
        if !std::mem::take(&mut tx.ring_since_kernel) && !granted {
            return Ok(());
        }
        let start = self.inbound(OFF_CONSUMED);
        let len = tx.published.wrapping_sub(start);
        if len > self.peer_ring_bytes as u64 || len > tx.copy.len() as u64 {
            return Err(self.fail()); // a count this sender never published
        }
        let mut record = Vec::with_capacity(RECORD_HEADER + len as usize);
        for word in [RECORD_MAGIC, self.record_key, start, len] {
            record.extend_from_slice(&word.to_le_bytes());
        }
        if len > 0 {
            let (at, first) = ring_span(start, len as usize, tx.copy.len());
            record.extend_from_slice(&tx.copy[at..at + first]);
            record.extend_from_slice(&tx.copy[..len as usize - first]);
        }
        tx.record = record;
        self.send_record(tx, if nonblocking { Some(Duration::ZERO) } else { None })
    }

    /// Sends what is left of the fail-over record, waiting for room in the anchor up to
    /// `bound` (None: as long as it takes, as a blocking send would).
    fn send_record(&self, tx: &mut Sender, bound: Option<Duration>) -> io::Result<()> {
        let sent = send_on_anchor(self.fd(), &tx.record, bound);
        tx.record.drain(..sent.as_ref().map_or_else(|(n, _)| *n, |n| *n));
        sent.map(|_| ()).map_err(|(_, e)| e)
    }

    /// Carries out the pending request, if one is new; answers it.
    fn serve(&self) {
        // The request is read under the lock: a thread that read it before another served
        // it, and then waited (descheduled) while the receiver made its next request and
        // that one was served too, would carry the old one out again, a stale "ring" while
        // the receiver reads the kernel (seen as a wrong byte on a loaded machine).
        let mut last = lock(&self.serve_lock);
        let Some(request) = Request::decode(self.inbound(OFF_REQUEST)) else { return };
        if request.seq() == *last {
            return;
        }
        // `finished` is set under this lock too (`finish_sending`).
        let no_ring = self.finished.load(Ordering::Acquire) || self.failed.load(Ordering::Acquire);
        let answer = carry_out(&self.word(), request, no_ring);
        if request.is_ring() && answer.accepted {
            self.granted_at.store(answer.count, Ordering::Release);
        }
        *last = request.seq();
        // Landed before the doorbell rings: the receiver reads the answer when woken.
        let answered = self.out().and_then(|o| o.store_release_u64(OFF_ANSWER, answer.encode()));
        if answered.and_then(|()| self.flush_out()).is_err() {
            // The sender (a sending thread, or this service) fails over.
            self.failed.store(true, Ordering::Release);
        }
        drop(last);
        let _ = self.peer_answer_bell.trigger();
    }

    fn finish_sending(&self) -> io::Result<()> {
        let mut tx = lock(&self.tx);
        // With the serving lock too: a request served meanwhile either came first (a ring
        // it granted is taken back here) or sees the sender finished. (Read before this, a
        // "not finished" could grant the ring after the final R was taken: sends would then
        // put bytes into the ring behind the R the receiver reads to.)
        let serving = lock(&self.serve_lock);
        if self.finished.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.word().to_kernel_mode();
        let r = self.word().load().published();
        drop(serving);
        if !tx.failed_over {
            let told = self.out().and_then(|o| o.store_release_u64(OFF_TX_FINISHED, FINISHED_BIT | r));
            if told.and_then(|()| self.flush_out()).is_ok() {
                tx.ring_since_kernel = false; // landed, and the finish after them
                return Ok(());
            }
            let _ = self.fail_over_tx(&mut tx, true);
        }
        // The ring's last bytes go through the anchor before the program's shutdown (its
        // end of the stream), a while at most: else a reset, never a short clean end.
        if self.send_record(&mut tx, Some(FABRIC_BOUND)).is_err() {
            self.break_connection();
        }
        Ok(())
    }

    /// The fabric failed after bytes moved over it: reset the connection (never a silent
    /// loss). Returns the error to report now.
    fn fail(&self) -> io::Error {
        self.break_connection();
        self.reset_once()
    }

    /// Resets the anchor (once) and marks the connection broken.
    fn break_connection(&self) {
        if !self.broken.swap(true, Ordering::AcqRel) {
            reset_anchor(self.fd());
        }
    }

    /// The error of a call on a reset connection, as the kernel gives it: `ECONNRESET` to
    /// the first call that reports it, `EPIPE` to the sends after (receives see the end).
    fn reset_once(&self) -> io::Error {
        if self.reset_reported.swap(true, Ordering::AcqRel) {
            io::Error::from_raw_os_error(libc::EPIPE)
        } else {
            reset_error()
        }
    }

    fn send(&self, buf: &[u8], mode: CallMode) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut tx = lock(&self.tx);
        let mut pace: Option<Pace<'_>> = None;
        loop {
            if self.broken.load(Ordering::Acquire) {
                return Err(self.reset_once());
            }
            self.serve();
            if self.failed.load(Ordering::Acquire) && !tx.failed_over {
                self.fail_over_tx(&mut tx, mode.nonblocking)?;
            }
            let word = self.word();
            if !word.load().ring_mode() {
                break;
            }
            if self.inbound(OFF_RX_CLOSED) != 0 || !self.peer_alive() && anchor_ended(self.fd()) {
                // Nobody reads the ring: the anchor's kernel answers as it would.
                word.to_kernel_mode();
                break;
            }
            if !self.peer_reachable() {
                // The fabric lost the peer's host (or suspects it) while the connection stands.
                self.fail_over_tx(&mut tx, mode.nonblocking)?;
                break;
            }
            let consumed = self.inbound(OFF_CONSUMED);
            let in_ring = tx.published.wrapping_sub(consumed);
            if in_ring > self.peer_ring_bytes as u64 {
                return Err(self.fail());
            }
            let room = self.peer_ring_bytes - in_ring as usize;
            if room == 0 {
                if mode.nonblocking {
                    // The sender may leave the ring at any moment: the receiver reads the
                    // ring up to here before the kernel's bytes, which say EAGAIN if full.
                    word.to_kernel_mode();
                    break;
                }
                if anchor_reset(self.fd()) {
                    // The peer's kernel reset the connection: it answers our send. (Switching
                    // on its own is safe: the receiver reads the kernel only after asking.)
                    word.to_kernel_mode();
                    break;
                }
                if mode.interrupted(self.fd()) {
                    // A handler ran where the kernel's send would sleep: the caller ends
                    // the call with what it moved, EINTR, or a restart.
                    return Err(io::Error::from_raw_os_error(libc::EINTR));
                }
                let p = pace.get_or_insert_with(|| Pace::new(&self.exports.fabric));
                if p.elapsed() > FABRIC_BOUND && self.flush_out().is_err() {
                    // No room for this long, and the writes do not land.
                    self.fail_over_tx(&mut tx, mode.nonblocking)?;
                    break;
                }
                p.step(ROOM_SPIN, || std::thread::sleep(WAIT_STEP));
                continue;
            }
            let n = room.min(buf.len());
            if !word.publish(n) {
                continue;
            }
            keep_copy(&mut tx, self.peer_ring_bytes, &buf[..n]);
            let published = tx.published;
            tx.published += n as u64;
            tx.ring_since_kernel = true;
            self.sent_fabric.fetch_add(n as u64, Ordering::Relaxed);
            if self.write_ring(published, &buf[..n]).is_err() {
                if anchor_ended(self.fd()) && !self.peer_alive() {
                    // Nobody reads these bytes: the anchor's kernel says what it would.
                    word.to_kernel_mode();
                    break;
                }
                // Published (the receiver may have some of them): the record carries them,
                // so they are sent, whatever the anchor says now (the next call hears it).
                let _ = self.fail_over_tx(&mut tx, mode.nonblocking);
            }
            return Ok(n);
        }
        // Its spin driver ends before the checked flush (a Drop under the ofi transport only).
        #[allow(clippy::drop_non_drop)]
        drop(pace);
        if tx.ring_since_kernel && !tx.failed_over {
            // Kernel bytes follow the ring's only once those landed (the receiver reads
            // the ring to its count first, and must not wait for bytes that never land).
            match self.flush_out() {
                Ok(()) => tx.ring_since_kernel = false,
                Err(_) => self.fail_over_tx(&mut tx, mode.nonblocking)?,
            }
        }
        if !tx.record.is_empty() {
            self.send_record(&mut tx, mode.nonblocking.then_some(Duration::ZERO))?;
        }
        // Kernel mode. A receiver reading our kernel bytes wants the ring back once it
        // caught up: hold our kernel bytes back a moment so that it can.
        let wanted = self.inbound(OFF_RING_WANTED);
        if (wanted >> 32) as u32 != tx.wanted_seen && !mode.nonblocking {
            tx.wanted_seen = (wanted >> 32) as u32;
            let start = Instant::now();
            let (mut read, mut moved) = (wanted & COUNT_MASK, start);
            while !self.word().load().ring_mode()
                && moved.elapsed() < RING_WANTED_STALL
                && start.elapsed() < RING_WANTED_PAUSE
            {
                self.serve();
                std::thread::sleep(Duration::from_micros(100));
                let now = self.inbound(OFF_RING_WANTED) & COUNT_MASK;
                if now != read {
                    (read, moved) = (now, Instant::now());
                }
            }
            if self.word().load().ring_mode() {
                drop(tx);
                return self.send(buf, mode);
            }
        }
        let word = self.word();
        let reservation = word.reserve_kernel(buf.len());
        self.granted_at.store(NO_GRANT, Ordering::Release);
        let len = reservation.bytes;
        // SAFETY: the first `len` bytes of the caller's buffer, valid for reads.
        let r = unsafe { libc::send(self.fd(), buf.as_ptr().cast(), len, mode.kernel_flags | libc::MSG_NOSIGNAL) };
        let err = io::Error::last_os_error();
        word.settle_kernel(reservation, r.max(0) as usize);
        drop(tx);
        if r < 0 {
            return Err(err);
        }
        self.sent_kernel.fetch_add(r as u64, Ordering::Relaxed);
        Ok(r as usize)
    }

    /// Writes `bytes` into the peer's ring at `published`, then the new count (ordered
    /// writes: the bytes land first).
    fn write_ring(&self, published: u64, bytes: &[u8]) -> Result<()> {
        let (at, first) = ring_span(published, bytes.len(), self.peer_ring_bytes);
        let out = self.out()?;
        out.write_bytes(HEADER_BYTES + at, &bytes[..first])?;
        if first < bytes.len() {
            out.write_bytes(HEADER_BYTES, &bytes[first..])?;
        }
        out.store_release_u64(OFF_PUBLISHED, published + bytes.len() as u64)
    }

    /// Copies ring bytes from `consumed` into `buf`; how many.
    fn read_ring(&self, rx: &mut Receiver, available: u64, buf: &mut [u8]) -> io::Result<usize> {
        let n = (available as usize).min(buf.len());
        self.copy_ring(rx.consumed, &mut buf[..n])?;
        rx.consumed += n as u64;
        self.received_fabric.fetch_add(n as u64, Ordering::Relaxed);
        if rx.consumed - rx.consumed_told >= CONSUMED_BATCH {
            self.tell_consumed(rx);
        }
        Ok(n)
    }

    /// Tells the sender how far the ring is read. A failure is the next receive's (the
    /// bytes this one read are the program's): a peer whose sender finished needs no room
    /// any more; else the fabric failed, and the receiver fails over.
    fn tell_consumed(&self, rx: &mut Receiver) {
        if rx.consumed != rx.consumed_told {
            let told = self.out().and_then(|o| o.store_release_u64(OFF_CONSUMED, rx.consumed));
            if told.is_err() && self.peer_sends() {
                self.failed.store(true, Ordering::Release);
            }
            rx.consumed_told = rx.consumed;
        }
    }

    /// One more direction failed over: counted, and told to the watcher (which may be
    /// called under this stream's locks: it must take none of its own that a call of the
    /// stream's could hold).
    fn count_failover(&self) {
        let n = self.failovers.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(watch) = self.failover_watcher.get() {
            watch(n);
        }
    }

    /// This end's receiver can no longer reach its peer's sender over the fabric (the
    /// fabric failed, or the peer's process or host is lost): it reads the ring's landed
    /// bytes, and then the anchor, where the sender's fail-over record comes first if its
    /// ring bytes may not all have landed (see [`RxMode::FailedOver`]).
    fn fail_over_rx(&self, rx: &mut Receiver) {
        self.failed.store(true, Ordering::Release);
        if !matches!(rx.mode, RxMode::FailedOver | RxMode::Reset) {
            self.count_failover();
            rx.mode = RxMode::FailedOver;
            rx.checkpoint = true;
        }
    }

    /// What the anchor holds first (without taking it): a fail-over record of the peer's,
    /// program bytes, the end of the stream, nothing yet (`nonblocking`), or an error.
    fn look_on_anchor(&self, nonblocking: bool) -> Look {
        let mut expected = [0u8; 16];
        expected[..8].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
        expected[8..].copy_from_slice(&self.inbound(OFF_RECORD_KEY).to_le_bytes());
        let mut header = [0u8; RECORD_HEADER];
        let mut waited = Duration::ZERO;
        loop {
            let flags = libc::MSG_PEEK | if nonblocking { libc::MSG_DONTWAIT } else { 0 };
            // SAFETY: a peek into our buffer, valid for writes.
            let n = unsafe { libc::recv(self.fd(), header.as_mut_ptr().cast(), RECORD_HEADER, flags) };
            if n < 0 {
                let e = io::Error::last_os_error();
                return if e.raw_os_error() == Some(libc::EAGAIN) { Look::Nothing } else { Look::Error(e) };
            }
            if n == 0 {
                return Look::End;
            }
            let n = n as usize;
            if header[..n.min(16)] != expected[..n.min(16)] {
                return Look::Data;
            }
            if n == RECORD_HEADER {
                let word = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
                return Look::Record { start: word(16), len: word(24) };
            }
            // The start of a record (which is sent in one piece, after a drained stream,
            // so it arrives whole): the rest is a moment away.
            if waited > FABRIC_BOUND {
                return Look::Data;
            }
            std::thread::sleep(WAIT_STEP);
            waited += WAIT_STEP;
        }
    }

    /// Takes the record header `look_on_anchor` found; the record's bytes follow.
    fn take_record(&self, rx: &mut Receiver, start: u64, len: u64) -> io::Result<()> {
        let read_already = rx.consumed.wrapping_sub(start);
        if read_already > len || len > self.exports.ring_bytes as u64 {
            return Err(self.fail()); // not a record our peer could have sent
        }
        let mut header = [0u8; RECORD_HEADER];
        // SAFETY: a read into our buffer, valid for writes.
        let n = unsafe { libc::recv(self.fd(), header.as_mut_ptr().cast(), RECORD_HEADER, libc::MSG_WAITALL) };
        if n != RECORD_HEADER as isize {
            return Err(self.fail());
        }
        self.failed.store(true, Ordering::Release);
        rx.checkpoint = false;
        rx.resent = Some((start, len));
        Ok(())
    }

    /// Reads the fail-over record's bytes: those the ring gave already are dropped, the
    /// rest are the program's. None once the record is read (the anchor's bytes after it
    /// are the kernel's).
    fn read_resent(&self, rx: &mut Receiver, buf: &mut [u8], mode: CallMode) -> io::Result<Option<usize>> {
        loop {
            let Some((at, left)) = rx.resent else { return Ok(None) };
            if left == 0 {
                rx.resent = None;
                rx.mode = RxMode::Kernel { ring_until: rx.consumed & COUNT_MASK };
                return Ok(None);
            }
            let read_already = rx.consumed.wrapping_sub(at);
            let (n, fresh) = if read_already > 0 {
                let mut scratch = [0u8; 4096];
                let want = read_already.min(left).min(scratch.len() as u64) as usize;
                let flags = mode.kernel_flags & libc::MSG_DONTWAIT;
                // SAFETY: a read into our buffer, valid for writes.
                (unsafe { libc::recv(self.fd(), scratch.as_mut_ptr().cast(), want, flags) }, false)
            } else {
                let want = (left as usize).min(buf.len());
                // SAFETY: a read into the caller's buffer, valid for writes.
                (unsafe { libc::recv(self.fd(), buf.as_mut_ptr().cast(), want, mode.kernel_flags) }, true)
            };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            if n == 0 {
                // The record ended short: the sender's bytes did not all come.
                rx.resent = None;
                rx.mode = RxMode::Reset;
                return Ok(None);
            }
            let n = n as u64;
            rx.resent = Some((at + n, left - n));
            if fresh {
                rx.consumed += n;
                self.received_kernel.fetch_add(n, Ordering::Relaxed);
                return Ok(Some(n as usize));
            }
        }
    }

    /// Whether the peer is gone: its process (as the fabric knows), or its end of the
    /// anchor (its kernel closed or reset it: a death the fabric may hear of later).
    fn peer_gone(&self) -> bool {
        !self.peer_alive() || anchor_ended(self.fd())
    }

    /// Whether the peer may still send through the ring: alive, its sender not finished.
    fn peer_sends(&self) -> bool {
        self.inbound(OFF_TX_FINISHED) & FINISHED_BIT == 0 && self.peer_alive()
    }

    /// Ring bytes landed and not yet read.
    fn ring_available(&self, rx: &Receiver) -> u64 {
        self.inbound(OFF_PUBLISHED).wrapping_sub(rx.consumed)
    }

    /// The sender's answer to `request`, if the answer word holds it.
    fn answer_to(&self, request: Request) -> Option<Answer> {
        Answer::decode(self.inbound(OFF_ANSWER)).filter(|a| a.seq == request.seq())
    }

    /// Asks the sender, waits for its answer (or the peer's sender finishing, which
    /// answers a kernel request too). None: no answer comes (the fabric failed, the peer is
    /// lost or gone): the receiver fails over.
    fn ask(&self, rx: &mut Receiver, request: Request) -> io::Result<Option<Answer>> {
        rx.next_seq = rx.next_seq.wrapping_add(1).max(1);
        let mut asked = false;
        let mut pace = Pace::new(&self.exports.fabric);
        loop {
            if let Some(a) = self.answer_to(request).filter(|_| asked) {
                return Ok(Some(a));
            }
            // A sender that finished answers every request: kernel mode at its final R,
            // the ring refused. Unless it answered ours before it finished: that answer
            // landed before the finish (the finish is written after the serving lock),
            // and may have granted the ring, whose bytes the final R then counts; so the
            // answer is looked at again once the finish is seen.
            #[cfg(test)]
            if asked {
                std::thread::sleep(*lock(&self.answer_look_pause));
            }
            let finished = self.inbound(OFF_TX_FINISHED);
            if finished & FINISHED_BIT != 0 {
                if let Some(a) = self.answer_to(request).filter(|_| asked) {
                    return Ok(Some(a));
                }
                let kernel = matches!(request, Request::Kernel { .. });
                return Ok(Some(Answer { seq: request.seq(), accepted: kernel, count: finished & COUNT_MASK }));
            }
            if !self.peer_reachable() || anchor_ended(self.fd()) || self.failed.load(Ordering::Acquire) {
                // Its sender may have finished just before its kernel ended the anchor.
                if self.inbound(OFF_TX_FINISHED) & FINISHED_BIT != 0 {
                    continue;
                }
                return Ok(None);
            }
            if !asked {
                if request.is_ring() {
                    // If it grants the ring, the first kernel bytes after may be a record.
                    rx.checkpoint = true;
                }
                let written = self.out().and_then(|o| o.store_release_u64(OFF_REQUEST, request.encode()));
                // Landed before the doorbell rings: the sender reads it when woken.
                if written.and_then(|()| self.flush_out()).is_err() {
                    return Ok(None);
                }
                let _ = self.peer_request_bell.trigger();
                asked = true;
                continue;
            }
            if pace.elapsed() > FABRIC_BOUND {
                return Ok(None);
            }
            if pace.elapsed() > RECEIVE_SPIN
                && !kernel_empty(self.fd())
                && matches!(self.look_on_anchor(true), Look::Record { .. })
            {
                // The sender failed over (its record is on the anchor): no answer comes.
                return Ok(None);
            }
            pace.step(RECEIVE_SPIN, || {
                let _ = self.exports.answer_bell.wait(Timeout::After(WAIT_STEP));
            });
        }
    }

    fn recv(&self, buf: &mut [u8], mode: CallMode) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut rx = lock(&self.rx);
        let r = self.recv_locked(&mut rx, buf, mode);
        if r.is_ok() {
            self.tell_consumed(&mut rx);
        }
        match r {
            // Only a reset another call reported already gives EPIPE (a kernel receive
            // never does): for a receive that is the end of the stream.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => {
                rx.mode = RxMode::Reset;
                Ok(0)
            }
            r => r,
        }
    }

    fn recv_locked(&self, rx: &mut Receiver, buf: &mut [u8], mode: CallMode) -> io::Result<usize> {
        let mut pace: Option<Pace<'_>> = None;
        loop {
            if self.broken.load(Ordering::Acquire) && !matches!(rx.mode, RxMode::Reset) {
                rx.mode = RxMode::Reset;
            }
            if self.failed.load(Ordering::Acquire) && matches!(rx.mode, RxMode::Ring { .. }) {
                self.fail_over_rx(rx);
            }
            match rx.mode {
                RxMode::Ring { delivered } => {
                    let available = self.ring_available(rx);
                    if available > 0 {
                        if available > self.exports.ring_bytes as u64 {
                            return Err(self.fail());
                        }
                        let n = self.read_ring(rx, available, buf)?;
                        rx.mode = RxMode::Ring { delivered: delivered + n as u64 };
                        return Ok(n);
                    }
                    let finished = self.inbound(OFF_TX_FINISHED);
                    if finished & FINISHED_BIT != 0 {
                        rx.mode = RxMode::Kernel { ring_until: finished & COUNT_MASK };
                        continue;
                    }
                    if mode.nonblocking && kernel_empty(self.fd()) && self.peer_alive() && !anchor_ended(self.fd()) {
                        // Nothing in the ring nor in the kernel (where a sender whose ring
                        // was full puts its bytes): kernel TCP's answer.
                        return Err(io::Error::from_raw_os_error(libc::EAGAIN));
                    }
                    let spin = Duration::from_nanos(self.receive_spin_ns.load(Ordering::Relaxed));
                    let p = pace.get_or_insert_with(|| Pace::new(&self.exports.fabric));
                    // A long spin looks at the anchor now and then: bytes there mean the sender
                    // left the ring (or failed over), and this receiver must ask.
                    if p.elapsed() < spin
                        && self.peer_reachable()
                        && !mode.nonblocking
                        && (!p.look_due() || kernel_empty(self.fd()))
                        && !mode.interrupted(self.fd())
                    {
                        p.step(spin, || {});
                        continue;
                    }
                    pace = None;
                    // A short stint did not pay for the pause that brought it: ask less often.
                    rx.wanted_every = if delivered < RING_WANTED_EVERY {
                        (rx.wanted_every * 2).min(rx.wanted_every_max)
                    } else {
                        rx.wanted_every_min
                    };
                    // About to sleep: ask for kernel mode, and sleep only once answered.
                    self.leave_ring(rx, delivered)?;
                }
                RxMode::Kernel { .. } if rx.resent.is_some() => {
                    if let Some(n) = self.read_resent(rx, buf, mode)? {
                        return Ok(n);
                    }
                }
                RxMode::Kernel { ring_until } => {
                    if rx.consumed & COUNT_MASK != ring_until {
                        // Ring bytes before the kernel's: wait for them to land.
                        let available = self.ring_available(rx);
                        if available > 0 {
                            let want = ring_until.wrapping_sub(rx.consumed) & COUNT_MASK;
                            if available > self.exports.ring_bytes as u64 {
                                return Err(self.fail());
                            }
                            return self.read_ring(rx, available.min(want), buf);
                        }
                        let p = pace.get_or_insert_with(|| Pace::new(&self.exports.fabric));
                        // The sender sends through the kernel only once these landed: bytes
                        // there (or its end) mean it failed over, as a lost peer or a failed
                        // fabric says, or a wait this long.
                        let anchor_moved = p.elapsed() > RECEIVE_SPIN && !kernel_empty(self.fd());
                        let fabric_gone = !self.peer_reachable() || anchor_ended(self.fd());
                        if anchor_moved || fabric_gone || p.elapsed() > FABRIC_BOUND {
                            self.fail_over_rx(rx);
                        } else {
                            p.step(RECEIVE_SPIN, || std::thread::sleep(WAIT_STEP));
                        }
                        continue;
                    }
                    if !self.given_up.load(Ordering::Acquire) && self.may_ask_ring(rx) && kernel_empty(self.fd()) {
                        self.tell_consumed(rx);
                        self.ring_requests.fetch_add(1, Ordering::Relaxed);
                        let seq = rx.next_seq;
                        let request = Request::Ring { seq, kernel_read: rx.kernel_read };
                        match self.ask(rx, request)? {
                            Some(a) if a.accepted => {
                                rx.mode = RxMode::Ring { delivered: 0 };
                                rx.wanted_read_told = None;
                                pace = None;
                                continue;
                            }
                            Some(_) => {
                                // The sender's kernel bytes were on their way (a response
                                // racing the request): a round trip for nothing, as a stint
                                // that delivered nothing is.
                                self.ring_refusals.fetch_add(1, Ordering::Relaxed);
                                Self::back_off(rx);
                            }
                            None => {
                                self.fail_over_rx(rx);
                                continue;
                            }
                        }
                    }
                    pace = None;
                    if mode.interrupted(self.fd()) && kernel_empty(self.fd()) {
                        // A handler ran while this call spun or waited for the sender's
                        // answer: the kernel's receive would have ended with it.
                        return Err(io::Error::from_raw_os_error(libc::EINTR));
                    }
                    if rx.checkpoint {
                        // The first kernel bytes after a ring stint: a fail-over record?
                        match self.look_on_anchor(mode.never_waits()) {
                            Look::Record { start, len } => {
                                self.take_record(rx, start, len)?;
                                continue;
                            }
                            Look::Nothing => return Err(io::Error::from_raw_os_error(libc::EAGAIN)),
                            // A signal: the look is the next call's.
                            Look::Error(e) if e.raw_os_error() == Some(libc::EINTR) => return Err(e),
                            // The peek took the kernel's error (a reset): it is this call's.
                            Look::Error(e) => {
                                rx.checkpoint = false;
                                return Err(e);
                            }
                            Look::Data | Look::End => rx.checkpoint = false,
                        }
                    }
                    // SAFETY: a read into the caller's buffer, valid for writes.
                    let r = unsafe { libc::recv(self.fd(), buf.as_mut_ptr().cast(), buf.len(), mode.kernel_flags) };
                    if r < 0 {
                        return Err(io::Error::last_os_error());
                    }
                    rx.kernel_read += r as u64;
                    self.received_kernel.fetch_add(r as u64, Ordering::Relaxed);
                    rx.kernel_since_wanted += r as u64;
                    if rx.kernel_since_wanted >= rx.wanted_every && !self.given_up.load(Ordering::Acquire) {
                        rx.kernel_since_wanted = 0;
                        if rx.ring_skip > 0 {
                            // A steady stream never sleeps: its back-off runs out in these
                            // steps instead.
                            rx.ring_skip -= 1;
                        } else if self.peer_may_give_ring() {
                            rx.wanted_told += 1;
                            self.tell_ring_wanted(rx);
                        }
                    } else if rx.wanted_read_told.is_some_and(|told| rx.kernel_read - told >= CONSUMED_BATCH) {
                        // The sender holds back while this moves.
                        self.tell_ring_wanted(rx);
                    }
                    return Ok(r as usize);
                }
                RxMode::FailedOver => {
                    let available = self.ring_available(rx);
                    if available > self.exports.ring_bytes as u64 {
                        return Err(self.fail());
                    }
                    if available > 0 {
                        // The sender may not have seen the failure: its ring goes on.
                        return self.read_ring(rx, available, buf);
                    }
                    let finished = self.inbound(OFF_TX_FINISHED);
                    if finished & FINISHED_BIT != 0 {
                        // It finished before the failure: the ring to its final count.
                        rx.mode = RxMode::Kernel { ring_until: finished & COUNT_MASK };
                        continue;
                    }
                    let nonblocking = mode.never_waits();
                    if !nonblocking {
                        if mode.interrupted(self.fd()) {
                            return Err(io::Error::from_raw_os_error(libc::EINTR));
                        }
                        // Wait for the anchor in short steps, looking at the ring between.
                        let mut p = libc::pollfd { fd: self.fd(), events: libc::POLLIN | libc::POLLRDHUP, revents: 0 };
                        // SAFETY: poll on one pollfd that outlives the call.
                        if unsafe { libc::poll(&mut p, 1, 10) } == 0 {
                            continue;
                        }
                    }
                    match self.look_on_anchor(true) {
                        Look::Record { start, len } => {
                            self.take_record(rx, start, len)?;
                            rx.mode = RxMode::Kernel { ring_until: rx.consumed & COUNT_MASK };
                        }
                        Look::Data => {
                            // No record: the sender proved its ring bytes landed before it
                            // sent these, so the ring ends at its landed count.
                            rx.checkpoint = false;
                            rx.mode = RxMode::Kernel { ring_until: self.inbound(OFF_PUBLISHED) & COUNT_MASK };
                        }
                        Look::End => {
                            // A finish lands before the peer's kernel sends its end: looked
                            // at again, it may be there now. Without it (and without a
                            // record) what the peer sent last may not have arrived (it was
                            // killed): never a clean end.
                            let finished = self.inbound(OFF_TX_FINISHED);
                            rx.mode = if finished & FINISHED_BIT != 0 {
                                RxMode::Kernel { ring_until: finished & COUNT_MASK }
                            } else {
                                RxMode::Reset
                            };
                        }
                        Look::Nothing if nonblocking => return Err(io::Error::from_raw_os_error(libc::EAGAIN)),
                        Look::Nothing => {}
                        Look::Error(e) if e.raw_os_error() == Some(libc::EINTR) => return Err(e),
                        Look::Error(e) => {
                            rx.checkpoint = false;
                            rx.mode = RxMode::Kernel { ring_until: rx.consumed & COUNT_MASK };
                            return Err(e);
                        }
                    }
                }
                RxMode::Reset => {
                    // Landed ring bytes first, then the reset once, then the end.
                    let available = self.ring_available(rx);
                    if available > 0 && available <= self.exports.ring_bytes as u64 {
                        return self.read_ring(rx, available, buf);
                    }
                    if self.reset_reported.swap(true, Ordering::AcqRel) {
                        return Ok(0);
                    }
                    take_kernel_reset(self.fd());
                    return Err(reset_error());
                }
            }
        }
    }

    /// Tells the sender the receiver wants the ring, with how far it read the kernel. A
    /// hint, not a request: a lost or late one changes no rule.
    fn tell_ring_wanted(&self, rx: &mut Receiver) {
        let word = (rx.wanted_told & u64::from(u32::MAX)) << 32 | (rx.kernel_read & COUNT_MASK);
        let _ = self.outbound.store_release_u64(OFF_RING_WANTED, word);
        rx.wanted_read_told = Some(rx.kernel_read);
    }

    /// A ring request or stint that did not pay: the receiver's next ring requests wait
    /// twice as many sleeps (up to 64).
    fn back_off(rx: &mut Receiver) {
        rx.ring_backoff = (rx.ring_backoff * 2).clamp(1, 64).min(rx.backoff_max);
        rx.ring_skip = rx.ring_backoff;
    }

    /// The receiver's lock, waited for at most 100 ms: a holder that keeps it longer sleeps
    /// in the kernel, which it does only in kernel mode (None then).
    fn rx_lock_briefly(&self) -> Option<MutexGuard<'_, Receiver>> {
        let until = Instant::now() + Duration::from_millis(100);
        loop {
            match self.rx.try_lock() {
                Ok(g) => return Some(g),
                Err(std::sync::TryLockError::Poisoned(e)) => return Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) if Instant::now() < until => {
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(std::sync::TryLockError::WouldBlock) => return None,
            }
        }
    }

    /// Asks the peer's sender for kernel mode before this receiver waits in the kernel
    /// (a ring stint that delivered nothing makes the next ring request wait longer).
    fn leave_ring(&self, rx: &mut Receiver, delivered: u64) -> io::Result<()> {
        if delivered >= RING_PAYS {
            rx.ring_backoff = 0;
            rx.ring_skip = 0;
        } else {
            Self::back_off(rx);
        }
        self.kernel_requests.fetch_add(1, Ordering::Relaxed);
        let seq = rx.next_seq;
        match self.ask(rx, Request::Kernel { seq })? {
            Some(a) => rx.mode = RxMode::Kernel { ring_until: a.count },
            None => self.fail_over_rx(rx),
        }
        Ok(())
    }

    fn give_up(&self) -> io::Result<()> {
        if self.given_up.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.finish_sending()?;
        // A receiver holding the lock for long sleeps in the kernel: in kernel mode already.
        let Some(mut rx) = self.rx_lock_briefly() else { return Ok(()) };
        if let RxMode::Ring { delivered } = rx.mode {
            self.leave_ring(&mut rx, delivered)?;
        }
        Ok(())
    }

    /// Whether this end's ring is read to its end for good (given up, or reset).
    fn ring_drained(&self) -> bool {
        let Ok(rx) = self.rx.try_lock() else { return false };
        match rx.mode {
            RxMode::Kernel { ring_until } => rx.consumed & COUNT_MASK == ring_until && rx.resent.is_none(),
            RxMode::Reset | RxMode::FailedOver | RxMode::Ring { .. } => false,
        }
    }

    fn readable_without_kernel(&self) -> bool {
        if self.broken.load(Ordering::Acquire) {
            return true;
        }
        let Ok(rx) = self.rx.try_lock() else { return false };
        match rx.mode {
            RxMode::Kernel { .. } if rx.resent.is_some() => false,
            RxMode::Ring { .. } | RxMode::FailedOver => self.ring_available(&rx) > 0,
            RxMode::Kernel { ring_until } => rx.consumed & COUNT_MASK != ring_until && self.ring_available(&rx) > 0,
            RxMode::Reset => true,
        }
    }

    fn prepare_to_wait(&self) -> bool {
        if self.broken.load(Ordering::Acquire) {
            return true;
        }
        let Some(mut rx) = self.rx_lock_briefly() else { return false };
        if let RxMode::Ring { delivered } = rx.mode {
            if self.ring_available(&rx) > 0 {
                return true;
            }
            let finished = self.inbound(OFF_TX_FINISHED);
            if finished & FINISHED_BIT != 0 {
                rx.mode = RxMode::Kernel { ring_until: finished & COUNT_MASK };
            } else if self.leave_ring(&mut rx, delivered).is_err() {
                return true; // the error is the next receive's
            }
        }
        match rx.mode {
            RxMode::Kernel { .. } if rx.resent.is_some() => false,
            RxMode::Kernel { ring_until } if rx.consumed & COUNT_MASK != ring_until => {
                // Announced ring bytes, in flight; unless they never land (the sender then
                // fails over through the anchor, whose readiness wakes the wait).
                let failing = self.failed.load(Ordering::Acquire) || self.peer_gone();
                self.ring_available(&rx) > 0 || !failing && kernel_empty(self.fd())
            }
            RxMode::Kernel { .. } => false,
            // The ring's landed bytes; else the anchor, which the sender uses now.
            RxMode::FailedOver => self.ring_available(&rx) > 0,
            RxMode::Ring { .. } | RxMode::Reset => true,
        }
    }

    fn peek_ring(&self, buf: &mut [u8], mode: CallMode) -> Option<io::Result<usize>> {
        let rx = lock(&self.rx);
        let RxMode::Kernel { ring_until } = rx.mode else { return None };
        let want = ring_until.wrapping_sub(rx.consumed) & COUNT_MASK;
        if want == 0 || buf.is_empty() {
            return None;
        }
        // Announced ring bytes are in flight: they come before anything of the kernel's.
        let mut pace = Pace::new(&self.exports.fabric);
        let available = loop {
            let available = self.ring_available(&rx);
            if available > self.exports.ring_bytes as u64 {
                return Some(Err(self.fail()));
            }
            if available > 0 {
                break available.min(want);
            }
            if self.peer_gone() || pace.elapsed() > FABRIC_BOUND {
                return None;
            }
            pace.step(RECEIVE_SPIN, || std::thread::sleep(WAIT_STEP));
        };
        let n = (available as usize).min(buf.len());
        if let Err(e) = self.copy_ring(rx.consumed, &mut buf[..n]) {
            return Some(Err(e));
        }
        let mut total = n;
        if n as u64 == want && n < buf.len() {
            // The kernel's bytes follow the ring's, as one kernel peek would return both.
            let rest = &mut buf[n..];
            let flags = (mode.kernel_flags | libc::MSG_PEEK | libc::MSG_DONTWAIT) & !libc::MSG_WAITALL;
            // SAFETY: a peek into the rest of the caller's buffer, valid for writes.
            let r = unsafe { libc::recv(self.fd(), rest.as_mut_ptr().cast(), rest.len(), flags) };
            total += r.max(0) as usize;
        }
        Some(Ok(total))
    }

    /// Copies `buf.len()` ring bytes from position `from` (they have landed) into `buf`.
    fn copy_ring(&self, from: u64, buf: &mut [u8]) -> io::Result<()> {
        let n = buf.len();
        let (at, first) = ring_span(from, n, self.exports.ring_bytes);
        let inbound = &self.exports.inbound;
        inbound
            .read_bytes(HEADER_BYTES + at, &mut buf[..first])
            .and_then(|()| if first < n { inbound.read_bytes(HEADER_BYTES, &mut buf[first..n]) } else { Ok(()) })
            .map_err(fabric_io)
    }

    /// Whether the peer is ready and its sender has not finished.
    fn peer_may_give_ring(&self) -> bool {
        self.inbound(OFF_READY) == READY_MAGIC && self.inbound(OFF_TX_FINISHED) & FINISHED_BIT == 0
    }

    /// Whether a caught-up receiver may ask for the ring now: the peer may give it, and the
    /// back-off after fruitless ring stints has run out.
    fn may_ask_ring(&self, rx: &mut Receiver) -> bool {
        if !self.peer_may_give_ring() || self.failed.load(Ordering::Acquire) {
            return false;
        }
        if rx.ring_skip > 0 {
            rx.ring_skip -= 1;
            return false;
        }
        true
    }
}

/// Resets the anchor without closing the caller's descriptor: `connect(AF_UNSPEC)` on an
/// established TCP socket makes the kernel send a reset (the peer's calls fail with
/// `ECONNRESET`, as ours do from now on), and the pending error is taken.
fn reset_anchor(fd: RawFd) {
    // SAFETY: a zeroed sockaddr with family AF_UNSPEC, passed with its size; no memory is
    // kept by the call.
    unsafe {
        let mut unspec: libc::sockaddr = std::mem::zeroed();
        unspec.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
        libc::connect(fd, &unspec, size_of::<libc::sockaddr>() as libc::socklen_t);
    }
    let mut err: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_ERROR writes one int and its length into our locals.
    unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR, (&mut err as *mut libc::c_int).cast(), &mut len) };
}

/// Whether the peer's end of `fd` is closed or reset (without reading anything).
fn anchor_ended(fd: RawFd) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLRDHUP, revents: 0 };
    // SAFETY: poll on one pollfd that outlives the call, no waiting.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

/// Whether `fd` was reset or shut down both ways (a half-closed peer may still read).
fn anchor_reset(fd: RawFd) -> bool {
    let mut p = libc::pollfd { fd, events: 0, revents: 0 };
    // SAFETY: poll on one pollfd that outlives the call, no waiting.
    let r = unsafe { libc::poll(&mut p, 1, 0) };
    r > 0 && p.revents & (libc::POLLHUP | libc::POLLERR) != 0
}

/// Reports the peer's death as the kernel would have, once: waits (at most a second) for
/// the dead peer's kernel to end the anchor, then takes the anchor's pending error (the
/// reset), so that, as on kernel TCP, the next send fails with `EPIPE` rather than
/// reporting the reset a second time.
fn take_kernel_reset(fd: RawFd) {
    let mut p = libc::pollfd { fd, events: libc::POLLIN | libc::POLLRDHUP, revents: 0 };
    // SAFETY: poll on one pollfd that outlives the call.
    unsafe { libc::poll(&mut p, 1, 1000) };
    let mut err: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_ERROR writes one int and its length into our locals.
    unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_ERROR, (&mut err as *mut libc::c_int).cast(), &mut len) };
}

/// Whether the kernel holds no byte to read on `fd` (FIONREAD 0; an error counts as not
/// empty, so the receiver reads and sees it).
fn kernel_empty(fd: RawFd) -> bool {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int into `n`.
    let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut n) };
    r == 0 && n == 0
}

/// Where `len` bytes at ring count `count` lie in a ring of `cap` bytes (a power of two):
/// the offset of their first part and its length; the rest, if any, starts at 0.
fn ring_span(count: u64, len: usize, cap: usize) -> (usize, usize) {
    let at = (count as usize) & (cap - 1);
    (at, len.min(cap - at))
}

/// Keeps `bytes`, about to be written into the peer's ring at the sender's `published`,
/// in the sender's copy of that ring (`cap` bytes).
fn keep_copy(tx: &mut Sender, cap: usize, bytes: &[u8]) {
    if tx.copy.len() != cap {
        tx.copy = vec![0; cap];
    }
    let (at, first) = ring_span(tx.published, bytes.len(), cap);
    tx.copy[at..at + first].copy_from_slice(&bytes[..first]);
    tx.copy[..bytes.len() - first].copy_from_slice(&bytes[first..]);
}

/// Sends `bytes` on the anchor, waiting for room (even on a non-blocking descriptor) up to
/// `bound` (None: for as long as it takes): how many went, with the error that stopped it
/// short (`EAGAIN` when the bound passed).
fn send_on_anchor(fd: RawFd, bytes: &[u8], bound: Option<Duration>) -> Result<usize, (usize, io::Error)> {
    let start = Instant::now();
    let mut sent = 0;
    while sent < bytes.len() {
        let rest = &bytes[sent..];
        // SAFETY: a send from our buffer, valid for reads.
        let r = unsafe { libc::send(fd, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) };
        if r >= 0 {
            sent += r as usize;
            continue;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => {}
            Some(libc::EAGAIN) if bound.is_none_or(|b| start.elapsed() < b) => {
                let mut p = libc::pollfd { fd, events: libc::POLLOUT, revents: 0 };
                // SAFETY: poll on one pollfd that outlives the call.
                unsafe { libc::poll(&mut p, 1, 100) };
            }
            _ => return Err((sent, e)),
        }
    }
    Ok(sent)
}

/// A random key for this end's fail-over records.
fn random_key() -> u64 {
    let mut key = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into our buffer.
    let n = unsafe { libc::getrandom(key.as_mut_ptr().cast(), key.len(), 0) };
    if n != 8 {
        // Never expected (getrandom does not fail for 8 bytes); still a key unlike zero.
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        return t.as_nanos() as u64 ^ u64::from(std::process::id()) << 32 | 1;
    }
    u64::from_le_bytes(key)
}

#[cfg(test)]
mod tests;
