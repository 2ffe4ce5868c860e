//! `liblanes_sockets.so`: unmodified programs' TCP connections between processes of this
//! host move over shared-memory rings when both ends carry the library
//! (`LD_PRELOAD`, or `lanes run`), and stay ordinary kernel TCP otherwise. UDP datagrams
//! between such processes move through the receiving socket's datagram ring (`udp`).
//!
//! Every accelerated socket keeps its kernel connection; the rings (see
//! `lanes::sockets`) carry the bytes while the receiver is busy or spinning, and the kernel
//! carries them, and does all the waiting, otherwise. Discovery uses records in the fabric
//! directory that the kernel must vouch for (`sock_diag`); nothing is ever written into a
//! stream. This file holds the exported C functions only: each checks the recursion guard,
//! dispatches accelerated sockets to the modules `stream`, `udp` and `wait`, and hands
//! everything else to the C library's own function.
//!
//! Variadic C functions (`fcntl`, `ioctl`) are defined with one integer-sized third
//! argument: on the x86-64 and AArch64 Linux calling conventions a variadic caller passes
//! it exactly where this callee reads it.

mod config;
mod conn;
mod exec;
mod fork_locks;
mod io_uring;
mod mmsg;
mod park;
mod real;
mod reasons;
mod remote;
mod remote_io;
mod sandbox;
mod signals;
mod sock_diag;
mod spin;
mod stream;
mod udp;
mod wait;

use smallvec::SmallVec;
use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Once;
use std::time::Duration;

use libc::{
    c_int, c_long, c_uint, c_ulong, c_void, epoll_event, iovec, msghdr, nfds_t, off_t, pollfd, sigset_t, size_t,
    sockaddr, socklen_t, ssize_t, timespec,
};

use conn::{lookup, lookup_live, lookup_or_complete, Conn, Deferred, Moved};
use lanes::sockets::endpoint::{FLAG_APP_NODELAY, FLAG_NODELAY_FORCED, FLAG_RX_LOWAT};
use real::{errno, real, set_errno};
use stream::Call;

thread_local! {
    /// Set while this thread runs library code: calls our own code makes (std's file I/O,
    /// the sock_diag socket) go straight to the C library.
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// Set while this thread is in our `fork`'s call of the C library's: its fork handlers
    /// run inside the library, but not from a signal handler that interrupted it.
    static FORKING: Cell<bool> = const { Cell::new(false) };
}

static INIT: Once = Once::new();

thread_local! {
    /// Whether this thread is one of the fabric's own (0: not known yet, 1: no, 2: yes).
    static FABRIC_THREAD: Cell<u8> = const { Cell::new(0) };
}

/// Whether this thread is one the fabric this library opened runs (its service threads,
/// named `lanes-…`): its sockets are the provider's connections between the hosts, never
/// the program's.
#[inline]
fn fabric_thread() -> bool {
    FABRIC_THREAD.with(|f| {
        if f.get() == 0 {
            // The kernel's name of this thread (the C library asks it with prctl, inside
            // itself), not std's handle: that allocates on a program's thread, which may
            // be inside its allocator's lock (jemalloc closes files with syscall() there).
            let mut name = [0u8; 16];
            // SAFETY: a buffer of 16 bytes, the size a thread name takes with its NUL.
            let ok =
                unsafe { libc::pthread_getname_np(libc::pthread_self(), name.as_mut_ptr().cast(), name.len()) } == 0;
            f.set(if ok && name.starts_with(b"lanes-") { 2 } else { 1 });
        }
        f.get() == 2
    })
}

/// Runs `f` with the guard set, then puts the guard back as it was (the fork handlers run
/// inside our own `fork`, guard set, as well as inside the C library's forks).
fn guarded(f: impl FnOnce()) {
    let was = INSIDE.with(|i| i.replace(true));
    let _ = catch_unwind(AssertUnwindSafe(f));
    INSIDE.with(|i| i.set(was));
}

extern "C" fn before_fork() {
    // Epoll registrations this process still owes the kernel go in before the child
    // shares the kernel sets; connections to other hosts go back to the kernel (two
    // processes cannot share a fabric stream), but for accepted ones not registered yet,
    // which the process left holding them registers (`remote::before_fork`).
    // Then the library's locks are taken, so that no other thread holds one at the fork
    // (`fork_locks`).
    let in_library = INSIDE.with(|i| i.get()) && !FORKING.with(|f| f.get());
    guarded(|| {
        wait::flush_all();
        remote::before_fork();
        fork_locks::take_all(in_library);
    });
}

extern "C" fn after_fork_in_parent() {
    guarded(fork_locks::release_all);
}

extern "C" fn after_fork_in_child() {
    guarded(|| {
        fork_locks::release_all();
        lanes::platform::files::after_fork_in_child();
        conn::adopt_after_fork();
        udp::adopt_after_fork();
        remote::after_fork_in_child();
        reasons::after_fork_in_child();
    });
}

fn init() {
    INIT.call_once(|| {
        // SAFETY: registering a handler with no preconditions.
        unsafe { libc::pthread_atfork(Some(before_fork), Some(after_fork_in_parent), Some(after_fork_in_child)) };
        sandbox::detect_inherited();
        reasons::remember_start_uid();
        if config::config().enabled {
            conn::adopt_inherited_all();
            // Records of processes that exited without closing their sockets (exit closes
            // fds in the kernel, not through us) or were killed: nobody holds them.
            let _ = lanes::sockets::registry::cleanup_connections(&config::config().fabric_dir);
            lanes::sockets::udp::cleanup_udp(&config::config().fabric_dir);
            udp::adopt_inherited_all();
            lanes::sockets::reasons::cleanup_reasons(&config::config().fabric_dir);
        }
    });
}

/// Runs `accel` (None: not ours) with the guard set, else `pass` with the guard as it was
/// (a signal handler that runs during the C library's call, blocked perhaps, calls through
/// the library as anywhere else). A panic never crosses into C: the call fails with EIO.
///
/// A call that succeeds (any result but `failed`) leaves errno as the program had it, as
/// the C library's calls do: the library's own work inside the call may fail harmlessly
/// (opening a peer's record that does not exist yet sets ENOENT), and programs read errno
/// after calls that succeeded (gRPC after an `epoll_ctl` on a socket whose non-blocking
/// connect was under way: it took the ENOENT for the connect's outcome).
#[inline]
fn intercept<R: Copy + PartialEq>(failed: R, accel: impl FnOnce() -> Option<R>, pass: impl FnOnce() -> R) -> R {
    if INSIDE.with(|i| i.get()) || fabric_thread() {
        return pass();
    }
    let programs_errno = errno();
    INSIDE.with(|i| i.set(true));
    let out = catch_unwind(AssertUnwindSafe(|| {
        init();
        accel()
    }));
    INSIDE.with(|i| i.set(false));
    match out {
        Ok(Some(r)) => {
            if r != failed {
                set_errno(programs_errno);
            }
            r
        }
        Ok(None) => {
            set_errno(programs_errno);
            pass()
        }
        Err(_) => {
            set_errno(libc::EIO);
            failed
        }
    }
}

/// As [`intercept`], for a data call on `fd`: one on a descriptor no module of the library
/// follows (a file, a pipe, a socket left to the kernel or retired from its ring) goes
/// straight to the C library, at the cost of two flag loads. Programs that move bulk data
/// between files and sockets make several such calls for each socket call (socat reads
/// its file, writes the socket and peeks at a socketpair each round). Only after the
/// library's first call ran: that call adopts the sockets the process inherited.
#[inline]
fn intercept_data<R: Copy + PartialEq>(
    fd: c_int,
    failed: R,
    accel: impl FnOnce() -> Option<R>,
    pass: impl FnOnce() -> R,
) -> R {
    if kernels_alone(fd) {
        return pass();
    }
    intercept(failed, accel, pass)
}

/// Whether `msg` is a message without a control buffer: descriptors passed in one may be
/// sockets of the library's, so such a message goes the whole way even on a descriptor
/// [`kernels_alone`] passes by.
///
/// # Safety
/// `msg` is null or a valid msghdr.
#[inline]
unsafe fn without_control(msg: *const msghdr) -> bool {
    // SAFETY: null or valid, as the caller guarantees.
    unsafe { msg.as_ref() }.is_some_and(|m| m.msg_controllen == 0)
}

/// Whether a data call on `fd` goes straight to the C library (see [`intercept_data`]): no
/// module of the library follows the descriptor, as two flag tables tell.
#[inline]
pub(crate) fn kernels_alone(fd: c_int) -> bool {
    INIT.is_completed() && conn::data_is_kernels(fd) && udp::untracked(fd)
}

/// Runs `call`; if it returned a new descriptor, `then` records it. errno stays as the call
/// left it (recording may make system calls of its own).
fn on_new_fd(call: impl FnOnce() -> c_int, then: impl FnOnce(c_int)) -> Option<c_int> {
    let r = call();
    let e = errno();
    if r >= 0 {
        conn::forget_stale(r);
        then(r);
    }
    set_errno(e);
    Some(r)
}

fn one(buf: *mut c_void, len: size_t) -> [iovec; 1] {
    [iovec { iov_base: buf, iov_len: len }]
}

/// # Safety
/// iov valid for cnt entries (cnt checked by the caller against the kernel's rules).
unsafe fn iov_slice<'a>(iov: *const iovec, cnt: c_int) -> Option<&'a [iovec]> {
    if !(0..=libc::UIO_MAXIOV).contains(&cnt) || (iov.is_null() && cnt > 0) {
        return None;
    }
    if cnt == 0 {
        return Some(&[]);
    }
    // SAFETY: as guaranteed by the caller.
    Some(unsafe { std::slice::from_raw_parts(iov, cnt as usize) })
}

/// The descriptors an SCM_RIGHTS control message of `msg` carries (a message the kernel
/// filled, or the program's to send).
///
/// # Safety
/// `msg`'s control buffer valid for `msg_controllen` bytes, as for sendmsg and recvmsg.
unsafe fn rights_in(msg: &msghdr) -> SmallVec<[c_int; 4]> {
    let mut fds = SmallVec::new();
    if msg.msg_control.is_null() || msg.msg_controllen < std::mem::size_of::<libc::cmsghdr>() {
        return fds;
    }
    // SAFETY: a control buffer valid for msg_controllen bytes, walked by the C library's
    // own macros, which stay inside it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let n =
                    ((*c).cmsg_len as usize).saturating_sub(libc::CMSG_LEN(0) as usize) / std::mem::size_of::<c_int>();
                let data = libc::CMSG_DATA(c).cast::<c_int>();
                for i in 0..n {
                    fds.push(data.add(i).read_unaligned());
                }
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    fds
}

