//! Waiting for several sockets: poll, ppoll, select, pselect and epoll.
//!
//! Accelerated sockets are ready for reading when their ring holds bytes, which the kernel
//! cannot see. A waiting call therefore first looks at the rings and asks the kernel
//! without waiting, spins for the poll time doing both, and then, before it sleeps in the
//! kernel, switches every accelerated socket it waits for to kernel mode (counting itself
//! a sleeper): from then on their bytes travel through the kernel, which wakes the call
//! with its own semantics (timeouts, signal masks, EINTR).
//!
//! Connections to other hosts with a live fabric stream (`crate::remote`) are ready for
//! reading when their ring holds bytes; before the call sleeps, each asks its peer's sender
//! for kernel mode and reads its ring first (`FabricStream::prepare_to_wait`), so the
//! kernel's readiness is theirs while the call sleeps.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use libc::{c_int, epoll_event, pollfd};
use smallvec::SmallVec;

use crate::conn::{lookup, Conn};
use crate::park;
use crate::real::{errno, real, set_errno};
use crate::spin;
use crate::udp::UdpSock;
use lanes::sockets::direction::SleepTicket;
use lanes::sockets::endpoint::{FLAG_RX_LOWAT, FLAG_TX_URGENT};
use lanes::sockets::fabric_stream::FabricStream;

/// How often a spinning wait asks the kernel about the other descriptors.
const KERNEL_CHECK_EVERY: Duration = Duration::from_micros(10);

/// Accelerated sockets a wait covers, with the sleeper counts it holds. Inline for a few
/// sockets: a wait allocates nothing then.
struct Sleepers<'a> {
    prepared: SmallVec<[(&'a Conn, SleepTicket); 4]>,
    /// Sockets whose peer's direction is parked: their bytes come through the kernel for
    /// as long as these are held.
    _parked: SmallVec<[park::ParkedHold<'a>; 8]>,
    /// UDP sockets switched to kernel mode (`crate::udp`).
    udp: SmallVec<[&'a UdpSock; 4]>,
}

impl<'a> Sleepers<'a> {
    /// Switches each to kernel mode as a sleeper; None if one has ring bytes (then none
    /// stays prepared).
    fn prepare(
        conns: impl IntoIterator<Item = &'a Arc<Conn>>,
        udp: impl IntoIterator<Item = &'a Arc<UdpSock>>,
        streams: impl IntoIterator<Item = &'a Arc<FabricStream>>,
    ) -> Option<Sleepers<'a>> {
        for st in streams {
            if st.prepare_to_wait() {
                return None; // ring bytes (or a reset) to report
            }
        }
        let mut s = Sleepers { prepared: SmallVec::new(), _parked: SmallVec::new(), udp: SmallVec::new() };
        for u in udp {
            if !u.prepare_sleep() {
                return None; // datagrams wait; drop undoes the others
            }
            s.udp.push(&**u);
        }
        for c in conns {
            let Some(peer) = c.peer() else { continue };
            if c.rx_retired() {
                continue; // the kernel's alone, for good: nothing to hold or prepare
            }
            if let Some(hold) = park::hold(c) {
                s._parked.push(hold);
                continue;
            }
            if c.own.has_flag(FLAG_RX_LOWAT) && c.ring_unread() > 0 {
                // Fewer ring bytes than the low-water mark (more would have been reported):
                // the kernel's own mark, lowered by their number, wakes the wait, and the
                // peer sends through the kernel anyway (FLAG_RX_LOWAT).
                continue;
            }
            // None: drop undoes the others.
            let ticket = peer.tx_word().prepare_sleep(c.own.rx_consumed().load(Ordering::Acquire))?;
            crate::stream::want_ring(&c.own, false);
            s.prepared.push((&**c, ticket));
        }
        Some(s)
    }
}

impl Drop for Sleepers<'_> {
    fn drop(&mut self) {
        for u in self.udp.drain(..) {
            u.finish_sleep();
        }
        for (c, ticket) in self.prepared.drain(..) {
            if let Some(p) = c.peer() {
                p.tx_word().finish_sleep(ticket, crate::stream::ring_allowed(c));
            }
        }
    }
}

fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

/// A timeout for poll/epoll_wait: milliseconds rounded up, -1 for none.
pub fn ms_ceil(d: Option<Duration>) -> c_int {
    d.map_or(-1, |d| d.as_micros().div_ceil(1000).min(c_int::MAX as u128) as c_int)
}

/// A timeout for ppoll/pselect.
pub fn timespec_of(d: Option<Duration>) -> Option<libc::timespec> {
    d.map(|d| libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long })
}

