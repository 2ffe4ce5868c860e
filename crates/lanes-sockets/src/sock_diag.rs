//! Asking the kernel which socket has given addresses (`NETLINK_SOCK_DIAG`), so a record in
//! the fabric directory is trusted only when the kernel confirms that the socket it claims
//! to describe exists, with its cookie, at the other end of our connection.

use std::net::{IpAddr, SocketAddr};

use lanes::sockets::ConnectionKey;

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

/// The cookie of the TCP socket whose local address is `key.local` and peer `key.remote`,
/// or None if the kernel knows no such socket.
pub fn cookie_of(key: &ConnectionKey) -> Option<u64> {
    let family = match key.local {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    let mut req = Request {
        header: libc::nlmsghdr { nlmsg_len: 0, nlmsg_type: 0, nlmsg_flags: 0, nlmsg_seq: 0, nlmsg_pid: 0 },
        body: InetDiagReqV2::default(),
    };
    req.header.nlmsg_len = std::mem::size_of::<Request>() as u32;
    req.header.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.header.nlmsg_flags = libc::NLM_F_REQUEST as u16;
    req.body.family = family as u8;
    req.body.protocol = libc::IPPROTO_TCP as u8;
    req.body.states = !0;
    req.body.id.sport = key.local.port().to_be();
    req.body.id.dport = key.remote.port().to_be();
    put_addr(&mut req.body.id.src, key.local.ip());
    put_addr(&mut req.body.id.dst, key.remote.ip());
    req.body.id.cookie = [!0, !0];
    // SAFETY: plain socket creation.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, libc::NETLINK_SOCK_DIAG) };
    if fd < 0 {
        return None;
    }
    let result = (|| {
        // SAFETY: req is a plain repr(C) value of the stated length.
        let sent = unsafe { libc::send(fd, (&req as *const Request).cast(), std::mem::size_of::<Request>(), 0) };
        if sent < 0 {
            return None;
        }
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
        Some(msg.id.cookie[0] as u64 | (msg.id.cookie[1] as u64) << 32)
    })();
    // SAFETY: fd is ours. The guard makes this close the real one.
    unsafe { libc::close(fd) };
    result
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
