//! Helpers for the multi-process tests of interrupts, data interrupts and segment events
//! (`tests/interrupts.rs`, `tests/events.rs`).
//!
//! Every node of a scenario is a separate process: the test binary re-runs itself
//! (`current_exe() child_entry --exact --nocapture --test-threads=1`) with
//! [`ROLE_VAR`]` = node`. Such a child opens the fabric as one node and executes one command
//! per line read from its stdin (`icreate i 7`, `iconnect r 8 7 5000`, `itrig r 1000`, ...),
//! answering each with exactly one `OK ...` or `ERR <Variant> ...` line. `bg TAG CMD...` runs
//! a command on a thread of its own and answers at once; its result comes later as a note,
//! `NOTE TAG OK ...`. Callbacks and long loops report through notes too. Protocol lines carry
//! a marker, so libtest's own output in the child is ignored.
//!
//! Replies carry `key=value` fields (`count=`, `t=`, ...); `t=` is always `CLOCK_MONOTONIC`
//! in nanoseconds, which is the same clock in every process, so the parent can time what a
//! child saw against what it did itself (e.g. the kill -9 of a third process).
//!
//! The parent side ([`Node`]) bounds every wait, keeps the child's output for failure
//! messages, and kills and reaps the child when dropped, so nothing outlives a failed test.
//! A child also dies with its parent (`PR_SET_PDEATHSIG`, and end of stdin).

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lanes::fabric::{
    CallbackAction, LocalDataInterrupt, LocalInterrupt, RemoteDataInterrupt, RemoteInterrupt,
    MAX_DATA_INTERRUPT_PAYLOAD,
};
use lanes::{Error, Fabric, FabricConfig, LocalSegment, NodeId, RemoteSegment, Timeout};

/// Selects the child's role; absent in the parent.
pub const ROLE_VAR: &str = "LANES_WAKEUP_TEST_ROLE";
/// The fabric directory of a child.
pub const DIR_VAR: &str = "LANES_WAKEUP_TEST_DIR";
/// The node id of a child.
pub const NODE_VAR: &str = "LANES_WAKEUP_TEST_NODE";
/// The default bound of a parent's wait for one reply or note.
pub const WAIT: Duration = Duration::from_secs(10);
/// The longest any single wait of these tests may take.
pub const MAX_WAIT: Duration = Duration::from_secs(20);
/// Liveness bound: a death or removal must be noticed within this.
pub const NOTICE: Duration = Duration::from_secs(2);
/// Loops that run "until an error" give up after this.
const LOOP_CAP: Duration = Duration::from_secs(20);
/// A child that hears nothing from its parent for this long gives up.
const CHILD_IDLE: Duration = Duration::from_secs(120);
/// Prefix of protocol lines on a child's stdout.
const MARK: &str = "@@lanes-wakeups@@ ";

// ---------------------------------------------------------------------------------------
// Clocks and test data
// ---------------------------------------------------------------------------------------

/// `CLOCK_MONOTONIC` in nanoseconds: comparable between processes of one host.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime: {}", std::io::Error::last_os_error());
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Milliseconds from `from` to `to` (both [`mono_ns`]), negative if `to` is earlier.
pub fn ms_between(from: u64, to: u64) -> f64 {
    (to as f64 - from as f64) / 1e6
}

pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// FNV-1a, 64 bits.
pub fn fnv64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

/// Sizes every sender hits now and then: the edges of the payload range.
const EDGE_LENS: [usize; 10] = [1, 2, 8, 9, 17, 63, 64, 65, 4095, 4096];

/// The length of message `k` of sender `s`: 0..=4096. Only sender 0 sends empty messages
/// (an empty message cannot say who sent it), so the receiver can still attribute them.
pub fn msg_len(s: u8, k: u64) -> usize {
    if s == 0 && k % 50 == 7 {
        return 0;
    }
    let r = splitmix64((u64::from(s) << 40) ^ k ^ 0x1e75);
    if k % 4 == 0 {
        EDGE_LENS[(r % EDGE_LENS.len() as u64) as usize]
    } else {
        1 + (r % MAX_DATA_INTERRUPT_PAYLOAD as u64) as usize
    }
}

/// Message `k` of sender `s`: byte 0 is the sender, bytes 1..9 (when they fit) the message
/// number, then pseudo-random bytes; a message of 17 bytes or more ends with the FNV-1a
/// checksum of everything before it.
pub fn message(s: u8, k: u64) -> Vec<u8> {
    let len = msg_len(s, k);
    let mut v = Vec::with_capacity(len);
    if len == 0 {
        return v;
    }
    v.push(s);
    v.extend(k.to_le_bytes().iter().take(len.min(9) - 1));
    let seed = splitmix64((u64::from(s) << 48) ^ k ^ 0x5eed);
    let body = if len >= 17 { len - 8 } else { len };
    let mut i = 0u64;
    while v.len() < body {
        let w = splitmix64(seed ^ i).to_le_bytes();
        let take = (body - v.len()).min(8);
        v.extend_from_slice(&w[..take]);
        i += 1;
    }
    if len >= 17 {
        let sum = fnv64(&v);
        v.extend_from_slice(&sum.to_le_bytes());
    }
    debug_assert_eq!(v.len(), len);
    v
}

/// Checks a received message on its own: the embedded checksum, when it has one.
pub fn self_check(msg: &[u8]) -> Result<(), String> {
    if msg.len() >= 17 {
        let (body, sum) = msg.split_at(msg.len() - 8);
        let want = u64::from_le_bytes(sum.try_into().expect("8 bytes"));
        if fnv64(body) != want {
            return Err(format!("a {}-byte message from sender {} fails its checksum", msg.len(), msg[0]));
        }
    }
    Ok(())
}

