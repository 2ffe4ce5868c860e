//! Local segments: memory this node exports.

use std::sync::Arc;

use super::map::{Map, MapAccess, MapOrigin};
use super::FabricInner;
use crate::error::{Error, IoContext, Result};
use crate::platform::files::DirLock;
use crate::platform::liveness::ProcessIdentity;
use crate::transport::shm::layout::{create_flags, state, HeaderSnapshot};
use crate::transport::shm::segment_file::{OpenError, RegisteredMemory, SegmentFile};

/// Automatic segment ids are drawn from this range, clear of typical user-chosen ids.
const AUTO_ID_BASE: u32 = 0x8000_0000;
const AUTO_ID_ATTEMPTS: u32 = 4096;

/// Which role this handle plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Created the segment; removing removes it for everyone.
    Owner,
    /// Attached to a segment another process of this node shared.
    Attached,
}

/// A segment of this node's memory that other nodes may connect to and map.
/// Dropping the owner's handle removes the segment (forcibly).
#[derive(Debug)]
pub struct LocalSegment {
    inner: Arc<LocalInner>,
}

#[derive(Debug)]
pub(crate) struct LocalInner {
    fabric: Arc<FabricInner>,
    pub(crate) file: SegmentFile,
    role: Role,
    removed: std::sync::atomic::AtomicBool,
}

impl LocalSegment {
    pub(crate) fn create(
        fabric: &Arc<FabricInner>,
        id: Option<u32>,
        size: u64,
        registered: Option<RegisteredMemory>,
    ) -> Result<LocalSegment> {
        if size == 0 {
            return Err(Error::InvalidSize { size, reason: "segments hold at least one byte" });
        }
        if size > i64::MAX as u64 / 2 {
            return Err(Error::InvalidSize { size, reason: "larger than the address space" });
        }
        match id {
            Some(id) => Self::create_with_id(fabric, id, size, registered),
            None => {
                let start = std::process::id().wrapping_mul(2654435761);
                for i in 0..AUTO_ID_ATTEMPTS {
                    let id = AUTO_ID_BASE | (start.wrapping_add(i) & !AUTO_ID_BASE);
                    match Self::create_with_id(fabric, id, size, registered) {
                        Err(Error::SegmentIdInUse { .. }) => continue,
                        other => return other,
                    }
                }
                Err(Error::IllegalOperation("no free automatic segment id"))
            }
        }
    }

    fn create_with_id(
        fabric: &Arc<FabricInner>,
        id: u32,
        size: u64,
        registered: Option<RegisteredMemory>,
    ) -> Result<LocalSegment> {
        let node = fabric.node.get();
        let snap = HeaderSnapshot {
            node_id: node,
            segment_id: id,
            segment_size: size,
            data_offset: 0,
            owner: fabric.identity,
            create_flags: if registered.is_some() { create_flags::REGISTERED_MEMORY } else { 0 },
        };
        // If a stale segment holds the id, one round replaces it and the next creates; racing
        // creators may each take a round, so a few are allowed.
        for _ in 0..3 {
            // SAFETY: `registered`, when given, carries the contract of
            // Fabric::register_segment_memory, which the caller accepted.
            match unsafe { SegmentFile::create(&fabric.paths, snap, registered) } {
                Ok(file) => {
                    return Ok(LocalSegment {
                        inner: Arc::new(LocalInner {
                            fabric: fabric.clone(),
                            file,
                            role: Role::Owner,
                            removed: false.into(),
                        }),
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    replace_if_stale(fabric, node, id)?;
                }
                Err(e) => return Err(Error::io(format!("creating segment {id:#x} on node {node}"), e)),
            }
        }
        Err(Error::SegmentIdInUse { node, segment: id })
    }

    pub(crate) fn attach(fabric: &Arc<FabricInner>, id: u32) -> Result<LocalSegment> {
        let node = fabric.node.get();
        let file = match SegmentFile::open(&fabric.paths, node, id) {
            Ok(f) => f,
            Err(OpenError::Missing) => return Err(Error::NoSuchSegment { node, segment: id }),
            Err(OpenError::Corrupt(reason)) => {
                return Err(Error::CorruptSegment { path: fabric.paths.segment(node, id), reason })
            }
            Err(OpenError::Io(e)) => return Err(Error::io(format!("opening segment {id:#x}"), e)),
        };
        let st = file.header().state();
        if st & state::REMOVED != 0 || !fabric.is_alive(node, file.snapshot().owner) {
            return Err(Error::NoSuchSegment { node, segment: id });
        }
        if st & state::SHARED == 0 {
            return Err(Error::IllegalOperation("the segment's owner has not shared it"));
        }
        Ok(LocalSegment {
            inner: Arc::new(LocalInner { fabric: fabric.clone(), file, role: Role::Attached, removed: false.into() }),
        })
    }

    /// The segment id.
    pub fn id(&self) -> u32 {
        self.inner.file.snapshot().segment_id
    }

    /// The size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.file.snapshot().segment_size
    }

    /// The node that exports it.
    pub fn node_id(&self) -> u32 {
        self.inner.file.snapshot().node_id
    }

    /// Whether this handle created the segment (rather than attached to it).
    pub fn is_owner(&self) -> bool {
        self.inner.role == Role::Owner
    }

    fn owner_only(&self, what: &'static str) -> Result<()> {
        if self.inner.removed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::IllegalOperation("the segment was removed"));
        }
        if self.inner.role != Role::Owner {
            return Err(Error::IllegalOperation(what));
        }
        Ok(())
    }

    /// Prepares the segment for access through an adapter (`SCIPrepareSegment`).
    pub fn prepare(&self) -> Result<()> {
        self.owner_only("only the owner prepares a segment")?;
        self.inner.file.header().update_state(state::PREPARED, 0);
        Ok(())
    }

    /// Lets peers connect (`SCISetSegmentAvailable`). The segment must be prepared.
    pub fn set_available(&self) -> Result<()> {
        self.owner_only("only the owner makes a segment available")?;
        if self.inner.file.header().state() & state::PREPARED == 0 {
            return Err(Error::NotPrepared { segment: self.id() });
        }
        self.inner.file.header().update_state(state::AVAILABLE, 0);
        Ok(())
    }

    /// Refuses new connections (`SCISetSegmentUnavailable`); existing ones stay.
    pub fn set_unavailable(&self) -> Result<()> {
        self.owner_only("only the owner makes a segment unavailable")?;
        self.inner.file.header().update_state(0, state::AVAILABLE);
        Ok(())
    }

    /// Whether peers may connect now.
    pub fn is_available(&self) -> bool {
        self.inner.file.header().state() & state::AVAILABLE != 0
    }

    /// Lets other processes of this node attach (`SCIShareSegment`).
    pub fn share(&self) -> Result<()> {
        self.owner_only("only the owner shares a segment")?;
        self.inner.file.header().update_state(state::SHARED, 0);
        Ok(())
    }

    /// The live peers connected now, as (node id, pid).
    pub fn connected_peers(&self) -> Vec<(u32, u32)> {
        live_connections(&self.inner.fabric, &self.inner.file)
    }

    /// Maps `size` bytes from `offset` of the segment.
    pub fn map(&self, offset: u64, size: u64, access: MapAccess) -> Result<Map> {
        Map::new(&self.inner.file, offset, size, access, MapOrigin::Local(self.inner.clone()))
    }

    /// Removes the segment (`SCIRemoveSegment`). Refused with [`Error::SegmentBusy`] while
    /// live peers are connected, unless `force`; their sequences then fail and their maps
    /// stay readable. An attached handle only detaches.
    pub fn remove(self, force: bool) -> Result<()> {
        self.inner.remove(force)
    }
}

