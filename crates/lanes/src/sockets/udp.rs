//! The record of one accelerated UDP socket as a receiver: a file
//! `<fabric dir>/sockets/udp-<netns>-<cookie>` holding the socket's identity, its holders,
//! a datagram ring that senders on this host with the library write into, and the state
//! word that decides, for every datagram, whether it goes into the ring or through the
//! kernel socket.
//!
//! Layout (each line 64 bytes, the ring page aligned):
//!
//! | offset | written by | contents |
//! |---|---|---|
//! | 0 | creator, once | magic, version, ring size, socket cookie, netns, bound address |
//! | 128 | holders | identities of the holders (8 slots: pid and start time) |
//! | 192 | receiver | flags, the kernel socket's `SO_RCVBUF`, the addressing epoch, `O_NONBLOCK`, ring wanted |
//! | 256 | senders, receiver | the state word ([`UdpState`]) |
//! | 320 | senders (under the send lock) | send lock, tail position |
//! | 384 | receiver (under the receive lock) | head position, datagrams consumed, receive lock |
//! | 448 | senders add, receiver subtracts | bytes charged against `SO_RCVBUF` |
//! | 512 | senders | statistics: ring datagrams and bytes, drops, kernel datagrams |
//! | 576 | receiver | multicast: sequence (odd while written), flags, membership count |
//! | 1024 | receiver | multicast memberships as the kernel holds them ([`Memberships`]) |
//! | 4096 | senders | the ring |
//!
//! A datagram in the ring is a 32-byte header (payload length, the charge it was
//! accounted with, the source address as the kernel would report it) followed by the
//! payload, padded to 8 bytes; one that would cross the ring's end is preceded by a skip
//! marker and starts at the beginning. Everything read from the ring is validated (the
//! memory is writable by every process of the user): a bad header is [`Corrupt`], never
//! a crash.
//!
//! ## The state word
//!
//! `kernel:1 | closed:1 | sleepers:7 | in_flight:7 | K:16 | P:32`. `P` counts datagrams
//! ever published into the ring, `K` kernel sends by senders that know this record,
//! `in_flight` those kernel sends not yet returned. A sender publishes by copying the
//! datagram behind the tail and moving `P` with a compare-and-swap that fails if the word
//! changed, so a receiver about to sleep (which switches the word to kernel mode, counting
//! itself a sleeper, only while the ring is empty) is never left asleep with a datagram in
//! the ring: the sender then sends through the kernel, which wakes it. A sender that sends
//! through the kernel while the word is in ring mode (ancillary data, the first datagram
//! after it found the record) switches the word to kernel mode first: the receiver reads
//! the ring before the kernel, so one sender's datagrams stay in order. The receiver goes
//! back to ring mode only when the kernel queue was seen empty after the word was read,
//! no kernel send is in flight and `K` did not move in between (the compare-and-swap
//! checks it). A receiver that reads the kernel while it spins says it wants the ring
//! back ([`UdpRecord::want_ring`]): while that word moves, senders hold their kernel sends
//! back for a moment, so that the queue drains and the switch can be made (a steady
//! stream through the kernel otherwise keeps a send in flight nearly all the time, and the
//! socket stayed on the kernel for as long as the stream lasted). Every change of the word to kernel mode (a sleeper, a kernel send, a close)
//! is made under the send lock, so a multicast sender holding the send locks of every
//! member either puts a datagram into all their rings or into none ([`offer_to_all`]).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::endpoint::{decode_addr, encode_addr, lock_shared, sockets_dir, this_process, SharedLockGuard};
use super::holders::HolderSlots;
use crate::platform::files::{ensure_private_dir, open_existing, open_or_create, reserve, UnnamedFile};
use crate::platform::liveness::ProcessIdentity;
use crate::platform::mapping::{Access, Mapping};
use crate::platform::SharedSlice;

const MAGIC: u64 = u64::from_le_bytes(*b"LNUDP001");
const VERSION: u32 = 3;
/// Where the ring starts.
pub const RING_OFFSET: usize = 4096;
/// The smallest ring: room for the largest receive buffer `SO_RCVBUF` can ask for without
/// privilege (twice `net.core.rmem_max`'s default) plus one largest datagram.
pub const RING_BYTES: usize = 512 * 1024;
/// The largest ring; a socket whose receive buffer this does not hold stays on the kernel.
pub const MAX_RING_BYTES: usize = 32 << 20;
/// What a ring holds beyond its receive buffer: one largest datagram and its skip.
const RING_SLACK: usize = (64 << 10) + 4096;

/// The ring a receive buffer of `rcvbuf` bytes (the kernel's figure) needs: a power of two
/// from [`RING_BYTES`] up, or None when no ring holds it (the socket stays on the kernel).
pub fn ring_for(rcvbuf: u32) -> Option<usize> {
    let bytes = (rcvbuf as usize + RING_SLACK).next_power_of_two().max(RING_BYTES);
    (bytes <= MAX_RING_BYTES).then_some(bytes)
}
/// The largest UDP payload (IPv6 without jumbograms; IPv4's is smaller, and the kernel
/// refuses what is too large for it before anything reaches a ring).
pub const MAX_PAYLOAD: usize = 65527;
/// A datagram's header in the ring.
pub const RECORD_HEADER: usize = 32;
const SKIP: u32 = u32::MAX;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_RING: usize = 12;
const OFF_COOKIE: usize = 16;
const OFF_NETNS: usize = 24;
const OFF_LOCAL: usize = 32;
const OFF_HOLDERS: usize = 128;
const OFF_FLAGS: usize = 192;
const OFF_RCVBUF: usize = 196;
const OFF_EPOCH: usize = 200;
const OFF_NONBLOCK: usize = 204;
/// The receiver wants the ring back: odd while it does, moved by 2 at each kernel datagram
/// it reads meanwhile (see [`UdpRecord::want_ring`]).
const OFF_RING_WANTED: usize = 208;
const OFF_STATE: usize = 256;
const OFF_TX_LOCK: usize = 320;
const OFF_TAIL: usize = 328;
/// Receive-buffer bytes charged by every datagram ever put in the ring (senders', with the
/// send lock held).
const OFF_CHARGED: usize = 336;
const OFF_HEAD: usize = 384;
const OFF_CONSUMED: usize = 392;
const OFF_RX_LOCK: usize = 400;
/// Of those, the bytes of datagrams taken out again (the receiver's, with the receive lock
/// held). Apart from the charged count, so that a send and a receive each write only their
/// own cache line: one shared count both added to and took from cost every datagram a
/// cache miss at each end.
const OFF_RELEASED: usize = 408;
const OFF_RING_DATAGRAMS: usize = 512;
const OFF_RING_PAYLOAD: usize = 520;
const OFF_DROPS: usize = 528;
const OFF_KERNEL_DATAGRAMS: usize = 536;
const OFF_MC_SEQ: usize = 576;
const OFF_MC_FLAGS: usize = 580;
const OFF_MC_COUNT: usize = 584;
const OFF_MC_TABLE: usize = 1024;
const MC_ENTRY: usize = 96;
/// Memberships a record holds (IPv4 sockets may have 20 by default); a socket with more
/// stays on the kernel.
pub const MC_SLOTS: usize = 24;
/// Sources of one source-filtered membership a record holds; more: the kernel.
pub const MC_SOURCES: usize = 4;
const MC_ALL: u32 = 1;

