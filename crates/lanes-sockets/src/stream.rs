//! Sending and receiving on an accelerated socket: the ring while both ends are busy, the
//! kernel connection otherwise, in the order the direction protocol
//! (`lanes::sockets::direction`) guarantees.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use libc::{c_int, iovec, msghdr, ssize_t};

use lanes::platform::SharedSlice;
use lanes::sockets::direction::{ring_unread_between, ring_unread_within, DirectionWord};
use lanes::sockets::endpoint::{
    lock_shared, Endpoint, FLAG_APP_NODELAY, FLAG_AWAITING_RING, FLAG_KERNEL_FEATURES, FLAG_NODELAY_FORCED, FLAG_RESET,
    FLAG_RING_WANTED, FLAG_RX_CLOSED, FLAG_RX_LOWAT, FLAG_TX_CLOSED, FLAG_TX_NO_RING, FLAG_TX_URGENT,
};

use crate::config::config;
use crate::conn::{Conn, FlipBackoff, FlipCell, PAYING_READS, RETIRE_AFTER, RETIRE_SPAN};
use crate::real::{errno, real, set_errno};

/// Bytes in a list of buffers.
pub fn iov_len(iov: &[iovec]) -> usize {
    iov.iter().map(|v| v.iov_len).sum()
}

/// The part of `iov` from byte `skip`, at most `max` bytes.
fn sub_iov(iov: &[iovec], mut skip: usize, mut max: usize) -> Vec<iovec> {
    let mut out = Vec::with_capacity(iov.len());
    for v in iov {
        if max == 0 {
            break;
        }
        if skip >= v.iov_len {
            skip -= v.iov_len;
            continue;
        }
        let n = (v.iov_len - skip).min(max);
        // SAFETY: skip < iov_len, so the pointer stays inside the caller's buffer.
        out.push(iovec { iov_base: unsafe { v.iov_base.cast::<u8>().add(skip).cast() }, iov_len: n });
        max -= n;
        skip = 0;
    }
    out
}

/// Copies `n` bytes between the caller's buffers (from byte `skip`) and the ring (from
/// position `pos`, wrapping). `into_ring` picks the direction. Each buffer's part is at most
/// two pieces of the ring (`n` is at most its size): one checked copy each, with the
/// streaming stores of [`SharedSlice::copy_from`] into the ring. Allocates nothing: this is
/// the data path. False if the ring refused a piece (a ring whose size is not a power of
/// two, which the record never has): the bytes are then not all copied, and the caller
/// must not publish or consume them.
///
/// # Safety
/// The iovecs must be valid for the access (reads when `into_ring`, else writes), and not
/// overlap the ring.
unsafe fn copy_ring(
    ring: SharedSlice<'_>,
    mut pos: usize,
    iov: &[iovec],
    mut skip: usize,
    mut n: usize,
    into_ring: bool,
) -> bool {
    let cap = ring.len();
    if !cap.is_power_of_two() {
        return false;
    }
    for v in iov {
        if n == 0 {
            break;
        }
        if skip >= v.iov_len {
            skip -= v.iov_len;
            continue;
        }
        let mut done = std::mem::take(&mut skip);
        let end = v.iov_len.min(done + n);
        n -= end - done;
        while done < end {
            let at = pos & (cap - 1);
            let chunk = (end - done).min(cap - at);
            // SAFETY: done + chunk <= end <= iov_len, so the piece lies in the caller's
            // buffer (the caller's contract), which is private memory, not the ring.
            let copied = unsafe {
                let user = v.iov_base.cast::<u8>().add(done);
                if into_ring {
                    ring.copy_from(at, std::slice::from_raw_parts(user, chunk))
                } else {
                    ring.copy_to(at, std::slice::from_raw_parts_mut(user, chunk))
                }
            };
            if copied.is_err() {
                return false;
            }
            done += chunk;
            pos += chunk;
        }
    }
    true
}

/// The end of a call whose ring copy was refused: the bytes done so far, or -1 and EIO.
#[cold]
fn ring_refused(done: usize) -> ssize_t {
    if done > 0 {
        return done as ssize_t;
    }
    set_errno(libc::EIO);
    -1
}

/// Which call the program made: every kernel-path system call made for it is that same
/// system call (a seccomp sandbox that allows `read` and `write` but not `recvmsg` and
/// `sendmsg`, as OpenSSH's pre-authentication child's does, must see nothing else).
/// glibc's `recv`/`send` are the `recvfrom`/`sendto` system calls, as our use of them is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// read, write (and their fortified forms): one buffer, no flags.
    Plain,
    /// readv, writev: buffers, no flags.
    Vector,
    /// preadv2, pwritev2 at the current position (offset -1), with these `RWF_*` flags
    /// (the program's, passed on to the kernel's call).
    VectorFlags(c_int),
    /// recv, recvfrom, send, sendto: one buffer and flags.
    Socket,
    /// recvmsg, sendmsg.
    Msg,
}

impl Call {
    /// Whether the call carries MSG_* flags (read/readv/write/writev do not).
    fn takes_flags(self) -> bool {
        matches!(self, Call::Socket | Call::Msg)
    }
}

/// The first buffer of `iov` (at most one exists for [`Call::Plain`] and [`Call::Socket`]:
/// the program passed one, and every part of it we make is one).
fn single(iov: &[iovec]) -> (*mut libc::c_void, usize) {
    iov.first().map_or((std::ptr::null_mut(), 0), |v| (v.iov_base, v.iov_len))
}

/// The kernel-path send, as the system call the program made.
fn kernel_send(call: Call, fd: c_int, iov: &[iovec], flags: c_int) -> ssize_t {
    match call {
        Call::Plain => {
            let (b, n) = single(iov);
            // SAFETY: the caller's buffer (or a part of it).
            unsafe { (real().write)(fd, b, n) }
        }
        // SAFETY: iovecs into the caller's buffers; fewer than UIO_MAXIOV (a part of the
        // program's own list).
        Call::Vector => unsafe { (real().writev)(fd, iov.as_ptr(), iov.len() as c_int) },
        // SAFETY: as for writev.
        Call::VectorFlags(rwf) => unsafe { (real().pwritev2)(fd, iov.as_ptr(), iov.len() as c_int, -1, rwf) },
        Call::Socket => {
            let (b, n) = single(iov);
            // SAFETY: the caller's buffer (or a part of it).
            unsafe { (real().send)(fd, b, n, flags) }
        }
        Call::Msg => {
            // SAFETY: a zeroed msghdr is valid (no name, no control data).
            let mut msg: msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = iov.as_ptr() as *mut iovec;
            msg.msg_iovlen = iov.len();
            // SAFETY: the iovecs point into the caller's buffers.
            unsafe { (real().sendmsg)(fd, &msg, flags) }
        }
    }
}

