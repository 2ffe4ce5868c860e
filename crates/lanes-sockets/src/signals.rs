//! Signals handled while a blocking call is still in the library, before its kernel sleep.
//!
//! A program's signal handler interrupts a blocking system call: the call fails with EINTR
//! (poll, select and epoll always; reads and writes unless the handler has SA_RESTART), and
//! programs rely on that (a SIGCHLD or SIGALRM handler that sets a flag the loop reads once
//! its wait returns). The library's calls spin in user space before they sleep in the
//! kernel, so a signal that lands during the spin runs its handler there, and the kernel
//! sleep after it would not be interrupted by it: the program would sleep on until its next
//! event.
//!
//! So the handlers a program installs with `sigaction` or `signal` run through a
//! trampoline that counts, per thread, the handlers run. A call takes [`Since::now`] as it
//! starts and asks [`Since::interrupted`] before its sleeping kernel call: if a handler ran
//! meanwhile, the call fails with EINTR there, as the kernel's would have. Blocking a
//! signal mask around the spin would do the same at two system calls per call (over half a
//! microsecond here), more than a spin that finds data takes.
//!
//! The signals of faults (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP, SIGSYS) are left alone:
//! they do not arrive at a spinning wait, and runtimes inspect those handlers closely. A
//! program asking `sigaction` for a handler gets its own back, with its own flags.

use libc::{c_int, c_void, siginfo_t};
use std::cell::Cell;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};

/// Signal numbers are below this (1 to 64 on Linux).
const SIGNALS: usize = 65;

/// Per signal: the program's handler, as the address it gave (0: none given yet).
static HANDLERS: [AtomicUsize; SIGNALS] = [const { AtomicUsize::new(0) }; SIGNALS];
/// Per signal: the flags the program gave with its handler (SA_SIGINFO: the handler takes
/// three arguments; SA_RESTART: reads and writes go on after it).
static FLAGS: [AtomicI32; SIGNALS] = [const { AtomicI32::new(0) }; SIGNALS];

thread_local! {
    /// Handlers run on this thread, ever.
    static HANDLED: Cell<u64> = const { Cell::new(0) };
    /// The signal of the last of them.
    static LAST: Cell<c_int> = const { Cell::new(0) };
}

/// Whether the library is on (`LANES_SOCKETS` is not `0`): off, the program's handlers are
/// installed as they are. Read with getenv, which does not allocate: the first call may come
/// before `main` or from a signal handler.
pub fn enabled() -> bool {
    use std::sync::atomic::AtomicU8;
    static ON: AtomicU8 = AtomicU8::new(0); // 0: not read yet, 1: on, 2: off
    match ON.load(Ordering::Relaxed) {
        1 => true,
        2 => false,
        _ => {
            // SAFETY: a NUL-terminated name; the value, if any, is read before anything
            // could change the environment in this call.
            let v = unsafe { libc::getenv(c"LANES_SOCKETS".as_ptr()) };
            // SAFETY: getenv's answer is null or a NUL-terminated string.
            let off = !v.is_null() && unsafe { std::ffi::CStr::from_ptr(v) }.to_bytes() == b"0";
            ON.store(if off { 2 } else { 1 }, Ordering::Relaxed);
            !off
        }
    }
}

/// Whether the library runs `sig`'s handlers through its trampoline.
fn counted(sig: c_int) -> bool {
    (1..SIGNALS as c_int).contains(&sig)
        && !matches!(sig, libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGTRAP | libc::SIGSYS)
}

