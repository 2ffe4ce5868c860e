//! Programs run with a bound: each in its own process group (killed whole when it ends,
//! times out or is dropped), its output collected, for tests that run real programs (the
//! socket conformance fixture, servers and clients, the `lanes` command, C examples, other
//! projects' test suites).

use std::io::{ErrorKind, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How a bounded process ended.
pub struct Finished {
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    /// Standard output as text (lossy), and as bytes.
    pub stdout: String,
    pub stdout_bytes: Vec<u8>,
    pub stderr: String,
}

impl Finished {
    pub fn ok(&self) -> bool {
        !self.timed_out && self.status.is_some_and(|s| s.success())
    }

    /// The exit code of a process that exited by itself (not killed by a signal, nor for
    /// its time).
    pub fn code(&self) -> Option<i32> {
        if self.timed_out {
            return None;
        }
        self.status.and_then(|s| s.code())
    }

    pub fn describe(&self, what: &str) -> String {
        let status = match (self.timed_out, self.status) {
            (true, _) => "TIMED OUT (killed)".to_string(),
            (false, Some(s)) => s.to_string(),
            (false, None) => "no status".to_string(),
        };
        format!("{what}: {status}\n--- stdout:\n{}--- stderr:\n{}", tail(&self.stdout, 60), tail(&self.stderr, 30))
    }
}

/// The last `lines` lines of a text.
pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    let mut s = String::new();
    if start > 0 {
        s.push_str(&format!("[... {start} lines]\n"));
    }
    for l in &all[start..] {
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// What a reader thread has read of one pipe so far.
#[derive(Default)]
struct Collected {
    bytes: Vec<u8>,
    /// The pipe reached its end (or was never there).
    ended: bool,
}

#[derive(Default)]
struct Shared {
    collected: Mutex<Collected>,
    grew: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Collected> {
        // A reader that panicked leaves whole chunks behind: still worth showing.
        self.collected.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One output pipe of a Program, drained by its own thread (a full pipe would stall the
/// process) into a buffer the test can look at while the process runs.
struct Pipe {
    shared: Arc<Shared>,
    reader: Option<JoinHandle<()>>,
    /// Where the next line search starts: lines before it were looked at already.
    cursor: usize,
}

impl Pipe {
    fn start(pipe: Option<impl Read + Send + 'static>) -> Pipe {
        let shared = Arc::new(Shared::default());
        let reader = match pipe {
            None => {
                shared.lock().ended = true;
                None
            }
            Some(mut p) => {
                let shared = Arc::clone(&shared);
                Some(std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 << 10];
                    loop {
                        let n = match p.read(&mut buf) {
                            Ok(n) => n,
                            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                            Err(_) => 0,
                        };
                        let mut c = shared.lock();
                        if n == 0 {
                            c.ended = true;
                        } else {
                            c.bytes.extend_from_slice(&buf[..n]);
                        }
                        shared.grew.notify_all();
                        if n == 0 {
                            return;
                        }
                    }
                }))
            }
        };
        Pipe { shared, reader, cursor: 0 }
    }

    /// The next line (after those looked at before) that `want` accepts, waiting until
    /// `deadline` for more output; None once the pipe has ended or the time is up.
    fn line(&mut self, deadline: Instant, mut want: impl FnMut(&str) -> bool) -> Option<String> {
        let shared = Arc::clone(&self.shared);
        let mut c = shared.lock();
        loop {
            while let Some(nl) = c.bytes[self.cursor..].iter().position(|&b| b == b'\n') {
                let line = line_text(&c.bytes[self.cursor..self.cursor + nl]);
                self.cursor += nl + 1;
                if want(&line) {
                    return Some(line);
                }
            }
            if c.ended {
                // The last line, which ended without a newline.
                if self.cursor < c.bytes.len() {
                    let line = line_text(&c.bytes[self.cursor..]);
                    self.cursor = c.bytes.len();
                    if want(&line) {
                        return Some(line);
                    }
                }
                return None;
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            c = shared.grew.wait_timeout(c, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
        }
    }

    /// What the pipe gave so far, as text.
    fn so_far(&self) -> String {
        String::from_utf8_lossy(&self.shared.lock().bytes).into_owned()
    }

    /// Everything the pipe gave, once its writers have all closed it.
    fn collect(&mut self) -> Vec<u8> {
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
        std::mem::take(&mut self.shared.lock().bytes)
    }
}

/// A line as `BufRead::lines` gives it: lossy text, without its `\r\n` or `\n`.
fn line_text(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

/// A child process in its own process group; the whole group is killed when it is dropped.
pub struct Program {
    child: Option<Child>,
    pgid: i32,
    /// Set once the process has been reaped: from then on its pid is no longer ours.
    status: Option<ExitStatus>,
    out: Pipe,
    err: Pipe,
    pub name: String,
}

impl Program {
    pub fn spawn(cmd: Command, name: &str) -> Program {
        Program::spawn_with_stdin(cmd, name, Stdio::null())
    }

    /// With `Stdio::piped()`, [`Program::take_stdin`] gives the pipe to write.
    pub fn spawn_with_stdin(mut cmd: Command, name: &str, stdin: Stdio) -> Program {
        cmd.stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{name}: cannot start {cmd:?}: {e}"));
        let pgid = child.id() as i32;
        let out = Pipe::start(child.stdout.take());
        let err = Pipe::start(child.stderr.take());
        Program { child: Some(child), pgid, status: None, out, err, name: name.to_string() }
    }

    pub fn pid(&self) -> u32 {
        self.pgid as u32
    }

    /// The write end of standard input, if the process was started with a piped one;
    /// dropping it gives the process its end of input.
    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.child.as_mut()?.stdin.take()
    }

    /// The process's status if it has ended (reaping it), without waiting.
    fn poll(&mut self) -> Option<Option<ExitStatus>> {
        if self.status.is_some() {
            return Some(self.status);
        }
        match self.child.as_mut()?.try_wait() {
            Ok(Some(s)) => {
                self.status = Some(s);
                Some(Some(s))
            }
            Ok(None) => None,
            Err(_) => Some(None),
        }
    }

    /// Whether the process (the group leader) has ended.
    pub fn exited(&mut self) -> bool {
        self.poll().is_some()
    }

    /// Waits at most `limit` for the process itself to end, and gives its status (None if
    /// it still runs). Unlike [`Program::wait`] it leaves the rest of its group alone, and
    /// the Program (its output, the group) stays: for tests of what a process leaves
    /// behind when it ends.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.poll() {
                return status;
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends a signal to the process (not its group); false if it could not be sent (the
    /// process has been reaped already, or kill(2) failed).
    pub fn signal(&self, sig: i32) -> bool {
        if self.status.is_some() || self.child.is_none() {
            return false;
        }
        // SAFETY: kill(2) on a pid this Program started and has not reaped yet (checked
        // above: every reaping records the status), so the pid is still its process's.
        unsafe { libc::kill(self.pgid, sig) == 0 }
    }

    fn kill_group(&self) {
        // SAFETY: kill(2) on the process group this Program created (process_group(0)).
        unsafe { libc::kill(-self.pgid, libc::SIGKILL) };
    }

    /// Waits at most `limit` for a line of standard output that `want` accepts, while the
    /// process runs: the first such line after those seen by earlier calls (without its
    /// newline), or None if the output ends or the time is up first.
    pub fn stdout_line(&mut self, limit: Duration, want: impl FnMut(&str) -> bool) -> Option<String> {
        self.out.line(Instant::now() + limit, want)
    }

    /// [`Program::stdout_line`] for standard error.
    pub fn stderr_line(&mut self, limit: Duration, want: impl FnMut(&str) -> bool) -> Option<String> {
        self.err.line(Instant::now() + limit, want)
    }

    /// Standard output as far as it has come, while the process runs (for a message).
    pub fn stdout_so_far(&self) -> String {
        self.out.so_far()
    }

    /// Standard error as far as it has come, while the process runs.
    pub fn stderr_so_far(&self) -> String {
        self.err.so_far()
    }

    /// Waits for the end, at most `limit`; after that the group is killed and the result
    /// says so. Whatever the group left running is killed too.
    pub fn wait(mut self, limit: Duration) -> Finished {
        let mut child = self.child.take().expect("child");
        let start = Instant::now();
        let mut timed_out = false;
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break Some(s),
                Ok(None) => {}
                Err(_) => break None,
            }
            if start.elapsed() > limit {
                timed_out = true;
                self.kill_group();
                break child.wait().ok();
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        self.kill_group();
        let stdout = self.out.collect();
        let stderr = self.err.collect();
        Finished {
            status,
            timed_out,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stdout_bytes: stdout,
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
    }

    /// [`Program::wait`] for a process that must end by itself: one still running after
    /// `limit` is killed, and the test fails here with its output.
    pub fn finish(self, limit: Duration) -> Finished {
        let name = self.name.clone();
        let f = self.wait(limit);
        assert!(!f.timed_out, "{name} did not end within {limit:?}\n{}", f.describe(&name));
        f
    }

    /// Sends `sig`, then waits at most `limit` (and kills the group after that).
    pub fn stop(self, sig: i32, limit: Duration) -> Finished {
        self.signal(sig);
        self.wait(limit)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            self.kill_group();
            let _ = c.wait();
        }
    }
}

/// Whether `program` is a file in a directory of PATH (a test that needs it can say so, or
/// skip, rather than fail to start it).
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
}

/// Runs a command to its end, bounded.
pub fn run_bounded(cmd: Command, name: &str, limit: Duration) -> Finished {
    Program::spawn(cmd, name).wait(limit)
}

/// Runs a command that must end within `limit` (see [`Program::finish`]).
pub fn run_to_end(cmd: Command, name: &str, limit: Duration) -> Finished {
    Program::spawn(cmd, name).finish(limit)
}
