//! Why sockets stayed kernel TCP: one small file per process, `<fabric dir>/sockets/
//! why-<pid>-<identity>`, created the first time that process leaves a local connection to
//! the kernel (or before it changes its uid, while the directory is still its own), holding
//! a count per [`Reason`] and the addresses of the last socket counted. `lanes status`
//! lists them; `lanes cleanup` (and the library at start-up) removes those of dead
//! processes. Counting is an atomic add in the mapped file: nothing on the data path.
//!
//! Layout (4096 bytes): magic and version (0), the writer's [`ProcessIdentity`] (16), its
//! uid (24), its command name (32, 16 bytes); from 128 one 64-byte line per reason: count
//! (8 bytes), then the last socket's local and remote address (24 bytes each, as the
//! socket records encode them).

use std::io;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::endpoint::{decode_addr, encode_addr, sockets_dir};
use crate::platform::files::{ensure_private_dir, open_existing, reserve, UnnamedFile};
use crate::platform::liveness::ProcessIdentity;
use crate::platform::mapping::{Access, Mapping};

const MAGIC: u64 = u64::from_le_bytes(*b"LNWHY001");
const LEN: usize = 4096;
const OFF_IDENTITY: usize = 16;
const OFF_UID: usize = 24;
const OFF_COMM: usize = 32;
const OFF_LINES: usize = 128;
const LINE: usize = 64;
const PREFIX: &str = "why-";

/// Why a socket of a library process stays kernel TCP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// The other end never published a record the kernel vouched for: it runs without
    /// the library, in another network namespace, closed first, or made too few data calls
    /// through the C library to set the connection up (a file sent whole with `sendfile`).
    PeerWithoutLibrary,
    /// This process changed its uid: the fabric directory is the original user's.
    PrivilegeDrop,
    /// A port excluded by `LANES_SOCKETS_EXCLUDE` / `[sockets] exclude` (or not included).
    ExcludedPort,
    /// No room for the socket's record (the fabric directory's filesystem is full).
    NoRoom,
    /// The record could not be created for another reason (permissions, ...).
    RecordFailed,
    /// A seccomp sandbox (prctl): no new pairing, the library makes no calls of its own.
    Sandbox,
    /// Shared by more processes (fork) than a record has holder slots: the socket returns
    /// to the kernel when the first holders close it.
    TooManyHolders,
    /// The process executed an image that cannot load the library (static, set-user-ID,
    /// file capabilities): its sockets went back to the kernel, reset where ring bytes
    /// could not reach the new image.
    ExecWithoutLibrary,
    /// A connection to another host of the cluster while remote acceleration is off (for
    /// the cluster's provider, or by configuration).
    RemoteOff,
    /// A connection to another host of the cluster with no daemon on this host to pair it
    /// (a daemon that starts later takes it over from its record).
    NoDaemon,
    /// A connection to another host of the cluster whose peer never paired: it runs
    /// without the library, as another user, or its host's daemon never vouched for it.
    RemotePeerNeverPaired,
    /// This host's daemon refused to register a connection to another host.
    RegistrationRefused,
    /// The ring never paid: nobody was waiting when the bytes came (more runnable threads
    /// than CPUs, a receiver that is always busy), so the direction was retired from the
    /// ring and its bytes are the kernel's for good, at the kernel's cost.
    RingDidNotPay,
    /// The program turned on a socket feature only the kernel's own queues have
    /// (`SO_PEEK_OFF`, `SO_TIMESTAMP*`): the connection is kernel TCP for good.
    KernelFeature,
    /// A connection to another host of the cluster, paired, that got no fabric stream:
    /// the provider failed (opening the fabric, exporting or connecting its objects), or
    /// this host's daemon serves no more sessions (64, three per stream).
    RemoteNoStream,
    /// A UDP socket stays on the kernel: an option, a call or ancillary data the library
    /// does not model, or a receive buffer larger than the largest ring.
    UdpKernelOnly,
    /// The other end's socket belongs to another user: its records are in that user's
    /// fabric directory, which this process does not share.
    PeerOtherUser,
    /// The process set up an io_uring, whose operations on its sockets (epoll_ctl, send,
    /// receive, poll) the kernel carries out unseen by the library: its connections are the
    /// kernel's from then on.
    IoUring,
}

impl Reason {
    /// Every reason, in the order of their lines in the file (new ones only ever appended).
    pub const ALL: [Reason; 18] = [
        Reason::PeerWithoutLibrary,
        Reason::PrivilegeDrop,
        Reason::ExcludedPort,
        Reason::NoRoom,
        Reason::RecordFailed,
        Reason::Sandbox,
        Reason::TooManyHolders,
        Reason::ExecWithoutLibrary,
        Reason::RemoteOff,
        Reason::NoDaemon,
        Reason::RemotePeerNeverPaired,
        Reason::RegistrationRefused,
        Reason::RingDidNotPay,
        Reason::KernelFeature,
        Reason::RemoteNoStream,
        Reason::UdpKernelOnly,
        Reason::PeerOtherUser,
        Reason::IoUring,
    ];

