//! The C API (include/lanes_udpstream.h): opaque handles, errors as negative errno with a
//! per-thread last-error string, and no panic across the boundary (every function body runs
//! under `catch_unwind`).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::io;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use crate::{RecvOptions, RecvPath, RecvReport, SendOptions, SendPath, SendReport, StreamReceiver, StreamSender};

pub const LUS_SEQUENCE_HEADER: u32 = 0x1;
pub const LUS_FORCE_PLAIN: u32 = 0x10;
pub const LUS_FORCE_MMSG: u32 = 0x20;
pub const LUS_FORCE_FAST: u32 = 0x40;
pub const LUS_FORCE_SHM: u32 = 0x80;
pub const LUS_FORCE_URING: u32 = 0x100;
const FORCE_FLAGS: u32 = LUS_FORCE_PLAIN | LUS_FORCE_MMSG | LUS_FORCE_FAST | LUS_FORCE_SHM | LUS_FORCE_URING;
const KNOWN_FLAGS: u32 = LUS_SEQUENCE_HEADER | FORCE_FLAGS;

pub const LUS_PATH_PLAIN: c_int = 0;
pub const LUS_PATH_MMSG: c_int = 1;
pub const LUS_PATH_GSO: c_int = 2;
pub const LUS_PATH_GRO: c_int = 3;
pub const LUS_PATH_SHM: c_int = 4;
pub const LUS_PATH_URING: c_int = 5;

/// `struct lus_send_report`.
#[repr(C)]
pub struct LusSendReport {
    pub datagrams: u64,
    pub bytes: u64,
    pub system_calls: u64,
    pub first_sequence: u64,
    pub path: c_int,
    pub dropped: u64,
}

/// `struct lus_recv_report`.
#[repr(C)]
pub struct LusRecvReport {
    pub bytes: u64,
    pub datagrams: u64,
    pub gaps: u64,
    pub reordered: u64,
    pub rejected: u64,
    pub truncated: u64,
    pub system_calls: u64,
    pub next_sequence: u64,
    pub stream_id: u32,
    pub has_stream: c_int,
    pub path: c_int,
}

thread_local! {
    static LAST_ERROR: RefCell<(c_int, CString)> = RefCell::new((0, CString::default()));
    static STRERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn errno_of(e: &io::Error) -> c_int {
    if let Some(n) = e.raw_os_error() {
        return n;
    }
    match e.kind() {
        io::ErrorKind::InvalidInput => libc::EINVAL,
        io::ErrorKind::TimedOut => libc::ETIMEDOUT,
        io::ErrorKind::NotFound => libc::ENOENT,
        io::ErrorKind::WouldBlock => libc::EAGAIN,
        _ => libc::EIO,
    }
}

fn set_error(code: c_int, msg: &str) -> c_int {
    let text = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|l| *l.borrow_mut() = (-code, text));
    -code
}

fn fail(e: io::Error) -> c_int {
    set_error(errno_of(&e), &e.to_string())
}

/// Runs `f`, turning a panic into -ENOTRECOVERABLE.
fn guard<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        set_error(libc::ENOTRECOVERABLE, "internal error (a panic in liblanes_udpstream)");
        on_panic
    })
}

fn flags_ok(flags: u32) -> Result<(), c_int> {
    if flags & !KNOWN_FLAGS != 0 {
        return Err(set_error(libc::EINVAL, &format!("unknown flags {:#x}", flags & !KNOWN_FLAGS)));
    }
    if (flags & FORCE_FLAGS).count_ones() > 1 {
        return Err(set_error(libc::EINVAL, "at most one LUS_FORCE_* flag"));
    }
    Ok(())
}

/// The C string at `p`, or an error (null: `default`).
///
/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn text(p: *const c_char, default: Option<&str>) -> Result<&str, c_int> {
    if p.is_null() {
        return default.ok_or_else(|| set_error(libc::EINVAL, "a null host"));
    }
    // SAFETY: the caller passes a NUL-terminated string (the header's contract).
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| set_error(libc::EINVAL, "the host is not UTF-8"))
}

fn send_path(p: SendPath) -> c_int {
    match p {
        SendPath::Gso => LUS_PATH_GSO,
        SendPath::Mmsg => LUS_PATH_MMSG,
        SendPath::Plain => LUS_PATH_PLAIN,
        SendPath::Shm => LUS_PATH_SHM,
        SendPath::Uring => LUS_PATH_URING,
    }
}

