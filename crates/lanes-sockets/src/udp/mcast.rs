//! Multicast on one host: a library sender puts a group's datagram into the rings of the
//! local members that carry the library and sends it through the kernel for everyone else
//! (other hosts), with the kernel's loopback to this host's members turned off for that
//! one send, so each member gets it once.
//!
//! That is only done when the sender knows every socket of this host the kernel would
//! deliver the datagram to, and every one of them has a live record in ring mode: the
//! kernel lists the sockets bound to the port (`sock_diag`), each record holds its
//! socket's memberships as the kernel keeps them (`MCAST_MSFILTER` for every group of
//! `/proc/net/igmp` and `igmp6`, read back after every membership change), and the delivery rule is the kernel's (`__udp_is_mcast_sock`,
//! `ip_mc_sf_allow`/`inet6_mc_check`: bound address, connected peer, bound device, the
//! membership of the group on the outgoing interface and its source filter, and
//! `IP_MULTICAST_ALL`). Any socket the sender cannot vouch for (no library, a record that
//! stays on the kernel, a membership it cannot read) sends the datagram through the
//! kernel, loopback as the program set it, after switching every known member's record
//! to kernel mode so each member still reads its ring first.

use rustc_hash::FxHashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use libc::{c_int, c_void, iovec, socklen_t, ssize_t};
use smallvec::SmallVec;

use lanes::platform::net::{interface_is_loopback, interface_of_address, udp_sockets_on_port, UdpSocketEntry};
use lanes::sockets::udp::{offer_to_all, travels_as_ipv6, Membership, Memberships, UdpRecord};

use super::{canonical, name_of, pin, UdpSock};
use crate::config::{config, wanted, Wanted};
use crate::real::{errno, set_errno};

/// How long a sender trusts what it found about a group's local members without asking
/// the kernel again. Library processes say at once when their sockets bind, join, leave,
/// connect or close; a socket of a process without the library that binds the group's
/// port in between misses the sender's datagrams for at most this long.
const RECHECK: Duration = Duration::from_millis(10);

const IPV6_MULTICAST_ALL: c_int = 29;

/// Whether `name` is one of the protocol-independent membership options (RFC 3678), whose
/// value holds the group as a socket address, at IPv4 and IPv6 level alike.
fn protocol_independent(name: c_int) -> bool {
    matches!(
        name,
        libc::MCAST_JOIN_GROUP
            | libc::MCAST_LEAVE_GROUP
            | libc::MCAST_JOIN_SOURCE_GROUP
            | libc::MCAST_LEAVE_SOURCE_GROUP
            | libc::MCAST_BLOCK_SOURCE
            | libc::MCAST_UNBLOCK_SOURCE
            | libc::MCAST_MSFILTER
    )
}

/// Whether `(level, name)` changes a socket's multicast memberships.
pub fn membership_option(level: c_int, name: c_int) -> bool {
    let mcast = protocol_independent(name);
    match level {
        libc::IPPROTO_IP => {
            mcast
                || matches!(
                    name,
                    libc::IP_ADD_MEMBERSHIP
                        | libc::IP_DROP_MEMBERSHIP
                        | libc::IP_ADD_SOURCE_MEMBERSHIP
                        | libc::IP_DROP_SOURCE_MEMBERSHIP
                        | libc::IP_BLOCK_SOURCE
                        | libc::IP_UNBLOCK_SOURCE
                        | libc::IP_MSFILTER
                )
        }
        libc::IPPROTO_IPV6 => mcast || matches!(name, libc::IPV6_ADD_MEMBERSHIP | libc::IPV6_DROP_MEMBERSHIP),
        _ => false,
    }
}

/// Options about sending multicast or the delivery rule that the library follows.
pub fn modelled_option(level: c_int, name: c_int) -> bool {
    match level {
        libc::IPPROTO_IP => matches!(
            name,
            libc::IP_MULTICAST_TTL | libc::IP_MULTICAST_LOOP | libc::IP_MULTICAST_IF | libc::IP_MULTICAST_ALL
        ),
        libc::IPPROTO_IPV6 => matches!(
            name,
            libc::IPV6_MULTICAST_HOPS | libc::IPV6_MULTICAST_LOOP | libc::IPV6_MULTICAST_IF | IPV6_MULTICAST_ALL
        ),
        _ => false,
    }
}

