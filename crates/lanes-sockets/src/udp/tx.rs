//! Sending a datagram: which socket of this host would take it, and whether it goes into
//! that socket's ring or through the kernel.

use std::collections::HashMap;

use rustc_hash::FxHashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use libc::{c_int, iovec, sockaddr, socklen_t, ssize_t};
use smallvec::SmallVec;

use lanes::sockets::udp::{travels_as_ipv6, Offer, UdpRecord};

use super::{canonical, name_of, read_sockaddr, UdpSock};
use crate::config::{config, wanted, Wanted};
use crate::real::{errno, set_errno};

/// How long a receiver found stays trusted without asking the kernel again (a receiver
/// that closes through the library says so at once; one that was killed does not).
const RECHECK_FOUND: Duration = Duration::from_millis(200);
/// How soon after a drop (a full ring) the kernel is asked again.
const RECHECK_AFTER_DROP: Duration = Duration::from_millis(10);
/// How long "no receiver with the library there" stays believed.
const RECHECK_MISSING: Duration = Duration::from_millis(20);
/// How long a send holds back for a receiver that wants the ring while its wish does not
/// move (it read no kernel datagram meanwhile), and how long at most in all.
const RING_WANTED_STALL: Duration = Duration::from_micros(20);
const RING_WANTED_HOLD: Duration = Duration::from_micros(200);

/// What a socket's sending side knows.
#[derive(Default)]
pub struct TxState {
    /// Its connected peer, once read (`Some(None)`: not connected).
    peer: Option<Option<SocketAddr>>,
    /// Per destination: the receiver found there, if any.
    targets: FxHashMap<SocketAddr, Target>,
    /// Per multicast destination: its members on this host.
    pub(super) groups: FxHashMap<SocketAddr, super::mcast::GroupView>,
    /// The records of sockets on the ports of those groups, by cookie (kept so a look
    /// again does not map them again).
    pub(super) group_records: FxHashMap<u64, Arc<UdpRecord>>,
}

struct Target {
    /// The receiving socket's record and our source address as that receiver sees it
    /// (None: the kernel's socket there has no library, or there is none).
    record: Option<(Arc<UdpRecord>, SocketAddr)>,
    /// When it was found ([`super::coarse_ms`]).
    checked_ms: u64,
    /// The record's addressing epoch when the kernel named it.
    epoch: u32,
    /// The fabric directory's bind counter then (`super::bind_epoch`).
    binds: u64,
    /// Datagrams went to `record`'s address through the kernel while no record was known:
    /// a receiver found later must read them before any of ours in its ring.
    kernel_sent: bool,
}

/// The socket's addresses changed (connect, bind): what it found is stale.
pub fn forget_targets(s: &UdpSock) {
    if let Ok(mut tx) = s.tx.lock() {
        tx.peer = None;
        tx.targets.clear();
        tx.groups.clear();
    }
}

/// The kernel's source address for datagrams to `dst` from a socket bound to the wildcard
/// address: its route's (a connected throwaway socket shows it), cached per destination.
fn route_source(dst: IpAddr) -> Option<IpAddr> {
    static CACHE: OnceLock<Mutex<HashMap<IpAddr, Option<IpAddr>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(src) = cache.lock().ok()?.get(&dst) {
        return *src;
    }
    let family = if dst.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    let (st, len) = super::sockaddr_for(family, SocketAddr::new(dst, 9));
    // SAFETY: st holds a socket address of len bytes; fd is ours.
    let src = if unsafe { libc::connect(fd, (&st as *const libc::sockaddr_storage).cast(), len) } == 0 {
        name_of(fd, false).map(|a| canonical(a).ip())
    } else {
        None
    };
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    if let Ok(mut c) = cache.lock() {
        c.insert(dst, src);
    }
    src
}

/// Binds an unbound socket to the wildcard address and an ephemeral port, as the kernel's
/// first send would; returns its address.
pub(super) fn local_address(s: &UdpSock, fd: c_int) -> Option<SocketAddr> {
    let local = name_of(fd, false)?;
    if local.port() != 0 {
        return Some(local);
    }
    let any: SocketAddr = if s.family == libc::AF_INET { "0.0.0.0:0".parse().ok()? } else { "[::]:0".parse().ok()? };
    let (st, len) = super::sockaddr_for(s.family, any);
    // SAFETY: st holds a socket address of len bytes.
    if unsafe { libc::bind(fd, (&st as *const libc::sockaddr_storage).cast(), len) } != 0 {
        return None;
    }
    // Bound now: it may get a record as a receiver.
    s.no_record.store(false, std::sync::atomic::Ordering::Relaxed);
    name_of(fd, false)
}

/// Whether an IPv6 socket refuses IPv4 destinations.
fn v6_only(fd: c_int) -> bool {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: v and len are valid for writes.
    let r =
        unsafe { libc::getsockopt(fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, (&mut v as *mut c_int).cast(), &mut len) };
    r != 0 || v != 0
}

