//! Accelerated sockets of this process: the fd table and each socket's records.

use rustc_hash::FxHashMap;
use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use lanes::sockets::direction::ring_unread_within;
use lanes::sockets::endpoint::StreamHistory;
use lanes::sockets::endpoint::{
    this_process, FLAG_ATTACHED, FLAG_PEER_FOUND, FLAG_RX_CLOSED, FLAG_RX_LOWAT, FLAG_RX_RETIRED, FLAG_TX_CLOSED,
};
use lanes::sockets::{ConnectionKey, Endpoint};

use crate::config::{config, record_failed, wanted, Wanted};
use crate::real::real;
use crate::reasons::{self, Reason};
use crate::sock_diag;
// The socket's own address or its peer's, as the kernel reports it: one reader for TCP and UDP.
use crate::udp::name_of;

/// One accelerated socket (one open file description) as this process sees it.
pub struct Conn {
    pub own: Endpoint,
    peer: OnceLock<Endpoint>,
    /// The fd table entries of this process pointing here (dup).
    pub key: ConnectionKey,
    /// Our receiving direction is shut (SHUT_RD): reads go to the kernel from now on.
    pub rx_shut: AtomicBool,
    /// The peer's consumed count as last read by a sender of this process.
    peer_consumed: AtomicU64,
    /// The peer's published count as last read by a receiver of this process.
    peer_published: AtomicU64,
    /// Threads of this process reading or waiting in the kernel alone because the peer's
    /// direction is parked (see `park`).
    pub(crate) parked_readers: AtomicU32,
    /// When this process next tries to switch the peer's direction back to the ring (see
    /// `stream::maybe_ring_mode`).
    pub(crate) flip: FlipCell,
    /// This process backed our ring with memory (`Endpoint::populate_ring`), as it must
    /// before it first writes there.
    pub(crate) ring_backed: AtomicBool,
    /// TCP_INQ of the kernel socket as this process knows it (`stream::inq_wanted`).
    pub(crate) inq: AtomicU8,
    /// When this process made or opened the record.
    created: std::time::Instant,
    /// This process sent the socket to another one (SCM_RIGHTS): its last close here
    /// waits a moment for the receiver to take the record over ([`forget`]).
    pub(crate) passed: AtomicBool,
}

/// The back-off of tries to switch a direction back to the ring (`stream::flip_due`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlipBackoff {
    /// Kernel reads to let pass before the next try.
    pub skip: u32,
    /// The current back-off.
    pub backoff: u32,
    /// Reads that found ring bytes since the last switch, counted up to [`PAYING_READS`].
    pub ring_reads: u32,
    /// Tries that did not pay, less half for each that did: at [`RETIRE_AFTER`], held for
    /// [`RETIRE_SPAN`], the direction is retired from the ring for good
    /// (`stream::maybe_ring_mode`).
    pub fruitless: u32,
    /// Since when the fruitless tries have been at least half [`RETIRE_AFTER`] (a coarse
    /// clock in milliseconds, modulo [`FlipCell::SINCE_MODULUS`]).
    pub since_ms: u32,
}

impl FlipBackoff {
    /// Whether the last switch paid: the receiver kept finding bytes in the ring.
    pub fn paid(&self) -> bool {
        self.ring_reads >= PAYING_READS
    }
}

/// Reads of ring bytes after which a switch to the ring paid. One is what a receiver gets
/// that happened to be busy when a single message came: it saves that message's system
/// calls, less than the switch and the sleeping protocol cost (PostgreSQL's connections,
/// tried again and again for that, ran TPC-B 8% slower than kernel TCP); a receiver the
/// ring serves finds bytes there again.
pub const PAYING_READS: u32 = 2;

/// Fruitless tries after which a direction is retired from the ring: with the back-off
/// doubling to 64 kernel reads, several hundred reads in a row found nobody waiting for
/// ring bytes.
pub const RETIRE_AFTER: u32 = 12;

/// How long tries must have gone on not paying before a direction is retired: a connection's
/// first milliseconds (both ends learning their spin, a peer still asleep from a pause, a
/// burst before the first answer) fail a dozen tries in a row where the ring then pays at
/// every message; retiring there lost sockperf's ping-pong to kernel TCP for good.
pub const RETIRE_SPAN: std::time::Duration = std::time::Duration::from_millis(1000);

/// A [`FlipBackoff`] the threads of a process share: a hint, so a torn update between two
/// threads costs at most one try too many or too few.
pub struct FlipCell(AtomicU64);

impl FlipCell {
    /// Skip, back-off and fruitless take 12 bits each (they stay at most 64 and a few dozen),
    /// the ring reads two, the streak's start the other 26 (18 hours of milliseconds).
    const FIELD: u32 = (1 << 12) - 1;
    pub const SINCE_MODULUS: u32 = 1 << 26;

    fn new() -> Self {
        FlipCell(AtomicU64::new(Self::pack(FlipBackoff {
            skip: 0,
            backoff: 0,
            ring_reads: PAYING_READS,
            fruitless: 0,
            since_ms: 0,
        })))
    }
    fn pack(f: FlipBackoff) -> u64 {
        let m = Self::FIELD;
        u64::from(f.skip.min(m))
            | u64::from(f.backoff.min(m)) << 12
            | u64::from(f.fruitless.min(m)) << 24
            | u64::from(f.since_ms % Self::SINCE_MODULUS) << 36
            | u64::from(f.ring_reads.min(PAYING_READS)) << 62
    }
    #[inline]
    pub fn get(&self) -> FlipBackoff {
        let m = u64::from(Self::FIELD);
        let v = self.0.load(Ordering::Relaxed);
        FlipBackoff {
            skip: (v & m) as u32,
            backoff: (v >> 12 & m) as u32,
            fruitless: (v >> 24 & m) as u32,
            since_ms: (v >> 36 & u64::from(Self::SINCE_MODULUS - 1)) as u32,
            ring_reads: (v >> 62) as u32,
        }
    }
    #[inline]
    pub fn set(&self, f: FlipBackoff) {
        self.0.store(Self::pack(f), Ordering::Relaxed);
    }
}

impl Conn {
    /// A connection of our endpoint `own`, its peer not attached yet.
    pub(crate) fn new(own: Endpoint, key: ConnectionKey) -> Arc<Conn> {
        Arc::new(Conn {
            own,
            peer: OnceLock::new(),
            key,
            rx_shut: AtomicBool::new(false),
            peer_consumed: AtomicU64::new(UNSEEN),
            peer_published: AtomicU64::new(UNSEEN),
            parked_readers: AtomicU32::new(0),
            flip: FlipCell::new(),
            ring_backed: AtomicBool::new(false),
            inq: AtomicU8::new(crate::stream::INQ_UNKNOWN),
            created: std::time::Instant::now(),
            passed: AtomicBool::new(false),
        })
    }

    /// The peer's record, attaching it once the peer has published one the kernel vouches
    /// for. None: the peer has no library (yet), everything goes through the kernel.
    pub fn peer(&self) -> Option<&Endpoint> {
        if let Some(p) = self.peer.get() {
            return Some(p);
        }
        if !self.own.has_flag(FLAG_PEER_FOUND) {
            return None;
        }
        self.attach_peer()
    }

