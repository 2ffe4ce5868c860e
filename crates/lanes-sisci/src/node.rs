//! The library and the node: initialise, open and close descriptors, error strings, node ids,
//! probes and queries.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use lanes::{Fabric, FabricConfig, NodeId};

use crate::consts::*;
use crate::error::{fail, SciResult};
use crate::ffi::{adapter, call, call_quiet, flags, get_in, need, put};
use crate::registry::{self, Handle, Object};

/// An open descriptor (`sci_desc_t`): the fabric as this process's node.
pub struct Desc {
    pub fabric: Fabric,
}

impl Object for Desc {
    const MAGIC: u32 = 0x5344_4553; // "SDES"
}

/// `SCIInitialize` calls not yet matched by `SCITerminate`.
static INITIALIZED: AtomicU32 = AtomicU32::new(0);
static INIT_LOCK: Mutex<()> = Mutex::new(());
static STARTED: OnceLock<Instant> = OnceLock::new();

pub(crate) fn require_initialized() -> SciResult<()> {
    if INITIALIZED.load(Ordering::Acquire) == 0 {
        fail(SCI_ERR_NOT_INITIALIZED)
    } else {
        Ok(())
    }
}

/// Looks a descriptor up.
pub(crate) fn desc(sd: *mut c_void) -> SciResult<Arc<Handle<Desc>>> {
    registry::get::<Desc>(sd)
}

pub(crate) fn initialize(fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        flags(fl, 0)?;
        let _g = INIT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        STARTED.get_or_init(Instant::now);
        INITIALIZED.fetch_add(1, Ordering::AcqRel);
        Ok(())
    })
}

pub(crate) fn terminate() {
    call_quiet((), || {
        let dropped = {
            let _g = INIT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
            match INITIALIZED.load(Ordering::Acquire) {
                0 => return,
                1 => {
                    INITIALIZED.store(0, Ordering::Release);
                    crate::segment::drop_lingering();
                    registry::write().clear()
                }
                _ => {
                    INITIALIZED.fetch_sub(1, Ordering::AcqRel);
                    return;
                }
            }
        };
        drop(dropped);
    })
}

pub(crate) fn open(sd: *mut *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        require_initialized()?;
        need(sd)?;
        flags(fl, 0)?;
        let fabric = Fabric::open()?;
        let (h, _) = registry::insert(0, 0, Desc { fabric });
        put(sd, h)
    })
}

pub(crate) fn close(sd: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        flags(fl, SCI_FLAG_FORCE_REMOVE)?;
        let dropped = {
            let mut reg = registry::write();
            let d = reg.get::<Desc>(sd)?;
            let owned = reg.owned_by(d.key());
            if !owned.is_empty() && fl & SCI_FLAG_FORCE_REMOVE == 0 {
                return fail(SCI_ERR_BUSY);
            }
            let mut dropped: Vec<_> = owned.into_iter().filter_map(|k| reg.take_any(k)).collect();
            dropped.extend(reg.take_any(d.key()));
            dropped
        };
        drop(dropped);
        crate::segment::reap_lingering();
        Ok(())
    })
}

pub(crate) fn error_string(code: SciError) -> *const c_char {
    call_quiet(c"Unknown SISCI error code".as_ptr(), || crate::error::error_string(code))
}

/// This process's node id, from the environment and configuration.
fn local_node() -> SciResult<NodeId> {
    Ok(FabricConfig::from_env()?.node_id)
}

pub(crate) fn get_local_node_id(adapter_no: c_uint, node_id: *mut c_uint, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        need(node_id)?;
        flags(fl, 0)?;
        adapter(adapter_no)?;
        put(node_id, local_node()?.get())
    })
}

pub(crate) fn probe_node(
    sd: *mut c_void,
    adapter_no: c_uint,
    node_id: c_uint,
    fl: c_uint,
    error: *mut SciError,
) -> c_int {
    call(error, 0, || {
        let d = desc(sd)?;
        flags(fl, 0)?;
        adapter(adapter_no)?;
        NodeId::new(node_id)?;
        if d.body.fabric.probe_node(node_id) {
            Ok(1)
        } else {
            fail(SCI_ERR_NO_REMOTE_LINK_ACCESS)
        }
    })
}

pub(crate) fn get_node_id_by_adapter_name(
    name: *mut c_char,
    list: *mut [c_uint; DIS_MAX_NSCIS],
    kind: *mut c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        need(list)?;
        need(kind)?;
        flags(fl, 0)?;
        if name.is_null() {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        // SAFETY: the API's contract: a non-NULL name is a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        put(list, [0; DIS_MAX_NSCIS])?;
        put(kind, DIS_VIRT_ADAPTER_LANES)?;
        let found = node_for_name(&name)?;
        match found {
            Some(n) => put(list, [n, 0, 0, 0]),
            None => fail(SCI_ERR_NO_SUCH_NODEID),
        }
    })
}

