//! Safe RAII wrappers over the libfabric objects the ofi transport uses.
//!
//! [`Info`] is one `fi_getinfo` result; [`Fabric`], [`Domain`], [`Av`] (address vector),
//! [`Cq`] (completion queue of `fi_cq_data_entry`, optionally with a file descriptor to
//! sleep on), [`Endpoint`] (reliable datagram, `FI_EP_RDM`) and [`MemoryRegion`] own one
//! libfabric object each and close it on drop. Each holds an `Arc` of the objects it was
//! opened from or bound to, so closing always happens child first (endpoint and memory
//! regions, then address vector and CQs, then domain, then fabric), whatever order the
//! owners drop them in.
//!
//! Rules this layer keeps:
//! - Every failure is an [`Error::Ofi`] naming the libfabric call, with `fi_strerror`'s text;
//!   completion errors carry the provider's own text (`fi_cq_strerror`).
//! - No call waits without a bound. libfabric answers `-FI_EAGAIN` when a post cannot be
//!   queued yet (rxm still connecting, queues full); posts then drive progress
//!   (`fi_cq_read` of zero entries, which consumes nothing) and retry until the deadline the
//!   caller gives, then fail with [`Error::Timeout`]. A peer that stops answering is found
//!   by the caller's deadlines, never by the provider (it retries for minutes:
//!   docs/design/multi-host.md, "Stage 0 results").
//! - Domains must be `FI_THREAD_SAFE` (what Lanes asks for), so every object is `Send` and
//!   `Sync`.
//! - No Rust code is called from C (no callbacks), so no panic can unwind into libfabric.
//!
//! Posting RMA that reads or writes local memory is `unsafe`: the memory must stay valid
//! until the operation's completion is read (the provider uses it asynchronously).
//! [`Endpoint::inject_write`], which copies its data before returning, is safe.

use std::ffi::{c_int, c_void, CStr, CString};
use std::fmt;
use std::os::fd::{BorrowedFd, RawFd};
use std::ptr::{self, NonNull};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lanes_ofi_sys as sys;

use crate::error::{Error, Result};
use crate::platform::mapping::Mapping;
use crate::platform::SharedSlice;

pub use sys::{
    FI_AV_TABLE, FI_CONTEXT, FI_DELIVERY_COMPLETE, FI_EP_RDM, FI_MORE, FI_MR_ALLOCATED, FI_MR_LOCAL, FI_MR_PROV_KEY,
    FI_MR_VIRT_ADDR, FI_ORDER_RMA_RAW, FI_ORDER_RMA_WAW, FI_PROGRESS_MANUAL, FI_READ, FI_REMOTE_CQ_DATA,
    FI_REMOTE_READ, FI_REMOTE_WRITE, FI_RMA, FI_SOURCE, FI_THREAD_SAFE, FI_WRITE,
};

/// Per-operation storage for providers that require `FI_CONTEXT` (see [`Endpoint::write`]).
pub type FiContext = sys::fi_context;

/// The provider Lanes uses unless configured otherwise.
pub const DEFAULT_PROVIDER: &str = "tcp;ofi_rxm";

/// `-FI_EAGAIN` as the post calls return it.
const EAGAIN: isize = -(sys::FI_EAGAIN as isize);

/// libfabric's text for a (positive) `FI_E*` code.
pub fn strerror(code: i32) -> String {
    // SAFETY: fi_strerror returns a pointer to a static, NUL-terminated string for any code.
    let text = unsafe { CStr::from_ptr(sys::fi_strerror(code)) };
    text.to_string_lossy().into_owned()
}

/// The error for a failed call that returned `rc` (a negated `FI_E*` code).
fn fi_error(call: &'static str, rc: isize) -> Error {
    let code = i32::try_from(rc.unsigned_abs()).unwrap_or(i32::MAX);
    Error::Ofi { call, code, message: strerror(code) }
}

/// The object an opening call (`fi_fabric`, `fi_domain`, ...) returned `rc` and wrote to
/// `ptr` for; a success without an object is an error too.
fn opened<T>(call: &'static str, rc: c_int, ptr: *mut T) -> Result<NonNull<T>> {
    check(call, rc)?;
    NonNull::new(ptr).ok_or_else(|| fi_error(call, -(sys::FI_EOTHER as isize)))
}

/// `Ok(())` for 0, the call's error otherwise.
fn check(call: &'static str, rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(fi_error(call, rc as isize))
    }
}

/// A C string owned by libfabric (NULL allowed) as an owned Rust string.
fn owned_str(p: *const std::ffi::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: libfabric's info strings are NUL-terminated and live as long as the info the
    // pointer was read from, which the caller holds.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

// ---------------------------------------------------------------------------------------
// Discovery
// ---------------------------------------------------------------------------------------

/// What to ask `fi_getinfo` for; [`Hints::lanes_rdm`] is what Lanes asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hints {
    /// `fabric_attr.prov_name` ("tcp;ofi_rxm", "net", "verbs;ofi_rxm"); None: any.
    pub provider: Option<String>,
    pub caps: u64,
    /// The modes this application supports (`FI_CONTEXT`, ...).
    pub mode: u64,
    /// The registration modes this application handles (`FI_MR_*`).
    pub mr_mode: i32,
    pub ep_type: i32,
    /// Transmit (and receive) ordering wanted (`FI_ORDER_*`).
    pub msg_order: u64,
    pub data_progress: i32,
    pub threading: i32,
}

impl Hints {
    /// Reliable datagram endpoints for RMA as docs/design/multi-host.md (section 11) says:
    /// RMA read and write both ways, `FI_CONTEXT`, every registration mode Lanes handles,
    /// write-after-write and read-after-write ordering, manual progress, thread safety.
    pub fn lanes_rdm(provider: Option<&str>) -> Hints {
        Hints {
            provider: provider.map(str::to_owned),
            caps: FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
            mode: FI_CONTEXT,
            mr_mode: FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY,
            ep_type: FI_EP_RDM,
            msg_order: FI_ORDER_RMA_WAW | FI_ORDER_RMA_RAW,
            data_progress: FI_PROGRESS_MANUAL,
            threading: FI_THREAD_SAFE,
        }
    }
}