/// Finds who takes datagrams from this socket to `dst`: our source address as the kernel
/// would give it, and the receiving socket's record if the kernel's lookup names a socket
/// that has one (None: it has no library, or there is nobody).
fn find(s: &UdpSock, fd: c_int, dst: SocketAddr, kernel_sent: bool) -> Option<Target> {
    let binds = super::udp_binds().map_or(0, |e| e.get());
    let checked_ms = super::coarse_ms();
    let missing = Target { record: None, checked_ms, kernel_sent, epoch: 0, binds };
    // No socket with the library ever had a record on that port: nobody to ask about, nor
    // a source address to work out (a program that makes a socket per datagram to a
    // server without the library pays nothing here).
    if super::udp_binds().is_some_and(|b| !b.port_marked(dst.port())) {
        return Some(missing);
    }
    let local = canonical(local_address(s, fd)?);
    if s.family == libc::AF_INET6 && dst.is_ipv4() && v6_only(fd) {
        return None;
    }
    let src_ip = if local.ip().is_unspecified() { route_source(dst.ip())? } else { local.ip() };
    if src_ip.is_ipv4() != dst.is_ipv4() {
        return None;
    }
    let src = SocketAddr::new(src_ip, local.port());
    if wanted(src, dst) != Wanted::Yes || crate::sandbox::filtered() {
        return Some(missing);
    }
    let Some(info) = lanes::platform::net::udp_receiver(src, dst) else { return Some(missing) };
    let cfg = config();
    let Ok(record) = UdpRecord::open(&cfg.fabric_dir, cfg.netns, info.cookie) else { return Some(missing) };
    if record.state().closed() || record.holders().is_empty() {
        return Some(missing);
    }
    let epoch = record.epoch();
    let record = Arc::new(record);
    if kernel_sent {
        // Datagrams this socket sent there before went through the kernel: the receiver
        // must read them before anything of ours in its ring.
        while !record.begin_kernel_send() {
            std::thread::yield_now();
        }
        record.end_kernel_send();
    }
    // The kernel is asked after the epoch is read: a connect in between moves the epoch.
    let again = lanes::platform::net::udp_receiver(src, dst);
    if again.map(|i| i.cookie) != Some(record.cookie()) {
        return Some(missing);
    }
    Some(Target { record: Some((record, src)), checked_ms, kernel_sent: false, epoch, binds })
}

/// The largest payload the kernel sends as one datagram of this family.
fn max_payload(ipv6: bool) -> usize {
    if ipv6 {
        65527
    } else {
        65507
    }
}

/// Sends the datagram `iov` (to `dest`, or the connected peer when `dest` is null) from
/// `fd`; `kernel` makes the program's own call. `plain`: the datagram must go through the
/// kernel (ancillary data, corking flags).
///
/// # Safety
/// `dest` null or valid for `dlen` bytes; `iov` the program's, valid buffers.
#[allow(clippy::too_many_arguments)]
pub unsafe fn send(
    s: &UdpSock,
    fd: c_int,
    dest: *const sockaddr,
    dlen: socklen_t,
    iov: &[iovec],
    flags: c_int,
    plain: bool,
    kernel: &mut dyn FnMut() -> ssize_t,
) -> ssize_t {
    if s.pinned() {
        return kernel();
    }
    let dst = if dest.is_null() {
        let Ok(mut tx) = s.tx.lock() else { return kernel() };
        *tx.peer.get_or_insert_with(|| name_of(fd, true))
    } else {
        // SAFETY: the caller's address.
        unsafe { read_sockaddr(dest, dlen) }
    };
    let Some(dst) = dst.map(canonical) else { return kernel() };
    if dst.ip().is_multicast() {
        // An IPv6 socket's datagram to an IPv4 group (IPv4-mapped) takes the IPv4 path with
        // options of either family: not modelled, the kernel's alone.
        let same_family = (s.family == libc::AF_INET) == dst.is_ipv4();
        if !same_family || dst.port() == 0 {
            return kernel();
        }
        // SAFETY: as guaranteed by the caller.
        return unsafe { super::mcast::send(s, fd, dst, iov, flags, plain, kernel) };
    }
    let special = match dst.ip() {
        IpAddr::V4(v4) => v4.is_multicast() || v4.is_broadcast() || v4.is_unspecified() || v4.octets()[3] == 255,
        IpAddr::V6(v6) => v6.is_multicast() || v6.is_unspecified() || (v6.segments()[0] & 0xffc0) == 0xfe80,
    };
    if special || dst.port() == 0 || (s.family == libc::AF_INET && dst.is_ipv6()) {
        return kernel();
    }
    let target = {
        let Ok(mut tx) = s.tx.lock() else { return kernel() };
        let binds = super::udp_binds().map_or(0, |e| e.get());
        let age = |t: &Target| Duration::from_millis(super::coarse_ms().saturating_sub(t.checked_ms));
        let stale = match tx.targets.get(&dst) {
            None => true,
            Some(t) if t.binds != binds => true,
            Some(t) => match &t.record {
                Some((r, _)) => r.state().closed() || r.epoch() != t.epoch || age(t) > RECHECK_FOUND,
                None => age(t) > RECHECK_MISSING,
            },
        };
        if stale {
            let kernel_sent = tx.targets.get(&dst).is_some_and(|t| t.kernel_sent);
            match find(s, fd, dst, kernel_sent) {
                Some(t) => {
                    tx.targets.insert(dst, t);
                }
                None => {
                    tx.targets.remove(&dst);
                }
            }
        }
        match tx.targets.get_mut(&dst) {
            Some(t) if t.record.is_none() => {
                t.kernel_sent = true;
                None
            }
            Some(t) => t.record.clone(),
            None => None,
        }
    };
    let Some((record, src)) = target else { return kernel() };
    let len = crate::stream::iov_len(iov);
    let ipv6 = travels_as_ipv6(dst.ip());
    let special_flags = libc::MSG_MORE | libc::MSG_OOB | libc::MSG_FASTOPEN | libc::MSG_ZEROCOPY;
    let bad_buffer = iov.iter().any(|v| v.iov_base.is_null() && v.iov_len > 0);
    if !plain && flags & special_flags == 0 && len <= max_payload(ipv6) && !bad_buffer {
        let parts: SmallVec<[&[u8]; 8]> = iov
            .iter()
            .filter(|v| v.iov_len > 0)
            // SAFETY: the program's buffers, non-null and valid for their lengths.
            .map(|v| unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) })
            .collect();
        let mut offer = record.offer(src, &parts, len, ipv6);
        if offer == Offer::Kernel && hold_for_ring(s, &record) {
            offer = record.offer(src, &parts, len, ipv6);
        }
        match offer {
            Offer::Delivered => return len as ssize_t,
            Offer::Dropped => {
                // A full queue is also what a receiver killed without closing leaves: ask
                // the kernel again soon whether that socket still exists.
                if let Ok(mut tx) = s.tx.lock() {
                    let soon =
                        super::coarse_ms().saturating_sub((RECHECK_FOUND - RECHECK_AFTER_DROP).as_millis() as u64);
                    if let Some(t) = tx.targets.get_mut(&dst) {
                        t.checked_ms = t.checked_ms.min(soon);
                    }
                }
                return len as ssize_t;
            }
            Offer::Kernel => {}
        }
    }
    // Through the kernel, after every ring datagram of ours (the receiver reads the ring first).
    while !record.begin_kernel_send() {
        std::thread::yield_now();
    }
    let r = kernel();
    let e = errno();
    record.end_kernel_send();
    set_errno(e);
    r
}

