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
//! Descriptors whose remote segment the transport does not map carry the transport's
//! [`FarWork`] (`transport::dma`); the first one a pass meets hands the queue to its pipe
//! (the transport's [`DmaPipe`]: RMA, and a reflective group's fan-out), which completes descriptors as their work completes. Until the pipe is empty
//! again, every descriptor of that queue goes through it, so completions stay in order. The
//! copy path pays one test per merged run for this (none in a build whose transports map
//! every remote segment).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::remote::{RemoteInner, RemoteState};
use crate::platform::doorbell::Doorbell;
use crate::platform::memory;
use crate::platform::spsc::{CachePadded, SpscRing};
use crate::transport::dma::{DmaPipe, FarTag, FarWork, Pipe};

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
    pub fn copy(dst: *mut u8, src: *const u8, len: usize, remote: *const RemoteInner) -> Descriptor {
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
            if Pipe::IN_USE && did > 0 {
                last_work = std::time::Instant::now();
            }
            if did == 0 {
                if Pipe::IN_USE && snapshot.iter().any(|q| q.pipe_active.load(Ordering::Relaxed)) {
                    let changed = || {
                        self.generation.load(Ordering::Acquire) != seen_gen
                            || snapshot.iter().any(|q| !q.pipe_active.load(Ordering::Relaxed) && !q.ring.is_empty())
                    };
                    Pipe::channel_wait(&snapshot, last_work.elapsed(), &self.bell(), changed);
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
