//! The RMA half of the engine: a queue's descriptors whose remote side is an ofi connection
//! become runs (merged as copies are), split into chunks posted as RMA, at most `depth` and
//! `window` bytes in flight per queue, completed in order as their operations complete
//! (docs/ARCHITECTURE.md, "The DMA engine").
//!
//! Failures: a completion error puts the queue in error with the provider's text; a
//! connection found lost fails the queue at once; an operation not complete after `timeout`
//! (or posts refused with `-FI_EAGAIN` that long) fails it too. A failed or aborted queue
//! posts nothing more and drops its waiting descriptors. Its operations in flight on a local
//! segment are abandoned at once: each operation keeps the segment's mapping and its
//! registration alive until its completion is read, whenever that is, even after the queue
//! is gone. Operations on caller memory (`start_memory`) are waited for until they complete or
//! their deadline passes; past it they are abandoned too.
//!
//! Descriptors carry a [`FarWork`]: RMA descriptors own a count of the registration of
//! their local side; a reflective group's carry none. [`Far`] is what a queue keeps for
//! them: its local segments' registrations and the connections its descriptors name.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::endpoint::{Op, ProcessEndpoint};
use super::remote::OfiConn;
use super::rma::{self, LocalReg};
use crate::error::{Error, Result};
use crate::platform::doorbell::Doorbell;
use crate::platform::memory;
use crate::transport::dma::{Descriptor, DmaFar, DmaPipe, FarTag, LocalBytes, QueueShared};
use crate::transport::{Connection, DmaDirection, DmaVec, RemoteObject, RemoteState};

/// What a run does.
enum Work {
    /// A copy (a shm remote queued behind RMA on the same queue).
    Copy { dst: *mut u8, src: *const u8 },
    /// RMA between `local` and `remote_offset` of `conn`'s object.
    Rma { conn: Arc<OfiConn>, reg: Arc<LocalReg>, local: *mut u8, remote_offset: u64, write: bool },
    /// Between `local` and `offset` of the reflective group that the run's `remote` (a
    /// member's connection) belongs to, through the member's fan-out: done at once, the
    /// channel waiting until a write reached every member.
    Group { local: *mut u8, offset: usize, write: bool, group_id: u32 },
    /// Descriptors dropped (aborted or failed queue).
    Dropped,
}

/// One or more merged descriptors, completed together.
struct Run {
    descriptors: u64,
    len: usize,
    /// Bytes posted (or copied); `len` once the run needs no more posts.
    posted: usize,
    /// Its operations in flight.
    ops_left: usize,
    work: Work,
    /// For the loss check of copies.
    remote: *const Connection,
}

struct InFlight {
    op: Arc<Op>,
    /// Its bytes, counted in the pipe's window.
    len: usize,
    /// The run it belongs to.
    seq: u64,
    /// Posted as the pipe's `posted`-th operation.
    order: u64,
    /// Whether its memory is kept alive by the operation itself (so it may be abandoned).
    owned: bool,
    deadline: Instant,
}

/// A queue's RMA in progress, used by its channel thread.
pub struct Pipe {
    depth: usize,
    chunk: usize,
    /// Bytes in flight at most (one operation of any size may always be in flight).
    window: usize,
    /// Bytes of the operations in `inflight`.
    inflight_bytes: usize,
    /// The most bytes ever in flight at once (for tests).
    peak_bytes: usize,
    timeout: Duration,
    /// Runs taken from the ring, in order; `runs[0]` has sequence number `first_seq`.
    runs: VecDeque<Run>,
    first_seq: u64,
    /// Runs before this index need no more posts.
    next_post: usize,
    inflight: Vec<InFlight>,
    /// Since when posts have been refused with `-FI_EAGAIN`.
    stalled_since: Option<Instant>,
    /// Operations posted so far.
    posted: u64,
}

// SAFETY: the raw pointers of runs name memory and connections that the queue keeps
// alive until the run completes (its map and remote caches, or the caller's contract);
// only the channel thread dereferences them, under the queue's mutex.
unsafe impl Send for Pipe {}

