//! The state word of one direction of an accelerated stream, and its rules.
//!
//! A stream's bytes travel either through the shared-memory ring or through the kernel
//! connection. The sender counts both in one 64-bit word, changed only by compare-and-swap:
//!
//! ```text
//!  63    62       61..56     55..28    27..0
//!  ring  parked   sleepers   R         K
//! ```
//!
//! `R` is the number of bytes ever published into the ring and `K` the number ever reserved
//! for the kernel path, both modulo 2^28; the receiver keeps `H` (ring bytes consumed) and
//! `KR` (kernel bytes read) in its own record. The rules that keep the stream byte-exact:
//!
//! - the sender publishes into the ring only in ring mode; it may switch to kernel mode at
//!   any moment (ring full, nobody reading) by reserving kernel bytes;
//! - the receiver always reads ring bytes before kernel bytes; so at most one ring segment
//!   followed by one kernel segment exists at a time;
//! - only the receiver switches back to ring mode, and only when it has read every kernel
//!   byte (`K == KR`), the ring is empty, nobody sleeps, and the kernel holds nothing;
//! - a receiver about to sleep in the kernel switches to kernel mode and counts itself in
//!   `sleepers` with the same CAS that checks the ring is empty: if the sender published
//!   first the CAS fails and the receiver sees the data; if the receiver won, the sender's
//!   next bytes go through the kernel, which wakes the sleeper. No wake-up is lost;
//! - a receiver whose ring does not pay (nobody can spin for the next bytes) may *park* the
//!   direction: with the ring empty and the direction in kernel mode, one CAS sets `parked`,
//!   and while it is set nothing switches the direction back to ring mode. Its readers then
//!   read and wait in the kernel alone, without counting themselves sleepers (without
//!   touching this word, which lives on the sender's cache line). Only the receiver unparks,
//!   once it knows no reader of its own relies on the parking (see the accelerator's
//!   `Conn::hold_parked`).
//!
//! The sender also keeps a *view* of the word, on a cache line of its own: after each of
//! its own changes (a publish, a kernel reservation or its settling) it stores the word as
//! its compare-and-swap left it, with a plain store. Receivers poll the view, not the word,
//! while they wait for bytes: a receiver reading the word at every turn of a spin took the
//! word's line from the sender, and every publish then waited for it to come back (a third
//! of the send path's time at 64-byte messages). The view is never ahead of the word; it
//! lags it by a store (or, with one sender thread publishing while another reserves for the
//! kernel outside the send lock, by one change until the next), and it shows the receivers'
//! own changes (sleepers, parking, the switches of mode they make) only as the sender's
//! next change finds them. So a view is good for "bytes are there" and for skipping a look
//! the call may skip anyway; every decision the rules above rest on (to sleep, to park, to
//! switch back to the ring) is a compare-and-swap on the word itself.

use std::sync::atomic::{AtomicU64, Ordering};

const COUNTER_BITS: u32 = 28;
const COUNTER_MASK: u64 = (1 << COUNTER_BITS) - 1;
const K_SHIFT: u32 = 0;
const R_SHIFT: u32 = COUNTER_BITS;
const SLEEPERS_SHIFT: u32 = 2 * COUNTER_BITS;
const SLEEPERS_MASK: u64 = 0x3f;
const PARKED: u64 = 1 << 62;
const RING_MODE: u64 = 1 << 63;

/// The largest ring: counters are compared modulo 2^28, so everything outstanding in
/// either path must stay below 2^27.
pub const MAX_RING_BYTES: usize = 1 << 26;

/// The largest single reservation for the kernel path (kernel sends are chunked to this).
pub const MAX_KERNEL_CHUNK: usize = 1 << 22;

/// A decoded state word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectionState(pub u64);

impl DirectionState {
    /// The state a new direction starts in: kernel mode, nothing sent.
    pub const INITIAL: DirectionState = DirectionState(0);

