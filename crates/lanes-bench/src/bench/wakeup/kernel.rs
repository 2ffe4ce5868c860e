//! Kernel baselines for a wake-up between two processes, and the floor: each measured by
//! forking a child that answers the parent's pings.
//!
//! The child runs only system calls on stack buffers and ends with `_exit`, so forking from
//! a multi-threaded parent is safe. A watchdog kills a child that stops answering and
//! unblocks the parent, so a baseline never hangs the run.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::measure::clock::now_ticks;

/// A baseline path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Baseline {
    /// Two processes spinning on one cache line of a shared anonymous page (no Lanes code).
    Spin,
    /// Blocking eventfd reads and writes.
    Eventfd,
    /// Blocking pipe reads and writes.
    Pipe,
    /// Blocking Unix datagram socket send and receive.
    UnixDatagram,
}

impl Baseline {
    pub fn name(self) -> &'static str {
        match self {
            Baseline::Spin => "floor (spin on one cache line)",
            Baseline::Eventfd => "eventfd",
            Baseline::Pipe => "pipe",
            Baseline::UnixDatagram => "unix datagram",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Baseline::Spin => "floor",
            Baseline::Eventfd => "eventfd",
            Baseline::Pipe => "pipe",
            Baseline::UnixDatagram => "unix-dgram",
        }
    }

    /// Whether it can carry a payload of `size` bytes.
    pub fn carries(self, size: usize) -> bool {
        match self {
            Baseline::Spin | Baseline::Eventfd => size <= 8,
            Baseline::Pipe | Baseline::UnixDatagram => size <= 4096,
        }
    }
}

