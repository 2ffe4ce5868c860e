//! The rest of the vendor's API: the calls that reuse another call (named interrupts,
//! `SCIMemCpy_dual`, `SCIGetNodeInfoByAdapterName`), adapter strings, the PIO copy routine
//! switch, `sci_address_t`, and the list of the C layouts this library shares with programs
//! ([`C_LAYOUTS`], checked against `sizeof` by the SDK tests).

use std::ffi::{c_char, c_uint, c_void};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::consts::*;
use crate::ffi::{call, call_quiet, need};
use crate::map::MapH;
use crate::registry;

/// `sci_address_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct SciAddress {
    pub node_id: u16,
    pub offs_hi: u16,
    pub offs_lo: u32,
}

/// The sizes of the C structs this library reads or writes in the vendor's layout, for the
/// test that compares them with `sizeof` in C: (C type, size in bytes).
pub const C_LAYOUTS: &[(&str, usize)] = &[
    ("dis_dma_vec_t", std::mem::size_of::<crate::dma::DisDmaVec>()),
    ("sci_dma_capabilities_t", std::mem::size_of::<crate::dma::DmaCapabilities>()),
    ("sci_query_map_t", std::mem::size_of::<crate::node::QueryMap>()),
    ("sci_query_dma_t", std::mem::size_of::<crate::node::QueryDma>()),
    ("sci_query_system_t", std::mem::size_of::<crate::node::QuerySystem>()),
    ("sci_query_string_t", std::mem::size_of::<crate::node::QueryString>()),
    ("sci_address_t", std::mem::size_of::<SciAddress>()),
    ("sci_smartio_device_info_t", std::mem::size_of::<crate::smartio::DeviceInfo>()),
    ("sci_smartio_query_device_t", std::mem::size_of::<crate::smartio::QueryDevice>()),
];

/// The copy routine number `SetSciMemCopyFunction` set (`SCIMemCpy` uses the fabric's one
/// copy whatever it is).
static MEMCPY_FUNCTION: AtomicU32 = AtomicU32::new(0);

pub(crate) fn set_sci_mem_copy_function(function: c_uint) {
    MEMCPY_FUNCTION.store(function, Ordering::Relaxed);
}

pub(crate) fn get_sci_mem_copy_function() -> c_uint {
    MEMCPY_FUNCTION.load(Ordering::Relaxed)
}

// ---- Calls that reuse another ------------------------------------------------------------

/// Writes `code` to `*error` if `error` is not NULL.
fn report(error: *mut SciError, code: SciError) {
    if !error.is_null() {
        // SAFETY: the API's contract: a non-NULL `error` points to a writable sci_error_t.
        unsafe { error.write(code) };
    }
}

/// `SCIMemCpy_dual`: `SCIMemCpy` to `remote_map`, then the same to `remote_map2` (with
/// `SCI_FLAG_BLOCK_READ`, a read from `remote_map` only).
#[allow(clippy::too_many_arguments)]
pub(crate) fn mem_cpy_dual(
    sequence: *mut c_void,
    mem_addr: *mut c_void,
    remote_map: *mut c_void,
    remote_map2: *mut c_void,
    remote_offset: usize,
    size: usize,
    fl: c_uint,
    error: *mut SciError,
) {
    let ok = call(error, false, || {
        registry::get::<MapH>(remote_map)?;
        registry::get::<MapH>(remote_map2)?;
        Ok(true)
    });
    if !ok {
        return;
    }
    let mut code = SCI_ERR_OK;
    crate::map::mem_cpy(sequence, mem_addr, remote_map, remote_offset, size, fl, &mut code);
    if code == SCI_ERR_OK && fl & SCI_FLAG_BLOCK_READ == 0 {
        crate::map::mem_cpy(sequence, mem_addr, remote_map2, remote_offset, size, fl, &mut code);
    }
    report(error, code);
}

/// `SCICreateNamedInterrupt`: `SCICreateInterrupt` with the number the program gives.
#[allow(clippy::too_many_arguments)]
pub(crate) fn create_named_interrupt(
    sd: *mut c_void,
    interrupt: *mut *mut c_void,
    adapter_no: c_uint,
    interrupt_no: *mut c_uint,
    callback: crate::interrupt::InterruptCb,
    callback_arg: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    let fixed = fl | SCI_FLAG_FIXED_INTNO;
    crate::interrupt::create_interrupt(sd, interrupt, adapter_no, interrupt_no, callback, callback_arg, fixed, error);
}

/// `SCIGetNodeInfoByAdapterName`: `SCIGetNodeIdByAdapterName`, and adapter 0 for every
/// entry of the node id list.
pub(crate) fn get_node_info_by_adapter_name(
    name: *mut c_char,
    adapters: *mut c_uint,
    list: *mut [c_uint; DIS_MAX_NSCIS],
    kind: *mut c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    let ok = call(error, false, || {
        need(adapters)?;
        // SAFETY: the API's contract: `adapters` points to DIS_MAX_NSCIS entries.
        unsafe { adapters.cast::<[c_uint; DIS_MAX_NSCIS]>().write_unaligned([0; DIS_MAX_NSCIS]) };
        Ok(true)
    });
    if ok {
        crate::node::get_node_id_by_adapter_name(name, list, kind, fl, error);
    }
}

/// `SCIGetAdapterTypeString`.
pub(crate) fn adapter_type_string(adapter_type: c_uint) -> *const c_char {
    call_quiet(c"Unknown adapter type".as_ptr(), || {
        let s = match adapter_type {
            SCI_ADAPTER_TYPE_LANES => c"Lanes software adapter (shared memory between processes)",
            _ => c"Unknown adapter type",
        };
        s.as_ptr()
    })
}

/// `SCIGetAdapterFamilyString`.
pub(crate) fn adapter_family_string(adapter_type: c_uint) -> *const c_char {
    call_quiet(c"Unknown adapter family".as_ptr(), || {
        let s = match adapter_type {
            SCI_ADAPTER_TYPE_LANES => c"Lanes",
            _ => c"Unknown adapter family",
        };
        s.as_ptr()
    })
}

/// `SCIGetMapPhysAddr`: 0, the memory of a software fabric has no address to give; also 0
/// for a handle that is not a map.
pub(crate) fn get_map_phys_addr(map: *mut c_void) -> u64 {
    call_quiet(0, || {
        let _ = registry::get::<MapH>(map);
        0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vendor_layouts_have_the_vendor_sizes() {
        assert_eq!(std::mem::size_of::<crate::dma::DisDmaVec>(), 16);
        assert_eq!(std::mem::size_of::<crate::dma::DmaCapabilities>(), 32);
        assert_eq!(std::mem::size_of::<crate::node::QueryMap>(), 24);
        assert_eq!(std::mem::offset_of!(crate::node::QueryMap, data), 16);
        assert_eq!(std::mem::size_of::<SciAddress>(), 8);
    }
}
