//! The data of a data interrupt object: the receiver's doorbell and one single-producer
//! ring per connection slot, shared by the owner (who receives) and its peers (who send).
//!
//! ```text
//! page 0    line 0: receiver doorbell (seq, sleepers)   line 1: active-ring bitmap (128 bits)
//! ring i    at 4096 + i * RING_BYTES:
//!           line 0: tail (sender)  line 1: head (receiver)  line 2: space doorbell
//!           then RING_CAP entries: a 64-byte header (sequence word, length), 4096 bytes of payload
//! ```
//!
//! A message is published by its entry's sequence word (message number + 1), stored last
//! with release ordering; the receiver reads only the entry, one line fewer than reading a
//! separate tail. The sender records its tail afterwards, for whoever inherits its slot: a
//! new sender continues past any entry already published beyond the recorded tail. (A
//! remote sender's entry is placed by the provider's plain copies, in address order; see
//! `transport::ofi::notify` for why that suffices.)
//!
//! A sender on another host (transport `ofi`, `transport::ofi::notify`) writes an entry by
//! RMA in one of two ways. Where the provider places an operation's ranges in the order
//! named, it writes the length and payload and then the sequence word, as a local sender
//! does; the owner's process learns of it only by looking: after every progress pass it
//! moves the recorded tails past what arrived and rings the receiver's doorbell
//! ([`Rings::advance_recorded_tails`]). Elsewhere it writes the length and payload with
//! remote completion data and never the sequence word, and the owner's completion handler
//! publishes the entry ([`Rings::publish`]).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::layout::MAX_CONNECTIONS;
use super::segment_file::DataMapping;
use crate::error::{Error, Result};
use crate::platform::doorbell::{Doorbell, WaitError};
use crate::platform::SharedSlice;
use crate::transport::Timeout;

/// The largest payload of one data interrupt.
pub const MAX_DATA_INTERRUPT_PAYLOAD: usize = 4096;

pub const PAGE: usize = 4096;
pub const BELL_SEQ: usize = 0;
pub const BELL_SLEEPERS: usize = 4;
pub const ACTIVE_MASK: usize = 64;
pub const RING_TAIL: usize = 0;
pub const RING_HEAD: usize = 64;
pub const RING_SPACE_SEQ: usize = 128;
pub const RING_SPACE_SLEEPERS: usize = 132;
pub const RING_ENTRIES: usize = 192;
pub const ENTRY_HEADER: usize = 64;
/// Within an entry header: the sequence word, then the length.
pub const ENTRY_SEQ: usize = 0;
pub const ENTRY_LEN: usize = 8;
pub const ENTRY_BYTES: usize = ENTRY_HEADER + MAX_DATA_INTERRUPT_PAYLOAD;
/// Messages a sender may have queued before it must wait.
pub const RING_CAP: u64 = 16;
pub const RING_BYTES: usize = (RING_ENTRIES + RING_CAP as usize * ENTRY_BYTES).div_ceil(PAGE) * PAGE;
pub const OBJECT_BYTES: u64 = (PAGE + MAX_CONNECTIONS * RING_BYTES) as u64;
/// Why a checked access to the object's words and rings cannot fail: their offsets come from the
/// fixed layout here, aligned and inside the object's mapping.
const LAYOUT: &str = "the object's layout lies inside its mapping";
// The active-ring bitmap holds every slot in two words.
const _: () = assert!(MAX_CONNECTIONS <= 128);

/// The mapped object, with typed access to its words.
#[derive(Debug)]
pub struct Rings {
    map: DataMapping,
}

impl Rings {
    /// Views `map`, which must cover the whole object ([`OBJECT_BYTES`]).
    pub fn new(map: DataMapping) -> Rings {
        assert!(map.len() as u64 >= OBJECT_BYTES, "a data interrupt of {} bytes", map.len());
        Rings { map }
    }