/// The group a membership option of `len` bytes at `val` names (the kernel accepted it).
///
/// # Safety
/// `val` is valid for `len` bytes.
unsafe fn group_of(level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> Option<IpAddr> {
    if val.is_null() {
        return None;
    }
    // SAFETY: the kernel accepted val as an option of len bytes.
    let bytes = unsafe { std::slice::from_raw_parts(val.cast::<u8>(), len as usize) };
    if protocol_independent(name) {
        // group_req, group_source_req, group_filter: the interface, then the group as a
        // sockaddr_storage (aligned to 8).
        let sa = bytes.get(8..)?;
        // SAFETY: sa holds what is left of the option.
        return unsafe { super::read_sockaddr(sa.as_ptr().cast(), sa.len() as socklen_t) }.map(|a| a.ip());
    }
    match level {
        libc::IPPROTO_IP => Some(IpAddr::V4(<[u8; 4]>::try_from(bytes.get(..4)?).ok()?.into())),
        _ => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(bytes.get(..16)?).ok()?))),
    }
}

/// `struct group_filter` with room for one more source than a record holds (so more
/// sources than that show).
#[repr(C)]
struct GroupFilter {
    interface: u32,
    group: libc::sockaddr_storage,
    fmode: u32,
    numsrc: u32,
    sources: [libc::sockaddr_storage; lanes::sockets::udp::MC_SOURCES + 1],
}

/// The kernel's membership of `group` for socket `fd` on interface `ifindex`: Ok(None)
/// when it has none, Err when it cannot be read.
fn kernel_membership(fd: c_int, family: c_int, group: IpAddr, ifindex: u32) -> Result<Option<Membership>, ()> {
    // SAFETY: all-zero is a valid group_filter.
    let mut gf: GroupFilter = unsafe { std::mem::zeroed() };
    gf.interface = ifindex;
    let (st, _) =
        super::sockaddr_for(if group.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 }, SocketAddr::new(group, 0));
    gf.group = st;
    gf.numsrc = (lanes::sockets::udp::MC_SOURCES + 1) as u32;
    let mut len = std::mem::size_of::<GroupFilter>() as socklen_t;
    let level = if family == libc::AF_INET { libc::IPPROTO_IP } else { libc::IPPROTO_IPV6 };
    // SAFETY: gf and len are valid for writes of the sizes given.
    let r =
        unsafe { libc::getsockopt(fd, level, libc::MCAST_MSFILTER, (&mut gf as *mut GroupFilter).cast(), &mut len) };
    if r != 0 {
        return if errno() == libc::EADDRNOTAVAIL || errno() == libc::ENODEV { Ok(None) } else { Err(()) };
    }
    let n = gf.numsrc as usize;
    if n > lanes::sockets::udp::MC_SOURCES {
        return Err(());
    }
    let mut sources = Vec::with_capacity(n);
    for st in &gf.sources[..n] {
        // SAFETY: the kernel wrote a socket address of its family into st.
        let a = unsafe {
            super::read_sockaddr((st as *const libc::sockaddr_storage).cast(), std::mem::size_of_val(st) as socklen_t)
        };
        sources.push(canonical(a.ok_or(())?).ip());
    }
    Ok(Some(Membership { group, ifindex, exclude: gf.fmode == libc::MCAST_EXCLUDE as u32, sources }))
}

fn int_option(fd: c_int, level: c_int, name: c_int) -> Option<c_int> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as socklen_t;
    // SAFETY: v and len are valid for writes.
    let r = unsafe { libc::getsockopt(fd, level, name, (&mut v as *mut c_int).cast(), &mut len) };
    (r == 0).then_some(v)
}

fn set_int_option(fd: c_int, level: c_int, name: c_int, v: c_int) -> bool {
    // SAFETY: v is an int, as the option takes.
    unsafe {
        libc::setsockopt(fd, level, name, (&v as *const c_int).cast(), std::mem::size_of::<c_int>() as socklen_t) == 0
    }
}

/// The groups joined on this host's interfaces (`/proc/net/igmp`, `/proc/net/igmp6`): a
/// socket's memberships are among them.
fn host_groups(ipv6: bool) -> Option<Vec<(u32, IpAddr)>> {
    if ipv6 {
        Some(parse_igmp6(&std::fs::read_to_string("/proc/net/igmp6").ok()?))
    } else {
        Some(parse_igmp(&std::fs::read_to_string("/proc/net/igmp").ok()?))
    }
}

