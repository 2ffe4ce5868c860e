//! A fresh private scratch directory per test, shared by the test support modules
//! (included by each with `#[path]`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The variables through which a Lanes process picks its node, fabric directory,
/// configuration and ofi transport: a child process starts without the test runner's own
/// and gets exactly what its test gives it.
pub const LANES_ENV: &[&str] = &[
    "LANES_NODE_ID",
    "LANES_DIR",
    "LANES_CONFIG",
    "LANES_HOST",
    "LANES_OFI_PROVIDER",
    "LANES_OFI_PROGRESS",
    "LANES_OFI_POLL_US",
];

/// A fresh private scratch directory, removed when dropped. The fabric lives in its
/// `fabric` subdirectory, which the library creates.
pub struct TestDir {
    root: PathBuf,
}

impl TestDir {
    pub fn new(name: &str) -> TestDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let root = std::env::temp_dir().join(format!("lanes-it-{name}-{}-{n}-{nanos:x}", std::process::id()));
        std::fs::create_dir(&root).unwrap_or_else(|e| panic!("creating {}: {e}", root.display()));
        TestDir { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The fabric directory (not created until a node opens the fabric).
    pub fn fabric(&self) -> PathBuf {
        self.root.join("fabric")
    }

    /// `<fabric>/nodes/<node>`.
    pub fn node_dir(&self, node: u32) -> PathBuf {
        self.fabric().join("nodes").join(node.to_string())
    }

    /// `<fabric>/nodes/<node>/seg-<id as 8 lowercase hex digits>`.
    pub fn seg_path(&self, node: u32, id: u32) -> PathBuf {
        self.node_dir(node).join(format!("seg-{id:08x}"))
    }

    /// `<fabric>/procs/<node>-<pid>`.
    pub fn record_path(&self, node: u32, pid: u32) -> PathBuf {
        self.fabric().join("procs").join(format!("{node}-{pid}"))
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}