fn last_err(what: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

/// Two fds: (parent writes, child reads) and (child writes, parent reads); for datagram
/// sockets both pairs are the two ends of one socketpair.
struct Channel {
    to_child: [i32; 2],
    to_parent: [i32; 2],
}

fn channel(b: Baseline) -> io::Result<Channel> {
    let mut a = [-1i32; 2];
    let mut c = [-1i32; 2];
    // SAFETY: each call writes two fds into the arrays we pass, or fails.
    unsafe {
        match b {
            Baseline::Eventfd => {
                let x = libc::eventfd(0, libc::EFD_CLOEXEC);
                let y = libc::eventfd(0, libc::EFD_CLOEXEC);
                if x < 0 || y < 0 {
                    return Err(last_err("eventfd"));
                }
                a = [x, x];
                c = [y, y];
            }
            Baseline::Pipe => {
                if libc::pipe2(a.as_mut_ptr(), libc::O_CLOEXEC) != 0
                    || libc::pipe2(c.as_mut_ptr(), libc::O_CLOEXEC) != 0
                {
                    return Err(last_err("pipe"));
                }
                // pipe gives [read, write]; store as [write end, read end].
                a = [a[1], a[0]];
                c = [c[1], c[0]];
            }
            Baseline::UnixDatagram => {
                let mut sv = [-1i32; 2];
                if libc::socketpair(libc::AF_UNIX, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0, sv.as_mut_ptr()) != 0 {
                    return Err(last_err("socketpair"));
                }
                a = [sv[0], sv[1]];
                c = [sv[1], sv[0]];
            }
            Baseline::Spin => {}
        }
    }
    Ok(Channel { to_child: a, to_parent: c })
}

/// Sends `len` bytes (eventfd: the 8-byte counter) from `buf`.
///
/// # Safety
/// `fd` is open; `buf` holds at least max(len, 8) bytes.
unsafe fn send(b: Baseline, fd: i32, buf: *const u8, len: usize) -> bool {
    if b == Baseline::Eventfd {
        // An eventfd write adds its 8-byte value to the counter: it must not be 0.
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to an open fd.
        return unsafe { libc::write(fd, (&one as *const u64).cast(), 8) == 8 };
    }
    let n = len.max(1);
    // SAFETY: as the caller guarantees.
    unsafe { libc::write(fd, buf.cast(), n) == n as isize }
}

/// Receives one message of `len` bytes (eventfd: the counter).
///
/// # Safety
/// `fd` is open; `buf` holds at least max(len, 8) bytes.
unsafe fn recv(b: Baseline, fd: i32, buf: *mut u8, len: usize) -> bool {
    let want = if b == Baseline::Eventfd { 8 } else { len.max(1) };
    let mut got = 0usize;
    while got < want {
        // SAFETY: got < want <= buffer size.
        let r = unsafe { libc::read(fd, buf.add(got).cast(), want - got) };
        if r <= 0 {
            return false;
        }
        got += r as usize;
        if b == Baseline::UnixDatagram {
            break; // one datagram is one message
        }
    }
    true
}

/// Measures `n` round trips of `size`-byte messages on `b`; the parent (this thread) should
/// already be pinned; the child pins itself to `child_cpu`. Returns each round trip's ticks.
pub fn round_trips(b: Baseline, size: usize, n: usize, child_cpu: Option<usize>) -> io::Result<Vec<u64>> {
    let mut ticks = Vec::with_capacity(n);
    let ch = if b == Baseline::Spin { None } else { Some(channel(b)?) };
    // SAFETY: a fresh anonymous shared page, unmapped below.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if page == libc::MAP_FAILED {
        return Err(last_err("mmap"));
    }
    // SAFETY: the page is 4096 bytes, page aligned; the word is only accessed atomically.
    let word = unsafe { AtomicU64::from_ptr(page.cast()) };
    let mut buf = [0u8; 4096];
    // SAFETY: fork; the child only makes system calls on its stack and memory mapped before
    // the fork, then _exits: nothing in it touches locks another thread might hold.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(last_err("fork"));
    }
    if pid == 0 {
        // SAFETY: the child's whole life: raw system calls and atomics, then _exit.
        unsafe { child(b, &ch, word, size, n, child_cpu, buf.as_mut_ptr()) }
    }
    let failed = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let (failed, done) = (failed.clone(), done.clone());
        // A pipe's write end is closed here below (its reader then sees the child's death as
        // EOF), so there is nothing to write into; the others' stay open.
        let unblock = ch.as_ref().filter(|_| b != Baseline::Pipe).map(|c| c.to_parent[0]);
        let budget = Duration::from_secs(30) + Duration::from_micros(200 * n as u64);
        std::thread::spawn(move || {
            let start = std::time::Instant::now();
            while !done.load(Ordering::Acquire) {
                if start.elapsed() > budget {
                    failed.store(true, Ordering::Release);
                    // SAFETY: pid is our child; the write unblocks our own read with junk.
                    unsafe {
                        libc::kill(pid, libc::SIGKILL);
                        if let Some(fd) = unblock {
                            let junk = [1u8; 8];
                            libc::write(fd, junk.as_ptr().cast(), 8);
                        }
                    }
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    if let Some(c) = &ch {
        if b == Baseline::Pipe {
            // SAFETY: closing the ends only the child uses, so a dead child reads as EOF.
            unsafe {
                libc::close(c.to_child[1]);
                libc::close(c.to_parent[0]);
            }
        }
    }
    for i in 0..n as u64 {
        if failed.load(Ordering::Relaxed) {
            break;
        }
        let t0 = now_ticks();
        let ok = match &ch {
            None => {
                word.store(2 * i + 1, Ordering::Release);
                let mut spins = 0u64;
                while word.load(Ordering::Acquire) != 2 * i + 2 {
                    spins += 1;
                    if spins % (1 << 20) == 0 && failed.load(Ordering::Relaxed) {
                        break;
                    }
                }
                true
            }
            // SAFETY: the fds are open (closed only after the loop); buf holds 4096 bytes.
            Some(c) => unsafe {
                send(b, c.to_child[0], buf.as_ptr(), size) && recv(b, c.to_parent[1], buf.as_mut_ptr(), size)
            },
        };
        ticks.push(now_ticks().wrapping_sub(t0));
        if !ok {
            failed.store(true, Ordering::Release);
            break;
        }
    }
    done.store(true, Ordering::Release);
    let _ = watchdog.join();
    let mut status = 0;
    // Each fd once: an eventfd or a socket serves as two ends, and a pipe's child ends are
    // closed already. (Closing a number twice can close an fd another thread has opened since.)
    let mut fds: Vec<i32> = Vec::new();
    if let Some(c) = &ch {
        fds.extend([c.to_child[0], c.to_parent[1]]);
        if b != Baseline::Pipe {
            fds.extend([c.to_child[1], c.to_parent[0]]);
        }
        fds.sort_unstable();
        fds.dedup();
    }
    // SAFETY: reaping our own child; closing our own fds, each once; unmapping our page.
    unsafe {
        libc::waitpid(pid, &mut status, 0);
        for fd in fds {
            libc::close(fd);
        }
        libc::munmap(page, 4096);
    }
    if failed.load(Ordering::Acquire) {
        return Err(io::Error::other(format!("the {} baseline's child stopped answering", b.name())));
    }
    Ok(ticks)
}

/// The forked child: answers `n` pings, then exits.
///
/// # Safety
/// Call only in a freshly forked child; never returns.
unsafe fn child(
    b: Baseline,
    ch: &Option<Channel>,
    word: &AtomicU64,
    size: usize,
    n: usize,
    cpu: Option<usize>,
    buf: *mut u8,
) -> ! {
    if let Some(c) = cpu {
        // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks nothing, so check first.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            if c < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(c, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
            }
        }
    }
    let mut ok = true;
    for i in 0..n as u64 {
        match ch {
            None => {
                while word.load(Ordering::Acquire) != 2 * i + 1 {}
                word.store(2 * i + 2, Ordering::Release);
            }
            // SAFETY: fds inherited from the parent and open; buf holds 4096 bytes.
            Some(c) => unsafe {
                if !(recv(b, c.to_child[1], buf, size) && send(b, c.to_parent[0], buf, size)) {
                    ok = false;
                    break;
                }
            },
        }
    }
    // SAFETY: ends the child without running the parent's destructors or atexit handlers.
    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_baseline_completes_its_round_trips() {
        for b in [Baseline::Spin, Baseline::Eventfd, Baseline::Pipe, Baseline::UnixDatagram] {
            for size in [1usize, 8, 4096] {
                if !b.carries(size) {
                    continue;
                }
                let t = round_trips(b, size, 500, None).unwrap_or_else(|e| panic!("{}: {e}", b.name()));
                assert_eq!(t.len(), 500, "{}", b.name());
            }
        }
    }
}
