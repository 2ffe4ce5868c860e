//! Mapping the fabric's errors onto `sci_error_t`, in one place; each thread's last failure
//! with its full message, which `SCIGetErrorString` gives; and the one-line reports on stderr
//! of failures whose code cannot tell their cause.
//!
//! A code says what kind of failure happened, not always why: `SCI_ERR_SYSTEM` from a corrupt
//! or hostile file in the fabric directory, a configuration error or a failed system call
//! leaves a C program nothing to act on. So:
//!
//! - Each thread keeps its last failed call: the code, the function and, when the fabric
//!   said why, the fabric's message. `SCIGetErrorString(code)` for that code gives
//!   `"<the code's string>: <the message>"`; for any other code, or when the failure has no
//!   message (a bad parameter, say), the code's fixed string. The vendor's function returns
//!   strings that stay valid, so these do too: each distinct message is kept for the life of
//!   the process (at most [`MAX_MESSAGES`] of them; past that, the fixed strings).
//! - A failure whose code hides its cause ([`hides_cause`]) is also reported as one line on
//!   stderr, by default: `libsisci (lanes): SCIConnectSegment: <message> (SCI_ERR_SYSTEM)`.
//!   A line identical to the previous report is not repeated (a program retrying in a loop
//!   prints it once). `LANES_SISCI_QUIET=1` silences these lines; `LANES_SISCI_DEBUG=1`
//!   prints a line for every failed call (and wins over QUIET). Nothing goes to stdout.
//!
//! Recording costs nothing on success: `ffi::call` records only when the call failed.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::ffi::{c_char, CStr, CString};
use std::io::{self, ErrorKind, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::consts::*;

/// A failed call's `sci_error_t`. `?` turns a [`lanes::Error`] into its code.
///
/// Convert a `lanes::Error` only to fail with it: the conversion keeps the error as the
/// cause of the thread's next failure (which `failed` records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Code(pub SciError);

/// The result of an implementation function.
pub type SciResult<T> = Result<T, Code>;

/// Shorthand for failing with `code`.
pub fn fail<T>(code: SciError) -> SciResult<T> {
    Err(Code(code))
}

impl From<lanes::Error> for Code {
    fn from(e: lanes::Error) -> Code {
        let code = code_of(&e);
        // The message is made only if the call fails with this code (in `failed`).
        let _ = CAUSE.try_with(|c| {
            if let Ok(mut c) = c.try_borrow_mut() {
                *c = Some((code, e));
            }
        });
        Code(code)
    }
}

/// The one mapping of the fabric's errors onto SISCI codes.
pub fn code_of(e: &lanes::Error) -> SciError {
    use lanes::Error as E;
    match e {
        E::InvalidNodeId { .. } => SCI_ERR_ILLEGAL_NODEID,
        E::Config { .. } => SCI_ERR_SYSTEM,
        E::SegmentIdInUse { .. } => SCI_ERR_SEGMENTID_USED,
        E::NoSuchSegment { .. } => SCI_ERR_NO_SUCH_SEGMENT,
        E::NotAvailable { .. } => SCI_ERR_CONNECTION_REFUSED,
        E::Timeout { .. } => SCI_ERR_TIMEOUT,
        E::OutOfRange { .. } => SCI_ERR_OUT_OF_RANGE,
        E::Misaligned { .. } => SCI_ERR_OFFSET_ALIGNMENT,
        E::InvalidSize { .. } => SCI_ERR_ILLEGAL_PARAMETER,
        E::SegmentBusy { .. } => SCI_ERR_BUSY,
        E::NotPrepared { .. } => SCI_ERR_SEGMENT_NOT_PREPARED,
        E::CorruptSegment { .. } => SCI_ERR_SYSTEM,
        E::TooManyConnections { .. } => SCI_ERR_NOSPC,
        E::ReadOnly => SCI_ERR_ACCESS,
        E::SegmentLost { .. } => SCI_ERR_NOT_CONNECTED,
        E::NoSuchInterrupt { .. } => SCI_ERR_NO_SUCH_INTNO,
        E::InterruptNumberInUse { .. } => SCI_ERR_BUSY,
        E::InterruptLost { .. } => SCI_ERR_NOT_CONNECTED,
        E::InterruptRemoved { .. } => SCI_ERR_CANCELLED,
        // A data interrupt's full queue: the vendor's "no space" (programs written for it
        // tolerate SCI_ERR_NOSPC from SCITriggerDataInterrupt and go on: kritjo/sisci-perf,
        // lib/common_read_write_functions.h).
        E::QueueFull { .. } => SCI_ERR_NOSPC,
        E::BufferTooSmall { .. } => SCI_ERR_OVERFLOW,
        E::PayloadTooLarge { .. } => SCI_ERR_ILLEGAL_PARAMETER,
        E::TooManyEntries { .. } => SCI_ERR_MAX_ENTRIES,
        E::DmaFailed { .. } => SCI_ERR_TRANSFER_FAILED,
        // Reflective groups. A fabric holds at most four groups, as a multicast adapter
        // holds a few: running out is SCI_ERR_NOSPC, the documented "out of resources" code
        // (also what too many connections give). HW_NOSPC would name an adapter limit, and
        // Lanes' limit is a fabric-wide count, not hardware.
        E::TooManyGroups { .. } => SCI_ERR_NOSPC,
        E::GroupInUse { .. } => SCI_ERR_SEGMENTID_USED,
        E::NotAReceiver { .. } => SCI_ERR_CONNECTION_REFUSED,
        E::NoSuchGroup { .. } => SCI_ERR_NO_SUCH_SEGMENT,
        E::Malformed(_) => SCI_ERR_TRANSFER_FAILED,
        E::IllegalOperation(_) => SCI_ERR_ILLEGAL_OPERATION,
        E::NodeUnreachable { .. } => SCI_ERR_NODE_NOT_RESPONDING,
        // libfabric's codes are errno values: out of memory or descriptors is out of
        // resources, as for a system call.
        E::Ofi { code, .. } if resource_errno(*code) => SCI_ERR_NOSPC,
        E::Ofi { .. } => SCI_ERR_TRANSFER_FAILED,
        E::Cluster(_) => SCI_ERR_SYSTEM,
        E::Io { source, .. } => io_code(source),
        #[allow(unreachable_patterns)]
        _ => SCI_ERR_SYSTEM,
    }
}

/// The code of a failed system call. Running out of descriptors (a process's `EMFILE` or
/// the system's `ENFILE`), memory or space is `SCI_ERR_NOSPC`, the API's "out of resources"
/// code (what a program that creates until it fails expects), wherever in the error's chain
/// the system's error is.
fn io_code(e: &io::Error) -> SciError {
    if out_of_resources(e) {
        return SCI_ERR_NOSPC;
    }
    match e.kind() {
        ErrorKind::PermissionDenied => SCI_ERR_ACCESS,
        ErrorKind::InvalidInput => SCI_ERR_ILLEGAL_PARAMETER,
        _ => SCI_ERR_SYSTEM,
    }
}

/// `EMFILE`, `ENFILE`, `ENOMEM`, `ENOSPC` and `EDQUOT` (a quota is space too).
fn resource_errno(errno: i32) -> bool {
    matches!(errno, libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOSPC | libc::EDQUOT)
}

/// Whether `e`, or an error it wraps, says that memory, descriptors or space ran out.
/// `io::Error::new(kind, inner)` hides `inner` from `source()` (which starts at the inner
/// error's own source), so the walk also looks through `get_ref`.
fn out_of_resources(e: &io::Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    // Chains are short; the bound only guards against a cycle of hand-written sources.
    for _ in 0..16 {
        let Some(err) = next else { break };
        if let Some(io) = err.downcast_ref::<io::Error>() {
            if matches!(io.kind(), ErrorKind::StorageFull | ErrorKind::OutOfMemory)
                || io.raw_os_error().is_some_and(resource_errno)
            {
                return true;
            }
            if let Some(inner) = io.get_ref() {
                next = Some(inner);
                continue;
            }
        }
        next = err.source();
    }
    false
}

/// Whether the code of `e` leaves its cause unsaid, so that the failure is worth a line on
/// stderr: a corrupt or hostile object file, a configuration error, a failed system call,
/// a peer's malformed data, libfabric's or the control plane's failures. The others
/// (no such segment, a timeout, a refused connection, ...) say what happened and are part
/// of programs' normal work (polling for a segment, say): they print nothing.
pub fn hides_cause(e: &lanes::Error) -> bool {
    use lanes::Error as E;
    matches!(
        e,
        E::Config { .. } | E::CorruptSegment { .. } | E::Io { .. } | E::Malformed(_) | E::Ofi { .. } | E::Cluster(_)
    )
}

/// `LANES_SISCI_DEBUG=1` reports every failed call on stderr, with the fabric's message
/// when there is one.
fn debug_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| env_flag("LANES_SISCI_DEBUG"))
}

