//! Learning of a process's death without polling.
//!
//! One background thread per process waits in `epoll` on a pidfd per watched process; a
//! pidfd becomes readable the moment its process exits, so the survivor hears of a death in
//! microseconds and spends no CPU while nothing dies. Where pidfds are unavailable the same
//! thread checks the liveness lock every 10 ms instead.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use super::cvt;
use crate::files::Held;

type DeathCallback = Box<dyn FnOnce() + Send>;
type AliveCheck = Box<dyn Fn() -> bool + Send>;

/// How often processes without a pidfd are checked.
const FALLBACK_POLL_MS: i32 = 10;
/// epoll token of the eventfd that wakes the thread when the watch set changes.
const WAKE_TOKEN: u64 = u64::MAX;

struct Entry {
    pidfd: Option<Held<OwnedFd>>,
    alive: AliveCheck,
    on_death: DeathCallback,
}

/// Its descriptors are held (`files::Held`): out of the program's way, and a program's
/// stray close of one of their numbers does not close them.
struct Monitor {
    epoll: Held<OwnedFd>,
    wake: Held<OwnedFd>,
    owner_pid: u32,
    state: Mutex<MonitorState>,
}

#[derive(Default)]
struct MonitorState {
    next_id: u64,
    entries: HashMap<u64, Entry>,
}

/// A registration; dropping it cancels the callback if it has not run.
#[must_use = "dropping the watch cancels it"]
pub struct Watch {
    monitor: Option<Arc<Monitor>>,
    id: u64,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").field("id", &self.id).finish()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(m) = &self.monitor {
            // Removing the entry closes its pidfd, which also removes it from the epoll set.
            let entry = m.state.lock().unwrap_or_else(|e| e.into_inner()).entries.remove(&self.id);
            drop(entry);
        }
    }
}

/// Calls `on_death` once, from the watch thread, when process `pid` exits, or at once (on
/// this thread) if `alive()` already says it is gone. `alive` is the authoritative check
/// (identity and lock); the pidfd only says when to look.
pub fn watch(
    pid: u32,
    alive: impl Fn() -> bool + Send + 'static,
    on_death: impl FnOnce() + Send + 'static,
) -> io::Result<Watch> {
    // Open the pidfd before checking liveness: if the check then passes, the pidfd refers to
    // the live process we checked, not to a later process that reused its pid.
    let pidfd = pidfd_open(pid);
    if !alive() {
        on_death();
        return Ok(Watch { monitor: None, id: 0 });
    }
    let pidfd = match pidfd {
        Ok(fd) => Some(fd),
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
            on_death();
            return Ok(Watch { monitor: None, id: 0 });
        }
        Err(_) => None, // no pidfd support here: the thread polls this entry
    };
    let monitor = monitor()?;
    let mut st = monitor.state.lock().unwrap_or_else(|e| e.into_inner());
    st.next_id += 1;
    let id = st.next_id;
    if let Some(fd) = &pidfd {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: id };
        // SAFETY: both fds are open; `ev` is valid for the call.
        cvt(unsafe { libc::epoll_ctl(monitor.epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) })?;
    }
    st.entries.insert(id, Entry { pidfd, alive: Box::new(alive), on_death: Box::new(on_death) });
    drop(st);
    monitor.wake();
    Ok(Watch { monitor: Some(monitor), id })
}

fn pidfd_open(pid: u32) -> io::Result<Held<OwnedFd>> {
    Held::make(|| {
        // SAFETY: pidfd_open takes a pid and flags and returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the kernel just gave us this fd; we are its only owner. Set close-on-exec.
        Ok(unsafe {
            libc::fcntl(fd as RawFd, libc::F_SETFD, libc::FD_CLOEXEC);
            OwnedFd::from_raw_fd(fd as RawFd)
        })
    })
}

static MONITOR: Mutex<Option<Arc<Monitor>>> = Mutex::new(None);

