//! The headers and the library agree: every constant the C side sees has the value the Rust
//! side uses, every error code has a name and a string, and the fabric's errors map onto
//! documented codes.

use std::collections::HashMap;

use sisci::consts::*;

/// `#define NAME VALUE` and `NAME = VALUE` (enumerators) of the installed headers.
fn header_values() -> HashMap<String, u64> {
    let mut all = String::new();
    for (_, text) in sisci::HEADERS {
        all.push_str(text);
        all.push('\n');
    }
    let mut values = HashMap::new();
    let parse = |v: &str| -> Option<u64> {
        let v = v.trim().trim_end_matches(',').trim();
        let (masked, v) = match v.strip_prefix('(').and_then(|v| v.strip_suffix(')')) {
            Some(inner) => match inner.split_once('|') {
                Some((n, mask)) if mask.trim() == "SCI_ERR_MASK" => (true, n.trim().to_string()),
                _ => return None,
            },
            None => (false, v.to_string()),
        };
        let v = v.trim_end_matches(['U', 'u']);
        let n = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            Some(h) => u64::from_str_radix(h, 16).ok()?,
            None => v.parse().ok()?,
        };
        Some(if masked { n | u64::from(SCI_ERR_MASK) } else { n })
    };
    for line in all.lines() {
        let line = line.split("/*").next().unwrap_or("").trim();
        if let Some(rest) = line.strip_prefix("#define ") {
            let mut it = rest.split_whitespace();
            if let (Some(name), Some(v)) = (it.next(), it.next()) {
                if let Some(n) = parse(v) {
                    values.insert(name.to_string(), n);
                }
            }
        } else if let Some((name, v)) = line.split_once('=') {
            let name = name.trim();
            if name.starts_with("SCI_") || name.starts_with("DIS_") {
                if let Some(n) = parse(v) {
                    values.insert(name.to_string(), n);
                }
            }
        }
    }
    values
}

macro_rules! same {
    ($h:expr, $($name:ident),* $(,)?) => {
        $(
            let want = u64::from($name as u32);
            assert_eq!($h.get(stringify!($name)).copied(), Some(want), "{} differs between header and library", stringify!($name));
        )*
    };
}

