//! The record of one accelerated TCP socket: a file `<fabric dir>/sockets/<key>` holding
//! the socket's identity, its holders, the state word and ring of its sending direction and
//! the consumer counts of its receiving direction.
//!
//! Layout (each line 64 bytes, the ring page aligned):
//!
//! | offset | written by | contents |
//! |---|---|---|
//! | 0 | creator, once | magic, version, ring size, socket cookie, key |
//! | 128 | holders | identities of the holders (8 slots of 8 bytes: pid and start time) |
//! | 192 | both ends | flags |
//! | 256 | sender, receiver (mode) | the sending direction's state word |
//! | 320 | sender | send lock, byte counts |
//! | 384 | this end as receiver | ring bytes consumed (`H`), kernel bytes read (`KR`) |
//! | 448 | this end as receiver | receive lock, bytes received, O_NONBLOCK and SO_RCVLOWAT of the socket |
//! | 512 | the daemon (cross-host sockets) | the pairing: sequence, state, generation, peer cookie, peer host (`remote`) |
//! | 4096 | sender | the ring |
//!
//! The header is untrusted when a record is opened: it is validated, and the ring size is
//! copied out once.
//!
//! A record's storage is reserved when it is created (`fallocate`), never left sparse: a
//! mapped hole that a full filesystem (tmpfs in `/dev/shm`) cannot back when first touched
//! kills the process with SIGBUS, while a failed reservation is an error (`StorageFull`)
//! before anything is mapped, and the socket stays kernel TCP.
//!
//! A holder is a [`ProcessIdentity`] (pid and start time), alive only while the process
//! with that pid still has that start time: a holder that died and whose pid was reused by
//! an unrelated process does not keep the record alive.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::direction::{DirectionWord, MAX_RING_BYTES};
use crate::platform::files::{ensure_private_dir, open_existing, reserve, UnnamedFile};
use crate::platform::liveness::{pid_alive, pid_running, ProcessIdentity};
use crate::platform::mapping::{Access, Mapping};
use crate::platform::SharedSlice;

use super::holders::HolderSlots;

const MAGIC: u64 = u64::from_le_bytes(*b"LNSOCK01");
/// 3: the state word has a parked bit (see `direction`); 4: the sender's view of it.
const VERSION: u32 = 4;
/// Where the ring starts.
pub const RING_OFFSET: usize = 4096;
/// The smallest ring (`LANES_SOCKETS_RING` is clamped to this range).
pub const MIN_RING_BYTES: usize = 4096;
/// The default ring per direction.
pub const DEFAULT_RING_BYTES: usize = 1 << 20;
pub use super::holders::HOLDER_SLOTS;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 8;
const OFF_RING: usize = 12;
const OFF_COOKIE: usize = 16;
const OFF_NETNS: usize = 24;
const OFF_LOCAL: usize = 32; // 16 bytes of address, 2 of port, 2 of family
const OFF_REMOTE: usize = 52;
const OFF_HOLDERS: usize = 128;
const OFF_FLAGS: usize = 192;
const OFF_TX_STATE: usize = 256;
const OFF_TX_LOCK: usize = 320;
const OFF_TX_RING_BYTES: usize = 328;
const OFF_TX_KERNEL_BYTES: usize = 336;
const OFF_RX_CONSUMED: usize = 384;
const OFF_RX_KERNEL_READ: usize = 392;
const OFF_RX_LOCK: usize = 448;
// 456: bytes received, no longer kept (the consumed and kernel-read counts add up to it).
const OFF_NONBLOCK: usize = 464;
const OFF_RX_LOWAT: usize = 468;
/// The sender's view of its state word: a line of its own, which the receivers poll.
const OFF_TX_VIEW: usize = 512;