/// The handler the kernel runs for every counted signal with a handler of the program's.
/// "C-unwind": a handler may leave by an exception (C++ with -fnon-call-exceptions), which
/// must pass through here as it would have without the library; one that leaves with
/// siglongjmp skips this frame, which holds nothing to drop.
extern "C-unwind" fn trampoline(sig: c_int, info: *mut siginfo_t, context: *mut c_void) {
    // try_with: a thread that is exiting has no storage left; its handler still runs.
    let _ = HANDLED.try_with(|h| h.set(h.get().wrapping_add(1)));
    let _ = LAST.try_with(|l| l.set(sig));
    let Some(i) = usize::try_from(sig).ok().filter(|&i| i < SIGNALS) else { return };
    let handler = HANDLERS[i].load(Ordering::Acquire);
    if handler == 0 {
        return;
    }
    if FLAGS[i].load(Ordering::Acquire) & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed this address as `sig`'s handler with SA_SIGINFO:
        // a function of this signature, called as the kernel would have.
        let f =
            unsafe { std::mem::transmute::<usize, extern "C-unwind" fn(c_int, *mut siginfo_t, *mut c_void)>(handler) };
        f(sig, info, context);
    } else {
        // SAFETY: the program installed this address as `sig`'s handler without SA_SIGINFO:
        // a function of one int, called as the kernel would have.
        let f = unsafe { std::mem::transmute::<usize, extern "C-unwind" fn(c_int)>(handler) };
        f(sig);
    }
}

fn trampoline_address() -> usize {
    trampoline as extern "C-unwind" fn(c_int, *mut siginfo_t, *mut c_void) as usize
}

/// sigaction(2), through the C library's: a handler of the program's for a counted signal
/// is installed as the trampoline (with SA_SIGINFO), and the old action reported is the
/// program's.
///
/// # Safety
/// `act` and `old` null or valid, as for sigaction.
pub unsafe fn sigaction(sig: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    let real = crate::real::real().sigaction;
    if !counted(sig) {
        // SAFETY: the caller's arguments.
        return unsafe { real(sig, act, old) };
    }
    let i = sig as usize;
    // The program's view of what the kernel had: read before anything changes.
    let given_flags = FLAGS[i].load(Ordering::Acquire);
    let given_handler = HANDLERS[i].load(Ordering::Acquire);
    // SAFETY: act null or valid (the caller's guarantee).
    let new = unsafe { act.as_ref() }.copied();
    let r = match new {
        Some(mut a) if a.sa_sigaction != libc::SIG_DFL && a.sa_sigaction != libc::SIG_IGN => {
            FLAGS[i].store(a.sa_flags, Ordering::Release);
            HANDLERS[i].store(a.sa_sigaction, Ordering::Release);
            a.sa_sigaction = trampoline_address();
            a.sa_flags |= libc::SA_SIGINFO;
            // SAFETY: a valid action; old null or valid.
            unsafe { real(sig, &a, old) }
        }
        // SAFETY: the caller's arguments.
        _ => unsafe { real(sig, act, old) },
    };
    if r == 0 {
        // SAFETY: old null or valid, written by the call above.
        if let Some(o) = unsafe { old.as_mut() } {
            if o.sa_sigaction == trampoline_address() {
                o.sa_sigaction = given_handler;
                o.sa_flags = o.sa_flags & !libc::SA_SIGINFO | given_flags & libc::SA_SIGINFO;
            }
        }
    }
    r
}