impl Default for Pipe {
    fn default() -> Self {
        Pipe {
            depth: rma::default_depth(),
            chunk: rma::default_chunk(),
            window: rma::default_window(),
            inflight_bytes: 0,
            peak_bytes: 0,
            timeout: rma::default_timeout(),
            runs: VecDeque::new(),
            first_seq: 0,
            next_post: 0,
            inflight: Vec::new(),
            stalled_since: None,
            posted: 0,
        }
    }
}

/// The pipe's admission rule: fewer than `depth` operations in flight, and `len` more
/// bytes within `window` unless nothing is in flight (so any size gets through).
fn room(ops: usize, bytes: usize, len: usize, depth: usize, window: usize) -> bool {
    ops < depth && (ops == 0 || bytes + len <= window)
}

/// Records the queue's first failure.
fn fail(q: &QueueShared, reason: String) {
    let mut f = q.failure.lock().unwrap_or_else(|e| e.into_inner());
    if !q.failed.load(Ordering::Acquire) {
        *f = Some(reason);
        q.failed.store(true, Ordering::Release);
    }
}

fn direction(write: bool) -> &'static str {
    if write {
        "write"
    } else {
        "read"
    }
}

fn describe(work: &Work, len: usize, what: &str) -> String {
    match work {
        Work::Rma { conn, remote_offset, write, .. } => {
            let a = conn.info.addr;
            format!(
                "RMA {} of {len} bytes at offset {remote_offset} of remote segment {:#x} on node {}: {what}",
                direction(*write),
                a.id,
                a.node
            )
        }
        Work::Group { offset, write, group_id, .. } => {
            format!(
                "DMA {} of {len} bytes at offset {offset} of reflective group {group_id}: {what}",
                direction(*write)
            )
        }
        _ => what.to_string(),
    }
}

/// Gives back the registration count of a descriptor that will not run.
fn release(d: &Descriptor) {
    if !d.far.rma.is_null() {
        // SAFETY: every RMA descriptor owns one count of its registration
        // (`far_descriptor`), taken back exactly once: here or in `take`.
        drop(unsafe { Arc::from_raw(d.far.rma) });
    }
}

impl Pipe {
    /// Operations in flight at most, and the largest one.
    fn set_limits(&mut self, depth: usize, chunk: usize) {
        self.depth = depth.clamp(1, 1024);
        self.chunk = chunk.max(1);
    }

    /// Bytes in flight at most (at least one operation of any size).
    fn set_window(&mut self, bytes: usize) {
        self.window = bytes.max(1);
    }

    /// The most bytes that were in flight at once.
    #[cfg(any(test, feature = "test-hooks"))]
    fn peak_bytes(&self) -> usize {
        self.peak_bytes
    }

    /// Whether an operation of `len` bytes may be posted now: fewer than `depth` in
    /// flight, and `len` more bytes within the window (or nothing in flight).
    fn has_room(&self, len: usize) -> bool {
        room(self.inflight.len(), self.inflight_bytes, len, self.depth, self.window)
    }

    /// The size of the next operation to post, if its run is taken already.
    fn next_len(&self) -> Option<usize> {
        self.runs.get(self.next_post).map(|r| self.chunk.min(r.len - r.posted))
    }

    /// Stops tracking `inflight[i]`; returns it.
    fn untrack(&mut self, i: usize) -> InFlight {
        let f = self.inflight.swap_remove(i);
        self.inflight_bytes -= f.len;
        self.run_mut(f.seq).ops_left -= 1;
        f
    }