fn monitor() -> io::Result<Arc<Monitor>> {
    let mut slot = MONITOR.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(m) = slot.as_ref() {
        // After fork the thread is gone: the child builds its own monitor.
        if m.owner_pid == std::process::id() {
            return Ok(m.clone());
        }
    }
    let m = Arc::new(Monitor::new()?);
    let thread_monitor = m.clone();
    crate::threads::spawn("lanes-death-watch", move || thread_monitor.run())
        .map_err(|e| io::Error::other(format!("cannot start the death-watch thread: {e}")))?;
    *slot = Some(m.clone());
    Ok(m)
}

impl Monitor {
    fn new() -> io::Result<Self> {
        let epoll = Held::make(|| {
            // SAFETY: epoll_create1 returns a new fd or -1.
            let ep = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
            // SAFETY: a fresh fd that nothing else owns.
            Ok(unsafe { OwnedFd::from_raw_fd(ep) })
        })?;
        let wake = Held::make(|| {
            // SAFETY: eventfd returns a new fd or -1.
            let ev = cvt(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
            // SAFETY: a fresh fd that nothing else owns.
            Ok(unsafe { OwnedFd::from_raw_fd(ev) })
        })?;
        let mut e = libc::epoll_event { events: libc::EPOLLIN as u32, u64: WAKE_TOKEN };
        // SAFETY: both fds are open (at their held numbers); `e` is valid for the call.
        cvt(unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, wake.as_raw_fd(), &mut e) })?;
        Ok(Monitor { epoll, wake, owner_pid: std::process::id(), state: Mutex::new(MonitorState::default()) })
    }

    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64 to our eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn run(&self) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 32];
        loop {
            let polling =
                self.state.lock().unwrap_or_else(|e| e.into_inner()).entries.values().any(|e| e.pidfd.is_none());
            let timeout = if polling { FALLBACK_POLL_MS } else { -1 };
            // SAFETY: `events` is valid for writes of its length.
            let n =
                unsafe { libc::epoll_wait(self.epoll.as_raw_fd(), events.as_mut_ptr(), events.len() as i32, timeout) };
            if n < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return;
            }
            let mut ready: Vec<u64> = Vec::new();
            for ev in &events[..n as usize] {
                if ev.u64 == WAKE_TOKEN {
                    let mut buf = 0u64;
                    // SAFETY: reads 8 bytes into a valid u64 from our nonblocking eventfd.
                    unsafe { libc::read(self.wake.as_raw_fd(), (&mut buf as *mut u64).cast(), 8) };
                } else {
                    ready.push(ev.u64);
                }
            }
            let mut fired = Vec::new();
            {
                let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                let polled: Vec<u64> = if polling {
                    st.entries.iter().filter(|(_, e)| e.pidfd.is_none() && !(e.alive)()).map(|(k, _)| *k).collect()
                } else {
                    Vec::new()
                };
                for id in ready.into_iter().chain(polled) {
                    if let Some(e) = st.entries.remove(&id) {
                        fired.push(e);
                    }
                }
            }
            // Callbacks run without the lock held: they may register or drop other watches.
            for e in fired {
                drop(e.pidfd);
                (e.on_death)();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn hears_of_a_child_death() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let (tx, rx) = mpsc::channel();
        let alive = move || std::path::Path::new(&format!("/proc/{pid}")).exists();
        let _w = watch(pid, alive, move || tx.send(()).unwrap()).unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err(), "fired while alive");
        child.kill().unwrap();
        // The pidfd fires on exit, before the zombie is reaped.
        rx.recv_timeout(Duration::from_secs(2)).expect("death noticed");
        child.wait().unwrap();
    }

    #[test]
    fn fires_at_once_for_a_dead_process_and_not_after_drop() {
        let (tx, rx) = mpsc::channel();
        let w = watch(1, || false, move || tx.send(()).unwrap()).unwrap();
        rx.try_recv().expect("fired at once");
        drop(w);
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let (tx, rx) = mpsc::channel::<()>();
        let w = watch(child.id(), || true, move || tx.send(()).unwrap()).unwrap();
        drop(w);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(rx.recv_timeout(Duration::from_millis(200)).is_err());
    }
}
