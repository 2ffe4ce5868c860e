//! The node-process harness: every node of a multi-process test is a child process, the
//! test binary re-run (`current_exe() child_entry --exact --nocapture --test-threads=1`)
//! with [`ROLE_VAR`] naming what it does, and driven over its stdin and stdout.
//!
//! The protocol, one line each way:
//!
//! - the parent sends one command per line;
//! - the child answers each with `BEGIN` when it starts executing it, then exactly one
//!   result: `OK [text]` or `ERR <Variant>\t<fields>\t<Debug>\t<Display>` (tabs and line
//!   breaks inside a part escaped), where `fields` are `key=value` words the command adds
//!   (`t=`, `count=`, ...) and `Variant` is the library error's, or `Test` for a failure of
//!   the test's own checks;
//! - at any time the child may send `NOTE <tag> <text>` (callbacks, progress, the result of
//!   a command run in the background), which the parent takes by tag;
//! - a role's other lines (`READY <pid>` once a node opened its fabric, custom roles' own)
//!   are read in order with [`Proc::line`].
//!
//! Protocol lines on the child's stdout carry a marker, so libtest's own output in the
//! child is ignored. `t=` fields are [`mono_ns`] (`CLOCK_MONOTONIC`), one clock for every
//! process of the machine, so the parent can time what a child saw against what it did.
//!
//! The parent side ([`Proc`]) bounds every wait, keeps the child's output for failure
//! messages, and kills and reaps the child when dropped, so nothing outlives a failed test.
//! The child side is [`child_entry`] and [`ChildIo`]; the command interpreters of role
//! `node` are the tests' own (what a node can be told to do is what its tests exercise).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cluster;
use crate::test_dir::LANES_ENV;
use crate::topology::Hosts;

/// Selects the child's role; absent in the parent.
pub const ROLE_VAR: &str = "LANES_TEST_ROLE";
/// The fabric directory of a `node` child.
pub const DIR_VAR: &str = "LANES_TEST_DIR";
/// The node id of a `node` child.
pub const NODE_VAR: &str = "LANES_TEST_NODE";
/// The default bound of a parent's wait for one line.
pub const WAIT: Duration = Duration::from_secs(10);
/// A child that hears nothing from its parent for this long gives up.
const CHILD_IDLE: Duration = Duration::from_secs(120);
/// Prefix of protocol lines on a child's stdout.
const MARK: &str = "@@lanes-test@@ ";

/// `CLOCK_MONOTONIC` in nanoseconds: comparable between processes of one host.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime: {}", std::io::Error::last_os_error());
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Waits until `cond` holds, polling; panics after `limit` with `what`.
pub fn wait_until_within(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until `cond` holds, polling; panics after [`WAIT`] with `what`.
pub fn wait_until(what: &str, cond: impl FnMut() -> bool) {
    wait_until_within(what, WAIT, cond)
}

// ---------------------------------------------------------------------------------------
// Replies
// ---------------------------------------------------------------------------------------

/// An error a child reported.
#[derive(Clone, Debug)]
pub struct ErrReply {
    /// The library error's variant, or `Test`.
    pub variant: String,
    /// The `key=value` fields the command added.
    pub fields: String,
    pub debug: String,
    pub display: String,
    /// Everything but the variant on one line: `<fields> :: <Display> / <Debug>`.
    pub detail: String,
}

impl std::fmt::Display for ErrReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.variant, self.detail)
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\t', "\\t").replace('\n', "\\n").replace('\r', "\\r")
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match (c, c == '\\') {
            (_, true) => match chars.next() {
                Some('t') => out.push('\t'),
                Some('n') => out.push('\n'),
                Some('r') => out.push('\r'),
                Some(o) => out.push(o),
                None => out.push('\\'),
            },
            (c, false) => out.push(c),
        }
    }
    out
}

/// The `ERR` line for an error of variant `variant`.
pub fn err_line(variant: &str, fields: &str, debug: &str, display: &str) -> String {
    format!("ERR {variant}\t{}\t{}\t{}", escape(fields), escape(debug), escape(display))
}

/// The `ERR` line for a library error, with the command's `key=value` `fields`.
pub fn lanes_err_line(e: &lanes::Error, fields: &str) -> String {
    err_line(&variant_name(e), fields, &format!("{e:?}"), &e.to_string())
}

/// The `ERR Test` line for a failure of a test's own checks.
pub fn test_err_line(msg: &str) -> String {
    err_line("Test", "", msg, msg)
}

/// The `OK` line for a command's result text (line breaks replaced: a result is one line).
pub fn ok_line(text: &str) -> String {
    if text.is_empty() {
        "OK".into()
    } else {
        format!("OK {}", text.replace(['\n', '\r'], " "))
    }
}

