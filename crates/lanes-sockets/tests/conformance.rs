//! Socket conformance, the way a user meets the library: tests/sockconf/ (one C program of
//! named cases, each printing a canonical transcript) built with plain `cc -O2 -Wall
//! -Wextra -Werror`, and once more with `-D_FORTIFY_SOURCE=2 -D_FILE_OFFSET_BITS=64` (so
//! `__read_chk`, `__poll_chk`, `fcntl64`, `sendfile64`... are what the program calls). Every
//! case runs
//!
//! - without the library: the reference transcript (run twice: it must be deterministic);
//! - with `LD_PRELOAD=liblanes_sockets.so` on both sides;
//! - the same with `LANES_POLL_US=0 LANES_SOCKETS_RING=4096` (no spinning, a small ring: every
//!   switch between ring and kernel is hit constantly);
//! - and, for cases that can run as two programs, with the library on the server only and on
//!   the client only;
//!
//! and every transcript must equal the reference, byte for byte; a failure prints a diff.
//! Each run gets its own LANES_DIR and TMPDIR. The library is looked up next to this test
//! binary (`cargo build -p lanes-sockets` builds it; tests do not).

mod support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lanes::sockets::registry::Receiving;
use support::{clean_command, diff, free_port, library, run_bounded, Finished, Program, TestDir};

/// A sockconf run normally ends in well under 2 s; its own watchdog stops it after 20 s.
const RUN_LIMIT: Duration = Duration::from_secs(60);
/// Runs at once per test function.
const WORKERS: usize = 4;

/// The two builds of sockconf in a private directory.
struct Sockconf {
    dir: TestDir,
    plain: PathBuf,
    fortify: PathBuf,
}

/// The C fixtures of these tests: sockconf's files and forkserve.c.
fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sockconf")
}

/// sockconf's source files: every C file of [`fixtures`] but forkserve.c, in name order.
fn sockconf_sources() -> Vec<PathBuf> {
    let dir = fixtures();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "c") && !p.ends_with("forkserve.c"))
        .collect();
    files.sort();
    files
}

fn cc(args: &[&str], out: &Path) {
    let mut cmd = Command::new("cc");
    cmd.args(["-O2", "-Wall", "-Wextra", "-Werror", "-pthread"]).args(args).args(sockconf_sources()).arg("-o").arg(out);
    let o = cmd.output().unwrap_or_else(|e| panic!("cannot run cc ({e}): run scripts/test.sh to install gcc"));
    assert!(o.status.success(), "{cmd:?} failed: {}\n{}", o.status, String::from_utf8_lossy(&o.stderr));
}

impl Sockconf {
    fn build(name: &str) -> Sockconf {
        let dir = TestDir::named("sockconf", name);
        let plain = dir.path("sockconf");
        let fortify = dir.path("sockconf-fortify");
        cc(&[], &plain);
        cc(&["-D_FORTIFY_SOURCE=2", "-D_FILE_OFFSET_BITS=64"], &fortify);
        Sockconf { dir, plain, fortify }
    }

