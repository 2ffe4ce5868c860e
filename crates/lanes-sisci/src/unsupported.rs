//! What a software fabric cannot do, and physical memory.
//!
//! - CSR access (`SCIGet/SetCSRRegister`, `SCIGet/SetLocalCSR`) reads and writes the control
//!   and status registers of SCI adapters, and `SCIConnectSCISpace` connects to a window of
//!   the global SCI address space: a PCIe or software fabric has neither. Each checks its
//!   descriptor and adapter, clears its out-handle and answers `SCI_ERR_NOT_SUPPORTED`.
//! - `SCIAttachPhysicalMemory` gives a segment created with `SCI_FLAG_EMPTY` memory that is
//!   already mapped: on Lanes, memory of the process at `address` (the bus address and bus
//!   number are not used), as `SCIRegisterSegmentMemory` does. Memory the CPU cannot reach
//!   (`address` NULL: a device's, known only by its bus address) and GPU or SCIF buffers
//!   answer `SCI_ERR_NOT_SUPPORTED`.
//!
//! Device lending (SmartIO) is in smartio.rs.

use std::ffi::{c_uint, c_void};

use crate::compat::SciAddress;
use crate::consts::*;
use crate::error::fail;
use crate::ffi::{adapter, call, flags, need};
use crate::node::desc;
use crate::registry;
use crate::segment::LSeg;

#[allow(clippy::too_many_arguments)]
pub(crate) fn attach_physical_memory(
    _ioaddr: u64,
    address: *mut c_void,
    _bus_no: c_uint,
    size: usize,
    segment: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    let ok = call(error, false, || {
        registry::get::<LSeg>(segment)?;
        flags(fl, SCI_FLAG_CUDA_BUFFER | SCI_FLAG_SCIF_BUFFER)?;
        if fl != 0 || address.is_null() {
            return fail(SCI_ERR_NOT_SUPPORTED);
        }
        Ok(true)
    });
    if ok {
        crate::segment::register_segment_memory(address, size, segment, 0, error);
    }
}

/// The checks every CSR call makes before it answers `SCI_ERR_NOT_SUPPORTED`.
fn csr<T>(sd: *mut c_void, adapter_no: c_uint, fl: c_uint) -> crate::error::SciResult<T> {
    desc(sd)?;
    flags(fl, 0)?;
    adapter(adapter_no)?;
    fail(SCI_ERR_NOT_SUPPORTED)
}

pub(crate) fn get_csr_register(
    sd: *mut c_void,
    adapter_no: c_uint,
    _node_id: c_uint,
    _offset: c_uint,
    fl: c_uint,
    error: *mut SciError,
) -> c_uint {
    call(error, 0, || csr(sd, adapter_no, fl))
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn set_csr_register(
    sd: *mut c_void,
    adapter_no: c_uint,
    _node_id: c_uint,
    _offset: c_uint,
    _value: c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || csr(sd, adapter_no, fl))
}

pub(crate) fn get_local_csr(
    sd: *mut c_void,
    adapter_no: c_uint,
    _offset: c_uint,
    fl: c_uint,
    error: *mut SciError,
) -> c_uint {
    call(error, 0, || csr(sd, adapter_no, fl))
}

pub(crate) fn set_local_csr(
    sd: *mut c_void,
    adapter_no: c_uint,
    _offset: c_uint,
    _value: c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || csr(sd, adapter_no, fl))
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_sci_space(
    sd: *mut c_void,
    adapter_no: c_uint,
    segment: *mut *mut c_void,
    _address: SciAddress,
    _size: c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        if !segment.is_null() {
            // SAFETY: the API's contract: a non-NULL out-handle points to a writable handle.
            unsafe { segment.write_unaligned(std::ptr::null_mut()) };
        }
        desc(sd)?;
        need(segment)?;
        flags(fl, 0)?;
        adapter(adapter_no)?;
        fail(SCI_ERR_NOT_SUPPORTED)
    })
}
