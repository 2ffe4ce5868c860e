//! UDP between processes of this host that carry the library: datagrams move through the
//! receiving socket's ring (`lanes::sockets::udp`) instead of the kernel.
//!
//! Every UDP socket stays a kernel socket; the library only adds a path beside it. A
//! receiving socket gets a record (at its first receive or wait, once it is bound); a
//! sender asks the kernel which socket would take its datagram (`sock_diag`, the kernel's
//! own UDP lookup with the sender's address: bound address, connected peer and
//! `SO_REUSEPORT` group all count) and writes into that socket's ring only if the socket
//! has a record with that cookie. Datagrams of senders without the library keep arriving
//! through the kernel; the receive path reads both. Whatever the library does not model
//! (ancillary data, options outside a short list, corking, broadcast) keeps the socket, or
//! the datagram, on the kernel ([`pin`]). Multicast datagrams reach the rings of every
//! local member or of none ([`mcast`]). See docs/design/udp-acceleration.md.

mod mcast;
mod rx;
mod tx;

use rustc_hash::FxHashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use lanes::sockets::endpoint::this_process;
use lanes::sockets::udp::{ring_for, UdpBinds, UdpRecord};
use libc::{c_int, sockaddr, socklen_t};

use crate::config::config;

pub use rx::{readable_bytes, recv, recvmmsg, Out};
pub use tx::{send, sendmmsg};

/// One UDP socket (open file description) of this process.
pub struct UdpSock {
    /// AF_INET or AF_INET6.
    family: c_int,
    /// Stays on the kernel for good (an option or a call the library does not model).
    pinned: AtomicBool,
    /// Its record as a receiver, once made.
    record: OnceLock<Arc<UdpRecord>>,
    /// Making the record failed or is not possible (unbound): not tried again until a bind.
    no_record: AtomicBool,
    /// Held while the record is made: threads waiting on duplicates of the socket (one per
    /// worker thread, as memcached's) make their first wait at once.
    making: Mutex<()>,
    /// Receives so far (every so many, the kernel is read first, so datagrams of senders
    /// without the library are not starved by a busy ring).
    receives: AtomicU32,
    /// Its last blocking kernel receive returned at once (datagrams were waiting).
    busy: AtomicBool,
    /// The receiver's ring-wanted value a send of this socket last held back for in vain
    /// (`tx::hold_for_ring`): not held back for again.
    ring_hold_refused: AtomicU32,
    /// The sending side's knowledge: its own address and the receivers it found.
    tx: Mutex<tx::TxState>,
    /// The interface its `IP_MULTICAST_IF` (`IPV6_MULTICAST_IF`) chose, if any.
    mc_if: Mutex<Option<u32>>,
}

impl UdpSock {
    fn new(family: c_int) -> Arc<UdpSock> {
        Arc::new(UdpSock {
            family,
            pinned: AtomicBool::new(false),
            record: OnceLock::new(),
            no_record: AtomicBool::new(false),
            making: Mutex::new(()),
            receives: AtomicU32::new(0),
            busy: AtomicBool::new(true),
            ring_hold_refused: AtomicU32::new(0),
            tx: Mutex::new(tx::TxState::default()),
            mc_if: Mutex::new(None),
        })
    }

    /// Its receiving record, if it has one.
    pub fn record(&self) -> Option<&Arc<UdpRecord>> {
        self.record.get()
    }

    /// Whether ring datagrams wait (readiness without a system call).
    pub fn ring_ready(&self) -> bool {
        self.record.get().is_some_and(|r| r.ring_readable())
    }

    /// A value that changes whenever a datagram is published into the ring.
    pub fn signature(&self) -> u64 {
        self.record.get().map_or(0, |r| u64::from(r.state().published()))
    }

    /// Before a wait sleeps in the kernel: false if ring datagrams wait.
    pub fn prepare_sleep(&self) -> bool {
        self.record.get().is_none_or(|r| r.prepare_sleep())
    }

    /// After that sleep.
    pub fn finish_sleep(&self) {
        if let Some(r) = self.record.get() {
            r.finish_sleep();
        }
    }

    fn pinned(&self) -> bool {
        self.pinned.load(Ordering::Relaxed)
    }
}

