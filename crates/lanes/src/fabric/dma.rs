//! DMA queues: asynchronous bulk transfers between a local and a remote segment.
//!
//! A queue takes transfers (one, a vector, or from/to ordinary user memory) and hands them
//! to a DMA channel, a library thread, so the caller goes on at once; it then polls
//! [`DmaQueue::state`], blocks in [`DmaQueue::wait`], or gets a callback. Offsets are checked
//! against both segments when a transfer is queued, so nothing outside them is ever written;
//! a remote segment lost mid-transfer puts the queue in the error state, never a hang.
//! [`DmaQueue::copy`] picks PIO below a size threshold and DMA above it, as the vendor's
//! stack does.
//!
//! A remote segment the transport does not map is the transport's (`transport::dma`): the
//! queue's [`DmaFar`] makes its descriptors, the channel hands them to the transport's pipe,
//! and [`DmaQueue::copy`] always uses DMA for it. Those transfers are RMA, or, through a
//! member's connection to a reflective group spanning hosts, go through the member's
//! fan-out and reach the group's bytes only.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::dma_engine::{engine, Channel, Descriptor, Outcome, QueueShared, MAX_BATCH};
use super::events;
use super::local::LocalSegment;
use super::map::Map;
use super::remote::RemoteSegment;
use super::Timeout;
use crate::error::{Error, IoContext, Result};
use crate::platform::doorbell::{default_poll_time, WaitError};
use crate::platform::memory;
use crate::transport::dma::{DmaFar, DmaPipe, Far, LocalBytes};
use crate::transport::MapAccess;
use crate::transport::{DmaDirection, DmaVec};

/// A queue's state (`sci_dma_queue_state_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaQueueState {
    /// Nothing was ever queued.
    Idle,
    /// Being built (not produced: transfers post at once).
    Gather,
    /// Transfers are outstanding.
    Posted,
    /// Everything queued has completed.
    Done,
    /// Aborted; outstanding transfers were dropped.
    Aborted,
    /// A transfer failed (remote segment lost); later ones were dropped.
    Error,
}

/// How [`DmaQueue::copy`] moved the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyPath {
    Pio,
    Dma,
}

/// A callback run when the transfers of one start call have completed (on the channel
/// thread, or on the caller's if they already had).
pub type DmaCallback = Box<dyn FnOnce(DmaQueueState) + Send>;

/// A DMA channel (`SCIRequestDMAChannel`): one engine thread that queues can be assigned to.
#[derive(Clone)]
pub struct DmaChannel {
    pub(crate) channel: Arc<Channel>,
}

impl std::fmt::Debug for DmaChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaChannel").field("id", &self.channel.id).finish()
    }
}

impl DmaChannel {
    /// Channel `id`, or the least loaded one for `None`.
    pub fn request(id: Option<u32>) -> Result<DmaChannel> {
        let channel = engine().channel(id.map(|i| i as usize)).context(|| "starting a DMA channel".into())?;
        Ok(DmaChannel { channel })
    }

    /// The channel's number.
    pub fn id(&self) -> u32 {
        self.channel.id as u32
    }
}

/// A queue of DMA transfers. Dropping it aborts what is outstanding and waits for the
/// channel to let go of it.
pub struct DmaQueue {
    shared: Arc<QueueShared>,
    channel: Arc<Channel>,
    submitted: u64,
    max_entries: usize,
    /// Whole-segment maps, keyed by the segment's identity, kept while the queue lives so the
    /// engine's addresses stay valid.
    maps: HashMap<usize, Arc<Map>>,
    scratch: Vec<Descriptor>,
    pio_threshold: usize,
    poll: Option<std::time::Duration>,
    /// What the transport's pipe needs kept for this queue's transfers.
    far: Far,
}

impl std::fmt::Debug for DmaQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaQueue")
            .field("channel", &self.channel.id)
            .field("max_entries", &self.max_entries)
            .field("submitted", &self.submitted)
            .finish()
    }
}

/// The PIO/DMA crossover used by [`DmaQueue::copy`]: `LANES_DMA_THRESHOLD`, else 64 KiB.
fn default_pio_threshold() -> usize {
    std::env::var("LANES_DMA_THRESHOLD").ok().and_then(|v| v.parse().ok()).unwrap_or(64 << 10)
}

