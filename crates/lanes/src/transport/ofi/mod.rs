//! The cross-host transport over libfabric (cargo feature `ofi`).
//!
//! [`fi`] is the safe layer over the system libfabric (through `lanes-ofi-sys`);
//! [`endpoint`] is the one endpoint each process opens, its progress and its service
//! thread. The transport itself (exports, mirror windows, RMA DMA and CQ-data doorbells) is
//! being built on them as the second implementation of the transport trait
//! (docs/design/multi-host.md, section 15, stage 4).

pub(crate) mod endpoint;
pub mod fi;
pub(crate) mod remote;
pub(crate) mod rma;

#[cfg(test)]
mod tests;
