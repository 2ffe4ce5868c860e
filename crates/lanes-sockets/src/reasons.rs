//! Why a local connection of this process stays kernel TCP: counted in the process's
//! reasons file (`lanes::sockets::reasons`, shown by `lanes status`) and said once per
//! reason on standard error (`LANES_SOCKETS_QUIET=1`: not said). Everything here runs when a
//! connection is set up or retired, or when the process changes its uid: never per send or
//! receive.
//!
//! A forked child counts in the file it inherited (its parent's mapping) and does not say
//! again what its parent said: a fork-per-connection server says a thing once, not once per
//! connection. A program started by exec has its own.
//!
//! **Privilege drop.** The fabric directory (0700) belongs to the user the library started
//! as; a process that changes its effective uid (nginx workers become `nobody`) can neither
//! create records there nor open its peers'. Sockets whose records exist (connected before
//! the change) stay accelerated: their mappings outlive the change. Connections set up
//! after it stay kernel TCP, said once: "uid changed to N: new connections stay kernel TCP
//! (the fabric directory is user M's)". The uid is compared when a connection is set up
//! (one `geteuid`); the library's `setuid` family creates the reasons file first, while the
//! directory is still the process's, so the count can still be kept afterwards.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use lanes::sockets::endpoint::this_process;
pub use lanes::sockets::reasons::Reason;
use lanes::sockets::reasons::ReasonsFile;
use lanes::sockets::ConnectionKey;

use crate::config::{config, notice};

const UNSET: u32 = u32::MAX;
/// The effective uid when the library started (its first call).
static START_EUID: AtomicU32 = AtomicU32::new(UNSET);

/// At the library's first call: the uid whose fabric directory this process uses.
pub fn remember_start_uid() {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let _ = START_EUID.compare_exchange(UNSET, uid, Ordering::Relaxed, Ordering::Relaxed);
}

/// (now, at start) if the effective uid is no longer the one the library started with.
pub fn uid_changed() -> Option<(u32, u32)> {
    let start = START_EUID.load(Ordering::Relaxed);
    if start == UNSET {
        return None;
    }
    // SAFETY: geteuid has no preconditions.
    let now = unsafe { libc::geteuid() };
    (now != start).then_some((now, start))
}

static FILE: OnceLock<ReasonsFile> = OnceLock::new();
static GAVE_UP: AtomicBool = AtomicBool::new(false);

/// A thread of this process is creating the file (cleared in a forked child, where that
/// thread did not come along).
static CREATING: AtomicBool = AtomicBool::new(false);
/// How long a note waits for another thread creating the file (a few system calls).
const CREATION_WAIT: Duration = Duration::from_secs(1);

thread_local! {
    /// This thread is creating the file: a note from a signal handler that interrupted it
    /// must not wait for itself.
    static THIS_THREAD_CREATING: Cell<bool> = const { Cell::new(false) };
}

/// This process's reasons file, created on first need (never under a seccomp filter, never
/// after a uid change: the directory is no longer ours); None if it cannot be had. Two
/// threads noting at once count both in the one file: the second waits for the first's.
fn file() -> Option<&'static ReasonsFile> {
    if let Some(f) = FILE.get() {
        return Some(f);
    }
    if GAVE_UP.load(Ordering::Relaxed) || crate::sandbox::filtered() || uid_changed().is_some() {
        return None;
    }
    if THIS_THREAD_CREATING.with(Cell::get) {
        return None;
    }
    let started = Instant::now();
    while CREATING.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        if let Some(f) = FILE.get() {
            return Some(f);
        }
        if GAVE_UP.load(Ordering::Relaxed) || started.elapsed() > CREATION_WAIT {
            return None;
        }
        std::thread::yield_now();
    }
    THIS_THREAD_CREATING.with(|c| c.set(true));
    let file =
        FILE.get().or_else(|| match this_process().and_then(|me| ReasonsFile::create(&config().fabric_dir, me)) {
            Ok(f) => {
                let _ = FILE.set(f);
                FILE.get()
            }
            Err(_) => {
                GAVE_UP.store(true, Ordering::Relaxed);
                None
            }
        });
    THIS_THREAD_CREATING.with(|c| c.set(false));
    CREATING.store(false, Ordering::Release);
    file
}

/// In a forked child: a creation the parent had under way is not this process's.
pub fn after_fork_in_child() {
    CREATING.store(false, Ordering::Relaxed);
}

/// Reasons already said on stderr by this process (or the parent it was forked from).
static SAID: AtomicU32 = AtomicU32::new(0);