    /// How long an operation (or refused posts) may take before the queue fails.
    fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout.max(Duration::from_millis(1));
    }

    /// Whether it holds work (then the queue's descriptors go through it).
    fn is_active(&self) -> bool {
        !self.runs.is_empty() || !self.inflight.is_empty()
    }

    fn run_mut(&mut self, seq: u64) -> &mut Run {
        &mut self.runs[(seq - self.first_seq) as usize]
    }

    /// One pass: reaps completions, checks liveness and deadlines, posts up to the depth
    /// (or drops everything after a failure or an abort), completes the finished prefix.
    /// Returns how much it did (0: nothing).
    fn service(&mut self, q: &QueueShared, buf: &mut [Descriptor]) -> usize {
        let mut did = 0;
        if !self.inflight.is_empty() {
            if let Some(ep) = self.endpoint() {
                ep.progress();
            }
            did += self.reap(q);
            self.check_deadlines(q);
        }
        self.check_lost(q);
        if q.aborted.load(Ordering::Acquire) || q.failed.load(Ordering::Acquire) {
            did += self.abandon_owned();
            did += self.drain(q, buf);
        } else {
            did += self.post(q, buf);
        }
        did + self.complete(q)
    }

    /// The endpoint of the first run with operations in flight.
    fn endpoint(&self) -> Option<&Arc<ProcessEndpoint>> {
        self.runs.iter().find_map(|r| match &r.work {
            Work::Rma { conn, .. } if r.ops_left > 0 => Some(&conn.endpoint),
            _ => None,
        })
    }

    /// Finishes the operations whose completion was read; returns how many. Of several
    /// failures read together, the earliest posted is reported (later ones are often
    /// consequences of it, such as a connection the provider dropped).
    fn reap(&mut self, q: &QueueShared) -> usize {
        let mut n = 0;
        let mut i = 0;
        let mut first_error: Option<(u64, String)> = None;
        while i < self.inflight.len() {
            let Some(outcome) = self.inflight[i].op.outcome() else {
                i += 1;
                continue;
            };
            let f = self.untrack(i);
            let run = self.run_mut(f.seq);
            if let Err(message) = outcome {
                if first_error.as_ref().is_none_or(|(order, _)| f.order < *order) {
                    first_error = Some((f.order, describe(&run.work, run.len, &message)));
                }
            }
            n += 1;
        }
        if let Some((_, reason)) = first_error {
            fail(q, reason);
        }
        n
    }

    /// Fails the queue for operations past their deadline, and stops tracking them.
    fn check_deadlines(&mut self, q: &QueueShared) {
        let now = Instant::now();
        let timeout = self.timeout;
        let mut i = 0;
        while i < self.inflight.len() {
            if self.inflight[i].deadline > now {
                i += 1;
                continue;
            }
            let f = self.untrack(i);
            let run = self.run_mut(f.seq);
            let reason = describe(&run.work, run.len, &format!("not complete after {} ms", timeout.as_millis()));
            fail(q, reason);
        }
    }

    /// Fails the queue if a connection it has work for is lost or its host does not
    /// respond.
    fn check_lost(&self, q: &QueueShared) {
        if q.failed.load(Ordering::Acquire) {
            return;
        }
        let mut last: *const OfiConn = std::ptr::null();
        for r in &self.runs {
            if let Work::Rma { conn, .. } = &r.work {
                if Arc::as_ptr(conn) != last {
                    last = Arc::as_ptr(conn);
                    if let Some(e) = conn.fault() {
                        fail(q, e.to_string());
                        return;
                    }
                }
            }
        }
    }

    /// Stops tracking the operations that keep their memory alive themselves.
    fn abandon_owned(&mut self) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < self.inflight.len() {
            if !self.inflight[i].owned {
                i += 1;
                continue;
            }
            self.untrack(i);
            n += 1;
        }
        n
    }

    /// After a failure or an abort: nothing more is posted, descriptors still in the ring
    /// are dropped (in order, behind the runs in flight).
    fn drain(&mut self, q: &QueueShared, buf: &mut [Descriptor]) -> usize {
        for r in self.runs.iter_mut().skip(self.next_post) {
            r.posted = r.len;
        }
        self.stalled_since = None;
        let mut dropped = 0;
        loop {
            let n = q.ring.peek(buf);
            if n == 0 {
                break;
            }
            buf[..n].iter().for_each(release);
            q.ring.consume(n);
            self.runs.push_back(Run {
                descriptors: n as u64,
                len: 0,
                posted: 0,
                ops_left: 0,
                work: Work::Dropped,
                remote: std::ptr::null(),
            });
            dropped += n;
        }
        self.next_post = self.runs.len();
        dropped
    }

    /// Takes up to a batch of descriptors from the ring as runs; false if it was empty.
    fn take(&mut self, q: &QueueShared, buf: &mut [Descriptor]) -> bool {
        let max = q.batch.load(Ordering::Relaxed).clamp(1, buf.len());
        let n = q.ring.peek(&mut buf[..max]);
        if n == 0 {
            return false;
        }
        let merge = q.merge.load(Ordering::Relaxed);
        let mut i = 0;
        while i < n {
            let d = buf[i];
            let mut len = d.len;
            let mut j = i + 1;
            if merge {
                while j < n
                    && buf[j].remote == d.remote
                    && buf[j].far == d.far
                    && buf[j].src as usize == d.src as usize + len
                    && buf[j].dst as usize == d.dst as usize + len
                {
                    len += buf[j].len;
                    j += 1;
                }
            }
            // RMA and group descriptors: the local address, and the far side's offset.
            let FarWork { rma, write, group } = d.far;
            let (local, offset) = if write { (d.src.cast_mut(), d.dst.addr()) } else { (d.dst, d.src.addr()) };
            let work = if group {
                // SAFETY: the queue keeps the remote connection alive (remote cache).
                let group_id = unsafe { (*d.remote).remote.info().addr.id };
                Work::Group { local, offset, write, group_id }
            } else if rma.is_null() {
                Work::Copy { dst: d.dst, src: d.src }
            } else {
                buf[i + 1..j].iter().for_each(release);
                // SAFETY: as in `release`: the count this descriptor owns.
                let reg = unsafe { Arc::from_raw(rma) };
                // SAFETY: the queue keeps the remote connection alive until its
                // descriptors complete (its remote cache).
                let handle = unsafe { &(*d.remote).remote };
                let conn = rma::ofi_conn(handle).expect("RMA descriptors name ofi connections").clone();
                Work::Rma { conn, reg, local, remote_offset: offset as u64, write }
            };
            self.runs.push_back(Run {
                descriptors: (j - i) as u64,
                len,
                posted: 0,
                ops_left: 0,
                work,
                remote: d.remote,
            });
            i = j;
        }
        q.ring.consume(n);
        true
    }

    /// Posts (or copies) runs in order while the depth and the window allow.
    fn post(&mut self, q: &QueueShared, buf: &mut [Descriptor]) -> usize {
        let mut did = 0;
        loop {
            if self.next_post == self.runs.len() && !self.take(q, buf) {
                return did;
            }
            let seq = self.first_seq + self.next_post as u64;
            let (depth, chunk, window, timeout) = (self.depth, self.chunk, self.window, self.timeout);
            let run = &mut self.runs[self.next_post];
            match &run.work {
                Work::Dropped => {}
                Work::Copy { dst, src } => {
                    // SAFETY: the queue keeps the remote connection alive (map cache).
                    if let RemoteState::Lost(r) = unsafe { (*run.remote).state() } {
                        fail(q, format!("the remote segment was lost: {}", r.describe()));
                        return did;
                    }
                    // SAFETY: as for the engine's copies: ranges checked when queued, in
                    // live and distinct mappings.
                    unsafe { memory::copy_shared_to_shared(*dst, *src, run.len, memory::DMA_NONTEMPORAL_THRESHOLD) };
                    run.posted = run.len;
                    did += 1;
                }
                Work::Group { local, offset, write, .. } => {
                    // SAFETY: the queue keeps the member's connection alive, and with it
                    // its fan-out (remote cache).
                    let remote = unsafe { &*run.remote };
                    let done = match (remote.state(), remote.group.get()) {
                        (RemoteState::Lost(r), _) => Err(format!("the group was lost: {}", r.describe())),
                        (_, None) => Err("the connection is no group member's".to_string()),
                        // SAFETY: the group range was checked against the group and the
                        // local one against its segment (or vouched for by the caller of
                        // a user-memory transfer) when queued; that memory lives until
                        // the run completes.
                        (_, Some(fan)) => unsafe {
                            if *write {
                                fan.dma_write(*offset, local.cast_const(), run.len)
                            } else {
                                fan.dma_read(*offset, *local, run.len)
                            }
                        }
                        .map_err(|e| e.to_string()),
                    };
                    if let Err(e) = done {
                        fail(q, describe(&run.work, run.len, &e));
                        return did;
                    }
                    run.posted = run.len;
                    // Done, and it may have taken long (a flush): complete it now, and
                    // let an abort, other queues and the next pass have their turn
                    // before another one runs.
                    self.next_post += 1;
                    return did + 1;
                }
                Work::Rma { conn, reg, local, remote_offset, write } => {
                    while run.posted < run.len {
                        let len = chunk.min(run.len - run.posted);
                        // `has_room`, which `run`'s borrow of the runs rules out here.
                        if !room(self.inflight.len(), self.inflight_bytes, len, depth, window) {
                            break;
                        }
                        // SAFETY: `posted + len <= len` of the run, whose local range
                        // was checked inside its registration when queued (and `post`
                        // checks this piece of it again); the registration (and a
                        // segment's mapping) is kept by the op.
                        let posted = unsafe {
                            rma::post(conn, reg, *local, run.posted, remote_offset + run.posted as u64, len, *write)
                        };
                        match posted {
                            Ok(op) => {
                                let deadline = Instant::now() + timeout;
                                let order = self.posted;
                                self.posted += 1;
                                self.inflight.push(InFlight { op, len, seq, order, owned: reg.owned(), deadline });
                                self.inflight_bytes += len;
                                self.peak_bytes = self.peak_bytes.max(self.inflight_bytes);
                                run.posted += len;
                                run.ops_left += 1;
                                self.stalled_since = None;
                                did += 1;
                            }
                            Err(Error::Timeout { .. }) => {
                                // -FI_EAGAIN for a whole slice: see to the rest, retry later.
                                let since = *self.stalled_since.get_or_insert_with(Instant::now);
                                if since.elapsed() >= timeout {
                                    let what = format!("posts refused for {} ms", timeout.as_millis());
                                    fail(q, describe(&run.work, run.len, &what));
                                }
                                return did;
                            }
                            Err(e) => {
                                fail(q, describe(&run.work, run.len, &e.to_string()));
                                return did;
                            }
                        }
                    }
                    if run.posted < run.len {
                        return did; // as deep (or as many bytes) as allowed
                    }
                }
            }
            self.next_post += 1;
        }
    }

    /// Completes the runs at the front that are done; returns how many descriptors.
    fn complete(&mut self, q: &QueueShared) -> usize {
        let mut n = 0;
        while self.next_post > 0 && self.runs.front().is_some_and(|r| r.ops_left == 0) {
            // Dropping the run lets go of its registration and connection before the
            // queue's user learns that it completed.
            n += self.runs.pop_front().map_or(0, |r| r.descriptors);
            self.next_post -= 1;
            self.first_seq += 1;
        }
        if n > 0 {
            q.completed.fetch_add(n, Ordering::SeqCst);
            q.bell().ring();
            q.run_callbacks();
        }
        n as usize
    }
}