const P_MASK: u64 = 0xffff_ffff;
const K_SHIFT: u32 = 32;
const K_MASK: u64 = 0xffff;
const IN_FLIGHT_SHIFT: u32 = 48;
const SLEEPERS_SHIFT: u32 = 55;
const COUNT7: u64 = 0x7f;
const CLOSED_BIT: u64 = 1 << 62;
const KERNEL_BIT: u64 = 1 << 63;

/// A snapshot of a record's state word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpState(pub u64);

impl UdpState {
    /// Datagrams ever published into the ring (modulo 2^32).
    pub fn published(self) -> u32 {
        (self.0 & P_MASK) as u32
    }
    /// Kernel sends by senders that know the record (modulo 2^16).
    pub fn kernel_sends(self) -> u16 {
        ((self.0 >> K_SHIFT) & K_MASK) as u16
    }
    /// Kernel sends that have not returned yet.
    pub fn in_flight(self) -> u64 {
        (self.0 >> IN_FLIGHT_SHIFT) & COUNT7
    }
    /// Receivers asleep in the kernel.
    pub fn sleepers(self) -> u64 {
        (self.0 >> SLEEPERS_SHIFT) & COUNT7
    }
    /// Datagrams go through the kernel.
    pub fn kernel_mode(self) -> bool {
        self.0 & KERNEL_BIT != 0
    }
    /// The receiver is gone (or stays on the kernel for good).
    pub fn closed(self) -> bool {
        self.0 & CLOSED_BIT != 0
    }
}

/// What became of a datagram offered to a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Offer {
    /// In the ring.
    Delivered,
    /// The receiver's buffer was full: dropped and counted, as the kernel drops.
    Dropped,
    /// The record takes no datagram now: send it through the kernel
    /// ([`UdpRecord::begin_kernel_send`] first).
    Kernel,
}

/// A datagram at the front of the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Datagram {
    /// Its payload's length.
    pub len: usize,
    /// Its source, as the sender's kernel would have reported it (IPv4-mapped addresses as IPv4).
    pub src: SocketAddr,
    /// Where its payload starts in the ring.
    payload: usize,
    /// Ring bytes it occupies, with a skip before it.
    span: u64,
    charge: u32,
}

/// The ring holds something that is not a datagram (a misbehaving process of the user
/// wrote into it): the socket must stay on the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "corrupt UDP ring: {}", self.0)
    }
}

/// The bytes the kernel charges a receiving socket's `SO_RCVBUF` for a datagram of `len`
/// payload bytes that came over loopback (`skb->truesize`, as `SO_MEMINFO` shows it on
/// Linux 6: a linear buffer of the header and payload rounded up to its allocation, plus
/// `struct sk_buff`; a paged buffer beyond 16 KiB). `ipv6`: the packet's family (an
/// IPv4-mapped destination travels as IPv4).
pub fn kernel_charge(len: usize, ipv6: bool) -> u32 {
    // IP and UDP headers, the link layer's reserve and alignment slack.
    let headers = if ipv6 { 72 } else { 59 };
    // SKB_MAX_ALLOC: beyond it the payload goes into page fragments.
    if len + headers >= 16 * 1024 - 320 {
        return (len + 832) as u32;
    }
    let data = (len + headers).div_ceil(64) * 64 + 320; // with skb_shared_info
    let allocated = if data <= 576 { 576 } else { data.next_power_of_two() };
    (allocated + 256) as u32
}

/// Whether the kernel takes a datagram charged `charge` into a queue holding `rmem`
/// charged bytes with buffer `rcvbuf`: always into an empty queue, else while it fits.
pub fn kernel_accepts(rmem: u64, charge: u32, rcvbuf: u32) -> bool {
    rmem == 0 || rmem + u64::from(charge) <= u64::from(rcvbuf)
}

/// The record's file name.
pub fn file_name(netns: u64, cookie: u64) -> String {
    format!("udp-{netns:x}-{cookie:x}")
}

fn parse_name(name: &str) -> Option<(u64, u64)> {
    let (netns, cookie) = name.strip_prefix("udp-")?.split_once('-')?;
    let parsed = (u64::from_str_radix(netns, 16).ok()?, u64::from_str_radix(cookie, 16).ok()?);
    (file_name(parsed.0, parsed.1) == name).then_some(parsed)
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

/// One multicast membership of a socket on one interface, as the kernel keeps it
/// (`MCAST_MSFILTER`): any-source (exclude mode, no sources), source-specific (include
/// mode) or with sources blocked (exclude mode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Membership {
    pub group: IpAddr,
    pub ifindex: u32,
    pub exclude: bool,
    pub sources: Vec<IpAddr>,
}

impl Membership {
    /// Whether a datagram from `src` passes this membership's source filter.
    pub fn admits(&self, src: IpAddr) -> bool {
        self.sources.contains(&src) != self.exclude
    }
}

/// A socket's multicast memberships and its `IP_MULTICAST_ALL` (`IPV6_MULTICAST_ALL`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Memberships {
    pub list: Vec<Membership>,
    /// A socket without a membership of a group gets its datagrams anyway once any socket
    /// of the host joined it on the interface (the kernel's default).
    pub all: bool,
}

impl Memberships {
    /// The socket's membership of `group` on interface `ifindex`, if any.
    pub fn of(&self, group: IpAddr, ifindex: u32) -> Option<&Membership> {
        self.list.iter().find(|m| m.group == group && m.ifindex == ifindex)
    }
}

fn put_ip(b: &mut [u8], ip: IpAddr) {
    let v6 = match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    b[..16].copy_from_slice(&v6.octets());
}

fn get_ip(b: &[u8], v4: bool) -> Option<IpAddr> {
    let v6 = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&b[..16]).ok()?);
    if v4 {
        v6.to_ipv4_mapped().map(IpAddr::V4)
    } else {
        Some(IpAddr::V6(v6))
    }
}

/// One receiving socket's record, mapped: by the receiver (its own) and by senders.
pub struct UdpRecord {
    map: Mapping,
    path: PathBuf,
    cookie: u64,
    local: SocketAddr,
    /// The ring's length: a power of two, from the header (checked against the file's).
    ring_bytes: usize,
    /// This process's last look at the receiver's head and released count: a sender reads
    /// them again only when the stale values (never ahead of the real ones, so never
    /// letting it overwrite a datagram or overfill the buffer) say the datagram does not
    /// fit. The receiver writes both at every datagram; reading them at every send was a
    /// cache miss each.
    head_seen: AtomicU64,
    released_seen: AtomicU64,
}

impl std::fmt::Debug for UdpRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpRecord").field("path", &self.path).field("cookie", &self.cookie).finish()
    }
}

