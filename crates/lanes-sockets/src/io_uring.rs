//! Programs that set up an io_uring.
//!
//! The operations of an io_uring (epoll_ctl, send, receive, accept, poll, on any
//! descriptor) are handed to the kernel through memory it shares with the process: the
//! library sees none of them. A set the program fills through one never tells the library
//! which sockets it watches, so a wait on it never learns of ring bytes; a receive through
//! one reads the kernel socket past them. libuv (Node.js, uvloop) makes its epoll_ctl calls
//! this way. So once a process has set up an io_uring (seen in the C library's `syscall`,
//! which libuv and liburing built with the C library call), its connections are the
//! kernel's: the accelerated ones leave their rings for good (each sender goes to the
//! kernel after what it already published, which the program's C-library receives still
//! read first), and none is set up from then on. The set-up itself is the program's own.
//!
//! `LANES_SOCKETS_IO_URING=refuse` makes such a set-up fail with ENOSYS instead, as on a
//! kernel without io_uring: a program that uses a ring only to speed up its epoll calls
//! (libuv falls back to epoll_ctl) then keeps its connections accelerated.
//!
//! A ring set up with raw system calls, not through the C library, is not seen (nor is
//! one inherited across exec); the library's rule for connections it sets up late (the
//! kernel must have carried exactly the bytes it saw) still keeps a socket whose bytes an
//! io_uring moved before its set-up on the kernel.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::reasons::Reason;

static SET_UP: AtomicBool = AtomicBool::new(false);

/// Whether this process has set up an io_uring.
#[inline]
pub fn set_up() -> bool {
    SET_UP.load(Ordering::Relaxed)
}

/// `io_uring_setup` succeeded: every connection of the process leaves the library's paths
/// for good, and none is set up from now on.
pub fn ring_set_up() {
    if SET_UP.swap(true, Ordering::SeqCst) {
        return;
    }
    for (_, conn) in crate::conn::all() {
        crate::stream::kernel_features_on_for(&conn, Reason::IoUring);
    }
    crate::conn::Deferred::give_up_all();
    crate::remote::before_io_uring();
    crate::udp::pin_all(Reason::IoUring, "");
}
