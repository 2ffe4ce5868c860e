//! Files of the fabric directory: private creation, directory locks, atomic publication.

use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::cvt;

/// Creates `dir` (and parents) with mode 0700 if missing, and refuses a directory that is
/// not ours or a link somebody else made: the fabric's memory must not be open to other
/// users. A directory of ours that others may enter is set to exactly 0700.
pub fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = verify_own_dir(dir, effective_uid())?;
    if meta.mode() & 0o7777 != 0o700 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Checks, without changing anything, that an existing fabric directory may be read as
/// this user's: it is ours (root may read any user's), reached through no link of another
/// user. `NotFound` keeps its kind: a fabric nobody opened yet is empty, not an error.
pub fn verify_fabric_dir(dir: &Path) -> io::Result<()> {
    let me = effective_uid();
    match verify_own_dir(dir, me) {
        Err(e) if me == 0 && e.kind() == io::ErrorKind::PermissionDenied => fs::metadata(dir).map(drop),
        other => other.map(drop),
    }
}

/// The metadata of directory `dir` if it belongs to `me`; a link is followed only if `me`
/// made it (one made by somebody else in a shared directory such as /dev/shm is a squat).
pub fn verify_own_dir(dir: &Path, me: u32) -> io::Result<fs::Metadata> {
    let squatted = |what: String| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} {what}, not to this user (uid {me}): another user made it first; set LANES_DIR \
                 to a directory of yours, or have it removed",
                dir.display()
            ),
        )
    };
    let mut meta = fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        if meta.uid() != me {
            return Err(squatted(format!("is a symbolic link that belongs to uid {}", meta.uid())));
        }
        meta = fs::metadata(dir)?;
    }
    if !meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is {}, not a directory", dir.display(), type_name(&meta)),
        ));
    }
    if meta.uid() != me {
        return Err(squatted(format!("belongs to uid {}", meta.uid())));
    }
    Ok(meta)
}

/// An exclusive `flock` on a lock file, released on drop (or by the kernel if we die).
/// Serialises rare directory-level operations such as replacing a stale segment.
pub struct DirLock {
    _file: Held<File>,
}

impl DirLock {
    /// Blocks until the lock file `path` is locked exclusively.
    pub fn acquire(path: &Path) -> io::Result<DirLock> {
        let file = open_or_create(path)?;
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
    file: Held<File>,
    dir: PathBuf,
}

impl UnnamedFile {
    /// Creates an unnamed file of mode 0600 in `dir`, held where it opened (see [`Held`]).
    pub fn create(dir: &Path) -> io::Result<UnnamedFile> {
        let file = Held::make_here(|| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .mode(0o600)
                .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
                .open(dir)
        })?;
        Ok(UnnamedFile { file, dir: dir.to_path_buf() })
    }

    /// The open file, to size and fill in.
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Gives the file the name `name` in its directory. Fails with `AlreadyExists` if the
    /// name is taken: exactly one of several racing publishers wins.
    pub fn publish(self, name: &str) -> io::Result<Held<File>> {
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

/// How an existing file of the fabric directory is opened: never through a symlink (the
/// last component), never blocking (a FIFO or a device planted in the directory would block
/// `open` or the first read), not as a controlling terminal.
const SAFE_OPEN_FLAGS: libc::c_int = libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;

/// Opens an existing fabric file for reading (and writing if `writable`). Refuses, with an
/// error naming `path` and what was found there, a symlink, anything that is not a regular
/// file, and a file of another user: the checks are made on the open descriptor, so the
/// file cannot be swapped between check and use. `NotFound` keeps its kind for callers that
/// treat a missing file as "not there". The file is held where it opened (see [`Held`]).
pub fn open_existing(path: &Path, writable: bool) -> io::Result<Held<File>> {
    let file = Held::make_here(|| {
        OpenOptions::new()
            .read(true)
            .write(writable)
            .custom_flags(SAFE_OPEN_FLAGS)
            .open(path)
            .map_err(|e| open_error(path, e))
    })?;
    check_owned_regular(&file, path)?;
    Ok(file)
}

/// Opens `path` for reading and writing, creating it with mode 0600 if missing, with the
/// refusals of [`open_existing`]: a FIFO, a symlink or another user's file in its place is
/// an error naming it. The file is held where it opened (see [`Held`]).
pub fn open_or_create(path: &Path) -> io::Result<Held<File>> {
    let file = Held::make_here(|| {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(SAFE_OPEN_FLAGS)
            .open(path)
            .map_err(|e| open_error(path, e))
    })?;
    check_owned_regular(&file, path)?;
    Ok(file)
}

/// Opens a configuration file (read-only) without blocking and refuses anything but a
/// regular file. Unlike fabric files it may belong to another user (root's `/etc/lanes`),
/// and it may be reached through symlinks, as configuration files often are. The file is
/// held where it opened (see [`Held`]).
pub fn open_config(path: &Path) -> io::Result<Held<File>> {
    let file = Held::make_here(|| {
        OpenOptions::new().read(true).custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY).open(path)
    })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("is {}, not a regular file", type_name(&meta)),
        ));
    }
    Ok(file)
}

