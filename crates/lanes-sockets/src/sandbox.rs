//! Whether this process runs under a seccomp filter (or has prepared for one), so the
//! library avoids system calls the program itself would not make.
//!
//! Known from the program's own `prctl(PR_SET_SECCOMP)` (OpenSSH's sandbox) and
//! `syscall(SYS_seccomp)` (libseccomp), seen before the filter is installed, and from
//! `/proc/self/status` when the library starts if the inherited mode is strict
//! (`Seccomp: 1`: nothing but read, write and exit). `PR_SET_NO_NEW_PRIVS`, which an
//! unprivileged process sets before a filter, is not taken as one: HAProxy sets it alone
//! (to refuse setuid programs), and its connections stayed kernel TCP for it.
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

/// Whether `prctl(option, ...)` installs a seccomp mode (strict or a filter).
pub fn filters(option: libc::c_int) -> bool {
    option == libc::PR_SET_SECCOMP
}

/// Whether `seccomp(op, ...)` (made through `syscall`) installs a seccomp mode.
pub fn seccomp_installs(op: libc::c_long) -> bool {
    op == libc::SECCOMP_SET_MODE_STRICT as libc::c_long || op == libc::SECCOMP_SET_MODE_FILTER as libc::c_long
}

/// A seccomp mode was installed: the library makes no system call of its own from now on.
pub fn installed() {
    FILTERED.store(true, Ordering::Relaxed);
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
