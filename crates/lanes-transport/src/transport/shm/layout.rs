//! The segment header: the first page of every segment file.
//!
//! It is read by processes that did not write it, so it is untrusted input: every field is
//! validated when a file is opened, the fields that bound memory accesses (size, data
//! offset) are copied into a [`HeaderSnapshot`] then and never read again, and the fields
//! that change (state, connection slots) are only touched with atomics.

use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::platform::doorbell::Doorbell;
use crate::platform::liveness::ProcessIdentity;
use crate::platform::SharedSlice;

/// `b"LANESSEG"`: first eight bytes of every segment file.
pub const SEGMENT_MAGIC: u64 = u64::from_le_bytes(*b"LANESSEG");
/// Bumped whenever the header layout changes incompatibly.
pub const LAYOUT_VERSION: u32 = 1;
/// Bytes reserved for the header; segment data starts at or after this file offset.
pub const HEADER_PAGE: usize = 4096;
/// Nodes a reflective group's receiver list can name.
pub const MAX_RECEIVERS: usize = 64;

/// Peers that can be connected to one segment at once (the slots fill the header page).
pub const MAX_CONNECTIONS: usize = 112;

/// `state` bits, set by the owner only.
pub mod state {
    pub const PREPARED: u32 = 1 << 0;
    pub const AVAILABLE: u32 = 1 << 1;
    pub const REMOVED: u32 = 1 << 2;
    /// Other processes of the owner's node may attach to the segment as local (SCIShareSegment).
    pub const SHARED: u32 = 1 << 3;
    pub const ALL: u32 = PREPARED | AVAILABLE | REMOVED | SHARED;
}

/// What a fabric object file holds (the vocabulary's, named here too for the layout's users).
pub use crate::transport::vocab::kind;

/// `create_flags` bits, fixed at creation.
pub mod create_flags {
    /// The data is caller-provided memory re-backed by this file.
    pub const REGISTERED_MEMORY: u32 = 1 << 0;
    pub const ALL: u32 = REGISTERED_MEMORY;
}

/// A peer's claim on a segment: who and from which node.
///
/// A small seqlock: a claim or release first makes `generation` odd (which also excludes
/// other writers), changes the fields, then makes it even again, 2 higher than before.
/// Readers take a consistent snapshot by reading `generation` before and after. The owner
/// counts the claims and releases it missed from the generation and learns the last peer
/// that left from `last_peer`, so a connect and disconnect between two of its looks is
/// still reported.
#[repr(C)]
pub struct ConnectionSlot {
    /// Packed [`ProcessIdentity`] of the connected process; 0 when free.
    pub peer: u64,
    /// The process that held the slot before the current state (0: none yet).
    pub last_peer: u64,
    /// The node of the current holder; bit 31 (`PROXY_NODE`) set: the holder is a cluster
    /// daemon holding the slot for a process of another host (node ids are at most 65532).
    pub node: u32,
    /// Seqlock and change counter: odd while a claim or release is in progress.
    pub generation: u32,
    /// The node of `last_peer`.
    pub last_node: u32,
    /// 1 if `last_peer` released the slot itself, 0 if it was displaced after dying, 2 if a
    /// daemon released it for a peer whose host was lost ([`HeaderView::release_slot_lost`]).
    pub last_released: u32,
}

/// In `ConnectionSlot::node`: the holder is a daemon's proxy for a process of another host,
/// alive until a daemon releases the slot (not while the daemon process lives: a restarted
/// daemon takes the slot over).
const PROXY_NODE: u32 = 1 << 31;

/// `ConnectionSlot::last_released` of a slot its holder released itself.
const RELEASED: u32 = 1;
/// `ConnectionSlot::last_released` of a slot released for a holder whose host was lost.
const RELEASED_LOST: u32 = 2;
/// `ConnectionSlot::last_released` of a slot a daemon released because the holder's whole
/// host was lost (a [`RELEASED_LOST`] whose owner may also cut that host's connections:
/// revocation, `transport::ofi::transport::Exported`).
const RELEASED_HOST_LOST: u32 = 3;

