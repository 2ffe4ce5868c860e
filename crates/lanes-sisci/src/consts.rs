//! The numbers of the C API: error codes, flags, enums and query commands, exactly as the
//! headers in `include/` define them (a test compares the two).

#![allow(missing_docs)]

/// `sci_error_t`.
pub type SciError = u32;

pub const SCI_ERR_MASK: u32 = 0x4000_0000;
const fn e(n: u32) -> u32 {
    n | SCI_ERR_MASK
}

pub const SCI_ERR_OK: SciError = 0;
pub const SCI_ERR_BUSY: SciError = e(0x900);
pub const SCI_ERR_FLAG_NOT_IMPLEMENTED: SciError = e(0x901);
pub const SCI_ERR_ILLEGAL_FLAG: SciError = e(0x902);
pub const SCI_ERR_NOSPC: SciError = e(0x904);
pub const SCI_ERR_API_NOSPC: SciError = e(0x905);
pub const SCI_ERR_HW_NOSPC: SciError = e(0x906);
pub const SCI_ERR_NOT_IMPLEMENTED: SciError = e(0x907);
pub const SCI_ERR_ILLEGAL_ADAPTERNO: SciError = e(0x908);
pub const SCI_ERR_NO_SUCH_ADAPTERNO: SciError = e(0x909);
pub const SCI_ERR_TIMEOUT: SciError = e(0x90A);
pub const SCI_ERR_OUT_OF_RANGE: SciError = e(0x90B);
pub const SCI_ERR_NO_SUCH_SEGMENT: SciError = e(0x90C);
pub const SCI_ERR_ILLEGAL_NODEID: SciError = e(0x90D);
pub const SCI_ERR_CONNECTION_REFUSED: SciError = e(0x90E);
pub const SCI_ERR_SEGMENT_NOT_CONNECTED: SciError = e(0x90F);
pub const SCI_ERR_SIZE_ALIGNMENT: SciError = e(0x910);
pub const SCI_ERR_OFFSET_ALIGNMENT: SciError = e(0x911);
pub const SCI_ERR_ILLEGAL_PARAMETER: SciError = e(0x912);
pub const SCI_ERR_MAX_ENTRIES: SciError = e(0x913);
pub const SCI_ERR_SEGMENT_NOT_PREPARED: SciError = e(0x914);
pub const SCI_ERR_ILLEGAL_ADDRESS: SciError = e(0x915);
pub const SCI_ERR_ILLEGAL_OPERATION: SciError = e(0x916);
pub const SCI_ERR_ILLEGAL_QUERY: SciError = e(0x917);
pub const SCI_ERR_SEGMENTID_USED: SciError = e(0x918);
pub const SCI_ERR_SYSTEM: SciError = e(0x919);
pub const SCI_ERR_CANCELLED: SciError = e(0x91A);
pub const SCI_ERR_NOT_CONNECTED: SciError = e(0x91B);
pub const SCI_ERR_NOT_AVAILABLE: SciError = e(0x91C);
pub const SCI_ERR_INCONSISTENT_VERSIONS: SciError = e(0x91D);
pub const SCI_ERR_COND_INT_RACE_PROBLEM: SciError = e(0x91E);
pub const SCI_ERR_OVERFLOW: SciError = e(0x91F);
pub const SCI_ERR_NOT_INITIALIZED: SciError = e(0x920);
pub const SCI_ERR_ACCESS: SciError = e(0x921);
pub const SCI_ERR_NOT_SUPPORTED: SciError = e(0x930);
pub const SCI_ERR_DEPRECATED: SciError = e(0x931);
pub const SCI_ERR_DMA_NOT_AVAILABLE: SciError = e(0x932);
pub const SCI_ERR_DMA_DISABLED: SciError = e(0x933);
pub const SCI_ERR_EWOULD_BLOCK: SciError = e(0x934);
pub const SCI_ERR_REMOTE_BUSY: SciError = e(0x935);
pub const SCI_ERR_LOCAL_BUSY: SciError = e(0x936);
pub const SCI_ERR_ALL_BUSY: SciError = e(0x937);
pub const SCI_ERR_NO_SUCH_INTNO: SciError = e(0x938);
pub const SCI_ERR_NO_SUCH_NODEID: SciError = e(0xA00);
pub const SCI_ERR_NODE_NOT_RESPONDING: SciError = e(0xA02);
pub const SCI_ERR_NO_REMOTE_LINK_ACCESS: SciError = e(0xA04);
pub const SCI_ERR_NO_LINK_ACCESS: SciError = e(0xA05);
pub const SCI_ERR_TRANSFER_FAILED: SciError = e(0xA06);
pub const SCI_ERR_SEMAPHORE_COUNT_EXCEEDED: SciError = e(0x939);
pub const SCI_ERR_IRQL_ILLEGAL: SciError = e(0x93A);
pub const SCI_ERR_NO_SUCH_FDID: SciError = e(0x93B);