/// The name of an error's variant, from its `Debug` form.
pub fn variant_name(e: &lanes::Error) -> String {
    let d = format!("{e:?}");
    d.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or_default().to_string()
}

/// Parses an `OK ...` / `ERR ...` line: `None` if it is neither.
pub fn parse_result(line: &str) -> Option<Result<String, ErrReply>> {
    if line == "OK" {
        return Some(Ok(String::new()));
    }
    if let Some(rest) = line.strip_prefix("OK ") {
        return Some(Ok(rest.to_string()));
    }
    let rest = line.strip_prefix("ERR ")?;
    let mut parts = rest.splitn(4, '\t');
    let variant = parts.next().unwrap_or_default().to_string();
    let fields = unescape(parts.next().unwrap_or_default());
    let debug = unescape(parts.next().unwrap_or_default());
    let display = unescape(parts.next().unwrap_or_default());
    let one_line = |s: &str| s.replace(['\n', '\r'], " ");
    let detail = format!("{} :: {} / {}", one_line(&fields), one_line(&display), one_line(&debug));
    Some(Err(ErrReply { variant, fields, debug, display, detail }))
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

// ---------------------------------------------------------------------------------------
// Parent side
// ---------------------------------------------------------------------------------------

/// A child process of this test, killed and reaped when dropped.
pub struct Proc {
    name: String,
    child: Child,
    pid: u32,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    notes: Receiver<String>,
    /// Notes received while waiting for another tag: (tag, rest).
    held: VecDeque<(String, String)>,
    log: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    status: Option<ExitStatus>,
}

/// Reads one of the child's pipes to its end: every line into the log, protocol lines of
/// stdout (`chans`) to the parent, notes on their own channel and out of the log (they can
/// be many, one per message sent).
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
                    let _ = notes.send(l["NOTE ".len()..].to_string());
                }
                Some(((lines, _), l)) => {
                    log.lock().unwrap_or_else(|e| e.into_inner()).push_str(&format!("{tag}{line}\n"));
                    let _ = lines.send(l.to_string());
                }
                None => log.lock().unwrap_or_else(|e| e.into_inner()).push_str(&format!("{tag}{line}\n")),
            }
        }
    })
}

impl Proc {
    /// Starts this test binary again in role `role` with extra environment `envs`. The
    /// fabric variables of the parent's environment are not passed on.
    pub fn spawn(name: &str, role: &str, envs: &[(&str, &str)]) -> Proc {
        Proc::spawn_in(&[], name, role, envs)
    }

    /// As [`Proc::spawn`], with the command run through `prefix` (such as `ip netns exec
    /// NS`, which execs it: the pid is still the child's).
    pub fn spawn_in(prefix: &[String], name: &str, role: &str, envs: &[(&str, &str)]) -> Proc {
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
        for v in LANES_ENV.iter().chain(&[ROLE_VAR, DIR_VAR, NODE_VAR, "LANES_POLL_US"]) {
            cmd.env_remove(v);
        }
        cmd.env(ROLE_VAR, role).env("RUST_BACKTRACE", "1");
        // Copies of 1 MiB and more take the non-temporal path in these tests, whatever the
        // machine's cache size makes the default, so that the path is exercised end to end.
        cmd.env("LANES_NT_THRESHOLD", "1048576");
        cmd.envs(envs.iter().copied());
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawning child {name}: {e}"));
        let pid = child.id();
        let log = Arc::new(Mutex::new(String::new()));
        let (ltx, lrx) = mpsc::channel();
        let (ntx, nrx) = mpsc::channel();
        let out = child.stdout.take().expect("piped stdout");
        let err = child.stderr.take().expect("piped stderr");
        let readers = vec![pump(out, "", log.clone(), Some((ltx, ntx))), pump(err, "[stderr] ", log.clone(), None)];
        let stdin = child.stdin.take();
        Proc {
            name: format!("{name} (pid {pid})"),
            child,
            pid,
            stdin,
            lines: lrx,
            notes: nrx,
            held: VecDeque::new(),
            log,
            readers,
            status: None,
        }
    }

    /// Starts a `node` child acting as `node` on its host of `hosts` (a
    /// [`Topology`](crate::Topology), or one [`TestDir`](crate::TestDir)), with that node's
    /// environment, and waits until it has opened the fabric.
    pub fn node(hosts: &impl Hosts, node: u32) -> Proc {
        Proc::node_named(hosts, &format!("node {node}"), node)
    }

