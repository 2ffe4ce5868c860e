//! Whether this process runs under a seccomp filter (or has prepared for one), so the
//! library avoids system calls the program itself would not make.
//!
//! Known from the program's own `prctl` (`PR_SET_SECCOMP`, and `PR_SET_NO_NEW_PRIVS`, which
//! an unprivileged process must set before installing a filter: OpenSSH's sandbox and
//! libseccomp both set it through `prctl`), and from `/proc/self/status` when the library
//! starts if the inherited mode is strict (`Seccomp: 1`: nothing but read, write and exit).
//! An inherited filter (`Seccomp: 2`) is not taken as one: container runtimes and service
//! managers start every program under a filter that allows the calls a socket program makes,
//! and the careful mode costs such programs speed (no forced TCP_NODELAY, no late pairing).

use std::sync::atomic::{AtomicBool, Ordering};

static FILTERED: AtomicBool = AtomicBool::new(false);

/// Whether a seccomp filter may be in force.
#[inline]
pub fn filtered() -> bool {
    FILTERED.load(Ordering::Relaxed)
}

/// Whether `prctl(option, arg2, ...)` installs a filter or prepares for one.
pub fn filters(option: libc::c_int, arg2: libc::c_ulong) -> bool {
    option == libc::PR_SET_SECCOMP || (option == libc::PR_SET_NO_NEW_PRIVS && arg2 != 0)
}

/// The program made `prctl(option, arg2, ...)`, which succeeded.
pub fn after_prctl(option: libc::c_int, arg2: libc::c_ulong) {
    if filters(option, arg2) {
        FILTERED.store(true, Ordering::Relaxed);
    }
}

/// At start-up: strict seccomp inherited across exec (`Seccomp: 1`).
pub fn detect_inherited() {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return };
    for line in status.lines() {
        let mut f = line.split_whitespace();
        if let (Some("Seccomp:"), Some("1")) = (f.next(), f.next()) {
            FILTERED.store(true, Ordering::Relaxed);
        }
    }
}