/// Folds one message into a sender's running sum (so message boundaries count too).
pub fn fold_sum(acc: u64, msg: &[u8]) -> u64 {
    splitmix64(acc ^ fnv64(msg) ^ ((msg.len() as u64) << 48))
}

/// The running sum of the first `count` messages of sender `s`.
pub fn expected_sum(s: u8, count: u64) -> u64 {
    (0..count).fold(0, |acc, k| fold_sum(acc, &message(s, k)))
}

// ---------------------------------------------------------------------------------------
// Temporary fabric directories
// ---------------------------------------------------------------------------------------

#[path = "../common/test_dir.rs"]
mod test_dir;
pub use test_dir::TestDir;

#[path = "../common/topology.rs"]
mod topology;
#[allow(unused_imports)] // files that keep only single-host cases
pub(crate) use topology::topology_cases;
#[allow(unused_imports)]
pub use topology::{Bounds, Hosts, Topology};

#[path = "../common/cluster.rs"]
pub mod cluster;
#[path = "../support/netns.rs"]
pub mod netns;

/// The child process type the daemons of [`cluster::Cluster`] run as.
pub type DaemonProc = Node;

/// A child in role `daemon` (see [`cluster::run_daemon_role`]), run through `prefix`.
pub fn spawn_daemon(prefix: &[String], name: &str, envs: &[(&str, &str)]) -> DaemonProc {
    Node::start(prefix, name, "daemon", envs)
}

// ---------------------------------------------------------------------------------------
// Parent side
// ---------------------------------------------------------------------------------------

/// An error a child reported: the variant's name and the rest of the line.
#[derive(Clone, Debug)]
pub struct ErrReply {
    pub variant: String,
    pub detail: String,
}

impl std::fmt::Display for ErrReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.variant, self.detail)
    }
}

/// Parses an `OK ...` / `ERR Variant ...` line: `None` if it is neither.
pub fn parse_result(line: &str) -> Option<Result<String, ErrReply>> {
    if line == "OK" {
        return Some(Ok(String::new()));
    }
    if let Some(rest) = line.strip_prefix("OK ") {
        return Some(Ok(rest.to_string()));
    }
    let rest = line.strip_prefix("ERR ")?;
    let (variant, detail) = rest.split_once(' ').unwrap_or((rest, ""));
    Some(Err(ErrReply { variant: variant.to_string(), detail: detail.to_string() }))
}

/// The number in field `key=` of a reply; panics if there is none.
pub fn field(s: &str, key: &str) -> u64 {
    try_field(s, key).unwrap_or_else(|| panic!("no numeric field {key}= in {s:?}"))
}

/// The number in field `key=` of a reply, if any.
pub fn try_field(s: &str, key: &str) -> Option<u64> {
    let prefix = format!("{key}=");
    s.split_whitespace().find_map(|w| w.strip_prefix(&prefix)).and_then(|v| v.parse().ok())
}

/// Everything after `key=` (for fields that contain spaces; they come last).
pub fn tail_field<'a>(s: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key}=");
    let i = s.find(&prefix).unwrap_or_else(|| panic!("no field {key}= in {s:?}"));
    &s[i + prefix.len()..]
}

/// A child process acting as one node, killed and reaped when dropped.
pub struct Node {
    name: String,
    child: Child,
    pid: u32,
    stdin: Option<ChildStdin>,
    replies: Receiver<String>,
    notes: Receiver<String>,
    /// Notes received while waiting for another tag: (tag, rest).
    held: VecDeque<(String, String)>,
    log: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

fn pump(
    stream: impl Read + Send + 'static,
    tag: &'static str,
    log: Arc<Mutex<String>>,
    chans: Option<(mpsc::Sender<String>, mpsc::Sender<String>)>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(stream);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let line = String::from_utf8_lossy(&buf);
            let line = line.trim_end_matches(['\n', '\r']);
            let proto = chans.as_ref().and_then(|c| line.find(MARK).map(|i| (c, &line[i + MARK.len()..])));
            match proto {
                Some(((_, notes), l)) if l.starts_with("NOTE ") => {
                    // Notes can be many (one per message sent): kept out of the log.
                    let _ = notes.send(l["NOTE ".len()..].to_string());
                }
                Some(((replies, _), l)) => {
                    log.lock().unwrap_or_else(|e| e.into_inner()).push_str(&format!("{tag}{line}\n"));
                    let _ = replies.send(l.to_string());
                }
                None => log.lock().unwrap_or_else(|e| e.into_inner()).push_str(&format!("{tag}{line}\n")),
            }
        }
    })
}

