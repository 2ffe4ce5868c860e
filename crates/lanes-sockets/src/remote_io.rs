//! The program's calls on a connection to another host (a candidate, `crate::remote`):
//! while its fabric stream (`lanes::sockets::fabric_stream`) is live, sends and receives
//! through the stream, with the kernel's semantics for blocking and non-blocking sockets,
//! and what the stream does not do itself (peeking, urgent data, flags it does not know)
//! given back to the kernel for good first, byte-exact; until then, the C library's call,
//! made here and counted while it is inside the kernel, so that no stream starts meanwhile
//! (`remote::CallUnderWay`). Each function returns None when the C library's own call is the
//! answer and nothing needs counting (not a candidate, nothing asked for).

use std::io;

use libc::{c_int, iovec, ssize_t};

use crate::real::{real, set_errno};
use crate::remote::{self, Route};
use crate::stream::iov_len;
use lanes::sockets::fabric_stream::{CallMode, FabricStream};

/// Receive flags the stream serves itself.
const RECV_FLAGS: c_int = libc::MSG_DONTWAIT | libc::MSG_WAITALL | libc::MSG_NOSIGNAL | libc::MSG_CMSG_CLOEXEC;
/// Send flags the stream serves itself (`MSG_MORE` and `MSG_EOR` go with kernel sends).
const SEND_FLAGS: c_int = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | libc::MSG_MORE | libc::MSG_EOR;

fn nonblocking(fd: c_int, flags: c_int) -> bool {
    if flags & libc::MSG_DONTWAIT != 0 {
        return true;
    }
    // SAFETY: F_GETFL reads the descriptor's flags; no memory is involved.
    let fl = unsafe { (crate::real::real().fcntl)(fd, libc::F_GETFL, 0) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

fn fail(e: io::Error) -> ssize_t {
    set_errno(e.raw_os_error().unwrap_or(libc::EIO));
    -1
}

/// A receive of `iov` with `flags` on candidate `fd` (read, recv, recvfrom, recvmsg, readv):
/// through its live stream, else `kernel` (the program's own call, made here so that no
/// stream starts while it is inside the kernel). None: `fd` is no candidate, or nothing
/// is asked for.
pub fn recv(fd: c_int, iov: &[iovec], flags: c_int, kernel: impl FnOnce() -> ssize_t) -> Option<ssize_t> {
    routed(fd, iov, |s| recv_on(s, fd, iov, flags), kernel)
}

/// A data call of `iov` on candidate `fd`: `on_stream` through its live stream (None: the
/// stream gave the call to the kernel), else `kernel`, counted as inside the kernel so no
/// stream starts meanwhile. None: `fd` is no candidate, or nothing is asked for.
fn routed(
    fd: c_int,
    iov: &[iovec],
    on_stream: impl FnOnce(&FabricStream) -> Option<ssize_t>,
    kernel: impl FnOnce() -> ssize_t,
) -> Option<ssize_t> {
    if iov_len(iov) == 0 {
        return None;
    }
    match remote::route(fd)? {
        Route::Stream(c, s, _under_way) => {
            let r = on_stream(&s);
            c.publish_counts();
            Some(r.unwrap_or_else(kernel))
        }
        Route::Kernel(counted) => {
            let r = kernel();
            drop(counted);
            Some(r)
        }
    }
}

fn recv_on(s: &FabricStream, fd: c_int, iov: &[iovec], flags: c_int) -> Option<ssize_t> {
    let len = iov_len(iov);
    if flags & libc::MSG_PEEK != 0 {
        return peek(s, iov, flags);
    }
    if flags & !RECV_FLAGS != 0 {
        // Urgent data, MSG_TRUNC, the error queue: the kernel's. Urgent data is read out of
        // band of the stream, so the ring's bytes left keep their place.
        let _ = s.give_up();
        return None;
    }
    // MSG_WAITALL goes with kernel receives, which then wait as the kernel's own does (and
    // stop where it stops: a signal, the urgent mark, the end); ring bytes are gathered
    // here until the buffer is full or the kernel's receive has answered.
    let mode = CallMode {
        nonblocking: nonblocking(fd, flags),
        kernel_flags: flags & (libc::MSG_DONTWAIT | libc::MSG_WAITALL),
        interrupts: Some(crate::signals::stream_interrupts()),
    };
    let wait_all = flags & libc::MSG_WAITALL != 0 && !mode.nonblocking;
    let gather = |buf: &mut [u8]| -> Result<usize, io::Error> {
        let mut total = 0usize;
        loop {
            let kernel_before = s.counts().received_kernel;
            match s.recv_with(&mut buf[total..], mode) {
                Ok(0) => break,
                Ok(n) => total += n,
                Err(e) if total == 0 => return Err(e),
                Err(_) => break,
            }
            if !wait_all || total == buf.len() || s.counts().received_kernel != kernel_before {
                break;
            }
        }
        Ok(total)
    };
    if let [one] = iov {
        // SAFETY: the caller's buffer, valid for iov_len bytes of writes.
        let buf = unsafe { std::slice::from_raw_parts_mut(one.iov_base.cast::<u8>(), one.iov_len) };
        return Some(gather(buf).map_or_else(fail, |n| n as ssize_t));
    }
    let mut tmp = vec![0u8; len];
    match gather(&mut tmp) {
        Ok(n) => {
            scatter(&tmp[..n], iov);
            Some(n as ssize_t)
        }
        Err(e) => Some(fail(e)),
    }
}

/// A receive the stream does not serve (recvmmsg) on candidate `fd`, given up already
/// (`remote::give_up`): while ring bytes from before are left, a receive of `iov` through
/// the stream takes them (then the kernel's after them, as one receive would). None once
/// the ring is read: the kernel's own call is exact then.
pub fn recv_ring_left(fd: c_int, iov: &[iovec], flags: c_int) -> Option<ssize_t> {
    if iov_len(iov) == 0 {
        return None;
    }
    let s = remote::live_stream(fd).filter(|s| !s.kernel_only())?;
    recv_on(&s, fd, iov, flags & (libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC))
}

/// TCP_CM_INQ after a receive on candidate `fd` that its stream answered (`ended`: it was
/// the end of the stream): the bytes a receive would find now, the ring's before the
/// kernel's; 1 ("read on") when there are none and the peer's end came, as the kernel's
/// `tcp_inq_hint`.
pub fn inq_hint(fd: c_int, ended: bool) -> c_int {
    let ring = remote::live_stream(fd).map_or(0, |s| s.ring_readable());
    let mut queued: c_int = 0;
    // SAFETY: FIONREAD writes one int.
    let kernel = if unsafe { (real().ioctl)(fd, libc::FIONREAD, (&mut queued as *mut c_int) as usize) } == 0 {
        queued.max(0) as u64
    } else {
        0
    };
    let n = ring.saturating_add(kernel);
    if n == 0 && (ended || peer_finished(fd)) {
        return 1;
    }
    n.min(c_int::MAX as u64) as c_int
}

/// Whether the peer's end of `fd` came (its FIN: the kernel's `SOCK_DONE`).
fn peer_finished(fd: c_int) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLRDHUP, revents: 0 };
    // SAFETY: poll on one pollfd that outlives the call, no waiting.
    let r = unsafe { (real().poll)(&mut p, 1, 0) };
    r > 0 && p.revents & libc::POLLRDHUP != 0
}