/// One line for `why`, about the socket `key` if there is one.
fn line(why: Reason, key: Option<&ConnectionKey>, detail: &str) -> String {
    let sock = key.map(|k| format!("{} -> {}: ", k.local, k.remote)).unwrap_or_default();
    match why {
        Reason::PeerWithoutLibrary => format!(
            "{sock}the peer never attached (it runs without the library or in another network namespace, or \
             made too few data calls to set the connection up, such as a file sent whole with sendfile): the \
             connection stayed kernel TCP"
        ),
        Reason::PeerOtherUser => format!(
            "{sock}the peer runs as another user (its records are in that user's fabric directory): the \
             connection stayed kernel TCP"
        ),
        Reason::PrivilegeDrop => detail.to_string(),
        Reason::ExcludedPort => {
            format!("{sock}port not accelerated (LANES_SOCKETS_INCLUDE/_EXCLUDE or [sockets]): kernel TCP")
        }
        Reason::NoRoom => {
            format!("no room for a socket record ({detail}); connections without one stay kernel TCP")
        }
        Reason::RecordFailed => format!("{sock}no socket record ({detail}): kernel TCP"),
        Reason::Sandbox => "a seccomp filter (prctl or seccomp): the library makes no system call of its own from \
                            now on, and connections set up from now on stay kernel TCP"
            .to_string(),
        Reason::TooManyHolders => format!(
            "{sock}shared by more than {} processes: it goes back to kernel TCP when the first of them close it",
            lanes::sockets::endpoint::HOLDER_SLOTS
        ),
        Reason::ExecWithoutLibrary => format!("{sock}exec of an image that cannot load the library: {detail}"),
        Reason::RemoteOff => format!("{sock}a connection to another host of the cluster stays kernel TCP: {detail}"),
        Reason::NoDaemon => format!(
            "{sock}no daemon to pair a connection to another host of the cluster ({detail}): kernel TCP; a daemon \
             that starts pairs it"
        ),
        Reason::RemotePeerNeverPaired => format!("{sock}{detail}: the connection stayed kernel TCP"),
        Reason::RegistrationRefused => {
            format!("{sock}the daemon refused to pair a connection to another host: {detail}")
        }
        Reason::RingDidNotPay => format!(
            "{sock}the ring never paid (no receiver was waiting when bytes came: no CPU free to spin, or a \
             receiver always busy): its receiving direction is kernel TCP for good, at kernel TCP's cost"
        ),
        Reason::KernelFeature => format!(
            "{sock}SO_PEEK_OFF, a timestamp option, an upper-layer protocol (TCP_ULP, kernel TLS), SIGIO on \
             arrival (O_ASYNC) or, to another host, SO_RCVLOWAT above 1 is on, which only the kernel's own \
             queues have: the connection is kernel TCP for good"
        ),
        Reason::RemoteNoStream => {
            format!("{sock}no fabric stream for a connection to another host ({detail}): it stays kernel TCP")
        }
        Reason::UdpKernelOnly => format!("a UDP socket {detail}: it stays on the kernel"),
        Reason::IoUring => "the program set up an io_uring, whose operations on sockets the library cannot \
                            see: its connections are kernel TCP from now on (LANES_SOCKETS_IO_URING=refuse \
                            keeps them accelerated in programs that do without io_uring when the kernel has \
                            none, such as libuv's)"
            .to_string(),
    }
}

/// Counts one socket (`key`, if known) left to the kernel for `why` and says so on stderr
/// once per process and reason. `detail`: the error or uid text some reasons carry.
pub fn note_with(why: Reason, key: Option<&ConnectionKey>, detail: &str) {
    // Noting runs inside the program's calls (a send that found the peer gone, a close):
    // the program must see its own call's errno, not one of the file operations below.
    let saved = crate::real::errno();
    count_and_say(why, key, detail);
    crate::real::set_errno(saved);
}

fn count_and_say(why: Reason, key: Option<&ConnectionKey>, detail: &str) {
    // A full filesystem gets no new file from us (it would take what room is left).
    let file = if why == Reason::NoRoom { FILE.get() } else { file() };
    if let Some(f) = file {
        f.note(why, key.map(|k| (k.local, k.remote)));
    }
    let bit = 1u32 << (Reason::ALL.iter().position(|r| *r == why).unwrap_or(31) as u32);
    if quietly_counted(why) {
        return;
    }
    if SAID.fetch_or(bit, Ordering::Relaxed) & bit == 0 && !crate::sandbox::filtered() {
        notice(config().quiet, format_args!("{}", line(why, key, detail)));
    }
}

/// Reasons counted for `lanes status` but not said on stderr: a retired connection is the
/// accelerator working as designed on a busy machine, not a set-up that failed, and every
/// process of a fork-per-connection server (each PostgreSQL backend) would say it again in
/// the server's log.
fn quietly_counted(why: Reason) -> bool {
    // A UDP socket on the kernel is what a program asking for timestamps or a packet's
    // destination gets by design, often on every socket it makes: `lanes status` says it.
    matches!(why, Reason::RingDidNotPay | Reason::UdpKernelOnly)
}

/// As [`note_with`], without details.
pub fn note(why: Reason, key: Option<&ConnectionKey>) {
    note_with(why, key, "");
}

/// A connection is being set up: None if it may be accelerated as far as the uid goes;
/// otherwise the reason was noted and the socket stays kernel TCP.
pub fn check_uid(key: &ConnectionKey) -> Option<()> {
    let Some((now, start)) = uid_changed() else { return Some(()) };
    let text =
        format!("uid changed to {now}: new connections stay kernel TCP (the fabric directory is user {start}'s)");
    note_with(Reason::PrivilegeDrop, Some(key), &text);
    None
}

/// The program is about to change its effective uid to `new_euid` (None: unchanged): make
/// the reasons file while the fabric directory is still ours.
pub fn before_uid_change(new_euid: Option<libc::uid_t>) {
    remember_start_uid();
    // SAFETY: geteuid has no preconditions.
    let now = unsafe { libc::geteuid() };
    if config().enabled && new_euid.is_some_and(|u| u != now) {
        let _ = file();
    }
}

/// The program is about to install a seccomp mode (the library then takes it as filtered):
/// system calls are still allowed, so the file may be made and the line written.
pub fn entered_sandbox() {
    if config().enabled {
        note(Reason::Sandbox, None);
    }
}
