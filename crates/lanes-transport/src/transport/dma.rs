//! The DMA contract between the fabric's engine (`fabric::dma_engine`, `fabric::dma`) and the
//! transports: what a queue asks of the transport that reaches a remote segment, and what a
//! channel hands to the transport's pipe. The queue's shared state ([`QueueShared`]: its
//! ring of [`Descriptor`]s, completions, callbacks, the pipe) is defined here, so that a
//! pipe names only transport types: a remote side is a [`Connection`], a local one the
//! bytes of a mapping ([`LocalBytes`]) and what keeps them mapped.
//!
//! A remote segment the transport maps (shm) is reached by copies, which the engine does
//! itself. Anything else is the transport's: [`DmaFar`] (one per queue) makes the
//! descriptors for a remote segment it does not map, each carrying its [`FarWork`]; the
//! first such descriptor a channel pass meets hands the queue to its [`DmaPipe`], which
//! takes every descriptor of the queue until it is empty again, so completions stay in
//! order.
//!
//! The build's transports fix the types: with feature `ofi`, the ofi pipe (RMA, and a
//! reflective group's fan-out; `ofi::dma_pipe`); without, shm's (`shm::dma_pipe`), under
//! which every descriptor is a copy and the pipe never holds work.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::Result;
use crate::platform::doorbell::Doorbell;
use crate::platform::memory;
use crate::platform::spsc::{CachePadded, SpscRing};
use crate::platform::SharedSlice;
use crate::transport::{Connection, DmaDirection, DmaVec, RemoteState};

#[cfg(feature = "ofi")]
pub use super::ofi::dma_pipe::{Far, FarWork, Pipe};
#[cfg(not(feature = "ofi"))]
pub use super::shm::dma_pipe::{Far, FarWork, Pipe};

/// Descriptors a channel takes from a queue in one pass, at most.
pub const MAX_BATCH: usize = 256;

/// A local segment's whole mapping, as a queue hands it to its transport's [`DmaFar`].
#[cfg_attr(not(feature = "ofi"), allow(dead_code))] // only a pipe that holds work reads it
#[derive(Clone, Copy)]
pub struct LocalBytes<'a> {
    /// The segment's identity while it lives (for what the transport keeps per segment).
    pub key: usize,
    /// The mapping's bytes, read-write.
    pub bytes: SharedSlice<'a>,
    /// A reference that keeps the mapping alive.
    pub owner: &'a dyn Fn() -> Arc<dyn Any + Send + Sync>,
}

/// One copy for the engine.
#[derive(Clone, Copy, Debug)]
pub struct Descriptor {
    pub dst: *mut u8,
    pub src: *const u8,
    pub len: usize,
    /// The connection to the remote segment this copy touches (kept alive by the queue's
    /// map cache), checked before copying; null for none.
    pub remote: *const Connection,
    /// What the transport's pipe does instead of a copy ([`FarTag::COPY`]: nothing); then
    /// `dst` or `src` may be an offset on the far side rather than an address.
    pub far: FarWork,
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
    pub fn copy(dst: *mut u8, src: *const u8, len: usize, remote: *const Connection) -> Descriptor {
        Descriptor { dst, src, len, remote, far: FarWork::COPY }
    }
}

impl Default for Descriptor {
    fn default() -> Self {
        Descriptor::copy(std::ptr::null_mut(), std::ptr::null(), 0, std::ptr::null())
    }
}

/// A queue's final state after its outstanding descriptors drained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Done,
    Error,
    Aborted,
}

type Completion = Box<dyn FnOnce(Outcome) + Send>;

/// What a queue shares with its channel.
pub struct QueueShared {
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
    /// The transport's work in progress (taken by the channel thread; by the queue only to
    /// set limits).
    pub pipe: Mutex<Pipe>,
    /// Whether the pipe holds work: then every descriptor goes through it.
    pub pipe_active: AtomicBool,
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
            pipe: Mutex::new(Pipe::default()),
            pipe_active: AtomicBool::new(false),
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

