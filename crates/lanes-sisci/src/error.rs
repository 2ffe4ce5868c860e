//! Mapping the fabric's errors onto `sci_error_t`, in one place, and `SCIGetErrorString`.

use std::ffi::{c_char, CStr};
use std::io::ErrorKind;

use crate::consts::*;

/// A failed call's `sci_error_t`. `?` turns a [`lanes::Error`] into its code.
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
        if debug_enabled() {
            eprintln!("libsisci (lanes): {e} -> {}", name_of(code));
        }
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
        E::QueueFull { .. } => SCI_ERR_REMOTE_BUSY,
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
        E::Ofi { .. } => SCI_ERR_TRANSFER_FAILED,
        E::Cluster(_) => SCI_ERR_SYSTEM,
        E::Io { source, .. } => match source.kind() {
            ErrorKind::StorageFull | ErrorKind::OutOfMemory => SCI_ERR_NOSPC,
            ErrorKind::PermissionDenied => SCI_ERR_ACCESS,
            ErrorKind::InvalidInput => SCI_ERR_ILLEGAL_PARAMETER,
            _ => SCI_ERR_SYSTEM,
        },
        #[allow(unreachable_patterns)]
        _ => SCI_ERR_SYSTEM,
    }
}

/// `LANES_SISCI_DEBUG=1` prints the fabric's own message for every error it maps.
fn debug_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("LANES_SISCI_DEBUG").is_some_and(|v| !v.is_empty() && v != "0"))
}

/// The symbolic name of a code ("SCI_ERR_TIMEOUT"), or "unknown".
pub fn name_of(code: SciError) -> &'static str {
    ERRORS.iter().find(|(c, _, _)| *c == code).map_or("unknown", |(_, n, _)| n)
}

/// The stable string `SCIGetErrorString` returns for `code`.
pub fn string_of(code: SciError) -> &'static CStr {
    ERRORS.iter().find(|(c, _, _)| *c == code).map_or(c"Unknown SISCI error code", |(_, _, s)| s)
}

pub(crate) fn error_string(code: SciError) -> *const c_char {
    string_of(code).as_ptr()
}