/// This end will send nothing more (shutdown or last close): the peer must not switch its
/// receiving direction back to the ring.
pub const FLAG_TX_CLOSED: u32 = 1;
/// This end reads nothing more through the ring (closed, shut down for reading, or handed to
/// a program without the library): the peer must send through the kernel.
pub const FLAG_RX_CLOSED: u32 = 2;
/// The peer published its record after this one existed: attach it.
pub const FLAG_PEER_FOUND: u32 = 4;
/// This end attached the peer's record (for `lanes status`).
pub const FLAG_ATTACHED: u32 = 8;
/// Nagle's algorithm is off in the kernel socket while the peer is accelerated: the peer's
/// answers may travel through the ring, so no kernel segment of ours waits for an ACK to
/// ride on them. The program's own TCP_NODELAY setting is kept in [`FLAG_APP_NODELAY`].
pub const FLAG_NODELAY_FORCED: u32 = 16;
/// The TCP_NODELAY value the program set (meaningful with [`FLAG_NODELAY_FORCED`]).
pub const FLAG_APP_NODELAY: u32 = 32;
/// This end is awake reading kernel bytes and would take the ring back: the peer's sender
/// pauses its kernel sends for a moment so the kernel drains and the receiver can switch
/// (only the receiver may, and only once the kernel is empty; a sender streaming through
/// the kernel would otherwise keep it from ever being empty).
pub const FLAG_RING_WANTED: u32 = 64;
/// This end's sender is pausing for the peer to take the ring back (the peer set
/// [`FLAG_RING_WANTED`]); it reads nothing meanwhile, so the peer does not pause for it.
pub const FLAG_AWAITING_RING: u32 = 128;
/// The peer died (killed, no close through the library) with ring bytes from this end
/// unread: its kernel would have reset the connection, and this end has reported
/// ECONNRESET once; from now on reads see the end of the stream and writes fail with EPIPE.
pub const FLAG_RESET: u32 = 256;
/// This end sent urgent data (`MSG_OOB`): its sending direction stays in kernel mode for
/// good. The urgent byte, the mark and everything after it are the kernel's (a receiver
/// reads what the ring held before the mark first, then the kernel's stream, which stops
/// at the mark, skips the urgent byte and answers `recv(MSG_OOB)` and `SIOCATMARK`).
pub const FLAG_TX_URGENT: u32 = 512;
/// This end has a receive low-water mark above 1 (`SO_RCVLOWAT`, set or inherited from the
/// listener): the peer sends through the kernel while it lasts, so the kernel's readiness
/// and blocking receives count every byte against the mark.
pub const FLAG_RX_LOWAT: u32 = 1024;

/// This end parked the peer's sending direction in kernel mode (`DirectionWord::park`):
/// its readers read and wait in the kernel alone while this is set. Set only while the
/// direction is parked, cleared before it is unparked.
pub const FLAG_RX_PARKED: u32 = 2048;
/// This end's ring could not be backed with memory (the fabric directory's file system is
/// full): its sending direction stays in kernel mode for good, and the peer never switches it
/// to the ring.
pub const FLAG_TX_NO_RING: u32 = 1 << 21;
/// A cross-host socket: its peer is on another host of the cluster; the record carries the
/// pairing the daemons agreed on (`super::remote`), and no ring is used.
pub const FLAG_REMOTE: u32 = 4096;
/// This end retired the peer's sending direction from the ring for good: it was parked
/// ([`FLAG_RX_PARKED`]) and its tries to take the ring back kept not paying, so it is never
/// unparked again. Its bytes are the kernel's alone from then on, and both ends call the
/// kernel for that direction without the ring's bookkeeping (the sender once it sees this
/// flag on its peer's record), as if the library were not there.
pub const FLAG_RX_RETIRED: u32 = 1 << 20;
/// This end's program turned on a socket feature only the kernel's own queues have: a peek
/// offset (`SO_PEEK_OFF`) or timestamps (`SO_TIMESTAMP*`). Both directions go through the
/// kernel for good (ring bytes already published are still read first), and the two ends
/// retire them once the ring is read to the end.
pub const FLAG_KERNEL_FEATURES: u32 = 1 << 22;

/// What a socket moved through the kernel before its record existed (its set-up was put off,
/// see the socket library's `conn`): bytes the program wrote, and bytes it read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamHistory {
    pub written: u64,
    pub read: u64,
}

/// Which connection a record belongs to: the network namespace and both addresses, as this
/// end sees them. IPv4-mapped IPv6 addresses are keyed as IPv4, so a dual-stack listener
/// pairs with an IPv4 client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnectionKey {
    pub netns: u64,
    pub local: SocketAddr,
    pub remote: SocketAddr,
}

fn canonical(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(IpAddr::V4(v4), v6.port()),
            None => SocketAddr::new(IpAddr::V6(*v6.ip()), v6.port()),
        },
        v4 => v4,
    }
}

impl ConnectionKey {
    /// A key from the socket's own view (`getsockname`, `getpeername`).
    pub fn new(netns: u64, local: SocketAddr, remote: SocketAddr) -> Self {
        ConnectionKey { netns, local: canonical(local), remote: canonical(remote) }
    }

