//! Process identity and liveness.
//!
//! A process that opens the fabric as node N writes a record `procs/<N>-<pid>` and holds a
//! POSIX record lock on it for as long as it lives; the kernel drops the lock the instant
//! the process dies (kill -9 included), so "is the lock held?" is the truth about liveness.
//! Record locks, unlike `flock` and OFD locks, are not inherited by `fork`, so a child never
//! keeps a dead parent looking alive.
//!
//! A process is named by its [`ProcessIdentity`]: pid plus kernel start time, packed into
//! one `u64` so shared structures can claim and release slots with a single CAS, and a
//! recycled pid is never mistaken for the process it replaced.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::cvt;
use super::files::{open_existing, open_or_create, Held};

const PID_BITS: u32 = 22; // pid_max is at most 2^22 on Linux
const PID_MASK: u64 = (1 << PID_BITS) - 1;
const RECORD_MAGIC: u64 = u64::from_le_bytes(*b"LANESPRC");
const RECORD_VERSION: u32 = 1;
const RECORD_LEN: usize = 32;

/// A process: its pid and kernel start time (clock ticks since boot), packed in 64 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ProcessIdentity(u64);

impl ProcessIdentity {
    /// The calling process.
    pub fn current() -> io::Result<Self> {
        Self::of_pid(std::process::id())
    }

    /// The process that now has `pid` (a zombie included: see [`Self::of_running_pid`]).
    pub fn of_pid(pid: u32) -> io::Result<Self> {
        Ok(Self::from_parts(pid, parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat"))?)?.1))
    }

    /// The process that now has `pid`, unless it has exited (a zombie, its exit status not
    /// yet collected by its parent: it holds no files, sockets or memory any more).
    pub fn of_running_pid(pid: u32) -> io::Result<Option<Self>> {
        let (state, start) = parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat"))?)?;
        Ok((!matches!(state, 'Z' | 'X' | 'x')).then(|| Self::from_parts(pid, start)))
    }

    fn from_parts(pid: u32, start_ticks: u64) -> Self {
        ProcessIdentity(((start_ticks + 1) << PID_BITS) | (u64::from(pid) & PID_MASK))
    }

    /// Unpacks a value stored in shared memory; 0 means "nobody".
    pub fn from_bits(bits: u64) -> Option<Self> {
        (bits & PID_MASK != 0).then_some(ProcessIdentity(bits))
    }

    /// The packed form stored in shared memory (never 0).
    pub fn bits(self) -> u64 {
        self.0
    }

    /// The process id.
    pub fn pid(self) -> u32 {
        (self.0 & PID_MASK) as u32
    }

    /// Whether this process still runs: its pid names the same process (same start time)
    /// and it has not exited (a zombie holds nothing). If `/proc` cannot tell for another
    /// reason than the process being gone, answers as [`pid_alive`]: never declared dead
    /// for want of information.
    pub fn is_running(self) -> bool {
        match Self::of_running_pid(self.pid()) {
            Ok(now) => now == Some(self),
            Err(e) if e.kind() == io::ErrorKind::NotFound => false,
            Err(_) => pid_alive(self.pid()),
        }
    }
}

/// The state letter (field 3) and start time (field 22) of a `/proc/PID/stat` line.
fn parse_stat(stat: &str) -> io::Result<(char, u64)> {
    // The command name (field 2) is in parentheses and may contain anything: parse from the
    // last ')'. The state follows it; starttime is the 20th field after the state.
    let mut rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "malformed /proc stat"))?;
    let state = rest
        .next()
        .and_then(|s| s.chars().next())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no state in /proc stat"))?;
    let start = rest
        .nth(18)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no starttime in /proc stat"))?;
    Ok((state, start))
}

