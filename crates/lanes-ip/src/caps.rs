//! Dropping privileges once the interface is set up: root becomes the account `--user`
//! names (a process of uid 0 without capabilities still owns root's files), every
//! capability goes (bounding set, ambient set, then effective, permitted and inheritable),
//! and `no_new_privs` keeps an executed program from getting any back. What remains
//! (reading and writing the queues, carrier changes on the open device) needs none.

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

/// An account to run as once the interface is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl Account {
    /// The account `name` (a user name, or a numeric uid) of the password database.
    pub fn lookup(name: &str) -> io::Result<Account> {
        let (uid, gid) = lanes::platform::users::account_ids(name)?;
        Ok(Account { name: name.to_string(), uid, gid })
    }
}

/// This process's real uid.
pub fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

/// Becomes `to`: supplementary groups none but its group, then its gid and uid (real,
/// effective and saved). Needs CAP_SETGID and CAP_SETUID, unless the process is `to`
/// already.
fn become_account(to: &Account) -> io::Result<()> {
    // SAFETY: getuid/geteuid have no preconditions and cannot fail.
    if unsafe { libc::getuid() == to.uid && libc::geteuid() == to.uid } {
        return Ok(());
    }
    let why = |what: &str| {
        let e = io::Error::last_os_error();
        io::Error::new(e.kind(), format!("becoming user {} (uid {}): {what}: {e}", to.name, to.uid))
    };
    // SAFETY: setgroups reads one gid from a valid pointer.
    if unsafe { libc::setgroups(1, &to.gid) } != 0 {
        return Err(why("setgroups"));
    }
    // SAFETY: setresgid/setresuid with integer arguments only (the C library applies them
    // to every thread; there is one).
    if unsafe { libc::setresgid(to.gid, to.gid, to.gid) } != 0 {
        return Err(why("setresgid"));
    }
    // SAFETY: as above.
    if unsafe { libc::setresuid(to.uid, to.uid, to.uid) } != 0 {
        return Err(why("setresuid"));
    }
    Ok(())
}

/// Drops every capability of the process, first becoming `user` if one is given (all
/// threads: call it before starting any).
pub fn drop_all(user: Option<&Account>) -> io::Result<()> {
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
    // CAP_SETUID and CAP_SETGID are still effective (only the bounding set lost them).
    if let Some(to) = user {
        become_account(to)?;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_are_found_by_name_and_uid_and_a_missing_one_is_named() {
        let root = Account::lookup("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert_eq!(Account::lookup("0").unwrap().uid, 0);
        let e = Account::lookup("no-such-user-lanes").unwrap_err();
        assert!(e.to_string().contains("no user \"no-such-user-lanes\""), "{e}");
    }
}