impl Node {
    /// Starts a child acting as `node` on its host of `hosts` (a [`Topology`], or one
    /// [`TestDir`]), with that node's environment, and waits until it has opened the fabric.
    pub fn spawn(hosts: &impl Hosts, name: &str, node: u32) -> Node {
        let fabric = hosts.fabric_of(node);
        let node_s = node.to_string();
        let env = hosts.env_of(node);
        let mut envs = vec![(DIR_VAR, fabric.to_str().expect("utf-8 temp path")), (NODE_VAR, node_s.as_str())];
        envs.extend(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        // On another host the child runs through the host's prefix (`ip netns exec ..`).
        let mut n = Node::start(&hosts.prefix_of(node), name, "node", &envs);
        n.name = format!("{name} (node {node}, pid {})", n.pid);
        let l = n.line("READY", WAIT);
        if !l.starts_with("READY") {
            n.fail(format!("expected READY, got {l:?}"));
        }
        n
    }

    /// Starts this test binary again in role `role` with the environment `envs`, run
    /// through `prefix`; does not wait for anything.
    fn start(prefix: &[String], name: &str, role: &str, envs: &[(&str, &str)]) -> Node {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut cmd = match prefix.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        cmd.args(["child_entry", "--exact", "--nocapture", "--test-threads=1"]);
        for v in test_dir::LANES_ENV.iter().chain(&["LANES_POLL_US"]) {
            cmd.env_remove(v);
        }
        cmd.env(ROLE_VAR, role)
            .envs(envs.iter().copied())
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawning child {name}: {e}"));
        let pid = child.id();
        let log = Arc::new(Mutex::new(String::new()));
        let (rtx, rrx) = mpsc::channel();
        let (ntx, nrx) = mpsc::channel();
        let out = child.stdout.take().expect("piped stdout");
        let err = child.stderr.take().expect("piped stderr");
        let readers = vec![pump(out, "", log.clone(), Some((rtx, ntx))), pump(err, "[stderr] ", log.clone(), None)];
        let stdin = child.stdin.take();
        Node {
            name: format!("{name} (pid {pid})"),
            child,
            pid,
            stdin,
            replies: rrx,
            notes: nrx,
            held: VecDeque::new(),
            log,
            readers,
            status: None,
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Everything the child printed so far (notes excepted), without waiting for its pipes
    /// to drain.
    pub fn output_snapshot(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Everything the child printed so far (notes excepted).
    pub fn output(&mut self) -> String {
        if self.status.is_some() {
            self.drain_readers();
        }
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// After the child is gone: lets the readers reach the end of its pipes (bounded).
    fn drain_readers(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.readers.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn fail(&mut self, msg: String) -> ! {
        let out = self.output();
        panic!("{}: {msg}\n--- its output ---\n{out}--- end of output ---", self.name)
    }

    fn line(&mut self, what: &str, limit: Duration) -> String {
        assert!(limit <= MAX_WAIT, "a wait of {limit:?} is longer than the {MAX_WAIT:?} these tests allow");
        match self.replies.recv_timeout(limit) {
            Ok(l) => l,
            Err(RecvTimeoutError::Timeout) => self.fail(format!("did not report {what} within {limit:?}")),
            Err(RecvTimeoutError::Disconnected) => {
                let st = self.wait_exit();
                self.fail(format!("ended ({st}) before reporting {what}"))
            }
        }
    }

    /// Sends one command line without waiting for its reply.
    pub fn send(&mut self, cmd: &str) {
        let Some(stdin) = self.stdin.as_mut() else { self.fail(format!("stdin closed; cannot send {cmd:?}")) };
        if let Err(e) = stdin.write_all(format!("{cmd}\n").as_bytes()).and_then(|_| stdin.flush()) {
            self.fail(format!("cannot send {cmd:?}: {e}"));
        }
    }

    /// Waits at most `limit` for the reply to a command sent with [`Node::send`].
    pub fn reply_within(&mut self, cmd: &str, limit: Duration) -> Result<String, ErrReply> {
        let l = self.line(&format!("the result of {cmd:?}"), limit);
        match parse_result(&l) {
            Some(r) => r,
            None => self.fail(format!("unexpected reply {l:?} to {cmd:?}")),
        }
    }

    /// Runs one command, waiting at most `limit` for its reply.
    pub fn call_within(&mut self, cmd: &str, limit: Duration) -> Result<String, ErrReply> {
        self.send(cmd);
        self.reply_within(cmd, limit)
    }

    /// Runs one command.
    pub fn call(&mut self, cmd: &str) -> Result<String, ErrReply> {
        self.call_within(cmd, WAIT)
    }

    /// Runs one command that must succeed; returns what it printed.
    pub fn ok(&mut self, cmd: &str) -> String {
        match self.call(cmd) {
            Ok(s) => s,
            Err(e) => self.fail(format!("{cmd:?} failed: {e}")),
        }
    }

    /// Runs one command that must fail with error variant `variant`.
    /// Repeats `cmd` until it fails with `variant`, for at most 2 s: a loss is noticed
    /// asynchronously (the survivor's death watch), within milliseconds but not at once.
    pub fn eventually_err_is(&mut self, cmd: &str, variant: &str) -> ErrReply {
        let start = Instant::now();
        loop {
            match self.call(cmd) {
                Err(e) if e.variant == variant => return e,
                Err(e) => self.fail(format!("`{cmd}` failed with {e}, expected {variant}")),
                Ok(_) if start.elapsed() < Duration::from_secs(2) => std::thread::sleep(Duration::from_millis(1)),
                Ok(r) => self.fail(format!("`{cmd}` still succeeds ({r}) 2 s later, expected {variant}")),
            }
        }
    }

    pub fn err_is(&mut self, cmd: &str, variant: &str) -> ErrReply {
        match self.call(cmd) {
            Ok(s) => self.fail(format!("{cmd:?} unexpectedly succeeded: {s:?} (expected {variant})")),
            Err(e) if e.variant == variant => e,
            Err(e) => self.fail(format!("{cmd:?} failed with {e}, expected {variant}")),
        }
    }

    /// The next note with one of `tags`, waiting at most `limit`: (tag, rest).
    pub fn note_of(&mut self, tags: &[&str], limit: Duration) -> (String, String) {
        if let Some(i) = self.held.iter().position(|(t, _)| tags.contains(&t.as_str())) {
            return self.held.remove(i).expect("held note");
        }
        assert!(limit <= MAX_WAIT, "a wait of {limit:?} is longer than the {MAX_WAIT:?} these tests allow");
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.notes.recv_timeout(left) {
                Ok(n) => {
                    let (tag, rest) = n.split_once(' ').unwrap_or((&n, ""));
                    if tags.contains(&tag) {
                        return (tag.to_string(), rest.to_string());
                    }
                    self.held.push_back((tag.to_string(), rest.to_string()));
                }
                Err(RecvTimeoutError::Timeout) => self.fail(format!("no note {tags:?} within {limit:?}")),
                Err(RecvTimeoutError::Disconnected) => {
                    let st = self.wait_exit();
                    self.fail(format!("ended ({st}) before a note {tags:?}"))
                }
            }
        }
    }

    /// The next note tagged `tag`, waiting at most `limit`.
    pub fn note(&mut self, tag: &str, limit: Duration) -> String {
        self.note_of(&[tag], limit).1
    }

    /// The result a `bg TAG ...` command reported, waiting at most `limit`.
    pub fn bg_result(&mut self, tag: &str, limit: Duration) -> Result<String, ErrReply> {
        let n = self.note(tag, limit);
        match parse_result(&n) {
            Some(r) => r,
            None => self.fail(format!("note {tag} is not a result: {n:?}")),
        }
    }

    /// A note tagged `tag` that has already arrived, if any (does not wait).
    pub fn try_note(&mut self, tag: &str) -> Option<String> {
        if let Some(i) = self.held.iter().position(|(t, _)| t == tag) {
            return self.held.remove(i).map(|(_, r)| r);
        }
        while let Ok(n) = self.notes.try_recv() {
            let (t, rest) = n.split_once(' ').unwrap_or((&n, ""));
            if t == tag {
                return Some(rest.to_string());
            }
            self.held.push_back((t.to_string(), rest.to_string()));
        }
        None
    }

    /// After the child exited: every note tagged `tag` it wrote that was not taken yet.
    pub fn remaining_notes(&mut self, tag: &str) -> Vec<String> {
        assert!(self.status.is_some(), "{}: remaining_notes while the child runs", self.name);
        self.drain_readers();
        let mut out = Vec::new();
        while let Some(n) = self.try_note(tag) {
            out.push(n);
        }
        out
    }

    /// Asks the child to exit and checks that it exited cleanly.
    pub fn exit(&mut self) {
        self.ok("exit");
        self.stdin.take();
        let st = self.wait_exit();
        if !st.success() {
            self.fail(format!("exited with {st}"));
        }
    }

    /// `kill -9`, then reaps the child. Returns [`mono_ns`] just before the signal.
    pub fn kill9(&mut self) -> u64 {
        assert!(self.status.is_none(), "{} already exited", self.name);
        let t = mono_ns();
        // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child, so
        // it cannot have been recycled for another process.
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill -9 {}: {}", self.pid, std::io::Error::last_os_error());
        self.wait_exit();
        t
    }

    /// Waits (at most [`WAIT`]) for the child to exit; kills it and panics if it does not.
    pub fn wait_exit(&mut self) -> ExitStatus {
        if let Some(s) = self.status {
            return s;
        }
        let deadline = Instant::now() + WAIT;
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) => {
                    self.status = Some(s);
                    return s;
                }
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(2)),
                Ok(None) => {
                    let _ = self.child.kill();
                    let s = self.child.wait().expect("reaping a killed child");
                    self.status = Some(s);
                    let out = self.output();
                    panic!("{} did not exit within {WAIT:?}; killed\n--- its output ---\n{out}", self.name);
                }
                Err(e) => panic!("{}: waiting for the child: {e}", self.name),
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Waits until `cond` holds, polling; panics after `limit` with `what`.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---------------------------------------------------------------------------------------
// Child side
// ---------------------------------------------------------------------------------------

/// The body of each test file's `child_entry` test: nothing in the parent; in a child,
/// the node command interpreter (role `node`) or a cluster daemon (role `daemon`, for the
/// hosts of [`cluster::Cluster`]). Never returns in a child.
pub fn child_entry() {
    let Ok(role) = std::env::var(ROLE_VAR) else { return };
    assert!(role == "node" || role == "daemon", "unknown test role {role:?}");
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes plain integers; it only sets a process attribute.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
    // No core files for the kill -9s and provoked crashes.
    let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: setrlimit reads a valid rlimit for the duration of the call.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) };
    if role == "daemon" {
        // A daemon of the hosts of `cluster::Cluster`: runs until the parent hangs up.
        cluster::run_daemon_role(|| for _ in std::io::stdin().lock().lines() {});
    }
    let code = run_node();
    std::process::exit(code);
}

/// Writes one protocol line to the parent (whole lines, never interleaved).
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{MARK}{line}");
    let _ = out.flush();
}

fn note(tag: &str, rest: &str) {
    say(&format!("NOTE {tag} {rest}"));
}

enum Fail {
    Lanes(Error, String),
    Test(String),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Lanes(e, String::new())
    }
}

type Reply = Result<String, Fail>;

/// A library error with extra `key=value` fields for the parent.
fn lanes_fail<T>(e: Error, fields: String) -> Result<T, Fail> {
    Err(Fail::Lanes(e, fields))
}

fn test_fail<T>(msg: impl Into<String>) -> Result<T, Fail> {
    Err(Fail::Test(msg.into()))
}

/// The name of an error's variant, from its `Debug` form.
pub fn variant_name(e: &Error) -> String {
    let d = format!("{e:?}");
    d.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or_default().to_string()
}

fn result_line(r: Reply) -> String {
    let one_line = |s: String| s.replace(['\n', '\r'], " ");
    match r {
        Ok(s) if s.is_empty() => "OK".into(),
        Ok(s) => format!("OK {}", one_line(s)),
        Err(Fail::Lanes(e, fields)) => {
            format!("ERR {} {} :: {}", variant_name(&e), one_line(fields), one_line(format!("{e} / {e:?}")))
        }
        Err(Fail::Test(m)) => format!("ERR Test {}", one_line(m)),
    }
}

enum Obj {
    LInt(Arc<LocalInterrupt>),
    RInt(Arc<RemoteInterrupt>),
    LData(Arc<LocalDataInterrupt>),
    RData(Arc<RemoteDataInterrupt>),
    LSeg(Arc<LocalSegment>),
    RSeg(Arc<RemoteSegment>),
}

/// What a receiving process has accepted so far, per sender: next message number and
/// running sum. Shared by `drecv`, `dwait` and `don_message` callbacks.
#[derive(Default)]
struct Book {
    next: BTreeMap<u8, u64>,
    sums: BTreeMap<u8, u64>,
}

impl Book {
    /// Accepts one message if it is exactly the next one its sender should send.
    fn accept(&mut self, msg: &[u8]) -> Result<(), String> {
        self_check(msg)?;
        let s = if msg.is_empty() { 0 } else { msg[0] };
        let k = *self.next.get(&s).unwrap_or(&0);
        let want = message(s, k);
        if msg != want.as_slice() {
            let got_k = if msg.len() >= 9 { u64::from_le_bytes(msg[1..9].try_into().expect("8")) as i128 } else { -1 };
            let diff = msg.iter().zip(&want).position(|(a, b)| a != b);
            return Err(format!(
                "sender {s}: expected message {k} ({} bytes), got {} bytes (number field {got_k}, first \
                 difference at {diff:?})",
                want.len(),
                msg.len()
            ));
        }
        self.next.insert(s, k + 1);
        let acc = self.sums.entry(s).or_insert(0);
        *acc = fold_sum(*acc, msg);
        Ok(())
    }

