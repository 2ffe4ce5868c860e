//! The data of an interrupt object: one doorbell line, shared by its owner (who waits) and
//! its peers (who trigger).
//!
//! ```text
//! offset 0  doorbell sequence (u32)   4  sleepers (u32)   8  triggers not yet consumed (u64)
//! 64 + 8 * slot  the trigger count of the ofi sender holding connection slot `slot` (u64)
//! ```
//!
//! The count words are written only by remote senders' RMA (`transport::ofi::notify`) and
//! read by nobody on the data path: the owner counts the writes' completions, not the
//! words. They sit in bytes shm peers never touched, so the layout version is unchanged.

use std::sync::atomic::{AtomicU64, Ordering};

use super::segment_file::DataMapping;
use crate::platform::doorbell::Doorbell;

/// Bytes of an interrupt object's data.
pub const BELL_PAGE: u64 = 4096;
const SEQ: usize = 0;
const SLEEPERS: usize = 4;
const PENDING: usize = 8;
/// Where the trigger count word of connection slot 0's ofi sender lies; slot `i`'s is
/// `8 * i` further (see the module documentation).
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
pub const REMOTE_COUNTS: u64 = 64;

/// The doorbell page of an interrupt object, mapped.
#[derive(Debug)]
pub struct BellPage {
    map: DataMapping,
    bell: Doorbell,
}

impl BellPage {
    /// Views `map`, which must cover the object's whole data ([`BELL_PAGE`] bytes).
    pub fn new(map: DataMapping) -> Self {
        assert!(map.len() >= BELL_PAGE as usize, "an interrupt page of {} bytes", map.len());
        let p = map.as_ptr();
        // SAFETY: the words lie in the first line of the page-sized map (checked above), 4-
        // and 8-aligned (mappings are page aligned); the map lives in the same struct as the
        // doorbell and outlives it.
        let bell = unsafe { Doorbell::new(p.add(SEQ).cast(), p.add(SLEEPERS).cast()) };
        BellPage { map, bell }
    }

    /// The doorbell waiters sleep on.
    pub fn bell(&self) -> &Doorbell {
        &self.bell
    }

    /// Triggers received and not yet consumed.
    pub fn pending(&self) -> &AtomicU64 {
        // SAFETY: 8-aligned word inside the map, only accessed atomically by every process.
        unsafe { AtomicU64::from_ptr(self.map.as_ptr().add(PENDING).cast()) }
    }

    /// Consumes one trigger, if any is pending.
    pub fn take_one(&self) -> Option<()> {
        self.pending().fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| p.checked_sub(1)).ok().map(|_| ())
    }

    /// Counts one trigger and wakes a sleeping waiter (no system call unless one sleeps).
    #[inline]
    pub fn trigger(&self) {
        self.pending().fetch_add(1, Ordering::SeqCst);
        self.bell.ring();
    }
}