/// `/proc/net/igmp`: a line per interface (`1\tlo        :     1      V3`), then a line per
/// group (`\t\t\t\t010000E0     1 0:00000000\t\t0`, the address as a hexadecimal number in
/// this host's byte order). Lines that are neither are skipped.
fn parse_igmp(text: &str) -> Vec<(u32, IpAddr)> {
    let mut out = Vec::new();
    let mut index = None;
    for l in text.lines().skip(1) {
        if !l.starts_with('\t') {
            index = l.split_whitespace().next().and_then(|i| i.parse::<u32>().ok());
            continue;
        }
        let (Some(index), Some(hex)) = (index, l.split_whitespace().next()) else { continue };
        let Ok(bits) = u32::from_str_radix(hex, 16) else { continue };
        out.push((index, IpAddr::V4(bits.to_ne_bytes().into())));
    }
    out
}

/// `/proc/net/igmp6`: `1    lo              ff020000000000000000000000000001     1 0000000C 0`.
fn parse_igmp6(text: &str) -> Vec<(u32, IpAddr)> {
    text.lines()
        .filter_map(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            let index = c.first()?.parse().ok()?;
            let hex = c.get(2).filter(|h| h.len() == 32)?;
            Some((index, IpAddr::V6(Ipv6Addr::from(u128::from_str_radix(hex, 16).ok()?))))
        })
        .collect()
}

/// The kernel's memberships of socket `fd` (every group joined on an interface of the
/// host, asked about) and its `IP_MULTICAST_ALL`; None if they cannot be read.
pub fn kernel_memberships(s: &UdpSock, fd: c_int) -> Option<Memberships> {
    let mut list = Vec::new();
    for (ifindex, group) in host_groups(s.family == libc::AF_INET6)? {
        if let Some(m) = kernel_membership(fd, s.family, group, ifindex).ok()? {
            list.push(m);
        }
    }
    let all = if s.family == libc::AF_INET {
        int_option(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_ALL)?
    } else {
        int_option(fd, libc::IPPROTO_IPV6, IPV6_MULTICAST_ALL)?
    };
    Some(Memberships { list, all: all != 0 })
}

/// A membership option or `IP_MULTICAST_ALL` succeeded in the kernel on `fd`: its record
/// (if it has one) takes the kernel's memberships, and every sender looks again. A
/// membership the library cannot hold or read keeps the socket on the kernel.
///
/// # Safety
/// `val` is valid for `len` bytes (or null).
pub unsafe fn option_set(s: &UdpSock, fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) {
    if membership_option(level, name) {
        let family_level = if s.family == libc::AF_INET { libc::IPPROTO_IP } else { libc::IPPROTO_IPV6 };
        // SAFETY: as guaranteed by the caller.
        let group = unsafe { group_of(level, name, val, len) };
        let Some(group) = group.map(|g| canonical(SocketAddr::new(g, 0)).ip()) else { return pin(s) };
        // An IPv4 membership of an IPv6 socket: not modelled.
        if level != family_level || group.is_ipv4() != (s.family == libc::AF_INET) {
            return pin(s);
        }
    }
    let interface = (level == libc::IPPROTO_IP && name == libc::IP_MULTICAST_IF)
        || (level == libc::IPPROTO_IPV6 && name == libc::IPV6_MULTICAST_IF);
    if interface {
        // SAFETY: as guaranteed by the caller.
        let chosen = unsafe { multicast_if(level, val, len) };
        if let Ok(mut m) = s.mc_if.lock() {
            *m = chosen;
        }
        super::tx::forget_targets(s);
    }
    let all = (level == libc::IPPROTO_IP && name == libc::IP_MULTICAST_ALL)
        || (level == libc::IPPROTO_IPV6 && name == IPV6_MULTICAST_ALL);
    if all || membership_option(level, name) {
        sync(s, fd);
    }
}