/// Sends from `iov` (the caller's buffers) with `flags` (MSG_*).
pub fn send(conn: &Conn, fd: c_int, call: Call, iov: &[iovec], flags: c_int) -> ssize_t {
    let total = iov_len(iov);
    if conn.own.has_flag(FLAG_RESET) {
        return reset_send(flags);
    }
    if total == 0 || conn.own.has_flag(FLAG_TX_CLOSED) {
        return kernel_send(call, fd, iov, flags);
    }
    if conn.tx_retired() {
        // The peer retired this direction from the ring: the program's own call, counted.
        if !conn.rx_retired() {
            retire_idle_input(conn);
        }
        if conn.rx_retired() {
            // Both directions: the next calls do not come here at all.
            release_nodelay(conn, fd);
            crate::conn::mark_retired(fd);
        } else if conn.own.has_flag(FLAG_NODELAY_FORCED)
            && conn.peer().is_some_and(|p| {
                let peer = p.tx_word().load();
                !peer.ring_mode() && peer.published() == 0
            })
        {
            // Our bytes are the kernel's for good and the peer's never came through the
            // ring: no ring traffic needs our segments unheld, so Nagle's algorithm is the
            // program's choice again (a one-way stream of small writes, forced to a segment
            // each, ran at a quarter of kernel TCP's rate). A receive that takes the ring
            // forces it anew.
            release_nodelay(conn, fd);
        }
        let r = kernel_send(call, fd, iov, flags);
        if r > 0 {
            conn.own.tx_counts().1.fetch_add(r as u64, Ordering::Relaxed);
        }
        return r;
    }
    if call.takes_flags() && flags & libc::MSG_OOB != 0 {
        // Urgent data: this direction goes through the kernel from now on (see
        // FLAG_TX_URGENT); the reservation below takes it out of ring mode, after the
        // ring bytes already published, so the order holds.
        conn.own.set_flags(FLAG_TX_URGENT);
    }
    // The ring is not used while the peer counts its bytes against a low-water mark, nor
    // after urgent data (flags read once per call: a direction switched to the kernel
    // stays there until the receiver, which honours them too, switches it back), nor for a
    // MSG_ZEROCOPY send: the kernel reports each one's completion on the error queue, and
    // programs wait for those before they reuse the buffer.
    let mut kernel_only = conn.own.has_flag(FLAG_TX_URGENT | FLAG_TX_NO_RING | FLAG_KERNEL_FEATURES)
        || conn.peer().is_some_and(|p| p.has_flag(FLAG_RX_LOWAT | FLAG_KERNEL_FEATURES))
        || call.takes_flags() && flags & libc::MSG_ZEROCOPY != 0;
    let nonblocking = conn.nonblocking() || flags & libc::MSG_DONTWAIT != 0;
    let word = conn.own.tx_word();
    let (ring_count, kernel_count) = conn.own.tx_counts();
    let mut sent = 0usize;
    let mut full: Option<RingFull> = None;
    while sent < total {
        let state = word.load();
        if !kernel_only && !state.ring_mode() && conn.peer().is_some_and(|p| p.has_flag(FLAG_RING_WANTED)) {
            // The receiver can switch only once it has read every kernel byte: a small
            // segment Nagle's algorithm holds back (for the receiver's delayed ACK) would
            // keep it from that for good. Forcing TCP_NODELAY sends it now.
            force_nodelay(conn, fd);
            wait_for_ring(conn, &word, nonblocking);
        }
        let state = word.load();
        let peer =
            if state.ring_mode() && !kernel_only { conn.peer().filter(|p| !p.has_flag(FLAG_RX_CLOSED)) } else { None };
        if let Some(peer) = peer {
            let _lock = lock_shared(conn.own.tx_lock());
            let state = word.load();
            if state.ring_mode() && !ring_backed(conn) {
                // No memory for the ring: this direction is the kernel's for good (the
                // reservation below takes it out of ring mode).
                kernel_only = true;
                drop(_lock);
                continue;
            }
            if state.ring_mode() {
                let cap = conn.own.ring_bytes();
                // The receiver's consumed count lives on a cache line it writes at every
                // read; read it only when the last value seen leaves too little room (an
                // old value only understates the room, so it is always safe to use).
                let mut space =
                    conn.peer_consumed_seen().map_or(0, |c| cap.saturating_sub(state.ring_unread(c) as usize));
                if space < (total - sent).min(cap) {
                    let consumed = peer.rx_consumed().load(Ordering::Acquire);
                    conn.saw_peer_consumed(consumed);
                    space = cap.saturating_sub(state.ring_unread(consumed) as usize);
                }
                if space > 0 {
                    let n = space.min(total - sent).min(PUBLISH_CHUNK);
                    // SAFETY: the ring is ours to write between `published` and the
                    // receiver's consumed count; the caller's buffers are valid.
                    let copied = unsafe { copy_ring(conn.own.ring(), state.published() as usize, iov, sent, n, true) };
                    if !copied {
                        // Never so (the ring is the record's, of `cap` bytes): nothing is
                        // published, the call ends as a failed write would.
                        return ring_refused(sent);
                    }
                    // The lines the next sends fill, taken from the receiver's cache now:
                    // the publish below is a locked instruction, which waits for every
                    // store before it, theirs too.
                    let next = (state.published() as usize + n) & (cap - 1);
                    conn.own.ring().prefetch_for_write(next, PREFETCH_AHEAD);
                    if word.publish(n) {
                        sent += n;
                        // Counted under the send lock: no locked add needed.
                        ring_count.store(ring_count.load(Ordering::Relaxed) + n as u64, Ordering::Relaxed);
                        full = None;
                    }
                    continue;
                }
                // The ring is full: wait for the receiver to make room, then use the kernel.
                let consumed = peer.rx_consumed().load(Ordering::Acquire);
                let f = full.get_or_insert_with(|| RingFull::new(consumed));
                if !nonblocking && f.since.interrupted() {
                    // A handler ran while this call waited for room, where the kernel's send
                    // sleeps: that send would have ended with what it moved, or EINTR.
                    if sent > 0 {
                        return sent as ssize_t;
                    }
                    if !f.since.restarts_send(fd) {
                        set_errno(libc::EINTR);
                        return -1;
                    }
                    f.since = crate::signals::Since::now();
                }
                if f.wait(consumed, nonblocking) {
                    drop(_lock);
                    continue;
                }
            } else {
                continue;
            }
        }
        let reservation = word.reserve_kernel(total - sent);
        // The whole call in one piece (the common case) needs no list of its own.
        let part;
        let chunk = if sent == 0 && reservation.bytes == total {
            iov
        } else {
            part = sub_iov(iov, sent, reservation.bytes);
            &part[..]
        };
        // MSG_OOB marks the last byte of the call urgent: only the last chunk carries it.
        let chunk_flags = if sent + reservation.bytes < total { flags & !libc::MSG_OOB } else { flags };
        let r = kernel_send(call, fd, chunk, chunk_flags);
        let e = errno();
        word.settle_kernel(reservation, r.max(0) as usize);
        if r < 0 {
            if sent > 0 {
                return sent as ssize_t;
            }
            set_errno(e);
            return r;
        }
        kernel_count.fetch_add(r as u64, Ordering::Relaxed);
        sent += r as usize;
        if (r as usize) < iov_len(chunk) {
            break; // the kernel took part: a signal, or a non-blocking socket's buffer filled
        }
    }
    sent as ssize_t
}

/// Whether our ring is backed with memory, backing it first if this process has not yet
/// (the record is created sparse). If it cannot be (the fabric directory's file system is
/// full), the sending direction is flagged [`FLAG_TX_NO_RING`] and said why: false.
fn ring_backed(conn: &Conn) -> bool {
    if conn.ring_backed.load(Ordering::Relaxed) {
        return true;
    }
    if conn.own.has_flag(FLAG_TX_NO_RING) {
        return false;
    }
    match conn.own.populate_ring() {
        Ok(()) => {
            conn.ring_backed.store(true, Ordering::Relaxed);
            true
        }
        Err(e) => {
            conn.own.set_flags(FLAG_TX_NO_RING);
            crate::reasons::note_with(crate::reasons::Reason::NoRoom, Some(&conn.key), &e.to_string());
            false
        }
    }
}

/// `sendmsg` with ancillary data: control messages do not travel in rings, so the bytes go
/// through the kernel with the program's own message, counted as kernel bytes. The count
/// takes the direction out of ring mode after the ring bytes already published, so the
/// receiver reads the two in the order they were sent (sent without it, they could be read
/// after ring bytes sent later). At most one kernel chunk goes per call: a larger message
/// is a short send.
pub fn send_with_control(conn: &Conn, fd: c_int, msg: &msghdr, iov: &[iovec], flags: c_int) -> ssize_t {
    if conn.own.has_flag(FLAG_RESET) {
        return reset_send(flags);
    }
    let word = conn.own.tx_word();
    let reservation = word.reserve_kernel(iov_len(iov));
    let chunk = sub_iov(iov, 0, reservation.bytes);
    let mut m = *msg;
    m.msg_iov = chunk.as_ptr() as *mut iovec;
    m.msg_iovlen = chunk.len();
    // SAFETY: the caller's message with a part of its own buffers; its control data as given.
    let r = unsafe { (real().sendmsg)(fd, &m, flags) };
    let e = errno();
    word.settle_kernel(reservation, r.max(0) as usize);
    if r > 0 {
        conn.own.tx_counts().1.fetch_add(r as u64, Ordering::Relaxed);
    }
    set_errno(e);
    r
}

/// Bytes of ring past a send's end that it fetches for the next sends' stores.
const PREFETCH_AHEAD: usize = 256;

/// The most a sender copies into the ring before it publishes. A receiver sees nothing of
/// a copy until it is published: publishing a large write (a bulk stream's 128 KiB to
/// 1 MiB) in one piece kept a waiting receiver spinning for the whole copy, longer than its
/// spin lasts, so it went to sleep and took the stream to the kernel; in pieces, it starts
/// copying out while the rest is copied in.
const PUBLISH_CHUNK: usize = 64 << 10;

/// How long a non-blocking sender that finds the ring full waits for room before it uses
/// the kernel (its program may have other work; the kernel's buffer takes the bytes).
const RING_FULL_GRACE_NONBLOCKING: Duration = Duration::from_micros(5);
/// How long a blocking sender that finds the ring full waits for the receiver to take
/// something, before it gives up on the ring and uses the kernel. A receiver that keeps
/// reading is slower than the sender, not gone: a bulk stream then waits for room as it
/// would in the kernel, and its bytes stay in the ring (switching to the kernel at the
/// first full ring sent nearly all of a one-way stream through the kernel, and a receiver
/// that reads as fast as it can seldom catches up with the kernel to switch back).
const RING_FULL_STALL: Duration = Duration::from_millis(1);

/// A sender waiting for room in a full ring.
struct RingFull {
    started: Instant,
    /// The receiver's consumed count last seen, and when it last moved.
    consumed: u64,
    progress: Instant,
    /// The signal handlers run on this thread when the wait began.
    since: crate::signals::Since,
}

impl RingFull {
    fn new(consumed: u64) -> Self {
        let now = Instant::now();
        RingFull { started: now, consumed, progress: now, since: crate::signals::Since::now() }
    }

    /// Waits a moment for room (a spin, or a nap if spinning would take a CPU somebody
    /// needs); false when the sender should use the kernel instead.
    fn wait(&mut self, consumed: u64, nonblocking: bool) -> bool {
        let now = Instant::now();
        if consumed != self.consumed {
            (self.consumed, self.progress) = (consumed, now);
        }
        let waited = now - self.started;
        if nonblocking {
            if waited >= RING_FULL_GRACE_NONBLOCKING {
                return false;
            }
        } else if config().poll_time.is_zero() || now - self.progress >= RING_FULL_STALL {
            // LANES_POLL_US=0: no waiting on the ring at all (the tests use it to switch
            // between the ring and the kernel at every occasion).
            return false;
        }
        if waited < RING_HANDBACK_SPIN || crate::spin::allowed() {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(RING_HANDBACK_NAP);
        }
        true
    }
}

