//! The TUN device: one queue per file descriptor (`IFF_MULTI_QUEUE`), packets with the
//! virtio-net header (`IFF_VNET_HDR`), offloads (`TUNSETOFFLOAD`), carrier
//! (`TUNSETCARRIER`); and the interface's addresses, MTU and flags, set by ioctls on a
//! socket (SIOCSIFADDR, SIOCSIFNETMASK, SIOCSIFMTU, SIOCSIFFLAGS; IPv6 through
//! `in6_ifreq`). The kernel adds the connected routes of the two prefixes itself. The
//! link-local address is `fe80::<node id>` rather than one the kernel makes up (the
//! generation mode is set to none by an `RTM_SETLINK` on a route netlink socket), so that a
//! peer's link-local address names its node as a global one does.
//!
//! The device is not persistent: when the last queue's descriptor closes (the process
//! ends, however it ends), the kernel removes the interface.

use std::fs::File;
use std::io;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `struct ifreq`: a name and a 24-byte union (40 bytes on Linux).
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: [u8; 24],
}

impl IfReq {
    fn new(name: &str) -> io::Result<IfReq> {
        if name.is_empty() || name.len() >= libc::IFNAMSIZ {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("interface name {name:?}")));
        }
        let mut r = IfReq { name: [0; libc::IFNAMSIZ], data: [0; 24] };
        for (d, s) in r.name.iter_mut().zip(name.bytes()) {
            *d = s as libc::c_char;
        }
        Ok(r)
    }

    fn set_short(&mut self, v: i16) {
        self.data[..2].copy_from_slice(&v.to_ne_bytes());
    }

    fn set_int(&mut self, v: i32) {
        self.data[..4].copy_from_slice(&v.to_ne_bytes());
    }

    fn short(&self) -> i16 {
        i16::from_ne_bytes([self.data[0], self.data[1]])
    }

    fn int(&self) -> i32 {
        i32::from_ne_bytes([self.data[0], self.data[1], self.data[2], self.data[3]])
    }

    /// A `sockaddr_in` of `a` in the union.
    fn set_v4(&mut self, a: Ipv4Addr) {
        self.data = [0; 24];
        self.data[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
        self.data[4..8].copy_from_slice(&a.octets());
    }
}

fn cvt(rc: libc::c_int, what: impl FnOnce() -> String) -> io::Result<libc::c_int> {
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{}: {e}", what())));
    }
    Ok(rc)
}

/// An ioctl on `fd` whose argument is `arg`.
fn ioctl<T>(fd: &impl AsRawFd, req: libc::Ioctl, arg: &mut T, what: impl FnOnce() -> String) -> io::Result<()> {
    // SAFETY: `arg` is a valid, exclusively borrowed value of the type the request reads
    // or writes (each caller passes the kernel's struct or an int), alive for the call.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), req, arg as *mut T) }, what).map(drop)
}

/// A datagram socket of `family`, for the interface ioctls.
fn socket(family: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd =
        cvt(unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) }, || format!("socket({family})"))?;
    // SAFETY: `fd` is a new descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sets `O_NONBLOCK` on `f`.
fn set_nonblocking(f: &File) -> io::Result<()> {
    // SAFETY: fcntl(2) F_GETFL/F_SETFL on a descriptor we own; no pointers.
    let flags = cvt(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_GETFL) }, || "fcntl(F_GETFL)".into())?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) }, || "fcntl(F_SETFL)".into())
        .map(drop)
}

/// The offloads the TUN device is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offloads {
    /// The TUN_F_* flags the kernel took.
    pub flags: u32,
}

impl Offloads {
    /// "csum,tso4,tso6,uso4,uso6" or "none".
    pub fn describe(self) -> String {
        let names = [
            (libc::TUN_F_CSUM, "csum"),
            (libc::TUN_F_TSO4, "tso4"),
            (libc::TUN_F_TSO6, "tso6"),
            (libc::TUN_F_USO4, "uso4"),
            (libc::TUN_F_USO6, "uso6"),
        ];
        let v: Vec<&str> = names.iter().filter(|(f, _)| self.flags & f != 0).map(|(_, n)| *n).collect();
        if v.is_empty() {
            "none".into()
        } else {
            v.join(",")
        }
    }
}

