//! The shared-memory path: when sender and receiver both use the API on one host, the
//! datagrams go through a ring in a file under `/dev/shm` instead of the kernel's UDP.
//!
//! A receiver on the `shm` (or automatic) path publishes a ring named by its user id, address
//! family and port ([`ring_path`]), created 0600, holding a write lock (an open-file-description
//! lock on byte 0) for as long as it lives. A sender whose destination is an address of this
//! host opens the ring of that port and uses it only if every header field checks out (magic,
//! version, sizes, the owner's user id, port, address and network namespace), the owner's lock
//! is held (the receiver is alive) and it can take the producer lock (byte 1): one sender per
//! ring; any other sender, and every plain UDP peer, goes through the kernel as before.
//!
//! The file is treated as hostile input on both sides: each side keeps its own copy of the
//! capacity and of the position it owns, validates the other side's position before use,
//! and bounds-checks every record against the mapping, so a wrong field makes it stop using
//! the ring (the sender falls back to UDP), never read or write outside the mapping.
//!
//! Layout (native byte order; the file is `HEADER_LEN + capacity` bytes):
//!
//! | offset | field |
//! |---|---|
//! | 0 | magic `LUSRING\0` (u64) |
//! | 8 | version (u32, 1) |
//! | 12 | header length (u32, 4096) |
//! | 16 | capacity of the data area (u64, a power of two, 256 KiB to 1 GiB) |
//! | 24 | owner pid (u32), 28: owner uid (u32) |
//! | 32 | the owner's network namespace (inode of /proc/self/ns/net, u64) |
//! | 40 | address family (u16: 4 or 6), 42: port (u16) |
//! | 48 | bound address (16 bytes; IPv4 in the first 4; all zero: any) |
//! | 64 | doorbell nonce (u64) |
//! | 128 | head: bytes written, ever (u64, the sender's) |
//! | 192 | tail: bytes consumed, ever (u64, the receiver's) |
//! | 200 | tail futex word (u32), 204: a sender waits for room (u32) |
//! | 256 | the receiver may sleep in the kernel (u32), 260: closed by the receiver (u32) |
//!
//! Records start at `HEADER_LEN + (position mod capacity)`, 8-byte aligned: a u32 length and
//! a u32 kind (0: a datagram of that many bytes follows, exactly what UDP would carry, the
//! sequence header included; 1: skip to the start of the data area), the datagram padded to
//! 8 bytes. A record never wraps.
//!
//! Wake-ups: a sender waiting for room sleeps on the tail futex (1 ms at a time, checking
//! that the receiver lives); a receiver that is about to block in its socket sets the sleep
//! flag, and the sender that then publishes data clears it and sends one 16-byte doorbell
//! datagram (`LUSBELL\x01` and the ring's nonce) to the receiver's socket, which drops it.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use lanes_platform::{SharedSlice, SliceError};
use std::time::{Duration, Instant};

use crate::header::{Header, HEADER_LEN as SEQ_HEADER_LEN};
use crate::MAX_UDP_PAYLOAD;

/// `LUSRING\0`.
pub const MAGIC: u64 = u64::from_le_bytes(*b"LUSRING\0");
pub const VERSION: u32 = 1;
/// The header's length: the data area starts here.
pub const HEADER_LEN: usize = 4096;
/// At least two of the largest records (a record that does not fit before the end of the
/// data area waits for room for the skipped end and itself).
pub const MIN_CAPACITY: u64 = 256 << 10;
pub const MAX_CAPACITY: u64 = 1 << 30;
/// The directory of the rings.
pub const DIR: &str = "/dev/shm";