/// How long a sender waits for a receiver that asked for the ring back and reads no more
/// kernel bytes. Long enough to cover what a program does between two reads (checking or
/// hashing what it read takes a few hundred microseconds for 256 KiB): a receiver busy
/// with the bytes it has is draining the kernel, only slower than the sender could fill it.
const RING_HANDBACK_STALL: Duration = Duration::from_millis(1);
/// The longest a blocking sender waits for the ring to come back, however busy the
/// receiver. The kernel holds a few MiB at most, so a receiver that keeps reading drains it
/// well within.
const RING_HANDBACK_MAX: Duration = Duration::from_millis(20);
/// The same for a non-blocking sender, whose program may have other sockets to serve.
const RING_HANDBACK_MAX_NONBLOCKING: Duration = Duration::from_millis(2);
/// How long the wait spins before it naps between looks, unless a CPU is free for a spin
/// (`spin::allowed`): napping leaves the CPU to the receiver when both share one, but a
/// napping sender notices the switch back late, by when a receiver with a short spin has
/// gone to sleep and the direction is back in kernel mode.
const RING_HANDBACK_SPIN: Duration = Duration::from_micros(20);
/// One nap.
const RING_HANDBACK_NAP: Duration = Duration::from_micros(20);

/// Sender in kernel mode whose receiver asked for the ring back (`FLAG_RING_WANTED`):
/// pauses while the receiver keeps draining the kernel, until it switches the direction to
/// the ring, stops reading, sleeps, or the wait runs out; then withdraws the request, so a
/// receiver that is not reading costs the sender one wait, not one per send.
///
/// A peer that is itself waiting here for us (`FLAG_AWAITING_RING` on its record) usually
/// reads nothing until we do: a program that sends and receives on one thread (a poll loop
/// streaming both ways) would have both ends wait out the stall, every send. So the second
/// one to wait does not; it sends through the kernel, goes back to its loop, and reads,
/// which lets the first one's direction drain and switch. Its own direction gets its turn
/// once the first one reads again.
fn wait_for_ring(conn: &Conn, word: &DirectionWord<'_>, nonblocking: bool) {
    let max = if nonblocking { RING_HANDBACK_MAX_NONBLOCKING } else { RING_HANDBACK_MAX };
    let Some(peer) = conn.peer() else { return };
    if peer.has_flag(FLAG_AWAITING_RING) {
        return;
    }
    conn.own.set_flags(FLAG_AWAITING_RING);
    let started = Instant::now();
    let mut last_read = peer.rx_kernel_read().load(Ordering::Acquire);
    let mut last_progress = started;
    let switched = loop {
        let s = word.load();
        if s.ring_mode() {
            break true;
        }
        if s.sleepers() > 0 || !peer.has_flag(FLAG_RING_WANTED) || peer.has_flag(FLAG_RX_CLOSED) {
            break false;
        }
        let now = Instant::now();
        let read = peer.rx_kernel_read().load(Ordering::Acquire);
        if read != last_read {
            (last_read, last_progress) = (read, now);
        }
        if now - last_progress > RING_HANDBACK_STALL || now - started > max {
            break false;
        }
        if now - started < RING_HANDBACK_SPIN || crate::spin::allowed() {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(RING_HANDBACK_NAP);
        }
    };
    conn.own.clear_flags(FLAG_AWAITING_RING);
    if !switched {
        peer.clear_flags(FLAG_RING_WANTED);
    }
}

/// Receiver: asks the sender for the ring back (see [`wait_for_ring`]) or withdraws the
/// request.
pub fn want_ring(own: &Endpoint, wanted: bool) {
    if own.has_flag(FLAG_RING_WANTED) != wanted {
        if wanted {
            own.set_flags(FLAG_RING_WANTED);
        } else {
            own.clear_flags(FLAG_RING_WANTED);
        }
    }
}

/// The kernel-path receive, as the system call the program made. `flags` beyond the
/// program's own are only ever added for calls that take flags ([`Call::takes_flags`]).
/// A program's recvmsg header with the length of the control buffer it passed: the header
/// says 0 (ring bytes carry no control messages) until a kernel receive, which gets the
/// whole buffer and sets the length it used, as the kernel's own recvmsg would.
pub struct RecvMsg<'a> {
    pub hdr: &'a mut msghdr,
    pub control: usize,
}

impl<'a> RecvMsg<'a> {
    /// The program's header, its control length set aside.
    pub fn new(hdr: &'a mut msghdr) -> RecvMsg<'a> {
        let control = std::mem::replace(&mut hdr.msg_controllen, 0);
        RecvMsg { hdr, control }
    }
}

fn kernel_recv(call: Call, fd: c_int, iov: &[iovec], flags: c_int, msg: &mut Option<RecvMsg<'_>>) -> ssize_t {
    match (call, msg) {
        (Call::Plain, _) => {
            let (b, n) = single(iov);
            // SAFETY: the caller's buffer (or a part of it).
            unsafe { (real().read)(fd, b, n) }
        }
        // SAFETY: iovecs into the caller's buffers, fewer than the program passed.
        (Call::Vector, _) => unsafe { (real().readv)(fd, iov.as_ptr(), iov.len() as c_int) },
        // SAFETY: as for readv.
        (Call::VectorFlags(rwf), _) => unsafe { (real().preadv2)(fd, iov.as_ptr(), iov.len() as c_int, -1, rwf) },
        (Call::Socket, _) => {
            let (b, n) = single(iov);
            // SAFETY: the caller's buffer (or a part of it).
            unsafe { (real().recv)(fd, b, n, flags) }
        }
        (Call::Msg, Some(RecvMsg { hdr: m, control })) => {
            let saved = (m.msg_iov, m.msg_iovlen);
            m.msg_iov = iov.as_ptr() as *mut iovec;
            m.msg_iovlen = iov.len();
            m.msg_controllen = *control;
            // SAFETY: the caller's msghdr with our iovecs into its own buffers.
            let r = unsafe { (real().recvmsg)(fd, *m as *mut msghdr, flags) };
            (m.msg_iov, m.msg_iovlen) = saved;
            if r < 0 {
                m.msg_controllen = 0;
            }
            r
        }
        (Call::Msg, None) => {
            // SAFETY: a zeroed msghdr is valid.
            let mut m: msghdr = unsafe { std::mem::zeroed() };
            m.msg_iov = iov.as_ptr() as *mut iovec;
            m.msg_iovlen = iov.len();
            // SAFETY: iovecs into the caller's buffers.
            unsafe { (real().recvmsg)(fd, &mut m, flags) }
        }
    }
}

/// TCP_INQ as the kernel's headers spell it: the option, and the control message's type.
const TCP_INQ: c_int = 36;
/// [`Conn::inq`]: not known yet, off, on.
pub(crate) const INQ_UNKNOWN: u8 = 0;
const INQ_OFF: u8 = 1;
const INQ_ON: u8 = 2;
/// Some socket of this process had TCP_INQ turned on: a connection whose setting this
/// process does not know (set before its set-up, inherited from its listener) asks the
/// kernel once. A process that never turned it on asks nothing.
static INQ_SEEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `setsockopt(level, name)` is TCP_INQ.
pub fn is_tcp_inq(level: c_int, name: c_int) -> bool {
    level == libc::IPPROTO_TCP && name == TCP_INQ
}

/// The kernel accepted TCP_INQ on `fd` (its value is 0 or 1; else the kernel refuses it).
pub fn inq_set(fd: c_int, val: *const libc::c_void, len: libc::socklen_t) {
    if val.is_null() || (len as usize) < std::mem::size_of::<c_int>() {
        return;
    }
    // SAFETY: the kernel accepted val as an int.
    let on = unsafe { std::ptr::read_unaligned(val as *const c_int) } != 0;
    if on {
        INQ_SEEN.store(true, Ordering::Relaxed);
    }
    if let Some(c) = crate::conn::lookup(fd) {
        c.inq.store(if on { INQ_ON } else { INQ_OFF }, Ordering::Relaxed);
    }
}

/// Whether the program wants TCP_CM_INQ on `conn`'s receives.
fn inq_wanted(conn: &Conn, fd: c_int) -> bool {
    match conn.inq.load(Ordering::Relaxed) {
        INQ_ON => true,
        INQ_OFF => false,
        _ => {
            let on = inq_on_in_kernel(fd);
            conn.inq.store(if on { INQ_ON } else { INQ_OFF }, Ordering::Relaxed);
            on
        }
    }
}

/// Whether `fd`'s kernel socket has TCP_INQ on (asked only in a process that turned it on
/// somewhere, and never under a seccomp filter).
pub fn inq_on_in_kernel(fd: c_int) -> bool {
    if !INQ_SEEN.load(Ordering::Relaxed) || crate::sandbox::filtered() {
        return false;
    }
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid for the kernel to write.
    let r =
        unsafe { libc::syscall(libc::SYS_getsockopt, fd, libc::IPPROTO_TCP, TCP_INQ, &mut v as *mut c_int, &mut len) };
    r == 0 && v != 0
}

/// The kernel's TCP_CM_INQ after a receive the ring answered: the bytes still unread (the
/// ring's, and the kernel's when the counts say it holds some of ours); at the end of the
/// stream 1, the kernel's "read on" (as `tcp_inq_hint`).
fn inq_after(conn: &Conn, fd: c_int, peer: &Endpoint) -> c_int {
    let state = peer.tx_word().load();
    let ring = state.ring_unread(conn.own.rx_consumed().load(Ordering::Acquire));
    let kernel = if state.kernel_caught_up(conn.own.rx_kernel_read().load(Ordering::Acquire)) {
        0
    } else if crate::sandbox::filtered() {
        1 // cannot ask: "more may be queued" costs a program one read, "nothing" a hang
    } else {
        let mut n: c_int = 0;
        // SAFETY: FIONREAD writes one int.
        let r = unsafe { (real().ioctl)(fd, libc::FIONREAD, (&mut n as *mut c_int) as usize) };
        if r == 0 {
            n.max(0) as u64
        } else {
            1
        }
    };
    let n = ring.saturating_add(kernel);
    if n == 0 && peer.has_flag(FLAG_TX_CLOSED) {
        return 1;
    }
    n.min(c_int::MAX as u64) as c_int
}

/// Puts TCP_CM_INQ `inq` in the program's control buffer as the kernel's `put_cmsg` does:
/// no room for a header, MSG_CTRUNC and nothing; room for part of the value, that part
/// and MSG_CTRUNC.
pub fn put_inq(m: &mut RecvMsg<'_>, inq: c_int) {
    const HEAD: usize = std::mem::size_of::<libc::cmsghdr>();
    const VALUE: usize = std::mem::size_of::<c_int>();
    const SPACE: usize = HEAD + VALUE.next_multiple_of(std::mem::size_of::<usize>());
    let (control, room) = (m.hdr.msg_control, m.control);
    if control.is_null() || room < HEAD {
        m.hdr.msg_flags |= libc::MSG_CTRUNC;
        return;
    }
    if room < HEAD + VALUE {
        m.hdr.msg_flags |= libc::MSG_CTRUNC;
    }
    let len = (HEAD + VALUE).min(room);
    let head = libc::cmsghdr { cmsg_len: len as _, cmsg_level: libc::SOL_TCP, cmsg_type: TCP_INQ };
    // SAFETY: the program's control buffer holds `room` bytes (its msg_controllen) from
    // msg_control; `len` is at most that.
    unsafe {
        std::ptr::write_unaligned(control as *mut libc::cmsghdr, head);
        std::ptr::copy_nonoverlapping(inq.to_ne_bytes().as_ptr(), (control as *mut u8).add(HEAD), len - HEAD);
    }
    m.hdr.msg_controllen = SPACE.min(room) as _;
}

/// Whether the kernel holds no unread bytes for `fd`, asked with the system call the
/// program is making (a peek for the calls that take flags). read and readv cannot ask:
/// FIONREAD answers for them, except in a process under a seccomp filter, which may kill
/// for an ioctl; there the counts alone decide (every byte the sender reserved for the
/// kernel has been read; bytes a process without the library wrote behind the sender's
/// back are unordered against its bytes anyway).
pub fn kernel_empty(call: Call, fd: c_int) -> bool {
    match call {
        Call::Socket | Call::Msg => {
            let mut byte = 0u8;
            let iov = [iovec { iov_base: (&mut byte as *mut u8).cast(), iov_len: 1 }];
            let r = kernel_recv(call, fd, &iov, libc::MSG_PEEK | libc::MSG_DONTWAIT, &mut None);
            r < 0 && errno() == libc::EAGAIN
        }
        Call::Plain | Call::Vector | Call::VectorFlags(_) => {
            if crate::sandbox::filtered() {
                return true;
            }
            let mut n: c_int = 0;
            // SAFETY: FIONREAD writes one int.
            let r = unsafe { (real().ioctl)(fd, libc::FIONREAD, (&mut n as *mut c_int) as usize) };
            r == 0 && n == 0
        }
    }
}

/// TCP_NODELAY of the kernel socket (through the system call, never our own export).
pub fn kernel_nodelay(fd: c_int) -> Option<bool> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid for the kernel to write.
    let r = unsafe {
        libc::syscall(libc::SYS_getsockopt, fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, &mut v as *mut c_int, &mut len)
    };
    (r == 0).then_some(v != 0)
}