    /// The key the other end of the connection files its record under.
    pub fn reversed(&self) -> Self {
        ConnectionKey { netns: self.netns, local: self.remote, remote: self.local }
    }

    /// The record's file name.
    pub fn file_name(&self) -> String {
        format!("tcp-{:x}-{}-{}", self.netns, self.local, self.remote)
    }

    /// Parses a record's file name.
    pub fn parse(name: &str) -> Option<Self> {
        let rest = name.strip_prefix("tcp-")?;
        let mut parts = rest.splitn(3, '-');
        let netns = u64::from_str_radix(parts.next()?, 16).ok()?;
        let local = parts.next()?.parse().ok()?;
        let remote = parts.next()?.parse().ok()?;
        let key = ConnectionKey { netns, local, remote };
        // Only the spelling `file_name` writes: `+7`, `07` or a port `:05` parse too, but
        // such a file is a second name for the connection (listed twice).
        (key.file_name() == name).then_some(key)
    }
}

pub(crate) fn encode_addr(buf: &mut [u8], a: SocketAddr) {
    let (ip, fam): ([u8; 16], u16) = match a.ip() {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&v4.octets());
            (b, 4)
        }
        IpAddr::V6(v6) => (v6.octets(), 6),
    };
    buf[..16].copy_from_slice(&ip);
    buf[16..18].copy_from_slice(&a.port().to_le_bytes());
    buf[18..20].copy_from_slice(&fam.to_le_bytes());
}

pub(crate) fn decode_addr(buf: &[u8]) -> Option<SocketAddr> {
    let port = u16::from_le_bytes([buf[16], buf[17]]);
    let ip = match u16::from_le_bytes([buf[18], buf[19]]) {
        4 => IpAddr::V4(Ipv4Addr::new(buf[0], buf[1], buf[2], buf[3])),
        6 => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(&buf[..16]).ok()?)),
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// The directory records live in.
pub fn sockets_dir(fabric_dir: &Path) -> PathBuf {
    fabric_dir.join("sockets")
}

/// One record, mapped. Used for this end's own record and, read-mostly, for the peer's.
pub struct Endpoint {
    map: Mapping,
    path: PathBuf,
    ring_bytes: usize,
    cookie: u64,
    key: ConnectionKey,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("path", &self.path).field("cookie", &self.cookie).finish()
    }
}

/// The record of the other end, attached by the receiving side.
pub type PeerRecord = Endpoint;

