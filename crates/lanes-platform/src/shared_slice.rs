//! A checked slice of memory another process (or a NIC) may write at any time.
//!
//! [`SharedSlice`] is an address range that carries its length and whether it may be
//! written (the model is rust-vmm vm-memory's `VolatileSlice`). Every access names an offset
//! into it and is checked before memory is touched: a range that does not fit, a scalar at a
//! misaligned address, or a store into a read-only range is an error, and nothing outside
//! the slice is read or written. Accesses are the ones of [`memory`]:
//! volatile scalars, acquire/release words, and copies in and out of private buffers, never
//! a `&`/`&mut` to the bytes. The raw pointer arithmetic into mapped memory of the layers
//! above lives here.

use std::fmt;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::memory::{self, Scalar};

/// Why an access through a [`SharedSlice`] was refused; memory was not touched.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SliceError {
    /// `offset..offset + len` does not fit the slice's `size` bytes.
    OutOfBounds { offset: usize, len: usize, size: usize },
    /// The address at `offset` is not aligned to `align` bytes.
    Misaligned { offset: usize, align: usize },
    /// A store into a read-only slice.
    ReadOnly,
    /// A copy between two ranges that overlap.
    Overlap,
}

impl fmt::Display for SliceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SliceError::OutOfBounds { offset, len, size } => {
                write!(f, "range {offset}..+{len} is outside the {size} bytes of shared memory")
            }
            SliceError::Misaligned { offset, align } => {
                write!(f, "offset {offset} of shared memory is not aligned to {align} bytes")
            }
            SliceError::ReadOnly => f.write_str("store into read-only shared memory"),
            SliceError::Overlap => f.write_str("copy between overlapping ranges of shared memory"),
        }
    }
}

impl std::error::Error for SliceError {}

impl From<SliceError> for std::io::Error {
    fn from(e: SliceError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}

/// `len` bytes of peer-writable memory from `ptr`, valid for `'a`; readable, and writable
/// when [`SharedSlice::is_writable`]. Cheap to copy: it is a bounded address range, not an
/// owner (the owner, a mapping or a buffer, keeps the memory alive for `'a`).
#[derive(Clone, Copy)]
pub struct SharedSlice<'a> {
    ptr: NonNull<u8>,
    len: usize,
    writable: bool,
    /// Borrows the memory for `'a`, as shared and mutable behind it (never a plain `&[u8]`).
    _memory: PhantomData<&'a std::cell::UnsafeCell<[u8]>>,
}

// SAFETY: a SharedSlice is an address range; every access through it is volatile, atomic or
// a copy, which is what memory written concurrently by other threads or processes allows.
unsafe impl Send for SharedSlice<'_> {}
// SAFETY: as above; `&SharedSlice` gives no access that `SharedSlice` does not.
unsafe impl Sync for SharedSlice<'_> {}

impl fmt::Debug for SharedSlice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedSlice")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("writable", &self.writable)
            .finish()
    }
}