pub const OFF_MAGIC: usize = 0;
pub const OFF_VERSION: usize = 8;
pub const OFF_HEADER_LEN: usize = 12;
pub const OFF_CAPACITY: usize = 16;
pub const OFF_PID: usize = 24;
pub const OFF_UID: usize = 28;
pub const OFF_NETNS: usize = 32;
pub const OFF_FAMILY: usize = 40;
pub const OFF_PORT: usize = 42;
pub const OFF_ADDR: usize = 48;
pub const OFF_NONCE: usize = 64;
pub const OFF_HEAD: usize = 128;
pub const OFF_TAIL: usize = 192;
const OFF_TAIL_WAKE: usize = 200;
const OFF_TX_WAITS: usize = 204;
const OFF_RX_SLEEPS: usize = 256;
const OFF_CLOSED: usize = 260;

/// A record's own header: length and kind.
pub const RECORD_HEADER: usize = 8;
pub const KIND_DATA: u32 = 0;
pub const KIND_WRAP: u32 = 1;
/// The doorbell datagram: these 8 bytes, then the ring's nonce (little-endian).
const DOORBELL_TAG: [u8; 8] = *b"LUSBELL\x01";
pub const DOORBELL_LEN: usize = 16;

/// The head (or tail) is published to the other side after this many bytes.
const PUBLISH_EVERY: u64 = 256 << 10;
/// A sender waiting for room spins this long before it sleeps.
const SPIN: Duration = Duration::from_micros(50);
/// A sender checks that the receiver lives this often (while waiting for room, and
/// between blocks).
pub(crate) const LIVENESS_EVERY: Duration = Duration::from_millis(10);

const F_OFD_GETLK: libc::c_int = 36;
const F_OFD_SETLK: libc::c_int = 37;
const FUTEX_WAIT: libc::c_int = 0;
const FUTEX_WAKE: libc::c_int = 1;

/// The ring file of a receiver bound to `addr`'s family and port, for this user.
pub fn ring_path(addr: SocketAddr) -> PathBuf {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let fam = if addr.is_ipv4() { "v4" } else { "v6" };
    PathBuf::from(format!("{DIR}/lanes-udpstream-{uid}-{fam}-{}", addr.port()))
}

fn family(addr: &SocketAddr) -> u16 {
    if addr.is_ipv4() {
        4
    } else {
        6
    }
}

fn addr_bytes(ip: IpAddr) -> [u8; 16] {
    let mut b = [0u8; 16];
    match ip {
        IpAddr::V4(a) => b[..4].copy_from_slice(&a.octets()),
        IpAddr::V6(a) => b.copy_from_slice(&a.octets()),
    }
    b
}

/// The inode of this thread's network namespace (0 when /proc is not there).
fn netns() -> u64 {
    std::fs::metadata("/proc/thread-self/ns/net")
        .or_else(|_| std::fs::metadata("/proc/self/ns/net"))
        .map_or(0, |m| m.ino())
}

/// A mapping of a whole ring file.
struct Map {
    base: *mut u8,
    len: usize,
    capacity: u64,
}

impl Map {
    fn new(fd: RawFd, len: usize) -> io::Result<Map> {
        // SAFETY: a fresh shared mapping of `len` bytes of an open file; the kernel picks the
        // address. The result is checked before use.
        let p = unsafe {
            libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map { base: p.cast(), len, capacity: (len - HEADER_LEN) as u64 })
    }