/// SO_RCVLOWAT of the kernel socket (through the system call, never our own export).
pub fn kernel_lowat(fd: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid for the kernel to write.
    let r = unsafe {
        libc::syscall(libc::SYS_getsockopt, fd, libc::SOL_SOCKET, libc::SO_RCVLOWAT, &mut v as *mut c_int, &mut len)
    };
    (r == 0).then_some(v)
}

/// Sets TCP_NODELAY of the kernel socket.
pub fn set_kernel_nodelay(fd: c_int, on: bool) {
    let v = c_int::from(on);
    // SAFETY: v is a valid int option value.
    unsafe {
        libc::syscall(
            libc::SYS_setsockopt,
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &v as *const c_int,
            std::mem::size_of::<c_int>() as libc::socklen_t,
        )
    };
}

/// Nagle's algorithm off in our kernel socket, for good (see `FLAG_NODELAY_FORCED`), once
/// the ring is about to be used: before the peer's sending direction first switches to the
/// ring (the peer's answers may then come through it, carrying no ACK of our kernel
/// segments, so a small one would wait for the peer's delayed ACK, 40 ms), and before our
/// sending direction is handed back to the ring (the receiver must first read every kernel
/// byte, and one held back would stop it). Until then the program's own setting stays: a
/// one-way stream of small writes that the kernel carries is coalesced as it asked. The
/// program's own setting is kept for getsockopt either way.
///
/// Under a seccomp filter the socket options are left alone: get/setsockopt may be what
/// the filter kills for.
pub fn force_nodelay(conn: &Conn, fd: c_int) {
    if conn.own.has_flag(FLAG_NODELAY_FORCED) || crate::sandbox::filtered() || conn.peer().is_none() {
        return;
    }
    let Some(app) = kernel_nodelay(fd) else { return };
    if app {
        conn.own.set_flags(FLAG_APP_NODELAY);
    }
    if conn.own.set_flags(FLAG_NODELAY_FORCED) & FLAG_NODELAY_FORCED == 0 && !app {
        set_kernel_nodelay(fd, true);
    }
}

/// Whether the peer's sending direction may be in ring mode: nothing shut or closed, no
/// feature of the kernel's own queues in use at either end.
pub fn ring_allowed(conn: &Conn) -> bool {
    !conn.rx_shut.load(Ordering::Relaxed)
        && !conn.own.has_flag(FLAG_RX_CLOSED | FLAG_RX_LOWAT | FLAG_KERNEL_FEATURES)
        && conn
            .peer()
            .is_some_and(|p| !p.has_flag(FLAG_TX_CLOSED | FLAG_TX_URGENT | FLAG_TX_NO_RING | FLAG_KERNEL_FEATURES))
}

/// Whether a `setsockopt` turns on a feature only the kernel's own queues have (see
/// [`FLAG_KERNEL_FEATURES`]): a peek offset, or receive or transmit timestamps.
pub fn is_kernel_feature(level: c_int, name: c_int, val: *const libc::c_void, len: libc::socklen_t) -> bool {
    if level != libc::SOL_SOCKET
        || !matches!(
            name,
            libc::SO_PEEK_OFF
                | libc::SO_TIMESTAMP
                | libc::SO_TIMESTAMPNS
                | libc::SO_TIMESTAMPING
                | SO_TIMESTAMP_NEW
                | SO_TIMESTAMPNS_NEW
                | SO_TIMESTAMPING_NEW
        )
    {
        return false;
    }
    if val.is_null() || (len as usize) < std::mem::size_of::<c_int>() {
        return false; // the kernel refuses it
    }
    // SAFETY: the caller's value, at least an int long.
    let v = unsafe { std::ptr::read_unaligned(val as *const c_int) };
    // A peek offset of -1 (the default) turns it off; 0 turns a timestamp option off.
    if name == libc::SO_PEEK_OFF {
        v >= 0
    } else {
        v != 0
    }
}

/// The `_NEW` timestamp options (asm-generic/socket.h; the libc crate lacks them).
const SO_TIMESTAMP_NEW: c_int = 63;
const SO_TIMESTAMPNS_NEW: c_int = 64;
const SO_TIMESTAMPING_NEW: c_int = 65;

/// Any socket of this process had a kernel-only feature turned on (see
/// [`use_kernel_features`]): set-ups then ask the kernel whether theirs inherited one.
static KERNEL_FEATURES_SEEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The program turned on a feature only the kernel's queues have on `fd` (which it
/// accepted): a connection whose set-up is put off stays kernel TCP; an accelerated one
/// stops using the ring both ways (FLAG_KERNEL_FEATURES); one to another host is the
/// kernel's for good, whether its stream is live yet or not.
pub fn use_kernel_features(fd: c_int) {
    KERNEL_FEATURES_SEEN.store(true, Ordering::Relaxed);
    crate::remote::give_up(fd);
    if crate::conn::Deferred::is(fd) {
        crate::conn::Deferred::give_up(fd);
        crate::reasons::note(crate::reasons::Reason::KernelFeature, None);
    }
    if let Some(c) = crate::conn::lookup(fd) {
        kernel_features_on(&c);
    }
}

/// At a connection's set-up: whether its kernel socket has a kernel-only feature on
/// (inherited from its listener, or set before connect). Asked only once the process
/// turned one on somewhere.
pub fn inherited_kernel_features(fd: c_int) -> bool {
    if !KERNEL_FEATURES_SEEN.load(Ordering::Relaxed) || crate::sandbox::filtered() {
        return false;
    }
    let get = |name: c_int| {
        let mut v: c_int = 0;
        let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
        // SAFETY: v and len are valid for the kernel to write.
        let r =
            unsafe { libc::syscall(libc::SYS_getsockopt, fd, libc::SOL_SOCKET, name, &mut v as *mut c_int, &mut len) };
        (r == 0).then_some(v)
    };
    get(libc::SO_PEEK_OFF).is_some_and(|v| v >= 0)
        || [libc::SO_TIMESTAMP, libc::SO_TIMESTAMPNS, libc::SO_TIMESTAMPING]
            .into_iter()
            .any(|n| get(n).is_some_and(|v| v != 0))
}