/// Why a file of the fabric directory could not be used: its path and the cause. Carried
/// inside an `io::Error` (same kind as the cause), so callers that match on the kind or
/// walk the error's sources still find the system error (`EMFILE` stays "out of resources").
#[derive(Debug)]
pub struct FileError {
    pub path: PathBuf,
    pub reason: FileProblem,
}

/// What was wrong with a fabric file.
#[derive(Debug)]
pub enum FileProblem {
    /// A system call failed.
    Os(io::Error),
    /// Not a regular file of the right user, or a link: a hostile or foreign file.
    Refused(String),
}

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.reason {
            FileProblem::Os(e) => write!(f, "{}: {e}", self.path.display()),
            FileProblem::Refused(why) => write!(f, "{} {why}", self.path.display()),
        }
    }
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.reason {
            FileProblem::Os(e) => Some(e),
            FileProblem::Refused(_) => None,
        }
    }
}

impl FileError {
    /// Why, without the path (for messages that name the path already).
    pub fn reason(&self) -> String {
        match &self.reason {
            FileProblem::Os(e) => e.to_string(),
            FileProblem::Refused(why) => why.clone(),
        }
    }

    /// The `FileError` inside `e`, if it carries one.
    pub fn of(e: &io::Error) -> Option<&FileError> {
        e.get_ref().and_then(|inner| inner.downcast_ref::<FileError>())
    }
}

fn os_error(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), FileError { path: path.to_path_buf(), reason: FileProblem::Os(e) })
}

fn refused(path: &Path, why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        FileError { path: path.to_path_buf(), reason: FileProblem::Refused(why) },
    )
}

/// Reads a secret file (a cluster secret, a host key): a regular file of this user that
/// nobody else may read or write (mode 0600 or stricter), opened without blocking and
/// checked on the descriptor, at most 64 KiB. The error is a sentence naming the file as
/// `what` ("host key").
pub fn read_private_file(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let shown = path.display();
    let file = open_config(path).map_err(|e| match e.kind() {
        io::ErrorKind::InvalidInput => format!("{what} {shown} is not a regular file"),
        _ => format!("{what} {shown}: {e}"),
    })?;
    let meta = file.metadata().map_err(|e| format!("{what} {shown}: {e}"))?;
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!("{what} {shown} has mode {mode:03o}: others may read it (chmod 600 {shown})"));
    }
    let me = effective_uid();
    if meta.uid() != me {
        return Err(format!("{what} {shown} belongs to uid {}, not to this user ({me})", meta.uid()));
    }
    let mut bytes = Vec::new();
    (&*file).take(64 << 10).read_to_end(&mut bytes).map_err(|e| format!("{what} {shown}: {e}"))?;
    Ok(bytes)
}

/// The open error with `path` and, for `ELOOP` under `O_NOFOLLOW`, the plain reason.
fn open_error(path: &Path, e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(libc::ENOENT) => e,
        Some(libc::ELOOP) => refused(path, "is a symbolic link; fabric files are never followed through links".into()),
        _ => os_error(path, e),
    }
}

