//! Cutting the connections a lost host opened to this process's endpoint (revocation).
//!
//! A closed memory registration stops writes the provider has not started yet, but not one
//! it has: tcp checks a write's key when it reads the write's header and then places the
//! rest of the write as it arrives, into the memory the header named. A write cut in the
//! middle by a link loss would so be completed when the link returns, long after the owner
//! heard its writer lost. libfabric offers no call that ends one peer's connection on the
//! receiving side without that peer's address (which the owner does not have), so the
//! owner shuts the sockets down itself: every TCP socket of this process whose local
//! address is the endpoint's (the connections peers opened to it) and whose peer is the
//! lost host. The kernel then resets such a connection when more data arrives, and the
//! provider, reading the end of the stream, drops the connection and the write it was
//! placing.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};

/// The socket address in an endpoint name (`fi_getname` of a sockets-based provider: a
/// `sockaddr_in` or `sockaddr_in6`), if it is one.
pub fn endpoint_address(name: &[u8]) -> Option<SocketAddr> {
    let family = i32::from(u16::from_ne_bytes([*name.first()?, *name.get(1)?]));
    let port = u16::from_be_bytes([*name.get(2)?, *name.get(3)?]);
    if family == libc::AF_INET && name.len() >= 8 {
        let ip = Ipv4Addr::new(name[4], name[5], name[6], name[7]);
        Some(SocketAddr::new(IpAddr::V4(ip), port))
    } else if family == libc::AF_INET6 && name.len() >= 24 {
        let mut a = [0u8; 16];
        a.copy_from_slice(&name[8..24]);
        Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(a)), port))
    } else {
        None
    }
}

/// Shuts down (both ways) every TCP socket of this process whose local address is `local`
/// and whose peer's address is `from`; returns how many.
pub fn shut_accepted_from(local: SocketAddr, from: IpAddr) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else { return 0 };
    let mut shut = 0;
    for e in entries.flatten() {
        let Some(fd) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        let is_socket = std::fs::read_link(e.path()).is_ok_and(|t| t.to_string_lossy().starts_with("socket:"));
        if !is_socket {
            continue;
        }
        // A duplicate of our own: whatever the number names by now (the provider may have
        // closed it and the number been reused), the checks and the shutdown below are
        // about the one socket the duplicate holds. Held, and made high at once: this runs
        // while the program runs, and a program closing a low number twice would close a
        // duplicate made there before it moved.
        let Ok(dup) = crate::platform::files::held_duplicate(fd) else { continue };
        if sock_addr(&dup, false) != Some(local) || sock_addr(&dup, true).map(|a| a.ip()) != Some(from) {
            continue;
        }
        // SAFETY: shutdown of a socket we hold a descriptor of; no memory is passed.
        if unsafe { libc::shutdown(dup.as_raw_fd(), libc::SHUT_RDWR) } == 0 {
            shut += 1;
        }
    }
    shut
}

/// The local (`peer` false) or remote address of TCP/IP socket `fd`.
fn sock_addr(fd: &OwnedFd, peer: bool) -> Option<SocketAddr> {
    // SAFETY: an all-zero sockaddr_storage is a valid value.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let p = (&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr>();
    // SAFETY: p points to a sockaddr_storage of `len` bytes, which the call fills at most.
    let rc = unsafe {
        if peer {
            libc::getpeername(fd.as_raw_fd(), p, &mut len)
        } else {
            libc::getsockname(fd.as_raw_fd(), p, &mut len)
        }
    };
    if rc != 0 {
        return None;
    }
    match i32::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let a = unsafe { *(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::new(IpAddr::V4(ip), u16::from_be(a.sin_port)))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let a = unsafe { *(&ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(a.sin6_addr.s6_addr)), u16::from_be(a.sin6_port)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// Only the accepted connection from the named address is shut down: its reader sees
    /// the end of the stream, and the peer's later writes fail; other sockets are untouched.
    #[test]
    fn shuts_only_connections_to_the_local_address_from_the_host() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let local = listener.local_addr().unwrap();
        let mut writer = TcpStream::connect(local).unwrap();
        let (mut accepted, _) = listener.accept().unwrap();
        let other = TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = TcpStream::connect(other.local_addr().unwrap()).unwrap();
        let (mut untouched, _) = other.accept().unwrap();

        assert_eq!(shut_accepted_from(local, "127.0.0.2".parse().unwrap()), 0, "another host");
        assert_eq!(shut_accepted_from(local, "127.0.0.1".parse().unwrap()), 1);
        let mut buf = [0u8; 8];
        assert_eq!(accepted.read(&mut buf).unwrap(), 0, "the end of the stream");
        // The kernel resets the connection when data arrives after the shutdown.
        let _ = writer.write_all(b"late");
        std::thread::sleep(std::time::Duration::from_millis(50));
        let second = writer.write_all(b"later").and_then(|()| writer.flush());
        let _ = second; // may or may not fail yet: the reset races this write
        untouched.set_nonblocking(true).unwrap();
        assert!(matches!(untouched.read(&mut buf), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock));
    }

    #[test]
    fn endpoint_names_are_socket_addresses() {
        let mut v4 = vec![0u8; 16];
        v4[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        v4[2..4].copy_from_slice(&4711u16.to_be_bytes());
        v4[4..8].copy_from_slice(&[10, 77, 0, 1]);
        assert_eq!(endpoint_address(&v4), Some("10.77.0.1:4711".parse().unwrap()));
        assert_eq!(endpoint_address(&[1, 2]), None);
    }
}