    /// Whether the sender may publish into the ring.
    #[inline]
    pub fn ring_mode(self) -> bool {
        self.0 & RING_MODE != 0
    }
    /// Whether the receiver parked the direction in kernel mode (see the module's notes).
    #[inline]
    pub fn parked(self) -> bool {
        self.0 & PARKED != 0
    }
    /// Receivers asleep in the kernel.
    #[inline]
    pub fn sleepers(self) -> u64 {
        (self.0 >> SLEEPERS_SHIFT) & SLEEPERS_MASK
    }
    /// Ring bytes published, modulo 2^28.
    #[inline]
    pub fn published(self) -> u64 {
        (self.0 >> R_SHIFT) & COUNTER_MASK
    }
    /// Kernel bytes reserved, modulo 2^28.
    #[inline]
    pub fn kernel_reserved(self) -> u64 {
        (self.0 >> K_SHIFT) & COUNTER_MASK
    }
    /// Ring bytes published and not yet consumed, given the receiver's consumed count.
    #[inline]
    pub fn ring_unread(self, consumed: u64) -> u64 {
        ring_unread_between(self.published(), consumed)
    }
    /// Whether every reserved kernel byte has been read, given the receiver's count.
    #[inline]
    pub fn kernel_caught_up(self, kernel_read: u64) -> bool {
        self.kernel_reserved() == kernel_read & COUNTER_MASK
    }

    #[inline]
    fn with_published(self, r: u64) -> Self {
        DirectionState((self.0 & !(COUNTER_MASK << R_SHIFT)) | ((r & COUNTER_MASK) << R_SHIFT))
    }
    #[inline]
    fn with_kernel(self, k: u64) -> Self {
        DirectionState((self.0 & !(COUNTER_MASK << K_SHIFT)) | ((k & COUNTER_MASK) << K_SHIFT))
    }
    #[inline]
    fn with_sleepers(self, s: u64) -> Self {
        DirectionState((self.0 & !(SLEEPERS_MASK << SLEEPERS_SHIFT)) | ((s & SLEEPERS_MASK) << SLEEPERS_SHIFT))
    }
    #[inline]
    fn with_ring_mode(self, on: bool) -> Self {
        DirectionState(if on { self.0 | RING_MODE } else { self.0 & !RING_MODE })
    }
    #[inline]
    fn with_parked(self, on: bool) -> Self {
        DirectionState(if on { self.0 | PARKED } else { self.0 & !PARKED })
    }
}

/// Ring bytes between a published count (as [`DirectionState::published`] gave it, maybe
/// earlier) and the receiver's consumed count, modulo 2^28: a consumed count ahead of an
/// old published count gives a figure far above any ring's size.
#[inline]
pub fn ring_unread_between(published: u64, consumed: u64) -> u64 {
    published.wrapping_sub(consumed) & COUNTER_MASK
}

/// As [`ring_unread_between`], for a published count that may be older than the consumed
/// count (a cached or viewed one): 0 when the figure exceeds the ring, not 2^28 bytes.
#[inline]
pub fn ring_unread_within(published: u64, consumed: u64, ring_bytes: usize) -> u64 {
    let unread = ring_unread_between(published, consumed);
    if unread <= ring_bytes as u64 {
        unread
    } else {
        0
    }
}

/// Kernel bytes reserved by [`DirectionWord::reserve_kernel`]; give back what the kernel
/// did not take with [`DirectionWord::settle_kernel`].
#[derive(Debug)]
#[must_use = "settle the reservation with what the kernel accepted"]
pub struct KernelReservation {
    pub bytes: usize,
}

/// A sleeper counted by [`DirectionWord::prepare_sleep`]; give it back with
/// [`DirectionWord::finish_sleep`].
#[derive(Debug)]
#[must_use = "finish the sleep, or the direction stays out of ring mode for good"]
pub struct SleepTicket {
    installed: DirectionState,
    left_ring_mode: bool,
}