/// A TUN interface and its queues.
#[derive(Debug)]
pub struct Tun {
    name: String,
    queues: Vec<File>,
}

impl Tun {
    /// Creates interface `name` with `queues` queues, each packet preceded by the
    /// virtio-net header. Needs CAP_NET_ADMIN. The interface exists until the last queue is
    /// dropped.
    pub fn create(name: &str, queues: usize) -> io::Result<Tun> {
        let mut files = Vec::with_capacity(queues);
        for q in 0..queues.max(1) {
            let f = std::fs::OpenOptions::new().read(true).write(true).open("/dev/net/tun").map_err(|e| {
                let hint = match e.kind() {
                    io::ErrorKind::PermissionDenied => {
                        "its mode does not let this user open it: distributions make it 0666; run as root or \
                         change the device's mode"
                    }
                    _ => "is the tun module loaded?",
                };
                io::Error::new(e.kind(), format!("opening /dev/net/tun: {e} ({hint})"))
            })?;
            let mut req = IfReq::new(name)?;
            let mut flags = libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_VNET_HDR | libc::IFF_MULTI_QUEUE;
            // The first queue makes the device, never joins one of that name (which would
            // take a share of its packets): the others join it.
            if q == 0 {
                flags |= libc::IFF_TUN_EXCL;
            }
            req.set_short(flags as i16);
            // SAFETY: TUNSETIFF reads and writes a `struct ifreq`, which `req` is, exclusively
            // borrowed and alive for the call.
            if unsafe { libc::ioctl(f.as_raw_fd(), libc::TUNSETIFF, &mut req as *mut IfReq) } < 0 {
                let e = io::Error::last_os_error();
                let hint = match (q, e.raw_os_error()) {
                    (0, Some(libc::EBUSY)) => {
                        " (an interface of that name exists already: does another `lanes ip up` run in this \
                         network namespace?)"
                    }
                    (0, Some(libc::EPERM)) => " (CAP_NET_ADMIN is needed)",
                    _ => "",
                };
                return Err(io::Error::new(e.kind(), format!("creating TUN interface {name} (queue {q}): {e}{hint}")));
            }
            set_nonblocking(&f).map_err(|e| io::Error::new(e.kind(), format!("TUN queue {q} of {name}: {e}")))?;
            files.push(f);
        }
        Ok(Tun { name: name.to_string(), queues: files })
    }

    /// The interface's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many queues.
    pub fn queues(&self) -> usize {
        self.queues.len()
    }

    /// Asks for checksum offload, TSO and (where the kernel has it, 6.2 on) USO, or for
    /// none; returns what the kernel took.
    pub fn set_offloads(&self, on: bool) -> io::Result<Offloads> {
        let base = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6;
        let tries: &[u32] = if on { &[base | libc::TUN_F_USO4 | libc::TUN_F_USO6, base] } else { &[0] };
        let mut last = None;
        for &flags in tries {
            // TUNSETOFFLOAD takes the flags as the argument's value, not through a pointer.
            // SAFETY: an ioctl whose argument is an integer; the result is checked.
            let rc = unsafe { libc::ioctl(self.queues[0].as_raw_fd(), libc::TUNSETOFFLOAD, flags as libc::c_ulong) };
            if rc == 0 {
                return Ok(Offloads { flags });
            }
            last = Some(io::Error::last_os_error());
        }
        let e = last.unwrap_or_else(|| io::Error::from(io::ErrorKind::Unsupported));
        Err(io::Error::new(e.kind(), format!("TUNSETOFFLOAD on {}: {e}", self.name)))
    }

    /// Sets the carrier on or off (the link up or `NO-CARRIER`).
    pub fn set_carrier(&self, on: bool) -> io::Result<()> {
        let mut v: libc::c_int = on.into();
        ioctl(&self.queues[0], libc::TUNSETCARRIER, &mut v, || format!("TUNSETCARRIER on {}", self.name))
    }

