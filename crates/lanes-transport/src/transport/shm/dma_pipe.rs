//! The DMA pipe of a build whose only transport is shm (no feature `ofi`): every remote
//! segment is mapped, so every descriptor is a copy, which the engine does itself. The pipe
//! is never handed work, and a queue keeps nothing for it.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::platform::doorbell::Doorbell;
use crate::transport::dma::{Descriptor, DmaFar, DmaPipe, FarTag, LocalBytes, QueueShared};
use crate::transport::{Connection, DmaDirection, DmaVec};

/// Nothing beyond a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FarWork;

impl FarTag for FarWork {
    const COPY: FarWork = FarWork;

    #[inline(always)]
    fn is_copy(&self) -> bool {
        true
    }
}

/// A pipe that never holds work.
#[derive(Default)]
pub struct Pipe {}

impl DmaPipe for Pipe {
    const IN_USE: bool = false;

    fn service(&mut self, _q: &QueueShared, _buf: &mut [Descriptor]) -> usize {
        0
    }

    fn is_active(&self) -> bool {
        false
    }

    fn set_limits(&mut self, _depth: usize, _chunk: usize) {}

    fn set_window(&mut self, _bytes: usize) {}

    fn set_timeout(&mut self, _timeout: Duration) {}

    #[cfg(any(test, feature = "test-hooks"))]
    fn peak_bytes(&self) -> usize {
        0
    }

    fn channel_wait(
        _queues: &[Arc<QueueShared>],
        _idle_for: Duration,
        _bell: &Doorbell,
        _changed: impl FnMut() -> bool,
    ) {
    }
}

/// Nothing to keep: every remote segment is mapped.
#[derive(Default)]
pub struct Far {}

impl DmaFar for Far {
    #[inline(always)]
    fn reaches(_remote: &Connection) -> bool {
        false
    }

    #[inline(always)]
    fn reach(_remote: &Connection) -> Option<(u64, &'static str)> {
        None
    }

    #[inline(always)]
    fn segment_descriptors(
        &mut self,
        _local: LocalBytes<'_>,
        _remote: &Connection,
        _keep: impl FnOnce() -> Arc<dyn Any + Send + Sync>,
        _vec: &[DmaVec],
        _direction: DmaDirection,
        _out: &mut Vec<Descriptor>,
    ) -> Option<Result<()>> {
        None
    }

    #[inline(always)]
    unsafe fn memory_descriptor(
        &mut self,
        _addr: *mut u8,
        _remote: &Connection,
        _keep: impl FnOnce() -> Arc<dyn Any + Send + Sync>,
        _size: u64,
        _remote_offset: u64,
        _direction: DmaDirection,
    ) -> Option<Result<Descriptor>> {
        None
    }
}