/// Operations on one direction's state word (which lives in the sender's record).
pub struct DirectionWord<'a> {
    word: &'a AtomicU64,
    /// The sender's view of the word (see the module's notes), if the direction keeps one.
    view: Option<&'a AtomicU64>,
}

impl<'a> DirectionWord<'a> {
    /// Wraps the state word.
    #[inline]
    pub fn new(word: &'a AtomicU64) -> Self {
        DirectionWord { word, view: None }
    }

    /// Wraps the state word and the sender's view of it (see the module's notes).
    #[inline]
    pub fn with_view(word: &'a AtomicU64, view: &'a AtomicU64) -> Self {
        DirectionWord { word, view: Some(view) }
    }

    /// The current state (acquire: ring bytes up to `published` are visible).
    #[inline]
    pub fn load(&self) -> DirectionState {
        DirectionState(self.word.load(Ordering::Acquire))
    }

    /// The state as the sender's last own change left it (acquire: ring bytes up to its
    /// `published` are visible): never ahead of [`Self::load`], maybe behind it, and the
    /// receivers' changes only as that change found them. Without a view, the word itself.
    #[inline]
    pub fn sender_view(&self) -> DirectionState {
        match self.view {
            Some(v) => DirectionState(v.load(Ordering::Acquire)),
            None => self.load(),
        }
    }

    /// Ring bytes the sender's view shows unread, given the receiver's consumed count: 0
    /// when it shows none, and when it is behind a consumed count taken from the word
    /// (a view older than the bytes already read).
    #[inline]
    pub fn view_unread(&self, consumed: u64, ring_bytes: usize) -> u64 {
        ring_unread_within(self.sender_view().published(), consumed, ring_bytes)
    }

    /// The sender's own change: stores it in the view (a plain store: the line the
    /// receivers poll costs the sender no wait).
    #[inline]
    fn sender_changed(&self, now: DirectionState) {
        if let Some(v) = self.view {
            v.store(now.0, Ordering::Release);
        }
    }

    #[inline]
    fn update(
        &self,
        mut f: impl FnMut(DirectionState) -> Option<DirectionState>,
    ) -> Result<DirectionState, DirectionState> {
        let mut cur = self.load();
        loop {
            let Some(next) = f(cur) else { return Err(cur) };
            match self.word.compare_exchange_weak(cur.0, next.0, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Ok(next),
                Err(now) => cur = DirectionState(now),
            }
        }
    }

    /// Sender: publishes `n` bytes already copied into the ring at the old `published`.
    /// Fails (the bytes stay unpublished, so never seen) if the direction left ring mode.
    /// Only the holder of the send lock moves `published`.
    #[inline]
    pub fn publish(&self, n: usize) -> bool {
        match self.update(|s| s.ring_mode().then(|| s.with_published(s.published() + n as u64))) {
            Ok(now) => {
                self.sender_changed(now);
                true
            }
            Err(_) => false,
        }
    }

    /// Sender: switches to kernel mode (if not already) and reserves `bytes` (at most
    /// [`MAX_KERNEL_CHUNK`]) for a kernel send about to be made.
    #[inline]
    pub fn reserve_kernel(&self, bytes: usize) -> KernelReservation {
        let bytes = bytes.min(MAX_KERNEL_CHUNK);
        if let Ok(now) = self.update(|s| Some(s.with_ring_mode(false).with_kernel(s.kernel_reserved() + bytes as u64)))
        {
            self.sender_changed(now);
        }
        KernelReservation { bytes }
    }

    /// Sender: the kernel accepted `sent` bytes of a reservation; returns the rest.
    #[inline]
    pub fn settle_kernel(&self, reservation: KernelReservation, sent: usize) {
        let unsent = reservation.bytes.saturating_sub(sent) as u64;
        if unsent > 0 {
            if let Ok(now) = self.update(|s| Some(s.with_kernel(s.kernel_reserved().wrapping_sub(unsent)))) {
                self.sender_changed(now);
            }
        }
    }

