//! The floor: the shared-memory protocols of [`super::shm`] on a plain shared mapping,
//! through raw pointers, with no Lanes API anywhere. Whatever PIO costs above this is the
//! price of Lanes; whatever this costs is the machine's.
//!
//! The client creates a file in `/dev/shm` (a tmpfs, as a `MAP_SHARED | MAP_ANONYMOUS`
//! mapping would be), both sides map it, and the client unlinks it once the peer has it.
//!
//! `lanes bench` runs it as the path `floor` at every size (and `--check-floor` at
//! [`ONE_WORD`] against `lanes-spin-floor`); `lanes pingpong`'s floor row is its latency
//! protocol at [`ONE_WORD`], the file handed over through the ping-pong's mailboxes
//! ([`FloorFile`], [`open`]).

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::bench::paths::path::{ClientOffer, ClientPath, PeerPath, SetupEnv};
use crate::bench::paths::shm::{receiver_bytes, sender_bytes, Mem, ShmClient, ShmPeer};

/// One shared mapping, unmapped when the last view goes.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; every access through a
// view is atomic or a copy, and concurrent access is what shared memory is for.
unsafe impl Send for Mapping {}
// SAFETY: as above; &Mapping hands out nothing but the address.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly what mmap returned, and no view outlives the Arc.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// A shared mapping of a whole file (or anonymous memory), cut into views.
pub(crate) struct RawRegion {
    map: Arc<Mapping>,
}

impl RawRegion {
    fn map(fd: Option<&File>, len: usize) -> std::io::Result<RawRegion> {
        use std::os::fd::AsRawFd;
        if len == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty mapping"));
        }
        let (flags, raw) = match fd {
            Some(f) => (libc::MAP_SHARED | libc::MAP_POPULATE, f.as_raw_fd()),
            None => (libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_POPULATE, -1),
        };
        // SAFETY: a fresh mapping at an address the kernel picks; fd is open (or -1 with
        // MAP_ANONYMOUS) for the duration of the call.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, raw, 0) };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(RawRegion { map: Arc::new(Mapping { ptr: p.cast(), len }) })
    }

    /// Shared anonymous memory (shared with threads and forked children).
    #[cfg(test)]
    pub(crate) fn anonymous(len: usize) -> std::io::Result<RawRegion> {
        Self::map(None, len)
    }

    /// A new private file of `len` bytes in a memory file system, mapped; returns its path.
    pub(crate) fn create_file(len: usize) -> std::io::Result<(RawRegion, PathBuf)> {
        let shm = Path::new("/dev/shm");
        let dirs = [shm.to_path_buf(), std::env::temp_dir()];
        let mut last = None;
        for dir in dirs.iter().filter(|d| d.is_dir()) {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            let path = dir.join(format!("lanes-bench-floor-{}-{}", std::process::id(), nanos.as_nanos()));
            let f = std::fs::OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&path);
            match f {
                Ok(f) => {
                    // Reserved, so that a full tmpfs is an error here rather than SIGBUS.
                    let region = lanes::platform::files::reserve(&f, len as u64).and_then(|_| Self::map(Some(&f), len));
                    return match region {
                        Ok(r) => Ok((r, path)),
                        Err(e) => {
                            let _ = std::fs::remove_file(&path);
                            Err(e)
                        }
                    };
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| std::io::Error::other("no /dev/shm and no temporary directory")))
    }

    /// Maps the file at `path`, which must hold exactly `len` bytes.
    pub(crate) fn open_file(path: &Path, len: usize) -> std::io::Result<RawRegion> {
        let f = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
        let actual = f.metadata()?.len();
        if actual != len as u64 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} holds {actual} bytes, {len} expected", path.display()),
            ));
        }
        Self::map(Some(&f), len)
    }

    /// The `len` bytes at `off`, if inside the region and page aligned.
    pub(crate) fn view(&self, off: usize, len: usize) -> Option<RawView> {
        let end = off.checked_add(len)?;
        if end > self.map.len || off % 4096 != 0 {
            return None;
        }
        // SAFETY: off <= the mapping's length (checked).
        let base = unsafe { self.map.ptr.add(off) };
        Some(RawView { base, len, _map: self.map.clone() })
    }
}

/// A page-aligned window of a [`RawRegion`]: loads, stores and copies by raw pointer.
pub(crate) struct RawView {
    base: *mut u8,
    len: usize,
    _map: Arc<Mapping>,
}

// SAFETY: see `Mapping`: the view is an address range of a mapping kept alive by the Arc.
unsafe impl Send for RawView {}

#[cold]
fn out_of_range(off: usize, len: usize, size: usize) -> String {
    format!("access of {len} bytes at {off} outside a {size}-byte region, or misaligned")
}

impl RawView {
    #[inline(always)]
    fn at(&self, off: usize, len: usize, align: usize) -> Result<*mut u8, String> {
        if off.checked_add(len).is_some_and(|e| e <= self.len) && off % align == 0 {
            // SAFETY: off + len <= len of the view (checked).
            Ok(unsafe { self.base.add(off) })
        } else {
            Err(out_of_range(off, len, self.len))
        }
    }
}

