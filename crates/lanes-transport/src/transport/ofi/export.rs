//! What an owner process keeps for one object it exports over ofi: the registration of the
//! object's data (its shm file, mapped) and, for interrupts and data interrupts, the hooks
//! that turn peers' RMA into local doorbell rings (`super::notify`): the handle of a
//! completion handler (for writes with remote CQ data) and an arrival watch (for writes
//! without).
//!
//! Peers learn the export as a [`RemoteRange`](super::endpoint::RemoteRange): the owner's
//! endpoint name, [`Export::base`], [`Export::key`], [`Export::len`] and [`Export::handle`]
//! (0 when there is no handler).
//! Dropping the export removes the hooks and closes the registration: from then on peers'
//! RMA to it fails (reads, and writes posted with `FI_DELIVERY_COMPLETE`) or is dropped by
//! the provider (plain writes; docs/design/multi-host.md, "Stage 0 results").

use std::sync::Arc;

#[cfg(any(test, feature = "test-hooks"))]
use super::endpoint::RemoteRange;
use super::endpoint::{ArrivalWatch, DataHandler, ProcessEndpoint};
use super::fi;
#[cfg(any(test, feature = "test-hooks"))]
use super::fi::FiAddr;
use crate::error::Result;
use crate::transport::shm::segment_file::DataMapping;

/// An object's data mapping as registrable memory.
#[derive(Debug)]
pub struct ExportedMemory(DataMapping);

// SAFETY: the DataMapping owns its mapping, which stays mapped (read-write: exports are
// mapped read-write) until this value drops, and the registration holds this value (an
// Arc) until it is closed. The object's data is shared memory: every process (owner,
// same-host peers, and now the provider on behalf of remote peers) reaches it only through
// raw pointers with volatile or atomic accesses and copies, never through Rust references.
unsafe impl fi::RegistrableMemory for ExportedMemory {
    fn as_ptr(&self) -> *mut u8 {
        self.0.as_ptr()
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// What turns peers' writes to an exported object into the owner's local events.
#[derive(Default)]
pub struct OwnerHooks {
    /// Receives remote CQ data naming the object.
    pub on_data: Option<DataHandler>,
    /// Runs after every progress pass of the endpoint.
    pub on_arrival: Option<ArrivalWatch>,
}

/// One object exported over ofi. See the module documentation.
pub struct Export {
    endpoint: Arc<ProcessEndpoint>,
    memory: Arc<ExportedMemory>,
    mr: fi::MemoryRegion,
    /// The handler's handle in the endpoint's table; 0 (never assigned) for none.
    handle: u16,
    /// The arrival watch's id, if any.
    watch: Option<u64>,
}

impl std::fmt::Debug for Export {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Export").field("mr", &self.mr).field("handle", &self.handle).finish()
    }
}

impl Export {
    /// Registers `memory` (the object's whole data, mapped read-write) on `endpoint` for
    /// peers' reads and writes, and `hooks` for what they write.
    pub fn new(endpoint: &Arc<ProcessEndpoint>, memory: DataMapping, hooks: OwnerHooks) -> Result<Export> {
        let memory = Arc::new(ExportedMemory(memory));
        let mr = endpoint.register(memory.clone(), fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE)?;
        // The registration closes (drops) if adding the handler fails.
        let handle = match hooks.on_data {
            Some(h) => endpoint.add_handler(h)?,
            None => 0,
        };
        let watch = hooks.on_arrival.map(|w| endpoint.add_arrival_watch(w));
        Ok(Export { endpoint: Arc::clone(endpoint), memory, mr, handle, watch })
    }

    /// Registers the object's data again (remote read and write, the same base and length)
    /// under a new key, which no registration of this process ever had: the key of one
    /// claim of a connection slot. Dropping it closes the registration, and with it the
    /// key: the provider drops every later write naming it (revocation; a write whose
    /// header the provider accepted before is still placed, docs/design/multi-host.md,
    /// "Revocation").
    pub fn register_key(&self) -> Result<fi::MemoryRegion> {
        let memory: Arc<dyn fi::RegistrableMemory> = self.memory.clone();
        self.endpoint.register(memory, fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE)
    }

    /// The registration's key.
    pub fn key(&self) -> u64 {
        self.mr.key()
    }

    /// The address peers use for data offset 0.
    pub fn base(&self) -> u64 {
        self.mr.remote_base()
    }

    /// Bytes exported (the object's data size).
    pub fn len(&self) -> u64 {
        self.mr.len() as u64
    }

    /// Whether nothing is exported (never: objects hold at least one byte).
    pub fn is_empty(&self) -> bool {
        self.mr.is_empty()
    }

    /// The handle peers put in the upper 16 bits of remote CQ data; 0 without a handler.
    pub fn handle(&self) -> u16 {
        self.handle
    }

    /// The name of the owner's endpoint, for peers' address vectors.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn endpoint_name(&self) -> &[u8] {
        self.endpoint.name()
    }

    /// The endpoint the object is exported on.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn endpoint(&self) -> &Arc<ProcessEndpoint> {
        &self.endpoint
    }

    /// The endpoint the object is exported on (for periodic tasks).
    pub fn endpoint_arc(&self) -> &Arc<ProcessEndpoint> {
        &self.endpoint
    }

    /// The range as a peer that inserted the owner's endpoint as `peer` reaches it.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn range(&self, peer: FiAddr) -> RemoteRange {
        RemoteRange { peer, base: self.base(), key: self.key(), len: self.len(), handle: self.handle }
    }
}

impl Drop for Export {
    fn drop(&mut self) {
        // First no more dispatch to the hooks (a call already running keeps its own Arc of
        // each and of the memory it touches), then the registration closes as `mr` drops.
        if self.handle != 0 {
            self.endpoint.remove_handler(self.handle);
        }
        if let Some(id) = self.watch {
            self.endpoint.remove_arrival_watch(id);
        }
    }
}