/// The interface a sender's `IP_MULTICAST_IF` (`IPV6_MULTICAST_IF`) chose, as the kernel
/// reads the option: its index (None: the route's).
///
/// # Safety
/// `val` is valid for `len` bytes (or null).
unsafe fn multicast_if(level: c_int, val: *const c_void, len: socklen_t) -> Option<u32> {
    if val.is_null() {
        return None;
    }
    // SAFETY: the kernel accepted val as an option of len bytes.
    let b = unsafe { std::slice::from_raw_parts(val.cast::<u8>(), len as usize) };
    let u32_at = |o: usize| b.get(o..o + 4).map(|x| u32::from_ne_bytes(x.try_into().expect("4 bytes")));
    if level == libc::IPPROTO_IPV6 {
        return u32_at(0).filter(|&i| i != 0);
    }
    // ip_mreqn (address at 4, index at 8), ip_mreq (address at 4) or an in_addr.
    let (addr, index) = if b.len() >= 12 {
        (b[4..8].try_into().ok()?, u32_at(8)?)
    } else if b.len() >= 8 {
        (b[4..8].try_into().ok()?, 0)
    } else {
        (b.get(..4)?.try_into().ok()?, 0)
    };
    if index != 0 {
        return Some(index);
    }
    let addr: [u8; 4] = addr;
    if addr == [0; 4] {
        return None;
    }
    interface_of_address(IpAddr::V4(addr.into()))
}

/// Writes the kernel's memberships of `fd` into its record and tells every sender.
pub fn sync(s: &UdpSock, fd: c_int) {
    if let Some(rec) = s.record() {
        match kernel_memberships(s, fd) {
            Some(m) if rec.set_memberships(&m).is_ok() => {}
            _ => pin(s),
        }
    }
    if let Some(e) = super::udp_binds() {
        e.bump();
    }
}

// ---- sending ------------------------------------------------------------------------------

/// What a sender knows about a group's members on this host.
pub struct GroupView {
    /// Every socket the kernel would deliver to is one of `members`, each with a live record.
    exact: bool,
    /// The members' records (all of them when `exact`; else those the sender knows about,
    /// switched to kernel mode before a kernel send so each reads its ring first).
    members: Vec<Arc<UdpRecord>>,
    epochs: Vec<u32>,
    /// Our source address as the kernel would give it.
    src: SocketAddr,
    /// When it was made ([`super::coarse_ms`]).
    checked_ms: u64,
    binds: u64,
}

impl GroupView {
    /// Whether the view must be made again: a bind or membership change since (`binds`), a
    /// member closed or readdressed, or older than `max_age`.
    fn stale(&self, binds: u64, max_age: Duration) -> bool {
        self.binds != binds
            || super::coarse_ms().saturating_sub(self.checked_ms) > max_age.as_millis() as u64
            || self.members.iter().zip(&self.epochs).any(|(r, e)| r.state().closed() || r.epoch() != *e)
    }
}

/// Makes the sender's view of `dst`'s members again.
fn refresh_view(s: &UdpSock, fd: c_int, dst: SocketAddr, tx: &mut super::tx::TxState) {
    match view(s, fd, dst, &mut tx.group_records) {
        Some(v) => {
            tx.groups.insert(dst, v);
        }
        None => {
            // Nothing to be sure of (no address, no route): the kernel for all, and the
            // members known before still read their rings first.
            if let Some(old) = tx.groups.get_mut(&dst) {
                old.exact = false;
                old.checked_ms = super::coarse_ms();
            }
        }
    }
}

/// The source address the kernel gives a datagram to `group` from a socket bound to the
/// wildcard address, with the sender's `IP_MULTICAST_IF`: a throwaway socket with the same
/// choice, connected to the group, shows it.
fn route_source(s: &UdpSock, fd: c_int, group: IpAddr) -> Option<IpAddr> {
    let family = if group.is_ipv4() { libc::AF_INET } else { libc::AF_INET6 };
    // SAFETY: plain socket creation.
    let probe = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if probe < 0 {
        return None;
    }
    let result = (|| {
        let (level, name) = if family == libc::AF_INET {
            (libc::IPPROTO_IP, libc::IP_MULTICAST_IF)
        } else {
            (libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_IF)
        };
        if family == libc::AF_INET {
            // The sender's choice as the kernel keeps it (mc_addr, and mc_index by its own
            // record of the option).
            let mut addr = [0u8; 4];
            let mut len = 4 as socklen_t;
            // SAFETY: addr and len are valid for writes.
            if unsafe { libc::getsockopt(fd, level, name, addr.as_mut_ptr().cast(), &mut len) } != 0 {
                return None;
            }
            let index = s.mc_if.lock().ok().and_then(|m| *m).unwrap_or(0);
            let mut mreqn = [0u8; 12];
            mreqn[4..8].copy_from_slice(&addr);
            mreqn[8..12].copy_from_slice(&index.to_ne_bytes());
            if index != 0 || addr != [0; 4] {
                // SAFETY: mreqn is an ip_mreqn of 12 bytes.
                if unsafe { libc::setsockopt(probe, level, name, mreqn.as_ptr().cast(), 12) } != 0 {
                    return None;
                }
            }
        } else {
            let index = int_option(fd, level, name)?;
            if index != 0 && !set_int_option(probe, level, name, index) {
                return None;
            }
        }
        let (st, len) = super::sockaddr_for(family, SocketAddr::new(group, 9));
        // SAFETY: st holds a socket address of len bytes; probe is ours.
        if unsafe { libc::connect(probe, (&st as *const libc::sockaddr_storage).cast(), len) } != 0 {
            return None;
        }
        name_of(probe, false).map(|a| canonical(a).ip())
    })();
    // SAFETY: probe is ours.
    unsafe { libc::close(probe) };
    result
}