    fn attach_peer(&self) -> Option<&Endpoint> {
        // Under a seccomp filter, opening the record and asking sock_diag are system calls
        // the program never makes (the filter may kill for them): the connection stays
        // kernel TCP in our direction, which is always correct.
        if crate::sandbox::filtered() {
            return None;
        }
        let peer_key = self.key.reversed();
        let peer = Endpoint::open(&config().fabric_dir, &peer_key).ok()?;
        // The kernel must confirm that the socket at the other end of our connection is the
        // one the record describes: a stale record of an earlier connection with the same
        // addresses, or a forged one, is never used.
        if sock_diag::cookie_of(&peer_key) != Some(peer.cookie()) {
            return None;
        }
        let _ = self.peer.set(peer);
        self.own.set_flags(FLAG_ATTACHED);
        self.peer.get()
    }

    /// Whether ring bytes from the peer are waiting (readiness without a system call). The
    /// sender's view first: the receive that follows reads it anyway, and the state word's
    /// line then stays the sender's.
    pub fn ring_readable(&self) -> bool {
        match self.peer.get() {
            Some(p) => {
                let word = p.tx_word();
                let consumed = self.own.rx_consumed().load(Ordering::Acquire);
                word.view_unread(consumed, p.ring_bytes()) > 0 || word.load().ring_unread(consumed) > 0
            }
            None => false,
        }
    }

    /// Ring bytes from the peer not yet read.
    pub fn ring_unread(&self) -> u64 {
        match self.peer.get() {
            Some(p) => p.tx_word().load().ring_unread(self.own.rx_consumed().load(Ordering::Acquire)),
            None => 0,
        }
    }

    /// The receive low-water mark the ring's bytes are counted against: the program's
    /// SO_RCVLOWAT while it is above 1 (`FLAG_RX_LOWAT`), else 1.
    pub fn rx_lowat(&self) -> u64 {
        if self.own.has_flag(FLAG_RX_LOWAT) {
            u64::from(self.own.rx_lowat().load(Ordering::Relaxed).max(1))
        } else {
            1
        }
    }

    /// Whether the ring's bytes alone make the socket readable (a wait reports them): any,
    /// or as many as the low-water mark asks for. Fewer than that are left to the kernel,
    /// whose own mark counts them (see `stream::sync_kernel_lowat`).
    pub fn ring_input_ready(&self) -> bool {
        // The sender's view first (see `ring_readable`); the word when it shows too few.
        let lowat = self.rx_lowat();
        if let Some(p) = self.peer.get() {
            let consumed = self.own.rx_consumed().load(Ordering::Acquire);
            if p.tx_word().view_unread(consumed, p.ring_bytes()) >= lowat {
                return true;
            }
        }
        let unread = self.ring_unread();
        unread > 0 && (unread >= lowat)
    }

    /// The peer's consumed count as last seen (never ahead of the real one), if any.
    ///
    /// Safe to compute room with: a sender publishes only into the room a value showed,
    /// so published minus any value still cached stays within the ring's size, far below
    /// the 2^28 at which the state word's counters wrap.
    pub fn peer_consumed_seen(&self) -> Option<u64> {
        Some(self.peer_consumed.load(Ordering::Relaxed)).filter(|c| *c != UNSEEN)
    }

    /// Records a consumed count just read from the peer's record.
    pub fn saw_peer_consumed(&self, consumed: u64) {
        self.peer_consumed.store(consumed, Ordering::Relaxed);
    }

    /// Ring bytes from the peer not yet read, given our consumed count, as far as the
    /// published count last seen shows them (0 if it shows none, or if another process
    /// holding the socket read past it). The peer's state word lives on the sender's cache
    /// line, which its every publish takes back: reading it at every receive cost a cache
    /// miss per message while the ring was full of them.
    #[inline]
    pub fn seen_ring_unread(&self, consumed: u64, ring_bytes: usize) -> u64 {
        let seen = self.peer_published.load(Ordering::Acquire);
        if seen == UNSEEN {
            return 0;
        }
        ring_unread_within(seen, consumed, ring_bytes)
    }

    /// Records a published count just read from the peer's state word (with acquire
    /// ordering, so the bytes it counts are visible to whoever reads this value: release).
    #[inline]
    pub fn saw_peer_published(&self, published: u64) {
        self.peer_published.store(published, Ordering::Release);
    }

    /// Whether our side is O_NONBLOCK.
    pub fn nonblocking(&self) -> bool {
        self.own.nonblocking().load(Ordering::Relaxed) != 0
    }

    /// This end retired the peer's direction from the ring ([`FLAG_RX_RETIRED`]): receives
    /// and waits are the kernel's alone.
    #[inline]
    pub fn rx_retired(&self) -> bool {
        self.own.has_flag(FLAG_RX_RETIRED)
    }

    /// The peer retired this end's sending direction from the ring: sends are the kernel's
    /// alone.
    #[inline]
    pub fn tx_retired(&self) -> bool {
        self.peer().is_some_and(|p| p.has_flag(FLAG_RX_RETIRED))
    }
}

/// `Conn::peer_consumed` before anything was read.
const UNSEEN: u64 = u64::MAX;

/// fd -> Conn. `MAYBE[fd]` lets every call on other fds skip the lock.
const FAST_FDS: usize = 1 << 16;
static MAYBE: [AtomicU8; FAST_FDS] = [const { AtomicU8::new(0) }; FAST_FDS];
static TABLE: OnceLock<RwLock<FxHashMap<i32, Arc<Conn>>>> = OnceLock::new();

fn table() -> &'static RwLock<FxHashMap<i32, Arc<Conn>>> {
    TABLE.get_or_init(|| RwLock::new(FxHashMap::default()))
}

/// The table, held across a fork ([`crate::fork_locks`]).
pub fn hold_for_fork(by: Option<std::time::Instant>) -> Option<crate::fork_locks::Held> {
    crate::fork_locks::write_by(table(), by).map(|g| Box::new(g) as crate::fork_locks::Held)
}

/// Bumped by every change of the table: a thread's cached lookup is valid while it stays.
static GENERATION: AtomicU64 = AtomicU64::new(0);

/// Entries of a thread's lookup cache (by fd modulo this).
const CACHED_FDS: usize = 8;

/// A cached lookup: the fd, the table's generation then, and the socket.
type CachedLookup = Option<(i32, u64, Arc<Conn>)>;

thread_local! {
    /// This thread's recent lookups (fd, table generation, result), by fd modulo
    /// [`CACHED_FDS`]: a thread serving a few sockets in turn (a client with one connection
    /// per server process) finds them without the table's lock, which its other threads
    /// take too.
    static RECENT: RefCell<[CachedLookup; CACHED_FDS]> =
        const { RefCell::new([const { None }; CACHED_FDS]) };
    /// Per entry of [`RECENT`], this thread's [`ConnRef`]s that borrow its socket: an
    /// entry in use is not replaced.
    static PINS: [Cell<u32>; CACHED_FDS] = const { [const { Cell::new(0) }; CACHED_FDS] };
}

/// The socket a data call works on ([`lookup_live`]), for that call: borrowed from this
/// thread's cache of lookups when it is there, else shared. The borrowed kind touches no
/// reference count: a locked add or subtract at each end of every call waited for the
/// call's stores to the lines the peer reads (a third of a 64-byte send's time). Two words,
/// so that it comes back from the look-up in registers (a copy through memory waited for
/// those stores too).
pub struct ConnRef {
    conn: std::ptr::NonNull<Conn>,
    /// The cache entry pinned for it, or [`SHARED`]: then `conn` is an `Arc`'s, whose
    /// count this holds.
    slot: usize,
}

/// [`ConnRef::slot`] of a shared one.
const SHARED: usize = usize::MAX;

