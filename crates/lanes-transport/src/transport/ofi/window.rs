//! Mirror windows: a map of an object reached over ofi (docs/design/multi-host.md, section 6;
//! docs/ARCHITECTURE.md, "The transport layer").
//!
//! A mirror window is `len` bytes of private memory of this process, starting at the map's
//! object offset's offset within a page (so accesses are aligned exactly when they are in
//! the object, as on a direct map), filled by an RMA read of the remote range when the map
//! is made. What a program stores through the
//! map's methods goes into the window and into a write log of exact byte ranges; a barrier
//! copies the logged bytes into a staging ring and posts them from there as RMA writes in
//! log order (posting from the window itself would let a store made after the barrier
//! travel with a write still in flight, ahead of the release word that was to follow the
//! earlier data: a seqlock reader could then accept torn data). A run longer than the ring
//! is posted from the window itself and waited for before the barrier returns, which the
//! ring would have made it do piece by piece anyway, without the extra copy. A flush also
//! waits until every write is proven delivered; reads through the map's methods read the
//! remote memory (read-through). Once a raw pointer was handed out, the window keeps a
//! shadow copy and every barrier posts the byte runs where the window differs from it. The
//! endpoint's service thread drains windows with pending writes about every 10 ms.
//!
//! A release store (a sequence word after data) is the word's own write, after the data's,
//! ordered by `FI_ORDER_RMA_WAW`. On providers that fill the ranges of one write in the
//! order named ([`fi::Info::fills_ranges_in_order`]: tcp and net), a release store and the
//! few logged ranges before it go as one write instead, the word last: one message on the
//! wire instead of two, which is most of a small ping-pong's cost there. A word stored
//! right after a run longer than the staging ring goes in that run's write from the window.
//!
//! Memory discipline: the window (and the proof read's scratch words after it) is memory the
//! provider reads (writes from it) and writes (reads into it) at any time an operation is in
//! flight, so it is touched only through raw pointers, volatile accesses and copies, never
//! through references. Every posted operation keeps the registration (and through it the
//! memory) alive until its completion is read, so dropping a map with work in flight is safe.
//!
//! Every wait is bounded by [`MIRROR_TIMEOUT`]; nothing waits on the provider without a
//! deadline.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use super::endpoint::Op;
use super::fi;
use super::reflective::FanoutWindow;
use super::remote::OfiConn;
use crate::error::{Error, Result};
use crate::platform::SharedSlice;
use crate::transport::{LossReason, MapSequence, RemoteState, TrackedMap};
use crate::transport::{MapAccess, SequenceStatus};

/// The bound on every wait of a mirror window: a post the provider keeps refusing
/// (`-FI_EAGAIN`), a flush, a read-through, the fill when the map is made. Past it the
/// operation fails with [`Error::Timeout`] and the map's error epoch advances. (The
/// suspect deadline of docs/design/multi-host.md, section 9, will bound these sooner once
/// connections learn their peer's host state.)
pub const MIRROR_TIMEOUT: Duration = Duration::from_secs(10);

/// Entries of the write log; a write that finds it full posts it first.
const LOG_ENTRIES: usize = 256;
/// Tries of a new map's fill that fails with a provider error, and the pause between them.
const FILL_TRIES: u32 = 5;
const FILL_PAUSE: Duration = Duration::from_millis(100);

/// The granule of the shadow comparison.
const LINE: usize = 64;

/// How long a waiter spins on the CQs before it sleeps in growing steps.
const SPIN: Duration = Duration::from_micros(50);

/// Bytes of the proof read (a flush with nothing left to post reads this much back).
const PROOF: usize = 8;
/// Windows start at their object offset's offset within a page of this size.
const PAGE: u64 = 4096;

/// Bytes of the staging ring writes are posted from (at most; a smaller window gets a ring
/// of its own size rounded up to a page). A write larger than the ring is posted in pieces,
/// each waiting for the ring space it reuses.
#[doc(hidden)] // for the fabric's tests of this transport
pub const STAGING: usize = 256 * 1024;

/// Staging slots of release stores (8 bytes each, after the proof read's): the word is
/// posted from its own slot, not from the window, so a later store to the word cannot
/// overtake the data published before it. (Not `fi_inject_write`: on tcp;ofi_rxm 1.17 an
/// inject on a connection the target has just dropped crashed the next `fi_cq_read` in
/// our tests, and an inject's failure is never reported.)
const RELEASE_SLOTS: usize = 16;

/// A map of an object on another host. See the module documentation.
pub struct MirrorWindow {
    #[doc(hidden)] // for the fabric's tests of this transport
    pub shared: Arc<Mirror>,
    /// The drain task, registered with the endpoint by a weak reference: it runs while
    /// this window lives.
    _drain: Arc<dyn Fn() + Send + Sync>,
    /// The error epoch the last [`MirrorWindow::flush_checked`] reported up to.
    reported: AtomicU64,
}

impl std::fmt::Debug for MirrorWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorWindow")
            .field("object", &self.shared.conn.info.addr)
            .field("offset", &self.shared.offset)
            .field("len", &self.shared.len)
            .finish_non_exhaustive()
    }
}