/// Whether socket `e` of this host is one the kernel would consider for a datagram from
/// `src` to `dst` leaving through `out_if` (`__udp_is_mcast_sock` before the membership
/// check); None: it cannot tell (an IPv6 socket that may take IPv4).
fn considered(e: &UdpSocketEntry, src: SocketAddr, dst: SocketAddr, out_if: u32) -> Option<bool> {
    let local = canonical(e.local);
    let v6_socket = e.family == libc::AF_INET6 as u8;
    if dst.is_ipv4() && v6_socket && (e.local.ip().is_unspecified() || local.ip() == dst.ip()) {
        return None; // dual stack unless IPV6_V6ONLY, which the dump does not show
    }
    if dst.is_ipv4() == v6_socket {
        return Some(false);
    }
    if !(local.ip().is_unspecified() || local.ip() == dst.ip()) {
        return Some(false);
    }
    if e.remote.port() != 0 && canonical(e.remote) != src {
        return Some(false);
    }
    Some(e.bound_dev == 0 || e.bound_dev == out_if)
}

/// Finds the local members of `dst` for datagrams from `fd`.
fn view(s: &UdpSock, fd: c_int, dst: SocketAddr, records: &mut FxHashMap<u64, Arc<UdpRecord>>) -> Option<GroupView> {
    let binds = super::udp_binds().map_or(0, |e| e.get());
    let local = canonical(super::tx::local_address(s, fd)?);
    let src_ip = if local.ip().is_unspecified() { route_source(s, fd, dst.ip())? } else { local.ip() };
    let src = SocketAddr::new(src_ip, local.port());
    let chosen_if = s.mc_if.lock().ok().and_then(|m| *m);
    let mut view =
        GroupView { exact: false, members: Vec::new(), epochs: Vec::new(), src, checked_ms: super::coarse_ms(), binds };
    let Some(out_if) = chosen_if.or_else(|| interface_of_address(src_ip)) else { return Some(view) };
    if interface_is_loopback(out_if) {
        // What goes out of a loopback device comes back in with the loopback option off
        // too: its members always get the kernel's copy.
        return Some(view);
    }

    // The members are on this host: only the port lists (`LANES_SOCKETS_INCLUDE`,
    // `_EXCLUDE`) can leave the group out.
    if wanted(src, SocketAddr::new(src.ip(), dst.port())) != Wanted::Yes || crate::sandbox::filtered() {
        return Some(view);
    }
    // No socket with the library ever had a record on the group's port: no member to find.
    if super::udp_binds().is_some_and(|b| !b.port_marked(dst.port())) {
        return Some(view);
    }
    let Some(sockets) = udp_sockets_on_port(dst.port()) else { return Some(view) };
    let cfg = config();
    let mut exact = true;
    // (record, its membership of the group on the interface admits us, it has one)
    let mut found: Vec<(Arc<UdpRecord>, Option<bool>, bool)> = Vec::new();
    let mut seen = Vec::new();
    for e in &sockets {
        match considered(e, src, dst, out_if) {
            Some(false) => continue,
            None => {
                exact = false;
                continue;
            }
            Some(true) => {}
        }
        seen.push(e.cookie);
        let rec = match records.get(&e.cookie) {
            Some(r) => Some(r.clone()),
            None => UdpRecord::open(&cfg.fabric_dir, cfg.netns, e.cookie).ok().map(Arc::new),
        };
        let Some(rec) = rec.filter(|r| !r.state().closed() && !r.holders().is_empty()) else {
            exact = false;
            continue;
        };
        records.insert(e.cookie, rec.clone());
        let Some(m) = rec.memberships() else {
            exact = false;
            continue;
        };
        let admits = m.of(dst.ip(), out_if).map(|ms| ms.admits(src_ip));
        found.push((rec, admits, m.all));
    }
    records.retain(|c, _| seen.contains(c));
    // The kernel loops the datagram back only when the interface's membership admits the
    // source; without one it is known to, a socket that did not join itself (and gets the
    // group's datagrams through IP_MULTICAST_ALL) cannot be judged.
    let admitted = found.iter().any(|(_, a, _)| *a == Some(true));
    let mut members = Vec::new();
    for (rec, admits, all) in &found {
        match admits {
            Some(true) => members.push(rec.clone()),
            Some(false) => {}
            None if !all => {}
            None if admitted => members.push(rec.clone()),
            None => exact = false,
        }
    }
    view.exact = exact && admitted;
    if !view.exact {
        // Each of them may get the kernel's copy: all read their rings first.
        members = found.into_iter().map(|(r, _, _)| r).collect();
    }
    view.epochs = members.iter().map(|r| r.epoch()).collect();
    view.members = members;
    Some(view)
}

