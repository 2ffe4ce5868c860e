//! The cluster control plane: one daemon per host (per user and fabric directory) that
//! knows the other hosts, watches them with heartbeats and answers questions about any
//! node's objects. See docs/design/multi-host.md, shape C.
//!
//! The protocol, the client, identity, links, secrets and export records live below the
//! fabric, in the crate `lanes-transport` (whose cross-host transport connects through the
//! daemons' grants), and are re-exported here; the daemon, a service on top of the fabric,
//! lives here:
//!
//! - [`daemon`]: the daemon, [`daemon::run`] is what `lanes daemon` runs.

pub use lanes_transport::cluster::*;

pub mod daemon;
