//! Futex wait and wake on words in memory shared between processes (the non-private
//! futex operations, keyed by the physical page, so they work across mappings).

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Why a wait ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// Woken (or spuriously returned): re-check the condition.
    Woken,
    /// The word no longer held the expected value.
    Changed,
    /// The timeout passed.
    TimedOut,
}

/// Sleeps while `*word == expected`, at most `timeout` (for ever if `None`).
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> Wake {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; FUTEX_WAIT only
    // reads it and the timespec, which lives on our stack until the call returns.
    let rc = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAIT, expected, ts_ptr) };
    if rc == 0 {
        return Wake::Woken;
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EAGAIN) => Wake::Changed,
        Some(libc::ETIMEDOUT) => Wake::TimedOut,
        _ => Wake::Woken, // EINTR and the like: the caller re-checks
    }
}

/// Wakes up to `n` sleepers on `word`; returns how many woke.
pub fn wake(word: &AtomicU32, n: i32) -> usize {
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE does not access its value.
    let rc = unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, n) };
    rc.max(0) as usize
}