/// What a receive with `flags` on a deferred connection moves of the stream.
fn moved_in(flags: c_int) -> Moved {
    // A peek leaves the bytes queued; urgent data and the error queue are not the stream.
    if flags & (libc::MSG_PEEK | libc::MSG_OOB | libc::MSG_ERRQUEUE) != 0 {
        Moved::Nothing
    } else {
        Moved::Read
    }
}

/// What a send with `flags` on a deferred connection moves of the stream.
fn moved_out(flags: c_int) -> Moved {
    if flags & libc::MSG_OOB != 0 {
        Moved::Urgent
    } else {
        Moved::Written
    }
}

fn recv_on(c: &Conn, fd: c_int, call: Call, iov: &[iovec], flags: c_int) -> ssize_t {
    stream::recv(c, fd, call, iov, flags, None)
}

// ---- connection set-up and tear-down ----------------------------------------------------

/// # Safety
/// As connect(2).
#[no_mangle]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().connect)(fd, addr, len) };
    intercept(
        -1,
        || {
            let r = call();
            let e = errno();
            if r == 0 {
                udp::connected(fd);
                // SAFETY: the kernel just read len bytes of a socket address there.
                conn::on_connected_to(fd, unsafe { udp::read_sockaddr(addr, len) }, conn::Opened::Connected);
            } else if e == libc::EINPROGRESS {
                // SAFETY: as above.
                conn::connect_pending(fd, unsafe { udp::read_sockaddr(addr, len) });
            }
            set_errno(e);
            Some(r)
        },
        call,
    )
}

/// # Safety
/// As socket(2).
#[no_mangle]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().socket)(domain, ty, protocol) };
    intercept(
        -1,
        || {
            on_new_fd(call, |fd| {
                conn::created(fd, domain, ty, protocol);
                udp::created(fd, domain, ty, protocol);
            })
        },
        call,
    )
}

/// # Safety
/// As bind(2).
#[no_mangle]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().bind)(fd, addr, len) };
    intercept(-1, || Some(on_success(call, || udp::bound(fd))), call)
}

/// # Safety
/// As accept(2).
#[no_mangle]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { accept4(fd, addr, len, 0) }
}

/// # Safety
/// As accept4(2).
#[no_mangle]
pub unsafe extern "C" fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    let call_with = |addr: *mut sockaddr, len: *mut socklen_t| unsafe {
        if flags == 0 {
            (real().accept)(fd, addr, len)
        } else {
            (real().accept4)(fd, addr, len, flags)
        }
    };
    let call = || call_with(addr, len);
    intercept(
        -1,
        || {
            // The peer's address, which the library needs: where the caller asked for none,
            // into a buffer of ours (the caller still gets none, as from the kernel).
            // SAFETY: zeroed sockaddr_storage is valid.
            let mut own: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
            let mut own_len = std::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
            let (a, l) = if addr.is_null() {
                ((&mut own as *mut libc::sockaddr_storage).cast(), &mut own_len as *mut socklen_t)
            } else {
                (addr, len)
            };
            // SAFETY: len, when not null, is the caller's (the kernel reads it too).
            let room = if l.is_null() { 0 } else { unsafe { *l } };
            on_new_fd(
                || call_with(a, l),
                |new| {
                    // SAFETY: the kernel wrote *l bytes of the peer's address at a, of which
                    // `room` fit.
                    let peer = unsafe { (*l <= room).then(|| udp::read_sockaddr(a, *l)).flatten() };
                    conn::accepted(fd, new, peer);
                },
            )
        },
        call,
    )
}

/// Makes `call`; if it succeeded (0), runs `after` with the call's errno kept for the
/// program.
fn on_success(call: impl FnOnce() -> c_int, after: impl FnOnce()) -> c_int {
    let r = call();
    if r == 0 {
        let e = errno();
        after();
        set_errno(e);
    }
    r
}

fn before_close(fd: c_int) {
    wait::closed(fd);
    if conn::forget(fd) {
        // Closing with unread data resets a TCP connection; ring data is unread data too.
        remote::reset_on_close(fd);
    }
}

/// # Safety
/// As close(2). A number that is one of the library's own files now is not the program's
/// to close (it closed its own descriptor of that number already: see
/// `lanes::platform::files::HeldFile`): `EBADF`, as without the library.
#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    // SAFETY: the caller's fd.
    let call = || unsafe { (real().close)(fd) };
    intercept(-1, || close_of_program(fd, call), call)
}

/// close for the program, `call` making the close itself. A number of the library's is
/// refused with the `EBADF` the program had without us (it closes a number it closed
/// already); the check and the close are made while no descriptor of the library's is
/// being made or closed, so that none is made at the number in between.
fn close_of_program(fd: c_int, call: impl FnOnce() -> c_int) -> Option<c_int> {
    use lanes::platform::files::{held_by_library, while_held_stand_still};
    if held_by_library(fd) {
        set_errno(libc::EBADF);
        return Some(-1);
    }
    // (Outside the stand-still: it may release a stream, making and closing descriptors.)
    before_close(fd);
    while_held_stand_still(|| {
        if held_by_library(fd) {
            set_errno(libc::EBADF);
            return Some(-1);
        }
        Some(call())
    })
}

/// The C library's `syscall`, found once without the table of real functions (whose
/// first resolution may itself wait on a futex, made through `syscall`).
fn real_syscall() -> Option<RawSyscall> {
    static REAL: std::sync::atomic::AtomicPtr<c_void> = std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
    let mut p = REAL.load(std::sync::atomic::Ordering::Acquire);
    if p.is_null() {
        // SAFETY: a NUL-terminated name; RTLD_NEXT finds the C library's definition.
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, c"syscall".as_ptr()) };
        REAL.store(p, std::sync::atomic::Ordering::Release);
    }
    // SAFETY: the C library's `syscall`: a long and six more in registers (and on the
    // stack), as its assembly reads them whatever the caller passed.
    (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, RawSyscall>(p) })
}

type RawSyscall = unsafe extern "C" fn(c_long, c_long, c_long, c_long, c_long, c_long, c_long) -> c_long;

/// # Safety
/// As syscall(2): `syscall(number, ...)` with up to six arguments. The calls that end
/// descriptors are the program's close, close_range, dup2 and dup3 (libuv, so Node.js,
/// closes with `syscall(SYS_close, fd)`: unseen, the closed socket's record stayed on its
/// number, and the next connection accepted there took it over); every other number goes
/// to the C library's `syscall` with the arguments as passed (declared as six: the
/// variadic caller put them where six fixed ones are read).
#[no_mangle]
pub unsafe extern "C" fn syscall(
    n: c_long,
    a1: c_long,
    a2: c_long,
    a3: c_long,
    a4: c_long,
    a5: c_long,
    a6: c_long,
) -> c_long {
    let Some(raw) = real_syscall() else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    // SAFETY: the caller's system call, with its arguments.
    let pass = || unsafe { raw(n, a1, a2, a3, a4, a5, a6) };
    if n == libc::SYS_seccomp && sandbox::seccomp_installs(a1) {
        // libseccomp installs its filter this way.
        before_seccomp();
        let r = pass();
        if r >= 0 {
            sandbox::installed();
        }
        return r;
    }
    if n == libc::SYS_io_uring_setup {
        // Its operations on sockets are unseen by the library (see `io_uring`).
        let c = config::config();
        if c.enabled && c.refuse_io_uring {
            set_errno(libc::ENOSYS);
            return -1;
        }
        return intercept(
            -1,
            || {
                let r = pass();
                if r >= 0 {
                    io_uring::ring_set_up();
                }
                Some(r)
            },
            pass,
        );
    }
    if !INIT.is_completed() {
        // Nothing known of any descriptor yet, and starting the library allocates: a
        // program's allocator closes its files with syscall() while it holds its own lock
        // (jemalloc, as it starts).
        return pass();
    }
    match n {
        libc::SYS_close => {
            let fd = a1 as c_int;
            // SAFETY: the caller's close, as it made it.
            let call = || unsafe { raw(n, a1, 0, 0, 0, 0, 0) } as c_int;
            c_long::from(intercept(-1, || close_of_program(fd, call), call))
        }
        libc::SYS_close_range => {
            // SAFETY: as close_range(2), the caller's arguments.
            c_long::from(unsafe { close_range(a1 as c_uint, a2 as c_uint, a3 as c_int) })
        }
        #[cfg(target_arch = "x86_64")]
        libc::SYS_dup2 => {
            // SAFETY: as dup2(2), the caller's arguments.
            c_long::from(unsafe { dup2(a1 as c_int, a2 as c_int) })
        }
        libc::SYS_dup3 => {
            // SAFETY: as dup3(2), the caller's arguments.
            c_long::from(unsafe { dup3(a1 as c_int, a2 as c_int, a3 as c_int) })
        }
        _ => pass(),
    }
}

/// # Safety
/// As close_range(2). The library's own descriptors in the range stay open (the program
/// has none of those numbers open, so without the library the call would not have closed
/// anything there either).
#[no_mangle]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().close_range)(first, last, flags) };
    intercept(-1, || Some(close_range_of_program(first, last, flags)), call)
}

/// close_range for the program: its connections in the range are closed as `close` closes
/// them, and the range is closed around the descriptors the library holds.
fn close_range_of_program(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    let range = |a: c_uint, b: c_uint| {
        // SAFETY: close_range with the caller's flags on part of its range.
        unsafe { (real().close_range)(a, b, flags) }
    };
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0 || first > last {
        // Nothing closes now (the library's descriptors are close-on-exec already), or
        // the kernel's EINVAL.
        return range(first, last);
    }
    let fds = conn::all().into_iter().map(|(fd, _)| fd).chain(remote::fds()).chain(Deferred::fds()).chain(udp::fds());
    for fd in fds.collect::<Vec<_>>() {
        if (first..=last).contains(&(fd as c_uint)) {
            before_close(fd);
        }
    }
    lanes::platform::files::while_held_stand_still(|| {
        let mut from = first;
        for held in lanes::platform::files::held_between(first, last) {
            let held = held as c_uint;
            if held > from {
                let r = range(from, held - 1);
                if r != 0 {
                    return r;
                }
            }
            from = held + 1;
        }
        if from <= last {
            return range(from, last);
        }
        0
    })
}