/// What a window shares with its drain task and its sequences.
pub struct Mirror {
    conn: Arc<OfiConn>,
    /// Where the window starts in the object.
    offset: u64,
    len: usize,
    writable: bool,
    /// From `lead`, the window (`len` bytes); from `lead + proof_at`, the proof read's
    /// landing place and the release stores' slots; from `lead + staging_at`, the staging
    /// ring (`staging_len` bytes).
    mem: Arc<fi::Buffer>,
    /// Where the window starts in `mem`: the object offset's offset within a page, so that
    /// the window's addresses have the alignment of the object's offsets, as a direct map's
    /// do (an access aligned in the object is aligned in the window, and the reverse).
    lead: usize,
    /// `mem`'s registration for local use; operations keep it (and `mem`) alive.
    mr: Arc<fi::MemoryRegion>,
    /// Where the proof read lands and the staging ring starts, relative to the window
    /// (aligned in `mem`).
    proof_at: usize,
    staging_at: usize,
    staging_len: usize,
    /// Largest single write or read (the provider's message and ordering limits): a run
    /// posted from the window, or read into it, goes in as few operations as they allow.
    chunk: usize,
    /// Largest single write posted from the staging ring (`chunk`, at most the ring).
    staged_chunk: usize,
    /// Whether writes land in the order posted (`FI_ORDER_RMA_WAW` and `_RAW`). Without it
    /// every write asks for delivery completion and a barrier waits for it.
    ordered: bool,
    /// Most ranges one write may fill in order (a release store and the logged ranges
    /// before it); 1 where the provider does not fill ranges in order or the owner's cores
    /// may not see them in that order.
    #[doc(hidden)] // for the fabric's tests of this transport
    pub scatter: usize,
    /// Set once a raw pointer was handed out (the shadow exists from then on).
    shadow_mode: AtomicBool,
    /// Advances on every failed or dropped write or read of this map.
    epoch: AtomicU64,
    #[doc(hidden)] // for the fabric's tests of this transport
    pub state: Mutex<State>,
    /// Posts of writes still to refuse ([`Mirror::refused_by_test`]).
    #[cfg(any(test, feature = "test-hooks"))]
    pub refuse_posts: std::sync::atomic::AtomicUsize,
}

/// A mirror window's mutable part, behind one (uncontended) lock.
#[derive(Default)]
#[doc(hidden)] // for the fabric's tests of this transport
pub struct State {
    /// Byte ranges `[start, end)` of the window written and not posted yet, in order.
    log: Vec<(usize, usize)>,
    /// In shadow mode: the window as last posted.
    shadow: Option<Vec<u8>>,
    #[doc(hidden)] // for the fabric's tests of this transport
    pub inflight: Vec<InFlight>,
    /// Whether a write was posted since the last proof of delivery (delivery-complete
    /// write or read).
    unproven: bool,
    /// What the last failure said.
    last_error: Option<String>,
    /// Release stores so far (the next one uses slot `releases % RELEASE_SLOTS`).
    releases: usize,
    /// Where the next staged write starts in the staging ring.
    staged: usize,
}

/// Logged ranges copied into the staging ring for a release store: `len` bytes from `at`,
/// the first `count` of `ranges` (window offset, length) back to back, then the word.
struct StagedRelease {
    at: usize,
    len: usize,
    ranges: [(usize, usize); fi::SCATTER_MAX],
    count: usize,
}

/// A posted operation and the window bytes it reads or writes.
#[doc(hidden)] // for the fabric's tests of this transport
pub struct InFlight {
    pub op: Arc<Op>,
    pub start: usize,
    end: usize,
    what: &'static str,
}