/// The header as it lies in shared memory.
#[repr(C)]
pub struct SegmentHeader {
    pub magic: u64,
    pub layout_version: u32,
    pub header_size: u32,
    pub segment_size: u64,
    /// File offset of the segment's first byte.
    pub data_offset: u64,
    pub node_id: u32,
    pub segment_id: u32,
    /// Packed [`ProcessIdentity`] of the creator.
    pub owner: u64,
    pub create_flags: u32,
    /// [`state`] bits.
    pub state: u32,
    /// Doorbell of state changes (peers wait on it for remote-segment events).
    pub state_seq: u32,
    pub state_sleepers: u32,
    /// [`kind`] of object.
    pub kind: u32,
    /// Doorbell of connection changes (the owner waits on it for local-segment events).
    pub conn_seq: u32,
    pub conn_sleepers: u32,
    /// Reflective groups: how many nodes `receivers` names (0: any node may join). Written
    /// by the owner before the group becomes available, read-only after.
    pub receivers_len: u32,
    pub receivers: [u32; MAX_RECEIVERS],
    /// Room for later additions without moving the slots.
    pub _reserved: [u64; 22],
    pub connections: [ConnectionSlot; MAX_CONNECTIONS],
}

const _: () = assert!(size_of::<SegmentHeader>() <= HEADER_PAGE);
const _: () = assert!(offset_of!(SegmentHeader, state) % 4 == 0);
const _: () = assert!(offset_of!(SegmentHeader, connections) == 512);
const _: () = assert!(size_of::<ConnectionSlot>() == 32);

/// A consistent view of one connection slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotSnapshot {
    /// Who holds it now.
    pub holder: Option<ProcessIdentity>,
    /// Who held it before (the last to leave, when it is free).
    pub last: Option<ProcessIdentity>,
    /// The node of the holder.
    pub node: u32,
    /// The node of the last holder.
    pub last_node: u32,
    /// Whether the last holder released the slot itself (else it died and was displaced).
    pub last_released: bool,
    /// Whether the last holder's slot was released for it because its host was lost: as
    /// good as dead, though the holder (a daemon's proxy record) lives on.
    pub last_lost: bool,
    /// `last_lost`, because the last holder's whole host was lost (not only its process).
    pub last_host_lost: bool,
    /// Even; +2 for every claim and every release.
    pub generation: u32,
    /// The holder is a daemon's proxy for a process of another host: its liveness is the
    /// daemons' to judge (they release the slot), not its pid's.
    pub proxy: bool,
}

/// The validated, immutable facts of a segment, copied out of its header once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderSnapshot {
    /// [`kind`] of object.
    pub kind: u32,
    pub node_id: u32,
    pub segment_id: u32,
    pub segment_size: u64,
    pub data_offset: u64,
    pub owner: ProcessIdentity,
    pub create_flags: u32,
}

/// Typed access to a header at a raw address (in a mapping that outlives the view).
#[derive(Clone, Copy, Debug)]
pub struct HeaderView {
    /// The header page, [`HEADER_PAGE`] read-write bytes at an 8-aligned address (new's
    /// contract); every word below is a constant offset inside it, so its checked accessors
    /// take their infallible path ([`SharedSlice::header_u32`]).
    page: SharedSlice<'static>,
}

impl HeaderView {
    /// # Safety
    /// `ptr` must point to a mapping of at least [`HEADER_PAGE`] readable and writable bytes,
    /// 8-byte aligned, that stays mapped as long as the view (or any copy) is used.
    pub unsafe fn new(ptr: *mut u8) -> Self {
        // SAFETY: the caller's contract; the view outlives no use of the mapping (the
        // `'static` stands for "as long as the view is used"), and every access through it
        // is atomic or volatile.
        HeaderView { page: unsafe { SharedSlice::from_raw_parts(ptr, HEADER_PAGE) } }
    }

    fn u32_at(&self, offset: usize) -> &AtomicU32 {
        self.page.header_u32(offset)
    }

    fn u64_at(&self, offset: usize) -> &AtomicU64 {
        self.page.header_u64(offset)
    }

