//! Interrupt flags and conditional interrupts (`SCIRegisterInterruptFlag`,
//! `SCIEnable/DisableConditionalInterrupt`, `SCIGetConditionalInterruptTrigCounter`).
//!
//! The vendor documents an interrupt flag as a location in a local segment that remote nodes
//! trigger by stores through a conditional-interrupt map; with `SCI_FLAG_CONDITIONAL_INTERRUPT`
//! a trigger raises an interrupt only when the flag is enabled, every trigger is counted, and
//! enabling fails with `SCI_ERR_COND_INT_RACE_PROBLEM` when triggers came meanwhile.
//!
//! A software fabric cannot see a store, so here a flag is two interrupts of this node:
//!
//! - the *flag interrupt*, which remote nodes trigger: its number is written into the flag
//!   word (4 bytes at the registered offset of the segment), where a remote node reads it
//!   through its map of the segment before `SCIConnectInterrupt` and `SCITriggerInterrupt`;
//! - the *delivery interrupt*, an ordinary local interrupt made by `SCICreateInterrupt`
//!   (with the program's callback), which is the handle the program gets: it waits for it,
//!   removes it, and passes it to the enable/disable/counter calls.
//!
//! A library thread hears every trigger of the flag interrupt, counts it, and triggers the
//! delivery interrupt when the flag's state says so. Removing the delivery interrupt
//! (`SCIRemoveInterrupt`) ends the flag too: its next trigger, or the next call of this
//! module, finds the delivery interrupt gone and removes the flag interrupt.

use std::collections::HashMap;
use std::ffi::{c_uint, c_void};
use std::sync::{Arc, LazyLock, Mutex, PoisonError, Weak};

use lanes::fabric::{CallbackAction, LocalInterrupt, RemoteInterrupt};
use lanes::{MapAccess, Timeout};

use crate::consts::*;
use crate::error::{fail, Code, SciResult};
use crate::ffi::{adapter, call, call_quiet, flags, need, put};
use crate::interrupt::{InterruptCb, LInt};
use crate::node::desc;
use crate::registry::{self, Handle};
use crate::segment::LSeg;

/// What the enable/disable/counter calls change, and a trigger reads.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FlagState {
    /// Whether the next trigger is delivered (conditional flags only).
    pub enabled: bool,
    /// Triggers since the last enable or disable.
    pub count: u32,
    /// Whether `count` passed `u32::MAX`.
    pub overflow: bool,
    /// Triggers not delivered (the flag was disabled) since the last enable or disable.
    pub missed: u32,
}

impl FlagState {
    /// A trigger arrived: counts it; returns whether to deliver it. A conditional flag
    /// delivers only while enabled, and delivering disables it.
    pub fn trigger(&mut self, conditional: bool) -> bool {
        match self.count.checked_add(1) {
            Some(c) => self.count = c,
            None => self.overflow = true,
        }
        if !conditional {
            return true;
        }
        if self.enabled {
            self.enabled = false;
            true
        } else {
            self.missed = self.missed.saturating_add(1);
            false
        }
    }

    /// `SCIEnableConditionalInterrupt`: resets the count; fails (and stays disabled) if
    /// triggers came while the flag was disabled.
    pub fn enable(&mut self, conditional: bool) -> SciResult<()> {
        let raced = conditional && self.missed > 0;
        *self = FlagState { enabled: conditional && !raced, ..FlagState::default() };
        if raced {
            return fail(SCI_ERR_COND_INT_RACE_PROBLEM);
        }
        Ok(())
    }

    /// `SCIDisableConditionalInterrupt`: resets the count; no trigger is delivered until the
    /// flag is enabled again.
    pub fn disable(&mut self) {
        *self = FlagState::default();
    }

    /// `SCIGetConditionalInterruptTrigCounter`.
    pub fn counter(&self) -> SciResult<u32> {
        if self.overflow {
            return fail(SCI_ERR_OVERFLOW);
        }
        Ok(self.count)
    }
}

/// A registered interrupt flag.
struct Flag {
    /// The delivery interrupt, the program's handle.
    delivery: Weak<Handle<LInt>>,
    /// This node's connection to the delivery interrupt.
    forward: RemoteInterrupt,
    /// The flag interrupt, which remote nodes trigger.
    flag: LocalInterrupt,
    conditional: bool,
    state: Mutex<FlagState>,
}