    /// The whole mapping as a checked slice: every access below is bounds- and
    /// alignment-checked there, so no offset read from the file reaches memory unchecked.
    fn slice(&self) -> SharedSlice<'_> {
        // SAFETY: `base..base + len` is the live shared mapping made in `new`, unmapped only
        // by `drop`, which the borrow of `self` keeps away; this process touches it only
        // through SharedSlice's volatile, atomic and copy accesses.
        unsafe { SharedSlice::from_raw_parts(self.base, self.len) }
    }

    /// A word of the header page (a constant offset inside the page, which the mapping
    /// always holds: at least HEADER_LEN bytes, page-aligned).
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.slice().header_u64(off)
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.slice().header_u32(off)
    }

    fn u16_at(&self, off: usize) -> u16 {
        self.slice().read::<u16>(off).unwrap_or(0)
    }

    fn bytes16_at(&self, off: usize) -> [u8; 16] {
        let mut b = [0u8; 16];
        // A failed copy leaves zeros: an address that matches nothing but "any".
        let _ = self.slice().copy_to(off, &mut b);
        b
    }

    /// The data area at position `pos` (mod capacity): `n` bytes that must not pass its end,
    /// or an error (a length read from the ring that does not fit).
    fn data(&self, pos: u64, n: usize) -> Result<SharedSlice<'_>, SliceError> {
        let off = (pos & (self.capacity - 1)) as usize;
        self.slice().subslice(HEADER_LEN, self.capacity as usize)?.subslice(off, n)
    }

    /// A record's length and kind at `pos`; `None` if they do not fit (never so for an
    /// 8-aligned position).
    fn record_header(&self, pos: u64) -> Option<(u32, u32)> {
        let r = self.data(pos, RECORD_HEADER).ok()?;
        Some((r.read::<u32>(0).ok()?, r.read::<u32>(4).ok()?))
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: `base`/`len` are the mapping made in `new`, unmapped once; no reference into
        // it outlives the `Map` (the accessors borrow `self`).
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

fn flock(fd: RawFd, byte: i64, set: bool) -> io::Result<bool> {
    // SAFETY: flock is plain data; all-zero is valid.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as _;
    fl.l_whence = libc::SEEK_SET as _;
    fl.l_start = byte;
    fl.l_len = 1;
    // SAFETY: `fl` lives across the call; F_OFD_* read and (GETLK) write it.
    let rc = unsafe { libc::fcntl(fd, if set { F_OFD_SETLK } else { F_OFD_GETLK }, &mut fl) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if set && matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EACCES)) {
            return Ok(false);
        }
        return Err(e);
    }
    // Set: taken. Get: is some other open file holding a conflicting lock?
    Ok(if set { true } else { fl.l_type != libc::F_UNLCK as _ })
}

fn futex_wait(word: &AtomicU32, seen: u32, t: Duration) {
    let ts = libc::timespec { tv_sec: t.as_secs() as _, tv_nsec: t.subsec_nanos() as _ };
    // SAFETY: `word` is a live, aligned u32 (in a shared mapping, so no PRIVATE flag); the
    // timeout lives across the call. Errors (EAGAIN, ETIMEDOUT, EINTR) all mean "look again".
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), FUTEX_WAIT, seen, &ts as *const libc::timespec, 0usize, 0u32)
    };
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: as for `futex_wait`; waking touches no memory.
    unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), FUTEX_WAKE, i32::MAX, 0usize, 0usize, 0u32) };
}

fn open_nofollow(path: &std::path::Path, flags: libc::c_int, mode: libc::mode_t) -> io::Result<File> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: a NUL-terminated path; the returned fd, if any, is owned by the File.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_NOFOLLOW | libc::O_CLOEXEC, mode as libc::c_uint) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nobody else owns.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Removes this user's rings whose receivers died without closing them (no lock held).
fn sweep_stale() {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let prefix = format!("lanes-udpstream-{uid}-");
    let Ok(dir) = std::fs::read_dir(DIR) else { return };
    for e in dir.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !name.starts_with(&prefix) {
            continue;
        }
        let path = e.path();
        // A name being made (`<name>.<pid>.<nonce>`) is left alone while its maker lives.
        if let Some(pid) = name.split('.').nth(1) {
            let Ok(pid) = pid.parse::<libc::pid_t>() else { continue };
            // SAFETY: signal 0 sends nothing; it only checks that the process exists.
            let gone = pid > 0 && unsafe { libc::kill(pid, 0) } != 0;
            if gone && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
                let _ = std::fs::remove_file(&path);
            }
            continue;
        }
        let Ok(f) = open_nofollow(&path, libc::O_RDWR | libc::O_NONBLOCK, 0) else { continue };
        let ours = f.metadata().is_ok_and(|m| m.file_type().is_file() && m.uid() == uid);
        if ours && flock(f.as_raw_fd(), 0, false).is_ok_and(|held| !held) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

