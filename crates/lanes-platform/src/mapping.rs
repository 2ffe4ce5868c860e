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

    /// Backs `len` bytes from `offset` (page aligned, inside the mapping, writable) with
    /// memory now (`MADV_POPULATE_WRITE`), so that writing them later cannot fault for want
    /// of room: a sparse file on a full file system answers here with `StorageFull`, where a
    /// first store into the page would have raised SIGBUS.
    pub fn populate_for_writing(&self, offset: usize, len: usize) -> io::Result<()> {
        let page = crate::page_size();
        let inside = offset.checked_add(len).is_some_and(|end| end <= self.len);
        if !inside || offset % page != 0 || self.access != Access::ReadWrite {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot populate {len} bytes at {offset} of a {}-byte mapping", self.len),
            ));
        }
        if len == 0 {
            return Ok(());
        }
        loop {
            // SAFETY: the range is inside this mapping (checked above); populating changes no
            // byte of it, it only allocates and maps the pages.
            let r = unsafe { libc::madvise(self.ptr.as_ptr().add(offset).cast(), len, libc::MADV_POPULATE_WRITE) };
            if r == 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                Some(libc::ENOMEM) | Some(libc::EFAULT) | Some(libc::ENOSPC) => {
                    return Err(io::Error::new(
                        io::ErrorKind::StorageFull,
                        format!("{len} bytes could not be backed: the file system is full ({e})"),
                    ))
                }
                _ => return Err(e),
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn populating_backs_a_sparse_range_and_refuses_one_outside_the_mapping() {
        let page = crate::page_size();
        let file = tempfile_in_shm();
        file.set_len(4 * page as u64).unwrap();
        let map = Mapping::map(file.as_fd(), 0, 4 * page, Access::ReadWrite).unwrap();
        let blocks = || std::os::unix::fs::MetadataExt::blocks(&file.metadata().unwrap());
        assert_eq!(blocks(), 0, "sparse until backed");
        map.populate_for_writing(page, 2 * page).unwrap();
        assert_eq!(blocks() * 512, 2 * page as u64, "exactly the range asked for is backed");
        for (offset, len) in [(page, 4 * page), (1, page), (5 * page, 0)] {
            let e = map.populate_for_writing(offset, len).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{offset}+{len}: {e}");
        }
        let ro = Mapping::map(file.as_fd(), 0, page, Access::ReadOnly).unwrap();
        assert_eq!(ro.populate_for_writing(0, page).unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }

    /// An unnamed file on /dev/shm (tmpfs, so blocks are pages actually held).
    fn tempfile_in_shm() -> std::fs::File {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .mode(0o600)
            .open("/dev/shm")
            .expect("an unnamed file on /dev/shm")
    }
}