impl Flag {
    fn state(&self) -> std::sync::MutexGuard<'_, FlagState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the program's handle is still the live delivery interrupt.
    fn alive(&self) -> bool {
        self.delivery.strong_count() > 0 && registry::get::<LInt>(self.delivery.as_ptr().cast()).is_ok()
    }
}

/// The flags, by the address of their delivery interrupt's handle.
static FLAGS: LazyLock<Mutex<HashMap<usize, Arc<Flag>>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Removes the flags whose delivery interrupt is gone (their flag interrupts with them).
fn purge() {
    let dead: Vec<Arc<Flag>> = {
        let mut all = FLAGS.lock().unwrap_or_else(PoisonError::into_inner);
        let keys: Vec<usize> = all.iter().filter(|(_, f)| !f.alive()).map(|(k, _)| *k).collect();
        keys.into_iter().filter_map(|k| all.remove(&k)).collect()
    };
    for f in dead {
        let _ = f.flag.remove();
    }
}

/// The flag whose delivery interrupt is `interrupt`.
fn flag_of(interrupt: *mut c_void) -> SciResult<Arc<Flag>> {
    purge();
    let h = registry::get::<LInt>(interrupt)?;
    let all = FLAGS.lock().unwrap_or_else(PoisonError::into_inner);
    match all.get(&(interrupt as usize)) {
        Some(f) if f.delivery.as_ptr() == Arc::as_ptr(&h) => Ok(f.clone()),
        // A local interrupt, but not one made by SCIRegisterInterruptFlag.
        _ => fail(SCI_ERR_ILLEGAL_OPERATION),
    }
}

/// What registration checks and makes before the delivery interrupt exists.
struct Prepared {
    sd: usize,
    fabric: lanes::Fabric,
    map: lanes::Map,
    flag: LocalInterrupt,
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn register_interrupt_flag(
    adapter_no: c_uint,
    interrupt: *mut *mut c_void,
    segment: *mut c_void,
    offset: c_uint,
    callback: InterruptCb,
    callback_arg: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    let prepared = call(error, None, || {
        purge();
        let l = registry::get::<LSeg>(segment)?;
        need(interrupt)?;
        flags(fl, SCI_FLAG_USE_CALLBACK | SCI_FLAG_CONDITIONAL_INTERRUPT)?;
        adapter(adapter_no)?;
        if l.body.is_group() {
            // A reflective group's memory is everyone's: no flag lives there.
            return fail(SCI_ERR_ILLEGAL_OPERATION);
        }
        if offset % 4 != 0 {
            return fail(SCI_ERR_OFFSET_ALIGNMENT);
        }
        let live = l.body.live()?;
        if u64::from(offset) + 4 > live.size() {
            return fail(SCI_ERR_OUT_OF_RANGE);
        }
        let d = desc(l.desc as *mut c_void)?;
        let map = live.map(u64::from(offset), 4, MapAccess::ReadWrite)?;
        let flag = d.body.fabric.create_interrupt(None)?;
        Ok(Some(Prepared { sd: d.key(), fabric: d.body.fabric.clone(), map, flag }))
    });
    let Some(p) = prepared else { return };

    // The delivery interrupt: an ordinary one, with the program's callback.
    let mut code = SCI_ERR_OK;
    let mut number: c_uint = 0;
    crate::interrupt::create_interrupt(
        p.sd as *mut c_void,
        interrupt,
        adapter_no,
        &mut number,
        callback,
        callback_arg,
        fl & SCI_FLAG_USE_CALLBACK,
        &mut code,
    );
    if code != SCI_ERR_OK {
        if !error.is_null() {
            // SAFETY: the API's contract: a non-NULL `error` points to a writable sci_error_t.
            unsafe { error.write(code) };
        }
        return;
    }
    call(error, (), || {
        // SAFETY: `interrupt` was checked non-NULL; SCICreateInterrupt just wrote it.
        let handle = unsafe { interrupt.read_unaligned() };
        let done = finish(p, handle, number, fl & SCI_FLAG_CONDITIONAL_INTERRUPT != 0);
        if done.is_err() {
            let mut ignored = SCI_ERR_OK;
            crate::interrupt::remove_interrupt(handle, 0, &mut ignored);
            // SAFETY: as above.
            unsafe { interrupt.write_unaligned(std::ptr::null_mut()) };
        }
        done
    })
}

/// Connects the flag to its delivery interrupt, publishes the flag's number and starts
/// hearing its triggers.
fn finish(p: Prepared, handle: *mut c_void, number: u32, conditional: bool) -> SciResult<()> {
    let h = registry::get::<LInt>(handle)?;
    let node = p.fabric.node_id().get();
    let forward = p.fabric.connect_interrupt(node, number, Timeout::from_millis(0))?;
    let flag = Arc::new(Flag {
        delivery: Arc::downgrade(&h),
        forward,
        flag: p.flag,
        conditional,
        state: Mutex::new(FlagState { enabled: true, ..FlagState::default() }),
    });
    p.map.store_release_u32(0, flag.flag.number())?;
    let weak = Arc::downgrade(&flag);
    flag.flag.on_trigger(move || {
        let Some(f) = weak.upgrade() else { return CallbackAction::Cancel };
        if !f.alive() {
            drop(f);
            purge();
            return CallbackAction::Cancel;
        }
        let deliver = f.state().trigger(f.conditional);
        if deliver && f.forward.trigger().is_err() {
            drop(f);
            purge();
            return CallbackAction::Cancel;
        }
        CallbackAction::Continue
    })?;
    FLAGS.lock().unwrap_or_else(PoisonError::into_inner).insert(handle as usize, flag);
    Ok(())
}

pub(crate) fn enable_conditional_interrupt(interrupt: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        let f = flag_of(interrupt)?;
        flags(fl, 0)?;
        let r = f.state().enable(f.conditional);
        r
    })
}