/// `LANES_SISCI_QUIET=1` silences the default reports of failures that hide their cause.
fn quiet() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| env_flag("LANES_SISCI_QUIET"))
}

fn env_flag(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The symbolic name of a code ("SCI_ERR_TIMEOUT"), or "unknown".
pub fn name_of(code: SciError) -> &'static str {
    ERRORS.iter().find(|(c, _, _)| *c == code).map_or("unknown", |(_, n, _)| n)
}

/// The fixed string of `code` (what `SCIGetErrorString` gives unless `code` is the one the
/// thread's last failed call returned with a message).
pub fn string_of(code: SciError) -> &'static CStr {
    ERRORS.iter().find(|(c, _, _)| *c == code).map_or(c"Unknown SISCI error code", |(_, _, s)| s)
}

/// `SCIGetErrorString`: the thread's last failure's full message if it failed with `code`,
/// else the code's fixed string.
pub(crate) fn error_string(code: SciError) -> *const c_char {
    detailed_string(code).unwrap_or_else(|| string_of(code)).as_ptr()
}

// ---- the last failure of each thread -------------------------------------------------------

/// A failed call, as its thread remembers it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// The code the call returned.
    pub code: SciError,
    /// The exported function that failed ("SCIConnectSegment"), or "libsisci" if unknown.
    pub function: &'static str,
    /// Why, in the fabric's words (or a panic's), if the failure came with a reason.
    pub message: Option<String>,
}

