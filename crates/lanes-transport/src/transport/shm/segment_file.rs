//! One segment as a file: created unnamed, initialised, then published under its name;
//! opened and validated by peers; its data mapped at any in-bounds window.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;

use super::layout::{HeaderSnapshot, HeaderView, HEADER_PAGE};
use super::FabricPaths;
use crate::platform::files::{open_existing, reserve, FileError, HeldFile, UnnamedFile};
use crate::platform::mapping::{Access, Mapping};
use crate::platform::page_size;
use crate::platform::SharedSlice;

/// Why an existing segment file could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// No file by that name.
    Missing,
    /// A file that is not a valid segment (never mapped beyond its header).
    Corrupt(String),
    Io(io::Error),
}

/// Caller memory that becomes the segment's data (re-backed in place by the file).
#[derive(Clone, Copy, Debug)]
pub struct RegisteredMemory {
    pub addr: NonNull<u8>,
    pub len: usize,
}

/// An open segment file with its header page mapped.
#[derive(Debug)]
pub struct SegmentFile {
    file: HeldFile,
    _header_map: Mapping,
    header: HeaderView,
    snap: HeaderSnapshot,
    path: PathBuf,
    inode: u64,
}

/// A window of segment data, mapped: bytes `start..start + len` of `mapping`.
#[derive(Debug)]
pub struct DataMapping {
    mapping: Mapping,
    start: usize,
    len: usize,
}

impl DataMapping {
    /// The first `len` bytes of `mapping` (memory that is not an object file's data, such as
    /// a cross-host reflective member's replica). `len` is clamped to the mapping.
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub fn whole(mapping: Mapping, len: usize) -> DataMapping {
        let len = len.min(mapping.len());
        DataMapping { mapping, start: 0, len }
    }

    /// Maps `len` (> 0) bytes of `fd` from `file_off`, which need not be page aligned. The
    /// caller has checked the range against what the file holds.
    pub fn of_file(fd: BorrowedFd<'_>, file_off: u64, len: u64, access: Access) -> io::Result<DataMapping> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "an empty window"));
        }
        let page = page_size() as u64;
        let aligned = file_off - file_off % page;
        let delta = (file_off - aligned) as usize;
        let len = usize::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let map_len = len.checked_add(delta).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let mapping = Mapping::map(fd, aligned, map_len, access)?;
        Ok(DataMapping { mapping, start: delta, len })
    }

    /// The window as a checked slice (read-only if it was mapped so).
    #[inline]
    pub fn slice(&self) -> SharedSlice<'_> {
        // Made to fit the mapping by both constructors.
        self.mapping.slice().subslice(self.start, self.len).expect("a data mapping lies inside its mapping")
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.slice().as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

fn round_up(v: u64, to: u64) -> u64 {
    v.div_ceil(to) * to
}

