//! Dropping privileges once the interface is set up: every capability goes (bounding set,
//! ambient set, then effective, permitted and inheritable), and `no_new_privs` keeps an
//! executed program from getting any back. What remains (reading and writing the queues,
//! carrier changes on the open device) needs none.

use std::io;

/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAP_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops every capability of the process (all threads: call it before starting any).
pub fn drop_all() -> io::Result<()> {
    // The bounding set first: that needs CAP_SETPCAP, which the capset below removes.
    // Numbers past the kernel's last capability fail with EINVAL, which ends the loop.
    for cap in 0..64 {
        // SAFETY: prctl with integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINVAL) => break,
                // Without CAP_SETPCAP the bounding set stays; the sets below still empty.
                Some(libc::EPERM) => break,
                _ => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("dropping capability {cap} from the bounding set: {e}"),
                    ))
                }
            }
        }
    }
    // SAFETY: prctl with integer arguments only; fails harmlessly on kernels without ambient sets.
    unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    let mut header = CapHeader { version: CAP_VERSION_3, pid: 0 };
    let data = [CapData::default(); 2];
    // SAFETY: capset reads a valid header and two data words, both alive for the call.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut CapHeader, data.as_ptr()) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("dropping capabilities (capset): {e}")));
    }
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("setting no_new_privs: {e}")));
    }
    Ok(())
}

/// The effective capabilities of this process (`CapEff` of /proc/self/status).
pub fn effective() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("CapEff:")).and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .unwrap_or(0)
}