    /// `sockconf --list`: (name, runs split).
    fn list(&self) -> Vec<(String, bool)> {
        let o = Command::new(&self.plain).arg("--list").output().expect("sockconf --list");
        assert!(o.status.success(), "sockconf --list: {}", o.status);
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| {
                let mut f = l.split('\t');
                let name = f.next().expect("name").to_string();
                (name, f.next() == Some("split"))
            })
            .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Build {
    Plain,
    Fortify,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Setup {
    /// No library (the reference, and its repetition).
    Kernel,
    /// The library in both processes.
    Preload,
    /// The library with LANES_POLL_US=0 and a 4 KiB ring.
    PreloadSmallRing,
    /// Two programs, the library in the server only.
    ServerOnly,
    /// Two programs, the library in the client only.
    ClientOnly,
}

impl Setup {
    fn label(self) -> &'static str {
        match self {
            Setup::Kernel => "no library",
            Setup::Preload => "library",
            Setup::PreloadSmallRing => "library, LANES_POLL_US=0, 4 KiB ring",
            Setup::ServerOnly => "library in the server only",
            Setup::ClientOnly => "library in the client only",
        }
    }
}

struct Job {
    case: String,
    build: Build,
    setup: Setup,
    reference: bool,
}

struct Outcome {
    job: Job,
    transcript: String,
    /// Exit statuses and stderr, when something did not end with status 0.
    trouble: Option<String>,
    elapsed: Duration,
}

fn sockconf_command(bin: &Path, run_dir: &Path, preload: Option<&Path>, small_ring: bool) -> Command {
    let mut c = clean_command(bin);
    c.env("LANES_DIR", run_dir.join("fabric")).env("TMPDIR", run_dir);
    if let Some(lib) = preload {
        c.env("LD_PRELOAD", lib);
    }
    if small_ring {
        // Every connection set up at once (none put off): the cases exercise the ring's
        // own semantics however few calls they make.
        c.env("LANES_POLL_US", "0").env("LANES_SOCKETS_RING", "4096").env("LANES_SOCKETS_DEFER", "0");
    }
    c
}

fn trouble(f: &Finished, what: &str) -> Option<String> {
    (!f.ok()).then(|| f.describe(what))
}

fn run_job(sc: &Sockconf, lib: &Path, job: Job, seq: usize) -> Outcome {
    let bin = match job.build {
        Build::Plain => &sc.plain,
        Build::Fortify => &sc.fortify,
    };
    let run_dir = sc.dir.sub(&format!("run-{seq}"));
    let start = Instant::now();
    let (transcript, trouble_text) = match job.setup {
        Setup::Kernel | Setup::Preload | Setup::PreloadSmallRing => {
            let preload = (job.setup != Setup::Kernel).then_some(lib);
            let mut cmd = sockconf_command(bin, &run_dir, preload, job.setup == Setup::PreloadSmallRing);
            cmd.arg(&job.case);
            let f = run_bounded(cmd, &job.case, RUN_LIMIT);
            let t = trouble(&f, &format!("sockconf {}", job.case));
            (f.stdout, t)
        }
        Setup::ServerOnly | Setup::ClientOnly => {
            // A port that was free; if another program takes it meanwhile the server's bind
            // fails, and the pair runs again on another.
            let mut attempt = 0;
            loop {
                attempt += 1;
                let port = free_port().to_string();
                let side = |role: &str, with_lib: bool| {
                    let mut cmd = sockconf_command(bin, &run_dir, with_lib.then_some(lib), false);
                    cmd.args([job.case.as_str(), "--role", role, "--port", &port]);
                    Program::spawn(cmd, &format!("{} {role}", job.case))
                };
                let server = side("server", job.setup == Setup::ServerOnly);
                let client = side("client", job.setup == Setup::ClientOnly);
                let c = client.wait(RUN_LIMIT);
                let s = server.wait(RUN_LIMIT);
                if s.stdout.contains("FATAL: bind") && attempt < 3 {
                    continue;
                }
                let t = match (trouble(&s, "server"), trouble(&c, "client")) {
                    (None, None) => None,
                    (a, b) => Some(format!("{}{}", a.unwrap_or_default(), b.unwrap_or_default())),
                };
                break (format!("{}{}", s.stdout, c.stdout), t);
            }
        }
    };
    let _ = std::fs::remove_dir_all(&run_dir);
    Outcome { job, transcript, trouble: trouble_text, elapsed: start.elapsed() }
}

/// Runs every case of a group in every setup and fails with every difference found.
fn check_group(group: &str, cases: &[&str]) {
    check_group_in(group, cases, Matrix::Full)
}

/// As [`check_group`], for cases that take seconds per run: the plain build only, without
/// the library (the reference), with it, and with it at LANES_POLL_US=0 and a 4 KiB ring.
fn check_group_lean(group: &str, cases: &[&str]) {
    check_group_in(group, cases, Matrix::Lean)
}

/// As [`check_group`], for cases whose transcript holds only while no receiver spins: the
/// reference, and the library in both processes at LANES_POLL_US=0 and a 4 KiB ring, both
/// builds.
fn check_group_unspun(group: &str, cases: &[&str]) {
    check_group_in(group, cases, Matrix::Unspun)
}

#[derive(Clone, Copy, PartialEq)]
enum Matrix {
    Full,
    Lean,
    Unspun,
}

fn check_group_in(group: &str, cases: &[&str], matrix: Matrix) {
    let lib = library();
    let sc = Sockconf::build(group);
    let listed = sc.list();
    let mut jobs = Vec::new();
    for &case in cases {
        let split = listed.iter().find(|(n, _)| n == case).unwrap_or_else(|| panic!("sockconf has no case {case}")).1;
        let mut add = |build, setup, reference| jobs.push(Job { case: case.to_string(), build, setup, reference });
        add(Build::Plain, Setup::Kernel, true);
        if matrix == Matrix::Lean {
            add(Build::Plain, Setup::Preload, false);
            add(Build::Plain, Setup::PreloadSmallRing, false);
            continue;
        }
        if matrix == Matrix::Unspun {
            add(Build::Plain, Setup::PreloadSmallRing, false);
            add(Build::Fortify, Setup::PreloadSmallRing, false);
            continue;
        }
        add(Build::Plain, Setup::Kernel, false);
        add(Build::Fortify, Setup::Kernel, false);
        for build in [Build::Plain, Build::Fortify] {
            add(build, Setup::Preload, false);
            add(build, Setup::PreloadSmallRing, false);
        }
        if split {
            add(Build::Plain, Setup::ServerOnly, false);
            add(Build::Plain, Setup::ClientOnly, false);
        }
    }
    // Longest cases first would be nicer; the order of the table is good enough.
    let queue = Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>());
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..WORKERS {
            s.spawn(|| loop {
                let next = queue.lock().expect("queue").pop();
                let Some((seq, job)) = next else { break };
                let out = run_job(&sc, &lib, job, seq);
                results.lock().expect("results").push(out);
            });
        }
    });
    let results = results.into_inner().expect("results");

    let mut failures = Vec::new();
    let mut summary = String::new();
    for &case in cases {
        let mine: Vec<&Outcome> = results.iter().filter(|o| o.job.case == case).collect();
        let reference = mine.iter().find(|o| o.job.reference).expect("reference run");
        if let Some(t) = &reference.trouble {
            failures.push(format!("{case}: the reference run (no library) failed:\n{t}"));
            continue;
        }
        let bad_reference = ["TIMEOUT", "FATAL", "MISMATCH"].iter().find(|w| reference.transcript.contains(*w));
        if let Some(w) = bad_reference {
            failures.push(format!("{case}: the reference transcript says {w}:\n{}", reference.transcript));
            continue;
        }
        for o in mine.iter().filter(|o| !o.job.reference) {
            let what = format!("{case} [{:?} build, {}]", o.job.build, o.job.setup.label());
            let same = o.transcript == reference.transcript;
            let verdict = match (&o.trouble, same) {
                (None, true) => "ok",
                _ => "FAIL",
            };
            summary.push_str(&format!("  {verdict:4} {what} ({} ms)\n", o.elapsed.as_millis()));
            if o.job.setup == Setup::Kernel && !same {
                failures.push(format!(
                    "{what}: the transcript without the library is not deterministic (a sockconf bug):\n{}",
                    diff(&reference.transcript, &o.transcript, 40)
                ));
                continue;
            }
            if !same {
                failures.push(format!(
                    "{what}: transcript differs (- without the library, + this run):\n{}",
                    diff(&reference.transcript, &o.transcript, 40)
                ));
            }
            if let Some(t) = &o.trouble {
                failures.push(format!("{what}: did not end cleanly\n{t}"));
            }
        }
    }
    eprintln!("sockconf group {group}:\n{summary}");
    assert!(failures.is_empty(), "{} failure(s) in group {group}:\n\n{}", failures.len(), failures.join("\n"));
}

const CONNECT: &[&str] =
    &["connect-echo", "connect-nonblock", "connect-refused", "ipv6-echo", "many-conns", "accept-nonblock"];
const DATA_CALLS: &[&str] = &[
    "io-readwrite",
    "io-sendrecv",
    "io-sendto",
    "io-msg",
    "io-vec",
    "io-mmsg",
    "io-mmsg-mixed",
    "io-v2",
    "io-v2-mixed",
    "io-v2-after-ring",
    "fortified-calls",
    "zero-length",
    "seccomp-rw",
];
const FLAGS: &[&str] = &[
    "msg-peek",
    "msg-dontwait",
    "msg-waitall",
    "msg-oob",
    "msg-trunc",
    "msg-zerocopy",
    "kernel-features",
    "kernel-features-early",
    "tcp-inq",
    "tcp-ulp",
    "msg-nosignal",
    "sigpipe",
];
/// Urgent data and the receive low-water mark on connections that carried data both ways
/// first (in ring mode under the library), read with every readiness call.
const URGENT_AND_LOWAT: &[&str] = &["oob-ring", "rcvlowat", "rcvlowat-unread"];
const CLOSE_AND_SHUTDOWN: &[&str] = &["shutdown-wr", "shutdown-misc", "close-unread", "linger-reset"];
const DESCRIPTORS: &[&str] =
    &["dup", "close-range", "raw-close", "unseen-write", "errno-kept", "nonblock-toggle", "cloexec"];