    /// Reads one packet (virtio-net header first) from queue `q`; `WouldBlock` when it
    /// holds none (the queues are non-blocking, so that any thread may look at one: see
    /// [`Tun::wait_readable`]).
    pub fn read(&self, q: usize, buf: &mut [u8]) -> io::Result<usize> {
        use std::io::Read;
        (&self.queues[q]).read(buf)
    }

    /// Queue `q`'s descriptor, for reads and writes straight between the device and a ring
    /// (`Map::read_from_fd`, `Map::write_to_fd`; non-blocking, as [`Tun::read`]).
    pub fn fd(&self, q: usize) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.queues[q].as_fd()
    }

    /// Waits up to `timeout` until queue `q` holds a packet; false if it timed out (or a
    /// signal interrupted the wait).
    pub fn wait_readable(&self, q: usize, timeout: std::time::Duration) -> io::Result<bool> {
        let mut fd = libc::pollfd { fd: self.queues[q].as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: poll(2) on one valid pollfd that lives on our stack for the call.
        let rc = unsafe { libc::poll(&mut fd, 1, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(e) };
        }
        Ok(rc > 0)
    }

    /// Writes one packet (virtio-net header first) to queue `q`.
    pub fn write(&self, q: usize, buf: &[u8]) -> io::Result<usize> {
        use std::io::Write;
        (&self.queues[q]).write(buf)
    }

    /// Keeps the interface's IPv6 addresses when it is taken down (`ip link set lanes0
    /// down`, then up): the kernel's default removes them, and once set up this process has
    /// no capability left to give them back (`keep_addr_on_down`, a sysctl that
    /// CAP_NET_ADMIN may write).
    pub fn keep_ipv6_addresses_on_down(&self) -> io::Result<()> {
        let path = format!("/proc/sys/net/ipv6/conf/{}/keep_addr_on_down", self.name);
        std::fs::write(&path, "1").map_err(|e| io::Error::new(e.kind(), format!("writing {path}: {e}")))
    }

    /// Gives the interface its addresses (IPv4, IPv6 and link-local `link_local`/64), MTU,
    /// and brings it up (needs CAP_NET_ADMIN).
    pub fn configure(
        &self,
        v4: Ipv4Addr,
        mask: Ipv4Addr,
        v6: Ipv6Addr,
        v6_len: u8,
        link_local: Ipv6Addr,
        mtu: u32,
    ) -> io::Result<()> {
        let name = &self.name;
        let s4 = socket(libc::AF_INET)?;
        let mut req = IfReq::new(name)?;
        ioctl(&s4, libc::SIOCGIFINDEX as libc::Ioctl, &mut req, || format!("the index of {name}"))?;
        let index = req.int();
        // Before it comes up: no link-local address of the kernel's making (a random one
        // would name no node, so answers to it could not be routed).
        no_generated_link_local(index)
            .map_err(|e| io::Error::new(e.kind(), format!("turning off IPv6 link-local generation on {name}: {e}")))?;
        let mut req = IfReq::new(name)?;
        req.set_int(mtu as i32);
        ioctl(&s4, libc::SIOCSIFMTU as libc::Ioctl, &mut req, || format!("setting the MTU of {name} to {mtu}"))?;
        // Address and mask while the interface is down, so that only the prefix's route
        // appears when it comes up (the address alone would bring a classful one).
        let mut req = IfReq::new(name)?;
        req.set_v4(v4);
        ioctl(&s4, libc::SIOCSIFADDR as libc::Ioctl, &mut req, || format!("giving {name} the address {v4}"))?;
        let mut req = IfReq::new(name)?;
        req.set_v4(mask);
        ioctl(&s4, libc::SIOCSIFNETMASK as libc::Ioctl, &mut req, || format!("setting {name}'s netmask {mask}"))?;
        let mut req = IfReq::new(name)?;
        ioctl(&s4, libc::SIOCGIFFLAGS as libc::Ioctl, &mut req, || format!("reading {name}'s flags"))?;
        let flags = req.short() | (libc::IFF_UP | libc::IFF_RUNNING) as i16;
        req.set_short(flags);
        ioctl(&s4, libc::SIOCSIFFLAGS as libc::Ioctl, &mut req, || format!("bringing {name} up"))?;
        // IPv6 once up (a down interface may have IPv6 turned off until it comes up).
        let s6 = socket(libc::AF_INET6).map_err(|e| io::Error::new(e.kind(), format!("IPv6 for {name}: {e}")))?;
        for (a, len) in [(v6, v6_len), (link_local, 64)] {
            let mut r6 = libc::in6_ifreq {
                ifr6_addr: libc::in6_addr { s6_addr: a.octets() },
                ifr6_prefixlen: len.into(),
                ifr6_ifindex: index,
            };
            ioctl(&s6, libc::SIOCSIFADDR as libc::Ioctl, &mut r6, || {
                format!("giving {name} the address {a}/{len} (is IPv6 disabled?)")
            })?;
        }
        Ok(())
    }
}