/// Whether a process with `pid` exists and has not exited: [`pid_alive`], but a zombie
/// (exited, not yet reaped) counts as gone. Reads `/proc/PID/stat`; if that cannot be
/// read for another reason than the process being gone, answers as [`pid_alive`].
pub fn pid_running(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    match ProcessIdentity::of_running_pid(pid) {
        Ok(running) => running.is_some(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(_) => pid_alive(pid),
    }
}

/// Whether a process with `pid` exists (`kill(pid, 0)`; EPERM means it exists). A pid
/// alone can be reused: for "is this process alive" use [`is_alive`] and a record.
pub fn pid_alive(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// The record file of process `pid` acting as `node`.
pub fn record_path(procs_dir: &Path, node: u32, pid: u32) -> PathBuf {
    procs_dir.join(format!("{node}-{pid}"))
}

fn record_lock(kind: libc::c_short) -> libc::flock {
    // SAFETY: flock is plain old data; all-zero is a valid value that we then fill in.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    l.l_start = 0;
    l.l_len = 1;
    l
}

/// This process's registration as a node: the record file and the lock on it.
/// Dropping it unregisters. One per (directory, node) per process: a second open-and-close
/// of the same file by this process would release the lock (POSIX record-lock semantics).
#[derive(Debug)]
pub struct ProcessRecord {
    file: Held<File>,
    path: PathBuf,
    identity: ProcessIdentity,
    node: u32,
}

impl ProcessRecord {
    /// Registers the calling process as a member of `node`.
    pub fn register(procs_dir: &Path, node: u32) -> io::Result<Self> {
        let identity = ProcessIdentity::current()?;
        let path = record_path(procs_dir, node, identity.pid());
        // Moved before it is locked: the move closes the number it opened at.
        let file = open_or_create(&path)?.moved_out_of_the_way();
        let lock = record_lock(libc::F_WRLCK as libc::c_short);
        // SAFETY: the fd is open and `lock` is a valid flock for the duration of the call.
        cvt(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &lock) }).map_err(|e| {
            io::Error::new(e.kind(), format!("process record {} is locked by another process: {e}", path.display()))
        })?;
        let mut rec = [0u8; RECORD_LEN];
        rec[0..8].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
        rec[8..12].copy_from_slice(&RECORD_VERSION.to_le_bytes());
        rec[12..16].copy_from_slice(&node.to_le_bytes());
        rec[16..24].copy_from_slice(&identity.bits().to_le_bytes());
        file.set_len(0)?;
        file.write_all_at(&rec, 0)?;
        Ok(ProcessRecord { file, path, identity, node })
    }

    /// Who registered.
    pub fn identity(&self) -> ProcessIdentity {
        self.identity
    }

    /// As which node.
    pub fn node(&self) -> u32 {
        self.node
    }
}

impl Drop for ProcessRecord {
    fn drop(&mut self) {
        // Only remove the file if it is still ours (a forked child must not remove the
        // parent's record: its identity differs).
        if ProcessIdentity::current().ok() == Some(self.identity) {
            let _ = fs::remove_file(&self.path);
        }
        let _ = &self.file; // closing the file releases the lock
    }
}

/// Reads the identity written in a record file, if it is a valid record.
fn read_record(file: &File) -> Option<(u32, ProcessIdentity)> {
    let mut rec = [0u8; RECORD_LEN];
    file.read_exact_at(&mut rec, 0).ok()?;
    let magic = u64::from_le_bytes(rec[0..8].try_into().ok()?);
    let version = u32::from_le_bytes(rec[8..12].try_into().ok()?);
    if magic != RECORD_MAGIC || version != RECORD_VERSION {
        return None;
    }
    let node = u32::from_le_bytes(rec[12..16].try_into().ok()?);
    let id = ProcessIdentity::from_bits(u64::from_le_bytes(rec[16..24].try_into().ok()?))?;
    Some((node, id))
}

/// Whether `identity`, registered as `node`, is alive: its record names it and its lock is held.
pub fn is_alive(procs_dir: &Path, node: u32, identity: ProcessIdentity) -> bool {
    if identity.pid() == std::process::id() {
        // Never open our own record: closing that fd would drop our own lock.
        return ProcessIdentity::current().ok() == Some(identity);
    }
    // F_GETLK asks for a write lock's conflicts, which needs the file open for writing.
    let Ok(file) = open_existing(&record_path(procs_dir, node, identity.pid()), true) else {
        return false;
    };
    match read_record(&file) {
        Some((n, id)) if n == node && id == identity => lock_is_held(&file),
        _ => false,
    }
}