    fn count(&self, s: u8) -> u64 {
        *self.next.get(&s).unwrap_or(&0)
    }

    fn total(&self) -> u64 {
        self.next.values().sum()
    }

    /// `s:count:sum` for every sender seen, space separated.
    fn summary(&self) -> String {
        self.next.iter().map(|(s, n)| format!("{s}:{n}:{:016x}", self.sums[s])).collect::<Vec<_>>().join(" ")
    }
}

/// Parses a book summary: sender -> (count, sum).
pub fn parse_book(s: &str) -> BTreeMap<u8, (u64, u64)> {
    s.split_whitespace()
        .filter(|w| w.matches(':').count() == 2)
        .map(|w| {
            let mut p = w.split(':');
            let s = p.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("bad book entry {w:?}"));
            let n = p.next().and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("bad book entry {w:?}"));
            let sum = p.next().and_then(|v| u64::from_str_radix(v, 16).ok()).unwrap_or_else(|| panic!("bad {w:?}"));
            (s, (n, sum))
        })
        .collect()
}

struct Ctx {
    fabric: Fabric,
    objs: Mutex<HashMap<String, Obj>>,
    book: Arc<Mutex<Book>>,
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
}

struct Args<'a>(Vec<&'a str>);

impl<'a> Args<'a> {
    fn s(&self, i: usize) -> &'a str {
        self.0.get(i).copied().unwrap_or_else(|| panic!("command {:?}: missing argument {i}", self.0))
    }

    fn opt(&self, i: usize) -> Option<&'a str> {
        self.0.get(i).copied()
    }

    fn n(&self, i: usize) -> u64 {
        let s = self.s(i);
        let v = match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => s.parse(),
        };
        v.unwrap_or_else(|_| panic!("command {:?}: argument {i} is not a number", self.0))
    }

    fn u32(&self, i: usize) -> u32 {
        u32::try_from(self.n(i)).expect("a 32-bit argument")
    }

    /// A count, or `inf` for "until an error" (capped by [`LOOP_CAP`]).
    fn count(&self, i: usize) -> Option<u64> {
        (self.s(i) != "inf").then(|| self.n(i))
    }

    fn timeout(&self, i: usize) -> Timeout {
        match self.s(i) {
            "imm" => Timeout::Immediate,
            "inf" => Timeout::Infinite,
            ms => Timeout::After(Duration::from_millis(ms.parse().expect("timeout in ms"))),
        }
    }
}