#[doc(hidden)] // for the fabric's tests of this transport
pub fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl MirrorWindow {
    /// Opens a mirror window of `len` bytes from `offset` of `conn`'s object and fills it
    /// from the remote memory (bounded by [`MIRROR_TIMEOUT`]; a failed fill makes no map).
    pub fn open(conn: &Arc<OfiConn>, offset: u64, len: u64, access: MapAccess) -> Result<MirrorWindow> {
        MirrorWindow::open_capped(conn, offset, len, access, usize::MAX)
    }

    /// [`MirrorWindow::open`] with single operations of at most `max_op` bytes (below the
    /// provider's limits: tests take runs apart this way).
    #[doc(hidden)] // for the fabric's tests of this transport
    pub fn open_capped(
        conn: &Arc<OfiConn>,
        offset: u64,
        len: u64,
        access: MapAccess,
        max_op: usize,
    ) -> Result<MirrorWindow> {
        let a = conn.info.addr;
        if let RemoteState::Lost(r) = conn.state() {
            return Err(Error::SegmentLost { node: a.node, segment: a.id, reason: r.describe() });
        }
        if len == 0 {
            return Err(Error::InvalidSize { size: len, reason: "maps cover at least one byte" });
        }
        let size = conn.info.size.min(conn.range.len);
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(Error::OutOfRange { offset, len, size, what: "segment" });
        }
        let len = usize::try_from(len)
            .map_err(|_| Error::InvalidSize { size: len, reason: "larger than this process's address space" })?;
        let ep = &conn.endpoint;
        let info = ep.fi().domain().info();
        let order = fi::FI_ORDER_RMA_WAW | fi::FI_ORDER_RMA_RAW;
        let ordered = info.msg_order() & order == order;
        let mut chunk = info.max_msg_size().clamp(1, max_op);
        if ordered {
            chunk = chunk.min(info.max_order_waw_size().max(1)).min(info.max_order_raw_size().max(1));
        }
        // A word as the last range of its data's write is seen after the data only by an
        // owner whose cores see one write's ranges in the order filled (x86-64).
        let scatter = if ordered && info.fills_ranges_in_order() && conn.owner_sees_ranges_in_order() {
            info.rma_iov_limit().clamp(1, fi::SCATTER_MAX)
        } else {
            1
        };
        let lead = (offset % PAGE) as usize;
        let proof_at = (lead + len).next_multiple_of(PROOF) - lead;
        let staging_at = (lead + proof_at + PROOF + RELEASE_SLOTS * 8).next_multiple_of(LINE) - lead;
        let staging_len = STAGING.min(len.next_multiple_of(4096));
        let staged_chunk = chunk.min(staging_len);
        let mem = Arc::new(fi::Buffer::new(lead + staging_at + staging_len)?);
        // `fi::Local` is made only from a registration, so the window is registered for local
        // use on every provider (on tcp and net a registration is bookkeeping only).
        let mr = Arc::new(ep.register(mem.clone(), fi::FI_READ | fi::FI_WRITE)?);
        let shared = Arc::new(Mirror {
            conn: conn.clone(),
            offset,
            len,
            writable: access == MapAccess::ReadWrite,
            mem,
            lead,
            mr,
            proof_at,
            staging_at,
            staging_len,
            chunk,
            staged_chunk,
            ordered,
            scatter,
            shadow_mode: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            state: Mutex::new(State::default()),
            #[cfg(any(test, feature = "test-hooks"))]
            refuse_posts: Default::default(),
        });
        {
            let mut st = lock(&shared.state);
            // The first operations on a provider connection that broke in a short outage
            // of the peer's host (suspected, never lost) fail, and the provider makes a new
            // connection for the next ones (ofi_rxm): the fill only reads, so it is tried
            // again a few times before the map is refused.
            let mut tries = 1;
            loop {
                match shared.read_range(&mut st, 0, len, "filling a new map") {
                    Ok(()) => break,
                    Err(Error::Ofi { .. }) if tries < FILL_TRIES && !matches!(conn.state(), RemoteState::Lost(_)) => {
                        tries += 1;
                        std::thread::sleep(FILL_PAUSE);
                    }
                    Err(e) => return Err(e),
                }
            }
            st.last_error = None;
        }
        // A failed try of the fill is no failure of the map's.
        let epoch = shared.epoch.load(Ordering::Acquire);
        let weak = Arc::downgrade(&shared);
        let drain: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            if let Some(m) = weak.upgrade() {
                m.drain();
            }
        });
        ep.add_periodic(Arc::downgrade(&drain));
        Ok(MirrorWindow { shared, _drain: drain, reported: AtomicU64::new(epoch) })
    }

    /// The window (`len` bytes), without side effects, for the map's own accesses.
    #[inline]
    pub fn slice(&self) -> SharedSlice<'_> {
        self.shared.window()
    }

    #[allow(clippy::len_without_is_empty)] // a window covers at least one byte: never empty
    pub fn len(&self) -> usize {
        self.shared.len
    }

    /// The window's first byte for a program's own loads and stores: the window switches to
    /// shadow mode (writable windows only; raw stores to a read-only one stay local).
    pub fn as_ptr(&self) -> *mut u8 {
        let m = &self.shared;
        if m.writable && !m.shadow_mode.load(Ordering::Acquire) {
            let mut st = lock(&m.state);
            if st.shadow.is_none() {
                let mut shadow = vec![0u8; m.len];
                // No read into the window is in flight while the lock is held (reads are
                // waited for under it).
                m.window().copy_to(0, &mut shadow).expect(INSIDE);
                st.shadow = Some(shadow);
            }
            m.shadow_mode.store(true, Ordering::Release);
        }
        m.ptr()
    }

    /// A tracked write of `len` bytes at `offset` (checked by the caller): `store` puts them
    /// into the window, then the range is logged. Fails once the connection is lost.
    #[inline]
    pub fn tracked(&self, offset: usize, len: usize, store: impl FnOnce()) -> Result<()> {
        let m = &self.shared;
        let mut st = lock(&m.state);
        m.check()?;
        store();
        m.stored(&mut st, offset, len);
        Ok(())
    }

    /// A tracked write of at most the bytes of `ranges` (window offset, length; checked by
    /// the caller): `store` puts them into the window, filling the ranges in order, and says
    /// how many it wrote; those are logged. Fails once the connection is lost.
    pub fn tracked_ranges(&self, ranges: &[(usize, usize)], store: impl FnOnce() -> usize) -> Result<usize> {
        let m = &self.shared;
        let mut st = lock(&m.state);
        m.check()?;
        let n = store();
        let mut left = n;
        for &(offset, len) in ranges {
            let len = len.min(left);
            if len > 0 {
                m.stored(&mut st, offset, len);
            }
            left -= len;
        }
        Ok(n)
    }

    /// A release store of `bytes.len()` bytes at `offset`: a barrier, then `store` puts the
    /// word into the window and it is posted as its own write (or, where the provider fills
    /// ranges in order and the owner sees them so, as the last range of one write with the
    /// pending data). If a write before the word failed (to post, or found failed meanwhile), the word is
    /// stored into the window but not posted, and the call fails: a reader of the word
    /// must find the data written before it.
    pub fn release(&self, offset: usize, bytes: &[u8], store: impl FnOnce()) -> Result<()> {
        let m = &self.shared;
        let mut st = lock(&m.state);
        m.check()?;
        let before = m.epoch.load(Ordering::Acquire);
        if m.scatter > 1 {
            m.reap(&mut st);
            m.diff(&mut st);
            if let Some(&(start, end)) = st.log.last() {
                if end == offset && end - start > m.staging_len {
                    st.log.pop();
                    return m.post_run_with_release(&mut st, before, start..end, bytes, store);
                }
            }
            if let Some(staged) = m.stage_log_before(&mut st, bytes.len()) {
                // Staged before the store, so that a logged range covering the word
                // carries its old value, as a barrier before the store would post it.
                m.store_word(&mut st, offset, bytes, store);
                let staged = staged?;
                m.no_failure_since(&st, before)?;
                return m.post_with_release(&mut st, staged, offset, bytes);
            }
        }
        m.barrier(&mut st);
        m.store_word(&mut st, offset, bytes, store);
        m.no_failure_since(&st, before)?;
        let slot = m.proof_at + PROOF + (st.releases % RELEASE_SLOTS) * 8;
        st.releases += 1;
        // The slot's previous write has long been sent, as a rule; if not, wait for it.
        m.wait_for(&mut st, |f| f.start == slot && f.what == RELEASE)?;
        // No operation is in flight on the slot (waited for above).
        m.buf().copy_from(slot, bytes).map_err(|e| Error::shared(e, "mirror window"))?;
        m.post_one(&mut st, slot, bytes.len(), offset, !m.ordered, RELEASE)
    }

    /// Reads `len` bytes at `offset` (checked by the caller) from the remote memory into the
    /// window, after posting every pending write, then calls `load` on the window. After a
    /// loss it loads what the window last held.
    pub fn read_with<T>(&self, offset: usize, len: usize, load: impl FnOnce() -> T) -> Result<T> {
        let m = &self.shared;
        let mut st = lock(&m.state);
        if m.check().is_ok() {
            m.barrier(&mut st);
            m.read_range(&mut st, offset, len, "a read through a map")?;
        }
        Ok(load())
    }

    /// Posts every pending write, in order; does not wait (unless the provider does not order
    /// writes, then it waits for them).
    pub fn barrier(&self) {
        let m = &self.shared;
        let mut st = lock(&m.state);
        if m.check().is_ok() {
            m.barrier(&mut st);
        } else {
            m.drop_pending(&mut st);
        }
    }

    /// Posts every pending write and waits (bounded) until all writes of this map are proven
    /// delivered. Failures are remembered (error epoch, last message).
    pub fn flush(&self) {
        let _ = self.shared.flush();
    }

    /// [`MirrorWindow::flush`], then `Err` with the last failure if any write or read of
    /// this map failed since the previous call (or since the map was made).
    pub fn flush_checked(&self) -> Result<()> {
        let m = &self.shared;
        let flushed = m.flush();
        let now = m.epoch.load(Ordering::Acquire);
        let before = self.reported.swap(now, Ordering::AcqRel);
        flushed?;
        if now != before {
            return Err(m.error(lock(&m.state).last_error.clone()));
        }
        Ok(())
    }

    /// Flushes, then re-reads `len` bytes at `offset` (checked by the caller) from the
    /// remote memory into the window (and the shadow).
    pub fn refresh(&self, offset: usize, len: usize) -> Result<()> {
        let m = &self.shared;
        m.flush()?;
        let mut st = lock(&m.state);
        m.check()?;
        m.read_range(&mut st, offset, len, "refreshing a map")
    }

    /// The sequence checker of this window (`Sequence` on a mirror map).
    pub fn sequence(&self) -> MirrorSequence {
        MirrorSequence::over(self.shared.clone())
    }
}

