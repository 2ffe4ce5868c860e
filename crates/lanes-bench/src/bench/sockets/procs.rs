//! The programs `lanes bench sockets` starts: servers that are always stopped (on success,
//! on error, on Ctrl-C, and by the kernel if `lanes` itself dies), clients with a time limit,
//! each pinned to its CPU and run with or without the library.

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub(crate) use crate::bench::paths::sockets::free_port;
use crate::preload;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Ctrl-C, SIGTERM and SIGHUP end the run at the next check, after every program it started
/// has been stopped. (The programs share our process group, so a Ctrl-C at the terminal
/// reaches them as well.)
pub(crate) fn catch_signals() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: sigaction is plain data; zeroed is valid with an empty mask.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART;
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) };
    }
}

pub(crate) fn stopped() -> bool {
    STOP.load(Ordering::Relaxed)
}

fn check_stop() -> Result<(), String> {
    if stopped() {
        Err("interrupted".into())
    } else {
        Ok(())
    }
}

/// Kernel TCP, or both ends with the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Kernel,
    Lanes,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Kernel => "kernel",
            Mode::Lanes => "lanes",
        }
    }
}

/// Marks every program `lanes bench sockets` starts with its pid, so that anyone (the tests)
/// can find what it started in /proc.
pub(crate) const OWNER_ENV: &str = "LANES_BENCH_SOCKETS_OWNER";

/// How every program of a measurement is started.
#[derive(Clone, Debug)]
pub(crate) struct Launch {
    pub mode: Mode,
    /// The library (needed for [`Mode::Lanes`]).
    pub lib: Option<PathBuf>,
    /// The port the measurement uses: the only one the library accelerates.
    pub port: u16,
    pub cpu: Option<usize>,
}

impl Launch {
    /// A command for `program`, set up for this mode and CPU.
    pub(crate) fn command(&self, program: &str) -> Result<Command, String> {
        let mut cmd = Command::new(program);
        let current = std::env::var_os("LD_PRELOAD");
        cmd.env_remove(crate::bench::paths::sockets::PORT_ENV).env(OWNER_ENV, std::process::id().to_string());
        match self.mode {
            Mode::Kernel => match preload::without_library(current.as_deref()) {
                Some(list) => cmd.env("LD_PRELOAD", list),
                None => cmd.env_remove("LD_PRELOAD"),
            },
            Mode::Lanes => {
                let lib = self.lib.as_deref().ok_or("no library")?;
                cmd.env("LD_PRELOAD", preload::with_library(current.as_deref(), lib))
                    .env("LANES_SOCKETS", "1")
                    .env("LANES_SOCKETS_INCLUDE", self.port.to_string())
                    .env_remove("LANES_SOCKETS_EXCLUDE")
            }
        };
        pin_and_tie(&mut cmd, self.cpu);
        Ok(cmd)
    }
}

/// In the child before exec: pin to `cpu` (as `taskset -c` would) and ask the kernel to kill
/// it when `lanes` dies, so that not even a `kill -9` of `lanes` leaves a server running.
fn pin_and_tie(cmd: &mut Command, cpu: Option<usize>) {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let pin = cpu.filter(|&c| c < libc::CPU_SETSIZE as usize);
    if let Some(c) = pin {
        // SAFETY: c is below CPU_SETSIZE (checked above).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
    // system calls (sched_setaffinity, prctl, getppid) on data it owns.
    unsafe {
        cmd.pre_exec(move || {
            if pin.is_some() && libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                // `lanes` died before the prctl: do not run at all.
                return Err(std::io::Error::other("lanes exited"));
            }
            Ok(())
        });
    }
}

/// Whether some socket listens on TCP `port` (IPv4 or IPv6), from /proc/net: no connection
/// is made, which matters for servers that serve one client and exit (`iperf3 -1`).
/// Whether a TCP socket listens on `port`, or a UDP socket is bound to it (a UDP server is
/// ready once bound).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    let udp_bound = ["/proc/net/udp", "/proc/net/udp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines()
                .skip(1)
                .any(|l| l.split_whitespace().nth(1).is_some_and(|local| format!("{local} ").ends_with(&want)))
        })
    });
    udp_bound
        || ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
            std::fs::read_to_string(f).is_ok_and(|t| {
                t.lines().skip(1).any(|l| {
                    let mut w = l.split_whitespace();
                    let local = w.nth(1).unwrap_or("");
                    let state = w.nth(1).unwrap_or("");
                    state == "0A" && format!("{local} ").ends_with(&want)
                })
            })
        })
}

fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    v[v.len().saturating_sub(lines)..].join(" | ")
}

/// A running server: stopped (SIGTERM, then SIGKILL) and reaped when dropped.
pub(crate) struct Server {
    child: Option<Child>,
    name: String,
    log: std::fs::File,
}

impl Server {
    /// Starts `cmd` and waits until it listens on `port`.
    pub(crate) fn start(mut cmd: Command, name: &str, port: u16) -> Result<Server, String> {
        check_stop()?;
        // The server's output goes to an unlinked file (appending, so our reads at offsets do
        // not disturb its writes): nothing is left in /tmp however `lanes` ends.
        let path = std::env::temp_dir().join(format!("lanes-bench-sockets-{}-{port}.log", std::process::id()));
        let log = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let _ = std::fs::remove_file(&path);
        let out = log.try_clone().map_err(|e| e.to_string())?;
        let err = log.try_clone().map_err(|e| e.to_string())?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd.spawn().map_err(|e| format!("starting {name}: {e}"))?;
        let mut s = Server { child: Some(child), name: name.to_string(), log };
        let start = Instant::now();
        while !listening(port) {
            check_stop()?;
            if let Some(st) = s.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(format!("{name} exited with {st} before listening: {}", tail(&s.output(), 3)));
            }
            if start.elapsed() > Duration::from_secs(15) {
                return Err(format!("{name} did not listen on port {port} within 15 s: {}", tail(&s.output(), 3)));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(s)
    }

    /// What the server printed so far.
    pub(crate) fn output(&self) -> String {
        use std::os::unix::fs::FileExt;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n @ 1..) = self.log.read_at(&mut chunk, buf.len() as u64) {
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > 1 << 20 {
                break;
            }
        }
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Waits up to `limit` for the server to exit by itself (`iperf3 -1`); stops it otherwise.
    pub(crate) fn wait_exit(mut self, limit: Duration) {
        let start = Instant::now();
        while let Some(c) = self.child.as_mut() {
            if !matches!(c.try_wait(), Ok(None)) || start.elapsed() > limit || stopped() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn stop(&mut self) {
        let Some(mut c) = self.child.take() else { return };
        if let Ok(None) = c.try_wait() {
            if let Ok(pid) = libc::pid_t::try_from(c.id()) {
                // SAFETY: kill has no memory preconditions; the pid is our unreaped child.
                unsafe { libc::kill(pid, libc::SIGTERM) };
            }
            let start = Instant::now();
            while matches!(c.try_wait(), Ok(None)) && start.elapsed() < Duration::from_secs(3) {
                std::thread::sleep(Duration::from_millis(5));
            }
            if let Ok(None) = c.try_wait() {
                eprintln!("lanes bench sockets: {} ignored SIGTERM; killing it", self.name);
                let _ = c.kill();
            }
        }
        let _ = c.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Kills and reaps a client on drop.
struct Reaped(Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs a client to completion within `limit`; its standard output, or why it failed.
pub(crate) fn run_client(mut cmd: Command, name: &str, limit: Duration) -> Result<String, String> {
    check_stop()?;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().map_err(|e| format!("starting {name}: {e}"))?;
    let readers = [child.stdout.take().map(collect), child.stderr.take().map(collect)];
    let mut guard = Reaped(Some(child));
    let start = Instant::now();
    let status = loop {
        let c = guard.0.as_mut().ok_or("no child")?;
        if let Some(st) = c.try_wait().map_err(|e| format!("waiting for {name}: {e}"))? {
            break st;
        }
        check_stop()?;
        if start.elapsed() > limit {
            drop(guard);
            return Err(format!("{name} did not finish within {} s; killed", limit.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    guard.0 = None;
    let [out, err] = readers.map(|r| r.and_then(|h| h.join().ok()).unwrap_or_default());
    if !status.success() {
        let said = if err.trim().is_empty() { tail(&out, 3) } else { tail(&err, 3) };
        return Err(format!("{name} exited with {status}: {said}"));
    }
    Ok(out)
}

fn collect<R: Read + Send + 'static>(mut r: R) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = r.read_to_end(&mut b);
        String::from_utf8_lossy(&b).into_owned()
    })
}

/// Where a program is: in `PATH`, else (for PostgreSQL's server programs, which Debian keeps
/// out of `PATH`) in the newest `/usr/lib/postgresql/N/bin`.
pub(crate) fn find_program(program: &str) -> Option<PathBuf> {
    if let Some(p) = which(program) {
        return Some(p);
    }
    if !matches!(program, "postgres" | "initdb" | "pg_ctl") {
        return None;
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path())))
        .collect();
    versions.sort();
    versions.into_iter().rev().map(|(_, d)| d.join("bin").join(program)).find(|p| is_executable(p))
}

/// Busy-loop processes, one pinned to each CPU (`sh -c 'while :; do :; done'`), for as long
/// as this lives: other work competing with the measured programs for every core.
pub(crate) struct Hogs(Vec<Child>);

impl Hogs {
    pub(crate) fn start(cpus: &[usize]) -> Result<Hogs, String> {
        check_stop()?;
        let mut hogs = Hogs(Vec::new());
        for &cpu in cpus {
            let launch = Launch { mode: Mode::Kernel, lib: None, port: 0, cpu: Some(cpu) };
            let mut cmd = launch.command("sh")?;
            cmd.args(["-c", "while :; do :; done"]).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            hogs.0.push(cmd.spawn().map_err(|e| format!("starting a CPU hog: {e}"))?);
        }
        // Let them reach the CPUs before the measurement starts.
        std::thread::sleep(Duration::from_millis(50));
        Ok(hogs)
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
        }
        for c in &mut self.0 {
            let _ = c.wait();
        }
    }
}

/// Where a program is in `PATH`, if it is.
pub(crate) fn which(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path).map(|d| d.join(program)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    #[test]
    fn sees_a_listener_without_connecting() {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(listening(port));
        drop(l);
        // A child forked by a concurrent test may hold the socket until it execs.
        let t = Instant::now();
        while listening(port) {
            assert!(t.elapsed() < Duration::from_secs(5), "port {port} still listening");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn clients_are_bounded_and_failures_explained() {
        let launch = Launch { mode: Mode::Kernel, lib: None, port: 1, cpu: None };
        let mut c = launch.command("sh").unwrap();
        c.args(["-c", "echo hi"]);
        assert_eq!(run_client(c, "sh", Duration::from_secs(10)).unwrap(), "hi\n");
        let mut c = launch.command("sh").unwrap();
        c.args(["-c", "echo oops >&2; exit 3"]);
        let e = run_client(c, "sh", Duration::from_secs(10)).unwrap_err();
        assert!(e.contains("oops") && e.contains('3'), "{e}");
        let mut c = launch.command("sleep").unwrap();
        c.arg("30");
        let t = Instant::now();
        assert!(run_client(c, "sleep", Duration::from_millis(200)).unwrap_err().contains("killed"));
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(launch.command("x").is_ok());
        let lanes = Launch { mode: Mode::Lanes, lib: None, port: 1, cpu: None };
        assert!(lanes.command("x").is_err());
    }

    #[test]
    fn a_server_that_dies_early_is_explained() {
        let port = free_port().unwrap();
        let launch = Launch { mode: Mode::Kernel, lib: None, port, cpu: affinity_cpu() };
        let mut c = launch.command("sh").unwrap();
        c.args(["-c", "echo starting; echo boom >&2; exit 4"]);
        let e = Server::start(c, "the server", port).err().expect("it never listens");
        assert!(e.contains("the server exited") && e.contains("boom") && e.contains("starting"), "{e}");
    }

    fn affinity_cpu() -> Option<usize> {
        crate::measure::affinity::allowed_cpus().first().copied()
    }
}
