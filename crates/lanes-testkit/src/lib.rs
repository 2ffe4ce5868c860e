//! What the workspace's integration tests share (a dev-dependency only):
//!
//! - [`TestDir`]: a private scratch directory per test, removed when dropped;
//! - [`free_ports`]: TCP ports below the kernel's ephemeral range, so no port bound to 0
//!   by a concurrent test takes one between its choice and its use;
//! - [`netns`]: three test hosts as network namespaces on a bridge;
//! - [`cluster`]: three hosts with their fabric directories and cluster daemons;
//! - [`topology`]: where the nodes of a case live ([`Topology`]), and [`topology_cases!`],
//!   which runs one case on every transport;
//! - [`process`]: the node-process harness, child processes driven over one line protocol;
//! - [`program`]: any other program run with a bound, in its own process group, its output
//!   collected;
//! - [`postgres`]: PostgreSQL's programs, run as its user, and what pgbench reports.

pub mod cluster;
pub mod netns;
mod ports;
pub mod postgres;
pub mod process;
pub mod program;
mod test_dir;
pub mod topology;

pub use ports::{free_port, free_ports};
pub use process::{child_entry, ChildIo, ErrReply, Proc};
pub use test_dir::{TestDir, LANES_ENV};
pub use topology::{Bounds, Hosts, Topology};
