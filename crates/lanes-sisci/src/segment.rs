//! Local segments (created, prepared, made available, removed; events and callbacks) and
//! remote segments (connected, disconnected; events and callbacks).
//!
//! Reflective memory is the same calls with `SCI_FLAG_BROADCAST`, set up as on the vendor's
//! hardware: every receiver creates a segment with the flag and the group's id (the first
//! creates the group, [`lanes::ReflectiveGroup`]; the others join it as receivers,
//! [`lanes::GroupReceiver`]), and a writer connects to node `DIS_BROADCAST_NODEID_GROUP_ALL`
//! with the group id ([`lanes::ReflectiveMember`]) and maps the connection, writable, with or
//! without the flag. All then behave as segments: maps, DMA, events.
//!
//! Removal and teardown are the vendor's (its sisci_api.h, "Specific error codes"):
//! `SCIRemoveSegment` is `SCI_ERR_BUSY` "The segment is currently in use" (mapped, or peers
//! connected, which `SCISetSegmentUnavailable(SCI_FLAG_FORCE_DISCONNECT)` or
//! `SCI_FLAG_FORCE_REMOVE` cut); `SCIDisconnectSegment` is busy while "the segment is
//! currently mapped or in use". A receiver's broadcast segment is removed while writers are
//! still connected to the group, as the vendor's reflective-memory example does at its end.

use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use lanes::fabric::{LocalEvent, RemoteEvent};
use lanes::{
    Fabric, GroupEvent, GroupReceiver, LocalSegment, LossReason, NodeId, ReflectiveMember, RemoteSegment, Timeout,
};

use crate::consts::*;
use crate::error::{fail, Code, SciResult};
use crate::ffi::{adapter, call, call_quiet, flags, keep, need, put, CbArg};
use crate::node::desc;
use crate::registry::{self, Handle, Object};

/// `sci_cb_local_segment_t`.
pub type LocalSegmentCb = Option<unsafe extern "C" fn(*mut c_void, *mut c_void, u32, c_uint, c_uint, SciError) -> u32>;
/// `sci_cb_remote_segment_t`.
pub type RemoteSegmentCb = Option<unsafe extern "C" fn(*mut c_void, *mut c_void, u32, SciError) -> u32>;

/// A local segment handle (`sci_local_segment_t`).
pub struct LSeg {
    fabric: Fabric,
    /// The segment; unset while a `SCI_FLAG_EMPTY` segment waits for its memory, and for a
    /// reflective group (whose segment is the group's own).
    seg: OnceLock<LocalSegment>,
    /// For a segment created with `SCI_FLAG_BROADCAST`: this receiver's part in the group,
    /// which it created or joined (shared with [`LINGERING`] after a removal that leaves
    /// other participants).
    group: Option<Arc<GroupReceiver>>,
    /// The id asked for at creation (`None`: automatic).
    id: Option<u32>,
    /// The size given at creation.
    size: u64,
    private: bool,
    callback: Option<(LocalSegmentCb, CbArg)>,
    callback_active: Arc<AtomicBool>,
    /// `SCISetSegmentUnavailable(SCI_FLAG_FORCE_DISCONNECT)` was called: the removal that
    /// follows cuts the peers still connected, as forced.
    force_disconnect: AtomicBool,
}

impl Object for LSeg {
    const MAGIC: u32 = 0x5347_4C53; // "SLGS"
}

impl LSeg {
    /// The segment, if it has memory: a group's own segment (for the receiver that created
    /// the group), or the created one.
    fn current(&self) -> Option<&LocalSegment> {
        match self.group.as_deref() {
            Some(GroupReceiver::Created(g)) => Some(g.local_segment()),
            Some(GroupReceiver::Joined(_)) => None,
            None => self.seg.get(),
        }
    }

    /// The segment, once it has memory. A receiver that joined a group another process
    /// created has none of its own here (its copy is the group's: maps only).
    pub fn live(&self) -> SciResult<&LocalSegment> {
        match self.group.as_deref() {
            Some(GroupReceiver::Joined(_)) => fail(SCI_ERR_ILLEGAL_OPERATION),
            _ => self.current().ok_or(Code(SCI_ERR_SEGMENT_NOT_PREPARED)),
        }
    }

