//! The DMA engine: channels are library threads that copy between segments while the
//! submitting thread goes on, as a PCIe DMA engine does.
//!
//! A queue hands descriptors to its channel through a lock-free single-producer ring. Each
//! pass of a channel takes up to `batch` descriptors of a queue at once (descriptor
//! prefetch), merges those that continue each other in both source and destination into one
//! copy, checks the remote segment is still alive, copies with the fastest copy for the size
//! (non-temporal stores for large ones), and publishes the whole pass with one completion
//! update. An idle channel spins for its poll time, then sleeps on its doorbell; submitters
//! ring it, which costs a system call only when it sleeps.
//!
//! With the ofi transport (feature `ofi`), descriptors whose remote segment is an ofi
//! connection carry the registration of their local side; the first one a pass meets hands
//! the queue to its RMA pipe (`rma_pipe`), which posts RMA instead of copying and completes
//! descriptors as their operations complete. Until the pipe is empty again, every
//! descriptor of that queue goes through it, so completions stay in order. The copy path
//! pays one null test per merged run for this. Descriptors to or from a reflective group
//! spanning hosts go through the pipe too, done at once by the channel: a write goes into
//! the member's copy, and the channel waits while the member's fan-out posts it to every
//! other copy (`Fanout::dma_write`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::remote::{RemoteInner, RemoteState};
use crate::platform::doorbell::Doorbell;
use crate::platform::memory;
use crate::platform::spsc::{CachePadded, SpscRing};
#[cfg(feature = "ofi")]
use crate::transport::ofi::rma::LocalReg;

/// Channels a process may have.
pub const MAX_CHANNELS: usize = 16;
/// Descriptors a channel takes from a queue in one pass, at most.
pub const MAX_BATCH: usize = 256;
/// How long an idle channel spins before it sleeps.
const CHANNEL_POLL: Duration = Duration::from_micros(50);

/// One copy for the engine.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Descriptor {
    pub dst: *mut u8,
    pub src: *const u8,
    pub len: usize,
    /// The remote segment this copy touches (kept alive by the queue's map cache), checked
    /// before copying; null for none.
    pub remote: *const RemoteInner,
    /// RMA (ofi remote): the local side's registration, one strong count of it owned by the
    /// descriptor; then `src` (write) or `dst` (read) is local memory and the other is the
    /// offset in the remote segment. Null for a copy.
    #[cfg(feature = "ofi")]
    pub rma: *const LocalReg,
    /// RMA or group: local to remote.
    #[cfg(feature = "ofi")]
    pub write: bool,
    /// DMA to or from a reflective group spanning hosts, through the fan-out of `remote`
    /// (a member's connection): `src` (write) or `dst` (read) is local memory and the other
    /// is the offset in the group. `rma` is null.
    #[cfg(feature = "ofi")]
    pub group: bool,
}

// SAFETY: a descriptor is addresses; the queue guarantees they stay valid until the engine
// reports the descriptor complete (its map cache and the caller's contracts).
unsafe impl Send for Descriptor {}
// SAFETY: a shared descriptor only lets others read the addresses it carries; it never
// dereferences them.
unsafe impl Sync for Descriptor {}

impl Descriptor {
    /// A copy of `len` bytes from `src` to `dst`, touching `remote` (null for none).
    #[inline]
    pub fn copy(dst: *mut u8, src: *const u8, len: usize, remote: *const RemoteInner) -> Descriptor {
        Descriptor {
            dst,
            src,
            len,
            remote,
            #[cfg(feature = "ofi")]
            rma: std::ptr::null(),
            #[cfg(feature = "ofi")]
            write: false,
            #[cfg(feature = "ofi")]
            group: false,
        }
    }
}

impl Default for Descriptor {
    fn default() -> Self {
        Descriptor::copy(std::ptr::null_mut(), std::ptr::null(), 0, std::ptr::null())
    }
}

/// A queue's final state after its outstanding descriptors drained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Done,
    Error,
    Aborted,
}

type Completion = Box<dyn FnOnce(Outcome) + Send>;