fn invalid(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

/// The calling process's identity, cached while the pid stays the same (a forked child
/// has a new pid, so it computes its own): closing a socket checks it, and reading /proc
/// each time would cost a file open.
pub fn this_process() -> io::Result<ProcessIdentity> {
    static CACHED: AtomicU64 = AtomicU64::new(0);
    let pid = std::process::id();
    if let Some(me) = ProcessIdentity::from_bits(CACHED.load(Ordering::Relaxed)) {
        if me.pid() == pid {
            return Ok(me);
        }
    }
    let me = ProcessIdentity::current()?;
    CACHED.store(me.bits(), Ordering::Relaxed);
    Ok(me)
}

impl Endpoint {
    /// Creates and publishes the record of a socket (kernel cookie `cookie`), replacing a
    /// stale record of an earlier connection with the same addresses (that socket no longer
    /// exists, or the kernel could not have given the addresses to this one).
    pub fn create(fabric_dir: &Path, key: &ConnectionKey, cookie: u64, ring_bytes: usize) -> io::Result<Endpoint> {
        Self::create_after(fabric_dir, key, cookie, ring_bytes, StreamHistory::default())
    }

    /// As [`Endpoint::create`], for a socket that has already moved bytes through the kernel
    /// (`history`): its counts start there, so that a receiver switches a direction to the
    /// ring only once it has read every byte the sender ever wrote through the kernel.
    pub fn create_after(
        fabric_dir: &Path,
        key: &ConnectionKey,
        cookie: u64,
        ring_bytes: usize,
        history: StreamHistory,
    ) -> io::Result<Endpoint> {
        let ring_bytes = ring_bytes.clamp(MIN_RING_BYTES, MAX_RING_BYTES).next_power_of_two();
        let dir = sockets_dir(fabric_dir);
        ensure_private_dir(fabric_dir)?;
        ensure_private_dir(&dir)?;
        let len = RING_OFFSET + ring_bytes;
        let name = key.file_name();
        let me = this_process()?;
        for _attempt in 0..4 {
            let unnamed = UnnamedFile::create(&dir)?;
            // The header is reserved before it is mapped (a full file system is an error
            // here, not a SIGBUS at the first store); the ring stays sparse until its sender
            // first writes it ([`Endpoint::populate_ring`]): most connections never use it,
            // and reserving a megabyte per connection made every short one cost more than
            // all of kernel TCP's work for it.
            reserve(unnamed.file(), RING_OFFSET as u64)
                .and_then(|()| unnamed.file().set_len(len as u64))
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
            let map = Mapping::map(unnamed.file().as_fd(), 0, len, Access::ReadWrite)?;
            let mut header = [0u8; 128];
            header[OFF_MAGIC..OFF_MAGIC + 8].copy_from_slice(&MAGIC.to_le_bytes());
            header[OFF_VERSION..OFF_VERSION + 4].copy_from_slice(&VERSION.to_le_bytes());
            header[OFF_RING..OFF_RING + 4].copy_from_slice(&(ring_bytes as u32).to_le_bytes());
            header[OFF_COOKIE..OFF_COOKIE + 8].copy_from_slice(&cookie.to_le_bytes());
            header[OFF_NETNS..OFF_NETNS + 8].copy_from_slice(&key.netns.to_le_bytes());
            encode_addr(&mut header[OFF_LOCAL..OFF_LOCAL + 20], key.local);
            encode_addr(&mut header[OFF_REMOTE..OFF_REMOTE + 20], key.remote);
            // The mapping is ours, at least 4096 bytes long, and nobody else can see the
            // unnamed file yet.
            map.slice().copy_from(0, &header)?;
            let ep = Endpoint { map, path: dir.join(&name), ring_bytes, cookie, key: *key };
            if history != StreamHistory::default() {
                ep.tx_word().start_after_kernel_bytes(history.written);
                ep.tx_counts().1.store(history.written, Ordering::Relaxed);
                ep.rx_kernel_read().store(history.read, Ordering::Relaxed);
            }
            ep.add_holder(me);
            match unnamed.publish(&name) {
                Ok(_) => return Ok(ep),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    let _ = std::fs::remove_file(dir.join(&name));
                }
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(io::ErrorKind::AlreadyExists, format!("record {name} keeps reappearing")))
    }

    /// Backs this end's ring with memory, before its first byte is written there: the record
    /// is created sparse (see [`Endpoint::create`]). An error (the fabric directory's file
    /// system is full) means the ring must not be written.
    pub fn populate_ring(&self) -> io::Result<()> {
        self.map.populate_for_writing(RING_OFFSET, self.ring_bytes)
    }

    /// Opens the record filed under `key`, validating its header.
    pub fn open(fabric_dir: &Path, key: &ConnectionKey) -> io::Result<Endpoint> {
        let path = sockets_dir(fabric_dir).join(key.file_name());
        let file = open_existing(&path, true)?;
        let file_len = file.metadata()?.len();
        if file_len < RING_OFFSET as u64 + MIN_RING_BYTES as u64 {
            return Err(invalid("record too short"));
        }
        let head = Mapping::map(file.as_fd(), 0, RING_OFFSET, Access::ReadOnly)?;
        let mut header = [0u8; 128];
        // The mapping is RING_OFFSET >= 128 bytes; the copy tolerates concurrent writes.
        head.slice().copy_to(0, &mut header)?;
        drop(head);
        let word = |o: usize| u64::from_le_bytes(header[o..o + 8].try_into().expect("8 bytes"));
        let half = |o: usize| u32::from_le_bytes(header[o..o + 4].try_into().expect("4 bytes"));
        if word(OFF_MAGIC) != MAGIC {
            return Err(invalid("not a Lanes socket record (bad magic)"));
        }
        if half(OFF_VERSION) != VERSION {
            return Err(invalid("socket record of another version"));
        }
        let ring_bytes = half(OFF_RING) as usize;
        if !ring_bytes.is_power_of_two() || !(MIN_RING_BYTES..=MAX_RING_BYTES).contains(&ring_bytes) {
            return Err(invalid("socket record with an impossible ring size"));
        }
        if file_len < (RING_OFFSET + ring_bytes) as u64 {
            return Err(invalid("socket record shorter than its ring"));
        }
        let local = decode_addr(&header[OFF_LOCAL..OFF_LOCAL + 20]).ok_or_else(|| invalid("bad local address"))?;
        let remote = decode_addr(&header[OFF_REMOTE..OFF_REMOTE + 20]).ok_or_else(|| invalid("bad remote address"))?;
        let stored = ConnectionKey { netns: word(OFF_NETNS), local, remote };
        if stored != *key {
            return Err(invalid("socket record filed under another connection's name"));
        }
        let map = Mapping::map(file.as_fd(), 0, RING_OFFSET + ring_bytes, Access::ReadWrite)?;
        Ok(Endpoint { map, path, ring_bytes, cookie: word(OFF_COOKIE), key: stored })
    }

    /// The kernel cookie of the socket this record describes.
    pub fn cookie(&self) -> u64 {
        self.cookie
    }
    /// The connection, as this record's socket sees it.
    pub fn key(&self) -> &ConnectionKey {
        &self.key
    }
    /// The record's file.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// Removes the record's name (the mappings stay valid).
    pub fn unlink(&self) {
        let _ = std::fs::remove_file(&self.path);
    }

    /// The header page, read-write: every record is mapped read-write and at least
    /// `RING_OFFSET + MIN_RING_BYTES` bytes long (checked by `create` and `open`), and the
    /// header's words are constant, aligned offsets below `RING_OFFSET`, so the accessors
    /// below take the checked accessor's infallible path ([`SharedSlice::header_u64`]).
    #[inline]
    fn header(&self) -> SharedSlice<'_> {
        self.map.slice()
    }
    #[inline]
    pub(super) fn u64_at(&self, off: usize) -> &AtomicU64 {
        self.header().header_u64(off)
    }
    #[inline]
    fn u32_at(&self, off: usize) -> &AtomicU32 {
        self.header().header_u32(off)
    }

    /// The state word of this record's sending direction.
    #[inline]
    pub fn tx_word(&self) -> DirectionWord<'_> {
        DirectionWord::with_view(self.u64_at(OFF_TX_STATE), self.u64_at(OFF_TX_VIEW))
    }
    /// The send lock (holder: pid << 32 | tid).
    #[inline]
    pub fn tx_lock(&self) -> &AtomicU64 {
        self.u64_at(OFF_TX_LOCK)
    }
    /// Bytes sent through the ring and through the kernel (statistics).
    #[inline]
    pub fn tx_counts(&self) -> (&AtomicU64, &AtomicU64) {
        (self.u64_at(OFF_TX_RING_BYTES), self.u64_at(OFF_TX_KERNEL_BYTES))
    }
    /// Ring bytes this end consumed from the peer (`H`).
    #[inline]
    pub fn rx_consumed(&self) -> &AtomicU64 {
        self.u64_at(OFF_RX_CONSUMED)
    }
    /// Kernel bytes this end read (`KR`).
    #[inline]
    pub fn rx_kernel_read(&self) -> &AtomicU64 {
        self.u64_at(OFF_RX_KERNEL_READ)
    }
    /// The receive lock.
    #[inline]
    pub fn rx_lock(&self) -> &AtomicU64 {
        self.u64_at(OFF_RX_LOCK)
    }
    /// Bytes received, both paths (statistics): the ring bytes consumed and the kernel
    /// bytes read, which the receive path counts anyway (a third count cost every receive a
    /// locked add).
    #[inline]
    pub fn rx_bytes(&self) -> u64 {
        self.rx_consumed().load(Ordering::Relaxed).wrapping_add(self.rx_kernel_read().load(Ordering::Relaxed))
    }
    /// The socket's O_NONBLOCK, shared by every process holding it (as the kernel's flag is).
    #[inline]
    pub fn nonblocking(&self) -> &AtomicU32 {
        self.u32_at(OFF_NONBLOCK)
    }
    /// The socket's SO_RCVLOWAT as the program set it (or the accepted socket inherited it),
    /// meaningful with [`FLAG_RX_LOWAT`]; the kernel socket's own may be lower while bytes
    /// from before it was set are still unread in the ring.
    #[inline]
    pub fn rx_lowat(&self) -> &AtomicU32 {
        self.u32_at(OFF_RX_LOWAT)
    }
    /// `FLAG_*` bits.
    #[inline]
    pub fn flags(&self) -> &AtomicU32 {
        self.u32_at(OFF_FLAGS)
    }
    /// Sets flag bits.
    /// Returns the flags as they were before.
    #[inline]
    pub fn set_flags(&self, bits: u32) -> u32 {
        self.flags().fetch_or(bits, Ordering::SeqCst)
    }
    /// Clears `bits`; returns the flags before.
    #[inline]
    pub fn clear_flags(&self, bits: u32) -> u32 {
        self.flags().fetch_and(!bits, Ordering::SeqCst)
    }
    /// Whether any of `bits` is set.
    #[inline]
    pub fn has_flag(&self, bits: u32) -> bool {
        self.flags().load(Ordering::Acquire) & bits != 0
    }

    /// The ring's size in bytes.
    #[inline]
    pub fn ring_bytes(&self) -> usize {
        self.ring_bytes
    }
    /// Exactly the ring's bytes (`ring_bytes` of them, from `RING_OFFSET`), as a checked
    /// slice. The mapping is `RING_OFFSET + ring_bytes` long (made or checked so by `create`
    /// and `open`), so the slice is never empty but for a mapping that lies, which cannot
    /// happen; should it, every access through it is refused instead.
    #[inline]
    pub fn ring(&self) -> SharedSlice<'_> {
        let all = self.map.slice();
        all.subslice(RING_OFFSET, self.ring_bytes).unwrap_or_else(|_| SharedSlice::empty())
    }

    /// The record's holder slots.
    fn holder_slots(&self) -> HolderSlots<'_> {
        HolderSlots::new(self.header(), OFF_HOLDERS)
    }
    #[cfg(test)]
    fn holder_slot(&self, i: usize) -> &AtomicU64 {
        self.holder_slots().slot(i)
    }
    /// Records `who` as a holder (see [`HolderSlots::add`]).
    pub fn add_holder(&self, who: ProcessIdentity) -> bool {
        self.holder_slots().add(who)
    }
    /// Removes `who`; returns how many live holders remain.
    pub fn remove_holder(&self, who: ProcessIdentity) -> usize {
        self.holder_slots().remove(who)
    }
    /// See [`HolderSlots::held_only_by`].
    pub fn held_only_by(&self, who: ProcessIdentity, ask_liveness: bool) -> bool {
        self.holder_slots().held_only_by(who, ask_liveness)
    }
    /// The live holders.
    pub fn holders(&self) -> Vec<ProcessIdentity> {
        self.holder_slots().live()
    }
}