/// One `fi_getinfo` result (a provider, fabric and domain with their attributes), owned.
pub struct Info {
    ptr: NonNull<sys::fi_info>,
}

// SAFETY: an fi_info is plain data that nothing mutates after fi_getinfo/fi_dupinfo; it is
// freed once, by the owner's drop.
unsafe impl Send for Info {}
// SAFETY: as above; &Info only reads it.
unsafe impl Sync for Info {}

impl Info {
    /// `fi_getinfo(1.17, node, service, flags, hints)`: every match, best first; empty when
    /// nothing matches (`-FI_ENODATA`). With `FI_SOURCE` in `flags`, `node`/`service` name
    /// the local address to bind.
    pub fn get(hints: &Hints, node: Option<&str>, service: Option<&str>, flags: u64) -> Result<Vec<Info>> {
        let c = |s: Option<&str>, what: &'static str| -> Result<Option<CString>> {
            s.map(|s| CString::new(s).map_err(|_| Error::IllegalOperation(what))).transpose()
        };
        let prov = c(hints.provider.as_deref(), "provider name contains a NUL byte")?;
        let node = c(node, "node contains a NUL byte")?;
        let service = c(service, "service contains a NUL byte")?;
        let opt_ptr = |s: &Option<CString>| s.as_ref().map_or(ptr::null(), |s| s.as_ptr());

        // SAFETY: the shim copies the provider name (strdup); all other arguments are scalars.
        let raw_hints = unsafe {
            sys::lanes_fi_hints_new(
                opt_ptr(&prov),
                hints.caps,
                hints.mode,
                hints.mr_mode,
                hints.ep_type,
                hints.msg_order,
                hints.data_progress,
                hints.threading,
            )
        };
        if raw_hints.is_null() {
            return Err(fi_error("fi_allocinfo", -(sys::FI_ENOMEM as isize)));
        }
        let mut list: *mut sys::fi_info = ptr::null_mut();
        // SAFETY: node and service are NUL-terminated or NULL, raw_hints is a valid fi_info,
        // list receives a new list we free below.
        let rc = unsafe {
            sys::fi_getinfo(sys::LANES_FI_VERSION, opt_ptr(&node), opt_ptr(&service), flags, raw_hints, &mut list)
        };
        // SAFETY: raw_hints came from fi_allocinfo and is freed exactly once.
        unsafe { sys::fi_freeinfo(raw_hints) };
        if rc == -sys::FI_ENODATA {
            return Ok(Vec::new());
        }
        check("fi_getinfo", rc)?;

        let mut infos = Vec::new();
        let mut cur: *const sys::fi_info = list;
        let mut failed = false;
        while !cur.is_null() {
            // SAFETY: cur is an entry of the list fi_getinfo returned, not yet freed;
            // fi_dupinfo copies that one entry (its `next` is not followed).
            match NonNull::new(unsafe { sys::fi_dupinfo(cur) }) {
                Some(ptr) => infos.push(Info { ptr }),
                None => failed = true,
            }
            // SAFETY: as above.
            cur = unsafe { sys::lanes_fi_info_next(cur) };
        }
        // SAFETY: list came from fi_getinfo and is freed exactly once; the copies are ours.
        unsafe { sys::fi_freeinfo(list) };
        if failed {
            return Err(fi_error("fi_dupinfo", -(sys::FI_ENOMEM as isize)));
        }
        Ok(infos)
    }

    fn raw(&self) -> *const sys::fi_info {
        self.ptr.as_ptr()
    }

    /// A copy (objects opened from an info keep their own).
    fn dup(&self) -> Result<Info> {
        // SAFETY: self is a valid single-entry fi_info.
        NonNull::new(unsafe { sys::fi_dupinfo(self.raw()) })
            .map(|ptr| Info { ptr })
            .ok_or_else(|| fi_error("fi_dupinfo", -(sys::FI_ENOMEM as isize)))
    }

    /// The provider as libfabric names it ("tcp;ofi_rxm" for rxm over tcp).
    pub fn provider(&self) -> String {
        // SAFETY: accessors read fields of a valid fi_info we own.
        owned_str(unsafe { sys::lanes_fi_info_prov_name(self.raw()) })
    }
    pub fn fabric_name(&self) -> String {
        // SAFETY: as above.
        owned_str(unsafe { sys::lanes_fi_info_fabric_name(self.raw()) })
    }
    pub fn domain_name(&self) -> String {
        // SAFETY: as above.
        owned_str(unsafe { sys::lanes_fi_info_domain_name(self.raw()) })
    }
    pub fn caps(&self) -> u64 {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_caps(self.raw()) }
    }
    /// The modes the provider requires of the application (a subset of those offered).
    pub fn mode(&self) -> u64 {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_mode(self.raw()) }
    }
    /// The registration modes the provider requires (`FI_MR_*`).
    pub fn mr_mode(&self) -> i32 {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_mr_mode(self.raw()) }
    }
    pub fn mr_key_size(&self) -> usize {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_mr_key_size(self.raw()) }
    }
    /// Bytes of remote CQ data a write may carry (0: none).
    pub fn cq_data_size(&self) -> usize {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_cq_data_size(self.raw()) }
    }
    pub fn data_progress(&self) -> i32 {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_data_progress(self.raw()) }
    }
    pub fn threading(&self) -> i32 {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_threading(self.raw()) }
    }
    /// Transmit ordering the provider guarantees (`FI_ORDER_*`).
    pub fn msg_order(&self) -> u64 {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_msg_order(self.raw()) }
    }
    /// Largest write [`Endpoint::inject_write`] accepts.
    pub fn inject_size(&self) -> usize {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_inject_size(self.raw()) }
    }
    pub fn tx_size(&self) -> usize {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_tx_size(self.raw()) }
    }
    pub fn rx_size(&self) -> usize {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_rx_size(self.raw()) }
    }
    pub fn max_msg_size(&self) -> usize {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_max_msg_size(self.raw()) }
    }
    /// Most remote ranges one RMA operation may name (`tx_attr.rma_iov_limit`).
    pub fn rma_iov_limit(&self) -> usize {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_rma_iov_limit(self.raw()) }
    }
    /// Whether the provider fills the remote ranges of one RMA write in the order they are
    /// named, each complete before the next starts. libfabric does not promise this; the
    /// `tcp` and `net` providers (alone or under `ofi_rxm`) do it by construction: an
    /// operation's data is one run of a TCP stream, read into the named ranges in turn.
    pub fn fills_ranges_in_order(&self) -> bool {
        let provider = self.provider();
        matches!(provider.split(';').next(), Some("tcp" | "net"))
    }
    /// Largest write for which write-after-write ordering holds.
    pub fn max_order_waw_size(&self) -> usize {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_max_order_waw_size(self.raw()) }
    }
    /// Largest write for which read-after-write ordering holds.
    pub fn max_order_raw_size(&self) -> usize {
        // SAFETY: as above.
        unsafe { sys::lanes_fi_info_max_order_raw_size(self.raw()) }
    }
    /// The source address the info names (empty when none).
    pub fn src_addr(&self) -> Vec<u8> {
        let mut len = 0usize;
        // SAFETY: the accessor returns the info's src_addr and its length (or NULL and 0).
        let p = unsafe { sys::lanes_fi_info_src_addr(self.raw(), &mut len) };
        if p.is_null() || len == 0 {
            return Vec::new();
        }
        // SAFETY: src_addr points to src_addrlen bytes owned by the info we hold.
        unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) }.to_vec()
    }
}