/// What a queue shares with its channel.
pub(crate) struct QueueShared {
    pub ring: SpscRing<Descriptor>,
    /// Descriptors finished (copied, failed or aborted).
    pub completed: CachePadded<AtomicU64>,
    /// Completion doorbell words (process-local memory).
    bell_words: CachePadded<[AtomicU32; 2]>,
    pub failed: AtomicBool,
    pub aborted: AtomicBool,
    pub failure: Mutex<Option<String>>,
    /// Descriptors per pass (1: the naive engine).
    pub batch: AtomicUsize,
    /// Merge contiguous descriptors into one copy.
    pub merge: AtomicBool,
    /// (completed count that fires it, callback), in order.
    callbacks: Mutex<VecDeque<(u64, Completion)>>,
    has_callbacks: AtomicBool,
    /// RMA in progress (taken by the channel thread; by the queue only to set limits).
    #[cfg(feature = "ofi")]
    pub rma: Mutex<rma_pipe::RmaPipe>,
    /// Whether the pipe holds work: then every descriptor goes through it.
    #[cfg(feature = "ofi")]
    pub rma_active: AtomicBool,
}

impl QueueShared {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(QueueShared {
            ring: SpscRing::new(capacity),
            completed: CachePadded(AtomicU64::new(0)),
            bell_words: CachePadded([AtomicU32::new(0), AtomicU32::new(0)]),
            failed: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            failure: Mutex::new(None),
            batch: AtomicUsize::new(MAX_BATCH),
            merge: AtomicBool::new(true),
            callbacks: Mutex::new(VecDeque::new()),
            has_callbacks: AtomicBool::new(false),
            #[cfg(feature = "ofi")]
            rma: Mutex::new(rma_pipe::RmaPipe::default()),
            #[cfg(feature = "ofi")]
            rma_active: AtomicBool::new(false),
        })
    }

    /// Rung when descriptors complete.
    pub fn bell(&self) -> Doorbell {
        // SAFETY: the words live in this Arc'd struct; every doorbell made here is used only
        // while a strong reference is held (by the queue or the channel).
        unsafe { Doorbell::new(self.bell_words[0].as_ptr(), self.bell_words[1].as_ptr()) }
    }

    /// Registers `cb` to run when `completed` reaches `at`.
    pub fn on_completed(&self, at: u64, cb: Completion) {
        self.callbacks.lock().unwrap_or_else(|e| e.into_inner()).push_back((at, cb));
        self.has_callbacks.store(true, Ordering::Release);
        // The engine may have passed `at` already: fire now if so.
        self.run_callbacks();
    }

    pub fn outcome(&self) -> Outcome {
        if self.aborted.load(Ordering::Acquire) {
            Outcome::Aborted
        } else if self.failed.load(Ordering::Acquire) {
            Outcome::Error
        } else {
            Outcome::Done
        }
    }

    pub(crate) fn run_callbacks(&self) {
        if !self.has_callbacks.load(Ordering::Acquire) {
            return;
        }
        let done = self.completed.load(Ordering::Acquire);
        let mut ready = Vec::new();
        {
            let mut cbs = self.callbacks.lock().unwrap_or_else(|e| e.into_inner());
            while cbs.front().is_some_and(|(at, _)| *at <= done) {
                ready.extend(cbs.pop_front().map(|(_, cb)| cb));
            }
            if cbs.is_empty() {
                self.has_callbacks.store(false, Ordering::Release);
            }
        }
        let outcome = self.outcome();
        for cb in ready {
            // A panicking callback must not kill the channel thread.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(outcome)));
        }
    }

    /// One pass over this queue; returns how many descriptors it finished.
    fn service(&self, buf: &mut [Descriptor]) -> usize {
        #[cfg(feature = "ofi")]
        if self.rma_active.load(Ordering::Relaxed) {
            return self.service_rma(buf);
        }
        let max = self.batch.load(Ordering::Relaxed).clamp(1, buf.len());
        let n = self.ring.peek(&mut buf[..max]);
        if n == 0 {
            return 0;
        }
        let merge = self.merge.load(Ordering::Relaxed);
        let mut i = 0;
        while i < n {
            let d = buf[i];
            #[cfg(feature = "ofi")]
            if !d.rma.is_null() || d.group {
                // RMA (or a group's fan-out) from here on: finish the copies before it, then
                // hand over.
                self.ring.consume(i);
                if i > 0 {
                    self.completed.fetch_add(i as u64, Ordering::SeqCst);
                    self.bell().ring();
                    self.run_callbacks();
                }
                self.rma_active.store(true, Ordering::Relaxed);
                return i + self.service_rma(buf);
            }
            let mut len = d.len;
            let mut j = i + 1;
            if merge {
                while j < n
                    && buf[j].remote == d.remote
                    && buf[j].src as usize == d.src as usize + len
                    && buf[j].dst as usize == d.dst as usize + len
                {
                    len += buf[j].len;
                    j += 1;
                }
            }
            i = j;
            if self.aborted.load(Ordering::Acquire) || self.failed.load(Ordering::Acquire) {
                continue; // drained without copying
            }
            if !d.remote.is_null() {
                // SAFETY: the queue keeps the remote connection alive until its descriptors
                // complete (map cache); reading its state is two atomic loads.
                if let RemoteState::Lost(r) = unsafe { (*d.remote).state() } {
                    *self.failure.lock().unwrap_or_else(|e| e.into_inner()) =
                        Some(format!("the remote segment was lost: {}", r.describe()));
                    self.failed.store(true, Ordering::Release);
                    continue;
                }
            }
            // SAFETY: both ranges were bounds-checked against their segments (or vouched for
            // by the caller of a user-memory transfer) when queued, and the mappings stay alive
            // until completion; local and remote ranges never overlap (different mappings or
            // the caller's private memory).
            unsafe { memory::copy_shared_to_shared(d.dst, d.src, len, memory::DMA_NONTEMPORAL_THRESHOLD) };
        }
        self.ring.consume(n);
        self.completed.fetch_add(n as u64, Ordering::SeqCst);
        self.bell().ring();
        self.run_callbacks();
        n
    }

    /// One pass of the RMA pipe.
    #[cfg(feature = "ofi")]
    fn service_rma(&self, buf: &mut [Descriptor]) -> usize {
        let mut pipe = self.rma.lock().unwrap_or_else(|e| e.into_inner());
        let did = pipe.service(self, buf);
        self.rma_active.store(pipe.is_active(), Ordering::Relaxed);
        did
    }
}