/// The common core of poll and ppoll. `sleep` makes the final blocking kernel call with
/// the remaining time.
pub fn poll_core(
    fds: &mut [pollfd],
    timeout: Option<Duration>,
    sleep: &mut dyn FnMut(&mut [pollfd], Option<Duration>) -> c_int,
) -> c_int {
    let since = crate::signals::Since::now();
    // Our epoll sets among them are ready by their kernel registrations (those owed are
    // made first) and by their sockets' rings, as a nested set is in an epoll wait.
    let sets: SmallVec<[(usize, Arc<ShadowLock>); 2]> =
        fds.iter().enumerate().filter_map(|(i, p)| set_of(p.fd).map(|s| (i, s))).collect();
    for (_, set) in &sets {
        flush_set(set);
    }
    let set_watch: SmallVec<[Watched; 2]> = sets
        .iter()
        .filter(|(i, _)| fds[*i].events & libc::POLLIN != 0)
        .map(|(i, set)| Watched::Set(fds[*i].fd, set.clone()))
        .collect();
    let set_rings = set_watch.iter().any(|w| matches!(w, Watched::Set(_, set) if !lock(set).watch_list().is_empty()));
    let accel: SmallVec<[(usize, c_int, Arc<Conn>); 8]> = fds
        .iter()
        .enumerate()
        .filter(|(_, p)| p.events & libc::POLLIN != 0)
        .filter_map(|(i, p)| crate::conn::lookup_live_shared(p.fd).filter(|c| ring_capable(c)).map(|c| (i, p.fd, c)))
        .collect();
    let datagrams: SmallVec<[(usize, Arc<UdpSock>); 4]> = fds
        .iter()
        .enumerate()
        .filter(|(_, p)| p.events & libc::POLLIN != 0)
        .filter_map(|(i, p)| crate::udp::waitable(p.fd).map(|u| (i, u)))
        .collect();
    let streams: SmallVec<[(usize, Arc<FabricStream>); 4]> = if crate::remote::any() {
        fds.iter()
            .enumerate()
            .filter(|(_, p)| p.events & libc::POLLIN != 0)
            .filter_map(|(i, p)| crate::remote::live_stream(p.fd).filter(|s| !s.kernel_only()).map(|s| (i, s)))
            .collect()
    } else {
        SmallVec::new()
    };
    let asleep_in_sets = || KernelSleep::begin(sets.iter().map(|(_, set)| &**set));
    if accel.is_empty() && datagrams.is_empty() && streams.is_empty() && !set_rings {
        let _asleep = asleep_in_sets();
        if timeout != Some(Duration::ZERO) && since.interrupted() {
            return interrupted();
        }
        return sleep(fds, timeout);
    }
    // revents are the call's output: what the program left there from an earlier call
    // must not count (the kernel, when asked, overwrites them; the ring check only adds).
    for p in fds.iter_mut() {
        p.revents = 0;
    }
    let deadline = timeout.map(|t| Instant::now() + t);
    // Refused when a CPU is not free for it (see `spin`); without a spin, the sleeping call
    // is the only one that asks the kernel, as the program's own call would be.
    // Nothing to spin for if every ring is parked (empty, and kept so).
    let rings =
        accel.iter().any(|(_, _, c)| !park::is_parked(c)) || !datagrams.is_empty() || !streams.is_empty() || set_rings;
    let mut spin: Option<spin::Spin> =
        if timeout == Some(Duration::ZERO) || !rings { None } else { spin::Spin::begin(timeout) };
    let spinning = spin.is_some();
    let mut ask_now = timeout == Some(Duration::ZERO);
    let mut last_kernel_check: Option<Instant> = None;
    loop {
        let now = Instant::now();
        // A socket whose peer sent urgent data and whose ring still holds bytes from before
        // the mark: the kernel's POLLPRI (and anything else it has) goes with the ring's
        // POLLIN, as one kernel poll would report them together.
        let ask_kernel = std::mem::take(&mut ask_now)
            || spinning && last_kernel_check.is_none_or(|t| now - t >= KERNEL_CHECK_EVERY)
            || accel.iter().any(|(_, _, c)| urgent_behind_ring(c));
        let mut ready = 0;
        if ask_kernel {
            last_kernel_check = Some(now);
            // The program's own call (poll, ppoll with its signal mask) with no wait: a
            // sandbox that allows one of them need not allow the other.
            let r = sleep(fds, Some(Duration::ZERO));
            if r < 0 {
                return r;
            }
            ready = r;
        }
        for (i, _, c) in &accel {
            if !park::is_parked(c) && c.ring_input_ready() {
                if fds[*i].revents == 0 {
                    ready += 1;
                }
                fds[*i].revents |= libc::POLLIN;
            }
        }
        for (i, u) in &datagrams {
            if u.ring_ready() {
                if fds[*i].revents == 0 {
                    ready += 1;
                }
                fds[*i].revents |= libc::POLLIN;
            }
        }
        for (i, st) in &streams {
            if st.readable_without_kernel() {
                if fds[*i].revents == 0 {
                    ready += 1;
                }
                fds[*i].revents |= libc::POLLIN;
            }
        }
        for (i, set) in &sets {
            if fds[*i].events & libc::POLLIN != 0 && shadow_ring_ready(set) {
                if fds[*i].revents == 0 {
                    ready += 1;
                }
                fds[*i].revents |= libc::POLLIN;
            }
        }
        if ready > 0 {
            if let Some(s) = spin.take() {
                s.hit();
            }
            return ready;
        }
        if timeout == Some(Duration::ZERO) {
            return 0;
        }
        if spin.as_mut().is_some_and(|s| s.go_on()) {
            std::hint::spin_loop();
            continue;
        }
        // The sets' sockets sleep with the call's own, as in a wait on a set holding those sets.
        let (set_conns, set_datagrams, set_streams) = sleep_set(&set_watch);
        let Some(_sleepers) = Sleepers::prepare(
            accel.iter().map(|(_, _, c)| c).chain(&set_conns),
            datagrams.iter().map(|(_, u)| u).chain(&set_datagrams),
            streams.iter().map(|(_, st)| st).chain(&set_streams),
        ) else {
            ask_now = true; // ring bytes arrived: report the kernel's ready fds with them
            continue;
        };
        if let Some(s) = spin.take() {
            s.miss();
        }
        let _asleep = asleep_in_sets();
        if since.interrupted() {
            return interrupted();
        }
        let slept = Instant::now();
        let r = sleep(fds, remaining(deadline));
        if r > 0 {
            spin::woke_after(slept.elapsed());
        }
        return r;
    }
}

/// A wait's answer when a signal handler ran on its thread before its kernel sleep (see
/// [`crate::signals`]): EINTR, as the kernel's wait, which it would have interrupted, gives.
fn interrupted() -> c_int {
    set_errno(libc::EINTR);
    -1
}

/// Whether the peer sent urgent data (the mark and the byte are in the kernel) while ring
/// bytes from before it are still unread: readiness must then ask the kernel too.
fn urgent_behind_ring(c: &Conn) -> bool {
    c.peer().is_some_and(|p| p.has_flag(FLAG_TX_URGENT)) && c.ring_readable()
}

/// select in terms of poll_core, when accelerated sockets are involved.
pub fn select_core(
    nfds: c_int,
    readfds: *mut libc::fd_set,
    writefds: *mut libc::fd_set,
    exceptfds: *mut libc::fd_set,
    timeout: Option<Duration>,
    sigmask: Option<*const libc::sigset_t>,
) -> c_int {
    // SAFETY (whole function): the fd_set pointers are the caller's, null or valid for nfds bits.
    let isset = |set: *mut libc::fd_set, fd: c_int| {
        // SAFETY: the caller's set, non-null, valid for nfds bits.
        !set.is_null() && unsafe { libc::FD_ISSET(fd, set) }
    };
    let mut fds: Vec<pollfd> = Vec::new();
    for fd in 0..nfds.clamp(0, libc::FD_SETSIZE as c_int) {
        let mut events = 0;
        if isset(readfds, fd) {
            events |= libc::POLLIN;
        }
        if isset(writefds, fd) {
            events |= libc::POLLOUT;
        }
        if isset(exceptfds, fd) {
            events |= libc::POLLPRI;
        }
        if events != 0 {
            fds.push(pollfd { fd, events, revents: 0 });
        }
    }
    let mut sleep = |f: &mut [pollfd], t: Option<Duration>| -> c_int {
        let ts = timespec_of(t);
        let tsp = ts.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: f is our array; tsp null or valid; the sigmask is the caller's.
        unsafe { (real().ppoll)(f.as_mut_ptr(), f.len() as libc::nfds_t, tsp, sigmask.unwrap_or(std::ptr::null())) }
    };
    let r = poll_core(&mut fds, timeout, &mut sleep);
    if r < 0 {
        return r;
    }
    if fds.iter().any(|p| p.revents & libc::POLLNVAL != 0) {
        set_errno(libc::EBADF);
        return -1;
    }
    for set in [readfds, writefds, exceptfds] {
        if !set.is_null() {
            // SAFETY: the caller's set.
            unsafe { libc::FD_ZERO(set) };
        }
    }
    let mut count = 0;
    for p in &fds {
        let mut mark = |set: *mut libc::fd_set, on: bool| {
            if on && !set.is_null() {
                // SAFETY: fd < nfds <= FD_SETSIZE, the caller's set.
                unsafe { libc::FD_SET(p.fd, set) };
                count += 1;
            }
        };
        let rd = p.events & libc::POLLIN != 0 && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0;
        let wr = p.events & libc::POLLOUT != 0 && p.revents & (libc::POLLOUT | libc::POLLERR) != 0;
        let ex = p.events & libc::POLLPRI != 0 && p.revents & libc::POLLPRI != 0;
        mark(readfds, rd);
        mark(writefds, wr);
        mark(exceptfds, ex);
    }
    count
}

/// Whether any of these fds is accelerated (so the wait must be ours).
pub fn any_accelerated_in_sets(nfds: c_int, sets: [*mut libc::fd_set; 2]) -> bool {
    (0..nfds.clamp(0, libc::FD_SETSIZE as c_int)).any(|fd| {
        // SAFETY: the caller's sets, null or valid for nfds bits.
        sets.iter().any(|s| !s.is_null() && unsafe { libc::FD_ISSET(fd, *s) }) && readiness_is_ours(fd)
    })
}