/// # Safety
/// As closefrom(3): every descriptor from `low` up, but the library's own (see
/// [`close_range`]).
#[no_mangle]
pub unsafe extern "C" fn closefrom(low: c_int) {
    // SAFETY: the caller's argument.
    let call = || unsafe { (real().closefrom)(low) };
    intercept(
        (),
        || {
            let low = low.max(0) as c_uint;
            if close_range_of_program(low, c_uint::MAX, 0) == 0 {
                return Some(());
            }
            // A kernel without close_range (before 5.9): each open descriptor, as the C
            // library's fallback does.
            let open: Vec<c_int> = std::fs::read_dir("/proc/self/fd")
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect();
            let program_fds: Vec<c_int> = open.into_iter().filter(|&fd| fd as c_uint >= low).collect();
            for &fd in program_fds.iter().filter(|&&fd| !lanes::platform::files::held_by_library(fd)) {
                before_close(fd);
            }
            lanes::platform::files::while_held_stand_still(|| {
                for fd in program_fds {
                    if !lanes::platform::files::held_by_library(fd) {
                        // SAFETY: closes the program's own descriptor (the directory's may
                        // be gone already: EBADF, ignored as the C library ignores it).
                        unsafe { (real().close)(fd) };
                    }
                }
            });
            Some(())
        },
        call,
    )
}

/// # Safety
/// As shutdown(2).
#[no_mangle]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().shutdown)(fd, how) };
    intercept(
        -1,
        || {
            Deferred::give_up(fd);
            remote_io::before_shutdown(fd, how);
            let c = lookup_or_complete(fd)?;
            if how == libc::SHUT_WR || how == libc::SHUT_RDWR {
                conn::shut_tx(&c);
            }
            if how == libc::SHUT_RD || how == libc::SHUT_RDWR {
                conn::shut_rx(&c);
            }
            None
        },
        call,
    )
}

// ---- reading -----------------------------------------------------------------------------

/// # Safety
/// As read(2).
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().read)(fd, buf, n) };
    // A read of 0 bytes is answered by the kernel's socket layer at once (0), whatever the
    // stream holds: the program's own call gives exactly that.
    intercept_data(
        fd,
        -1,
        || {
            if let Some(u) = udp::lookup(fd) {
                // SAFETY: the caller's buffer.
                let mut kernel = |f| unsafe { (real().recv)(fd, buf, n, f) };
                // SAFETY: the caller's buffer.
                return unsafe { udp::recv(&u, fd, &one(buf, n), 0, &udp::Out::none(), &mut kernel) };
            }
            match lookup_live(fd) {
                Some(c) => (n > 0).then(|| recv_on(&c, fd, Call::Plain, &one(buf, n), 0)),
                None => remote_io::recv(fd, &one(buf, n), 0, call).or_else(|| Deferred::call(fd, Moved::Read, call)),
            }
        },
        call,
    )
}

/// # Safety
/// As recv(2).
#[no_mangle]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().recv)(fd, buf, n, flags) };
    intercept_data(
        fd,
        -1,
        || {
            if let Some(u) = udp::lookup(fd) {
                // SAFETY: the caller's buffer.
                let mut kernel = |f| unsafe { (real().recv)(fd, buf, n, f) };
                // SAFETY: the caller's buffer.
                return unsafe { udp::recv(&u, fd, &one(buf, n), flags, &udp::Out::none(), &mut kernel) };
            }
            match lookup_live(fd) {
                Some(c) => Some(recv_on(&c, fd, Call::Socket, &one(buf, n), flags)),
                None => {
                    remote_io::recv(fd, &one(buf, n), flags, call).or_else(|| Deferred::call(fd, moved_in(flags), call))
                }
            }
        },
        call,
    )
}

/// # Safety
/// As recvfrom(2).
#[no_mangle]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().recvfrom)(fd, buf, n, flags, addr, alen) };
    intercept_data(
        fd,
        -1,
        || {
            if let Some(u) = udp::lookup(fd) {
                // SAFETY: the caller's arguments.
                let mut kernel = |f| unsafe { (real().recvfrom)(fd, buf, n, f, addr, alen) };
                let out = udp::Out { name: addr, namelen: alen, ..udp::Out::none() };
                // SAFETY: the caller's buffers.
                return unsafe { udp::recv(&u, fd, &one(buf, n), flags, &out, &mut kernel) };
            }
            let r = match lookup_live(fd) {
                Some(c) => recv_on(&c, fd, Call::Socket, &one(buf, n), flags),
                None => match remote_io::recv(fd, &one(buf, n), flags, call) {
                    Some(r) => r,
                    None => return Deferred::call(fd, moved_in(flags), call),
                },
            };
            if r >= 0 && !addr.is_null() && !alen.is_null() {
                // A connected TCP socket reports no source address.
                // SAFETY: the caller's length slot.
                unsafe { *alen = 0 };
            }
            Some(r)
        },
        call,
    )
}

/// # Safety
/// As recvmsg(2).
#[no_mangle]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().recvmsg)(fd, msg, flags) };
    // SAFETY: the caller's msghdr.
    if unsafe { without_control(msg) } && kernels_alone(fd) {
        return call();
    }
    intercept(
        -1,
        || {
            if msg.is_null() || flags & libc::MSG_ERRQUEUE != 0 {
                // The error queue is the kernel's, its control messages too.
                return None;
            }
            if let Some(u) = udp::lookup(fd) {
                // SAFETY: non-null msghdr from the caller.
                let m = unsafe { &mut *msg };
                if m.msg_controllen != 0 && !m.msg_control.is_null() {
                    // It may be asking for ancillary data an option left to the kernel produces.
                    return None;
                }
                // SAFETY: the caller's iovec array.
                let iov = unsafe { iov_slice(m.msg_iov, m.msg_iovlen as c_int) }?.to_vec();
                let out = udp::Out {
                    name: m.msg_name.cast(),
                    namelen: &mut m.msg_namelen,
                    msg_flags: &mut m.msg_flags,
                    controllen: &mut m.msg_controllen,
                };
                // SAFETY: the caller's message.
                let mut kernel = |f| unsafe { (real().recvmsg)(fd, msg, f) };
                // SAFETY: the caller's buffers.
                return unsafe { udp::recv(&u, fd, &iov, flags, &out, &mut kernel) };
            }
            // SAFETY: non-null msghdr from the caller.
            if unsafe { (*msg).msg_controllen } != 0 && !conn::is_stream_of_ours(fd) {
                // Perhaps descriptors passed from another process (a Unix socket): sockets
                // among them with a record are taken over, as after exec.
                let r = call();
                let e = errno();
                if r >= 0 {
                    // SAFETY: the kernel filled the caller's control buffer up to msg_controllen.
                    for got in unsafe { rights_in(&*msg) } {
                        conn::received(got);
                    }
                }
                set_errno(e);
                return Some(r);
            }
            let Some(c) = lookup_live(fd) else {
                // SAFETY: non-null msghdr from the caller.
                let m = unsafe { &mut *msg };
                // SAFETY: the caller's iovec array.
                let iov = unsafe { iov_slice(m.msg_iov, m.msg_iovlen as c_int) }?.to_vec();
                // The kernel's own answer (a candidate whose stream is not live) is left as it is.
                let mut by_kernel = false;
                let kernel = || {
                    by_kernel = true;
                    call()
                };
                let Some(r) = remote_io::recv(fd, &iov, flags, kernel) else {
                    return Deferred::call(fd, moved_in(flags), call);
                };
                if r >= 0 && !by_kernel {
                    // A connected TCP socket's message: no address, no ancillary data but
                    // TCP_CM_INQ when the program asked for it (as the kernel adds it).
                    (m.msg_namelen, m.msg_flags) = (0, 0);
                    let mut out = stream::RecvMsg::new(m);
                    if out.control > 0 && flags & libc::MSG_OOB == 0 && stream::inq_on_in_kernel(fd) {
                        stream::put_inq(&mut out, remote_io::inq_hint(fd, r == 0));
                    }
                }
                return Some(r);
            };
            // SAFETY: non-null msghdr from the caller.
            let m = unsafe { &mut *msg };
            // SAFETY: the caller's iovec array.
            let iov = unsafe { iov_slice(m.msg_iov, m.msg_iovlen as c_int) }?.to_vec();
            m.msg_namelen = 0;
            let control = m.msg_controllen;
            let r = stream::recv(&c, fd, Call::Msg, &iov, flags, Some(stream::RecvMsg::new(m)));
            if r < 0 {
                m.msg_controllen = control;
            }
            Some(r)
        },
        call,
    )
}

/// # Safety
/// As readv(2).
#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().readv)(fd, iov, cnt) };
    // SAFETY: as readv(2).
    unsafe { recv_vector(fd, iov, cnt, Call::Vector, 0, call) }
}

/// readv, and preadv2 at the current position: `kind` is the kernel-path call (`call`,
/// the program's own), `flags` the `MSG_*` flags the library's paths honour.
///
/// # Safety
/// As readv(2).
unsafe fn recv_vector(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    kind: Call,
    flags: c_int,
    call: impl Fn() -> ssize_t + Copy,
) -> ssize_t {
    intercept_data(
        fd,
        -1,
        || {
            // SAFETY: the caller's iovec array.
            let v = unsafe { iov_slice(iov, cnt) }?;
            if let Some(u) = udp::lookup(fd) {
                // SAFETY: an all-zero msghdr is valid.
                let mut m: msghdr = unsafe { std::mem::zeroed() };
                m.msg_iov = iov as *mut iovec;
                m.msg_iovlen = cnt as _;
                // SAFETY: our msghdr over the caller's iovec array.
                let mut kernel = |f| unsafe { (real().recvmsg)(fd, &mut m, f) };
                // SAFETY: the caller's buffers.
                return unsafe { udp::recv(&u, fd, v, flags, &udp::Out::none(), &mut kernel) };
            }
            let Some(c) = lookup_live(fd) else {
                return remote_io::recv(fd, v, flags, call).or_else(|| Deferred::call(fd, Moved::Read, call));
            };
            // Nothing to read: the kernel answers at once, as for read (see there).
            (stream::iov_len(v) > 0).then(|| recv_on(&c, fd, kind, v, flags))
        },
        call,
    )
}