/// Whether the socket's multicast datagrams loop back to this host's members
/// (`IP_MULTICAST_LOOP`, `IPV6_MULTICAST_LOOP`).
fn looping(fd: c_int, ipv6_socket: bool) -> Option<bool> {
    let (level, name) = if ipv6_socket {
        (libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_LOOP)
    } else {
        (libc::IPPROTO_IP, libc::IP_MULTICAST_LOOP)
    };
    let mut v = [0u8; 4];
    let mut len = 4 as socklen_t;
    // SAFETY: v and len are valid for writes.
    let r = unsafe { libc::getsockopt(fd, level, name, v.as_mut_ptr().cast(), &mut len) };
    (r == 0).then(|| v[..len as usize].iter().any(|&b| b != 0))
}

/// Sends a datagram to the multicast group `dst` from `fd` (see the module's text).
///
/// # Safety
/// `iov` holds the program's valid buffers.
pub unsafe fn send(
    s: &UdpSock,
    fd: c_int,
    dst: SocketAddr,
    iov: &[iovec],
    flags: c_int,
    plain: bool,
    kernel: &mut dyn FnMut() -> ssize_t,
) -> ssize_t {
    let ipv6_socket = s.family == libc::AF_INET6;
    if !looping(fd, ipv6_socket).unwrap_or(true) {
        // Nobody on this host gets it but members on a loopback device it leaves by, from
        // that device: the kernel's send is the whole story.
        return kernel();
    }
    let binds = super::udp_binds().map_or(0, |e| e.get());
    let Ok(mut tx) = s.tx.lock() else { return kernel() };
    let tx = &mut *tx;
    if tx.groups.get(&dst).is_none_or(|v| v.stale(binds, RECHECK)) {
        refresh_view(s, fd, dst, tx);
    }
    let Some(v) = tx.groups.get(&dst) else { return kernel() };
    // SAFETY: as guaranteed by the caller.
    let r = unsafe { send_by_view(v, fd, dst, iov, flags, plain, ipv6_socket, kernel) };
    // The periodic look again (for what no counter tells: sockets without the library) is
    // made after the send once the view is half its age limit, so a steady sender's
    // datagrams never wait for it (it took hundreds of microseconds, a hundredth of the
    // datagrams of a sender every 200 us); a view is never used older than the limit.
    if tx.groups.get(&dst).is_some_and(|v| v.stale(binds, RECHECK / 2)) {
        let e = errno();
        refresh_view(s, fd, dst, tx);
        set_errno(e);
    }
    r
}

