//! Interrupts (doorbells) and data interrupts (doorbells with a message).

use std::ffi::{c_uint, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lanes::fabric::{
    CallbackAction, LocalDataInterrupt, LocalInterrupt, RemoteDataInterrupt, RemoteInterrupt,
    MAX_DATA_INTERRUPT_PAYLOAD,
};
use lanes::Timeout;

use crate::consts::*;
use crate::error::{fail, SciResult};
use crate::ffi::{adapter, call, flags, get_in, keep, need, put, CbArg};
use crate::node::desc;
use crate::registry::{self, Object};

/// `sci_cb_interrupt_t`.
pub type InterruptCb = Option<unsafe extern "C" fn(*mut c_void, *mut c_void, SciError) -> u32>;
/// `sci_cb_data_interrupt_t`.
pub type DataInterruptCb = Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut c_void, c_uint, SciError) -> u32>;

/// `sci_local_interrupt_t`.
pub struct LInt {
    int: LocalInterrupt,
    callback_active: Arc<AtomicBool>,
}
impl Object for LInt {
    const MAGIC: u32 = 0x544E_494C; // "LINT"
}

/// `sci_remote_interrupt_t`.
pub struct RInt {
    int: RemoteInterrupt,
}
impl Object for RInt {
    const MAGIC: u32 = 0x544E_4952; // "RINT"
}

/// `sci_local_data_interrupt_t`.
pub struct LDInt {
    int: LocalDataInterrupt,
    callback_active: Arc<AtomicBool>,
}
impl Object for LDInt {
    const MAGIC: u32 = 0x4954_444C; // "LDTI"
}

/// `sci_remote_data_interrupt_t`.
pub struct RDInt {
    int: RemoteDataInterrupt,
}
impl Object for RDInt {
    const MAGIC: u32 = 0x4954_4452; // "RDTI"
}

const CREATE_FLAGS: u32 = SCI_FLAG_FIXED_INTNO
    | SCI_FLAG_USE_CALLBACK
    | SCI_FLAG_COUNTING_INT
    | SCI_FLAG_SHARED_INT
    | SCI_FLAG_CONDITIONAL_INTERRUPT;

/// The interrupt number asked for: the caller's with `SCI_FLAG_FIXED_INTNO`, else automatic.
fn wanted_number(interrupt_no: *mut c_uint, fl: u32) -> SciResult<Option<u32>> {
    flags(fl, CREATE_FLAGS)?;
    if fl & (SCI_FLAG_SHARED_INT | SCI_FLAG_CONDITIONAL_INTERRUPT) != 0 {
        return fail(SCI_ERR_FLAG_NOT_IMPLEMENTED);
    }
    need(interrupt_no)?;
    Ok(if fl & SCI_FLAG_FIXED_INTNO != 0 { Some(get_in(interrupt_no)?) } else { None })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn create_interrupt(
    sd: *mut c_void,
    interrupt: *mut *mut c_void,
    adapter_no: c_uint,
    interrupt_no: *mut c_uint,
    callback: InterruptCb,
    callback_arg: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let d = desc(sd)?;
        need(interrupt)?;
        adapter(adapter_no)?;
        let number = wanted_number(interrupt_no, fl)?;
        let int = d.body.fabric.create_interrupt(number)?;
        let no = int.number();
        let (p, h) = registry::insert(d.key(), 0, LInt { int, callback_active: Arc::default() });
        if let (true, Some(cb)) = (fl & SCI_FLAG_USE_CALLBACK != 0, callback) {
            let arg = CbArg(callback_arg);
            let key = h.key();
            let active = h.body.callback_active.clone();
            active.store(true, Ordering::Release);
            let started = h.body.int.on_trigger(move || {
                // SAFETY: the program registered this callback with SCI_FLAG_USE_CALLBACK and
                // its argument; SISCI calls it from a library thread with these arguments.
                let k = keep(unsafe { cb(arg.ptr(), key as *mut c_void, SCI_ERR_OK) });
                if k == CallbackAction::Cancel {
                    active.store(false, Ordering::Release);
                }
                k
            });
            if let Err(e) = started {
                drop(registry::write().take::<LInt>(p));
                return Err(e.into());
            }
        }
        put(interrupt_no, no)?;
        put(interrupt, p)
    })
}