fn recv_path(p: RecvPath) -> c_int {
    match p {
        RecvPath::Gro => LUS_PATH_GRO,
        RecvPath::Mmsg => LUS_PATH_MMSG,
        RecvPath::Plain => LUS_PATH_PLAIN,
        RecvPath::Shm => LUS_PATH_SHM,
        RecvPath::Uring => LUS_PATH_URING,
    }
}

/// Opens a sender to `host`:`port` (NULL on error: `lus_last_error`).
///
/// # Safety
/// `host` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn lus_sender_open(
    host: *const c_char,
    port: u16,
    datagram_size: usize,
    flags: u32,
) -> *mut StreamSender {
    guard(std::ptr::null_mut(), || {
        if flags_ok(flags).is_err() {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded from the caller's contract.
        let Ok(host) = (unsafe { text(host, None) }) else { return std::ptr::null_mut() };
        let mut o = SendOptions::new(datagram_size);
        o.sequence_header = flags & LUS_SEQUENCE_HEADER != 0;
        o.path = if flags & LUS_FORCE_PLAIN != 0 {
            Some(SendPath::Plain)
        } else if flags & LUS_FORCE_MMSG != 0 {
            Some(SendPath::Mmsg)
        } else if flags & LUS_FORCE_FAST != 0 {
            Some(SendPath::Gso)
        } else if flags & LUS_FORCE_SHM != 0 {
            Some(SendPath::Shm)
        } else if flags & LUS_FORCE_URING != 0 {
            Some(SendPath::Uring)
        } else {
            None
        };
        match StreamSender::connect((host, port), o) {
            Ok(s) => Box::into_raw(Box::new(s)),
            Err(e) => {
                fail(e);
                std::ptr::null_mut()
            }
        }
    })
}

/// # Safety
/// `s` is null or a live handle from `lus_sender_open`.
unsafe fn sender<'a>(s: *mut StreamSender) -> Result<&'a mut StreamSender, c_int> {
    // SAFETY: per the contract, a non-null `s` is a live handle owned by the caller, not
    // used by another thread during this call.
    unsafe { s.as_mut() }.ok_or_else(|| set_error(libc::EINVAL, "a null sender"))
}

/// # Safety
/// `r` is null or a live handle from `lus_receiver_open`.
unsafe fn receiver<'a>(r: *mut StreamReceiver) -> Result<&'a mut StreamReceiver, c_int> {
    // SAFETY: as for `sender`.
    unsafe { r.as_mut() }.ok_or_else(|| set_error(libc::EINVAL, "a null receiver"))
}

fn fill_send(report: *mut LusSendReport, r: &SendReport) {
    if report.is_null() {
        return;
    }
    let v = LusSendReport {
        datagrams: r.datagrams,
        bytes: r.bytes,
        system_calls: r.system_calls,
        first_sequence: r.first_sequence,
        path: send_path(r.path),
        dropped: r.dropped,
    };
    // SAFETY: a non-null `report` points at a writable struct lus_send_report (contract).
    unsafe { report.write(v) };
}

fn fill_recv(report: *mut LusRecvReport, r: &RecvReport) {
    if report.is_null() {
        return;
    }
    let v = LusRecvReport {
        bytes: r.bytes as u64,
        datagrams: r.datagrams,
        gaps: r.gaps,
        reordered: r.reordered,
        rejected: r.rejected,
        truncated: r.truncated,
        system_calls: r.system_calls,
        next_sequence: r.next_sequence.unwrap_or(0),
        stream_id: r.stream_id.unwrap_or(0),
        has_stream: r.stream_id.is_some() as c_int,
        path: recv_path(r.path),
    };
    // SAFETY: a non-null `report` points at a writable struct lus_recv_report (contract).
    unsafe { report.write(v) };
}

/// Sends `len` bytes at `block`: the datagrams sent, or a negative errno.
///
/// # Safety
/// `s` is a live sender; `block` points at `len` readable bytes (may be null when `len` is
/// 0); `report` is null or writable.
#[no_mangle]
pub unsafe extern "C" fn lus_send_block(
    s: *mut StreamSender,
    block: *const c_void,
    len: usize,
    report: *mut LusSendReport,
) -> i64 {
    guard(-(libc::ENOTRECOVERABLE as i64), || {
        // SAFETY: forwarded from the caller's contract.
        let s = match unsafe { sender(s) } {
            Ok(s) => s,
            Err(e) => return e as i64,
        };
        if block.is_null() && len > 0 {
            return set_error(libc::EFAULT, "a null block") as i64;
        }
        let data: &[u8] = if len == 0 {
            &[]
        } else {
            // SAFETY: `block` points at `len` readable bytes (contract), not written during
            // the call.
            unsafe { std::slice::from_raw_parts(block.cast::<u8>(), len) }
        };
        match s.send_block(data) {
            Ok(r) => {
                fill_send(report, &r);
                r.datagrams as i64
            }
            Err(e) => fail(e) as i64,
        }
    })
}

/// # Safety
/// `s` is a live sender.
#[no_mangle]
pub unsafe extern "C" fn lus_sender_set_sequence(s: *mut StreamSender, next: u64) -> c_int {
    guard(-libc::ENOTRECOVERABLE, || {
        // SAFETY: forwarded from the caller's contract.
        match unsafe { sender(s) } {
            Ok(s) => {
                s.set_sequence(next);
                0
            }
            Err(e) => e,
        }
    })
}

/// # Safety
/// `s` is a live sender.
#[no_mangle]
pub unsafe extern "C" fn lus_sender_sequence(s: *mut StreamSender) -> u64 {
    // SAFETY: forwarded from the caller's contract.
    guard(0, || unsafe { sender(s) }.map_or(0, |s| s.sequence()))
}

/// # Safety
/// `s` is a live sender.
#[no_mangle]
pub unsafe extern "C" fn lus_sender_path(s: *mut StreamSender) -> c_int {
    // SAFETY: forwarded from the caller's contract.
    guard(-libc::ENOTRECOVERABLE, || unsafe { sender(s) }.map_or_else(|e| e, |s| send_path(s.path())))
}

/// # Safety
/// `s` is null or a live sender, not used after.
#[no_mangle]
pub unsafe extern "C" fn lus_sender_close(s: *mut StreamSender) {
    guard((), || {
        if !s.is_null() {
            // SAFETY: `s` came from Box::into_raw in lus_sender_open and is closed once.
            drop(unsafe { Box::from_raw(s) });
        }
    })
}

/// Opens a receiver bound to `addr` (NULL: all IPv4 addresses) and `port` (0: ephemeral).
///
/// # Safety
/// `addr` is null or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn lus_receiver_open(
    addr: *const c_char,
    port: u16,
    datagram_size: usize,
    flags: u32,
) -> *mut StreamReceiver {
    guard(std::ptr::null_mut(), || {
        if flags_ok(flags).is_err() {
            return std::ptr::null_mut();
        }
        // SAFETY: forwarded from the caller's contract.
        let Ok(addr) = (unsafe { text(addr, Some("0.0.0.0")) }) else { return std::ptr::null_mut() };
        let mut o = RecvOptions::new(datagram_size);
        o.sequence_header = flags & LUS_SEQUENCE_HEADER != 0;
        o.path = if flags & LUS_FORCE_PLAIN != 0 {
            Some(RecvPath::Plain)
        } else if flags & LUS_FORCE_MMSG != 0 {
            Some(RecvPath::Mmsg)
        } else if flags & LUS_FORCE_FAST != 0 {
            Some(RecvPath::Gro)
        } else if flags & LUS_FORCE_SHM != 0 {
            Some(RecvPath::Shm)
        } else if flags & LUS_FORCE_URING != 0 {
            Some(RecvPath::Uring)
        } else {
            None
        };
        match StreamReceiver::bind((addr, port), o) {
            Ok(r) => Box::into_raw(Box::new(r)),
            Err(e) => {
                fail(e);
                std::ptr::null_mut()
            }
        }
    })
}