    /// Whether it is a reflective group's receiver (created with `SCI_FLAG_BROADCAST`).
    pub fn is_group(&self) -> bool {
        self.group.is_some()
    }

    /// This receiver's part in the group, for a segment created with `SCI_FLAG_BROADCAST`.
    pub fn group(&self) -> Option<&GroupReceiver> {
        self.group.as_deref()
    }
}

/// Groups whose creating receiver removed its segment while other participants (receivers
/// that joined, writers connected to node `DIS_BROADCAST_NODEID_GROUP_ALL`) were still in
/// them: on the hardware one receiver's removal does not end the others' reflective memory,
/// so the group stays until they are gone ([`reap_lingering`]) or this process ends.
static LINGERING: Mutex<Vec<Arc<GroupReceiver>>> = Mutex::new(Vec::new());

/// Drops the lingering groups nobody else is in any more (removing them).
pub(crate) fn reap_lingering() {
    let done: Vec<Arc<GroupReceiver>> = {
        let mut l = LINGERING.lock().unwrap_or_else(|e| e.into_inner());
        let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut *l).into_iter().partition(alone);
        *l = keep;
        gone
    };
    drop(done);
}

/// Drops every lingering group (`SCITerminate`).
pub(crate) fn drop_lingering() {
    let all = std::mem::take(&mut *LINGERING.lock().unwrap_or_else(|e| e.into_inner()));
    drop(all);
}

/// Whether nobody but its creator is in a group (handles of it elsewhere in this process,
/// other than the lingering list, keep it too).
fn alone(g: &Arc<GroupReceiver>) -> bool {
    match &**g {
        GroupReceiver::Created(group) => Arc::strong_count(g) == 1 && group.members().is_empty(),
        GroupReceiver::Joined(_) => Arc::strong_count(g) == 1,
    }
}

/// What a remote segment handle is connected to.
enum Conn {
    /// Another node's segment.
    Segment(RemoteSegment),
    /// A reflective group (node `DIS_BROADCAST_NODEID_GROUP_ALL`, `SCI_FLAG_BROADCAST`).
    Group(Box<ReflectiveMember>),
}

/// A remote segment handle (`sci_remote_segment_t`).
pub struct RSeg {
    conn: Conn,
    callback_active: Arc<AtomicBool>,
}

impl RSeg {
    /// The connection as a remote segment (for a group: the member's view of the group,
    /// the target of DMA writes to it).
    pub fn seg(&self) -> &RemoteSegment {
        match &self.conn {
            Conn::Segment(s) => s,
            Conn::Group(m) => m.segment(),
        }
    }

    /// The size in bytes; for a group, the group's (across hosts, the object a member
    /// connects to also holds the group's roster).
    pub fn size(&self) -> u64 {
        match &self.conn {
            Conn::Segment(s) => s.size(),
            Conn::Group(m) => m.size(),
        }
    }

    /// Whether it is a reflective group's membership.
    pub fn is_group(&self) -> bool {
        matches!(self.conn, Conn::Group(_))
    }

    /// The membership, for a connection to a reflective group.
    pub fn member(&self) -> Option<&ReflectiveMember> {
        match &self.conn {
            Conn::Group(m) => Some(m),
            Conn::Segment(_) => None,
        }
    }

    /// The node id the C side sees: `DIS_BROADCAST_NODEID_GROUP_ALL` for a group.
    pub fn node_id(&self) -> u32 {
        match &self.conn {
            Conn::Segment(s) => s.node_id(),
            Conn::Group(_) => DIS_BROADCAST_NODEID_GROUP_ALL,
        }
    }
}

impl Object for RSeg {
    const MAGIC: u32 = 0x5347_5253; // "SRGS"
}

fn local_reason(ev: LocalEvent) -> (u32, u32) {
    match ev {
        LocalEvent::Connected { node, .. } => (SCI_CB_CONNECT, node),
        LocalEvent::Disconnected { node, died: false, .. } => (SCI_CB_DISCONNECT, node),
        LocalEvent::Disconnected { node, died: true, .. } => (SCI_CB_LOST, node),
    }
}

