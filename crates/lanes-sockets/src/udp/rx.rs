//! Receiving: the ring's datagrams and the kernel's, merged, with the kernel's semantics
//! (boundaries, `MSG_PEEK`, `MSG_TRUNC` in and out, source addresses, blocking that sleeps
//! in the kernel, `SO_RCVTIMEO`, `EINTR`).

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use libc::{c_int, iovec, sockaddr, socklen_t, ssize_t};

use lanes::sockets::udp::{Datagram, UdpRecord};

use super::{ensure_record, pin, sockaddr_for, UdpSock};
use crate::real::{errno, set_errno};
use crate::spin;

/// How often a spinning receive asks the kernel (datagrams of senders without the library).
const KERNEL_CHECK_EVERY: Duration = Duration::from_micros(10);
/// A blocking kernel receive that returned sooner than this found a datagram waiting: the
/// socket is busy.
const BUSY_WAKE: Duration = Duration::from_micros(20);
/// How often a blocking receive that may not spin looks whether the ring can take over.
const FLIP_EVERY: Duration = Duration::from_millis(1);
/// Every this many receives that find the ring busy, the kernel is read first.
const KERNEL_FIRST_EVERY: u32 = 16;

/// Where a receive puts what it got besides the payload (all may be null).
pub struct Out {
    pub name: *mut sockaddr,
    pub namelen: *mut socklen_t,
    /// recvmsg's `msg_flags` and `msg_controllen`.
    pub msg_flags: *mut c_int,
    pub controllen: *mut usize,
}

impl Out {
    /// recv, read: nothing but the payload.
    pub fn none() -> Out {
        Out {
            name: std::ptr::null_mut(),
            namelen: std::ptr::null_mut(),
            msg_flags: std::ptr::null_mut(),
            controllen: std::ptr::null_mut(),
        }
    }
}

/// Whether this thread's next look at an empty kernel queue (to switch the ring back on)
/// is due: at most one a millisecond without spinning.
fn flip_due() -> bool {
    thread_local! {
        static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    }
    let now = Instant::now();
    LAST.with(|l| {
        let due = l.get().is_none_or(|t| now.duration_since(t) >= FLIP_EVERY);
        if due {
            l.set(Some(now));
        }
        due
    })
}

/// Copies the front datagram `d` out as the kernel's UDP receive would.
///
/// # Safety
/// `iov` and `out`'s pointers are the program's, valid (or null where allowed).
unsafe fn deliver(s: &UdpSock, rec: &UdpRecord, d: &Datagram, iov: &[iovec], flags: c_int, out: &Out) -> ssize_t {
    let mut copied = 0;
    for v in iov {
        if copied >= d.len {
            break;
        }
        if v.iov_len == 0 {
            continue;
        }
        // SAFETY: the program's buffer, valid for iov_len bytes.
        copied += unsafe { rec.copy_payload_raw(d, copied, v.iov_base.cast(), v.iov_len) };
    }
    if !out.name.is_null() && !out.namelen.is_null() {
        let (st, len) = sockaddr_for(s.family, d.src);
        // SAFETY: the program's name buffer of *namelen bytes (the kernel copies at most
        // that many and reports the full length).
        unsafe {
            let room = (*out.namelen).min(len) as usize;
            std::ptr::copy_nonoverlapping((&st as *const libc::sockaddr_storage).cast::<u8>(), out.name.cast(), room);
            *out.namelen = len;
        }
    }
    if !out.msg_flags.is_null() {
        // SAFETY: the program's msghdr.
        unsafe { *out.msg_flags = if copied < d.len { libc::MSG_TRUNC } else { 0 } };
    }
    if !out.controllen.is_null() {
        // SAFETY: the program's msghdr: no ancillary data.
        unsafe { *out.controllen = 0 };
    }
    if flags & libc::MSG_PEEK == 0 {
        rec.pop(d);
    }
    if flags & libc::MSG_TRUNC != 0 {
        d.len as ssize_t
    } else {
        copied as ssize_t
    }
}

/// The outcome of one look at the ring.
enum Look {
    Got(ssize_t),
    Empty,
    /// The ring is unreadable: the socket stays on the kernel.
    Broken,
}

/// # Safety
/// As [`deliver`].
unsafe fn from_ring(s: &UdpSock, rec: &UdpRecord, iov: &[iovec], flags: c_int, out: &Out) -> Look {
    let _lock = rec.lock_rx();
    match rec.front() {
        // SAFETY: as guaranteed by the caller.
        Ok(Some(d)) => Look::Got(unsafe { deliver(s, rec, &d, iov, flags, out) }),
        Ok(None) => Look::Empty,
        Err(_) => Look::Broken,
    }
}

/// A kernel receive that did not simply find nothing: its result is the call's.
fn kernel_answered(r: ssize_t) -> bool {
    r >= 0 || errno() != libc::EAGAIN
}