impl Drop for Info {
    fn drop(&mut self) {
        // SAFETY: we own this single-entry fi_info (from fi_dupinfo) and free it once.
        unsafe { sys::fi_freeinfo(self.ptr.as_ptr()) }
    }
}

impl fmt::Debug for Info {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Info")
            .field("provider", &self.provider())
            .field("fabric", &self.fabric_name())
            .field("domain", &self.domain_name())
            .field("caps", &format_args!("{:#x}", self.caps()))
            .field("mode", &format_args!("{:#x}", self.mode()))
            .field("mr_mode", &format_args!("{:#x}", self.mr_mode()))
            .field("cq_data_size", &self.cq_data_size())
            .field("inject_size", &self.inject_size())
            .field("msg_order", &format_args!("{:#x}", self.msg_order()))
            .finish()
    }
}

// ---------------------------------------------------------------------------------------
// Fabric and domain
// ---------------------------------------------------------------------------------------

/// An open fabric (`fi_fabric`).
pub struct Fabric {
    ptr: NonNull<sys::fid_fabric>,
}

// SAFETY: the fabric object is used only through libfabric calls, which are thread safe for
// the FI_THREAD_SAFE domains this layer opens (Domain::open refuses others).
unsafe impl Send for Fabric {}
// SAFETY: as above.
unsafe impl Sync for Fabric {}

impl Fabric {
    /// Opens the fabric `info` names.
    pub fn open(info: &Info) -> Result<Arc<Fabric>> {
        let mut ptr = ptr::null_mut();
        // SAFETY: info is valid; ptr receives the new object.
        let ptr = opened("fi_fabric", unsafe { sys::lanes_fi_fabric(info.raw(), &mut ptr) }, ptr)?;
        Ok(Arc::new(Fabric { ptr }))
    }

    /// `fi_trywait` on `cqs`: `true` when it is safe to block on their file descriptors,
    /// `false` when completions may be pending (read them, then try again). Every CQ must
    /// have been opened with [`Wait::Fd`] on a domain of this fabric.
    pub fn trywait(&self, cqs: &[&Cq]) -> Result<bool> {
        if cqs.is_empty() || cqs.len() > 8 {
            return Err(Error::IllegalOperation("fi_trywait takes 1 to 8 completion queues"));
        }
        if cqs.iter().any(|cq| cq.domain.fabric.ptr != self.ptr || cq.fd.is_none()) {
            return Err(Error::IllegalOperation("fi_trywait on a CQ without a wait fd or of another fabric"));
        }
        let mut raw = [ptr::null_mut::<sys::fid_cq>(); 8];
        for (slot, cq) in raw.iter_mut().zip(cqs) {
            *slot = cq.ptr.as_ptr();
        }
        // SAFETY: the first cqs.len() pointers are live CQs of this fabric (held by the
        // borrowed Cqs).
        let rc = unsafe { sys::lanes_fi_trywait_cqs(self.ptr.as_ptr(), raw.as_ptr(), cqs.len()) };
        match rc {
            0 => Ok(true),
            rc if rc == -sys::FI_EAGAIN => Ok(false),
            rc => Err(fi_error("fi_trywait", rc as isize)),
        }
    }
}

impl Drop for Fabric {
    fn drop(&mut self) {
        // SAFETY: every child holds an Arc of this fabric, so none is open any more. A
        // close failure cannot be reported from drop; the object is abandoned either way.
        unsafe { sys::lanes_fi_close_fabric(self.ptr.as_ptr()) };
    }
}

impl fmt::Debug for Fabric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fabric").field("ptr", &self.ptr).finish()
    }
}

/// An open access domain (`fi_domain`); keeps its fabric open.
pub struct Domain {
    ptr: NonNull<sys::fid_domain>,
    info: Info,
    fabric: Arc<Fabric>,
}

// SAFETY: the domain is FI_THREAD_SAFE (checked at open): libfabric serialises what needs it.
unsafe impl Send for Domain {}
// SAFETY: as above.
unsafe impl Sync for Domain {}

impl Domain {
    /// Opens the domain `info` names on `fabric`. Refuses domains that are not
    /// `FI_THREAD_SAFE`: the wrappers share objects between threads.
    pub fn open(fabric: &Arc<Fabric>, info: &Info) -> Result<Arc<Domain>> {
        if info.threading() != FI_THREAD_SAFE {
            return Err(Error::IllegalOperation("the ofi transport needs an FI_THREAD_SAFE domain"));
        }
        let info = info.dup()?;
        let mut ptr = ptr::null_mut();
        // SAFETY: fabric and info are valid; libfabric copies what it keeps of info.
        let ptr = opened(
            "fi_domain",
            unsafe { sys::lanes_fi_domain(fabric.ptr.as_ptr(), info.ptr.as_ptr(), &mut ptr) },
            ptr,
        )?;
        Ok(Arc::new(Domain { ptr, info, fabric: Arc::clone(fabric) }))
    }