/// Refuses a descriptor that is not a regular file of this user (or, for root, of the user
/// whose directory holds it). Both refusals are `InvalidData`: such a file is not a fabric
/// file, whatever it holds.
fn check_owned_regular(file: &File, path: &Path) -> io::Result<()> {
    let meta = file.metadata().map_err(|e| os_error(path, e))?;
    if !meta.is_file() {
        return Err(refused(path, format!("is {}, not a regular file", type_name(&meta))));
    }
    let me = effective_uid();
    // Root may read another user's directory (`lanes status`, `lanes cleanup` of it): the
    // files there must then be that directory's owner's.
    let owner_of_dir = || path.parent().and_then(|d| fs::symlink_metadata(d).ok()).map(|m| m.uid());
    if meta.uid() != me && !(me == 0 && owner_of_dir() == Some(meta.uid())) {
        return Err(refused(path, format!("belongs to uid {}, not to this user (uid {me})", meta.uid())));
    }
    Ok(())
}

/// What kind of file `meta` describes, for error messages ("a FIFO").
pub fn type_name(meta: &fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "a special file"
    }
}

fn effective_uid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Reserves the first `len` bytes of `file` in its file system (`fallocate`), so that a
/// mapping of them can never fault for want of space: on tmpfs a sparse page is allocated
/// at the first touch, and a full tmpfs answers that touch with SIGBUS. Here a full file
/// system is `StorageFull` instead, before anything is mapped. Grows the file to `len`.
pub fn reserve(file: &File, len: u64) -> io::Result<()> {
    let Ok(len_arg) = libc::off_t::try_from(len) else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{len} bytes do not fit a file offset")));
    };
    if len == 0 {
        return Ok(());
    }
    loop {
        // posix_fallocate is fallocate where the file system has it, and writes the blocks
        // where it does not (slower, the same guarantee).
        // SAFETY: the fd is open for the duration of the call; it only changes the file's
        // allocation, and returns its error instead of setting errno.
        match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len_arg) } {
            0 => return Ok(()),
            libc::EINTR => continue,
            libc::ENOSPC => {
                return Err(io::Error::new(
                    io::ErrorKind::StorageFull,
                    format!("{len} bytes could not be reserved: the fabric directory's file system is full"),
                ))
            }
            errno => return Err(io::Error::from_raw_os_error(errno)),
        }
    }
}

/// A descriptor of the library's, whose number a preloaded library's `close` refuses to
/// the program ([`held_by_library`]) from the moment it is made ([`Held::make`],
/// [`Held::make_here`]) until it is closed. One kept for long (an object's file, a
/// connection to the daemon) is also moved out of the program's way ([`held_floor`]).
///
/// A program that closes a descriptor twice (iperf3 closes its data sockets twice at the
/// end of a test: harmless on its own, the second close fails with `EBADF`) would close
/// one of ours instead if the number went to a descriptor we opened in between, from a
/// thread of ours while the program ran. The preloaded library answers such a close with
/// the `EBADF` the program would have had without us, and a close of the program's waits
/// while a descriptor of ours is being made or closed ([`while_held_stand_still`]), so
/// none is caught between its making and its bit.
#[derive(Debug)]
pub struct Held<T: AsRawFd> {
    /// Dropped by hand, inside the guard that keeps a program's range close off it.
    inner: std::mem::ManuallyDrop<T>,
}

/// Held descriptors being made or closed (from the call that makes one until its bit is
/// set, from its bit's clearing until it is closed), and a program's closes under way
/// ([`while_held_stand_still`]): never both at once, so a close of the program's never
/// takes a descriptor the library is making or has just let go of (its number set in
/// neither the table nor the kernel's view of ours).
///
/// The library's side has the right of way: a close waits for the changes counted before
/// it, and a change only for the closes already past that wait (each one system call),
/// so that a program closing in a loop cannot keep the library from its descriptors.
static CHANGING_HELD: AtomicU32 = AtomicU32::new(0);
static PROGRAM_CLOSING: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// This thread is inside [`changing_held`]: a close it makes is the library's own (a
    /// preloaded library sees it as the program's where its guard is not set, as in a
    /// destructor), which must not wait for the change it is part of.
    static CHANGING_HERE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// The longest either side waits for the other: a thread that died mid-way (the other