    /// Sender or receiver: leaves ring mode without reserving anything (before waiting in
    /// the kernel for room, before a shutdown, when the receiver is gone).
    pub fn to_kernel_mode(&self) {
        let _ = self.update(|s| s.ring_mode().then(|| s.with_ring_mode(false)));
    }

    /// Receiver about to sleep in the kernel: switches to kernel mode and counts a sleeper,
    /// unless ring bytes are unread (then returns None: do not sleep, read them).
    pub fn prepare_sleep(&self, consumed: u64) -> Option<SleepTicket> {
        let mut was_ring = false;
        self.update(|s| {
            was_ring = s.ring_mode();
            (s.ring_unread(consumed) == 0 && s.sleepers() < SLEEPERS_MASK)
                .then(|| s.with_ring_mode(false).with_sleepers(s.sleepers() + 1))
        })
        .ok()
        .map(|installed| SleepTicket { installed, left_ring_mode: was_ring })
    }

    /// Receiver woke up: uncounts the sleeper counted by [`Self::prepare_sleep`].
    ///
    /// If that sleep is what took the direction out of ring mode and the word is exactly
    /// as the sleep left it (the sender reserved no kernel bytes, no other sleeper is
    /// counted), ring mode comes back too, as if the sleep had not happened: no byte went
    /// through the kernel meanwhile, so the order rules hold. (K cannot wrap around to the
    /// same value meanwhile: the kernel buffers far less than 2^28 unread bytes.) Without
    /// this, a server waiting on many sockets would move every one of them to the kernel
    /// at each sleep, and each would stay there until its next kernel read. `may_restore`
    /// is the caller's word that the stream still allows the ring (not shut down, not
    /// closed on either side).
    pub fn finish_sleep(&self, ticket: SleepTicket, may_restore: bool) {
        if ticket.left_ring_mode && may_restore {
            let s = ticket.installed;
            let restored = s.with_sleepers(s.sleepers() - 1).with_ring_mode(true);
            if self.word.compare_exchange(s.0, restored.0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return;
            }
        }
        let _ = self.update(|s| (s.sleepers() > 0).then(|| s.with_sleepers(s.sleepers() - 1)));
    }

    /// Receiver: parks the direction in kernel mode (see the module's notes), if it is in
    /// kernel mode with every ring byte consumed; true if it is parked now.
    pub fn park(&self, consumed: u64) -> bool {
        self.update(|s| (s.parked() || !s.ring_mode() && s.ring_unread(consumed) == 0).then(|| s.with_parked(true)))
            .is_ok()
    }

    /// Record creation: the direction starts in kernel mode with `written` kernel bytes
    /// already sent (before the record existed), before anyone else can see the word.
    pub fn start_after_kernel_bytes(&self, written: u64) {
        let start = DirectionState::INITIAL.with_kernel(written);
        self.word.store(start.0, Ordering::Release);
        self.sender_changed(start);
    }

    /// Receiver: lifts the parking; the direction stays in kernel mode until
    /// [`Self::try_ring_mode`] switches it.
    pub fn unpark(&self) {
        let _ = self.update(|s| s.parked().then(|| s.with_parked(false)));
    }

