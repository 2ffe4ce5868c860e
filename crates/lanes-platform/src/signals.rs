//! Termination signals (SIGTERM, SIGINT) turned into something a thread can wait for.
//!
//! The handler only writes the signal's number into a socket pair (`write` is
//! async-signal-safe); [`TerminationSignals::wait`] reads the other end with a timeout. The
//! handler is process-wide, so it works whatever signal masks other threads have.

use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::cvt;

/// The write end the handler uses; -1 while no [`TerminationSignals`] exists.
static WRITE_FD: AtomicI32 = AtomicI32::new(-1);
/// Serialises installation: one receiver at a time.
static INSTALLED: Mutex<bool> = Mutex::new(false);

extern "C" fn on_signal(signal: libc::c_int) {
    let fd = WRITE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = signal as u8;
        // SAFETY: write is async-signal-safe; the buffer is one valid byte on our stack. The
        // fd stays open while WRITE_FD names it (cleared before the stream is closed). A
        // full socket buffer (EAGAIN: it is non-blocking) just drops the repeat signal.
        unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    }
}

/// SIGTERM and SIGINT, caught while this lives; the default actions return on drop.
pub struct TerminationSignals {
    read: UnixStream,
    /// The handler's end: kept open (by ownership) while the handler may write to it.
    _write: UnixStream,
}

impl TerminationSignals {
    /// Catches SIGTERM and SIGINT. Only one may exist at a time.
    pub fn install() -> io::Result<TerminationSignals> {
        let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
        if *installed {
            return Err(io::Error::new(io::ErrorKind::AlreadyExists, "termination signals are already caught"));
        }
        let (read, write) = UnixStream::pair()?;
        write.set_nonblocking(true)?;
        WRITE_FD.store(write.as_raw_fd(), Ordering::Relaxed);
        for sig in [libc::SIGTERM, libc::SIGINT] {
            if let Err(e) = set_handler(sig, on_signal as *const () as libc::sighandler_t) {
                WRITE_FD.store(-1, Ordering::Relaxed);
                let _ = set_handler(libc::SIGTERM, libc::SIG_DFL);
                return Err(e);
            }
        }
        *installed = true;
        Ok(TerminationSignals { read, _write: write })
    }

    /// Waits up to `timeout` for a signal; returns its number.
    pub fn wait(&self, timeout: Duration) -> io::Result<Option<i32>> {
        self.read.set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let mut byte = [0u8; 1];
        match (&self.read).read(&mut byte) {
            Ok(1) => Ok(Some(i32::from(byte[0]))),
            Ok(_) => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "signal pipe closed")),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => Ok(None),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Drop for TerminationSignals {
    fn drop(&mut self) {
        let _ = set_handler(libc::SIGTERM, libc::SIG_DFL);
        let _ = set_handler(libc::SIGINT, libc::SIG_DFL);
        // Only now may the write end close: the handler no longer names its fd.
        WRITE_FD.store(-1, Ordering::Relaxed);
        *INSTALLED.lock().unwrap_or_else(|e| e.into_inner()) = false;
    }
}

fn set_handler(signal: libc::c_int, handler: libc::sighandler_t) -> io::Result<()> {
    // SAFETY: sigaction is plain old data; all-zero is a valid value that we then fill in.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = handler;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: the mask is a valid sigset_t inside `action`.
    unsafe { libc::sigemptyset(&mut action.sa_mask) };
    // SAFETY: `action` is fully initialised; the handler (if not SIG_DFL) is an
    // `extern "C" fn(c_int)` that only does async-signal-safe work.
    cvt(unsafe { libc::sigaction(signal, &action, std::ptr::null_mut()) }).map(|_| ())
}

/// The signal's name, for logs.
pub fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGTERM => "SIGTERM",
        libc::SIGINT => "SIGINT",
        _ => "a signal",
    }
}
