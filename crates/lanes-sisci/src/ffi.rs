//! What every entry point shares: panics stopped at the boundary, the error out-parameter,
//! checked out-parameters, flag and adapter checks, and C callbacks made sendable.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::consts::*;
use crate::error::{fail, failed, SciResult};

/// Runs an implementation, stopping panics; writes its code to `*error` if `error` is not
/// NULL; returns its value, or `default` when it failed. A failure becomes the thread's last
/// failure ([`crate::error::failed`]): nothing is recorded when the call succeeds, so the
/// path of a successful call is what it was.
///
/// `f` must be a closure written in the exported function's own implementation: its type
/// name says which function failed (see `IMPLS` in lib.rs).
#[inline]
pub fn call<T, F: FnOnce() -> SciResult<T>>(error: *mut SciError, default: T, f: F) -> T {
    let (value, code) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => (v, SCI_ERR_OK),
        Ok(Err(c)) => {
            failed(std::any::type_name::<F>(), c.0, None);
            (default, c.0)
        }
        Err(payload) => {
            failed(std::any::type_name::<F>(), SCI_ERR_SYSTEM, Some(&*payload));
            (default, SCI_ERR_SYSTEM)
        }
    };
    if !error.is_null() {
        // SAFETY: the API's contract: a non-NULL `error` points to a writable sci_error_t.
        unsafe { error.write(code) };
    }
    value
}

/// Runs an implementation that has no error argument, stopping panics.
#[inline]
pub fn call_quiet<T>(default: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(default)
}

/// Fails with `SCI_ERR_ILLEGAL_PARAMETER` if an out-parameter is NULL. Check before
/// creating anything, so that a bad call leaks nothing.
#[inline]
pub fn need<T>(p: *mut T) -> SciResult<()> {
    if p.is_null() {
        fail(SCI_ERR_ILLEGAL_PARAMETER)
    } else {
        Ok(())
    }
}

/// Writes an out-parameter checked with [`need`].
#[inline]
pub fn put<T>(p: *mut T, v: T) -> SciResult<()> {
    need(p)?;
    // SAFETY: the API's contract: a non-NULL out-parameter points to writable memory of
    // its type; NULL was refused above.
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Reads an in-parameter passed by pointer.
#[inline]
pub fn get_in<T: Copy>(p: *const T) -> SciResult<T> {
    if p.is_null() {
        return fail(SCI_ERR_ILLEGAL_PARAMETER);
    }
    // SAFETY: the API's contract: a non-NULL in-parameter points to a readable value.
    Ok(unsafe { p.read_unaligned() })
}

/// Refuses flags outside `allowed` (`SCI_ERR_ILLEGAL_FLAG`).
#[inline]
pub fn flags(given: u32, allowed: u32) -> SciResult<()> {
    if given & !allowed != 0 {
        fail(SCI_ERR_ILLEGAL_FLAG)
    } else {
        Ok(())
    }
}

/// Lanes has one adapter per node, number 0.
#[inline]
pub fn adapter(no: u32) -> SciResult<()> {
    match no {
        0 => Ok(()),
        1..32 => fail(SCI_ERR_NO_SUCH_ADAPTERNO),
        _ => fail(SCI_ERR_ILLEGAL_ADAPTERNO),
    }
}

/// A C callback's argument, carried to a library thread.
#[derive(Clone, Copy, Debug)]
pub struct CbArg(pub *mut c_void);

// SAFETY: the argument is the program's; the API hands it to the program's callback on a
// library thread, as SISCI documents. We never dereference it.
unsafe impl Send for CbArg {}
// SAFETY: as above; shared only to be passed back.
unsafe impl Sync for CbArg {}

impl CbArg {
    /// The argument (a method, so that closures capture the whole sendable wrapper).
    #[inline]
    pub fn ptr(self) -> *mut c_void {
        self.0
    }
}

/// Whether a callback asked to be kept.
#[inline]
pub fn keep(action: u32) -> lanes::fabric::CallbackAction {
    if action == SCI_CALLBACK_CANCEL {
        lanes::fabric::CallbackAction::Cancel
    } else {
        lanes::fabric::CallbackAction::Continue
    }
}
