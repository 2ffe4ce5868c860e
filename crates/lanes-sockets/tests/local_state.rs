//! The library against a fabric directory on a nearly full filesystem (issue 31): a small
//! tmpfs is mounted as LANES_DIR and filled so that no socket record fits, or only one, and
//! a python3 echo server and client, both under the library, exchange a few MiB over
//! several connections. A record's header is reserved when it is created and its ring before
//! its sender first writes there, so a full tmpfs is an error at one of those two moments
//! (never a SIGBUS when a page is first touched): such a connection, or direction, stays
//! kernel TCP, byte-exact, and each process says so once on standard error.
//!
//! Mounting needs root: without it the test is skipped with the reason printed.

mod support;

use std::ffi::CString;
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{clean_command, free_port, library, Finished, Program, TestDir};

/// The ring per direction the runs use: a record is 4 KiB of header plus this.
const RING: u64 = 64 << 10;
/// Less than a record (room for headers, not for a ring): 8 pages.
const SLACK: u64 = 8 << 12;
/// The tmpfs: room for 15 records when empty (a closed connection's records may stay
/// mapped, so taking room, for a while).
const TMPFS_BYTES: u64 = 1 << 20;
const LIMIT: Duration = Duration::from_secs(60);
const NOTICE: &str = "liblanes_sockets: no room for a socket record";

/// Echoes every connection's bytes back until the client's EOF; serves `n` connections,
/// accepting each one `delay` seconds after the kernel has it.
const SERVER: &str = r#"
import select, socket, sys, time
port, n, delay = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen(8)
for _ in range(n):
    select.select([srv], [], [])
    time.sleep(delay)
    c, _ = srv.accept()
    total = 0
    while True:
        b = c.recv(1 << 16)
        if not b:
            break
        c.sendall(b)
        total += len(b)
    c.close()
    print("echoed", total, flush=True)
"#;

/// Opens `n` connections one after the other; on each, waits a moment (so the test sees
/// the records), sends `size` seeded random bytes (from a thread, then SHUT_WR) while
/// reading the echo, and checks it byte for byte.
const CLIENT: &str = r#"
import hashlib, random, socket, sys, threading, time
port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for i in range(n):
    data = random.Random(i).randbytes(size)
    s = socket.create_connection(("127.0.0.1", port))
    time.sleep(0.1)
    def send():
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    t = threading.Thread(target=send)
    t.start()
    got = bytearray()
    while True:
        b = s.recv(1 << 16)
        if not b:
            break
        got += b
    t.join()
    s.close()
    if bytes(got) != data:
        print("MISMATCH on connection", i, "got", len(got), "of", size, "bytes", flush=True)
        sys.exit(1)
    print("ok", i, hashlib.sha256(got).hexdigest(), flush=True)
"#;