impl DmaQueue {
    /// A queue for at most `max_entries` outstanding transfers, on the least loaded channel.
    pub fn new(max_entries: usize) -> Result<DmaQueue> {
        if max_entries == 0 || max_entries > 1 << 20 {
            return Err(Error::InvalidSize { size: max_entries as u64, reason: "a DMA queue holds 1 to 2^20 entries" });
        }
        let channel = engine().channel(None).context(|| "starting a DMA channel".into())?;
        let shared = QueueShared::new(max_entries);
        channel.attach(&shared);
        Ok(DmaQueue {
            shared,
            channel,
            submitted: 0,
            max_entries,
            maps: HashMap::new(),
            scratch: Vec::new(),
            pio_threshold: default_pio_threshold(),
            poll: None,
            far: Far::default(),
        })
    }

    /// The most transfers that may be outstanding.
    pub fn max_entries(&self) -> usize {
        self.max_entries
    }

    /// Transfers queued and not yet complete.
    pub fn outstanding(&self) -> usize {
        (self.submitted - self.shared.completed.load(Ordering::Acquire)) as usize
    }

    /// The channel serving this queue.
    pub fn channel(&self) -> DmaChannel {
        DmaChannel { channel: self.channel.clone() }
    }

    /// Moves the queue to `channel` (`SCIAssignDMAChannel`); only while nothing is outstanding.
    pub fn assign_channel(&mut self, channel: &DmaChannel) -> Result<()> {
        if self.outstanding() > 0 {
            return Err(Error::IllegalOperation("a DMA queue changes channel only when idle"));
        }
        self.channel.detach(&self.shared);
        self.channel = channel.channel.clone();
        self.channel.attach(&self.shared);
        Ok(())
    }

    /// Descriptors a channel takes in one pass (1 gives the naive engine) and whether it
    /// merges contiguous ones; for measurements.
    pub fn set_batching(&mut self, max_batch: usize, merge: bool) {
        self.shared.batch.store(max_batch.clamp(1, MAX_BATCH), Ordering::Relaxed);
        self.shared.merge.store(merge, Ordering::Relaxed);
    }

    /// Sizes from which [`DmaQueue::copy`] uses DMA rather than PIO.
    pub fn set_pio_threshold(&mut self, bytes: usize) {
        self.pio_threshold = bytes;
    }

    /// How long [`DmaQueue::wait`] spins before it sleeps (default: `LANES_POLL_US`). Zero
    /// frees the waiter's CPU at once, which lets a channel thread run where cores are few.
    pub fn set_poll_time(&mut self, poll: std::time::Duration) {
        self.poll = Some(poll);
    }

    /// For remote segments reached by RMA (a transport that does not map them): operations
    /// in flight at most (`LANES_OFI_DMA_DEPTH`, default 16; 1 to 1024) and the largest one
    /// in bytes (`LANES_OFI_DMA_CHUNK`, default 1 MiB); merged runs are split into such
    /// pieces. Without such a transport in the build there are none, and this does nothing.
    pub fn set_rma_limits(&mut self, depth: usize, chunk: usize) {
        self.shared.pipe.lock().unwrap_or_else(|e| e.into_inner()).set_limits(depth, chunk);
    }

    /// For remote segments reached by RMA: bytes in flight at most (`LANES_OFI_DMA_WINDOW`,
    /// default 4 MiB); one operation of any size may always be in flight. Operations past
    /// what the transport carries at once would only wait in the provider: on tcp, with a
    /// target driving progress back to back, bandwidth was higher with 4 MiB in flight than
    /// with 16 MiB (docs/BENCH.md).
    pub fn set_rma_window(&mut self, bytes: usize) {
        self.shared.pipe.lock().unwrap_or_else(|e| e.into_inner()).set_window(bytes);
    }

    /// The most bytes of RMA this queue had in flight at once (for the tests of a transport
    /// with RMA, crates/lanes-transport/tests).
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn rma_peak_bytes(&self) -> usize {
        self.shared.pipe.lock().unwrap_or_else(|e| e.into_inner()).peak_bytes()
    }

