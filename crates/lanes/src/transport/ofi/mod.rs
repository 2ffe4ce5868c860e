//! The cross-host transport over libfabric (cargo feature `ofi`).
//!
//! Built so far (docs/design/multi-host.md, section 15, stage 1): [`fi`], the safe layer
//! over the system libfabric (through `lanes-ofi-sys`). The endpoint per process, exports,
//! mirror windows, RMA DMA and CQ-data doorbells come next, as the second implementation of
//! the transport trait and a second variant of the fabric's dispatch enum (stage 4).

pub mod fi;

#[cfg(test)]
mod tests;
