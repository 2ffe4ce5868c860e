//! The DMA contract between the fabric's engine (`fabric::dma_engine`, `fabric::dma`) and the
//! transports: what a queue asks of the transport that reaches a remote segment, and what a
//! channel hands to the transport's pipe.
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

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::fabric::dma_engine::{Descriptor, QueueShared};
use crate::fabric::remote::RemoteInner;
use crate::fabric::{DmaDirection, DmaVec};
use crate::fabric::{LocalSegment, Map};
use crate::platform::doorbell::Doorbell;

#[cfg(feature = "ofi")]
pub(crate) use super::ofi::dma_pipe::{Far, FarWork, Pipe};
#[cfg(not(feature = "ofi"))]
pub(crate) use super::shm::dma_pipe::{Far, FarWork, Pipe};

/// What a descriptor asks of the transport beyond a copy (nothing: [`FarWork::COPY`]).
pub(crate) trait FarTag: Copy + PartialEq + std::fmt::Debug {
    /// A plain copy, done by the engine.
    const COPY: Self;

    /// Whether the descriptor is a plain copy (else it is the pipe's).
    fn is_copy(&self) -> bool;
}

/// A queue's transfers that the engine does not copy, in progress: used by its channel
/// thread only, under the queue's lock.
pub(crate) trait DmaPipe: Default + Send {
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
    #[cfg(test)]
    fn peak_bytes(&self) -> usize;

    /// The channel's wait while some of `queues` have active pipes and its last pass did
    /// nothing: until one of them can make progress, or `changed` (new queues, new work
    /// elsewhere). `idle_for`: since the channel last did anything.
    fn channel_wait(queues: &[Arc<QueueShared>], idle_for: Duration, bell: &Doorbell, changed: impl FnMut() -> bool);
}

/// What a DMA queue keeps for the transfers its transport's pipe does (registrations, the
/// connections its descriptors name), and how it makes their descriptors.
pub(crate) trait DmaFar: Default {
    /// Whether `remote` is reached by the pipe (not mapped: a DMA there is never a copy).
    fn reaches(remote: &RemoteInner) -> bool;

    /// The bytes DMA reaches through `remote` and what they are called in errors, if they
    /// are not the remote segment's.
    fn reach(remote: &RemoteInner) -> Option<(u64, &'static str)>;

    /// Pushes onto `out` a descriptor per entry of `vec` between `local` (mapped whole by
    /// `lmap`) and `remote`, when `remote` is the pipe's: `None` if it is not (then the
    /// queue copies through maps). Offsets were checked against both sides.
    #[allow(clippy::too_many_arguments)]
    fn segment_descriptors(
        &mut self,
        local: &LocalSegment,
        lmap: &Arc<Map>,
        remote: &Arc<RemoteInner>,
        vec: &[DmaVec],
        direction: DmaDirection,
        out: &mut Vec<Descriptor>,
    ) -> Option<Result<()>>;

    /// The descriptor between caller memory `addr..addr + size` and `remote_offset` of
    /// `remote`, when `remote` is the pipe's: `None` if it is not. The range was checked.
    ///
    /// # Safety
    /// `addr` must be valid for reads (write) or writes (read) of `size` bytes until the
    /// descriptor completes.
    unsafe fn memory_descriptor(
        &mut self,
        addr: *mut u8,
        remote: &Arc<RemoteInner>,
        size: u64,
        remote_offset: u64,
        direction: DmaDirection,
    ) -> Option<Result<Descriptor>>;
}