/// Receives one datagram on `fd`. `kernel(flags)` makes the program's own call with those
/// flags. None: not the library's to answer (the program's call goes to the kernel as is).
///
/// # Safety
/// `iov` and `out` are the program's, valid.
pub unsafe fn recv(
    s: &UdpSock,
    fd: c_int,
    iov: &[iovec],
    flags: c_int,
    out: &Out,
    kernel: &mut dyn FnMut(c_int) -> ssize_t,
) -> Option<ssize_t> {
    let since = crate::signals::Since::now();
    // A null buffer with a length: the kernel's EFAULT.
    if flags & (libc::MSG_ERRQUEUE | libc::MSG_OOB) != 0 || iov.iter().any(|v| v.iov_base.is_null() && v.iov_len > 0) {
        return None;
    }
    let rec = ensure_record(s, fd)?.clone();
    loop {
        let seen = rec.state();
        if !seen.kernel_mode()
            && s.receives.fetch_add(1, std::sync::atomic::Ordering::Relaxed).is_multiple_of(KERNEL_FIRST_EVERY)
        {
            // In ring mode the kernel holds only datagrams of senders without the library
            // (a sender with it turns the ring off before it uses the kernel): no order
            // between the two to keep, but they must not wait behind a busy ring forever.
            let r = kernel(flags | libc::MSG_DONTWAIT);
            if kernel_answered(r) {
                return Some(r);
            }
        }
        // SAFETY: as guaranteed by the caller.
        match unsafe { from_ring(s, &rec, iov, flags, out) } {
            Look::Got(r) => return Some(r),
            Look::Broken => {
                pin(s);
                return None;
            }
            Look::Empty => {}
        }
        let seen = rec.state();
        let nonblocking = flags & libc::MSG_DONTWAIT != 0 || rec.nonblocking().load(Ordering::Relaxed) != 0;
        let spin = if nonblocking { None } else { spin::Spin::begin(None) };
        // A blocking receive that may not spin makes the program's one call (it sleeps in
        // the kernel, which returns what it holds at once) while the socket is idle; a busy
        // one (its last sleep returned at once) looks first whether the kernel queue is
        // empty, so the ring can take over again, and an idle one does so at most once a
        // millisecond.
        let busy = s.busy.load(Ordering::Relaxed);
        if nonblocking || spin.is_some() || (seen.kernel_mode() && (busy || flip_due())) {
            if seen.kernel_mode() && !seen.closed() && (nonblocking || spin.is_some()) {
                // Reading the kernel while awake: senders hold back so the queue drains
                // and the ring can take over (see `UdpRecord::want_ring`).
                rec.want_ring();
            }
            let r = kernel(flags | libc::MSG_DONTWAIT);
            if kernel_answered(r) {
                return Some(r);
            }
            // The kernel queue was empty after `seen`: the ring may take over again.
            if seen.kernel_mode() {
                rec.try_ring_mode(seen);
            }
            if rec.ring_readable() {
                continue;
            }
            if nonblocking {
                set_errno(libc::EAGAIN);
                return Some(-1);
            }
        }
        if let Some(mut spin) = spin {
            let mut last_kernel = Instant::now();
            let mut found = false;
            while spin.go_on() {
                if rec.ring_readable() {
                    found = true;
                    break;
                }
                if last_kernel.elapsed() >= KERNEL_CHECK_EVERY {
                    last_kernel = Instant::now();
                    let seen = rec.state();
                    let r = kernel(flags | libc::MSG_DONTWAIT);
                    if kernel_answered(r) {
                        spin.hit();
                        return Some(r);
                    }
                    if seen.kernel_mode() {
                        rec.try_ring_mode(seen);
                    }
                }
                std::hint::spin_loop();
            }
            if found {
                spin.hit();
                continue;
            }
            spin.miss();
        }
        if since.interrupts_receive(fd) {
            // A handler ran during this call (while it spun): the kernel's receive would
            // have ended with EINTR.
            set_errno(libc::EINTR);
            return Some(-1);
        }
        if !rec.prepare_sleep() {
            continue;
        }
        let slept = Instant::now();
        let r = kernel(flags);
        let e = errno();
        rec.finish_sleep();
        let took = slept.elapsed();
        s.busy.store(took < BUSY_WAKE, Ordering::Relaxed);
        if r >= 0 {
            spin::woke_after(took);
        }
        set_errno(e);
        return Some(r);
    }
}

/// recvmmsg: the first datagram as `flags` say (blocking or not), the rest while there are
/// some (all of them with `MSG_WAITFORONE` only; without it a blocking call waits for
/// each, as the kernel does, up to `timeout` checked after each datagram).
///
/// # Safety
/// `msgs` valid for `n` entries, each as for recvmsg.
pub unsafe fn recvmmsg(
    s: &UdpSock,
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    n: usize,
    flags: c_int,
    timeout: Option<Duration>,
    kernel: &mut dyn FnMut(*mut libc::msghdr, c_int) -> ssize_t,
) -> Option<c_int> {
    let pace = crate::mmsg::RecvPace::new(flags, timeout);
    let each = |i: usize, m: &mut libc::mmsghdr| {
        let h = &mut m.msg_hdr;
        // SAFETY: the caller's iovec array.
        let iov = unsafe { crate::iov_slice(h.msg_iov, h.msg_iovlen as c_int) }?.to_vec();
        let out = Out {
            name: h.msg_name.cast(),
            namelen: &mut h.msg_namelen,
            msg_flags: &mut h.msg_flags,
            controllen: &mut h.msg_controllen,
        };
        let hp = h as *mut libc::msghdr;
        // SAFETY: the caller's buffers.
        let r = unsafe { recv(s, fd, &iov, pace.flags(i), &out, &mut |ff| kernel(hp, ff)) }?;
        Some((r, false))
    };
    // SAFETY: the caller's array of n entries.
    unsafe { crate::mmsg::each_entry(msgs, n, each) }
}

/// FIONREAD / SIOCINQ: the size of the next datagram, if it is in the ring.
pub fn readable_bytes(s: &UdpSock) -> Option<c_int> {
    let rec = s.record()?;
    let _lock = rec.lock_rx();
    rec.front().ok().flatten().map(|d| d.len as c_int)
}
