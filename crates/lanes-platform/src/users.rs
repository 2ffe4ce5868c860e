//! Accounts of the password database, looked up by name or uid (thread-safe: `getpwnam_r`).

use std::io;

/// The uid and gid of account `name` (a user name, or a numeric uid). `NotFound` names it.
pub fn account_ids(name: &str) -> io::Result<(u32, u32)> {
    let not_found = || io::Error::new(io::ErrorKind::NotFound, format!("no user {name:?}"));
    let c_name = std::ffi::CString::new(name).map_err(|_| not_found())?;
    // SAFETY: a zeroed `passwd` is a valid value to be filled in.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 << 10];
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    let rc = match name.parse::<u32>() {
        // SAFETY: every pointer is valid for the call; the strings `pw` points to live in `buf`.
        Ok(uid) => unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) },
        // SAFETY: as above; `c_name` is NUL-terminated.
        Err(_) => unsafe { libc::getpwnam_r(c_name.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut found) },
    };
    if rc != 0 {
        let e = io::Error::from_raw_os_error(rc);
        return Err(io::Error::new(e.kind(), format!("looking up user {name:?}: {e}")));
    }
    if found.is_null() {
        return Err(not_found());
    }
    Ok((pw.pw_uid, pw.pw_gid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_are_found_by_name_and_uid_and_a_missing_one_is_named() {
        assert_eq!(account_ids("root").unwrap(), (0, 0));
        assert_eq!(account_ids("0").unwrap().0, 0);
        let e = account_ids("no-such-user-lanes").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("no user \"no-such-user-lanes\""), "{e}");
    }
}