/// fd -> UdpSock; `MAYBE[fd]` lets every call on other fds skip the lock.
const FAST_FDS: usize = 1 << 16;
static MAYBE: [AtomicU8; FAST_FDS] = [const { AtomicU8::new(0) }; FAST_FDS];
static TABLE: OnceLock<RwLock<FxHashMap<c_int, Arc<UdpSock>>>> = OnceLock::new();

fn table() -> &'static RwLock<FxHashMap<c_int, Arc<UdpSock>>> {
    TABLE.get_or_init(|| RwLock::new(FxHashMap::default()))
}

/// The table, held across a fork ([`crate::fork_locks`]).
pub fn hold_for_fork(by: Option<std::time::Instant>) -> Option<crate::fork_locks::Held> {
    crate::fork_locks::write_by(table(), by).map(|g| Box::new(g) as crate::fork_locks::Held)
}

/// The UDP socket behind `fd`, if the library knows it as one.
#[inline]
pub fn lookup(fd: c_int) -> Option<Arc<UdpSock>> {
    if fd < 0 || ((fd as usize) < FAST_FDS && MAYBE[fd as usize].load(Ordering::Relaxed) == 0) {
        return None;
    }
    table().read().ok()?.get(&fd).cloned()
}

/// Whether `fd` is surely no UDP socket of the library's (a number past `MAYBE`: not known).
#[inline]
pub fn untracked(fd: c_int) -> bool {
    (fd as u32 as usize) < FAST_FDS && MAYBE[fd as usize].load(Ordering::Relaxed) == 0
}

fn insert(fd: c_int, s: Arc<UdpSock>) {
    if let Ok(mut t) = table().write() {
        t.insert(fd, s);
        if (fd as usize) < FAST_FDS {
            MAYBE[fd as usize].store(1, Ordering::Relaxed);
        }
    }
}

/// `socket()` returned `fd`: an IPv4 or IPv6 UDP socket is one of ours.
pub fn created(fd: c_int, domain: c_int, ty: c_int, protocol: c_int) {
    let udp = ty & 0xf == libc::SOCK_DGRAM && (protocol == 0 || protocol == libc::IPPROTO_UDP);
    if fd < 0 || !udp || !(domain == libc::AF_INET || domain == libc::AF_INET6) || !config().enabled {
        return;
    }
    if crate::io_uring::set_up() {
        return crate::reasons::note(crate::reasons::Reason::IoUring, None);
    }
    insert(fd, UdpSock::new(domain));
}

/// Every UDP fd of this process.
pub fn fds() -> Vec<c_int> {
    table().read().map(|t| t.keys().copied().collect()).unwrap_or_default()
}

/// Once per process, on the first call into the library: the UDP sockets inherited across
/// exec are ours, and a record the image before made for one of them is taken over (its
/// ring may hold datagrams).
pub fn adopt_inherited_all() {
    let Ok(dir) = std::fs::read_dir("/proc/self/fd") else { return };
    let fds: Vec<c_int> = dir.flatten().filter_map(|e| e.file_name().to_str()?.parse().ok()).collect();
    for fd in fds {
        if lookup(fd).is_some()
            || !std::fs::read_link(format!("/proc/self/fd/{fd}"))
                .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
        {
            continue;
        }
        let int_opt = |level, name| {
            let mut v: c_int = 0;
            let mut len = std::mem::size_of::<c_int>() as socklen_t;
            // SAFETY: v and len are valid for writes.
            let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut c_int).cast(), &mut len) };
            (r == 0).then_some(v)
        };
        let (Some(domain), Some(protocol)) =
            (int_opt(libc::SOL_SOCKET, libc::SO_DOMAIN), int_opt(libc::SOL_SOCKET, libc::SO_PROTOCOL))
        else {
            continue;
        };
        if protocol != libc::IPPROTO_UDP || !(domain == libc::AF_INET || domain == libc::AF_INET6) {
            continue;
        }
        let s = UdpSock::new(domain);
        if let Some(rec) = crate::sock_diag::own_cookie(fd).and_then(join_record) {
            let _ = s.record.set(Arc::new(rec));
        }
        insert(fd, s);
    }
}

/// `newfd` now refers to the socket of `oldfd` (dup family).
pub fn duplicated(oldfd: c_int, newfd: c_int) {
    forget(newfd);
    if let Some(s) = lookup(oldfd) {
        insert(newfd, s);
    }
}