impl Drop for MirrorWindow {
    fn drop(&mut self) {
        // What was written is posted, not dropped with the map (nobody waits for it).
        self.barrier();
    }
}

impl Mirror {
    /// The buffer from the window's first byte: the window, then the proof read's words,
    /// the release slots and the staging ring. Window offsets (and `proof_at`,
    /// `staging_at`) are relative to it.
    #[inline]
    fn buf(&self) -> SharedSlice<'_> {
        // `lead` is less than a page, and the buffer holds `lead` bytes and more.
        self.mem.slice().offset(self.lead).expect(INSIDE)
    }

    /// The window: `len` bytes from its first byte.
    #[inline]
    fn window(&self) -> SharedSlice<'_> {
        self.buf().subslice(0, self.len).expect(INSIDE)
    }

    /// The window's first byte.
    fn ptr(&self) -> *mut u8 {
        self.buf().as_ptr()
    }

    /// `len` bytes at window offset `at` (or after the window: the proof and release
    /// slots), for an operation.
    fn local(&self, at: usize, len: usize) -> Result<fi::Local> {
        self.mr.local(self.lead + at, len)
    }

    /// `Ok` while writes can be posted: not lost, and the owner's host responds.
    fn check(&self) -> Result<()> {
        self.conn.check_reachable()
    }

    fn lost(&self) -> Option<LossReason> {
        match self.conn.state() {
            RemoteState::Lost(r) => Some(r),
            _ => None,
        }
    }

    /// The error a failure of this map reports.
    fn error(&self, message: Option<String>) -> Error {
        let a = self.conn.info.addr;
        Error::Ofi {
            call: "mirror window",
            code: 5, // FI_EIO
            message: format!(
                "a write or read of the map of segment {:#x} on node {} at offset {} failed: {}",
                a.id,
                a.node,
                self.offset,
                message.as_deref().unwrap_or("unknown error")
            ),
        }
    }

    /// Records a failure: the error epoch advances.
    fn failed(&self, st: &mut State, message: String) {
        st.last_error = Some(message);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// In tests, `Err` for as many posts of writes as `refuse_posts` says (then it counts
    /// down): a provider that refuses a post, without losing the connection.
    #[cfg(any(test, feature = "test-hooks"))]
    fn refused_by_test(&self) -> Result<()> {
        match self.refuse_posts.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)) {
            Ok(_) => Err(Error::Timeout { what: "a post the test refused".into(), waited_ms: 0 }),
            Err(_) => Ok(()),
        }
    }

    #[cfg(not(any(test, feature = "test-hooks")))]
    #[inline(always)]
    fn refused_by_test(&self) -> Result<()> {
        Ok(())
    }

    /// `Err` with the last failure if one was recorded since the error epoch was `before`.
    fn no_failure_since(&self, st: &State, before: u64) -> Result<()> {
        if self.epoch.load(Ordering::Acquire) == before {
            return Ok(());
        }
        Err(self.error(st.last_error.clone()))
    }

    /// Drops the pending writes of a lost connection (they count as failed).
    fn drop_pending(&self, st: &mut State) {
        if !st.log.is_empty() {
            st.log.clear();
            let why = self.conn.fault().map_or_else(|| "the connection is lost".to_string(), |e| e.to_string());
            self.failed(st, format!("writes dropped: {why}"));
        }
    }

    /// After `len` bytes at `offset` were stored into the window: keeps the shadow in step
    /// and logs the range.
    fn stored(&self, st: &mut State, offset: usize, len: usize) {
        if let Some(shadow) = st.shadow.as_mut() {
            // The caller checked the range; no read into the window is in flight while the
            // lock is held.
            self.window().copy_to(offset, &mut shadow[offset..offset + len]).expect(INSIDE);
        }
        self.log(st, offset, offset + len);
    }

    /// A release store's word: `store` puts `bytes` into the window at `offset`, and the
    /// shadow (if any) takes them too, so that the next comparison does not post them again.
    fn store_word(&self, st: &mut State, offset: usize, bytes: &[u8], store: impl FnOnce()) {
        store();
        if let Some(shadow) = st.shadow.as_mut() {
            shadow[offset..offset + bytes.len()].copy_from_slice(bytes);
        }
    }

    /// Appends `[start, end)` to the log, coalescing with the last entry when they touch;
    /// a full log is posted first.
    fn log(&self, st: &mut State, start: usize, end: usize) {
        if let Some(last) = st.log.last_mut() {
            if start <= last.1 && end >= last.0 {
                *last = (last.0.min(start), last.1.max(end));
                return;
            }
        }
        if st.log.len() >= LOG_ENTRIES {
            self.post_log(st, false);
        }
        st.log.push((start, end));
    }

    /// In shadow mode, logs the byte runs where the window differs from the shadow (compared
    /// in 64-byte lines) and updates the shadow.
    fn diff(&self, st: &mut State) {
        let Some(mut shadow) = st.shadow.take() else { return };
        let mut line = [0u8; LINE];
        let mut start = 0;
        while start < self.len {
            let n = LINE.min(self.len - start);
            // No read into the window is in flight while the lock is held.
            self.window().copy_to(start, &mut line[..n]).expect(INSIDE);
            let old = &mut shadow[start..start + n];
            if line[..n] != *old {
                changed_runs(&line[..n], old, |a, b| self.log(st, start + a, start + b));
                old.copy_from_slice(&line[..n]);
            }
            start += n;
        }
        st.shadow = Some(shadow);
    }

    /// A barrier: everything written (logged or, in shadow mode, changed) is posted in order.
    fn barrier(&self, st: &mut State) {
        self.reap(st);
        self.diff(st);
        self.post_log(st, false);
        if !self.ordered {
            let _ = self.settle(st, |f| f.what == WRITE);
        }
    }

    /// Posts the log in order, the last write with delivery completion when `deliver`. A
    /// failed post drops the rest (they count as failed).
    fn post_log(&self, st: &mut State, deliver: bool) {
        let log = std::mem::take(&mut st.log);
        let n = log.len();
        for (i, (start, end)) in log.into_iter().enumerate() {
            if self.post_write(st, start, end, (deliver && i + 1 == n) || !self.ordered).is_err() {
                break;
            }
        }
    }

    /// Posts window bytes `[start, end)` to the same place of the object, in chunks copied
    /// into the staging ring; asks for delivery completion of the last chunk when `deliver`.
    /// A run longer than the ring goes from the window itself instead, and the call waits
    /// until the provider has read it (its completions), so that no store after the barrier
    /// can travel with it: staging such a run would wait as long, piece by piece for the
    /// ring it reuses, and copy every byte once more (at 1 MiB, a tenth of a PIO ping-pong's
    /// time on a loaded machine).
    fn post_write(&self, st: &mut State, start: usize, end: usize, deliver: bool) -> Result<()> {
        let from_window = end - start > self.staging_len;
        let chunk = if from_window { self.chunk } else { self.staged_chunk };
        let mut at = start;
        let mut posted = Ok(());
        while at < end {
            let n = chunk.min(end - at);
            let from = if from_window {
                at
            } else {
                let staged = self.stage(st, n)?;
                // No operation reads the staging bytes any more (waited for by `stage`), and
                // the window is only copied from.
                let buf = self.buf();
                buf.copy_to_shared(at, &buf, staged, n, usize::MAX).map_err(|e| Error::shared(e, "mirror window"))?;
                staged
            };
            if let Err(e) = self.post_one(st, from, n, at, deliver && at + n == end, WRITE) {
                posted = Err(e);
                break;
            }
            at += n;
        }
        if from_window {
            // Also after a failed post: the pieces posted before it read the window.
            let waited = self.wait_for(st, |f| f.what == WRITE && f.start < end && start < f.end);
            posted = posted.and(waited);
        }
        posted
    }

    /// For a release store of `word` bytes where the provider fills ranges in order: when
    /// the log (all of it) and the word fit one write, takes the log and copies its ranges
    /// into the staging ring, back to back, leaving `word` bytes after them. `None` when they
    /// do not fit (the log stays); `Err` when the ring could not be had (the log's writes
    /// are dropped and count as failed).
    fn stage_log_before(&self, st: &mut State, word: usize) -> Option<Result<StagedRelease>> {
        let data: usize = st.log.iter().map(|&(start, end)| end - start).sum();
        if st.log.len() >= self.scatter || data + word > self.staged_chunk {
            return None;
        }
        let log = std::mem::take(&mut st.log);
        let at = match self.stage(st, data + word) {
            Ok(at) => at,
            Err(e) => {
                self.failed(st, format!("writes dropped: {e}"));
                return Some(Err(e));
            }
        };
        let mut ranges = [(0usize, 0usize); fi::SCATTER_MAX];
        let mut to = at;
        let buf = self.buf();
        for (range, &(start, end)) in ranges.iter_mut().zip(&log) {
            // `stage` waited for every operation reading the staged piece, and the window is
            // only copied from.
            buf.copy_to_shared(start, &buf, to, end - start, usize::MAX).expect(INSIDE);
            *range = (start, end - start);
            to += end - start;
        }
        Some(Ok(StagedRelease { at, len: data + word, ranges, count: log.len() }))
    }

    /// Posts `staged` (the log's ranges, from [`Mirror::stage_log_before`], or a run of the
    /// window ending at the word, from [`Mirror::post_run_with_release`]) and the release
    /// word `bytes` for window offset `offset` as one write, the word's range last.
    fn post_with_release(&self, st: &mut State, staged: StagedRelease, offset: usize, bytes: &[u8]) -> Result<()> {
        let word_at = staged.at + staged.len - bytes.len();
        // The word's place is the end of the staged piece, which `stage` reserved for us, or
        // (a window run) the word's own place in the window; no operation reads either
        // (window runs are waited for before the call that posted them returns).
        self.buf().copy_from(word_at, bytes).map_err(|e| Error::shared(e, "mirror window"))?;
        let mut targets = [(fi::Target { peer: fi::FiAddr(0), addr: 0, key: 0 }, 0usize); fi::SCATTER_MAX];
        let ranges = staged.ranges[..staged.count].iter().copied().chain([(offset, bytes.len())]);
        let mut n = 0;
        for (slot, (at, len)) in targets.iter_mut().zip(ranges) {
            match self.conn.range.target(self.offset + at as u64, len as u64) {
                Ok(t) => *slot = (t, len),
                Err(e) => {
                    self.failed(st, format!("posting {RELEASE}: {e}"));
                    return Err(e);
                }
            }
            n += 1;
        }
        let posted = self.refused_by_test().and_then(|()| self.local(staged.at, staged.len)).and_then(|local| {
            let keep: Arc<dyn Any + Send + Sync> = self.mr.clone();
            // SAFETY: local is a piece of the staging ring of our registered buffer, which
            // `keep` keeps alive until the completion is read; `stage` hands it out to no
            // one else while this write is in flight. Or it is a run of the window, which
            // `post_run_with_release` waits for before it returns (under the state lock
            // the map's stores take). A refused attempt posted nothing.
            self.conn.post_until(MIRROR_TIMEOUT, |d| unsafe {
                self.conn.endpoint.post_write_scatter(local, &targets[..n], 0, Some(keep.clone()), d)
            })
        });
        self.record_post(st, posted, staged.at..staged.at + staged.len, false, RELEASE)
    }

    /// For a release store of `bytes` right after `run`, the log's last range (taken off
    /// it), longer than the staging ring (posted from the window in any case, and waited
    /// for, see [`Mirror::post_write`]), where the provider fills ranges in order: the rest
    /// of the log is posted as a barrier would, then the run's last piece and the word go as
    /// one write from the window, the word as its own, last range (one operation on the
    /// wire instead of two, and no wait for the run before the word is posted). Returns
    /// once the provider has read the run and the word, as `post_write` does for the run.
    /// If a failure was recorded since the error epoch was `before` (the rest of the log,
    /// or the run's earlier pieces, could not be posted), the word is not posted.
    fn post_run_with_release(
        &self,
        st: &mut State,
        before: u64,
        run: std::ops::Range<usize>,
        bytes: &[u8],
        store: impl FnOnce(),
    ) -> Result<()> {
        // The word's place is the run's end.
        let std::ops::Range { start, end } = run;
        self.post_log(st, false);
        self.store_word(st, end, bytes, store);
        self.no_failure_since(st, before)?;
        // Whole pieces before the last one go alone; the last one takes the word along.
        let last = start + (end - start - 1) / self.chunk * self.chunk;
        if last > start {
            let _ = self.post_write(st, start, last, false);
            self.no_failure_since(st, before)?;
        }
        let mut ranges = [(0usize, 0usize); fi::SCATTER_MAX];
        ranges[0] = (last, end - last);
        let piece = StagedRelease { at: last, len: end - last + bytes.len(), ranges, count: 1 };
        self.post_with_release(st, piece, end, bytes)?;
        self.wait_for(st, |f| f.start < end + bytes.len() && start < f.end)
    }

    /// Reserves `n` (at most `staging_len`) bytes of the staging ring and returns their
    /// offset in the buffer, first waiting for writes still posting from them.
    fn stage(&self, st: &mut State, n: usize) -> Result<usize> {
        let mut at = st.staged;
        if at + n > self.staging_len {
            at = 0;
        }
        let (lo, hi) = (self.staging_at + at, self.staging_at + at + n);
        if st.inflight.iter().any(|f| f.start < hi && lo < f.end) {
            self.wait_for(st, |f| f.start < hi && lo < f.end)?;
        }
        st.staged = (at + n).next_multiple_of(8);
        Ok(lo)
    }

    /// Posts `len` bytes at `local_at` of the buffer to window offset `window_at` of the
    /// object, with delivery completion when `deliver`. A failed post is recorded.
    fn post_one(
        &self,
        st: &mut State,
        local_at: usize,
        len: usize,
        window_at: usize,
        deliver: bool,
        what: &'static str,
    ) -> Result<()> {
        let flags = if deliver { fi::FI_DELIVERY_COMPLETE } else { 0 };
        let posted = self.refused_by_test().and_then(|()| self.local(local_at, len)).and_then(|local| {
            let target = self.conn.range.target(self.offset + window_at as u64, len as u64)?;
            let keep: Arc<dyn Any + Send + Sync> = self.mr.clone();
            // SAFETY: local is part of the map's registered buffer (a staging ring piece, a
            // release slot, or a window run of `post_write`), which `keep` (the
            // registration, holding the buffer) keeps alive until the completion is read;
            // none is written by us until this write completed (`stage`, the release slot
            // wait, and `post_write`'s wait for a window run, under the state lock the map's
            // stores take). A refused attempt posted nothing.
            self.conn.post_until(MIRROR_TIMEOUT, |d| unsafe {
                self.conn.endpoint.post_write(local, target, 0, flags, Some(keep.clone()), d)
            })
        });
        self.record_post(st, posted, local_at..local_at + len, deliver, what)
    }

    /// Records a write posted from buffer bytes `from` (in flight; proven when `deliver`) or
    /// its failure to post.
    fn record_post(
        &self,
        st: &mut State,
        posted: Result<Arc<Op>>,
        from: std::ops::Range<usize>,
        deliver: bool,
        what: &'static str,
    ) -> Result<()> {
        match posted {
            Ok(op) => {
                st.inflight.push(InFlight { op, start: from.start, end: from.end, what });
                st.unproven = !deliver;
                Ok(())
            }
            Err(e) => {
                self.failed(st, format!("posting {what}: {e}"));
                Err(e)
            }
        }
    }

    /// Reads `[start, start + len)` of the window from the object and waits for it; the
    /// shadow takes the bytes read too. (Writes post from the staging ring, or from the
    /// window and are waited for by the barrier every read follows, so none reads from the
    /// window bytes the read lands in; read-after-write order makes the read see them.)
    fn read_range(&self, st: &mut State, start: usize, len: usize, what: &str) -> Result<()> {
        let end = start + len;
        let mut at = start;
        while at < end {
            let n = self.chunk.min(end - at);
            let posted = self.local(at, n).and_then(|local| {
                let target = self.conn.range.target(self.offset + at as u64, n as u64)?;
                let keep: Arc<dyn Any + Send + Sync> = self.mr.clone();
                // SAFETY: local is part of the window's registered buffer, kept alive by
                // `keep` until the completion is read; nothing of ours touches these bytes
                // until the read is waited for below (under the lock), and raw-pointer users
                // get copies of racing memory at worst.
                self.conn.post_until(MIRROR_TIMEOUT, |d| unsafe {
                    self.conn.endpoint.post_read(local, target, Some(keep.clone()), d)
                })
            });
            match posted {
                Ok(op) => st.inflight.push(InFlight { op, start: at, end: at + n, what: READ }),
                Err(e) => {
                    self.failed(st, format!("{what}: {e}"));
                    return Err(e);
                }
            }
            at += n;
        }
        self.settle(st, |f| f.what == READ && f.start < end && start < f.end).map_err(|e| match e {
            Error::Ofi { call, code, message } => Error::Ofi { call, code, message: format!("{what}: {message}") },
            e => e,
        })?;
        if let Some(shadow) = st.shadow.as_mut() {
            // The read into the range has completed.
            self.window().copy_to(start, &mut shadow[start..end]).map_err(|e| Error::shared(e, "mirror window"))?;
        }
        Ok(())
    }

    /// Forgets finished operations, recording failures.
    fn reap(&self, st: &mut State) {
        let mut i = 0;
        while i < st.inflight.len() {
            match st.inflight[i].op.outcome() {
                None => i += 1,
                Some(outcome) => {
                    let f = st.inflight.swap_remove(i);
                    if let Err(message) = outcome {
                        self.failed(st, format!("{}: {message}", f.what));
                    }
                }
            }
        }
    }

    /// Waits (driving progress, bounded by [`MIRROR_TIMEOUT`]) until no operation matching
    /// `pending` is in flight. `Err` only on timeout (recorded); failures of the operations
    /// it saw finish are recorded, not returned.
    fn wait_for(&self, st: &mut State, pending: impl Fn(&InFlight) -> bool) -> Result<()> {
        let waited = self
            .conn
            .endpoint
            .wait_until(
                || {
                    self.reap(st);
                    if !st.inflight.iter().any(&pending) {
                        return Some(Ok(()));
                    }
                    // A lost or unreachable peer may never complete them: stop waiting.
                    self.conn.fault().map(Err)
                },
                SPIN,
                fi::deadline_in(MIRROR_TIMEOUT),
                "operations of a map of a remote segment",
            )
            .and_then(|r| r);
        if let Err(e) = waited {
            self.failed(st, e.to_string());
            return Err(e);
        }
        Ok(())
    }

    /// [`Mirror::wait_for`], and `Err` too if one of the operations it saw finish failed.
    fn settle(&self, st: &mut State, pending: impl Fn(&InFlight) -> bool) -> Result<()> {
        let before = self.epoch.load(Ordering::Acquire);
        self.wait_for(st, pending)?;
        self.no_failure_since(st, before)
    }

    /// A flush: barrier, the last write with delivery completion (or, when nothing is left
    /// to post, a proof read), then wait for every operation of this map.
    fn flush(&self) -> Result<()> {
        let mut st = lock(&self.state);
        if let Err(e) = self.check() {
            self.drop_pending(&mut st);
            return Err(e);
        }
        self.reap(&mut st);
        let before = self.epoch.load(Ordering::Acquire);
        self.diff(&mut st);
        self.post_log(&mut st, true);
        if st.unproven {
            self.post_proof(&mut st);
        }
        // The wait's own error first, else any failure since the flush began.
        self.settle(&mut st, |_| true).and_then(|()| self.no_failure_since(&st, before))
    }

    /// Posts a read of (up to) 8 bytes of the window's remote range into the scratch words:
    /// with read-after-write ordering its completion proves the earlier writes delivered.
    fn post_proof(&self, st: &mut State) {
        let n = PROOF.min(self.len);
        let posted = self.local(self.proof_at, n).and_then(|local| {
            let target = self.conn.range.target(self.offset, n as u64)?;
            let keep: Arc<dyn Any + Send + Sync> = self.mr.clone();
            // SAFETY: the scratch words after the window are part of the registered buffer,
            // kept alive by `keep`, and nothing but proof reads uses them.
            self.conn.post_until(MIRROR_TIMEOUT, |d| unsafe {
                self.conn.endpoint.post_read(local, target, Some(keep.clone()), d)
            })
        });
        match posted {
            Ok(op) => {
                st.inflight.push(InFlight { op, start: self.proof_at, end: self.proof_at + n, what: PROOF_READ });
                st.unproven = false;
            }
            Err(e) => self.failed(st, format!("posting the proof read: {e}")),
        }
    }

    /// The service thread's periodic drain: posts what is pending unless the map's user holds
    /// the lock right now (then the user's own barrier will).
    fn drain(&self) {
        let Some(mut st) = try_lock_now(&self.state) else { return };
        if self.check().is_err() {
            self.drop_pending(&mut st);
            return;
        }
        self.reap(&mut st);
        if st.shadow.is_some() || !st.log.is_empty() {
            self.diff(&mut st);
            self.post_log(&mut st, false);
        }
    }
}