    /// Fills in a fresh header (the file is still unnamed, so nobody else sees it yet).
    pub fn initialise(&self, snap: &HeaderSnapshot) {
        // Relaxed: the release store of the magic, last, publishes them all.
        let words = [
            (offset_of!(SegmentHeader, layout_version), LAYOUT_VERSION),
            (offset_of!(SegmentHeader, header_size), size_of::<SegmentHeader>() as u32),
            (offset_of!(SegmentHeader, node_id), snap.node_id),
            (offset_of!(SegmentHeader, segment_id), snap.segment_id),
            (offset_of!(SegmentHeader, create_flags), snap.create_flags),
            (offset_of!(SegmentHeader, kind), snap.kind),
        ];
        for (offset, value) in words {
            self.u32_at(offset).store(value, Ordering::Relaxed);
        }
        let words = [
            (offset_of!(SegmentHeader, segment_size), snap.segment_size),
            (offset_of!(SegmentHeader, data_offset), snap.data_offset),
            (offset_of!(SegmentHeader, owner), snap.owner.bits()),
        ];
        for (offset, value) in words {
            self.u64_at(offset).store(value, Ordering::Relaxed);
        }
        // The magic goes last: a header without it is never trusted.
        self.u64_at(offset_of!(SegmentHeader, magic)).store(SEGMENT_MAGIC, Ordering::Release);
    }

    /// Checks every field against what an object of `kind` named (node, segment) in a file
    /// of `file_len` bytes must hold, and returns the immutable facts.
    pub fn validate(&self, kind: u32, node: u32, segment: u32, file_len: u64) -> Result<HeaderSnapshot, String> {
        let magic = self.u64_at(offset_of!(SegmentHeader, magic)).load(Ordering::Acquire);
        if magic != SEGMENT_MAGIC {
            return Err(format!("bad magic {magic:#018x}"));
        }
        let version = self.u32_at(offset_of!(SegmentHeader, layout_version)).load(Ordering::Relaxed);
        if version != LAYOUT_VERSION {
            return Err(format!("layout version {version}, this library reads {LAYOUT_VERSION}"));
        }
        let header_size = self.u32_at(offset_of!(SegmentHeader, header_size)).load(Ordering::Relaxed);
        if header_size as usize != size_of::<SegmentHeader>() {
            return Err(format!("header size {header_size}, expected {}", size_of::<SegmentHeader>()));
        }
        let snap = HeaderSnapshot {
            kind: self.u32_at(offset_of!(SegmentHeader, kind)).load(Ordering::Relaxed),
            node_id: self.u32_at(offset_of!(SegmentHeader, node_id)).load(Ordering::Relaxed),
            segment_id: self.u32_at(offset_of!(SegmentHeader, segment_id)).load(Ordering::Relaxed),
            segment_size: self.u64_at(offset_of!(SegmentHeader, segment_size)).load(Ordering::Relaxed),
            data_offset: self.u64_at(offset_of!(SegmentHeader, data_offset)).load(Ordering::Relaxed),
            owner: ProcessIdentity::from_bits(self.u64_at(offset_of!(SegmentHeader, owner)).load(Ordering::Relaxed))
                .ok_or("no owner")?,
            create_flags: self.u32_at(offset_of!(SegmentHeader, create_flags)).load(Ordering::Relaxed),
        };
        if snap.node_id != node || snap.segment_id != segment {
            return Err(format!(
                "header names node {} segment {:#x}, file is node {node} segment {segment:#x}",
                snap.node_id, snap.segment_id
            ));
        }
        if snap.kind != kind {
            return Err(format!("object kind {}, expected {kind}", snap.kind));
        }
        if snap.segment_size == 0 {
            return Err("segment size 0".into());
        }
        if snap.create_flags & !create_flags::ALL != 0 {
            return Err(format!("unknown creation flags {:#x}", snap.create_flags));
        }
        if snap.data_offset < HEADER_PAGE as u64 {
            return Err(format!("data offset {} overlaps the header", snap.data_offset));
        }
        let end = snap.data_offset.checked_add(snap.segment_size).ok_or("size overflows")?;
        if end > file_len {
            return Err(format!("segment ends at byte {end} but the file has {file_len}"));
        }
        Ok(snap)
    }

    /// The state bits (unknown bits masked off).
    pub fn state(&self) -> u32 {
        self.u32_at(offset_of!(SegmentHeader, state)).load(Ordering::Acquire) & state::ALL
    }