/// One engine thread and the queues assigned to it.
pub(crate) struct Channel {
    pub id: usize,
    queues: Mutex<Vec<Arc<QueueShared>>>,
    generation: AtomicU64,
    bell_words: CachePadded<[AtomicU32; 2]>,
}

impl Channel {
    /// Rung by submitters.
    pub fn bell(&self) -> Doorbell {
        // SAFETY: channels live for the whole process (the engine never drops them).
        unsafe { Doorbell::new(self.bell_words[0].as_ptr(), self.bell_words[1].as_ptr()) }
    }

    pub fn attach(&self, q: &Arc<QueueShared>) {
        self.queues.lock().unwrap_or_else(|e| e.into_inner()).push(q.clone());
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.bell().ring();
    }

    pub fn detach(&self, q: &Arc<QueueShared>) {
        self.queues.lock().unwrap_or_else(|e| e.into_inner()).retain(|x| !Arc::ptr_eq(x, q));
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.bell().ring();
    }

    /// Queues assigned now.
    pub fn load(&self) -> usize {
        self.queues.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn run(self: Arc<Self>) {
        let mut snapshot: Vec<Arc<QueueShared>> = Vec::new();
        let mut seen_gen = u64::MAX;
        let mut buf = vec![Descriptor::default(); MAX_BATCH];
        #[cfg(feature = "ofi")]
        let mut last_work = std::time::Instant::now();
        loop {
            let g = self.generation.load(Ordering::Acquire);
            if g != seen_gen {
                snapshot = self.queues.lock().unwrap_or_else(|e| e.into_inner()).clone();
                seen_gen = g;
            }
            let mut did = 0;
            for q in &snapshot {
                did += q.service(&mut buf);
            }
            #[cfg(feature = "ofi")]
            if did > 0 {
                last_work = std::time::Instant::now();
            }
            if did == 0 {
                #[cfg(feature = "ofi")]
                if snapshot.iter().any(|q| q.rma_active.load(Ordering::Relaxed)) {
                    let changed = || {
                        self.generation.load(Ordering::Acquire) != seen_gen
                            || snapshot.iter().any(|q| !q.rma_active.load(Ordering::Relaxed) && !q.ring.is_empty())
                    };
                    rma_pipe::channel_wait(&snapshot, last_work.elapsed(), &self.bell(), changed);
                    continue;
                }
                let busy = || {
                    (self.generation.load(Ordering::Acquire) != seen_gen || snapshot.iter().any(|q| !q.ring.is_empty()))
                        .then_some(())
                };
                // Idle: poll for a while, yielding so that a thread sharing this CPU (often
                // the submitter waiting for completion, on a pinned or small machine) runs
                // at once; then sleep until a submitter rings.
                let until = std::time::Instant::now() + CHANNEL_POLL;
                while busy().is_none() && std::time::Instant::now() < until {
                    std::thread::yield_now();
                }
                let _ = self.bell().wait(busy, || None::<()>, Duration::ZERO, None);
            }
        }
    }
}

/// The process's DMA channels, started on demand.
pub(crate) struct Engine {
    channels: Mutex<Vec<Arc<Channel>>>,
}

static ENGINE: OnceLock<Engine> = OnceLock::new();

/// Default number of channels: `LANES_DMA_CHANNELS`, else 1.
fn default_channels() -> usize {
    std::env::var("LANES_DMA_CHANNELS").ok().and_then(|v| v.parse().ok()).unwrap_or(1).clamp(1, MAX_CHANNELS)
}

pub(crate) fn engine() -> &'static Engine {
    ENGINE.get_or_init(|| Engine { channels: Mutex::new(Vec::new()) })
}