/// Why a checked access inside the buffer cannot fail: every range is inside the window
/// (the map checked it) or inside the scratch and staging space laid out after it.
const INSIDE: &str = "a mirror window's ranges lie inside its buffer";

const WRITE: &str = "a write";
const READ: &str = "a read";
const PROOF_READ: &str = "the read proving delivery";
const RELEASE: &str = "a release store";

/// The lock if nobody holds it (a poisoned one too), without waiting.
pub(super) fn try_lock_now<T>(m: &Mutex<T>) -> Option<MutexGuard<'_, T>> {
    match m.try_lock() {
        Ok(g) => Some(g),
        Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Calls `run(start, end)` for every run of bytes where `new` differs from `old` (of the
/// same length), in order.
pub(super) fn changed_runs(new: &[u8], old: &[u8], mut run: impl FnMut(usize, usize)) {
    let mut i = 0;
    while i < new.len() {
        if new[i] == old[i] {
            i += 1;
            continue;
        }
        let from = i;
        while i < new.len() && new[i] != old[i] {
            i += 1;
        }
        run(from, i);
    }
}

/// What a sequence asks of the map it checks: its error epoch, a flush, and whether the
/// connection behind it is lost. Mirror windows and reflective fan-out windows have one.
pub trait SequenceSource: Send + Sync {
    /// Advances on every failed or dropped write or read of the map.
    fn epoch(&self) -> u64;
    /// Posts everything pending and waits (bounded) until it is delivered.
    fn flush(&self) -> Result<()>;
    /// Whether the map can no longer reach its object at all.
    fn lost(&self) -> bool;
}

impl SequenceSource for Mirror {
    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }
    fn flush(&self) -> Result<()> {
        Mirror::flush(self)
    }
    fn lost(&self) -> bool {
        Mirror::lost(self).is_some()
    }
}

/// The mirror-window side of a fabric's `Sequence`: the error epoch at `start`.
pub struct MirrorSequence {
    mirror: Arc<dyn SequenceSource>,
    started: AtomicU64,
}

impl Clone for MirrorSequence {
    fn clone(&self) -> Self {
        MirrorSequence { mirror: self.mirror.clone(), started: AtomicU64::new(self.started.load(Ordering::Acquire)) }
    }
}

impl std::fmt::Debug for MirrorSequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MirrorSequence").field("started", &self.started).finish_non_exhaustive()
    }
}