/// The node acting as host `name`: this host's own node for its name or "localhost", an
/// entry of the configuration file, or a node id written as a number.
fn node_for_name(name: &str) -> SciResult<Option<u32>> {
    let name = name.trim();
    let me = lanes::config::host_name();
    if name == "localhost" || (!me.is_empty() && name == me) {
        return Ok(Some(local_node()?.get()));
    }
    if let Some(file) = lanes::config::ConfigFile::load_from_env()? {
        if let Some(n) = file.node_for_host(name)? {
            return Ok(Some(n.get()));
        }
    }
    Ok(name.parse::<u32>().ok().and_then(|n| NodeId::new(n).ok()).map(NodeId::get))
}

/// `sci_query_string_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct QueryString {
    pub str: *mut c_char,
    pub length: c_uint,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct QueryAdapter {
    local_adapter_no: c_uint,
    port_no: c_uint,
    subcommand: c_uint,
    data: *mut c_void,
}

/// `sci_query_system_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct QuerySystem {
    pub subcommand: c_uint,
    pub data: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct QuerySegment {
    segment: *mut c_void,
    subcommand: c_uint,
    ioaddr: u64,
}

/// `sci_query_map_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct QueryMap {
    pub map: *mut c_void,
    pub subcommand: c_uint,
    /// `unsigned long long`, as in the vendor's API reference (sci_query_map_t).
    pub data: u64,
}

/// `sci_query_dma_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct QueryDma {
    pub local_adapter_no: c_uint,
    pub subcommand: c_uint,
    pub data: *mut c_void,
}

/// The vendor string of `SCI_Q_VENDORID`.
pub const VENDOR: &CStr = c"Lanes software fabric (SISCI-compatible)";
/// The string of `SCI_Q_API`.
pub const API: &CStr = c"SISCI API 2.0 (Lanes libsisci 0.1.0)";
/// The string of `SCI_Q_SISCI_DRIVER_VERSION`: there is no driver; the library is all.
pub const DRIVER_VERSION: &CStr = c"Lanes libsisci 0.1.0 (no kernel driver: the software fabric)";

fn put_string(q: *mut QueryString, s: &CStr) -> SciResult<()> {
    let q = get_in(q)?;
    if q.str.is_null() || q.length == 0 {
        return fail(SCI_ERR_ILLEGAL_PARAMETER);
    }
    let bytes = s.to_bytes();
    let n = bytes.len().min(q.length as usize - 1);
    // SAFETY: the API's contract: `str` points to `length` writable bytes; n < length.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), q.str.cast::<u8>(), n);
        q.str.add(n).write(0);
    }
    if n < bytes.len() {
        return fail(SCI_ERR_OVERFLOW);
    }
    Ok(())
}

pub(crate) fn query(command: c_uint, data: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        if data.is_null() {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        match command {
            SCI_Q_VENDORID => {
                flags(fl, 0)?;
                put_string(data.cast(), VENDOR)
            }
            SCI_Q_API => {
                flags(fl, 0)?;
                put_string(data.cast(), API)
            }
            SCI_Q_SISCI_DRIVER_VERSION => {
                flags(fl, 0)?;
                put_string(data.cast(), DRIVER_VERSION)
            }
            SCI_Q_DEVICE => crate::smartio::query(data.cast(), fl),
            SCI_Q_ADAPTER => {
                flags(fl, 0)?;
                query_adapter(get_in(data.cast::<QueryAdapter>())?)
            }
            SCI_Q_SYSTEM => {
                flags(fl, 0)?;
                let q = get_in(data.cast::<QuerySystem>())?;
                let v = match q.subcommand {
                    SCI_Q_SYSTEM_HOSTBRIDGE => HOSTBRIDGE_UNKNOWN,
                    SCI_Q_SYSTEM_WRITE_POSTING_ENABLED => 1,
                    SCI_Q_SYSTEM_WRITE_COMBINING_ENABLED => 1,
                    SCI_Q_SYSTEM_CPU_CACHE_LINE_SIZE => cache_line_size(),
                    _ => return fail(SCI_ERR_ILLEGAL_QUERY),
                };
                put(q.data.cast::<c_uint>(), v)
            }
            SCI_Q_LOCAL_SEGMENT | SCI_Q_REMOTE_SEGMENT => {
                flags(fl, 0)?;
                let q = get_in(data.cast::<QuerySegment>())?;
                match (command, q.subcommand) {
                    (SCI_Q_LOCAL_SEGMENT, SCI_Q_LOCAL_SEGMENT_IOADDR) => {
                        registry::get::<crate::segment::LSeg>(q.segment)?;
                    }
                    (SCI_Q_REMOTE_SEGMENT, SCI_Q_REMOTE_SEGMENT_IOADDR) => {
                        registry::get::<crate::segment::RSeg>(q.segment)?;
                    }
                    _ => return fail(SCI_ERR_ILLEGAL_QUERY),
                }
                // Segments of a software fabric have no address on an I/O bus.
                fail(SCI_ERR_NOT_SUPPORTED)
            }
            SCI_Q_MAP => {
                flags(fl, 0)?;
                let q = data.cast::<QueryMap>();
                let v = get_in(q)?;
                match v.subcommand {
                    SCI_Q_MAP_MAPPED_TO_LOCAL_TARGET | SCI_Q_MAP_QUERY_REMOTE_MAPPED_TO_LOCAL_TARGET => {
                        let m = registry::get::<crate::map::MapH>(v.map)?;
                        let local = u64::from(m.body.target_is_local());
                        // SAFETY: q was read above, so it points to a whole sci_query_map_t.
                        put(unsafe { std::ptr::addr_of_mut!((*q).data) }, local)
                    }
                    _ => fail(SCI_ERR_ILLEGAL_QUERY),
                }
            }
            SCI_Q_DMA => crate::dma::query(data.cast::<QueryDma>(), fl),
            _ => fail(SCI_ERR_ILLEGAL_QUERY),
        }
    })
}