    /// The info this domain was opened with.
    pub fn info(&self) -> &Info {
        &self.info
    }

    pub fn fabric(&self) -> &Arc<Fabric> {
        &self.fabric
    }
}

impl Drop for Domain {
    fn drop(&mut self) {
        // SAFETY: every child (AV, CQ, endpoint, MR) holds an Arc of this domain, so all are
        // closed. A close failure cannot be reported from drop.
        unsafe { sys::lanes_fi_close_domain(self.ptr.as_ptr()) };
    }
}

impl fmt::Debug for Domain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Domain").field("info", &self.info).finish()
    }
}

// ---------------------------------------------------------------------------------------
// Address vectors
// ---------------------------------------------------------------------------------------

/// A peer's address in an [`Av`] (`fi_addr_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FiAddr(pub u64);

/// An address vector (`fi_av_open`), mapping peers' raw endpoint names to [`FiAddr`]s.
pub struct Av {
    ptr: NonNull<sys::fid_av>,
    domain: Arc<Domain>,
}

// SAFETY: used only through libfabric calls on an FI_THREAD_SAFE domain.
unsafe impl Send for Av {}
// SAFETY: as above.
unsafe impl Sync for Av {}

impl Av {
    /// Opens an `FI_AV_TABLE` address vector sized for `count` peers (a hint).
    pub fn open(domain: &Arc<Domain>, count: usize) -> Result<Arc<Av>> {
        let mut ptr = ptr::null_mut();
        // SAFETY: domain is valid; ptr receives the new object.
        let ptr = opened(
            "fi_av_open",
            unsafe { sys::lanes_fi_av_open(domain.ptr.as_ptr(), FI_AV_TABLE, count, &mut ptr) },
            ptr,
        )?;
        Ok(Arc::new(Av { ptr, domain: Arc::clone(domain) }))
    }

    /// Inserts a peer's endpoint name (what its [`Endpoint::name`] returned).
    pub fn insert(&self, name: &[u8]) -> Result<FiAddr> {
        if name.is_empty() {
            return Err(Error::IllegalOperation("empty endpoint name"));
        }
        let mut addr = sys::FI_ADDR_NOTAVAIL;
        // SAFETY: the provider reads one address of its own format from `name`; names come
        // from fi_getname of the same provider, and the length check above rules out NULL.
        // A short buffer would be over-read, so callers pass whole names.
        check("fi_av_insert", unsafe { sys::lanes_fi_av_insert(self.ptr.as_ptr(), name.as_ptr().cast(), &mut addr) })?;
        Ok(FiAddr(addr))
    }

    /// Removes a peer. No operation to it may be in flight (fi_av(3): undefined otherwise).
    pub fn remove(&self, addr: FiAddr) -> Result<()> {
        // SAFETY: av is valid; the address is a plain index the provider checks.
        check("fi_av_remove", unsafe { sys::lanes_fi_av_remove(self.ptr.as_ptr(), addr.0) })
    }

    pub fn domain(&self) -> &Arc<Domain> {
        &self.domain
    }
}

impl Drop for Av {
    fn drop(&mut self) {
        // SAFETY: endpoints bound to this AV hold an Arc of it, so none is open any more.
        unsafe { sys::lanes_fi_close_av(self.ptr.as_ptr()) };
    }
}

impl fmt::Debug for Av {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Av").field("ptr", &self.ptr).finish()
    }
}

// ---------------------------------------------------------------------------------------
// Completion queues
// ---------------------------------------------------------------------------------------

/// How a CQ's reader waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Polling only.
    None,
    /// A file descriptor to sleep on in poll/epoll after [`Fabric::trywait`] (`FI_WAIT_FD`).
    Fd,
}

/// One completion (`fi_cq_data_entry`).
#[repr(transparent)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Completion(sys::fi_cq_data_entry);

impl Completion {
    /// The context pointer the operation was posted with (NULL for remote CQ data).
    pub fn context(&self) -> *mut c_void {
        self.0.op_context
    }
    /// `FI_RMA`, `FI_WRITE`, `FI_READ`, `FI_REMOTE_WRITE`, `FI_REMOTE_CQ_DATA`, ...
    pub fn flags(&self) -> u64 {
        self.0.flags
    }
    pub fn len(&self) -> usize {
        self.0.len
    }
    pub fn is_empty(&self) -> bool {
        self.0.len == 0
    }
    /// The remote CQ data of an `fi_writedata` (valid with `FI_REMOTE_CQ_DATA`).
    pub fn data(&self) -> u64 {
        self.0.data
    }
    /// Whether this completion carries remote CQ data.
    pub fn has_remote_data(&self) -> bool {
        self.0.flags & FI_REMOTE_CQ_DATA != 0
    }
}

/// An operation that failed, as its CQ reported it (`fi_cq_readerr` + `fi_cq_strerror`).
#[derive(Clone, Debug)]
pub struct CompletionError {
    /// The context the operation was posted with.
    pub context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub data: u64,
    /// A positive `FI_E*` code.
    pub err: i32,
    pub prov_errno: i32,
    /// `fi_strerror(err)`, and the provider's own text when it has one.
    pub message: String,
}

impl fmt::Display for CompletionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (-{}, provider error {})", self.message, self.err, self.prov_errno)
    }
}

impl CompletionError {
    /// As a fabric [`Error`] naming `call`.
    pub fn into_error(self, call: &'static str) -> Error {
        Error::Ofi { call, code: self.err, message: self.message }
    }
}

/// What one [`Cq::poll`] found.
#[derive(Debug)]
pub enum Polled {
    /// This many completions were written to the front of the buffer (0: none yet).
    Completions(usize),
    /// The next entry is an error; it has been consumed.
    Error(CompletionError),
}

/// A completion queue of [`Completion`]s (`fi_cq_open`, `FI_CQ_FORMAT_DATA`).
pub struct Cq {
    ptr: NonNull<sys::fid_cq>,
    fd: Option<RawFd>,
    domain: Arc<Domain>,
}

// SAFETY: used only through libfabric calls on an FI_THREAD_SAFE domain.
unsafe impl Send for Cq {}
// SAFETY: as above.
unsafe impl Sync for Cq {}

