//! How a side of a measurement waits for its peer: spin on memory, and only when the wait
//! has gone on for a long time look at anything else.
//!
//! The first check is inline and costs nothing but the condition. A wait that goes on
//! reads the clock every [`SPINS_PER_CHECK`] spins; past [`YIELD_AFTER`] (not in real-time
//! mode) it yields the CPU between spins, so an oversubscribed machine still makes progress;
//! every [`POLL_EVERY`] it looks at the control channel without blocking, and fails if the
//! peer has hung up or said something (an error report) in the middle of a slice; past
//! [`GIVE_UP_AFTER`] it fails. None of this happens while the peer answers promptly.

use std::os::fd::RawFd;
use std::time::{Duration, Instant};

const SPINS_PER_CHECK: u32 = 1024;
const YIELD_AFTER: Duration = Duration::from_micros(200);
const POLL_EVERY: Duration = Duration::from_millis(50);
const GIVE_UP_AFTER: Duration = Duration::from_secs(30);

/// A side's way of waiting.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Waiter {
    /// The control channel to watch (the peer's stdout for the client, stdin for the peer).
    ctl: Option<RawFd>,
    /// Yield after every spin: both processes share one CPU.
    yield_each: bool,
    /// Never yield: real-time mode, where a yield does nothing useful.
    realtime: bool,
}

impl Waiter {
    pub(crate) fn new(ctl: Option<RawFd>, single_cpu: bool, realtime: bool) -> Waiter {
        Waiter { ctl, yield_each: single_cpu, realtime }
    }

    /// The control channel it watches, if any.
    pub(crate) fn control(&self) -> Option<RawFd> {
        self.ctl
    }

    /// Spins until `ready` yields a value.
    #[inline(always)]
    pub(crate) fn until<T>(&self, mut ready: impl FnMut() -> Result<Option<T>, String>) -> Result<T, String> {
        if let Some(v) = ready()? {
            return Ok(v);
        }
        self.until_slow(ready)
    }

    #[inline(never)]
    fn until_slow<T>(&self, mut ready: impl FnMut() -> Result<Option<T>, String>) -> Result<T, String> {
        let start = Instant::now();
        let mut next_poll = start + POLL_EVERY;
        let mut yielding = self.yield_each;
        loop {
            for _ in 0..SPINS_PER_CHECK {
                if let Some(v) = ready()? {
                    return Ok(v);
                }
                if yielding {
                    std::thread::yield_now();
                }
            }
            let now = Instant::now();
            if !yielding && !self.realtime && now - start > YIELD_AFTER {
                yielding = true;
            }
            if now >= next_poll {
                next_poll = now + POLL_EVERY;
                if let Some(fd) = self.ctl {
                    if control_ready(fd) {
                        return Err("the peer hung up or reported an error".into());
                    }
                }
                if now - start > GIVE_UP_AFTER {
                    return Err(format!("no progress for {} s", GIVE_UP_AFTER.as_secs()));
                }
            }
        }
    }
}

/// Whether `fd` is readable or hung up, without blocking.
pub(crate) fn control_ready(fd: RawFd) -> bool {
    poll_ready(fd, 0)
}

/// Whether `fd` becomes readable or hangs up within `timeout_ms` (negative: for ever).
pub(crate) fn poll_ready(fd: RawFd, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    loop {
        // SAFETY: `p` is one valid pollfd, and we pass a count of one.
        let rc = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        if rc < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
            continue;
        }
        return rc > 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
    }
}