impl ConnRef {
    fn shared(conn: Arc<Conn>) -> ConnRef {
        let conn = Arc::into_raw(conn).cast_mut();
        // SAFETY: an Arc's pointer is never null.
        ConnRef { conn: unsafe { std::ptr::NonNull::new_unchecked(conn) }, slot: SHARED }
    }
}

impl std::ops::Deref for ConnRef {
    type Target = Conn;
    #[inline]
    fn deref(&self) -> &Conn {
        // SAFETY: a shared ConnRef holds a count of its Arc; a borrowed one's cache entry
        // holds one and is not replaced while the entry is pinned (see `PINS`), which it is
        // until this is dropped. A ConnRef never leaves its thread (the pointer makes it
        // neither Send nor Sync).
        unsafe { self.conn.as_ref() }
    }
}

impl Drop for ConnRef {
    #[inline]
    fn drop(&mut self) {
        if self.slot == SHARED {
            // SAFETY: made by Arc::into_raw in `shared`, whose count this gives back once.
            drop(unsafe { Arc::from_raw(self.conn.as_ptr().cast_const()) });
            return;
        }
        let slot = self.slot;
        // One counter at a time: copying the array out and back made the load wait for the
        // store before it, and so for every store of the call.
        let _ = PINS.try_with(|p| p[slot].set(p[slot].get() - 1));
    }
}

/// The cache entry's socket for `fd`, pinned, if the entry is `fd`'s of this generation.
#[inline]
fn borrow_cached(fd: i32, slot: usize, generation: u64) -> Option<ConnRef> {
    let conn = with_cached(fd, slot, generation, |c| std::ptr::NonNull::from(&**c))?;
    PINS.with(|p| p[slot].set(p[slot].get() + 1));
    Some(ConnRef { conn, slot })
}

/// `f` of the cache entry's socket, if the entry is `fd`'s of this generation. `try_with`:
/// the cache is gone once the C library has destroyed this thread's thread-local storage
/// (exit() does so before the program's atexit handlers, which close sockets); the table
/// answers then.
#[inline]
fn with_cached<R>(fd: i32, slot: usize, generation: u64, f: impl FnOnce(&Arc<Conn>) -> R) -> Option<R> {
    RECENT
        .try_with(|r| match r.try_borrow().ok()?.get(slot)? {
            Some((cached, g, c)) if *cached == fd && *g == generation => Some(f(c)),
            _ => None,
        })
        .ok()
        .flatten()
}

/// Whether `fd` is a TCP socket the library follows (accelerated, its set-up put off, or to
/// another host), or may be (a number past the fast tables).
pub fn is_stream_of_ours(fd: i32) -> bool {
    fd >= 0
        && ((fd as usize) >= FAST_FDS
            || MAYBE[fd as usize].load(Ordering::Relaxed) != 0
            || KNOWN_TCP[fd as usize].load(Ordering::Relaxed))
}

/// Whether `fd` may be an accelerated socket: `MAYBE` says so, or cannot (a number past it).
#[inline]
fn maybe_accelerated(fd: i32) -> bool {
    fd >= 0 && ((fd as usize) >= FAST_FDS || matches!(MAYBE[fd as usize].load(Ordering::Relaxed), 1 | MAYBE_RETIRED))
}

/// Whether both directions of `fd`'s socket are retired ([`mark_retired`]).
#[inline]
fn marked_retired(fd: i32) -> bool {
    fd >= 0 && (fd as usize) < FAST_FDS && MAYBE[fd as usize].load(Ordering::Relaxed) == MAYBE_RETIRED
}

/// Whether a data call on `fd` is the kernel's alone, as `MAYBE` tells without the table:
/// no socket the library follows is behind it (none accelerated, connecting, deferred or
/// to another host), or its both directions are retired. A number past `MAYBE`: not known.
#[inline]
pub fn data_is_kernels(fd: i32) -> bool {
    (fd as u32 as usize) < FAST_FDS && matches!(MAYBE[fd as usize].load(Ordering::Relaxed), 0 | MAYBE_RETIRED)
}

/// The accelerated socket behind `fd`, if any.
#[inline]
pub fn lookup(fd: i32) -> Option<Arc<Conn>> {
    if !maybe_accelerated(fd) {
        return None;
    }
    let generation = GENERATION.load(Ordering::Acquire);
    let slot = fd as usize % CACHED_FDS;
    if let Some(c) = with_cached(fd, slot, generation, Arc::clone) {
        return Some(c);
    }
    let found = table().read().ok()?.get(&fd).cloned();
    if let Some(c) = &found {
        if PINS.with(|p| p[slot].get()) == 0 {
            let _ = RECENT.try_with(|r| {
                if let Ok(mut cache) = r.try_borrow_mut() {
                    cache[slot] = Some((fd, generation, c.clone()));
                }
            });
        }
    }
    found
}

/// As [`lookup`], for one call of this thread (see [`ConnRef`]).
#[inline]
fn lookup_for_call(fd: i32) -> Option<ConnRef> {
    if !maybe_accelerated(fd) {
        return None;
    }
    let generation = GENERATION.load(Ordering::Acquire);
    borrow_cached(fd, fd as usize % CACHED_FDS, generation).or_else(|| lookup(fd).map(ConnRef::shared))
}

fn insert(fd: i32, conn: Arc<Conn>) {
    if let Ok(mut t) = table().write() {
        GENERATION.fetch_add(1, Ordering::AcqRel);
        t.insert(fd, conn);
        if (fd as usize) < FAST_FDS {
            MAYBE[fd as usize].store(1, Ordering::Relaxed);
        }
    }
}

/// `fd` is a cross-host candidate (`remote`): not accelerated (`lookup` passes it by), but
/// close, dup and fork must find it.
pub fn mark_remote(fd: i32) {
    if fd >= 0 && (fd as usize) < FAST_FDS {
        MAYBE[fd as usize].store(MAYBE_REMOTE, Ordering::Relaxed);
    }
}

/// `MAYBE[fd]` of a cross-host candidate.
const MAYBE_REMOTE: u8 = 3;

/// A non-blocking connect to `peer` is under way. One to loopback that can be deferred
/// without a question to the kernel (see [`on_connected_to`]) is deferred now: the
/// deferral counts only bytes that moved, and its set-up asks whether the socket is
/// connected; any other is looked at again at its first data call.
pub fn connect_pending(fd: i32, peer: Option<SocketAddr>) {
    if peer.is_some_and(|p| quick_deferral(fd, p, None, Opened::Connected)) {
        return;
    }
    if fd >= 0 && (fd as usize) < FAST_FDS {
        MAYBE[fd as usize].store(2, Ordering::Relaxed);
    }
}

/// As [`lookup`], first finishing the set-up of a socket whose non-blocking connect has
/// completed since.
#[inline]
pub fn lookup_or_complete(fd: i32) -> Option<Arc<Conn>> {
    complete_connect(fd)?;
    lookup(fd)
}

/// Finishes the set-up of `fd` if its non-blocking connect has completed since; None while
/// it is still connecting (or failed).
#[inline]
fn complete_connect(fd: i32) -> Option<()> {
    if fd >= 0 && (fd as usize) < FAST_FDS && MAYBE[fd as usize].load(Ordering::Relaxed) == 2 {
        let peer = name_of(fd, true)?; // None: still connecting, or failed
        MAYBE[fd as usize].store(0, Ordering::Relaxed);
        on_connected_to(fd, Some(peer), Opened::Connected);
    }
    Some(())
}

/// `MAYBE[fd]` of an accelerated socket whose both directions are retired from the ring
/// (see `park`): its data calls and waits are the kernel's alone, so they skip the table
/// ([`lookup_live`] answers None); close, dup, fork and the options still find it.
const MAYBE_RETIRED: u8 = 6;