/// `fd` was closed or replaced. The last reference of this process to a socket gives up
/// its holder slot; the last holder closes the record (senders use the kernel again, and
/// find the next socket bound there afresh).
pub fn forget(fd: c_int) {
    if fd < 0 || ((fd as usize) < FAST_FDS && MAYBE[fd as usize].load(Ordering::Relaxed) == 0) {
        return;
    }
    if (fd as usize) < FAST_FDS {
        MAYBE[fd as usize].store(0, Ordering::Relaxed);
    }
    let removed = table().write().ok().and_then(|mut t| {
        let s = t.remove(&fd)?;
        let still_here = t.values().any(|o| Arc::ptr_eq(o, &s));
        (!still_here).then_some(s)
    });
    let Some(s) = removed else { return };
    if let Some(rec) = s.record.get() {
        let others = match this_process() {
            Ok(me) => rec.remove_holder(me),
            Err(_) => rec.holders().len(),
        };
        if others == 0 {
            rec.close();
            rec.unlink();
        }
    }
}

/// Keeps `s` on the kernel from now on; ring datagrams already there are still read.
fn pin(s: &UdpSock) {
    pin_for(
        s,
        crate::reasons::Reason::UdpKernelOnly,
        "set an option, or asked for ancillary data, that the library does not model",
    );
}

/// Every UDP socket of this process on the kernel from now on (see [`pin`]), for `why`.
pub fn pin_all(why: crate::reasons::Reason, detail: &str) {
    let all: Vec<Arc<UdpSock>> = table().read().map(|t| t.values().cloned().collect()).unwrap_or_default();
    for s in all {
        pin_for(&s, why, detail);
    }
}

fn pin_for(s: &UdpSock, why: crate::reasons::Reason, detail: &str) {
    if !s.pinned.swap(true, Ordering::Relaxed) {
        crate::reasons::note_with(why, None, detail);
    }
    if let Some(rec) = s.record.get() {
        rec.close();
        rec.unlink();
    }
}

/// `connect()` on `fd` succeeded (or dissolved the association): the socket's addresses
/// changed, so what its sender found is stale, and so is what senders found about it as a
/// receiver (they ask the kernel again at their next datagram).
pub fn connected(fd: c_int) {
    if let Some(s) = lookup(fd) {
        tx::forget_targets(&s);
        if let Some(rec) = s.record.get() {
            rec.bump_epoch();
        }
    }
}

/// `bind()` on `fd` succeeded: it may now get a record; an explicit port tells every
/// sender to look again who takes its datagrams ([`UdpBinds`]).
pub fn bound(fd: c_int) {
    if let Some(s) = lookup(fd) {
        s.no_record.store(false, Ordering::Relaxed);
        tx::forget_targets(&s);
        if name_of(fd, false).is_some_and(|a| a.port() != 0) && !crate::sandbox::filtered() {
            if let Some(e) = udp_binds() {
                e.bump();
            }
        }
    }
}

/// Milliseconds of the coarse monotonic clock (its tick, 1 to 4 ms): what a sender's
/// per-datagram "is what I found still fresh?" reads, at a fraction of the precise clock's
/// cost (which was a fifth of a 64-byte datagram's send).
pub fn coarse_ms() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: t is valid for the kernel (or vDSO) to write.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

/// The fabric directory's bind counter and port map, opened once per process.
pub fn udp_binds() -> Option<&'static UdpBinds> {
    static BINDS: OnceLock<Option<UdpBinds>> = OnceLock::new();
    BINDS.get_or_init(|| UdpBinds::open(&config().fabric_dir).ok()).as_ref()
}

/// Options whose effect the ring reproduces (or which do not concern receiving): any other
/// `setsockopt` level and name keeps the socket on the kernel.
fn modelled(level: c_int, name: c_int) -> bool {
    match level {
        libc::SOL_SOCKET => matches!(
            name,
            libc::SO_REUSEADDR
                | libc::SO_REUSEPORT
                | libc::SO_RCVBUF
                | libc::SO_RCVBUFFORCE
                | libc::SO_SNDBUF
                | libc::SO_SNDBUFFORCE
                | libc::SO_BROADCAST
                | libc::SO_RCVTIMEO
                | libc::SO_SNDTIMEO
                | libc::SO_KEEPALIVE
                | libc::SO_PRIORITY
                | libc::SO_LINGER
        ),
        libc::IPPROTO_IP => matches!(name, libc::IP_TOS | libc::IP_TTL | libc::IP_MTU_DISCOVER),
        libc::IPPROTO_IPV6 => {
            matches!(name, libc::IPV6_V6ONLY | libc::IPV6_UNICAST_HOPS | libc::IPV6_TCLASS | libc::IPV6_MTU_DISCOVER)
        }
        _ => false,
    }
}

