//! `lanes-spin-floor`: the floor measured independently of Lanes, for
//! `lanes bench --check-floor` (or by hand).
//!
//! Two processes from one `fork()` share one `MAP_SHARED | MAP_ANONYMOUS` mapping; each
//! spins on its own cache line and answers by storing into the other's (the parent's line
//! at offset 0, the child's a page further), pinned to two CPUs. The parent times a run of
//! round trips with the monotonic clock and prints the average one-way time (round trip /
//! 2). It shares no code with Lanes: only the standard library and libc. Like `lanes bench`,
//! a side that has waited [`YIELD_AFTER`] without an answer yields the CPU between checks,
//! so on a busy machine both measure the same thing.
//!
//! ```text
//! lanes-spin-floor [--seconds S] [--cpus A,B]
//! one_way_avg_ns 61.52
//! round_trips 6500000
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const STOP: u64 = u64::MAX;
const CHILD_LINE: usize = 4096;
const YIELD_AFTER: Duration = Duration::from_micros(200);

/// Spins until `done()`; after [`YIELD_AFTER`] without it, yields between checks. Gives up
/// (false) if `alive()` turns false.
#[inline(always)]
fn spin(mut done: impl FnMut() -> bool, alive: impl Fn() -> bool) -> bool {
    for _ in 0..1024 {
        if done() {
            return true;
        }
    }
    let start = Instant::now();
    let mut checks = 0u32;
    loop {
        for _ in 0..1024 {
            if done() {
                return true;
            }
            if start.elapsed() > YIELD_AFTER {
                std::thread::yield_now();
            }
        }
        checks = checks.wrapping_add(1);
        if checks % 1024 == 0 && !alive() {
            return false;
        }
    }
}

fn pin(cpu: usize) -> Result<(), String> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(format!("cpu {cpu} out of range"));
    }
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: cpu is below CPU_SETSIZE (checked).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu set of the size passed.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(format!("pinning to cpu {cpu}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn first_two_cpus() -> Option<(usize, usize)> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is valid for writes of its size.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return None;
    }
    // SAFETY: CPU_ISSET reads the set we own, for indices below CPU_SETSIZE.
    let mut it = (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) });
    Some((it.next()?, it.next()?))
}

fn parse_args() -> Result<(Duration, Option<(usize, usize)>), String> {
    let mut secs = 1.0f64;
    let mut cpus = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--seconds" => {
                let v = args.next().ok_or("--seconds needs a value")?;
                secs = v.parse().map_err(|_| format!("bad --seconds {v:?}"))?;
                if !(0.001..=3600.0).contains(&secs) {
                    return Err(format!("--seconds {v}: from 0.001 to 3600"));
                }
            }
            "--cpus" => {
                let v = args.next().ok_or("--cpus needs A,B")?;
                let (x, y) = v.split_once(',').ok_or_else(|| format!("bad --cpus {v:?} (A,B)"))?;
                let p = |s: &str| s.trim().parse::<usize>().map_err(|_| format!("bad CPU {s:?}"));
                cpus = Some((p(x)?, p(y)?));
            }
            "-h" | "--help" => {
                println!("usage: lanes-spin-floor [--seconds S] [--cpus A,B]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok((Duration::from_secs_f64(secs), cpus.or_else(first_two_cpus)))
}

fn main() {
    match run() {
        Ok(()) => {}
        Err(e) => {
            eprintln!("lanes-spin-floor: {e}");
            std::process::exit(1);
        }
    }
}

fn run() -> Result<(), String> {
    let (duration, cpus) = parse_args()?;
    let len = 2 * 4096;
    // SAFETY: a fresh anonymous shared mapping at an address the kernel picks.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!("mmap: {}", std::io::Error::last_os_error()));
    }
    let base = p.cast::<u8>();
    // SAFETY: both words lie inside the mapping, page aligned, and are only ever accessed
    // atomically (by this process and its forked child); the mapping is never unmapped
    // while they are in use (the process exits first).
    let (mine, theirs) =
        unsafe { (AtomicU64::from_ptr(base.cast()), AtomicU64::from_ptr(base.add(CHILD_LINE).cast())) };
    // SAFETY: fork in a single-threaded process; the child only spins and exits.
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(format!("fork: {}", std::io::Error::last_os_error()));
    }
    if child == 0 {
        // SAFETY: prctl with PR_SET_PDEATHSIG takes a signal number.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        if let Some((_, b)) = cpus {
            if pin(b).is_err() {
                // SAFETY: _exit ends the child without running the parent's atexit handlers.
                unsafe { libc::_exit(2) };
            }
        }
        let mut last = 0u64;
        loop {
            let mut v = last;
            spin(
                || {
                    v = theirs.load(Ordering::Acquire);
                    v != last
                },
                || true,
            );
            if v == STOP {
                // SAFETY: as above.
                unsafe { libc::_exit(0) };
            }
            mine.store(v, Ordering::Release);
            last = v;
        }
    }
    if let Some((a, _)) = cpus {
        pin(a)?;
    }
    let child_alive = || {
        let mut st = 0;
        // SAFETY: waitpid on our own child with WNOHANG.
        unsafe { libc::waitpid(child, &mut st, libc::WNOHANG) == 0 }
    };
    let mut seq = 0u64;
    let round_trip = |seq: &mut u64| -> Result<(), String> {
        *seq += 1;
        let s = *seq;
        theirs.store(s, Ordering::Release);
        if spin(|| mine.load(Ordering::Acquire) == s, child_alive) {
            Ok(())
        } else {
            Err("the child died".into())
        }
    };
    // Warm up for a tenth of the time, then time whole chunks of round trips.
    let warm_until = Instant::now() + duration / 10;
    while Instant::now() < warm_until {
        for _ in 0..1024 {
            round_trip(&mut seq)?;
        }
    }
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < duration {
        for _ in 0..1024 {
            round_trip(&mut seq)?;
        }
        n += 1024;
    }
    let elapsed = t0.elapsed();
    theirs.store(STOP, Ordering::Release);
    let mut st = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(child, &mut st, 0) };
    println!("one_way_avg_ns {:.2}", elapsed.as_nanos() as f64 / n as f64 / 2.0);
    println!("round_trips {n}");
    Ok(())
}