impl<'a> SharedSlice<'a> {
    /// A read-write slice of `len` bytes at `ptr`.
    ///
    /// # Safety
    /// For all of `'a`, `ptr..ptr + len` must be one allocation or mapping that stays
    /// valid for reads and writes, and must be touched by this process only through raw
    /// pointers (volatile or atomic accesses, copies), never through a Rust reference to the
    /// bytes. `ptr` is non-null (a dangling, aligned pointer when `len` is 0).
    pub unsafe fn from_raw_parts(ptr: *mut u8, len: usize) -> SharedSlice<'a> {
        debug_assert!(!ptr.is_null());
        // SAFETY: the caller promises a non-null pointer.
        SharedSlice { ptr: unsafe { NonNull::new_unchecked(ptr) }, len, writable: true, _memory: PhantomData }
    }

    /// A read-only slice of `len` bytes at `ptr`: stores through it are refused.
    ///
    /// # Safety
    /// As for [`SharedSlice::from_raw_parts`], except that the range need only be valid
    /// for reads.
    pub unsafe fn from_raw_parts_read_only(ptr: *const u8, len: usize) -> SharedSlice<'a> {
        // SAFETY: the caller's promise covers reads; `writable: false` refuses every store.
        let s = unsafe { Self::from_raw_parts(ptr.cast_mut(), len) };
        SharedSlice { writable: false, ..s }
    }

    /// A slice of no bytes: every access but an empty one is refused. For a fallback that
    /// must not fail.
    pub fn empty() -> SharedSlice<'a> {
        SharedSlice { ptr: NonNull::dangling(), len: 0, writable: false, _memory: PhantomData }
    }

    /// Bytes in the slice.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the slice has no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether stores through the slice are allowed.
    #[inline]
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// The same range, read-only.
    #[inline]
    pub fn read_only(self) -> SharedSlice<'a> {
        SharedSlice { writable: false, ..self }
    }

    /// The first byte: for registration with a NIC, FFI, and programs that do their own
    /// loads and stores. Using it is the user's own `unsafe`.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// `Ok` if `offset..offset + len` fits the slice.
    #[inline]
    pub fn check_range(&self, offset: usize, len: usize) -> Result<(), SliceError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(SliceError::OutOfBounds { offset, len, size: self.len }),
        }
    }

    /// The address of `offset..offset + len`, checked to fit, to be aligned to `align` and,
    /// when `store`, to be writable.
    #[inline]
    fn at(&self, offset: usize, len: usize, align: usize, store: bool) -> Result<*mut u8, SliceError> {
        self.check_range(offset, len)?;
        // The address, not the offset: a slice need not start aligned (a window starts at
        // its object offset's place within a page).
        if (self.ptr.as_ptr() as usize).wrapping_add(offset) % align != 0 {
            return Err(SliceError::Misaligned { offset, align });
        }
        if store && !self.writable {
            return Err(SliceError::ReadOnly);
        }
        // SAFETY: offset <= len (checked), so the result is inside the slice or one past it.
        Ok(unsafe { self.ptr.as_ptr().add(offset) })
    }

    /// `len` bytes from `offset`, as a slice of their own (as writable as this one).
    #[inline]
    pub fn subslice(&self, offset: usize, len: usize) -> Result<SharedSlice<'a>, SliceError> {
        let p = self.at(offset, len, 1, false)?;
        // SAFETY: the range lies inside this slice (checked), whose contract covers it for 'a.
        let s = unsafe { SharedSlice::from_raw_parts(p, len) };
        Ok(SharedSlice { writable: self.writable, ..s })
    }

    /// The bytes from `offset` to the end.
    #[inline]
    pub fn offset(&self, offset: usize) -> Result<SharedSlice<'a>, SliceError> {
        self.subslice(
            offset,
            self.len.checked_sub(offset).ok_or(SliceError::OutOfBounds { offset, len: 0, size: self.len })?,
        )
    }

    /// Whether the address at `offset` (inside or one past the slice) is aligned to `align`.
    pub fn is_aligned(&self, offset: usize, align: usize) -> Result<bool, SliceError> {
        match self.at(offset, 0, align, false) {
            Ok(_) => Ok(true),
            Err(SliceError::Misaligned { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Reads the naturally aligned scalar at `offset` with one volatile load.
    #[inline]
    pub fn read<T: Scalar>(&self, offset: usize) -> Result<T, SliceError> {
        let p = self.at(offset, size_of::<T>(), align_of::<T>(), false)?;
        // SAFETY: in bounds and aligned (checked); valid for reads for 'a (the contract).
        Ok(unsafe { memory::read(p.cast::<T>()) })
    }

    /// Writes the naturally aligned scalar at `offset` with one volatile store.
    #[inline]
    pub fn write<T: Scalar>(&self, offset: usize, value: T) -> Result<(), SliceError> {
        let p = self.at(offset, size_of::<T>(), align_of::<T>(), true)?;
        // SAFETY: in bounds, aligned and writable (checked); valid for 'a (the contract).
        unsafe { memory::write(p.cast::<T>(), value) };
        Ok(())
    }

    /// Acquire load of the 8-aligned word at `offset`.
    #[inline]
    pub fn load_acquire_u64(&self, offset: usize) -> Result<u64, SliceError> {
        let p = self.at(offset, 8, 8, false)?;
        // SAFETY: in bounds and 8-aligned (checked); the contract allows only atomic,
        // volatile and copy accesses to the memory.
        Ok(unsafe { memory::load_acquire_u64(p.cast()) })
    }

    /// Release store of the 8-aligned word at `offset`.
    #[inline]
    pub fn store_release_u64(&self, offset: usize, value: u64) -> Result<(), SliceError> {
        let p = self.at(offset, 8, 8, true)?;
        // SAFETY: in bounds, 8-aligned and writable (checked).
        unsafe { memory::store_release_u64(p.cast(), value) };
        Ok(())
    }

    /// Acquire load of the 4-aligned word at `offset`.
    #[inline]
    pub fn load_acquire_u32(&self, offset: usize) -> Result<u32, SliceError> {
        let p = self.at(offset, 4, 4, false)?;
        // SAFETY: in bounds and 4-aligned (checked).
        Ok(unsafe { memory::load_acquire_u32(p.cast()) })
    }

    /// Release store of the 4-aligned word at `offset`.
    #[inline]
    pub fn store_release_u32(&self, offset: usize, value: u32) -> Result<(), SliceError> {
        let p = self.at(offset, 4, 4, true)?;
        // SAFETY: in bounds, 4-aligned and writable (checked).
        unsafe { memory::store_release_u32(p.cast(), value) };
        Ok(())
    }

    /// The 8-aligned word at `offset` as an atomic, for read-modify-write operations
    /// (compare-exchange, fetch-add). Requires a writable slice.
    #[inline]
    pub fn atomic_u64(&self, offset: usize) -> Result<&'a AtomicU64, SliceError> {
        let p = self.at(offset, 8, 8, true)?;
        // SAFETY: in bounds, 8-aligned and writable for 'a (checked, and the contract); an
        // atomic is the one kind of reference shared memory allows, as every access through
        // it is atomic.
        Ok(unsafe { AtomicU64::from_ptr(p.cast()) })
    }

    /// The 4-aligned word at `offset` as an atomic (futex words, counters). Requires a
    /// writable slice.
    #[inline]
    pub fn atomic_u32(&self, offset: usize) -> Result<&'a AtomicU32, SliceError> {
        let p = self.at(offset, 4, 4, true)?;
        // SAFETY: as in `atomic_u64`, for a 4-aligned word.
        Ok(unsafe { AtomicU32::from_ptr(p.cast()) })
    }

    /// As [`SharedSlice::atomic_u64`], for a word the caller has proved in bounds, aligned
    /// and writable: a constant offset inside a fixed-size header that the slice was checked,
    /// once when made, to hold (read-write, at an aligned address). The check is still made;
    /// should the proof be wrong, the word is a process-private one, not memory outside the
    /// slice, and there is no panic (a library preloaded into programs must never unwind
    /// into C). Debug builds assert.
    #[inline]
    pub fn header_u64(&self, offset: usize) -> &'a AtomicU64 {
        static DETACHED: AtomicU64 = AtomicU64::new(0);
        match self.atomic_u64(offset) {
            Ok(w) => w,
            Err(e) => {
                debug_assert!(false, "header word: {e}");
                &DETACHED
            }
        }
    }

    /// As [`SharedSlice::header_u64`], for a 4-aligned word.
    #[inline]
    pub fn header_u32(&self, offset: usize) -> &'a AtomicU32 {
        static DETACHED: AtomicU32 = AtomicU32::new(0);
        match self.atomic_u32(offset) {
            Ok(w) => w,
            Err(e) => {
                debug_assert!(false, "header word: {e}");
                &DETACHED
            }
        }
    }

    /// Copies `src` into the slice at `offset` (streaming stores for large copies, see
    /// [`memory::copy_to_shared`]).
    #[inline]
    pub fn copy_from(&self, offset: usize, src: &[u8]) -> Result<(), SliceError> {
        let p = self.at(offset, src.len(), 1, true)?;
        // SAFETY: the range is in bounds and writable (checked); `src` is private memory,
        // never a reference into a SharedSlice, so the two do not overlap.
        unsafe { memory::copy_to_shared(p, src) };
        Ok(())
    }

    /// Fetches the cache lines of `len` bytes from `offset` for writing ahead of the
    /// stores (see [`memory::prefetch_for_write`]): a writer about to fill lines a reader
    /// on another CPU last held gets them while it does other work, not at its next locked
    /// instruction. The part outside the slice (or in a read-only slice) is left alone.
    #[inline]
    pub fn prefetch_for_write(&self, offset: usize, len: usize) {
        if !self.writable || offset >= self.len {
            return;
        }
        let end = self.len.min(offset.saturating_add(len));
        let mut at = offset;
        while at < end {
            // The address is inside the slice (at < end <= len), and a prefetch never faults.
            memory::prefetch_for_write(self.ptr.as_ptr().wrapping_add(at));
            at += 64;
        }
    }

    /// Copies `dst.len()` bytes of the slice at `offset` into `dst`.
    #[inline]
    pub fn copy_to(&self, offset: usize, dst: &mut [u8]) -> Result<(), SliceError> {
        let p = self.at(offset, dst.len(), 1, false)?;
        // SAFETY: the range is in bounds (checked); `dst` is private memory.
        unsafe { memory::copy_from_shared(dst, p) };
        Ok(())
    }

    /// Copies `len` bytes from offset `from` to offset `to` of this slice; the ranges may
    /// overlap (a move).
    #[inline]
    pub fn copy_within(&self, from: usize, to: usize, len: usize) -> Result<(), SliceError> {
        let src = self.at(from, len, 1, false)?;
        let dst = self.at(to, len, 1, true)?;
        // SAFETY: both ranges are in bounds (checked), the destination writable; `copy`
        // allows overlap.
        unsafe { std::ptr::copy(src, dst, len) };
        Ok(())
    }

    /// Copies `len` bytes at `offset` of this slice to `dst_offset` of `dst`, with
    /// streaming stores from `streaming_from` bytes (see [`memory::copy_shared_to_shared`]).
    /// The two ranges must not overlap.
    #[inline]
    pub fn copy_to_shared(
        &self,
        offset: usize,
        dst: &SharedSlice<'_>,
        dst_offset: usize,
        len: usize,
        streaming_from: usize,
    ) -> Result<(), SliceError> {
        let src = self.at(offset, len, 1, false)?;
        let to = dst.at(dst_offset, len, 1, true)?;
        let (s, d) = (src as usize, to as usize);
        if len > 0 && s < d + len && d < s + len {
            return Err(SliceError::Overlap);
        }
        // SAFETY: both ranges are in bounds (checked), the destination writable, and they do
        // not overlap (checked).
        unsafe { memory::copy_shared_to_shared(to, src, len, streaming_from) };
        Ok(())
    }

    /// Copies `len` bytes at `offset` of this slice into raw memory at `dst`; the two may
    /// overlap (a move). For callers that hold only a pointer (a DMA descriptor's).
    ///
    /// # Safety
    /// `dst` must be valid for writes of `len` bytes.
    #[inline]
    pub unsafe fn copy_to_raw(&self, offset: usize, dst: *mut u8, len: usize) -> Result<(), SliceError> {
        let src = self.at(offset, len, 1, false)?;
        // SAFETY: the source is in bounds (checked); the caller vouches for `dst`.
        unsafe { std::ptr::copy(src, dst, len) };
        Ok(())
    }

    /// Copies `len` bytes of raw memory at `src` into this slice at `offset`; the two may
    /// overlap (a move).
    ///
    /// # Safety
    /// `src` must be valid for reads of `len` bytes.
    #[inline]
    pub unsafe fn copy_from_raw(&self, offset: usize, src: *const u8, len: usize) -> Result<(), SliceError> {
        let dst = self.at(offset, len, 1, true)?;
        // SAFETY: the destination is in bounds and writable (checked); the caller vouches
        // for `src`.
        unsafe { std::ptr::copy(src, dst, len) };
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `byte`.
    #[inline]
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), SliceError> {
        let p = self.at(offset, len, 1, true)?;
        // SAFETY: the range is in bounds and writable (checked).
        unsafe { std::ptr::write_bytes(p, byte, len) };
        Ok(())
    }

    /// The iovecs of `ranges` (offset, length) of this slice, every one checked (and
    /// writable when `store`); at most [`IO_RANGES`].
    fn iovecs(&self, ranges: &[(usize, usize)], store: bool) -> Result<Vec<libc::iovec>, SliceError> {
        if ranges.len() > IO_RANGES {
            return Err(SliceError::OutOfBounds { offset: 0, len: ranges.len(), size: IO_RANGES });
        }
        ranges
            .iter()
            .map(|&(offset, len)| {
                let p = self.at(offset, len, 1, store)?;
                Ok(libc::iovec { iov_base: p.cast(), iov_len: len })
            })
            .collect()
    }

    /// One `readv(2)` from `fd` into `ranges` (offset, length) of this slice, filled in
    /// order: the bytes go from the file straight into this memory, with no copy through a
    /// private buffer (a TUN device's packet into a ring). The outer error is a range that
    /// does not fit or is not writable (nothing was read); the inner one is the system
    /// call's.
    pub fn read_from_fd(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        ranges: &[(usize, usize)],
    ) -> Result<std::io::Result<usize>, SliceError> {
        use std::os::fd::AsRawFd;
        let iov = self.iovecs(ranges, true)?;
        // SAFETY: every iovec is a checked, writable range of this slice, valid for 'a; the
        // kernel writes them as a peer would (no Rust reference to the bytes exists).
        let n = unsafe { libc::readv(fd.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int) };
        Ok(if n < 0 { Err(std::io::Error::last_os_error()) } else { Ok(n as usize) })
    }

    /// One `writev(2)` of `ranges` (offset, length) of this slice to `fd`, in order: the
    /// bytes go from this memory straight to the file (a ring's packet into a TUN device).
    /// A peer writing the ranges meanwhile changes what is written, never what is read
    /// outside them. Errors as for [`SharedSlice::read_from_fd`].
    pub fn write_to_fd(
        &self,
        fd: std::os::fd::BorrowedFd<'_>,
        ranges: &[(usize, usize)],
    ) -> Result<std::io::Result<usize>, SliceError> {
        use std::os::fd::AsRawFd;
        let iov = self.iovecs(ranges, false)?;
        // SAFETY: every iovec is a checked range of this slice, valid for reads for 'a; the
        // kernel only reads them.
        let n = unsafe { libc::writev(fd.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int) };
        Ok(if n < 0 { Err(std::io::Error::last_os_error()) } else { Ok(n as usize) })
    }
}