    /// For remote segments reached by RMA: how long one operation (or the provider's refusal
    /// to take one) may last before the queue fails (`LANES_OFI_DMA_TIMEOUT_MS`, default
    /// 30 s). Transfers to a reflective group spanning hosts are bounded by its fan-out's
    /// waits instead (10 s each).
    pub fn set_rma_timeout(&mut self, timeout: std::time::Duration) {
        self.shared.pipe.lock().unwrap_or_else(|e| e.into_inner()).set_timeout(timeout);
    }

    /// The current PIO/DMA crossover of [`DmaQueue::copy`].
    pub fn pio_threshold(&self) -> usize {
        self.pio_threshold
    }

    /// The cached whole-segment map of the segment whose shared state is at `key`.
    fn cached_map(&mut self, key: usize, map: impl FnOnce() -> Result<Map>) -> Result<Arc<Map>> {
        if let Some(m) = self.maps.get(&key) {
            return Ok(m.clone());
        }
        let m = Arc::new(map()?);
        self.maps.insert(key, m.clone());
        Ok(m)
    }

    fn local_map(&mut self, seg: &LocalSegment) -> Result<Arc<Map>> {
        self.cached_map(Arc::as_ptr(&seg.inner) as usize, || seg.map(0, seg.size(), MapAccess::ReadWrite))
    }

    fn remote_map(&mut self, seg: &RemoteSegment) -> Result<Arc<Map>> {
        self.cached_map(Arc::as_ptr(&seg.inner) as usize, || seg.map(0, seg.size(), MapAccess::ReadWrite))
    }

    fn check_room(&self, n: usize) -> Result<()> {
        let outstanding = self.outstanding();
        if outstanding + n > self.max_entries {
            return Err(Error::TooManyEntries { requested: n, outstanding, max: self.max_entries });
        }
        Ok(())
    }