impl Cq {
    /// Opens a CQ of `size` entries (0: the provider's default).
    pub fn open(domain: &Arc<Domain>, size: usize, wait: Wait) -> Result<Arc<Cq>> {
        let wait_obj = match wait {
            Wait::None => sys::FI_WAIT_NONE,
            Wait::Fd => sys::FI_WAIT_FD,
        };
        let mut ptr = ptr::null_mut();
        // SAFETY: domain is valid; ptr receives the new object.
        let ptr =
            opened("fi_cq_open", unsafe { sys::lanes_fi_cq_open(domain.ptr.as_ptr(), size, wait_obj, &mut ptr) }, ptr)?;
        let mut cq = Cq { ptr, fd: None, domain: Arc::clone(domain) };
        if wait == Wait::Fd {
            let mut fd: c_int = -1;
            // SAFETY: FI_GETWAIT on an FI_WAIT_FD CQ writes one int (the fd, owned by the CQ).
            check("fi_control(FI_GETWAIT)", unsafe { sys::lanes_fi_cq_wait_fd(cq.ptr.as_ptr(), &mut fd) })?;
            if fd < 0 {
                return Err(fi_error("fi_control(FI_GETWAIT)", -(sys::FI_EOTHER as isize)));
            }
            cq.fd = Some(fd);
        }
        Ok(Arc::new(cq))
    }

    /// The file descriptor to wait on (CQs opened with [`Wait::Fd`]). It belongs to the CQ:
    /// readable means "read the CQ"; block on it only after [`Fabric::trywait`] said so. A
    /// wake-up may bring no completion (rxm rendezvous, progress of other endpoints).
    pub fn wait_fd(&self) -> Option<BorrowedFd<'_>> {
        // SAFETY: the fd stays open as long as the CQ, which the borrow keeps alive.
        self.fd.map(|fd| unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// Reads completions into `out`; an error entry at the head is read and returned alone.
    pub fn poll(&self, out: &mut [Completion]) -> Result<Polled> {
        if out.is_empty() {
            return Err(Error::IllegalOperation("Cq::poll needs room for a completion"));
        }
        // SAFETY: Completion is repr(transparent) over fi_cq_data_entry (layout checked by
        // lanes-ofi-sys' tests); the provider writes at most out.len() entries.
        let rc = unsafe { sys::lanes_fi_cq_read(self.ptr.as_ptr(), out.as_mut_ptr().cast(), out.len()) };
        match rc {
            n if n >= 0 => Ok(Polled::Completions(n.unsigned_abs())),
            EAGAIN => Ok(Polled::Completions(0)),
            rc if rc == -(sys::FI_EAVAIL as isize) => match self.read_error()? {
                Some(e) => Ok(Polled::Error(e)),
                // Another reader took the error entry first.
                None => Ok(Polled::Completions(0)),
            },
            rc => Err(fi_error("fi_cq_read", rc)),
        }
    }

    /// Drives the provider's progress for the endpoints bound to this CQ without consuming
    /// completions (`fi_cq_read` of zero entries).
    pub fn progress(&self) -> Result<()> {
        // SAFETY: a zero-entry read writes nothing.
        let rc = unsafe { sys::lanes_fi_cq_read(self.ptr.as_ptr(), ptr::null_mut(), 0) };
        match rc {
            n if n >= 0 => Ok(()),
            EAGAIN => Ok(()),
            rc if rc == -(sys::FI_EAVAIL as isize) => Ok(()),
            rc => Err(fi_error("fi_cq_read", rc)),
        }
    }

    /// `fi_cq_readerr`: the error entry at the head, if any.
    fn read_error(&self) -> Result<Option<CompletionError>> {
        let mut entry = sys::lanes_fi_cq_err::default();
        let mut text = [0u8; 256];
        // SAFETY: entry and text are ours, text.len() bytes long; the shim NUL-terminates.
        let rc =
            unsafe { sys::lanes_fi_cq_readerr(self.ptr.as_ptr(), &mut entry, text.as_mut_ptr().cast(), text.len()) };
        match rc {
            1 => {}
            EAGAIN => return Ok(None),
            rc if rc < 0 => return Err(fi_error("fi_cq_readerr", rc)),
            _ => return Ok(None),
        }
        let provider_text =
            CStr::from_bytes_until_nul(&text).map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let general = strerror(entry.err);
        let message = if provider_text.is_empty() || provider_text == general {
            general
        } else {
            format!("{general}: {provider_text}")
        };
        Ok(Some(CompletionError {
            context: entry.op_context,
            flags: entry.flags,
            len: entry.len,
            data: entry.data,
            err: entry.err,
            prov_errno: entry.prov_errno,
            message,
        }))
    }

    pub fn domain(&self) -> &Arc<Domain> {
        &self.domain
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: endpoints bound to this CQ hold an Arc of it, so none is open any more;
        // the wait fd is the CQ's and closes with it.
        unsafe { sys::lanes_fi_close_cq(self.ptr.as_ptr()) };
    }
}

impl fmt::Debug for Cq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cq").field("ptr", &self.ptr).field("fd", &self.fd).finish()
    }
}

// ---------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------

/// Memory that a [`MemoryRegion`] may cover.
///
/// # Safety
/// `as_ptr()..as_ptr() + len()` must stay mapped, readable and writable for as long as the
/// value lives, and must be accessed only through raw pointers and copies, never through
/// Rust references: once registered, the provider (on behalf of peers) may read or write it
/// at any time.
pub unsafe trait RegistrableMemory: Send + Sync {
    fn as_ptr(&self) -> *mut u8;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The memory as a checked slice.
    fn shared_slice(&self) -> SharedSlice<'_> {
        // SAFETY: the trait's contract: mapped, readable and writable while self lives, and
        // touched only through raw pointers and copies.
        unsafe { SharedSlice::from_raw_parts(self.as_ptr(), self.len()) }
    }
}

/// Page-aligned, zero-filled, populated private memory of this process for RMA: the source
/// or destination of local transfers and the target of peers' ones. Read and written by
/// copies only.
#[derive(Debug)]
pub struct Buffer {
    map: Mapping,
}

impl Buffer {
    pub fn new(len: usize) -> Result<Buffer> {
        Mapping::anonymous(len)
            .map(|map| Buffer { map })
            .map_err(|e| Error::io(format!("allocating {len} bytes for RMA"), e))
    }

