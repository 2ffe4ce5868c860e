//! Layer 1 of Lanes: the platform building blocks every transport and API object stands on.
//!
//! A crate of its own so that it cannot name the layers above it (`lanes`: transports,
//! fabric API, control plane); `lanes` re-exports it as `lanes::platform`. It speaks
//! `std::io::Error`; the layers above turn that into their own errors.
//!
//! - [`files`]: the private fabric directory, directory locks, atomic publication of files.
//! - [`mapping`]: `mmap` of shared files, owned and unmapped on drop.
//! - [`memory`]: volatile and atomic access to memory a peer can write; fastest copies.
//! - [`shared_slice`]: [`SharedSlice`], a bounds-carrying slice of such memory: every access
//!   is checked, so the layers above do no pointer arithmetic into it.
//! - [`liveness`]: process identities and the lock that says a process is alive.
//! - [`death_watch`]: one thread that learns of process deaths without polling (pidfd).
//! - [`futex`], [`doorbell`]: cross-process waits that spin, then sleep, and never lose a wake-up.
//! - [`net`]: what the kernel vouches for about sockets and addresses (sock_diag, cookies,
//!   peer credentials, interface addresses).
//! - [`signals`]: SIGTERM/SIGINT as something a thread waits for (the daemon's shutdown).
//! - [`spsc`]: a lock-free single-producer single-consumer ring (DMA descriptors).
//! - [`users`]: accounts of the password database, by name or uid.
//!
//! The raw access to mapped memory lives here, behind types that carry their bounds; each
//! `unsafe` block says why it is sound.

pub mod death_watch;
pub mod doorbell;
pub mod files;
pub mod futex;
pub mod liveness;
pub mod mapping;
pub mod memory;
pub mod net;
pub mod shared_slice;
pub mod signals;
pub mod spsc;
pub mod threads;
pub mod users;

pub use shared_slice::{SharedSlice, SliceError};

use std::hash::{BuildHasher, Hasher};
use std::io;

/// 64 bits no other process or start of this one is likely to pick (boot epochs, grant
/// ids, key bases): the standard library's per-process random hash keys, the clock and the
/// pid. Not for secrets.
pub fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
    h.write_u32(std::process::id());
    h.finish()
}

/// Lower-case hex of `bytes` (binary values that travel as text: endpoint names, proofs).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of lower-case or upper-case hex `text`; `None` for empty or odd-length text
/// or a non-hex digit.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || text.is_empty() {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

/// `Err(last_os_error)` when a libc call returned -1.
pub fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Shuts a listening socket down (`shutdown(2)`, both ways), which makes a thread blocked in
/// its `accept` return an error at once: how a daemon stops its accept loops without
/// connecting to itself, which fails once its socket file or network is gone.
pub fn shut_down_listener(socket: &impl std::os::fd::AsFd) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: shutdown takes a descriptor the borrow keeps open, and touches no memory.
    cvt(unsafe { libc::shutdown(socket.as_fd().as_raw_fd(), libc::SHUT_RDWR) }).map(|_| ())
}

/// The system page size.
pub fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if v > 0 {
            v as usize
        } else {
            4096
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_refuses_nonsense() {
        let b = vec![0u8, 1, 0xab, 0xff];
        assert_eq!(hex(&b), "0001abff");
        assert_eq!(unhex("0001abff").as_deref(), Some(&b[..]));
        assert_eq!(unhex("0001ABFF").as_deref(), Some(&b[..]));
        for bad in ["", "0", "zz", "0g", "é1"] {
            assert_eq!(unhex(bad), None, "{bad:?}");
        }
    }
}
