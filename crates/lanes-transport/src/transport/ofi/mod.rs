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

pub mod dma_pipe;
pub mod endpoint;
pub mod export;
pub mod fence;
pub mod fi;
pub mod node_watch;
pub mod notify;
pub mod reflective;
pub mod remote;
pub mod rma;
pub mod transport;
pub mod window;

#[cfg(test)]
mod tests;