// ---- writing -----------------------------------------------------------------------------

/// # Safety
/// As write(2).
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().write)(fd, buf, n) };
    intercept_data(
        fd,
        -1,
        || {
            if let Some(u) = udp::lookup(fd) {
                let mut kernel = call;
                // SAFETY: the caller's buffer.
                return Some(unsafe {
                    udp::send(&u, fd, std::ptr::null(), 0, &one(buf as *mut c_void, n), 0, false, &mut kernel)
                });
            }
            match lookup_live(fd) {
                Some(c) => Some(stream::send(&c, fd, Call::Plain, &one(buf as *mut c_void, n), 0)),
                None => remote_io::send(fd, &one(buf as *mut c_void, n), 0, call)
                    .or_else(|| Deferred::call(fd, Moved::Written, call)),
            }
        },
        call,
    )
}

/// # Safety
/// As send(2).
#[no_mangle]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().send)(fd, buf, n, flags) };
    // SAFETY: the caller's buffer; no address.
    intercept_data(fd, -1, || unsafe { send_one(fd, buf, n, flags, std::ptr::null(), 0, call) }, call)
}

/// send and sendto on a socket of ours (`call`: the program's own call, for the kernel's
/// path). A connected TCP socket ignores the address, as the kernel does.
///
/// # Safety
/// `buf` is valid for `n` bytes; `addr`, if not null, for `alen`.
unsafe fn send_one(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    alen: socklen_t,
    call: impl Fn() -> ssize_t + Copy,
) -> Option<ssize_t> {
    let data = one(buf as *mut c_void, n);
    if let Some(u) = udp::lookup(fd) {
        let mut kernel = call;
        // SAFETY: the caller's buffer and address.
        return Some(unsafe { udp::send(&u, fd, addr, alen, &data, flags, false, &mut kernel) });
    }
    match lookup_live(fd) {
        Some(c) => Some(stream::send(&c, fd, Call::Socket, &data, flags)),
        None => remote_io::send(fd, &data, flags, call).or_else(|| Deferred::call(fd, moved_out(flags), call)),
    }
}

/// # Safety
/// As sendto(2).
#[no_mangle]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    alen: socklen_t,
) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().sendto)(fd, buf, n, flags, addr, alen) };
    // SAFETY: the caller's buffer and address.
    intercept_data(fd, -1, || unsafe { send_one(fd, buf, n, flags, addr, alen, call) }, call)
}

/// # Safety
/// As sendmsg(2).
#[no_mangle]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().sendmsg)(fd, msg, flags) };
    // SAFETY: the caller's msghdr.
    if unsafe { without_control(msg) } && kernels_alone(fd) {
        return call();
    }
    intercept(
        -1,
        || {
            if msg.is_null() {
                return None;
            }
            // SAFETY: non-null msghdr from the caller, its control buffer as it says.
            for passed in unsafe { rights_in(&*msg) } {
                conn::passing(passed);
            }
            if let Some(u) = udp::lookup(fd) {
                // SAFETY: non-null msghdr from the caller.
                let m = unsafe { &*msg };
                // SAFETY: the caller's iovec array.
                let iov = unsafe { iov_slice(m.msg_iov, m.msg_iovlen as c_int) }?;
                let mut kernel = call;
                // SAFETY: the caller's message.
                return Some(unsafe {
                    udp::send(
                        &u,
                        fd,
                        m.msg_name as *const sockaddr,
                        m.msg_namelen,
                        iov,
                        flags,
                        m.msg_controllen != 0,
                        &mut kernel,
                    )
                });
            }
            let Some(c) = lookup_live(fd) else {
                // SAFETY: non-null msghdr from the caller.
                let m = unsafe { &*msg };
                if m.msg_controllen != 0 {
                    // Ancillary data is the kernel's business, after the ring's bytes.
                    remote::give_up(fd);
                    return Deferred::call(fd, moved_out(flags), call);
                }
                // SAFETY: the caller's iovec array.
                let iov = unsafe { iov_slice(m.msg_iov, m.msg_iovlen as c_int) }?;
                return remote_io::send(fd, iov, flags, call).or_else(|| Deferred::call(fd, moved_out(flags), call));
            };
            // SAFETY: non-null msghdr from the caller.
            let m = unsafe { &*msg };
            // SAFETY: the caller's iovec array.
            let iov = unsafe { iov_slice(m.msg_iov, m.msg_iovlen as c_int) }?;
            if m.msg_controllen != 0 {
                // Ancillary data is the kernel's business; its bytes are counted as kernel
                // bytes, so they stay in order with the ring's.
                return Some(stream::send_with_control(&c, fd, m, iov, flags));
            }
            Some(stream::send(&c, fd, Call::Msg, iov, flags))
        },
        call,
    )
}

/// # Safety
/// As sendmmsg(2).
#[no_mangle]
pub unsafe extern "C" fn sendmmsg(fd: c_int, msgs: *mut libc::mmsghdr, n: c_uint, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().sendmmsg)(fd, msgs, n, flags) };
    intercept_data(
        fd,
        -1,
        || {
            if msgs.is_null() {
                return None;
            }
            let Some(u) = udp::lookup(fd) else {
                // SAFETY: the caller's array of n messages.
                return unsafe { stream_sendmmsg(fd, msgs, n as usize, flags) };
            };
            // SAFETY: one message of the caller's.
            let mut kernel = |m: *const msghdr| unsafe { (real().sendmsg)(fd, m, flags) };
            // SAFETY: the caller's array of n messages.
            Some(unsafe { udp::sendmmsg(&u, fd, msgs, n as usize, flags, &mut kernel) })
        },
        call,
    )
}

/// # Safety
/// As recvmmsg(2).
#[no_mangle]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    n: c_uint,
    flags: c_int,
    timeout: *mut timespec,
) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().recvmmsg)(fd, msgs, n, flags, timeout) };
    intercept_data(
        fd,
        -1,
        || {
            if msgs.is_null() || n == 0 {
                return None;
            }
            let Some(u) = udp::lookup(fd) else {
                // SAFETY: the caller's array of n messages.
                return unsafe { stream_recvmmsg(fd, msgs, n as usize, flags, duration_ts(timeout)) };
            };
            // Ancillary data asked for: an option left to the kernel may produce it.
            // SAFETY: the caller's array of n messages.
            if (0..n as usize).any(|i| unsafe { (*msgs.add(i)).msg_hdr.msg_controllen } != 0) {
                return None;
            }
            // SAFETY: one message of the caller's.
            let mut kernel = |m: *mut msghdr, f: c_int| unsafe { (real().recvmsg)(fd, m, f) };
            // SAFETY: the caller's array of n messages.
            unsafe { udp::recvmmsg(&u, fd, msgs, n as usize, flags, duration_ts(timeout), &mut kernel) }
        },
        call,
    )
}

/// recvmmsg on a connection to another host: the kernel's for good (`remote::give_up`), and
/// while its ring still holds bytes from before, the first entry gets them alone (a count
/// of one message, as a recvmmsg may return). None: the kernel's own call.
///
/// # Safety
/// `msgs` valid for at least one entry, as for recvmmsg.
unsafe fn remote_recvmmsg(fd: c_int, msgs: *mut libc::mmsghdr, flags: c_int) -> Option<c_int> {
    remote::give_up(fd);
    remote::live_stream(fd)?;
    // SAFETY: the caller's first entry.
    let m = unsafe { &mut *msgs };
    // SAFETY: the caller's iovec array.
    let iov = unsafe { iov_slice(m.msg_hdr.msg_iov, m.msg_hdr.msg_iovlen as c_int) }?.to_vec();
    let r = remote_io::recv_ring_left(fd, &iov, flags)?;
    if r < 0 {
        return Some(-1);
    }
    m.msg_len = r as c_uint;
    // A connected TCP socket's message: no address, no ancillary data.
    (m.msg_hdr.msg_namelen, m.msg_hdr.msg_controllen, m.msg_hdr.msg_flags) = (0, 0, 0);
    Some(1)
}

/// sendmmsg on a TCP socket: for an accelerated one, each message as sendmsg would send
/// it, in order with the ring's bytes (the kernel's own sendmmsg would put them behind
/// bytes the ring still holds). As the kernel does, it stops after a message sent in part
/// or an error (which only the first message reports). A connection whose set-up is put
/// off stays kernel TCP for good: its counts are of bytes, and sendmmsg returns messages.
///
/// # Safety
/// `msgs` valid for `n` entries, as for sendmmsg.
unsafe fn stream_sendmmsg(fd: c_int, msgs: *mut libc::mmsghdr, n: usize, flags: c_int) -> Option<c_int> {
    let Some(c) = lookup_live(fd) else {
        Deferred::give_up(fd);
        // A connection to another host: the kernel's for good, its stream's sending
        // direction ended in the ring first (these bytes then follow the ring's).
        remote::give_up(fd);
        return None;
    };
    let each = |_: usize, m: &mut libc::mmsghdr| {
        // SAFETY: the caller's iovec array; None: the kernel's own call fails on it.
        let iov = unsafe { iov_slice(m.msg_hdr.msg_iov, m.msg_hdr.msg_iovlen as c_int) }?;
        let want: usize = iov.iter().map(|v| v.iov_len).sum();
        let r = if m.msg_hdr.msg_controllen != 0 {
            stream::send_with_control(&c, fd, &m.msg_hdr, iov, flags)
        } else {
            stream::send(&c, fd, Call::Msg, iov, flags)
        };
        Some((r, r >= 0 && (r as usize) < want))
    };
    // SAFETY: the caller's array of n entries.
    unsafe { mmsg::each_entry(msgs, n, each) }
}