/// Copies `bytes` into the caller's buffers in order.
fn scatter(mut bytes: &[u8], iov: &[iovec]) {
    for v in iov {
        if bytes.is_empty() {
            break;
        }
        let n = v.iov_len.min(bytes.len());
        // SAFETY: the caller's buffer, valid for iov_len bytes of writes; n <= iov_len.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), v.iov_base.cast::<u8>(), n) };
        bytes = &bytes[n..];
    }
}

/// MSG_PEEK: the connection goes back to the kernel for good; the ring's bytes left are
/// peeked from the ring (with the kernel's after them), then the kernel's peek is exact.
fn peek(s: &FabricStream, iov: &[iovec], flags: c_int) -> Option<ssize_t> {
    let _ = s.give_up();
    let mode = CallMode { nonblocking: true, kernel_flags: flags & !libc::MSG_PEEK, interrupts: None };
    let mut tmp = vec![0u8; iov_len(iov)];
    match s.peek_ring(&mut tmp, mode)? {
        Ok(n) => {
            scatter(&tmp[..n], iov);
            Some(n as ssize_t)
        }
        Err(e) => Some(fail(e)),
    }
}

/// A send of `iov` with `flags` on candidate `fd` (write, send, sendto, sendmsg, writev):
/// through its live stream, else `kernel`, as for [`recv`].
pub fn send(fd: c_int, iov: &[iovec], flags: c_int, kernel: impl FnOnce() -> ssize_t) -> Option<ssize_t> {
    routed(fd, iov, |s| send_on(s, fd, iov, flags), kernel)
}