    fn index(self) -> usize {
        Reason::ALL.iter().position(|r| *r == self).expect("listed")
    }

    /// A few words for `lanes status`.
    pub fn label(self) -> &'static str {
        match self {
            Reason::PeerWithoutLibrary => "peer never attached",
            Reason::PrivilegeDrop => "uid changed (privilege drop)",
            Reason::ExcludedPort => "excluded port",
            Reason::NoRoom => "no room in the fabric directory",
            Reason::RecordFailed => "socket record not created",
            Reason::Sandbox => "seccomp sandbox",
            Reason::TooManyHolders => "too many processes share it",
            Reason::ExecWithoutLibrary => "exec of an image without the library",
            Reason::RemoteOff => "cross-host: remote acceleration off",
            Reason::NoDaemon => "cross-host: no daemon on this host",
            Reason::RemotePeerNeverPaired => "cross-host: peer never paired",
            Reason::RegistrationRefused => "cross-host: daemon refused it",
            Reason::RingDidNotPay => "ring did not pay (retired)",
            Reason::KernelFeature => "peek offset, timestamps or kernel TLS",
            Reason::RemoteNoStream => "cross-host: no fabric stream",
            Reason::UdpKernelOnly => "UDP: left to the kernel",
            Reason::PeerOtherUser => "peer runs as another user",
            Reason::IoUring => "the process uses io_uring",
        }
    }
}

/// The mapped file of the calling process.
pub struct ReasonsFile {
    map: Mapping,
}

impl std::fmt::Debug for ReasonsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReasonsFile").finish_non_exhaustive()
    }
}

fn file_name(who: ProcessIdentity) -> String {
    format!("{PREFIX}{}-{:x}", who.pid(), who.bits())
}

/// The word at `off` of this process's own file, to store into. The mapping is `LEN`
/// read-write bytes (made so by `ReasonsFile::create`) and every offset is a constant (or a
/// reason's line) inside it: the checked accessor takes its infallible path.
fn u64_at(map: &Mapping, off: usize) -> &AtomicU64 {
    map.slice().header_u64(off)
}

/// The word at `off` of another process's file, mapped read-only: `None` if it is not in
/// the mapping.
fn load_u64(map: &Mapping, off: usize, order: Ordering) -> Option<u64> {
    let s = map.slice();
    match order {
        Ordering::Relaxed => s.read::<u64>(off),
        _ => s.load_acquire_u64(off),
    }
    .ok()
}

fn store_addr(map: &Mapping, off: usize, a: SocketAddr) {
    let mut b = [0u8; 24];
    encode_addr(&mut b[..20], a);
    for (i, w) in b.chunks_exact(8).enumerate() {
        u64_at(map, off + 8 * i).store(u64::from_le_bytes(w.try_into().expect("8 bytes")), Ordering::Relaxed);
    }
}

fn load_addr(map: &Mapping, off: usize) -> Option<SocketAddr> {
    let mut b = [0u8; 24];
    for i in 0..3 {
        b[8 * i..8 * i + 8].copy_from_slice(&load_u64(map, off + 8 * i, Ordering::Relaxed)?.to_le_bytes());
    }
    decode_addr(&b[..20])
}

impl ReasonsFile {
    /// Creates and publishes the file of process `who` (replacing one its pid and start
    /// time left, which cannot be another live process's).
    pub fn create(fabric_dir: &Path, who: ProcessIdentity) -> io::Result<ReasonsFile> {
        let dir = sockets_dir(fabric_dir);
        ensure_private_dir(fabric_dir)?;
        ensure_private_dir(&dir)?;
        let unnamed = UnnamedFile::create(&dir)?;
        reserve(unnamed.file(), LEN as u64)?;
        let map = Mapping::map(unnamed.file().as_fd(), 0, LEN, Access::ReadWrite)?;
        let mut comm = [0u8; 16];
        if let Ok(c) = std::fs::read(format!("/proc/{}/comm", who.pid())) {
            let c = c.strip_suffix(b"\n").unwrap_or(&c);
            let n = c.len().min(comm.len());
            comm[..n].copy_from_slice(&c[..n]);
        }
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        u64_at(&map, OFF_IDENTITY).store(who.bits(), Ordering::Relaxed);
        u64_at(&map, OFF_UID).store(u64::from(uid), Ordering::Relaxed);
        u64_at(&map, OFF_COMM).store(u64::from_le_bytes(comm[..8].try_into().expect("8")), Ordering::Relaxed);
        u64_at(&map, OFF_COMM + 8).store(u64::from_le_bytes(comm[8..].try_into().expect("8")), Ordering::Relaxed);
        u64_at(&map, 0).store(MAGIC, Ordering::Release);
        // A file of this name is this very process's (same pid and start time), from the
        // image before an exec: replaced.
        let name = file_name(who);
        let _ = std::fs::remove_file(dir.join(&name));
        unnamed.publish(&name)?;
        Ok(ReasonsFile { map })
    }