pub(crate) fn disable_conditional_interrupt(interrupt: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        let f = flag_of(interrupt)?;
        flags(fl, 0)?;
        f.state().disable();
        Ok(())
    })
}

pub(crate) fn get_conditional_interrupt_trig_counter(
    interrupt: *mut c_void,
    counter: *mut c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let f = flag_of(interrupt)?;
        need(counter)?;
        flags(fl, 0)?;
        let state = *f.state();
        match state.counter() {
            Ok(n) => put(counter, n),
            Err(Code(e)) => {
                put(counter, u32::MAX)?;
                fail(e)
            }
        }
    })
}

/// How many interrupt flags are registered (for tests).
pub fn registered_flags() -> usize {
    call_quiet(0, || {
        purge();
        FLAGS.lock().unwrap_or_else(PoisonError::into_inner).len()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_conditional_flag_delivers_once_per_enable_and_counts_every_trigger() {
        let mut s = FlagState { enabled: true, ..FlagState::default() };
        assert!(s.trigger(true), "enabled when registered");
        assert!(!s.trigger(true) && !s.trigger(true), "delivering disabled it");
        assert_eq!(s.counter(), Ok(3));
        assert_eq!(s.enable(true), Err(Code(SCI_ERR_COND_INT_RACE_PROBLEM)), "two came while disabled");
        assert_eq!((s.enabled, s.counter()), (false, Ok(0)));
        assert_eq!(s.enable(true), Ok(()));
        assert!(s.trigger(true));
        assert_eq!(s.enable(true), Ok(()), "nothing missed");
        s.disable();
        assert!(!s.trigger(true));
        assert_eq!(s.counter(), Ok(1));
        s.disable();
        assert_eq!(s.enable(true), Ok(()), "disable forgets what was missed");
    }

    #[test]
    fn an_unconditional_flag_delivers_every_trigger_and_overflow_is_reported() {
        let mut s = FlagState::default();
        assert!(s.trigger(false) && s.trigger(false));
        assert_eq!(s.enable(false), Ok(()));
        assert_eq!(s.counter(), Ok(0));
        let mut s = FlagState { count: u32::MAX, ..FlagState::default() };
        s.trigger(false);
        assert_eq!(s.counter(), Err(Code(SCI_ERR_OVERFLOW)));
        s.disable();
        assert_eq!(s.counter(), Ok(0));
    }
}
