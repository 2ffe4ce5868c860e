//! The holders of a socket's shared record (a TCP connection end's, a UDP socket's): the
//! processes with a descriptor of the socket (the one that made it, children that
//! inherited it across fork, programs that got it across exec), as identities (pid and
//! start time) in a fixed row of slots in the record.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::platform::liveness::ProcessIdentity;
use crate::platform::SharedSlice;

/// Holder slots per record: 8 bytes each, one cache line.
pub const HOLDER_SLOTS: usize = 8;

/// Whether the process `who` names still holds the socket: it runs (an exited process not
/// yet reaped closed its sockets as it exited).
fn alive(who: ProcessIdentity) -> bool {
    who.is_running()
}

/// A record's holder slots: [`HOLDER_SLOTS`] words from an 8-aligned offset of its mapping.
pub struct HolderSlots<'a> {
    record: SharedSlice<'a>,
    at: usize,
}

impl<'a> HolderSlots<'a> {
    /// The slots at `at` in `record` (8-aligned, [`HOLDER_SLOTS`] words inside it).
    pub fn new(record: SharedSlice<'a>, at: usize) -> HolderSlots<'a> {
        HolderSlots { record, at }
    }

    /// Slot `i`.
    pub fn slot(&self, i: usize) -> &'a AtomicU64 {
        self.record.header_u64(self.at + 8 * i)
    }

    /// Records `who` as a holder (idempotent), in a free slot or one of a dead holder.
    /// False if every slot is taken by a live holder. An empty slot is taken first: asking
    /// /proc whether a holder lives costs a file read, and a fork adds a holder to every
    /// socket the parent has.
    ///
    /// Two processes may add the same identity at once (a forking parent adds its child,
    /// and the child adds itself): after filling a slot, each looks at every other slot
    /// and, for each copy of the identity, empties the later of the two slots. The stores
    /// and loads are sequentially consistent, so of two adders at least one sees the
    /// other's copy; the first slot holding the identity is never emptied.
    pub fn add(&self, who: ProcessIdentity) -> bool {
        let me = who.bits();
        if (0..HOLDER_SLOTS).any(|i| self.slot(i).load(Ordering::Acquire) == me) {
            return true;
        }
        let dedupe = |k: usize| {
            for m in (0..HOLDER_SLOTS).filter(|&m| m != k) {
                if self.slot(m).load(Ordering::SeqCst) == me {
                    let later = self.slot(m.max(k));
                    let _ = later.compare_exchange(me, 0, Ordering::SeqCst, Ordering::Relaxed);
                }
            }
            true
        };
        for i in 0..HOLDER_SLOTS {
            if self.slot(i).compare_exchange(0, me, Ordering::SeqCst, Ordering::Acquire).is_ok() {
                return dedupe(i);
            }
        }
        for i in 0..HOLDER_SLOTS {
            let s = self.slot(i);
            let cur = s.load(Ordering::Acquire);
            let free = ProcessIdentity::from_bits(cur).is_none_or(|h| !alive(h));
            if free && s.compare_exchange(cur, me, Ordering::SeqCst, Ordering::Acquire).is_ok() {
                return dedupe(i);
            }
        }
        false
    }

    /// Removes `who`; returns how many live holders remain.
    pub fn remove(&self, who: ProcessIdentity) -> usize {
        let mut live = 0;
        for i in 0..HOLDER_SLOTS {
            let s = self.slot(i);
            let cur = s.load(Ordering::Acquire);
            if cur == who.bits() {
                let _ = s.compare_exchange(cur, 0, Ordering::AcqRel, Ordering::Acquire);
            } else if ProcessIdentity::from_bits(cur).is_some_and(alive) {
                live += 1;
            }
        }
        live
    }

    /// Whether `who` is the only holder: no other slot is taken, or (if `ask_liveness`)
    /// every other one by a process that is gone (asked of /proc only then).
    pub fn held_only_by(&self, who: ProcessIdentity, ask_liveness: bool) -> bool {
        let me = who.bits();
        let mut mine = false;
        let mut others = false;
        for i in 0..HOLDER_SLOTS {
            match self.slot(i).load(Ordering::SeqCst) {
                0 => {}
                h if h == me => mine = true,
                _ => others = true,
            }
        }
        mine && (!others || ask_liveness && self.live() == [who])
    }

    /// The live holders.
    pub fn live(&self) -> Vec<ProcessIdentity> {
        (0..HOLDER_SLOTS)
            .filter_map(|i| ProcessIdentity::from_bits(self.slot(i).load(Ordering::Acquire)))
            .filter(|&h| alive(h))
            .collect()
    }
}