impl UdpRecord {
    /// Creates and publishes the record of the socket with kernel cookie `cookie`, bound to
    /// `local`, whose kernel receive buffer is `rcvbuf` and multicast memberships
    /// `memberships`; it starts in kernel mode (the receiver turns the ring on once it saw
    /// the kernel queue empty).
    pub fn create(
        fabric_dir: &Path,
        netns: u64,
        cookie: u64,
        local: SocketAddr,
        rcvbuf: u32,
        memberships: &Memberships,
    ) -> io::Result<UdpRecord> {
        let dir = sockets_dir(fabric_dir);
        ensure_private_dir(fabric_dir)?;
        ensure_private_dir(&dir)?;
        let ring_bytes =
            ring_for(rcvbuf).ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "receive buffer too large"))?;
        let len = RING_OFFSET + ring_bytes;
        let name = file_name(netns, cookie);
        let me = this_process()?;
        let unnamed = UnnamedFile::create(&dir)?;
        reserve(unnamed.file(), len as u64).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
        let map = Mapping::map(unnamed.file().as_fd(), 0, len, Access::ReadWrite)?;
        let mut header = [0u8; 128];
        header[OFF_MAGIC..OFF_MAGIC + 8].copy_from_slice(&MAGIC.to_le_bytes());
        header[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
        header[OFF_RING..OFF_RING + 4].copy_from_slice(&(ring_bytes as u32).to_le_bytes());
        header[OFF_COOKIE..OFF_COOKIE + 8].copy_from_slice(&cookie.to_le_bytes());
        header[OFF_NETNS..OFF_NETNS + 8].copy_from_slice(&netns.to_le_bytes());
        encode_addr(&mut header[OFF_LOCAL..OFF_LOCAL + 20], local);
        map.slice().copy_from(0, &header)?;
        let rec = UdpRecord::with(map, dir.join(&name), cookie, local, ring_bytes);
        rec.word().store(KERNEL_BIT, Ordering::SeqCst);
        rec.set_rcvbuf(rcvbuf);
        rec.set_memberships(memberships).map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, why))?;
        rec.add_holder(me);
        // A record of the same cookie (cookies are unique for the system's life) is another
        // process's record of this very socket (it shares the socket since a fork, and made
        // the record first): AlreadyExists, and the caller opens that one.
        unnamed.publish(&name)?;
        Ok(rec)
    }

    /// Opens the record of socket `cookie`, validating its header.
    pub fn open(fabric_dir: &Path, netns: u64, cookie: u64) -> io::Result<UdpRecord> {
        let path = sockets_dir(fabric_dir).join(file_name(netns, cookie));
        let file = open_existing(&path, true)?;
        let file_len = file.metadata()?.len();
        if file_len < RING_OFFSET as u64 {
            return Err(invalid("UDP record too short"));
        }
        // The header first: it says how long the ring is.
        let mut header = [0u8; 128];
        Mapping::map(file.as_fd(), 0, RING_OFFSET, Access::ReadOnly)?.slice().copy_to(0, &mut header)?;
        let word = |o: usize| u64::from_le_bytes(header[o..o + 8].try_into().expect("8 bytes"));
        let half = |o: usize| u32::from_le_bytes(header[o..o + 4].try_into().expect("4 bytes"));
        if word(OFF_MAGIC) != MAGIC {
            return Err(invalid("not a Lanes UDP record (bad magic)"));
        }
        if half(OFF_VERSION) != VERSION {
            return Err(invalid("UDP record of another version"));
        }
        let ring_bytes = half(OFF_RING) as usize;
        if !ring_bytes.is_power_of_two() || !(RING_BYTES..=MAX_RING_BYTES).contains(&ring_bytes) {
            return Err(invalid("UDP record with an impossible ring size"));
        }
        if file_len < (RING_OFFSET + ring_bytes) as u64 {
            return Err(invalid("UDP record shorter than its ring"));
        }
        if word(OFF_COOKIE) != cookie || word(OFF_NETNS) != netns {
            return Err(invalid("UDP record filed under another socket's name"));
        }
        let local = decode_addr(&header[OFF_LOCAL..OFF_LOCAL + 20]).ok_or_else(|| invalid("bad bound address"))?;
        let map = Mapping::map(file.as_fd(), 0, RING_OFFSET + ring_bytes, Access::ReadWrite)?;
        Ok(UdpRecord::with(map, path, cookie, local, ring_bytes))
    }

    fn with(map: Mapping, path: PathBuf, cookie: u64, local: SocketAddr, ring_bytes: usize) -> UdpRecord {
        UdpRecord {
            map,
            path,
            cookie,
            local,
            ring_bytes,
            head_seen: AtomicU64::new(0),
            released_seen: AtomicU64::new(0),
        }
    }

    /// Whether the ring holds a receive buffer of `rcvbuf` bytes (after an `SO_RCVBUF`).
    pub fn holds_rcvbuf(&self, rcvbuf: u32) -> bool {
        ring_for(rcvbuf).is_some_and(|bytes| bytes <= self.ring_bytes)
    }

    /// The kernel cookie of the socket.
    pub fn cookie(&self) -> u64 {
        self.cookie
    }
    /// The address the socket was bound to when the record was made.
    pub fn local(&self) -> SocketAddr {
        self.local
    }
    /// The record's file.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// Removes the record's name (mappings stay valid).
    pub fn unlink(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    // The mapping is RING_OFFSET + ring_bytes long (made or checked so), and every header
    // offset below is a constant, aligned and below RING_OFFSET.
    #[inline]
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.map.slice().header_u64(off)
    }
    #[inline]
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.map.slice().header_u32(off)
    }
    #[inline]
    fn word(&self) -> &AtomicU64 {
        self.u64_at(OFF_STATE)
    }
    fn ring(&self) -> SharedSlice<'_> {
        self.map.slice().subslice(RING_OFFSET, self.ring_bytes).unwrap_or_else(|_| SharedSlice::empty())
    }

    /// The state word now.
    #[inline]
    pub fn state(&self) -> UdpState {
        UdpState(self.word().load(Ordering::Acquire))
    }

    /// The kernel socket's receive buffer, as the receiver last read it.
    pub fn rcvbuf(&self) -> u32 {
        self.u32_at(OFF_RCVBUF).load(Ordering::Relaxed)
    }
    /// Records the kernel socket's receive buffer (after `setsockopt(SO_RCVBUF)`).
    pub fn set_rcvbuf(&self, bytes: u32) {
        self.u32_at(OFF_RCVBUF).store(bytes, Ordering::Relaxed);
    }
    /// Changes whenever the socket's addresses change (connect, bind): a sender checks it at
    /// every datagram and asks the kernel again who takes its datagrams when it moved.
    #[inline]
    pub fn epoch(&self) -> u32 {
        self.u32_at(OFF_EPOCH).load(Ordering::Acquire)
    }
    /// The socket's addresses changed.
    pub fn bump_epoch(&self) {
        self.u32_at(OFF_EPOCH).fetch_add(1, Ordering::AcqRel);
    }

    /// The socket's O_NONBLOCK, shared by every process holding it (as the kernel's flag is).
    #[inline]
    pub fn nonblocking(&self) -> &AtomicU32 {
        self.u32_at(OFF_NONBLOCK)
    }

    /// Bytes charged against the receive buffer by datagrams in the ring.
    pub fn charged(&self) -> u64 {
        let charged = self.u64_at(OFF_CHARGED).load(Ordering::Acquire);
        charged.saturating_sub(self.u64_at(OFF_RELEASED).load(Ordering::Acquire))
    }

    /// (datagrams through the ring, their payload bytes, datagrams dropped, kernel sends of
    /// senders that knew the record)
    pub fn counts(&self) -> (u64, u64, u64, u64) {
        let l = |o| self.u64_at(o).load(Ordering::Relaxed);
        (l(OFF_RING_DATAGRAMS), l(OFF_RING_PAYLOAD), l(OFF_DROPS), l(OFF_KERNEL_DATAGRAMS))
    }

    /// The receiver's flags (free for the receiver's own use).
    pub fn flags(&self) -> &AtomicU32 {
        self.u32_at(OFF_FLAGS)
    }

    // ---- multicast memberships -------------------------------------------------------

    /// Writes the socket's memberships (the kernel's, as the receiver just read them).
    /// Fails (and writes nothing) when they do not fit the record: the socket must then
    /// stay on the kernel.
    pub fn set_memberships(&self, m: &Memberships) -> Result<(), &'static str> {
        if m.list.len() > MC_SLOTS {
            return Err("more multicast memberships than a record holds");
        }
        if m.list.iter().any(|e| e.sources.len() > MC_SOURCES) {
            return Err("more sources per membership than a record holds");
        }
        let seq = self.u32_at(OFF_MC_SEQ);
        let mut cur = seq.load(Ordering::Acquire);
        loop {
            if cur % 2 == 1 {
                std::thread::yield_now();
                cur = seq.load(Ordering::Acquire);
                continue;
            }
            match seq.compare_exchange_weak(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        let mut table = vec![0u8; MC_SLOTS * MC_ENTRY];
        for (i, e) in m.list.iter().enumerate() {
            let b = &mut table[i * MC_ENTRY..(i + 1) * MC_ENTRY];
            put_ip(&mut b[0..16], e.group);
            b[16..20].copy_from_slice(&e.ifindex.to_le_bytes());
            b[20] = if e.exclude { 2 } else { 1 };
            b[21] = e.sources.len() as u8;
            b[22] = u8::from(e.group.is_ipv4());
            for (k, src) in e.sources.iter().enumerate() {
                put_ip(&mut b[24 + 16 * k..40 + 16 * k], *src);
            }
        }
        let _ = self.map.slice().copy_from(OFF_MC_TABLE, &table);
        self.u32_at(OFF_MC_FLAGS).store(if m.all { MC_ALL } else { 0 }, Ordering::Relaxed);
        self.u32_at(OFF_MC_COUNT).store(m.list.len() as u32, Ordering::Relaxed);
        seq.store(cur + 2, Ordering::Release);
        Ok(())
    }

    /// The socket's memberships; None if they are being rewritten all along or the table
    /// is not one (forged): the caller must not trust the record for multicast.
    pub fn memberships(&self) -> Option<Memberships> {
        let seq = self.u32_at(OFF_MC_SEQ);
        for _ in 0..64 {
            let before = seq.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let mut table = vec![0u8; MC_SLOTS * MC_ENTRY];
            self.map.slice().copy_to(OFF_MC_TABLE, &mut table).ok()?;
            let flags = self.u32_at(OFF_MC_FLAGS).load(Ordering::Relaxed);
            let count = self.u32_at(OFF_MC_COUNT).load(Ordering::Relaxed) as usize;
            if seq.load(Ordering::Acquire) != before {
                continue;
            }
            if count > MC_SLOTS {
                return None;
            }
            let mut list = Vec::with_capacity(count);
            for b in table.chunks_exact(MC_ENTRY).take(count) {
                let v4 = b[22] == 1;
                let nsrc = b[21] as usize;
                if !(b[20] == 1 || b[20] == 2) || nsrc > MC_SOURCES {
                    return None;
                }
                let group = get_ip(&b[0..16], v4)?;
                let sources =
                    (0..nsrc).map(|k| get_ip(&b[24 + 16 * k..40 + 16 * k], v4)).collect::<Option<Vec<_>>>()?;
                list.push(Membership {
                    group,
                    ifindex: u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")),
                    exclude: b[20] == 2,
                    sources,
                });
            }
            return Some(Memberships { list, all: flags & MC_ALL != 0 });
        }
        None
    }

    // ---- senders ---------------------------------------------------------------------

    /// Puts the datagram made of `parts` (`len` bytes in all, at most [`MAX_PAYLOAD`]) from
    /// `src` into the ring, if the word is in ring mode; a full receive buffer drops it
    /// (counted), as the kernel would. `ipv6`: the family the packet would travel as.
    pub fn offer(&self, src: SocketAddr, parts: &[&[u8]], len: usize, ipv6: bool) -> Offer {
        if len > MAX_PAYLOAD {
            return Offer::Kernel;
        }
        let w = self.state();
        if w.kernel_mode() || w.closed() {
            return Offer::Kernel;
        }
        let _lock = self.lock_tx();
        self.offer_locked(src, parts, len, ipv6)
    }

    /// Takes the send lock: while it is held the word does not change to kernel mode.
    pub fn lock_tx(&self) -> SharedLockGuard<'_> {
        lock_shared(self.u64_at(OFF_TX_LOCK))
    }

    /// Whether `holds` is true of a receiver-written count (at `off`), judged first by this
    /// process's last look at it (`seen`, never ahead of the count) and, only when that says
    /// no, by a fresh look, which becomes the last.
    fn holds_after_a_look(&self, seen: &AtomicU64, off: usize, holds: impl Fn(u64) -> bool) -> bool {
        if holds(seen.load(Ordering::Relaxed)) {
            return true;
        }
        let now = self.u64_at(off).load(Ordering::Acquire);
        seen.store(now, Ordering::Relaxed);
        holds(now)
    }

    /// [`Self::offer`] with the send lock held.
    fn offer_locked(&self, src: SocketAddr, parts: &[&[u8]], len: usize, ipv6: bool) -> Offer {
        if len > MAX_PAYLOAD || self.state().kernel_mode() {
            return Offer::Kernel;
        }
        let charge = kernel_charge(len, ipv6);
        let charged = self.u64_at(OFF_CHARGED).load(Ordering::Relaxed);
        let rcvbuf = self.rcvbuf();
        let accepts = |released: u64| kernel_accepts(charged.saturating_sub(released), charge, rcvbuf);
        if !self.holds_after_a_look(&self.released_seen, OFF_RELEASED, accepts) {
            self.u64_at(OFF_DROPS).fetch_add(1, Ordering::Relaxed);
            return Offer::Dropped;
        }
        let record = (RECORD_HEADER + len).div_ceil(8) * 8;
        let tail = self.u64_at(OFF_TAIL).load(Ordering::Relaxed);
        let ring_bytes = self.ring_bytes;
        let pos = (tail % ring_bytes as u64) as usize;
        let skip = if pos + record > ring_bytes { ring_bytes - pos } else { 0 };
        let span = (skip + record) as u64;
        let fits = |head: u64| tail.wrapping_sub(head).saturating_add(span) <= ring_bytes as u64;
        if !self.holds_after_a_look(&self.head_seen, OFF_HEAD, fits) {
            // Only when the receive buffer is larger than the ring allows (not the case for
            // any buffer a record is made for), or the head is garbage.
            self.u64_at(OFF_DROPS).fetch_add(1, Ordering::Relaxed);
            return Offer::Dropped;
        }
        let ring = self.ring();
        let start = if skip > 0 {
            if ring.copy_from(pos, &SKIP.to_le_bytes()).is_err() {
                return Offer::Kernel;
            }
            0
        } else {
            pos
        };
        let mut header = [0u8; RECORD_HEADER];
        header[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        header[4..8].copy_from_slice(&charge.to_le_bytes());
        encode_addr(&mut header[8..28], src);
        if ring.copy_from(start, &header).is_err() {
            return Offer::Kernel;
        }
        let mut at = start + RECORD_HEADER;
        for p in parts {
            if ring.copy_from(at, p).is_err() {
                return Offer::Kernel;
            }
            at += p.len();
        }
        let mut cur = self.word().load(Ordering::Acquire);
        loop {
            let s = UdpState(cur);
            if s.kernel_mode() || s.closed() {
                return Offer::Kernel;
            }
            let next = (cur & !P_MASK) | (u64::from(s.published().wrapping_add(1)));
            match self.word().compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        self.u64_at(OFF_TAIL).store(tail + span, Ordering::Relaxed);
        // Charged once published (the receiver may have released it already: the charged
        // count only grows, so the difference is never read below zero).
        self.u64_at(OFF_CHARGED).store(charged + u64::from(charge), Ordering::Release);
        self.u64_at(OFF_RING_DATAGRAMS).fetch_add(1, Ordering::Relaxed);
        self.u64_at(OFF_RING_PAYLOAD).fetch_add(len as u64, Ordering::Relaxed);
        Offer::Delivered
    }

    /// Before a sender that knows this record sends to its socket through the kernel:
    /// switches the word to kernel mode (the datagram must be read after every ring
    /// datagram before it) and counts the send in flight. False when too many are in flight
    /// already: try again. Every true is followed by [`Self::end_kernel_send`].
    pub fn begin_kernel_send(&self) -> bool {
        let _lock = self.lock_tx();
        let mut cur = self.word().load(Ordering::Acquire);
        loop {
            let s = UdpState(cur);
            if s.in_flight() == COUNT7 {
                return false;
            }
            let k = u64::from(s.kernel_sends().wrapping_add(1));
            let next = ((cur & !(K_MASK << K_SHIFT)) | (k << K_SHIFT) | KERNEL_BIT) + (1 << IN_FLIGHT_SHIFT);
            match self.word().compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    self.u64_at(OFF_KERNEL_DATAGRAMS).fetch_add(1, Ordering::Relaxed);
                    return true;
                }
                Err(now) => cur = now,
            }
        }
    }

    /// The kernel send begun by [`Self::begin_kernel_send`] returned.
    pub fn end_kernel_send(&self) {
        self.word().fetch_sub(1 << IN_FLIGHT_SHIFT, Ordering::AcqRel);
    }

    // ---- the receiver ------------------------------------------------------------------

    /// Takes the receive lock (one reader at a time, as the kernel socket's lock does).
    pub fn lock_rx(&self) -> SharedLockGuard<'_> {
        lock_shared(self.u64_at(OFF_RX_LOCK))
    }

    /// Whether ring datagrams wait.
    #[inline]
    pub fn ring_readable(&self) -> bool {
        self.state().published() != self.u32_at(OFF_CONSUMED).load(Ordering::Acquire)
    }

    /// The datagram at the front of the ring, if any (receive lock held).
    pub fn front(&self) -> Result<Option<Datagram>, Corrupt> {
        let consumed = self.u32_at(OFF_CONSUMED).load(Ordering::Relaxed);
        if self.state().published() == consumed {
            return Ok(None);
        }
        let head = self.u64_at(OFF_HEAD).load(Ordering::Relaxed);
        let ring = self.ring();
        let ring_bytes = self.ring_bytes;
        let mut pos = (head % ring_bytes as u64) as usize;
        let mut header = [0u8; RECORD_HEADER];
        let mut skip = 0;
        if ring.copy_to(pos, &mut header[..4]).is_err() {
            return Err(Corrupt("head outside the ring"));
        }
        if u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) == SKIP {
            skip = ring_bytes - pos;
            pos = 0;
        }
        if pos + RECORD_HEADER > ring_bytes || ring.copy_to(pos, &mut header).is_err() {
            return Err(Corrupt("datagram header past the ring's end"));
        }
        let len = u32::from_le_bytes(header[0..4].try_into().expect("4 bytes")) as usize;
        let charge = u32::from_le_bytes(header[4..8].try_into().expect("4 bytes"));
        if len > MAX_PAYLOAD || pos + RECORD_HEADER + len > ring_bytes {
            return Err(Corrupt("datagram length"));
        }
        if charge != kernel_charge(len, false) && charge != kernel_charge(len, true) {
            return Err(Corrupt("datagram charge"));
        }
        let src = decode_addr(&header[8..28]).ok_or(Corrupt("source address"))?;
        let record = (RECORD_HEADER + len).div_ceil(8) * 8;
        Ok(Some(Datagram { len, src, payload: pos + RECORD_HEADER, span: (skip + record) as u64, charge }))
    }

    /// Copies up to `dst.len()` bytes of `d`'s payload from `offset` into `dst`; returns
    /// how many.
    pub fn copy_payload(&self, d: &Datagram, offset: usize, dst: &mut [u8]) -> usize {
        let n = dst.len().min(d.len.saturating_sub(offset));
        if n == 0 || self.ring().copy_to(d.payload + offset, &mut dst[..n]).is_err() {
            return 0;
        }
        n
    }

    /// As [`Self::copy_payload`], into raw memory.
    ///
    /// # Safety
    /// `dst` is valid for writes of `len` bytes.
    pub unsafe fn copy_payload_raw(&self, d: &Datagram, offset: usize, dst: *mut u8, len: usize) -> usize {
        let n = len.min(d.len.saturating_sub(offset));
        // SAFETY: as guaranteed by the caller; n <= len.
        if n == 0 || unsafe { self.ring().copy_to_raw(d.payload + offset, dst, n) }.is_err() {
            return 0;
        }
        n
    }

    /// Removes `d` (the front datagram) from the ring (receive lock held).
    pub fn pop(&self, d: &Datagram) {
        let head = self.u64_at(OFF_HEAD);
        head.store(head.load(Ordering::Relaxed) + d.span, Ordering::Release);
        let consumed = self.u32_at(OFF_CONSUMED);
        consumed.store(consumed.load(Ordering::Relaxed).wrapping_add(1), Ordering::Release);
        let released = self.u64_at(OFF_RELEASED);
        released.store(released.load(Ordering::Relaxed) + u64::from(d.charge), Ordering::Release);
    }

    /// Before a receiver sleeps in the kernel: switches the word to kernel mode counting a
    /// sleeper, only if the ring is empty (false: datagrams wait, do not sleep). Every
    /// true is followed by [`Self::finish_sleep`].
    pub fn prepare_sleep(&self) -> bool {
        let mut lock = Some(self.lock_tx());
        let mut cur = self.word().load(Ordering::Acquire);
        loop {
            let s = UdpState(cur);
            if s.published() != self.u32_at(OFF_CONSUMED).load(Ordering::Acquire) {
                return false;
            }
            if s.sleepers() == COUNT7 {
                // As many sleepers as the count holds (the word is in kernel mode while
                // they sleep): wait for one of them to leave.
                drop(lock.take());
                std::thread::yield_now();
                lock = Some(self.lock_tx());
                cur = self.word().load(Ordering::Acquire);
                continue;
            }
            let next = (cur | KERNEL_BIT) + (1 << SLEEPERS_SHIFT);
            match self.word().compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    // A sleeper needs the kernel's datagrams to wake it: no sender holds back.
                    self.stop_wanting_ring();
                    return true;
                }
                Err(now) => cur = now,
            }
        }
    }

    /// Receiver, reading the kernel queue while the word is in kernel mode and it spins:
    /// it wants the ring back. Called again after each kernel datagram it reads, so that
    /// senders see it make progress ([`Self::ring_wanted`]).
    pub fn want_ring(&self) {
        let w = self.u32_at(OFF_RING_WANTED);
        let v = w.load(Ordering::Relaxed);
        w.store(if v & 1 == 0 { v.wrapping_add(1) } else { v.wrapping_add(2) }, Ordering::Release);
    }

    /// Receiver: no longer waiting to take the ring back (it did, or it sleeps).
    pub fn stop_wanting_ring(&self) {
        let w = self.u32_at(OFF_RING_WANTED);
        let v = w.load(Ordering::Relaxed);
        if v & 1 != 0 {
            w.store(v.wrapping_add(1), Ordering::Release);
        }
    }

    /// Sender: the receiver's wish for the ring, if it has one now (a value that moves
    /// while the receiver reads the kernel).
    #[inline]
    pub fn ring_wanted(&self) -> Option<u32> {
        let v = self.u32_at(OFF_RING_WANTED).load(Ordering::Acquire);
        (v & 1 != 0).then_some(v)
    }

    /// A sleeper prepared by [`Self::prepare_sleep`] woke.
    pub fn finish_sleep(&self) {
        self.word().fetch_sub(1 << SLEEPERS_SHIFT, Ordering::AcqRel);
    }

    /// Switches the word back to ring mode if it still is `seen`, a kernel-mode word with no
    /// sleeper and no kernel send in flight. The caller saw the kernel queue empty after it
    /// read `seen`.
    pub fn try_ring_mode(&self, seen: UdpState) -> bool {
        if !seen.kernel_mode() || seen.closed() || seen.sleepers() != 0 || seen.in_flight() != 0 {
            return false;
        }
        let switched =
            self.word().compare_exchange(seen.0, seen.0 & !KERNEL_BIT, Ordering::AcqRel, Ordering::Acquire).is_ok();
        if switched {
            self.stop_wanting_ring();
        }
        switched
    }

    /// No more ring traffic (the socket closed, or stays on the kernel for good): senders
    /// use the kernel from now on.
    pub fn close(&self) {
        let _lock = self.lock_tx();
        self.word().fetch_or(KERNEL_BIT | CLOSED_BIT, Ordering::AcqRel);
    }

    // ---- holders -----------------------------------------------------------------------

    fn holder_slots(&self) -> HolderSlots<'_> {
        HolderSlots::new(self.map.slice(), OFF_HOLDERS)
    }
    /// Records `who` as a holder (see [`HolderSlots::add`]).
    pub fn add_holder(&self, who: ProcessIdentity) -> bool {
        self.holder_slots().add(who)
    }
    /// Removes `who`; returns how many live holders remain.
    pub fn remove_holder(&self, who: ProcessIdentity) -> usize {
        self.holder_slots().remove(who)
    }
    /// The live holders.
    pub fn holders(&self) -> Vec<ProcessIdentity> {
        self.holder_slots().live()
    }
}

