//! Raw bindings to the system libfabric (>= 1.17) for Lanes' `ofi` transport.
//!
//! libfabric exports only a handful of symbols (`fi_getinfo`, `fi_freeinfo`, `fi_dupinfo`,
//! `fi_strerror`, ...); the rest of its API is `static inline` in `<rdma/*.h>`. `build.rs`
//! finds libfabric with pkg-config and compiles `src/shim.c`, which exports one `lanes_fi_*`
//! function per inline call Lanes makes and *flattens structures*: hints are built from
//! scalars, `fi_info` fields are read through accessors, the message form of a write takes
//! scalars. The only structures that cross the boundary are [`fi_cq_data_entry`],
//! [`fi_context`] and the reduced error entry [`lanes_fi_cq_err`]; `tests/layout.rs` checks
//! their sizes and offsets, and every constant below, against values the shim exports.
//!
//! Everything here is `unsafe` to call and follows libfabric's own rules (fi_getinfo(3),
//! fi_endpoint(3), fi_rma(3), fi_cq(3), ...). The safe wrappers live in the `lanes` crate
//! (`lanes::transport::ofi::fi`, feature `ofi`). No function here calls back into Rust, so
//! no Rust panic can unwind through C.
//!
//! Return conventions are libfabric's: `0` or a count on success, a negated `FI_E*` on
//! failure; `-FI_EAGAIN` means "retry after driving progress".

#![allow(non_camel_case_types)]

use core::ffi::{c_char, c_int, c_void};
use core::marker::{PhantomData, PhantomPinned};

/// libfabric's `fi_addr_t`: an index into an address vector.
pub type fi_addr_t = u64;

/// `FI_VERSION(major, minor)` (named apart from the exported `fi_version()` call).
pub const fn make_version(major: u32, minor: u32) -> u32 {
    (major << 16) | minor
}

/// The API version Lanes asks for in `fi_getinfo`.
pub const LANES_FI_VERSION: u32 = make_version(1, 17);

/// Most remote ranges [`lanes_fi_writemsg_scatter`] takes (the shim's `LANES_SCATTER_MAX`).
pub const LANES_SCATTER_MAX: usize = 4;

macro_rules! opaque {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {$(
        $(#[$m])*
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
            _marker: PhantomData<(*mut u8, PhantomPinned)>,
        }
    )*};
}

opaque! {
    /// `struct fi_info`, only ever behind a pointer; read with the `lanes_fi_info_*` accessors.
    fi_info,
    /// `struct fid_fabric`.
    fid_fabric,
    /// `struct fid_domain`.
    fid_domain,
    /// `struct fid_av`.
    fid_av,
    /// `struct fid_cq`.
    fid_cq,
    /// `struct fid_ep`.
    fid_ep,
    /// `struct fid_mr`.
    fid_mr,
}

/// `struct fi_cq_data_entry`: one completion of a CQ opened by [`lanes_fi_cq_open`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct fi_cq_data_entry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
}

impl Default for fi_cq_data_entry {
    fn default() -> Self {
        fi_cq_data_entry { op_context: core::ptr::null_mut(), flags: 0, len: 0, buf: core::ptr::null_mut(), data: 0 }
    }
}

/// A completion error as [`lanes_fi_cq_readerr`] reports it: `struct fi_cq_err_entry`
/// without the fields Lanes does not use (its `err_data` is turned into text at once).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lanes_fi_cq_err {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub data: u64,
    /// A positive `FI_E*` code.
    pub err: c_int,
    /// The provider's own code, explained by the text `lanes_fi_cq_readerr` writes.
    pub prov_errno: c_int,
}

impl Default for lanes_fi_cq_err {
    fn default() -> Self {
        lanes_fi_cq_err { op_context: core::ptr::null_mut(), flags: 0, len: 0, data: 0, err: 0, prov_errno: 0 }
    }
}