struct Last {
    failure: Failure,
    /// The string `SCIGetErrorString` gave for it, once asked.
    string: Cell<Option<&'static CStr>>,
}

thread_local! {
    /// The fabric error most recently converted to a code on this thread: the cause of the
    /// failure being returned, if that failure has its code.
    static CAUSE: RefCell<Option<(SciError, lanes::Error)>> = const { RefCell::new(None) };
    /// This thread's last failed call.
    static LAST: RefCell<Option<Last>> = const { RefCell::new(None) };
}

/// This thread's last failed call, if any (for Rust callers and tests; C programs ask
/// `SCIGetErrorString`).
pub fn last_failure() -> Option<Failure> {
    LAST.try_with(|l| l.try_borrow().ok().and_then(|l| l.as_ref().map(|l| l.failure.clone()))).ok().flatten()
}

/// Records that the call whose closure has type name `site` failed with `code` (after a
/// panic if `panic` is its payload): the thread's last failure, reported on stderr if its
/// cause is one the code hides. Never panics (it runs outside the call's own guard).
pub(crate) fn failed(site: &'static str, code: SciError, panic: Option<&(dyn Any + Send)>) {
    let _ = catch_unwind(AssertUnwindSafe(|| record(site, code, panic)));
}

fn record(site: &'static str, code: SciError, panic: Option<&(dyn Any + Send)>) {
    let cause = CAUSE.try_with(|c| c.try_borrow_mut().ok().and_then(|mut c| c.take())).ok().flatten();
    let cause = cause.and_then(|(c, e)| (c == code).then_some(e));
    let function = function_name(site);
    let (message, hidden) = match (cause, panic) {
        (_, Some(p)) => (Some(format!("internal error in libsisci (a panic): {}", panic_text(p))), false),
        (Some(e), None) => (Some(e.to_string()), hides_cause(&e)),
        (None, None) => (None, false),
    };
    if debug_enabled() || (hidden && !quiet()) {
        report(function, code, message.as_deref(), !debug_enabled());
    }
    let failure = Failure { code, function, message };
    let _ = LAST.try_with(|l| {
        if let Ok(mut l) = l.try_borrow_mut() {
            *l = Some(Last { failure, string: Cell::new(None) });
        }
    });
}

/// The text of a panic's payload.
fn panic_text(p: &(dyn Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// The exported name of the function whose `call` closure has type name `site`:
/// `sisci::segment::connect_segment::{{closure}}` is `crate::segment::connect_segment`,
/// exported as `SCIConnectSegment`.
pub(crate) fn function_name(site: &str) -> &'static str {
    let mut f = site;
    while let Some(outer) = f.strip_suffix("::{{closure}}") {
        f = outer;
    }
    let Some((_, path)) = f.split_once("::") else { return "libsisci" };
    crate::IMPLS
        .iter()
        .find(|(imp, _)| {
            let imp: String = imp.chars().filter(|c| !c.is_whitespace()).collect();
            imp.strip_prefix("crate::") == Some(path)
        })
        .map_or("libsisci", |(_, name)| name)
}

/// One line on stderr: `libsisci (lanes): SCIConnectSegment: <message> (SCI_ERR_SYSTEM)`.
/// With `dedup`, a line identical to the previous report is skipped. Control characters
/// (a hostile file name, a peer's bytes) are shown as `?`, so a report stays one line.
fn report(function: &str, code: SciError, message: Option<&str>, dedup: bool) {
    static PREVIOUS: Mutex<Option<String>> = Mutex::new(None);
    let fixed = string_of(code).to_string_lossy();
    let what = message.unwrap_or(&fixed);
    let line: String = format!("libsisci (lanes): {function}: {what} ({})", name_of(code))
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if dedup {
        let mut previous = PREVIOUS.lock().unwrap_or_else(PoisonError::into_inner);
        if previous.as_deref() == Some(line.as_str()) {
            return;
        }
        *previous = Some(line.clone());
    }
    // A closed or full stderr is no reason to fail (or to panic, as eprintln! would).
    let _ = writeln!(io::stderr().lock(), "{line}");
}

/// The most distinct messages kept for `SCIGetErrorString`. Each stays valid for the life
/// of the process, as the vendor's strings do; past this many, the fixed strings.
pub const MAX_MESSAGES: usize = 1024;

/// `"<fixed string>: <message>"` if the thread's last failed call returned `code` with a
/// message.
fn detailed_string(code: SciError) -> Option<&'static CStr> {
    LAST.try_with(|l| {
        let l = l.try_borrow().ok()?;
        let last = l.as_ref().filter(|l| l.failure.code == code)?;
        if let Some(s) = last.string.get() {
            return Some(s);
        }
        let message = last.failure.message.as_deref()?;
        let s = intern(format!("{}: {message}", string_of(code).to_string_lossy()))?;
        last.string.set(Some(s));
        Some(s)
    })
    .ok()
    .flatten()
}