/// Puts one multicast datagram into the ring of every record of `members`, or into none:
/// with every member's send lock held (taken in cookie order, so two senders never wait
/// for each other) no word can change to kernel mode; if one already is in kernel mode
/// (its receiver sleeps, a kernel send went before) nothing is delivered and None says the
/// datagram must go through the kernel to all of them. Otherwise each member gets the
/// datagram or, its buffer full, drops and counts it, as the kernel's delivery does.
pub fn offer_to_all(
    members: &[&UdpRecord],
    src: SocketAddr,
    parts: &[&[u8]],
    len: usize,
    ipv6: bool,
) -> Option<Vec<Offer>> {
    if len > MAX_PAYLOAD {
        return None;
    }
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_key(|&i| members[i].cookie);
    order.dedup_by_key(|i| members[*i].cookie);
    if order.len() != members.len() {
        return None; // a record twice: not a set of members
    }
    let _locks: Vec<SharedLockGuard<'_>> = order.iter().map(|&i| members[i].lock_tx()).collect();
    if members.iter().any(|m| {
        let s = m.state();
        s.kernel_mode() || s.closed()
    }) {
        return None;
    }
    Some(members.iter().map(|m| m.offer_locked(src, parts, len, ipv6)).collect())
}

/// What the user's library processes say of their UDP sockets' ports
/// (`<fabric dir>/sockets/udp-binds`), in two parts:
///
/// - a counter each moves when one of its sockets binds an explicit port: a sender compares
///   it at every datagram and asks the kernel again who takes its datagrams when it moved,
///   so a socket bound where a killed receiver was gets the datagrams at once (when the
///   binder has the library);
/// - a map of ports (a bit each) where a socket of theirs got a record, set before the
///   record is made and never cleared: a sender to a port whose bit is clear knows without
///   asking the kernel that no socket there has a record (a DNS server, a syslog daemon
///   without the library), so a program that makes a socket per datagram pays no lookup.
///   A set bit only means "ask".
pub struct UdpBinds {
    map: Mapping,
}