    /// The buffer as a checked slice (read-write).
    #[inline]
    pub fn slice(&self) -> SharedSlice<'_> {
        self.map.slice()
    }

    /// Copies `dst.len()` bytes from `offset` out of the buffer.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.slice().copy_to(offset, dst).map_err(|e| Error::shared(e, "RMA buffer"))
    }

    /// Copies `src` into the buffer at `offset`.
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<()> {
        self.slice().copy_from(offset, src).map_err(|e| Error::shared(e, "RMA buffer"))
    }
}

// SAFETY: an anonymous read-write mapping owned by the Buffer, accessed only by copies.
unsafe impl RegistrableMemory for Buffer {
    fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }
    fn len(&self) -> usize {
        self.map.len()
    }
}

/// A local range of registered memory to post from or into: address, length and the
/// registration's descriptor. Made by [`MemoryRegion::local`].
#[derive(Clone, Copy, Debug)]
pub struct Local {
    ptr: *mut u8,
    len: usize,
    desc: *mut c_void,
}

impl Local {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Where an RMA operation lands: a peer, the address there (base of the peer's region plus
/// offset, see [`MemoryRegion::remote_base`]) and the region's key.
/// Most remote ranges [`Endpoint::write_scatter`] takes.
pub const SCATTER_MAX: usize = sys::LANES_SCATTER_MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub peer: FiAddr,
    pub addr: u64,
    pub key: u64,
}

/// A registered memory region (`fi_mr_reg`); keeps its memory and its domain alive.
pub struct MemoryRegion {
    ptr: NonNull<sys::fid_mr>,
    key: u64,
    desc: *mut c_void,
    base: u64,
    memory: Arc<dyn RegistrableMemory>,
    domain: Arc<Domain>,
}

// SAFETY: the MR object is used only through libfabric calls on an FI_THREAD_SAFE domain;
// desc is an opaque token; the memory is Send + Sync by its trait.
unsafe impl Send for MemoryRegion {}
// SAFETY: as above.
unsafe impl Sync for MemoryRegion {}

impl MemoryRegion {
    /// Registers all of `memory` for `access` (`FI_READ | FI_WRITE` for local use as a
    /// source or destination, `FI_REMOTE_READ | FI_REMOTE_WRITE` for peers). The key is
    /// `requested_key` unless the domain's provider picks keys (`FI_MR_PROV_KEY`).
    pub fn register(
        domain: &Arc<Domain>,
        memory: Arc<dyn RegistrableMemory>,
        access: u64,
        requested_key: u64,
    ) -> Result<MemoryRegion> {
        let mut ptr = ptr::null_mut();
        // SAFETY: the range is valid for the memory's lifetime (RegistrableMemory's
        // contract), and the MR keeps the memory alive until it is closed.
        let rc = unsafe {
            sys::lanes_fi_mr_reg(
                domain.ptr.as_ptr(),
                memory.as_ptr().cast(),
                memory.len(),
                access,
                requested_key,
                &mut ptr,
            )
        };
        let ptr = opened("fi_mr_reg", rc, ptr)?;
        // SAFETY: ptr is the MR just registered.
        let key = unsafe { sys::lanes_fi_mr_key(ptr.as_ptr()) };
        // SAFETY: as above.
        let desc = unsafe { sys::lanes_fi_mr_desc(ptr.as_ptr()) };
        let base = if domain.info.mr_mode() & FI_MR_VIRT_ADDR != 0 { memory.as_ptr() as u64 } else { 0 };
        let mr = MemoryRegion { ptr, key, desc, base, memory, domain: Arc::clone(domain) };
        if key == sys::FI_KEY_NOTAVAIL {
            return Err(fi_error("fi_mr_key", -(sys::FI_ENOKEY as isize)));
        }
        Ok(mr)
    }

    /// The key peers use to reach this region.
    pub fn key(&self) -> u64 {
        self.key
    }

    /// The address peers use for offset 0 of this region: its virtual address when the
    /// provider addresses regions by virtual address (`FI_MR_VIRT_ADDR`), else 0.
    pub fn remote_base(&self) -> u64 {
        self.base
    }

    pub fn len(&self) -> usize {
        self.memory.len()
    }

    pub fn is_empty(&self) -> bool {
        self.memory.is_empty()
    }

    pub fn domain(&self) -> &Arc<Domain> {
        &self.domain
    }

    /// `len` bytes at `offset` of this region, to post from or into.
    pub fn local(&self, offset: usize, len: usize) -> Result<Local> {
        let range = self.memory.shared_slice().subslice(offset, len).map_err(|e| Error::shared(e, "memory region"))?;
        Ok(Local { ptr: range.as_ptr(), len, desc: self.desc })
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // SAFETY: closing revokes peers' access; the memory (dropped after this) is no
        // longer registered. Operations still in flight on it are the poster's contract.
        unsafe { sys::lanes_fi_close_mr(self.ptr.as_ptr()) };
    }
}

impl fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("key", &format_args!("{:#x}", self.key))
            .field("base", &format_args!("{:#x}", self.base))
            .field("len", &self.memory.len())
            .finish()
    }
}

// ---------------------------------------------------------------------------------------
// Endpoints
// ---------------------------------------------------------------------------------------

/// A reliable datagram endpoint (`FI_EP_RDM`), bound to an address vector and to a transmit
/// and a receive CQ (which may be the same), enabled.
pub struct Endpoint {
    ptr: NonNull<sys::fid_ep>,
    inject_size: usize,
    tx_cq: Arc<Cq>,
    rx_cq: Arc<Cq>,
    av: Arc<Av>,
    domain: Arc<Domain>,
}

// SAFETY: used only through libfabric calls on an FI_THREAD_SAFE domain.
unsafe impl Send for Endpoint {}
// SAFETY: as above.
unsafe impl Sync for Endpoint {}