/// A string that lives as long as the process, shared by equal messages.
fn intern(s: String) -> Option<&'static CStr> {
    static KEPT: Mutex<BTreeMap<String, &'static CStr>> = Mutex::new(BTreeMap::new());
    let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(&c) = kept.get(&s) {
        return Some(c);
    }
    if kept.len() >= MAX_MESSAGES {
        return None;
    }
    let c: &'static CStr = Box::leak(CString::new(s.replace('\0', "?")).ok()?.into_boxed_c_str());
    kept.insert(s, c);
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_exhaustion_is_nospc_wherever_the_errno_is() {
        for errno in [libc::EMFILE, libc::ENFILE, libc::ENOMEM, libc::ENOSPC, libc::EDQUOT] {
            let raw = io::Error::from_raw_os_error(errno);
            assert_eq!(io_code(&raw), SCI_ERR_NOSPC, "{raw}");
            let wrapped = io::Error::other(io::Error::from_raw_os_error(errno));
            assert_eq!(io_code(&wrapped), SCI_ERR_NOSPC, "{wrapped}");
            let e = lanes::Error::Ofi { call: "fi_mr_reg", code: errno, message: "x".into() };
            assert_eq!(code_of(&e), SCI_ERR_NOSPC);
        }
        assert_eq!(io_code(&io::Error::from(ErrorKind::StorageFull)), SCI_ERR_NOSPC);
        assert_eq!(io_code(&io::Error::from(ErrorKind::OutOfMemory)), SCI_ERR_NOSPC);
        assert_eq!(io_code(&io::Error::from_raw_os_error(libc::EACCES)), SCI_ERR_ACCESS);
        assert_eq!(io_code(&io::Error::from_raw_os_error(libc::EINVAL)), SCI_ERR_ILLEGAL_PARAMETER);
        assert_eq!(io_code(&io::Error::from_raw_os_error(libc::EIO)), SCI_ERR_SYSTEM);
        let e = lanes::Error::Ofi { call: "fi_read", code: libc::EIO, message: "x".into() };
        assert_eq!(code_of(&e), SCI_ERR_TRANSFER_FAILED);
    }

    #[test]
    fn closure_type_names_name_the_exported_function() {
        assert_eq!(function_name("sisci::segment::connect_segment::{{closure}}"), "SCIConnectSegment");
        assert_eq!(function_name("sisci::node::open::{{closure}}::{{closure}}"), "SCIOpen");
        assert_eq!(function_name("sisci::segment::no_such_function::{{closure}}"), "libsisci");
        assert_eq!(function_name("nonsense"), "libsisci");
        // Every export resolves, however `stringify!` spaced its path.
        assert_eq!(crate::IMPLS.len(), crate::FUNCTIONS.len());
        for (imp, name) in crate::IMPLS {
            let path: String = imp.chars().filter(|c| !c.is_whitespace()).collect();
            let site = format!("sisci::{}::{{{{closure}}}}", path.trim_start_matches("crate::"));
            assert_eq!(function_name(&site), *name, "{site}");
        }
    }

    #[test]
    fn interned_strings_are_shared_and_nul_free() {
        let a = intern("x: y".into()).expect("kept");
        let b = intern("x: y".into()).expect("kept");
        assert_eq!(a.as_ptr(), b.as_ptr());
        assert_eq!(intern("a\0b".into()).expect("kept").to_str(), Ok("a?b"));
    }
}