/// The fabric configuration of a node child: from the environment (`LANES_CONFIG`,
/// `LANES_HOST`, `LANES_DIR`, `LANES_NODE_ID`) when a topology of several hosts set
/// `LANES_CONFIG`, else the test directory and node.
fn node_config() -> lanes::Result<FabricConfig> {
    if std::env::var_os("LANES_CONFIG").is_some() {
        return FabricConfig::from_env();
    }
    let dir = std::env::var(DIR_VAR).expect("fabric dir variable");
    let node: u32 = std::env::var(NODE_VAR).expect("node variable").parse().expect("node id");
    NodeId::new(node).map(|n| FabricConfig::new(&dir, n))
}

fn run_node() -> i32 {
    let fabric = match node_config().and_then(Fabric::open_with) {
        Ok(f) => f,
        Err(e) => {
            say(&format!("OPEN_FAILED {e}"));
            return 2;
        }
    };
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(l) = line else { break };
            if tx.send(l).is_err() {
                break;
            }
        }
        // The parent closed our stdin or died: nothing more will come.
        std::process::exit(0);
    });
    let ctx = Arc::new(Ctx {
        fabric,
        objs: Mutex::new(HashMap::new()),
        book: Arc::new(Mutex::new(Book::default())),
        counters: Mutex::new(HashMap::new()),
    });
    say(&format!("READY {}", std::process::id()));
    loop {
        let line = match rx.recv_timeout(CHILD_IDLE) {
            Ok(l) => l,
            Err(_) => return 3,
        };
        let line = line.trim().to_string();
        if line == "exit" {
            ctx.objs.lock().unwrap_or_else(|e| e.into_inner()).clear();
            say("OK");
            return 0;
        }
        if let Some(rest) = line.strip_prefix("bg ") {
            let (tag, cmd) = rest.split_once(' ').expect("bg TAG CMD");
            let (tag, cmd) = (tag.to_string(), cmd.to_string());
            let c = ctx.clone();
            std::thread::spawn(move || note(&tag, &result_line(guarded(&c, &cmd))));
            say("OK");
            continue;
        }
        say(&result_line(guarded(&ctx, &line)));
    }
}

