//! What conformance.rs and programs.rs share: the library's path and a line diff; with the
//! private directories, free ports and bounded programs (each in its own process group,
//! killed whole) of `lanes-testkit`.
#![allow(dead_code)] // each test binary uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;
use std::thread::JoinHandle;
use std::time::Duration;

/// Environment variables a test never inherits: each run states what it wants.
pub const SCRUBBED: &[&str] = &[
    "LD_PRELOAD",
    "LANES_DIR",
    "LANES_NODE_ID",
    "LANES_CONFIG",
    "LANES_POLL_US",
    "LANES_SOCKETS",
    "LANES_SOCKETS_RING",
    "LANES_SOCKETS_INCLUDE",
    "LANES_SOCKETS_EXCLUDE",
    "LANES_SOCKETS_LIB",
    "LANES_SOCKETS_QUIET",
    "LANES_SOCKETS_REMOTE",
];

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `<target dir>/<profile>`, holding the directory (`deps`) of this test binary.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("{} is not in <target>/<profile>/deps", exe.display()))
        .to_path_buf()
}

/// `<target dir>/<profile>/liblanes_sockets.so`, next to the directory (`deps`) holding this
/// test binary.
pub fn library() -> PathBuf {
    let profile_dir = profile_dir();
    let lib = profile_dir.join("liblanes_sockets.so");
    assert!(
        lib.is_file(),
        "{} is missing: run `cargo build -p lanes-sockets` first (tests do not build the cdylib)",
        lib.display()
    );
    // `cargo test` does not rebuild a cdylib: refuse to test an old one. What it was built
    // from is cargo's dep-info next to it (files compiled only into tests, which cargo
    // rightly does not rebuild it for, are not there); without one, every source file.
    let built = std::fs::metadata(&lib).and_then(|m| m.modified()).expect("library mtime");
    let deps = std::fs::read_to_string(profile_dir.join("liblanes_sockets.d"))
        .map(|d| dependencies(&d).into_iter().map(|p| repo().join(p)).collect::<Vec<_>>())
        .unwrap_or_default();
    // Any dependency it cannot find (no dep-info, a moved checkout) means the walk instead.
    let newer = if !deps.is_empty() && deps.iter().all(|p| p.is_file()) {
        deps.into_iter().find(|p| is_newer(p, built))
    } else {
        ["crates/lanes-sockets/src", "crates/lanes/src", "crates/lanes-transport/src"]
            .iter()
            .find_map(|dir| newer_file(&repo().join(dir), built))
    };
    if let Some(newer) = newer {
        panic!(
            "{} is older than {}: run `cargo build -p lanes-sockets` first (tests do not build the cdylib)",
            lib.display(),
            newer.display()
        );
    }
    lib
}

/// The files a cargo dep-info file (`target: dep dep ...`, spaces in names escaped) lists.
fn dependencies(dep_info: &str) -> Vec<PathBuf> {
    let Some((_, deps)) = dep_info.lines().next().and_then(|l| l.split_once(": ")) else { return Vec::new() };
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = deps.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => cur.extend(chars.next()),
            ' ' => {
                if !cur.is_empty() {
                    out.push(PathBuf::from(std::mem::take(&mut cur)));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(PathBuf::from(cur));
    }
    out
}

fn is_newer(p: &Path, than: std::time::SystemTime) -> bool {
    std::fs::metadata(p).and_then(|m| m.modified()).is_ok_and(|t| t > than)
}

/// A file under `dir` modified after `than`, if any.
fn newer_file(dir: &Path, than: std::time::SystemTime) -> Option<PathBuf> {
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        let Ok(m) = e.metadata() else { continue };
        if m.is_dir() {
            if let Some(n) = newer_file(&p, than) {
                return Some(n);
            }
        } else if is_newer(&p, than) {
            return Some(p);
        }
    }
    None
}

#[allow(unused_imports)] // each test binary uses its own subset
pub use lanes_testkit::TestDir;

/// A command with the test's environment scrubbed of Lanes and preload settings.
pub fn clean_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    for v in SCRUBBED {
        c.env_remove(v);
    }
    c
}

#[allow(unused_imports)] // each test binary uses its own subset
pub use lanes_testkit::program::{run_bounded, tail, Finished, Program};

/// A line diff ("-" expected, "+" got) with two lines of context, at most `max` lines.
pub fn diff(expected: &str, got: &str, max: usize) -> String {
    let a: Vec<&str> = expected.lines().collect();
    let b: Vec<&str> = got.lines().collect();
    // Longest common subsequence, by dynamic programming (transcripts are short).
    let (n, m) = (a.len(), b.len());
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] { lcs[i + 1][j + 1] + 1 } else { lcs[i + 1][j].max(lcs[i][j + 1]) };
        }
    }
    let mut ops: Vec<(char, &str)> = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            ops.push((' ', a[i]));
            i += 1;
            j += 1;
        } else if j < m && (i == n || lcs[i][j + 1] >= lcs[i + 1][j]) {
            ops.push(('+', b[j]));
            j += 1;
        } else {
            ops.push(('-', a[i]));
            i += 1;
        }
    }
    let near_change = |k: usize| ops[k.saturating_sub(2)..(k + 3).min(ops.len())].iter().any(|(c, _)| *c != ' ');
    let mut out = String::new();
    let mut lines = 0;
    let mut skipped = false;
    for (k, (c, l)) in ops.iter().enumerate() {
        if !near_change(k) {
            skipped = true;
            continue;
        }
        if skipped && !out.is_empty() {
            out.push_str("  ...\n");
        }
        skipped = false;
        if lines == max {
            out.push_str("  [diff cut]\n");
            break;
        }
        out.push_str(&format!("{c} {l}\n"));
        lines += 1;
    }
    out
}

#[allow(unused_imports)] // each test binary uses its own part
pub use lanes_testkit::{free_port, free_ports};

/// Whether some TCP socket of this network namespace listens on `port`.
pub fn listening(port: u16) -> bool {
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let c: Vec<&str> = l.split_whitespace().collect();
                c.len() > 3
                    && c[3] == "0A"
                    && c[1].rsplit_once(':').is_some_and(|(_, p)| u16::from_str_radix(p, 16) == Ok(port))
            })
        })
    })
}

/// The `lanes` command built next to the library (`cargo build -p lanes-cli`).
pub fn lanes_command() -> PathBuf {
    let lanes = library().parent().expect("profile dir").join("lanes");
    assert!(lanes.is_file(), "{} is missing: run `cargo build -p lanes-cli` first", lanes.display());
    lanes
}

/// The socket records of a fabric directory, sampled every `every` while a run goes on, each
/// sample folded into a `T` by the caller's function; `finish` stops it and gives the `T`.
pub struct Sampler<T: Send + 'static> {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<JoinHandle<T>>,
}

impl<T: Default + Send + 'static> Sampler<T> {
    pub fn start(
        fabric: &Path,
        every: Duration,
        mut fold: impl FnMut(&mut T, &[lanes::sockets::registry::ConnectionInfo]) + Send + 'static,
    ) -> Sampler<T> {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let fabric = fabric.to_path_buf();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = T::default();
            loop {
                // Read before the sample: the last sample is taken after the stop.
                let done = flag.load(Ordering::Relaxed);
                fold(&mut seen, &lanes::sockets::registry::list_connections(&fabric));
                if done {
                    break seen;
                }
                std::thread::sleep(every);
            }
        });
        Sampler { stop, thread: Some(thread) }
    }

    pub fn finish(mut self) -> T {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().expect("sampler").join().expect("sampler thread")
    }
}

impl<T: Send + 'static> Drop for Sampler<T> {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
