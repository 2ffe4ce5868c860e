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

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::platform::doorbell::Doorbell;
use crate::platform::spsc::CachePadded;
pub(crate) use crate::transport::dma::{Descriptor, Outcome, QueueShared, MAX_BATCH};
use crate::transport::dma::{DmaPipe, Pipe};

/// Channels a process may have.
pub const MAX_CHANNELS: usize = 16;
/// How long an idle channel spins before it sleeps.
const CHANNEL_POLL: Duration = Duration::from_micros(50);

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
            crate::platform::threads::spawn(format!("lanes-dma-{}", ch.id), move || runner.run())?;
            chans.push(ch);
        }
        Ok(match id {
            Some(i) => chans[i].clone(),
            None => chans[..want].iter().min_by_key(|c| c.load()).expect("at least one channel").clone(),
        })
    }
}