/// `setsockopt(fd, level, name, val, len)` succeeded in the kernel.
///
/// # Safety
/// `val` is valid for `len` bytes (or null).
pub unsafe fn option_set(fd: c_int, level: c_int, name: c_int, val: *const libc::c_void, len: socklen_t) {
    let Some(s) = lookup(fd) else { return };
    if mcast::membership_option(level, name) || mcast::modelled_option(level, name) {
        if !s.pinned() {
            // SAFETY: as guaranteed by the caller.
            unsafe { mcast::option_set(&s, fd, level, name, val, len) };
        }
        return;
    }
    if !modelled(level, name) {
        return pin(&s);
    }
    if level == libc::SOL_SOCKET && matches!(name, libc::SO_RCVBUF | libc::SO_RCVBUFFORCE) {
        if let Some(rec) = s.record.get() {
            match kernel_rcvbuf(fd) {
                Some(b) if rec.holds_rcvbuf(b) => rec.set_rcvbuf(b),
                _ => pin(&s),
            }
        }
    }
}

fn kernel_rcvbuf(fd: c_int) -> Option<u32> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: v and len are valid for writes.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, (&mut v as *mut c_int).cast(), &mut len) };
    (r == 0 && v > 0).then_some(v as u32)
}

/// In the parent, as soon as `fork` returned child `pid`: the child holds every socket we hold.
pub fn adopt_for_child(pid: libc::pid_t) {
    let Ok(child) = lanes::platform::liveness::ProcessIdentity::of_pid(pid as u32) else { return };
    for_each_record(|rec| {
        rec.add_holder(child);
    });
}

/// The record another process made of a socket this one shares (across exec, or since a
/// fork), held by this process too.
fn join_record(cookie: u64) -> Option<UdpRecord> {
    let cfg = config();
    let rec = UdpRecord::open(&cfg.fabric_dir, cfg.netns, cookie).ok()?;
    if let Ok(me) = this_process() {
        rec.add_holder(me);
    }
    Some(rec)
}

/// After fork, in the child.
pub fn adopt_after_fork() {
    let Ok(me) = this_process() else { return };
    for_each_record(|rec| {
        rec.add_holder(me);
    });
}

fn for_each_record(mut f: impl FnMut(&UdpRecord)) {
    // try_read: after fork, a thread of the parent may have held the lock; it is gone.
    let Ok(t) = table().try_read() else { return };
    for s in t.values() {
        if let Some(rec) = s.record.get() {
            f(rec);
        }
    }
}

/// The socket's record, made now if it has none yet and can have one: bound, not pinned,
/// a receive buffer the ring holds. Records start in kernel mode.
fn ensure_record(s: &UdpSock, fd: c_int) -> Option<&Arc<UdpRecord>> {
    if let Some(r) = s.record.get() {
        return Some(r);
    }
    if s.pinned() || s.no_record.load(Ordering::Relaxed) || crate::sandbox::filtered() {
        return None;
    }
    let _making = s.making.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = s.record.get() {
        return Some(r);
    }
    let made = (|| {
        let local = name_of(fd, false)?;
        if local.port() == 0 {
            return None; // unbound: nothing can be sent to it
        }
        let rcvbuf = kernel_rcvbuf(fd)?;
        if ring_for(rcvbuf).is_none() {
            let why = format!("has a receive buffer of {rcvbuf} bytes, more than the largest ring holds");
            crate::reasons::note_with(crate::reasons::Reason::UdpKernelOnly, None, &why);
            return None;
        }
        let cookie = crate::sock_diag::own_cookie(fd)?;
        let memberships = mcast::kernel_memberships(s, fd)?;
        let cfg = config();
        // Before the record exists: a sender that finds the port's bit clear skips the
        // kernel's lookup (a record found later is found at its next look).
        udp_binds()?.mark_port(local.port());
        let rec = match UdpRecord::create(&cfg.fabric_dir, cfg.netns, cookie, local, rcvbuf, &memberships) {
            Ok(rec) => rec,
            // Another process sharing the socket made it first: this one holds it too.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return join_record(cookie).filter(|rec| canonical(rec.local()) == canonical(local));
            }
            Err(_) => return None,
        };
        // SAFETY: F_GETFL takes no memory.
        let fl = unsafe { (crate::real::real().fcntl)(fd, libc::F_GETFL, 0) };
        rec.nonblocking().store(u32::from(fl >= 0 && fl & libc::O_NONBLOCK != 0), Ordering::Relaxed);
        Some(rec)
    })();
    match made {
        Some(rec) => {
            let _ = s.record.set(Arc::new(rec));
            s.record.get()
        }
        None => {
            s.no_record.store(true, Ordering::Relaxed);
            None
        }
    }
}