/// threads of a process that forked) never finishes, and a close goes on without it.
const STAND_STILL_LIMIT: std::time::Duration = std::time::Duration::from_millis(100);

/// Waits until `count` is zero; false if [`STAND_STILL_LIMIT`] passed first.
fn wait_for_zero(count: &AtomicU32) -> bool {
    let start = std::time::Instant::now();
    while count.load(Ordering::SeqCst) != 0 {
        if start.elapsed() >= STAND_STILL_LIMIT {
            return false;
        }
        std::thread::yield_now();
    }
    true
}

/// Runs `change` (making or closing a held descriptor) while no close of the program's
/// runs.
fn changing_held<R>(change: impl FnOnce() -> R) -> R {
    // Counted first, then the closes looked at (both sequentially consistent, as a close
    // counts itself before it looks at the changes): a close that counted itself after
    // this backs off, one that did before is past its check and is waited out.
    CHANGING_HELD.fetch_add(1, Ordering::SeqCst);
    wait_for_zero(&PROGRAM_CLOSING);
    CHANGING_HERE.with(|c| c.set(c.get() + 1));
    let r = change();
    CHANGING_HERE.with(|c| c.set(c.get() - 1));
    CHANGING_HELD.fetch_sub(1, Ordering::SeqCst);
    r
}

/// Runs `close` (a close of one of the program's descriptors, or of a range around the
/// held ones, which it lists with [`held_between`]) while no held descriptor is being made
/// or closed: a library thread's new descriptor cannot land on the number or in the range
/// between the check and the close.
pub fn while_held_stand_still<R>(close: impl FnOnce() -> R) -> R {
    if CHANGING_HERE.with(|c| c.get()) > 0 {
        return close();
    }
    loop {
        PROGRAM_CLOSING.fetch_add(1, Ordering::SeqCst);
        if CHANGING_HELD.load(Ordering::SeqCst) == 0 {
            break;
        }
        // A change under way goes first.
        PROGRAM_CLOSING.fetch_sub(1, Ordering::SeqCst);
        if !wait_for_zero(&CHANGING_HELD) {
            PROGRAM_CLOSING.fetch_add(1, Ordering::SeqCst);
            break;
        }
    }
    let r = close();
    PROGRAM_CLOSING.fetch_sub(1, Ordering::SeqCst);
    r
}

/// In a child after fork: only the forking thread is left, so nothing is being made or
/// closed whatever the counts the other threads left behind say.
pub fn after_fork_in_child() {
    CHANGING_HELD.store(0, Ordering::SeqCst);
    PROGRAM_CLOSING.store(0, Ordering::SeqCst);
}

/// An object's file, held.
pub type HeldFile = Held<File>;

/// Descriptor numbers of [`Held`] descriptors, one bit each (numbers past the table are
/// not guarded).
static HELD: [std::sync::atomic::AtomicU64; HELD_WORDS] = [const { std::sync::atomic::AtomicU64::new(0) }; HELD_WORDS];
const HELD_WORDS: usize = 1024;

fn held_bit(fd: i32) -> Option<(usize, u64)> {
    let fd = usize::try_from(fd).ok()?;
    (fd < HELD_WORDS * 64).then(|| (fd / 64, 1u64 << (fd % 64)))
}

/// Whether descriptor `fd` is one the library holds now.
pub fn held_by_library(fd: i32) -> bool {
    held_bit(fd).is_some_and(|(w, b)| HELD[w].load(std::sync::atomic::Ordering::Acquire) & b != 0)
}

/// The descriptors the library holds now from `first` to `last` (inclusive), lowest first.
pub fn held_between(first: u32, last: u32) -> Vec<i32> {
    let mut held = Vec::new();
    let top = (HELD_WORDS * 64 - 1) as u32;
    if first > last || first > top {
        return held;
    }
    let words = first as usize / 64..=last.min(top) as usize / 64;
    for (w, word) in HELD.iter().enumerate().take(*words.end() + 1).skip(*words.start()) {
        let mut bits = word.load(std::sync::atomic::Ordering::Acquire);
        while bits != 0 {
            let fd = (w * 64) as u32 + bits.trailing_zeros();
            bits &= bits - 1;
            if (first..=last).contains(&fd) {
                held.push(fd as i32);
            }
        }
    }
    held
}

