//! Layer 2 of Lanes: how a remote object is reached, and what that needs below the fabric
//! API. A crate of its own, over `lanes-platform`, so that nothing here can name the fabric
//! (the crate `lanes`, layer 3) or the daemon above it: an upward import does not compile.
//!
//! - [`transport`]: the contract between the fabric and a transport, the DMA contract, the
//!   vocabulary both speak ([`transport::vocab`]), and the transports: `shm` on one host,
//!   `ofi` (cargo feature `ofi`) across hosts.
//! - [`cluster`]: the control plane's protocol and client (what a process asks its host's
//!   daemon; the ofi transport connects through its grants), host identity, links, export
//!   records. The daemon itself is a service on top (`lanes::cluster::daemon`).
//! - [`config`]: the one schema of `lanes.toml`.
//! - [`error`]: the one `Error` of the fabric API.
//!
//! The crate `lanes` re-exports these modules, so `lanes::transport`, `lanes::config`,
//! `lanes::error` and `lanes::cluster` name them (see docs/ARCHITECTURE.md).

pub mod cluster;
pub mod config;
pub mod error;
pub mod transport;

/// Layer 1, the crate `lanes-platform`, as `crate::platform`.
pub use lanes_platform as platform;

/// Whether this build has the ofi transport (cargo feature `ofi`), so that nodes of other
/// hosts of a cluster can be reached; without it, connecting to one is refused.
pub const OFI_TRANSPORT: bool = cfg!(feature = "ofi");

pub use config::{FabricConfig, NodeId};
pub use error::{Error, Result};
