//! The system calls: socket options, `sendmsg`/`sendmmsg` with a `UDP_SEGMENT` cmsg,
//! `recvmsg` with a `UDP_GRO` cmsg, `recvmmsg`, SO_RCVTIMEO. The only unsafe code of the crate
//! besides the C boundary.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// `SOL_UDP` options (linux/udp.h), not in every libc flavour of the `libc` crate.
pub const UDP_SEGMENT: libc::c_int = 103;
pub const UDP_GRO: libc::c_int = 104;
/// asm-generic/socket.h (x86, arm, riscv...).
const SO_SNDBUFFORCE: libc::c_int = 32;
const SO_RCVBUFFORCE: libc::c_int = 33;

/// Room for one cmsg carrying an int (CMSG_SPACE(4) is 24 on 64-bit; 8-byte aligned).
pub type CmsgBuf = [u64; 4];

pub fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: `value` lives across the call and its size is passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks for a socket buffer of `bytes`: the FORCE option first (root), then the plain one
/// (capped by net.core.[rw]mem_max). Best effort.
pub fn set_buffer(fd: RawFd, receive: bool, bytes: usize) {
    let v = bytes.min(i32::MAX as usize / 2) as libc::c_int;
    let (force, plain) = if receive { (SO_RCVBUFFORCE, libc::SO_RCVBUF) } else { (SO_SNDBUFFORCE, libc::SO_SNDBUF) };
    if setsockopt_int(fd, libc::SOL_SOCKET, force, v).is_err() {
        let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, v);
    }
}

/// A zeroed `mmsghdr`.
pub fn empty_mmsghdr() -> libc::mmsghdr {
    // SAFETY: mmsghdr is plain data (pointers and integers); all-zero is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Writes one `SOL_UDP`/`UDP_SEGMENT` cmsg with `segment` into `buf` and points `msg` at it.
pub fn put_segment_cmsg(msg: &mut libc::msghdr, buf: &mut CmsgBuf, segment: u16) {
    // SAFETY: CMSG_SPACE is arithmetic.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<u16>() as u32) } as usize;
    debug_assert!(space <= std::mem::size_of::<CmsgBuf>());
    msg.msg_control = buf.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: msg_control points at `buf`, 8-byte aligned and at least `space` bytes, so the
    // first header and its 2 data bytes are inside it; the writes stay in `buf`.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(msg);
        debug_assert!(!c.is_null());
        (*c).cmsg_level = libc::SOL_UDP;
        (*c).cmsg_type = UDP_SEGMENT;
        (*c).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<u16>() as u32) as _;
        std::ptr::copy_nonoverlapping(segment.to_ne_bytes().as_ptr(), libc::CMSG_DATA(c), 2);
    }
}

/// `sendmmsg(fd, msgs, 0)`: the number of messages sent.
///
/// Every message must point at iovecs, buffers and cmsgs valid for the call (the caller
/// builds them from live slices just before).
pub fn sendmmsg(fd: RawFd, msgs: &mut [libc::mmsghdr]) -> io::Result<usize> {
    // SAFETY: `msgs` is a valid array of `msgs.len()` headers whose pointers the caller
    // keeps valid for the call; the kernel writes only each `msg_len`.
    let n = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), msgs.len() as libc::c_uint, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `sendmsg(fd, msg, 0)`: the bytes sent.
pub fn sendmsg(fd: RawFd, msg: &libc::msghdr) -> io::Result<usize> {
    // SAFETY: `msg` and what it points at are valid for the call (the caller's live slices).
    let n = unsafe { libc::sendmsg(fd, msg, 0) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// `recvmsg`: the bytes received; `None` when nothing is queued (without `wait`) or nothing
/// came within SO_RCVTIMEO (with `wait`).
pub fn recvmsg(fd: RawFd, msg: &mut libc::msghdr, wait: bool) -> io::Result<Option<usize>> {
    let flags = if wait { 0 } else { libc::MSG_DONTWAIT };
    loop {
        // SAFETY: `msg` points at iovecs over the caller's live, writable buffers and at a
        // control buffer of `msg_controllen` bytes; the kernel writes only inside them.
        let n = unsafe { libc::recvmsg(fd, msg, flags) };
        if n >= 0 {
            return Ok(Some(n as usize));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => return Ok(None),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// `recvmmsg`: the messages received; 0 when nothing is queued (without `wait`) or nothing
/// came within SO_RCVTIMEO (with `wait`: MSG_WAITFORONE, it waits for the first only).
pub fn recvmmsg(fd: RawFd, msgs: &mut [libc::mmsghdr], wait: bool) -> io::Result<usize> {
    let flags = if wait { libc::MSG_WAITFORONE } else { libc::MSG_DONTWAIT };
    loop {
        // SAFETY: as for `recvmsg`, for each of the `msgs.len()` headers.
        let n =
            unsafe { libc::recvmmsg(fd, msgs.as_mut_ptr(), msgs.len() as libc::c_uint, flags, std::ptr::null_mut()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EAGAIN) => return Ok(0),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// SO_RCVTIMEO: how long a blocking receive waits (`None`: no limit).
pub fn set_rcvtimeo(fd: RawFd, t: Option<Duration>) -> io::Result<()> {
    let tv = match t {
        None => libc::timeval { tv_sec: 0, tv_usec: 0 },
        Some(d) => libc::timeval {
            tv_sec: d.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_usec: d.subsec_micros().max(if d.as_secs() == 0 { 1 } else { 0 }) as libc::suseconds_t,
        },
    };
    // SAFETY: `tv` lives across the call and its size is passed; the kernel only reads it.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The `UDP_GRO` segment size in a received message's control data, if any.
pub fn gro_segment(msg: &libc::msghdr) -> Option<usize> {
    if msg.msg_controllen == 0 {
        return None;
    }
    // SAFETY: the kernel filled msg_control (our buffer) with `msg_controllen` bytes of
    // well-formed cmsgs; CMSG_FIRSTHDR/NXTHDR stay within that length, and each int is read
    // unaligned from inside its cmsg's data.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return (v > 0).then_some(v as usize);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
}