impl SegmentFile {
    /// Creates the segment file for `snap` (whose `data_offset` is filled in here) and
    /// publishes it. `AlreadyExists` means the id is taken. With `registered`, the caller's
    /// memory is copied into the file and the file is mapped over it in place.
    ///
    /// # Safety
    /// If `registered` is given, its range must be memory the caller owns, mapped, and not
    /// written by anyone else while this runs.
    pub unsafe fn create(
        paths: &FabricPaths,
        mut snap: HeaderSnapshot,
        registered: Option<RegisteredMemory>,
    ) -> io::Result<SegmentFile> {
        let page = page_size() as u64;
        let dir = paths.node_dir(snap.node_id);
        let unnamed = UnnamedFile::create(&dir)?;
        let file = unnamed.file();
        let (data_offset, registered_pages) = match registered {
            Some(r) => {
                let addr = r.addr.as_ptr() as u64;
                let start = addr - addr % page;
                let end = round_up(addr + r.len as u64, page);
                (HEADER_PAGE as u64 + (addr - start), Some((start, end)))
            }
            None => (HEADER_PAGE as u64, None),
        };
        snap.data_offset = data_offset;
        let file_len = round_up(data_offset + snap.segment_size, page);
        check_free_space(&dir, file_len)?;
        // Reserved, not sparse: a full tmpfs is an error here rather than SIGBUS at the first
        // store into a page that cannot be had.
        reserve(file, file_len)?;
        let header_map = Mapping::map(file.as_fd(), 0, HEADER_PAGE, Access::ReadWrite)?;
        // SAFETY: header_map is HEADER_PAGE bytes, page aligned, and lives in self.
        let header = unsafe { HeaderView::new(header_map.as_ptr()) };
        header.initialise(&snap);
        if let Some((start, end)) = registered_pages {
            let len = (end - start) as usize;
            // SAFETY: the caller owns these whole pages (contract), so they are readable.
            let current = unsafe { std::slice::from_raw_parts(start as *const u8, len) };
            file.write_all_at(current, HEADER_PAGE as u64)?;
        }
        let name = FabricPaths::object_file_name(snap.kind, snap.segment_id);
        let file = unnamed.publish(&name)?;
        let inode = file.metadata()?.ino();
        // The caller's pages are re-backed only once the name is ours: a creation that fails
        // (id taken) must leave the caller's memory as it was, e.g. still another segment's.
        if let Some((start, end)) = registered_pages {
            let len = (end - start) as usize;
            let addr = NonNull::new(start as *mut u8).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput));
            // SAFETY: the caller owns the pages and nobody writes them now; the file holds an
            // identical copy, so replacing the pages changes no byte the caller sees.
            let mapped = addr.and_then(|addr| unsafe {
                Mapping::map_fixed(file.as_fd(), HEADER_PAGE as u64, addr, len, Access::ReadWrite)
            });
            match mapped {
                // The pages belong to the caller: they stay mapped after the segment is gone.
                Ok(m) => m.leak(),
                Err(e) => {
                    // Not yet available or shared, so nobody uses it: withdraw the name.
                    let path = dir.join(&name);
                    if std::fs::symlink_metadata(&path).is_ok_and(|m| m.ino() == inode) {
                        let _ = std::fs::remove_file(&path);
                    }
                    return Err(e);
                }
            }
        }
        let file = file.moved_out_of_the_way();
        Ok(SegmentFile { file, _header_map: header_map, header, snap, path: dir.join(name), inode })
    }

    /// Opens and validates the file of object (kind, node, id).
    pub fn open(paths: &FabricPaths, kind: u32, node: u32, segment: u32) -> Result<SegmentFile, OpenError> {
        let path = paths.object(kind, node, segment);
        Self::open_path(&path, kind, node, segment)
    }

    /// Opens and validates an object file at an explicit path.
    pub fn open_path(path: &Path, kind: u32, node: u32, segment: u32) -> Result<SegmentFile, OpenError> {
        let file = match open_existing(path, true) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(OpenError::Missing),
            // A link, a FIFO, a device or another user's file where an object should be.
            // The error names the path already: the reason alone.
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                return Err(OpenError::Corrupt(FileError::of(&e).map_or_else(|| e.to_string(), FileError::reason)))
            }
            Err(e) => return Err(OpenError::Io(e)),
        };
        let meta = file.metadata().map_err(OpenError::Io)?;
        if meta.len() < HEADER_PAGE as u64 {
            return Err(OpenError::Corrupt(format!("{} bytes, shorter than the header", meta.len())));
        }
        let header_map = Mapping::map(file.as_fd(), 0, HEADER_PAGE, Access::ReadWrite).map_err(OpenError::Io)?;
        // SAFETY: header_map is HEADER_PAGE bytes, page aligned, and lives in the result.
        let header = unsafe { HeaderView::new(header_map.as_ptr()) };
        let snap = header.validate(kind, node, segment, meta.len()).map_err(OpenError::Corrupt)?;
        let file = file.moved_out_of_the_way();
        Ok(SegmentFile { file, _header_map: header_map, header, snap, path: path.to_path_buf(), inode: meta.ino() })
    }

    /// Maps `len` bytes of segment data from `offset`. The range must already be checked
    /// against the segment size; this re-checks it so no caller can map outside the segment.
    pub fn map_data(&self, offset: u64, len: u64, access: Access) -> io::Result<DataMapping> {
        let end = offset.checked_add(len).filter(|&e| e <= self.snap.segment_size && len > 0);
        if end.is_none() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "window outside the segment"));
        }
        DataMapping::of_file(self.file.as_fd(), self.snap.data_offset + offset, len, access)
    }

    pub fn header(&self) -> &HeaderView {
        &self.header
    }

    pub fn snapshot(&self) -> &HeaderSnapshot {
        &self.snap
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether `path` still names this very file (not a newer one with the same id).
    pub fn is_current_at(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).map(|m| m.ino() == self.inode).unwrap_or(false)
    }
}

fn check_free_space(dir: &Path, bytes: u64) -> io::Result<()> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: statvfs is plain old data; zeroed is a valid value for the kernel to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: c is a valid C string and st is valid for writes.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Ok(()); // cannot tell: let the kernel decide
    }
    let free = (st.f_bavail as u64).saturating_mul(st.f_frsize as u64);
    if bytes > free {
        return Err(io::Error::new(
            io::ErrorKind::StorageFull,
            format!("the fabric directory's file system is full: {bytes} bytes asked, {free} free"),
        ));
    }
    Ok(())
}
