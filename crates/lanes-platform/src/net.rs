//! What the kernel vouches for about sockets and addresses: the TCP socket with given
//! addresses and its cookie (`NETLINK_SOCK_DIAG`), a socket's own cookie (`SO_COOKIE`), who is
//! at the other end of a Unix socket (`SO_PEERCRED`), whether a process holds a socket (its
//! `/proc/<pid>/fd`), every UDP socket bound to a port (a `NETLINK_SOCK_DIAG` dump), and
//! this network namespace's interfaces and their addresses (`getifaddrs`).
//!
//! The socket accelerator trusts a record in the fabric directory only when the kernel
//! confirms the socket it describes (one host), and the cluster daemon registers a
//! cross-host socket half only for the process that holds it (across hosts).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

const SOCK_DIAG_BY_FAMILY: u16 = 20;
const SO_COOKIE: libc::c_int = 57;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct InetDiagSockId {
    sport: u16,
    dport: u16,
    src: [u32; 4],
    dst: [u32; 4],
    interface: u32,
    cookie: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct InetDiagReqV2 {
    family: u8,
    protocol: u8,
    ext: u8,
    pad: u8,
    states: u32,
    id: InetDiagSockId,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Request {
    header: libc::nlmsghdr,
    body: InetDiagReqV2,
}

impl Request {
    /// A request about the `protocol` sockets of `family` in any state, with the netlink
    /// `flags` (`NLM_F_REQUEST` and more).
    fn new(family: libc::c_int, protocol: libc::c_int, flags: libc::c_int) -> Request {
        let mut req = Request {
            header: libc::nlmsghdr { nlmsg_len: 0, nlmsg_type: 0, nlmsg_flags: 0, nlmsg_seq: 0, nlmsg_pid: 0 },
            body: InetDiagReqV2::default(),
        };
        req.header.nlmsg_len = std::mem::size_of::<Request>() as u32;
        req.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
        req.header.nlmsg_flags = flags as u16;
        req.body.family = family as u8;
        req.body.protocol = protocol as u8;
        req.body.states = !0;
        req
    }

    /// Sends the request on a sock_diag socket of its own and gives that socket to `answer`
    /// to read the kernel's reply from; the socket is closed after.
    fn ask<T>(&self, answer: impl FnOnce(libc::c_int) -> Option<T>) -> Option<T> {
        // SAFETY: plain socket creation.
        let fd =
            unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, libc::NETLINK_SOCK_DIAG) };
        if fd < 0 {
            return None;
        }
        // SAFETY: self is a plain repr(C) value of the stated length.
        let sent = unsafe { libc::send(fd, (self as *const Request).cast(), std::mem::size_of::<Request>(), 0) };
        let result = if sent < 0 { None } else { answer(fd) };
        // SAFETY: fd is ours. In the preloaded library the recursion guard makes this the
        // C library's own close.
        unsafe { libc::close(fd) };
        result
    }
}

#[repr(C)]
#[derive(Clone, Copy)]
struct InetDiagMsg {
    family: u8,
    state: u8,
    timer: u8,
    retrans: u8,
    id: InetDiagSockId,
    expires: u32,
    rqueue: u32,
    wqueue: u32,
    uid: u32,
    inode: u32,
}

/// A TCP or UDP socket as `NETLINK_SOCK_DIAG` describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockInfo {
    /// The kernel's cookie: unique per socket for the life of the system.
    pub cookie: u64,
    /// The inode of the socket's file; 0 once no descriptor refers to it (an orphan closing
    /// down, a TIME_WAIT entry).
    pub inode: u32,
    /// The socket's owner.
    pub uid: u32,
    /// The TCP state (`TCP_ESTABLISHED` is 1); UDP: 7 unconnected, 1 connected.
    pub state: u8,
}

/// `TCP_ESTABLISHED` of the kernel's TCP states.
pub const TCP_ESTABLISHED: u8 = 1;