/// Both directions of `conn` leave the ring for good (FLAG_KERNEL_FEATURES): each sender
/// goes to the kernel at its next send, after the ring bytes it already published.
pub fn kernel_features_on(conn: &Conn) {
    kernel_features_on_for(conn, crate::reasons::Reason::KernelFeature);
}

/// As [`kernel_features_on`], said for `why`.
pub fn kernel_features_on_for(conn: &Conn, why: crate::reasons::Reason) {
    if conn.own.set_flags(FLAG_KERNEL_FEATURES) & FLAG_KERNEL_FEATURES == 0 {
        crate::reasons::note(why, Some(&conn.key));
    }
    want_ring(&conn.own, false);
    conn.own.tx_word().to_kernel_mode();
    if let Some(p) = conn.peer() {
        p.tx_word().to_kernel_mode();
    }
}

/// `SIOCATMARK` of the kernel socket: whether its next byte is the urgent mark (the
/// kernel's test for stopping a read there). False when it cannot be asked.
pub fn kernel_at_mark(fd: c_int) -> bool {
    if crate::sandbox::filtered() {
        return false;
    }
    let mut at: c_int = 0;
    // SAFETY: SIOCATMARK writes one int.
    let r = unsafe { (real().ioctl)(fd, SIOCATMARK, (&mut at as *mut c_int) as usize) };
    r == 0 && at != 0
}

/// `SIOCATMARK` (linux/sockios.h; the libc crate does not define it for Linux).
pub const SIOCATMARK: libc::c_ulong = 0x8905;

/// The receiving side's low-water mark changed (setsockopt SO_RCVLOWAT, or found inherited
/// from the listener): above 1, the peer's direction goes through the kernel for as long as
/// it stays so (see FLAG_RX_LOWAT); back at 1, the receiver may switch it back to the ring
/// by the usual rule. Ring bytes already published before stay first in the stream.
pub fn set_lowat(conn: &Conn, fd: c_int, lowat: c_int) {
    conn.own.rx_lowat().store(lowat.max(1) as u32, Ordering::Relaxed);
    if lowat > 1 {
        conn.own.set_flags(FLAG_RX_LOWAT);
        want_ring(&conn.own, false);
        if let Some(p) = conn.peer() {
            p.tx_word().to_kernel_mode();
        }
        sync_kernel_lowat(conn, fd);
    } else if conn.own.has_flag(FLAG_RX_LOWAT) {
        conn.own.clear_flags(FLAG_RX_LOWAT);
    }
}

/// Under a low-water mark L with n ring bytes unread (published before the mark was set),
/// the kernel socket's own mark is L - n (at least 1): the kernel then wakes waits and ends
/// blocking receives when its bytes and the ring's together reach L, as one queue of them
/// would. Back to L once the ring is empty. errno is left as it was.
pub fn sync_kernel_lowat(conn: &Conn, fd: c_int) {
    if crate::sandbox::filtered() || !conn.own.has_flag(FLAG_RX_LOWAT) {
        return;
    }
    let lowat = u64::from(conn.own.rx_lowat().load(Ordering::Relaxed).max(1));
    let unread = conn.ring_unread();
    let want = if unread == 0 { lowat } else { lowat.saturating_sub(unread).max(1) };
    let v = want.min(c_int::MAX as u64) as c_int;
    let saved = errno();
    // SAFETY: v is a valid int option value.
    unsafe {
        libc::syscall(
            libc::SYS_setsockopt,
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVLOWAT,
            &v as *const c_int,
            std::mem::size_of::<c_int>() as libc::socklen_t,
        )
    };
    set_errno(saved);
}

/// Puts the kernel's low-water mark right when a receive that began with ring bytes under a
/// mark ends (see [`sync_kernel_lowat`]), after its own kernel receive, which needed the
/// lowered mark.
struct LowatSync<'a> {
    conn: &'a Conn,
    fd: c_int,
}

impl Drop for LowatSync<'_> {
    fn drop(&mut self) {
        sync_kernel_lowat(self.conn, self.fd);
    }
}

/// Whether a try to switch the peer's direction back to the ring is due now. Each try costs
/// a system call (the kernel must be empty), and when nobody spins for the next bytes (a
/// server that answers slower than a spin lasts, a receiver whose spin is not allowed) its
/// next wait takes the direction straight back to the kernel: trying at every kernel read
/// made each read two system calls, slower than plain TCP. So tries back off (1, 2, 4 ...
/// 64 reads, per socket) while the switches do not pay (fewer than [`PAYING_READS`] reads
/// found ring bytes between two), and a switch that pays (a receiver that kept finding its
/// data in the ring: busy or spinning when it came) resets it.
/// After [`RETIRE_AFTER`] fruitless tries (a paying one takes half of them back), when they
/// have not fallen under half that for [`RETIRE_SPAN`], the direction is retired instead
/// (see [`maybe_ring_mode`]).
fn flip_due(conn: &Conn) -> FlipTry {
    let f = conn.flip.get();
    if f.skip > 0 {
        conn.flip.set(FlipBackoff { skip: f.skip - 1, ..f });
        return FlipTry::NotDue;
    }
    let now = crate::udp::coarse_ms() as u32 % FlipCell::SINCE_MODULUS;
    let fruitless = if f.paid() { f.fruitless / 2 } else { f.fruitless + 1 };
    // The tries have mostly not paid since they first stayed at half the retiring count.
    let since_ms = if f.fruitless < RETIRE_AFTER / 2 { now } else { f.since_ms };
    let streak = (now + FlipCell::SINCE_MODULUS - since_ms) % FlipCell::SINCE_MODULUS;
    if fruitless >= RETIRE_AFTER && u128::from(streak) >= RETIRE_SPAN.as_millis() && retiring_allowed() {
        return FlipTry::Retire;
    }
    let backoff = if f.paid() { 0 } else { (f.backoff * 2).clamp(1, FLIP_BACKOFF_MAX) };
    conn.flip.set(FlipBackoff { skip: backoff, backoff, ring_reads: 0, fruitless, since_ms });
    FlipTry::Try
}

/// What [`flip_due`] says to do after a kernel read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FlipTry {
    /// Stay parked.
    NotDue,
    /// Try to switch the direction back to the ring.
    Try,
    /// Retire the direction from the ring for good.
    Retire,
}

/// Whether directions may be retired: `LANES_SOCKETS_RETIRE=0` keeps every one parked and
/// tried again forever (a diagnostic, and for tests that need a direction to keep coming
/// back to the ring however long it did not pay).
fn retiring_allowed() -> bool {
    static R: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *R.get_or_init(|| std::env::var_os("LANES_SOCKETS_RETIRE").is_none_or(|v| v != "0"))
}

/// The most kernel reads that pass between two tries (see [`flip_due`]).
const FLIP_BACKOFF_MAX: u32 = 64;

/// Ring bytes were read: at the [`PAYING_READS`]-th since the switch, it paid.
#[inline]
fn ring_read(conn: &Conn) {
    let f = conn.flip.get();
    if !f.paid() {
        let ring_reads = f.ring_reads + 1;
        let skip = if ring_reads >= PAYING_READS { 0 } else { f.skip };
        conn.flip.set(FlipBackoff { skip, ring_reads, ..f });
    }
}

/// A try found kernel bytes unread and asked the sender to let them drain: try again at
/// the next read. The try is not over, so it is not counted fruitless (a stream's receiver
/// retries at each read until the kernel drains; counting each retry retired a one-way
/// stream within a dozen reads).
fn flip_again(conn: &Conn) {
    let f = conn.flip.get();
    conn.flip.set(FlipBackoff { skip: 0, fruitless: f.fruitless.saturating_sub(1), ..f });
}