const POLL_AND_SELECT: &[&str] = &["poll", "ppoll", "select", "pselect"];
const EPOLL: &[&str] = &[
    "epoll-lt",
    "epoll-late-add",
    "epoll-et",
    "epoll-oneshot",
    "epoll-del",
    "epoll-reuse",
    "epoll-mixed",
    "epoll-nested",
    "epoll-two-sets",
    "epoll-polled",
    "epoll-pwait",
    "epoll-fork",
];
const IOCTL_NAMES_OPTIONS: &[&str] = &["fionread", "names", "sockopt", "nodelay", "timeouts"];
/// Whether the kernel socket keeps Nagle's algorithm depends on whether the receiver asks
/// for the ring (it does when it may spin), so these run where nobody spins only (see
/// [`check_group_unspun`]).
const WITHOUT_SPINNING: &[&str] = &["nagle-one-way"];
const FILES_AND_PIPES: &[&str] = &["sendfile", "splice", "stdio"];
const PROCESSES_AND_THREADS: &[&str] = &[
    "fork-share",
    "exec",
    "exec-handoff",
    "execle-handoff",
    "execveat-handoff",
    "fexecve-handoff",
    "posix-spawn",
    "exit-handlers",
    "io-uring-epoll",
    "threads",
    "fork-busy-threads",
    "pass-fd",
];
const STREAMS: &[&str] = &[
    "stream-64m",
    "stream-duplex",
    "send-eagain",
    "ring-then-kernel",
    "pingpong-slow",
    "request-stream",
    "large-answers",
];
/// Long enough to matter, so run in fewer setups (see [`check_group_lean`]).
const LONG_STREAMS: &[&str] = &["stream-4g"];
const PEER_DEATH: &[&str] = &["peer-killed-writer", "peer-killed-reader", "peer-killed-unread", "peer-killed-unreaped"];
const SIGNALS: &[&str] = &["eintr", "eintr-restart", "eintr-wait", "eintr-spin", "eintr-send", "handler-send", "sigio"];

const GROUPS: &[&[&str]] = &[
    CONNECT,
    DATA_CALLS,
    FLAGS,
    URGENT_AND_LOWAT,
    CLOSE_AND_SHUTDOWN,
    DESCRIPTORS,
    POLL_AND_SELECT,
    EPOLL,
    IOCTL_NAMES_OPTIONS,
    FILES_AND_PIPES,
    PROCESSES_AND_THREADS,
    STREAMS,
    LONG_STREAMS,
    PEER_DEATH,
    SIGNALS,
    WITHOUT_SPINNING,
];

#[test]
fn connect() {
    check_group("connect", CONNECT);
}

#[test]
fn data_calls() {
    check_group("data-calls", DATA_CALLS);
}

#[test]
fn message_flags_and_sigpipe() {
    check_group("flags", FLAGS);
}

#[test]
fn urgent_data_and_low_water_mark() {
    check_group("urgent", URGENT_AND_LOWAT);
}

#[test]
fn close_and_shutdown() {
    check_group("close", CLOSE_AND_SHUTDOWN);
}

#[test]
fn descriptors() {
    check_group("descriptors", DESCRIPTORS);
}

#[test]
fn poll_and_select() {
    check_group("poll", POLL_AND_SELECT);
}

#[test]
fn epoll() {
    check_group("epoll", EPOLL);
}

#[test]
fn ioctl_names_and_options() {
    check_group("ioctl", IOCTL_NAMES_OPTIONS);
}

#[test]
fn sendfile_splice_stdio() {
    check_group("files", FILES_AND_PIPES);
}

#[test]
fn processes_and_threads() {
    check_group("processes", PROCESSES_AND_THREADS);
}

#[test]
fn streams() {
    check_group("streams", STREAMS);
}

/// A stream of several GiB arrives byte-exact (every byte checked against its pattern).
#[test]
fn long_streams() {
    check_group_lean("long-streams", LONG_STREAMS);
}

#[test]
fn peer_death() {
    check_group("death", PEER_DEATH);
}

#[test]
fn signals() {
    check_group("signals", SIGNALS);
}

/// A one-way stream of small writes keeps Nagle's algorithm in the kernel socket while the
/// ring is not used.
#[test]
fn without_spinning() {
    check_group_unspun("unspun", WITHOUT_SPINNING);
}

/// Every case sockconf lists runs in exactly one group above.
#[test]
fn every_case_is_in_a_group() {
    let sc = Sockconf::build("list");
    let listed: BTreeSet<String> = sc.list().into_iter().map(|(n, _)| n).collect();
    let mut grouped = BTreeSet::new();
    for g in GROUPS {
        for c in *g {
            assert!(grouped.insert(c.to_string()), "{c} is in two groups");
        }
    }
    assert_eq!(listed, grouped, "sockconf --list and the groups of this file differ");
}

/// The fortified build really calls the checking variants, so the library must export them.
#[test]
fn fortified_build_calls_the_checking_functions() {
    let sc = Sockconf::build("nm");
    let o = Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(&sc.fortify)
        .output()
        .unwrap_or_else(|e| panic!("cannot run nm ({e}): run scripts/test.sh to install binutils"));
    let syms = String::from_utf8_lossy(&o.stdout);
    for want in [
        "__read_chk",
        "__recv_chk",
        "__recvfrom_chk",
        "__poll_chk",
        "__ppoll_chk",
        "fcntl64",
        "sendfile64",
        "preadv64v2",
        "pwritev64v2",
    ] {
        assert!(
            syms.lines().any(|l| l.split_whitespace().last().is_some_and(|s| s.split('@').next() == Some(want))),
            "the fortified sockconf does not import {want}:\n{syms}"
        );
    }
}