/// The most ranges one [`SharedSlice::read_from_fd`] or [`SharedSlice::write_to_fd`] takes.
pub const IO_RANGES: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::Mapping;

    /// A slice over a fresh anonymous mapping of `len` bytes with guard bytes set to 0xEE
    /// around `inner..inner + n`, to prove that refused accesses touch nothing.
    fn guarded(map: &Mapping, inner: usize, n: usize) -> SharedSlice<'_> {
        map.slice().fill(0, map.len(), 0xEE).unwrap();
        map.slice().subslice(inner, n).unwrap()
    }

    fn untouched(map: &Mapping) -> bool {
        let mut all = vec![0u8; map.len()];
        map.slice().copy_to(0, &mut all).unwrap();
        all.iter().all(|&b| b == 0xEE)
    }

    #[test]
    fn scalars_and_words_round_trip_in_bounds() {
        let map = Mapping::anonymous(4096).unwrap();
        let s = map.slice();
        assert_eq!(s.len(), 4096);
        assert!(s.is_writable());
        s.write::<u8>(3, 7).unwrap();
        s.write::<u16>(4, 0x1234).unwrap();
        s.write::<f64>(8, 1.5).unwrap();
        assert_eq!(s.read::<u8>(3), Ok(7));
        assert_eq!(s.read::<u16>(4), Ok(0x1234));
        assert_eq!(s.read::<f64>(8), Ok(1.5));
        s.store_release_u64(4088, u64::MAX - 1).unwrap();
        assert_eq!(s.load_acquire_u64(4088), Ok(u64::MAX - 1));
        s.store_release_u32(16, 99).unwrap();
        assert_eq!(s.load_acquire_u32(16), Ok(99));
        assert_eq!(s.atomic_u64(24).unwrap().fetch_add(5, std::sync::atomic::Ordering::AcqRel), 0);
        assert_eq!(s.read::<u64>(24), Ok(5));
        assert_eq!(s.atomic_u32(32).unwrap().swap(9, std::sync::atomic::Ordering::AcqRel), 0);
        assert_eq!(s.read::<u32>(32), Ok(9));
    }

    #[test]
    fn file_io_moves_bytes_in_checked_ranges_only() {
        use std::os::fd::AsFd;
        let map = Mapping::anonymous(4096).unwrap();
        let s = guarded(&map, 64, 100);
        let (mut r, w) = std::os::unix::net::UnixStream::pair().unwrap();
        let data: Vec<u8> = (0..30u8).collect();
        std::io::Write::write_all(&mut &w, &data).unwrap();
        // 10 bytes at 90, then 20 at 0: a record that wraps around a ring's end.
        assert_eq!(s.read_from_fd(r.as_fd(), &[(90, 10), (0, 40)]).unwrap().unwrap(), 30);
        let mut got = [0u8; 10];
        s.copy_to(90, &mut got).unwrap();
        assert_eq!(&got, &data[..10]);
        let mut got = [0u8; 20];
        s.copy_to(0, &mut got).unwrap();
        assert_eq!(&got, &data[10..]);
        assert_eq!(s.write_to_fd(w.as_fd(), &[(90, 10), (0, 20)]).unwrap().unwrap(), 30);
        let mut back = [0u8; 30];
        std::io::Read::read_exact(&mut r, &mut back).unwrap();
        assert_eq!(&back[..], &data[..]);
        // A range past the end, or a store into a read-only slice: refused before any I/O.
        let oob = Some(SliceError::OutOfBounds { offset: 95, len: 10, size: 100 });
        assert_eq!(s.read_from_fd(r.as_fd(), &[(0, 4), (95, 10)]).err(), oob);
        assert_eq!(s.write_to_fd(w.as_fd(), &[(95, 10)]).err(), oob);
        assert_eq!(s.read_only().read_from_fd(r.as_fd(), &[(0, 4)]).err(), Some(SliceError::ReadOnly));
        let mut all = vec![0u8; map.len()];
        map.slice().copy_to(0, &mut all).unwrap();
        assert!(all[..64].iter().chain(&all[164..]).all(|&b| b == 0xEE), "nothing outside the slice changed");
    }

    #[test]
    fn out_of_bounds_requests_are_errors_and_touch_nothing() {
        let map = Mapping::anonymous(4096).unwrap();
        let s = guarded(&map, 64, 100);
        let oob = |offset, len| Some(SliceError::OutOfBounds { offset, len, size: 100 });
        assert_eq!(s.write::<u8>(100, 1).err(), oob(100, 1));
        assert_eq!(s.write::<u64>(96, 1).err(), oob(96, 8));
        assert_eq!(s.read::<u32>(usize::MAX).err(), oob(usize::MAX, 4));
        assert_eq!(s.store_release_u64(usize::MAX - 3, 1).err(), oob(usize::MAX - 3, 8));
        assert_eq!(s.copy_from(90, &[1; 11]).err(), oob(90, 11));
        assert_eq!(s.copy_to(0, &mut [0; 101]).err(), oob(0, 101));
        assert_eq!(s.fill(1, 100, 0).err(), oob(1, 100));
        assert_eq!(s.copy_within(0, 50, 51).err(), oob(50, 51));
        assert_eq!(s.subslice(50, 51).err(), oob(50, 51));
        assert_eq!(s.subslice(usize::MAX, 2).err(), oob(usize::MAX, 2));
        assert_eq!(s.offset(101).err(), oob(101, 0));
        assert_eq!(s.atomic_u64(96).err(), oob(96, 8));
        let mut dst = [0u8; 200];
        // SAFETY: the destination is a private buffer of the right size.
        assert_eq!(unsafe { s.copy_to_raw(0, dst.as_mut_ptr(), 101) }.err(), oob(0, 101));
        // SAFETY: the source is a private buffer of the right size.
        assert_eq!(unsafe { s.copy_from_raw(1, dst.as_ptr(), 100) }.err(), oob(1, 100));
        assert!(untouched(&map), "a refused access wrote outside or inside the slice");
        // The edges themselves are fine; an empty range at the end too.
        s.fill(0, 100, 1).unwrap();
        assert_eq!(s.subslice(100, 0).map(|t| t.len()), Ok(0));
        assert_eq!(s.offset(40).map(|t| t.len()), Ok(60));
        let mut all = vec![0u8; 4096];
        map.slice().copy_to(0, &mut all).unwrap();
        assert!(all[..64].iter().chain(&all[164..]).all(|&b| b == 0xEE));
        assert!(all[64..164].iter().all(|&b| b == 1));
    }

    #[test]
    fn misaligned_requests_are_errors_by_address() {
        let map = Mapping::anonymous(4096).unwrap();
        // A slice starting at an odd address: offset 3 is 4-aligned, offset 0 is not.
        let s = guarded(&map, 1, 200);
        let mis = |offset, align| Some(SliceError::Misaligned { offset, align });
        assert_eq!(s.read::<u32>(0).err(), mis(0, 4));
        assert_eq!(s.write::<u16>(2, 1).err(), mis(2, 2));
        assert_eq!(s.load_acquire_u64(3).err(), mis(3, 8));
        assert_eq!(s.store_release_u64(3, 1).err(), mis(3, 8));
        assert_eq!(s.store_release_u32(1, 1).err(), mis(1, 4));
        assert_eq!(s.atomic_u64(0).err(), mis(0, 8));
        assert_eq!(s.atomic_u32(0).err(), mis(0, 4));
        assert_eq!(s.is_aligned(7, 8), Ok(true));
        assert_eq!(s.is_aligned(8, 8), Ok(false));
        assert!(untouched(&map));
        s.store_release_u64(7, 5).unwrap();
        s.write::<u32>(3, 6).unwrap();
        assert_eq!(s.read::<u64>(7), Ok(5));
        assert_eq!(s.read::<u32>(3), Ok(6));
    }

    #[test]
    fn stores_into_a_read_only_slice_are_refused() {
        let map = Mapping::anonymous(4096).unwrap();
        let s = guarded(&map, 0, 64).read_only();
        assert!(!s.is_writable());
        assert_eq!(s.write::<u8>(0, 1), Err(SliceError::ReadOnly));
        assert_eq!(s.store_release_u32(0, 1), Err(SliceError::ReadOnly));
        assert_eq!(s.copy_from(0, &[1]), Err(SliceError::ReadOnly));
        assert_eq!(s.fill(0, 1, 1), Err(SliceError::ReadOnly));
        assert_eq!(s.copy_within(0, 8, 8), Err(SliceError::ReadOnly));
        assert_eq!(s.atomic_u64(0).map(|_| ()), Err(SliceError::ReadOnly));
        assert!(!s.subslice(8, 8).unwrap().is_writable());
        assert_eq!(s.read::<u8>(0), Ok(0xEE));
        assert!(untouched(&map));
    }

    #[test]
    fn copies_between_and_within_slices() {
        let map = Mapping::anonymous(8192).unwrap();
        let s = map.slice();
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 13 % 251) as u8).collect();
        s.copy_from(10, &data).unwrap();
        let (a, b) = (s.subslice(0, 4096).unwrap(), s.subslice(4096, 4096).unwrap());
        a.copy_to_shared(10, &b, 100, 1000, usize::MAX).unwrap();
        a.copy_to_shared(10, &b, 2000, 1000, 0).unwrap();
        let mut got = vec![0u8; 1000];
        b.copy_to(100, &mut got).unwrap();
        assert_eq!(got, data);
        b.copy_to(2000, &mut got).unwrap();
        assert_eq!(got, data);
        assert_eq!(a.copy_to_shared(0, &a, 500, 1000, usize::MAX), Err(SliceError::Overlap));
        // A move within one slice, overlapping.
        s.copy_within(10, 20, 1000).unwrap();
        s.copy_to(20, &mut got).unwrap();
        assert_eq!(got, data);
        let mut raw = vec![0u8; 1000];
        // SAFETY: `raw` is a private buffer of 1000 bytes.
        unsafe { s.copy_to_raw(20, raw.as_mut_ptr(), 1000) }.unwrap();
        assert_eq!(raw, data);
        // SAFETY: as above, read.
        unsafe { s.copy_from_raw(5000, raw.as_ptr(), 1000) }.unwrap();
        s.copy_to(5000, &mut got).unwrap();
        assert_eq!(got, data);
    }

    #[test]
    fn header_words_are_the_checked_words() {
        let map = Mapping::anonymous(4096).unwrap();
        let s = map.slice();
        s.header_u64(8).store(7, std::sync::atomic::Ordering::Relaxed);
        s.header_u32(20).store(9, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(s.read::<u64>(8), Ok(7));
        assert_eq!(s.read::<u32>(20), Ok(9));
    }

    #[test]
    #[cfg(not(debug_assertions))]
    fn a_header_word_outside_the_slice_is_a_private_word() {
        let map = Mapping::anonymous(4096).unwrap();
        let s = guarded(&map, 0, 64);
        s.header_u64(64).store(1, std::sync::atomic::Ordering::Relaxed);
        s.header_u32(2).store(1, std::sync::atomic::Ordering::Relaxed);
        assert!(untouched(&map));
    }

    #[test]
    fn errors_say_what_was_refused() {
        let e = SliceError::OutOfBounds { offset: 8, len: 4, size: 10 };
        assert_eq!(e.to_string(), "range 8..+4 is outside the 10 bytes of shared memory");
        assert_eq!(std::io::Error::from(e).kind(), std::io::ErrorKind::InvalidInput);
    }
}