/// Both directions of `fd`'s socket are retired: from now on its data calls pass straight to
/// the kernel (the library's cost for it is one look at `MAYBE`). Its counts of kernel bytes
/// stop there (`lanes status` shows them as they were).
pub fn mark_retired(fd: i32) {
    if fd >= 0 && (fd as usize) < FAST_FDS {
        let _ = MAYBE[fd as usize].compare_exchange(1, MAYBE_RETIRED, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// As [`lookup_or_complete`], for data calls and waits: None for a socket whose both
/// directions are retired ([`mark_retired`]).
#[inline]
pub fn lookup_live(fd: i32) -> Option<ConnRef> {
    if marked_retired(fd) {
        return None;
    }
    complete_connect(fd)?;
    lookup_for_call(fd)
}

/// As [`lookup_live`], shared (for a wait that holds several sockets at once).
pub fn lookup_live_shared(fd: i32) -> Option<Arc<Conn>> {
    if marked_retired(fd) {
        return None;
    }
    lookup_or_complete(fd)
}

/// Every accelerated fd of this process.
pub fn all() -> Vec<(i32, Arc<Conn>)> {
    table().read().map(|t| t.iter().map(|(k, v)| (*k, v.clone())).collect()).unwrap_or_default()
}

/// `newfd` now refers to the same socket as `oldfd` (dup family, F_DUPFD).
pub fn duplicated(oldfd: i32, newfd: i32) {
    forget(newfd);
    if [oldfd, newfd].iter().all(|&fd| fd >= 0 && (fd as usize) < FAST_FDS) {
        let (old, new) = (oldfd as usize, newfd as usize);
        KNOWN_TCP[new].store(KNOWN_TCP[old].load(Ordering::Relaxed), Ordering::Relaxed);
        LISTENING_PORT[new].store(LISTENING_PORT[old].load(Ordering::Relaxed), Ordering::Relaxed);
    }
    if Deferred::is(oldfd) {
        // The copies must share one record (and one count): set up now, or never.
        Deferred::set_up(oldfd);
        Deferred::give_up(oldfd);
    }
    crate::udp::duplicated(oldfd, newfd);
    if let Some(c) = lookup(oldfd) {
        insert(newfd, c);
    } else {
        crate::remote::duplicated(oldfd, newfd);
    }
}

/// `fd` was closed (or replaced): drop it, and if it was this process's last reference
/// to its socket, give up our holder slot; the last holder anywhere shuts both directions
/// down for the ring and removes the record. Returns whether ring bytes from the peer were
/// left unread (the caller then makes the kernel reset the connection, as closing a TCP
/// socket with unread data does).
pub fn forget(fd: i32) -> bool {
    forget_as(fd, false)
}

/// `fd` came back from the kernel as a new descriptor while the library still knew that
/// number: the program closed the old one where the library could not see it (a system
/// call made without the C library: io_uring, inline assembly). What the library knew of
/// the old one is dropped as a close drops it, without any call on `fd`, which is another
/// file now (before, the new connection took over the old one's record: one connection's
/// bytes went to another's peer).
pub fn forget_stale(fd: i32) {
    // No lock and no allocation for a number the library never knew (every accept).
    let known = if fd >= 0 && (fd as usize) < FAST_FDS {
        MAYBE[fd as usize].load(Ordering::Relaxed) != 0 || crate::udp::lookup(fd).is_some()
    } else {
        lookup(fd).is_some() || crate::udp::lookup(fd).is_some() || crate::remote::knows(fd)
    };
    let known = known || crate::wait::is_set(fd);
    if !known {
        return;
    }
    crate::wait::closed(fd);
    let _ = forget_as(fd, true);
}

fn forget_as(fd: i32, stale: bool) -> bool {
    let forget_remote = |fd| if stale { crate::remote::forget_stale(fd) } else { crate::remote::forget(fd) };
    crate::udp::forget(fd);
    if fd >= 0 && (fd as usize) < FAST_FDS {
        new_socket_at(fd as usize, false);
        match MAYBE[fd as usize].load(Ordering::Relaxed) {
            0 => return false,
            MAYBE_DEFERRED | MAYBE_SETTING_UP => {
                MAYBE[fd as usize].store(0, Ordering::SeqCst);
                return false;
            }
            MAYBE_REMOTE => {
                MAYBE[fd as usize].store(0, Ordering::Relaxed);
                forget_remote(fd);
                return false;
            }
            _ => {}
        }
        MAYBE[fd as usize].store(0, Ordering::Relaxed);
    } else {
        forget_remote(fd);
    }
    let removed = match table().write() {
        Ok(mut t) => {
            GENERATION.fetch_add(1, Ordering::AcqRel);
            let c = t.remove(&fd);
            let still_here = c.as_ref().is_some_and(|c| t.values().any(|o| Arc::ptr_eq(o, c)));
            c.filter(|_| !still_here)
        }
        Err(_) => None,
    };
    let Some(conn) = removed else { return false };
    // Without our identity we were never added (see adopt_after_fork): count the others.
    let others = match this_process() {
        Ok(me) => conn.own.remove_holder(me),
        Err(_) => conn.own.holders().len(),
    };
    let passed = conn.passed.load(Ordering::Relaxed);
    if others > 0 || (passed && taken_over(&conn)) {
        return false;
    }
    let unread = release(&conn);
    if passed && unread {
        // The process the socket went to did not take it over, and the peer's ring bytes
        // cannot reach it through the kernel: both ends are reset, never left short.
        disconnect(fd);
    }
    unread
}

/// Resets the connection of `fd` at both ends, for every process holding the socket
/// (`connect` with `AF_UNSPEC` disconnects a TCP socket, sending RST).
pub fn disconnect(fd: i32) {
    // SAFETY: a zeroed sockaddr is valid; AF_UNSPEC is 0.
    let sa: libc::sockaddr = unsafe { std::mem::zeroed() };
    // SAFETY: sa is a valid sockaddr of the length given.
    unsafe { (crate::real::real().connect)(fd, &sa, std::mem::size_of::<libc::sockaddr>() as libc::socklen_t) };
}

/// How long the last close of a socket this process passed to another one waits for the
/// receiver to take its record over.
const PASS_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

/// Whether another process took over the record of `conn`, which this process passed with
/// SCM_RIGHTS and now closes as its last holder, within [`PASS_GRACE`]: the receiver adopts
/// it as it receives the descriptor (`received`). One that does not (it runs without the
/// library, or has not received it yet) gets the connection as kernel TCP.
fn taken_over(conn: &Conn) -> bool {
    let until = std::time::Instant::now() + PASS_GRACE;
    loop {
        if !conn.own.holders().is_empty() {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The program sends descriptor `fd` to another process (SCM_RIGHTS): an accelerated
/// socket's record stays for the receiver to take over; a connection to another host goes
/// back to the kernel (two processes cannot share a fabric stream).
pub fn passing(fd: i32) {
    if let Some(c) = lookup(fd) {
        c.passed.store(true, Ordering::Relaxed);
    }
    crate::remote::give_up(fd);
}

/// The program received descriptor `fd` from another process (SCM_RIGHTS): if it is a
/// socket with a record, this process takes it over, as an image after exec does.
pub fn received(fd: i32) {
    if lookup(fd).is_none() {
        adopt_inherited(fd);
    }
}

/// A connection that moved fewer bytes than this through the kernel, in less than
/// [`TOO_SHORT`], says nothing of whether its peer has the library (see [`release`]).
const TOO_FEW_BYTES: u64 = 64 << 10;
const TOO_SHORT: std::time::Duration = std::time::Duration::from_secs(1);

/// The last holder is gone: no more ring traffic either way; returns whether ring bytes
/// from the peer were left unread.
fn release(conn: &Conn) -> bool {
    // Never paired: the peer published no record we could attach, nor found ours. Only a
    // connection that moved bytes says so: one closed before its first byte (a probe, a
    // connection the peer closed at once) gave its peer no reason to attach. Nor does a
    // short one (less than a second, and less than TOO_FEW_BYTES): a peer with the library
    // puts its set-up off until its DEFERRED_CALLS-th data call, and a few requests and
    // answers end before that (the notice then blamed MQTT clients and brokers that both
    // ran the library).
    let kernel_bytes =
        conn.own.tx_counts().1.load(Ordering::Relaxed) + conn.own.rx_kernel_read().load(Ordering::Relaxed);
    let moved_bytes =
        conn.own.tx_word().load().kernel_reserved() > 0 || conn.own.rx_kernel_read().load(Ordering::Relaxed) > 0;
    let tells = kernel_bytes >= TOO_FEW_BYTES || conn.created.elapsed() >= TOO_SHORT;
    if moved_bytes && tells && !conn.own.has_flag(FLAG_ATTACHED | FLAG_PEER_FOUND) && !crate::sandbox::filtered() {
        reasons::note(peer_not_attached(&conn.key), Some(&conn.key));
    }
    end_ring_traffic(conn, conn.peer.get())
}

/// Why the peer of `key` never attached, as far as the kernel tells: its socket's owner.
fn peer_not_attached(key: &ConnectionKey) -> Reason {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    match sock_diag::socket_of(&key.reversed()) {
        // inode 0: no descriptor refers to it any more, and its owner says nothing.
        Some(peer) if peer.inode != 0 && peer.uid != me => Reason::PeerOtherUser,
        _ => Reason::PeerWithoutLibrary,
    }
}

/// No more ring traffic either way and the record gone, the socket left to the kernel;
/// returns whether the peer's ring held bytes for us. Whatever the peer published before
/// its direction left ring mode is in the ring; it publishes nothing after (only a receiver
/// brings ring mode back, and ours is gone).
fn end_ring_traffic(conn: &Conn, peer: Option<&Endpoint>) -> bool {
    conn.own.set_flags(FLAG_TX_CLOSED | FLAG_RX_CLOSED);
    conn.own.tx_word().to_kernel_mode();
    let mut unread = false;
    if let Some(p) = peer {
        p.tx_word().to_kernel_mode();
        unread = conn.ring_readable();
    }
    conn.own.unlink();
    unread
}

/// In the parent, as soon as `fork` returned child `pid`: the child holds every socket we
/// hold. Done before the parent can close its copy (a fork-per-connection server closes the
/// accepted socket at once, racing the child), so the record never looks unheld while the
/// child still has the socket. The child's start time is fixed at fork and /proc shows it
/// at once. The child adds itself too (below; idempotent), which also covers forks made
/// inside the C library (`daemon`), whose parent never returns through our `fork`.
pub fn adopt_for_child(pid: libc::pid_t) {
    let mut conns = all();
    let remote = crate::remote::any();
    if (conns.is_empty() && !remote) || pid <= 0 {
        return;
    }
    conns.dedup_by(|a, b| Arc::ptr_eq(&a.1, &b.1));
    let Ok(child) = lanes::platform::liveness::ProcessIdentity::of_pid(pid as u32) else { return };
    if remote {
        crate::remote::adopt_for_child(child);
    }
    for (_, c) in conns {
        if !c.own.add_holder(child) {
            crate::reasons::note(crate::reasons::Reason::TooManyHolders, Some(&c.key));
        }
    }
}

/// After fork, in the child: this process (its own pid and start time) now holds every
/// socket the parent held.
pub fn adopt_after_fork() {
    let Ok(me) = this_process() else { return };
    crate::remote::adopt_after_fork(me);
    // try_read: a thread of the parent may have held the lock at fork; it does not exist here.
    let Ok(t) = table().try_read() else { return };
    for c in t.values() {
        c.own.add_holder(me);
        // Only the forking thread lives on here, and it is in fork, not reading.
        c.parked_readers.store(0, std::sync::atomic::Ordering::SeqCst);
    }
}

fn is_tcp_stream(fd: i32) -> bool {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid for writes.
    let r = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PROTOCOL, (&mut v as *mut libc::c_int).cast(), &mut len)
    };
    r == 0 && v == libc::IPPROTO_TCP
}

/// Sockets this process made TCP (`socket`, or `accept` on one): their connect and accept
/// need not ask the kernel for the protocol.
static KNOWN_TCP: [AtomicBool; FAST_FDS] = [const { AtomicBool::new(false) }; FAST_FDS];

/// Per listening socket, its port once an accept on it needed it (0: not asked): the
/// port lists may name the listening port only, and the connections it accepts are then
/// deferred without a question to the kernel too. A hint: the set-up checks the ports
/// again with the kernel's names.
static LISTENING_PORT: [AtomicU16; FAST_FDS] = [const { AtomicU16::new(0) }; FAST_FDS];

/// A new socket (or none: `tcp` false) now has number `i`: what was known of the number's
/// last socket goes.
fn new_socket_at(i: usize, tcp: bool) {
    KNOWN_TCP[i].store(tcp, Ordering::Relaxed);
    LISTENING_PORT[i].store(0, Ordering::Relaxed);
}

/// The port `listener` listens on (asked of the kernel once per socket).
fn listening_port(listener: i32) -> Option<u16> {
    let slot = LISTENING_PORT.get(usize::try_from(listener).ok()?)?;
    match slot.load(Ordering::Relaxed) {
        0 => {
            let port = name_of(listener, false)?.port();
            slot.store(port, Ordering::Relaxed);
            Some(port)
        }
        port => Some(port),
    }
}

/// `socket` returned `fd`.
pub fn created(fd: i32, domain: i32, ty: i32, protocol: i32) {
    if fd >= 0 && (fd as usize) < FAST_FDS {
        let tcp = ty & 0xf == libc::SOCK_STREAM
            && (protocol == 0 || protocol == libc::IPPROTO_TCP)
            && (domain == libc::AF_INET || domain == libc::AF_INET6);
        new_socket_at(fd as usize, tcp);
    }
}

/// `accept` on `listener` returned `fd`, its peer at `peer` (None: the kernel's answer did
/// not fit the caller's buffer).
pub fn accepted(listener: i32, fd: i32, peer: Option<SocketAddr>) {
    let known = |fd: i32| fd >= 0 && (fd as usize) < FAST_FDS;
    if known(fd) {
        new_socket_at(fd as usize, known(listener) && KNOWN_TCP[listener as usize].load(Ordering::Relaxed));
    }
    connected_to(fd, peer, Some(listener), Opened::Accepted);
}

/// How a connection of this process came to be: the kernel counts the connecting end's
/// SYN among its bytes acked (`fabric_stream::kernel_history`'s `syn_acked`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opened {
    /// This end called connect.
    Connected,
    /// This end came from accept.
    Accepted,
}

impl Opened {
    fn syn_acked(self) -> u64 {
        match self {
            Opened::Connected => 1,
            Opened::Accepted => 0,
        }
    }
}

/// As [`on_connected`], the peer's address known already (connect's argument, accept's
/// answer). A socket this process made TCP, connected to a loopback address, with no
/// exclude list and no include list or one naming a port known already (the peer's, or
/// the port its listener listens on), is deferred without a question to the kernel:
/// protocol, addresses and cookie are asked at its set-up, which a short connection never reaches, so it costs
/// what kernel TCP costs (nginx serving a connection per request lost a seventh of its
/// rate to four system calls per connection, and a twentieth to the last one, the cookie).
pub fn on_connected_to(fd: i32, peer: Option<SocketAddr>, opened: Opened) {
    connected_to(fd, peer, None, opened);
}

/// As [`on_connected_to`], for a socket `listener` accepted (None: one that connected).
fn connected_to(fd: i32, peer: Option<SocketAddr>, listener: Option<i32>, opened: Opened) {
    if !peer.is_some_and(|p| quick_deferral(fd, p, listener, opened)) {
        on_connected(fd, opened);
    }
}

fn quick_deferral(fd: i32, peer: SocketAddr, listener: Option<i32>, opened: Opened) -> bool {
    if fd < 0 || fd as usize >= FAST_FDS || !peer.ip().is_loopback() || peer.port() == 0 {
        return false;
    }
    let i = fd as usize;
    let c = config();
    if !KNOWN_TCP[i].load(Ordering::Relaxed)
        || MAYBE[i].load(Ordering::Relaxed) != 0
        || !c.enabled
        || !c.exclude.is_empty()
        || !deferral_allowed()
    {
        return false;
    }
    // An include list must name a port known without asking: the peer's (a client's
    // server), or the one the listener listens on (a server's).
    let included = match &c.include {
        None => true,
        Some(ports) => {
            crate::config::in_ranges(ports, peer.port())
                || listener.and_then(listening_port).is_some_and(|p| crate::config::in_ranges(ports, p))
        }
    };
    if !included {
        return false;
    }
    Deferred::start(fd, opened);
    true
}

/// A TCP socket just got connected (connect returned, or accept gave it). A local one's
/// set-up is put off until it has shown it lives long enough to pay for it (see
/// [`Deferred`]); one to another host, or past the deferred table, is set up now.
pub fn on_connected(fd: i32, opened: Opened) {
    let remote_candidate =
        fd >= 0 && (fd as usize) < FAST_FDS && MAYBE[fd as usize].load(Ordering::Relaxed) == MAYBE_REMOTE;
    if remote_candidate || lookup(fd).is_some() || !is_tcp_stream(fd) {
        return;
    }
    let (Some(local), Some(remote)) = (name_of(fd, false), name_of(fd, true)) else { return };
    if deferral_allowed() && (fd as usize) < FAST_FDS && wanted(local, remote) == Wanted::Yes {
        Deferred::start(fd, opened);
        return;
    }
    set_up(fd, local, remote, StreamHistory::default(), opened);
}

/// Publishes our record for a connected TCP socket that has moved `history` through the
/// kernel so far, looks for the peer's, and tells the peer we exist. Every failure leaves
/// the socket to the kernel alone.
fn set_up(fd: i32, local: SocketAddr, remote: SocketAddr, history: StreamHistory, opened: Opened) {
    let cfg = config();
    let key = ConnectionKey::new(cfg.netns, local, remote);
    let to_another_host = match wanted(local, remote) {
        Wanted::Yes => false,
        Wanted::No => return,
        Wanted::PortExcluded => return reasons::note(Reason::ExcludedPort, Some(&key)),
        Wanted::Remote => true,
    };
    if crate::io_uring::set_up() {
        return reasons::note(Reason::IoUring, Some(&key));
    }
    if to_another_host {
        // A cross-host candidate, maybe.
        return crate::remote::on_connected(fd, key, opened);
    }
    // After a uid change the fabric directory is not ours any more (see `reasons`).
    if reasons::check_uid(&key).is_none() {
        return;
    }
    let Some(cookie) = sock_diag::own_cookie(fd) else { return };
    let own = match Endpoint::create_after(&cfg.fabric_dir, &key, cookie, cfg.ring_bytes, history) {
        Ok(own) => own,
        Err(why) => {
            // No record, so the peer never finds one: both ends stay on the kernel socket.
            record_failed(&why, &key);
            return;
        }
    };
    // SAFETY: F_GETFL on an fd we were handed; no memory is passed.
    let fl = unsafe { (real().fcntl)(fd, libc::F_GETFL, 0) };
    own.nonblocking().store(u32::from(fl >= 0 && fl & libc::O_NONBLOCK != 0), Ordering::Relaxed);
    let conn = Conn::new(own, key);
    // An accepted socket inherits the listener's low-water mark (and a program may have
    // set one since).
    let inherited = if crate::sandbox::filtered() { None } else { crate::stream::kernel_lowat(fd) };
    if let Some(lowat) = inherited.filter(|&l| l > 1) {
        crate::stream::set_lowat(&conn, fd, lowat);
    }
    if crate::stream::inherited_kernel_features(fd) {
        crate::stream::kernel_features_on(&conn);
    }
    // The peer may have published first: then we attach it now and tell it about us.
    if let Some(p) = conn.attach_peer() {
        p.set_flags(FLAG_PEER_FOUND);
    }
    insert(fd, conn);
}

/// Whether local set-ups are put off (`LANES_SOCKETS_DEFER=0`: every connection is set up
/// when it connects, as tests of the ring's own semantics need).
fn deferral_allowed() -> bool {
    static D: OnceLock<bool> = OnceLock::new();
    *D.get_or_init(|| std::env::var_os("LANES_SOCKETS_DEFER").is_none_or(|v| v != "0"))
}

/// Data calls a local connection makes through the kernel before it is set up: a short one
/// (an HTTP/1.0 request and its answer, a health check) never is, and costs what kernel TCP
/// costs, where a record per connection (a file, two mappings, about twenty system calls on
/// each end) made it several times slower.
pub const DEFERRED_CALLS: u32 = 8;

/// `MAYBE[fd]` of a local connection whose set-up is put off ([`Deferred`]).
const MAYBE_DEFERRED: u8 = 4;
/// `MAYBE[fd]` while a deferred set-up runs: other threads' calls wait for it.
const MAYBE_SETTING_UP: u8 = 5;

/// The bookkeeping of a local connection whose set-up is put off: until its
/// [`DEFERRED_CALLS`]th data call, the library counts the bytes it writes and reads through
/// the kernel (every such call is the program's own), and the record then starts from those
/// counts (`StreamHistory`), so the ring's rule holds as if the record had been there from
/// the start: a receiver takes the ring only once it has read every byte the sender wrote
/// through the kernel. What would make the counts wrong ends the deferral first: `fork`,
/// `exec` and `dup` set the connection up (the copies then share its record); urgent data
/// and `shutdown` leave it to the kernel for good; a call of another thread still in the
/// kernel puts the set-up off to a later call. At the set-up the kernel's own counts of the
/// connection (`TCP_INFO`) must equal the library's: a number closed and reused behind its
/// back, or bytes moved by calls it cannot see, leave the connection to the kernel.
pub struct Deferred;

static DEFER_WRITTEN: [AtomicU64; FAST_FDS] = [const { AtomicU64::new(0) }; FAST_FDS];
static DEFER_READ: [AtomicU64; FAST_FDS] = [const { AtomicU64::new(0) }; FAST_FDS];
/// The kernel's `syn_acked` of the connection ([`Opened::syn_acked`]).
static DEFER_SYN_ACKED: [AtomicU8; FAST_FDS] = [const { AtomicU8::new(0) }; FAST_FDS];
static DEFER_CALLS: [AtomicU32; FAST_FDS] = [const { AtomicU32::new(0) }; FAST_FDS];
static DEFER_IN_KERNEL: [AtomicU32; FAST_FDS] = [const { AtomicU32::new(0) }; FAST_FDS];
/// Bumped when an fd number starts a deferral: a call that was in the kernel when its socket
/// was closed and the number reused adds nothing to the new socket's counts.
static DEFER_GENERATION: [AtomicU32; FAST_FDS] = [const { AtomicU32::new(0) }; FAST_FDS];
/// One past the highest fd ever deferred: scans of the table (fork, exec, close_range) stop
/// there.
static DEFER_END: AtomicUsize = AtomicUsize::new(0);

/// Which count a data call on a deferred connection adds to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moved {
    /// Bytes written (the call's result).
    Written,
    /// Bytes read (the call's result).
    Read,
    /// Nothing of the stream (a peek, a zero-length call).
    Nothing,
    /// Urgent data: the connection stays kernel TCP for good.
    Urgent,
}

impl Deferred {
    fn start(fd: i32, opened: Opened) {
        let i = fd as usize;
        // First, so a call of the number's previous socket still in the kernel stops counting
        // before the counts are cleared for this one.
        DEFER_GENERATION[i].fetch_add(1, Ordering::SeqCst);
        DEFER_WRITTEN[i].store(0, Ordering::Relaxed);
        DEFER_READ[i].store(0, Ordering::Relaxed);
        DEFER_CALLS[i].store(0, Ordering::Relaxed);
        DEFER_SYN_ACKED[i].store(opened.syn_acked() as u8, Ordering::Relaxed);
        DEFER_END.fetch_max(i + 1, Ordering::Relaxed);
        MAYBE[i].store(MAYBE_DEFERRED, Ordering::SeqCst);
    }

    /// Whether `fd` is a deferred connection (a hint, for calls that must end the deferral).
    #[inline]
    pub fn is(fd: i32) -> bool {
        fd >= 0 && (fd as usize) < FAST_FDS && MAYBE[fd as usize].load(Ordering::Relaxed) == MAYBE_DEFERRED
    }

    /// A data call on `fd`: if it is a deferred connection, makes `call` (the program's own)
    /// and counts what it `moved`, then sets the connection up if this was its
    /// [`DEFERRED_CALLS`]th call. None: not deferred (the caller goes on as for any fd).
    #[inline]
    pub fn call(fd: i32, moved: Moved, call: impl FnOnce() -> isize) -> Option<isize> {
        if fd < 0 || (fd as usize) >= FAST_FDS {
            return None;
        }
        let i = fd as usize;
        loop {
            match MAYBE[i].load(Ordering::SeqCst) {
                MAYBE_DEFERRED => break,
                MAYBE_SETTING_UP => std::hint::spin_loop(),
                _ => return None,
            }
        }
        // Counted in before the state is checked again (a set-up checks the count after it
        // claimed the state, both sequentially consistent): either this call sees the set-up
        // and goes the accelerated way, or the set-up sees this call and waits for a later one.
        DEFER_IN_KERNEL[i].fetch_add(1, Ordering::SeqCst);
        let generation = DEFER_GENERATION[i].load(Ordering::SeqCst);
        if MAYBE[i].load(Ordering::SeqCst) != MAYBE_DEFERRED {
            DEFER_IN_KERNEL[i].fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        if moved == Moved::Urgent {
            // The urgent mark is the kernel's, and the ring's protocol would have to know
            // where it is: kernel TCP for good.
            MAYBE[i].store(0, Ordering::SeqCst);
        }
        let r = call();
        let e = crate::real::errno();
        if r > 0 && DEFER_GENERATION[i].load(Ordering::SeqCst) == generation {
            match moved {
                Moved::Written => DEFER_WRITTEN[i].fetch_add(r as u64, Ordering::Relaxed),
                Moved::Read => DEFER_READ[i].fetch_add(r as u64, Ordering::Relaxed),
                Moved::Nothing | Moved::Urgent => 0,
            };
        }
        DEFER_IN_KERNEL[i].fetch_sub(1, Ordering::SeqCst);
        if DEFER_CALLS[i].fetch_add(1, Ordering::Relaxed) + 1 >= DEFERRED_CALLS {
            Self::set_up(fd);
        }
        crate::real::set_errno(e);
        Some(r)
    }

    /// Sets a deferred connection up now, unless a call of another thread is in the kernel
    /// with it (then a later call does). errno is the caller's to keep.
    pub fn set_up(fd: i32) {
        if !Self::is(fd) {
            return;
        }
        let i = fd as usize;
        if MAYBE[i].compare_exchange(MAYBE_DEFERRED, MAYBE_SETTING_UP, Ordering::SeqCst, Ordering::SeqCst).is_err() {
            return;
        }
        if DEFER_IN_KERNEL[i].load(Ordering::SeqCst) != 0 {
            MAYBE[i].store(MAYBE_DEFERRED, Ordering::SeqCst);
            return;
        }
        let history = StreamHistory {
            written: DEFER_WRITTEN[i].load(Ordering::Relaxed),
            read: DEFER_READ[i].load(Ordering::Relaxed),
        };
        let syn_acked = u64::from(DEFER_SYN_ACKED[i].load(Ordering::Relaxed));
        // Kernel TCP unless everything below holds (set_up inserts the fd, state 1).
        MAYBE[i].store(0, Ordering::SeqCst);
        if crate::sandbox::filtered() {
            return; // no system calls of ours under a seccomp filter (see `sandbox`)
        }
        // The ring's rule starts from these counts, so the kernel must have carried exactly
        // them: a number closed and reused behind the library's back (a raw system call),
        // or bytes moved by calls it does not see (io_uring, another process the socket was
        // passed to), leave the connection to the kernel. No other call of the program's
        // moves bytes meanwhile (the state holds them off).
        let carried = lanes::sockets::fabric_stream::kernel_history(fd, syn_acked);
        if carried.is_none_or(|k| (k.written, k.read) != (history.written, history.read)) || !is_tcp_stream(fd) {
            return;
        }
        let (Some(local), Some(remote)) = (name_of(fd, false), name_of(fd, true)) else { return };
        let opened = if syn_acked == 0 { Opened::Accepted } else { Opened::Connected };
        set_up(fd, local, remote, history, opened);
    }

    /// Sets up every deferred connection of this process (before fork and exec: the copies
    /// must share a record, as they share the socket).
    pub fn set_up_all() {
        let end = DEFER_END.load(Ordering::Relaxed);
        for (fd, state) in MAYBE.iter().enumerate().take(end) {
            if state.load(Ordering::Relaxed) == MAYBE_DEFERRED {
                Self::set_up(fd as i32);
                // A set-up refused for a call in the kernel: kernel TCP for good (a copy
                // would count apart).
                let _ = state.compare_exchange(MAYBE_DEFERRED, 0, Ordering::SeqCst, Ordering::SeqCst);
            }
        }
    }

    /// Every deferred connection of this process stays kernel TCP (a forked child's copies).
    pub fn give_up_all() {
        for fd in 0..DEFER_END.load(Ordering::Relaxed) {
            Self::give_up(fd as i32);
        }
    }

    /// Every deferred connection's fd (close_range).
    pub fn fds() -> impl Iterator<Item = i32> {
        (0..DEFER_END.load(Ordering::Relaxed))
            .filter(|&fd| matches!(MAYBE[fd].load(Ordering::Relaxed), MAYBE_DEFERRED | MAYBE_SETTING_UP))
            .map(|fd| fd as i32)
    }

    /// The connection stays kernel TCP for good (shutdown: the stream is ending anyway).
    pub fn give_up(fd: i32) {
        if fd >= 0 && (fd as usize) < FAST_FDS {
            let _ = MAYBE[fd as usize].compare_exchange(MAYBE_DEFERRED, 0, Ordering::SeqCst, Ordering::SeqCst);
        }
    }
}

/// An fd we have not seen, inherited across exec: if its socket has a record with its
/// cookie, take it over.
pub fn adopt_inherited(fd: i32) {
    if !is_tcp_stream(fd) {
        return;
    }
    let (Some(local), Some(remote)) = (name_of(fd, false), name_of(fd, true)) else { return };
    let cfg = config();
    let key = ConnectionKey::new(cfg.netns, local, remote);
    let Ok(own) = Endpoint::open(&cfg.fabric_dir, &key) else { return };
    if sock_diag::own_cookie(fd) != Some(own.cookie()) {
        return;
    }
    if own.has_flag(lanes::sockets::remote::FLAG_REMOTE) {
        return crate::remote::adopt_inherited(fd, own, key);
    }
    // Exec keeps the pid and start time: the slot of the image before is normally ours already.
    if let Ok(me) = this_process() {
        own.add_holder(me);
    }
    let conn = Conn::new(own, key);
    let _ = conn.attach_peer();
    insert(fd, conn);
}

/// Once per process, on the first call into the library: take over the sockets inherited
/// across exec.
pub fn adopt_inherited_all() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<i32> = dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    for fd in fds {
        let is_socket = std::fs::read_link(format!("/proc/self/fd/{fd}"))
            .map(|l| l.to_string_lossy().starts_with("socket:"))
            .unwrap_or(false);
        if is_socket {
            adopt_inherited(fd);
        }
    }
}

/// Our receiving side is shut (shutdown SHUT_RD): the peer must send through the kernel.
pub fn shut_rx(conn: &Conn) {
    conn.rx_shut.store(true, Ordering::SeqCst);
    conn.own.set_flags(FLAG_RX_CLOSED);
    if let Some(p) = conn.peer() {
        p.tx_word().to_kernel_mode();
    }
}

/// Our sending side is shut (SHUT_WR): later bytes would be refused by the kernel anyway;
/// the peer reads the ring, then the kernel's FIN.
pub fn shut_tx(conn: &Conn) {
    conn.own.set_flags(FLAG_TX_CLOSED);
    conn.own.tx_word().to_kernel_mode();
}

/// Calls `f` with every accelerated fd of this process and its socket, under the table's
/// read lock, allocating nothing (the exec interposers may run in a vfork child).
pub fn for_each(mut f: impl FnMut(i32, &Arc<Conn>)) {
    if let Ok(t) = table().read() {
        for (fd, c) in t.iter() {
            f(*fd, c);
        }
    }
}

/// Before an exec into an image that cannot read rings, in the socket's only holder `me`:
/// no more ring traffic either way, as when the last holder closes it, but the socket stays
/// open. Returns whether the peer's ring held bytes for us: stranded, since nobody can read
/// them now (the caller resets the connection).
pub fn hand_to_kernel(conn: &Conn, me: lanes::platform::liveness::ProcessIdentity) -> bool {
    conn.own.remove_holder(me);
    // Attaching the peer if it found us meanwhile: it must stop publishing too.
    end_ring_traffic(conn, conn.peer())
}

/// A connection whose record is made in `dir` (127.0.0.1:5201 to 127.0.0.1:40000, a 4 KiB
/// ring), its peer not attached: for the unit tests of what runs on a connection.
#[cfg(test)]
pub(crate) fn test_conn(dir: &std::path::Path) -> Arc<Conn> {
    let key = ConnectionKey::new(1, "127.0.0.1:5201".parse().unwrap(), "127.0.0.1:40000".parse().unwrap());
    Conn::new(Endpoint::create(dir, &key, 42, 4096).expect("record"), key)
}

/// As [`test_conn`], its peer's record made and attached (without the kernel's word).
#[cfg(test)]
pub(crate) fn test_conn_with_peer(dir: &std::path::Path) -> Arc<Conn> {
    let c = test_conn(dir);
    let _ = c.peer.set(Endpoint::create(dir, &c.key.reversed(), 43, 4096).expect("the peer's record"));
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_borrows_the_cached_socket_and_its_entry_stays_while_it_does() {
        let dir = lanes_testkit::TestDir::new("conn-ref");
        // Two descriptors of one cache entry; far from the program's.
        let (fd, other) = (60_001, 60_001 + CACHED_FDS as i32);
        let a = test_conn(dir.root());
        let key = ConnectionKey::new(1, "127.0.0.1:5202".parse().unwrap(), "127.0.0.1:40001".parse().unwrap());
        let b = Conn::new(Endpoint::create(dir.root(), &key, 43, 4096).expect("record"), key);
        insert(fd, a.clone());
        insert(other, b.clone());
        let first = lookup_live(fd).expect("known");
        assert_eq!(first.slot, SHARED, "not cached yet: shared");
        drop(first);
        let held = lookup_live(fd).expect("known");
        assert_eq!(held.slot, fd as usize % CACHED_FDS, "cached: borrowed");
        assert!(std::ptr::eq(&*held, &*a));
        // The other descriptor's look-up may not take the entry from under `held`.
        let b_ref = lookup_live(other).expect("known");
        assert!(std::ptr::eq(&*b_ref, &*b) && b_ref.slot == SHARED);
        // Closed meanwhile: the borrowed socket lives until the call ends.
        forget(fd);
        drop(a);
        assert_eq!(
            held.key,
            ConnectionKey::new(1, "127.0.0.1:5201".parse().unwrap(), "127.0.0.1:40000".parse().unwrap())
        );
        drop(held);
        drop(b_ref);
        // Unpinned, the entry goes to the next look-up.
        assert!(lookup_live(fd).is_none());
        let _ = lookup_live(other);
        assert_eq!(lookup_live(other).expect("known").slot, other as usize % CACHED_FDS);
        forget(other);
    }

    #[test]
    fn a_flip_back_off_reads_back_as_stored() {
        let cell = FlipCell::new();
        let first = FlipBackoff { skip: 0, backoff: 0, ring_reads: PAYING_READS, fruitless: 0, since_ms: 0 };
        assert_eq!(cell.get(), first, "the first read tries");
        let top = FlipCell::FIELD;
        for f in [
            FlipBackoff { skip: 64, backoff: 64, ring_reads: 1, fruitless: 11, since_ms: 12_345 },
            FlipBackoff { skip: 0, backoff: 7, ring_reads: PAYING_READS, fruitless: 0, since_ms: 0 },
            FlipBackoff {
                skip: top,
                backoff: top,
                ring_reads: PAYING_READS,
                fruitless: top,
                since_ms: FlipCell::SINCE_MODULUS - 1,
            },
        ] {
            cell.set(f);
            assert_eq!(cell.get(), f);
        }
        // Out-of-range values saturate (the clock wraps) rather than spill into the next field.
        cell.set(FlipBackoff {
            skip: u32::MAX,
            backoff: 1,
            ring_reads: 7,
            fruitless: 2,
            since_ms: FlipCell::SINCE_MODULUS + 5,
        });
        assert_eq!(
            cell.get(),
            FlipBackoff { skip: top, backoff: 1, ring_reads: PAYING_READS, fruitless: 2, since_ms: 5 }
        );
    }
}
