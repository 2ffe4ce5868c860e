//! Where the nodes of a multi-process test live, so that one case runs on every transport.
//!
//! A case is written once as `fn name(t: &Topology)` and starts its nodes with
//! `Proc::node(t, id)` (or `Proc::node_named(t, ..)`); [`topology_cases!`](crate::topology_cases) turns it into
//! `topology::shm::name` and, for the cases it lists after `ofi:` and with the `ofi`
//! feature, `topology::ofi::lo::name` (three hosts on 127.0.0.1) and
//! `topology::ofi::netns::name` (three network namespaces), so
//! `cargo nextest run -E 'test(/::shm::/)'` or `'test(/::ofi::/)'` selects one transport.
//! Paths a case inspects are asked per node ([`Topology::fabric`]): the fabric directory of
//! the host that node lives on.

use std::path::PathBuf;
use std::time::Duration;

use crate::cluster::Cluster;
use crate::test_dir::TestDir;

/// The hosts of one test.
pub enum Topology {
    /// Every node on this host, in one fabric directory: the shm transport.
    Shm(TestDir),
    /// Hosts a, b and c, each with its own fabric directory and daemon, on 127.0.0.1: the
    /// ofi transport without privilege. Node 8 is on a, the other nodes of the cases on b
    /// and c ([`Cluster::host_of`]).
    OfiLoopback(Cluster),
    /// The same hosts as network namespaces on a bridge (10.77.0.1-3): needs root.
    OfiNetns(Cluster),
}

/// How long a case may wait for things a transport notices asynchronously.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// A death, removal or loss is noticed within this.
    pub notice: Duration,
}

impl Topology {
    /// One host, one fresh fabric directory named after `case`.
    pub fn shm(case: &str) -> Topology {
        Topology::Shm(TestDir::new(case))
    }

    /// Three hosts on 127.0.0.1, their daemons started and Operational to each other.
    pub fn ofi_loopback(case: &str) -> Topology {
        Topology::OfiLoopback(Cluster::loopback(case))
    }

    /// Three hosts in network namespaces, their daemons started and Operational to each
    /// other; `None` (the reason printed) when namespaces cannot be used here and `CI` is
    /// not set.
    pub fn ofi_netns(case: &str) -> Option<Topology> {
        Cluster::netns(case).map(Topology::OfiNetns)
    }

    /// The transport's name, as in the test path (`shm::...`, `ofi::...`).
    pub fn transport(&self) -> &'static str {
        match self {
            Topology::Shm(_) => "shm",
            Topology::OfiLoopback(_) | Topology::OfiNetns(_) => "ofi",
        }
    }

    /// Timing bounds for this topology.
    pub fn bounds(&self) -> Bounds {
        match self {
            Topology::Shm(_) => Bounds { notice: Duration::from_secs(2) },
            Topology::OfiLoopback(_) | Topology::OfiNetns(_) => Bounds { notice: Duration::from_secs(4) },
        }
    }

    /// The hosts and their daemons, on the ofi topologies.
    pub fn cluster(&self) -> Option<&Cluster> {
        match self {
            Topology::Shm(_) => None,
            Topology::OfiLoopback(c) | Topology::OfiNetns(c) => Some(c),
        }
    }

    /// The hosts and their daemons, to kill, restart or cut (ofi topologies).
    pub fn cluster_mut(&mut self) -> Option<&mut Cluster> {
        match self {
            Topology::Shm(_) => None,
            Topology::OfiLoopback(c) | Topology::OfiNetns(c) => Some(c),
        }
    }

    /// A fresh topology of the same kind, for a case that needs a clean fabric per round.
    pub fn fresh(&self, name: &str) -> Topology {
        match self {
            Topology::Shm(_) => Topology::shm(name),
            Topology::OfiLoopback(_) => Topology::ofi_loopback(name),
            Topology::OfiNetns(_) => {
                Topology::ofi_netns(name).expect("namespaces, usable for the first topology of this case")
            }
        }
    }

    /// The host (index into the cluster's hosts) `node` lives on.
    fn host(node: u32) -> usize {
        Cluster::host_of(node)
            .unwrap_or_else(|| panic!("node {node} has no host in the ofi topologies (multiples of 4 up to 48)"))
    }

    /// The pid that the owner of an object on node `owner` sees for a connection of the
    /// process `pid` acting as node `peer` (in `LocalEvent`s and `connected_peers`): the
    /// process itself on one host; across hosts the owner's daemon, which claims the slot
    /// under its proxy record for `peer`.
    pub fn seen_pid(&self, owner: u32, peer: u32, pid: u32) -> u32 {
        match self {
            Topology::Shm(_) => pid,
            Topology::OfiLoopback(c) | Topology::OfiNetns(c) => {
                let host = Topology::host(owner);
                if host == Topology::host(peer) {
                    pid
                } else {
                    c.daemon_pid(host)
                }
            }
        }
    }

    /// The fabric directory of the host `node` lives on.
    pub fn fabric(&self, node: u32) -> PathBuf {
        match self {
            Topology::Shm(dir) => dir.fabric(),
            Topology::OfiLoopback(c) | Topology::OfiNetns(c) => c.fabric(Topology::host(node)),
        }
    }

    /// The command prefix that runs a process on the host of `node` (none on one host and
    /// on loopback; `ip netns exec <namespace>` in namespaces).
    pub fn prefix(&self, node: u32) -> Vec<String> {
        match self {
            Topology::Shm(_) => Vec::new(),
            Topology::OfiLoopback(c) | Topology::OfiNetns(c) => c.prefix(Topology::host(node)),
        }
    }

    /// The environment a process acting as `node` needs beyond its test directory and node
    /// (none on one host): `LANES_CONFIG`, `LANES_HOST`, `LANES_DIR` and `LANES_NODE_ID`
    /// (and on loopback's host b `LANES_OFI_PROGRESS=poll`),
    /// with which `FabricConfig::from_env` opens the fabric on that node's host.
    pub fn env(&self, node: u32) -> Vec<(String, String)> {
        match self {
            Topology::Shm(_) => Vec::new(),
            Topology::OfiLoopback(c) | Topology::OfiNetns(c) => {
                let host = Topology::host(node);
                let mut env = c.env(host);
                env.push(("LANES_NODE_ID".into(), node.to_string()));
                // On loopback, host b's processes progress by polling and the others by
                // waking (lanes.toml's default), so each case covers both and their mix.
                if matches!(self, Topology::OfiLoopback(_)) && host == 1 {
                    env.push(("LANES_OFI_PROGRESS".into(), "poll".into()));
                }
                env
            }
        }
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
    /// Environment variables a process acting as `node` is started with (see
    /// [`Topology::env`]); when they include `LANES_CONFIG`, the node opens its fabric with
    /// `FabricConfig::from_env`, else with the fabric directory and node id.
    fn env_of(&self, node: u32) -> Vec<(String, String)>;
}