impl UdpBinds {
    /// The counter's page, then the port map's 8 KiB.
    const PORTS_AT: usize = 4096;
    const LEN: usize = Self::PORTS_AT + (1 << 16) / 8;

    /// Opens (making it if needed, or growing a shorter one) the fabric directory's file.
    pub fn open(fabric_dir: &Path) -> io::Result<UdpBinds> {
        let dir = sockets_dir(fabric_dir);
        ensure_private_dir(fabric_dir)?;
        ensure_private_dir(&dir)?;
        let file = open_or_create(&dir.join("udp-binds"))?;
        if file.metadata()?.len() < Self::LEN as u64 {
            reserve(&file, Self::LEN as u64)?;
        }
        if file.metadata()?.len() < Self::LEN as u64 {
            return Err(invalid("udp-binds shorter than its port map"));
        }
        Ok(UdpBinds { map: Mapping::map(file.as_fd(), 0, Self::LEN, Access::ReadWrite)? })
    }

    /// The counter now.
    #[inline]
    pub fn get(&self) -> u64 {
        // The mapping is page-aligned; offset 0 is aligned.
        self.map.slice().header_u64(0).load(Ordering::Acquire)
    }

    /// A socket bound an explicit port.
    pub fn bump(&self) {
        self.map.slice().header_u64(0).fetch_add(1, Ordering::AcqRel);
    }

