//! The shm transport's remote side: a peer's object is its file in the fabric directory,
//! opened, validated, and mapped directly.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::data_interrupt::{self, Rings, Sender};
use super::interrupt::{BellPage, BELL_PAGE};
use super::layout::{kind, state};
use super::segment_file::{DataMapping, OpenError, SegmentFile};
use super::FabricPaths;
use crate::error::{Error, Result};
use crate::platform::death_watch::{self, Watch};
use crate::platform::doorbell::Doorbell;
use crate::platform::liveness::{self, ProcessIdentity};
use crate::platform::mapping::Access;
use crate::transport::{
    connect_with_retry, LossReason, ObjectAddr, ObjectInfo, RemoteObject, RemoteState, Transport, Window,
};
use crate::transport::{MapAccess, Timeout};

/// Reaches objects of other nodes on this host, through one fabric directory.
#[derive(Debug)]
pub struct ShmTransport {
    paths: FabricPaths,
    /// This process, as it holds connection slots.
    me: ProcessIdentity,
    /// The node this process acts as.
    node: u32,
}

impl ShmTransport {
    pub fn new(paths: FabricPaths, me: ProcessIdentity, node: u32) -> Self {
        ShmTransport { paths, me, node }
    }

    fn is_alive(&self, node: u32, identity: ProcessIdentity) -> bool {
        liveness::is_alive(&self.paths.procs(), node, identity)
    }

    /// One attempt: `Ok(Ok(conn))` connected, `Ok(Err(e))` a refusal worth waiting out,
    /// `Err(e)` a failure that waiting cannot cure.
    fn try_connect(&self, addr: ObjectAddr) -> Result<Result<ShmRemote>> {
        let ObjectAddr { kind: object_kind, node, id: segment } = addr;
        let file = match SegmentFile::open(&self.paths, object_kind, node, segment) {
            Ok(f) => f,
            Err(OpenError::Missing) => return Ok(Err(Error::NoSuchSegment { node, segment })),
            Err(OpenError::Corrupt(reason)) => {
                return Err(Error::CorruptSegment { path: self.paths.object(object_kind, node, segment), reason })
            }
            Err(OpenError::Io(e)) => return Err(Error::io(format!("opening segment {segment:#x} of node {node}"), e)),
        };
        let owner = file.snapshot().owner;
        let st = file.header().state();
        if st & state::REMOVED != 0 || !self.is_alive(node, owner) {
            // A leftover of a dead owner: as good as absent (it is cleaned when re-created).
            return Ok(Err(Error::NoSuchSegment { node, segment }));
        }
        if st & state::AVAILABLE == 0 {
            return Ok(Err(Error::NotAvailable { node, segment }));
        }
        let me = self.me;
        let slot = file
            .header()
            .claim_slot(me, self.node, |n, id| !self.is_alive(n, id))
            .ok_or(Error::TooManyConnections { node, segment })?;
        if file.header().state() & state::REMOVED != 0 {
            file.header().release_slot(slot, me);
            return Ok(Err(Error::NoSuchSegment { node, segment }));
        }
        let info = ObjectInfo { addr, size: file.snapshot().segment_size, owner };
        // From here on the slot is ours: a failure below must give it back.
        let role = match Role::new(&file, object_kind, slot) {
            Ok(role) => role,
            Err(e) => {
                file.header().release_slot(slot, me);
                return Err(e);
            }
        };
        let conn = Arc::new(Conn {
            file,
            slot,
            me,
            info,
            lost: AtomicU8::new(0),
            watch: Mutex::new(None),
            loss_bells: Mutex::new(Vec::new()),
            role,
        });
        if let Role::DataInterrupt(sender) = &conn.role {
            // SAFETY: the sender's ring lies in `conn.role`'s mapping, which lives exactly as
            // long as the connection the doorbell is registered with.
            unsafe { conn.ring_on_loss(sender.space_bell()) };
        }
        // The watch holds the connection weakly: it marks it lost and rings the state
        // doorbell so that waiters on this object's events wake up.
        let weak: Weak<Conn> = Arc::downgrade(&conn);
        let procs = self.paths.procs();
        let watch = death_watch::watch(
            owner.pid(),
            move || liveness::is_alive(&procs, node, owner),
            move || {
                if let Some(conn) = weak.upgrade() {
                    conn.mark_lost(LossReason::OwnerDied);
                }
            },
        );
        let watch = match watch {
            Ok(w) => w,
            Err(e) => {
                conn.disconnect();
                return Err(Error::io("watching the segment owner", e));
            }
        };
        *conn.watch.lock().unwrap_or_else(|e| e.into_inner()) = Some(watch);
        Ok(Ok(ShmRemote(conn)))
    }
}

impl Transport for ShmTransport {
    type Remote = ShmRemote;

    fn connect(&self, addr: ObjectAddr, timeout: Timeout) -> Result<ShmRemote> {
        connect_with_retry(addr, timeout, || self.try_connect(addr))
    }
}

/// Maps `len` bytes from `offset` of the data of the object `file` as a direct window,
/// after checking the range against the object: the one place every shm window (local or
/// remote) is made.
pub fn direct_mapping(file: &SegmentFile, offset: u64, len: u64, access: MapAccess) -> Result<DataMapping> {
    let size = file.snapshot().segment_size;
    if len == 0 {
        return Err(Error::InvalidSize { size: len, reason: "maps cover at least one byte" });
    }
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(Error::OutOfRange { offset, len, size, what: "segment" });
    }
    let a = match access {
        MapAccess::ReadOnly => Access::ReadOnly,
        MapAccess::ReadWrite => Access::ReadWrite,
    };
    file.map_data(offset, len, a).map_err(|e| Error::io(format!("mapping {len} bytes at offset {offset}"), e))
}