/// recvmmsg on a TCP socket: for an accelerated one, each entry as recvmsg would fill it,
/// the ring's bytes first (the kernel's own recvmmsg would return the kernel's bytes behind
/// them, or wait for them while they sit in the ring). After the first entry, receives do
/// not wait once `MSG_WAITFORONE` is given or `timeout` has passed, as the kernel's. A
/// connection whose set-up is put off stays kernel TCP for good (see [`stream_sendmmsg`]).
///
/// # Safety
/// `msgs` valid for `n` entries, as for recvmmsg.
unsafe fn stream_recvmmsg(
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    n: usize,
    flags: c_int,
    timeout: Option<Duration>,
) -> Option<c_int> {
    let Some(c) = lookup_live(fd) else {
        Deferred::give_up(fd);
        // SAFETY: the caller's array of n (at least one) messages.
        return unsafe { remote_recvmmsg(fd, msgs, flags) };
    };
    if flags & (libc::MSG_ERRQUEUE | libc::MSG_OOB) != 0 {
        return None; // not the stream's bytes: the kernel's own call
    }
    let pace = mmsg::RecvPace::new(flags, timeout);
    let each = |i: usize, m: &mut libc::mmsghdr| {
        // SAFETY: the caller's iovec array; None: the kernel's own call fails on it.
        let iov = unsafe { iov_slice(m.msg_hdr.msg_iov, m.msg_hdr.msg_iovlen as c_int) }?.to_vec();
        m.msg_hdr.msg_namelen = 0;
        let control = m.msg_hdr.msg_controllen;
        let r = stream::recv(&c, fd, Call::Msg, &iov, pace.flags(i), Some(stream::RecvMsg::new(&mut m.msg_hdr)));
        if r < 0 {
            m.msg_hdr.msg_controllen = control;
        }
        Some((r, false))
    };
    // SAFETY: the caller's array of n entries.
    unsafe { mmsg::each_entry(msgs, n, each) }
}

/// # Safety
/// As writev(2).
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().writev)(fd, iov, cnt) };
    // SAFETY: as writev(2).
    unsafe { send_vector(fd, iov, cnt, Call::Vector, 0, call) }
}

/// writev, and pwritev2 at the current position: `kind` is the kernel-path call (`call`,
/// the program's own), `flags` the `MSG_*` flags the library's paths honour.
///
/// # Safety
/// As writev(2).
unsafe fn send_vector(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    kind: Call,
    flags: c_int,
    call: impl Fn() -> ssize_t + Copy,
) -> ssize_t {
    intercept_data(
        fd,
        -1,
        || {
            // SAFETY: the caller's iovec array.
            let v = unsafe { iov_slice(iov, cnt) }?;
            if let Some(u) = udp::lookup(fd) {
                let mut kernel = call;
                // SAFETY: the caller's buffers.
                return Some(unsafe { udp::send(&u, fd, std::ptr::null(), 0, v, flags, false, &mut kernel) });
            }
            let Some(c) = lookup_live(fd) else {
                return remote_io::send(fd, v, flags, call).or_else(|| Deferred::call(fd, Moved::Written, call));
            };
            Some(stream::send(&c, fd, kind, v, flags))
        },
        call,
    )
}

// ---- preadv2 and pwritev2 ------------------------------------------------------------------

/// `RWF_NOAPPEND` (Linux 6.9) and `RWF_NOSIGNAL` (6.14, `MSG_NOSIGNAL` for sockets and pipes).
const RWF_NOAPPEND: c_int = 0x20;
const RWF_NOSIGNAL: c_int = 0x100;
/// The `RWF_*` flags every kernel we run on accepts on a socket (none of them means
/// anything to one but `RWF_NOWAIT`).
const RWF_ON_EVERY_KERNEL: c_int =
    libc::RWF_HIPRI | libc::RWF_DSYNC | libc::RWF_SYNC | libc::RWF_NOWAIT | libc::RWF_APPEND;

/// What preadv2/pwritev2 at `offset` with `rwf` is on a socket: at the current position
/// (-1) with flags this kernel accepts, readv/writev with the `MSG_*` flags returned
/// (`RWF_NOWAIT` is `MSG_DONTWAIT`, `RWF_NOSIGNAL` `MSG_NOSIGNAL`, as the kernel's socket
/// layer maps them). None: the kernel refuses the call without moving a byte (an offset:
/// `ESPIPE`; a flag it does not take: `EOPNOTSUPP`), so its own call answers.
fn socket_rwf(offset: off_t, rwf: c_int) -> Option<c_int> {
    let newer = rwf & !RWF_ON_EVERY_KERNEL;
    if offset != -1 || newer & !(RWF_NOAPPEND | RWF_NOSIGNAL) != 0 || !kernel_takes_rwf(newer) {
        return None;
    }
    let mut flags = 0;
    if rwf & libc::RWF_NOWAIT != 0 {
        flags |= libc::MSG_DONTWAIT;
    }
    if rwf & RWF_NOSIGNAL != 0 {
        flags |= libc::MSG_NOSIGNAL;
    }
    Some(flags)
}

/// Whether this kernel's pwritev2 takes `flags` (a combination of the flags newer kernels
/// added) on a socket: asked once per combination, of a socket pair of our own.
fn kernel_takes_rwf(flags: c_int) -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    const UNKNOWN: u8 = 0;
    const YES: u8 = 1;
    const NO: u8 = 2;
    static ANSWERS: [AtomicU8; 4] = [const { AtomicU8::new(UNKNOWN) }; 4];
    if flags == 0 {
        return true;
    }
    let slot = &ANSWERS[usize::from(flags & RWF_NOAPPEND != 0) | usize::from(flags & RWF_NOSIGNAL != 0) << 1];
    match slot.load(Ordering::Relaxed) {
        YES => return true,
        NO => return false,
        _ => {}
    }
    let mut pair = [-1 as c_int; 2];
    // SAFETY: socketpair writes two descriptors into our array (the system call: our own
    // socket interposers have nothing to do with this pair).
    let made = unsafe {
        libc::syscall(libc::SYS_socketpair, libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, pair.as_mut_ptr())
    } == 0;
    let takes = made && {
        let byte = 0u8;
        let iov = iovec { iov_base: (&byte as *const u8).cast_mut().cast(), iov_len: 1 };
        // SAFETY: one byte from a local, into our own socket.
        unsafe { (real().pwritev2)(pair[0], &iov, 1, -1, flags) == 1 }
    };
    if made {
        // SAFETY: closing the two descriptors made above.
        unsafe {
            (real().close)(pair[0]);
            (real().close)(pair[1]);
        }
    }
    slot.store(if takes { YES } else { NO }, Ordering::Relaxed);
    takes
}

/// # Safety
/// As preadv2(2). On a socket only the current position (offset -1) reads, as readv does
/// (`RWF_NOWAIT` as `MSG_DONTWAIT`); its kernel-path call is preadv2 itself.
#[no_mangle]
pub unsafe extern "C" fn preadv2(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t, rwf: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().preadv2)(fd, iov, cnt, offset, rwf) };
    let Some(flags) = socket_rwf(offset, rwf) else { return call() };
    // SAFETY: as preadv2(2) at the current position, which is readv(2).
    unsafe { recv_vector(fd, iov, cnt, Call::VectorFlags(rwf), flags, call) }
}

/// # Safety
/// As preadv64v2 (preadv2 with a 64-bit offset, which off_t is on the targets we build for).
#[no_mangle]
pub unsafe extern "C" fn preadv64v2(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t, rwf: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    unsafe { preadv2(fd, iov, cnt, offset, rwf) }
}

/// # Safety
/// As pwritev2(2). On a socket only the current position (offset -1) writes, as writev
/// does (`RWF_NOWAIT` as `MSG_DONTWAIT`, `RWF_NOSIGNAL` as `MSG_NOSIGNAL`); its kernel-path
/// call is pwritev2 itself.
#[no_mangle]
pub unsafe extern "C" fn pwritev2(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t, rwf: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().pwritev2)(fd, iov, cnt, offset, rwf) };
    let Some(flags) = socket_rwf(offset, rwf) else { return call() };
    // SAFETY: as pwritev2(2) at the current position, which is writev(2).
    unsafe { send_vector(fd, iov, cnt, Call::VectorFlags(rwf), flags, call) }
}

/// # Safety
/// As pwritev64v2 (pwritev2 with a 64-bit offset, which off_t is on the targets we build for).
#[no_mangle]
pub unsafe extern "C" fn pwritev64v2(fd: c_int, iov: *const iovec, cnt: c_int, offset: off_t, rwf: c_int) -> ssize_t {
    // SAFETY: the caller's arguments.
    unsafe { pwritev2(fd, iov, cnt, offset, rwf) }
}

/// A kernel-side transfer into an accelerated socket: the bytes are reserved as kernel
/// bytes first, so the receiver reads them after the ring's.
fn kernel_transfer_out(c: &Conn, count: usize, transfer: impl FnOnce() -> ssize_t) -> ssize_t {
    let word = c.own.tx_word();
    let reservation = word.reserve_kernel(count);
    let r = transfer();
    let e = errno();
    word.settle_kernel(reservation, r.max(0) as usize);
    set_errno(e);
    r
}

/// # Safety
/// As sendfile(2).
#[no_mangle]
pub unsafe extern "C" fn sendfile(out_fd: c_int, in_fd: c_int, offset: *mut off_t, count: size_t) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().sendfile)(out_fd, in_fd, offset, count) };
    let count = count.min(lanes::sockets::direction::MAX_KERNEL_CHUNK);
    intercept(
        -1,
        || {
            let Some(c) = lookup_live(out_fd) else {
                remote_io::before_kernel_transfer(out_fd);
                return Deferred::call(out_fd, Moved::Written, call);
            };
            // SAFETY: the caller's arguments, count lowered (sendfile may move fewer bytes).
            let transfer = || unsafe { (real().sendfile)(out_fd, in_fd, offset, count) };
            Some(kernel_transfer_out(&c, count, transfer))
        },
        call,
    )
}

/// # Safety
/// As sendfile64(2).
#[no_mangle]
pub unsafe extern "C" fn sendfile64(out_fd: c_int, in_fd: c_int, offset: *mut off_t, count: size_t) -> ssize_t {
    // SAFETY: the caller's arguments.
    unsafe { sendfile(out_fd, in_fd, offset, count) }
}

