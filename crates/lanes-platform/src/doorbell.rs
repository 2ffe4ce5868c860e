//! A doorbell in shared memory: how every blocking wait of the fabric works.
//!
//! Two 32-bit words: `seq`, bumped by every ring, and `sleepers`, the number of waiters that
//! announced they are about to sleep. A waiter reads `seq`, checks its condition, spins while
//! `seq` is unchanged for its poll time, then announces itself, checks once more and sleeps
//! on the futex only if `seq` still holds the value it read. A ringer makes the condition true,
//! bumps `seq` and makes a system call only if someone announced sleep. All of it is
//! sequentially consistent, so no wake-up is lost between a waiter's check and its sleep:
//! either the waiter's last check sees the condition, or the ringer sees the sleeper.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::futex;

/// Default spin before sleeping: `LANES_POLL_US` microseconds, else 50 us.
pub fn default_poll_time() -> Duration {
    static POLL_US: AtomicU64 = AtomicU64::new(u64::MAX);
    let mut us = POLL_US.load(Ordering::Relaxed);
    if us == u64::MAX {
        us = std::env::var("LANES_POLL_US").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(50);
        POLL_US.store(us, Ordering::Relaxed);
    }
    Duration::from_micros(us)
}

/// The doorbell's two words, wherever they live (they must stay mapped while in use).
#[derive(Clone, Copy, Debug)]
pub struct Doorbell {
    seq: *const AtomicU32,
    sleepers: *const AtomicU32,
}

// SAFETY: the doorbell only holds addresses of atomics; every access is atomic.
unsafe impl Send for Doorbell {}
// SAFETY: as above.
unsafe impl Sync for Doorbell {}

/// Why a wait gave up.
#[derive(Debug, PartialEq, Eq)]
pub enum WaitError<E> {
    TimedOut,
    Aborted(E),
}

impl Doorbell {
    /// # Safety
    /// Both pointers must be valid, 4-byte aligned words, only ever accessed atomically, that
    /// stay mapped for as long as this doorbell (or a copy) is used.
    pub unsafe fn new(seq: *mut u32, sleepers: *mut u32) -> Self {
        Doorbell { seq: seq.cast(), sleepers: sleepers.cast() }
    }

    fn seq(&self) -> &AtomicU32 {
        // SAFETY: valid for the doorbell's life (new's contract).
        unsafe { &*self.seq }
    }

    fn sleepers(&self) -> &AtomicU32 {
        // SAFETY: valid for the doorbell's life (new's contract).
        unsafe { &*self.sleepers }
    }

    /// Rings: call after making the waiters' condition true (with SeqCst or a fence).
    /// A system call happens only when a waiter has announced it sleeps.
    #[inline]
    pub fn ring(&self) {
        self.seq().fetch_add(1, Ordering::SeqCst);
        if self.sleepers().load(Ordering::SeqCst) > 0 {
            futex::wake(self.seq(), i32::MAX);
        }
    }

    /// Waits until `check` yields a value. `abort` is consulted on every wake-up and may end
    /// the wait with an error (object removed, peer dead). Spins for `poll`, then sleeps.
    pub fn wait<T, E>(
        &self,
        mut check: impl FnMut() -> Option<T>,
        mut abort: impl FnMut() -> Option<E>,
        poll: Duration,
        deadline: Option<Instant>,
    ) -> Result<T, WaitError<E>> {
        // The clock is read only once the condition was found false: a waiter whose condition
        // already holds (the common case for a spinning peer) pays for no clock reads.
        let mut spin_until: Option<Instant> = None;
        loop {
            let seen = self.seq().load(Ordering::SeqCst);
            if let Some(v) = check() {
                return Ok(v);
            }
            if let Some(e) = abort() {
                return Err(WaitError::Aborted(e));
            }
            let now = Instant::now();
            let spin_until = *spin_until.get_or_insert(now + poll);
            if deadline.is_some_and(|d| now >= d) {
                return Err(WaitError::TimedOut);
            }
            if now < spin_until {
                // Spin on the one word a ringer changes; re-check only when it moves.
                let mut n = 0u32;
                while self.seq().load(Ordering::Acquire) == seen {
                    std::hint::spin_loop();
                    n = n.wrapping_add(1);
                    if n % 256 == 0 && Instant::now() >= spin_until {
                        break;
                    }
                }
                continue;
            }
            self.sleepers().fetch_add(1, Ordering::SeqCst);
            if let Some(v) = check() {
                self.sleepers().fetch_sub(1, Ordering::SeqCst);
                return Ok(v);
            }
            let timeout = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            // Abort conditions (removal, death) ring the doorbell, so sleeping is safe; the
            // bounded sleep is a second line of defence against a ringer that died mid-ring.
            let nap = Some(timeout.unwrap_or(Duration::MAX).min(Duration::from_millis(250)));
            futex::wait(self.seq(), seen, nap);
            self.sleepers().fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    struct Words {
        seq: AtomicU32,
        sleepers: AtomicU32,
        flag: AtomicBool,
    }

    fn bell(w: &Words) -> Doorbell {
        // SAFETY: the words live in an Arc that outlives every use in these tests.
        unsafe { Doorbell::new(w.seq.as_ptr(), w.sleepers.as_ptr()) }
    }

    #[test]
    fn sleeping_waiter_is_woken_and_no_wakeup_is_lost() {
        for poll in [Duration::ZERO, Duration::from_micros(20)] {
            let w = Arc::new(Words { seq: 0.into(), sleepers: 0.into(), flag: false.into() });
            let count = 20_000;
            let w2 = w.clone();
            let waiter = std::thread::spawn(move || {
                let b = bell(&w2);
                for _ in 0..count {
                    b.wait(
                        || w2.flag.swap(false, Ordering::SeqCst).then_some(()),
                        || None::<()>,
                        poll,
                        Some(Instant::now() + Duration::from_secs(10)),
                    )
                    .expect("woken");
                }
            });
            let b = bell(&w);
            for _ in 0..count {
                while w.flag.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                }
                w.flag.store(true, Ordering::SeqCst);
                b.ring();
            }
            waiter.join().unwrap();
        }
    }

    #[test]
    fn wait_times_out_and_aborts() {
        let w = Words { seq: 0.into(), sleepers: 0.into(), flag: false.into() };
        let b = bell(&w);
        let t = Instant::now();
        let r = b.wait(|| None::<()>, || None::<()>, Duration::ZERO, Some(t + Duration::from_millis(50)));
        assert_eq!(r, Err(WaitError::TimedOut));
        assert!(t.elapsed() >= Duration::from_millis(50));
        let r = b.wait(|| None::<()>, || Some(7), Duration::ZERO, None);
        assert_eq!(r, Err(WaitError::Aborted(7)));
        assert_eq!(w.sleepers.load(Ordering::SeqCst), 0);
    }
}
