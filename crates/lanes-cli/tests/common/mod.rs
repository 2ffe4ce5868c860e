//! What the `lanes` command's integration tests share: child processes that cannot outlive a
//! failing assertion, and bounded runs; with the private directories and free ports of
//! `lanes-testkit`.

#![allow(dead_code)] // each test binary uses its own part

use std::io::Read;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

#[allow(unused_imports)] // each test binary uses its own part
pub use lanes_testkit::{free_ports, TestDir};

/// Kills and reaps a child on drop, so a failing assertion leaves nothing running.
pub struct Reaped(pub Option<Child>);

impl Reaped {
    pub fn wait(mut self, limit: Duration) -> Output {
        let child = self.0.take().expect("child");
        wait_bounded(child, limit)
    }

    pub fn pid(&self) -> u32 {
        self.0.as_ref().expect("child").id()
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits at most `limit` for `child`, reading its output meanwhile (a full pipe would stall
/// it); past the limit it is killed and the test fails with what it printed.
pub fn wait_bounded(child: Child, limit: Duration) -> Output {
    let mut guard = Reaped(Some(child));
    let c = guard.0.as_mut().expect("child");
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut b = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut b);
            }
            b
        })
    };
    let out = drain(c.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let err = drain(c.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let start = Instant::now();
    let status = loop {
        if let Some(st) = c.try_wait().expect("try_wait") {
            break st;
        }
        if start.elapsed() > limit {
            drop(guard);
            let (o, e) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
            panic!(
                "command did not finish within {limit:?}\nstdout:\n{}\nstderr:\n{}",
                String::from_utf8_lossy(&o),
                String::from_utf8_lossy(&e)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    guard.0 = None;
    Output { status, stdout: out.join().unwrap_or_default(), stderr: err.join().unwrap_or_default() }
}

/// Runs `cmd` (no input, output captured) for at most `limit`.
pub fn run(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    wait_bounded(child, limit)
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}
