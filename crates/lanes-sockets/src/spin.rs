//! How long a waiting call spins before it sleeps in the kernel, learned per thread.
//!
//! Spinning pays only while the peer answers within the spin: then the bytes travel
//! through the ring and nobody sleeps. When the peer is slower (a busy server, more
//! runnable threads than CPUs), every spin ends in a sleep anyway and its CPU time is
//! stolen from the very process being waited for; on a 2-core machine a fixed spin then
//! makes the library slower than plain TCP. So, like an adaptive mutex, each thread keeps
//! a budget: a wait that ended during its spin doubles it (up to `LANES_POLL_US`), a spin
//! that ended in a sleep halves it (down to [`FLOOR`]). A sleep that data ended sooner
//! than the budget could have lasted raises the budget to cover it (with half again to
//! spare): a spin that long would have caught the data without the sleep's wake-up and
//! without sending the peer's bytes through the kernel; halving alone never finds that out.

use std::cell::Cell;
use std::time::Duration;

use crate::config::config;

/// The smallest budget: a few ring round trips.
const FLOOR: Duration = Duration::from_micros(4);

thread_local! {
    /// This thread's budget in nanoseconds; `u32::MAX` until its first wait.
    static BUDGET_NS: Cell<u32> = const { Cell::new(u32::MAX) };
}

fn ceiling_ns() -> u32 {
    config().poll_time.as_nanos().min(u32::MAX as u128 - 1) as u32
}

fn floor_ns() -> u32 {
    (FLOOR.as_nanos() as u32).min(ceiling_ns())
}

/// How long this thread's next wait may spin.
pub fn budget() -> Duration {
    let ns = BUDGET_NS.with(|b| b.get());
    Duration::from_nanos(if ns == u32::MAX { ceiling_ns() } else { ns } as u64)
}

/// The wait ended during its spin (or without one being needed).
pub fn hit() {
    BUDGET_NS.with(|b| {
        let ns = b.get();
        if ns != u32::MAX {
            b.set(ns.saturating_mul(2).min(ceiling_ns()));
        }
    });
}

/// The spin ran out and the wait went to sleep.
pub fn miss() {
    BUDGET_NS.with(|b| {
        let ns = if b.get() == u32::MAX { ceiling_ns() } else { b.get() };
        b.set((ns / 2).max(floor_ns()));
    });
}

/// A sleep of `slept` ended because data arrived.
pub fn woke_after(slept: Duration) {
    let ceiling = ceiling_ns();
    let wanted = slept.as_nanos().saturating_mul(3) / 2;
    if wanted >= ceiling as u128 {
        return;
    }
    BUDGET_NS.with(|b| {
        let ns = b.get();
        if ns != u32::MAX && (wanted as u32) > ns {
            b.set(wanted as u32);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_to_the_floor_and_doubles_to_the_ceiling() {
        let ceiling = Duration::from_nanos(ceiling_ns() as u64);
        assert_eq!(budget(), ceiling);
        for _ in 0..40 {
            miss();
        }
        assert_eq!(budget(), Duration::from_nanos(floor_ns() as u64));
        hit();
        assert_eq!(budget(), Duration::from_nanos((floor_ns() as u64 * 2).min(ceiling_ns() as u64)));
        for _ in 0..40 {
            hit();
        }
        assert_eq!(budget(), ceiling);
    }

    #[test]
    fn a_short_sleep_raises_the_budget_to_cover_it() {
        let floor = Duration::from_nanos(floor_ns() as u64);
        let ceiling = Duration::from_nanos(ceiling_ns() as u64);
        for _ in 0..40 {
            miss();
        }
        assert_eq!(budget(), floor);
        let slept = ceiling / 4;
        woke_after(slept);
        assert_eq!(budget(), (slept * 3 / 2).max(floor));
        // A long sleep says nothing about spinning: the budget stays.
        woke_after(ceiling * 2);
        assert_eq!(budget(), (slept * 3 / 2).max(floor));
    }
}