/// The channel's wait while queues have RMA in flight and its last pass did nothing:
/// until an operation finishes, a connection is lost, a queue can post again or is
/// aborted with something to drop, or `changed` (new queues, new work elsewhere).
fn channel_wait(queues: &[Arc<QueueShared>], idle_for: Duration, bell: &Doorbell, mut changed: impl FnMut() -> bool) {
    let mut ops: Vec<Arc<Op>> = Vec::new();
    let mut conns: Vec<Arc<OfiConn>> = Vec::new();
    let mut watched: Vec<&Arc<QueueShared>> = Vec::new();
    let mut endpoint: Option<Arc<ProcessEndpoint>> = None;
    for q in queues.iter().filter(|q| q.pipe_active.load(Ordering::Relaxed)) {
        let p = q.pipe.lock().unwrap_or_else(|e| e.into_inner());
        let stopping = q.aborted.load(Ordering::Acquire) || q.failed.load(Ordering::Acquire);
        let unposted = p.next_post < p.runs.len() || !q.ring.is_empty();
        if stopping {
            if unposted || p.inflight.iter().any(|f| f.owned) {
                return; // something to drop: a pass does it
            }
        } else {
            // A run not taken yet may be small: look (a pass finds out).
            if unposted && p.has_room(p.next_len().unwrap_or(1)) {
                return; // room to post
            }
            for r in &p.runs {
                if let Work::Rma { conn, .. } = &r.work {
                    if !conns.iter().any(|c| Arc::ptr_eq(c, conn)) {
                        conns.push(conn.clone());
                    }
                }
            }
            watched.push(q);
        }
        ops.extend(p.inflight.iter().map(|f| f.op.clone()));
        if endpoint.is_none() {
            endpoint = p.endpoint().cloned();
        }
    }
    let ready = || {
        ops.iter().any(|o| o.outcome().is_some())
            || conns.iter().any(|c| c.fault().is_some())
            || watched.iter().any(|q| q.aborted.load(Ordering::Relaxed))
            || changed()
    };
    rma::channel_wait(endpoint.as_deref(), idle_for, bell, ready);
}