fn round8(n: usize) -> usize {
    (n + 7) & !7
}

/// The receiver's side of a ring it published.
pub(crate) struct RxRing {
    map: Map,
    file: File,
    path: PathBuf,
    /// Bytes consumed (ours; published to `OFF_TAIL`).
    tail: u64,
    published: u64,
    doorbell: [u8; DOORBELL_LEN],
}

// SAFETY: the mapping is owned by this value and used through `&mut self` only.
unsafe impl Send for RxRing {}

/// How a drain ended.
pub(crate) enum Drained {
    /// Datagrams taken (counted in the report; 0: the ring was empty).
    Some(u64),
    /// The ring holds something that is not a valid record: it is given up.
    Corrupt,
}

impl RxRing {
    /// Publishes a ring of `capacity` bytes (rounded up to a power of two) for a socket bound
    /// to `bound`. `Ok(None)`: another live receiver owns that name.
    pub(crate) fn create(bound: SocketAddr, capacity: usize) -> io::Result<Option<RxRing>> {
        let cap = (capacity as u64).clamp(MIN_CAPACITY, MAX_CAPACITY).next_power_of_two();
        let path = ring_path(bound);
        sweep_stale();
        if let Ok(f) = open_nofollow(&path, libc::O_RDWR, 0) {
            if flock(f.as_raw_fd(), 0, false).unwrap_or(true) {
                return Ok(None);
            }
            // A ring left by a receiver that died: ours replaces it.
        }
        let nonce = {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
            let x = (t as u64) ^ ((std::process::id() as u64) << 32) ^ (&cap as *const u64 as u64).rotate_left(17);
            x.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1
        };
        let tmp = PathBuf::from(format!("{}.{}.{:x}", path.display(), std::process::id(), nonce));
        let file = open_nofollow(&tmp, libc::O_RDWR | libc::O_CREAT | libc::O_EXCL, 0o600)?;
        let made = (|| -> io::Result<RxRing> {
            file.set_len(HEADER_LEN as u64 + cap)?;
            let map = Map::new(file.as_raw_fd(), HEADER_LEN + cap as usize)?;
            // The header page is ours alone until the rename below; the magic, stored last,
            // publishes the rest.
            let h = map.slice();
            // SAFETY: geteuid has no preconditions and cannot fail.
            let uid = unsafe { libc::geteuid() };
            h.write::<u32>(OFF_VERSION, VERSION)?;
            h.write::<u32>(OFF_HEADER_LEN, HEADER_LEN as u32)?;
            h.write::<u64>(OFF_CAPACITY, cap)?;
            h.write::<u32>(OFF_PID, std::process::id())?;
            h.write::<u32>(OFF_UID, uid)?;
            h.write::<u64>(OFF_NETNS, netns())?;
            h.write::<u16>(OFF_FAMILY, family(&bound))?;
            h.write::<u16>(OFF_PORT, bound.port())?;
            h.copy_from(OFF_ADDR, &addr_bytes(bound.ip()))?;
            h.write::<u64>(OFF_NONCE, nonce)?;
            map.u64_at(OFF_MAGIC).store(MAGIC, Ordering::Release);
            if !flock(file.as_raw_fd(), 0, true)? {
                return Err(io::Error::from(io::ErrorKind::WouldBlock));
            }
            std::fs::rename(&tmp, &path)?;
            let mut doorbell = [0u8; DOORBELL_LEN];
            doorbell[..8].copy_from_slice(&DOORBELL_TAG);
            doorbell[8..].copy_from_slice(&nonce.to_le_bytes());
            Ok(RxRing { map, file: file.try_clone()?, path: path.clone(), tail: 0, published: 0, doorbell })
        })();
        if made.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        made.map(Some)
    }

    /// The doorbell datagram of this ring.
    pub(crate) fn doorbell(&self) -> &[u8] {
        &self.doorbell
    }

