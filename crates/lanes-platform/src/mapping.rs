//! Owned `mmap` regions of shared files (and anonymous memory registered for RMA).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use crate::shared_slice::SharedSlice;

/// Whether a mapping may be written. Read-only is enforced by the page tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    ReadOnly,
    ReadWrite,
}

/// A shared mapping of part of a file, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    access: Access,
}

// SAFETY: a Mapping is a plain address range; all access goes through raw pointers whose
// users synchronise as shared memory requires, so moving or sharing the owner is sound.
unsafe impl Send for Mapping {}
// SAFETY: as above; &Mapping only exposes the address and length.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from `offset`, which must be page aligned. `len` > 0.
    pub fn map(fd: BorrowedFd<'_>, offset: u64, len: usize, access: Access) -> io::Result<Mapping> {
        // SAFETY: a fresh mapping at an address the kernel chooses touches no existing memory.
        unsafe { Self::map_at(fd, offset, len, access, None) }
    }

    /// A private, zero-filled, read-write anonymous mapping of `len` bytes (> 0), its pages
    /// populated at once (memory registered for RMA, which some providers need backed).
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        // SAFETY: a fresh anonymous mapping at an address the kernel chooses touches no
        // existing memory.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapping { ptr, len, access: Access::ReadWrite })
    }

    /// Maps over the existing pages at `addr` (`MAP_FIXED`).
    ///
    /// # Safety
    /// `addr..addr+len` must be page aligned, owned by the caller, and not in use by anything
    /// that would be harmed by its contents being replaced with the file's.
    pub unsafe fn map_fixed(
        fd: BorrowedFd<'_>,
        offset: u64,
        addr: NonNull<u8>,
        len: usize,
        access: Access,
    ) -> io::Result<Mapping> {
        // SAFETY: the caller guarantees the range may be replaced.
        unsafe { Self::map_at(fd, offset, len, access, Some(addr)) }
    }

    unsafe fn map_at(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        access: Access,
        fixed: Option<NonNull<u8>>,
    ) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        let prot = match access {
            Access::ReadOnly => libc::PROT_READ,
            Access::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
        };
        let (addr, flags) = match fixed {
            Some(a) => (a.as_ptr().cast(), libc::MAP_SHARED | libc::MAP_FIXED),
            None => (std::ptr::null_mut(), libc::MAP_SHARED),
        };
        let off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        // SAFETY: mmap validates its arguments; with MAP_FIXED the caller vouched for the range.
        let p = unsafe { libc::mmap(addr, len, prot, flags, fd.as_raw_fd(), off) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapping { ptr, len, access })
    }

    /// The mapping as a checked slice, read-only if the mapping is.
    pub fn slice(&self) -> SharedSlice<'_> {
        // SAFETY: the range is this mapping's, mapped for as long as the borrow of self, and
        // readable (writable only when mapped so); the API hands out no references into it.
        unsafe {
            match self.access {
                Access::ReadWrite => SharedSlice::from_raw_parts(self.ptr.as_ptr(), self.len),
                Access::ReadOnly => SharedSlice::from_raw_parts_read_only(self.ptr.as_ptr(), self.len),
            }
        }
    }

    /// Whether the mapping may be written.
    pub fn access(&self) -> Access {
        self.access
    }

    /// First byte of the mapping.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: empty mappings are refused.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Gives up ownership: the pages stay mapped for ever (used for caller-registered memory,
    /// which belongs to the caller after the segment is gone).
    pub fn leak(self) {
        std::mem::forget(self);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this range, mapped by us; nothing borrows into it (the API hands
        // out no references, only copies and raw pointers documented to die with the map).
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}
