//! Where the nodes of a multi-process test live, so that one case runs on every transport
//! (included by the test support modules with `#[path]`, like `test_dir.rs`).
//!
//! A case is written once as `fn name(t: &Topology)` and starts its nodes with
//! `Proc::node(t, id)` (or `Node::spawn(t, ..)`); [`topology_cases!`] turns it into
//! `topology::shm::name`, and later `topology::ofi::name`, so
//! `cargo nextest run -E 'test(/::shm::/)'` selects one transport. Paths a case inspects are asked per node ([`Topology::fabric`]): the fabric
//! directory of the host that node lives on.

use std::path::PathBuf;

use super::TestDir;

/// The hosts of one test.
pub enum Topology {
    /// Every node on this host, in one fabric directory: the shm transport.
    Shm(TestDir),
}

impl Topology {
    /// One host, one fresh fabric directory named after `case`.
    pub fn shm(case: &str) -> Topology {
        Topology::Shm(TestDir::new(case))
    }

    /// The transport's name, as in the test path (`shm::...`).
    pub fn transport(&self) -> &'static str {
        match self {
            Topology::Shm(_) => "shm",
        }
    }

    /// A fresh topology of the same kind, for a case that needs a clean fabric per round.
    pub fn fresh(&self, name: &str) -> Topology {
        match self {
            Topology::Shm(_) => Topology::shm(name),
        }
    }

    /// The fabric directory of the host `node` lives on.
    pub fn fabric(&self, node: u32) -> PathBuf {
        let _ = node;
        match self {
            Topology::Shm(dir) => dir.fabric(),
        }
    }

    /// The command prefix that runs a process on the host of `node` (none on one host).
    pub fn prefix(&self, node: u32) -> Vec<String> {
        let _ = node;
        Vec::new()
    }

    /// `<fabric of node>/nodes/<node>/seg-<id:08x>`: segment `id` of `node`, on its host.
    pub fn seg_path(&self, node: u32, id: u32) -> PathBuf {
        self.fabric(node).join("nodes").join(node.to_string()).join(format!("seg-{id:08x}"))
    }

    /// `<fabric of node>/procs/<node>-<pid>`: the process record of `pid` acting as `node`.
    pub fn record_path(&self, node: u32, pid: u32) -> PathBuf {
        self.fabric(node).join("procs").join(format!("{node}-{pid}"))
    }
}

/// Where a test starts its node processes: a [`Topology`], or a bare [`TestDir`] for cases
/// that are single-host by nature.
pub trait Hosts {
    /// The fabric directory of the host `node` lives on.
    fn fabric_of(&self, node: u32) -> PathBuf;
    /// The command prefix that runs a process on that host.
    fn prefix_of(&self, node: u32) -> Vec<String>;
}

impl Hosts for Topology {
    fn fabric_of(&self, node: u32) -> PathBuf {
        self.fabric(node)
    }

    fn prefix_of(&self, node: u32) -> Vec<String> {
        self.prefix(node)
    }
}

impl Hosts for TestDir {
    fn fabric_of(&self, _node: u32) -> PathBuf {
        self.fabric()
    }

    fn prefix_of(&self, _node: u32) -> Vec<String> {
        Vec::new()
    }
}

/// Turns each case `fn name(t: &Topology)` of the calling file into the test
/// `topology::shm::name` (and, with the ofi transport, `topology::ofi::name`), so that
/// `-E 'test(/::shm::/)'` selects one transport. The calling file must have `Topology` in
/// scope at its root.
#[allow(unused_macros)] // a file that converts no case
macro_rules! topology_cases {
    ($($case:ident),+ $(,)?) => {
        mod topology {
            mod shm {
                $(
                    #[test]
                    fn $case() {
                        super::super::$case(&super::super::Topology::shm(concat!("shm-", stringify!($case))));
                    }
                )+
            }
        }
    };
}
#[allow(unused_imports)]
pub(crate) use topology_cases;