#[test]
fn constants_agree_with_the_headers() {
    let h = header_values();
    same!(
        h,
        SCI_ERR_MASK,
        SCI_INFINITE_TIMEOUT,
        SCI_FLAG_USE_CALLBACK,
        SCI_FLAG_EMPTY,
        SCI_FLAG_PRIVATE,
        SCI_FLAG_DMA_SOURCE_ONLY,
        SCI_FLAG_PHYSICAL,
        SCI_FLAG_CUDA_BUFFER,
        SCI_FLAG_AUTO_ID,
        SCI_FLAG_FIXED_INTNO,
        SCI_FLAG_SHARED_INT,
        SCI_FLAG_CONDITIONAL_INTERRUPT,
        SCI_FLAG_COUNTING_INT,
        SCI_FLAG_DMA_WAIT,
        SCI_FLAG_DMA_READ,
        SCI_FLAG_DMA_PHDMA,
        SCI_FLAG_DMA_GLOBAL,
        SCI_FLAG_ALLOW_UNICAST,
        SCI_FLAG_DMA_SYSDMA,
        SCI_FLAG_DMA_USER_MEM,
        SCI_FLAG_DMA_ADAPTER,
        SCI_FLAG_FIXED_MAP_ADDR,
        SCI_FLAG_READONLY_MAP,
        SCI_FLAG_LOCK_OPERATION,
        SCI_FLAG_IO_MAP_IOSPACE,
        SCI_FLAG_NO_MEMORY_LOOPBACK,
        SCI_FLAG_SHARED_MAP,
        SCI_FLAG_BROADCAST,
        SCI_FLAG_CACHE_FLUSH,
        SCI_FLAG_CACHE_INVALIDATE,
        SCI_FLAG_FORCE_REMOVE,
        SCI_FLAG_EXCLUSIVE,
        SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY,
        SCI_FLAG_BLOCK_READ,
        SCI_FLAG_ERROR_CHECK,
        SCI_FLAG_NO_FLUSH,
        SCI_FLAG_NO_STORE_BARRIER,
        SCI_FLAG_LOCK_USER_MEM,
        SCI_FLAG_NOTIFY,
        SCI_FLAG_FORCE_DISCONNECT,
        SCI_CALLBACK_CANCEL,
        SCI_CALLBACK_CONTINUE,
        SCI_CB_CONNECT,
        SCI_CB_DISCONNECT,
        SCI_CB_NOT_OPERATIONAL,
        SCI_CB_OPERATIONAL,
        SCI_CB_LOST,
        SCI_DMAQUEUE_IDLE,
        SCI_DMAQUEUE_GATHER,
        SCI_DMAQUEUE_POSTED,
        SCI_DMAQUEUE_DONE,
        SCI_DMAQUEUE_ABORTED,
        SCI_DMAQUEUE_ERROR,
        SCI_SEQ_OK,
        SCI_SEQ_RETRIABLE,
        SCI_SEQ_NOT_RETRIABLE,
        SCI_SEQ_PENDING,
        SCI_DMA_TYPE_DONTCARE,
        SCI_DMA_TYPE_ADAPTER,
        SCI_DMA_TYPE_GLOBAL,
        SCI_DMA_TYPE_SYSTEM,
        SCI_DMA_TYPE_TRANSPARENT,
        SCI_DMA_CHANNEL_ID_DONTCARE,
        DIS_BROADCAST_NODEID_GROUP_ALL,
        DIS_MAX_NSCIS,
        DIS_DMA_MAX_VECLEN,
        DIS_VIRT_ADAPTER_LANES,
        SCI_Q_VENDORID,
        SCI_Q_API,
        SCI_Q_ADAPTER,
        SCI_Q_SYSTEM,
        SCI_Q_LOCAL_SEGMENT,
        SCI_Q_REMOTE_SEGMENT,
        SCI_Q_MAP,
        SCI_Q_DMA,
        SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT,
        SCI_Q_ADAPTER_DMA_OFFSET_ALIGNMENT,
        SCI_Q_ADAPTER_DMA_MTU,
        SCI_Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE,
        SCI_Q_ADAPTER_SUGGESTED_MIN_BLOCK_SIZE,
        SCI_Q_ADAPTER_NODEID,
        SCI_Q_ADAPTER_SERIAL_NUMBER,
        SCI_Q_ADAPTER_CARD_TYPE,
        SCI_Q_ADAPTER_NUMBER_OF_STREAMS,
        SCI_Q_ADAPTER_STREAM_BUFFER_SIZE,
        SCI_Q_ADAPTER_CONFIGURED,
        SCI_Q_ADAPTER_LINK_OPERATIONAL,
        SCI_Q_ADAPTER_HW_LINK_STATUS_IS_OK,
        SCI_Q_ADAPTER_NUMBER,
        SCI_Q_ADAPTER_INSTANCE_NUMBER,
        SCI_Q_ADAPTER_FIRMWARE_OK,
        SCI_Q_ADAPTER_CONNECTED_TO_SWITCH,
        SCI_Q_ADAPTER_ATT_PAGE_SIZE,
        SCI_Q_ADAPTER_ATT_NUMBER_OF_ENTRIES,
        SCI_Q_ADAPTER_ATT_AVAILABLE_ENTRIES,
        SCI_Q_ADAPTER_MCAST_MAX_GROUPS,
        SCI_Q_ADAPTER_BDF,
        SCI_Q_ADAPTER_NUMBER_OF_LINKS,
        SCI_Q_ADAPTER_LINK_WIDTH,
        SCI_Q_ADAPTER_LINK_SPEED,
        SCI_Q_ADAPTER_LINK_UPTIME,
        SCI_Q_ADAPTER_LINK_DOWNTIME,
        SCI_Q_ADAPTER_LINK_CABLE_INSERTED,
        SCI_Q_ADAPTER_LINK_ENABLED,
        SCI_Q_ADAPTER_LINK_PARTNER_PORT_NO,
        SCI_ADAPTER_TYPE_LANES,
        SCI_Q_SYSTEM_HOSTBRIDGE,
        SCI_Q_SYSTEM_WRITE_POSTING_ENABLED,
        SCI_Q_SYSTEM_WRITE_COMBINING_ENABLED,
        HOSTBRIDGE_UNKNOWN,
        SCI_Q_LOCAL_SEGMENT_IOADDR,
        SCI_Q_REMOTE_SEGMENT_IOADDR,
        SCI_Q_MAP_MAPPED_TO_LOCAL_TARGET,
        SCI_Q_MAP_QUERY_REMOTE_MAPPED_TO_LOCAL_TARGET,
        SCI_Q_DMA_AVAILABLE,
        SCI_Q_DMA_CAPABILITIES,
    );
}

