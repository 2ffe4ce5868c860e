//! How long a waiting call spins before it sleeps in the kernel, learned per thread, and
//! whether it may spin at all.
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
//!
//! A spin that pays for itself can still cost the peer its CPU: when the peer waits for
//! the very CPU the spinner holds (both on one CPU, or a CPU hog beside each), the data
//! arrives only once the spinner is preempted, so the spin "hits" after the kernel's time
//! slice and the budget even grows. Three checks keep spinning to the cases where a CPU is
//! free for it ([`allowed`]):
//!
//! - the machine's load: no spin while more threads are runnable than there are CPUs
//!   online (the running count of `/proc/loadavg`, sampled at most every
//!   [`LOAD_SAMPLE`] per process, not counting this process's other spinners);
//! - preemption: a spin whose clock jumps by more than [`PREEMPTED_GAP`] between two looks
//!   was descheduled while it spun, so its CPU is wanted; it stops at once and the thread
//!   does not spin for a cool-down (2 ms, doubling while it happens again, to 128 ms),
//!   halved by every spin that runs undisturbed;
//! - the thread's own run delay: no spin while it waits for a CPU for more than 1/16 of
//!   its time (`/proc/thread-self/schedstat`, sampled per thread every [`LOAD_SAMPLE`],
//!   spacing out to [`DELAY_SAMPLE_MAX`] while the answer holds); a
//!   machine at full use (pgbench's servers and clients on every CPU) keeps the running
//!   count near the number of CPUs, where the load check cannot tell.
//!
//! Under a seccomp filter only preemption counts (reading `/proc` is a system call the
//! filter may kill for).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::config::config;

/// How often a process looks at the machine's load.
pub const LOAD_SAMPLE: Duration = Duration::from_millis(5);
/// A jump of the clock between two looks of a spin longer than this: the spinner was
/// descheduled (a spin's loop looks every few microseconds).
pub const PREEMPTED_GAP: Duration = Duration::from_micros(50);
/// The first cool-down after a preempted spin, and the longest.
const COOL_MIN: Duration = Duration::from_millis(2);
const COOL_MAX: Duration = Duration::from_millis(128);

/// The smallest budget: a few ring round trips.
const FLOOR: Duration = Duration::from_micros(4);

thread_local! {
    /// This thread's budget in nanoseconds; `u32::MAX` until its first wait.
    static BUDGET_NS: Cell<u32> = const { Cell::new(u32::MAX) };
    /// No spin before this (after a preempted spin).
    static COOL_UNTIL: Cell<Option<Instant>> = const { Cell::new(None) };
    /// The current cool-down length, in microseconds (0: none).
    static COOL_US: Cell<u32> = const { Cell::new(0) };
    /// The last look at this thread's run delay ([`contended`]).
    static DELAY_SAMPLE: Cell<DelaySample> = const { Cell::new(DelaySample::NEVER) };
}

/// Threads of this process spinning now (they are runnable only because they spin).
static SPINNING: AtomicUsize = AtomicUsize::new(0);
/// When the load was last sampled, in nanoseconds since [`epoch`] (0: never).
static LOAD_AT: AtomicU64 = AtomicU64::new(0);
/// The last sample found more runnable threads than CPUs.
static OVERLOADED: AtomicBool = AtomicBool::new(false);

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

fn online_cpus() -> usize {
    static N: OnceLock<usize> = OnceLock::new();
    // SAFETY: sysconf has no preconditions.
    *N.get_or_init(|| usize::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).unwrap_or(1).max(1))
}

/// Reads up to `buf.len()` bytes of a `/proc` file with raw system calls (our own `read`
/// and `close` exports must not see it); None if it cannot be read.
fn read_proc<'b>(path: &std::ffi::CStr, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    // SAFETY: a NUL-terminated path; the fd is ours until closed below; buf is ours.
    let n = unsafe {
        let fd = libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let n = libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len());
        libc::syscall(libc::SYS_close, fd);
        n
    };
    Some(&buf[..usize::try_from(n).ok()?])
}