/// A remote event's reason. A segment's removal is `SCI_CB_DISCONNECT` and its owner's
/// death or its host's loss `SCI_CB_LOST`; a group that goes away (removed or its creator died) is
/// `SCI_CB_LOST` either way: the multicast address no longer reaches anyone.
fn remote_reason(ev: RemoteEvent, group: bool) -> u32 {
    match ev {
        RemoteEvent::Operational => SCI_CB_OPERATIONAL,
        RemoteEvent::NotOperational => SCI_CB_NOT_OPERATIONAL,
        RemoteEvent::Lost(LossReason::OwnerDied | LossReason::NodeLost) => SCI_CB_LOST,
        RemoteEvent::Lost(_) if group => SCI_CB_LOST,
        RemoteEvent::Lost(_) => SCI_CB_DISCONNECT,
    }
}

/// Refuses `SCI_FLAG_BROADCAST` on a call for a segment that is not a reflective group.
pub(crate) fn broadcast_only_for_groups(fl: u32, group: bool) -> SciResult<()> {
    if fl & SCI_FLAG_BROADCAST != 0 && !group {
        fail(SCI_ERR_ILLEGAL_FLAG)
    } else {
        Ok(())
    }
}

/// Group ids `SCI_FLAG_AUTO_ID` tries: clear of small user-chosen ids, different per process.
/// A fabric holds at most `MAX_GROUPS` groups, so a handful of candidates always finds a
/// free id unless the fabric is full.
fn auto_group_ids() -> impl Iterator<Item = u32> {
    let start = std::process::id().wrapping_mul(2_654_435_761);
    (0..(4 * lanes::fabric::MAX_GROUPS as u32 + 4)).map(move |i| 0x8000_0000 | (start.wrapping_add(i) & 0x7FFF_FFFF))
}

/// This receiver's part in the group of `SCICreateSegment(..., SCI_FLAG_BROADCAST)`. With a
/// group id, as on the vendor's hardware, where every receiver creates the broadcast segment
/// with the group's id ("All nodes within the broadcast group must have the same segmentId
/// to communicate", the vendor's reflective-memory example): the first creates the group,
/// the others join it. With `SCI_FLAG_AUTO_ID`, a new group. Any node may join (the SISCI
/// call has no receiver list).
fn create_group(fabric: &Fabric, id: Option<u32>, size: u64) -> SciResult<GroupReceiver> {
    match id {
        Some(id) => Ok(fabric.receive_reflective_group(id, size)?),
        None => {
            for id in auto_group_ids() {
                match fabric.create_reflective_group(id, size, &[]) {
                    Err(lanes::Error::GroupInUse { .. }) => continue,
                    other => return Ok(GroupReceiver::Created(other?)),
                }
            }
            fail(SCI_ERR_NOSPC)
        }
    }
}