impl LocalInner {
    fn remove(&self, force: bool) -> Result<()> {
        use std::sync::atomic::Ordering;
        if self.role == Role::Attached {
            self.removed.store(true, Ordering::Release);
            return Ok(());
        }
        if self.removed.load(Ordering::Acquire) {
            return Ok(());
        }
        let peers = live_connections(&self.fabric, &self.file);
        if !peers.is_empty() && !force {
            let s = self.file.snapshot();
            return Err(Error::SegmentBusy { node: s.node_id, segment: s.segment_id, connections: peers.len() });
        }
        self.removed.store(true, Ordering::Release);
        self.file.header().update_state(state::REMOVED, state::AVAILABLE | state::SHARED);
        let node = self.file.snapshot().node_id;
        let _lock = DirLock::acquire(&self.fabric.paths.node_lock(node))
            .context(|| format!("locking node directory {node}"))?;
        if self.file.is_current_at(self.file.path()) {
            std::fs::remove_file(self.file.path()).context(|| format!("removing {}", self.file.path().display()))?;
        }
        Ok(())
    }
}

impl Drop for LocalSegment {
    fn drop(&mut self) {
        // Maps may still hold the inner data; the segment itself goes now.
        let _ = self.inner.remove(true);
    }
}

/// Live peers holding connection slots of `file`, as (node, pid).
pub(crate) fn live_connections(fabric: &FabricInner, file: &SegmentFile) -> Vec<(u32, u32)> {
    file.header()
        .connections()
        .into_iter()
        .filter(|&(node, id): &(u32, ProcessIdentity)| node == 0 || fabric.is_alive(node, id))
        .map(|(node, id)| (node, id.pid()))
        .collect()
}

/// Called when creating `id` found the name taken: under the node lock, removes the file if
/// its owner is dead, it was removed, or it is not a valid segment; else reports the id in use.
fn replace_if_stale(fabric: &FabricInner, node: u32, id: u32) -> Result<()> {
    let _lock = DirLock::acquire(&fabric.paths.node_lock(node)).context(|| format!("locking node directory {node}"))?;
    let path = fabric.paths.segment(node, id);
    match SegmentFile::open(&fabric.paths, node, id) {
        Err(OpenError::Missing) => Ok(()),
        Err(OpenError::Io(e)) => Err(Error::io(format!("opening {}", path.display()), e)),
        Err(OpenError::Corrupt(_)) => {
            // A file that was never a valid segment (published files are always complete).
            std::fs::remove_file(&path).context(|| format!("removing corrupt {}", path.display()))
        }
        Ok(existing) => {
            let live =
                existing.header().state() & state::REMOVED == 0 && fabric.is_alive(node, existing.snapshot().owner);
            if live {
                return Err(Error::SegmentIdInUse { node, segment: id });
            }
            if existing.is_current_at(&path) {
                std::fs::remove_file(&path).context(|| format!("removing stale {}", path.display()))?;
            }
            Ok(())
        }
    }
}
