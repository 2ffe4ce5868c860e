//! Pinning a process to one CPU, and choosing the CPUs a two-process measurement uses.

use std::io;

/// CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is valid for writes of its size.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return (0..std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)).collect();
    }
    // SAFETY: CPU_ISSET reads the set we own, for indices below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect()
}

/// Pins the calling thread (and so a single-threaded process) to `cpu`.
pub fn pin_to(cpu: usize) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data; zeroed is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("cpu {cpu} out of range")));
    }
    // SAFETY: cpu is below CPU_SETSIZE (checked).
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: `set` is a valid cpu set of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The pair of CPUs for a client and its peer: the first two allowed, or none if only one.
pub fn default_pair() -> Option<(usize, usize)> {
    let cpus = allowed_cpus();
    (cpus.len() >= 2).then(|| (cpus[0], cpus[1]))
}

/// `--cpu A,B` if given, which must name two different CPUs (`who` says what needs them, for
/// the error), else [`default_pair`].
pub fn distinct_pair_or_default(arg: Option<&str>, who: &str) -> Result<Option<(usize, usize)>, String> {
    let Some(c) = arg else { return Ok(default_pair()) };
    let (x, y) = parse_pair(c)?;
    if x == y {
        return Err(format!("--cpu {c}: {who} need two different CPUs"));
    }
    Ok(Some((x, y)))
}

/// Parses `--cpu A,B`.
pub fn parse_pair(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s.split_once(',').ok_or_else(|| format!("--cpu wants two CPUs as A,B, got {s:?}"))?;
    let p = |x: &str| x.trim().parse::<usize>().map_err(|_| format!("bad CPU number {x:?}"));
    Ok((p(a)?, p(b)?))
}