/// Starts the program's callback for the segment's events on a library thread (the vendor's
/// sisci_api.h: "SCI_FLAG_USE_CALLBACK - The callback function will be invoked for events on
/// this segment"; without the flag a callback passed is not used). A receiver that joined
/// another's group has no segment events here.
fn start_local_callback(h: &Arc<Handle<LSeg>>) -> SciResult<()> {
    let (Some((Some(cb), arg)), Some(seg)) = (h.body.callback, h.body.current()) else { return Ok(()) };
    let key = h.key();
    let active = h.body.callback_active.clone();
    active.store(true, Ordering::Release);
    seg.on_event(move |ev| {
        if !active.load(Ordering::Acquire) {
            // The segment was removed while its group stays for others (LINGERING): the
            // program hears nothing more of it.
            return lanes::fabric::CallbackAction::Cancel;
        }
        let (reason, node) = local_reason(ev);
        // SAFETY: the program registered this callback with SCI_FLAG_USE_CALLBACK and its
        // argument; SISCI calls it from a library thread with these arguments.
        let action = unsafe { cb(arg.ptr(), key as *mut c_void, reason, node, 0, SCI_ERR_OK) };
        let k = keep(action);
        if k == lanes::fabric::CallbackAction::Cancel {
            active.store(false, Ordering::Release);
        }
        k
    })?;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn create_segment(
    sd: *mut c_void,
    segment: *mut *mut c_void,
    segment_id: c_uint,
    size: usize,
    callback: LocalSegmentCb,
    callback_arg: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let d = desc(sd)?;
        need(segment)?;
        flags(
            fl,
            SCI_FLAG_USE_CALLBACK
                | SCI_FLAG_EMPTY
                | SCI_FLAG_AUTO_ID
                | SCI_FLAG_PRIVATE
                | SCI_FLAG_DMA_SOURCE_ONLY
                | SCI_FLAG_PHYSICAL
                | SCI_FLAG_CUDA_BUFFER
                | SCI_FLAG_DMA_GLOBAL
                | SCI_FLAG_BROADCAST,
        )?;
        // SCI_FLAG_DMA_GLOBAL asks for a segment that global DMA (an engine that addresses any
        // remote segment without a map) reaches: every segment is one here (the fabric's DMA
        // engine needs no map of the program's), so it changes nothing, alone or with
        // SCI_FLAG_BROADCAST (public programs written for the hardware pass both).
        if fl & (SCI_FLAG_PHYSICAL | SCI_FLAG_CUDA_BUFFER) != 0 {
            return fail(SCI_ERR_NOT_SUPPORTED);
        }
        let broadcast = fl & SCI_FLAG_BROADCAST != 0;
        if broadcast && fl & (SCI_FLAG_EMPTY | SCI_FLAG_PRIVATE) != 0 {
            // A group has its own memory, and is joinable from its creation.
            return fail(SCI_ERR_ILLEGAL_FLAG);
        }
        if size == 0 {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        let fabric = d.body.fabric.clone();
        let id = (fl & SCI_FLAG_AUTO_ID == 0).then_some(segment_id);
        let seg = OnceLock::new();
        let group = if broadcast { Some(Arc::new(create_group(&fabric, id, size as u64)?)) } else { None };
        if !broadcast && fl & SCI_FLAG_EMPTY == 0 {
            let s = match id {
                Some(id) => fabric.create_segment(id, size as u64)?,
                None => fabric.create_segment_auto_id(size as u64)?,
            };
            let _ = seg.set(s);
        }
        let cb = (fl & SCI_FLAG_USE_CALLBACK != 0 && callback.is_some()).then_some((callback, CbArg(callback_arg)));
        let body = LSeg {
            fabric,
            seg,
            group,
            id,
            size: size as u64,
            private: fl & SCI_FLAG_PRIVATE != 0,
            callback: cb,
            callback_active: Arc::default(),
            force_disconnect: AtomicBool::new(false),
        };
        let (p, h) = registry::insert(d.key(), 0, body);
        if let Err(e) = start_local_callback(&h) {
            drop(registry::write().take::<LSeg>(p));
            return Err(e);
        }
        put(segment, p)
    })
}