fn lock_is_held(file: &File) -> bool {
    let mut lock = record_lock(libc::F_WRLCK as libc::c_short);
    // SAFETY: the fd is open and `lock` is valid for reads and writes during the call.
    match cvt(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GETLK, &mut lock) }) {
        Ok(_) => lock.l_type != libc::F_UNLCK as libc::c_short,
        // If we cannot tell, do not declare a process dead: that would destroy its data.
        Err(_) => true,
    }
}

/// One registered process, as `lanes status` lists it.
#[derive(Clone, Debug)]
pub struct RecordInfo {
    pub node: u32,
    pub identity: Option<ProcessIdentity>,
    pub pid: u32,
    pub alive: bool,
    pub path: PathBuf,
}

/// Every process record in `procs_dir`, live or stale; a file that is not a valid record
/// (not a regular file, another user's, unreadable, malformed) is listed as stale. A missing
/// directory has none; one that cannot be read is an error naming it.
pub fn list_records(procs_dir: &Path) -> io::Result<Vec<RecordInfo>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(procs_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io::Error::new(e.kind(), format!("{}: {e}", procs_dir.display()))),
    };
    for e in entries {
        let e = e.map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", procs_dir.display())))?;
        let name = e.file_name();
        let Some((node, pid)) = name.to_str().and_then(|n| n.split_once('-')) else {
            continue;
        };
        let (Ok(node), Ok(pid)) = (node.parse::<u32>(), pid.parse::<u32>()) else {
            continue;
        };
        // Only the name `record_path` writes: `08-1` or `8-+1` would be a second name.
        if record_path(procs_dir, node, pid).file_name() != Some(name.as_os_str()) {
            continue;
        }
        let path = e.path();
        let (identity, alive) = if pid == std::process::id() {
            let me = ProcessIdentity::current().ok();
            (me, true)
        } else {
            // A record is believed only under its own name: a copy of a live process's
            // record under another name is not that process (nor alive).
            match open_existing(&path, false).ok().as_deref().and_then(read_record) {
                Some((n, id)) if n == node && id.pid() == pid => (Some(id), is_alive(procs_dir, node, id)),
                _ => (None, false),
            }
        };
        out.push(RecordInfo { node, identity, pid, alive, path });
    }
    out.sort_by_key(|r| (r.node, r.pid));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_state_and_start_time() {
        let line = "42 (a) b) c) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat(line).unwrap(), ('S', 987654));
        assert_eq!(parse_stat("42 (z) Z 1 42").unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert_eq!(parse_stat("no parenthesis").unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_zombie_is_alive_to_kill_but_not_running() {
        // SAFETY: the child only calls _exit, which is async-signal-safe.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: ends the child at once.
            unsafe { libc::_exit(0) };
        }
        let pid = pid as u32;
        // Not reaped: a zombie once it has exited.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while pid_running(pid) {
            assert!(std::time::Instant::now() < deadline, "child {pid} never exited");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(pid_alive(pid), "a zombie still has its pid");
        assert!(ProcessIdentity::of_pid(pid).is_ok());
        assert_eq!(ProcessIdentity::of_running_pid(pid).unwrap(), None);
        assert!(!ProcessIdentity::of_pid(pid).unwrap().is_running());
        let mut status = 0;
        // SAFETY: reaps our own child.
        assert_eq!(unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) }, pid as libc::pid_t);
        assert!(!pid_running(pid));
        assert!(pid_running(std::process::id()));
        assert!(ProcessIdentity::current().unwrap().is_running());
        assert_eq!(ProcessIdentity::of_running_pid(std::process::id()).unwrap(), ProcessIdentity::current().ok());
    }
}