impl Endpoint {
    /// Opens an endpoint of `domain` with `info` (the domain's own info when None), binds
    /// `av`, `tx_cq` (`FI_TRANSMIT`) and `rx_cq` (`FI_RECV`: remote CQ data arrives there),
    /// and enables it. All must belong to `domain`.
    pub fn open(
        domain: &Arc<Domain>,
        info: Option<&Info>,
        av: &Arc<Av>,
        tx_cq: &Arc<Cq>,
        rx_cq: &Arc<Cq>,
    ) -> Result<Endpoint> {
        if !Arc::ptr_eq(&av.domain, domain)
            || !Arc::ptr_eq(&tx_cq.domain, domain)
            || !Arc::ptr_eq(&rx_cq.domain, domain)
        {
            return Err(Error::IllegalOperation("endpoint, address vector and CQs must share one domain"));
        }
        let info = info.unwrap_or(&domain.info);
        let mut ptr = ptr::null_mut();
        // SAFETY: domain and info are valid; ptr receives the new object.
        let ptr = opened(
            "fi_endpoint",
            unsafe { sys::lanes_fi_endpoint(domain.ptr.as_ptr(), info.ptr.as_ptr(), &mut ptr) },
            ptr,
        )?;
        // From here on the endpoint closes on drop (before the AV and CQs it holds).
        let ep = Endpoint {
            ptr,
            inject_size: info.inject_size(),
            tx_cq: Arc::clone(tx_cq),
            rx_cq: Arc::clone(rx_cq),
            av: Arc::clone(av),
            domain: Arc::clone(domain),
        };
        let raw = ep.ptr.as_ptr();
        // SAFETY: raw and the bound objects are live and of one domain (checked above).
        check("fi_ep_bind(av)", unsafe { sys::lanes_fi_ep_bind_av(raw, av.ptr.as_ptr()) })?;
        if Arc::ptr_eq(tx_cq, rx_cq) {
            // SAFETY: as above.
            check("fi_ep_bind(cq)", unsafe {
                sys::lanes_fi_ep_bind_cq(raw, tx_cq.ptr.as_ptr(), sys::FI_TRANSMIT | sys::FI_RECV)
            })?;
        } else {
            // SAFETY: as above.
            check("fi_ep_bind(tx cq)", unsafe { sys::lanes_fi_ep_bind_cq(raw, tx_cq.ptr.as_ptr(), sys::FI_TRANSMIT) })?;
            // SAFETY: as above.
            check("fi_ep_bind(rx cq)", unsafe { sys::lanes_fi_ep_bind_cq(raw, rx_cq.ptr.as_ptr(), sys::FI_RECV) })?;
        }
        // SAFETY: raw is bound as the provider needs.
        check("fi_enable", unsafe { sys::lanes_fi_enable(raw) })?;
        Ok(ep)
    }