fn put_addr(dst: &mut [u32; 4], ip: IpAddr) {
    let bytes: [u8; 16] = match ip {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&v4.octets());
            b
        }
        IpAddr::V6(v6) => v6.octets(),
    };
    for (i, w) in dst.iter_mut().enumerate() {
        *w = u32::from_ne_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4 bytes"));
    }
}

/// The TCP socket of this network namespace whose local address is `local` and peer
/// `remote`, or None if the kernel knows no such socket. Both addresses must be of one
/// family (IPv4-mapped IPv6 addresses as IPv4, as sockets report them).
pub fn tcp_socket(local: SocketAddr, remote: SocketAddr) -> Option<SockInfo> {
    diag_lookup(libc::IPPROTO_TCP, local, remote)
}

/// The UDP socket of this network namespace that the kernel would deliver a datagram from
/// `src` to `dst` to (its own lookup: bound address, connected peer, `SO_REUSEPORT` group),
/// or None if there is none. Both addresses of one family, IPv4-mapped ones as IPv4; the
/// socket found may be an IPv6 one bound to `::` that takes IPv4 too.
pub fn udp_receiver(src: SocketAddr, dst: SocketAddr) -> Option<SockInfo> {
    // The kernel's UDP lookup by sock_diag takes the request's source as the packet's
    // source and its destination as the packet's destination (udp_dump_one).
    diag_lookup(libc::IPPROTO_UDP, src, dst)
}

fn diag_lookup(protocol: libc::c_int, local: SocketAddr, remote: SocketAddr) -> Option<SockInfo> {
    let family = match local {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    let mut req = Request::new(family, protocol, libc::NLM_F_REQUEST);
    req.body.id.sport = local.port().to_be();
    req.body.id.dport = remote.port().to_be();
    put_addr(&mut req.body.id.src, local.ip());
    put_addr(&mut req.body.id.dst, remote.ip());
    req.body.id.cookie = [!0, !0];
    req.ask(|fd| {
        let mut buf = [0u8; 1024];
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
        let hdr_len = std::mem::size_of::<libc::nlmsghdr>();
        if n < (hdr_len + std::mem::size_of::<InetDiagMsg>()) as isize {
            return None;
        }
        // SAFETY: buf holds at least a header; read_unaligned copes with alignment.
        let hdr: libc::nlmsghdr = unsafe { std::ptr::read_unaligned(buf.as_ptr().cast()) };
        if hdr.nlmsg_type != SOCK_DIAG_BY_FAMILY {
            return None; // NLMSG_ERROR: no such socket
        }
        // SAFETY: n covers the header and one message, checked above.
        let msg: InetDiagMsg = unsafe { std::ptr::read_unaligned(buf.as_ptr().add(hdr_len).cast()) };
        Some(SockInfo {
            cookie: msg.id.cookie[0] as u64 | (msg.id.cookie[1] as u64) << 32,
            inode: msg.inode,
            uid: msg.uid,
            state: msg.state,
        })
    })
}

/// A UDP socket as a `NETLINK_SOCK_DIAG` dump lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpSocketEntry {
    /// AF_INET or AF_INET6.
    pub family: u8,
    /// Its bound address (IPv4-mapped IPv6 addresses as the kernel keeps them).
    pub local: SocketAddr,
    /// Its connected peer (port 0: not connected).
    pub remote: SocketAddr,
    /// The device it is bound to (`SO_BINDTODEVICE`), 0 for none.
    pub bound_dev: u32,
    pub cookie: u64,
}

fn get_addr(family: u8, words: &[u32; 4], port: u16) -> SocketAddr {
    let mut b = [0u8; 16];
    for (i, w) in words.iter().enumerate() {
        b[4 * i..4 * i + 4].copy_from_slice(&w.to_ne_bytes());
    }
    let port = u16::from_be(port);
    if family == libc::AF_INET as u8 {
        SocketAddr::new(IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3])), port)
    } else {
        SocketAddr::new(IpAddr::V6(Ipv6Addr::from(b)), port)
    }
}