/// Every error code with its name and its fixed string (what `SCIGetErrorString` gives for it,
/// unless it is the code of the thread's last failed call, which also gives the cause).
pub const ERRORS: &[(SciError, &str, &std::ffi::CStr)] = &[
    (SCI_ERR_OK, "SCI_ERR_OK", c"OK"),
    (SCI_ERR_BUSY, "SCI_ERR_BUSY", c"The resource is busy (in use, or still holding dependent resources)"),
    (SCI_ERR_FLAG_NOT_IMPLEMENTED, "SCI_ERR_FLAG_NOT_IMPLEMENTED", c"The flag is known but not implemented"),
    (SCI_ERR_ILLEGAL_FLAG, "SCI_ERR_ILLEGAL_FLAG", c"Illegal flag for this function"),
    (SCI_ERR_NOSPC, "SCI_ERR_NOSPC", c"Out of resources (memory, space in the fabric directory, or slots)"),
    (SCI_ERR_API_NOSPC, "SCI_ERR_API_NOSPC", c"Out of resources in the API library"),
    (SCI_ERR_HW_NOSPC, "SCI_ERR_HW_NOSPC", c"Out of hardware resources"),
    (SCI_ERR_NOT_IMPLEMENTED, "SCI_ERR_NOT_IMPLEMENTED", c"Not implemented"),
    (SCI_ERR_ILLEGAL_ADAPTERNO, "SCI_ERR_ILLEGAL_ADAPTERNO", c"Illegal adapter number"),
    (SCI_ERR_NO_SUCH_ADAPTERNO, "SCI_ERR_NO_SUCH_ADAPTERNO", c"No such adapter (Lanes has adapter 0 only)"),
    (SCI_ERR_TIMEOUT, "SCI_ERR_TIMEOUT", c"The operation timed out"),
    (SCI_ERR_OUT_OF_RANGE, "SCI_ERR_OUT_OF_RANGE", c"Offset or size out of range"),
    (SCI_ERR_NO_SUCH_SEGMENT, "SCI_ERR_NO_SUCH_SEGMENT", c"No such segment"),
    (SCI_ERR_ILLEGAL_NODEID, "SCI_ERR_ILLEGAL_NODEID", c"Illegal node id"),
    (SCI_ERR_CONNECTION_REFUSED, "SCI_ERR_CONNECTION_REFUSED", c"Connection refused: the segment is not available"),
    (SCI_ERR_SEGMENT_NOT_CONNECTED, "SCI_ERR_SEGMENT_NOT_CONNECTED", c"The segment is not connected"),
    (SCI_ERR_SIZE_ALIGNMENT, "SCI_ERR_SIZE_ALIGNMENT", c"The size is not properly aligned"),
    (SCI_ERR_OFFSET_ALIGNMENT, "SCI_ERR_OFFSET_ALIGNMENT", c"The offset is not properly aligned"),
    (
        SCI_ERR_ILLEGAL_PARAMETER,
        "SCI_ERR_ILLEGAL_PARAMETER",
        c"Illegal parameter (a NULL pointer or an invalid handle)",
    ),
    (SCI_ERR_MAX_ENTRIES, "SCI_ERR_MAX_ENTRIES", c"Maximum number of entries reached"),
    (SCI_ERR_SEGMENT_NOT_PREPARED, "SCI_ERR_SEGMENT_NOT_PREPARED", c"The segment is not prepared"),
    (SCI_ERR_ILLEGAL_ADDRESS, "SCI_ERR_ILLEGAL_ADDRESS", c"Illegal address"),
    (SCI_ERR_ILLEGAL_OPERATION, "SCI_ERR_ILLEGAL_OPERATION", c"Illegal operation"),
    (SCI_ERR_ILLEGAL_QUERY, "SCI_ERR_ILLEGAL_QUERY", c"Illegal query"),
    (SCI_ERR_SEGMENTID_USED, "SCI_ERR_SEGMENTID_USED", c"The segment id is already used"),
    (SCI_ERR_SYSTEM, "SCI_ERR_SYSTEM", c"System error"),
    (SCI_ERR_CANCELLED, "SCI_ERR_CANCELLED", c"The operation was cancelled"),
    (SCI_ERR_NOT_CONNECTED, "SCI_ERR_NOT_CONNECTED", c"Not connected: the remote resource is gone"),
    (SCI_ERR_NOT_AVAILABLE, "SCI_ERR_NOT_AVAILABLE", c"Not available"),
    (SCI_ERR_INCONSISTENT_VERSIONS, "SCI_ERR_INCONSISTENT_VERSIONS", c"Inconsistent versions"),
    (SCI_ERR_COND_INT_RACE_PROBLEM, "SCI_ERR_COND_INT_RACE_PROBLEM", c"Conditional interrupt race"),
    (SCI_ERR_OVERFLOW, "SCI_ERR_OVERFLOW", c"Overflow: the buffer is too small"),
    (SCI_ERR_NOT_INITIALIZED, "SCI_ERR_NOT_INITIALIZED", c"The SISCI library is not initialized (call SCIInitialize)"),
    (SCI_ERR_ACCESS, "SCI_ERR_ACCESS", c"Access denied (e.g. a write through a read-only map)"),
    (SCI_ERR_NOT_SUPPORTED, "SCI_ERR_NOT_SUPPORTED", c"Not supported by the Lanes software fabric"),
    (SCI_ERR_DEPRECATED, "SCI_ERR_DEPRECATED", c"Deprecated"),
    (SCI_ERR_DMA_NOT_AVAILABLE, "SCI_ERR_DMA_NOT_AVAILABLE", c"DMA is not available"),
    (SCI_ERR_DMA_DISABLED, "SCI_ERR_DMA_DISABLED", c"DMA is disabled"),
    (SCI_ERR_EWOULD_BLOCK, "SCI_ERR_EWOULD_BLOCK", c"The operation would block"),
    (SCI_ERR_REMOTE_BUSY, "SCI_ERR_REMOTE_BUSY", c"The remote side is busy (its queue stayed full)"),
    (SCI_ERR_LOCAL_BUSY, "SCI_ERR_LOCAL_BUSY", c"The local side is busy"),
    (SCI_ERR_ALL_BUSY, "SCI_ERR_ALL_BUSY", c"All resources are busy"),
    (SCI_ERR_NO_SUCH_INTNO, "SCI_ERR_NO_SUCH_INTNO", c"No such interrupt number"),
    (SCI_ERR_NO_SUCH_NODEID, "SCI_ERR_NO_SUCH_NODEID", c"No such node id"),
    (SCI_ERR_NODE_NOT_RESPONDING, "SCI_ERR_NODE_NOT_RESPONDING", c"The node is not responding"),
    (
        SCI_ERR_NO_REMOTE_LINK_ACCESS,
        "SCI_ERR_NO_REMOTE_LINK_ACCESS",
        c"No remote link access: the node is not reachable",
    ),
    (SCI_ERR_NO_LINK_ACCESS, "SCI_ERR_NO_LINK_ACCESS", c"No link access"),
    (SCI_ERR_TRANSFER_FAILED, "SCI_ERR_TRANSFER_FAILED", c"The transfer failed"),
    (SCI_ERR_SEMAPHORE_COUNT_EXCEEDED, "SCI_ERR_SEMAPHORE_COUNT_EXCEEDED", c"Semaphore count exceeded"),
    (SCI_ERR_IRQL_ILLEGAL, "SCI_ERR_IRQL_ILLEGAL", c"Illegal interrupt request level"),
    (SCI_ERR_NO_SUCH_FDID, "SCI_ERR_NO_SUCH_FDID", c"No such fabric device id (no SmartIO device)"),
];