impl<T: AsRawFd + FromRawFd> Held<T> {
    /// A descriptor made by `make` and kept for long: moved to a number at or above
    /// [`held_floor`] when one is free (else it keeps its own) and held, all while no close
    /// of the program's runs.
    pub fn make(make: impl FnOnce() -> io::Result<T>) -> io::Result<Held<T>> {
        changing_held(|| make().map(|inner| mark_held(out_of_the_way(inner))))
    }

    /// This descriptor, made for a moment, kept for long after all: moved to a number at
    /// or above [`held_floor`] when one is free. (Its old number is closed: a POSIX record
    /// lock of the process's on the file would go with it, so move before locking.)
    pub fn moved_out_of_the_way(self) -> Held<T> {
        changing_held(|| {
            let Some(moved) = duplicate_above_floor(self.as_raw_fd()) else { return self };
            let mut old = std::mem::ManuallyDrop::new(self);
            // SAFETY: `old` is never dropped or used again.
            unsafe { old.unmark_and_close() };
            // SAFETY: `moved` is a new descriptor nobody else owns.
            mark_held(unsafe { T::from_raw_fd(moved) })
        })
    }
}

impl<T: AsRawFd> Held<T> {
    /// A descriptor made by `make` and kept for a moment (a record read, a lock taken):
    /// held at the number it was made at, while no close of the program's runs.
    pub fn make_here(make: impl FnOnce() -> io::Result<T>) -> io::Result<Held<T>> {
        changing_held(|| make().map(mark_held))
    }
}

/// `inner` held where it is: its number set in the table (inside [`changing_held`]).
fn mark_held<T: AsRawFd>(inner: T) -> Held<T> {
    if let Some((w, b)) = held_bit(inner.as_raw_fd()) {
        HELD[w].fetch_or(b, std::sync::atomic::Ordering::AcqRel);
    }
    Held { inner: std::mem::ManuallyDrop::new(inner) }
}

/// A held duplicate of whatever `fd` names now, made at or above [`held_floor`] in one
/// step: a duplicate kept for long never takes the lowest free number, which the program
/// expects its own next descriptor to get.
pub fn held_duplicate(fd: i32) -> io::Result<Held<std::os::fd::OwnedFd>> {
    let duplicate_from = |lowest: i32| {
        // SAFETY: F_DUPFD_CLOEXEC on any number has no memory-safety preconditions.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, lowest) };
        // SAFETY: `dup` is a new descriptor nobody else owns.
        cvt(dup).map(|dup| unsafe { std::os::fd::OwnedFd::from_raw_fd(dup) })
    };
    match changing_held(|| duplicate_from(held_floor().max(0)).map(mark_held)) {
        // No number free at or above the floor: the lowest free one, moved when it can be.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EMFILE | libc::EINVAL)) => Held::make(|| duplicate_from(0)),
        made => made,
    }
}

impl<T: AsRawFd> std::ops::Deref for Held<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T: AsRawFd> std::ops::DerefMut for Held<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: AsRawFd> Held<T> {
    /// Clears the number's bit and closes it (inside [`changing_held`]).
    ///
    /// # Safety
    /// Called once; `self.inner` is not used after.
    unsafe fn unmark_and_close(&mut self) {
        // Before the descriptor closes (its number may be the next open's at once).
        if let Some((w, b)) = held_bit(self.inner.as_raw_fd()) {
            HELD[w].fetch_and(!b, std::sync::atomic::Ordering::AcqRel);
        }
        // SAFETY: once, as the caller guarantees.
        unsafe { std::mem::ManuallyDrop::drop(&mut self.inner) };
    }
}

impl<T: AsRawFd> Drop for Held<T> {
    fn drop(&mut self) {
        // SAFETY: dropped once, here.
        changing_held(|| unsafe { self.unmark_and_close() });
    }
}