/// Every UDP socket of this network namespace bound to local port `port` (both families),
/// as the kernel lists them; None if the kernel could not be asked.
pub fn udp_sockets_on_port(port: u16) -> Option<Vec<UdpSocketEntry>> {
    let mut out = Vec::new();
    for family in [libc::AF_INET, libc::AF_INET6] {
        udp_dump(family, port, &mut out)?;
    }
    Some(out)
}

fn udp_dump(family: libc::c_int, port: u16, out: &mut Vec<UdpSocketEntry>) -> Option<()> {
    Request::new(family, libc::IPPROTO_UDP, libc::NLM_F_REQUEST | libc::NLM_F_DUMP).ask(|fd| {
        let hdr_len = std::mem::size_of::<libc::nlmsghdr>();
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            // SAFETY: buf is writable for its length.
            let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n <= 0 {
                return None;
            }
            let n = n as usize;
            let mut at = 0;
            while at + hdr_len <= n {
                // SAFETY: at + hdr_len <= n bytes of buf were written; read_unaligned copes
                // with alignment.
                let hdr: libc::nlmsghdr = unsafe { std::ptr::read_unaligned(buf.as_ptr().add(at).cast()) };
                let len = hdr.nlmsg_len as usize;
                if len < hdr_len || at + len > n {
                    return None;
                }
                match hdr.nlmsg_type as libc::c_int {
                    libc::NLMSG_DONE => return Some(()),
                    libc::NLMSG_ERROR => return None,
                    _ if hdr.nlmsg_type == SOCK_DIAG_BY_FAMILY
                        && len >= hdr_len + std::mem::size_of::<InetDiagMsg>() =>
                    {
                        // SAFETY: the message holds an inet_diag_msg (length checked).
                        let msg: InetDiagMsg =
                            unsafe { std::ptr::read_unaligned(buf.as_ptr().add(at + hdr_len).cast()) };
                        if u16::from_be(msg.id.sport) == port {
                            out.push(UdpSocketEntry {
                                family: msg.family,
                                local: get_addr(msg.family, &msg.id.src, msg.id.sport),
                                remote: get_addr(msg.family, &msg.id.dst, msg.id.dport),
                                bound_dev: msg.id.interface,
                                cookie: msg.id.cookie[0] as u64 | (msg.id.cookie[1] as u64) << 32,
                            });
                        }
                    }
                    _ => {}
                }
                at += len.div_ceil(4) * 4;
            }
        }
    })
}

/// The index of the interface that has address `ip`, if exactly one has it.
pub fn interface_of_address(ip: IpAddr) -> Option<u32> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut found: Vec<u32> = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() && ifaddr_ip(ifa.ifa_addr) == Some(ip) {
            // SAFETY: ifa_name is the interface's NUL-terminated name.
            let index = unsafe { libc::if_nametoindex(ifa.ifa_name) };
            if index != 0 && !found.contains(&index) {
                found.push(index);
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    (found.len() == 1).then(|| found[0])
}

/// Whether interface `index` is a loopback device (what it sends comes back in as received
/// by it); unknown counts as yes.
pub fn interface_is_loopback(index: u32) -> bool {
    let flags = std::fs::read_to_string(format!("/sys/class/net/{}/flags", interface_name(index)));
    let flags = flags.ok().and_then(|f| u32::from_str_radix(f.trim().trim_start_matches("0x"), 16).ok());
    flags.is_none_or(|f| f & libc::IFF_LOOPBACK as u32 != 0)
}

/// The name of interface `index` (its number if it has none).
pub fn interface_name(index: u32) -> String {
    let mut buf = [0 as libc::c_char; libc::IF_NAMESIZE];
    // SAFETY: buf has IF_NAMESIZE bytes, as if_indextoname needs.
    let r = unsafe { libc::if_indextoname(index, buf.as_mut_ptr()) };
    if r.is_null() {
        return index.to_string();
    }
    // SAFETY: if_indextoname wrote a NUL-terminated name into buf.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

fn ifaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    // SAFETY: sa points at a sockaddr whose family says how long it is.
    let family = unsafe { (*sa).sa_family } as libc::c_int;
    match family {
        libc::AF_INET => {
            // SAFETY: the family says this is a sockaddr_in.
            let a: libc::sockaddr_in = unsafe { std::ptr::read_unaligned(sa.cast()) };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this is a sockaddr_in6.
            let a: libc::sockaddr_in6 = unsafe { std::ptr::read_unaligned(sa.cast()) };
            Some(IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

/// The cookie of our own socket `fd`.
pub fn own_cookie(fd: libc::c_int) -> Option<u64> {
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: cookie and len are valid for writes of the sizes given.
    let r = unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, SO_COOKIE, (&mut cookie as *mut u64).cast(), &mut len) };
    (r == 0).then_some(cookie)
}

/// The inode of this process's network namespace.
pub fn netns_inode() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/net").map(|m| m.ino()).unwrap_or(0)
}

/// Who connected the Unix socket `fd` (`SO_PEERCRED`): pid, uid and gid as of its connect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

/// The credentials of the process at the other end of the Unix socket `fd`.
pub fn peer_cred(fd: libc::c_int) -> io::Result<PeerCred> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, (&mut cred as *mut libc::ucred).cast(), &mut len)
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    if cred.pid <= 0 {
        // A peer in another pid namespace is reported as pid 0: nothing to check it by.
        return Err(io::Error::new(io::ErrorKind::PermissionDenied, "the peer's pid is not visible here"));
    }
    Ok(PeerCred { pid: cred.pid as u32, uid: cred.uid, gid: cred.gid })
}

