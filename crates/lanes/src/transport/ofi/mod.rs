//! The cross-host transport over libfabric (cargo feature `ofi`).
//!
//! - [`fi`]: the safe layer over the system libfabric (through `lanes-ofi-sys`);
//! - [`endpoint`]: the one endpoint each process opens, its progress and service thread;
//! - [`transport`]: connecting through the daemons' grants, exporting local objects;
//! - [`export`]: what an owner keeps for an object it exports;
//! - [`fence`]: cutting a lost host's connections to this process (revocation);
//! - [`remote`]: a connection; [`window`]: its maps (mirror windows);
//! - [`node_watch`]: what connections learn from the daemon (host states, grant notices);
//! - [`notify`]: interrupts and data interrupts as CQ-data doorbells;
//! - [`rma`]: registering DMA's local side, posting one RMA operation;
//! - [`dma_pipe`]: the DMA pipe: queues' RMA and group transfers in flight;
//! - [`reflective`]: reflective groups spanning hosts (replicas, rosters, fan-out writes).
//!
//! Still open (docs/design/multi-host.md, section 15): the benchmark (stage 7).

pub(crate) mod dma_pipe;
pub(crate) mod endpoint;
pub(crate) mod export;
pub(crate) mod fence;
pub mod fi;
pub(crate) mod node_watch;
pub(crate) mod notify;
pub(crate) mod reflective;
pub(crate) mod remote;
pub(crate) mod rma;
pub(crate) mod transport;
pub(crate) mod window;

#[cfg(test)]
mod tests;
