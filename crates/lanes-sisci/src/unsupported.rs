//! What no software fabric can do: physical memory, device lending (SmartIO). Each call
//! checks its handles, clears its out-handle and answers `SCI_ERR_NOT_SUPPORTED`.

use std::ffi::{c_uint, c_ulonglong, c_void};

use crate::consts::*;
use crate::error::fail;
use crate::ffi::call;
use crate::registry;
use crate::segment::LSeg;

#[allow(clippy::too_many_arguments)]
pub(crate) fn attach_physical_memory(
    _ioaddr: u64,
    _address: *mut c_void,
    _bus_no: c_uint,
    _size: usize,
    segment: *mut c_void,
    _fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        registry::get::<LSeg>(segment)?;
        fail(SCI_ERR_NOT_SUPPORTED)
    })
}

fn clear(out: *mut *mut c_void) {
    if !out.is_null() {
        // SAFETY: the API's contract: a non-NULL out-handle points to a writable handle.
        unsafe { out.write(std::ptr::null_mut()) };
    }
}

pub(crate) fn borrow_device(
    _sd: *mut c_void,
    device: *mut *mut c_void,
    _fdid: c_ulonglong,
    _fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        clear(device);
        fail(SCI_ERR_NOT_SUPPORTED)
    })
}

pub(crate) fn return_device(_device: *mut c_void, _fl: c_uint, error: *mut SciError) {
    call(error, (), || fail(SCI_ERR_NOT_SUPPORTED))
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_device_segment(
    _device: *mut c_void,
    segment: *mut *mut c_void,
    _segment_id: c_uint,
    _memory_type: c_uint,
    _callback: crate::segment::RemoteSegmentCb,
    _callback_arg: *mut c_void,
    _fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        clear(segment);
        fail(SCI_ERR_NOT_SUPPORTED)
    })
}
