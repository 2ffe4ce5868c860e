//! The C library's own functions, found behind ours with `dlsym(RTLD_NEXT)`, resolved once
//! on first use (never in a constructor).

use libc::{
    c_char, c_int, c_uint, c_ulong, c_void, epoll_event, iovec, msghdr, nfds_t, off_t, pollfd, sigset_t, size_t,
    sockaddr, socklen_t, ssize_t, timespec,
};
use std::sync::OnceLock;

macro_rules! real_functions {
    ($($name:ident: fn($($arg:ty),*) -> $ret:ty;)*) => {
        /// Pointers to the real functions.
        #[allow(non_snake_case)]
        pub struct Real { $(pub $name: unsafe extern "C" fn($($arg),*) -> $ret,)* }

        fn resolve() -> Real {
            Real { $($name: {
                let name = concat!(stringify!($name), "\0");
                // SAFETY: the name is NUL-terminated; RTLD_NEXT finds the next definition
                // after this library, the C library's.
                let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) };
                if p.is_null() {
                    // Without the C library's own function there is nothing to fall back to.
                    // SAFETY: abort has no preconditions; unwinding must not cross into C.
                    unsafe { libc::abort() };
                }
                // SAFETY: the C library's symbol of this name has this C signature.
                unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn($($arg),*) -> $ret>(p) }
            },)* }
        }
    };
}

real_functions! {
    connect: fn(c_int, *const sockaddr, socklen_t) -> c_int;
    socket: fn(c_int, c_int, c_int) -> c_int;
    bind: fn(c_int, *const sockaddr, socklen_t) -> c_int;
    sendmmsg: fn(c_int, *mut libc::mmsghdr, c_uint, c_int) -> c_int;
    recvmmsg: fn(c_int, *mut libc::mmsghdr, c_uint, c_int, *mut timespec) -> c_int;
    accept: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    accept4: fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int;
    close: fn(c_int) -> c_int;
    close_range: fn(c_uint, c_uint, c_int) -> c_int;
    closefrom: fn(c_int) -> ();
    shutdown: fn(c_int, c_int) -> c_int;
    read: fn(c_int, *mut c_void, size_t) -> ssize_t;
    write: fn(c_int, *const c_void, size_t) -> ssize_t;
    readv: fn(c_int, *const iovec, c_int) -> ssize_t;
    writev: fn(c_int, *const iovec, c_int) -> ssize_t;
    preadv2: fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;
    pwritev2: fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;
    recv: fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
    send: fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
    recvfrom: fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t;
    sendto: fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t;
    recvmsg: fn(c_int, *mut msghdr, c_int) -> ssize_t;
    sendmsg: fn(c_int, *const msghdr, c_int) -> ssize_t;
    sendfile: fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
    splice: fn(c_int, *mut i64, c_int, *mut i64, size_t, c_uint) -> ssize_t;
    dup: fn(c_int) -> c_int;
    dup2: fn(c_int, c_int) -> c_int;
    dup3: fn(c_int, c_int, c_int) -> c_int;
    fcntl: fn(c_int, c_int, usize) -> c_int;
    fcntl64: fn(c_int, c_int, usize) -> c_int;
    ioctl: fn(c_int, c_ulong, usize) -> c_int;
    poll: fn(*mut pollfd, nfds_t, c_int) -> c_int;
    ppoll: fn(*mut pollfd, nfds_t, *const timespec, *const sigset_t) -> c_int;
    select: fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *mut libc::timeval) -> c_int;
    pselect: fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *const timespec, *const sigset_t) -> c_int;
    epoll_ctl: fn(c_int, c_int, c_int, *mut epoll_event) -> c_int;
    epoll_wait: fn(c_int, *mut epoll_event, c_int, c_int) -> c_int;
    epoll_pwait: fn(c_int, *mut epoll_event, c_int, c_int, *const sigset_t) -> c_int;
    prctl: fn(c_int, c_ulong, c_ulong, c_ulong, c_ulong) -> c_int;
    fork: fn() -> libc::pid_t;
    sigaction: fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
    signal: fn(c_int, libc::sighandler_t) -> libc::sighandler_t;
    siginterrupt: fn(c_int, c_int) -> c_int;
    setuid: fn(libc::uid_t) -> c_int;
    seteuid: fn(libc::uid_t) -> c_int;
    setreuid: fn(libc::uid_t, libc::uid_t) -> c_int;
    setresuid: fn(libc::uid_t, libc::uid_t, libc::uid_t) -> c_int;
    execve: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    execvpe: fn(*const c_char, *const *const c_char, *const *const c_char) -> c_int;
    fexecve: fn(c_int, *const *const c_char, *const *const c_char) -> c_int;
}

static REAL: OnceLock<Real> = OnceLock::new();

/// The real functions.
#[inline]
pub fn real() -> &'static Real {
    REAL.get_or_init(resolve)
}

/// This thread's errno.
#[inline]
pub fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

/// Sets this thread's errno.
#[inline]
pub fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e };
}