/// After a kernel read: switches the peer's sending direction back to the ring if
/// everything is read, a try is due ([`flip_due`]) and a CPU is free (`spin::cpu_free`:
/// without one the try fails at once); until the next try, the direction is parked (reads
/// and waits are the kernel's alone, see `park`). A direction whose tries
/// keep not paying is retired from the ring for good (`park::retire`): a connection the
/// ring cannot speed up (nobody is ever waiting when its bytes come: more runnable threads
/// than CPUs) then costs nothing over kernel TCP.
pub fn maybe_ring_mode(conn: &Conn, fd: c_int, call: Call) {
    if conn.rx_retired() {
        return;
    }
    if !ring_allowed(conn) {
        // With a kernel-only feature at either end the direction never returns to the ring:
        // once its ring is read to the end, it is retired (its calls are the kernel's).
        if let Some(peer) =
            conn.peer().filter(|p| p.has_flag(FLAG_KERNEL_FEATURES) || conn.own.has_flag(FLAG_KERNEL_FEATURES))
        {
            if crate::park::retire(conn, peer) && conn.tx_retired() {
                release_nodelay(conn, fd);
            }
        }
        return;
    }
    let Some(peer) = conn.peer() else { return };
    let due = match flip_due(conn) {
        // No CPU is free: this receiver cannot spin for the next bytes, nor its sender run
        // while it reads, so the switch cannot pay. The try fails at once, as one that paid
        // nothing would (flip_due counted it so), without the switch's system calls and the
        // sleeping protocol after it (PostgreSQL's select-only run, ten processes on two
        // CPUs, ran 9% under kernel TCP while its directions were tried, 1.5% once they
        // were not), and the direction retires once the tries have not paid for long.
        FlipTry::Try if !crate::spin::cpu_free() => FlipTry::NotDue,
        due => due,
    };
    match due {
        FlipTry::NotDue => {
            want_ring(&conn.own, false);
            crate::park::park(conn, peer);
            return;
        }
        FlipTry::Retire => {
            want_ring(&conn.own, false);
            if crate::park::retire(conn, peer) {
                crate::reasons::note(crate::reasons::Reason::RingDidNotPay, Some(&conn.key));
                if conn.tx_retired() {
                    release_nodelay(conn, fd);
                }
            }
            return;
        }
        FlipTry::Try => {}
    }
    if !crate::park::unpark(conn, peer) {
        return;
    }
    force_nodelay(conn, fd);
    let consumed = conn.own.rx_consumed().load(Ordering::Acquire);
    let kread = conn.own.rx_kernel_read().load(Ordering::Acquire);
    let ring = peer.tx_word().try_ring_mode(consumed, kread, || kernel_empty(call, fd));
    // Asking for the ring back makes the sender pause while we drain the kernel: worth it
    // only if a CPU is free for us to read (and spin for) its next bytes (without that, a
    // stream of small messages stalled its sender at every read and ran at a third of
    // kernel TCP's rate). A stream then gets its turn at the next read.
    let hand_back = !ring && !config().poll_time.is_zero() && crate::spin::cpu_free();
    if hand_back {
        flip_again(conn);
    }
    want_ring(&conn.own, hand_back);
}

/// At most this many bytes received in all makes a direction idle: a one-way stream's
/// other direction (a subscription, a download's request).
const IDLE_INPUT_BYTES: u64 = 4096;

/// A direction that carried at most this share of what the other one delivered is idle
/// too: the requests of a server that answers each with a large file.
const IDLE_INPUT_SHARE: u64 = 64;

/// This end's sending direction is the kernel's for good (the peer retired it): the peer's
/// direction, if it has carried next to nothing ([`IDLE_INPUT_BYTES`], or under
/// 1/[`IDLE_INPUT_SHARE`] of what ours delivered), is retired too, so that the whole
/// connection is kernel TCP's and its calls pass straight through. Left in ring mode with
/// little to carry, it was seldom or never tried (tries are made at kernel reads), so the
/// connection stayed the library's: each send, receive and epoll call of a one-way stream
/// went the whole way through the library, and an epoll set holding it waited in the
/// library's loop (mosquitto relaying to a subscriber ran at 0.85 of kernel TCP, lighttpd
/// serving a 1 MB file to wrk at 0.87).
fn retire_idle_input(conn: &Conn) {
    let Some(peer) = conn.peer() else { return };
    if input_is_idle(conn, peer) && take_input_off_the_ring(conn, peer) {
        crate::reasons::note(crate::reasons::Reason::RingDidNotPay, Some(&conn.key));
    }
}

/// Whether the peer's direction has carried next to nothing (see [`retire_idle_input`]).
fn input_is_idle(conn: &Conn, peer: &Endpoint) -> bool {
    let received = conn
        .own
        .rx_consumed()
        .load(Ordering::Acquire)
        .saturating_add(conn.own.rx_kernel_read().load(Ordering::Acquire));
    // What the peer read of ours (its counts: a sendfile of ours is not in our own).
    let delivered =
        peer.rx_consumed().load(Ordering::Acquire).saturating_add(peer.rx_kernel_read().load(Ordering::Acquire));
    received <= IDLE_INPUT_BYTES || received.saturating_mul(IDLE_INPUT_SHARE) <= delivered
}

/// Retires the peer's direction: out of ring mode first (the receiver may do so at any
/// time; bytes the sender published before stay to be read first), then parked and
/// retired once the ring is read to the end (a call that finds bytes still unread
/// retires it at a later send). True if this call retired it.
fn take_input_off_the_ring(conn: &Conn, peer: &Endpoint) -> bool {
    peer.tx_word().to_kernel_mode();
    crate::park::retire(conn, peer)
}

/// Both directions of the connection are retired from the ring: Nagle's algorithm, forced
/// off for the ring's sake ([`force_nodelay`]), is the program's own choice again, so a
/// stream of small writes is coalesced as the program asked (once: the first end to see
/// both retired puts its own socket back).
pub fn release_nodelay(conn: &Conn, fd: c_int) {
    if crate::sandbox::filtered() || !conn.own.has_flag(FLAG_NODELAY_FORCED) {
        return;
    }
    let before = conn.own.clear_flags(FLAG_NODELAY_FORCED);
    if before & FLAG_NODELAY_FORCED != 0 && before & FLAG_APP_NODELAY == 0 {
        set_kernel_nodelay(fd, false);
    }
}

/// Receives into `iov` with `flags` (MSG_PEEK, MSG_DONTWAIT, MSG_WAITALL honoured), for
/// the program's `call`.
pub fn recv(conn: &Conn, fd: c_int, call: Call, iov: &[iovec], flags: c_int, mut msg: Option<RecvMsg<'_>>) -> ssize_t {
    let r = recv_stream(conn, fd, call, iov, flags, &mut msg);
    if let Some(m) = msg.as_mut() {
        // A receive the kernel answered carries its own control messages; one the ring
        // answered alone carries TCP_CM_INQ if the program asked for it, as the kernel's
        // would (not for urgent data or the error queue: the kernel's has none there).
        if r >= 0
            && m.control > 0
            && m.hdr.msg_controllen == 0
            && flags & (libc::MSG_OOB | libc::MSG_ERRQUEUE) == 0
            && inq_wanted(conn, fd)
        {
            if let Some(peer) = conn.peer() {
                put_inq(m, inq_after(conn, fd, peer));
            }
        }
    }
    r
}

