//! Free TCP ports on 127.0.0.1, chosen below the kernel's ephemeral range and claimed
//! across every test process of the machine.

use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How long a claimed port is not handed out again: longer than any case holds one.
const CLAIM_LIFETIME: Duration = Duration::from_secs(20 * 60);

/// `n` distinct free ports on 127.0.0.1, chosen below the kernel's ephemeral range
/// (`ip_local_port_range`), each held until all are picked: a socket that binds port 0 or
/// connects, as other tests' programs do by the hundred, is never given one between its
/// choice and the server's bind. A port picked here is also claimed by a file in a
/// machine-wide directory, so a case in another test binary, running at the same time,
/// does not pick it in the moment between this choice and the daemon's own bind.
pub fn free_ports(n: usize) -> Vec<u16> {
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (low, high) = (10000u16, ephemeral_low.max(10001));
    let claims = claim_dir();
    let mut held = Vec::new();
    for _ in 0..1000 {
        if held.len() == n {
            break;
        }
        let r = std::collections::hash_map::RandomState::new().build_hasher().finish();
        let port = low + (r % u64::from(high - low)) as u16;
        if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            if claim(&claims, port) {
                held.push(l);
            }
        }
    }
    assert_eq!(held.len(), n, "no {n} free ports between {low} and {high}");
    held.iter().map(|l| l.local_addr().expect("its address").port()).collect()
}

/// One port as [`free_ports`] picks them.
pub fn free_port() -> u16 {
    free_ports(1)[0]
}

fn claim_dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    // Per user: another user's directory is not ours to write in.
    let dir = std::env::temp_dir().join(format!("lanes-test-ports-{uid}"));
    // Made by whichever case comes first; an error shows at the first claim.
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// Claims `port` for this case: true when no other claim on it is younger than
/// [`CLAIM_LIFETIME`]. An old claim is taken over by renewing its time, under the file's
/// lock, so two cases taking over the same old claim cannot both have it.
fn claim(dir: &Path, port: u16) -> bool {
    let file = dir.join(port.to_string());
    let open = |create_new| std::fs::OpenOptions::new().write(true).create_new(create_new).open(&file);
    match open(true) {
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let Ok(f) = open(false) else { return false };
            // SAFETY: flock on a descriptor this function owns; the lock goes with it.
            if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&f), libc::LOCK_EX) } != 0 {
                return false;
            }
            let age =
                f.metadata().and_then(|m| m.modified()).ok().and_then(|t| SystemTime::now().duration_since(t).ok());
            matches!(age, Some(age) if age > CLAIM_LIFETIME) && f.set_modified(SystemTime::now()).is_ok()
        }
        Err(e) => panic!("claiming port {port} in {}: {e}", dir.display()),
    }
}