/// The lowest number a held descriptor takes: half the soft limit on descriptors (at most
/// what the table of held numbers covers). Programs count on their own descriptors'
/// numbers staying low: an event loop sized for them (wrk's holds 10 plus 3 per
/// connection) refuses a socket whose number the library's descriptors pushed past it.
fn held_floor() -> i32 {
    static FLOOR: std::sync::OnceLock<i32> = std::sync::OnceLock::new();
    *FLOOR.get_or_init(|| {
        let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes one rlimit into ours.
        let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 { lim.rlim_cur } else { 0 };
        (soft / 2).min((HELD_WORDS * 64 - 1) as u64) as i32
    })
}

/// A duplicate of our descriptor `fd` at or above [`held_floor`], if `fd` is under it and
/// a number is free there.
fn duplicate_above_floor(fd: i32) -> Option<i32> {
    let floor = held_floor();
    if floor <= 0 || fd >= floor {
        return None;
    }
    // SAFETY: F_DUPFD_CLOEXEC on our own descriptor; no memory is involved.
    let moved = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, floor) };
    (moved >= 0).then_some(moved)
}

/// `inner` with its descriptor at or above [`held_floor`], if a number is free there.
fn out_of_the_way<T: AsRawFd + FromRawFd>(inner: T) -> T {
    let Some(moved) = duplicate_above_floor(inner.as_raw_fd()) else { return inner };
    drop(inner);
    // SAFETY: `moved` is a new descriptor nobody else owns (the old one closed just above).
    unsafe { T::from_raw_fd(moved) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_file_number_is_high_and_known_until_the_file_closes() {
        let file = File::open("/dev/null").unwrap();
        let low = file.as_raw_fd();
        let held = HeldFile::make(|| Ok(file)).unwrap();
        let fd = held.as_raw_fd();
        if held_floor() > low {
            assert!(fd >= held_floor(), "moved out of the program's way: {low} became {fd}");
        }
        assert!(held_by_library(fd));
        assert!(held.metadata().is_ok(), "the file is reachable through the guard");
        drop(held);
        assert!(!held_by_library(fd));
        assert!(!held_by_library(-1) && !held_by_library(i32::MAX), "numbers outside the table are never held");
    }

    /// A held duplicate never takes the lowest free number, even for a moment: a program
    /// closing that number a second time must find nothing of ours there.
    #[test]
    fn a_held_duplicate_is_made_high_and_outlives_a_close_of_the_low_numbers() {
        let original = File::open("/dev/null").unwrap();
        // The lowest free number after the original's: where a duplicate made low would go.
        let probe = File::open("/dev/null").unwrap();
        let lowest_free = probe.as_raw_fd();
        drop(probe);
        let dup = held_duplicate(original.as_raw_fd()).unwrap();
        let fd = dup.as_raw_fd();
        if held_floor() > lowest_free {
            assert!(fd >= held_floor(), "made at {fd}, under the floor {}", held_floor());
        }
        assert!(held_by_library(fd));
        drop(original);
        // SAFETY: F_GETFD on a number; no memory is involved.
        assert!(unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0, "the duplicate is open on its own");
        drop(dup);
        assert!(!held_by_library(fd));
    }

    #[test]
    fn held_numbers_in_a_range_are_listed_lowest_first() {
        let held: Vec<HeldFile> = (0..3).map(|_| HeldFile::make(|| File::open("/dev/null")).unwrap()).collect();
        let fds: Vec<i32> = held.iter().map(|h| h.as_raw_fd()).collect();
        let (lo, hi) = (*fds.iter().min().unwrap() as u32, *fds.iter().max().unwrap() as u32);
        let listed = held_between(lo, hi);
        for fd in &fds {
            assert!(listed.contains(fd), "{fd} missing from {listed:?}");
        }
        assert!(listed.windows(2).all(|w| w[0] < w[1]), "{listed:?}");
        assert!(!held_between(lo + 1, hi).contains(&(lo as i32)), "the range's bounds hold");
        assert!(held_between(hi, lo).is_empty() || lo == hi);
        assert!(held_between(u32::MAX - 1, u32::MAX).is_empty(), "past the table: nothing");
    }
}
