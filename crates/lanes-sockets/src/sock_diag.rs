//! Asking the kernel which socket has given addresses (`NETLINK_SOCK_DIAG`, in
//! `lanes::platform::net`), so a record in the fabric directory is trusted only when the
//! kernel confirms that the socket it claims to describe exists, with its cookie, at the
//! other end of our connection.

use lanes::platform::net;
use lanes::sockets::ConnectionKey;

/// The TCP socket whose local address is `key.local` and peer `key.remote`, or None if
/// the kernel knows no such socket.
pub fn socket_of(key: &ConnectionKey) -> Option<net::SockInfo> {
    net::tcp_socket(key.local, key.remote)
}

/// The cookie of the socket of [`socket_of`].
pub fn cookie_of(key: &ConnectionKey) -> Option<u64> {
    socket_of(key).map(|s| s.cookie)
}

/// The cookie of our own socket `fd`.
pub fn own_cookie(fd: libc::c_int) -> Option<u64> {
    net::own_cookie(fd)
}

/// The inode of this process's network namespace.
pub fn netns_inode() -> u64 {
    net::netns_inode()
}
