//! The ofi side of DMA as RMA (docs/design/multi-host.md, section 7): registering the local
//! side of transfers ([`LocalReg`]), posting one operation ([`post`]) and the DMA channel's
//! wait while operations are in flight ([`channel_wait`]). Queues, runs, depth, chunking,
//! completion order and failures are the DMA pipe's (`dma_pipe`).
//!
//! The local side is always registered, for local access only (`FI_READ | FI_WRITE`): a
//! local segment's whole mapping once per queue and endpoint, caller memory once per
//! `start_memory` transfer. Providers that ask for `FI_MR_LOCAL` (verbs) need the descriptor;
//! the others (tcp, net) accept it, and `fi::Local` is only made from a registration.

use std::any::Any;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::endpoint::{Op, ProcessEndpoint};
use super::fi::{self, Local, RegistrableMemory};
use super::remote::OfiConn;
use crate::error::{Error, Result};
use crate::platform::doorbell::Doorbell;
use crate::transport::RemoteHandle;

/// Operations in flight per queue unless `LANES_OFI_DMA_DEPTH` says otherwise.
pub const DEFAULT_DEPTH: usize = 16;
/// Largest single operation unless `LANES_OFI_DMA_CHUNK` says otherwise.
pub const DEFAULT_CHUNK: usize = 1 << 20;
/// Bytes in flight per queue unless `LANES_OFI_DMA_WINDOW` says otherwise: as much as a TCP
/// provider's socket takes at once (a 4 MiB send buffer), and far above a data-centre link's
/// bandwidth-delay product (100 Gbit/s over a 10 us round trip is 125 KB), so what is held
/// back would only have waited in the provider.
pub const DEFAULT_WINDOW: usize = 4 << 20;
/// How long an operation may take unless `LANES_OFI_DMA_TIMEOUT_MS` says otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one post retries `-FI_EAGAIN` before the channel looks at its other work.
const POST_SLICE: Duration = Duration::from_millis(5);
/// While completions keep coming, the channel drives the endpoint's progress itself for
/// `LOOK` between looks at its queues: spinning for the first `SPIN` (a small transfer's
/// round trip), then napping between progress passes (20 us, doubling). A large
/// transfer's completion is hundreds of microseconds away, and a channel that spun for
/// all of it took the CPU time the kernel's TCP copies need on a busy machine: beside a
/// CPU hog, DMA bandwidth fell to about half of iperf3's (docs/BENCH.md). Past
/// `SLOW_AFTER` without any, it sleeps in `SLOW_NAP` steps and lets the endpoint's service
/// thread drive progress.
const LOOK: Duration = Duration::from_millis(1);
const SPIN: Duration = Duration::from_micros(50);
const SLOW_AFTER: Duration = Duration::from_millis(10);
const SLOW_NAP: Duration = Duration::from_millis(2);

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// `LANES_OFI_DMA_DEPTH`, else 16 (1 to 1024).
pub fn default_depth() -> usize {
    env_usize("LANES_OFI_DMA_DEPTH").unwrap_or(DEFAULT_DEPTH).clamp(1, 1024)
}

/// `LANES_OFI_DMA_CHUNK` bytes, else 1 MiB (4 KiB to 1 GiB).
pub fn default_chunk() -> usize {
    env_usize("LANES_OFI_DMA_CHUNK").unwrap_or(DEFAULT_CHUNK).clamp(4096, 1 << 30)
}

/// `LANES_OFI_DMA_WINDOW` bytes, else 4 MiB (4 KiB to 1 GiB).
pub fn default_window() -> usize {
    env_usize("LANES_OFI_DMA_WINDOW").unwrap_or(DEFAULT_WINDOW).clamp(4096, 1 << 30)
}

/// `LANES_OFI_DMA_TIMEOUT_MS`, else 30 s.
pub fn default_timeout() -> Duration {
    env_usize("LANES_OFI_DMA_TIMEOUT_MS").map_or(DEFAULT_TIMEOUT, |ms| Duration::from_millis(ms.max(1) as u64))
}

/// The ofi connection of `remote`, if that is how it is reached.
pub fn ofi_conn(remote: &RemoteHandle) -> Option<&Arc<OfiConn>> {
    match remote {
        RemoteHandle::Ofi(r) => Some(r.conn()),
        RemoteHandle::Shm(_) => None,
    }
}

/// Local memory as a registration sees it: an address range, and what keeps it mapped.
struct RegMemory {
    ptr: *mut u8,
    len: usize,
    /// The local segment's mapping; `None` for caller memory (the caller keeps it).
    _owner: Option<Arc<dyn Any + Send + Sync>>,
}

// SAFETY: an address range; the memory behind it is only reached through the provider (and,
// for a segment, through the segment's own maps, by copies).
unsafe impl Send for RegMemory {}
// SAFETY: as above.
unsafe impl Sync for RegMemory {}