impl MirrorSequence {
    /// A sequence over `source`, started now.
    pub fn over(source: Arc<dyn SequenceSource>) -> MirrorSequence {
        let started = AtomicU64::new(source.epoch());
        MirrorSequence { mirror: source, started }
    }

    /// Records the map's error epoch.
    pub fn start(&self) -> SequenceStatus {
        self.started.store(self.mirror.epoch(), Ordering::Release);
        self.status(true)
    }

    /// Flushes the map; `Ok` if no write or read failed since `start`, `Retriable` if one
    /// did, `NotRetriable` once the connection is lost.
    pub fn check(&self) -> SequenceStatus {
        let flushed = self.mirror.flush().is_ok();
        let status = self.status(flushed);
        if status == SequenceStatus::Ok && self.mirror.epoch() != self.started.load(Ordering::Acquire) {
            return SequenceStatus::Retriable;
        }
        status
    }

    fn status(&self, ok: bool) -> SequenceStatus {
        match (self.mirror.lost(), ok) {
            (true, _) => SequenceStatus::NotRetriable,
            (false, true) => SequenceStatus::Ok,
            (false, false) => SequenceStatus::Retriable,
        }
    }
}

impl MapSequence for MirrorSequence {
    fn start(&self) -> SequenceStatus {
        MirrorSequence::start(self)
    }

