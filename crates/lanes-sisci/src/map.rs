//! Maps (local and remote), the map pointer, sequences, barriers and copies.

use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use lanes::fabric::SequenceStatus;
use lanes::platform::memory;
use lanes::{Map, MapAccess, Sequence};

use crate::consts::*;
use crate::error::{fail, SciResult};
use crate::ffi::{call, call_quiet, flags, need, put};
use crate::registry::{self, Handle, Object};
use crate::segment::{broadcast_only_for_groups, LSeg, RSeg};

/// A map handle (`sci_map_t`).
pub struct MapH {
    pub map: Map,
    /// Whether it maps a local segment.
    local: bool,
    /// Whether the mapped memory is this node's own.
    own_node: bool,
    /// Whether stores reach the segment only when written through (another host's).
    through: bool,
}

/// Maps alive whose stores are written through ([`lanes::Map::is_written_through`]): while
/// there are none, `SCIStoreBarrier` and `SCIFlush` without a sequence are a CPU fence only.
static WRITTEN_THROUGH: AtomicUsize = AtomicUsize::new(0);

impl Drop for MapH {
    fn drop(&mut self) {
        if self.through {
            WRITTEN_THROUGH.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Object for MapH {
    const MAGIC: u32 = 0x5350_414D; // "MAPS"
}

impl MapH {
    /// Whether the map reaches memory of this node (`SCI_Q_MAP_MAPPED_TO_LOCAL_TARGET`).
    pub fn target_is_local(&self) -> bool {
        self.local || self.own_node
    }

    /// The byte range the map covers in this address space.
    fn range(&self) -> (usize, usize) {
        let start = self.map.as_ptr() as usize;
        (start, start + self.map.len())
    }
}

/// A sequence handle (`sci_sequence_t`).
pub struct SeqH {
    seq: Sequence,
}

impl Object for SeqH {
    const MAGIC: u32 = 0x5351_4553; // "SEQS"
}

const MAP_FLAGS: u32 = SCI_FLAG_FIXED_MAP_ADDR
    | SCI_FLAG_READONLY_MAP
    | SCI_FLAG_LOCK_OPERATION
    | SCI_FLAG_IO_MAP_IOSPACE
    | SCI_FLAG_NO_MEMORY_LOOPBACK
    | SCI_FLAG_SHARED_MAP
    // A cached (write-back) mapping: shared memory is always mapped so, and stores are
    // seen by other processes without a cache flush, so the result is the same.
    | SCI_FLAG_WRITE_BACK_CACHE_MAP
    | SCI_FLAG_BROADCAST;

/// The access a map asks for. `SCI_FLAG_BROADCAST` is for reflective groups only.
fn map_flags(fl: u32, group: bool) -> SciResult<MapAccess> {
    flags(fl, MAP_FLAGS)?;
    broadcast_only_for_groups(fl, group)?;
    if fl & SCI_FLAG_FIXED_MAP_ADDR != 0 {
        // Maps go where the kernel puts them.
        return fail(SCI_ERR_FLAG_NOT_IMPLEMENTED);
    }
    Ok(if fl & SCI_FLAG_READONLY_MAP != 0 { MapAccess::ReadOnly } else { MapAccess::ReadWrite })
}

fn register_map(
    desc: usize,
    parent: usize,
    map: Map,
    local: bool,
    own_node: bool,
    out: *mut *mut c_void,
) -> SciResult<*mut c_void> {
    let ptr = map.as_ptr().cast::<c_void>();
    let through = map.is_written_through();
    if through {
        WRITTEN_THROUGH.fetch_add(1, Ordering::Relaxed);
    }
    let (h, _) = registry::insert(desc, parent, MapH { map, local, own_node, through });
    put(out, h)?;
    Ok(ptr)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn map_remote_segment(
    segment: *mut c_void,
    map: *mut *mut c_void,
    offset: usize,
    size: usize,
    _addr: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) -> *mut c_void {
    call(error, std::ptr::null_mut(), || {
        let h: Arc<Handle<RSeg>> = registry::get(segment)?;
        need(map)?;
        let group = h.body.is_group();
        let access = map_flags(fl, group)?;
        let own = if group {
            // A connection to the group (node DIS_BROADCAST_NODEID_GROUP_ALL) maps the group's
            // multicast address, writable, with SCI_FLAG_BROADCAST or without it, as on the
            // vendor's hardware: programs written for it connect with the flag and map
            // without it, then store (kritjo/DoubleClique, client/request_region_connection.c).
            // SCI_FLAG_READONLY_MAP maps the read address instead: the local copy every
            // member's stores reach.
            access == MapAccess::ReadOnly
        } else {
            h.body.seg().node_id() == crate::node::desc(h.desc as *mut c_void)?.body.fabric.node_id().get()
        };
        // A group's maps are the membership's: across hosts its multicast map fans out.
        let m = match h.body.member() {
            Some(member) => member.map(offset as u64, size as u64, access)?,
            None => h.body.seg().map(offset as u64, size as u64, access)?,
        };
        register_map(h.desc, h.key(), m, false, own, map)
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn map_local_segment(
    segment: *mut c_void,
    map: *mut *mut c_void,
    offset: usize,
    size: usize,
    _addr: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) -> *mut c_void {
    call(error, std::ptr::null_mut(), || {
        let h: Arc<Handle<LSeg>> = registry::get(segment)?;
        need(map)?;
        // For a group's receiver: with SCI_FLAG_BROADCAST the multicast map (writable, or the
        // read map with SCI_FLAG_READONLY_MAP); without it the receiver's own copy, as a
        // receiver's local segment is on the vendor's hardware (its reflective-memory example
        // maps it without flags to read what the writers store). Stores through the own copy
        // stay in it, except that on one host every receiver shares one copy.
        let access = map_flags(fl, h.body.is_group())?;
        let m = match h.body.group() {
            Some(g) if fl & SCI_FLAG_BROADCAST != 0 => g.map(offset as u64, size as u64, access)?,
            Some(g) => g.local_map(offset as u64, size as u64, access)?,
            None => h.body.live()?.map(offset as u64, size as u64, access)?,
        };
        register_map(h.desc, h.key(), m, true, true, map)
    })
}

pub(crate) fn unmap_segment(map: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        flags(fl, 0)?;
        let taken = {
            let mut reg = registry::write();
            let h = reg.get::<MapH>(map)?;
            if reg.children(h.key()) > 0 {
                return fail(SCI_ERR_BUSY);
            }
            reg.take::<MapH>(map)?
        };
        // A map of another host's segment delivers what was stored through it before it
        // goes (bounded: 10 s), as stores through the hardware's mapping have landed when
        // the mapping is torn down.
        if taken.body.through {
            taken.body.map.flush();
        }
        drop(taken);
        Ok(())
    })
}

pub(crate) fn get_map_pointer(map: *mut c_void) -> *mut c_void {
    call_quiet(std::ptr::null_mut(), || {
        registry::get::<MapH>(map).map_or(std::ptr::null_mut(), |h| h.body.map.as_ptr().cast())
    })
}

pub(crate) fn create_map_sequence(map: *mut c_void, sequence: *mut *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        let h = registry::get::<MapH>(map)?;
        need(sequence)?;
        flags(fl, 0)?;
        let (p, _) = registry::insert(h.desc, h.key(), SeqH { seq: h.body.map.sequence() });
        put(sequence, p)
    })
}

pub(crate) fn remove_sequence(sequence: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        flags(fl, 0)?;
        let taken = registry::write().take::<SeqH>(sequence)?;
        drop(taken);
        Ok(())
    })
}

fn status_code(s: SequenceStatus) -> u32 {
    match s {
        SequenceStatus::Ok => SCI_SEQ_OK,
        SequenceStatus::Retriable => SCI_SEQ_RETRIABLE,
        SequenceStatus::NotRetriable => SCI_SEQ_NOT_RETRIABLE,
        SequenceStatus::Pending => SCI_SEQ_PENDING,
    }
}

pub(crate) fn start_sequence(sequence: *mut c_void, fl: c_uint, error: *mut SciError) -> u32 {
    call(error, SCI_SEQ_NOT_RETRIABLE, || {
        let h = registry::get::<SeqH>(sequence)?;
        flags(fl, 0)?;
        Ok(status_code(h.body.seq.start()))
    })
}

pub(crate) fn check_sequence(sequence: *mut c_void, fl: c_uint, error: *mut SciError) -> u32 {
    call(error, SCI_SEQ_NOT_RETRIABLE, || {
        let h = registry::get::<SeqH>(sequence)?;
        flags(fl, SCI_FLAG_NO_FLUSH | SCI_FLAG_NO_STORE_BARRIER)?;
        if fl & SCI_FLAG_NO_STORE_BARRIER == 0 {
            memory::store_barrier();
        }
        Ok(status_code(h.body.seq.check()))
    })
}

/// `SCIStoreBarrier`: a store barrier (shared memory needs no more). A map of another
/// host's segment posts its pending writes, in order: the sequence's map, or with a NULL
/// sequence every such map of this process (as the hardware's barrier covers every
/// mapping).
pub(crate) fn store_barrier(sequence: *mut c_void, _fl: c_uint) {
    memory::store_barrier();
    for_written_through(sequence, Map::store_barrier);
}

/// `SCIFlush`: as `SCIStoreBarrier`, and maps of another host's segments wait until their
/// writes are delivered, unless `SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY` asks only to push them
/// out (`SCIFlush(NULL, SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY)`).
pub(crate) fn flush(sequence: *mut c_void, fl: c_uint) {
    memory::store_barrier();
    if fl & SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY != 0 {
        for_written_through(sequence, Map::store_barrier);
    } else {
        for_written_through(sequence, Map::flush);
    }
}

/// Applies `f` to the written-through map of `sequence`, or to every one when it is NULL
/// (a sequence that is not one is ignored: these calls report no errors).
fn for_written_through(sequence: *mut c_void, f: fn(&Map)) {
    if WRITTEN_THROUGH.load(Ordering::Relaxed) == 0 {
        return;
    }
    if sequence.is_null() {
        for h in registry::all::<MapH>() {
            if h.body.through {
                f(&h.body.map);
            }
        }
    } else if let Ok(s) = registry::get::<SeqH>(sequence) {
        if let Some(m) = registry::get::<MapH>(s.parent as *const c_void).ok().filter(|m| m.body.through) {
            f(&m.body.map);
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn mem_cpy(
    sequence: *mut c_void,
    mem_addr: *mut c_void,
    remote_map: *mut c_void,
    remote_offset: usize,
    size: usize,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let h = registry::get::<MapH>(remote_map)?;
        let seq = if sequence.is_null() { None } else { Some(registry::get::<SeqH>(sequence)?) };
        flags(fl, SCI_FLAG_BLOCK_READ | SCI_FLAG_ERROR_CHECK | SCI_FLAG_NO_FLUSH | SCI_FLAG_NO_STORE_BARRIER)?;
        if size == 0 {
            return Ok(());
        }
        if mem_addr.is_null() {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        let map = &h.body.map;
        if fl & SCI_FLAG_BLOCK_READ != 0 {
            // SAFETY: SCIMemCpy's contract: `mem_addr` is the program's memory, valid for
            // writes of `size` bytes and not part of the map.
            let dst = unsafe { std::slice::from_raw_parts_mut(mem_addr.cast::<u8>(), size) };
            map.read_bytes(remote_offset, dst)?;
        } else {
            // SAFETY: SCIMemCpy's contract: `mem_addr` is valid for reads of `size` bytes.
            let src = unsafe { std::slice::from_raw_parts(mem_addr.cast::<u8>(), size) };
            map.write_bytes(remote_offset, src)?;
            if fl & SCI_FLAG_NO_STORE_BARRIER == 0 {
                map.store_barrier();
            }
        }
        // The copy is ordered already (the barrier above, or a read): the sequence's state
        // needs no further fence.
        let check = match &seq {
            Some(s) => s.body.seq.start(),
            None if fl & SCI_FLAG_ERROR_CHECK != 0 => map.sequence().start(),
            None => SequenceStatus::Ok,
        };
        if check != SequenceStatus::Ok {
            return fail(SCI_ERR_TRANSFER_FAILED);
        }
        Ok(())
    })
}

pub(crate) fn mem_write(
    mem_addr: *mut c_void,
    remote_addr: *mut c_void,
    size: usize,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        flags(fl, SCI_FLAG_ERROR_CHECK | SCI_FLAG_NO_FLUSH | SCI_FLAG_NO_STORE_BARRIER)?;
        if size == 0 {
            return Ok(());
        }
        if mem_addr.is_null() || remote_addr.is_null() {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        let (h, offset) = find_map(remote_addr as usize, size)?;
        // SAFETY: SCIMemWrite's contract: `mem_addr` is valid for reads of `size` bytes.
        let src = unsafe { std::slice::from_raw_parts(mem_addr.cast::<u8>(), size) };
        h.body.map.write_bytes(offset, src)?;
        if fl & SCI_FLAG_NO_STORE_BARRIER == 0 {
            memory::store_barrier();
        }
        if fl & SCI_FLAG_ERROR_CHECK != 0 && h.body.map.sequence().check() != SequenceStatus::Ok {
            return fail(SCI_ERR_TRANSFER_FAILED);
        }
        Ok(())
    })
}

/// The live map holding `[addr, addr + len)`, and the offset of `addr` in it.
fn find_map(addr: usize, len: usize) -> SciResult<(Arc<Handle<MapH>>, usize)> {
    let end = addr.checked_add(len).ok_or(crate::error::Code(SCI_ERR_ILLEGAL_ADDRESS))?;
    for h in registry::all::<MapH>() {
        let (s, e) = h.body.range();
        if addr >= s && end <= e {
            return Ok((h, addr - s));
        }
    }
    fail(SCI_ERR_ILLEGAL_ADDRESS)
}

pub(crate) fn cache_sync(map: *mut c_void, addr: *mut c_void, length: usize, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        let h = registry::get::<MapH>(map)?;
        flags(fl, SCI_FLAG_CACHE_FLUSH | SCI_FLAG_CACHE_INVALIDATE)?;
        let (s, e) = h.body.range();
        let a = addr as usize;
        if addr.is_null() || a < s || a > e {
            return fail(SCI_ERR_ILLEGAL_ADDRESS);
        }
        if length > e - a {
            return fail(SCI_ERR_OUT_OF_RANGE);
        }
        // Shared memory is cache coherent: ordering is all there is to do.
        memory::store_barrier();
        Ok(())
    })
}