    /// Sets and clears state bits (owner only) and rings the state doorbell.
    pub fn update_state(&self, set: u32, clear: u32) {
        let w = self.u32_at(offset_of!(SegmentHeader, state));
        let mut cur = w.load(Ordering::Relaxed);
        loop {
            let new = (cur | set) & !clear;
            match w.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Relaxed) {
                Ok(_) => break,
                Err(v) => cur = v,
            }
        }
        self.state_doorbell().ring();
    }

    /// Rung on every state change, and by a peer's death watch when the owner dies.
    pub fn state_doorbell(&self) -> Doorbell {
        // SAFETY: both words lie in the header page, which outlives the view (new's contract).
        unsafe {
            Doorbell::new(
                self.u32_at(offset_of!(SegmentHeader, state_seq)).as_ptr(),
                self.u32_at(offset_of!(SegmentHeader, state_sleepers)).as_ptr(),
            )
        }
    }

    /// Rung when a peer connects or disconnects, and by the owner's death watch of a peer.
    pub fn conn_doorbell(&self) -> Doorbell {
        // SAFETY: both words lie in the header page, which outlives the view (new's contract).
        unsafe {
            Doorbell::new(
                self.u32_at(offset_of!(SegmentHeader, conn_seq)).as_ptr(),
                self.u32_at(offset_of!(SegmentHeader, conn_sleepers)).as_ptr(),
            )
        }
    }

    fn slot_offset(i: usize) -> usize {
        offset_of!(SegmentHeader, connections) + i * size_of::<ConnectionSlot>()
    }

    fn slot_words(&self, i: usize) -> (&AtomicU64, &AtomicU64, &AtomicU32, &AtomicU32) {
        let base = Self::slot_offset(i);
        (
            self.u64_at(base + offset_of!(ConnectionSlot, peer)),
            self.u64_at(base + offset_of!(ConnectionSlot, last_peer)),
            self.u32_at(base + offset_of!(ConnectionSlot, node)),
            self.u32_at(base + offset_of!(ConnectionSlot, generation)),
        )
    }

    fn last_node_word(&self, i: usize) -> &AtomicU32 {
        self.u32_at(Self::slot_offset(i) + offset_of!(ConnectionSlot, last_node))
    }

    fn last_released_word(&self, i: usize) -> &AtomicU32 {
        self.u32_at(Self::slot_offset(i) + offset_of!(ConnectionSlot, last_released))
    }

    /// Sets a reflective group's receiver list (owner only, before it becomes available).
    pub fn set_receivers(&self, nodes: &[u32]) {
        let n = nodes.len().min(MAX_RECEIVERS);
        for (i, &node) in nodes[..n].iter().enumerate() {
            self.u32_at(offset_of!(SegmentHeader, receivers) + 4 * i).store(node, Ordering::Relaxed);
        }
        self.u32_at(offset_of!(SegmentHeader, receivers_len)).store(n as u32, Ordering::Release);
    }

    /// A reflective group's receiver list (empty: any node); `Err` if the length is corrupt.
    pub fn receivers(&self) -> Result<Vec<u32>, String> {
        let n = self.u32_at(offset_of!(SegmentHeader, receivers_len)).load(Ordering::Acquire) as usize;
        if n > MAX_RECEIVERS {
            return Err(format!("receiver list of {n} nodes (at most {MAX_RECEIVERS})"));
        }
        Ok((0..n).map(|i| self.u32_at(offset_of!(SegmentHeader, receivers) + 4 * i).load(Ordering::Relaxed)).collect())
    }

    /// A consistent snapshot of slot `i`, or `None` if a writer holds it (for long: a writer
    /// that died inside its few instructions leaves the slot locked for good).
    pub fn slot(&self, i: usize) -> Option<SlotSnapshot> {
        let (peer, last, node, generation) = self.slot_words(i);
        for attempt in 0..1000 {
            let g1 = generation.load(Ordering::SeqCst);
            if g1 % 2 == 0 {
                let raw_node = node.load(Ordering::SeqCst);
                let snap = SlotSnapshot {
                    holder: ProcessIdentity::from_bits(peer.load(Ordering::SeqCst)),
                    last: ProcessIdentity::from_bits(last.load(Ordering::SeqCst)),
                    node: raw_node & !PROXY_NODE,
                    proxy: raw_node & PROXY_NODE != 0,
                    last_node: self.last_node_word(i).load(Ordering::SeqCst) & !PROXY_NODE,
                    last_released: self.last_released_word(i).load(Ordering::SeqCst) == RELEASED,
                    last_lost: matches!(
                        self.last_released_word(i).load(Ordering::SeqCst),
                        RELEASED_LOST | RELEASED_HOST_LOST
                    ),
                    last_host_lost: self.last_released_word(i).load(Ordering::SeqCst) == RELEASED_HOST_LOST,
                    generation: g1,
                };
                if generation.load(Ordering::SeqCst) == g1 {
                    return Some(snap);
                }
            }
            if attempt > 100 {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        None
    }

    /// Locks slot `i` if its generation is still `g` (even); returns whether it did.
    fn lock_slot(&self, i: usize, g: u32) -> bool {
        g % 2 == 0 && self.slot_words(i).3.compare_exchange(g, g + 1, Ordering::SeqCst, Ordering::Relaxed).is_ok()
    }

    /// Unlocks slot `i` locked at generation `g`: `changed` moves it to `g + 2`, else back to `g`.
    fn unlock_slot(&self, i: usize, g: u32, changed: bool) {
        self.slot_words(i).3.store(if changed { g.wrapping_add(2) } else { g }, Ordering::SeqCst);
        if changed {
            self.conn_doorbell().ring();
        }
    }

    /// Claims a free connection slot (or one whose holder `is_dead`) for `peer` on `node`.
    /// A daemon's proxy slot is never taken this way (only a daemon releases it).
    pub fn claim_slot(
        &self,
        peer: ProcessIdentity,
        node: u32,
        is_dead: impl Fn(u32, ProcessIdentity) -> bool,
    ) -> Option<usize> {
        self.claim_slot_as(peer, node, is_dead, |_, _| true)
    }

    /// As [`Self::claim_slot`], for a daemon (`peer`) holding the slot for a process acting
    /// as `node` on another host: the slot is marked as a proxy's (in [`ConnectionSlot::node`]).
    pub fn claim_proxy_slot(
        &self,
        peer: ProcessIdentity,
        node: u32,
        is_dead: impl Fn(u32, ProcessIdentity) -> bool,
    ) -> Option<usize> {
        self.claim_slot_as(peer, node | PROXY_NODE, is_dead, |_, _| true)
    }

    /// As [`Self::claim_slot`] (as [`Self::claim_proxy_slot`] when `proxy`), taking only a
    /// slot `usable(slot, generation)` accepts at the generation it is claimed from: a
    /// daemon takes only slots whose owner made a key for that claim (revocation,
    /// `cluster::exports::SlotKey`).
    pub fn claim_slot_where(
        &self,
        peer: ProcessIdentity,
        node: u32,
        proxy: bool,
        is_dead: impl Fn(u32, ProcessIdentity) -> bool,
        usable: impl Fn(usize, u32) -> bool,
    ) -> Option<usize> {
        let node = if proxy { node | PROXY_NODE } else { node };
        self.claim_slot_as(peer, node, is_dead, usable)
    }

    fn claim_slot_as(
        &self,
        peer: ProcessIdentity,
        node: u32,
        is_dead: impl Fn(u32, ProcessIdentity) -> bool,
        usable: impl Fn(usize, u32) -> bool,
    ) -> Option<usize> {
        for i in 0..MAX_CONNECTIONS {
            let Some(snap) = self.slot(i) else { continue };
            let claimable = match snap.holder {
                None => true,
                Some(h) => !snap.proxy && is_dead(snap.node, h),
            };
            if !claimable || !usable(i, snap.generation) || !self.lock_slot(i, snap.generation) {
                continue;
            }
            let (peer_w, last_w, node_w, _) = self.slot_words(i);
            let cur = peer_w.load(Ordering::SeqCst);
            if cur != snap.holder.map_or(0, |h| h.bits()) {
                self.unlock_slot(i, snap.generation, false);
                continue;
            }
            if cur != 0 {
                // A dead holder, displaced.
                last_w.store(cur, Ordering::SeqCst);
                self.last_node_word(i).store(node_w.load(Ordering::SeqCst), Ordering::SeqCst);
                self.last_released_word(i).store(0, Ordering::SeqCst);
            }
            peer_w.store(peer.bits(), Ordering::SeqCst);
            node_w.store(node, Ordering::SeqCst);
            self.unlock_slot(i, snap.generation, true);
            return Some(i);
        }
        None
    }

    /// Releases slot `i` if `peer` still holds it.
    pub fn release_slot(&self, i: usize, peer: ProcessIdentity) {
        self.release_slot_as(i, peer, RELEASED)
    }

    /// Releases slot `i` if `peer` (a daemon's proxy) still holds it, for a remote peer whose
    /// host was lost: the owner sees that peer die.
    pub fn release_slot_lost(&self, i: usize, peer: ProcessIdentity) {
        self.release_slot_as(i, peer, RELEASED_LOST)
    }

    /// As [`Self::release_slot_lost`], for a peer whose whole host was lost.
    pub fn release_slot_host_lost(&self, i: usize, peer: ProcessIdentity) {
        self.release_slot_as(i, peer, RELEASED_HOST_LOST)
    }

    fn release_slot_as(&self, i: usize, peer: ProcessIdentity, how: u32) {
        if i >= MAX_CONNECTIONS {
            return;
        }
        loop {
            let Some(snap) = self.slot(i) else { return };
            if snap.holder != Some(peer) {
                return;
            }
            if !self.lock_slot(i, snap.generation) {
                continue;
            }
            let (peer_w, last_w, node_w, _) = self.slot_words(i);
            let mine = peer_w.load(Ordering::SeqCst) == peer.bits();
            if mine {
                last_w.store(peer.bits(), Ordering::SeqCst);
                self.last_node_word(i).store(node_w.load(Ordering::SeqCst), Ordering::SeqCst);
                self.last_released_word(i).store(how, Ordering::SeqCst);
                peer_w.store(0, Ordering::SeqCst);
            }
            self.unlock_slot(i, snap.generation, mine);
            return;
        }
    }

    /// The current holders of connection slots as (node, identity, a daemon's proxy).
    pub fn connections(&self) -> Vec<(u32, ProcessIdentity, bool)> {
        (0..MAX_CONNECTIONS).filter_map(|i| self.slot(i)).filter_map(|s| Some((s.node, s.holder?, s.proxy))).collect()
    }

    /// The slots daemons hold as proxies: (slot, node, holder).
    pub fn proxy_slots(&self) -> Vec<(usize, u32, ProcessIdentity)> {
        (0..MAX_CONNECTIONS)
            .filter_map(|i| Some((i, self.slot(i)?)))
            .filter(|(_, s)| s.proxy)
            .filter_map(|(i, s)| Some((i, s.node, s.holder?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::mapping::Mapping;

    /// A fresh header holds each field at its `repr(C)` offset, written out here as numbers
    /// (other processes, older builds and C read these bytes), and nothing else.
    #[test]
    fn initialise_writes_each_field_at_its_offset_and_validate_reads_it_back() {
        let map = Mapping::anonymous(HEADER_PAGE).unwrap();
        // SAFETY: a private anonymous mapping of HEADER_PAGE bytes, page aligned, that
        // outlives the view.
        let view = unsafe { HeaderView::new(map.as_ptr()) };
        let snap = HeaderSnapshot {
            kind: kind::DATA_INTERRUPT,
            node_id: 12,
            segment_id: 0x1234_5678,
            segment_size: 3 << 20,
            data_offset: 2 * HEADER_PAGE as u64,
            owner: ProcessIdentity::current().unwrap(),
            create_flags: create_flags::REGISTERED_MEMORY,
        };
        view.initialise(&snap);
        let mut bytes = vec![0u8; HEADER_PAGE];
        map.slice().copy_to(0, &mut bytes).unwrap();
        let mut expected = vec![0u8; HEADER_PAGE];
        let mut put = |offset: usize, b: &[u8]| expected[offset..offset + b.len()].copy_from_slice(b);
        put(0, b"LANESSEG");
        put(8, &LAYOUT_VERSION.to_ne_bytes());
        put(12, &(size_of::<SegmentHeader>() as u32).to_ne_bytes());
        put(16, &snap.segment_size.to_ne_bytes());
        put(24, &snap.data_offset.to_ne_bytes());
        put(32, &snap.node_id.to_ne_bytes());
        put(36, &snap.segment_id.to_ne_bytes());
        put(40, &snap.owner.bits().to_ne_bytes());
        put(48, &snap.create_flags.to_ne_bytes());
        put(64, &snap.kind.to_ne_bytes());
        assert!(bytes == expected, "the header's bytes moved");
        let file_len = snap.data_offset + snap.segment_size;
        assert_eq!(view.validate(snap.kind, 12, 0x1234_5678, file_len), Ok(snap));
        assert_eq!(view.state(), 0);
    }
}