/// A tmpfs mounted on a fresh directory; unmounted (lazily, should a process still hold a
/// file there) and removed when dropped, also when the test fails.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// None, with the reason printed, when this cannot mount (not root, no CAP_SYS_ADMIN).
    fn mount(dir: PathBuf, bytes: u64) -> Option<Tmpfs> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: mounting a small tmpfs needs root");
            return None;
        }
        std::fs::create_dir_all(&dir).expect("mount point");
        let target = CString::new(dir.as_os_str().as_encoded_bytes()).expect("path");
        let options = CString::new(format!("size={bytes},mode=0700")).expect("options");
        // SAFETY: every argument is a NUL-terminated string that outlives the call.
        let r =
            unsafe { libc::mount(c"tmpfs".as_ptr(), target.as_ptr(), c"tmpfs".as_ptr(), 0, options.as_ptr().cast()) };
        if r != 0 {
            eprintln!("skipped: cannot mount a tmpfs on {}: {}", dir.display(), io::Error::last_os_error());
            return None;
        }
        Some(Tmpfs(dir))
    }

    fn free_bytes(&self) -> u64 {
        let path = CString::new(self.0.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: statvfs is plain old data; zeroed is a valid value for the kernel to overwrite.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: path is a valid C string and st is valid for writes.
        assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut st) }, 0, "statvfs: {}", io::Error::last_os_error());
        st.f_bavail as u64 * st.f_frsize as u64
    }

    /// Empties the filesystem, then fills it until exactly `left` bytes (whole pages) are free.
    fn fill_leaving(&self, left: u64) {
        for e in std::fs::read_dir(&self.0).expect("read tmpfs").flatten() {
            let p = e.path();
            let _ = if p.is_dir() { std::fs::remove_dir_all(&p) } else { std::fs::remove_file(&p) };
        }
        let free = self.free_bytes();
        assert!(free >= left, "{free} bytes free, wanted {left}");
        std::fs::write(self.0.join("filler"), vec![0xffu8; (free - left) as usize]).expect("filler");
        assert_eq!(self.free_bytes(), left, "the filler left a different amount free");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let target = CString::new(self.0.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: a NUL-terminated path that outlives the call.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// python3 itself, not a wrapper script (a pyenv shim would also run under the library).
fn python3() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::iter::once(PathBuf::from("/usr/bin"))
        .chain(std::env::split_paths(&path))
        .map(|d| d.join("python3"))
        .find(|p| p.is_file())
        .expect("python3 is not installed")
}

/// Whether some TCP socket of this network namespace listens on `port` (read from /proc:
/// a probe connection would be one of the server's `n`).
fn listening(port: u16) -> bool {
    std::fs::read_to_string("/proc/net/tcp").is_ok_and(|t| {
        t.lines().skip(1).any(|l| {
            let c: Vec<&str> = l.split_whitespace().collect();
            c.len() > 3
                && c[3] == "0A"
                && c[1].rsplit_once(':').is_some_and(|(_, p)| u16::from_str_radix(p, 16) == Ok(port))
        })
    })
}

fn notices(f: &Finished) -> usize {
    f.stderr.lines().filter(|l| l.starts_with(NOTICE)).count()
}

/// Both ends must have exited 0, not by a signal (SIGBUS was the bug), with every
/// connection checked by the client.
fn check_ended_well(what: &str, f: &Finished, name: &str, lines: usize, prefix: &str) {
    if let Some(sig) = f.status.and_then(|s| s.signal()) {
        panic!("{what}: the {name} was killed by signal {sig}\n{}", f.describe(name));
    }
    assert!(f.ok(), "{what}\n{}", f.describe(name));
    let done = f.stdout.lines().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(done, lines, "{what}: {name} finished {done} of {lines} connections\n{}", f.describe(name));
}

/// One run of the pair.
#[derive(Clone, Copy)]
struct Run {
    connections: usize,
    bytes: usize,
    /// LANES_SOCKETS_QUIET=1 for both.
    quiet: bool,
    /// How long the server waits before it accepts a connection the kernel has accepted:
    /// with it, the client's end publishes its record first.
    accept_delay: f64,
}

/// What the socket records of a run showed while it ran (sampled).
#[derive(Debug, Default)]
struct Seen {
    records: bool,
    attached: bool,
}

/// Runs the echo pair under the library with LANES_DIR on `fabric`; returns how the server
/// and the client ended, and what their records showed.
fn run_pair(fabric: &Path, scratch: &Path, run: Run) -> (Finished, Finished, Seen) {
    let lib = library();
    let port = free_port();
    let cmd = |script: &str, args: &[String]| -> Command {
        let mut c = clean_command(python3());
        c.arg("-c")
            .arg(script)
            .args(args)
            .env("LD_PRELOAD", &lib)
            .env("LANES_DIR", fabric)
            .env("LANES_SOCKETS_RING", RING.to_string())
            // Every connection set up when it connects (not at its eighth data call): the
            // records are what is looked at.
            .env("LANES_SOCKETS_DEFER", "0")
            .env("TMPDIR", scratch);
        if run.quiet {
            c.env("LANES_SOCKETS_QUIET", "1");
        }
        c
    };
    let mut server = Program::spawn(
        cmd(SERVER, &[port.to_string(), run.connections.to_string(), run.accept_delay.to_string()]),
        "server",
    );
    let start = Instant::now();
    while !listening(port) {
        if server.exited() || start.elapsed() > LIMIT {
            panic!("the server did not listen\n{}", server.wait(Duration::ZERO).describe("server"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (done, fabric) = (done.clone(), fabric.to_path_buf());
        std::thread::spawn(move || {
            let mut seen = Seen::default();
            while !done.load(Ordering::Relaxed) {
                let conns = lanes::sockets::registry::list_connections(&fabric);
                seen.records |= !conns.is_empty();
                seen.attached |= conns.iter().any(|c| c.peer_attached);
                std::thread::sleep(Duration::from_micros(200));
            }
            seen
        })
    };
    let client =
        Program::spawn(cmd(CLIENT, &[port.to_string(), run.connections.to_string(), run.bytes.to_string()]), "client")
            .wait(LIMIT);
    let server = server.wait(LIMIT);
    done.store(true, Ordering::Relaxed);
    (server, client, sampler.join().expect("sampler"))
}

#[test]
fn a_full_fabric_filesystem_leaves_connections_on_kernel_tcp_without_sigbus() {
    let scratch = TestDir::named("local-state", "full-tmpfs");
    let Some(fs) = Tmpfs::mount(scratch.path("fabric"), TMPFS_BYTES) else { return };
    let tmp = scratch.sub("tmp");
    const CONNECTIONS: usize = 3;
    let run = Run { connections: CONNECTIONS, bytes: 3 << 20, quiet: false, accept_delay: 0.0 };

    // With room: accelerated, nothing said (the scripts and the mount work as such).
    fs.fill_leaving(TMPFS_BYTES);
    let (server, client, seen) = run_pair(&fs.0, &tmp, run);
    let what = "with room for every record";
    check_ended_well(what, &server, "server", CONNECTIONS, "echoed");
    check_ended_well(what, &client, "client", CONNECTIONS, "ok ");
    assert!(seen.attached, "{what}: no connection was accelerated ({seen:?})");
    assert_eq!((notices(&server), notices(&client)), (0, 0), "{what}: {}{}", server.stderr, client.stderr);

    // No room at all: not even a record's header can be had, every connection stays kernel
    // TCP, and each process says so once however many connections it made.
    fs.fill_leaving(0);
    let (server, client, seen) = run_pair(&fs.0, &tmp, run);
    let what = "with no room";
    check_ended_well(what, &server, "server", CONNECTIONS, "echoed");
    check_ended_well(what, &client, "client", CONNECTIONS, "ok ");
    assert!(!seen.records, "{what}: a record was created");
    assert_eq!((notices(&server), notices(&client)), (1, 1), "{what}:\n{}{}", server.stderr, client.stderr);
    assert_eq!(fs.free_bytes(), 0, "{what}: something was left behind");

    // Room for records' headers but not for a ring: the records are made (their rings stay
    // sparse), and a sender that would write its ring finds no room for it before its first
    // byte (never a SIGBUS): that direction stays kernel TCP, byte-exact, and a process that
    // met it says so at most once; everything is given back at the end.
    fs.fill_leaving(SLACK);
    let (server, client, _) = run_pair(&fs.0, &tmp, run);
    let what = "with room for headers only";
    check_ended_well(what, &server, "server", CONNECTIONS, "echoed");
    check_ended_well(what, &client, "client", CONNECTIONS, "ok ");
    assert!(notices(&server) <= 1 && notices(&client) <= 1, "{what}:\n{}{}", server.stderr, client.stderr);
    assert_eq!(fs.free_bytes(), SLACK, "{what}: a record was left behind");

    // LANES_SOCKETS_QUIET=1: the same, silently.
    fs.fill_leaving(0);
    let (server, client, _) = run_pair(&fs.0, &tmp, Run { connections: 1, quiet: true, ..run });
    let what = "with no room and LANES_SOCKETS_QUIET=1";
    check_ended_well(what, &server, "server", 1, "echoed");
    check_ended_well(what, &client, "client", 1, "ok ");
    assert_eq!((notices(&server), notices(&client)), (0, 0), "{what}:\n{}{}", server.stderr, client.stderr);
}

/// O_ASYNC asked for on a connection that has run through the ring: SIGIO for every later
/// arrival, as on kernel TCP (the kernel raises it only for bytes it carries, so the
/// library leaves the connection to it).
#[test]
fn o_async_after_ring_traffic_still_raises_sigio() {
    const SCRIPT: &str = r#"
import socket, os, fcntl, signal, time
got = []
signal.signal(signal.SIGIO, lambda s, f: got.append(s))
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen()
c = socket.create_connection(l.getsockname()); a, _ = l.accept()
for i in range(50):
    c.send(b"x"); a.recv(1); a.send(b"y"); c.recv(1)
fcntl.fcntl(c.fileno(), fcntl.F_SETOWN, os.getpid())
fcntl.fcntl(c.fileno(), fcntl.F_SETFL, fcntl.fcntl(c.fileno(), fcntl.F_GETFL) | os.O_ASYNC)
seen = 0
for k in range(5):
    got.clear()
    a.send(b"io")
    t = time.time()
    while not got and time.time() - t < 5: time.sleep(0.001)
    seen += bool(got)
    c.recv(2)
print("SIGIO for", seen, "of 5 writes")
"#;
    let t = TestDir::new("o-async");
    for with_lib in [false, true] {
        let mut cmd = clean_command(python3());
        cmd.args(["-c", SCRIPT]).env("LANES_DIR", t.sub("fabric")).env("LANES_SOCKETS_QUIET", "1");
        if with_lib {
            cmd.env("LD_PRELOAD", library());
        }
        let f = support::run_bounded(cmd, "python3", Duration::from_secs(60));
        assert!(
            f.ok() && f.stdout.contains("SIGIO for 5 of 5 writes"),
            "with the library: {with_lib}\n{}\n{}",
            f.stdout,
            f.stderr
        );
    }
}
