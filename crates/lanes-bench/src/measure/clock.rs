//! A clock cheap enough to read twice per round trip: the CPU's time-stamp counter,
//! calibrated against the monotonic clock once per process.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Raw ticks; convert with [`ticks_to_ns`].
#[inline(always)]
pub fn now_ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86_64.
        unsafe { std::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static START: OnceLock<Instant> = OnceLock::new();
        START.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

fn ns_per_tick() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        if cfg!(not(target_arch = "x86_64")) {
            return 1.0;
        }
        // Two short calibrations; keep the one with the least disturbance (highest rate).
        let mut best = f64::MAX;
        for _ in 0..2 {
            let t0 = Instant::now();
            let c0 = now_ticks();
            while t0.elapsed() < Duration::from_millis(20) {}
            let c1 = now_ticks();
            let ns = t0.elapsed().as_nanos() as f64;
            let r = ns / (c1.wrapping_sub(c0).max(1) as f64);
            best = best.min(r);
        }
        best
    })
}

/// Converts a tick difference to nanoseconds.
#[inline]
pub fn ticks_to_ns(ticks: u64) -> f64 {
    ticks as f64 * ns_per_tick()
}

/// Calibrates now, so the first measurement does not pay for it.
pub fn calibrate() {
    let _ = ns_per_tick();
}

/// Converts nanoseconds to ticks (for deadlines checked against [`now_ticks`]).
#[inline]
pub fn ns_to_ticks(ns: f64) -> u64 {
    (ns / ns_per_tick()).max(0.0) as u64
}
