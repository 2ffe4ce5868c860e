//! The threads Lanes starts inside a program's process (and its daemon's).
//!
//! A signal sent to a process goes to any one of its threads that does not block it. A
//! program that blocks its signals in every thread and takes them with `sigwait` or a
//! signalfd, or that leaves them unblocked in one thread only, counts on the kernel picking
//! that thread. A thread of ours that blocked nothing could be picked instead: the
//! program's handler would run on a thread it does not know, and a SIGTERM it meant to
//! wait for would take its default action there and end the process. So every thread Lanes
//! starts blocks every signal from its first instruction (the same as libuv's thread
//! pool), and so do the threads a C library starts while Lanes calls it
//! ([`with_signals_blocked`]: libfabric's providers start their own).

use std::io;
use std::thread::JoinHandle;

/// Runs `f` with every signal blocked on this thread, then puts the thread's mask back: a
/// thread `f` starts inherits the full mask.
pub fn with_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(libc::sigset_t);
    impl Drop for Restore {
        fn drop(&mut self) {
            // SAFETY: a mask pthread_sigmask wrote below; no old mask asked.
            unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
        }
    }
    // SAFETY: all-zero is a valid sigset_t, filled or overwritten before use.
    let (mut all, mut old): (libc::sigset_t, libc::sigset_t) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: valid sets; sigfillset cannot fail on one.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let _restore = Restore(old);
    f()
}

/// Starts a thread named `name` running `f`, with every signal blocked (see the module's
/// doc).
pub fn spawn<F, T>(name: impl Into<String>, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let builder = std::thread::Builder::new().name(name.into());
    with_signals_blocked(|| builder.spawn(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blocked_now(sig: libc::c_int) -> bool {
        // SAFETY: all-zero is a valid sigset_t to be overwritten.
        let mut cur: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: a query: no new mask, a valid old one.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur) };
        // SAFETY: a valid set.
        unsafe { libc::sigismember(&cur, sig) == 1 }
    }

    #[test]
    fn a_started_thread_blocks_every_signal_and_the_starter_keeps_its_mask() {
        assert!(!blocked_now(libc::SIGTERM), "the test thread blocks SIGTERM already");
        let inside =
            spawn("lanes-test", || [libc::SIGTERM, libc::SIGINT, libc::SIGUSR1, libc::SIGCHLD].map(blocked_now))
                .expect("a thread")
                .join()
                .expect("no panic");
        assert_eq!(inside, [true; 4]);
        assert!(!blocked_now(libc::SIGTERM), "the starter's mask changed");
    }
}