pub(crate) fn register_segment_memory(
    addr: *mut c_void,
    size: usize,
    segment: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let h = registry::get::<LSeg>(segment)?;
        // SCI_FLAG_LOCK_USER_MEM asks the driver to pin the pages for the adapter's DMA:
        // shared memory needs no pinning (the fabric maps the program's pages as they are),
        // so the result is the same.
        flags(fl, SCI_FLAG_LOCK_USER_MEM)?;
        if addr.is_null() {
            return fail(SCI_ERR_ILLEGAL_ADDRESS);
        }
        if size == 0 {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        if h.body.current().is_some() {
            // Only segments created with SCI_FLAG_EMPTY take memory, and only once.
            return fail(SCI_ERR_ILLEGAL_OPERATION);
        }
        let fabric = &h.body.fabric;
        let register = |id: u32| {
            // SAFETY: SCIRegisterSegmentMemory's contract: the program gives its own mapped
            // memory of `size` bytes, keeps it while the segment exists, and does not write it
            // during this call.
            unsafe { fabric.register_segment_memory(id, addr.cast::<u8>(), size) }
        };
        let seg = match h.body.id {
            Some(id) => register(id)?,
            None => {
                // Automatic ids, drawn as the fabric draws them for created segments.
                let start = std::process::id().wrapping_mul(2_654_435_761) ^ (addr as usize as u32);
                let mut found = None;
                for i in 0..4096u32 {
                    let id = 0x8000_0000 | (start.wrapping_add(i) & 0x7FFF_FFFF);
                    match register(id) {
                        Ok(s) => {
                            found = Some(s);
                            break;
                        }
                        Err(lanes::Error::SegmentIdInUse { .. }) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                found.ok_or(Code(SCI_ERR_NOSPC))?
            }
        };
        if h.body.seg.set(seg).is_err() {
            // Another thread registered memory meanwhile; ours is dropped (removed) again.
            return fail(SCI_ERR_ILLEGAL_OPERATION);
        }
        start_local_callback(&h)
    })
}

/// `SCIPrepareSegment`. A group is prepared and available from its creation: preparing it
/// again (programs pass `SCI_FLAG_BROADCAST` here) changes nothing.
pub(crate) fn prepare_segment(segment: *mut c_void, adapter_no: c_uint, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        let h = registry::get::<LSeg>(segment)?;
        flags(fl, SCI_FLAG_DMA_SOURCE_ONLY | SCI_FLAG_BROADCAST)?;
        broadcast_only_for_groups(fl, h.body.is_group())?;
        adapter(adapter_no)?;
        if matches!(h.body.group(), Some(GroupReceiver::Joined(_))) {
            // A receiver of a group another created: prepared with the group.
            return Ok(());
        }
        Ok(h.body.live()?.prepare()?)
    })
}

pub(crate) fn set_segment_available(segment: *mut c_void, adapter_no: c_uint, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        let h = registry::get::<LSeg>(segment)?;
        flags(fl, SCI_FLAG_BROADCAST)?;
        broadcast_only_for_groups(fl, h.body.is_group())?;
        adapter(adapter_no)?;
        if h.body.private {
            return fail(SCI_ERR_ILLEGAL_OPERATION);
        }
        if matches!(h.body.group(), Some(GroupReceiver::Joined(_))) {
            return Ok(());
        }
        h.body.live()?.set_available()?;
        // Available again: peers connecting now are not cut by a later removal.
        h.body.force_disconnect.store(false, Ordering::Release);
        Ok(())
    })
}

/// `SCISetSegmentUnavailable`. On a group it stops new members from joining (their
/// connects wait or time out) and reports `SCI_CB_NOT_OPERATIONAL` to members.
///
/// The vendor's flags for it (its sisci_api.h: "SCI_FLAG_FORCE_DISCONNECT",
/// "SCI_FLAG_NOTIFY"; public programs pass both before `SCIRemoveSegment`):
/// `SCI_FLAG_NOTIFY` is what always happens here (connected peers hear
/// `SCI_CB_NOT_OPERATIONAL`); with `SCI_FLAG_FORCE_DISCONNECT` the peers still connected are
/// cut by the removal that follows (they hear `SCI_CB_DISCONNECT`, their sequences fail),
/// which is then not `SCI_ERR_BUSY`.
pub(crate) fn set_segment_unavailable(segment: *mut c_void, adapter_no: c_uint, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        let h = registry::get::<LSeg>(segment)?;
        flags(fl, SCI_FLAG_BROADCAST | SCI_FLAG_NOTIFY | SCI_FLAG_FORCE_DISCONNECT)?;
        broadcast_only_for_groups(fl, h.body.is_group())?;
        adapter(adapter_no)?;
        if matches!(h.body.group(), Some(GroupReceiver::Joined(_))) {
            return Ok(());
        }
        h.body.live()?.set_unavailable()?;
        if fl & SCI_FLAG_FORCE_DISCONNECT != 0 {
            h.body.force_disconnect.store(true, Ordering::Release);
        }
        Ok(())
    })
}