pub(crate) fn remove_interrupt(interrupt: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        flags(fl, 0)?;
        let h = registry::write().take::<LInt>(interrupt)?;
        h.body.int.remove()?;
        Ok(())
    })
}

pub(crate) fn wait_for_interrupt(interrupt: *mut c_void, timeout: c_uint, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        let h = registry::get::<LInt>(interrupt)?;
        flags(fl, 0)?;
        if h.body.callback_active.load(Ordering::Acquire) {
            return fail(SCI_ERR_ILLEGAL_OPERATION);
        }
        Ok(h.body.int.wait(Timeout::from_millis(timeout))?)
    })
}

fn check_node(node_id: u32) -> SciResult<()> {
    if node_id == DIS_BROADCAST_NODEID_GROUP_ALL {
        return fail(SCI_ERR_NOT_SUPPORTED);
    }
    lanes::NodeId::new(node_id)?;
    Ok(())
}

/// Connects to a remote interrupt of either kind with `connect` and hands out its handle: the
/// checks and registration `SCIConnectInterrupt` and `SCIConnectDataInterrupt` share. (Each
/// of them runs it in its own `call`, which names the function in failure reports.)
fn connect_remote<T: Object>(
    sd: *mut c_void,
    interrupt: *mut *mut c_void,
    node_id: c_uint,
    adapter_no: c_uint,
    fl: c_uint,
    connect: impl FnOnce(&lanes::Fabric) -> SciResult<T>,
) -> SciResult<()> {
    let d = desc(sd)?;
    need(interrupt)?;
    flags(fl, 0)?;
    adapter(adapter_no)?;
    check_node(node_id)?;
    let body = connect(&d.body.fabric)?;
    let (p, _) = registry::insert(d.key(), 0, body);
    put(interrupt, p)
}

/// Disconnects a remote interrupt of either kind (`SCIDisconnect[Data]Interrupt`).
fn disconnect_remote<T: Object>(interrupt: *mut c_void, fl: c_uint) -> SciResult<()> {
    flags(fl, 0)?;
    drop(registry::write().take::<T>(interrupt)?);
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_interrupt(
    sd: *mut c_void,
    interrupt: *mut *mut c_void,
    node_id: c_uint,
    adapter_no: c_uint,
    interrupt_no: c_uint,
    timeout: c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        connect_remote(sd, interrupt, node_id, adapter_no, fl, |f| {
            Ok(RInt { int: f.connect_interrupt(node_id, interrupt_no, Timeout::from_millis(timeout))? })
        })
    })
}

pub(crate) fn disconnect_interrupt(interrupt: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || disconnect_remote::<RInt>(interrupt, fl))
}

pub(crate) fn trigger_interrupt(interrupt: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        let h = registry::get::<RInt>(interrupt)?;
        flags(fl, 0)?;
        Ok(h.body.int.trigger()?)
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn create_data_interrupt(
    sd: *mut c_void,
    interrupt: *mut *mut c_void,
    adapter_no: c_uint,
    interrupt_no: *mut c_uint,
    callback: DataInterruptCb,
    callback_arg: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let d = desc(sd)?;
        need(interrupt)?;
        adapter(adapter_no)?;
        let number = wanted_number(interrupt_no, fl)?;
        let int = d.body.fabric.create_data_interrupt(number)?;
        let no = int.number();
        let (p, h) = registry::insert(d.key(), 0, LDInt { int, callback_active: Arc::default() });
        // A callback is used only with SCI_FLAG_USE_CALLBACK (the vendor's sisci_api.h:
        // "SCI_FLAG_USE_CALLBACK - The callback function will be invoked for events"); one
        // passed without it is not called and SCIWaitForDataInterrupt works, as programs
        // written for the hardware rely on (kritjo/sisci-perf, peer/peer_main.c, creates its
        // benchmark data interrupts with its order callback and no flags, and the callback
        // would kill the peer on their 1-byte messages).
        if let (true, Some(cb)) = (fl & SCI_FLAG_USE_CALLBACK != 0, callback) {
            let arg = CbArg(callback_arg);
            let key = h.key();
            let active = h.body.callback_active.clone();
            active.store(true, Ordering::Release);
            let started = h.body.int.on_message(move |msg: &[u8]| {
                // SAFETY: the program registered this callback with SCI_FLAG_USE_CALLBACK and
                // its argument; the message buffer is valid for `len` bytes during the call.
                let action = unsafe {
                    cb(arg.ptr(), key as *mut c_void, msg.as_ptr() as *mut c_void, msg.len() as c_uint, SCI_ERR_OK)
                };
                let k = keep(action);
                if k == CallbackAction::Cancel {
                    active.store(false, Ordering::Release);
                }
                k
            });
            if let Err(e) = started {
                drop(registry::write().take::<LDInt>(p));
                return Err(e.into());
            }
        }
        put(interrupt_no, no)?;
        put(interrupt, p)
    })
}