/// # Safety
/// As splice(2).
#[no_mangle]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut i64,
    fd_out: c_int,
    off_out: *mut i64,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().splice)(fd_in, off_in, fd_out, off_out, len, flags) };
    intercept(
        -1,
        || {
            if let Some(c) = lookup_live(fd_in) {
                // Reading through the kernel from now on: ring bytes still waiting are
                // handed over first, through the output.
                if c.ring_readable() {
                    let mut buf = vec![0u8; len.min(1 << 16)];
                    let n =
                        recv_on(&c, fd_in, Call::Socket, &one(buf.as_mut_ptr().cast(), buf.len()), libc::MSG_DONTWAIT);
                    if n <= 0 {
                        return Some(n);
                    }
                    // SAFETY: buf holds n bytes.
                    return Some(unsafe { (real().write)(fd_out, buf.as_ptr().cast(), n as usize) });
                }
                conn::shut_rx(&c);
                let r = call();
                if r > 0 {
                    c.own.rx_kernel_read().fetch_add(r as u64, std::sync::atomic::Ordering::AcqRel);
                }
                return Some(r);
            }
            if Deferred::is(fd_in) {
                return Deferred::call(fd_in, Moved::Read, call);
            }
            if let Some(r) = remote_io::splice_in(fd_in, fd_out, len) {
                return Some(r);
            }
            let Some(c) = lookup_live(fd_out) else {
                remote_io::before_kernel_transfer(fd_out);
                return Deferred::call(fd_out, Moved::Written, call);
            };
            let len = len.min(lanes::sockets::direction::MAX_KERNEL_CHUNK);
            // SAFETY: the caller's arguments, len lowered.
            Some(kernel_transfer_out(&c, len, || unsafe {
                (real().splice)(fd_in, off_in, fd_out, off_out, len, flags)
            }))
        },
        call,
    )
}

// ---- descriptors -------------------------------------------------------------------------

/// # Safety
/// As dup(2).
#[no_mangle]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: the caller's fd.
    let call = || unsafe { (real().dup)(fd) };
    intercept(-1, || on_new_fd(call, |r| conn::duplicated(fd, r)), call)
}

/// # Safety
/// As dup2(2).
#[no_mangle]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().dup2)(old, new) };
    intercept(-1, || dup_onto(old, new, call), call)
}

/// # Safety
/// As dup3(2).
#[no_mangle]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().dup3)(old, new, flags) };
    intercept(-1, || dup_onto(old, new, call), call)
}

/// dup2 and dup3: `new` is closed (if open) and becomes a duplicate of `old`. (When they
/// are equal dup2 does nothing and dup3 fails: nothing to record either way.)
fn dup_onto(old: c_int, new: c_int, call: impl FnOnce() -> c_int) -> Option<c_int> {
    if old != new && lookup(new).is_some() {
        before_close(new);
    }
    on_new_fd(call, |r| {
        if old != new {
            wait::closed(new);
            conn::duplicated(old, r);
        }
    })
}

/// `fd` asked for SIGIO on arrival (O_ASYNC, FIOASYNC): the kernel raises it only for
/// bytes it carries, so the connection is the kernel's from now on, as for the other
/// features only the kernel's queues have (`stream::use_kernel_features`): each sender
/// goes to the kernel at its next send, after the ring bytes it published already (those
/// arrived before the request, when no SIGIO was asked for).
fn signal_driven(fd: c_int) {
    stream::use_kernel_features(fd);
}

fn fcntl_common(fd: c_int, cmd: c_int, arg: usize, f: unsafe extern "C" fn(c_int, c_int, usize) -> c_int) -> c_int {
    // SAFETY: the caller's arguments, passed on unchanged.
    let call = || unsafe { f(fd, cmd, arg) };
    intercept(
        -1,
        || {
            let r = call();
            let e = errno();
            if r >= 0 {
                match cmd {
                    libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => conn::duplicated(fd, r),
                    libc::F_SETFL => {
                        if arg as c_int & libc::O_ASYNC != 0 {
                            signal_driven(fd);
                        }
                        udp::set_nonblocking(fd, arg as c_int & libc::O_NONBLOCK != 0);
                        if let Some(c) = lookup(fd) {
                            c.own.nonblocking().store(
                                u32::from(arg as c_int & libc::O_NONBLOCK != 0),
                                std::sync::atomic::Ordering::Relaxed,
                            );
                        }
                    }
                    _ => {}
                }
            }
            set_errno(e);
            Some(r)
        },
        call,
    )
}

/// # Safety
/// As fcntl(2); the optional third argument is read as one integer-sized value.
#[no_mangle]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    fcntl_common(fd, cmd, arg, real().fcntl)
}

/// # Safety
/// As fcntl64 (glibc's name under _FILE_OFFSET_BITS=64).
#[no_mangle]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: usize) -> c_int {
    fcntl_common(fd, cmd, arg, real().fcntl64)
}

/// # Safety
/// As ioctl(2); the third argument is read as one integer-sized value.
#[no_mangle]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: usize) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().ioctl)(fd, req, arg) };
    intercept(
        -1,
        || {
            if let Some(u) = udp::lookup(fd) {
                if req == libc::FIONBIO && arg != 0 {
                    let r = call();
                    if r == 0 {
                        // SAFETY: FIONBIO's argument points to an int.
                        udp::set_nonblocking(fd, unsafe { *(arg as *const c_int) } != 0);
                    }
                    return Some(r);
                }
                if req != libc::FIONREAD || arg == 0 {
                    return None;
                }
                let n = udp::readable_bytes(&u)?;
                // SAFETY: FIONREAD's argument points to an int.
                unsafe { *(arg as *mut c_int) = n };
                return Some(0);
            }
            if req == libc::FIOASYNC && arg != 0 {
                // SAFETY: FIOASYNC's argument points to an int.
                if unsafe { *(arg as *const c_int) } != 0 {
                    signal_driven(fd);
                }
            }
            if let Some(r) = remote_io::ioctl(fd, req, arg) {
                return Some(r);
            }
            let c = lookup_or_complete(fd)?;
            match req {
                libc::FIONREAD if arg != 0 => {
                    let n = stream::readable_bytes(&c, fd)?;
                    // SAFETY: FIONREAD's argument points to an int.
                    unsafe { *(arg as *mut c_int) = n };
                    Some(0)
                }
                stream::SIOCATMARK => {
                    // Ring bytes still unread come before any mark the kernel holds.
                    let r = call();
                    if r == 0 && arg != 0 && c.ring_readable() {
                        // SAFETY: the kernel accepted the pointer and wrote an int there.
                        unsafe { *(arg as *mut c_int) = 0 };
                    }
                    Some(r)
                }
                libc::FIONBIO if arg != 0 => {
                    let r = call();
                    if r == 0 {
                        // SAFETY: FIONBIO's argument points to an int.
                        let on = unsafe { *(arg as *const c_int) } != 0;
                        c.own.nonblocking().store(u32::from(on), std::sync::atomic::Ordering::Relaxed);
                    }
                    Some(r)
                }
                _ => None,
            }
        },
        call,
    )
}

// ---- waiting -----------------------------------------------------------------------------

fn duration_ms(ms: c_int) -> Option<Duration> {
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

fn duration_ts(ts: *const timespec) -> Option<Duration> {
    if ts.is_null() {
        return None;
    }
    // SAFETY: non-null timespec from the caller.
    let t = unsafe { *ts };
    Some(Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec.clamp(0, 999_999_999) as u32))
}

/// # Safety
/// As poll(2).
#[no_mangle]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().poll)(fds, n, timeout) };
    intercept(
        -1,
        || {
            if fds.is_null() || n == 0 {
                return None;
            }
            // SAFETY: the caller's array of n entries.
            let slice = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
            if !slice.iter().any(|p| wait::readiness_is_ours(p.fd)) {
                return None;
            }
            // SAFETY: f is the caller's array.
            let mut sleep = |f: &mut [pollfd], t: Option<Duration>| unsafe {
                (real().poll)(f.as_mut_ptr(), f.len() as nfds_t, wait::ms_ceil(t))
            };
            Some(wait::poll_core(slice, duration_ms(timeout), &mut sleep))
        },
        call,
    )
}

/// # Safety
/// As ppoll(2).
#[no_mangle]
pub unsafe extern "C" fn ppoll(fds: *mut pollfd, n: nfds_t, ts: *const timespec, mask: *const sigset_t) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().ppoll)(fds, n, ts, mask) };
    intercept(
        -1,
        || {
            if fds.is_null() || n == 0 {
                return None;
            }
            // SAFETY: the caller's array of n entries.
            let slice = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
            if !slice.iter().any(|p| wait::readiness_is_ours(p.fd)) {
                return None;
            }
            let mut sleep = |f: &mut [pollfd], t: Option<Duration>| {
                let tspec = wait::timespec_of(t);
                let tp = tspec.as_ref().map_or(std::ptr::null(), |t| t as *const timespec);
                // SAFETY: f is the caller's array, tp null or ours, mask the caller's.
                unsafe { (real().ppoll)(f.as_mut_ptr(), f.len() as nfds_t, tp, mask) }
            };
            Some(wait::poll_core(slice, duration_ts(ts), &mut sleep))
        },
        call,
    )
}

/// # Safety
/// As select(2).
#[no_mangle]
pub unsafe extern "C" fn select(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    x: *mut libc::fd_set,
    tv: *mut libc::timeval,
) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().select)(nfds, r, w, x, tv) };
    intercept(
        -1,
        || {
            if !wait::any_accelerated_in_sets(nfds, [r, w]) {
                return None;
            }
            let timeout = if tv.is_null() {
                None
            } else {
                // SAFETY: non-null timeval from the caller.
                let t = unsafe { *tv };
                Some(Duration::new(t.tv_sec.max(0) as u64, (t.tv_usec.clamp(0, 999_999) * 1000) as u32))
            };
            let start = std::time::Instant::now();
            let res = wait::select_core(nfds, r, w, x, timeout, None);
            if let (Some(t), false) = (timeout, tv.is_null()) {
                // Linux's select reports the time left.
                let left = t.saturating_sub(start.elapsed());
                // SAFETY: non-null timeval from the caller.
                unsafe {
                    *tv = libc::timeval {
                        tv_sec: left.as_secs() as libc::time_t,
                        tv_usec: left.subsec_micros() as libc::suseconds_t,
                    }
                };
            }
            Some(res)
        },
        call,
    )
}

/// # Safety
/// As pselect(2).
#[no_mangle]
pub unsafe extern "C" fn pselect(
    nfds: c_int,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    x: *mut libc::fd_set,
    ts: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().pselect)(nfds, r, w, x, ts, mask) };
    intercept(
        -1,
        || {
            if !wait::any_accelerated_in_sets(nfds, [r, w]) {
                return None;
            }
            Some(wait::select_core(nfds, r, w, x, duration_ts(ts), Some(mask)))
        },
        call,
    )
}

