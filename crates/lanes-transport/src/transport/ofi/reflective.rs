//! Reflective groups across hosts (docs/design/multi-host.md, section 10; docs/ARCHITECTURE.md,
//! "Reflective memory").
//!
//! A group of a cluster process is an object on its creator's host, as on one host, whose
//! data is the group's memory followed by a **roster** (at [`roster_at`], [`ROSTER_BYTES`]):
//!
//! - a header: magic, the group's size, the receiver list, and the creator's *control word*;
//! - one 128-byte entry per connection slot of the object: a member that joined through a
//!   granted slot writes there (by RMA) where its copy is: endpoint name, key, address,
//!   length, node, pid, and last a nonzero state word.
//!
//! Every participant keeps a **copy** of the whole object: the creator its object file, each
//! other member a private replica (memfd) registered with its endpoint, whose roster area
//! holds only its own control word. A participant's read map is its copy, mapped directly
//! (local loads, as on reflective hardware). Its write map is a [`FanoutWindow`]: stores go
//! into its own copy at once and are logged; a barrier posts each logged range, snapshotted
//! into a staging ring, to every other participant's copy (the creator's included), in log
//! order, so that every member sees one writer's writes in the order it made them
//! (`FI_ORDER_RMA_WAW` per target). Two writers may be seen in different orders by
//! different members.
//!
//! **Raw stores.** A write map's raw pointer ([`FanoutWindow::as_ptr`]) names a private
//! buffer with a shadow, never the copy (which other members write too): at each barrier
//! the runs where the buffer differs from the shadow are this process's stores, copied into
//! its copy and logged like the methods' writes.
//!
//! **Membership.** A joiner copies the creator's data into its replica, then writes its
//! roster entry, then reads the roster and writes a fresh random value into every other
//! participant's control word, waiting for delivery; only then is it joined. A writer
//! compares its control word with the value it last saw at every barrier and re-reads the
//! roster when it changed, so every write posted after a join completed reaches the joiner.
//! Leaving clears the entry and notifies the same way; the creator marks the entries of
//! members whose slot was released without that (a member that died) and notifies.
//! Removing the group writes a removal word into every member's copy first.
//!
//! **Failures.** A write that fails at the creator's copy is a failure of the write map
//! (error epoch: `flush_checked`, sequences); posts to it are tried in 100-ms slices that
//! check the connection's state in between. A member a writer cannot reach within 2 s is
//! taken for dead by that writer until its roster entry changes; that is not an error.

use std::any::Any;
use std::collections::{HashSet, VecDeque};
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use super::endpoint::{Op, ProcessEndpoint};
use super::fi::{self, FiAddr, RegistrableMemory, Target};
use super::remote::OfiConn;
use super::window::{changed_runs, try_lock_now, MirrorSequence, SequenceSource};
use crate::error::{Error, Result};
use crate::platform::mapping::{Access, Mapping};
use crate::platform::random_u64;
use crate::platform::SharedSlice;
use crate::transport::shm::segment_file::DataMapping;
use crate::transport::{HostGroup, LossReason, RemoteHandle, RosterSlot, TrackedWindow, Window};

/// Bytes of the roster: one header page and 128 entries of 128 bytes.
pub const ROSTER_BYTES: u64 = 4096 + (MAX_MEMBERS * ENTRY) as u64;
/// Roster entries (one per connection slot of the creator's object).
pub const MAX_MEMBERS: usize = 128;
const MAGIC: u64 = u64::from_le_bytes(*b"LNSREFL1");
const H_MAGIC: usize = 0;
const H_SIZE: usize = 8;
/// The participant's control word: written by joiners and leavers, read at every barrier.
const H_CONTROL: usize = 64;
/// Nonzero once the creator removed the group (written into every member's copy).
const H_REMOVED: usize = 72;
const H_RECEIVERS_LEN: usize = 128;
const H_RECEIVERS: usize = 132;
const MAX_RECEIVERS: usize = 64;
const HEADER_READ: usize = H_RECEIVERS + 4 * MAX_RECEIVERS;
const ENTRIES: usize = 4096;
const ENTRY: usize = 128;
const E_STATE: usize = 0;
/// The state word of an entry the creator's sweep marked: its member died. (A member's
/// state word is odd, a random value per join; one that left cleared it to 0.)
const STATE_DIED: u64 = 2;
const E_NODE: usize = 8;
const E_PID: usize = 12;
const E_KEY: usize = 16;
const E_BASE: usize = 24;
const E_LEN: usize = 32;
const E_NAME_LEN: usize = 40;
const E_NAME: usize = 48;
const MAX_NAME: usize = ENTRY - E_NAME;
/// The bound on every wait of this module (joins, leaves, flushes, a full staging ring).
const TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes of the staging ring a write map posts from.
const STAGING: usize = 4 << 20;
/// Scratch: the roster entries as read from the creator, and small words to post from.
const SCRATCH: usize = MAX_MEMBERS * ENTRY + 4096;
const SCRATCH_WORDS: usize = MAX_MEMBERS * ENTRY;
const SPIN: Duration = Duration::from_micros(50);
/// How long a post to another member's copy may keep being refused (`-FI_EAGAIN`, which
/// rxm answers for as long as a dead peer's connection lingers) before that member is
/// taken for dead: dropped from this writer's targets until its roster entry changes.
const MEMBER_POST: Duration = Duration::from_secs(2);

/// Where the roster of a group of `size` bytes starts in its object.
pub fn roster_at(size: u64) -> u64 {
    size.next_multiple_of(4096)
}

/// The object's data size for a group of `size` bytes.
pub fn object_size(size: u64) -> u64 {
    roster_at(size) + ROSTER_BYTES
}

/// Why a checked access to a copy or a buffer of this module cannot fail: roster words are
/// at fixed 8-aligned offsets inside the object (the roster follows the group), group
/// ranges were checked against the group's size, and buffers are made to fit what is
/// copied into them.
const INSIDE: &str = "a reflective group's ranges lie inside its memory";

fn word(object: SharedSlice<'_>, at: usize) -> u64 {
    object.load_acquire_u64(at).expect(INSIDE)
}

fn set_word(object: SharedSlice<'_>, at: usize, v: u64) {
    object.store_release_u64(at, v).expect(INSIDE)
}

/// Writes the roster header into the creator's copy (`object`: the whole data, read-write)
/// before the group is made available: size and receivers, then the magic.
pub fn init_roster(object: &DataMapping, size: u64, receivers: &[u32]) {
    let base = roster_at(size) as usize;
    let p = object.slice();
    set_word(p, base + H_SIZE, size);
    let mut list = [0u8; 4 + 4 * MAX_RECEIVERS];
    list[..4].copy_from_slice(&(receivers.len().min(MAX_RECEIVERS) as u32).to_ne_bytes());
    for (i, r) in receivers.iter().take(MAX_RECEIVERS).enumerate() {
        list[4 + 4 * i..8 + 4 * i].copy_from_slice(&r.to_ne_bytes());
    }
    // The header lies inside the object's mapping (the roster follows the data).
    p.copy_from(base + H_RECEIVERS_LEN, &list).expect(INSIDE);
    set_word(p, base + H_MAGIC, MAGIC);
}