pub(crate) fn remove_data_interrupt(interrupt: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        flags(fl, 0)?;
        let h = registry::write().take::<LDInt>(interrupt)?;
        h.body.int.remove()?;
        Ok(())
    })
}

pub(crate) fn wait_for_data_interrupt(
    interrupt: *mut c_void,
    data: *mut c_void,
    length: *mut c_uint,
    timeout: c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let h = registry::get::<LDInt>(interrupt)?;
        flags(fl, 0)?;
        let cap = get_in(length)? as usize;
        if data.is_null() && cap > 0 {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        if h.body.callback_active.load(Ordering::Acquire) {
            return fail(SCI_ERR_ILLEGAL_OPERATION);
        }
        let mut empty = [0u8; 0];
        let buf: &mut [u8] = if cap == 0 {
            &mut empty
        } else {
            // SAFETY: SCIWaitForDataInterrupt's contract: `data` holds `*length` writable bytes.
            unsafe { std::slice::from_raw_parts_mut(data.cast::<u8>(), cap) }
        };
        match h.body.int.wait(buf, Timeout::from_millis(timeout)) {
            Ok(n) => put(length, n as c_uint),
            Err(lanes::Error::BufferTooSmall { needed, .. }) => {
                put(length, needed as c_uint)?;
                fail(SCI_ERR_OVERFLOW)
            }
            Err(e) => Err(e.into()),
        }
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn connect_data_interrupt(
    sd: *mut c_void,
    interrupt: *mut *mut c_void,
    node_id: c_uint,
    adapter_no: c_uint,
    interrupt_no: c_uint,
    timeout: c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        connect_remote(sd, interrupt, node_id, adapter_no, fl, |f| {
            Ok(RDInt { int: f.connect_data_interrupt(node_id, interrupt_no, Timeout::from_millis(timeout))? })
        })
    })
}

pub(crate) fn disconnect_data_interrupt(interrupt: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || disconnect_remote::<RDInt>(interrupt, fl))
}

pub(crate) fn trigger_data_interrupt(
    interrupt: *mut c_void,
    data: *mut c_void,
    length: c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let h = registry::get::<RDInt>(interrupt)?;
        flags(fl, 0)?;
        let len = length as usize;
        if len > MAX_DATA_INTERRUPT_PAYLOAD {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        if data.is_null() && len > 0 {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        let msg: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: SCITriggerDataInterrupt's contract: `data` holds `length` readable bytes.
            unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }
        };
        // A full queue fails at once with SCI_ERR_NOSPC, as the vendor's does: programs
        // written for it trigger in a loop and count SCI_ERR_NOSPC as a dropped message
        // (kritjo/sisci-perf, lib/common_read_write_functions.h, trigger_data_interrupt: a
        // timed loop of triggers to a receiver that never waits, "failed with error code
        // SCI_ERR_NOSPC one or more times"); a trigger that blocked would stall them.
        Ok(h.body.int.trigger(msg, Timeout::Immediate)?)
    })
}