fn send_on(s: &FabricStream, fd: c_int, iov: &[iovec], flags: c_int) -> Option<ssize_t> {
    if flags & !SEND_FLAGS != 0 {
        // Urgent data and flags the stream does not know: after the ring's bytes, the
        // kernel's, for good.
        let _ = s.give_up();
        return None;
    }
    let mut since = crate::signals::Since::now();
    let mut mode = CallMode {
        nonblocking: nonblocking(fd, flags),
        kernel_flags: flags & !libc::MSG_NOSIGNAL,
        interrupts: Some(crate::signals::stream_send_interrupts(since)),
    };
    let mut total = 0usize;
    for v in iov {
        // SAFETY: the caller's buffer, valid for iov_len bytes of reads.
        let buf = unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) };
        let mut at = 0;
        while at < buf.len() {
            match s.send_with(&buf[at..], mode) {
                Ok(n) => at += n,
                Err(e) => {
                    if total + at > 0 {
                        return Some((total + at) as ssize_t);
                    }
                    if e.raw_os_error() == Some(libc::EINTR) && since.restarts_send(fd) {
                        // Nothing moved, and the handler restarts the call (SA_RESTART).
                        since = crate::signals::Since::now();
                        mode.interrupts = Some(crate::signals::stream_send_interrupts(since));
                        continue;
                    }
                    if e.raw_os_error() == Some(libc::EPIPE) && flags & libc::MSG_NOSIGNAL == 0 {
                        // As the kernel's send does for a program that did not ask otherwise.
                        // SAFETY: raising a signal in this thread.
                        unsafe { libc::raise(libc::SIGPIPE) };
                    }
                    return Some(fail(e));
                }
            }
        }
        total += at;
    }
    Some(total as ssize_t)
}

/// `ioctl(fd, req, arg)` on a connection with a live stream: `FIONREAD` counts the ring's
/// bytes waiting before the kernel's, and `SIOCATMARK` is not at a mark while ring bytes
/// (which come before it) wait. None: the C library's call alone.
pub fn ioctl(fd: c_int, req: libc::c_ulong, arg: usize) -> Option<c_int> {
    if arg == 0 || (req != libc::FIONREAD && req != crate::stream::SIOCATMARK) {
        return None;
    }
    let s = remote::live_stream(fd).filter(|s| !s.kernel_only())?;
    let ring = s.ring_readable();
    // SAFETY: the caller's arguments.
    let r = unsafe { (crate::real::real().ioctl)(fd, req, arg) };
    if r == 0 && ring > 0 {
        let out = arg as *mut c_int;
        // SAFETY: the kernel accepted the pointer and wrote an int there.
        unsafe {
            if req == libc::FIONREAD {
                *out = (i64::from(*out) + ring as i64).min(i64::from(c_int::MAX)) as c_int;
            } else {
                *out = 0;
            }
        }
    }
    Some(r)
}

/// Before the program's `shutdown(fd, how)`: a stream's sending direction ends in the
/// ring first, so the peer reads every ring byte before the kernel's end.
pub fn before_shutdown(fd: c_int, how: c_int) {
    if how == libc::SHUT_RD {
        return;
    }
    if let Some(s) = remote::live_stream(fd) {
        let _ = s.finish_sending();
    }
}

/// Before a kernel-side transfer into `fd` (sendfile, splice): the kernel's for good.
pub fn before_kernel_transfer(fd: c_int) {
    remote::give_up(fd);
}

/// A splice out of `fd_in`: the kernel's for good; ring bytes still waiting go first,
/// written to `fd_out` (as many as one call moves).
pub fn splice_in(fd_in: c_int, fd_out: c_int, len: usize) -> Option<ssize_t> {
    let (_, s) = remote::stream(fd_in)?;
    let _ = s.give_up();
    if s.kernel_only() {
        return None;
    }
    let mut buf = vec![0u8; len.clamp(1, 1 << 16)];
    let n = match s
        .recv_with(&mut buf, CallMode { nonblocking: true, kernel_flags: libc::MSG_DONTWAIT, interrupts: None })
    {
        Ok(n) => n,
        Err(e) => return Some(fail(e)),
    };
    // SAFETY: buf holds n bytes.
    Some(unsafe { (crate::real::real().write)(fd_out, buf.as_ptr().cast(), n) })
}
