//! The batch rules of sendmmsg and recvmmsg, for the calls the library makes message by
//! message (TCP streams, UDP rings): at most `UIO_MAXIOV` entries; a failure of the first
//! entry is the call's, a later one ends the batch with the count so far; after the
//! first, receives do not wait once `MSG_WAITFORONE` is given or the timeout has passed.

use std::time::{Duration, Instant};

use libc::{c_int, c_uint, mmsghdr, ssize_t};

/// Runs `each` on the entries of `msgs` in order (at most `n`) and fills in their
/// `msg_len`. `each(i, entry)` gives `Some((bytes, last))`, `Some((-1, _))` for a failure
/// (errno set), or None where the library cannot make the entry itself: for the first
/// entry the whole call is then the kernel's own (None here); later it ends the batch, as
/// does a `last` entry (a send made in part).
///
/// # Safety
/// `msgs` is valid for `n` entries.
pub unsafe fn each_entry(
    msgs: *mut mmsghdr,
    n: usize,
    mut each: impl FnMut(usize, &mut mmsghdr) -> Option<(ssize_t, bool)>,
) -> Option<c_int> {
    let mut done = 0;
    for i in 0..n.min(libc::UIO_MAXIOV as usize) {
        // SAFETY: the caller's array of n entries.
        let m = unsafe { &mut *msgs.add(i) };
        match each(i, m) {
            None if i == 0 => return None,
            Some((r, _)) if r < 0 && i == 0 => return Some(-1),
            None => break,
            Some((r, _)) if r < 0 => break,
            Some((r, last)) => {
                m.msg_len = r as c_uint;
                done += 1;
                if last {
                    break;
                }
            }
        }
    }
    Some(done)
}

/// The flags of each receive of one recvmmsg.
pub struct RecvPace {
    start: Instant,
    flags: c_int,
    timeout: Option<Duration>,
}

impl RecvPace {
    /// For a recvmmsg with `flags` and `timeout`, starting now.
    pub fn new(flags: c_int, timeout: Option<Duration>) -> RecvPace {
        RecvPace { start: Instant::now(), flags, timeout }
    }

    /// The flags of entry `i`'s receive: the call's without `MSG_WAITFORONE`, and
    /// `MSG_DONTWAIT` after the first once `MSG_WAITFORONE` is given or the timeout passed.
    pub fn flags(&self, i: usize) -> c_int {
        let base = self.flags & !libc::MSG_WAITFORONE;
        let later = i > 0
            && (self.flags & libc::MSG_WAITFORONE != 0 || self.timeout.is_some_and(|t| self.start.elapsed() >= t));
        if later {
            base | libc::MSG_DONTWAIT
        } else {
            base
        }
    }
}