/// Runs one command; a panic becomes an `ERR Panic` reply rather than a lost child.
fn guarded(ctx: &Arc<Ctx>, line: &str) -> Reply {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.exec(line))) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            test_fail(format!("panic in {line:?}: {msg}"))
        }
    }
}

macro_rules! getter {
    ($fn:ident, $variant:ident, $ty:ty) => {
        fn $fn(&self, name: &str) -> Arc<$ty> {
            match self.objs.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
                Some(Obj::$variant(x)) => x.clone(),
                _ => panic!("no {} named {name:?}", stringify!($variant)),
            }
        }
    };
}

impl Ctx {
    getter!(lint, LInt, LocalInterrupt);
    getter!(rint, RInt, RemoteInterrupt);
    getter!(ldata, LData, LocalDataInterrupt);
    getter!(rdata, RData, RemoteDataInterrupt);
    getter!(lseg, LSeg, LocalSegment);
    getter!(rseg, RSeg, RemoteSegment);

    fn put(&self, name: &str, o: Obj) {
        self.objs.lock().unwrap_or_else(|e| e.into_inner()).insert(name.to_string(), o);
    }

    /// Checks a received message into the book: it must be the next one its sender sent.
    fn accept(&self, msg: &[u8]) -> Result<(), Fail> {
        self.book.lock().unwrap_or_else(|e| e.into_inner()).accept(msg).or_else(test_fail)
    }

    fn counter(&self, name: &str) -> Arc<AtomicU64> {
        self.counters.lock().unwrap_or_else(|e| e.into_inner()).entry(name.to_string()).or_default().clone()
    }