pub(crate) fn share_segment(segment: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        let h = registry::get::<LSeg>(segment)?;
        // SCI_FLAG_SHARE_EXTERNAL (the vendor's, for sharing beyond the node's SISCI
        // processes): sharing is the same here, a segment any process of the node attaches.
        flags(fl, SCI_FLAG_SHARE_EXTERNAL)?;
        if h.body.is_group() {
            // Other processes join a group (node DIS_BROADCAST_NODEID_GROUP_ALL); they do
            // not attach to it.
            return fail(SCI_ERR_ILLEGAL_OPERATION);
        }
        Ok(h.body.live()?.share()?)
    })
}

/// `SCIRemoveSegment`: `SCI_ERR_BUSY` while the segment is mapped or peers are connected
/// (the vendor's sisci_api.h: "SCI_ERR_BUSY - Unable to remove the segment. The segment is
/// currently in use"; programs written for it retry while busy), unless
/// `SCI_FLAG_FORCE_REMOVE` or an earlier `SCISetSegmentUnavailable(SCI_FLAG_FORCE_DISCONNECT)`
/// cuts the peers (they hear `SCI_CB_DISCONNECT`).
///
/// A broadcast segment is one receiver's part in a group: removing it never waits for the
/// group's other receivers or writers (the vendor's reflective-memory example removes its
/// segment while its own and the others' connections to the group still exist). The group
/// stays for them ([`LINGERING`]); `SCI_FLAG_FORCE_REMOVE` on the receiver that created it
/// ends it for everyone (`SCI_CB_LOST`).
/// How long `SCIRemoveSegment` gives connected peers to disconnect before it answers
/// `SCI_ERR_BUSY`. Programs written for the vendor's library tell their peer to stop, tear
/// down their own side and remove their segment at once, while the peer disconnects
/// (kritjo/sisci-perf's ping-pong client: a stop word, then disconnect, unavailable,
/// remove, exiting on any error). On the hardware the peer's disconnect wins that race; here
/// it lost it in about one run of three. A peer that does not leave within the grace still
/// makes the removal busy, as the vendor's header documents.
const REMOVE_GRACE: Duration = Duration::from_secs(1);

/// Waits up to [`REMOVE_GRACE`] for the peers connected to `segment` to leave (outside the
/// registry lock: the peers' disconnects do not need it, but other calls of this process do).
fn let_peers_leave(segment: *mut c_void) {
    let Ok(h) = registry::get::<LSeg>(segment) else { return };
    if h.body.force_disconnect.load(Ordering::Acquire) {
        return; // the removal cuts them
    }
    let Some(s) = h.body.current() else { return };
    let deadline = Instant::now() + REMOVE_GRACE;
    while !s.connected_peers().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub(crate) fn remove_segment(segment: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        flags(fl, SCI_FLAG_FORCE_REMOVE)?;
        if fl & SCI_FLAG_FORCE_REMOVE == 0 {
            let_peers_leave(segment);
        }
        let taken = {
            let mut reg = registry::write();
            let h = reg.get::<LSeg>(segment)?;
            if reg.children(h.key()) > 0 {
                return fail(SCI_ERR_BUSY);
            }
            let force = fl & SCI_FLAG_FORCE_REMOVE != 0 || h.body.force_disconnect.load(Ordering::Acquire);
            match h.body.group.as_ref() {
                Some(g) if matches!(**g, GroupReceiver::Created(_)) && !force => {
                    // Kept while others are in the group (reaped below at once if nobody
                    // is); its events no longer reach the program.
                    h.body.callback_active.store(false, Ordering::Release);
                    LINGERING.lock().unwrap_or_else(|e| e.into_inner()).push(g.clone());
                }
                Some(g) => {
                    if let GroupReceiver::Created(group) = &**g {
                        group.remove()?;
                    }
                }
                None => {
                    if let Some(s) = h.body.current() {
                        s.remove(force)?;
                    }
                }
            }
            reg.take::<LSeg>(segment)?
        };
        drop(taken);
        reap_lingering();
        Ok(())
    })
}

pub(crate) fn get_local_segment_size(segment: *mut c_void) -> usize {
    call_quiet(0, || match registry::get::<LSeg>(segment) {
        Ok(h) => h.body.current().map_or(h.body.size, |s| s.size()) as usize,
        Err(_) => 0,
    })
}