impl DmaPipe for Pipe {
    const IN_USE: bool = true;

    fn service(&mut self, q: &QueueShared, buf: &mut [Descriptor]) -> usize {
        Pipe::service(self, q, buf)
    }

    fn is_active(&self) -> bool {
        Pipe::is_active(self)
    }

    fn set_limits(&mut self, depth: usize, chunk: usize) {
        Pipe::set_limits(self, depth, chunk)
    }

    fn set_window(&mut self, bytes: usize) {
        Pipe::set_window(self, bytes)
    }

    fn set_timeout(&mut self, timeout: Duration) {
        Pipe::set_timeout(self, timeout)
    }

    #[cfg(any(test, feature = "test-hooks"))]
    fn peak_bytes(&self) -> usize {
        Pipe::peak_bytes(self)
    }

    fn channel_wait(queues: &[Arc<QueueShared>], idle_for: Duration, bell: &Doorbell, changed: impl FnMut() -> bool) {
        channel_wait(queues, idle_for, bell, changed)
    }
}

/// What a descriptor asks of the ofi transport beyond a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FarWork {
    /// RMA (ofi remote): the local side's registration, one strong count of it owned by the
    /// descriptor; then `src` (write) or `dst` (read) is local memory and the other is the
    /// offset in the remote segment. Null for a copy.
    rma: *const LocalReg,
    /// RMA or group: local to remote.
    write: bool,
    /// DMA to or from a reflective group spanning hosts, through the fan-out of the
    /// descriptor's `remote` (a member's connection): `src` (write) or `dst` (read) is local
    /// memory and the other is the offset in the group. `rma` is null.
    group: bool,
}

