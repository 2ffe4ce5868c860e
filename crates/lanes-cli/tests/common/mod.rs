//! What the `lanes` command's integration tests share: a private directory per test, child
//! processes that cannot outlive a failing assertion, and bounded runs.

#![allow(dead_code)] // each test binary uses its own part

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `n` distinct free ports on 127.0.0.1, chosen below the kernel's ephemeral range (each
/// held until all are picked): a socket that binds port 0 or connects, as other tests'
/// programs do by the hundred, is never given one between its choice and the daemon's bind.
pub fn free_ports(n: usize) -> Vec<u16> {
    use std::hash::{BuildHasher, Hasher};
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10000u16, ephemeral_low.max(10001));
    let mut held = Vec::new();
    for _ in 0..1000 {
        if held.len() == n {
            break;
        }
        let r = std::collections::hash_map::RandomState::new().build_hasher().finish();
        let port = low + (r % u64::from(high - low)) as u16;
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            held.push(l);
        }
    }
    assert_eq!(held.len(), n, "no {n} free ports between {low} and {high}");
    held.iter().map(|l| l.local_addr().expect("its address").port()).collect()
}

/// A private directory per test (fabric and outputs), created empty, removed at the end.
pub struct TestDir(pub PathBuf);

impl TestDir {
    /// `<base>/<prefix>-<name>-<pid>`.
    pub fn new(base: &Path, prefix: &str, name: &str) -> Self {
        let p = base.join(format!("{prefix}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("test dir");
        TestDir(p)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

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