/// # Safety
/// As epoll_create(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_create(size: c_int) -> c_int {
    if size <= 0 {
        set_errno(libc::EINVAL);
        return -1;
    }
    // SAFETY: no arguments to check.
    unsafe { epoll_create1(0) }
}

/// # Safety
/// As epoll_create1(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_create1(flags: c_int) -> c_int {
    // SAFETY: plain system call.
    let call = || unsafe { libc::syscall(libc::SYS_epoll_create1, flags) as c_int };
    intercept(-1, || on_new_fd(call, wait::created), call)
}

/// # Safety
/// As epoll_ctl(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().epoll_ctl)(epfd, op, fd, ev) };
    intercept(
        -1,
        || {
            let _ = lookup_or_complete(fd);
            // SAFETY: the caller's arguments.
            Some(unsafe { wait::ctl(epfd, op, fd, ev) })
        },
        call,
    )
}

/// # Safety
/// As epoll_wait(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_wait(epfd: c_int, evs: *mut epoll_event, max: c_int, timeout: c_int) -> c_int {
    // SAFETY: the caller's arguments.
    unsafe { epoll_pwait(epfd, evs, max, timeout, std::ptr::null()) }
}

/// # Safety
/// As epoll_pwait(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait(
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: c_int,
    mask: *const sigset_t,
) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe {
        if mask.is_null() {
            (real().epoll_wait)(epfd, evs, max, timeout)
        } else {
            (real().epoll_pwait)(epfd, evs, max, timeout, mask)
        }
    };
    let kernel = |evs: *mut epoll_event, max: c_int, t: Option<Duration>| {
        // SAFETY: evs valid for max entries (ours or the caller's), mask null or the caller's.
        unsafe {
            if mask.is_null() {
                (real().epoll_wait)(epfd, evs, max, wait::ms_ceil(t))
            } else {
                (real().epoll_pwait)(epfd, evs, max, wait::ms_ceil(t), mask)
            }
        }
    };
    let t = (timeout >= 0).then(|| Duration::from_millis(timeout as u64));
    // SAFETY: the caller's arguments.
    intercept(-1, || Some(unsafe { wait::wait(epfd, evs, max, t, &kernel) }), call)
}

/// # Safety
/// As epoll_pwait2(2).
#[no_mangle]
pub unsafe extern "C" fn epoll_pwait2(
    epfd: c_int,
    evs: *mut epoll_event,
    max: c_int,
    timeout: *const timespec,
    mask: *const sigset_t,
) -> c_int {
    let pwait2 = |evs: *mut epoll_event, max: c_int, t: *const timespec| {
        // SAFETY: evs valid for max entries (ours or the caller's), t and mask null or
        // valid; the kernel's sigset size on Linux (_NSIG / 8).
        unsafe { libc::syscall(libc::SYS_epoll_pwait2, epfd, evs, max, t, mask, 8usize) as c_int }
    };
    let call = || pwait2(evs, max, timeout);
    let kernel = |evs: *mut epoll_event, max: c_int, t: Option<Duration>| {
        let ts = wait::timespec_of(t);
        pwait2(evs, max, ts.as_ref().map_or(std::ptr::null(), |t| t as *const timespec))
    };
    intercept(
        -1,
        || {
            if !timeout.is_null() {
                // SAFETY: non-null timespec from the caller.
                let t = unsafe { *timeout };
                if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
                    return None; // the kernel's EINVAL
                }
            }
            // SAFETY: the caller's arguments.
            Some(unsafe { wait::wait(epfd, evs, max, duration_ts(timeout), &kernel) })
        },
        call,
    )
}

// ---- processes ---------------------------------------------------------------------------

/// # Safety
/// As fork(2). The parent adds the child as a holder of every accelerated socket before
/// `fork` returns to the program, so closing its own copy right away (fork-per-connection
/// servers) cannot retire a record the child still uses.
#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    // SAFETY: no arguments.
    let call = || unsafe { (real().fork)() };
    intercept(
        -1,
        || {
            // Parent and child must share a record, as they share the socket.
            Deferred::set_up_all();
            FORKING.with(|f| f.set(true));
            let pid = call();
            let e = errno();
            FORKING.with(|f| f.set(false));
            if pid > 0 {
                conn::adopt_for_child(pid);
                udp::adopt_for_child(pid);
            } else if pid == 0 {
                // A connection another thread deferred after the set-ups above: the two
                // processes would count apart, so it stays kernel TCP in this one.
                Deferred::give_up_all();
            }
            set_errno(e);
            Some(pid)
        },
        call,
    )
}

// ---- signals -----------------------------------------------------------------------------

/// Runs `f` unless the library is off (`LANES_SOCKETS=0`), else `pass`; a panic fails the
/// call with EIO. Not through `intercept`: these calls may come before `main` and from
/// signal handlers, where the library's start-up must not run.
fn signal_call<R>(failed: R, f: impl FnOnce() -> R, pass: impl FnOnce() -> R) -> R {
    if !signals::enabled() {
        return pass();
    }
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_errno(libc::EIO);
        failed
    })
}

/// # Safety
/// As sigaction(2).
#[no_mangle]
pub unsafe extern "C" fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    signal_call(
        -1,
        // SAFETY: the caller's arguments.
        || unsafe { signals::sigaction(sig, act, old) },
        // SAFETY: the caller's arguments.
        || unsafe { (real().sigaction)(sig, act, old) },
    )
}

/// # Safety
/// As signal(3).
#[no_mangle]
pub unsafe extern "C" fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    signal_call(
        libc::SIG_ERR,
        // SAFETY: the caller's arguments.
        || unsafe { signals::signal(sig, handler) },
        // SAFETY: the caller's arguments.
        || unsafe { (real().signal)(sig, handler) },
    )
}

/// # Safety
/// As bsd_signal(3), the same as signal(3).
#[no_mangle]
pub unsafe extern "C" fn bsd_signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: the caller's arguments.
    unsafe { signal(sig, handler) }
}

/// # Safety
/// As siginterrupt(3).
#[no_mangle]
pub unsafe extern "C" fn siginterrupt(sig: c_int, interrupt: c_int) -> c_int {
    signal_call(
        -1,
        // SAFETY: the caller's arguments.
        || unsafe { signals::siginterrupt(sig, interrupt) },
        // SAFETY: the caller's arguments.
        || unsafe { (real().siginterrupt)(sig, interrupt) },
    )
}

/// A change of the effective uid to `euid` (-1: unchanged) ahead: the uid the library
/// started with and this process's reasons file are settled first, while the fabric
/// directory is still ours. The call itself is the C library's.
fn before_uid_change(euid: libc::uid_t) -> Option<c_int> {
    reasons::before_uid_change((euid != libc::uid_t::MAX).then_some(euid));
    None
}

/// # Safety
/// As setuid(2).
#[no_mangle]
pub unsafe extern "C" fn setuid(uid: libc::uid_t) -> c_int {
    // SAFETY: the caller's argument.
    let call = || unsafe { (real().setuid)(uid) };
    intercept(-1, || before_uid_change(uid), call)
}

/// # Safety
/// As seteuid(2).
#[no_mangle]
pub unsafe extern "C" fn seteuid(uid: libc::uid_t) -> c_int {
    // SAFETY: the caller's argument.
    let call = || unsafe { (real().seteuid)(uid) };
    intercept(-1, || before_uid_change(uid), call)
}

/// # Safety
/// As setreuid(2).
#[no_mangle]
pub unsafe extern "C" fn setreuid(r: libc::uid_t, e: libc::uid_t) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().setreuid)(r, e) };
    intercept(-1, || before_uid_change(e), call)
}

/// # Safety
/// As setresuid(2).
#[no_mangle]
pub unsafe extern "C" fn setresuid(r: libc::uid_t, e: libc::uid_t, s: libc::uid_t) -> c_int {
    // SAFETY: the caller's arguments.
    let call = || unsafe { (real().setresuid)(r, e, s) };
    intercept(-1, || before_uid_change(e), call)
}

/// # Safety
/// As prctl(2); the optional arguments are read as four integer-sized values (as the
/// kernel reads them). Passed on unchanged; a seccomp filter being installed makes the
/// library avoid system calls of its own from then on (see `sandbox`).
#[no_mangle]
pub unsafe extern "C" fn prctl(option: c_int, a2: c_ulong, a3: c_ulong, a4: c_ulong, a5: c_ulong) -> c_int {
    let installs = sandbox::filters(option);
    if installs {
        before_seccomp();
    }
    // SAFETY: the caller's arguments, passed on as the C library's prctl reads them.
    let r = unsafe { (real().prctl)(option, a2, a3, a4, a5) };
    if r >= 0 && installs {
        sandbox::installed();
    }
    r
}

/// Before the program installs a seccomp mode (`prctl(PR_SET_SECCOMP)`, `seccomp`): under
/// it the library makes no system call of its own, so a fabric stream cannot be used any
/// more, and why its connections stay kernel TCP is said now, while a file may still be
/// made for it.
fn before_seccomp() {
    if sandbox::filtered() || INSIDE.with(|i| i.get()) || !INIT.is_completed() {
        return;
    }
    guarded(remote::before_sandbox);
    guarded(reasons::entered_sandbox);
}

// ---- fortified variants (_FORTIFY_SOURCE) ------------------------------------------------

fn chk_fail() -> ! {
    // SAFETY: abort has no preconditions; a buffer overflow must not continue.
    unsafe { libc::abort() }
}

/// # Safety
/// As __read_chk.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t {
    if n > buflen {
        chk_fail();
    }
    // SAFETY: checked as the fortified version does.
    unsafe { read(fd, buf, n) }
}

/// # Safety
/// As __recv_chk.
#[no_mangle]
pub unsafe extern "C" fn __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t {
    if n > buflen {
        chk_fail();
    }
    // SAFETY: checked as the fortified version does.
    unsafe { recv(fd, buf, n, flags) }
}

/// # Safety
/// As __recvfrom_chk.
#[no_mangle]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    alen: *mut socklen_t,
) -> ssize_t {
    if n > buflen {
        chk_fail();
    }
    // SAFETY: checked as the fortified version does.
    unsafe { recvfrom(fd, buf, n, flags, addr, alen) }
}

/// # Safety
/// As __poll_chk.
#[no_mangle]
pub unsafe extern "C" fn __poll_chk(fds: *mut pollfd, n: nfds_t, timeout: c_int, fdslen: size_t) -> c_int {
    if (fdslen / std::mem::size_of::<pollfd>()) < n as usize {
        chk_fail();
    }
    // SAFETY: checked as the fortified version does.
    unsafe { poll(fds, n, timeout) }
}