impl Mem for RawView {
    #[inline(always)]
    fn load_u64(&self, off: usize) -> Result<u64, String> {
        let p = self.at(off, 8, 8)?;
        // SAFETY: in bounds and 8-aligned (the view is page aligned; checked); both processes
        // access these words only atomically.
        Ok(unsafe { AtomicU64::from_ptr(p.cast()) }.load(Ordering::Acquire))
    }

    #[inline(always)]
    fn store_u64(&self, off: usize, v: u64) -> Result<(), String> {
        let p = self.at(off, 8, 8)?;
        // SAFETY: as for load_u64.
        unsafe { AtomicU64::from_ptr(p.cast()) }.store(v, Ordering::Release);
        Ok(())
    }

    #[inline(always)]
    fn load_u32(&self, off: usize) -> Result<u32, String> {
        let p = self.at(off, 4, 4)?;
        // SAFETY: in bounds and 4-aligned (checked); accessed only atomically.
        Ok(unsafe { AtomicU32::from_ptr(p.cast()) }.load(Ordering::Acquire))
    }

    #[inline(always)]
    fn store_u32(&self, off: usize, v: u32) -> Result<(), String> {
        let p = self.at(off, 4, 4)?;
        // SAFETY: as for load_u32.
        unsafe { AtomicU32::from_ptr(p.cast()) }.store(v, Ordering::Release);
        Ok(())
    }

    #[inline(always)]
    fn put(&self, off: usize, src: &[u8]) -> Result<(), String> {
        let p = self.at(off, src.len(), 1)?;
        // SAFETY: the destination range is in bounds (checked) and in shared memory, so it
        // cannot overlap `src`; the protocol gives the range to the writer alone.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        Ok(())
    }

    #[inline(always)]
    fn get(&self, off: usize, dst: &mut [u8]) -> Result<(), String> {
        let p = self.at(off, dst.len(), 1)?;
        // SAFETY: the source range is in bounds (checked) and cannot overlap private `dst`.
        unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }
}

/// Removes the file on drop: once the peer has mapped it, or if set-up fails.
struct Unlink(PathBuf);

impl Drop for Unlink {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The floor's smallest message: the 8-byte sequence word alone each way, no copy. It is
/// what `lanes-spin-floor` moves, so the size `--check-floor` compares and `lanes pingpong`'s
/// floor.
pub(crate) const ONE_WORD: usize = 8;

/// The client's side of the floor until the peer has mapped the file: the file, made and
/// mapped, for messages up to `max` bytes.
pub(crate) struct FloorFile {
    region: RawRegion,
    file: Unlink,
    max: usize,
}

impl FloorFile {
    /// A new file for the protocols with messages up to `max` bytes.
    pub(crate) fn create(max: usize) -> Result<FloorFile, String> {
        let len = sender_bytes(max) + receiver_bytes(max);
        let (region, path) =
            RawRegion::create_file(len).map_err(|e| format!("creating the floor's shared file: {e}"))?;
        Ok(FloorFile { region, file: Unlink(path), max })
    }

    /// What the peer maps the file by ([`open`]): one line, its length and path.
    pub(crate) fn offer_text(&self) -> String {
        format!("{} {}", self.region.map.len, self.file.0.display())
    }

    /// The client's side of the protocols, once the peer has mapped the file: the file's name
    /// goes now, its memory when both sides have dropped their views.
    pub(crate) fn into_client(self) -> Result<ShmClient<RawView>, String> {
        let a = sender_bytes(self.max);
        let mine = self.region.view(0, a).ok_or("floor region too small")?;
        let theirs = self.region.view(a, receiver_bytes(self.max)).ok_or("floor region too small")?;
        drop(self.file);
        Ok(ShmClient::new(mine, theirs, self.max))
    }
}

/// The peer's side of the protocols, with messages up to `max` bytes, over the file that
/// the client's [`FloorFile::offer_text`] names.
pub(crate) fn open(max: usize, offer: &str) -> Result<ShmPeer<RawView>, String> {
    let (len, path) = offer.split_once(' ').ok_or_else(|| format!("bad floor offer {offer:?}"))?;
    let len: usize = len.parse().map_err(|_| format!("bad floor offer {offer:?}"))?;
    let (a, b) = (sender_bytes(max), receiver_bytes(max));
    if len != a + b {
        return Err(format!("the floor file holds {len} bytes, {} expected", a + b));
    }
    let region = RawRegion::open_file(Path::new(path), len).map_err(|e| format!("mapping {path}: {e}"))?;
    let mine = region.view(a, b).ok_or("floor region too small")?;
    let theirs = region.view(0, a).ok_or("floor region too small")?;
    Ok(ShmPeer::new(mine, theirs, max))
}

/// The path `floor`'s client side: [`FloorFile`] through the runner's set-up.
pub(crate) fn client(env: &SetupEnv) -> Result<Box<dyn ClientOffer>, String> {
    Ok(Box::new(FloorFile::create(env.max_size)?))
}

impl ClientOffer for FloorFile {
    fn offer(&self) -> String {
        self.offer_text()
    }

    fn accept(self: Box<Self>, _reply: &str) -> Result<Box<dyn ClientPath>, String> {
        Ok(Box::new(self.into_client()?))
    }
}

/// The path `floor`'s peer side: [`open`] through the runner's set-up.
pub(crate) fn peer(env: &SetupEnv, offer: &str) -> Result<(Box<dyn PeerPath>, String), String> {
    Ok((Box::new(open(env.max_size, offer)?), "mapped".into()))
}