pub const SCI_INFINITE_TIMEOUT: u32 = 0xFFFF_FFFF;

// Flags.
pub const SCI_FLAG_USE_CALLBACK: u32 = 0x1;
pub const SCI_FLAG_EMPTY: u32 = 0x2;
pub const SCI_FLAG_PRIVATE: u32 = 0x4;
pub const SCI_FLAG_DMA_SOURCE_ONLY: u32 = 0x8;
pub const SCI_FLAG_PHYSICAL: u32 = 0x1000;
pub const SCI_FLAG_CUDA_BUFFER: u32 = 0x2000;
pub const SCI_FLAG_AUTO_ID: u32 = 0x2000_0000;
pub const SCI_FLAG_FIXED_INTNO: u32 = 0x2;
pub const SCI_FLAG_SHARED_INT: u32 = 0x4;
pub const SCI_FLAG_CONDITIONAL_INTERRUPT: u32 = 0x8;
pub const SCI_FLAG_COUNTING_INT: u32 = 0x20;
pub const SCI_FLAG_DMA_WAIT: u32 = 0x4;
pub const SCI_FLAG_DMA_READ: u32 = 0x10;
pub const SCI_FLAG_DMA_PHDMA: u32 = 0x20;
pub const SCI_FLAG_DMA_GLOBAL: u32 = 0x40;
pub const SCI_FLAG_ALLOW_UNICAST: u32 = 0x80;
pub const SCI_FLAG_DMA_SYSDMA: u32 = 0x100;
pub const SCI_FLAG_DMA_USER_MEM: u32 = 0x200;
pub const SCI_FLAG_DMA_ADAPTER: u32 = 0x800;
pub const SCI_FLAG_FIXED_MAP_ADDR: u32 = 0x1;
pub const SCI_FLAG_READONLY_MAP: u32 = 0x2;
pub const SCI_FLAG_LOCK_OPERATION: u32 = 0x4;
pub const SCI_FLAG_IO_MAP_IOSPACE: u32 = 0x80;
pub const SCI_FLAG_NO_MEMORY_LOOPBACK: u32 = 0x800;
pub const SCI_FLAG_SHARED_MAP: u32 = 0x2000;
pub const SCI_FLAG_BROADCAST: u32 = 0x40000;
pub const SCI_FLAG_CACHE_FLUSH: u32 = 0x10_0000;
pub const SCI_FLAG_CACHE_INVALIDATE: u32 = 0x20_0000;
pub const SCI_FLAG_FORCE_REMOVE: u32 = 0x20;
pub const SCI_FLAG_EXCLUSIVE: u32 = 0x100_0000;
/// `SCISetSegmentUnavailable`: tell the connected peers (Lanes value).
pub const SCI_FLAG_NOTIFY: u32 = 0x10;
/// `SCISetSegmentUnavailable`: cut the connected peers (Lanes value).
pub const SCI_FLAG_FORCE_DISCONNECT: u32 = 0x20;
pub const SCI_FLAG_FLUSH_CPU_BUFFERS_ONLY: u32 = 0x1_0000;
pub const SCI_FLAG_BLOCK_READ: u32 = 0x4000;
pub const SCI_FLAG_ERROR_CHECK: u32 = 0x8000;
pub const SCI_FLAG_NO_FLUSH: u32 = 0x400;
pub const SCI_FLAG_NO_STORE_BARRIER: u32 = 0x4000_0000;