/// Whether interface `name` has IPv6 address `a`, by /proc/net/if_inet6 (this network
/// namespace's addresses: 32 hex digits, index, prefix length, scope, flags, name per
/// line). True when the file cannot be read: nothing is known to be missing.
pub fn has_ipv6_address(name: &str, a: Ipv6Addr) -> bool {
    match std::fs::read_to_string("/proc/net/if_inet6") {
        Ok(text) => lists_ipv6_address(&text, name, a),
        Err(_) => true,
    }
}

/// Whether /proc/net/if_inet6's `text` lists `a` on `name`.
fn lists_ipv6_address(text: &str, name: &str, a: Ipv6Addr) -> bool {
    let want: String = a.octets().iter().map(|b| format!("{b:02x}")).collect();
    text.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() == 6 && f[0] == want && f[5] == name
    })
}

// From <linux/if_link.h>, which the libc crate does not carry.
/// `IFLA_AF_SPEC`: per address family attributes of a link (nested).
const IFLA_AF_SPEC: u16 = 26;
/// `IFLA_INET6_ADDR_GEN_MODE`, inside `IFLA_AF_SPEC`'s `AF_INET6` (a u8).
const IFLA_INET6_ADDR_GEN_MODE: u16 = 8;
/// `IN6_ADDR_GEN_MODE_NONE`: the kernel makes no link-local address.
const IN6_ADDR_GEN_MODE_NONE: u8 = 1;

/// One netlink attribute: its header (length, type) and `payload`, padded to 4 bytes.
fn nlattr(kind: u16, payload: &[u8]) -> Vec<u8> {
    let len = 4 + payload.len();
    let mut a = Vec::with_capacity(len.next_multiple_of(4));
    a.extend_from_slice(&(len as u16).to_ne_bytes());
    a.extend_from_slice(&kind.to_ne_bytes());
    a.extend_from_slice(payload);
    a.resize(len.next_multiple_of(4), 0);
    a
}

/// The `RTM_SETLINK` request that sets interface `index`'s IPv6 address generation mode
/// to none: `nlmsghdr`, `ifinfomsg`, then `IFLA_AF_SPEC { AF_INET6 { ADDR_GEN_MODE } }`.
fn addr_gen_none_request(index: i32) -> Vec<u8> {
    let attrs = nlattr(
        IFLA_AF_SPEC,
        &nlattr(libc::AF_INET6 as u16, &nlattr(IFLA_INET6_ADDR_GEN_MODE, &[IN6_ADDR_GEN_MODE_NONE])),
    );
    let len = 16 + 16 + attrs.len();
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&(len as u32).to_ne_bytes());
    m.extend_from_slice(&libc::RTM_SETLINK.to_ne_bytes());
    m.extend_from_slice(&((libc::NLM_F_REQUEST | libc::NLM_F_ACK) as u16).to_ne_bytes());
    m.extend_from_slice(&1u32.to_ne_bytes()); // sequence number
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
                                              // ifinfomsg: family, pad, type, index, flags, change.
    m.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    m.extend_from_slice(&index.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&attrs);
    m
}