/// `struct fi_context`: storage a provider in `FI_CONTEXT` mode may use for each operation;
/// the context pointer of a post must point to one that lives until the operation completes.
#[repr(C)]
#[derive(Debug)]
pub struct fi_context {
    pub internal: [*mut c_void; 4],
}

impl Default for fi_context {
    fn default() -> Self {
        fi_context { internal: [core::ptr::null_mut(); 4] }
    }
}

/// A name and value exported by the shim (constants and layout facts).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct lanes_fi_named {
    pub name: *const c_char,
    pub value: u64,
}

macro_rules! constants {
    ($($name:ident : $ty:ty = $value:expr;)*) => {
        $(pub const $name: $ty = $value;)*
        /// Every constant of this crate by its C name, as `u64` (what `tests/layout.rs`
        /// compares with [`lanes_fi_constants`]).
        pub const CONSTANTS: &[(&str, u64)] = &[$((stringify!($name), $name as u64)),*];
    };
}

constants! {
    // Capabilities and operation flags (u64)
    FI_MSG: u64 = 1 << 1;
    FI_RMA: u64 = 1 << 2;
    FI_READ: u64 = 1 << 8;
    FI_WRITE: u64 = 1 << 9;
    FI_RECV: u64 = 1 << 10;
    FI_SEND: u64 = 1 << 11;
    FI_TRANSMIT: u64 = 1 << 11;
    FI_REMOTE_READ: u64 = 1 << 12;
    FI_REMOTE_WRITE: u64 = 1 << 13;
    FI_REMOTE_CQ_DATA: u64 = 1 << 17;
    FI_MORE: u64 = 1 << 18;
    FI_FENCE: u64 = 1 << 21;
    FI_COMPLETION: u64 = 1 << 24;
    FI_INJECT: u64 = 1 << 25;
    FI_INJECT_COMPLETE: u64 = 1 << 26;
    FI_TRANSMIT_COMPLETE: u64 = 1 << 27;
    FI_DELIVERY_COMPLETE: u64 = 1 << 28;
    FI_RMA_EVENT: u64 = 1 << 56;
    FI_SOURCE: u64 = 1 << 57;
    FI_SELECTIVE_COMPLETION: u64 = 1 << 59;
    // Mode bits (u64)
    FI_CONTEXT: u64 = 1 << 59;
    FI_RX_CQ_DATA: u64 = 1 << 56;
    // Memory registration modes (c_int)
    FI_MR_LOCAL: c_int = 1 << 2;
    FI_MR_RAW: c_int = 1 << 3;
    FI_MR_VIRT_ADDR: c_int = 1 << 4;
    FI_MR_ALLOCATED: c_int = 1 << 5;
    FI_MR_PROV_KEY: c_int = 1 << 6;
    FI_MR_MMU_NOTIFY: c_int = 1 << 7;
    FI_MR_RMA_EVENT: c_int = 1 << 8;
    FI_MR_ENDPOINT: c_int = 1 << 9;
    FI_MR_HMEM: c_int = 1 << 10;
    // Message ordering (u64)
    FI_ORDER_NONE: u64 = 0;
    FI_ORDER_SAS: u64 = 1 << 8;
    FI_ORDER_RMA_RAR: u64 = 1 << 32;
    FI_ORDER_RMA_RAW: u64 = 1 << 33;
    FI_ORDER_RMA_WAR: u64 = 1 << 34;
    FI_ORDER_RMA_WAW: u64 = 1 << 35;
    // Endpoint types (c_int)
    FI_EP_UNSPEC: c_int = 0;
    FI_EP_MSG: c_int = 1;
    FI_EP_DGRAM: c_int = 2;
    FI_EP_RDM: c_int = 3;
    // Progress (c_int)
    FI_PROGRESS_UNSPEC: c_int = 0;
    FI_PROGRESS_AUTO: c_int = 1;
    FI_PROGRESS_MANUAL: c_int = 2;
    // Threading (c_int)
    FI_THREAD_UNSPEC: c_int = 0;
    FI_THREAD_SAFE: c_int = 1;
    FI_THREAD_DOMAIN: c_int = 3;
    FI_THREAD_COMPLETION: c_int = 4;
    FI_THREAD_ENDPOINT: c_int = 5;
    // Address vectors (c_int)
    FI_AV_UNSPEC: c_int = 0;
    FI_AV_MAP: c_int = 1;
    FI_AV_TABLE: c_int = 2;
    // Wait objects (c_int)
    FI_WAIT_NONE: c_int = 0;
    FI_WAIT_UNSPEC: c_int = 1;
    FI_WAIT_FD: c_int = 3;
    // Special values (u64)
    FI_ADDR_NOTAVAIL: u64 = u64::MAX;
    FI_KEY_NOTAVAIL: u64 = u64::MAX;
    // Errors (c_int, positive: calls return them negated)
    FI_SUCCESS: c_int = 0;
    FI_EPERM: c_int = 1;
    FI_ENOENT: c_int = 2;
    FI_EINTR: c_int = 4;
    FI_EIO: c_int = 5;
    FI_E2BIG: c_int = 7;
    FI_EBADF: c_int = 9;
    FI_EAGAIN: c_int = 11;
    FI_ENOMEM: c_int = 12;
    FI_EACCES: c_int = 13;
    FI_EFAULT: c_int = 14;
    FI_EBUSY: c_int = 16;
    FI_ENODEV: c_int = 19;
    FI_EINVAL: c_int = 22;
    FI_EMFILE: c_int = 24;
    FI_ENOSPC: c_int = 28;
    FI_ENOSYS: c_int = 38;
    FI_ENOMSG: c_int = 42;
    FI_ENODATA: c_int = 61;
    FI_EOVERFLOW: c_int = 75;
    FI_EMSGSIZE: c_int = 90;
    FI_ENOPROTOOPT: c_int = 92;
    FI_EOPNOTSUPP: c_int = 95;
    FI_EADDRINUSE: c_int = 98;
    FI_EADDRNOTAVAIL: c_int = 99;
    FI_ENETDOWN: c_int = 100;
    FI_ENETUNREACH: c_int = 101;
    FI_ECONNABORTED: c_int = 103;
    FI_ECONNRESET: c_int = 104;
    FI_ENOBUFS: c_int = 105;
    FI_EISCONN: c_int = 106;
    FI_ENOTCONN: c_int = 107;
    FI_ESHUTDOWN: c_int = 108;
    FI_ETIMEDOUT: c_int = 110;
    FI_ECONNREFUSED: c_int = 111;
    FI_EHOSTDOWN: c_int = 112;
    FI_EHOSTUNREACH: c_int = 113;
    FI_EALREADY: c_int = 114;
    FI_EINPROGRESS: c_int = 115;
    FI_EREMOTEIO: c_int = 121;
    FI_ECANCELED: c_int = 125;
    FI_EKEYREJECTED: c_int = 129;
    FI_EOTHER: c_int = 256;
    FI_ETOOSMALL: c_int = 257;
    FI_EOPBADSTATE: c_int = 258;
    FI_EAVAIL: c_int = 259;
    FI_EBADFLAGS: c_int = 260;
    FI_ENOEQ: c_int = 261;
    FI_EDOMAIN: c_int = 262;
    FI_ENOCQ: c_int = 263;
    FI_ECRC: c_int = 264;
    FI_ETRUNC: c_int = 265;
    FI_ENOKEY: c_int = 266;
    FI_ENOAV: c_int = 267;
    FI_EOVERRUN: c_int = 268;
    FI_ENORX: c_int = 269;
}