/// The running count of `/proc/loadavg` (`0.12 0.30 0.25 3/345 6789`: 3).
fn runnable_threads() -> Option<usize> {
    parse_running(read_proc(c"/proc/loadavg", &mut [0u8; 128])?)
}

/// How long this thread has waited for a CPU while runnable, in nanoseconds: the second
/// field of `/proc/thread-self/schedstat` (`exec run_delay timeslices`).
fn run_delay_ns() -> Option<u64> {
    parse_run_delay(read_proc(c"/proc/thread-self/schedstat", &mut [0u8; 96])?)
}

fn parse_run_delay(text: &[u8]) -> Option<u64> {
    std::str::from_utf8(text).ok()?.split_whitespace().nth(1)?.parse().ok()
}

/// Whether this thread waits for a CPU for more than [`CONTENDED_SHARE`] of its time (see
/// [`DelaySample`]): every CPU is busy often enough that a spin takes one from a thread
/// that would run (a machine at full use keeps the running count near the number of CPUs,
/// where the load check cannot tell).
fn contended() -> bool {
    let now = epoch().elapsed().as_nanos() as u64 | 1;
    let last = DELAY_SAMPLE.with(|d| d.get());
    if !last.due(now) {
        return last.contended;
    }
    let Some(delay) = run_delay_ns() else { return false };
    let next = last.next(now, delay);
    DELAY_SAMPLE.with(|s| s.set(next));
    next.contended
}

/// A look at this thread's run delay: when (ns since [`epoch`], 0: never), the delay then,
/// what it found, and when the next look is due. Each look opens a `/proc` file (several
/// microseconds: under pgbench, a look every 5 ms was a few per cent of each transaction),
/// so while the answer stays the same the looks space out, doubling from [`LOAD_SAMPLE`]
/// to [`DELAY_SAMPLE_MAX`]; a changed answer brings them back to [`LOAD_SAMPLE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct DelaySample {
    at: u64,
    delay: u64,
    contended: bool,
    interval: u64,
}

/// The longest time between two looks at a thread's run delay.
const DELAY_SAMPLE_MAX: Duration = Duration::from_millis(40);

impl DelaySample {
    const NEVER: DelaySample = DelaySample { at: 0, delay: 0, contended: false, interval: 0 };

    fn due(&self, now: u64) -> bool {
        self.at == 0 || now.saturating_sub(self.at) >= self.interval
    }

    /// The sample after a look at `now` found the run delay `delay`.
    fn next(&self, now: u64, delay: u64) -> DelaySample {
        let contended =
            self.at != 0 && delay.saturating_sub(self.delay) > now.saturating_sub(self.at) / CONTENDED_SHARE;
        let base = LOAD_SAMPLE.as_nanos() as u64;
        let interval = if self.at != 0 && contended == self.contended {
            (self.interval * 2).clamp(base, DELAY_SAMPLE_MAX.as_nanos() as u64)
        } else {
            base
        };
        DelaySample { at: now, delay, contended, interval }
    }
}

/// See [`contended`]: more than 1/16 of the time waiting for a CPU.
const CONTENDED_SHARE: u64 = 16;

fn parse_running(text: &[u8]) -> Option<usize> {
    let field = std::str::from_utf8(text).ok()?.split_whitespace().nth(3)?;
    field.split('/').next()?.parse().ok()
}

/// Whether this thread may spin now: not cooling down after a preempted spin, the machine
/// has a CPU for every runnable thread, and this thread seldom waits for one (see the
/// module's notes).
pub fn allowed() -> bool {
    free_cpu(true)
}

/// Whether a CPU is free for this thread (the load and preemption checks of [`allowed`],
/// without its own run delay): a receiver may ask a sender to pause for it.
pub fn cpu_free() -> bool {
    free_cpu(false)
}