    /// The word of the port map holding `port`'s bit, and the bit.
    fn port_bit(&self, port: u16) -> (&AtomicU64, u64) {
        let word = Self::PORTS_AT + usize::from(port / 64) * 8;
        (self.map.slice().header_u64(word), 1 << (port % 64))
    }

    /// A socket of ours on `port` is about to get a record.
    pub fn mark_port(&self, port: u16) {
        let (word, bit) = self.port_bit(port);
        if word.load(Ordering::Relaxed) & bit == 0 {
            word.fetch_or(bit, Ordering::AcqRel);
        }
    }

    /// Whether a socket of ours on `port` may have a record (false: none has).
    #[inline]
    pub fn port_marked(&self, port: u16) -> bool {
        let (word, bit) = self.port_bit(port);
        word.load(Ordering::Acquire) & bit != 0
    }
}

/// One accelerated UDP socket as `lanes status` lists it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct UdpInfo {
    pub local: SocketAddr,
    pub holders: Vec<u32>,
    pub ring_datagrams: u64,
    pub ring_bytes: u64,
    pub drops: u64,
    pub kernel_datagrams: u64,
    /// Datagrams go through the kernel now (a receiver sleeps, or it closed).
    pub kernel_mode: bool,
    /// No live holder: left behind by a killed process.
    pub stale: bool,
    /// Its multicast memberships (`group@interface`, with `+source` or `-source` filters).
    pub groups: Vec<String>,
}

fn describe_membership(m: &Membership) -> String {
    let mut out = format!("{}@{}", m.group, crate::platform::net::interface_name(m.ifindex));
    for src in &m.sources {
        out.push_str(&format!("{}{src}", if m.exclude { '-' } else { '+' }));
    }
    out
}