    /// Counts one socket left to the kernel for `why`; returns the new count.
    pub fn note(&self, why: Reason, addrs: Option<(SocketAddr, SocketAddr)>) -> u64 {
        let off = OFF_LINES + LINE * why.index();
        if let Some((local, remote)) = addrs {
            store_addr(&self.map, off + 8, local);
            store_addr(&self.map, off + 32, remote);
        }
        u64_at(&self.map, off).fetch_add(1, Ordering::AcqRel) + 1
    }
}

/// One reason of one process, as `lanes status` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct ReasonCount {
    pub reason: Reason,
    pub label: &'static str,
    pub sockets: u64,
    /// The last socket counted: local and remote address.
    pub last: Option<(SocketAddr, SocketAddr)>,
}

/// The reasons of one process.
#[derive(Clone, Debug, Serialize)]
pub struct ProcessReasons {
    pub pid: u32,
    pub command: String,
    pub uid: u32,
    /// Whether the process still runs (the file of one that ended stays until cleaned).
    pub alive: bool,
    pub reasons: Vec<ReasonCount>,
}

fn read_file(path: &Path) -> Option<ProcessReasons> {
    let file = open_existing(path, false).ok()?;
    if file.metadata().ok()?.len() < LEN as u64 {
        return None;
    }
    let map = Mapping::map(file.as_fd(), 0, LEN, Access::ReadOnly).ok()?;
    if load_u64(&map, 0, Ordering::Acquire)? != MAGIC {
        return None;
    }
    let who = ProcessIdentity::from_bits(load_u64(&map, OFF_IDENTITY, Ordering::Relaxed)?)?;
    let mut comm = Vec::with_capacity(16);
    comm.extend_from_slice(&load_u64(&map, OFF_COMM, Ordering::Relaxed)?.to_le_bytes());
    comm.extend_from_slice(&load_u64(&map, OFF_COMM + 8, Ordering::Relaxed)?.to_le_bytes());
    let command = String::from_utf8_lossy(comm.split(|b| *b == 0).next().unwrap_or_default()).into_owned();
    let reasons = Reason::ALL
        .iter()
        .filter_map(|&reason| {
            let off = OFF_LINES + LINE * reason.index();
            let sockets = load_u64(&map, off, Ordering::Acquire)?;
            let last = load_addr(&map, off + 8).zip(load_addr(&map, off + 32));
            (sockets > 0).then_some(ReasonCount { reason, label: reason.label(), sockets, last })
        })
        .collect();
    Some(ProcessReasons {
        pid: who.pid(),
        command,
        uid: load_u64(&map, OFF_UID, Ordering::Relaxed)? as u32,
        alive: who.is_running(),
        reasons,
    })
}

/// Every process's reasons in the fabric directory, by pid (unreadable files are skipped).
pub fn list_reasons(fabric_dir: &Path) -> Vec<ProcessReasons> {
    let Ok(entries) = std::fs::read_dir(sockets_dir(fabric_dir)) else { return Vec::new() };
    let mut out: Vec<ProcessReasons> = entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with(PREFIX)))
        .filter_map(|e| read_file(&e.path()))
        .collect();
    out.sort_by_key(|p| p.pid);
    out
}

/// Removes the files of processes that ended; returns how many.
pub fn cleanup_reasons(fabric_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(sockets_dir(fabric_dir)) else { return 0 };
    let mut removed = 0;
    for e in entries.flatten() {
        if !e.file_name().to_str().is_some_and(|n| n.starts_with(PREFIX)) {
            continue;
        }
        let dead = read_file(&e.path()).is_none_or(|p| !p.alive);
        if dead && std::fs::remove_file(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sockets::endpoint::this_process;

    #[test]
    fn reasons_are_counted_listed_and_cleaned() {
        let dir = std::env::temp_dir().join(format!("lanes-reasons-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let me = this_process().unwrap();
        let f = ReasonsFile::create(&dir, me).unwrap();
        let a: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let b: SocketAddr = "[::1]:22".parse().unwrap();
        assert_eq!(f.note(Reason::ExcludedPort, Some((a, b))), 1);
        assert_eq!(f.note(Reason::ExcludedPort, None), 2);
        assert_eq!(f.note(Reason::PeerWithoutLibrary, Some((b, a))), 1);
        let listed = list_reasons(&dir);
        assert_eq!(listed.len(), 1);
        let p = &listed[0];
        assert_eq!((p.pid, p.alive), (me.pid(), true));
        assert!(!p.command.is_empty());
        let got: Vec<_> = p.reasons.iter().map(|r| (r.reason, r.sockets, r.last)).collect();
        assert_eq!(got, vec![(Reason::PeerWithoutLibrary, 1, Some((b, a))), (Reason::ExcludedPort, 2, Some((a, b)))]);
        assert_eq!(cleanup_reasons(&dir), 0, "a live process keeps its file");
        // A file of a process that ended (its pid now has another start time) is removed.
        let ghost = ProcessIdentity::from_bits(me.bits() ^ (1 << 40)).unwrap();
        drop(ReasonsFile::create(&dir, ghost).unwrap());
        assert_eq!(list_reasons(&dir).iter().filter(|p| !p.alive).count(), 1);
        assert_eq!(cleanup_reasons(&dir), 1);
        assert_eq!(list_reasons(&dir).len(), 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
