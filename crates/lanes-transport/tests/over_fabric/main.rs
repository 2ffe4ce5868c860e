//! Tests of the transports that need the fabric above them: objects created through the
//! fabric API, connections wrapped as its remote segments, maps and DMA queues. The crate
//! `lanes` is a dev-dependency of this one (with its feature `test-hooks`), so these tests
//! may name the fabric while the library cannot; they reach the transport through `lanes::`
//! paths, which re-export this crate's modules.

mod conformance;
#[cfg(feature = "ofi")]
mod ofi_notify;
#[cfg(feature = "ofi")]
mod ofi_rma;
#[cfg(feature = "ofi")]
mod ofi_window;
mod shm_data_interrupt;