/// Whether waiting for `fd` must be ours, not only the kernel's: its bytes may be in a ring
/// the kernel cannot see (a local connection's, a datagram socket's, a live stream's to
/// another host), or it is one of our epoll sets.
pub fn readiness_is_ours(fd: c_int) -> bool {
    crate::conn::lookup_live(fd).is_some_and(|c| ring_capable(&c))
        || crate::udp::waitable(fd).is_some()
        || is_set(fd)
        || crate::remote::live_stream(fd).is_some_and(|s| !s.kernel_only())
}

/// An accelerated socket whose ring may hold bytes to read: it has a peer, and its
/// receiving direction is not retired (see `park`).
#[inline]
fn ring_capable(c: &Conn) -> bool {
    c.peer().is_some() && !c.rx_retired()
}

// ---- epoll -------------------------------------------------------------------------------

/// What the application registered for one fd in one epoll set.
#[derive(Clone)]
struct Item {
    events: u32,
    data: u64,
    /// EPOLLONESHOT fired: silent until EPOLL_CTL_MOD.
    disarmed: bool,
    /// Ring position last reported (edge-triggered; for a nested set, its signature).
    last_published: u64,
    /// The accelerated socket registered (kept: the kernel keeps the item while any
    /// duplicate of the description is open, even after this fd number is closed).
    conn: Option<Arc<Conn>>,
    /// The registered fd is itself an epoll set of ours (nesting).
    nested: Option<Arc<ShadowLock>>,
    /// The registered fd is a UDP socket with a ring (`crate::udp`).
    udp: Option<Arc<UdpSock>>,
    /// The registered fd is a connection to another host with a live stream.
    stream: Option<Arc<FabricStream>>,
    /// How often the fd number had been closed when this was registered ([`closes_of`]):
    /// after another close the kernel may have dropped the registration (it does when no
    /// duplicate is left), and only the kernel can answer for it.
    closes: Option<u32>,
}

impl Item {
    fn wants_input(&self) -> bool {
        self.events & libc::EPOLLIN as u32 != 0
    }
    fn edge_triggered(&self) -> bool {
        self.events & libc::EPOLLET as u32 != 0
    }
}

/// Something a wait watches besides the kernel: a socket's ring or a nested set's rings.
#[derive(Clone)]
enum Watched {
    Ring(c_int, Arc<Conn>),
    Set(c_int, Arc<ShadowLock>),
    Datagrams(c_int, Arc<UdpSock>),
    Stream(c_int, Arc<FabricStream>),
}

impl Watched {
    /// Whether this socket's readiness became the kernel's alone, for good, since it was
    /// put on the watch list: its receiving direction retired from the ring, or its stream
    /// to another host left to the kernel.
    fn left_to_kernel(&self) -> bool {
        match self {
            Watched::Ring(_, c) => c.rx_retired(),
            Watched::Stream(_, st) => st.kernel_only(),
            Watched::Set(..) | Watched::Datagrams(..) => false,
        }
    }
}

/// The application's view of one epoll set: the kernel set holds every fd with a token
/// instead of the application's data, so events can be told apart by fd and merged with
/// the rings' readiness.
#[derive(Default)]
struct Shadow {
    items: FdMap<Item>,
    /// The rings and nested sets a wait watches, rebuilt only when `stale`: a wait must not
    /// scan every item (servers register thousands).
    watched: Arc<[Watched]>,
    /// Items waiting for input that are not (yet) accelerated sockets: checked at each
    /// wait, since a connection may complete, or find its peer, after it was added.
    unresolved: Vec<c_int>,
    stale: bool,
    /// Its epoll fd was closed: as a nested set it reports nothing more.
    closed: bool,
    /// The set's epoll fd.
    epfd: c_int,
    /// Fds this library has registered in the kernel set.
    in_kernel: rustc_hash::FxHashSet<c_int>,
    /// Accelerated sockets whose kernel registration lags the application's (see
    /// [`ctl`]): made good before anything asks the kernel about the set.
    dirty: Vec<c_int>,
    /// Threads of this process asleep in the kernel on this set (an epoll wait, or poll or
    /// select on its fd): while any is, registrations are made at once, since a sleeper
    /// must be woken by what another thread adds meanwhile.
    kernel_sleepers: usize,
    /// The set was registered in another set of ours: a sleeper on that one depends on
    /// this set's kernel registrations too, so they are never deferred.
    nested_in: bool,
    /// An eventfd in the kernel set (edge-triggered, with [`wake_token`]), made the
    /// first time a registration has to wake this set's sleepers ([`wake_sleepers`]).
    wake: Option<lanes::platform::files::Held<std::os::fd::OwnedFd>>,
}

/// Tables by fd number: fds are small and dense, and SipHash was a visible share of a busy
/// program's epoll calls.
type FdMap<V> = rustc_hash::FxHashMap<c_int, V>;

impl Shadow {
    /// Makes the kernel registration of `fd` if one is owed.
    fn settle(&mut self, fd: c_int) {
        if self.dirty.contains(&fd) {
            self.dirty.retain(|d| *d != fd);
            owed_done(fd);
            sync_kernel(self, fd);
        }
    }

    /// Makes every kernel registration of this set that is owed.
    fn flush(&mut self) {
        for fd in std::mem::take(&mut self.dirty) {
            owed_done(fd);
            sync_kernel(self, fd);
        }
    }

    /// Whether a registration in this set may wait until the set is next asked about.
    fn may_defer(&self) -> bool {
        self.kernel_sleepers == 0 && !self.nested_in && !self.closed
    }

    /// The current watch list, rebuilt if items changed or one became accelerated.
    fn watch_list(&mut self) -> Arc<[Watched]> {
        // Without it the set would be waited on the long way for good, once watched: a
        // pre-fork server's backend waits on one connection, retired in its first second.
        if !self.stale && self.watched.iter().any(Watched::left_to_kernel) {
            self.stale = true;
        }
        if !self.stale {
            let accelerated = |c: &Conn| c.peer().is_some();
            self.stale = self.unresolved.iter().any(|fd| match self.items.get(fd) {
                Some(Item { conn: Some(c), .. }) => accelerated(c),
                // A file, a pipe, a socket left to the kernel: two flag loads say so.
                Some(_) if crate::kernels_alone(*fd) => false,
                Some(_) => {
                    lookup(*fd).is_some_and(|c| accelerated(&c))
                        || crate::udp::waitable(*fd).is_some()
                        || crate::remote::live_stream(*fd).is_some()
                }
                None => false,
            });
        }
        if self.stale {
            self.stale = false;
            self.unresolved.clear();
            let mut watched = Vec::new();
            for (fd, it) in self.items.iter_mut() {
                if !it.wants_input() {
                    continue;
                }
                if let Some(inner) = &it.nested {
                    watched.push(Watched::Set(*fd, inner.clone()));
                    continue;
                }
                if it.udp.is_none() {
                    it.udp = crate::udp::waitable(*fd); // bound after it was added
                }
                if let Some(u) = &it.udp {
                    watched.push(Watched::Datagrams(*fd, u.clone()));
                    continue;
                }
                if it.stream.is_none() {
                    it.stream = crate::remote::live_stream(*fd); // set up after it was added
                }
                if let Some(st) = &it.stream {
                    if !st.kernel_only() {
                        watched.push(Watched::Stream(*fd, st.clone()));
                    }
                    continue;
                }
                if it.conn.is_none() {
                    it.conn = lookup(*fd); // connected after it was added
                }
                match &it.conn {
                    Some(c) if c.rx_retired() => {} // the kernel's alone, for good
                    Some(c) if c.peer().is_some() => watched.push(Watched::Ring(*fd, c.clone())),
                    _ => self.unresolved.push(*fd),
                }
            }
            self.watched = watched.into();
        }
        self.watched.clone()
    }
}