/// The bound port, or a negative errno.
///
/// # Safety
/// `r` is a live receiver.
#[no_mangle]
pub unsafe extern "C" fn lus_receiver_port(r: *mut StreamReceiver) -> c_int {
    guard(-libc::ENOTRECOVERABLE, || {
        // SAFETY: forwarded from the caller's contract.
        match unsafe { receiver(r) }.map(|r| r.local_addr()) {
            Ok(Ok(a)) => a.port() as c_int,
            Ok(Err(e)) => fail(e),
            Err(e) => e,
        }
    })
}

/// The socket, to poll for readability before `lus_recv_block(.., 0, ..)`.
///
/// # Safety
/// `r` is a live receiver.
#[no_mangle]
pub unsafe extern "C" fn lus_receiver_fd(r: *mut StreamReceiver) -> c_int {
    use std::os::fd::AsRawFd;
    // SAFETY: forwarded from the caller's contract.
    guard(-libc::ENOTRECOVERABLE, || unsafe { receiver(r) }.map_or_else(|e| e, |r| r.as_raw_fd()))
}

/// # Safety
/// `r` is a live receiver.
#[no_mangle]
pub unsafe extern "C" fn lus_receiver_path(r: *mut StreamReceiver) -> c_int {
    // SAFETY: forwarded from the caller's contract.
    guard(-libc::ENOTRECOVERABLE, || unsafe { receiver(r) }.map_or_else(|e| e, |r| recv_path(r.path())))
}