fn recv_stream(
    conn: &Conn,
    fd: c_int,
    call: Call,
    iov: &[iovec],
    flags: c_int,
    msg: &mut Option<RecvMsg<'_>>,
) -> ssize_t {
    // Taken once the call is about to wait: a receive that finds bytes pays nothing for it.
    let mut since: Option<crate::signals::Since> = None;
    if flags & libc::MSG_ERRQUEUE != 0 {
        // The socket's error queue (MSG_ZEROCOPY completions, timestamps, IP_RECVERR) is
        // the kernel's and holds no byte of the stream: never the ring, never counted.
        return kernel_recv(call, fd, iov, flags, msg);
    }
    if conn.rx_retired() {
        // The kernel holds every byte of this direction, for good: the program's own call.
        if conn.tx_retired() {
            // Both directions: the next calls do not come here at all.
            release_nodelay(conn, fd);
            crate::conn::mark_retired(fd);
        }
        let r = kernel_recv(call, fd, iov, flags, msg);
        if r > 0 && flags & libc::MSG_PEEK == 0 {
            kernel_bytes_read(conn, r);
        }
        return r;
    }
    if flags & libc::MSG_OOB != 0 {
        // The urgent byte never travels through the ring (see FLAG_TX_URGENT): the kernel
        // has it, or answers EINVAL/EAGAIN as it would. It is not a byte of the stream.
        return kernel_recv(call, fd, iov, flags, msg);
    }
    let total = iov_len(iov);
    let Some(peer) = conn.peer() else {
        let r = kernel_recv(call, fd, iov, flags, msg);
        if r > 0 && flags & libc::MSG_PEEK == 0 {
            kernel_bytes_read(conn, r);
            maybe_ring_mode(conn, fd, call);
        }
        return r;
    };
    let peek = flags & libc::MSG_PEEK != 0;
    let parked = crate::park::hold(conn).map(|_hold| kernel_recv(call, fd, iov, flags, msg));
    if let Some(r) = parked {
        return after_parked_recv(conn, peer, fd, call, total, flags, r);
    }
    let nonblocking = conn.nonblocking() || flags & libc::MSG_DONTWAIT != 0;
    let waitall = flags & libc::MSG_WAITALL != 0 && !peek && !nonblocking;
    // Ring bytes under a low-water mark (published before it was set): a blocking receive
    // goes on into the kernel until it has min(mark, len) bytes, the kernel's target; the
    // kernel's own mark, lowered by the ring's bytes, makes its receive stop there.
    let leftovers = conn.own.has_flag(FLAG_RX_LOWAT) && conn.ring_unread() > 0;
    let _lowat_sync = leftovers.then_some(LowatSync { conn, fd });
    let target = if leftovers && !peek && !nonblocking { (conn.rx_lowat() as usize).min(total) } else { 0 };
    let word = peer.tx_word();
    let cap = peer.ring_bytes();
    let mut got = 0usize;
    // The spin of this wait: not begun, spinning, or over (refused, or run out).
    let mut spin: Option<crate::spin::Spin> = None;
    let mut spin_over = false;
    if let Some(m) = msg.as_mut() {
        m.hdr.msg_flags = 0;
    }
    loop {
        let consumed = conn.own.rx_consumed().load(Ordering::Acquire);
        // Bytes already known to be there need no look at the peer's state word, nor do
        // bytes the sender's view shows (its line, not the word's, which the sender's next
        // publish needs back).
        let mut seen = conn.seen_ring_unread(consumed, cap);
        // The view as this turn read it: a spin waits for it to change.
        let mut view_looked = None;
        if seen == 0 {
            let view = word.sender_view();
            view_looked = Some(view);
            seen = ring_unread_within(view.published(), consumed, cap);
            if seen > 0 {
                conn.saw_peer_published(consumed + seen);
            }
        }
        // With nothing to read, a receive that may still spin takes the sender's view in
        // ring mode for the word: it only spins on it, and a spin that ends reads the word
        // before anything else (a receiver that read the word at every message took its
        // line from the sender at every message).
        let may_spin = !spin_over && !nonblocking && !conn.rx_shut.load(Ordering::Relaxed);
        let mut from_view = false;
        let state = (seen == 0).then(|| {
            let view = view_looked.unwrap_or_else(|| word.sender_view());
            if may_spin && view.ring_mode() && view.ring_unread(consumed) == 0 {
                from_view = true;
                view
            } else {
                word.load()
            }
        });
        if let Some(s) = state {
            conn.saw_peer_published(s.published());
        }
        let unread = state.map_or(seen, |s| s.ring_unread(consumed)) as usize;
        if unread > 0 {
            if got == total {
                // A receive of 0 bytes (recv, recvmsg: read and readv of 0 never get here)
                // returns 0 once bytes are there, taking none, as TCP's does.
                return 0;
            }
            let _lock = lock_shared(conn.own.rx_lock());
            let consumed = conn.own.rx_consumed().load(Ordering::Acquire);
            // The state word (or the sender's view of it) as this call last read it, if it did.
            let mut looked = state.or(view_looked);
            let unread = match conn.seen_ring_unread(consumed, cap) {
                0 => {
                    let now = word.load();
                    looked = Some(now);
                    conn.saw_peer_published(now.published());
                    ring_unread_between(now.published(), consumed)
                }
                seen => seen,
            } as usize;
            let n = unread.min(total - got);
            if n == 0 {
                continue;
            }
            if let Some(s) = spin.take() {
                s.hit();
            }
            // SAFETY: the published bytes from `consumed` are the sender's to leave alone
            // until we advance `consumed`; the caller's buffers are valid.
            if !unsafe { copy_ring(peer.ring(), consumed as usize, iov, got, n, false) } {
                // Never so (as in the send path): nothing is consumed.
                return ring_refused(got);
            }
            if !peek {
                conn.own.rx_consumed().store(consumed + n as u64, Ordering::Release);
                ring_read(conn);
            }
            got += n;
            if got == total {
                return got as ssize_t;
            }
            if !waitall && got >= target {
                // Ring mode when this call last read the word: no kernel bytes behind the
                // ring's (a sender switching to the kernel during the copy is the same as
                // one switching just after a look here: its bytes are the next call's).
                // Reading the word again was a cache miss at every receive under a sender
                // the receiver keeps up with.
                let more = if looked.is_some_and(|s| s.ring_mode()) {
                    0
                } else {
                    kernel_rest(conn, fd, call, iov, got, flags, msg)
                };
                // Not under the receive lock: a switch back to the ring, or a parking,
                // takes it.
                drop(_lock);
                if more > 0 && !peek {
                    maybe_ring_mode(conn, fd, call);
                }
                return (got + more) as ssize_t;
            }
            continue;
        }
        // Nothing unread: the state word was read above.
        let Some(state) = state else { continue };
        if got > 0 && !waitall && got >= target {
            return got as ssize_t;
        }
        if got > 0 && peer.has_flag(FLAG_TX_URGENT) && kernel_at_mark(fd) {
            // MSG_WAITALL stops at the urgent mark, as the kernel's receive does once it
            // has copied something (the ring's bytes, or an earlier kernel read here).
            return got as ssize_t;
        }
        let rest = sub_iov(iov, got, total - got);
        if state.ring_mode() && !conn.rx_shut.load(Ordering::Relaxed) && !nonblocking {
            // Blocking: spin on the state word (if a CPU is free for it, see `spin`), then
            // sleep in the kernel.
            since.get_or_insert_with(crate::signals::Since::now);
            if spin.is_none() && !spin_over {
                // A sender waiting for the ring to come back publishes as soon as it sees
                // ring mode: a short budget would sleep (and take the stream back to the
                // kernel) just before its bytes arrive.
                spin = if peer.has_flag(FLAG_AWAITING_RING) {
                    crate::spin::Spin::begin_full()
                } else {
                    crate::spin::Spin::begin(None)
                };
                spin_over = spin.is_none();
            }
            if spin.as_mut().is_some_and(|s| s.go_on()) {
                // On the sender's view: the word's line stays the sender's. Any change of
                // the sender's since the look above (a publish, a switch to the kernel)
                // ends a turn: a view read again here could already hold the bytes, and
                // the turn would then wait its whole length for another change.
                let before = view_looked.unwrap_or(state);
                for _ in 0..64 {
                    std::hint::spin_loop();
                    if word.sender_view() != before {
                        break;
                    }
                }
                continue;
            }
        }
        if from_view {
            // The spin is over (or refused): the word itself decides what comes next.
            if let Some(s) = spin.take() {
                s.miss();
            }
            spin_over = true;
            continue;
        }
        // Kernel path, always with the program's own call and flags (plus MSG_DONTWAIT for
        // the calls that take flags). In kernel mode (the ring was empty when the state was
        // read, and only a receiver can bring ring mode back) a blocking recv first takes
        // what the kernel already holds. Otherwise, or if there is nothing, the call counts
        // itself a sleeper, which also leaves ring mode, unless ring bytes arrived (they
        // must be read first), and asks the kernel: it waits there if blocking, or gets
        // the kernel's answer (bytes written behind the sender's back, end of stream, reset,
        // EAGAIN) if not. A call that found the direction in ring mode and saw nothing come
        // through the kernel meanwhile puts ring mode back as it leaves.
        if let Some(s) = spin.take() {
            s.miss();
        }
        spin_over = true;
        let kflags = flags & !libc::MSG_WAITALL;
        let mut r = -1;
        let mut e = libc::EAGAIN;
        // Only when the counts say the kernel holds bytes of ours: otherwise the answer is
        // almost always EAGAIN, and the sleeping call below returns at once if it is not.
        // Not under a low-water mark: a blocking receive must wait for that many bytes, and
        // this look would return fewer.
        if !nonblocking
            && !state.ring_mode()
            && call.takes_flags()
            && !conn.own.has_flag(FLAG_RX_LOWAT)
            && !state.kernel_caught_up(conn.own.rx_kernel_read().load(Ordering::Acquire))
        {
            r = kernel_recv(call, fd, &rest, kflags | libc::MSG_DONTWAIT, msg);
            e = errno();
        }
        if r < 0 && (e == libc::EAGAIN || e == libc::EWOULDBLOCK) {
            if !nonblocking && since.is_some_and(|s| s.interrupts_receive(fd)) {
                // A handler ran while this call spun: the kernel's receive would have
                // ended with it, with the bytes it had or EINTR.
                if got > 0 {
                    return got as ssize_t;
                }
                set_errno(libc::EINTR);
                return -1;
            }
            let Some(ticket) = word.prepare_sleep(conn.own.rx_consumed().load(Ordering::Acquire)) else { continue };
            let will_wait =
                !nonblocking && word.load().kernel_caught_up(conn.own.rx_kernel_read().load(Ordering::Acquire));
            if will_wait {
                want_ring(&conn.own, false);
            }
            let slept = Instant::now();
            r = kernel_recv(call, fd, &rest, kflags, msg);
            e = errno();
            word.finish_sleep(ticket, ring_allowed(conn));
            if r > 0 && will_wait {
                crate::spin::woke_after(slept.elapsed());
            }
        }
        if r > 0 {
            if !peek {
                kernel_bytes_read(conn, r);
                maybe_ring_mode(conn, fd, call);
            }
            got += r as usize;
            if waitall && got < total {
                spin_over = false;
                continue;
            }
            return got as ssize_t;
        }
        if got > 0 {
            return got as ssize_t;
        }
        if r == 0 && total > 0 && !peek && reset_instead_of_end(conn, peer) {
            return -1;
        }
        set_errno(e);
        return r;
    }
}

/// The end of a receive made while the peer's direction was parked (see `park`): the
/// program's own call answered, as the kernel holds every byte of the stream.
fn after_parked_recv(
    conn: &Conn,
    peer: &Endpoint,
    fd: c_int,
    call: Call,
    total: usize,
    flags: c_int,
    r: ssize_t,
) -> ssize_t {
    let peek = flags & libc::MSG_PEEK != 0;
    if r > 0 && !peek {
        kernel_bytes_read(conn, r);
        maybe_ring_mode(conn, fd, call);
    } else if r == 0 && total > 0 && !peek && reset_instead_of_end(conn, peer) {
        return -1;
    }
    r
}

/// Counts `r` bytes the kernel path delivered to the program.
#[inline]
fn kernel_bytes_read(conn: &Conn, r: ssize_t) {
    conn.own.rx_kernel_read().fetch_add(r as u64, Ordering::AcqRel);
}

/// At the kernel's end of stream: whether the program gets ECONNRESET (errno set) instead,
/// as the kernel would answer had the dead peer's unread bytes sat in its receive queue
/// instead of our ring (the peer's close sent RST, not FIN). Once only.
fn reset_instead_of_end(conn: &Conn, peer: &Endpoint) -> bool {
    if peer_died_with_unread(conn, peer) && conn.own.set_flags(FLAG_RESET) & FLAG_RESET == 0 {
        set_errno(libc::ECONNRESET);
        return true;
    }
    false
}