fn free_cpu(count_run_delay: bool) -> bool {
    match gate() {
        Gate::Off => return true,
        Gate::Shut => return false,
        Gate::On | Gate::PreemptOnly => {}
    }
    if let Some(until) = COOL_UNTIL.with(|c| c.get()) {
        if Instant::now() < until {
            return false;
        }
        COOL_UNTIL.with(|c| c.set(None));
    }
    if crate::sandbox::filtered() || gate() == Gate::PreemptOnly {
        return true;
    }
    if count_run_delay && contended() {
        return false;
    }
    let now = epoch().elapsed().as_nanos() as u64 | 1;
    let at = LOAD_AT.load(Ordering::Relaxed);
    if (at == 0 || now.saturating_sub(at) >= LOAD_SAMPLE.as_nanos() as u64)
        && LOAD_AT.compare_exchange(at, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    {
        if let Some(running) = runnable_threads() {
            // This thread is running; other threads of ours that spin would be asleep
            // but for the spin.
            let spinners = SPINNING.load(Ordering::Relaxed);
            OVERLOADED.store(running.saturating_sub(spinners) > online_cpus(), Ordering::Relaxed);
        }
    }
    !OVERLOADED.load(Ordering::Relaxed)
}

/// What `LANES_SPIN_GATE` asks of the checks that decide whether a CPU is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Gate {
    /// The load, preemption and run-delay checks (the default).
    On,
    /// `0`: none of them (a diagnostic: spinning as before them, whatever it costs others).
    Off,
    /// `preempt`: the preemption check alone (a diagnostic for comparing the two).
    PreemptOnly,
    /// `shut`: no CPU is ever free, as on a machine with more runnable threads than CPUs all
    /// the time (a diagnostic, and for tests of what the library does there).
    Shut,
}

fn gate() -> Gate {
    static G: OnceLock<Gate> = OnceLock::new();
    *G.get_or_init(|| match std::env::var_os("LANES_SPIN_GATE") {
        Some(v) if v == "0" => Gate::Off,
        Some(v) if v == "preempt" => Gate::PreemptOnly,
        Some(v) if v == "shut" => Gate::Shut,
        _ => Gate::On,
    })
}

/// The spin was descheduled: no spin for a while.
fn preempted(now: Instant) {
    let us = COOL_US.with(|c| {
        let next = (c.get().saturating_mul(2)).clamp(COOL_MIN.as_micros() as u32, COOL_MAX.as_micros() as u32);
        c.set(next);
        next
    });
    COOL_UNTIL.with(|c| c.set(Some(now + Duration::from_micros(us as u64))));
}

/// A spin ran undisturbed: the next cool-down is shorter.
fn undisturbed() {
    COOL_US.with(|c| c.set(c.get() / 2));
}

/// One spin of a waiting call. Counts itself among this process's spinners while it lives.
pub struct Spin {
    until: Instant,
    last: Instant,
    preempted: bool,
    /// It really spun (a wait that found its data at the first look did not).
    spun: bool,
}

impl Spin {
    /// Starts a spin of this thread's budget (at most `limit`); None if spinning is not
    /// [`allowed`] now or the budget is zero.
    pub fn begin(limit: Option<Duration>) -> Option<Spin> {
        Self::begin_for(budget().min(limit.unwrap_or(Duration::MAX)))
    }

    /// Starts a spin of the full `LANES_POLL_US`, whatever this thread's budget: for a wait
    /// whose data is known to be on its way (a sender waiting to hand the stream back to
    /// the ring). None if spinning is not [`allowed`].
    pub fn begin_full() -> Option<Spin> {
        Self::begin_for(Duration::from_nanos(ceiling_ns() as u64))
    }

    fn begin_for(b: Duration) -> Option<Spin> {
        if b.is_zero() || !allowed() {
            return None;
        }
        SPINNING.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        Some(Spin { until: now + b, last: now, preempted: false, spun: false })
    }