    /// The object's bytes.
    pub fn slice(&self) -> SharedSlice<'_> {
        self.map.slice()
    }

    pub fn word64(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.map.len());
        // Every caller passes an 8-aligned offset inside the map (the layout above); these
        // words are only accessed atomically by every process.
        self.map.slice().atomic_u64(off).expect(LAYOUT)
    }

    pub fn word32(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= self.map.len());
        // As for word64, 4-aligned.
        self.map.slice().atomic_u32(off).expect(LAYOUT)
    }

    pub fn bell(&self) -> Doorbell {
        // SAFETY: both words lie in page 0 of the map, which outlives every doorbell we make
        // (doorbells are used only while `self` lives, or registered with the connection
        // that owns the map).
        unsafe { Doorbell::new(self.word32(BELL_SEQ).as_ptr(), self.word32(BELL_SLEEPERS).as_ptr()) }
    }

    pub fn ring(i: usize) -> usize {
        PAGE + i * RING_BYTES
    }

    pub fn space_bell(&self, i: usize) -> Doorbell {
        let r = Self::ring(i);
        // SAFETY: as for bell(); the words lie in ring i, inside the map.
        unsafe {
            Doorbell::new(self.word32(r + RING_SPACE_SEQ).as_ptr(), self.word32(r + RING_SPACE_SLEEPERS).as_ptr())
        }
    }

    pub fn entry(i: usize, seq: u64) -> usize {
        Self::ring(i) + RING_ENTRIES + (seq % RING_CAP) as usize * ENTRY_BYTES
    }

    /// The active rings, in order from ring `from` on (round robin), each once. Bits of the
    /// bitmap past the last slot name no ring and are skipped (the bitmap is memory peers
    /// can write).
    pub fn active_slots(&self, from: usize) -> impl Iterator<Item = usize> {
        let a = self.word64(ACTIVE_MASK).load(Ordering::Acquire);
        let b = self.word64(ACTIVE_MASK + 8).load(Ordering::Acquire);
        let bits = u128::from(b) << 64 | u128::from(a);
        let bits = bits & (u128::MAX >> (u128::BITS as usize - MAX_CONNECTIONS));
        let from = from % MAX_CONNECTIONS;
        // Rotated so that bit 0 is ring `from`: the rings from `from` up, then the rest.
        let mut rest = bits.rotate_right(from as u32);
        std::iter::from_fn(move || {
            (rest != 0).then(|| {
                let i = (from + rest.trailing_zeros() as usize) % u128::BITS as usize;
                rest &= rest - 1;
                i
            })
        })
    }

    /// The active-ring bitmap word of ring `slot`, and its bit there.
    fn active_bit(slot: usize) -> (usize, u64) {
        if slot < 64 {
            (ACTIVE_MASK, 1 << slot)
        } else {
            (ACTIVE_MASK + 8, 1 << (slot - 64))
        }
    }

    /// Marks ring `slot` active and settles its tail for a new holder of the slot: past the
    /// recorded tail and any entry an earlier holder published beyond it (it may have died
    /// before recording it). Records the settled tail and returns it with the head; rings
    /// the receiver's doorbell if it passed an entry (nobody may have rung for it).
    pub fn settle(&self, slot: usize) -> (u64, u64) {
        let (word, bit) = Self::active_bit(slot);
        self.word64(word).fetch_or(bit, Ordering::SeqCst);
        let (tail, head, passed) = self.advance_tail(slot);
        if passed {
            self.bell().ring();
        }
        (tail, head)
    }

    /// Moves ring `slot`'s recorded tail past the entries published in a row beyond it, by
    /// compare-and-swap (whoever moves it concurrently is never undone), and returns the
    /// tail, the head it was judged against and whether it passed an entry. A recorded tail
    /// not within `head..=head + RING_CAP` (left behind by a sender that does not record
    /// it, or damaged) counts from the head: everything before the head was taken.
    fn advance_tail(&self, slot: usize) -> (u64, u64, bool) {
        let tail_word = self.word64(Self::ring(slot) + RING_TAIL);
        let head_word = self.word64(Self::ring(slot) + RING_HEAD);
        loop {
            let recorded = tail_word.load(Ordering::SeqCst);
            let head = head_word.load(Ordering::SeqCst);
            let start = if recorded.wrapping_sub(head) > RING_CAP { head } else { recorded };
            let mut end = start;
            while end.wrapping_sub(head) < RING_CAP
                && self.word64(Self::entry(slot, end) + ENTRY_SEQ).load(Ordering::Acquire) == end.wrapping_add(1)
            {
                end = end.wrapping_add(1);
            }
            if end == recorded || tail_word.compare_exchange(recorded, end, Ordering::SeqCst, Ordering::SeqCst).is_ok()
            {
                return (end, head, end != start);
            }
        }
    }

    /// For senders that publish by writing sequence words over RMA (which tells nobody):
    /// moves each active ring's recorded tail past the entries published beyond it, and rings
    /// the receiver's doorbell when any were. Cheap when nothing arrived (a few loads per
    /// active ring), so it can run after every progress pass. Several callers may race: the
    /// tail only moves forward, and whoever moves it past an entry rings. The caller must
    /// have seen the entries' writes land (a progress pass of its own).
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub fn advance_recorded_tails(&self) {
        // Every active ring is looked at (no short-circuit): each may have news.
        let passed = self.active_slots(0).fold(false, |passed, slot| self.advance_tail(slot).2 | passed);
        if passed {
            self.bell().ring();
        }
    }

    /// Publishes message `n` of ring `slot`, whose length word and payload someone else put
    /// in place (an RMA write the caller has seen complete), as [`Sender::send`] publishes
    /// its own: the entry's sequence word, then the recorded tail. The caller publishes the
    /// messages of one ring one at a time and in order, then rings [`Rings::bell`].
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))]
    pub fn publish(&self, slot: usize, n: u64) {
        let (word, bit) = Self::active_bit(slot);
        if self.word64(word).load(Ordering::Relaxed) & bit == 0 {
            self.word64(word).fetch_or(bit, Ordering::SeqCst);
        }
        self.word64(Self::entry(slot, n) + ENTRY_SEQ).store(n.wrapping_add(1), Ordering::SeqCst);
        self.word64(Self::ring(slot) + RING_TAIL).store(n.wrapping_add(1), Ordering::SeqCst);
    }
}