/// After ring bytes, the bytes the kernel already holds behind them (the sender left ring
/// mode after publishing them: for urgent data, a low-water mark, a full ring), as one
/// kernel receive returns (or, with MSG_PEEK, shows) everything queued: without waiting, never past the urgent mark
/// (FIONREAD counts up to it, and a mark next is asked for) and never taking a pending error or the end of the stream
/// (only queued bytes are asked for; the next call gets those). Returns the bytes added.
/// Costs a FIONREAD only when the counts say the kernel holds bytes of ours. Called under
/// the receive lock: the caller tries the switch back to the ring once it let go.
fn kernel_rest(
    conn: &Conn,
    fd: c_int,
    call: Call,
    iov: &[iovec],
    got: usize,
    flags: c_int,
    msg: &mut Option<RecvMsg<'_>>,
) -> usize {
    let Some(peer) = conn.peer() else { return 0 };
    let word = peer.tx_word();
    let kread = conn.own.rx_kernel_read().load(Ordering::Acquire);
    // The sender's view first: kernel bytes come only from its reservations, which it
    // shows. A view behind the word skips bytes the next call reads, as a look just before
    // the sender's switch would have.
    let view = word.sender_view();
    if view.ring_mode() || view.kernel_caught_up(kread) {
        return 0;
    }
    let state = word.load();
    // A peek left the ring's bytes (the `got` first ones) in place; anything more there
    // comes before the kernel's.
    let peeked = if flags & libc::MSG_PEEK != 0 { got as u64 } else { 0 };
    if crate::sandbox::filtered()
        || state.ring_mode()
        || state.kernel_caught_up(kread)
        || state.ring_unread(conn.own.rx_consumed().load(Ordering::Acquire)) > peeked
    {
        return 0;
    }
    // At the mark a fresh kernel receive would go past it (SO_OOBINLINE: FIONREAD counts
    // beyond it), where one receive of both stops.
    if peer.has_flag(FLAG_TX_URGENT) && kernel_at_mark(fd) {
        return 0;
    }
    let saved = errno();
    let mut queued: c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let r = unsafe { (real().ioctl)(fd, libc::FIONREAD, (&mut queued as *mut c_int) as usize) };
    let total = iov_len(iov);
    if r != 0 || queued <= 0 || got >= total {
        set_errno(saved);
        return 0;
    }
    let rest = sub_iov(iov, got, (total - got).min(queued as usize));
    // Never a wait, even if another thread took the queued bytes meanwhile: read and readv
    // ask as recv and recvmsg with MSG_DONTWAIT (not under a seccomp filter, see above).
    let kflags = (flags & !libc::MSG_WAITALL) | libc::MSG_DONTWAIT;
    let r = match call {
        Call::Plain => kernel_recv(Call::Socket, fd, &rest, kflags, &mut None),
        Call::Vector | Call::VectorFlags(_) => kernel_recv(Call::Msg, fd, &rest, kflags, &mut None),
        Call::Socket | Call::Msg => kernel_recv(call, fd, &rest, kflags, msg),
    };
    set_errno(saved);
    if r <= 0 {
        return 0;
    }
    if flags & libc::MSG_PEEK != 0 {
        return r as usize;
    }
    kernel_bytes_read(conn, r);
    r as usize
}

/// At the kernel's end of stream: whether the peer ended without closing through the
/// library (killed: its record was never marked closed and no process holds it any more)
/// while bytes we sent through the ring were still unread in it. Closing a TCP socket with
/// unread data resets the connection; the kernel saw none (they were in our ring) and sent
/// FIN. Asked only at the end of a stream.
fn peer_died_with_unread(conn: &Conn, peer: &Endpoint) -> bool {
    if conn.own.has_flag(FLAG_RESET) {
        return false;
    }
    let unread = conn.own.tx_word().load().ring_unread(peer.rx_consumed().load(Ordering::Acquire)) > 0;
    unread && !peer.has_flag(FLAG_TX_CLOSED | FLAG_RX_CLOSED) && peer.holders().is_empty()
}

/// A send after the connection was reset (see `peer_died_with_unread`): EPIPE, and
/// SIGPIPE unless MSG_NOSIGNAL, as the kernel answers on a reset socket.
fn reset_send(flags: c_int) -> ssize_t {
    if flags & libc::MSG_NOSIGNAL == 0 {
        // SAFETY: raising a signal for this thread, as the kernel's send would.
        unsafe { libc::raise(libc::SIGPIPE) };
    }
    set_errno(libc::EPIPE);
    -1
}

/// FIONREAD: ring bytes plus the kernel's.
pub fn readable_bytes(conn: &Conn, fd: c_int) -> Option<c_int> {
    let mut n: c_int = 0;
    // SAFETY: FIONREAD writes one int.
    if unsafe { (real().ioctl)(fd, libc::FIONREAD, (&mut n as *mut c_int) as usize) } != 0 {
        return None;
    }
    let ring = match conn.peer() {
        Some(p) => p.tx_word().load().ring_unread(conn.own.rx_consumed().load(Ordering::Acquire)),
        None => 0,
    };
    Some(n.saturating_add(ring.min(c_int::MAX as u64) as c_int))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes::platform::mapping::Mapping;

    fn iov(buf: &mut [u8]) -> iovec {
        iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() }
    }

    /// A receiving direction is idle when it took at most 4 KiB in all, or under 1/64 of
    /// what the other direction delivered; an idle one in ring mode, its ring read, is
    /// taken out of ring mode, parked and retired at once.
    #[test]
    fn a_direction_is_idle_by_its_bytes_or_by_its_share_of_the_other() {
        for (received, delivered, idle) in
            [(100u64, 0u64, true), (10_000, 1_000_000, true), (10_000, 100_000, false), (10_000, 0, false)]
        {
            let dir = lanes_testkit::TestDir::new("idle-input");
            let c = crate::conn::test_conn_with_peer(dir.root());
            let peer = c.peer().expect("attached");
            c.own.rx_kernel_read().store(received, Ordering::Release);
            peer.rx_kernel_read().store(delivered, Ordering::Release);
            assert_eq!(input_is_idle(&c, peer), idle, "received {received}, delivered {delivered}");
        }
        let dir = lanes_testkit::TestDir::new("idle-input-retire");
        let c = crate::conn::test_conn_with_peer(dir.root());
        let peer = c.peer().expect("attached");
        assert!(peer.tx_word().try_ring_mode(0, 0, || true), "the peer's direction starts on the ring");
        assert!(take_input_off_the_ring(&c, peer), "retired by this call");
        let word = peer.tx_word().load();
        assert!(c.rx_retired() && !word.ring_mode() && word.parked(), "retired: kernel mode, parked, flagged");
        assert!(!take_input_off_the_ring(&c, peer), "once");
    }

    #[test]
    fn a_switch_pays_only_when_the_ring_serves_more_than_one_read() {
        let dir = lanes_testkit::TestDir::new("flip-pays");
        let c = crate::conn::test_conn(dir.root());
        assert_eq!(flip_due(&c), FlipTry::Try, "the first kernel read tries");
        // One message found in the ring: the switch did not pay, so the tries back off.
        ring_read(&c);
        assert_eq!(flip_due(&c), FlipTry::Try);
        assert_eq!(c.flip.get().fruitless, 1);
        assert_eq!(flip_due(&c), FlipTry::NotDue, "backing off");
        assert_eq!(flip_due(&c), FlipTry::Try);
        assert_eq!(c.flip.get().fruitless, 2);
        // The ring served a second read after this switch: it paid, the back-off is gone.
        for _ in 0..PAYING_READS {
            ring_read(&c);
        }
        assert!(c.flip.get().paid());
        assert_eq!(flip_due(&c), FlipTry::Try);
        assert_eq!(c.flip.get().fruitless, 1, "a paying try takes half the fruitless ones back");
        assert_eq!(flip_due(&c), FlipTry::Try, "no back-off after a paying try");
    }

    #[test]
    fn copy_ring_wraps_in_pieces_both_ways() {
        let map = Mapping::anonymous(8192).unwrap();
        let ring = map.slice().subslice(0, 4096).unwrap();
        let mut a: Vec<u8> = (0..1500u32).map(|i| (i % 251) as u8).collect();
        let mut b: Vec<u8> = (0..2500u32).map(|i| (i % 241) as u8).collect();
        let src = [iov(&mut a), iov(&mut b)];
        // From position 3000 (wrapping at 4096), skipping 100 bytes of the buffers.
        // SAFETY: the iovecs are private buffers of their lengths.
        assert!(unsafe { copy_ring(ring, 4096 * 3 + 3000, &src, 100, 3900, true) });
        let mut out = vec![0u8; 4096];
        ring.copy_to(0, &mut out).unwrap();
        let sent: Vec<u8> = a[100..].iter().chain(&b).copied().collect();
        assert_eq!(&out[3000..], &sent[..1096]);
        assert_eq!(&out[..3900 - 1096], &sent[1096..]);
        let mut back = vec![0u8; 4000];
        let dst = [iov(&mut back)];
        // SAFETY: as above, written.
        assert!(unsafe { copy_ring(ring, 3000, &dst, 100, 3900, false) });
        assert_eq!(&back[100..], &sent[..]);
        // A ring of a size not a power of two is refused, untouched.
        let odd = map.slice().subslice(4096, 3000).unwrap();
        // SAFETY: as above.
        assert!(!unsafe { copy_ring(odd, 0, &src, 0, 10, true) });
        let mut rest = vec![1u8; 3000];
        odd.copy_to(0, &mut rest).unwrap();
        assert!(rest.iter().all(|&x| x == 0));
    }
}