/// A set's shadow behind its lock.
type ShadowLock = Mutex<Shadow>;
type ShadowGuard<'a> = std::sync::MutexGuard<'a, Shadow>;

self_cell::self_cell!(
    /// A set's lock held across a fork, kept with the set's `Arc` ([`hold_for_fork`]).
    struct HeldSet {
        owner: Arc<ShadowLock>,
        #[covariant]
        dependent: ShadowGuard,
    }
);

fn shadows() -> &'static Mutex<FdMap<Arc<ShadowLock>>> {
    static S: OnceLock<Mutex<FdMap<Arc<ShadowLock>>>> = OnceLock::new();
    S.get_or_init(|| Mutex::new(FdMap::default()))
}

fn salt() -> u64 {
    static SALT: OnceLock<u64> = OnceLock::new();
    *SALT.get_or_init(|| {
        let mut b = [0u8; 8];
        // SAFETY: getrandom writes at most 8 bytes into b.
        unsafe { libc::getrandom(b.as_mut_ptr().cast(), 8, 0) };
        u64::from_ne_bytes(b) & !0xffff_ffff
    })
}

fn token(fd: c_int) -> u64 {
    salt() | fd as u32 as u64
}

/// The token of a set's wake-up eventfd: fd -1's, which no item has (`merge` drops it).
fn wake_token() -> u64 {
    token(-1)
}

