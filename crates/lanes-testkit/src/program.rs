//! Programs run with a bound: each in its own process group (killed whole when it ends,
//! times out or is dropped), its output collected, for tests that run real programs (the
//! socket conformance fixture, servers and clients, other projects' test suites).

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
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

/// A child process in its own process group; the whole group is killed when it is dropped.
pub struct Program {
    child: Option<Child>,
    pgid: i32,
    out: Option<JoinHandle<Vec<u8>>>,
    err: Option<JoinHandle<Vec<u8>>>,
    pub name: String,
}

fn reader(pipe: Option<impl Read + Send + 'static>) -> Option<JoinHandle<Vec<u8>>> {
    pipe.map(|mut p| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = p.read_to_end(&mut v);
            v
        })
    })
}

impl Program {
    pub fn spawn(cmd: Command, name: &str) -> Program {
        Program::spawn_with_stdin(cmd, name, Stdio::null())
    }

    pub fn spawn_with_stdin(mut cmd: Command, name: &str, stdin: Stdio) -> Program {
        cmd.stdin(stdin).stdout(Stdio::piped()).stderr(Stdio::piped()).process_group(0);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{name}: cannot start {cmd:?}: {e}"));
        let pgid = child.id() as i32;
        let out = reader(child.stdout.take());
        let err = reader(child.stderr.take());
        Program { child: Some(child), pgid, out, err, name: name.to_string() }
    }

    pub fn pid(&self) -> u32 {
        self.pgid as u32
    }

    /// Whether the process (the group leader) has ended.
    pub fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => !matches!(c.try_wait(), Ok(None)),
            None => true,
        }
    }

    /// Sends a signal to the process (not its group).
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on a pid this Program started and has not reaped yet (it is reaped only
        // in wait/Drop, which consume or end the Program).
        unsafe { libc::kill(self.pgid, sig) };
    }

    fn kill_group(&self) {
        // SAFETY: kill(2) on the process group this Program created (process_group(0)).
        unsafe { libc::kill(-self.pgid, libc::SIGKILL) };
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
        let stdout = self.out.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        let stderr = self.err.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        Finished {
            status,
            timed_out,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stdout_bytes: stdout,
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        }
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

/// Runs a command to its end, bounded.
pub fn run_bounded(cmd: Command, name: &str, limit: Duration) -> Finished {
    Program::spawn(cmd, name).wait(limit)
}