/// [`send`] to the members `v` names.
///
/// # Safety
/// As for [`send`].
#[allow(clippy::too_many_arguments)]
unsafe fn send_by_view(
    v: &GroupView,
    fd: c_int,
    dst: SocketAddr,
    iov: &[iovec],
    flags: c_int,
    plain: bool,
    ipv6_socket: bool,
    kernel: &mut dyn FnMut() -> ssize_t,
) -> ssize_t {
    let len = crate::stream::iov_len(iov);
    let special_flags = libc::MSG_MORE | libc::MSG_OOB | libc::MSG_FASTOPEN | libc::MSG_ZEROCOPY;
    let bad_buffer = iov.iter().any(|b| b.iov_base.is_null() && b.iov_len > 0);
    let max = if travels_as_ipv6(dst.ip()) { 65527 } else { 65507 };
    // A member whose ring is off (asleep, most often) sends everything through the kernel:
    // seen before the loopback is touched, it costs no system call.
    let rings_on = v.members.iter().all(|m| !m.state().kernel_mode());
    if v.exact && rings_on && !v.members.is_empty() && !plain && flags & special_flags == 0 && len <= max && !bad_buffer
    {
        let parts: SmallVec<[&[u8]; 8]> = iov
            .iter()
            .filter(|b| b.iov_len > 0)
            // SAFETY: the program's buffers, non-null and valid for their lengths.
            .map(|b| unsafe { std::slice::from_raw_parts(b.iov_base as *const u8, b.iov_len) })
            .collect();
        let members: SmallVec<[&UdpRecord; 8]> = v.members.iter().map(|r| &**r).collect();
        let (level, name) = if ipv6_socket {
            (libc::IPPROTO_IPV6, libc::IPV6_MULTICAST_LOOP)
        } else {
            (libc::IPPROTO_IP, libc::IP_MULTICAST_LOOP)
        };
        // The kernel's copy goes to other hosts only once every member has it from its ring.
        if set_int_option(fd, level, name, 0) {
            if offer_to_all(&members, v.src, &parts, len, travels_as_ipv6(dst.ip())).is_some() {
                let r = kernel();
                let e = errno();
                set_int_option(fd, level, name, 1);
                set_errno(e);
                return r;
            }
            set_int_option(fd, level, name, 1);
        }
    }
    // Through the kernel to every member, after every ring datagram of ours.
    for r in &v.members {
        while !r.begin_kernel_send() {
            std::thread::yield_now();
        }
    }
    let r = kernel();
    let e = errno();
    for m in &v.members {
        m.end_kernel_send();
    }
    set_errno(e);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_group_lists_are_read_and_junk_is_skipped() {
        let igmp = "Idx\tDevice    : Count Querier\tGroup    Users Timer\tReporter\n\
                    1\tlo        :     1      V3\n\
                    \t\t\t\t010000E0     1 0:00000000\t\t0\n\
                    4\teth0      :     2      V3\n\
                    \t\t\t\t012AFFEF     1 0:00000000\t\t0\n\
                    \t\t\t\tnothex     1 0:00000000\t\t0\n";
        let want_lo = IpAddr::V4(u32::from_str_radix("010000E0", 16).unwrap().to_ne_bytes().into());
        let got = parse_igmp(igmp);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got[0], (1, want_lo));
        assert_eq!(got[1].0, 4);
        let igmp6 = "1    lo              ff020000000000000000000000000001     1 0000000C 0\n\
                     4    eth0            ff15000000000000000000004c616e65     1 00000004 0\n\
                     x    eth0            ff15000000000000000000004c616e65     1 00000004 0\n\
                     4    eth0            ff15                                 1 00000004 0\n";
        assert_eq!(parse_igmp6(igmp6), vec![(1, "ff02::1".parse().unwrap()), (4, "ff15::4c61:6e65".parse().unwrap())]);
    }

    #[test]
    fn the_group_of_each_membership_option_is_where_the_kernel_reads_it() {
        let mreq = [239u8, 1, 2, 3, 0, 0, 0, 0];
        // SAFETY: the buffers are valid for the lengths given.
        unsafe {
            assert_eq!(
                group_of(libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, mreq.as_ptr().cast(), 8),
                Some("239.1.2.3".parse().unwrap())
            );
            let v6: Ipv6Addr = "ff15::1".parse().unwrap();
            assert_eq!(
                group_of(libc::IPPROTO_IPV6, libc::IPV6_ADD_MEMBERSHIP, v6.octets().as_ptr().cast(), 20),
                Some(IpAddr::V6(v6))
            );
            let mut req = [0u8; 8 + 128];
            let (st, len) = super::super::sockaddr_for(libc::AF_INET, "239.9.9.9:0".parse().unwrap());
            std::ptr::copy_nonoverlapping(
                (&st as *const libc::sockaddr_storage).cast::<u8>(),
                req[8..].as_mut_ptr(),
                len as usize,
            );
            assert_eq!(
                group_of(libc::IPPROTO_IP, libc::MCAST_JOIN_GROUP, req.as_ptr().cast(), req.len() as socklen_t),
                Some("239.9.9.9".parse().unwrap())
            );
            assert_eq!(group_of(libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, mreq.as_ptr().cast(), 3), None);
        }
    }
}