/// The sending side of one connection: the ring of its connection slot.
#[derive(Debug)]
pub struct Sender {
    rings: Rings,
    /// The connection slot, which is the ring's index.
    slot: usize,
    /// The lock keeps the ring single-producer when several threads send through one
    /// connection.
    send: Mutex<SendState>,
}

#[derive(Debug)]
struct SendState {
    /// The receiver's head as last read: room is re-checked against the shared head (a line
    /// the receiver writes) only when this view says the ring is full.
    head_seen: u64,
    /// The number of the next message.
    tail: u64,
}

impl Sender {
    /// Takes over the ring of connection `slot`: marks it active and continues after
    /// whatever an earlier holder of the slot published.
    pub fn attach(rings: Rings, slot: usize) -> Sender {
        // Continue after whatever an earlier holder of the slot published, including an entry
        // it published but died before recording in the tail.
        let (tail, head_seen) = rings.settle(slot);
        Sender { rings, slot, send: Mutex::new(SendState { head_seen, tail }) }
    }

    /// The doorbell this sender sleeps on while its ring is full.
    pub fn space_bell(&self) -> Doorbell {
        self.rings.space_bell(self.slot)
    }

    /// Queues `data` (at most [`MAX_DATA_INTERRUPT_PAYLOAD`] bytes) and wakes the receiver.
    /// `check` fails once the connection is lost; it is called before sending and while
    /// waiting for room. A ring still full after `timeout` gives `full()`.
    pub fn send(
        &self,
        data: &[u8],
        timeout: Timeout,
        poll: Duration,
        check: impl Fn() -> Result<()>,
        full: impl FnOnce() -> Error,
    ) -> Result<()> {
        if data.len() > MAX_DATA_INTERRUPT_PAYLOAD {
            return Err(Error::PayloadTooLarge { len: data.len(), max: MAX_DATA_INTERRUPT_PAYLOAD });
        }
        let mut st = self.send.lock().unwrap_or_else(|e| e.into_inner());
        let slot = self.slot;
        check()?;
        let r = &self.rings;
        let base = Rings::ring(slot);
        let tail = st.tail;
        if tail.wrapping_sub(st.head_seen) >= RING_CAP {
            let room = || {
                let h = r.word64(base + RING_HEAD).load(Ordering::SeqCst);
                (tail.wrapping_sub(h) < RING_CAP).then_some(h)
            };
            let lost = || check().err();
            match r.space_bell(slot).wait(room, lost, poll, timeout.deadline()) {
                Ok(h) => st.head_seen = h,
                Err(WaitError::Aborted(e)) => return Err(e),
                Err(WaitError::TimedOut) => return Err(full()),
            }
        }
        let entry = Rings::entry(slot, tail);
        r.word32(entry + ENTRY_LEN).store(data.len() as u32, Ordering::Relaxed);
        // The entry's payload area (4096 bytes) lies inside ring `slot` in the map, and data
        // is at most 4096 bytes (checked above).
        r.slice().copy_from(entry + ENTRY_HEADER, data).expect(LAYOUT);
        r.word64(entry + ENTRY_SEQ).store(tail.wrapping_add(1), Ordering::SeqCst);
        r.word64(base + RING_TAIL).store(tail.wrapping_add(1), Ordering::Relaxed);
        st.tail = tail.wrapping_add(1);
        r.bell().ring();
        Ok(())
    }
}