    /// This endpoint's name, for peers' [`Av::insert`].
    pub fn name(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 64];
        loop {
            let mut len = buf.len();
            // SAFETY: buf has len bytes; the provider writes at most len and sets the size.
            let rc = unsafe { sys::lanes_fi_getname(self.ptr.as_ptr(), buf.as_mut_ptr().cast(), &mut len) };
            if rc == -sys::FI_ETOOSMALL && len > buf.len() {
                buf.resize(len, 0);
                continue;
            }
            check("fi_getname", rc)?;
            buf.truncate(len);
            return Ok(buf);
        }
    }

    pub fn av(&self) -> &Arc<Av> {
        &self.av
    }
    pub fn tx_cq(&self) -> &Arc<Cq> {
        &self.tx_cq
    }
    pub fn rx_cq(&self) -> &Arc<Cq> {
        &self.rx_cq
    }
    pub fn domain(&self) -> &Arc<Domain> {
        &self.domain
    }
    /// Largest write [`Endpoint::inject_write`] takes.
    pub fn inject_size(&self) -> usize {
        self.inject_size
    }

    /// Drives progress of this endpoint's CQs without consuming completions.
    pub fn progress(&self) -> Result<()> {
        self.tx_cq.progress()?;
        if !Arc::ptr_eq(&self.tx_cq, &self.rx_cq) {
            self.rx_cq.progress()?;
        }
        Ok(())
    }

    /// Calls `post` until it is not `-FI_EAGAIN`, driving progress between tries, and gives
    /// up with [`Error::Timeout`] at `deadline`. Every post method goes through here.
    pub(super) fn post(&self, call: &'static str, deadline: Instant, mut post: impl FnMut() -> isize) -> Result<()> {
        // The clock is read only once the provider refused: a post it takes at once (the
        // common case, on every message of a ping-pong) pays for no clock reads.
        let mut refused_at: Option<Instant> = None;
        let mut tries = 0u32;
        loop {
            match post() {
                0 => return Ok(()),
                EAGAIN => {}
                rc if rc > 0 => return Ok(()),
                rc => return Err(fi_error(call, rc)),
            }
            let now = Instant::now();
            let start = *refused_at.get_or_insert(now);
            if now >= deadline {
                return Err(Error::Timeout {
                    what: format!("{call} (the provider kept answering -FI_EAGAIN)"),
                    waited_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
                });
            }
            self.progress()?;
            tries += 1;
            if tries % 64 == 0 {
                // Busy for a while (rxm connecting, queues full): let the peer's thread run,
                // which on a small machine may be what we wait for.
                std::thread::yield_now();
            }
        }
    }

    /// `fi_write`: `local` to `target`. The completion arrives on the transmit CQ with
    /// `context`.
    ///
    /// # Safety
    /// `local` must stay valid and unmodified until this operation's completion (or error)
    /// has been read from the transmit CQ, or the endpoint is closed. `context` must be
    /// NULL or valid as the provider's mode asks: when the domain's info has `FI_CONTEXT`
    /// in its mode, it must point to an [`sys::fi_context`] that lives, untouched, as long.
    pub unsafe fn write(&self, local: Local, target: Target, context: *mut c_void, deadline: Instant) -> Result<()> {
        self.post("fi_write", deadline, || {
            // SAFETY: the caller keeps local and context valid until completion; the
            // endpoint is live.
            unsafe {
                sys::lanes_fi_write(
                    self.ptr.as_ptr(),
                    local.ptr.cast(),
                    local.len,
                    local.desc,
                    target.peer.0,
                    target.addr,
                    target.key,
                    context,
                )
            }
        })
    }

    /// `fi_writedata`: as [`Endpoint::write`], and the target's receive CQ gets a completion
    /// with `FI_REMOTE_CQ_DATA` and `data` (at most the info's `cq_data_size` bytes of it)
    /// once the data is in place.
    ///
    /// # Safety
    /// As for [`Endpoint::write`].
    pub unsafe fn write_data(
        &self,
        local: Local,
        target: Target,
        data: u64,
        context: *mut c_void,
        deadline: Instant,
    ) -> Result<()> {
        self.post("fi_writedata", deadline, || {
            // SAFETY: as in write.
            unsafe {
                sys::lanes_fi_writedata(
                    self.ptr.as_ptr(),
                    local.ptr.cast(),
                    local.len,
                    local.desc,
                    data,
                    target.peer.0,
                    target.addr,
                    target.key,
                    context,
                )
            }
        })
    }

    /// `fi_writemsg` with one segment each side and `flags` (`FI_REMOTE_CQ_DATA` to send
    /// `data`, `FI_DELIVERY_COMPLETE`, `FI_MORE`, `FI_INJECT`, ...).
    ///
    /// # Safety
    /// As for [`Endpoint::write`].
    pub unsafe fn write_msg(
        &self,
        local: Local,
        target: Target,
        data: u64,
        flags: u64,
        context: *mut c_void,
        deadline: Instant,
    ) -> Result<()> {
        self.post("fi_writemsg", deadline, || {
            // SAFETY: as in write.
            unsafe {
                sys::lanes_fi_writemsg1(
                    self.ptr.as_ptr(),
                    local.ptr.cast(),
                    local.len,
                    local.desc,
                    target.peer.0,
                    target.addr,
                    target.key,
                    data,
                    context,
                    flags,
                )
            }
        })
    }

    /// `fi_writemsg` of `local` to several targets `(target, len)` of one peer's
    /// registration (at most [`SCATTER_MAX`], lengths adding up to `local`'s): the targets
    /// take `local`'s bytes in list order.
    ///
    /// # Safety
    /// As for [`Endpoint::write`].
    pub unsafe fn write_scatter(
        &self,
        local: Local,
        targets: &[(Target, usize)],
        flags: u64,
        context: *mut c_void,
        deadline: Instant,
    ) -> Result<()> {
        let total: usize = targets.iter().map(|t| t.1).sum();
        let one_registration =
            targets.first().is_some_and(|(f, _)| targets.iter().all(|(t, _)| t.peer == f.peer && t.key == f.key));
        if !one_registration || targets.len() > SCATTER_MAX || total != local.len {
            return Err(Error::Ofi {
                call: "fi_writemsg",
                code: 22, // FI_EINVAL
                message: format!(
                    "a scattered write names {} targets of {total} bytes for {} local bytes \
                     (one to {SCATTER_MAX} targets of one registration)",
                    targets.len(),
                    local.len,
                ),
            });
        }
        let (peer, key) = (targets[0].0.peer, targets[0].0.key);
        let (mut addrs, mut lens) = ([0u64; SCATTER_MAX], [0usize; SCATTER_MAX]);
        for (i, &(t, len)) in targets.iter().enumerate() {
            (addrs[i], lens[i]) = (t.addr, len);
        }
        self.post("fi_writemsg", deadline, || {
            // SAFETY: as in write; addrs and lens hold targets.len() entries each and live
            // through the call (the provider copies the list).
            unsafe {
                sys::lanes_fi_writemsg_scatter(
                    self.ptr.as_ptr(),
                    local.ptr.cast(),
                    local.len,
                    local.desc,
                    peer.0,
                    addrs.as_ptr(),
                    lens.as_ptr(),
                    targets.len(),
                    key,
                    context,
                    flags,
                )
            }
        })
    }

    /// `fi_inject_write`: `data` (at most [`Endpoint::inject_size`] bytes) to `target`. The
    /// data is copied before this returns and no completion is generated.
    pub fn inject_write(&self, data: &[u8], target: Target, deadline: Instant) -> Result<()> {
        if data.len() > self.inject_size {
            return Err(Error::PayloadTooLarge { len: data.len(), max: self.inject_size });
        }
        self.post("fi_inject_write", deadline, || {
            // SAFETY: the provider copies data before returning (fi_rma(3), FI_INJECT).
            unsafe {
                sys::lanes_fi_inject_write(
                    self.ptr.as_ptr(),
                    data.as_ptr().cast(),
                    data.len(),
                    target.peer.0,
                    target.addr,
                    target.key,
                )
            }
        })
    }

    /// `fi_read`: `target`'s bytes into `local`. The completion arrives on the transmit CQ.
    ///
    /// # Safety
    /// `local` must stay valid, and not be read or written by anyone else, until this
    /// operation's completion (or error) has been read, or the endpoint is closed; `context`
    /// as for [`Endpoint::write`].
    pub unsafe fn read(&self, local: Local, target: Target, context: *mut c_void, deadline: Instant) -> Result<()> {
        self.post("fi_read", deadline, || {
            // SAFETY: as in write.
            unsafe {
                sys::lanes_fi_read(
                    self.ptr.as_ptr(),
                    local.ptr.cast(),
                    local.len,
                    local.desc,
                    target.peer.0,
                    target.addr,
                    target.key,
                    context,
                )
            }
        })
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // SAFETY: closing discards operations still outstanding (fi_endpoint(3)); the AV,
        // CQs and domain this holds are closed only after, when their Arcs drop.
        unsafe { sys::lanes_fi_close_ep(self.ptr.as_ptr()) };
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint").field("ptr", &self.ptr).field("inject_size", &self.inject_size).finish()
    }
}

/// The provider to use: `LANES_OFI_PROVIDER`, else [`DEFAULT_PROVIDER`].
pub fn provider_from_env() -> String {
    std::env::var("LANES_OFI_PROVIDER").ok().filter(|p| !p.is_empty()).unwrap_or_else(|| DEFAULT_PROVIDER.to_owned())
}

/// A deadline `timeout` from now (saturating far in the future).
pub fn deadline_in(timeout: Duration) -> Instant {
    after(Instant::now(), timeout)
}

/// `from + timeout`, a year at most.
pub fn after(from: Instant, timeout: Duration) -> Instant {
    from.checked_add(timeout).unwrap_or(from + Duration::from_secs(86_400 * 365))
}