    fn exec(self: &Arc<Self>, line: &str) -> Reply {
        let a = Args(line.split_whitespace().collect());
        match a.s(0) {
            "pid" => Ok(std::process::id().to_string()),
            "sleep" => {
                std::thread::sleep(Duration::from_millis(a.n(1)));
                Ok(String::new())
            }
            "drop" => {
                let o = self.objs.lock().unwrap_or_else(|e| e.into_inner()).remove(a.s(1));
                assert!(o.is_some(), "no object {:?} to drop", a.s(1));
                drop(o);
                Ok(format!("t={}", mono_ns()))
            }

            // --- interrupts ---
            "icreate" => {
                let num = if a.s(2) == "auto" { None } else { Some(a.u32(2)) };
                let i = self.fabric.create_interrupt(num)?;
                let n = i.number();
                self.put(a.s(1), Obj::LInt(Arc::new(i)));
                Ok(n.to_string())
            }
            "iconnect" => {
                let r = self.fabric.connect_interrupt(a.u32(2), a.u32(3), a.timeout(4))?;
                let info = format!("node={} number={}", r.node_id(), r.number());
                self.put(a.s(1), Obj::RInt(Arc::new(r)));
                Ok(info)
            }
            "ipoll" => {
                self.lint(a.s(1)).set_poll_time(Duration::from_micros(a.n(2)));
                Ok(String::new())
            }
            "ipending" => Ok(self.lint(a.s(1)).pending().to_string()),
            "iremove" => {
                let t = mono_ns();
                self.lint(a.s(1)).remove()?;
                Ok(format!("t={t}"))
            }
            "itrig" => {
                // itrig NAME COUNT|inf [PAUSE_US]: triggers COUNT times (or until an error),
                // in bursts of 1..=64 with a sleep of PAUSE_US between bursts if given.
                let (r, limit) = (self.rint(a.s(1)), a.count(2));
                let pause = a.opt(3).map(|p| Duration::from_micros(p.parse().expect("pause in us")));
                let started = Instant::now();
                let mut count = 0u64;
                let mut burst_left = 0u64;
                let mut rng = 0x7e57u64;
                while limit.is_none_or(|l| count < l) {
                    if let Err(e) = r.trigger() {
                        return lanes_fail(e, format!("count={count} t={}", mono_ns()));
                    }
                    count += 1;
                    if let Some(p) = pause {
                        if burst_left == 0 {
                            rng = splitmix64(rng);
                            burst_left = 1 + rng % 64;
                            std::thread::sleep(p);
                        }
                        burst_left -= 1;
                    }
                    if count % 100_000 == 0 {
                        note("progress", &format!("{} {count}", a.s(1)));
                    }
                    if limit.is_none() && count % 1024 == 0 && started.elapsed() > LOOP_CAP {
                        return test_fail(format!("no trigger failed in {LOOP_CAP:?} ({count} triggers)"));
                    }
                }
                Ok(format!("count={count}"))
            }
            "iwait" => {
                // iwait NAME COUNT TIMEOUT: COUNT waits, each bounded by TIMEOUT.
                let (l, n, t) = (self.lint(a.s(1)), a.n(2), a.timeout(3));
                for k in 0..n {
                    if let Err(e) = l.wait(t) {
                        return lanes_fail(e, format!("count={k} t={}", mono_ns()));
                    }
                    if (k + 1) % 100_000 == 0 {
                        note("progress", &format!("{} {}", a.s(1), k + 1));
                    }
                }
                Ok(format!("count={n} t={}", mono_ns()))
            }
            "ion_trigger" => {
                // ion_trigger NAME CANCEL_AFTER: counts calls in counter NAME; cancels at the
                // CANCEL_AFTER-th call (0: never), noting `cb NAME cancelled`.
                let (name, after) = (a.s(1).to_string(), a.n(2));
                let c = self.counter(&name);
                self.lint(&name).on_trigger(move || {
                    let k = c.fetch_add(1, Ordering::SeqCst) + 1;
                    if k == after {
                        note("cb", &format!("{name} cancelled count={k}"));
                        CallbackAction::Cancel
                    } else {
                        CallbackAction::Continue
                    }
                })?;
                Ok(String::new())
            }
            "count" => Ok(self.counter(a.s(1)).load(Ordering::SeqCst).to_string()),

            // --- data interrupts ---
            "dcreate" => {
                let num = if a.s(2) == "auto" { None } else { Some(a.u32(2)) };
                let d = self.fabric.create_data_interrupt(num)?;
                let n = d.number();
                self.put(a.s(1), Obj::LData(Arc::new(d)));
                Ok(n.to_string())
            }
            "dconnect" => {
                let r = self.fabric.connect_data_interrupt(a.u32(2), a.u32(3), a.timeout(4))?;
                let info = format!("node={} number={}", r.node_id(), r.number());
                self.put(a.s(1), Obj::RData(Arc::new(r)));
                Ok(info)
            }
            "dpoll" => {
                self.ldata(a.s(1)).set_poll_time(Duration::from_micros(a.n(2)));
                Ok(String::new())
            }
            "dremove" => {
                let t = mono_ns();
                self.ldata(a.s(1)).remove()?;
                Ok(format!("t={t}"))
            }
            "dsend" => {
                // dsend NAME SENDER FROM COUNT|inf TIMEOUT [report]: sends messages FROM.. of
                // SENDER; with `report`, notes `sent SENDER K` after each one that succeeded.
                let (r, s, from, limit, t) = (self.rdata(a.s(1)), a.n(2) as u8, a.n(3), a.count(4), a.timeout(5));
                let report = a.opt(6) == Some("report");
                let started = Instant::now();
                let mut sum = 0u64;
                let mut k = from;
                while limit.is_none_or(|l| k < from + l) {
                    let m = message(s, k);
                    let call = Instant::now();
                    if let Err(e) = r.trigger(&m, t) {
                        let dur = call.elapsed().as_micros();
                        return lanes_fail(e, format!("sent={} t={} dur_us={dur}", k - from, mono_ns()));
                    }
                    if report {
                        note("sent", &format!("{s} {k}"));
                    }
                    sum = fold_sum(sum, &m);
                    k += 1;
                    if limit.is_none() && started.elapsed() > LOOP_CAP {
                        return test_fail(format!("no send failed in {LOOP_CAP:?} ({} sent)", k - from));
                    }
                }
                Ok(format!("sent={} sum={sum:016x}", k - from))
            }
            "dsend_big" => {
                // dsend_big NAME LEN: one payload of LEN bytes (to provoke PayloadTooLarge).
                self.rdata(a.s(1)).trigger(&vec![0x5a; a.n(2) as usize], Timeout::Immediate)?;
                Ok(String::new())
            }
            "dwait" => {
                // dwait NAME BUFLEN TIMEOUT: one wait with a buffer of BUFLEN bytes; the
                // message must be the next one its sender should send.
                let (d, t) = (self.ldata(a.s(1)), a.timeout(3));
                let mut buf = vec![0u8; a.n(2) as usize];
                let n = match d.wait(&mut buf, t) {
                    Ok(n) => n,
                    Err(e) => return lanes_fail(e, format!("t={}", mono_ns())),
                };
                self.accept(&buf[..n])?;
                Ok(format!("len={n} sender={} t={}", buf.first().copied().unwrap_or(0), mono_ns()))
            }
            "drecv" => {
                // drecv NAME N TIMEOUT: receives and checks N messages (each wait bounded).
                let (d, n, t) = (self.ldata(a.s(1)), a.n(2), a.timeout(3));
                self.receive(&d, t, |_, got| got >= n)
            }
            "drecv_until" => {
                // drecv_until NAME S:N,S:N TIMEOUT: receives until the book counts reach the
                // targets, then drains what is still queued; replies with the book.
                let (d, t) = (self.ldata(a.s(1)), a.timeout(3));
                let targets: Vec<(u8, u64)> = a
                    .s(2)
                    .split(',')
                    .map(|p| {
                        let (s, n) = p.split_once(':').expect("S:N");
                        (s.parse().expect("sender"), n.parse().expect("count"))
                    })
                    .collect();
                self.receive(&d, t, |b, _| targets.iter().all(|&(s, n)| b.count(s) >= n))?;
                self.drain(&d)
            }
            "drain" => {
                let d = self.ldata(a.s(1));
                self.drain(&d)
            }
            "dtry" => {
                // dtry NAME BUFLEN: one `try_wait` with a buffer of BUFLEN bytes: `none`, or
                // the message (checked as dwait's).
                let d = self.ldata(a.s(1));
                let mut buf = vec![0u8; a.n(2) as usize];
                match d.try_wait(&mut buf)? {
                    None => Ok("none".into()),
                    Some(n) => {
                        self.accept(&buf[..n])?;
                        Ok(format!("len={n}"))
                    }
                }
            }
            "dspin" => {
                // dspin NAME N TIMEOUT_MS: receives and checks N messages as a program's own
                // spin loop does: `try_wait`, and a progress pass of this process's fabric
                // whenever nothing was there; fails if TIMEOUT_MS pass first.
                let (d, n) = (self.ldata(a.s(1)), a.n(2));
                let deadline = Instant::now() + Duration::from_millis(a.n(3));
                let driver = self.fabric.progress_driver();
                let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
                let (mut got, mut empty) = (0u64, 0u64);
                while got < n {
                    match d.try_wait(&mut buf)? {
                        Some(len) => {
                            self.accept(&buf[..len])?;
                            got += 1;
                        }
                        None if Instant::now() >= deadline => {
                            return test_fail(format!("dspin: {got} of {n} messages within {} ms", a.n(3)));
                        }
                        None => {
                            empty += 1;
                            driver.poll();
                        }
                    }
                }
                let b = self.book.lock().unwrap_or_else(|e| e.into_inner());
                Ok(format!("received={got} empty_tries={empty} {}", b.summary()))
            }
            "book" => Ok(self.book.lock().unwrap_or_else(|e| e.into_inner()).summary()),
            "don_message" => {
                // don_message NAME CANCEL_AFTER: checks each message into the book, counts calls
                // in counter NAME, cancels at the CANCEL_AFTER-th call (0: never).
                let (name, after) = (a.s(1).to_string(), a.n(2));
                let (c, book) = (self.counter(&name), self.book.clone());
                self.ldata(&name).on_message(move |msg| {
                    let k = c.fetch_add(1, Ordering::SeqCst) + 1;
                    if let Err(e) = book.lock().unwrap_or_else(|e| e.into_inner()).accept(msg) {
                        note("cb", &format!("{name} bad {e}"));
                        return CallbackAction::Cancel;
                    }
                    if k == after {
                        note("cb", &format!("{name} cancelled count={k}"));
                        CallbackAction::Cancel
                    } else {
                        CallbackAction::Continue
                    }
                })?;
                Ok(String::new())
            }

            // --- segments and events ---
            "seg" => {
                // seg NAME ID SIZE: creates, prepares and makes available.
                let s = self.fabric.create_segment(a.u32(2), a.n(3))?;
                s.prepare()?;
                s.set_available()?;
                self.put(a.s(1), Obj::LSeg(Arc::new(s)));
                Ok(String::new())
            }
            "available" => {
                self.lseg(a.s(1)).set_available()?;
                Ok(format!("t={}", mono_ns()))
            }
            "unavailable" => {
                self.lseg(a.s(1)).set_unavailable()?;
                Ok(format!("t={}", mono_ns()))
            }
            "segremove" => {
                let t = mono_ns();
                self.lseg(a.s(1)).remove(true)?;
                Ok(format!("t={t}"))
            }
            "peers" => {
                let mut p = self.lseg(a.s(1)).connected_peers();
                p.sort_unstable();
                Ok(p.iter().map(|(n, p)| format!("{n}:{p}")).collect::<Vec<_>>().join(","))
            }
            "connect" => {
                let r = self.fabric.connect_segment(a.u32(2), a.u32(3), a.timeout(4))?;
                self.put(a.s(1), Obj::RSeg(Arc::new(r)));
                Ok(String::new())
            }
            "rpoll" => {
                self.rseg(a.s(1)).set_poll_time(Duration::from_micros(a.n(2)));
                Ok(String::new())
            }
            "lpoll" => {
                self.lseg(a.s(1)).set_poll_time(Duration::from_micros(a.n(2)));
                Ok(String::new())
            }
            "lwait" => match self.lseg(a.s(1)).wait_event(a.timeout(2)) {
                Ok(ev) => Ok(format!("t={} ev={ev:?}", mono_ns())),
                Err(e) => lanes_fail(e, format!("t={}", mono_ns())),
            },
            "rwait" => match self.rseg(a.s(1)).wait_event(a.timeout(2)) {
                Ok(ev) => Ok(format!("t={} ev={ev:?}", mono_ns())),
                Err(e) => lanes_fail(e, format!("t={}", mono_ns())),
            },
            "rstate" => Ok(format!("{:?}", self.rseg(a.s(1)).state())),
            "rcheck" => {
                self.rseg(a.s(1)).check()?;
                Ok(String::new())
            }
            "lon_event" => {
                // lon_event NAME TAG: notes `TAG t=.. ev=..` for every event.
                let tag = a.s(2).to_string();
                self.lseg(a.s(1)).on_event(move |ev| {
                    note(&tag, &format!("t={} ev={ev:?}", mono_ns()));
                    CallbackAction::Continue
                })?;
                Ok(String::new())
            }
            "ron_event" => {
                // ron_event NAME TAG: notes `TAG t=.. ev=..` for every event.
                let tag = a.s(2).to_string();
                self.rseg(a.s(1)).on_event(move |ev| {
                    note(&tag, &format!("t={} ev={ev:?}", mono_ns()));
                    CallbackAction::Continue
                })?;
                Ok(String::new())
            }
            other => test_fail(format!("unknown command {other:?}")),
        }
    }