    fn check(&self) -> SequenceStatus {
        MirrorSequence::check(self)
    }
}

/// The sequence of a tracked window of this transport.
pub type TrackedSequence = MirrorSequence;

/// A window of an object on another host that the fabric's maps write through
/// (`Window::Tracked`): a mirror window, or the write map of a reflective group spanning
/// hosts (`reflective::FanoutWindow`).
#[derive(Debug)]
pub enum TrackedWindow {
    Mirror(MirrorWindow),
    Fanout(FanoutWindow),
}

/// Calls `$body` with `$w` bound to whichever window `$t` holds.
macro_rules! each {
    ($t:expr, $w:ident => $body:expr) => {
        match $t {
            TrackedWindow::Mirror($w) => $body,
            TrackedWindow::Fanout($w) => $body,
        }
    };
}

impl TrackedMap for TrackedWindow {
    type Sequence = MirrorSequence;

    #[inline(always)]
    fn slice(&self) -> SharedSlice<'_> {
        each!(self, w => w.slice())
    }

    #[inline(always)]
    fn as_ptr(&self) -> *mut u8 {
        each!(self, w => w.as_ptr())
    }

    #[inline(always)]
    fn len(&self) -> usize {
        each!(self, w => w.len())
    }

    #[inline]
    fn barrier(&self) {
        each!(self, w => w.barrier())
    }

    #[inline]
    fn flush(&self) {
        each!(self, w => w.flush())
    }

    #[inline]
    fn tracked(&self, offset: usize, len: usize, store: impl FnOnce()) -> Result<()> {
        each!(self, w => w.tracked(offset, len, store))
    }

    #[inline]
    fn tracked_ranges(&self, ranges: &[(usize, usize)], store: impl FnOnce() -> usize) -> Result<usize> {
        each!(self, w => w.tracked_ranges(ranges, store))
    }

    #[inline]
    fn release(&self, offset: usize, bytes: &[u8], store: impl FnOnce()) -> Result<()> {
        each!(self, w => w.release(offset, bytes, store))
    }

    #[inline]
    fn read_with<T>(&self, offset: usize, len: usize, load: impl FnOnce() -> T) -> Result<T> {
        each!(self, w => w.read_with(offset, len, load))
    }

    fn flush_checked(&self) -> Result<()> {
        each!(self, w => w.flush_checked())
    }

    fn refresh(&self, offset: usize, len: usize) -> Result<()> {
        each!(self, w => w.refresh(offset, len))
    }

    fn sequence(&self) -> MirrorSequence {
        each!(self, w => w.sequence())
    }
}
