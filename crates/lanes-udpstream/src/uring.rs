//! io_uring: the messages the GSO and GRO paths build, handed to the kernel as
//! `IORING_OP_SENDMSG` / `IORING_OP_RECVMSG` entries of one submission instead of one
//! `sendmmsg` / `recvmmsg`.
//!
//! Each batch is a linked chain (`IOSQE_IO_LINK`), so the datagrams leave in order and the
//! chain stops at the first failure (the rest complete with `-ECANCELED`), which gives
//! exactly `sendmmsg`'s and `recvmmsg`'s "n from the front" result. A blocking receive waits
//! in its first entry only, bounded by a linked timeout; the others do not wait
//! (`MSG_DONTWAIT`). Every entry has completed before a call returns, so no entry outlives
//! the buffers it points at.
//!
//! Set up once per sender or receiver; where io_uring is missing or refused (an old kernel,
//! seccomp, `kernel.io_uring_disabled`: ENOSYS, EPERM, ENOMEM) the path falls back to GSO /
//! GRO without a word.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

use io_uring::{opcode, squeue, types, IoUring};

/// Entries per ring: a batch (at most 64 sends, or 32 receives and a timeout) fits.
const ENTRIES: u32 = 128;
/// Messages per submission.
pub(crate) const MAX_BATCH: usize = 64;
const TIMEOUT_TAG: u64 = u64::MAX;

pub(crate) struct Uring {
    ring: IoUring,
    results: Vec<i32>,
}

// SAFETY: the ring is owned by this value and used through `&mut self` only.
unsafe impl Send for Uring {}

impl Uring {
    /// A ring, or `None` where io_uring is not available.
    pub(crate) fn new() -> Option<Uring> {
        IoUring::new(ENTRIES).ok().map(|ring| Uring { ring, results: Vec::new() })
    }

