//! A private scratch directory per test, removed when dropped, and the variables through
//! which a Lanes process finds its fabric (which a child never inherits from the runner).

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

/// A private scratch directory, created empty and removed (with everything in it, whatever
/// its mode) when dropped. A fabric placed in it lives in its `fabric` subdirectory, which the library
/// creates.
pub struct TestDir(pub PathBuf);

impl TestDir {
    /// `<temp>/lanes-it-<name>-<pid>-<n>-<nanos>`: a new directory per call, even for one
    /// name in one process (the multi-process tests make several per case).
    pub fn new(name: &str) -> TestDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let root = std::env::temp_dir().join(format!("lanes-it-{name}-{}-{n}-{nanos:x}", std::process::id()));
        std::fs::create_dir(&root).unwrap_or_else(|e| panic!("creating {}: {e}", root.display()));
        TestDir(root)
    }

    /// `<base>/<prefix>-<name>-<pid>`, emptied first: one per test name and process, at a
    /// path a test can predict (the command-line tests put theirs in the target directory).
    pub fn under(base: &Path, prefix: &str, name: &str) -> TestDir {
        let p = base.join(format!("{prefix}-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("creating {}: {e}", p.display()));
        TestDir(p)
    }

    /// `<temp>/lanes-<kind>-<name>-<pid>`, emptied first (see [`TestDir::under`]).
    pub fn named(kind: &str, name: &str) -> TestDir {
        TestDir::under(&std::env::temp_dir(), &format!("lanes-{kind}"), name)
    }

    pub fn root(&self) -> &Path {
        &self.0
    }

    /// `<root>/<name>`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// A fresh (emptied) subdirectory `<root>/<name>`.
    pub fn sub(&self, name: &str) -> PathBuf {
        let p = self.0.join(name);
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("creating {}: {e}", p.display()));
        p
    }

    /// The fabric directory (not created until a node opens the fabric).
    pub fn fabric(&self) -> PathBuf {
        self.0.join("fabric")
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

/// The directory itself, where a path is wanted.
impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        // A test may have taken its own rights away (an unreadable directory): give them back,
        // or nothing in it could be removed.
        let _ = std::fs::set_permissions(&self.0, std::fs::Permissions::from_mode(0o700));
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