    /// Queues one transfer of `size` bytes between `local` at `local_offset` and `remote` at
    /// `remote_offset` (`SCIStartDmaTransfer`; note the argument order of the original).
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &mut self,
        local: &LocalSegment,
        remote: &RemoteSegment,
        local_offset: u64,
        size: u64,
        remote_offset: u64,
        direction: DmaDirection,
        callback: Option<DmaCallback>,
    ) -> Result<()> {
        self.start_vec(local, remote, &[DmaVec { size, local_offset, remote_offset }], direction, callback)
    }

    /// Queues many transfers in one call (`SCIStartDmaTransferVec`). All entries are checked
    /// first: either all are queued or none.
    pub fn start_vec(
        &mut self,
        local: &LocalSegment,
        remote: &RemoteSegment,
        vec: &[DmaVec],
        direction: DmaDirection,
        callback: Option<DmaCallback>,
    ) -> Result<()> {
        if vec.is_empty() {
            return Err(Error::InvalidSize { size: 0, reason: "an empty DMA vector" });
        }
        self.check_room(vec.len())?;
        remote.check()?;
        let (lsize, (rsize, rwhat)) = (local.size(), reach(remote));
        for v in vec {
            check_range(v.local_offset, v.size, lsize, "local segment")?;
            check_range(v.remote_offset, v.size, rsize, rwhat)?;
        }
        let lmap = self.local_map(local)?;
        let remote_ptr = remote.inner.connection();
        self.scratch.clear();
        let owner = || -> Arc<dyn Any + Send + Sync> { lmap.clone() };
        let bytes = LocalBytes { key: Arc::as_ptr(&local.inner) as usize, bytes: lmap.program_slice()?, owner: &owner };
        let keep = || -> Arc<dyn Any + Send + Sync> { remote.inner.clone() };
        if let Some(queued) =
            self.far.segment_descriptors(bytes, &remote.inner, keep, vec, direction, &mut self.scratch)
        {
            queued?;
            self.post(callback);
            return Ok(());
        }
        let rmap = self.remote_map(remote)?;
        self.scratch.clear();
        let (lbytes, rbytes) = (lmap.program_slice()?, rmap.program_slice()?);
        for v in vec {
            // Offsets were checked against the segment sizes, and the maps cover the whole
            // segments: the ranges are checked again against the maps, as the descriptors'
            // addresses are the transfers' bounds from now on.
            let size = v.size as usize;
            let l = lbytes.subslice(v.local_offset as usize, size).map_err(|e| Error::shared(e, "local segment"))?;
            let r = rbytes.subslice(v.remote_offset as usize, size).map_err(|e| Error::shared(e, "remote segment"))?;
            let (l, r) = (l.as_ptr(), r.as_ptr());
            let (dst, src) = match direction {
                DmaDirection::Write => (r, l.cast_const()),
                DmaDirection::Read => (l, r.cast_const()),
            };
            self.scratch.push(Descriptor::copy(dst, src, v.size as usize, remote_ptr));
        }
        self.post(callback);
        Ok(())
    }

    /// Queues a transfer between ordinary memory of this process and `remote`
    /// (`SCIStartDmaTransferMem`): `Write` reads `size` bytes at `addr`, `Read` writes them.
    ///
    /// # Safety
    /// `addr` must be valid for reads (Write) or writes (Read) of `size` bytes until the
    /// transfer completes (wait, or its callback), and not be used otherwise meanwhile.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn start_memory(
        &mut self,
        addr: *mut u8,
        remote: &RemoteSegment,
        size: u64,
        remote_offset: u64,
        direction: DmaDirection,
        callback: Option<DmaCallback>,
    ) -> Result<()> {
        if addr.is_null() {
            return Err(Error::IllegalOperation("a null address"));
        }
        if size == 0 {
            return Err(Error::InvalidSize { size, reason: "an empty DMA transfer" });
        }
        self.check_room(1)?;
        remote.check()?;
        let (rsize, rwhat) = reach(remote);
        check_range(remote_offset, size, rsize, rwhat)?;
        let keep = || -> Arc<dyn Any + Send + Sync> { remote.inner.clone() };
        if let Some(d) =
            // SAFETY: the caller vouches for addr..addr + size until the transfer completes.
            unsafe { self.far.memory_descriptor(addr, &remote.inner, keep, size, remote_offset, direction) }
        {
            self.scratch.clear();
            self.scratch.push(d?);
            self.post(callback);
            return Ok(());
        }
        let rmap = self.remote_map(remote)?;
        // The offset was checked against the segment, which the map covers: checked again.
        let r = rmap
            .program_slice()?
            .subslice(remote_offset as usize, size as usize)
            .map_err(|e| Error::shared(e, "remote segment"))?
            .as_ptr();
        let (dst, src) = match direction {
            DmaDirection::Write => (r, addr.cast_const()),
            DmaDirection::Read => (addr, r.cast_const()),
        };
        self.scratch.clear();
        self.scratch.push(Descriptor::copy(dst, src, size as usize, remote.inner.connection()));
        self.post(callback);
        Ok(())
    }

    /// Hands `self.scratch` to the channel.
    fn post(&mut self, callback: Option<DmaCallback>) {
        let n = self.scratch.len();
        if self.outstanding() == 0 {
            // A new batch after a finished one: clear the last one's outcome.
            self.shared.failed.store(false, Ordering::Release);
            self.shared.aborted.store(false, Ordering::Release);
        }
        let pushed = self.shared.ring.push_all(&self.scratch);
        debug_assert!(pushed, "room was checked against max_entries <= ring capacity");
        self.submitted += n as u64;
        if let Some(cb) = callback {
            self.shared.on_completed(self.submitted, Box::new(move |o| cb(state_of(o))));
        }
        self.channel.bell().ring();
    }

    /// The queue's state now (`SCIDMAQueueState`).
    pub fn state(&self) -> DmaQueueState {
        if self.submitted == 0 {
            DmaQueueState::Idle
        } else if self.outstanding() > 0 {
            DmaQueueState::Posted
        } else {
            state_of(self.shared.outcome())
        }
    }

    /// Waits until nothing is outstanding (`SCIWaitForDMAQueue`): `Ok(Done)` or `Ok(Aborted)`,
    /// or [`Error::DmaFailed`] if a transfer failed, or [`Error::Timeout`].
    pub fn wait(&self, timeout: Timeout) -> Result<DmaQueueState> {
        let target = self.submitted;
        let done = || (self.shared.completed.load(Ordering::SeqCst) >= target).then_some(());
        let poll = self.poll.unwrap_or_else(default_poll_time);
        match self.shared.bell().wait(done, || None::<()>, poll, events::deadline(timeout)) {
            Ok(()) => {}
            Err(WaitError::TimedOut | WaitError::Aborted(())) => {
                return Err(Error::Timeout {
                    what: format!("{} outstanding DMA transfers", self.outstanding()),
                    waited_ms: super::interrupt::timeout_ms(timeout),
                })
            }
        }
        match self.state() {
            DmaQueueState::Error => Err(Error::DmaFailed {
                reason: self
                    .shared
                    .failure
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone()
                    .unwrap_or_else(|| "unknown".into()),
            }),
            s => Ok(s),
        }
    }

    /// Drops every outstanding transfer (`SCIAbortDMAQueue`); transfers already copying
    /// finish. The queue reads `Aborted` once the channel has let go of them.
    pub fn abort(&self) {
        self.shared.aborted.store(true, Ordering::SeqCst);
        self.channel.bell().ring();
    }

    /// Copies `size` bytes between `local` and `remote`, by PIO below the threshold
    /// ([`DmaQueue::set_pio_threshold`]) and by DMA (waiting for it) above; returns which.
    #[allow(clippy::too_many_arguments)]
    pub fn copy(
        &mut self,
        local: &LocalSegment,
        remote: &RemoteSegment,
        local_offset: u64,
        size: u64,
        remote_offset: u64,
        direction: DmaDirection,
    ) -> Result<CopyPath> {
        let pio = (size as usize) < self.pio_threshold && !Far::reaches(&remote.inner);
        if pio {
            remote.check()?;
            check_range(local_offset, size, local.size(), "local segment")?;
            check_range(remote_offset, size, remote.size(), "remote segment")?;
            let lmap = self.local_map(local)?;
            let rmap = self.remote_map(remote)?;
            // Both ranges were checked against their segments, which the maps cover; the
            // copy checks them against the maps again. The two mappings are distinct, so the
            // ranges do not overlap.
            let (l, r) = (lmap.program_slice()?, rmap.program_slice()?);
            let (local_offset, remote_offset, size) = (local_offset as usize, remote_offset as usize, size as usize);
            let copied = match direction {
                DmaDirection::Write => {
                    l.copy_to_shared(local_offset, &r, remote_offset, size, memory::nontemporal_threshold())
                }
                DmaDirection::Read => {
                    r.copy_to_shared(remote_offset, &l, local_offset, size, memory::nontemporal_threshold())
                }
            };
            copied.map_err(|e| Error::shared(e, "DMA copy"))?;
            memory::store_barrier();
            return Ok(CopyPath::Pio);
        }
        self.start(local, remote, local_offset, size, remote_offset, direction, None)?;
        self.wait(Timeout::Infinite)?;
        Ok(CopyPath::Dma)
    }
}

/// The bytes DMA reaches through `remote`, and what they are called in errors: a member's
/// connection to a reflective group spanning hosts reaches the group's bytes (its object
/// also holds the roster).
fn reach(remote: &RemoteSegment) -> (u64, &'static str) {
    Far::reach(&remote.inner).unwrap_or((remote.size(), "remote segment"))
}

fn check_range(offset: u64, size: u64, seg: u64, what: &'static str) -> Result<()> {
    if size == 0 {
        return Err(Error::InvalidSize { size, reason: "an empty DMA transfer" });
    }
    if offset.checked_add(size).is_none_or(|end| end > seg) {
        return Err(Error::OutOfRange { offset, len: size, size: seg, what });
    }
    Ok(())
}

fn state_of(o: Outcome) -> DmaQueueState {
    match o {
        Outcome::Done => DmaQueueState::Done,
        Outcome::Error => DmaQueueState::Error,
        Outcome::Aborted => DmaQueueState::Aborted,
    }
}

impl Drop for DmaQueue {
    fn drop(&mut self) {
        // The channel must be done with our descriptors before the maps go.
        if self.outstanding() > 0 {
            self.abort();
            let _ = self.wait(Timeout::Infinite);
        }
        self.channel.detach(&self.shared);
    }
}