    /// As [`Proc::node`], called `name` in failure messages.
    pub fn node_named(hosts: &impl Hosts, name: &str, node: u32) -> Proc {
        let mut p = Proc::node_with(&hosts.prefix_of(node), &hosts.fabric_of(node), node, &hosts.env_of(node));
        p.name = format!("{name} (node {node}, pid {})", p.pid);
        p
    }

    /// A `node` child on the fabric directory `fabric`, run through `prefix` (see
    /// [`Proc::spawn_in`]).
    pub fn node_in(prefix: &[String], fabric: &std::path::Path, node: u32) -> Proc {
        Proc::node_with(prefix, fabric, node, &[])
    }

    fn node_with(prefix: &[String], fabric: &std::path::Path, node: u32, env: &[(String, String)]) -> Proc {
        let node_s = node.to_string();
        let mut envs = vec![(DIR_VAR, fabric.to_str().expect("utf-8 temp path")), (NODE_VAR, node_s.as_str())];
        envs.extend(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let mut p = Proc::spawn_in(prefix, &format!("node {node}"), "node", &envs);
        let l = p.line("READY");
        if !l.starts_with("READY") {
            p.fail(format!("expected READY, got {l:?}"));
        }
        p
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Everything the child printed so far (notes excepted).
    pub fn output(&mut self) -> String {
        if self.status.is_some() {
            self.drain_readers();
        }
        self.output_snapshot()
    }

    /// Everything the child printed so far (notes excepted), without waiting for its pipes
    /// to drain.
    pub fn output_snapshot(&self) -> String {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// After the child is gone: lets the readers reach the end of its pipes (bounded).
    fn drain_readers(&self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.readers.iter().any(|h| !h.is_finished()) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Panics with `msg` and the child's output.
    pub fn fail(&mut self, msg: String) -> ! {
        let out = self.output();
        panic!("{}: {msg}\n--- its output ---\n{out}--- end of output ---", self.name)
    }

    /// The next protocol line (notes aside), waiting at most [`WAIT`].
    pub fn line(&mut self, what: &str) -> String {
        self.line_within(what, WAIT)
    }

    /// The next protocol line (notes aside), waiting at most `limit`.
    pub fn line_within(&mut self, what: &str, limit: Duration) -> String {
        match self.lines.recv_timeout(limit) {
            Ok(l) => l,
            Err(RecvTimeoutError::Timeout) => self.fail(format!("did not report {what} within {limit:?}")),
            Err(RecvTimeoutError::Disconnected) => {
                let st = self.wait_exit();
                self.fail(format!("ended ({st}) before reporting {what}"))
            }
        }
    }

    /// Sends one command line without waiting for anything.
    pub fn send(&mut self, cmd: &str) {
        let Some(stdin) = self.stdin.as_mut() else { self.fail(format!("stdin closed; cannot send {cmd:?}")) };
        if let Err(e) = stdin.write_all(format!("{cmd}\n").as_bytes()).and_then(|_| stdin.flush()) {
            self.fail(format!("cannot send {cmd:?}: {e}"));
        }
    }

    /// Sends `cmd` and waits until the child has started executing it.
    pub fn start(&mut self, cmd: &str) {
        self.send(cmd);
        let l = self.line(&format!("the start of {cmd:?}"));
        if l != "BEGIN" {
            self.fail(format!("expected BEGIN for {cmd:?}, got {l:?}"));
        }
    }

    /// Waits (at most [`WAIT`]) for the result of a started command.
    pub fn finish(&mut self, cmd: &str) -> Result<String, ErrReply> {
        self.finish_within(cmd, WAIT)
    }

    /// Waits at most `limit` for the result of a started command.
    pub fn finish_within(&mut self, cmd: &str, limit: Duration) -> Result<String, ErrReply> {
        let l = self.line_within(&format!("the result of {cmd:?}"), limit);
        match parse_result(&l) {
            Some(r) => r,
            None => self.fail(format!("unexpected reply {l:?} to {cmd:?}")),
        }
    }

    /// Runs one command, waiting at most `limit` for its result.
    pub fn call_within(&mut self, cmd: &str, limit: Duration) -> Result<String, ErrReply> {
        self.start(cmd);
        self.finish_within(cmd, limit)
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

    /// Runs one command that must fail.
    pub fn err(&mut self, cmd: &str) -> ErrReply {
        match self.call(cmd) {
            Ok(s) => self.fail(format!("{cmd:?} unexpectedly succeeded: {s:?}")),
            Err(e) => e,
        }
    }

    /// Runs one command that must fail with the error variant `variant`.
    pub fn err_is(&mut self, cmd: &str, variant: &str) -> ErrReply {
        match self.call(cmd) {
            Ok(s) => self.fail(format!("{cmd:?} unexpectedly succeeded: {s:?} (expected {variant})")),
            Err(e) if e.variant == variant => e,
            Err(e) => self.fail(format!("{cmd:?} failed differently: {e}, expected {variant}")),
        }
    }

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

    /// The next note with one of `tags`, waiting at most `limit`: (tag, rest).
    pub fn note_of(&mut self, tags: &[&str], limit: Duration) -> (String, String) {
        if let Some(i) = self.held.iter().position(|(t, _)| tags.contains(&t.as_str())) {
            return self.held.remove(i).expect("held note");
        }
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

    /// The result a command run in the background reported in a note tagged `tag`,
    /// waiting at most `limit`.
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

    /// Closes the child's stdin (a daemon child stops when its parent hangs up).
    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    /// Sends `signal` to the child (which must not have been reaped).
    pub fn signal(&mut self, signal: libc::c_int) {
        assert!(self.status.is_none(), "{} already exited", self.name);
        // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child, so
        // it cannot have been recycled for another process.
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill -{signal} {}: {}", self.pid, std::io::Error::last_os_error());
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

    /// `kill -9`, then reaps the child.
    pub fn kill9(&mut self) -> ExitStatus {
        self.signal(libc::SIGKILL);
        self.wait_exit()
    }

    /// As [`Proc::kill9`]; returns [`mono_ns`] just before the signal.
    pub fn kill9_at(&mut self) -> u64 {
        let t = mono_ns();
        self.kill9();
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
                    self.status = self.child.wait().ok();
                    self.fail(format!("did not exit within {WAIT:?}; killed it"))
                }
                Err(e) => panic!("{}: waiting for the child: {e}", self.name),
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stdin.take();
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

// ---------------------------------------------------------------------------------------
// Child side
// ---------------------------------------------------------------------------------------

/// Writes one protocol line to the parent (whole lines, never interleaved): usable from
/// any thread of the child.
pub fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{MARK}{line}");
    let _ = out.flush();
}

/// Sends the note `NOTE <tag> <rest>`.
pub fn note(tag: &str, rest: &str) {
    say(&format!("NOTE {tag} {rest}"));
}

/// A child's line-based channel to its parent: stdout out, stdin in.
pub struct ChildIo {
    rx: Receiver<String>,
}

impl ChildIo {
    fn new() -> ChildIo {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(l) = line else { break };
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        ChildIo { rx }
    }

    /// Sends one protocol line to the parent.
    pub fn send(&self, line: &str) {
        say(line);
    }

    /// Returns when the parent closes our stdin or dies, however long that takes.
    pub fn wait_for_hang_up(&self) {
        while self.rx.recv().is_ok() {}
    }

    /// The next line from the parent; `None` when the parent closed our stdin (or died).
    pub fn recv(&self) -> Option<String> {
        match self.rx.recv_timeout(CHILD_IDLE) {
            Ok(l) => Some(l),
            Err(RecvTimeoutError::Disconnected) => None,
            Err(RecvTimeoutError::Timeout) => panic!("test child: no word from the parent for {CHILD_IDLE:?}"),
        }
    }

    /// Serves commands until the parent hangs up or sends `exit`: `BEGIN`, then `exec`'s
    /// result line ([`ok_line`], [`err_line`] ...) for each. `exec` sees `exit` too (to
    /// release what it holds) before the loop ends.
    pub fn serve(&self, mut exec: impl FnMut(&str) -> String) {
        while let Some(line) = self.recv() {
            say("BEGIN");
            say(&exec(line.trim()));
            if line.trim() == "exit" {
                break;
            }
        }
    }
}

/// Makes this child die with its parent's thread that spawned it (`PR_SET_PDEATHSIG`) and
/// leave no core files (for the kill -9s and provoked crashes).
pub fn die_with_parent() {
    // SAFETY: prctl(PR_SET_PDEATHSIG) takes plain integers; it only sets a process attribute.
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0) };
    let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: setrlimit reads a valid rlimit for the duration of the call.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) };
}

/// The body of every test file's `child_entry` test: does nothing in the parent; in a child
/// hands the role to `roles` (which returns false for a role it does not know), then runs a
/// cluster daemon for role `daemon` (the hosts of [`cluster::Cluster`]).
pub fn child_entry(roles: impl FnOnce(&str, &ChildIo) -> bool) {
    let Ok(role) = std::env::var(ROLE_VAR) else { return };
    let io = ChildIo::new();
    if roles(&role, &io) {
        return;
    }
    if role == "daemon" {
        cluster::run_daemon_role(|| io.wait_for_hang_up());
    }
    panic!("unknown test role {role:?}");
}