/// Sets how long a block waits for more once its first datagram came.
///
/// # Safety
/// `r` is a live receiver.
#[no_mangle]
pub unsafe extern "C" fn lus_receiver_set_idle_us(r: *mut StreamReceiver, idle_us: u32) -> c_int {
    guard(-libc::ENOTRECOVERABLE, || {
        // SAFETY: forwarded from the caller's contract.
        match unsafe { receiver(r) } {
            Ok(r) => {
                r.set_idle(Duration::from_micros(idle_us as u64));
                0
            }
            Err(e) => e,
        }
    })
}

/// Fills `buf` with datagram payloads: the bytes written, or a negative errno
/// (-ETIMEDOUT: nothing within `timeout_ms`). `timeout_ms` < 0 waits for ever; 0 polls
/// (returns 0 when nothing had arrived).
///
/// # Safety
/// `r` is a live receiver; `buf` points at `len` writable bytes; `report` is null or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn lus_recv_block(
    r: *mut StreamReceiver,
    buf: *mut c_void,
    len: usize,
    timeout_ms: c_int,
    report: *mut LusRecvReport,
) -> i64 {
    guard(-(libc::ENOTRECOVERABLE as i64), || {
        // SAFETY: forwarded from the caller's contract.
        let r = match unsafe { receiver(r) } {
            Ok(r) => r,
            Err(e) => return e as i64,
        };
        if buf.is_null() {
            return set_error(libc::EFAULT, "a null buffer") as i64;
        }
        // SAFETY: `buf` points at `len` writable bytes (contract), used by no one else
        // during the call.
        let b = unsafe { std::slice::from_raw_parts_mut(buf.cast::<u8>(), len) };
        let res = match timeout_ms {
            0 => r.try_recv_block(b),
            t if t < 0 => r.recv_block(b, None),
            t => r.recv_block(b, Some(Duration::from_millis(t as u64))),
        };
        match res {
            Ok(rep) => {
                fill_recv(report, &rep);
                rep.bytes as i64
            }
            Err(e) => fail(e) as i64,
        }
    })
}

/// # Safety
/// `r` is null or a live receiver, not used after.
#[no_mangle]
pub unsafe extern "C" fn lus_receiver_close(r: *mut StreamReceiver) {
    guard((), || {
        if !r.is_null() {
            // SAFETY: `r` came from Box::into_raw in lus_receiver_open and is closed once.
            drop(unsafe { Box::from_raw(r) });
        }
    })
}

/// The last error of this thread's calls, as a negative errno (0: none yet).
#[no_mangle]
pub extern "C" fn lus_last_error() -> c_int {
    guard(-libc::ENOTRECOVERABLE, || LAST_ERROR.with(|l| l.borrow().0))
}

/// The last error's message (valid until this thread's next failing call).
#[no_mangle]
pub extern "C" fn lus_last_error_message() -> *const c_char {
    guard(c"internal error".as_ptr(), || LAST_ERROR.with(|l| l.borrow().1.as_ptr()))
}

/// Text for a (negative or positive) errno: the last error's message when `code` is the
/// last error, else the system's text. Valid until this thread's next call.
#[no_mangle]
pub extern "C" fn lus_strerror(code: c_int) -> *const c_char {
    guard(c"internal error".as_ptr(), || {
        let code = code.checked_abs().unwrap_or(0);
        let last = LAST_ERROR.with(|l| {
            let l = l.borrow();
            (l.0 == -code && code != 0).then(|| l.1.clone())
        });
        let text = match last {
            Some(t) => t,
            None if code == 0 => CString::from(c"no error"),
            None => {
                let e = io::Error::from_raw_os_error(code).to_string();
                CString::new(e).unwrap_or_default()
            }
        };
        STRERROR.with(|s| {
            *s.borrow_mut() = text;
            s.borrow().as_ptr()
        })
    })
}
