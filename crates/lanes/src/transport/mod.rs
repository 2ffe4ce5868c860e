//! Layer 2: transports, the one place where "same host" and "other host" differ.
//!
//! [`shm`] is the transport in use: a peer's segment is a file in the fabric directory,
//! mapped directly. The cross-host transport over libfabric is being built beside it as
//! `ofi` (cargo feature `ofi`; so far its safe libfabric layer, `ofi::fi`); the trait both
//! will share is extracted next (docs/design/multi-host.md, section 15).

#[cfg(feature = "ofi")]
pub mod ofi;
pub mod shm;