/// A participant's copy as registrable memory.
struct CopyMemory(Arc<DataMapping>);

// SAFETY: the DataMapping owns a read-write shared mapping that stays mapped while this value
// (held by the registration) lives; it is accessed only by raw pointers, volatile or atomic
// accesses and copies, by this process, its peers' RMA and the provider.
unsafe impl RegistrableMemory for CopyMemory {
    fn as_ptr(&self) -> *mut u8 {
        self.0.as_ptr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// One member's roster entry.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry {
    slot: usize,
    /// The entry's state word: random per join, so a new member in the slot differs.
    generation: u64,
    node: u32,
    pid: u32,
    key: u64,
    base: u64,
    len: u64,
    name: Vec<u8>,
}

/// The u64 at `at` of a roster entry's bytes.
fn u64_at(e: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(e[at..at + 8].try_into().expect("8 bytes"))
}

/// The u32 at `at` of a roster entry's bytes.
fn u32_at(e: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(e[at..at + 4].try_into().expect("4 bytes"))
}

fn parse_entries(bytes: &[u8]) -> Vec<Entry> {
    bytes
        .chunks_exact(ENTRY)
        .enumerate()
        .filter(|(_, e)| u64_at(e, E_STATE) & 1 == 1)
        .filter_map(|(slot, e)| {
            let n = u32_at(e, E_NAME_LEN) as usize;
            (n > 0 && n <= MAX_NAME).then(|| Entry {
                slot,
                generation: u64_at(e, E_STATE),
                node: u32_at(e, E_NODE),
                pid: u32_at(e, E_PID),
                key: u64_at(e, E_KEY),
                base: u64_at(e, E_BASE),
                len: u64_at(e, E_LEN),
                name: e[E_NAME..E_NAME + n].to_vec(),
            })
        })
        .collect()
}

/// Another participant's copy, as this process reaches it.
#[derive(Clone, Copy, Debug)]
struct Peer {
    peer: FiAddr,
    base: u64,
    key: u64,
    /// The creator's object (a failure there is a failure of the write).
    creator: bool,
    /// A member's copy: its roster slot and generation.
    member: Option<(usize, u64)>,
}

impl Peer {
    /// How long a post to this copy may be refused before it fails.
    fn post_deadline(&self) -> std::time::Instant {
        fi::deadline_in(if self.creator { TIMEOUT } else { MEMBER_POST })
    }
}

/// A posted operation and the staging or scratch bytes it uses.
struct Flight {
    op: Arc<Op>,
    start: usize,
    end: usize,
    staged: bool,
    creator: bool,
    member: Option<(usize, u64)>,
}

#[derive(Default)]
struct State {
    /// Byte ranges of the group written and not posted yet, in order.
    log: Vec<(usize, usize)>,
    targets: Vec<Peer>,
    /// Whether `targets` was ever read.
    loaded: bool,
    /// The control word as last seen.
    seen: u64,
    /// A write to a member failed: re-read the roster at the next barrier.
    stale: bool,
    /// Members (slot, generation) this writer failed to reach: taken for dead, skipped.
    dead: HashSet<(usize, u64)>,
    /// Members: when the creator's copy was last found unreachable (a write to it failed, or
    /// a roster read did). Writes skip it meanwhile (each counted as failed) and a roster
    /// read, at most once a second and bounded by [`MEMBER_POST`], probes it again.
    creator_down: Option<std::time::Instant>,
    inflight: VecDeque<Flight>,
    /// Next free byte of the staging ring.
    head: usize,
    last_error: Option<String>,
}

/// What a participant shares between its write map, its joins and leaves, and the
/// creator's sweep: its copy, its targets and what it has in flight.
pub struct Fanout {
    endpoint: Arc<ProcessEndpoint>,
    /// This participant's copy of the whole object (group, then roster), read-write.
    mine: Arc<DataMapping>,
    /// The registration of `mine` (members' replicas; the creator's is its export).
    _mine_mr: Option<fi::MemoryRegion>,
    size: usize,
    roster: usize,
    node: u32,
    /// Members: the connection to the creator's object, and the roster slot it granted.
    creator: Option<Arc<OfiConn>>,
    slot: Option<usize>,
    staging_buf: Arc<fi::Buffer>,
    staging: Arc<fi::MemoryRegion>,
    scratch_buf: Arc<fi::Buffer>,
    scratch: Arc<fi::MemoryRegion>,
    chunk: usize,
    epoch: AtomicU64,
    /// Set by `leave`: its waits are bounded by [`MEMBER_POST`], not [`TIMEOUT`] (the
    /// creator may be gone, and a leave must not hold the process for long), and DMA is
    /// refused from then on.
    leaving: AtomicBool,
    /// Held while the roster is read into the scratch area.
    roster_read: Mutex<()>,
    /// This participant's write maps (for DMA, which goes through their raw buffers).
    windows: Mutex<Vec<Weak<WindowInner>>>,
    state: Mutex<State>,
}

impl std::fmt::Debug for Fanout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fanout")
            .field("size", &self.size)
            .field("slot", &self.slot)
            .field("creator", &self.creator.is_none())
            .finish_non_exhaustive()
    }
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A private, shared-memory-backed file of `len` bytes (a member's replica).
fn memfd(len: u64) -> Result<OwnedFd> {
    // SAFETY: the name is a NUL-terminated literal; memfd_create has no other preconditions.
    let fd = unsafe { libc::memfd_create(c"lanes-reflective".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(Error::io("creating a reflective replica", std::io::Error::last_os_error()));
    }
    // SAFETY: fd is a new descriptor nobody else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let f = std::fs::File::from(fd);
    // Reserved, so that no store into the replica can fault for want of memory.
    crate::platform::files::reserve(&f, len).map_err(|e| Error::io("sizing a reflective replica", e))?;
    Ok(OwnedFd::from(f))
}

impl Fanout {
    fn new(
        endpoint: Arc<ProcessEndpoint>,
        mine: Arc<DataMapping>,
        mine_mr: Option<fi::MemoryRegion>,
        size: u64,
        node: u32,
        creator: Option<Arc<OfiConn>>,
        slot: Option<usize>,
    ) -> Result<Fanout> {
        let staging_buf = Arc::new(fi::Buffer::new(STAGING)?);
        let staging = Arc::new(endpoint.register(staging_buf.clone(), fi::FI_READ | fi::FI_WRITE)?);
        let scratch_buf = Arc::new(fi::Buffer::new(SCRATCH)?);
        let scratch = Arc::new(endpoint.register(scratch_buf.clone(), fi::FI_READ | fi::FI_WRITE)?);
        let info = endpoint.fi().domain().info();
        let chunk = info.max_msg_size().max(1).min(info.max_order_waw_size().max(1)).min(STAGING / 2);
        let seen = word(mine.slice(), roster_at(size) as usize + H_CONTROL);
        Ok(Fanout {
            endpoint,
            mine,
            _mine_mr: mine_mr,
            size: size as usize,
            roster: roster_at(size) as usize,
            node,
            creator,
            slot,
            staging,
            scratch_buf,
            scratch,
            staging_buf,
            chunk,
            epoch: AtomicU64::new(0),
            leaving: AtomicBool::new(false),
            roster_read: Mutex::new(()),
            windows: Mutex::new(Vec::new()),
            state: Mutex::new(State { seen, ..State::default() }),
        })
    }

    /// The creator's side: `object` is its object's whole data, mapped read-write and
    /// exported (members reach it through the export's registration).
    pub fn creator(endpoint: Arc<ProcessEndpoint>, object: DataMapping, size: u64, node: u32) -> Result<Fanout> {
        Fanout::new(endpoint, Arc::new(object), None, size, node, None, None)
    }

    /// Joins the group whose object `conn` reaches (granted slot `slot`), for a process
    /// acting as `node`: validates the roster header, makes and fills the replica, writes
    /// this member's entry and tells every other participant. Returns the fan-out and the
    /// replica's descriptor (for the read map).
    pub fn join(conn: Arc<OfiConn>, slot: u32, node: u32) -> Result<(Arc<Fanout>, OwnedFd)> {
        let a = conn.info.addr;
        let object = conn.info.size.min(conn.range.len);
        let bad = |why: String| Error::Malformed(format!("reflective group {} on node {}: {why}", a.id, a.node));
        if object <= ROSTER_BYTES || (object - ROSTER_BYTES) % 4096 != 0 {
            return Err(bad(format!("{object} bytes is no group object of a cluster")));
        }
        let slot = slot as usize;
        if slot >= MAX_MEMBERS {
            return Err(bad(format!("slot {slot} has no roster entry")));
        }
        let endpoint = conn.endpoint.clone();
        // The roster's header, read through the connection.
        let roster = object - ROSTER_BYTES;
        let header = {
            let scratch_buf = Arc::new(fi::Buffer::new(HEADER_READ)?);
            let scratch = Arc::new(endpoint.register(scratch_buf.clone(), fi::FI_READ | fi::FI_WRITE)?);
            read_remote(&endpoint, &conn, &scratch, 0, roster as usize, HEADER_READ, TIMEOUT)?;
            let mut h = vec![0u8; HEADER_READ];
            scratch_buf.read(0, &mut h)?;
            h
        };
        let u64_at = |at: usize| u64::from_ne_bytes(header[at..at + 8].try_into().expect("8 bytes"));
        if u64_at(H_MAGIC) != MAGIC {
            return Err(Error::NotAvailable { node: a.node, segment: a.id });
        }
        let size = u64_at(H_SIZE);
        if size == 0 || roster_at(size) != roster {
            return Err(bad(format!("the roster says {size} bytes in an object of {object}")));
        }
        let n = u32::from_ne_bytes(header[H_RECEIVERS_LEN..H_RECEIVERS_LEN + 4].try_into().expect("4")) as usize;
        let receivers: Vec<u32> = (0..n.min(MAX_RECEIVERS))
            .map(|i| u32::from_ne_bytes(header[H_RECEIVERS + 4 * i..H_RECEIVERS + 4 * i + 4].try_into().expect("4")))
            .collect();
        if !receivers.is_empty() && !receivers.contains(&node) {
            return Err(Error::NotAReceiver { node, group: a.id });
        }
        // The replica: the whole object's layout, registered for peers' writes and reads.
        let fd = memfd(object)?;
        let len = usize::try_from(object).map_err(|_| bad("larger than the address space".into()))?;
        let mapping = Mapping::map(fd.as_fd(), 0, len, Access::ReadWrite)
            .map_err(|e| Error::io("mapping a reflective replica", e))?;
        let mine = Arc::new(DataMapping::whole(mapping, len));
        let access = fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE | fi::FI_READ | fi::FI_WRITE;
        let mr = endpoint.register(Arc::new(CopyMemory(mine.clone())), access)?;
        // The group's data first: writes aimed at us only start after our entry exists,
        // so none lands before this copy and is overwritten by older data.
        let piece = endpoint.fi().domain().info().max_msg_size().clamp(1, 1 << 20);
        let mut at = 0usize;
        while at < size as usize {
            let n = (size as usize - at).min(piece);
            let local = mr.local(at, n)?;
            let target = conn.range.target(at as u64, n as u64)?;
            let keep: Arc<dyn Any + Send + Sync> = mine.clone();
            // SAFETY: `local` is part of the replica, kept mapped by `keep` until the
            // completion is read; nobody else touches the replica yet.
            let op = unsafe { endpoint.post_read(local, target, Some(keep), fi::deadline_in(TIMEOUT)) }?;
            wait_ops(&endpoint, std::slice::from_ref(&op), "copying a reflective group's data", TIMEOUT)?;
            at += n;
        }
        let name = endpoint.name().to_vec();
        if name.len() > MAX_NAME {
            return Err(Error::IllegalOperation("the endpoint's name does not fit a roster entry"));
        }
        let mut e = [0u8; ENTRY];
        e[E_STATE..E_STATE + 8].copy_from_slice(&(random_u64() | 1).to_ne_bytes());
        e[E_NODE..E_NODE + 4].copy_from_slice(&node.to_ne_bytes());
        e[E_PID..E_PID + 4].copy_from_slice(&std::process::id().to_ne_bytes());
        e[E_KEY..E_KEY + 8].copy_from_slice(&mr.key().to_ne_bytes());
        e[E_BASE..E_BASE + 8].copy_from_slice(&mr.remote_base().to_ne_bytes());
        e[E_LEN..E_LEN + 8].copy_from_slice(&object.to_ne_bytes());
        e[E_NAME_LEN..E_NAME_LEN + 4].copy_from_slice(&(name.len() as u32).to_ne_bytes());
        e[E_NAME..E_NAME + name.len()].copy_from_slice(&name);
        let fan = Arc::new(Fanout::new(endpoint, mine, Some(mr), size, node, Some(conn), Some(slot))?);
        // Our entry: everything but the state word, then the state word.
        let entry_at = fan.roster + ENTRIES + slot * ENTRY;
        fan.post_words(&[(entry_at + 8, e[8..].to_vec())], "writing this member's roster entry")?;
        fan.post_words(&[(entry_at, e[..8].to_vec())], "publishing this member's roster entry")?;
        fan.announce("announcing this member")?;
        Ok((fan, fd))
    }

    /// `Err` once the group is lost to this member: its connection to the creator is lost,
    /// or the creator wrote its removal into our copy (which loses the connection).
    fn check(&self) -> Result<()> {
        let Some(c) = &self.creator else { return Ok(()) };
        if self.removed() {
            c.mark_lost(crate::transport::LossReason::Removed);
        }
        c.check_reachable()
    }

    /// Whether the group is lost to this member for good (removed, or its connection lost).
    fn is_lost(&self) -> bool {
        let Some(c) = &self.creator else { return false };
        if self.removed() {
            c.mark_lost(crate::transport::LossReason::Removed);
        }
        c.check_lost().is_err()
    }

    /// Whether the creator said it removed the group (members).
    pub fn removed(&self) -> bool {
        self.creator.is_some() && word(self.mine.slice(), self.roster + H_REMOVED) != 0
    }

    /// The creator's side of removing the group: tells every member (best effort, each
    /// post bounded by `MEMBER_POST`), before the object goes.
    pub fn announce_removal(&self) {
        if self.creator.is_some() {
            return;
        }
        let targets = {
            let mut st = lock(&self.state);
            if self.refresh_targets(&mut st).is_err() {
                return;
            }
            st.targets.clone()
        };
        let mut ops = Vec::new();
        let at = SCRATCH_WORDS + 2048;
        if self.scratch_buf.write(at, &1u64.to_ne_bytes()).is_err() {
            return;
        }
        for t in &targets {
            let Ok(local) = self.scratch.local(at, 8) else { return };
            let target = Target { peer: t.peer, addr: t.base + (self.roster + H_REMOVED) as u64, key: t.key };
            let keep: Arc<dyn Any + Send + Sync> = self.scratch.clone();
            // SAFETY: registered scratch memory kept alive by `keep`; every post sends the
            // same word, which nothing changes.
            let posted = unsafe {
                self.endpoint.post_write(local, target, 0, fi::FI_DELIVERY_COMPLETE, Some(keep), t.post_deadline())
            };
            if let Ok(op) = posted {
                ops.push(op);
            }
        }
        let _ = wait_done(&self.endpoint, &ops, "telling members that the group is removed", MEMBER_POST);
    }

    /// Bytes of the group.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Leaves: clears this member's entry and tells the others (best effort, bounded).
    pub fn leave(&self) {
        self.leaving.store(true, Ordering::Release);
        {
            // What was written is posted (not waited for: delivery is not a leave's business).
            let mut st = lock(&self.state);
            self.barrier(&mut st);
        }
        if self.creator.as_ref().is_some_and(|c| c.check_lost().is_err()) {
            return;
        }
        if let Some(slot) = self.slot {
            let at = self.roster + ENTRIES + slot * ENTRY;
            if self.post_words(&[(at, vec![0u8; 8])], "clearing this member's roster entry").is_ok() {
                let _ = self.announce("announcing that this member left");
            }
        }
    }

    /// Re-reads the roster and writes a fresh value into every other participant's control
    /// word, waiting for delivery (failures to members are tolerated: they left or died).
    fn announce(&self, what: &str) -> Result<()> {
        let targets = {
            let mut st = lock(&self.state);
            self.refresh_targets(&mut st)?;
            st.targets.clone()
        };
        let value = (random_u64() | 1).to_ne_bytes();
        let mut ops = Vec::new();
        for (i, t) in targets.iter().enumerate() {
            let at = SCRATCH_WORDS + 8 * (i % 64);
            self.scratch_buf.write(at, &value)?;
            let target = Target { peer: t.peer, addr: t.base + (self.roster + H_CONTROL) as u64, key: t.key };
            let local = self.scratch.local(at, 8)?;
            let keep: Arc<dyn Any + Send + Sync> = self.scratch.clone();
            // SAFETY: the scratch words are registered memory kept alive by `keep`; every
            // word carries the same value, so sharing one between posts is harmless.
            let posted = unsafe {
                self.endpoint.post_write(local, target, 0, fi::FI_DELIVERY_COMPLETE, Some(keep), t.post_deadline())
            };
            match posted {
                Ok(op) => ops.push((op, t.creator)),
                Err(e) if t.creator => return Err(e),
                Err(_) => {}
            }
        }
        let all: Vec<Arc<Op>> = ops.iter().map(|(o, _)| o.clone()).collect();
        wait_done(&self.endpoint, &all, what, self.bound())?;
        for (op, creator) in &ops {
            if let Some(Err(m)) = op.outcome() {
                if *creator {
                    return Err(op_error(what, &m));
                }
            }
        }
        if self.creator.is_none() {
            // The creator notifies itself too (its own barriers re-read the roster).
            set_word(self.mine.slice(), self.roster + H_CONTROL, random_u64() | 1);
        }
        Ok(())
    }

    /// Posts `words` (offset in the creator's object, bytes) to the creator through the
    /// scratch memory, in order, and waits for their delivery. Members only.
    fn post_words(&self, words: &[(usize, Vec<u8>)], what: &str) -> Result<()> {
        let conn = self.creator.as_ref().ok_or(Error::IllegalOperation("the creator posts to no creator"))?;
        let mut ops = Vec::new();
        let mut at = SCRATCH_WORDS + 1024;
        for (offset, bytes) in words {
            self.scratch_buf.write(at, bytes)?;
            let local = self.scratch.local(at, bytes.len())?;
            let target = conn.range.target(*offset as u64, bytes.len() as u64)?;
            let keep: Arc<dyn Any + Send + Sync> = self.scratch.clone();
            // SAFETY: registered scratch memory kept alive by `keep`, not reused until the
            // wait below returns.
            let op = unsafe {
                self.endpoint.post_write(
                    local,
                    target,
                    0,
                    fi::FI_DELIVERY_COMPLETE,
                    Some(keep),
                    fi::deadline_in(self.bound()),
                )
            }?;
            ops.push(op);
            at += bytes.len().next_multiple_of(8);
        }
        wait_ops(&self.endpoint, &ops, what, self.bound())
    }

    /// The roster entries as they are now: from our own object (creator) or read from the
    /// creator's (members, one round trip).
    fn read_entries(&self, bound: Duration) -> Result<Vec<u8>> {
        // One read at a time: they share the scratch area (a writer's barrier and a member's
        // wait for events may both re-read the roster on the same control-word change).
        let _one = self.roster_read.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = vec![0u8; MAX_MEMBERS * ENTRY];
        match &self.creator {
            None => {
                self.mine.slice().copy_to(self.roster + ENTRIES, &mut out).expect(INSIDE);
            }
            Some(conn) => {
                let n = out.len();
                read_remote(&self.endpoint, conn, &self.scratch, 0, self.roster + ENTRIES, n, bound)?;
                self.scratch_buf.read(0, &mut out)?;
            }
        }
        Ok(out)
    }

    /// This participant's control word: it changes whenever a member joined or left.
    pub fn control(&self) -> u64 {
        word(self.mine.slice(), self.roster + H_CONTROL)
    }

    /// The roster's entries but this member's, as read now (waiting at most `bound`, and
    /// never longer than a post to a member may take). Free slots are left out.
    pub fn roster(&self, bound: Duration) -> Result<Vec<RosterSlot>> {
        let bytes = self.read_entries(bound.min(MEMBER_POST).min(self.bound()))?;
        Ok(bytes
            .chunks_exact(ENTRY)
            .enumerate()
            .filter(|&(slot, _)| Some(slot) != self.slot)
            .filter_map(|(slot, e)| match u64_at(e, E_STATE) {
                g if g & 1 == 1 => {
                    Some(RosterSlot { slot, generation: Some(g), node: u32_at(e, E_NODE), pid: u32_at(e, E_PID) })
                }
                STATE_DIED => Some(RosterSlot { slot, generation: None, node: 0, pid: 0 }),
                _ => None,
            })
            .collect())
    }

    /// Every participant but this one, as (node, pid): the creator (members only know it
    /// by its connection) and the roster's members.
    pub fn members(&self) -> Result<Vec<(u32, u32)>> {
        let mut out = Vec::new();
        if let Some(c) = &self.creator {
            out.push((c.info.addr.node, c.info.owner.pid()));
        }
        let entries = parse_entries(&self.read_entries(self.bound())?);
        out.extend(entries.into_iter().filter(|e| Some(e.slot) != self.slot).map(|e| (e.node, e.pid)));
        Ok(out)
    }

    /// Re-reads the roster into `st.targets`.
    fn refresh_targets(&self, st: &mut State) -> Result<()> {
        let bound = if st.creator_down.is_some() { MEMBER_POST } else { self.bound() };
        let entries = parse_entries(&self.read_entries(bound)?);
        let mut targets = Vec::with_capacity(entries.len() + 1);
        if let Some(c) = &self.creator {
            targets.push(Peer {
                peer: c.range.peer,
                base: c.range.base,
                key: c.range.key,
                creator: true,
                member: None,
            });
        }
        let object = (self.roster as u64) + ROSTER_BYTES;
        for e in entries {
            if Some(e.slot) == self.slot || e.len != object || st.dead.contains(&(e.slot, e.generation)) {
                continue;
            }
            let peer = self.endpoint.peer(&e.name)?;
            let member = Some((e.slot, e.generation));
            targets.push(Peer { peer, base: e.base, key: e.key, creator: false, member });
        }
        st.targets = targets;
        st.loaded = true;
        st.stale = false;
        Ok(())
    }

    /// A member this writer could not reach: taken for dead until its entry changes.
    fn drop_member(&self, st: &mut State, member: Option<(usize, u64)>) {
        if let Some(id) = member {
            st.dead.insert(id);
            st.targets.retain(|t| t.member != Some(id));
        }
        st.stale = true;
    }

    /// How long one of this participant's own waits (roster reads, entry writes,
    /// announcements) may take.
    fn bound(&self) -> Duration {
        if self.leaving.load(Ordering::Acquire) {
            MEMBER_POST
        } else {
            TIMEOUT
        }
    }

    fn failed(&self, st: &mut State, message: String) {
        st.last_error = Some(message);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Forgets finished operations. A failure at the creator's object is a failure of the
    /// map; one at a member makes the roster stale (the member left or died).
    fn reap(&self, st: &mut State) {
        while let Some(f) = st.inflight.front() {
            let Some(outcome) = f.op.outcome() else {
                // Later ones may be done, but the ring is freed in order.
                break;
            };
            let f = st.inflight.pop_front().expect("a front");
            if let Err(m) = outcome {
                if f.creator {
                    self.failed(st, format!("a write to the creator's copy: {m}"));
                    st.creator_down = Some(std::time::Instant::now());
                } else {
                    st.last_error = Some(format!("a write to a member's copy: {m}"));
                    self.drop_member(st, f.member);
                }
            }
        }
    }

    /// Waits (driving progress, bounded) until no operation matching `pending` is in flight.
    fn wait_for(&self, st: &mut State, pending: impl Fn(&Flight) -> bool) -> Result<()> {
        let waited = self.endpoint.wait_until(
            || {
                self.reap(st);
                let busy = st.inflight.iter().any(|f| f.op.outcome().is_none() && pending(f));
                (!busy).then_some(())
            },
            SPIN,
            fi::deadline_in(TIMEOUT),
            "writes of a reflective group",
        );
        if let Err(e) = waited {
            self.failed(st, e.to_string());
            return Err(e);
        }
        Ok(())
    }

    /// Reserves `n` bytes of the staging ring, waiting for the writes still using them.
    fn stage(&self, st: &mut State, n: usize) -> Result<usize> {
        let mut at = st.head;
        if at + n > STAGING {
            at = 0;
        }
        self.wait_for(st, |f| f.staged && f.start < at + n && at < f.end)?;
        st.head = at + n;
        Ok(at)
    }

    /// Posts group bytes `[start, end)` of our copy, snapshotted into the staging ring, to
    /// every target, in order.
    fn post_range(&self, st: &mut State, start: usize, end: usize) {
        let mut at = start;
        while at < end {
            let n = (end - at).min(self.chunk);
            let staged = match self.stage(st, n) {
                Ok(s) => s,
                Err(_) => return,
            };
            // `at..at + n` is inside the group (the map checked it), the staging range is
            // ours (no operation uses it, waited above).
            self.mine.slice().copy_to_shared(at, &self.staging_buf.slice(), staged, n, usize::MAX).expect(INSIDE);
            let mut skipped = false;
            for t in st.targets.clone() {
                if t.creator && st.creator_down.is_some() {
                    skipped = true;
                    continue;
                }
                let posted = self.staging.local(staged, n).and_then(|local| {
                    let target = Target { peer: t.peer, addr: t.base + at as u64, key: t.key };
                    self.post_sliced(&t, |deadline| {
                        let keep: Arc<dyn Any + Send + Sync> = self.staging.clone();
                        // SAFETY: the staging bytes are registered memory kept alive by `keep`
                        // and not reused until this operation completed (`stage` waits for it).
                        unsafe {
                            self.endpoint.post_write(local, target, 0, fi::FI_DELIVERY_COMPLETE, Some(keep), deadline)
                        }
                    })
                });
                match posted {
                    Ok(op) => st.inflight.push_back(Flight {
                        op,
                        start: staged,
                        end: staged + n,
                        staged: true,
                        creator: t.creator,
                        member: t.member,
                    }),
                    Err(e) if t.creator => {
                        self.failed(st, format!("posting a write to the creator's copy: {e}"));
                        st.creator_down = Some(std::time::Instant::now());
                    }
                    Err(e) => {
                        st.last_error = Some(format!("posting a write to a member's copy: {e}"));
                        self.drop_member(st, t.member);
                    }
                }
            }
            if skipped {
                self.failed(st, "the creator's copy is unreachable: a write was not delivered there".into());
            }
            at += n;
        }
    }

    /// Runs `post` (given a deadline) for target `t`. A member's copy gets one try bounded
    /// by [`MEMBER_POST`]. The creator's gets tries of 100 ms until [`TIMEOUT`], checking in
    /// between whether its connection was lost or its host became unreachable (the daemons
    /// tell), so that a dead creator does not hold a write for the whole bound.
    fn post_sliced(&self, t: &Peer, post: impl Fn(std::time::Instant) -> Result<Arc<Op>>) -> Result<Arc<Op>> {
        let Some(conn) = self.creator.as_ref().filter(|_| t.creator) else { return post(t.post_deadline()) };
        let until = std::time::Instant::now() + TIMEOUT;
        loop {
            conn.check_reachable()?;
            let slice = (std::time::Instant::now() + Duration::from_millis(100)).min(until);
            match post(slice) {
                Err(Error::Timeout { .. }) if std::time::Instant::now() < until => {}
                other => return other,
            }
        }
    }

    /// A barrier: re-reads the roster if it changed, then posts the log in order.
    fn barrier(&self, st: &mut State) {
        self.reap(st);
        let control = word(self.mine.slice(), self.roster + H_CONTROL);
        let probe = st.creator_down.is_some_and(|t| t.elapsed() >= Duration::from_secs(1));
        let waiting = st.creator_down.is_some() && !probe;
        if (control != st.seen || st.stale || !st.loaded || probe) && !waiting {
            st.seen = control;
            match self.refresh_targets(st) {
                Ok(()) => st.creator_down = None,
                Err(e) => {
                    self.failed(st, format!("reading the group's roster: {e}"));
                    if self.creator.is_some() {
                        st.creator_down = Some(std::time::Instant::now());
                    }
                }
            }
        }
        for (s, e) in std::mem::take(&mut st.log) {
            self.post_range(st, s, e);
        }
    }

    fn log(&self, st: &mut State, start: usize, end: usize) {
        if let Some(last) = st.log.last_mut() {
            if start <= last.1 && end >= last.0 {
                *last = (last.0.min(start), last.1.max(end));
                return;
            }
        }
        if st.log.len() >= 256 {
            self.barrier(st);
        }
        st.log.push((start, end));
    }

    /// Posts the log and waits (bounded) until everything in flight is delivered; fails if
    /// a write failed meanwhile.
    fn flush_locked(&self, st: &mut State) -> Result<()> {
        let before = self.epoch.load(Ordering::Acquire);
        self.barrier(st);
        self.wait_for(st, |_| true)?;
        if self.epoch.load(Ordering::Acquire) != before {
            return Err(self.error(st.last_error.clone()));
        }
        Ok(())
    }

    fn error(&self, message: Option<String>) -> Error {
        Error::Ofi {
            call: "reflective write map",
            code: 5, // FI_EIO
            message: format!(
                "a write of node {} to its reflective group failed: {}",
                self.node,
                message.as_deref().unwrap_or("unknown error")
            ),
        }
    }

    /// DMA into the group (a DMA channel's work): puts `len` bytes from `src` into our copy
    /// at group offset `offset`, posts them to every other copy (after what this process
    /// logged before) and waits until they are delivered: a flush, whose waits are bounded
    /// as a write map's are. Fails if a write to the creator's copy failed meanwhile (the
    /// write maps' error epoch), the group is lost to this member, or the member is leaving.
    /// For this process's write maps whose raw pointer is in use it is a method's write.
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes (it may lie in our copy: a program may
    /// DMA from its read map); `offset + len` must not pass the group's size.
    pub unsafe fn dma_write(&self, offset: usize, src: *const u8, len: usize) -> Result<()> {
        debug_assert!(offset + len <= self.size);
        self.check_member()?;
        let end = offset + len;
        // This process's write maps of these bytes whose raw pointer is in use: the DMA goes
        // through their buffers as a method's write does (their pending raw stores there
        // first; then the buffer and its shadow hold the DMA's bytes), so that a raw store
        // and a DMA to the same bytes keep program order. Raw locks before the state lock,
        // as everywhere.
        let windows: Vec<(Arc<WindowInner>, usize, usize)> = self
            .windows
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|w| w.raw_mode.load(Ordering::Acquire))
            .filter_map(|w| {
                let (from, to) = (offset.max(w.start), end.min(w.start + w.len));
                (from < to).then(|| (w.clone(), from - w.start, to - w.start))
            })
            .collect();
        let mut raws: Vec<_> = windows.iter().map(|(w, _, _)| lock_raw(&w.raw)).collect();
        let mut st = lock(&self.state);
        for ((w, from, to), raw) in windows.iter().zip(raws.iter_mut()) {
            if let Some(r) = raw.as_mut() {
                w.diff(r, &mut st, *from, *to);
            }
        }
        // SAFETY: `src` is valid for `len` bytes (the caller's contract); a move, since it
        // may lie in our copy. The copy checks the range (inside the group, the caller's
        // contract too).
        unsafe { self.mine.slice().copy_from_raw(offset, src, len) }.expect(INSIDE);
        self.log(&mut st, offset, end);
        for ((w, from, to), raw) in windows.iter().zip(raws.iter_mut()) {
            w.take_from_copy(raw, *from, to - from);
        }
        drop(raws);
        self.flush_locked(&mut st)
    }

    /// DMA from the group: copies `len` bytes at group offset `offset` of our copy (every
    /// member's writes that arrived) to `dst`.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes; `offset + len` must not pass the
    /// group's size.
    pub unsafe fn dma_read(&self, offset: usize, dst: *mut u8, len: usize) -> Result<()> {
        debug_assert!(offset + len <= self.size);
        self.check_member()?;
        // SAFETY: as for `dma_write`, the other way.
        unsafe { self.mine.slice().copy_to_raw(offset, dst, len) }.expect(INSIDE);
        Ok(())
    }

    /// `Err` once the group is lost to this participant or it is leaving (a transfer queued
    /// before the leave must not write into the group after the roster forgot us).
    fn check_member(&self) -> Result<()> {
        if self.leaving.load(Ordering::Acquire) {
            return Err(Error::IllegalOperation("this member left the reflective group"));
        }
        self.check()
    }

    /// The creator's sweep (from the endpoint's service thread): marks dead the entries of
    /// members whose connection slot `holds` says is no longer held, and tells the rest.
    pub fn sweep(&self, holds: impl Fn(usize) -> bool) {
        if self.creator.is_some() {
            return;
        }
        let mut marked = false;
        for slot in 0..MAX_MEMBERS {
            let at = self.roster + ENTRIES + slot * ENTRY + E_STATE;
            let state = word(self.mine.slice(), at);
            if state & 1 == 1 && !holds(slot) {
                // From that member's state only: a joiner granted the slot meanwhile may have
                // written its own, which must not be marked.
                // Others write the word only by RMA, never through a Rust reference.
                let w = self.mine.slice().atomic_u64(at).expect(INSIDE);
                marked |= w.compare_exchange(state, STATE_DIED, Ordering::AcqRel, Ordering::Relaxed).is_ok();
            }
        }
        if marked {
            let _ = self.announce("telling members that a member died");
        }
    }
}

/// Reads `len` bytes at `offset` of the creator's object into `scratch` at `into` and waits.
fn read_remote(
    endpoint: &Arc<ProcessEndpoint>,
    conn: &OfiConn,
    scratch: &Arc<fi::MemoryRegion>,
    into: usize,
    offset: usize,
    len: usize,
    bound: Duration,
) -> Result<()> {
    let local = scratch.local(into, len)?;
    let target = conn.range.target(offset as u64, len as u64)?;
    let keep: Arc<dyn Any + Send + Sync> = scratch.clone();
    // SAFETY: `local` is registered scratch memory; `keep` (the registration, which holds
    // the memory) keeps it alive until the completion is read, even if the wait gives up.
    let op = unsafe { endpoint.post_read(local, target, Some(keep), fi::deadline_in(bound)) }?;
    wait_ops(endpoint, std::slice::from_ref(&op), "reading a reflective group's roster", bound)
}

fn op_error(what: &str, message: &str) -> Error {
    Error::Ofi { call: "reflective group", code: 5, message: format!("{what}: {message}") }
}

/// Waits (bounded) until every op finished, without judging their outcomes.
fn wait_done(endpoint: &ProcessEndpoint, ops: &[Arc<Op>], what: &str, bound: Duration) -> Result<()> {
    endpoint.wait_until(|| ops.iter().all(|o| o.outcome().is_some()).then_some(()), SPIN, fi::deadline_in(bound), what)
}

/// Waits (bounded) until every op finished; the first failure is the error.
fn wait_ops(endpoint: &ProcessEndpoint, ops: &[Arc<Op>], what: &str, bound: Duration) -> Result<()> {
    wait_done(endpoint, ops, what, bound)?;
    for o in ops {
        if let Some(Err(m)) = o.outcome() {
            return Err(op_error(what, &m));
        }
    }
    Ok(())
}

/// The granule of the raw-store comparison (as mirror windows use).
const LINE: usize = 64;

/// The private buffer behind a write map's raw pointer, and the shadow it is compared with.
///
/// Raw stores cannot go into the participant's copy directly: other members' writes land
/// there too, and a comparison could not tell them from this process's own stores. Only this
/// process writes the buffer, so whatever differs from the shadow at a barrier is its own.
struct RawStores {
    buffer: Mapping,
    shadow: Vec<u8>,
}

/// What a write map's drain task and sequences share with the map.
struct WindowInner {
    fan: Arc<Fanout>,
    /// The window: group bytes `[start, start + len)`.
    start: usize,
    len: usize,
    /// Set once the raw pointer was handed out (`raw` is filled from then on).
    raw_mode: AtomicBool,
    raw: Mutex<Option<RawStores>>,
}

fn lock_raw(m: &Mutex<Option<RawStores>>) -> MutexGuard<'_, Option<RawStores>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl WindowInner {
    /// The window's bytes of our copy.
    fn copy(&self) -> SharedSlice<'_> {
        // start + len <= the group's size (checked by `FanoutWindow::new`), inside `mine`.
        self.fan.mine.slice().subslice(self.start, self.len).expect(INSIDE)
    }

    /// Logs the runs of window bytes `[from, to)` where the raw buffer differs from the shadow
    /// (compared in 64-byte lines): each is copied into our copy (our read map sees it) and
    /// the shadow, and posted at the barrier as a method's write is.
    fn diff(&self, raw: &mut RawStores, st: &mut State, from: usize, to: usize) {
        let mut line = [0u8; LINE];
        let mut at = from - from % LINE;
        while at < to {
            let n = LINE.min(self.len - at);
            // The program may be storing to the buffer meanwhile, hence the copy into our
            // own line.
            raw.buffer.slice().copy_to(at, &mut line[..n]).expect(INSIDE);
            let old = &mut raw.shadow[at..at + n];
            if line[..n] != *old {
                changed_runs(&line[..n], old, |a, b| {
                    self.copy().copy_from(at + a, &line[a..b]).expect(INSIDE);
                    self.fan.log(st, self.start + at + a, self.start + at + b);
                });
                old.copy_from_slice(&line[..n]);
            }
            at += n;
        }
    }

    /// The raw buffer and the shadow take `len` bytes at window offset `offset` from our copy:
    /// after a method stored them (so the next comparison does not see them again and loads
    /// through the raw pointer see the method's write), or at a refresh.
    fn take_from_copy(&self, raw: &mut Option<RawStores>, offset: usize, len: usize) {
        if let Some(r) = raw.as_mut() {
            // The range is inside the window (the map checked it); the program stores to the
            // buffer through its pointer, never through a Rust reference.
            self.copy().copy_to(offset, &mut r.shadow[offset..offset + len]).expect(INSIDE);
            r.buffer.slice().copy_from(offset, &r.shadow[offset..offset + len]).expect(INSIDE);
        }
    }

    /// Locks the raw buffer (if there is one) and the fan-out's state, in that order, and
    /// logs what the program stored through the raw pointer.
    fn lock_and_diff(&self) -> (MutexGuard<'_, Option<RawStores>>, MutexGuard<'_, State>) {
        let mut raw = lock_raw(&self.raw);
        let mut st = lock(&self.fan.state);
        if let Some(r) = raw.as_mut() {
            self.diff(r, &mut st, 0, self.len);
        }
        (raw, st)
    }

    fn barrier(&self) {
        let (_raw, mut st) = self.lock_and_diff();
        self.fan.barrier(&mut st);
    }

    fn flush(&self) -> Result<()> {
        let (_raw, mut st) = self.lock_and_diff();
        self.fan.flush_locked(&mut st)
    }
}

impl SequenceSource for WindowInner {
    fn epoch(&self) -> u64 {
        self.fan.epoch.load(Ordering::Acquire)
    }
    fn flush(&self) -> Result<()> {
        WindowInner::flush(self)
    }
    fn lost(&self) -> bool {
        self.fan.is_lost()
    }
}

/// The write map of a group spanning hosts (or of part of it). See the module documentation.
pub struct FanoutWindow {
    inner: Arc<WindowInner>,
    _drain: Arc<dyn Fn() + Send + Sync>,
    reported: AtomicU64,
}

impl std::fmt::Debug for FanoutWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FanoutWindow")
            .field("fan", &self.inner.fan)
            .field("start", &self.inner.start)
            .field("len", &self.inner.len)
            .finish_non_exhaustive()
    }
}