impl FarTag for FarWork {
    const COPY: FarWork = FarWork { rma: std::ptr::null(), write: false, group: false };

    #[inline(always)]
    fn is_copy(&self) -> bool {
        self.rma.is_null() && !self.group
    }
}

/// A descriptor for `len` bytes between `local` and `offset` on the far side of `remote`.
/// The offset is kept in an address field, so that contiguous descriptors merge as copies
/// do, and never dereferenced. With `reg` (the registration `local` lies in) it is RMA into
/// the remote segment and owns one count of `reg`, which the channel takes back; without,
/// `remote` is a member's connection to a reflective group spanning hosts and `offset` lies
/// in the group.
fn far_descriptor(
    local: *mut u8,
    offset: u64,
    len: u64,
    direction: DmaDirection,
    remote: *const Connection,
    reg: Option<&Arc<LocalReg>>,
) -> Descriptor {
    let far = std::ptr::without_provenance_mut::<u8>(offset as usize);
    let write = direction == DmaDirection::Write;
    let (dst, src) = if write { (far, local.cast_const()) } else { (local, far.cast_const()) };
    let rma = reg.map_or(std::ptr::null(), |r| Arc::into_raw(Arc::clone(r)));
    Descriptor { dst, src, len: len as usize, remote, far: FarWork { rma, write, group: reg.is_none() } }
}