impl Hosts for Topology {
    fn fabric_of(&self, node: u32) -> PathBuf {
        self.fabric(node)
    }

    fn prefix_of(&self, node: u32) -> Vec<String> {
        self.prefix(node)
    }

    fn env_of(&self, node: u32) -> Vec<(String, String)> {
        self.env(node)
    }
}

impl Hosts for TestDir {
    fn fabric_of(&self, _node: u32) -> PathBuf {
        self.fabric()
    }

    fn prefix_of(&self, _node: u32) -> Vec<String> {
        Vec::new()
    }

    fn env_of(&self, _node: u32) -> Vec<(String, String)> {
        Vec::new()
    }
}

/// Turns cases `fn name(t: &Topology)` of the calling file into tests:
///
/// - `topology_cases!(a, b, c)`: `topology::shm::{a, b, c}`;
/// - `topology_cases!(a, b, c; ofi: a, b)`: the same, and with the calling crate's `ofi` feature also
///   `topology::ofi::lo::{a, b}` (hosts on 127.0.0.1) and `topology::ofi::netns::{a, b}`
///   (network namespaces; skipped with a printed reason where they cannot be used, unless
///   `CI` is set). A case runs on ofi only when listed after `ofi:`, so cases are opted in
///   one by one as the data path grows; a case listed only after `ofi:` (`topology_cases!(;
///   ofi: x)`) needs the daemons and has no shm test.
///
/// `-E 'test(/::shm::/)'` selects one transport, `'test(/::ofi::/)'` the other. The
/// calling file must have `Topology` in scope at its root.
#[macro_export]
macro_rules! topology_cases {
    ($($case:ident),* $(,)? $(; ofi: $($ofi:ident),* $(,)?)?) => {
        mod topology {
            mod shm {
                $(
                    #[test]
                    fn $case() {
                        super::super::$case(&super::super::Topology::shm(concat!("shm-", stringify!($case))));
                    }
                )*
            }
            #[cfg(feature = "ofi")]
            mod ofi {
                mod lo {
                    $($(
                        #[test]
                        fn $ofi() {
                            let t = super::super::super::Topology::ofi_loopback(concat!("ofi-", stringify!($ofi)));
                            super::super::super::$ofi(&t);
                        }
                    )*)?
                }
                mod netns {
                    $($(
                        #[test]
                        fn $ofi() {
                            let name = concat!("ofinet-", stringify!($ofi));
                            let Some(t) = super::super::super::Topology::ofi_netns(name) else { return };
                            super::super::super::$ofi(&t);
                        }
                    )*)?
                }
            }
        }
    };
}
