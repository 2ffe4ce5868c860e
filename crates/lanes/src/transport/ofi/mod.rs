//! The cross-host transport over libfabric (cargo feature `ofi`).
//!
//! [`fi`] is the safe layer over the system libfabric (through `lanes-ofi-sys`);
//! [`endpoint`] is the one endpoint each process opens, its progress and its service
//! thread; [`export`] is what an owner keeps for an object it exports; [`notify`] carries
//! interrupts and data interrupts as CQ-data doorbells. The transport itself (mirror
//! windows, RMA DMA) is being built on them as the second implementation of the transport
//! trait (docs/design/multi-host.md, section 15, stage 4).

pub(crate) mod endpoint;
// Used by the tests until object creation exports objects and connections use them.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod export;
pub mod fi;
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) mod notify;
pub(crate) mod remote;
pub(crate) mod transport;
pub(crate) mod window;

#[cfg(test)]
mod tests;