// Enums.
pub const SCI_CALLBACK_CANCEL: u32 = 1;
pub const SCI_CALLBACK_CONTINUE: u32 = 2;
pub const SCI_CB_CONNECT: u32 = 1;
pub const SCI_CB_DISCONNECT: u32 = 2;
pub const SCI_CB_NOT_OPERATIONAL: u32 = 3;
pub const SCI_CB_OPERATIONAL: u32 = 4;
pub const SCI_CB_LOST: u32 = 5;
pub const SCI_DMAQUEUE_IDLE: u32 = 0;
pub const SCI_DMAQUEUE_GATHER: u32 = 1;
pub const SCI_DMAQUEUE_POSTED: u32 = 2;
pub const SCI_DMAQUEUE_DONE: u32 = 3;
pub const SCI_DMAQUEUE_ABORTED: u32 = 4;
pub const SCI_DMAQUEUE_ERROR: u32 = 5;
pub const SCI_SEQ_OK: u32 = 0;
pub const SCI_SEQ_RETRIABLE: u32 = 1;
pub const SCI_SEQ_NOT_RETRIABLE: u32 = 2;
pub const SCI_SEQ_PENDING: u32 = 3;
pub const SCI_DMA_TYPE_DONTCARE: u32 = 1;
pub const SCI_DMA_TYPE_ADAPTER: u32 = 2;
pub const SCI_DMA_TYPE_GLOBAL: u32 = 3;
pub const SCI_DMA_TYPE_SYSTEM: u32 = 4;
pub const SCI_DMA_TYPE_TRANSPARENT: u32 = 5;
pub const SCI_DMA_CHANNEL_ID_DONTCARE: u32 = 0xFFFF_FFFF;