    /// Whether to go on spinning: the budget is not used up and the spin was not
    /// descheduled since the last look. Reads the clock.
    pub fn go_on(&mut self) -> bool {
        if self.preempted {
            return false;
        }
        let now = Instant::now();
        self.spun = true;
        if now.saturating_duration_since(self.last) > PREEMPTED_GAP && gate() != Gate::Off {
            self.preempted = true;
            preempted(now);
            return false;
        }
        self.last = now;
        now < self.until
    }

    /// The wait ended during the spin (a descheduled spin teaches nothing about budgets).
    pub fn hit(self) {
        if self.spun && !self.preempted {
            undisturbed();
            hit();
        }
    }

    /// The spin ran out and the wait goes to sleep.
    pub fn miss(self) {
        if self.spun && !self.preempted {
            undisturbed();
            miss();
        }
    }
}

impl Drop for Spin {
    fn drop(&mut self) {
        SPINNING.fetch_sub(1, Ordering::Relaxed);
    }
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
fn hit() {
    BUDGET_NS.with(|b| {
        let ns = b.get();
        if ns != u32::MAX {
            b.set(ns.saturating_mul(2).min(ceiling_ns()));
        }
    });
}

/// The spin ran out and the wait went to sleep.
fn miss() {
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
    fn reads_the_running_count() {
        assert_eq!(parse_running(b"0.47 2.23 2.44 3/345 12345\n"), Some(3));
        assert_eq!(parse_running(b"garbage"), None);
        assert!(runnable_threads().is_some_and(|n| n >= 1), "this thread runs");
    }

    #[test]
    fn run_delay_looks_space_out_while_the_answer_holds() {
        let ms = 1_000_000u64;
        let first = DelaySample::NEVER.next(1, 0);
        assert!(!first.contended);
        assert_eq!(first.interval, LOAD_SAMPLE.as_nanos() as u64);
        // Waited for a CPU 1 ms of 5: contended; the answer changed, so the next look is soon.
        let busy = first.next(1 + 5 * ms, ms);
        assert!(busy.contended);
        assert_eq!(busy.interval, LOAD_SAMPLE.as_nanos() as u64);
        assert!(!busy.due(busy.at + 4 * ms) && busy.due(busy.at + 5 * ms));
        // Still contended: the looks double, up to the longest gap.
        let mut s = busy;
        for _ in 0..10 {
            s = s.next(s.at + s.interval, s.delay + s.interval / 4);
            assert!(s.contended);
        }
        assert_eq!(s.interval, DELAY_SAMPLE_MAX.as_nanos() as u64);
        // Quiet again (no delay at all): back to the shortest gap at once.
        let quiet = s.next(s.at + s.interval, s.delay);
        assert!(!quiet.contended);
        assert_eq!(quiet.interval, LOAD_SAMPLE.as_nanos() as u64);
    }

    #[test]
    fn reads_the_run_delay() {
        assert_eq!(parse_run_delay(b"1234 5678 9\n"), Some(5678));
        assert_eq!(parse_run_delay(b"1234"), None);
        assert!(run_delay_ns().is_some());
    }

    #[test]
    fn a_descheduled_spin_stops_and_cools_down() {
        // `last` ahead of the clock: this test's own thread may be descheduled before its
        // first look, which must not count as the spin's preemption.
        let mut s = Spin {
            until: Instant::now() + Duration::from_secs(10),
            last: Instant::now() + Duration::from_secs(10),
            preempted: false,
            spun: false,
        };
        SPINNING.fetch_add(1, Ordering::Relaxed);
        assert!(s.go_on());
        s.last -= PREEMPTED_GAP * 2;
        assert!(!s.go_on());
        assert!(!s.go_on(), "stays stopped");
        let before = budget();
        s.hit();
        assert_eq!(budget(), before, "a preempted spin does not grow the budget");
        assert!(!allowed(), "cooling down");
        assert!(Spin::begin(None).is_none());
        COOL_UNTIL.with(|c| c.set(Some(Instant::now())));
        undisturbed();
        assert_eq!(COOL_US.with(|c| c.get()), COOL_MIN.as_micros() as u32 / 2);
    }

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