// SAFETY: a segment mapping stays mapped while `_owner` holds it. Caller memory stays valid
// until its transfer completes (`DmaQueue::start_memory`'s contract), and its registration
// grants local access only (FI_READ | FI_WRITE), so peers never reach it through the key.
unsafe impl RegistrableMemory for RegMemory {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// The local side of RMA DMA, registered on one endpoint for local reads and writes. Ops
/// keep it (and through it the memory) alive until their completion is read.
pub struct LocalReg {
    mr: fi::MemoryRegion,
    /// Start of the registered range (an address, only compared).
    base: usize,
    /// Whether the registration keeps its memory mapped (a segment) or the caller does.
    owned: bool,
}

impl std::fmt::Debug for LocalReg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalReg").field("mr", &self.mr).field("owned", &self.owned).finish()
    }
}

impl LocalReg {
    /// Registers `len` bytes at `ptr` on `endpoint`; `owner` keeps them mapped (a segment's
    /// map), or `None` when the caller vouches for them until the transfer completes.
    ///
    /// # Safety
    /// `ptr..ptr + len` must be mapped read-write memory of this process, for as long as
    /// `owner` lives, or (no owner) until the transfers using the registration complete.
    pub unsafe fn new(
        endpoint: &ProcessEndpoint,
        ptr: *mut u8,
        len: usize,
        owner: Option<Arc<dyn Any + Send + Sync>>,
    ) -> Result<Arc<LocalReg>> {
        let owned = owner.is_some();
        let memory = Arc::new(RegMemory { ptr, len, _owner: owner });
        let mr = endpoint.register(memory, fi::FI_READ | fi::FI_WRITE)?;
        Ok(Arc::new(LocalReg { mr, base: ptr as usize, owned }))
    }

    /// Whether the registration keeps its memory mapped (a segment's) rather than the caller.
    pub fn owned(&self) -> bool {
        self.owned
    }

    /// The registered range `ptr..ptr + len`, to post from or into.
    fn local(&self, ptr: *mut u8, skip: usize, len: usize) -> Result<Local> {
        let out = || Error::OutOfRange {
            offset: 0,
            len: len as u64,
            size: self.mr.len() as u64,
            what: "registered DMA memory",
        };
        let offset = (ptr as usize).checked_sub(self.base).and_then(|o| o.checked_add(skip)).ok_or_else(out)?;
        self.mr.local(offset, len)
    }
}

/// Posts `len` bytes between `local + skip` (inside `reg`: checked, a piece outside it is
/// an error) and `remote_offset` of `conn`'s object:
/// `fi_writemsg` with `FI_DELIVERY_COMPLETE` for a write (its completion means the data is
/// placed, and a bad key fails it), `fi_read` for a read. `-FI_EAGAIN` is retried for a short
/// slice only: then [`Error::Timeout`], and the caller retries later.
///
/// # Safety
/// `local + skip..local + skip + len` must stay valid until the
/// returned operation finishes: `reg` (kept by the operation) keeps a segment's mapping
/// alive; caller memory is the caller's to keep.
#[allow(clippy::too_many_arguments)]
pub unsafe fn post(
    conn: &OfiConn,
    reg: &Arc<LocalReg>,
    local: *mut u8,
    skip: usize,
    remote_offset: u64,
    len: usize,
    write: bool,
) -> Result<Arc<Op>> {
    let l = reg.local(local, skip, len)?;
    let target = conn.range.target(remote_offset, len as u64)?;
    let keep: Arc<dyn Any + Send + Sync> = reg.clone();
    let deadline = Instant::now() + POST_SLICE;
    // SAFETY: the caller's contract; `keep` holds the registration (and a segment's mapping)
    // until the operation's completion is read.
    unsafe {
        if write {
            conn.endpoint.post_write(l, target, 0, fi::FI_DELIVERY_COMPLETE, Some(keep), deadline)
        } else {
            conn.endpoint.post_read(l, target, Some(keep), deadline)
        }
    }
}

/// The DMA channel's wait while it has operations in flight and nothing else to do.
///
/// While completions keep coming (`idle_for` below `SLOW_AFTER`) it drives `endpoint`'s
/// progress itself as a spinning waiter ([`ProcessEndpoint::wait_until`]: `SPIN`, then
/// naps), for at most `LOOK`, until `ready`. Past that it naps on the channel's doorbell
/// (rung by submitters) for at most `SLOW_NAP` and leaves progress to the endpoint's service
/// thread.
pub fn channel_wait(
    endpoint: Option<&ProcessEndpoint>,
    idle_for: Duration,
    bell: &Doorbell,
    mut ready: impl FnMut() -> bool,
) {
    match endpoint {
        Some(ep) if idle_for < SLOW_AFTER => {
            let _ = ep.wait_until(|| ready().then_some(()), SPIN, Instant::now() + LOOK, "DMA completions");
        }
        _ => {
            let _ = bell.wait(|| ready().then_some(()), || None::<()>, Duration::ZERO, Some(Instant::now() + SLOW_NAP));
        }
    }
}