/// A connection to another node's object on this host.
#[derive(Debug)]
pub struct ShmRemote(Arc<Conn>);

/// What the connection does beyond mapping, by object kind.
#[derive(Debug)]
enum Role {
    Segment,
    Interrupt(BellPage),
    DataInterrupt(Sender),
}

impl Role {
    fn new(file: &SegmentFile, object_kind: u32, slot: usize) -> Result<Role> {
        Ok(match object_kind {
            kind::INTERRUPT => {
                Role::Interrupt(BellPage::new(direct_mapping(file, 0, BELL_PAGE, MapAccess::ReadWrite)?))
            }
            kind::DATA_INTERRUPT => {
                let size = file.snapshot().segment_size;
                if size < data_interrupt::OBJECT_BYTES {
                    return Err(Error::Malformed(format!(
                        "data interrupt object of {size} bytes, {} expected",
                        data_interrupt::OBJECT_BYTES
                    )));
                }
                let map = direct_mapping(file, 0, data_interrupt::OBJECT_BYTES, MapAccess::ReadWrite)?;
                Role::DataInterrupt(Sender::attach(Rings::new(map), slot))
            }
            _ => Role::Segment,
        })
    }
}

struct Conn {
    file: SegmentFile,
    /// The connection slot this process holds in the object's header.
    slot: usize,
    me: ProcessIdentity,
    info: ObjectInfo,
    /// 0 while connected, else a [`LossReason`] code; set by the death watch, by checks and
    /// by disconnecting.
    lost: AtomicU8,
    watch: Mutex<Option<Watch>>,
    /// Further doorbells that waiters on this connection sleep on (a data interrupt
    /// sender's ring, a reflective member's membership bell), rung when it is lost.
    loss_bells: Mutex<Vec<Doorbell>>,
    role: Role,
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conn").field("file", &self.file).field("slot", &self.slot).finish_non_exhaustive()
    }
}

impl Conn {
    /// Marks the connection lost (first reason wins) and wakes every waiter on its events.
    fn mark_lost(&self, reason: LossReason) {
        let _ = self.lost.compare_exchange(0, reason.code(), Ordering::AcqRel, Ordering::Relaxed);
        // Ringing the owner's header is harmless even after the owner died: the page stays
        // mapped; other peers' waiters merely re-check.
        self.file.header().state_doorbell().ring();
        for b in self.loss_bells.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            b.ring();
        }
    }

    /// Also rings `bell` when the connection is lost.
    ///
    /// # Safety
    /// The doorbell's words must lie in a mapping that lives as long as this connection.
    unsafe fn ring_on_loss(&self, bell: Doorbell) {
        self.loss_bells.lock().unwrap_or_else(|e| e.into_inner()).push(bell);
    }

    fn disconnect(&self) {
        self.mark_lost(LossReason::Disconnected);
        self.file.header().release_slot(self.slot, self.me);
        self.watch.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

impl ShmRemote {
    /// The object's file, for what only shm objects have (a reflective group's receivers
    /// and membership, which stay on one host until groups span hosts).
    pub fn file(&self) -> &SegmentFile {
        &self.0.file
    }

    /// Also rings `bell` when the connection is lost.
    ///
    /// # Safety
    /// The doorbell's words must lie in a mapping that lives as long as this connection.
    pub unsafe fn ring_on_loss(&self, bell: Doorbell) {
        // SAFETY: forwarded contract.
        unsafe { self.0.ring_on_loss(bell) }
    }
}

impl RemoteObject for ShmRemote {
    #[inline(always)]
    fn info(&self) -> &ObjectInfo {
        &self.0.info
    }

    #[inline]
    fn state(&self) -> RemoteState {
        let c = &self.0;
        if let Some(r) = LossReason::from_code(c.lost.load(Ordering::Acquire)) {
            return RemoteState::Lost(r);
        }
        let st = c.file.header().state();
        if st & state::REMOVED != 0 {
            let _ = c.lost.compare_exchange(0, LossReason::Removed.code(), Ordering::AcqRel, Ordering::Relaxed);
            return RemoteState::Lost(LossReason::Removed);
        }
        if st & state::AVAILABLE == 0 {
            RemoteState::NotOperational
        } else {
            RemoteState::Operational
        }
    }

    #[inline]
    fn state_bell(&self) -> Doorbell {
        self.0.file.header().state_doorbell()
    }

    fn window(&self, offset: u64, len: u64, access: MapAccess) -> Result<Window> {
        direct_mapping(&self.0.file, offset, len, access).map(Window::Direct)
    }

    #[inline]
    fn trigger(&self) -> Result<()> {
        self.check()?;
        match &self.0.role {
            Role::Interrupt(page) => {
                page.trigger();
                Ok(())
            }
            _ => Err(Error::IllegalOperation("a trigger of an object that is not an interrupt")),
        }
    }

    fn send(&self, data: &[u8], timeout: Timeout, poll: Duration) -> Result<()> {
        let Role::DataInterrupt(sender) = &self.0.role else {
            return Err(Error::IllegalOperation("a message to an object that is not a data interrupt"));
        };
        let a = self.0.info.addr;
        sender.send(
            data,
            timeout,
            poll,
            || self.check(),
            || Error::QueueFull { node: a.node, number: a.id, waited_ms: timeout.as_millis() },
        )
    }

    fn disconnect(&self) {
        self.0.disconnect();
    }
}