/// Wakes the threads asleep in the kernel on this set, so that they look at its rings
/// again (an eventfd of the set's, made and registered the first time).
fn wake_sleepers(sh: &mut Shadow) {
    use std::os::fd::{AsRawFd, FromRawFd};
    if sh.wake.is_none() {
        let made = lanes::platform::files::Held::make(|| {
            // SAFETY: eventfd has no memory-safety preconditions.
            let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: a new descriptor nobody else owns.
            Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
        });
        let Ok(held) = made else { return };
        let mut ev = epoll_event { events: (libc::EPOLLIN | libc::EPOLLET) as u32, u64: wake_token() };
        // SAFETY: our own event structure, our own descriptors.
        if unsafe { (real().epoll_ctl)(sh.epfd, libc::EPOLL_CTL_ADD, held.as_raw_fd(), &mut ev) } != 0 {
            return;
        }
        sh.wake = Some(held);
    }
    if let Some(w) = &sh.wake {
        let one = 1u64;
        // SAFETY: writes 8 bytes from a local to our eventfd.
        unsafe { libc::write(w.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }
}

/// A socket registered for input while a thread sleeps in the kernel on the set: that
/// sleeper prepared only the sockets it knew, so this one's bytes could stay in its ring
/// unseen until the wait timed out (Apache's event MPM hands idle keep-alive connections
/// to a listener thread asleep in epoll_wait: requests stalled for its 5 s timeout). The
/// socket's peer sends through the kernel from now on (which wakes the sleeper), and bytes
/// already in its ring wake the sleeper at once.
fn registered_during_sleep(
    sh: &mut Shadow,
    conn: Option<&Arc<Conn>>,
    udp: Option<&Arc<UdpSock>>,
    stream: Option<&Arc<FabricStream>>,
) {
    let mut ready = false;
    if let Some(c) = conn {
        if let Some(p) = c.peer() {
            p.tx_word().to_kernel_mode();
            ready |= c.ring_readable();
        }
    }
    if let Some(u) = udp {
        if let Some(rec) = u.record() {
            // As a kernel send would: the receiver takes the ring back once it caught up.
            if rec.begin_kernel_send() {
                rec.end_kernel_send();
            }
            ready |= rec.ring_readable();
        }
    }
    if let Some(st) = stream {
        ready |= st.prepare_to_wait();
    }
    if ready {
        wake_sleepers(sh);
    }
}

fn fd_of_token(t: u64) -> Option<c_int> {
    (t & !0xffff_ffff == salt()).then_some((t & 0xffff_ffff) as u32 as c_int)
}

/// A new epoll instance.
pub fn created(epfd: c_int) {
    // With acceleration off (`LANES_SOCKETS=0`, `lanes run --no-accel`) no socket ever has
    // a ring to watch: the set stays the kernel's alone, its calls the program's own.
    if epfd >= 0 && crate::config::config().enabled {
        if let Ok(mut s) = shadows().lock() {
            s.insert(epfd, Arc::new(ShadowLock::new(Shadow { epfd, ..Shadow::default() })));
            mark_set(epfd, true);
            SHADOWS_GENERATION.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// Closes of each fd number below this are counted ([`closes_of`]).
const COUNTED_FDS: usize = 1 << 16;
static CLOSES: [AtomicU32; COUNTED_FDS] = [const { AtomicU32::new(0) }; COUNTED_FDS];

/// How often `fd` was closed so far; None for numbers too high to count (the shadow never
/// answers for those).
fn closes_of(fd: c_int) -> Option<u32> {
    usize::try_from(fd).ok().filter(|&i| i < COUNTED_FDS).map(|i| CLOSES[i].load(Ordering::Acquire))
}

/// An fd closed: if it was an epoll instance, its shadow goes. Items of closed fds stay:
/// the kernel keeps reporting them while a duplicate of the description is open (with the
/// old registration's data, which the shadow still has), and reports nothing otherwise.
pub fn closed(fd: c_int) {
    if let Some(count) = usize::try_from(fd).ok().and_then(|i| CLOSES.get(i)) {
        count.fetch_add(1, Ordering::AcqRel);
    }
    // A registration still owed to the kernel is made before the fd goes (the kernel keeps
    // it while a duplicate is open), so it can never land on a reused number.
    if owed_anywhere(fd) {
        let sets: Vec<Arc<ShadowLock>> = match shadows().lock() {
            Ok(s) => s.values().cloned().collect(),
            Err(_) => Vec::new(),
        };
        for set in sets {
            lock(&set).settle(fd);
        }
    }
    if !is_set(fd) {
        return;
    }
    let gone = shadows().lock().ok().and_then(|mut s| {
        let gone = s.remove(&fd);
        if gone.is_some() {
            mark_set(fd, false);
            SHADOWS_GENERATION.fetch_add(1, Ordering::AcqRel);
        }
        gone
    });
    if let Some(shadow) = gone {
        let mut sh = lock(&shadow);
        sh.closed = true;
        for owed in std::mem::take(&mut sh.dirty) {
            owed_done(owed);
        }
    }
}

/// Kernel registrations owed, in all sets (a hint: skips the search when zero).
static PENDING: AtomicUsize = AtomicUsize::new(0);
/// For each fd number below [`COUNTED_FDS`], in how many sets its registration is owed:
/// a close looks through the sets only for such an fd.
static OWED: [AtomicU16; COUNTED_FDS] = [const { AtomicU16::new(0) }; COUNTED_FDS];
/// Which fd numbers below [`COUNTED_FDS`] are epoll sets of ours, a bit each: poll and
/// select find a set among their fds without the table's lock.
static SET_FDS: [AtomicU64; COUNTED_FDS / 64] = [const { AtomicU64::new(0) }; COUNTED_FDS / 64];

fn owed_added(fd: c_int) {
    PENDING.fetch_add(1, Ordering::Release);
    if let Some(c) = usize::try_from(fd).ok().and_then(|i| OWED.get(i)) {
        c.fetch_add(1, Ordering::Release);
    }
}

fn owed_done(fd: c_int) {
    PENDING.fetch_sub(1, Ordering::Release);
    if let Some(c) = usize::try_from(fd).ok().and_then(|i| OWED.get(i)) {
        c.fetch_sub(1, Ordering::Release);
    }
}

fn owed_anywhere(fd: c_int) -> bool {
    match usize::try_from(fd).ok().and_then(|i| OWED.get(i)) {
        Some(c) => c.load(Ordering::Acquire) > 0,
        None => PENDING.load(Ordering::Acquire) > 0,
    }
}

fn mark_set(fd: c_int, set: bool) {
    if let Some(word) = usize::try_from(fd).ok().and_then(|i| SET_FDS.get(i / 64)) {
        let bit = 1u64 << (fd as usize % 64);
        if set {
            word.fetch_or(bit, Ordering::Release);
        } else {
            word.fetch_and(!bit, Ordering::Release);
        }
    }
}

/// Whether `fd` is an epoll set of ours (for numbers past the bitmap, the table answers).
pub fn is_set(fd: c_int) -> bool {
    match usize::try_from(fd).ok().and_then(|i| SET_FDS.get(i / 64)) {
        Some(word) => word.load(Ordering::Acquire) & (1u64 << (fd as usize % 64)) != 0,
        None => fd >= 0 && shadows().lock().is_ok_and(|s| s.contains_key(&fd)),
    }
}

/// The set of an fd that [`is_set`].
fn set_of(fd: c_int) -> Option<Arc<ShadowLock>> {
    if is_set(fd) {
        shadow_of(fd)
    } else {
        None
    }
}

/// Every set's lock and the table of sets, held across a fork ([`crate::fork_locks`]).
pub fn hold_for_fork(by: Option<Instant>) -> Vec<crate::fork_locks::Held> {
    let mut held: Vec<crate::fork_locks::Held> = Vec::new();
    let sets: Vec<Arc<ShadowLock>> = match shadows().lock() {
        Ok(s) => s.values().cloned().collect(),
        Err(_) => Vec::new(),
    };
    // Sets' locks first: a set's watch list looks in the socket tables under its lock.
    for set in sets {
        if let Ok(g) = HeldSet::try_new(set, |s| crate::fork_locks::lock_by(s, by).ok_or(())) {
            held.push(Box::new(g));
        }
    }
    held.extend(crate::fork_locks::lock_by(shadows(), by).map(|g| Box::new(g) as crate::fork_locks::Held));
    held
}

/// Makes the kernel registrations owed in every set: before fork, so the child shares
/// complete kernel sets.
pub fn flush_all() {
    if PENDING.load(Ordering::Acquire) == 0 {
        return;
    }
    let sets: Vec<Arc<ShadowLock>> = match shadows().lock() {
        Ok(s) => s.values().cloned().collect(),
        Err(_) => return,
    };
    for set in sets {
        lock(&set).flush();
    }
}

/// Makes the registrations owed in `set` before the kernel is asked about it.
fn flush_set(set: &ShadowLock) {
    if PENDING.load(Ordering::Acquire) > 0 {
        lock(set).flush();
    }
}

/// A thread about to sleep in the kernel on some of our sets: their owed registrations are
/// made, and further ones made at once, until it is dropped.
struct KernelSleep<'a> {
    sets: SmallVec<[&'a ShadowLock; 2]>,
}

impl<'a> KernelSleep<'a> {
    fn begin(sets: impl IntoIterator<Item = &'a ShadowLock>) -> KernelSleep<'a> {
        let sets: SmallVec<[&'a ShadowLock; 2]> = sets.into_iter().collect();
        for set in &sets {
            let mut sh = lock(set);
            sh.kernel_sleepers += 1;
            sh.flush();
        }
        KernelSleep { sets }
    }
}

impl Drop for KernelSleep<'_> {
    fn drop(&mut self) {
        for set in &self.sets {
            let mut sh = lock(set);
            sh.kernel_sleepers = sh.kernel_sleepers.saturating_sub(1);
        }
    }
}

/// Brings the kernel's registration of `fd` in line with the application's (one system
/// call: a DEL and an ADD in between become one MOD). The kernel drops a registration by
/// itself when the last duplicate of an fd closes, so a MOD or DEL it does not know falls
/// back to ADD or to nothing.
fn sync_kernel(sh: &mut Shadow, fd: c_int) {
    let epfd = sh.epfd;
    let ctl = |op: c_int, events: u32| {
        let mut ev = epoll_event { events, u64: token(fd) };
        // SAFETY: our own event structure.
        unsafe { (real().epoll_ctl)(epfd, op, fd, &mut ev) }
    };
    match sh.items.get(&fd).map(|it| it.events) {
        Some(events) => {
            let first = if sh.in_kernel.contains(&fd) { libc::EPOLL_CTL_MOD } else { libc::EPOLL_CTL_ADD };
            if ctl(first, events) != 0 {
                let retry = if first == libc::EPOLL_CTL_MOD { libc::EPOLL_CTL_ADD } else { libc::EPOLL_CTL_MOD };
                if ctl(retry, events) != 0 {
                    sh.in_kernel.remove(&fd);
                    return;
                }
            }
            sh.in_kernel.insert(fd);
        }
        None => {
            if sh.in_kernel.remove(&fd) {
                ctl(libc::EPOLL_CTL_DEL, 0);
            }
        }
    }
}

/// Bumped whenever a set is added to or removed from [`shadows`]: a thread's cached
/// [`shadow_of`] answer is good while it stays.
static SHADOWS_GENERATION: AtomicU64 = AtomicU64::new(0);

/// A cached [`shadow_of`] answer: the epfd, the generation then, and the set.
type CachedSet = Option<(c_int, u64, Arc<ShadowLock>)>;

thread_local! {
    /// This thread's last [`shadow_of`] answer (epfd, generation, set): a program waiting
    /// on one set finds it without the table's lock.
    static LAST_SET: RefCell<CachedSet> = const { RefCell::new(None) };
}

fn shadow_of(epfd: c_int) -> Option<Arc<ShadowLock>> {
    let generation = SHADOWS_GENERATION.load(Ordering::Acquire);
    // `try_with`: the cache is gone once this thread's thread-local storage is destroyed
    // (exit() does so before the program's atexit handlers); the table answers then.
    let cached = LAST_SET
        .try_with(|l| match &*l.try_borrow().ok()? {
            Some((fd, g, set)) if *fd == epfd && *g == generation => Some(set.clone()),
            _ => None,
        })
        .ok()
        .flatten();
    if cached.is_some() {
        return cached;
    }
    let found = shadows().lock().ok()?.get(&epfd).cloned();
    if let Some(set) = &found {
        let _ = LAST_SET.try_with(|l| {
            if let Ok(mut last) = l.try_borrow_mut() {
                *last = Some((epfd, generation, set.clone()));
            }
        });
    }
    found
}

fn lock(shadow: &ShadowLock) -> ShadowGuard<'_> {
    shadow.lock().unwrap_or_else(|e| e.into_inner())
}

/// epoll_ctl: the kernel gets a token for the data; the shadow keeps the application's.
///
/// # Safety
/// `event` null or valid, as for epoll_ctl.
pub unsafe fn ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut epoll_event) -> c_int {
    if op == libc::EPOLL_CTL_ADD && crate::remote::any() {
        crate::remote::added_to_a_set(fd);
    }
    let Some(shadow) = shadow_of(epfd) else {
        // SAFETY: the caller's arguments.
        return unsafe { (real().epoll_ctl)(epfd, op, fd, event) };
    };
    let mut ev = if event.is_null() {
        epoll_event { events: 0, u64: 0 }
    } else {
        // SAFETY: non-null event is valid for reads.
        unsafe { std::ptr::read_unaligned(event) }
    };
    let app_data = ev.u64;
    if op != libc::EPOLL_CTL_DEL {
        ev.u64 = token(fd);
    }
    // An accelerated socket's registration may wait until the set is next asked about:
    // programs such as redis-benchmark switch between EPOLLIN and EPOLLOUT with a DEL and an
    // ADD per request, and the kernel's ADD and DEL (allocating and freeing its item) were
    // most of such a client's time. The result is what the kernel would answer for a socket.
    let deferrable = fd != epfd
        && ev.events & (libc::EPOLLEXCLUSIVE | libc::EPOLLWAKEUP) as u32 == 0
        && (op == libc::EPOLL_CTL_DEL || !event.is_null())
        && matches!(op, libc::EPOLL_CTL_ADD | libc::EPOLL_CTL_MOD | libc::EPOLL_CTL_DEL)
        && lookup(fd).is_some();
    let mut sh = lock(&shadow);
    // The shadow answers as the kernel would only while it knows the fd's registration:
    // an ADD of an fd it has no item for, a MOD or DEL of one whose fd was not closed since.
    let known = sh.items.get(&fd).map(|it| it.closes.is_some() && it.closes == closes_of(fd));
    let deferrable = deferrable
        && sh.may_defer()
        && match op {
            libc::EPOLL_CTL_ADD => known.is_none(),
            _ => known == Some(true),
        };
    let r = if deferrable {
        if !sh.dirty.contains(&fd) {
            sh.dirty.push(fd);
            owed_added(fd);
        }
        0
    } else {
        sh.settle(fd);
        let arg = if event.is_null() { std::ptr::null_mut() } else { &mut ev as *mut epoll_event };
        // SAFETY: arg is null or our copy.
        let r = unsafe { (real().epoll_ctl)(epfd, op, fd, arg) };
        if r == 0 {
            if op == libc::EPOLL_CTL_DEL {
                sh.in_kernel.remove(&fd);
            } else {
                sh.in_kernel.insert(fd);
            }
        }
        r
    };
    if r == 0 {
        if op == libc::EPOLL_CTL_DEL {
            sh.items.remove(&fd);
            sh.stale = true;
            return r;
        }
        // Programs flip EPOLLOUT on and off per request with MOD (redis does): keep what
        // is known about the fd, and the watch list, unless its input interest changed.
        let (conn, nested, udp, stream, keeps_watch) = match sh.items.get(&fd) {
            Some(prev) if op == libc::EPOLL_CTL_MOD => (
                prev.conn.clone(),
                prev.nested.clone(),
                prev.udp.clone(),
                prev.stream.clone(),
                prev.wants_input() == (ev.events & libc::EPOLLIN as u32 != 0),
            ),
            _ => (lookup(fd), set_of(fd), crate::udp::waitable(fd), crate::remote::live_stream(fd), false),
        };
        let last = conn.as_ref().and_then(|c| c.peer().map(|p| p.tx_word().load().published())).unwrap_or(0)
            + udp.as_ref().map_or(0, |u| u.signature())
            + stream.as_ref().map_or(0, |s| s.arrivals());
        let inner = nested.clone();
        sh.items.insert(
            fd,
            Item {
                events: ev.events,
                data: app_data,
                disarmed: false,
                last_published: last,
                conn,
                nested,
                udp,
                stream,
                closes: closes_of(fd),
            },
        );
        sh.stale |= !keeps_watch;
        if sh.kernel_sleepers > 0 && ev.events & libc::EPOLLIN as u32 != 0 {
            let it = sh.items.get(&fd).map(|it| (it.conn.clone(), it.udp.clone(), it.stream.clone()));
            if let Some((conn, udp, stream)) = it {
                registered_during_sleep(&mut sh, conn.as_ref(), udp.as_ref(), stream.as_ref());
            }
        }
        drop(sh);
        // A sleeper on this set now depends on the inner set's kernel registrations: they
        // are all made, and never deferred again (outer before inner, as waits lock them).
        if let Some(inner) = inner {
            let mut i = lock(&inner);
            i.nested_in = true;
            i.flush();
        }
    }
    r
}

/// The program's own kernel wait (epoll_wait, epoll_pwait or epoll_pwait2 with its signal
/// mask) on the set, into a buffer of so many events, with a timeout (None: none).
pub type KernelWait<'a> = dyn Fn(*mut epoll_event, c_int, Option<Duration>) -> c_int + 'a;

/// epoll_wait, epoll_pwait and epoll_pwait2: `kernel` is the program's own call.
///
/// # Safety
/// `events` valid for `maxevents` entries, as for epoll_wait.
pub unsafe fn wait(
    epfd: c_int,
    events: *mut epoll_event,
    maxevents: c_int,
    timeout: Option<Duration>,
    kernel: &KernelWait<'_>,
) -> c_int {
    let since = crate::signals::Since::now();
    let Some(shadow) = shadow_of(epfd) else { return kernel(events, maxevents, timeout) };
    if maxevents <= 0 || events.is_null() {
        return kernel(events, maxevents, timeout);
    }
    let max = maxevents as usize;
    // SAFETY: events valid for max entries, as the caller guarantees.
    let timeout = match unsafe { kernel_only_wait(events, max, timeout, &shadow, kernel, since) } {
        KernelOnly::Done(r) => return r,
        KernelOnly::Watches => timeout,
        KernelOnly::NothingToReport(Some(Duration::ZERO)) => return 0,
        KernelOnly::NothingToReport(left) => left,
    };
    // The kernel's events land in a per-thread buffer (programs pass maxevents in the
    // thousands; allocating that per call would cost more than the wait).
    thread_local! {
        static BUF: std::cell::RefCell<Vec<epoll_event>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    // Once this thread's thread-local storage is destroyed (atexit handlers), a buffer of
    // the call's own.
    let mut buf = BUF
        .try_with(|b| b.try_borrow_mut().map(|mut b| std::mem::take(&mut *b)).unwrap_or_default())
        .unwrap_or_default();
    if buf.len() < max {
        buf.resize(max, epoll_event { events: 0, u64: 0 });
    }
    let result = wait_loop(epfd, events, max, timeout, &shadow, &mut buf, kernel, since);
    let _ = BUF.try_with(|b| {
        if let Ok(mut b) = b.try_borrow_mut() {
            *b = buf;
        }
    });
    result
}

/// What [`kernel_only_wait`] did.
enum KernelOnly {
    /// The wait's answer (events, 0 at the timeout, or -1 with errno).
    Done(c_int),
    /// The set watches rings: nothing was done.
    Watches,
    /// The kernel reported only events the program must not see (the set's wake-up, a
    /// disarmed one-shot item): the wait goes on for what is left of its timeout.
    NothingToReport(Option<Duration>),
}

/// A wait on a set with no ring to watch (no accelerated socket among its items, or only
/// ones whose receiving direction is retired, as a pre-fork server's backends have): the
/// program's own kernel wait, straight into its buffer, with the kernel's tokens turned
/// back into the program's data under one lock. What [`wait_loop`] does for such a set, in
/// two lock acquisitions instead of six (the server of a request/response workload waits
/// once per request).
///
/// # Safety
/// `events` valid for `max` entries.
unsafe fn kernel_only_wait(
    events: *mut epoll_event,
    max: usize,
    timeout: Option<Duration>,
    shadow: &ShadowLock,
    kernel: &KernelWait<'_>,
    since: crate::signals::Since,
) -> KernelOnly {
    {
        let mut sh = lock(shadow);
        // Parked rings too go the long way: their parking is held while the wait sleeps.
        if !sh.watch_list().is_empty() {
            return KernelOnly::Watches;
        }
        // As `KernelSleep`: registrations made meanwhile go to the kernel at once.
        sh.kernel_sleepers += 1;
        sh.flush();
    }
    if timeout != Some(Duration::ZERO) && since.interrupted() {
        let mut sh = lock(shadow);
        sh.kernel_sleepers = sh.kernel_sleepers.saturating_sub(1);
        return KernelOnly::Done(interrupted());
    }
    // Only for a finite wait, and only read if every event it gets has to be dropped.
    let started = timeout.filter(|t| !t.is_zero()).map(|_| Instant::now());
    let r = kernel(events, max as c_int, timeout);
    let e = errno();
    let mut sh = lock(shadow);
    sh.kernel_sleepers = sh.kernel_sleepers.saturating_sub(1);
    if r <= 0 {
        drop(sh);
        set_errno(e);
        return KernelOnly::Done(r);
    }
    let mut n = 0;
    for i in 0..r as usize {
        // SAFETY: i < r <= max: an entry the kernel wrote.
        let ev = unsafe { events.add(i).read_unaligned() };
        let data = match fd_of_token(ev.u64) {
            // Registered before this process knew the set (inherited): the program's data.
            None => ev.u64,
            Some(fd) => match sh.items.get_mut(&fd) {
                Some(it) if !it.disarmed => {
                    // The kernel disarmed its one-shot item as it reported it.
                    if it.events & libc::EPOLLONESHOT as u32 != 0 {
                        it.disarmed = true;
                    }
                    it.data
                }
                _ => continue, // the set's wake-up, a disarmed item, or one deleted meanwhile
            },
        };
        // SAFETY: n <= i < max.
        unsafe { events.add(n).write_unaligned(epoll_event { events: ev.events, u64: data }) };
        n += 1;
    }
    if n == 0 {
        let left = match (timeout, started) {
            (Some(t), Some(at)) => Some(t.saturating_sub(at.elapsed())),
            _ => timeout,
        };
        KernelOnly::NothingToReport(left)
    } else {
        KernelOnly::Done(n as c_int)
    }
}

#[allow(clippy::too_many_arguments)]
fn wait_loop(
    epfd: c_int,
    events: *mut epoll_event,
    max: usize,
    timeout: Option<Duration>,
    shadow: &Arc<ShadowLock>,
    buf: &mut [epoll_event],
    kernel: &KernelWait<'_>,
    since: crate::signals::Since,
) -> c_int {
    let deadline = timeout.map(|t| Instant::now() + t);
    flush_set(shadow);
    let mut watched = lock(shadow).watch_list();
    // Parked rings stay empty: with nothing else to watch, the kernel's answer is the wait's.
    let watches_rings =
        |watched: &[Watched]| watched.iter().any(|w| !matches!(w, Watched::Ring(_, c) if park::is_parked(c)));
    let mut rings = watches_rings(&watched);
    // Refused when a CPU is not free for it (see `spin`); without a spin, the sleeping call
    // is the only one that asks the kernel, as the program's own call would be.
    let mut spin: Option<spin::Spin> =
        if rings && timeout != Some(Duration::ZERO) { spin::Spin::begin(timeout) } else { None };
    let spinning = spin.is_some();
    let mut ask_now = timeout == Some(Duration::ZERO);
    let mut last_kernel_check: Option<Instant> = None;
    loop {
        let now = Instant::now();
        let mut out = ReadyList::new();
        let mut urgent = false;
        if rings {
            urgent = rings_ready(shadow, &watched, max, &mut out);
        }
        // As in poll_core: urgent data behind ring bytes makes the kernel's EPOLLPRI part of
        // the answer.
        let ask_kernel = std::mem::take(&mut ask_now)
            || spinning && last_kernel_check.is_none_or(|t| now - t >= KERNEL_CHECK_EVERY)
            || urgent;
        let mut kernel_events = 0;
        if ask_kernel && out.len() < max {
            last_kernel_check = Some(now);
            flush_set(shadow);
            let r = kernel(buf.as_mut_ptr(), (max - out.len()) as c_int, Some(Duration::ZERO));
            if r < 0 {
                return r;
            }
            kernel_events = r as usize;
        }
        let n = merge(shadow, &buf[..kernel_events], &mut out);
        if n > 0 {
            if let Some(s) = spin.take() {
                s.hit();
            }
            return deliver(epfd, shadow, &out, events);
        }
        if timeout == Some(Duration::ZERO) {
            return 0;
        }
        if spin.as_mut().is_some_and(|s| s.go_on()) {
            std::hint::spin_loop();
            continue;
        }
        let (sleeping, datagrams, streams) = sleep_set(&watched);
        let Some(sleepers) = Sleepers::prepare(&sleeping, &datagrams, &streams) else {
            // Ring bytes arrived (in a ring unparked meanwhile): report the kernel's events
            // with them.
            (ask_now, rings) = (true, true);
            continue;
        };
        if let Some(s) = spin.take() {
            s.miss();
        }
        // From now on registrations in the set are made at once; those owed are made first.
        let asleep = KernelSleep::begin([&**shadow]);
        if since.interrupted() {
            return interrupted();
        }
        let slept = Instant::now();
        let r = kernel(buf.as_mut_ptr(), max as c_int, remaining(deadline));
        let e = errno();
        drop(asleep);
        drop(sleepers);
        if r > 0 {
            spin::woke_after(slept.elapsed());
        }
        if r < 0 {
            set_errno(e);
            return r;
        }
        let mut out = ReadyList::new();
        let n = merge(shadow, &buf[..r as usize], &mut out);
        if n > 0 || remaining(deadline) == Some(Duration::ZERO) {
            return deliver(epfd, shadow, &out, events);
        }
        // Only events we had to drop (a disarmed one-shot, or the set's wake-up: a socket
        // registered meanwhile has ring bytes): look at the rings again, then wait.
        watched = lock(shadow).watch_list();
        rings = watches_rings(&watched);
        ask_now = true;
    }
}

/// Adds the watched rings with bytes to report (and nested sets with such rings) to `out`;
/// true if one of those sockets has urgent data behind its ring bytes ([`urgent_behind_ring`]).
fn rings_ready(shadow: &ShadowLock, watched: &[Watched], max: usize, out: &mut ReadyList) -> bool {
    let mut sh = lock(shadow);
    let mut urgent = false;
    for w in watched {
        if out.len() >= max {
            break;
        }
        let (fd, signature) = match w {
            Watched::Ring(fd, c) => {
                if park::is_parked(c)
                    || !c.ring_input_ready()
                    || c.own.has_flag(lanes::sockets::endpoint::FLAG_RX_CLOSED)
                {
                    continue;
                }
                (*fd, c.peer().map(|p| p.tx_word().load().published()).unwrap_or(0))
            }
            Watched::Datagrams(fd, u) => {
                if !u.ring_ready() {
                    continue;
                }
                (*fd, u.signature())
            }
            Watched::Stream(fd, st) => {
                if !st.readable_without_kernel() {
                    continue;
                }
                (*fd, st.arrivals())
            }
            Watched::Set(fd, inner) => {
                if !shadow_ring_ready(inner) {
                    continue;
                }
                // Edge-triggered on a set: an edge is new ring data in any of its sockets.
                (*fd, shadow_ring_signature(inner))
            }
        };
        let Some(it) = sh.items.get_mut(&fd) else { continue };
        if it.disarmed || (it.edge_triggered() && signature == it.last_published) {
            continue;
        }
        it.last_published = signature;
        out.push(Ready::Fd(fd, libc::EPOLLIN as u32, false));
        urgent |= matches!(w, Watched::Ring(_, c) if urgent_behind_ring(c));
    }
    urgent
}

/// The accelerated sockets a sleeping wait must switch to kernel mode: its own rings and
/// those of nested sets (not those shut for reading: their bytes come through the kernel
/// already, and ring bytes left unread there would never let the wait sleep).
#[allow(clippy::type_complexity)]
fn sleep_set(
    watched: &[Watched],
) -> (SmallVec<[Arc<Conn>; 8]>, SmallVec<[Arc<UdpSock>; 4]>, SmallVec<[Arc<FabricStream>; 4]>) {
    let open = |c: &Arc<Conn>| !c.own.has_flag(lanes::sockets::endpoint::FLAG_RX_CLOSED) && !c.rx_retired();
    let mut conns = SmallVec::new();
    let mut datagrams = SmallVec::new();
    let mut streams = SmallVec::new();
    for w in watched {
        match w {
            Watched::Ring(_, c) if open(c) => conns.push(c.clone()),
            Watched::Ring(..) => {}
            Watched::Datagrams(_, u) => datagrams.push(u.clone()),
            Watched::Stream(_, st) => streams.push(st.clone()),
            Watched::Set(_, inner) => {
                let list = lock(inner).watch_list();
                for w in list.iter() {
                    match w {
                        Watched::Ring(_, c) if open(c) => conns.push(c.clone()),
                        Watched::Datagrams(_, u) => datagrams.push(u.clone()),
                        Watched::Stream(_, st) => streams.push(st.clone()),
                        _ => {} // deeper nesting: the kernel wakes us through it
                    }
                }
            }
        }
    }
    (conns, datagrams, streams)
}

/// Whether an (inner) set has an accelerated socket with ring bytes to report.
fn shadow_ring_ready(shadow: &ShadowLock) -> bool {
    let sh = lock(shadow);
    !sh.closed
        && sh.items.values().any(|it| {
            !it.disarmed
                && it.wants_input()
                && it
                    .udp
                    .as_ref()
                    .is_some_and(|u| u.ring_ready() && (!it.edge_triggered() || u.signature() != it.last_published))
                || !it.disarmed
                    && it.wants_input()
                    && it.stream.as_ref().is_some_and(|s| {
                        s.readable_without_kernel() && (!it.edge_triggered() || s.arrivals() != it.last_published)
                    })
                || !it.disarmed
                    && it.wants_input()
                    && it.conn.as_ref().is_some_and(|c| {
                        c.ring_input_ready()
                            && (!it.edge_triggered()
                                || c.peer().map(|p| p.tx_word().load().published()) != Some(it.last_published))
                    })
        })
}

/// A value that changes whenever ring data arrives at any socket of a set.
fn shadow_ring_signature(shadow: &ShadowLock) -> u64 {
    let sh = lock(shadow);
    sh.items
        .values()
        .filter_map(|it| match (&it.udp, &it.stream) {
            (Some(u), _) => Some(u.signature()),
            (None, Some(s)) => Some(s.arrivals()),
            (None, None) => it.conn.as_ref()?.peer().map(|p| p.tx_word().load().published()),
        })
        .fold(0u64, |acc, p| acc.wrapping_mul(31).wrapping_add(p))
}

/// One event to deliver: an fd of the shadow (with whether the kernel reported it too), or
/// data registered before we knew the set.
#[derive(Clone, Copy)]
enum Ready {
    Fd(c_int, u32, bool),
    Raw(u64, u32),
}

/// Events to deliver, inline for a few.
type ReadyList = SmallVec<[Ready; 16]>;

/// Adds kernel events (translated from tokens) to `out`, one entry per fd.
fn merge(shadow: &ShadowLock, kernel: &[epoll_event], out: &mut ReadyList) -> usize {
    let sh = lock(shadow);
    for ev in kernel {
        let (data, events) = (ev.u64, ev.events);
        let Some(fd) = fd_of_token(data) else {
            // Registered before this process knew the set (inherited): the application's data.
            out.push(Ready::Raw(data, events));
            continue;
        };
        match sh.items.get(&fd) {
            Some(it) if it.disarmed => {}
            Some(_) => match out.iter_mut().find(|r| matches!(r, Ready::Fd(f, ..) if *f == fd)) {
                Some(Ready::Fd(_, e, from_kernel)) => (*e, *from_kernel) = (*e | events, true),
                _ => out.push(Ready::Fd(fd, events, true)),
            },
            None => {}
        }
    }
    out.len()
}

/// Writes the events with the application's data; disarms one-shot items, in the kernel
/// set too when only a ring reported them (the kernel disarms an item it reports itself:
/// disarming it again cost every one-shot event an extra system call).
fn deliver(epfd: c_int, shadow: &ShadowLock, out: &[Ready], events: *mut epoll_event) -> c_int {
    let mut sh = lock(shadow);
    let mut n = 0;
    for r in out {
        let ev = match *r {
            Ready::Raw(data, ev) => epoll_event { events: ev, u64: data },
            Ready::Fd(fd, ev, from_kernel) => {
                let Some(it) = sh.items.get_mut(&fd) else { continue };
                if it.events & libc::EPOLLONESHOT as u32 != 0 {
                    it.disarmed = true;
                    if !from_kernel {
                        let mut off = epoll_event { events: libc::EPOLLONESHOT as u32, u64: token(fd) };
                        // SAFETY: our own event structure.
                        unsafe { (real().epoll_ctl)(epfd, libc::EPOLL_CTL_MOD, fd, &mut off) };
                    }
                }
                epoll_event { events: ev, u64: it.data }
            }
        };
        // SAFETY: n < maxevents (out never exceeds it).
        unsafe { events.add(n).write_unaligned(ev) };
        n += 1;
    }
    n as c_int
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanes::sockets::endpoint::FLAG_RX_RETIRED;

    #[test]
    fn a_ring_retired_after_it_was_watched_leaves_the_watch_list() {
        let dir = lanes_testkit::TestDir::new("wait-retired");
        let c = crate::conn::test_conn_with_peer(dir.root());
        let mut sh = Shadow::default();
        let item = Item {
            events: libc::EPOLLIN as u32,
            data: 7,
            disarmed: false,
            last_published: 0,
            conn: Some(c.clone()),
            nested: None,
            udp: None,
            stream: None,
            closes: None,
        };
        sh.items.insert(60_002, item);
        sh.stale = true;
        assert!(matches!(&sh.watch_list()[..], [Watched::Ring(60_002, _)]), "an attached ring is watched");
        c.own.set_flags(FLAG_RX_RETIRED);
        assert!(sh.watch_list().is_empty(), "a retired ring is the kernel's alone: nothing to watch");
    }
}