    /// Receiver: switches back to ring mode if everything sent has been read, nobody
    /// sleeps and the direction is not parked. `kernel_is_empty` is asked last (it costs a
    /// system call).
    pub fn try_ring_mode(&self, consumed: u64, kernel_read: u64, kernel_is_empty: impl FnOnce() -> bool) -> bool {
        let s = self.load();
        if s.ring_mode() {
            return true;
        }
        if s.parked() || s.sleepers() != 0 || s.ring_unread(consumed) != 0 || !s.kernel_caught_up(kernel_read) {
            return false;
        }
        if !kernel_is_empty() {
            return false;
        }
        self.word.compare_exchange(s.0, s.with_ring_mode(true).0, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleeping_receiver_and_a_publishing_sender_cannot_both_win() {
        let w = AtomicU64::new(DirectionState::INITIAL.with_ring_mode(true).0);
        let d = DirectionWord::new(&w);
        assert!(d.publish(10));
        // Ten bytes unread: the receiver must not sleep.
        assert!(d.prepare_sleep(0).is_none());
        // Consumed: it may, and then the sender's publish fails (bytes go to the kernel).
        let ticket = d.prepare_sleep(10).expect("may sleep");
        assert!(!d.publish(5));
        let r = d.reserve_kernel(5);
        d.settle_kernel(r, 5);
        // Sleeping: no switch back even when caught up.
        assert!(!d.try_ring_mode(10, 5, || true));
        // Kernel bytes went out while it slept: waking does not bring the ring back.
        d.finish_sleep(ticket, true);
        assert!(!d.load().ring_mode());
        assert_eq!(d.load().sleepers(), 0);
        assert!(!d.try_ring_mode(10, 4, || true), "one kernel byte unread");
        assert!(!d.try_ring_mode(10, 5, || false), "the kernel still holds bytes");
        assert!(d.try_ring_mode(10, 5, || true));
        assert!(d.load().ring_mode());
    }

    #[test]
    fn a_sleep_nothing_happened_in_is_undone() {
        let w = AtomicU64::new(DirectionState::INITIAL.with_ring_mode(true).0);
        let d = DirectionWord::new(&w);
        let ticket = d.prepare_sleep(0).expect("may sleep");
        assert!(!d.load().ring_mode());
        d.finish_sleep(ticket, true);
        assert!(d.load().ring_mode(), "no kernel byte was sent: back to the ring");
        assert_eq!(d.load().sleepers(), 0);

        // Not when the caller forbids it (the stream was shut down meanwhile).
        let ticket = d.prepare_sleep(0).expect("may sleep");
        d.finish_sleep(ticket, false);
        assert!(!d.load().ring_mode());

        // Not when the sleep did not take it out of ring mode.
        let ticket = d.prepare_sleep(0).expect("may sleep");
        d.finish_sleep(ticket, true);
        assert!(!d.load().ring_mode());

        // Not while another sleeper is counted; the last one out does not restore either
        // (its own sleep found the direction in kernel mode).
        assert!(d.try_ring_mode(0, 0, || true));
        let first = d.prepare_sleep(0).expect("may sleep");
        let second = d.prepare_sleep(0).expect("may sleep");
        d.finish_sleep(first, true);
        assert!(!d.load().ring_mode());
        assert_eq!(d.load().sleepers(), 1);
        d.finish_sleep(second, true);
        assert!(!d.load().ring_mode());
        assert_eq!(d.load().sleepers(), 0);
    }

    #[test]
    fn a_parked_direction_stays_in_kernel_mode_until_unparked() {
        let w = AtomicU64::new(DirectionState::INITIAL.with_ring_mode(true).0);
        let d = DirectionWord::new(&w);
        assert!(!d.park(0), "in ring mode: not parked");
        d.to_kernel_mode();
        let r = d.reserve_kernel(5);
        d.settle_kernel(r, 5);
        assert!(d.park(0));
        assert!(d.park(0), "parking again is a no-op");
        assert!(d.load().parked());
        // Kernel sends and sleepers keep it parked; nothing brings ring mode back.
        let r = d.reserve_kernel(7);
        d.settle_kernel(r, 7);
        assert!(!d.publish(1));
        let ticket = d.prepare_sleep(0).expect("may sleep");
        d.finish_sleep(ticket, true);
        assert!(!d.try_ring_mode(0, 12, || true));
        assert!(d.load().parked() && !d.load().ring_mode());
        assert_eq!(d.load().kernel_reserved(), 12);
        assert_eq!(d.load().sleepers(), 0);
        d.unpark();
        assert!(!d.load().parked());
        assert!(d.try_ring_mode(0, 12, || true));
        // A sleep that began in ring mode is not undone into ring mode across a parking.
        let ticket = d.prepare_sleep(0).expect("may sleep");
        assert!(d.park(0));
        d.finish_sleep(ticket, true);
        assert!(d.load().parked() && !d.load().ring_mode());
    }

    #[test]
    fn parking_needs_the_ring_read_to_the_end() {
        let w = AtomicU64::new(DirectionState::INITIAL.with_ring_mode(true).0);
        let d = DirectionWord::new(&w);
        assert!(d.publish(10));
        d.to_kernel_mode();
        assert!(!d.park(4), "six ring bytes unread");
        assert!(d.park(10));
    }

    #[test]
    fn counters_wrap_modulo_two_to_the_28() {
        let w = AtomicU64::new(DirectionState::INITIAL.with_ring_mode(true).with_published(COUNTER_MASK - 3).0);
        let d = DirectionWord::new(&w);
        assert!(d.publish(10));
        let s = d.load();
        assert_eq!(s.published(), 6);
        assert_eq!(s.ring_unread(COUNTER_MASK - 3), 10);
        assert_eq!(s.ring_unread((1u64 << 28) + 6), 0, "consumed counts are taken modulo 2^28");
    }

    #[test]
    fn the_senders_view_follows_its_own_changes_only_and_never_leads() {
        let (w, v) = (AtomicU64::new(0), AtomicU64::new(0));
        let d = DirectionWord::with_view(&w, &v);
        d.start_after_kernel_bytes(7);
        assert_eq!(d.sender_view(), d.load());
        let r = d.reserve_kernel(0);
        d.settle_kernel(r, 0);
        assert!(d.try_ring_mode(0, 7, || true));
        // The receiver's switch is not the sender's: the view still shows kernel mode.
        assert!(!d.sender_view().ring_mode());
        assert!(d.publish(100));
        assert_eq!(d.sender_view(), d.load(), "a publish shows");
        assert_eq!(d.view_unread(0, 4096), 100);
        // A sleeper changes the word, not the view; the publish it makes fail changes neither.
        let ticket = d.prepare_sleep(100).expect("may sleep");
        assert!(d.sender_view().ring_mode() && !d.load().ring_mode());
        assert!(!d.publish(5));
        assert_eq!(d.sender_view().published(), 100);
        // The kernel bytes it sends instead show, with kernel mode.
        let r = d.reserve_kernel(5);
        let view = d.sender_view();
        assert!(!view.ring_mode() && view.kernel_reserved() == 12);
        d.settle_kernel(r, 2);
        assert_eq!(d.sender_view().kernel_reserved(), 9, "the unsent part given back shows");
        d.finish_sleep(ticket, true);
        assert_eq!(d.sender_view().sleepers(), 1, "as the sender's last change found the word");
        // A view behind the receiver's consumed count shows nothing, not 2^28 bytes.
        assert_eq!(d.view_unread(150, 4096), 0);
        // Without a view, the word itself.
        let plain = DirectionWord::new(&w);
        assert_eq!(plain.sender_view(), plain.load());
    }

    #[test]
    fn a_short_kernel_send_gives_back_its_reservation() {
        let w = AtomicU64::new(0);
        let d = DirectionWord::new(&w);
        let r = d.reserve_kernel(100);
        d.settle_kernel(r, 40);
        assert_eq!(d.load().kernel_reserved(), 40);
        let r = d.reserve_kernel(usize::MAX);
        assert_eq!(r.bytes, MAX_KERNEL_CHUNK);
        d.settle_kernel(r, 0);
        assert_eq!(d.load().kernel_reserved(), 40);
    }
}
