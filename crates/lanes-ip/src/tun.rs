//! The TUN device: one queue per file descriptor (`IFF_MULTI_QUEUE`), packets with the
//! virtio-net header (`IFF_VNET_HDR`), offloads (`TUNSETOFFLOAD`), carrier
//! (`TUNSETCARRIER`); and the interface's addresses, MTU and flags, set by ioctls on a
//! socket (SIOCSIFADDR, SIOCSIFNETMASK, SIOCSIFMTU, SIOCSIFFLAGS; IPv6 through
//! `in6_ifreq`). The kernel adds the connected routes of the two prefixes itself.
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
                io::Error::new(e.kind(), format!("opening /dev/net/tun: {e} (is the tun module loaded?)"))
            })?;
            let mut req = IfReq::new(name)?;
            req.set_short((libc::IFF_TUN | libc::IFF_NO_PI | libc::IFF_VNET_HDR | libc::IFF_MULTI_QUEUE) as i16);
            ioctl(&f, libc::TUNSETIFF, &mut req, || {
                let hint = if q == 0 { " (CAP_NET_ADMIN is needed; does another device have that name?)" } else { "" };
                format!("creating TUN interface {name} (queue {q}){hint}")
            })?;
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

    /// Gives the interface its addresses, MTU, and brings it up (needs CAP_NET_ADMIN).
    pub fn configure(&self, v4: Ipv4Addr, mask: Ipv4Addr, v6: Ipv6Addr, v6_len: u8, mtu: u32) -> io::Result<()> {
        let name = &self.name;
        let s4 = socket(libc::AF_INET)?;
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
        let mut req = IfReq::new(name)?;
        ioctl(&s4, libc::SIOCGIFINDEX as libc::Ioctl, &mut req, || format!("the index of {name}"))?;
        let index = req.int();
        let s6 = socket(libc::AF_INET6).map_err(|e| io::Error::new(e.kind(), format!("IPv6 for {name}: {e}")))?;
        let mut r6 = libc::in6_ifreq {
            ifr6_addr: libc::in6_addr { s6_addr: v6.octets() },
            ifr6_prefixlen: v6_len.into(),
            ifr6_ifindex: index,
        };
        ioctl(&s6, libc::SIOCSIFADDR as libc::Ioctl, &mut r6, || {
            format!("giving {name} the address {v6}/{v6_len} (is IPv6 disabled?)")
        })
    }
}