/// The result an acknowledgement (`NLMSG_ERROR`, error 0 for success) carries.
fn ack_result(reply: &[u8]) -> io::Result<()> {
    let word = |at: usize| reply.get(at..at + 4).map(|b| [b[0], b[1], b[2], b[3]]);
    let kind = reply.get(4..6).map(|b| u16::from_ne_bytes([b[0], b[1]]));
    match (kind, word(16).map(i32::from_ne_bytes)) {
        (Some(k), Some(0)) if k == libc::NLMSG_ERROR as u16 => Ok(()),
        (Some(k), Some(e)) if k == libc::NLMSG_ERROR as u16 => Err(io::Error::from_raw_os_error(-e)),
        _ => Err(io::Error::new(io::ErrorKind::InvalidData, "an unexpected netlink reply")),
    }
}

/// Sets interface `index`'s IPv6 address generation mode to none (needs CAP_NET_ADMIN).
fn no_generated_link_local(index: i32) -> io::Result<()> {
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = cvt(
        unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) },
        || "a route netlink socket".into(),
    )?;
    // SAFETY: `fd` is a new descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let req = addr_gen_none_request(index);
    // SAFETY: `req` is readable for its length for the call.
    let sent = unsafe { libc::send(fd.as_raw_fd(), req.as_ptr().cast(), req.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut reply = [0u8; 1024];
    // SAFETY: `reply` is writable for its length for the call.
    let n = unsafe { libc::recv(fd.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    ack_result(&reply[..n as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_addr_gen_mode_request_is_laid_out_as_the_kernel_reads_it() {
        let m = addr_gen_none_request(7);
        // Header 16, ifinfomsg 16, AF_SPEC 4 + (AF_INET6 4 + (mode 4 + 1, padded to 8)).
        assert_eq!(m.len(), 16 + 16 + 4 + 4 + 8);
        assert_eq!(u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize, m.len());
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), libc::RTM_SETLINK);
        assert_eq!(i32::from_ne_bytes(m[20..24].try_into().unwrap()), 7);
        let attr = |len: u16, kind: u16| [len.to_ne_bytes(), kind.to_ne_bytes()].concat();
        assert_eq!(m[32..36], attr(16, IFLA_AF_SPEC));
        assert_eq!(m[36..40], attr(12, libc::AF_INET6 as u16));
        assert_eq!(m[40..44], attr(5, IFLA_INET6_ADDR_GEN_MODE));
        assert_eq!(m[44..48], [IN6_ADDR_GEN_MODE_NONE, 0, 0, 0]);
    }

    #[test]
    fn addresses_are_found_in_proc_net_if_inet6_by_address_and_name() {
        let text = "fe800000000000000000000000000004 05 40 20 80   lanes0\n\
                    fd6c616e657300000000000000000004 05 40 00 80   lanes0\n\
                    00000000000000000000000000000001 01 80 10 80       lo\n";
        let ll: Ipv6Addr = "fe80::4".parse().unwrap();
        assert!(lists_ipv6_address(text, "lanes0", ll));
        assert!(!lists_ipv6_address(text, "lanes1", ll));
        assert!(!lists_ipv6_address(text, "lanes0", "fe80::8".parse().unwrap()));
        assert!(!lists_ipv6_address("", "lanes0", ll));
    }

    #[test]
    fn acknowledgements_say_success_or_the_kernels_errno() {
        let ack = |err: i32, kind: u16| {
            let mut r = vec![0u8; 36];
            r[4..6].copy_from_slice(&kind.to_ne_bytes());
            r[16..20].copy_from_slice(&err.to_ne_bytes());
            r
        };
        assert!(ack_result(&ack(0, libc::NLMSG_ERROR as u16)).is_ok());
        let e = ack_result(&ack(-libc::EPERM, libc::NLMSG_ERROR as u16)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        assert!(ack_result(&ack(0, 99)).is_err());
        assert!(ack_result(&[0u8; 10]).is_err());
    }
}