// dis_types.h
pub const DIS_BROADCAST_NODEID_GROUP_ALL: u32 = 252;
pub const DIS_MAX_NSCIS: usize = 4;
pub const DIS_DMA_MAX_VECLEN: u32 = 256;
pub const DIS_VIRT_ADAPTER_LANES: u32 = 2;

// Queries.
pub const SCI_Q_VENDORID: u32 = 1;
pub const SCI_Q_API: u32 = 2;
pub const SCI_Q_ADAPTER: u32 = 3;
pub const SCI_Q_SYSTEM: u32 = 4;
pub const SCI_Q_LOCAL_SEGMENT: u32 = 5;
pub const SCI_Q_REMOTE_SEGMENT: u32 = 6;
pub const SCI_Q_MAP: u32 = 7;
pub const SCI_Q_DMA: u32 = 8;
pub const SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT: u32 = 0x101;
pub const SCI_Q_ADAPTER_DMA_OFFSET_ALIGNMENT: u32 = 0x102;
pub const SCI_Q_ADAPTER_DMA_MTU: u32 = 0x103;
pub const SCI_Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE: u32 = 0x104;
pub const SCI_Q_ADAPTER_SUGGESTED_MIN_BLOCK_SIZE: u32 = 0x105;
pub const SCI_Q_ADAPTER_NODEID: u32 = 0x106;
pub const SCI_Q_ADAPTER_SERIAL_NUMBER: u32 = 0x107;
pub const SCI_Q_ADAPTER_CARD_TYPE: u32 = 0x108;
pub const SCI_Q_ADAPTER_NUMBER_OF_STREAMS: u32 = 0x109;
pub const SCI_Q_ADAPTER_STREAM_BUFFER_SIZE: u32 = 0x10A;
pub const SCI_Q_ADAPTER_CONFIGURED: u32 = 0x10B;
pub const SCI_Q_ADAPTER_LINK_OPERATIONAL: u32 = 0x10C;
pub const SCI_Q_ADAPTER_HW_LINK_STATUS_IS_OK: u32 = 0x10D;
pub const SCI_Q_ADAPTER_NUMBER: u32 = 0x10E;
pub const SCI_Q_ADAPTER_INSTANCE_NUMBER: u32 = 0x10F;
pub const SCI_Q_ADAPTER_FIRMWARE_OK: u32 = 0x110;
pub const SCI_Q_ADAPTER_CONNECTED_TO_SWITCH: u32 = 0x111;
pub const SCI_Q_ADAPTER_ATT_PAGE_SIZE: u32 = 0x112;
pub const SCI_Q_ADAPTER_ATT_NUMBER_OF_ENTRIES: u32 = 0x113;
pub const SCI_Q_ADAPTER_ATT_AVAILABLE_ENTRIES: u32 = 0x114;
pub const SCI_Q_ADAPTER_MCAST_MAX_GROUPS: u32 = 0x115;
pub const SCI_Q_ADAPTER_BDF: u32 = 0x116;
pub const SCI_Q_ADAPTER_NUMBER_OF_LINKS: u32 = 0x117;
pub const SCI_Q_ADAPTER_LINK_WIDTH: u32 = 0x118;
pub const SCI_Q_ADAPTER_LINK_SPEED: u32 = 0x119;
pub const SCI_Q_ADAPTER_LINK_UPTIME: u32 = 0x11A;
pub const SCI_Q_ADAPTER_LINK_DOWNTIME: u32 = 0x11B;
pub const SCI_Q_ADAPTER_LINK_CABLE_INSERTED: u32 = 0x11C;
pub const SCI_Q_ADAPTER_LINK_ENABLED: u32 = 0x11D;
pub const SCI_Q_ADAPTER_LINK_PARTNER_PORT_NO: u32 = 0x11E;
pub const SCI_ADAPTER_TYPE_LANES: u32 = 0x4C4E;
pub const SCI_Q_SYSTEM_HOSTBRIDGE: u32 = 0x201;
pub const SCI_Q_SYSTEM_WRITE_POSTING_ENABLED: u32 = 0x202;
pub const SCI_Q_SYSTEM_WRITE_COMBINING_ENABLED: u32 = 0x203;
pub const HOSTBRIDGE_UNKNOWN: u32 = 1;
pub const SCI_Q_LOCAL_SEGMENT_IOADDR: u32 = 0x301;
pub const SCI_Q_REMOTE_SEGMENT_IOADDR: u32 = 0x302;
pub const SCI_Q_MAP_MAPPED_TO_LOCAL_TARGET: u32 = 0x303;
pub const SCI_Q_MAP_QUERY_REMOTE_MAPPED_TO_LOCAL_TARGET: u32 = 0x304;
pub const SCI_Q_DMA_AVAILABLE: u32 = 0x401;
pub const SCI_Q_DMA_CAPABILITIES: u32 = 0x402;

