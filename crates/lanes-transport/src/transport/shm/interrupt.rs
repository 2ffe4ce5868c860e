//! The data of an interrupt object: one doorbell line, shared by its owner (who waits) and
//! its peers (who trigger).
//!
//! ```text
//! offset 0  doorbell sequence (u32)   4  sleepers (u32)   8  triggers not yet consumed (u64)
//! 64 + 8 * slot    the trigger count of the ofi sender in connection slot `slot` that
//!                  publishes by completion data (u64): a record, read by nobody
//! 1024 + 8 * slot  the trigger count of the ofi sender in connection slot `slot` that
//!                  publishes in place (u64): the owner counts its increases
//! 2048             the last arrival: slot << 57 | that slot's count, written after a count
//! ```
//!
//! The count and arrival words are written only by remote senders' RMA
//! (`transport::ofi::notify`), in bytes shm peers never touched, so the layout version is
//! unchanged. Where the provider fills the ranges of one write in order, a trigger is one
//! write of its slot's new count and then the arrival word; after each progress pass the
//! owner's process compares the arrival word with the last it saw, and only when it
//! changed adds up the count words' increases ([`BellPage::trigger_many`]). Elsewhere a
//! trigger is a write with completion data, and the owner counts completions.

use std::sync::atomic::{AtomicU64, Ordering};

use super::layout::MAX_CONNECTIONS;
use super::segment_file::DataMapping;
use crate::platform::doorbell::Doorbell;

/// Bytes of an interrupt object's data.
pub const BELL_PAGE: u64 = 4096;
const SEQ: usize = 0;
const SLEEPERS: usize = 4;
const PENDING: usize = 8;
/// Why a checked access to the object's words cannot fail: their offsets come from the
/// fixed layout here, aligned and inside the object's mapping.
const LAYOUT: &str = "the object's layout lies inside its mapping";
/// Where the trigger count word of connection slot 0's ofi sender lies; slot `i`'s is
/// `8 * i` further (see the module documentation).
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
pub const REMOTE_COUNTS: u64 = 64;
/// Where the watched trigger count word of connection slot 0's ofi sender lies; slot `i`'s
/// is `8 * i` further.
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
pub const WATCHED_COUNTS: u64 = 1024;
/// The arrival word (see the module documentation).
#[cfg_attr(not(feature = "ofi"), allow(dead_code))]
pub const ARRIVAL: u64 = 2048;
const _: () = assert!(REMOTE_COUNTS + 8 * MAX_CONNECTIONS as u64 <= WATCHED_COUNTS);
const _: () = assert!(WATCHED_COUNTS + 8 * MAX_CONNECTIONS as u64 <= ARRIVAL && ARRIVAL + 8 <= BELL_PAGE);

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
        let s = map.slice();
        let (seq, sleepers) = (s.atomic_u32(SEQ).expect(LAYOUT), s.atomic_u32(SLEEPERS).expect(LAYOUT));
        // SAFETY: the words lie in the first line of the page-sized map (checked above), 4-
        // aligned (checked); the map lives in the same struct as the doorbell and outlives it.
        let bell = unsafe { Doorbell::new(seq.as_ptr(), sleepers.as_ptr()) };
        BellPage { map, bell }
    }

    /// The doorbell waiters sleep on.
    pub fn bell(&self) -> &Doorbell {
        &self.bell
    }

    /// Triggers received and not yet consumed.
    pub fn pending(&self) -> &AtomicU64 {
        // Only accessed atomically by every process.
        self.map.slice().atomic_u64(PENDING).expect(LAYOUT)
    }

    /// Consumes one trigger, if any is pending.
    pub fn take_one(&self) -> Option<()> {
        self.pending().fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| p.checked_sub(1)).ok().map(|_| ())
    }

    /// Counts one trigger and wakes a sleeping waiter (no system call unless one sleeps).
    #[inline]
    pub fn trigger(&self) {
        self.trigger_many(1);
    }

    /// Counts `n` triggers and wakes the sleeping waiters (no system call unless one sleeps).
    #[inline]
    pub fn trigger_many(&self, n: u64) {
        self.pending().fetch_add(n, Ordering::SeqCst);
        self.bell.ring();
    }

    /// The 8-byte word at `offset` (a multiple of 8 below [`BELL_PAGE`]), for the words
    /// remote senders write.
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub fn word(&self, offset: u64) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= BELL_PAGE, "interrupt page word at {offset}");
        // Processes access it only atomically; the provider's placement of a remote write
        // is a plain copy, which may tear the value read but never makes the access unsound.
        self.map.slice().atomic_u64(offset as usize).expect(LAYOUT)
    }
}