/// Whether process `pid` has a descriptor of the socket whose inode is `inode` (one of its
/// `/proc/<pid>/fd` links reads `socket:[inode]`). Needs the right to read the process's
/// descriptors (the same user, and a process that did not make itself undumpable).
pub fn process_holds_socket(pid: u32, inode: u32) -> io::Result<bool> {
    let want = format!("socket:[{inode}]");
    for e in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let Ok(e) = e else { continue };
        if std::fs::read_link(e.path()).is_ok_and(|l| l.as_os_str() == want.as_str()) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether an address may name one host of a cluster: not loopback, unspecified, multicast
/// or link-local (a link-local address is unique on its link only; two hosts may well have
/// the same one on different links).
pub fn is_host_address(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => !(v4.is_loopback() || v4.is_unspecified() || v4.is_multicast() || v4.is_link_local()),
        IpAddr::V6(v6) => {
            let link_local = (v6.segments()[0] & 0xffc0) == 0xfe80;
            !(v6.is_loopback() || v6.is_unspecified() || v6.is_multicast() || link_local)
                && v6.to_ipv4_mapped().is_none()
        }
    }
}

/// The addresses of this network namespace's interfaces that may name this host
/// ([`is_host_address`]), sorted, without duplicates.
pub fn host_addresses() -> io::Result<Vec<IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned, not yet freed.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            if let Some(ip) = ifaddr_ip(ifa.ifa_addr).filter(|ip| is_host_address(*ip)) {
                out.push(ip);
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: head came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out.sort();
    out.dedup();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    #[test]
    fn a_dump_lists_every_udp_socket_on_a_port() {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = a.local_addr().unwrap().port();
        let b = std::net::UdpSocket::bind(("::1", port)).unwrap();
        b.connect(("::1", 9)).unwrap();
        let mut got = udp_sockets_on_port(port).expect("the kernel answers");
        got.sort_by_key(|e| e.family);
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(
            (got[0].local, got[0].remote.port(), got[0].cookie),
            (a.local_addr().unwrap(), 0, own_cookie(a.as_raw_fd()).unwrap())
        );
        assert_eq!((got[1].local, got[1].remote), (b.local_addr().unwrap(), "[::1]:9".parse().unwrap()));
        assert_eq!(interface_of_address("127.0.0.1".parse().unwrap()), Some(1), "lo");
        assert_eq!(interface_name(1), "lo");
        assert!(interface_is_loopback(1));
        assert!(interface_is_loopback(u32::MAX), "an interface that is not there");
    }

    #[test]
    fn the_kernel_describes_a_connected_socket() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        let info = tcp_socket(c.local_addr().unwrap(), c.peer_addr().unwrap()).expect("the client's socket");
        assert_eq!(Some(info.cookie), own_cookie(c.as_raw_fd()));
        assert_eq!(info.state, TCP_ESTABLISHED);
        // SAFETY: geteuid has no preconditions.
        assert_eq!(info.uid, unsafe { libc::geteuid() });
        assert!(process_holds_socket(std::process::id(), info.inode).unwrap());
        let other = tcp_socket(s.local_addr().unwrap(), s.peer_addr().unwrap()).unwrap();
        assert_ne!(other.cookie, info.cookie);
        let nobody: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(tcp_socket(c.local_addr().unwrap(), nobody), None);
    }

    /// The UDP lookup is the kernel's delivery decision: the bound socket for anyone, a
    /// connected one only for its peer, a dual-stack one for IPv4 senders.
    #[test]
    fn the_kernel_names_the_udp_socket_a_datagram_would_reach() {
        use std::net::UdpSocket;
        let r = UdpSocket::bind("127.0.0.1:0").unwrap();
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (to, from, stranger) = (r.local_addr().unwrap(), s.local_addr().unwrap(), other.local_addr().unwrap());
        let found = udp_receiver(from, to).expect("the bound socket");
        assert_eq!(Some(found.cookie), own_cookie(r.as_raw_fd()));
        assert_eq!(udp_receiver(stranger, to).map(|i| i.cookie), Some(found.cookie));
        r.connect(from).unwrap();
        assert_eq!(udp_receiver(from, to).map(|i| i.cookie), Some(found.cookie));
        assert_eq!(udp_receiver(stranger, to), None, "a connected socket takes nothing from others");
        let nobody: SocketAddr = "127.0.0.1:1".parse().unwrap();
        assert_eq!(udp_receiver(from, nobody), None);
        let Ok(dual) = UdpSocket::bind("[::]:0") else { return }; // no IPv6 here
        let port = dual.local_addr().unwrap().port();
        let v4: SocketAddr = SocketAddr::new(Ipv4Addr::LOCALHOST.into(), port);
        assert_eq!(udp_receiver(from, v4).map(|i| i.cookie), own_cookie(dual.as_raw_fd()));
    }

    /// A dual-stack listener's socket for an IPv4 client has IPv4-mapped addresses; asked
    /// by its IPv4 addresses (as records key it), the kernel finds it all the same.
    #[test]
    fn a_dual_stack_socket_is_found_by_its_ipv4_addresses() {
        let Ok(l) = TcpListener::bind("[::]:0") else { return }; // no IPv6 here
        let port = l.local_addr().unwrap().port();
        let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (s, _) = l.accept().unwrap();
        let mapped = s.local_addr().unwrap();
        assert!(matches!(mapped, SocketAddr::V6(v6) if v6.ip().to_ipv4_mapped().is_some()), "{mapped}");
        let info = tcp_socket(c.peer_addr().unwrap(), c.local_addr().unwrap()).expect("found as IPv4");
        assert_eq!(Some(info.cookie), own_cookie(s.as_raw_fd()));
    }

    #[test]
    fn peer_credentials_and_host_addresses() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let cred = peer_cred(a.as_raw_fd()).unwrap();
        assert_eq!(cred.pid, std::process::id());
        for ip in host_addresses().unwrap() {
            assert!(is_host_address(ip), "{ip}");
        }
        for (ip, host) in [
            ("127.0.0.1", false),
            ("0.0.0.0", false),
            ("169.254.3.4", false),
            ("224.0.0.1", false),
            ("::1", false),
            ("fe80::1", false),
            ("::ffff:10.0.0.1", false),
            ("10.77.0.1", true),
            ("fd77::1", true),
        ] {
            assert_eq!(is_host_address(ip.parse().unwrap()), host, "{ip}");
        }
    }
}