impl Engine {
    /// Channel `id`, starting channels up to it. `None`: the least loaded of the default set.
    pub fn channel(&self, id: Option<usize>) -> std::io::Result<Arc<Channel>> {
        let mut chans = self.channels.lock().unwrap_or_else(|e| e.into_inner());
        let want = match id {
            Some(i) if i >= MAX_CHANNELS => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("DMA channel {i}: at most {MAX_CHANNELS} channels"),
                ))
            }
            Some(i) => i + 1,
            None => default_channels().max(chans.len().min(default_channels())),
        };
        while chans.len() < want {
            let ch = Arc::new(Channel {
                id: chans.len(),
                queues: Mutex::new(Vec::new()),
                generation: AtomicU64::new(0),
                bell_words: CachePadded([AtomicU32::new(0), AtomicU32::new(0)]),
            });
            let runner = ch.clone();
            std::thread::Builder::new().name(format!("lanes-dma-{}", ch.id)).spawn(move || runner.run())?;
            chans.push(ch);
        }
        Ok(match id {
            Some(i) => chans[i].clone(),
            None => chans[..want].iter().min_by_key(|c| c.load()).expect("at least one channel").clone(),
        })
    }
}

/// The RMA half of the engine: a queue's descriptors whose remote side is an ofi connection
/// become runs (merged as copies are), split into chunks posted as RMA, at most `depth` and
/// `window` bytes in flight per queue, completed in order as their operations complete
/// (docs/ARCHITECTURE.md, "The DMA engine").
///
/// Failures: a completion error puts the queue in error with the provider's text; a
/// connection found lost fails the queue at once; an operation not complete after `timeout`
/// (or posts refused with `-FI_EAGAIN` that long) fails it too. A failed or aborted queue
/// posts nothing more and drops its waiting descriptors. Its operations in flight on a local
/// segment are abandoned at once: each operation keeps the segment's mapping and its
/// registration alive until its completion is read, whenever that is, even after the queue
/// is gone. Operations on caller memory (`start_memory`) are waited for until they complete or
/// their deadline passes; past it they are abandoned too.
#[cfg(feature = "ofi")]
mod rma_pipe {
    use std::collections::VecDeque;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::{Descriptor, QueueShared};
    use crate::error::Error;
    use crate::fabric::remote::{RemoteInner, RemoteState};
    use crate::platform::doorbell::Doorbell;
    use crate::platform::memory;
    use crate::transport::ofi::endpoint::{Op, ProcessEndpoint};
    use crate::transport::ofi::remote::OfiConn;
    use crate::transport::ofi::rma::{self, LocalReg};
    use crate::transport::RemoteObject;

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
        remote: *const RemoteInner,
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
    pub(crate) struct RmaPipe {
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
    unsafe impl Send for RmaPipe {}

