//! Layer 2: transports, the one place where "same host" and "other host" differ.
//!
//! Only [`shm`] exists so far: a peer's segment is a file in the fabric directory, mapped
//! directly. The cross-host transport (libfabric) will sit beside it behind one trait,
//! extracted when it has a second implementation to serve.

pub mod shm;