fn query_adapter(q: QueryAdapter) -> SciResult<()> {
    adapter(q.local_adapter_no)?;
    let out = q.data.cast::<c_uint>();
    need(out)?;
    let config = FabricConfig::from_env();
    let usable = config.as_ref().is_ok_and(|c| c.dir.is_dir() || !c.dir.exists());
    let v: c_uint = match q.subcommand {
        SCI_Q_ADAPTER_NODEID => local_node()?.get(),
        SCI_Q_ADAPTER_CONFIGURED => c_uint::from(config.is_ok()),
        SCI_Q_ADAPTER_LINK_OPERATIONAL
        | SCI_Q_ADAPTER_HW_LINK_STATUS_IS_OK
        | SCI_Q_ADAPTER_LINK_ENABLED
        | SCI_Q_ADAPTER_LINK_CABLE_INSERTED
        | SCI_Q_ADAPTER_FIRMWARE_OK => c_uint::from(usable),
        SCI_Q_ADAPTER_CARD_TYPE => SCI_ADAPTER_TYPE_LANES,
        SCI_Q_ADAPTER_SERIAL_NUMBER => local_node()?.get(),
        SCI_Q_ADAPTER_NUMBER | SCI_Q_ADAPTER_INSTANCE_NUMBER | SCI_Q_ADAPTER_BDF => 0,
        SCI_Q_ADAPTER_NUMBER_OF_LINKS => 1,
        SCI_Q_ADAPTER_LINK_PARTNER_PORT_NO => 0,
        SCI_Q_ADAPTER_CONNECTED_TO_SWITCH => 0,
        // Shared memory has no lanes or signalling rate: report none.
        SCI_Q_ADAPTER_LINK_WIDTH | SCI_Q_ADAPTER_LINK_SPEED => 0,
        SCI_Q_ADAPTER_LINK_UPTIME => STARTED.get().map_or(0, |t| t.elapsed().as_secs() as c_uint),
        SCI_Q_ADAPTER_LINK_DOWNTIME => 0,
        SCI_Q_ADAPTER_ATT_PAGE_SIZE => page_size(),
        // Maps are not limited by translation table entries.
        SCI_Q_ADAPTER_ATT_NUMBER_OF_ENTRIES | SCI_Q_ADAPTER_ATT_AVAILABLE_ENTRIES => c_uint::MAX,
        SCI_Q_ADAPTER_NUMBER_OF_STREAMS => 0,
        SCI_Q_ADAPTER_STREAM_BUFFER_SIZE => 64,
        // Reflective groups a fabric holds at once.
        SCI_Q_ADAPTER_MCAST_MAX_GROUPS => lanes::fabric::MAX_GROUPS as c_uint,
        SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT
        | SCI_Q_ADAPTER_DMA_OFFSET_ALIGNMENT
        | SCI_Q_ADAPTER_DMA_MTU
        | SCI_Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE
        | SCI_Q_ADAPTER_SUGGESTED_MIN_BLOCK_SIZE => crate::dma::adapter_property(q.subcommand)?,
        _ => return fail(SCI_ERR_ILLEGAL_QUERY),
    };
    put(out, v)
}

fn page_size() -> c_uint {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as c_uint
    } else {
        4096
    }
}

fn cache_line_size() -> c_uint {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_LEVEL1_DCACHE_LINESIZE) };
    if n > 0 {
        n as c_uint
    } else {
        64
    }
}