/// The `[sockets]` section of the configuration file chooses what is accelerated, each key
/// overridden by its environment variable; a section that makes no sense turns acceleration
/// off (with a line on stderr) and the program still runs.
#[test]
fn a_config_file_chooses_what_is_accelerated() {
    let lib = library();
    let sc = Sockconf::build("config");
    struct Case {
        name: &'static str,
        toml: &'static str,
        env: &'static [(&'static str, &'static str)],
        /// Whether connection records must appear.
        accelerated: bool,
        /// What stderr must contain.
        says: &'static str,
    }
    let cases = [
        Case { name: "off", toml: "[sockets]\nenabled = false\n", env: &[], accelerated: false, says: "" },
        Case { name: "excluded", toml: "[sockets]\nexclude = \"1-65535\"\n", env: &[], accelerated: false, says: "" },
        Case {
            name: "env-wins",
            toml: "[sockets]\nexclude = \"1-65535\"\n",
            env: &[("LANES_SOCKETS_EXCLUDE", "0")],
            accelerated: true,
            says: "",
        },
        Case {
            name: "included",
            toml: "[sockets]\ninclude = \"1-65535\"\nring_bytes = 8192\n",
            env: &[],
            accelerated: true,
            says: "",
        },
        Case {
            name: "nonsense",
            toml: "[sockets]\ninclude = \"5201,x\"\n",
            env: &[],
            accelerated: false,
            says: "every connection stays kernel TCP",
        },
    ];
    let mut failures = Vec::new();
    for Case { name, toml, env, accelerated, says } in cases {
        let run_dir = sc.dir.sub(name);
        let fabric = run_dir.join("fabric");
        let conf = run_dir.join("lanes.toml");
        std::fs::write(&conf, toml).expect("lanes.toml");
        let mut cmd = sockconf_command(&sc.plain, &run_dir, Some(&lib), false);
        // Set up at once: what is looked at is what the configuration chose.
        cmd.env("LANES_CONFIG", &conf).env("LANES_SOCKETS_DEFER", "0").envs(env.iter().copied()).arg("stream-duplex");
        let mut p = Program::spawn(cmd, name);
        let mut records = 0usize;
        let start = Instant::now();
        while !p.exited() && start.elapsed() < RUN_LIMIT {
            records = records.max(lanes::sockets::registry::list_connections(&fabric).len());
            std::thread::sleep(Duration::from_millis(2));
        }
        let f = p.wait(RUN_LIMIT);
        if !f.ok() {
            failures.push(f.describe(name));
        }
        if (records > 0) != accelerated {
            failures.push(format!("{name}: {records} connection records seen, expected accelerated: {accelerated}"));
        }
        if !f.stderr.contains(says) {
            failures.push(format!("{name}: stderr does not say {says:?}:\n{}", f.stderr));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The transcripts above would also match if the library left every connection to the
/// kernel; this checks that, for a long stream with the library on both sides, both ends
/// attached to each other and bytes went through the ring. How many bytes the ring carries
/// depends on scheduling (a receiver that is never on a CPU when data comes gets it through
/// the kernel), so a run may go all-kernel on a loaded machine: the library refuses to spin
/// while more threads are runnable than CPUs, which this test turns off
/// (`LANES_SPIN_GATE=0`: the gate is the spin tests' subject, the ring this one's). Up to
/// five runs per case, and the test runs alone (`.config/nextest.toml`). On a quiet machine
/// the first run attaches.
#[test]
fn the_library_really_accelerates() {
    let lib = library();
    let sc = Sockconf::build("accel");
    for case in ["stream-64m", "stream-duplex"] {
        let mut tries = Vec::new();
        for attempt in 1..=5 {
            let run_dir = sc.dir.sub(&format!("{case}-{attempt}"));
            let fabric = run_dir.join("fabric");
            let mut cmd = sockconf_command(&sc.plain, &run_dir, Some(&lib), false);
            cmd.env("LANES_SPIN_GATE", "0").arg(case);
            let mut p = Program::spawn(cmd, case);
            let (mut attached, mut ring_bytes) = (0usize, 0u64);
            let start = Instant::now();
            while !p.exited() && start.elapsed() < RUN_LIMIT {
                let conns = lanes::sockets::registry::list_connections(&fabric);
                attached = attached.max(conns.iter().filter(|c| c.peer_attached).count());
                ring_bytes = ring_bytes.max(conns.iter().map(|c| c.ring_bytes_sent).sum());
                std::thread::sleep(Duration::from_millis(2));
            }
            let f = p.wait(RUN_LIMIT);
            assert!(f.ok(), "{}", f.describe(case));
            eprintln!("{case}, run {attempt}: most ends attached at once {attached}, ring bytes {ring_bytes}");
            tries.push((attached, ring_bytes));
            if attached >= 2 && ring_bytes > 0 {
                break;
            }
        }
        assert!(
            tries.iter().any(|&(attached, ring)| attached >= 2 && ring > 0),
            "{case}: in no run did both ends attach and bytes go through the ring (ends attached, ring bytes): {tries:?}"
        );
    }
}

/// Runs `case` without the library, then with it in both processes (`small_ring` as for
/// [`sockconf_command`], `env` added), handing `look` the records every `every` while it
/// runs; the run must end well with the kernel's transcript. Its result and its fabric
/// directory.
fn watched_run(
    sc: &Sockconf,
    case: &str,
    small_ring: bool,
    env: &[(&str, &str)],
    every: Duration,
    mut look: impl FnMut(&[lanes::sockets::registry::ConnectionInfo]),
) -> (Finished, PathBuf) {
    let lib = library();
    let mut plain = sockconf_command(&sc.plain, &sc.dir.sub("kernel"), None, false);
    plain.arg(case);
    let kernel = run_bounded(plain, case, RUN_LIMIT);
    assert!(kernel.ok(), "{}", kernel.describe(case));
    let run_dir = sc.dir.sub("preload");
    let fabric = run_dir.join("fabric");
    let mut cmd = sockconf_command(&sc.plain, &run_dir, Some(&lib), small_ring);
    cmd.envs(env.iter().copied()).arg(case);
    let mut p = Program::spawn(cmd, case);
    let start = Instant::now();
    while !p.exited() && start.elapsed() < RUN_LIMIT {
        look(&lanes::sockets::registry::list_connections(&fabric));
        std::thread::sleep(every);
    }
    let f = p.wait(RUN_LIMIT);
    assert!(f.ok(), "{}", f.describe(case));
    assert_eq!(f.stdout, kernel.stdout, "the transcript under the library differs from kernel TCP's");
    (f, fabric)
}

/// Spinning allowed whatever the load, and every connection set up at once: a case's
/// bytes go through the ring whenever the library would use it.
const RING_AT_ONCE: [(&str, &str); 2] = [("LANES_SPIN_GATE", "0"), ("LANES_SOCKETS_DEFER", "0")];

/// A program that puts its sockets into an epoll set through an io_uring (libuv does for
/// every epoll_ctl ADD and MOD), whose waits the library therefore cannot make watch a
/// ring: once it set the ring up, its connections stay kernel TCP, said once, and every
/// message wakes its wait as on kernel TCP. With spinning allowed and every connection set
/// up at once, so that the ring would be used if the connection were set up (and a wait
/// would then miss its bytes: the server stopped after a few messages).
#[test]
fn a_process_with_an_io_uring_keeps_its_connections_on_the_kernel() {
    let mut attached = 0usize;
    let sc = Sockconf::build("io-uring");
    let (f, _) = watched_run(&sc, "io-uring-epoll", false, &RING_AT_ONCE, Duration::from_millis(1), |conns| {
        attached = attached.max(conns.iter().filter(|c| c.peer_attached).count());
    });
    if f.stdout.contains("io_uring_setup unavailable") {
        eprintln!("no io_uring on this kernel: nothing more to check");
        return;
    }
    assert_eq!(attached, 0, "a connection of the process with an io_uring was set up");
    assert_eq!(lines_with(&f.stderr, "set up an io_uring"), 1, "{}", f.stderr);
}

/// With an include list that names the server's port (as `lanes bench sockets` sets one),
/// each connection is still deferred without a question to the kernel at both ends: 16
/// connections at once (`many-conns`, server and client as two processes, each under
/// strace) make no name or option call but the server's one look at its listening
/// socket's port. Before, each end asked the protocol and both names per connection.
#[test]
fn an_include_list_naming_the_port_asks_the_kernel_nothing_per_connection() {
    let sc = Sockconf::build("include-list");
    let lib = library();
    let port = free_port().to_string();
    let counts = |role: &str| {
        let out = sc.dir.path(&format!("strace-{role}"));
        let mut cmd = clean_command("strace");
        cmd.env("LANES_DIR", sc.dir.path("fabric"))
            .env("TMPDIR", sc.dir.root())
            .env("LANES_SOCKETS_INCLUDE", &port)
            .args(["-f", "-c", "-o"])
            .arg(&out)
            .arg("-E")
            .arg(format!("LD_PRELOAD={}", lib.display()))
            .arg(&sc.plain)
            .args(["many-conns", "--role", role, "--port", &port]);
        (Program::spawn(cmd, &format!("many-conns {role}")), out)
    };
    let (server, server_counts) = counts("server");
    let (client, client_counts) = counts("client");
    let c = client.wait(RUN_LIMIT);
    let s = server.wait(RUN_LIMIT);
    assert!(s.ok() && c.ok(), "{}{}", s.describe("server"), c.describe("client"));
    assert!(s.stdout.contains("every index seen once and answered: yes"), "{}", s.stdout);
    let calls = |file: &Path, name: &str| -> u64 {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        // strace -c's rows: % time, seconds, usecs/call, calls, [errors,] syscall.
        text.lines()
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f.len() >= 5 && f.last() == Some(&name))
            .map(|f| f[3].parse::<u64>().expect("a count"))
            .sum()
    };
    for (end, file, own_look) in [("server", &server_counts, 1), ("client", &client_counts, 0)] {
        let names = calls(file, "getsockname") + calls(file, "getpeername");
        assert!(names <= own_look, "{end}: {names} name calls for 16 connections");
        assert_eq!(calls(file, "getsockopt"), 0, "{end}: option calls for 16 connections");
    }
}

/// A signal handler that sends while the program is blocked in a read of a pipe: with
/// spinning allowed (the receiver asks for the ring) the bytes before and after go through
/// the ring, and the handler's byte must land between them, as on kernel TCP. The C
/// library's read of the pipe runs outside the library's guard, so the handler's send is
/// the library's too.
#[test]
fn a_signal_handler_sends_in_order_while_the_program_is_blocked_elsewhere() {
    let mut ring_bytes = 0u64;
    let sc = Sockconf::build("handler-send");
    let (f, _) = watched_run(&sc, "handler-send", false, &RING_AT_ONCE, Duration::from_millis(1), |conns| {
        ring_bytes = ring_bytes.max(conns.iter().map(|c| c.ring_bytes_sent).sum());
    });
    assert!(f.stdout.contains("rounds read in order: 10 of 10"), "{}", f.stdout);
    assert!(ring_bytes > 0, "the ring carried nothing: the case did not test the ring's order");
}

/// A connection the ring cannot speed up is retired from it, and then behaves, and costs, as
/// kernel TCP: a blocking ping-pong whose every answer comes after a pause, with spinning off
/// (`LANES_POLL_US=0`: each receiver is asleep in the kernel when its bytes come, as on a
/// machine with more runnable threads than CPUs), retires
/// both directions (the records say so while it runs, the reasons files count it), every
/// echo stays right (the transcript is the kernel's), and Nagle's algorithm, forced off while
/// the ring could carry bytes, is the program's choice again in both kernel sockets.
#[test]
fn a_connection_the_ring_does_not_pay_for_is_retired_to_the_kernel() {
    let sc = Sockconf::build("retire");
    let (f, retiring) = watch_retiring(&sc, "pingpong-slow");
    assert!(f.stdout.contains("round trips 6000, wrong echoes 0"), "{}", f.stdout);
    assert_eq!(retiring.attached, 2, "both ends attached (ends seen at once)");
    assert_eq!(retiring.retired, 2, "both directions retired (ends seen retired at once); stderr:\n{}", f.stderr);
    assert!(!f.stderr.contains("liblanes_sockets:"), "retiring is counted for status, not said:\n{}", f.stderr);
    assert_eq!(retiring.counted(), 2, "each direction's retiring counted once: {:?}", retiring.reasons);
    for side in ["client", "server"] {
        assert!(
            f.stderr.contains(&format!("raw-nodelay {side} 0")),
            "the {side}'s kernel socket got Nagle's algorithm back:\n{}",
            f.stderr
        );
    }
}

/// A stream whose other direction carries next to nothing, with its receiver asleep when
/// its bytes come (spinning off), has its stream direction retired as the ring does not
/// pay; then the other direction is retired with it, so that the whole connection is
/// kernel TCP's (the records show both ends retired at once, each counted) and its calls
/// pass straight through. Every byte arrives checked, as on kernel TCP. Two shapes:
/// - `request-stream`: a 16-byte request, then a one-way stream (a subscription);
/// - `large-answers`: 64-byte requests, each answered with 64 KiB (a file server). With
///   spinning off its requests retire on their own too; the rule for a direction that
///   carries under 1/64 of the other's bytes is `stream`'s unit test's.
#[test]
fn the_idle_direction_of_a_retired_stream_is_retired_too() {
    for (case, done) in
        [("request-stream", "received 3000 messages, 0 wrong bytes"), ("large-answers", "rounds 400, wrong bytes 0")]
    {
        let sc = Sockconf::build(&format!("retire-idle-{case}"));
        let (f, retiring) = watch_retiring(&sc, case);
        assert!(f.stdout.contains(done), "{case}: {}", f.stdout);
        assert_eq!(retiring.attached, 2, "{case}: both ends attached (ends seen at once)");
        assert_eq!(
            retiring.retired, 2,
            "{case}: both directions retired (ends seen retired at once); stderr:\n{}",
            f.stderr
        );
        assert_eq!(retiring.counted(), 2, "{case}: each direction's retiring counted once: {:?}", retiring.reasons);
    }
}

/// What [`watch_retiring`] saw of a run's connections.
struct Retiring {
    /// The most ends seen attached to their peer at once.
    attached: usize,
    /// The most ends seen with their receiving direction retired at once.
    retired: usize,
    /// The reasons files after the run.
    reasons: Vec<lanes::sockets::reasons::ProcessReasons>,
}

impl Retiring {
    /// The sockets the reasons files count as "ring did not pay".
    fn counted(&self) -> u64 {
        self.reasons
            .iter()
            .flat_map(|p| p.reasons.iter())
            .filter(|r| r.reason == lanes::sockets::reasons::Reason::RingDidNotPay)
            .map(|r| r.sockets)
            .sum()
    }
}

/// Runs `case` with spinning off and a small ring (see [`watched_run`]), watching its
/// records every millisecond for ends attached and retired.
fn watch_retiring(sc: &Sockconf, case: &str) -> (Finished, Retiring) {
    let (mut retired, mut attached) = (0usize, 0usize);
    let (f, fabric) = watched_run(sc, case, true, &[], Duration::from_millis(1), |conns| {
        attached = attached.max(conns.iter().filter(|c| c.peer_attached).count());
        retired = retired.max(conns.iter().filter(|c| c.receiving == Receiving::Retired).count());
    });
    (f, Retiring { attached, retired, reasons: lanes::sockets::reasons::list_reasons(&fabric) })
}

/// With no CPU free for anyone (`LANES_SPIN_GATE=shut`: the library's view of a machine
/// with more runnable threads than CPUs), a parked direction is not tried on the ring
/// again: nobody could spin for its bytes, so a try could not pay and would only cost its
/// system calls and the sleeping protocol after it. A blocking ping-pong with retiring off
/// (so that the directions stay parked, not retired) keeps both directions parked from
/// the first sleep to its end, and its transcript is kernel TCP's.
#[test]
fn with_no_cpu_free_a_parked_direction_is_not_tried_on_the_ring_again() {
    let env = [("LANES_SPIN_GATE", "shut"), ("LANES_SOCKETS_RETIRE", "0"), ("LANES_SOCKETS_DEFER", "0")];
    // Per end (its local address): seen parked, then seen on the ring again.
    let mut parked: BTreeSet<std::net::SocketAddr> = BTreeSet::new();
    let mut tried_again: BTreeSet<std::net::SocketAddr> = BTreeSet::new();
    let mut looks = 0u32;
    let sc = Sockconf::build("parked-full");
    watched_run(&sc, "pingpong-slow", false, &env, Duration::from_micros(200), |conns| {
        for c in conns.iter().filter(|c| c.peer_attached) {
            match c.receiving {
                Receiving::Parked => {
                    parked.insert(c.local);
                }
                Receiving::Ring if parked.contains(&c.local) => {
                    tried_again.insert(c.local);
                }
                _ => {}
            }
        }
        looks += 1;
    });
    assert_eq!(parked.len(), 2, "both ends' directions parked ({looks} looks): {parked:?}");
    assert!(tried_again.is_empty(), "directions tried on the ring again after parking: {tried_again:?}");
}

/// A connection that ends within its first few data calls is never set up (no record, no
/// mapping: it costs what kernel TCP costs), and behaves as kernel TCP: the echo, the
/// non-blocking connect and sixteen connections at once, under the library on both ends,
/// give the kernel's transcripts and leave nothing in the fabric directory.
#[test]
fn short_connections_are_left_to_the_kernel_without_a_record() {
    let lib = library();
    let sc = Sockconf::build("short");
    for case in ["connect-echo", "connect-nonblock", "many-conns"] {
        let mut plain = sockconf_command(&sc.plain, &sc.dir.sub(&format!("{case}-kernel")), None, false);
        plain.arg(case);
        let kernel = run_bounded(plain, case, RUN_LIMIT);
        assert!(kernel.ok(), "{}", kernel.describe(case));
        let run_dir = sc.dir.sub(&format!("{case}-preload"));
        let mut cmd = sockconf_command(&sc.plain, &run_dir, Some(&lib), false);
        cmd.arg(case);
        let f = run_bounded(cmd, case, RUN_LIMIT);
        assert!(f.ok(), "{}", f.describe(case));
        assert_eq!(f.stdout, kernel.stdout, "{case}: the transcript under the library differs from kernel TCP's");
        // The first record a process makes creates the fabric directory (records go when
        // their connection closes, the directory stays): none was ever made.
        let fabric = run_dir.join("fabric");
        assert!(!fabric.exists(), "{case}: a record was made for a short connection (found {})", fabric.display());
    }
}

/// tests/sockconf/forkserve.c, built into `dir`.
fn build_forkserve(dir: &TestDir) -> PathBuf {
    let out = dir.path("forkserve");
    let src = fixtures().join("forkserve.c");
    let mut cmd = Command::new("cc");
    cmd.args(["-O2", "-Wall", "-Wextra", "-Werror"]).arg(&src).arg("-o").arg(&out);
    let o = cmd.output().unwrap_or_else(|e| panic!("cannot run cc ({e}): run scripts/test.sh to install gcc"));
    assert!(o.status.success(), "{cmd:?} failed: {}\n{}", o.status, String::from_utf8_lossy(&o.stderr));
    out
}

/// One run of forkserve: the server (`server_args` after PORT N) and the client, each with
/// or without the library, one fabric directory. While the client holds all its
/// connections open, the records are read and `lanes status` runs; then the client closes
/// them and both must end well.
struct ForkRun {
    server: Finished,
    client: Finished,
    /// The records while every connection was open.
    records: Vec<lanes::sockets::registry::ConnectionInfo>,
    /// `lanes status` while every connection was open, and after both ended.
    status_open: String,
    status_after: String,
    port: u16,
}

/// `rounds`: 16 KiB writes per connection (echoed back); `env`: for both programs.
fn fork_run(
    bin: &Path,
    dir: &Path,
    (server_lib, client_lib): (bool, bool),
    (connections, rounds): (usize, usize),
    server_args: &[&str],
    env: &[(&str, &str)],
    server_user: Option<u32>,
) -> ForkRun {
    let lib = library();
    let fabric = dir.join("fabric");
    let port = free_port();
    let cmd = |with_lib: bool, user: Option<u32>| {
        let mut c = match user {
            // The server as `user` from its start, so its sockets are that user's.
            Some(uid) => {
                let mut c = clean_command("setpriv");
                let id = uid.to_string();
                c.args([format!("--reuid={id}"), format!("--regid={id}"), "--clear-groups".into(), "--".into()])
                    .arg(bin);
                c
            }
            None => clean_command(bin),
        };
        // Long spins, whatever the machine's load: a connection whose every byte happened
        // to go through the kernel (a receiver that was never on a CPU when data came)
        // would not show its ring.
        c.env("LANES_DIR", &fabric).env("TMPDIR", dir).env("LANES_POLL_US", "2000").env("LANES_SPIN_GATE", "0");
        if with_lib {
            c.env("LD_PRELOAD", &lib);
        }
        c.envs(env.iter().copied());
        c
    };
    let n = connections.to_string();
    let mut server = cmd(server_lib, server_user);
    server.args(["server", &port.to_string(), &n]).args(server_args);
    let mut server = Program::spawn(server, "forkserve server");
    let start = Instant::now();
    while !support::listening(port) && !server.exited() && start.elapsed() < RUN_LIMIT {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (ready, go) = (dir.join("ready"), dir.join("go"));
    let mut client = cmd(client_lib, None);
    client.args(["client", &port.to_string(), &n, &rounds.to_string()]).arg(&ready).arg(&go);
    let mut client = Program::spawn(client, "forkserve client");
    while !ready.exists() && !client.exited() && start.elapsed() < RUN_LIMIT {
        std::thread::sleep(Duration::from_millis(5));
    }
    let status = || {
        let mut c = clean_command(support::lanes_command());
        c.env("LANES_DIR", &fabric).arg("status");
        let f = run_bounded(c, "lanes status", RUN_LIMIT);
        assert!(f.ok(), "{}", f.describe("lanes status"));
        f.stdout
    };
    let records = lanes::sockets::registry::list_connections(&fabric);
    let status_open = status();
    std::fs::write(&go, b"").expect("go file");
    let client = client.wait(RUN_LIMIT);
    let server = server.wait(RUN_LIMIT);
    let status_after = status();
    ForkRun { server, client, records, status_open, status_after, port }
}

fn lines_with(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

/// A fork-per-connection server (PostgreSQL, sshd, rsync's daemon): the parent closes the
/// accepted socket right after fork, racing the child. Every connection must be
/// accelerated (both ends attached, the child holding the server's end), byte-exact. (The parent adds
/// the child as a holder before fork returns; before that, the parent's close often retired
/// the record first: 3 to 18 of 20 were accelerated.)
#[test]
fn fork_per_connection_servers_accelerate_every_connection() {
    const N: usize = 20;
    let dir = TestDir::named("forkserve", "both");
    let bin = build_forkserve(&dir);
    let r = fork_run(&bin, &dir.sub("run"), (true, true), (N, 32), &[], &[], None);
    assert!(r.client.ok() && r.client.stdout.contains("byte-exact"), "{}", r.client.describe("client"));
    assert!(r.server.ok(), "{}", r.server.describe("server"));
    let server_port = |a: &std::net::SocketAddr| a.port() == r.port;
    let (mut paired, mut with_ring) = (0, 0);
    let mut report = String::new();
    for c in r.records.iter().filter(|c| server_port(&c.remote)) {
        let s = r.records.iter().find(|s| s.local == c.remote && s.remote == c.local);
        // Paired: both ends attached, the server's end held by its child.
        let ok = s.is_some_and(|s| c.peer_attached && s.peer_attached && !s.holders.is_empty());
        paired += usize::from(ok);
        with_ring += usize::from(ok && s.is_some_and(|s| c.ring_bytes_sent + s.ring_bytes_sent > 0));
        report.push_str(&format!("client end {c:?}\n  server end {s:?}\n"));
    }
    eprintln!("fork per connection: {paired} of {N} connections accelerated, {with_ring} with ring bytes");
    assert_eq!(paired, N, "accelerated connections:\n{report}");
    // Whether a paired connection's bytes take the ring depends on the receiver being on a
    // CPU when they come (on 2 busy cores a connection may go all-kernel): most must.
    assert!(with_ring * 2 > N, "connections with ring bytes: {with_ring} of {N}\n{report}");
    // Nothing to say: no notice, no reasons.
    for (what, f) in [("server", &r.server), ("client", &r.client)] {
        assert!(!f.stderr.contains("liblanes_sockets:"), "{what} said:\n{}", f.stderr);
    }
    assert!(!r.status_open.contains("sockets left to the kernel"), "{}", r.status_open);
}

/// The same server without the library: the client's connections stay kernel TCP, the
/// client says why once (not once per connection), and `lanes status` shows the reason
/// with the count.
#[test]
fn a_peer_without_the_library_is_said_once_and_shown_by_status() {
    const N: usize = 5;
    let dir = TestDir::named("forkserve", "client-only");
    let bin = build_forkserve(&dir);
    let r = fork_run(&bin, &dir.sub("run"), (false, true), (N, 32), &[], &[], None);
    assert!(r.client.ok() && r.client.stdout.contains("byte-exact"), "{}", r.client.describe("client"));
    assert!(r.server.ok(), "{}", r.server.describe("server"));
    assert!(r.records.iter().all(|c| !c.peer_attached), "{:?}", r.records);
    assert_eq!(lines_with(&r.client.stderr, "liblanes_sockets:"), 1, "{}", r.client.stderr);
    assert_eq!(lines_with(&r.client.stderr, "the peer never attached"), 1, "{}", r.client.stderr);
    assert_eq!(lines_with(&r.client.stderr, "the peer runs as another user"), 0, "{}", r.client.stderr);
    let shown = r.status_after.lines().find(|l| l.contains("peer never attached"));
    assert!(
        shown.is_some_and(|l| l.split_whitespace().any(|w| w == N.to_string())),
        "lanes status does not show {N} sockets of a peer without the library:\n{}",
        r.status_after
    );
}

/// Connections to a server without the library that close before their first byte (a
/// health check, a probe; set up at once here, `LANES_SOCKETS_DEFER=0`): the peer had no
/// reason to attach, so nothing is said or counted.
#[test]
fn a_connection_closed_before_its_first_byte_says_nothing_of_its_peer() {
    const N: usize = 5;
    let dir = TestDir::named("forkserve", "no-bytes");
    let bin = build_forkserve(&dir);
    let r = fork_run(&bin, &dir.sub("run"), (false, true), (N, 0), &[], &[("LANES_SOCKETS_DEFER", "0")], None);
    assert!(r.client.ok(), "{}", r.client.describe("client"));
    assert!(r.server.ok(), "{}", r.server.describe("server"));
    assert!(r.records.len() >= N, "set up at once, so records were made: {:?}", r.records);
    assert_eq!(lines_with(&r.client.stderr, "the peer never attached"), 0, "{}", r.client.stderr);
    assert!(!r.status_after.contains("peer never attached"), "{}", r.status_after);
}

/// A worker that drops privileges after start (nginx workers as nobody): its connections
/// stay kernel TCP (the fabric directory is the original user's), byte-exact, it says so
/// once, and `lanes status` shows why on both sides (the client's: its peer runs as another user).
/// Root only (setuid).
#[test]
fn a_worker_that_drops_privileges_says_why_and_stays_kernel_tcp() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: dropping privileges needs root");
        return;
    }
    const N: usize = 3;
    let dir = TestDir::named("forkserve", "setuid");
    let bin = build_forkserve(&dir);
    let run = dir.sub("run");
    // The worker, as nobody, must be able to run the program and reach its directory.
    for p in [dir.0.as_path(), run.as_path()] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    }
    let r = fork_run(&bin, &run, (true, true), (N, 32), &["setuid", "65534"], &[], None);
    assert!(r.client.ok() && r.client.stdout.contains("byte-exact"), "{}", r.client.describe("client"));
    assert!(r.server.ok() && r.server.stdout.contains("as uid 65534"), "{}", r.server.describe("server"));
    let said = "liblanes_sockets: uid changed to 65534: new connections stay kernel TCP (the fabric directory is \
                user 0's)";
    assert_eq!(lines_with(&r.server.stderr, "liblanes_sockets:"), 1, "{}", r.server.stderr);
    assert_eq!(lines_with(&r.server.stderr, said), 1, "{}", r.server.stderr);
    assert!(r.records.iter().all(|c| c.remote.port() == r.port && !c.peer_attached), "{:?}", r.records);
    let shown = r.status_open.lines().find(|l| l.contains("uid changed (privilege drop)"));
    assert!(
        shown.is_some_and(|l| l.split_whitespace().any(|w| w == N.to_string())),
        "lanes status does not show {N} sockets left to the kernel by the uid change:\n{}",
        r.status_open
    );
    // The client's side: the kernel says the worker's socket is nobody's now.
    assert!(r.status_after.contains("peer runs as another user"), "{}", r.status_after);
}

/// A server without the library that runs as another user from its start (nobody): its
/// sockets are that user's, so the client says that (not that the peer never attached, as
/// for a peer of its own user), once, and `lanes status` shows the count. Root only.
#[test]
fn a_peer_of_another_user_is_said_to_be_one() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: running the server as another user needs root");
        return;
    }
    const N: usize = 3;
    let dir = TestDir::named("forkserve", "other-user");
    let bin = build_forkserve(&dir);
    let run = dir.sub("run");
    // The server, as nobody, must be able to run the program.
    for p in [dir.0.as_path(), run.as_path()] {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).expect("chmod");
    }
    let r = fork_run(&bin, &run, (false, true), (N, 32), &[], &[], Some(65534));
    assert!(r.client.ok() && r.client.stdout.contains("byte-exact"), "{}", r.client.describe("client"));
    assert!(r.server.ok(), "{}", r.server.describe("server"));
    assert_eq!(lines_with(&r.client.stderr, "liblanes_sockets:"), 1, "{}", r.client.stderr);
    assert_eq!(lines_with(&r.client.stderr, "the peer runs as another user"), 1, "{}", r.client.stderr);
    let shown = r.status_after.lines().find(|l| l.contains("peer runs as another user"));
    assert!(
        shown.is_some_and(|l| l.split_whitespace().any(|w| w == N.to_string())),
        "lanes status does not show {N} sockets of a peer of another user:\n{}",
        r.status_after
    );
    assert!(!r.status_after.contains("peer never attached"), "{}", r.status_after);
}