/// A lock word in shared memory held by one thread (pid << 32 | tid), stolen from a
/// holder whose process died.
pub struct SharedLockGuard<'a> {
    word: &'a AtomicU64,
    me: u64,
}

/// Bumped in every forked child, so a thread's cached identity is recomputed there.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);

extern "C" fn bump_fork_generation() {
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// This thread's lock identity, cached: every ring send and receive takes a lock, and
/// getpid plus gettid would be two system calls each time.
fn thread_identity() -> u64 {
    static REGISTER: std::sync::Once = std::sync::Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only touches an atomic.
        unsafe { libc::pthread_atfork(None, None, Some(bump_fork_generation)) };
    });
    thread_local! {
        static CACHED: std::cell::Cell<(u64, u64)> = const { std::cell::Cell::new((u64::MAX, 0)) };
    }
    let generation = FORK_GENERATION.load(Ordering::Relaxed);
    CACHED.with(|c| {
        let (cached_generation, identity) = c.get();
        if cached_generation == generation {
            return identity;
        }
        // SAFETY: getpid and gettid have no preconditions.
        let (pid, tid) = unsafe { (libc::getpid() as u64, libc::syscall(libc::SYS_gettid) as u64) };
        let identity = (pid << 32) | (tid & 0xffff_ffff);
        c.set((generation, identity));
        identity
    })
}