/// What a DMA queue keeps for its RMA and group transfers.
#[derive(Default)]
pub struct Far {
    /// Local segments registered for RMA, keyed by (segment, endpoint), kept while the queue
    /// lives (operations in flight keep their own reference).
    regs: HashMap<(usize, usize), Arc<LocalReg>>,
    /// Remote segments reached by RMA or a fan-out (which have no map to keep them alive),
    /// keyed by their connection.
    remotes: HashMap<usize, Arc<dyn Any + Send + Sync>>,
}

impl Far {
    /// `seg`'s whole mapping registered on `endpoint` for RMA, once per queue.
    fn local_reg(&mut self, seg: LocalBytes<'_>, endpoint: &ProcessEndpoint) -> Result<Arc<LocalReg>> {
        let key = (seg.key, endpoint as *const _ as usize);
        if let Some(r) = self.regs.get(&key) {
            return Ok(r.clone());
        }
        let owner = (seg.owner)();
        // SAFETY: the mapping covers the whole segment, read-write, and the registration owns
        // a reference that keeps it alive.
        let reg = unsafe { LocalReg::new(endpoint, seg.bytes.as_ptr(), seg.bytes.len(), Some(owner))? };
        self.regs.insert(key, reg.clone());
        Ok(reg)
    }

    /// Keeps `remote`'s connection alive while the queue lives (its descriptors name it),
    /// by the reference `keep` gives.
    fn keep_remote(&mut self, remote: &Connection, keep: impl FnOnce() -> Arc<dyn Any + Send + Sync>) {
        self.remotes.entry(std::ptr::from_ref(remote) as usize).or_insert_with(keep);
    }
}

impl DmaFar for Far {
    #[inline]
    fn reaches(remote: &Connection) -> bool {
        rma::ofi_conn(&remote.remote).is_some()
    }

    fn reach(remote: &Connection) -> Option<(u64, &'static str)> {
        remote.group.get().map(|fan| (fan.size() as u64, "reflective group"))
    }

    fn segment_descriptors(
        &mut self,
        local: LocalBytes<'_>,
        remote: &Connection,
        keep: impl FnOnce() -> Arc<dyn Any + Send + Sync>,
        vec: &[DmaVec],
        direction: DmaDirection,
        out: &mut Vec<Descriptor>,
    ) -> Option<Result<()>> {
        let conn = rma::ofi_conn(&remote.remote)?;
        let group = remote.group.get().is_some();
        let reg = if group {
            None
        } else {
            match self.local_reg(local, &conn.endpoint) {
                Ok(r) => Some(r),
                Err(e) => return Some(Err(e)),
            }
        };
        self.keep_remote(remote, keep);
        for v in vec {
            // The offset was checked against the segment, which the mapping covers: checked
            // again here, as the descriptor's address is the transfer's bounds from now on.
            let l = match local.bytes.subslice(v.local_offset as usize, v.size as usize) {
                Ok(l) => l.as_ptr(),
                Err(e) => return Some(Err(Error::shared(e, "local segment"))),
            };
            out.push(far_descriptor(l, v.remote_offset, v.size, direction, remote, reg.as_ref()));
        }
        Some(Ok(()))
    }

    unsafe fn memory_descriptor(
        &mut self,
        addr: *mut u8,
        remote: &Connection,
        keep: impl FnOnce() -> Arc<dyn Any + Send + Sync>,
        size: u64,
        remote_offset: u64,
        direction: DmaDirection,
    ) -> Option<Result<Descriptor>> {
        if remote.group.get().is_some() {
            self.keep_remote(remote, keep);
            return Some(Ok(far_descriptor(addr, remote_offset, size, direction, remote, None)));
        }
        let conn = rma::ofi_conn(&remote.remote)?;
        // SAFETY: the caller vouches for addr..addr + size until the transfer completes;
        // the registration lives until then too (the descriptor, then its operations).
        let reg = match unsafe { LocalReg::new(&conn.endpoint, addr, size as usize, None) } {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        self.keep_remote(remote, keep);
        Some(Ok(far_descriptor(addr, remote_offset, size, direction, remote, Some(&reg))))
    }
}
