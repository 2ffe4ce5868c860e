//! The cluster control plane: one daemon per host (per user and fabric directory) that
//! knows the other hosts, watches them with heartbeats and answers questions about any
//! node's objects. It never touches data: processes move data themselves (over shm on one
//! host, over libfabric across hosts). See docs/design/multi-host.md, shape C.
//!
//! - [`config`]: the `[cluster]` section and the hosts of `lanes.toml` (a part of the one
//!   schema of the file, [`crate::config`]).
//! - [`proto`]: frames and messages, daemon to daemon (TCP) and process to daemon (Unix socket).
//! - the daemon (`lanes::cluster::daemon`, a service on top of the fabric, in the crate
//!   `lanes`), whose `run` is what `lanes daemon` runs.
//! - [`client`]: what a process uses to ask its daemon; every call has a deadline.
//! - [`identity`]: host keys (`lanes keygen`, `public_key` in lanes.toml).
//! - [`link`]: the daemons' authenticated, encrypted links (a Noise handshake).
//! - [`secret`]: the optional cluster secret (a pre-shared key of keyed links).
//! - [`exports`]: the records an owner process publishes for objects it exported over
//!   libfabric, which the daemon hands to connecting peers with their [`Grant`].

pub mod client;
pub use crate::config::cluster as config;
pub mod exports;
pub mod identity;
pub mod link;
pub mod proto;
pub mod secret;

use std::io;
use std::path::PathBuf;

pub use client::{Client, Notice, Subscription};
pub use config::{ClusterConfig, HostEntry, IdleProgress};
pub use exports::ExportRecord;
pub use proto::{
    Grant, GrantStatus, GroupInfo, HeldGrant, HostState, HostStatus, NodeEvent, NodeProbe, ObjectInfo, ObjectKind,
    Refusal,
};

/// The daemon's socket in a fabric directory.
pub const SOCKET_NAME: &str = "daemon.sock";

/// Result of the cluster calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong in the control plane.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration could not be read or makes no sense.
    #[error(transparent)]
    Config(#[from] crate::Error),
    /// A daemon needs a configuration with a `[cluster]` section.
    #[error("{path}: no [cluster] section; the daemon serves a cluster described in lanes.toml")]
    NoCluster { path: PathBuf },
    /// This host is not one of the configuration's hosts.
    #[error("host {host:?} is not in {path} (LANES_HOST or --host picks one of: {known})")]
    UnknownHost { host: String, path: PathBuf, known: String },
    /// Another daemon already answers on the socket.
    #[error("a daemon already serves {socket}")]
    AlreadyRunning { socket: PathBuf },
    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    /// No daemon answers on the socket.
    #[error("no daemon on this host (start `lanes daemon`): nothing answers at {socket} ({source})")]
    NoDaemon { socket: PathBuf, source: io::Error },
    /// The daemon answered something this client does not understand, or hung up.
    #[error("daemon at {socket}: {reason}")]
    Protocol { socket: PathBuf, reason: String },
    /// The daemon did not answer within the caller's timeout.
    #[error("timed out after {waited_ms} ms waiting for {what}")]
    Timeout { what: String, waited_ms: u64 },
    /// The daemon answered with a refusal: not found, host unreachable, ...
    #[error(transparent)]
    Refused(#[from] Refusal),
}

impl Error {
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io { what: what.into(), source }
    }

    /// The answer was "no such object".
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Refused(Refusal::NotFound { .. }))
    }

    /// The answer was "the object exists but is not available (or not exported) yet":
    /// worth retrying, as a local connect retries it.
    pub fn is_not_available(&self) -> bool {
        matches!(self, Error::Refused(Refusal::NotAvailable { .. }))
    }
}
