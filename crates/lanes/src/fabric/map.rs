//! Maps: a window of a segment in this process's address space, accessed by value only.
//!
//! Every method takes the `Window::Direct` branch first: on shared memory a map access is
//! one volatile load or store. A `Window::Tracked` (a map of an object on another host, or
//! a group's write map across hosts) is told of every write and read, which it writes and
//! reads through (`transport::TrackedMap`).

use std::sync::Arc;

use super::local::LocalInner;
use super::remote::RemoteInner;
use super::sequence::Sequence;
use crate::error::{Error, Result};
use crate::platform::memory::{self, Scalar};
use crate::platform::SharedSlice;

/// Why an access to a range [`Map::at`] returned cannot fail: it checked bounds, alignment
/// and (for stores) writability of exactly that access.
const CHECKED: &str = "an access to a range the map checked";
use crate::transport::{MapAccess, TrackedMap, Window};

#[derive(Debug, Clone)]
pub(crate) enum MapOrigin {
    Local(#[allow(dead_code)] Arc<LocalInner>),
    Remote(Arc<RemoteInner>),
}

/// A window of `len()` bytes of a segment, starting at `segment_offset()` in it.
///
/// Every access names an offset inside the window and is bounds-checked; values are copied
/// in and out with volatile or atomic accesses, never borrowed, because a peer may write
/// this memory at any time. The window stays readable after the segment's owner dies.
#[derive(Debug)]
pub struct Map {
    window: Window,
    segment_offset: u64,
    writable: bool,
    pub(crate) origin: MapOrigin,
}

impl Map {
    /// A map of `window`, which starts at `segment_offset` of its object and was opened
    /// with `access` (the transport checked the range).
    pub(crate) fn new(window: Window, segment_offset: u64, access: MapAccess, origin: MapOrigin) -> Map {
        Map { window, segment_offset, writable: access == MapAccess::ReadWrite, origin }
    }

    /// Bytes in the window.
    #[inline]
    pub fn len(&self) -> usize {
        self.window.len()
    }

    /// Never true: maps cover at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the window starts in the segment.
    pub fn segment_offset(&self) -> u64 {
        self.segment_offset
    }

    /// Whether writes are allowed.
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The window's first byte, for FFI and for programs that do their own PIO. Valid while
    /// this map lives; the memory may change under you at any time.
    ///
    /// On a map of an object on another host (a mirror window) the window is private memory
    /// of this process: from the first call on, every barrier and flush compares the window
    /// with a shadow copy and posts the bytes that changed, and a service thread does so about
    /// every 10 ms; loads through the pointer see the window as last read or refreshed
    /// ([`Map::refresh`]). Stores through the pointer to a read-only map stay local.
    ///
    /// On a write map of a reflective group spanning hosts the pointer names a private buffer
    /// of the map, filled from this process's copy at the first call: barriers, flushes and
    /// the service thread put the bytes stored through it that changed into the copy and
    /// send them to every member. Loads through it see only this process's stores; read the
    /// group through its read map. Null only if that buffer cannot be allocated.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.window.as_ptr()
    }