    /// Waits for messages, checking each into the book, until `done(book, received)`.
    fn receive(&self, d: &LocalDataInterrupt, t: Timeout, mut done: impl FnMut(&Book, u64) -> bool) -> Reply {
        let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
        let mut got = 0u64;
        loop {
            {
                let b = self.book.lock().unwrap_or_else(|e| e.into_inner());
                if done(&b, got) {
                    return Ok(format!("received={got} {}", b.summary()));
                }
            }
            let n = match d.wait(&mut buf, t) {
                Ok(n) => n,
                Err(e) => {
                    let b = self.book.lock().unwrap_or_else(|e| e.into_inner()).summary();
                    return lanes_fail(e, format!("received={got} t={} book: {b}", mono_ns()));
                }
            };
            self.accept(&buf[..n])?;
            got += 1;
        }
    }

    /// Receives what is queued now (immediate waits until one times out).
    fn drain(&self, d: &LocalDataInterrupt) -> Reply {
        let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
        let mut got = 0u64;
        loop {
            match d.wait(&mut buf, Timeout::Immediate) {
                Ok(n) => {
                    self.accept(&buf[..n])?;
                    got += 1;
                }
                Err(Error::Timeout { .. }) => {
                    let b = self.book.lock().unwrap_or_else(|e| e.into_inner());
                    return Ok(format!("drained={got} {}", b.summary()));
                }
                Err(e) => return lanes_fail(e, format!("drained={got}")),
            }
        }
    }
}