    /// Pushes `entries` (already linked), submits and waits until every one completed;
    /// `self.results[tag]` is each entry's result.
    ///
    /// # Safety
    /// Every pointer in the entries stays valid until this returns.
    unsafe fn run(&mut self, entries: &[squeue::Entry], tags: usize) -> io::Result<()> {
        self.results.clear();
        self.results.resize(tags, -libc::ECANCELED);
        {
            let mut sq = self.ring.submission();
            // All or none: a half-pushed batch would be submitted by the next call, pointing
            // at buffers gone by then.
            if sq.capacity() - sq.len() < entries.len() {
                return Err(io::Error::from_raw_os_error(libc::EBUSY));
            }
            for e in entries {
                // SAFETY: the caller keeps what the entry points at valid until we return,
                // and we return only once all entries completed.
                unsafe { sq.push(e) }.map_err(|_| io::Error::from_raw_os_error(libc::EBUSY))?;
            }
        }
        let mut done = 0;
        while done < entries.len() {
            match self.ring.submit_and_wait(entries.len() - done) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)) => {}
                // The other errors of io_uring_enter (EBADF, EFAULT, EINVAL...) come before it
                // takes any entry.
                Err(e) => return Err(e),
            }
            for cqe in self.ring.completion() {
                done += 1;
                let tag = cqe.user_data();
                if tag != TIMEOUT_TAG {
                    if let Some(r) = self.results.get_mut(tag as usize) {
                        *r = cqe.result();
                    }
                }
            }
        }
        Ok(())
    }

    /// The messages completed from the front, like `sendmmsg`/`recvmmsg`: `Ok(n)` when the
    /// first succeeded, else its error (EAGAIN, ETIME and ECANCELED of a first receive: 0).
    fn count_front(&self, msgs: &mut [libc::mmsghdr], receive: bool) -> io::Result<usize> {
        let mut n = 0;
        for (m, &r) in msgs.iter_mut().zip(&self.results) {
            if r < 0 {
                break;
            }
            m.msg_len = r as u32;
            n += 1;
        }
        match self.results.first() {
            Some(&r) if r < 0 && n == 0 => {
                if receive && matches!(-r, libc::EAGAIN | libc::ETIME | libc::ECANCELED | libc::EINTR) {
                    Ok(0)
                } else {
                    Err(io::Error::from_raw_os_error(-r))
                }
            }
            _ => Ok(n),
        }
    }

    /// Sends up to [`MAX_BATCH`] of `msgs`, in order: the number sent, or the first one's error.
    ///
    /// Every message must point at iovecs, buffers and cmsgs valid for the call.
    pub(crate) fn sendmsgs(&mut self, fd: RawFd, msgs: &mut [libc::mmsghdr]) -> io::Result<usize> {
        let n = msgs.len().min(MAX_BATCH);
        let entries: Vec<squeue::Entry> = (0..n)
            .map(|i| {
                let e = opcode::SendMsg::new(types::Fd(fd), &msgs[i].msg_hdr).build().user_data(i as u64);
                if i + 1 < n {
                    e.flags(squeue::Flags::IO_LINK)
                } else {
                    e
                }
            })
            .collect();
        // SAFETY: the headers are in `msgs`, borrowed for this call, and what they point at is
        // the caller's (valid for the call); `run` returns after every entry completed.
        unsafe { self.run(&entries, n)? };
        self.count_front(&mut msgs[..n], false)
    }

    /// Receives into up to [`MAX_BATCH`] of `msgs`: with `wait`, the first waits (up to the
    /// given time; `None` inside: no limit), the others take only what is queued.
    pub(crate) fn recvmsgs(
        &mut self,
        fd: RawFd,
        msgs: &mut [libc::mmsghdr],
        wait: Option<Option<Duration>>,
    ) -> io::Result<usize> {
        let n = msgs.len().min(MAX_BATCH);
        let ts: types::Timespec = wait.flatten().unwrap_or_default().into();
        let mut entries = Vec::with_capacity(n + 1);
        for (i, m) in msgs.iter_mut().take(n).enumerate() {
            let flags = if i == 0 && wait.is_some() { 0 } else { libc::MSG_DONTWAIT as u32 };
            let msg: *mut libc::msghdr = &mut m.msg_hdr;
            let mut e = opcode::RecvMsg::new(types::Fd(fd), msg).flags(flags).build().user_data(i as u64);
            let timed = i == 0 && matches!(wait, Some(Some(_)));
            if i + 1 < n || timed {
                e = e.flags(squeue::Flags::IO_LINK);
            }
            entries.push(e);
            if timed {
                let mut t = opcode::LinkTimeout::new(&ts).build().user_data(TIMEOUT_TAG);
                if i + 1 < n {
                    t = t.flags(squeue::Flags::IO_LINK);
                }
                entries.push(t);
            }
        }
        // SAFETY: as for `sendmsgs`; the headers point at the caller's writable buffers, and
        // `ts` lives until `run` returns.
        unsafe { self.run(&entries, n)? };
        self.count_front(&mut msgs[..n], true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsRawFd;

    fn msg(iov: &mut libc::iovec) -> libc::mmsghdr {
        let mut m = crate::sys::empty_mmsghdr();
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = 1;
        m
    }

    /// Where io_uring is there: linked sends arrive in order, a non-waiting receive takes
    /// what is queued and stops at the first empty one, a waiting one times out.
    #[test]
    fn linked_sends_and_receives() {
        let Some(mut u) = Uring::new() else {
            eprintln!("io_uring refused here: nothing to test");
            return;
        };
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let mut data: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 100 + i as usize]).collect();
        let mut iovs: Vec<libc::iovec> =
            data.iter_mut().map(|d| libc::iovec { iov_base: d.as_mut_ptr().cast(), iov_len: d.len() }).collect();
        let mut msgs: Vec<libc::mmsghdr> = iovs.iter_mut().map(msg).collect();
        assert_eq!(u.sendmsgs(tx.as_raw_fd(), &mut msgs).unwrap(), 10);
        let mut bufs = vec![[0u8; 256]; 16];
        let mut iovs: Vec<libc::iovec> =
            bufs.iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: 256 }).collect();
        let mut msgs: Vec<libc::mmsghdr> = iovs.iter_mut().map(msg).collect();
        std::thread::sleep(Duration::from_millis(20));
        let n = u.recvmsgs(rx.as_raw_fd(), &mut msgs, None).unwrap();
        assert_eq!(n, 10);
        for i in 0..10 {
            assert_eq!(msgs[i].msg_len as usize, 100 + i);
            assert!(bufs[i][..100 + i].iter().all(|&b| b == i as u8));
        }
        let t = std::time::Instant::now();
        assert_eq!(u.recvmsgs(rx.as_raw_fd(), &mut msgs, Some(Some(Duration::from_millis(30)))).unwrap(), 0);
        assert!(t.elapsed() >= Duration::from_millis(25), "{:?}", t.elapsed());
        assert_eq!(u.recvmsgs(rx.as_raw_fd(), &mut msgs, None).unwrap(), 0);
    }
}