pub(crate) fn get_local_segment_id(segment: *mut c_void) -> c_uint {
    call_quiet(0, || match registry::get::<LSeg>(segment) {
        Ok(h) => h.body.current().map_or(h.body.id.unwrap_or(0), |s| s.id()),
        Err(_) => 0,
    })
}

pub(crate) fn wait_for_local_segment_event(
    segment: *mut c_void,
    source_node_id: *mut c_uint,
    local_adapter_no: *mut c_uint,
    timeout: c_uint,
    fl: c_uint,
    error: *mut SciError,
) -> u32 {
    call(error, 0, || {
        let h = registry::get::<LSeg>(segment)?;
        flags(fl, 0)?;
        if h.body.callback_active.load(Ordering::Acquire) {
            return fail(SCI_ERR_ILLEGAL_OPERATION);
        }
        let timeout = Timeout::from_millis(timeout);
        let (reason, node) = match h.body.group() {
            // A receiver that joined another's group hears the others join and leave.
            Some(GroupReceiver::Joined(m)) => match m.wait_event(timeout)? {
                GroupEvent::Joined { node, .. } => (SCI_CB_CONNECT, node),
                GroupEvent::Left { node, died: false, .. } => (SCI_CB_DISCONNECT, node),
                GroupEvent::Left { node, died: true, .. } => (SCI_CB_LOST, node),
                GroupEvent::Lost(_) => return fail(SCI_ERR_CANCELLED),
            },
            _ => local_reason(h.body.live()?.wait_event(timeout)?),
        };
        if !source_node_id.is_null() {
            put(source_node_id, node)?;
        }
        if !local_adapter_no.is_null() {
            put(local_adapter_no, 0)?;
        }
        Ok(reason)
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn attach_local_segment(
    sd: *mut c_void,
    segment: *mut *mut c_void,
    segment_id: c_uint,
    size: *mut usize,
    callback: LocalSegmentCb,
    callback_arg: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let d = desc(sd)?;
        need(segment)?;
        need(size)?;
        flags(fl, SCI_FLAG_USE_CALLBACK)?;
        let fabric = d.body.fabric.clone();
        let s = fabric.attach_local_segment(segment_id)?;
        let bytes = s.size();
        let cb = (fl & SCI_FLAG_USE_CALLBACK != 0 && callback.is_some()).then_some((callback, CbArg(callback_arg)));
        let body = LSeg {
            fabric,
            seg: OnceLock::from(s),
            group: None,
            id: Some(segment_id),
            size: bytes,
            private: false,
            callback: cb,
            callback_active: Arc::default(),
            force_disconnect: AtomicBool::new(false),
        };
        let (p, h) = registry::insert(d.key(), 0, body);
        if let Err(e) = start_local_callback(&h) {
            drop(registry::write().take::<LSeg>(p));
            return Err(e);
        }
        put(size, bytes as usize)?;
        put(segment, p)
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_segment(
    sd: *mut c_void,
    segment: *mut *mut c_void,
    node_id: c_uint,
    segment_id: c_uint,
    adapter_no: c_uint,
    callback: RemoteSegmentCb,
    callback_arg: *mut c_void,
    timeout: c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let d = desc(sd)?;
        need(segment)?;
        flags(fl, SCI_FLAG_USE_CALLBACK | SCI_FLAG_BROADCAST)?;
        adapter(adapter_no)?;
        let fabric = &d.body.fabric;
        let timeout = Timeout::from_millis(timeout);
        let broadcast = fl & SCI_FLAG_BROADCAST != 0;
        let conn = if node_id == DIS_BROADCAST_NODEID_GROUP_ALL || broadcast {
            // SCI_FLAG_BROADCAST says the node id addresses a group: the only such id is
            // DIS_BROADCAST_NODEID_GROUP_ALL. Without the flag the node id names a node, and
            // 252 is none. Either mismatch is an illegal node id for the connection asked
            // for: SCI_ERR_ILLEGAL_NODEID, the code for a node id that is not valid here (as
            // for node ids that are not multiples of 4), rather than NO_SUCH_NODEID (which
            // says a valid node is absent) or ILLEGAL_FLAG (the flag is legal here).
            if node_id != DIS_BROADCAST_NODEID_GROUP_ALL || !broadcast {
                return fail(SCI_ERR_ILLEGAL_NODEID);
            }
            Conn::Group(Box::new(fabric.join_reflective_group(segment_id, timeout)?))
        } else {
            NodeId::new(node_id)?;
            match fabric.connect_segment(node_id, segment_id, timeout) {
                Ok(s) => Conn::Segment(s),
                Err(lanes::Error::NoSuchSegment { .. }) if !fabric.probe_node(node_id) => {
                    return fail(SCI_ERR_NO_SUCH_NODEID)
                }
                Err(e) => return Err(e.into()),
            }
        };
        let (p, h) = registry::insert(d.key(), 0, RSeg { conn, callback_active: Arc::default() });
        if let (true, Some(cb)) = (fl & SCI_FLAG_USE_CALLBACK != 0, callback) {
            let arg = CbArg(callback_arg);
            let key = h.key();
            let group = h.body.is_group();
            let active = h.body.callback_active.clone();
            active.store(true, Ordering::Release);
            let started = h.body.seg().on_event(move |ev| {
                // SAFETY: the program registered this callback with SCI_FLAG_USE_CALLBACK and
                // its argument; SISCI calls it from a library thread with these arguments.
                let action = unsafe { cb(arg.ptr(), key as *mut c_void, remote_reason(ev, group), SCI_ERR_OK) };
                let k = keep(action);
                if k == lanes::fabric::CallbackAction::Cancel || matches!(ev, RemoteEvent::Lost(_)) {
                    active.store(false, Ordering::Release);
                }
                k
            });
            if let Err(e) = started {
                drop(registry::write().take::<RSeg>(p));
                return Err(e.into());
            }
        }
        put(segment, p)
    })
}

pub(crate) fn disconnect_segment(segment: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        flags(fl, 0)?;
        let taken = {
            let mut reg = registry::write();
            let h = reg.get::<RSeg>(segment)?;
            if reg.children(h.key()) > 0 {
                return fail(SCI_ERR_BUSY);
            }
            reg.take::<RSeg>(segment)?
        };
        drop(taken);
        // The last other participant of a group whose creator removed its segment.
        reap_lingering();
        Ok(())
    })
}