/// `O_NONBLOCK` of `fd` was set or cleared (fcntl, FIONBIO).
pub fn set_nonblocking(fd: c_int, on: bool) {
    if let Some(rec) = lookup(fd).as_deref().and_then(UdpSock::record) {
        rec.nonblocking().store(u32::from(on), Ordering::Relaxed);
    }
}

/// The socket behind `fd` if a wait must watch its ring (making its record if it can).
pub fn waitable(fd: c_int) -> Option<Arc<UdpSock>> {
    let s = lookup(fd)?;
    ensure_record(&s, fd)?;
    Some(s)
}

// ---- addresses ---------------------------------------------------------------------------

/// IPv4-mapped IPv6 addresses as IPv4 (as datagrams travel).
pub fn canonical(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => SocketAddr::V6(SocketAddrV6::new(*v6.ip(), v6.port(), 0, v6.scope_id())),
        },
        v4 => v4,
    }
}

/// Reads a socket address the program passed (None: not one the library handles, the
/// kernel answers the call).
///
/// # Safety
/// `addr` null or valid for `len` bytes.
pub unsafe fn read_sockaddr(addr: *const sockaddr, len: socklen_t) -> Option<SocketAddr> {
    if addr.is_null() || (len as usize) < std::mem::size_of::<libc::sa_family_t>() {
        return None;
    }
    // SAFETY: at least the family is readable (checked).
    let family = unsafe { std::ptr::read_unaligned(addr.cast::<libc::sa_family_t>()) } as c_int;
    match family {
        libc::AF_INET if len as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: long enough for a sockaddr_in.
            let a: libc::sockaddr_in = unsafe { std::ptr::read_unaligned(addr.cast()) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr)),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: long enough for a sockaddr_in6.
            let a: libc::sockaddr_in6 = unsafe { std::ptr::read_unaligned(addr.cast()) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(a.sin6_addr.s6_addr),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// The source address as a socket of `family` reports it (an IPv6 socket sees IPv4
/// senders as IPv4-mapped), in a sockaddr_storage with its length.
pub fn sockaddr_for(family: c_int, src: SocketAddr) -> (libc::sockaddr_storage, socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let src = canonical(src);
    let len = match (family, src) {
        (libc::AF_INET, SocketAddr::V4(v4)) => {
            let a = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr { s_addr: u32::from(*v4.ip()).to_be() },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in.
            unsafe { std::ptr::write_unaligned((&mut st as *mut libc::sockaddr_storage).cast(), a) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        (_, a) => {
            let ip = match a.ip() {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            let scope = if let SocketAddr::V6(v6) = a { v6.scope_id() } else { 0 };
            let a6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr { s6_addr: ip.octets() },
                sin6_scope_id: scope,
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6.
            unsafe { std::ptr::write_unaligned((&mut st as *mut libc::sockaddr_storage).cast(), a6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (st, len as socklen_t)
}

/// The socket's own address (`peer`: its connected peer's), as the kernel reports it.
pub fn name_of(fd: c_int, peer: bool) -> Option<SocketAddr> {
    // SAFETY: zeroed sockaddr_storage is valid.
    let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as socklen_t;
    let p = (&mut st as *mut libc::sockaddr_storage).cast();
    // SAFETY: st and len are valid for writes of the sizes given.
    let r = unsafe {
        if peer {
            libc::getpeername(fd, p, &mut len)
        } else {
            libc::getsockname(fd, p, &mut len)
        }
    };
    // SAFETY: the kernel wrote len bytes of a socket address.
    (r == 0).then(|| unsafe { read_sockaddr(p, len) }).flatten()
}