/// An inetd-style hand-off to an image that cannot load the library (a static build): the
/// program handed the socket reads the whole stream, or both ends get a reset; never a
/// stream with a hole in it, never a hang.
#[test]
fn a_handoff_to_a_static_image_gets_the_stream_or_a_reset() {
    let lib = library();
    let dir = TestDir::named("sockconf", "static-handoff");
    let plain = dir.path("sockconf");
    let fixed = dir.path("sockconf-static");
    cc(&[], &plain);
    cc(&["-static"], &fixed);
    let run = |preload: bool, seq: usize| {
        let run_dir = dir.sub(&format!("run-{seq}"));
        let mut cmd = sockconf_command(&plain, &run_dir, preload.then_some(lib.as_path()), false);
        cmd.env("SOCKCONF_HANDOFF_IMAGE", &fixed).arg("exec-handoff");
        let f = run_bounded(cmd, "sockconf exec-handoff", RUN_LIMIT);
        assert!(f.ok(), "{}", f.describe("sockconf exec-handoff, static image"));
        f.stdout
    };
    let reference = run(false, 0);
    assert!(reference.contains("client/handoff: read_full 65536, pattern ok"), "reference run:\n{reference}");
    let mut resets = 0;
    for seq in 1..=3 {
        let t = run(true, seq);
        if t == reference {
            continue;
        }
        assert!(
            t.contains("client/handoff: read_full -1 ECONNRESET") && t.contains("server: reply -1 ECONNRESET"),
            "run {seq}: neither the stream nor a reset at both ends (- without the library, + this run):\n{}",
            diff(&reference, &t, 40)
        );
        resets += 1;
    }
    eprintln!("static hand-off: {resets} of 3 runs reset (the peer's bytes were in the ring), the rest byte-exact");
}