extern "C" {
    // libfabric's exported functions, through the shim, which loads libfabric at first use
    // (and answers -FI_ENOSYS, NULL or 0 when it cannot; fi_strerror then says why).
    #[link_name = "lanes_fi_dl_getinfo"]
    pub fn fi_getinfo(
        version: u32,
        node: *const c_char,
        service: *const c_char,
        flags: u64,
        hints: *const fi_info,
        info: *mut *mut fi_info,
    ) -> c_int;
    #[link_name = "lanes_fi_dl_freeinfo"]
    pub fn fi_freeinfo(info: *mut fi_info);
    #[link_name = "lanes_fi_dl_dupinfo"]
    pub fn fi_dupinfo(info: *const fi_info) -> *mut fi_info;
    #[link_name = "lanes_fi_dl_strerror"]
    pub fn fi_strerror(errnum: c_int) -> *const c_char;
    #[link_name = "lanes_fi_dl_version"]
    pub fn fi_version() -> u32;

    // The shim: names and layouts.
    pub fn lanes_fi_constants(count: *mut usize) -> *const lanes_fi_named;
    pub fn lanes_fi_layout(count: *mut usize) -> *const lanes_fi_named;

    // Hints and fi_info accessors.
    pub fn lanes_fi_hints_new(
        prov_name: *const c_char,
        caps: u64,
        mode: u64,
        mr_mode: c_int,
        ep_type: c_int,
        msg_order: u64,
        data_progress: c_int,
        threading: c_int,
    ) -> *mut fi_info;
    pub fn lanes_fi_info_next(info: *const fi_info) -> *const fi_info;
    pub fn lanes_fi_info_prov_name(info: *const fi_info) -> *const c_char;
    pub fn lanes_fi_info_fabric_name(info: *const fi_info) -> *const c_char;
    pub fn lanes_fi_info_domain_name(info: *const fi_info) -> *const c_char;
    pub fn lanes_fi_info_caps(info: *const fi_info) -> u64;
    pub fn lanes_fi_info_mode(info: *const fi_info) -> u64;
    pub fn lanes_fi_info_ep_type(info: *const fi_info) -> c_int;
    pub fn lanes_fi_info_mr_mode(info: *const fi_info) -> c_int;
    pub fn lanes_fi_info_mr_key_size(info: *const fi_info) -> usize;
    pub fn lanes_fi_info_cq_data_size(info: *const fi_info) -> usize;
    pub fn lanes_fi_info_data_progress(info: *const fi_info) -> c_int;
    pub fn lanes_fi_info_threading(info: *const fi_info) -> c_int;
    pub fn lanes_fi_info_msg_order(info: *const fi_info) -> u64;
    pub fn lanes_fi_info_inject_size(info: *const fi_info) -> usize;
    pub fn lanes_fi_info_tx_size(info: *const fi_info) -> usize;
    pub fn lanes_fi_info_rx_size(info: *const fi_info) -> usize;
    pub fn lanes_fi_info_max_msg_size(info: *const fi_info) -> usize;
    pub fn lanes_fi_info_rma_iov_limit(info: *const fi_info) -> usize;
    pub fn lanes_fi_info_max_order_waw_size(info: *const fi_info) -> usize;
    pub fn lanes_fi_info_max_order_raw_size(info: *const fi_info) -> usize;
    pub fn lanes_fi_info_src_addr(info: *const fi_info, len: *mut usize) -> *const c_void;

    // Opening, binding, closing.
    pub fn lanes_fi_fabric(info: *const fi_info, fabric: *mut *mut fid_fabric) -> c_int;
    pub fn lanes_fi_domain(fabric: *mut fid_fabric, info: *mut fi_info, domain: *mut *mut fid_domain) -> c_int;
    pub fn lanes_fi_av_open(domain: *mut fid_domain, av_type: c_int, count: usize, av: *mut *mut fid_av) -> c_int;
    pub fn lanes_fi_av_insert(av: *mut fid_av, addr: *const c_void, fi_addr: *mut fi_addr_t) -> c_int;
    pub fn lanes_fi_av_remove(av: *mut fid_av, fi_addr: fi_addr_t) -> c_int;
    pub fn lanes_fi_cq_open(domain: *mut fid_domain, size: usize, wait_obj: c_int, cq: *mut *mut fid_cq) -> c_int;
    pub fn lanes_fi_cq_wait_fd(cq: *mut fid_cq, fd: *mut c_int) -> c_int;
    pub fn lanes_fi_endpoint(domain: *mut fid_domain, info: *mut fi_info, ep: *mut *mut fid_ep) -> c_int;
    pub fn lanes_fi_ep_bind_av(ep: *mut fid_ep, av: *mut fid_av) -> c_int;
    pub fn lanes_fi_ep_bind_cq(ep: *mut fid_ep, cq: *mut fid_cq, flags: u64) -> c_int;
    pub fn lanes_fi_enable(ep: *mut fid_ep) -> c_int;
    pub fn lanes_fi_getname(ep: *mut fid_ep, addr: *mut c_void, len: *mut usize) -> c_int;
    pub fn lanes_fi_close_fabric(fabric: *mut fid_fabric) -> c_int;
    pub fn lanes_fi_close_domain(domain: *mut fid_domain) -> c_int;
    pub fn lanes_fi_close_av(av: *mut fid_av) -> c_int;
    pub fn lanes_fi_close_cq(cq: *mut fid_cq) -> c_int;
    pub fn lanes_fi_close_ep(ep: *mut fid_ep) -> c_int;
    pub fn lanes_fi_close_mr(mr: *mut fid_mr) -> c_int;

    // Memory registration.
    pub fn lanes_fi_mr_reg(
        domain: *mut fid_domain,
        buf: *const c_void,
        len: usize,
        access: u64,
        requested_key: u64,
        mr: *mut *mut fid_mr,
    ) -> c_int;
    pub fn lanes_fi_mr_key(mr: *mut fid_mr) -> u64;
    pub fn lanes_fi_mr_desc(mr: *mut fid_mr) -> *mut c_void;

    // RMA.
    pub fn lanes_fi_write(
        ep: *mut fid_ep,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest: fi_addr_t,
        addr: u64,
        key: u64,
        context: *mut c_void,
    ) -> isize;
    pub fn lanes_fi_writedata(
        ep: *mut fid_ep,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        data: u64,
        dest: fi_addr_t,
        addr: u64,
        key: u64,
        context: *mut c_void,
    ) -> isize;
    pub fn lanes_fi_writemsg1(
        ep: *mut fid_ep,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest: fi_addr_t,
        addr: u64,
        key: u64,
        data: u64,
        context: *mut c_void,
        flags: u64,
    ) -> isize;
    /// `fi_writemsg` of one local segment to `count` (1 to [`LANES_SCATTER_MAX`]) remote
    /// ranges `addrs[i]`, `lens[i]` of one key; the lengths must add up to `len`.
    pub fn lanes_fi_writemsg_scatter(
        ep: *mut fid_ep,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest: fi_addr_t,
        addrs: *const u64,
        lens: *const usize,
        count: usize,
        key: u64,
        context: *mut c_void,
        flags: u64,
    ) -> isize;
    pub fn lanes_fi_inject_write(
        ep: *mut fid_ep,
        buf: *const c_void,
        len: usize,
        dest: fi_addr_t,
        addr: u64,
        key: u64,
    ) -> isize;
    pub fn lanes_fi_read(
        ep: *mut fid_ep,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        src: fi_addr_t,
        addr: u64,
        key: u64,
        context: *mut c_void,
    ) -> isize;

    // Completions.
    pub fn lanes_fi_cq_read(cq: *mut fid_cq, buf: *mut fi_cq_data_entry, count: usize) -> isize;
    pub fn lanes_fi_cq_readerr(cq: *mut fid_cq, out: *mut lanes_fi_cq_err, msg: *mut c_char, msg_len: usize) -> isize;
    pub fn lanes_fi_cq_strerror(cq: *mut fid_cq, prov_errno: c_int, buf: *mut c_char, len: usize) -> *const c_char;
    pub fn lanes_fi_trywait_cqs(fabric: *mut fid_fabric, cqs: *const *mut fid_cq, count: usize) -> c_int;
}