    pub fn run_callbacks(&self) {
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
    pub fn service(&self, buf: &mut [Descriptor]) -> usize {
        if Pipe::IN_USE && self.pipe_active.load(Ordering::Relaxed) {
            return self.service_pipe(buf);
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
            if !d.far.is_copy() {
                // The pipe's from here on: finish the copies before it, then hand over.
                self.ring.consume(i);
                if i > 0 {
                    self.completed.fetch_add(i as u64, Ordering::SeqCst);
                    self.bell().ring();
                    self.run_callbacks();
                }
                self.pipe_active.store(true, Ordering::Relaxed);
                return i + self.service_pipe(buf);
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

    /// One pass of the pipe.
    fn service_pipe(&self, buf: &mut [Descriptor]) -> usize {
        let mut pipe = self.pipe.lock().unwrap_or_else(|e| e.into_inner());
        let did = pipe.service(self, buf);
        self.pipe_active.store(pipe.is_active(), Ordering::Relaxed);
        did
    }
}

/// What a descriptor asks of the transport beyond a copy (nothing: [`FarWork::COPY`]).
pub trait FarTag: Copy + PartialEq + std::fmt::Debug {
    /// A plain copy, done by the engine.
    const COPY: Self;

    /// Whether the descriptor is a plain copy (else it is the pipe's).
    fn is_copy(&self) -> bool;
}

/// A queue's transfers that the engine does not copy, in progress: used by its channel
/// thread only, under the queue's lock.
pub trait DmaPipe: Default + Send {
    /// Whether descriptors are ever handed to the pipe (false: the engine copies all).
    const IN_USE: bool;

    /// One pass over the queue (whose ring starts with descriptors handed to the pipe);
    /// returns how much it did (0: nothing). It completes descriptors in order, as the
    /// engine's copies do (`completed`, the queue's bell, its callbacks).
    fn service(&mut self, q: &QueueShared, buf: &mut [Descriptor]) -> usize;

    /// Whether it holds work (then the queue's descriptors go through it).
    fn is_active(&self) -> bool;

    /// Operations in flight at most, and the largest one.
    fn set_limits(&mut self, depth: usize, chunk: usize);

    /// Bytes in flight at most (at least one operation of any size).
    fn set_window(&mut self, bytes: usize);

    /// How long an operation (or the transport's refusal to take one) may take before the
    /// queue fails.
    fn set_timeout(&mut self, timeout: Duration);

    /// The most bytes that were in flight at once.
    #[cfg(any(test, feature = "test-hooks"))]
    fn peak_bytes(&self) -> usize;

    /// The channel's wait while some of `queues` have active pipes and its last pass did
    /// nothing: until one of them can make progress, or `changed` (new queues, new work
    /// elsewhere). `idle_for`: since the channel last did anything.
    fn channel_wait(queues: &[Arc<QueueShared>], idle_for: Duration, bell: &Doorbell, changed: impl FnMut() -> bool);
}

/// What a DMA queue keeps for the transfers its transport's pipe does (registrations, the
/// connections its descriptors name), and how it makes their descriptors.
pub trait DmaFar: Default {
    /// Whether `remote` is reached by the pipe (not mapped: a DMA there is never a copy).
    fn reaches(remote: &Connection) -> bool;

    /// The bytes DMA reaches through `remote` and what they are called in errors, if they
    /// are not the remote segment's.
    fn reach(remote: &Connection) -> Option<(u64, &'static str)>;

    /// Pushes onto `out` a descriptor per entry of `vec` between `local` (a segment's whole
    /// mapping) and `remote`, when `remote` is the pipe's: `None` if it is not (then the
    /// queue copies through maps). Offsets were checked against both sides. `keep` gives a
    /// reference that keeps `remote` alive, for as long as descriptors name it.
    fn segment_descriptors(
        &mut self,
        local: LocalBytes<'_>,
        remote: &Connection,
        keep: impl FnOnce() -> Arc<dyn Any + Send + Sync>,
        vec: &[DmaVec],
        direction: DmaDirection,
        out: &mut Vec<Descriptor>,
    ) -> Option<Result<()>>;

    /// The descriptor between caller memory `addr..addr + size` and `remote_offset` of
    /// `remote`, when `remote` is the pipe's: `None` if it is not. The range was checked.
    /// `keep` as for [`DmaFar::segment_descriptors`].
    ///
    /// # Safety
    /// `addr` must be valid for reads (write) or writes (read) of `size` bytes until the
    /// descriptor completes.
    unsafe fn memory_descriptor(
        &mut self,
        addr: *mut u8,
        remote: &Connection,
        keep: impl FnOnce() -> Arc<dyn Any + Send + Sync>,
        size: u64,
        remote_offset: u64,
        direction: DmaDirection,
    ) -> Option<Result<Descriptor>>;
}