#[test]
fn every_error_code_has_its_documented_number_a_name_and_a_string() {
    let h = header_values();
    let in_header: Vec<(&String, &u64)> =
        h.iter().filter(|(k, _)| k.starts_with("SCI_ERR_") && *k != "SCI_ERR_MASK").collect();
    assert_eq!(in_header.len(), ERRORS.len(), "header and library list different error codes");
    for (name, value) in in_header {
        let e = ERRORS.iter().find(|(_, n, _)| n == name).unwrap_or_else(|| panic!("{name} has no string"));
        assert_eq!(u64::from(e.0), *value, "{name}");
    }
    let mut strings: Vec<&str> = ERRORS.iter().map(|(_, _, s)| s.to_str().expect("utf-8")).collect();
    assert!(strings.iter().all(|s| !s.is_empty()));
    strings.sort();
    strings.dedup();
    assert_eq!(strings.len(), ERRORS.len(), "error strings are not distinct");
    // The documented numbers.
    for (code, n) in [
        (SCI_ERR_BUSY, 0x900),
        (SCI_ERR_ILLEGAL_FLAG, 0x902),
        (SCI_ERR_TIMEOUT, 0x90A),
        (SCI_ERR_NO_SUCH_SEGMENT, 0x90C),
        (SCI_ERR_CONNECTION_REFUSED, 0x90E),
        (SCI_ERR_ILLEGAL_PARAMETER, 0x912),
        (SCI_ERR_SEGMENTID_USED, 0x918),
        (SCI_ERR_ACCESS, 0x921),
        (SCI_ERR_NO_SUCH_NODEID, 0xA00),
        (SCI_ERR_TRANSFER_FAILED, 0xA06),
    ] {
        assert_eq!(code, n | 0x4000_0000);
    }
}

#[test]
fn the_fabrics_errors_map_onto_documented_codes() {
    use lanes::Error as E;
    let io = |k: std::io::ErrorKind| E::Io { context: "x".into(), source: k.into() };
    let cases = [
        (E::InvalidNodeId { value: "6".into(), reason: "r" }, SCI_ERR_ILLEGAL_NODEID),
        (E::SegmentIdInUse { node: 4, segment: 1 }, SCI_ERR_SEGMENTID_USED),
        (E::NoSuchSegment { node: 4, segment: 1 }, SCI_ERR_NO_SUCH_SEGMENT),
        (E::NotAvailable { node: 4, segment: 1 }, SCI_ERR_CONNECTION_REFUSED),
        (E::Timeout { what: "x".into(), waited_ms: 1 }, SCI_ERR_TIMEOUT),
        (E::OutOfRange { offset: 1, len: 1, size: 1, what: "map" }, SCI_ERR_OUT_OF_RANGE),
        (E::SegmentBusy { node: 4, segment: 1, connections: 1 }, SCI_ERR_BUSY),
        (E::NotPrepared { segment: 1 }, SCI_ERR_SEGMENT_NOT_PREPARED),
        (E::ReadOnly, SCI_ERR_ACCESS),
        (E::SegmentLost { node: 4, segment: 1, reason: "r" }, SCI_ERR_NOT_CONNECTED),
        (E::NoSuchInterrupt { node: 4, number: 1 }, SCI_ERR_NO_SUCH_INTNO),
        (E::InterruptRemoved { number: 1 }, SCI_ERR_CANCELLED),
        (E::QueueFull { node: 4, number: 1, waited_ms: 1 }, SCI_ERR_NOSPC),
        (E::BufferTooSmall { needed: 2, given: 1 }, SCI_ERR_OVERFLOW),
        (E::TooManyEntries { requested: 2, outstanding: 1, max: 2 }, SCI_ERR_MAX_ENTRIES),
        (E::DmaFailed { reason: "r".into() }, SCI_ERR_TRANSFER_FAILED),
        (E::IllegalOperation("x"), SCI_ERR_ILLEGAL_OPERATION),
        (E::TooManyGroups { max: 4 }, SCI_ERR_NOSPC),
        (E::GroupInUse { group: 1, node: 4 }, SCI_ERR_SEGMENTID_USED),
        (E::NotAReceiver { node: 4, group: 1 }, SCI_ERR_CONNECTION_REFUSED),
        (E::NoSuchGroup { group: 1 }, SCI_ERR_NO_SUCH_SEGMENT),
        (io(std::io::ErrorKind::StorageFull), SCI_ERR_NOSPC),
        (io(std::io::ErrorKind::Other), SCI_ERR_SYSTEM),
    ];
    for (e, want) in cases {
        assert_eq!(sisci::error::code_of(&e), want, "{e}");
    }
}