/// Every UDP record in the fabric directory (unreadable or corrupt ones are skipped).
pub fn list_udp(fabric_dir: &Path) -> Vec<UdpInfo> {
    let Ok(entries) = std::fs::read_dir(sockets_dir(fabric_dir)) else { return Vec::new() };
    let mut out: Vec<UdpInfo> = entries
        .flatten()
        .filter_map(|e| {
            let (netns, cookie) = parse_name(e.file_name().to_str()?)?;
            let rec = UdpRecord::open(fabric_dir, netns, cookie).ok()?;
            let mut holders: Vec<u32> = rec.holders().iter().map(|h| h.pid()).collect();
            // A forked child may be in two slots (its parent and itself added it at once).
            holders.sort_unstable();
            holders.dedup();
            let (ring_datagrams, ring_bytes, drops, kernel_datagrams) = rec.counts();
            Some(UdpInfo {
                local: rec.local(),
                stale: holders.is_empty(),
                holders,
                ring_datagrams,
                ring_bytes,
                drops,
                kernel_datagrams,
                kernel_mode: rec.state().kernel_mode(),
                groups: rec.memberships().map(|m| m.list.iter().map(describe_membership).collect()).unwrap_or_default(),
            })
        })
        .collect();
    out.sort_by_key(|u| u.local);
    out
}

