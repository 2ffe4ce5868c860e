//! Files of the fabric directory: private creation, directory locks, atomic publication.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::cvt;

/// Creates `dir` (and parents) with mode 0700 if missing, and refuses a directory that is
/// not ours or that others may write: the fabric's memory must not be open to other users.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = fs::metadata(dir)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if !meta.is_dir() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a directory"));
    }
    if meta.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("owned by uid {}, not by this user (uid {me})", meta.uid()),
        ));
    }
    if meta.mode() & 0o022 != 0 {
        // Tighten what we own rather than fail: group/other write would let others plant files.
        fs::set_permissions(dir, fs::Permissions::from_mode(meta.mode() & 0o7755 & !0o022))?;
    }
    Ok(())
}

/// An exclusive `flock` on a lock file, released on drop (or by the kernel if we die).
/// Serialises rare directory-level operations such as replacing a stale segment.
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Blocks until the lock file `path` is locked exclusively.
    pub fn acquire(path: &Path) -> io::Result<DirLock> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)?;
        loop {
            // SAFETY: the fd is open for the duration of the call.
            match cvt(unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) }) {
                Ok(_) => return Ok(DirLock { _file: file }),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// A file created without a name (`O_TMPFILE`) in a directory, filled in, then given its
/// name atomically with `link`: nobody ever sees it half-initialised, and a crash leaves
/// nothing behind.
pub struct UnnamedFile {
    file: File,
    dir: PathBuf,
}

impl UnnamedFile {
    /// Creates an unnamed file of mode 0600 in `dir`.
    pub fn create(dir: &Path) -> io::Result<UnnamedFile> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
            .open(dir)?;
        Ok(UnnamedFile { file, dir: dir.to_path_buf() })
    }

    /// The open file, to size and fill in.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Gives the file the name `name` in its directory. Fails with `AlreadyExists` if the
    /// name is taken: exactly one of several racing publishers wins.
    pub fn publish(self, name: &str) -> io::Result<File> {
        let from = CString::new(format!("/proc/self/fd/{}", self.file.as_raw_fd()))
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let to = CString::new(self.dir.join(name).into_os_string().into_encoded_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: both paths are valid NUL-terminated strings that outlive the call.
        cvt(unsafe {
            libc::linkat(libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::AT_SYMLINK_FOLLOW)
        })?;
        Ok(self.file)
    }
}

/// Opens an existing fabric file for reading and writing, refusing symlinks.
pub fn open_existing(path: &Path, writable: bool) -> io::Result<File> {
    OpenOptions::new().read(true).write(writable).custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW).open(path)
}