    /// The bytes [`Map::as_ptr`] hands out (with its effect on a tracked window), as a
    /// checked slice: for the DMA queue, whose engine copies through raw addresses inside
    /// it. An error if a tracked window's buffer cannot be had (a null pointer).
    pub(crate) fn program_slice(&self) -> Result<SharedSlice<'_>> {
        let p = self.as_ptr();
        if p.is_null() {
            return Err(Error::IllegalOperation("a map whose buffer could not be allocated"));
        }
        // SAFETY: as_ptr's contract: the window's len() bytes at a non-null address, valid
        // while self lives, memory that may change at any time (so touched only through raw
        // pointers and copies).
        let s = unsafe { SharedSlice::from_raw_parts(p, self.len()) };
        Ok(if self.writable { s } else { s.read_only() })
    }

    /// Checks `offset..offset+len` against the window, and its address against `align`,
    /// and returns those bytes: every access below is then to offset 0 of that slice and
    /// cannot fail.
    #[inline]
    fn at(&self, offset: usize, len: usize, align: usize) -> Result<SharedSlice<'_>> {
        let window = self.window.slice();
        let range = window.subslice(offset, len).map_err(|e| Error::shared(e, "map"))?;
        if !window.is_aligned(offset, align).map_err(|e| Error::shared(e, "map"))? {
            return Err(Error::Misaligned { offset: offset as u64, align: align as u64 });
        }
        Ok(range)
    }

    #[inline]
    fn writable_at(&self, offset: usize, len: usize, align: usize) -> Result<SharedSlice<'_>> {
        if !self.writable {
            return Err(Error::ReadOnly);
        }
        self.at(offset, len, align)
    }

    /// Reads one naturally aligned scalar. On a map of an object on another host, the pending
    /// writes of this map are posted and the value is read from the object (one round trip).
    #[inline]
    pub fn read<T: Scalar>(&self, offset: usize) -> Result<T> {
        let p = self.at(offset, size_of::<T>(), align_of::<T>())?;
        let load = || p.read::<T>(0).expect(CHECKED);
        match &self.window {
            Window::Direct(_) => Ok(load()),
            Window::Tracked(m) => m.read_with(offset, size_of::<T>(), load),
        }
    }

    /// Writes one naturally aligned scalar with a single store.
    #[inline]
    pub fn write<T: Scalar>(&self, offset: usize, value: T) -> Result<()> {
        let p = self.writable_at(offset, size_of::<T>(), align_of::<T>())?;
        let store = || p.write::<T>(0, value).expect(CHECKED);
        match &self.window {
            Window::Direct(_) => {
                store();
                Ok(())
            }
            Window::Tracked(m) => m.tracked(offset, size_of::<T>(), store),
        }
    }

    /// Acquire load of an aligned 64-bit word: later reads see what the writer wrote before
    /// its matching [`Map::store_release_u64`].
    #[inline]
    pub fn load_acquire_u64(&self, offset: usize) -> Result<u64> {
        let p = self.at(offset, 8, 8)?;
        let load = || p.load_acquire_u64(0).expect(CHECKED);
        match &self.window {
            Window::Direct(_) => Ok(load()),
            Window::Tracked(m) => m.read_with(offset, 8, load),
        }
    }

    /// Release store of an aligned 64-bit word: publishes every earlier write. On a map of
    /// an object on another host: a barrier, then the word as its own write.
    #[inline]
    pub fn store_release_u64(&self, offset: usize, value: u64) -> Result<()> {
        let p = self.writable_at(offset, 8, 8)?;
        let store = || p.store_release_u64(0, value).expect(CHECKED);
        match &self.window {
            Window::Direct(_) => {
                store();
                Ok(())
            }
            Window::Tracked(m) => m.release(offset, &value.to_ne_bytes(), store),
        }
    }

    /// Acquire load of an aligned 32-bit word.
    #[inline]
    pub fn load_acquire_u32(&self, offset: usize) -> Result<u32> {
        let p = self.at(offset, 4, 4)?;
        let load = || p.load_acquire_u32(0).expect(CHECKED);
        match &self.window {
            Window::Direct(_) => Ok(load()),
            Window::Tracked(m) => m.read_with(offset, 4, load),
        }
    }

    /// Release store of an aligned 32-bit word.
    #[inline]
    pub fn store_release_u32(&self, offset: usize, value: u32) -> Result<()> {
        let p = self.writable_at(offset, 4, 4)?;
        let store = || p.store_release_u32(0, value).expect(CHECKED);
        match &self.window {
            Window::Direct(_) => {
                store();
                Ok(())
            }
            Window::Tracked(m) => m.release(offset, &value.to_ne_bytes(), store),
        }
    }

    /// Copies `src` into the window at `offset` with the fastest copy for its size.
    #[inline]
    pub fn write_bytes(&self, offset: usize, src: &[u8]) -> Result<()> {
        let p = self.writable_at(offset, src.len(), 1)?;
        let store = || p.copy_from(0, src).expect(CHECKED);
        match &self.window {
            Window::Direct(_) => {
                store();
                Ok(())
            }
            Window::Tracked(m) => m.tracked(offset, src.len(), store),
        }
    }

    /// Copies `dst.len()` bytes of the window at `offset` into `dst` (on a map of an object
    /// on another host, read from the object, as [`Map::read`]).
    #[inline]
    pub fn read_bytes(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let p = self.at(offset, dst.len(), 1)?;
        let len = dst.len();
        let mut load = || p.copy_to(0, dst).expect(CHECKED);
        match &self.window {
            Window::Direct(_) => {
                load();
                Ok(())
            }
            Window::Tracked(m) => m.read_with(offset, len, load),
        }
    }

    /// Copies `dst.len()` bytes of the window at `offset` into `dst` as this process holds
    /// them, without fetching: on shared memory the segment's bytes (as [`Map::read_bytes`]);
    /// on a map of an object on another host, what this process last wrote or read there (no
    /// round trip).
    #[inline]
    pub fn peek_bytes(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let p = self.at(offset, dst.len(), 1)?;
        p.copy_to(0, dst).expect(CHECKED);
        Ok(())
    }

    /// The window, checked against `ranges` (offset, length): their bounds, and writability
    /// when `store`. The ranges' count is checked by the slice's I/O.
    fn io_ranges(&self, ranges: &[(usize, usize)], store: bool) -> Result<SharedSlice<'_>> {
        if store && !self.writable {
            return Err(Error::ReadOnly);
        }
        for &(offset, len) in ranges {
            self.at(offset, len, 1)?;
        }
        Ok(self.window.slice())
    }

    /// One `readv(2)` from `fd` straight into `ranges` (window offset, length), filled in
    /// order, as stores of the bytes read (a packet from a TUN device into a ring, with no
    /// private buffer between). On a map of an object on another host the bytes read are
    /// logged as written and posted at the next barrier. The outer error is the map's (a
    /// range outside the window, a read-only map, a lost connection: nothing was read); the
    /// inner one the system call's.
    pub fn read_from_fd(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        ranges: &[(usize, usize)],
    ) -> Result<std::io::Result<usize>> {
        let window = self.io_ranges(ranges, true)?;
        let read = || window.read_from_fd(fd, ranges).map_err(|e| Error::shared(e, "map"));
        match &self.window {
            Window::Direct(_) => read(),
            Window::Tracked(m) => {
                let mut outcome = Ok(Ok(0));
                m.tracked_ranges(ranges, || {
                    outcome = read();
                    match &outcome {
                        Ok(Ok(n)) => *n,
                        _ => 0,
                    }
                })?;
                outcome
            }
        }
    }

    /// One `writev(2)` of `ranges` (window offset, length) to `fd`, in order, straight from
    /// the window (a ring's packet into a TUN device). On a map of an object on another host
    /// each range is read through first, as [`Map::read_bytes`]. Errors as for
    /// [`Map::read_from_fd`].
    pub fn write_to_fd(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        ranges: &[(usize, usize)],
    ) -> Result<std::io::Result<usize>> {
        let window = self.io_ranges(ranges, false)?;
        if let Window::Tracked(m) = &self.window {
            for &(offset, len) in ranges {
                m.read_with(offset, len, || ())?;
            }
        }
        window.write_to_fd(fd, ranges).map_err(|e| Error::shared(e, "map"))
    }

    /// Fills `len` bytes at `offset` with `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<()> {
        let p = self.writable_at(offset, len, 1)?;
        let store = || p.fill(0, len, byte).expect(CHECKED);
        match &self.window {
            Window::Direct(_) => {
                store();
                Ok(())
            }
            Window::Tracked(m) => m.tracked(offset, len, store),
        }
    }

    /// Whether stores to the map reach their segment only when written through (a map of an
    /// object on another host: barrier, flush, release stores, sequence checks), rather
    /// than being the segment's own memory.
    pub fn is_written_through(&self) -> bool {
        !matches!(self.window, Window::Direct(_))
    }

    /// Orders every earlier store to the window before every later one (`SCIStoreBarrier`).
    /// On a map of an object on another host, posts every write made since the last
    /// barrier, in order, without waiting for them.
    #[inline]
    pub fn store_barrier(&self) {
        self.window.store_barrier();
    }

    /// Pushes buffered stores out (`SCIFlush`); on shared memory a store barrier. On a map
    /// of an object on another host, also waits until every write of this map is delivered
    /// (each wait bounded by 10 s); a failure is remembered for [`Map::flush_checked`] and
    /// sequences.
    pub fn flush(&self) {
        self.window.flush();
    }

    /// [`Map::flush`], then `Err` if a write or read of this map failed since the previous
    /// `flush_checked` (or since the map was made). Never fails on shared memory.
    pub fn flush_checked(&self) -> Result<()> {
        match &self.window {
            Window::Direct(_) => {
                memory::store_barrier();
                Ok(())
            }
            Window::Tracked(m) => m.flush_checked(),
        }
    }

    /// Makes `len` bytes at `offset` current (`SCICacheSync` with invalidate): on a map of an
    /// object on another host, flushes, then reads that range of the window again from the
    /// object, so that loads through [`Map::as_ptr`] see it. On a group's write map across
    /// hosts, flushes, then puts the range of this process's copy into the raw pointer's
    /// buffer. On shared memory the window is the object itself and this is a store barrier.
    pub fn refresh(&self, offset: usize, len: usize) -> Result<()> {
        self.at(offset, len, 1)?;
        match &self.window {
            Window::Direct(_) => {
                memory::store_barrier();
                Ok(())
            }
            Window::Tracked(m) => m.refresh(offset, len),
        }
    }

    /// A sequence for checking bursts of PIO through this map (`SCICreateMapSequence`).
    pub fn sequence(&self) -> Sequence {
        match &self.window {
            Window::Direct(_) => Sequence::new(self.origin.clone(), None),
            Window::Tracked(m) => Sequence::new(self.origin.clone(), Some(m.sequence())),
        }
    }
}