pub(crate) fn get_remote_segment_size(segment: *mut c_void) -> usize {
    call_quiet(0, || registry::get::<RSeg>(segment).map_or(0, |h| h.body.size() as usize))
}

/// The segment id; for a group, the group id.
pub(crate) fn get_remote_segment_id(segment: *mut c_void) -> c_uint {
    call_quiet(0, || registry::get::<RSeg>(segment).map_or(0, |h| h.body.seg().id()))
}

/// The node id connected to; for a group, `DIS_BROADCAST_NODEID_GROUP_ALL` (the address
/// the program connected to), not the creator's node.
pub(crate) fn get_remote_segment_node_id(segment: *mut c_void) -> c_uint {
    call_quiet(0, || registry::get::<RSeg>(segment).map_or(0, |h| h.body.node_id()))
}

pub(crate) fn wait_for_remote_segment_event(
    segment: *mut c_void,
    status: *mut SciError,
    timeout: c_uint,
    fl: c_uint,
    error: *mut SciError,
) -> u32 {
    call(error, 0, || {
        let h = registry::get::<RSeg>(segment)?;
        flags(fl, 0)?;
        if h.body.callback_active.load(Ordering::Acquire) {
            return fail(SCI_ERR_ILLEGAL_OPERATION);
        }
        let ev = h.body.seg().wait_event(Timeout::from_millis(timeout))?;
        if !status.is_null() {
            let st = if matches!(ev, RemoteEvent::Lost(_)) { SCI_ERR_NOT_CONNECTED } else { SCI_ERR_OK };
            put(status, st)?;
        }
        Ok(remote_reason(ev, h.body.is_group()))
    })
}