/// signal(3) as the C library makes it (BSD semantics: SA_RESTART, the signal blocked
/// while its handler runs), through [`sigaction`].
///
/// # Safety
/// As signal(3).
pub unsafe fn signal(sig: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    // SAFETY: all-zero is a valid sigaction (no handler, empty mask, no flags).
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    act.sa_sigaction = handler;
    act.sa_flags = libc::SA_RESTART;
    // SAFETY: act.sa_mask is a valid set.
    unsafe {
        libc::sigemptyset(&mut act.sa_mask);
        if libc::sigaddset(&mut act.sa_mask, sig) < 0 {
            return libc::SIG_ERR;
        }
    }
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: both valid.
    if unsafe { sigaction(sig, &act, &mut old) } < 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// siginterrupt(3) (the C library's makes its change without our [`sigaction`]): whether
/// `sig`'s handler interrupts reads and writes, through [`sigaction`].
///
/// # Safety
/// As siginterrupt(3).
pub unsafe fn siginterrupt(sig: c_int, interrupt: c_int) -> c_int {
    // SAFETY: all-zero is a valid sigaction to be overwritten.
    let mut act: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a query into a valid action.
    if unsafe { sigaction(sig, std::ptr::null(), &mut act) } < 0 {
        return -1;
    }
    if interrupt != 0 {
        act.sa_flags &= !libc::SA_RESTART;
    } else {
        act.sa_flags |= libc::SA_RESTART;
    }
    // SAFETY: a valid action, no old one asked.
    unsafe { sigaction(sig, &act, std::ptr::null_mut()) }
}

/// This thread's count of handlers run when a call that may wait started.
#[derive(Clone, Copy)]
pub struct Since(u64);

impl Since {
    /// Now: taken where a call that may wait (a receive, poll, select, epoll) starts its own
    /// work. Not at every call's entry: a thread-local access per call of every kind cost a
    /// 64-byte ping-pong 4 to 9% (sockperf, alternating with the library before it).
    #[inline]
    pub fn now() -> Since {
        Since(HANDLED.try_with(Cell::get).unwrap_or(0))
    }

    /// Whether a handler ran on this thread since: a wait (poll, select, epoll), which the
    /// kernel never restarts, fails with EINTR instead of sleeping.
    #[inline]
    pub fn interrupted(&self) -> bool {
        HANDLED.try_with(Cell::get).unwrap_or(0) != self.0
    }

    /// Whether a handler ran on this thread since that interrupts a blocking receive on
    /// socket `fd`: its signal has no SA_RESTART (the last one decides), or the socket has a
    /// receive timeout (SO_RCVTIMEO), under which the kernel never restarts one.
    pub fn interrupts_receive(&self, fd: c_int) -> bool {
        if !self.interrupted() {
            return false;
        }
        !last_restarts() || (!crate::sandbox::filtered() && has_timeout(fd, libc::SO_RCVTIMEO))
    }

    /// For a blocking send that waited for room and moved nothing yet, once a handler ran
    /// ([`Since::interrupted`]): whether it goes on, as the kernel restarts one whose signal
    /// has SA_RESTART on a socket without a send timeout (SO_SNDTIMEO). A send that moved
    /// bytes ends with their count whatever the handler's flags.
    pub fn restarts_send(&self, fd: c_int) -> bool {
        last_restarts() && (crate::sandbox::filtered() || !has_timeout(fd, libc::SO_SNDTIMEO))
    }
}

/// Whether the last handler run on this thread was installed with SA_RESTART.
fn last_restarts() -> bool {
    let sig = LAST.try_with(Cell::get).unwrap_or(0);
    let flags = usize::try_from(sig).ok().and_then(|i| FLAGS.get(i)).map_or(0, |f| f.load(Ordering::Acquire));
    flags & libc::SA_RESTART != 0
}

/// A receive's look at the handlers run since now, for a cross-host stream, whose spins and
/// waits are the stream's own (see [`Since::interrupts_receive`]).
pub fn stream_interrupts() -> lanes::sockets::fabric_stream::Interrupts {
    lanes::sockets::fabric_stream::Interrupts {
        since: Since::now().0,
        ran: |since, fd| Since(since).interrupts_receive(fd),
    }
}

/// A send's look, for a cross-host stream: any handler run since now ends its wait for
/// room, and the caller decides with what (the bytes moved, EINTR, or a restart: see
/// [`Since::restarts_send`]).
pub fn stream_send_interrupts(since: Since) -> lanes::sockets::fabric_stream::Interrupts {
    lanes::sockets::fabric_stream::Interrupts { since: since.0, ran: |since, _| Since(since).interrupted() }
}

/// Whether socket `fd` has a timeout `opt` (SO_RCVTIMEO or SO_SNDTIMEO). Not asked under a
/// seccomp filter, where the library makes no system call of its own.
fn has_timeout(fd: c_int, opt: c_int) -> bool {
    let mut tv = libc::timeval { tv_sec: 0, tv_usec: 0 };
    let mut len = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
    // SAFETY: tv and len are valid for writes of these sizes.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, opt, (&mut tv as *mut libc::timeval).cast(), &mut len) };
    r == 0 && (tv.tv_sec != 0 || tv.tv_usec != 0)
}