// Flags of the calls added for the vendor's full API (sisci_api.h, sisci_types.h).
pub const SCI_FLAG_SCIF_BUFFER: u32 = 0x4000;
pub const SCI_FLAG_LOCK_USER_MEM: u32 = 0x400;
pub const SCI_FLAG_SHARE_EXTERNAL: u32 = 0x40;
pub const SCI_FLAG_WRITE_BACK_CACHE_MAP: u32 = 0x800_0000;
pub const SCI_FLAG_DMA_CHANNEL_SHARED: u32 = 0x1;
pub const SCI_FLAG_CONDITIONAL_INTERRUPT_MAP: u32 = 0x8;
pub const SCI_FLAG_UNCONDITIONAL_DATA_INTERRUPT_MAP: u32 = 0x10;
pub const SCI_FLAG_PCIE_REQUESTER_GLOBAL: u32 = 0x1;
pub const SCI_FLAG_DEVICE_SIDE_ONLY: u32 = 0x200_1000;
pub const SCI_FLAG_LOCAL_ONLY: u32 = 0x200_2000;
pub const SCI_FLAG_DEVICE_PREFER_BANDWIDTH: u32 = 0x400_0001;
pub const SCI_FLAG_HOST_PREFER_BANDWIDTH: u32 = 0x400_0002;
pub const SCI_FLAG_SPECIFY_PATH: u32 = 0x1000_0000;
pub const SCI_FLAG_SPECIFY_SLOT: u32 = 0x2000_0000;
pub const SCI_MEMTYPE_BAR: u32 = 0x1;
pub const SCI_MEMTYPE_PRIVATE: u32 = 0x2;
pub const SCI_MEMTYPE_SHARED: u32 = 0x4;
pub const SCI_MEMACCESS_DEVICE_READ: u32 = 0x1;
pub const SCI_MEMACCESS_DEVICE_WRITE: u32 = 0x2;
pub const SCI_MEMACCESS_HOST_READ: u32 = 0x4;
pub const SCI_MEMACCESS_HOST_WRITE: u32 = 0x8;
pub const SCI_MEMACCESS_MULTIHOST_READ: u32 = 0x10 | SCI_MEMACCESS_HOST_READ;
pub const SCI_MEMACCESS_MULTIHOST_WRITE: u32 = 0x10 | SCI_MEMACCESS_HOST_WRITE;
pub const SCI_MEMACCESS_P2P_READ: u32 = 0x20 | SCI_MEMACCESS_DEVICE_READ;
pub const SCI_MEMACCESS_P2P_WRITE: u32 = 0x20 | SCI_MEMACCESS_DEVICE_WRITE;
pub const SCI_Q_SISCI_DRIVER_VERSION: u32 = 9;
pub const SCI_Q_DEVICE: u32 = 10;
pub const SCI_Q_SYSTEM_CPU_CACHE_LINE_SIZE: u32 = 0x204;
pub const SCI_Q_DEVICE_INFO: u32 = 0x501;