/// Removes the UDP records no live process holds; returns how many.
pub fn cleanup_udp(fabric_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(sockets_dir(fabric_dir)) else { return 0 };
    let mut removed = 0;
    for e in entries.flatten() {
        let Some((netns, cookie)) = e.file_name().to_str().and_then(parse_name) else { continue };
        let stale = UdpRecord::open(fabric_dir, netns, cookie).map_or(true, |r| r.holders().is_empty());
        if stale && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The family a datagram from `src` to `dst` travels as: IPv6 only when both are real
/// IPv6 addresses.
pub fn travels_as_ipv6(dst: IpAddr) -> bool {
    matches!(dst, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("lanes-udp-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn src() -> SocketAddr {
        "127.0.0.1:4000".parse().unwrap()
    }

    #[test]
    fn the_port_map_remembers_marked_ports_and_an_older_file_grows() {
        let d = dir("binds");
        // A file of the counter's page alone (an older library made it), counter at 7.
        std::fs::create_dir_all(sockets_dir(&d)).unwrap();
        let mut page = vec![0u8; 4096];
        page[..8].copy_from_slice(&7u64.to_ne_bytes());
        std::fs::write(sockets_dir(&d).join("udp-binds"), &page).unwrap();
        let b = UdpBinds::open(&d).unwrap();
        assert_eq!(b.get(), 7, "the counter survives the growth");
        for port in [0u16, 53, 63, 64, 4321, u16::MAX] {
            assert!(!b.port_marked(port), "{port}");
        }
        b.mark_port(53);
        b.mark_port(u16::MAX);
        b.mark_port(53);
        assert!(b.port_marked(53) && b.port_marked(u16::MAX));
        assert!(!b.port_marked(52) && !b.port_marked(54) && !b.port_marked(u16::MAX - 1));
        // Another opener sees the same map.
        assert!(UdpBinds::open(&d).unwrap().port_marked(53));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn charges_match_the_kernels_measured_truesize() {
        // Linux 6, loopback, SO_MEMINFO after one datagram (IPv4, IPv6).
        for (len, v4, v6) in [
            (0, 832, 832),
            (185, 832, 1280),
            (197, 832, 1280),
            (198, 1280, 1280),
            (645, 1280, 2304),
            (646, 2304, 2304),
            (1669, 2304, 4352),
            (3718, 8448, 8448),
            (7814, 16640, 16640),
            (15992, 16640, 16824),
            (16005, 16837, 16837),
            (65000, 65832, 65832),
        ] {
            assert_eq!((kernel_charge(len, false), kernel_charge(len, true)), (v4, v6), "{len} bytes");
        }
        // 256 small datagrams fill the default 212992-byte buffer; an empty queue takes any.
        assert!(kernel_accepts(255 * 832, 832, 212992));
        assert!(!kernel_accepts(256 * 832, 832, 212992));
        assert!(kernel_accepts(0, 65832, 2304));
    }

    #[test]
    fn datagrams_keep_boundaries_sources_and_order_across_the_ring_end() {
        let d = dir("order");
        let rec =
            UdpRecord::create(&d, 1, 77, "127.0.0.1:5000".parse().unwrap(), 212992, &Memberships::default()).unwrap();
        let reader = UdpRecord::open(&d, 1, 77).unwrap();
        assert_eq!(rec.offer(src(), &[b"x"], 1, false), Offer::Kernel, "a record starts in kernel mode");
        assert!(reader.try_ring_mode(reader.state()));
        let mut sent = 0u64;
        let mut got = 0u64;
        // Sizes that do not divide the ring: many wraps.
        for round in 0..200u64 {
            let len = (round as usize * 977) % 9000;
            let payload: Vec<u8> = (0..len).map(|i| (i as u64 + round) as u8).collect();
            let from: SocketAddr = format!("[::1]:{}", 1000 + round).parse().unwrap();
            match rec.offer(from, &[&payload[..len / 2], &payload[len / 2..]], len, true) {
                Offer::Delivered => sent += 1,
                other => panic!("{other:?}"),
            }
            let _l = reader.lock_rx();
            let f = reader.front().unwrap().expect("a datagram");
            assert_eq!((f.len, f.src), (len, from));
            let mut buf = vec![0u8; len + 5];
            assert_eq!(reader.copy_payload(&f, 0, &mut buf), len);
            assert_eq!(&buf[..len], &payload[..]);
            reader.pop(&f);
            got += 1;
        }
        assert_eq!((sent, got, reader.charged()), (200, 200, 0));
        assert_eq!(reader.front().unwrap(), None);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_receivers_wish_for_the_ring_moves_while_it_reads_and_ends_when_it_switches_or_sleeps() {
        let d = dir("wanted");
        let rec =
            UdpRecord::create(&d, 1, 78, "127.0.0.1:5000".parse().unwrap(), 212992, &Memberships::default()).unwrap();
        let sender = UdpRecord::open(&d, 1, 78).unwrap();
        assert_eq!(sender.ring_wanted(), None, "a new record: nobody wants anything");
        rec.want_ring();
        let first = sender.ring_wanted().expect("wanted");
        rec.want_ring();
        let second = sender.ring_wanted().expect("still wanted");
        assert_ne!(first, second, "each kernel datagram read moves the wish");
        // A kernel send in flight keeps the word in kernel mode: the wish stays.
        assert!(sender.begin_kernel_send());
        assert!(!rec.try_ring_mode(rec.state()));
        assert!(sender.ring_wanted().is_some());
        sender.end_kernel_send();
        // The switch ends it.
        assert!(rec.try_ring_mode(rec.state()));
        assert_eq!(sender.ring_wanted(), None);
        // So does a sleep.
        rec.want_ring();
        assert!(rec.prepare_sleep());
        assert_eq!(sender.ring_wanted(), None, "a sleeper needs the kernel's datagrams");
        rec.finish_sleep();
        rec.want_ring();
        rec.stop_wanting_ring();
        assert_eq!(sender.ring_wanted(), None);
        rec.stop_wanting_ring();
        assert_eq!(sender.ring_wanted(), None, "stopping twice is stopping once");
    }

    #[test]
    fn a_ring_holds_its_receive_buffer_and_a_forged_size_is_refused() {
        assert_eq!(ring_for(212992), Some(RING_BYTES));
        assert_eq!(ring_for(2 << 20), Some(4 << 20), "a raised rmem_max's buffer (DDS asks for 1 MiB, doubled)");
        assert_eq!(ring_for(MAX_RING_BYTES as u32), None, "past the largest ring: the kernel's");
        let d = dir("ring-size");
        let rec =
            UdpRecord::create(&d, 1, 79, "127.0.0.1:5000".parse().unwrap(), 2 << 20, &Memberships::default()).unwrap();
        assert!(rec.holds_rcvbuf(2 << 20) && !rec.holds_rcvbuf(4 << 20));
        let reader = UdpRecord::open(&d, 1, 79).unwrap();
        assert!(reader.try_ring_mode(reader.state()));
        // More than the smallest ring holds, all queued at once.
        let payload = vec![7u8; 60_000];
        for _ in 0..20 {
            assert_eq!(rec.offer(src(), &[&payload], payload.len(), false), Offer::Delivered);
        }
        for _ in 0..20 {
            let _l = reader.lock_rx();
            let f = reader.front().unwrap().expect("a datagram");
            assert_eq!(f.len, payload.len());
            reader.pop(&f);
        }
        // A header whose ring is not a power of two, or longer than the file, is refused.
        let path = rec.path().to_path_buf();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[OFF_RING..OFF_RING + 4].copy_from_slice(&((3 << 20) as u32).to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        assert!(UdpRecord::open(&d, 1, 79).is_err());
        bytes[OFF_RING..OFF_RING + 4].copy_from_slice(&((8 << 20) as u32).to_le_bytes());
        std::fs::write(&path, &bytes).unwrap();
        assert!(UdpRecord::open(&d, 1, 79).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_full_buffer_drops_and_counts_as_the_kernel_does() {
        let d = dir("drops");
        let rec =
            UdpRecord::create(&d, 1, 78, "127.0.0.1:5000".parse().unwrap(), 212992, &Memberships::default()).unwrap();
        assert!(rec.try_ring_mode(rec.state()));
        let outcomes: Vec<Offer> = (0..300).map(|_| rec.offer(src(), &[b"hello"], 5, false)).collect();
        assert_eq!(outcomes.iter().filter(|o| **o == Offer::Delivered).count(), 256);
        assert_eq!(rec.counts().2, 44);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_sleeper_or_a_kernel_send_turns_the_ring_off_until_the_receiver_turns_it_on() {
        let d = dir("modes");
        let rec =
            UdpRecord::create(&d, 1, 79, "127.0.0.1:5000".parse().unwrap(), 212992, &Memberships::default()).unwrap();
        assert!(rec.try_ring_mode(rec.state()));
        assert_eq!(rec.offer(src(), &[b"a"], 1, false), Offer::Delivered);
        assert!(!rec.prepare_sleep(), "a datagram waits: no sleep");
        {
            let _l = rec.lock_rx();
            let f = rec.front().unwrap().unwrap();
            rec.pop(&f);
        }
        assert!(rec.prepare_sleep());
        assert_eq!(rec.offer(src(), &[b"b"], 1, false), Offer::Kernel, "the sleeper is woken by the kernel");
        let asleep = rec.state();
        assert!(!rec.try_ring_mode(asleep), "not while a receiver sleeps");
        rec.finish_sleep();
        // A kernel send between the receiver's look and its switch keeps the kernel mode.
        let seen = rec.state();
        assert!(rec.begin_kernel_send());
        assert!(!rec.try_ring_mode(rec.state()), "a kernel send in flight");
        rec.end_kernel_send();
        assert!(!rec.try_ring_mode(seen), "K moved since the receiver looked");
        assert!(rec.try_ring_mode(rec.state()));
        rec.close();
        assert_eq!(rec.offer(src(), &[b"c"], 1, false), Offer::Kernel);
        assert!(!rec.try_ring_mode(rec.state()));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn memberships_round_trip_and_a_multicast_datagram_reaches_all_members_or_none() {
        let d = dir("mcast");
        let group: IpAddr = "239.1.2.3".parse().unwrap();
        let m = Memberships {
            list: vec![
                Membership { group, ifindex: 1, exclude: true, sources: vec![] },
                Membership {
                    group: "ff15::7".parse().unwrap(),
                    ifindex: 1,
                    exclude: false,
                    sources: vec!["fd00::2".parse().unwrap()],
                },
            ],
            all: true,
        };
        let a = UdpRecord::create(&d, 1, 81, "0.0.0.0:5000".parse().unwrap(), 212992, &m).unwrap();
        let b =
            UdpRecord::create(&d, 1, 82, "239.1.2.3:5000".parse().unwrap(), 212992, &Memberships::default()).unwrap();
        assert_eq!(UdpRecord::open(&d, 1, 81).unwrap().memberships(), Some(m.clone()));
        assert!(m.of(group, 1).unwrap().admits("10.0.0.1".parse().unwrap()));
        assert!(!m.list[1].admits("fd00::3".parse().unwrap()));
        let too_many = Memberships { list: vec![m.list[0].clone(); MC_SLOTS + 1], all: true };
        assert!(b.set_memberships(&too_many).is_err());
        assert_eq!(b.memberships(), Some(Memberships::default()), "a refused table leaves the old one");
        // A forged table (a mode that is none, a count past the slots) is not trusted.
        let forged = UdpRecord::open(&d, 1, 81).unwrap();
        forged.map.slice().copy_from(OFF_MC_TABLE + 20, &[7]).unwrap();
        assert_eq!(forged.memberships(), None);
        forged.map.slice().copy_from(OFF_MC_TABLE + 20, &[2]).unwrap();
        forged.u32_at(OFF_MC_COUNT).store(MC_SLOTS as u32 + 1, Ordering::Relaxed);
        assert_eq!(forged.memberships(), None);
        forged.u32_at(OFF_MC_COUNT).store(2, Ordering::Relaxed);
        assert_eq!(forged.memberships(), Some(m.clone()));
        assert!(a.try_ring_mode(a.state()));
        assert_eq!(offer_to_all(&[&a, &b], src(), &[b"x"], 1, false), None, "b is in kernel mode: nobody");
        assert_eq!(a.counts().0, 0);
        assert!(b.try_ring_mode(b.state()));
        assert_eq!(offer_to_all(&[&b, &a], src(), &[b"y"], 1, false), Some(vec![Offer::Delivered; 2]));
        assert_eq!((a.counts().0, b.counts().0), (1, 1));
        assert_eq!(list_udp(&d)[0].groups, ["239.1.2.3@lo", "ff15::7@lo+fd00::2"]);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_forged_ring_is_refused_not_followed() {
        let d = dir("corrupt");
        let rec =
            UdpRecord::create(&d, 1, 80, "127.0.0.1:5000".parse().unwrap(), 212992, &Memberships::default()).unwrap();
        assert!(rec.try_ring_mode(rec.state()));
        assert_eq!(rec.offer(src(), &[b"abc"], 3, false), Offer::Delivered);
        rec.ring().copy_from(0, &(1u32 << 30).to_le_bytes()).unwrap();
        let _l = rec.lock_rx();
        assert_eq!(rec.front(), Err(Corrupt("datagram length")));
        assert_eq!(list_udp(&d).len(), 1);
        assert_eq!(cleanup_udp(&d), 0, "held by this process");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