/// Before a kernel send to `record` in kernel mode: if its receiver wants the ring back
/// and reads the kernel queue (its wish moves), waits for it to take the ring (true: offer
/// the datagram again) rather than add to the queue it drains. A receiver that stops
/// draining, sleeps or closes ends the wait, and a wish waited for in vain is not waited
/// for again. Only where this thread may spin.
fn hold_for_ring(s: &UdpSock, record: &UdpRecord) -> bool {
    use std::sync::atomic::Ordering;
    let Some(mut wanted) = record.ring_wanted() else { return false };
    if s.ring_hold_refused.load(Ordering::Relaxed) == wanted || !crate::spin::allowed() {
        return false;
    }
    let started = std::time::Instant::now();
    let mut moved = started;
    loop {
        let state = record.state();
        if !state.kernel_mode() {
            return true;
        }
        if state.closed() || state.sleepers() > 0 {
            return false;
        }
        match record.ring_wanted() {
            // It took the ring (the word is checked again) or went to sleep.
            None => return !record.state().kernel_mode(),
            Some(w) if w != wanted => (wanted, moved) = (w, std::time::Instant::now()),
            Some(_) => {}
        }
        let now = std::time::Instant::now();
        if now - moved > RING_WANTED_STALL || now - started > RING_WANTED_HOLD {
            s.ring_hold_refused.store(wanted, Ordering::Relaxed);
            return false;
        }
        std::hint::spin_loop();
    }
}

/// sendmmsg: each message as one send; the count sent, or -1 if the first failed (as the
/// kernel answers).
///
/// # Safety
/// `msgs` valid for `n` entries, each as for sendmsg.
pub unsafe fn sendmmsg(
    s: &UdpSock,
    fd: c_int,
    msgs: *mut libc::mmsghdr,
    n: usize,
    flags: c_int,
    kernel: &mut dyn FnMut(*const libc::msghdr) -> ssize_t,
) -> c_int {
    let each = |_: usize, m: &mut libc::mmsghdr| {
        let h = &m.msg_hdr;
        // SAFETY: the caller's iovec array.
        let Some(iov) = (unsafe { crate::iov_slice(h.msg_iov, h.msg_iovlen as c_int) }) else {
            set_errno(libc::EINVAL);
            return Some((-1, true));
        };
        let hp = h as *const libc::msghdr;
        // SAFETY: the caller's message.
        let r = unsafe {
            send(s, fd, h.msg_name as *const sockaddr, h.msg_namelen, iov, flags, h.msg_controllen != 0, &mut || {
                kernel(hp)
            })
        };
        Some((r, false))
    };
    // SAFETY: the caller's array of n entries.
    let sent = unsafe { crate::mmsg::each_entry(msgs, n, each) };
    // Each entry is made here (never the kernel's batch).
    sent.unwrap_or(-1)
}