impl FanoutWindow {
    /// The write map of group bytes `[start, start + len)` over `fan`'s copy; the endpoint's
    /// service thread posts what nobody flushes (raw stores included) about every 10 ms.
    pub fn new(fan: Arc<Fanout>, start: u64, len: u64) -> Result<FanoutWindow> {
        let size = fan.size as u64;
        if len == 0 {
            return Err(Error::InvalidSize { size: len, reason: "maps cover at least one byte" });
        }
        if start.checked_add(len).is_none_or(|end| end > size) {
            return Err(Error::OutOfRange { offset: start, len, size, what: "reflective group" });
        }
        let inner = Arc::new(WindowInner {
            fan,
            start: start as usize,
            len: len as usize,
            raw_mode: AtomicBool::new(false),
            raw: Mutex::new(None),
        });
        {
            let mut windows = inner.fan.windows.lock().unwrap_or_else(|e| e.into_inner());
            windows.retain(|w| w.strong_count() > 0);
            windows.push(Arc::downgrade(&inner));
        }
        let weak = Arc::downgrade(&inner);
        let drain: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            let Some(w) = weak.upgrade() else { return };
            // Never wait here: a program holding either lock is about to post anyway.
            let Some(mut raw) = try_lock_now(&w.raw) else { return };
            let Some(mut st) = try_lock_now(&w.fan.state) else { return };
            if let Some(r) = raw.as_mut() {
                w.diff(r, &mut st, 0, w.len);
            }
            if !st.log.is_empty() {
                w.fan.barrier(&mut st);
            } else {
                w.fan.reap(&mut st);
            }
        });
        inner.fan.endpoint.add_periodic(Arc::downgrade(&drain));
        Ok(FanoutWindow { inner, _drain: drain, reported: AtomicU64::new(0) })
    }

    /// The window's bytes of our copy, for the map's own accesses.
    #[inline]
    pub fn slice(&self) -> SharedSlice<'_> {
        self.inner.copy()
    }

    /// The first byte of this process's raw-store buffer: private memory, filled from our
    /// copy at the first call. Every barrier and flush (and the service thread, about every
    /// 10 ms) puts the bytes stored through it that changed into our copy and posts them to
    /// every member. Loads through it see this process's own stores and the group as it was
    /// at the first call; the read map shows everyone's. Null if the buffer cannot be
    /// allocated (the system is out of memory).
    pub fn as_ptr(&self) -> *mut u8 {
        let w = &self.inner;
        let mut raw = lock_raw(&w.raw);
        if raw.is_none() {
            let Ok(buffer) = Mapping::anonymous(w.len) else { return std::ptr::null_mut() };
            let mut shadow = vec![0u8; w.len];
            let _st = lock(&w.fan.state);
            // The buffer is ours, len bytes, unused yet.
            w.copy().copy_to(0, &mut shadow).expect(INSIDE);
            buffer.slice().copy_from(0, &shadow).expect(INSIDE);
            *raw = Some(RawStores { buffer, shadow });
            w.raw_mode.store(true, Ordering::Release);
        }
        raw.as_ref().map_or(std::ptr::null_mut(), |r| r.buffer.as_ptr())
    }

    #[allow(clippy::len_without_is_empty)] // a window covers at least one byte: never empty
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Locks the raw buffer only once there is one (most maps never hand out the pointer).
    fn lock_raw_if_used(&self) -> Option<MutexGuard<'_, Option<RawStores>>> {
        self.inner.raw_mode.load(Ordering::Acquire).then(|| lock_raw(&self.inner.raw))
    }

    /// A tracked write: `store` puts the bytes into our copy, the range is logged.
    pub fn tracked(&self, offset: usize, len: usize, store: impl FnOnce()) -> Result<()> {
        let w = &self.inner;
        w.fan.check()?;
        let mut raw = self.lock_raw_if_used();
        let mut st = lock(&w.fan.state);
        store();
        if let Some(r) = raw.as_deref_mut() {
            w.take_from_copy(r, offset, len);
        }
        w.fan.log(&mut st, w.start + offset, w.start + offset + len);
        Ok(())
    }

    /// A tracked write of at most the bytes of `ranges`, filled in order by `store`, which
    /// says how many it wrote (as [`FanoutWindow::tracked`] for each range it reached).
    pub fn tracked_ranges(&self, ranges: &[(usize, usize)], store: impl FnOnce() -> usize) -> Result<usize> {
        let w = &self.inner;
        w.fan.check()?;
        let mut raw = self.lock_raw_if_used();
        let mut st = lock(&w.fan.state);
        let n = store();
        let mut left = n;
        for &(offset, len) in ranges {
            let len = len.min(left);
            if len > 0 {
                if let Some(r) = raw.as_deref_mut() {
                    w.take_from_copy(r, offset, len);
                }
                w.fan.log(&mut st, w.start + offset, w.start + offset + len);
            }
            left -= len;
        }
        Ok(n)
    }

    /// A release store: everything before it is posted, then the word as its own write.
    pub fn release(&self, offset: usize, bytes: &[u8], store: impl FnOnce()) -> Result<()> {
        let w = &self.inner;
        w.fan.check()?;
        let (mut raw, mut st) = w.lock_and_diff();
        w.fan.barrier(&mut st);
        store();
        w.take_from_copy(&mut raw, offset, bytes.len());
        w.fan.post_range(&mut st, w.start + offset, w.start + offset + bytes.len());
        Ok(())
    }

    /// Reads load from this process's copy (which holds its own writes, raw stores to the
    /// range included, and every write of the others that arrived).
    pub fn read_with<T>(&self, offset: usize, len: usize, load: impl FnOnce() -> T) -> Result<T> {
        let w = &self.inner;
        if let Some(mut raw) = self.lock_raw_if_used() {
            let mut st = lock(&w.fan.state);
            if let Some(r) = raw.as_mut() {
                w.diff(r, &mut st, offset, offset + len);
            }
        }
        Ok(load())
    }

    pub fn barrier(&self) {
        self.inner.barrier();
    }

    pub fn flush(&self) {
        let _ = self.inner.flush();
    }

    pub fn flush_checked(&self) -> Result<()> {
        let flushed = self.inner.flush();
        let now = self.inner.fan.epoch.load(Ordering::Acquire);
        let before = self.reported.swap(now, Ordering::AcqRel);
        flushed?;
        if now != before {
            return Err(self.inner.fan.error(lock(&self.inner.fan.state).last_error.clone()));
        }
        Ok(())
    }

    /// Our copy is current by construction: a flush. Then the raw buffer and its shadow
    /// take the range from our copy, so loads through the raw pointer see the others' writes
    /// there and a later raw store of a value this map stored before is sent again. (The
    /// program does not store to the range meanwhile: such a store could be overwritten.)
    pub fn refresh(&self, offset: usize, len: usize) -> Result<()> {
        let w = &self.inner;
        let (mut raw, mut st) = w.lock_and_diff();
        let flushed = w.fan.flush_locked(&mut st);
        w.take_from_copy(&mut raw, offset, len);
        flushed
    }

    pub fn sequence(&self) -> MirrorSequence {
        MirrorSequence::over(self.inner.clone())
    }
}

impl Drop for FanoutWindow {
    fn drop(&mut self) {
        self.barrier();
    }
}

impl HostGroup for Fanout {
    fn group_size(&self) -> usize {
        self.size()
    }

    fn write_window(self: &Arc<Self>, offset: u64, size: u64) -> Result<Window> {
        Ok(Window::Tracked(TrackedWindow::Fanout(FanoutWindow::new(self.clone(), offset, size)?)))
    }

    fn participants(&self) -> Result<Vec<(u32, u32)>> {
        self.members()
    }

    fn sweep_members(&self, holds: &dyn Fn(usize) -> bool) {
        self.sweep(holds)
    }

    fn announce_group_removal(&self) {
        self.announce_removal()
    }

    fn leave_group(&self) {
        self.leave()
    }

    fn lose_if_removed(&self, member: &RemoteHandle) {
        if self.removed() {
            // The creator wrote its removal into our copy: the connection is lost.
            if let RemoteHandle::Ofi(r) = member {
                r.conn().mark_lost(LossReason::Removed);
            }
        }
    }

    fn roster_control(&self) -> u64 {
        self.control()
    }

    fn roster_slots(&self, bound: Duration) -> Result<Vec<RosterSlot>> {
        self.roster(bound)
    }
}