    impl Default for RmaPipe {
        fn default() -> Self {
            RmaPipe {
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
        if !d.rma.is_null() {
            // SAFETY: every RMA descriptor owns one count of its registration
            // (`DmaQueue`'s `far_descriptor`), taken back exactly once: here or in `take`.
            drop(unsafe { Arc::from_raw(d.rma) });
        }
    }

    impl RmaPipe {
        /// Operations in flight at most, and the largest one.
        pub(crate) fn set_limits(&mut self, depth: usize, chunk: usize) {
            self.depth = depth.clamp(1, 1024);
            self.chunk = chunk.max(1);
        }

        /// Bytes in flight at most (at least one operation of any size).
        pub(crate) fn set_window(&mut self, bytes: usize) {
            self.window = bytes.max(1);
        }

        /// The most bytes that were in flight at once.
        #[cfg(test)]
        pub(crate) fn peak_bytes(&self) -> usize {
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
        pub(crate) fn set_timeout(&mut self, timeout: Duration) {
            self.timeout = timeout.max(Duration::from_millis(1));
        }

        /// Whether it holds work (then the queue's descriptors go through it).
        pub(crate) fn is_active(&self) -> bool {
            !self.runs.is_empty() || !self.inflight.is_empty()
        }

        fn run_mut(&mut self, seq: u64) -> &mut Run {
            &mut self.runs[(seq - self.first_seq) as usize]
        }

        /// One pass: reaps completions, checks liveness and deadlines, posts up to the depth
        /// (or drops everything after a failure or an abort), completes the finished prefix.
        /// Returns how much it did (0: nothing).
        pub(crate) fn service(&mut self, q: &QueueShared, buf: &mut [Descriptor]) -> usize {
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
                        && buf[j].rma == d.rma
                        && buf[j].write == d.write
                        && buf[j].group == d.group
                        && buf[j].src as usize == d.src as usize + len
                        && buf[j].dst as usize == d.dst as usize + len
                    {
                        len += buf[j].len;
                        j += 1;
                    }
                }
                // RMA and group descriptors: the local address, and the far side's offset.
                let (local, offset) = if d.write { (d.src.cast_mut(), d.dst.addr()) } else { (d.dst, d.src.addr()) };
                let work = if d.group {
                    // SAFETY: the queue keeps the remote connection alive (remote cache).
                    let group_id = unsafe { (*d.remote).remote.info().addr.id };
                    Work::Group { local, offset, write: d.write, group_id }
                } else if d.rma.is_null() {
                    Work::Copy { dst: d.dst, src: d.src }
                } else {
                    buf[i + 1..j].iter().for_each(release);
                    // SAFETY: as in `release`: the count this descriptor owns.
                    let reg = unsafe { Arc::from_raw(d.rma) };
                    // SAFETY: the queue keeps the remote connection alive until its
                    // descriptors complete (its remote cache).
                    let handle = unsafe { &(*d.remote).remote };
                    let conn = rma::ofi_conn(handle).expect("RMA descriptors name ofi connections").clone();
                    Work::Rma { conn, reg, local, remote_offset: offset as u64, write: d.write }
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
                        unsafe {
                            memory::copy_shared_to_shared(*dst, *src, run.len, memory::DMA_NONTEMPORAL_THRESHOLD)
                        };
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
                            // was checked inside its registration when queued; the
                            // registration (and a segment's mapping) is kept by the op.
                            let posted = unsafe {
                                rma::post(
                                    conn,
                                    reg,
                                    local.add(run.posted),
                                    remote_offset + run.posted as u64,
                                    len,
                                    *write,
                                )
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
    pub(super) fn channel_wait(
        queues: &[Arc<QueueShared>],
        idle_for: Duration,
        bell: &Doorbell,
        mut changed: impl FnMut() -> bool,
    ) {
        let mut ops: Vec<Arc<Op>> = Vec::new();
        let mut conns: Vec<Arc<OfiConn>> = Vec::new();
        let mut watched: Vec<&Arc<QueueShared>> = Vec::new();
        let mut endpoint: Option<Arc<ProcessEndpoint>> = None;
        for q in queues.iter().filter(|q| q.rma_active.load(Ordering::Relaxed)) {
            let p = q.rma.lock().unwrap_or_else(|e| e.into_inner());
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
}