    /// Whether `wire` is this ring's doorbell (dropped, not counted).
    pub(crate) fn is_doorbell(&self, wire: &[u8]) -> bool {
        wire == self.doorbell
    }

    /// Whether the sender published bytes not consumed yet.
    pub(crate) fn has_data(&self) -> bool {
        self.map.u64_at(OFF_HEAD).load(Ordering::Acquire) != self.tail
    }

    /// Says whether the receiver may block in its socket (a sender then rings the doorbell
    /// when it publishes). Going to sleep, the caller re-checks [`Self::has_data`] after.
    pub(crate) fn set_sleeping(&self, sleeping: bool) {
        self.map.u32_at(OFF_RX_SLEEPS).store(sleeping as u32, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    fn publish(&mut self, calls: &mut u64) {
        self.map.u64_at(OFF_TAIL).store(self.tail, Ordering::Release);
        self.published = self.tail;
        fence(Ordering::SeqCst);
        if self.map.u32_at(OFF_TX_WAITS).swap(0, Ordering::SeqCst) != 0 {
            let w = self.map.u32_at(OFF_TAIL_WAKE);
            w.fetch_add(1, Ordering::SeqCst);
            futex_wake(w);
            *calls += 1;
        }
    }

    /// Moves datagrams from the ring into `buf` at `*filled` while one more fits
    /// (`buf.len() - *filled >= ds`), checking each as `accept` would a UDP datagram.
    pub(crate) fn drain(
        &mut self,
        buf: &mut [u8],
        filled: &mut usize,
        ds: usize,
        mut accept: impl FnMut(Option<Header>, usize, &mut crate::RecvReport) -> bool,
        r: &mut crate::RecvReport,
        header: bool,
    ) -> Drained {
        let cap = self.map.capacity;
        let head = self.map.u64_at(OFF_HEAD).load(Ordering::Acquire);
        let avail = head.wrapping_sub(self.tail);
        if avail > cap || head % 8 != 0 {
            return Drained::Corrupt;
        }
        let mut taken = 0u64;
        while self.tail != head && buf.len() - *filled >= ds {
            let left = head.wrapping_sub(self.tail);
            let Some((len, kind)) = self.map.record_header(self.tail) else { return Drained::Corrupt };
            let off = self.tail & (cap - 1);
            if kind == KIND_WRAP {
                let skip = cap - off;
                if skip > left {
                    return Drained::Corrupt;
                }
                self.tail = self.tail.wrapping_add(skip);
                continue;
            }
            let len = len as usize;
            let rec = (RECORD_HEADER + round8(len)) as u64;
            if kind != KIND_DATA || len > MAX_UDP_PAYLOAD || off + rec > cap || rec > left {
                return Drained::Corrupt;
            }
            // The record lies in [off, off + rec) of the data area (checked above, and again
            // by the slice).
            let Ok(wire) = self.map.data(self.tail + RECORD_HEADER as u64, len) else { return Drained::Corrupt };
            let (h, payload_off) = if header {
                let mut hb = [0u8; SEQ_HEADER_LEN];
                if len < SEQ_HEADER_LEN || wire.copy_to(0, &mut hb).is_err() {
                    (None, len)
                } else {
                    (Header::decode(&hb), SEQ_HEADER_LEN)
                }
            } else {
                (None, 0)
            };
            let plen = len - payload_off.min(len);
            if accept(h, plen, r) {
                // `accept` passed only a payload of at most `ds` bytes, and there is that much room.
                let dst = &mut buf[*filled..*filled + plen];
                if wire.copy_to(payload_off, dst).is_err() {
                    return Drained::Corrupt;
                }
                *filled += plen;
                taken += 1;
            }
            self.tail = self.tail.wrapping_add(rec);
            if self.tail.wrapping_sub(self.published) >= PUBLISH_EVERY {
                self.publish(&mut r.system_calls);
            }
        }
        if self.tail != self.published {
            self.publish(&mut r.system_calls);
        }
        Drained::Some(taken)
    }
}

impl Drop for RxRing {
    fn drop(&mut self) {
        self.map.u32_at(OFF_CLOSED).store(1, Ordering::SeqCst);
        let w = self.map.u32_at(OFF_TAIL_WAKE);
        w.fetch_add(1, Ordering::SeqCst);
        futex_wake(w);
        // Remove the name only if it is still ours.
        if let (Ok(a), Ok(b)) = (std::fs::symlink_metadata(&self.path), self.file.metadata()) {
            if a.ino() == b.ino() && a.dev() == b.dev() {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Why a sender does not use a ring (for tests and diagnostics).
#[derive(Debug)]
pub enum Refused {
    NoRing,
    NotLocal,
    Invalid(&'static str),
    OwnerGone,
    OtherSender,
    Io(io::Error),
}

/// How a ring write ended early.
#[derive(Clone, Copy)]
pub(crate) enum Stop {
    /// The receiver is gone (or the ring went bad) at datagram `at` of the block; what had
    /// been written (and dropped) before.
    Gone { at: usize, written: usize, dropped: usize, bytes: u64 },
}

/// The sender's side of an attached ring.
pub(crate) struct TxRing {
    map: Map,
    file: File,
    /// Bytes written (ours; published to `OFF_HEAD`).
    head: u64,
    published: u64,
    doorbell: [u8; DOORBELL_LEN],
}

// SAFETY: as for RxRing.
unsafe impl Send for TxRing {}

impl TxRing {
    /// Opens and checks the ring of `dest`, for a socket `sock` connected to it.
    pub(crate) fn attach(dest: SocketAddr, sock: &std::net::UdpSocket) -> Result<TxRing, Refused> {
        // A destination of this host: the kernel routes to it from the address itself.
        let local = sock.local_addr().map_err(Refused::Io)?;
        if local.ip() != dest.ip() {
            return Err(Refused::NotLocal);
        }
        let path = ring_path(dest);
        let file = match open_nofollow(&path, libc::O_RDWR, 0) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(Refused::NoRing),
            Err(e) => return Err(Refused::Io(e)),
        };
        let meta = file.metadata().map_err(Refused::Io)?;
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        if !meta.file_type().is_file() {
            return Err(Refused::Invalid("not a regular file"));
        }
        if meta.uid() != uid {
            return Err(Refused::Invalid("owned by another user"));
        }
        if meta.mode() & 0o077 != 0 {
            return Err(Refused::Invalid("open to other users"));
        }
        let size = meta.len();
        if size < HEADER_LEN as u64 + MIN_CAPACITY || size > HEADER_LEN as u64 + MAX_CAPACITY {
            return Err(Refused::Invalid("size"));
        }
        let map = Map::new(file.as_raw_fd(), size as usize).map_err(Refused::Io)?;
        let check = |ok: bool, what: &'static str| if ok { Ok(()) } else { Err(Refused::Invalid(what)) };
        check(map.u64_at(OFF_MAGIC).load(Ordering::Acquire) == MAGIC, "magic")?;
        check(map.u32_at(OFF_VERSION).load(Ordering::Relaxed) == VERSION, "version")?;
        check(map.u32_at(OFF_HEADER_LEN).load(Ordering::Relaxed) == HEADER_LEN as u32, "header length")?;
        let cap = map.u64_at(OFF_CAPACITY).load(Ordering::Relaxed);
        check(cap.is_power_of_two() && (MIN_CAPACITY..=MAX_CAPACITY).contains(&cap), "capacity")?;
        check(HEADER_LEN as u64 + cap == size, "capacity against the file's size")?;
        check(map.u32_at(OFF_UID).load(Ordering::Relaxed) == uid, "owner uid")?;
        check(map.u32_at(OFF_PID).load(Ordering::Relaxed) != 0, "owner pid")?;
        check(map.u16_at(OFF_FAMILY) == family(&dest), "family")?;
        check(map.u16_at(OFF_PORT) == dest.port(), "port")?;
        let a = map.bytes16_at(OFF_ADDR);
        check(a == [0; 16] || a == addr_bytes(dest.ip()), "address")?;
        check(map.u64_at(OFF_NETNS).load(Ordering::Relaxed) == netns(), "network namespace")?;
        check(map.u32_at(OFF_CLOSED).load(Ordering::Acquire) == 0, "closed")?;
        let head = map.u64_at(OFF_HEAD).load(Ordering::Acquire);
        let tail = map.u64_at(OFF_TAIL).load(Ordering::Acquire);
        check(head % 8 == 0 && tail % 8 == 0 && head.wrapping_sub(tail) <= cap, "positions")?;
        if !flock(file.as_raw_fd(), 0, false).map_err(Refused::Io)? {
            return Err(Refused::OwnerGone);
        }
        if !flock(file.as_raw_fd(), 1, true).map_err(Refused::Io)? {
            return Err(Refused::OtherSender);
        }
        let nonce = map.u64_at(OFF_NONCE).load(Ordering::Relaxed);
        let mut doorbell = [0u8; DOORBELL_LEN];
        doorbell[..8].copy_from_slice(&DOORBELL_TAG);
        doorbell[8..].copy_from_slice(&nonce.to_le_bytes());
        Ok(TxRing { map, file, head, published: head, doorbell })
    }

    /// Whether the receiver still lives and has the ring open (one system call).
    pub(crate) fn alive(&self, calls: &mut u64) -> bool {
        *calls += 1;
        self.map.u32_at(OFF_CLOSED).load(Ordering::Acquire) == 0
            && flock(self.file.as_raw_fd(), 0, false).unwrap_or(false)
    }

    /// Whether the receiver closed the ring (no system call).
    pub(crate) fn closed(&self) -> bool {
        self.map.u32_at(OFF_CLOSED).load(Ordering::Acquire) != 0
    }

    /// The tail, if it is a position the receiver could have reached.
    fn tail(&self) -> Option<u64> {
        let t = self.map.u64_at(OFF_TAIL).load(Ordering::Acquire);
        (t % 8 == 0 && self.head.wrapping_sub(t) <= self.map.capacity).then_some(t)
    }

    fn publish(&mut self, sock: RawFd, calls: &mut u64) {
        self.map.u64_at(OFF_HEAD).store(self.head, Ordering::Release);
        self.published = self.head;
        fence(Ordering::SeqCst);
        if self.map.u32_at(OFF_RX_SLEEPS).swap(0, Ordering::SeqCst) != 0 {
            *calls += 1;
            // SAFETY: the doorbell's bytes live across the call. A failure (the receiver's
            // socket gone) is seen by the next liveness check.
            unsafe { libc::send(sock, self.doorbell.as_ptr().cast(), DOORBELL_LEN, libc::MSG_DONTWAIT) };
        }
    }

    /// Waits until `need` bytes are free. `Ok(true)`: they are; `Ok(false)`: the receiver
    /// consumed nothing for `stall`; `Err`: it is gone or the ring went bad.
    fn wait_room(&mut self, need: u64, stall: Duration, sock: RawFd, calls: &mut u64) -> Result<bool, ()> {
        let cap = self.map.capacity;
        let mut last_tail = None;
        let mut progress = Instant::now();
        let mut checked = Instant::now();
        let spin_until = Instant::now() + SPIN;
        loop {
            let tail = self.tail().ok_or(())?;
            if cap - self.head.wrapping_sub(tail) >= need {
                return Ok(true);
            }
            if last_tail != Some(tail) {
                last_tail = Some(tail);
                progress = Instant::now();
            } else if progress.elapsed() >= stall {
                return Ok(false);
            }
            if checked.elapsed() >= LIVENESS_EVERY {
                checked = Instant::now();
                if !self.alive(calls) {
                    return Err(());
                }
            }
            if self.published != self.head {
                self.publish(sock, calls);
            }
            // A short spin first (no yield: on a busy machine a yield can give the CPU away
            // for a whole time slice), then sleep on the futex.
            if Instant::now() < spin_until {
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
                continue;
            }
            let w = self.map.u32_at(OFF_TAIL_WAKE);
            let seen = w.load(Ordering::SeqCst);
            self.map.u32_at(OFF_TX_WAITS).store(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            let tail = self.tail().ok_or(())?;
            if cap - self.head.wrapping_sub(tail) >= need {
                self.map.u32_at(OFF_TX_WAITS).store(0, Ordering::SeqCst);
                return Ok(true);
            }
            *calls += 1;
            futex_wait(w, seen, Duration::from_millis(1));
        }
    }

    /// Writes the datagrams of `block` (`ds` payload bytes each, the last maybe shorter), with
    /// sequence headers from `first_sequence` when `stream` is set. Returns the datagrams
    /// written and dropped (the ring stayed full for `stall`), or how far it got when the
    /// receiver went away.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_block(
        &mut self,
        block: &[u8],
        ds: usize,
        stream: Option<u32>,
        first_sequence: u64,
        stall: Duration,
        sock: RawFd,
        calls: &mut u64,
    ) -> Result<(usize, usize, u64), Stop> {
        let cap = self.map.capacity;
        let hl = if stream.is_some() { SEQ_HEADER_LEN } else { 0 };
        let count = block.len().div_ceil(ds);
        let (mut written, mut dropped, mut bytes) = (0usize, 0usize, 0u64);
        let mut stalled = false;
        for j in 0..count {
            let payload = &block[j * ds..((j + 1) * ds).min(block.len())];
            let len = hl + payload.len();
            let rec = (RECORD_HEADER + round8(len)) as u64;
            let off = self.head & (cap - 1);
            let to_end = cap - off;
            let need = if rec > to_end { to_end + rec } else { rec };
            let gone = Stop::Gone { at: j, written, dropped, bytes };
            let Some(tail) = self.tail() else { return Err(gone) };
            if cap - self.head.wrapping_sub(tail) < need {
                let room = !stalled && self.wait_room(need, stall, sock, calls).map_err(|_| gone)?;
                if !room {
                    // The receiver takes nothing: like a full socket buffer, the datagram is
                    // lost (its sequence number too, so a receiver with headers sees a gap).
                    stalled = true;
                    dropped += 1;
                    continue;
                }
            }
            // The receiver does not read these bytes until the head passes them. A write the
            // slice refuses cannot happen (positions are ours, 8-aligned, records fit); were
            // it to, the ring is given up as when the receiver goes.
            if rec > to_end {
                let wrap = self.map.data(self.head, RECORD_HEADER).map_err(|_| gone)?;
                wrap.write::<u32>(0, 0).and_then(|_| wrap.write::<u32>(4, KIND_WRAP)).map_err(|_| gone)?;
                self.head = self.head.wrapping_add(to_end);
            }
            let r = self.map.data(self.head, rec as usize).map_err(|_| gone)?;
            let mut at = RECORD_HEADER;
            let mut put = || -> Result<(), SliceError> {
                r.write::<u32>(0, len as u32)?;
                r.write::<u32>(4, KIND_DATA)?;
                if let Some(id) = stream {
                    let h = Header { stream_id: id, sequence: first_sequence + j as u64 }.encode();
                    r.copy_from(at, &h)?;
                    at += SEQ_HEADER_LEN;
                }
                r.copy_from(at, payload)
            };
            put().map_err(|_| gone)?;
            self.head = self.head.wrapping_add(rec);
            written += 1;
            bytes += payload.len() as u64;
            if self.head.wrapping_sub(self.published) >= PUBLISH_EVERY {
                self.publish(sock, calls);
            }
        }
        self.publish(sock, calls);
        Ok((written, dropped, bytes))
    }
}