/// Takes the lock: spins briefly, yields, then sleeps in short naps; a holder whose
/// process is gone is replaced.
pub fn lock_shared(word: &AtomicU64) -> SharedLockGuard<'_> {
    let me = thread_identity();
    let mut spins = 0u32;
    loop {
        let cur = word.load(Ordering::Relaxed);
        if cur == 0 {
            if word.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                return SharedLockGuard { word, me };
            }
            continue;
        }
        spins += 1;
        // A holder that exited (killed while it held the lock) is replaced: at first only
        // when its pid is gone; once waiting long, also when it is a zombie its parent has
        // not reaped yet (which reads /proc, too slow for every look).
        let holder = (cur >> 32) as u32;
        if spins % 128 == 0
            && !(if spins < 1024 { pid_alive(holder) } else { pid_running(holder) })
            && word.compare_exchange(cur, me, Ordering::Acquire, Ordering::Relaxed).is_ok()
        {
            return SharedLockGuard { word, me };
        }
        if spins < 64 {
            std::hint::spin_loop();
        } else if spins < 1024 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
    }
}

impl Drop for SharedLockGuard<'_> {
    fn drop(&mut self) {
        // A plain store, not a compare-and-swap: a lock is taken from its holder only when
        // the holder's process is gone, and this one runs. (A locked instruction here waited
        // for every store before it, among them the consumed count the peer reads.)
        if self.word.load(Ordering::Relaxed) == self.me {
            self.word.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ConnectionKey {
        ConnectionKey::new(7, "127.0.0.1:5201".parse().unwrap(), "[::ffff:127.0.0.1]:40000".parse().unwrap())
    }

    #[test]
    fn keys_round_trip_through_file_names_and_mapped_addresses_become_ipv4() {
        let k = key();
        assert_eq!(k.remote, "127.0.0.1:40000".parse::<SocketAddr>().unwrap());
        assert_eq!(ConnectionKey::parse(&k.file_name()), Some(k));
        let v6 = ConnectionKey::new(1, "[::1]:80".parse().unwrap(), "[::1]:9".parse().unwrap());
        assert_eq!(ConnectionKey::parse(&v6.file_name()), Some(v6));
        assert_eq!(k.reversed().reversed(), k);
    }

    #[test]
    fn a_record_is_created_opened_validated_and_replaced() {
        let dir = std::env::temp_dir().join(format!("lanes-endpoint-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = Endpoint::create(&dir, &key(), 42, 8192).unwrap();
        assert_eq!(a.holders(), vec![this_process().unwrap()]);
        let b = Endpoint::open(&dir, &key()).unwrap();
        assert_eq!((b.cookie(), b.ring_bytes()), (42, 8192));
        assert!(Endpoint::open(&dir, &key().reversed()).is_err());
        let c = Endpoint::create(&dir, &key(), 43, 4096).unwrap();
        assert_eq!(Endpoint::open(&dir, &key()).unwrap().cookie(), c.cookie());
        // A corrupt header is refused with a reason.
        std::fs::write(c.path(), vec![0u8; 8192]).unwrap();
        let e = Endpoint::open(&dir, &key()).unwrap_err();
        assert!(e.to_string().contains("magic"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn holders_are_identities_and_the_slots_of_dead_ones_are_reused() {
        let dir = std::env::temp_dir().join(format!("lanes-endpoint-holders-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let ep = Endpoint::create(&dir, &key(), 42, 4096).unwrap();
        let me = this_process().unwrap();
        assert!(ep.add_holder(me), "idempotent");
        assert_eq!(ep.remove_holder(me), 0);
        // Every slot taken by a holder whose pid is ours but whose start time is not: all
        // dead (the pid was reused), so a live process still finds a slot.
        for i in 0..HOLDER_SLOTS as u64 {
            ep.holder_slot(i as usize).store(me.bits() ^ ((i + 1) << 40), Ordering::Release);
        }
        assert!(ep.holders().is_empty());
        assert!(ep.add_holder(me));
        assert_eq!(ep.holders(), vec![me]);
        assert!(ep.held_only_by(me, true), "the other slots' holders are gone");
        assert!(!ep.held_only_by(me, false), "unless /proc may not be asked");
        assert_eq!(ep.remove_holder(me), 0);
        assert!(!ep.held_only_by(me, true), "not a holder at all");
        // A live second holder (init) shares it.
        let init = crate::platform::liveness::ProcessIdentity::of_pid(1).unwrap();
        for i in 0..HOLDER_SLOTS {
            ep.holder_slot(i).store(0, Ordering::Release);
        }
        assert!(ep.add_holder(me) && ep.add_holder(init));
        assert!(!ep.held_only_by(me, true));
        ep.remove_holder(init);
        assert!(ep.held_only_by(me, false));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_lock_held_by_an_exited_process_is_taken_over_even_before_it_is_reaped() {
        // SAFETY: the child only calls _exit, which is async-signal-safe.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(0) };
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while pid_running(pid as u32) {
            assert!(std::time::Instant::now() < deadline, "child {pid} never exited");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // The child held the lock when it exited; it is a zombie now (not reaped).
        let word = AtomicU64::new(((pid as u64) << 32) | pid as u64);
        let guard = lock_shared(&word);
        assert_eq!(word.load(Ordering::Relaxed), thread_identity());
        drop(guard);
        assert_eq!(word.load(Ordering::Relaxed), 0);
        let mut status = 0;
        // SAFETY: reaps our own child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    }

    /// A tmpfs of `size` mounted on a fresh directory, unmounted and removed when dropped.
    struct SmallTmpfs(PathBuf);

    impl SmallTmpfs {
        /// None (the reason printed) unless this runs as root and may mount.
        fn mount(name: &str, size: &str) -> Option<SmallTmpfs> {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                eprintln!("skipped: mounting a small tmpfs needs root");
                return None;
            }
            let dir = std::env::temp_dir().join(format!("lanes-{name}-{}", std::process::id()));
            let _ = std::fs::create_dir_all(&dir);
            let target = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
            let opts = std::ffi::CString::new(format!("size={size},mode=0700")).unwrap();
            // SAFETY: every argument is a NUL-terminated string that outlives the call.
            let r =
                unsafe { libc::mount(c"tmpfs".as_ptr(), target.as_ptr(), c"tmpfs".as_ptr(), 0, opts.as_ptr().cast()) };
            if r != 0 {
                eprintln!("skipped: cannot mount a tmpfs on {}: {}", dir.display(), io::Error::last_os_error());
                let _ = std::fs::remove_dir(&dir);
                return None;
            }
            Some(SmallTmpfs(dir))
        }
    }

    impl Drop for SmallTmpfs {
        fn drop(&mut self) {
            let target = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a NUL-terminated path; MNT_DETACH so a file still open cannot keep it.
            unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    #[test]
    fn a_full_filesystem_is_an_error_at_create_or_before_the_first_ring_write_never_a_sigbus() {
        let Some(fs) = SmallTmpfs::mount("endpoint-full", "64k") else { return };
        let blocks = |ep: &Endpoint| std::fs::metadata(&ep.path).map(|m| std::os::unix::fs::MetadataExt::blocks(&m));
        // The ring stays sparse: a record with a 64 KiB ring is created in 64 KiB (only
        // its header is reserved), and backing its ring is refused, before any byte of it
        // is written.
        let big = Endpoint::create(&fs.0, &key(), 42, 65536).unwrap();
        assert!(blocks(&big).unwrap() <= 16, "only the header is backed: {:?} blocks", blocks(&big));
        let e = big.populate_ring().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
        drop(big);
        std::fs::remove_file(sockets_dir(&fs.0).join(key().file_name())).unwrap();
        // A ring that fits is backed in full once asked: all of it is writable.
        let small = Endpoint::create(&fs.0, &key(), 43, 4096).unwrap();
        small.populate_ring().unwrap();
        assert!(blocks(&small).unwrap() >= 16, "header and ring backed: {:?} blocks", blocks(&small));
        assert_eq!(small.ring().len(), small.ring_bytes());
        small.ring().fill(0, small.ring_bytes(), 0xa5).unwrap();
        // Fill what is left: the next record is refused, the mapped one still works.
        let filler = fs.0.join("filler");
        let _ = std::fs::write(&filler, vec![1u8; 64 << 10]);
        let e = Endpoint::create(&fs.0, &key().reversed(), 44, 4096).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::StorageFull, "{e}");
        small.ring().fill(0, small.ring_bytes(), 0x5a).unwrap();
        drop(small);
    }

    #[test]
    fn a_record_set_up_late_starts_from_what_the_socket_moved_through_the_kernel() {
        let dir = lanes_testkit::TestDir::new("endpoint-history");
        let history = StreamHistory { written: 1000, read: 300 };
        let ep = Endpoint::create_after(dir.root(), &key(), 7, 4096, history).unwrap();
        let word = ep.tx_word().load();
        assert!(!word.ring_mode(), "a new direction starts in kernel mode");
        assert_eq!(word.kernel_reserved(), 1000, "bytes written before the record count as kernel bytes");
        assert!(word.kernel_caught_up(1000) && !word.kernel_caught_up(999));
        assert_eq!(ep.tx_counts().1.load(Ordering::Relaxed), 1000);
        assert_eq!(ep.rx_kernel_read().load(Ordering::Relaxed), 300);
        // Another process opening it sees the same.
        let again = Endpoint::open(dir.root(), &key()).unwrap();
        assert_eq!(again.tx_word().load().kernel_reserved(), 1000);
        assert_eq!(again.rx_kernel_read().load(Ordering::Relaxed), 300);
    }
}