/// # Safety
/// As getsockopt(2). SO_ERROR == 0 after a non-blocking connect completes the set-up;
/// TCP_NODELAY of an accelerated socket reports the program's own setting (the kernel
/// socket's is forced on once the peer's bytes may come through the ring, see
/// `stream::force_nodelay`).
#[no_mangle]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    // SAFETY: the caller's arguments, via the raw system call (no recursion into ourselves).
    let call = || unsafe { libc::syscall(libc::SYS_getsockopt, fd, level, name, val, len) as c_int };
    intercept(
        -1,
        || {
            let r = call();
            let e = errno();
            if r == 0 && level == libc::SOL_SOCKET && name == libc::SO_ERROR && !val.is_null() {
                // SAFETY: SO_ERROR wrote an int.
                if unsafe { *(val as *const c_int) } == 0 {
                    let _ = lookup_or_complete(fd);
                }
            }
            if r == 0 && level == libc::SOL_SOCKET && name == libc::SO_RCVLOWAT && !val.is_null() && !len.is_null() {
                // The kernel's mark may be lowered while ring bytes count against it.
                if let Some(c) = lookup(fd).filter(|c| c.own.has_flag(FLAG_RX_LOWAT)) {
                    let app = (c.own.rx_lowat().load(std::sync::atomic::Ordering::Relaxed) as c_int).to_ne_bytes();
                    // SAFETY: the kernel accepted val and len and wrote *len (at most an
                    // int's) bytes to val; we replace the same bytes.
                    unsafe {
                        let n = (*len as usize).min(app.len());
                        std::ptr::copy_nonoverlapping(app.as_ptr(), val.cast::<u8>(), n);
                    }
                }
            }
            if r == 0 && level == libc::IPPROTO_TCP && name == libc::TCP_NODELAY {
                if let Some(c) = lookup(fd).filter(|c| c.own.has_flag(FLAG_NODELAY_FORCED)) {
                    let app = c_int::from(c.own.has_flag(FLAG_APP_NODELAY)).to_ne_bytes();
                    // SAFETY: the kernel accepted val and len and wrote *len (at most an
                    // int's) bytes to val; we replace the same bytes.
                    unsafe {
                        let n = (*len as usize).min(app.len());
                        std::ptr::copy_nonoverlapping(app.as_ptr(), val.cast::<u8>(), n);
                    }
                }
            }
            set_errno(e);
            Some(r)
        },
        call,
    )
}

/// # Safety
/// As setsockopt(2). TCP_NODELAY on an accelerated socket whose kernel setting is forced on
/// is recorded as the program's setting; the kernel validates the arguments as always.
/// SO_RCVLOWAT above 1 makes the peer send through the kernel (`stream::set_lowat`).
#[no_mangle]
pub unsafe extern "C" fn setsockopt(fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int {
    // SAFETY: the caller's arguments, via the raw system call (no recursion into ourselves).
    let call = || unsafe { libc::syscall(libc::SYS_setsockopt, fd, level, name, val, len) as c_int };
    if udp::lookup(fd).is_some() {
        return intercept(
            -1,
            || {
                Some(on_success(call, || {
                    // SAFETY: the kernel accepted val as an option of len bytes.
                    unsafe { udp::option_set(fd, level, name, val, len) }
                }))
            },
            call,
        );
    }
    if level == libc::SOL_SOCKET && name == libc::SO_RCVLOWAT {
        return intercept(
            -1,
            || {
                let Some(c) = lookup_or_complete(fd) else {
                    // To another host: a mark above 1 is the kernel queue's alone, for good.
                    // SAFETY: read only once the kernel accepted val as at least an int.
                    // (Negative is no limit: the kernel's INT_MAX.)
                    let above_one = || !(0..=1).contains(&unsafe { std::ptr::read_unaligned(val as *const c_int) });
                    return Some(on_success(call, || {
                        if above_one() {
                            remote::give_up(fd);
                        }
                    }));
                };
                let r = call();
                if r == 0 {
                    let e = errno();
                    // The kernel took (and checked) the value: its own answer counts. Under
                    // a seccomp filter (no system call of ours) the program's, as the
                    // kernel reads it (negative: no limit; 0: 1).
                    let lowat = if sandbox::filtered() {
                        (len as usize >= std::mem::size_of::<c_int>() && !val.is_null())
                            // SAFETY: the kernel accepted val as at least an int.
                            .then(|| unsafe { std::ptr::read_unaligned(val as *const c_int) })
                            .map(|v| if v < 0 { c_int::MAX } else { v.max(1) })
                    } else {
                        stream::kernel_lowat(fd)
                    };
                    if let Some(lowat) = lowat {
                        stream::set_lowat(&c, fd, lowat);
                    }
                    set_errno(e);
                }
                Some(r)
            },
            call,
        );
    }
    if stream::is_tcp_inq(level, name) {
        return intercept(-1, || Some(on_success(call, || stream::inq_set(fd, val, len))), call);
    }
    if level == libc::IPPROTO_TCP && name == TCP_ULP {
        return intercept(-1, || Some(set_upper_layer_protocol(fd, call)), call);
    }
    if stream::is_kernel_feature(level, name, val, len) {
        return intercept(-1, || Some(on_success(call, || stream::use_kernel_features(fd))), call);
    }
    if level != libc::IPPROTO_TCP || name != libc::TCP_NODELAY {
        return call();
    }
    intercept(
        -1,
        || {
            let c = lookup(fd).filter(|c| c.own.has_flag(FLAG_NODELAY_FORCED))?;
            let r = call();
            if r != 0 {
                return Some(r);
            }
            // The kernel took (and checked) the program's value: remember it, force ours again.
            match stream::kernel_nodelay(fd) {
                Some(true) => {
                    c.own.set_flags(FLAG_APP_NODELAY);
                }
                Some(false) => {
                    c.own.clear_flags(FLAG_APP_NODELAY);
                    stream::set_kernel_nodelay(fd, true);
                }
                None => {}
            }
            Some(0)
        },
        call,
    )
}

/// `TCP_ULP` (linux/tcp.h): an upper-layer protocol on a TCP socket, kernel TLS ("tls").
const TCP_ULP: c_int = 31;

/// `setsockopt(TCP_ULP)` (`call`): the protocol works on the kernel's own queues (kernel TLS
/// encrypts what the program sends, and decrypts what it reads, there), so both directions
/// leave the ring for good first. Bytes the peer put into this end's ring before that are
/// the protocol's too, and the kernel cannot have them: with some unread, the option is
/// refused as by a kernel without the module (`ENOENT`), and a TLS library goes on in user
/// space (OpenSSL and GnuTLS take kernel TLS only when it is offered). Else the kernel's
/// own answer.
fn set_upper_layer_protocol(fd: c_int, call: impl FnOnce() -> c_int) -> c_int {
    stream::use_kernel_features(fd);
    remote::give_up(fd);
    let ring_left = match lookup(fd) {
        // Attached first (a peer found now may have published already).
        Some(c) => c.peer().is_some() && c.ring_readable(),
        None => remote::live_stream(fd).is_some_and(|s| !s.kernel_only()),
    };
    if ring_left {
        set_errno(libc::ENOENT);
        return -1;
    }
    call()
}

/// # Safety
/// As __ppoll_chk.
#[no_mangle]
pub unsafe extern "C" fn __ppoll_chk(
    fds: *mut pollfd,
    n: nfds_t,
    ts: *const timespec,
    mask: *const sigset_t,
    fdslen: size_t,
) -> c_int {
    if (fdslen / std::mem::size_of::<pollfd>()) < n as usize {
        chk_fail();
    }
    // SAFETY: checked as the fortified version does.
    unsafe { ppoll(fds, n, ts, mask) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program closing a number a second time (its descriptor there closed already)
    /// while a thread of the library's opens and reads a record file, again and again: the
    /// close never takes the library's file (`EBADF`, as without the library), and every
    /// read of the library's succeeds. Run in a process of its own, where no other test's
    /// descriptor can be at the number.
    #[test]
    fn a_programs_second_close_never_takes_a_file_the_library_is_opening() {
        const CHILD: &str = "LANES_TEST_SECOND_CLOSE_CHILD";
        let name = "tests::a_programs_second_close_never_takes_a_file_the_library_is_opening";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([name, "--exact", "--nocapture", "--test-threads=1"])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success() && text.contains("1 passed"), "{text}");
            eprintln!("{}", text.lines().find(|l| l.starts_with("library reads")).unwrap_or_default());
            return;
        }
        use std::os::unix::fs::FileExt;
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        let dir = std::env::temp_dir().join(format!("lanes-second-close-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let record = dir.join("record");
        std::fs::write(&record, b"a record of the library's").unwrap();
        let stop = AtomicBool::new(false);
        let (reads, failed_reads) = (AtomicU64::new(0), AtomicU64::new(0));
        let mut took = 0u32;
        std::thread::scope(|s| {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let file = lanes::platform::files::open_existing(&record, false).unwrap();
                    let mut buf = [0u8; 8];
                    // A read of a number the program closed under us fails (or reads its file).
                    match file.read_at(&mut buf, 0) {
                        Ok(8) if &buf == b"a record" => reads.fetch_add(1, Ordering::Relaxed),
                        _ => failed_reads.fetch_add(1, Ordering::Relaxed),
                    };
                    // (The file's close: a number taken by the program would abort a debug build.)
                }
            });
            let started = std::time::Instant::now();
            while started.elapsed() < std::time::Duration::from_millis(500) || reads.load(Ordering::Relaxed) < 1000 {
                // SAFETY: plain open and close of the program's own descriptor.
                let n = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
                assert!(n >= 0);
                // SAFETY: as above.
                unsafe { libc::close(n) };
                // SAFETY: the program's second close of `n`.
                if close_of_program(n, || unsafe { (real().close)(n) }) == Some(0) {
                    took += 1;
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        let _ = std::fs::remove_dir_all(&dir);
        let (reads, failed) = (reads.into_inner(), failed_reads.into_inner());
        eprintln!("library reads {reads}, failed {failed}; second closes that closed something: {took}");
        assert_eq!((took, failed), (0, 0), "the program's second close took the library's file");
    }
}
