//! The process's libfabric endpoint: one reliable datagram endpoint per process, the target
//! of RMA to the objects it exports and the initiator of its own RMA (docs/design/multi-host.md,
//! decisions 1 and 5, section 8).
//!
//! What lives here:
//! - opening the fabric, domain, address vector, endpoint and its two CQs (both with a wait
//!   fd) for the configured provider and this host's fabric address;
//! - the peers' addresses (`fi_av_insert`, cached by endpoint name);
//! - memory registration with keys this process picks (unless the provider picks them);
//! - posted operations ([`Op`]): each carries its own `fi_context`, a status word the poster
//!   waits on, and whatever memory must outlive it;
//! - progress: whoever calls [`ProcessEndpoint::progress`] reads both CQs and dispatches what
//!   it finds: transmit completions finish their [`Op`]; remote CQ data goes to the handler
//!   registered under the data's upper 16 bits ([`ProcessEndpoint::add_handler`]); then
//!   it runs the arrival watches ([`ProcessEndpoint::add_arrival_watch`]), which look at
//!   memory that remote writes without completion data may have changed during the pass
//!   (such writes land inside the provider's progress and tell nobody);
//! - the service thread, which drives progress while nobody spins, as the spec's
//!   [`IdleProgress`] says: with `Wake` it sleeps in `poll` on the receive CQ's fd (the
//!   transmit CQ has no wait object) after `fi_trywait` says it may, at most a service
//!   tick; with `Poll` neither CQ has a wait object and it drives progress every interval;
//!   while some waiter spins on the CQs itself it sleeps on its eventfd only (so a hot
//!   ping-pong has one thread per side, not two).
//!
//! Remote CQ data is 32 bits (verbs carries 4 bytes): `handle << 16 | value`, handle 0 never
//! assigned.

use std::any::Any;
use std::cell::UnsafeCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::fi::{self, Completion, FiAddr, FiContext, Local, Polled, Target};
use crate::cluster::IdleProgress;
use crate::error::{Error, Result};
use crate::platform::files::Held;
use crate::platform::{hex, random_u64};

/// A handler of remote CQ data: called with the data's low 16 bits, from whichever thread
/// read the completion (a spinning waiter or the service thread). Must not block.
pub type DataHandler = Arc<dyn Fn(u16) + Send + Sync>;

/// An arrival watch: called after every progress pass, from whichever thread made it, to
/// look at memory that remote writes without completion data may have changed. Must be
/// cheap (a hot spin loop runs it every pass) and must wait for nothing but short locks.
/// Writes the provider places elsewhere (a post retrying `-FI_EAGAIN` drives progress)
/// are seen by the next pass: at the latest the service thread's next tick.
pub type ArrivalWatch = Arc<dyn Fn() + Send + Sync>;

/// Completions read per `fi_cq_read`.
const BATCH: usize = 16;
/// How long the service thread sleeps at most between looks at its periodic tasks.
const SERVICE_TICK: Duration = Duration::from_millis(10);

/// Where a posted operation stands.
const OP_PENDING: u32 = 0;
const OP_DONE: u32 = 1;
const OP_FAILED: u32 = 2;

/// One posted operation. Its address is the operation's context: the provider uses the
/// leading `fi_context` (FI_CONTEXT mode), the CQ reader finds the operation from it.
#[repr(C)]
pub struct Op {
    /// Must stay the first field: the context pointer is the operation's address.
    ctx: UnsafeCell<FiContext>,
    state: AtomicU32,
    error: Mutex<Option<String>>,
    /// Memory the operation reads or writes, kept alive until its completion is read.
    _keep: Option<Arc<dyn Any + Send + Sync>>,
}

// SAFETY: `ctx` is written only by the provider while the operation is in flight and never
// read by Rust; everything else is atomics and a mutex.
unsafe impl Send for Op {}
// SAFETY: as above.
unsafe impl Sync for Op {}

impl Op {
    fn new(keep: Option<Arc<dyn Any + Send + Sync>>) -> Arc<Op> {
        Arc::new(Op {
            ctx: UnsafeCell::new(FiContext::default()),
            state: AtomicU32::new(OP_PENDING),
            error: Mutex::new(None),
            _keep: keep,
        })
    }

    /// `None` while in flight, then `Ok` or the completion's error text.
    pub fn outcome(&self) -> Option<std::result::Result<(), String>> {
        match self.state.load(Ordering::Acquire) {
            OP_PENDING => None,
            OP_DONE => Some(Ok(())),
            _ => Some(Err(self.error.lock().unwrap_or_else(|e| e.into_inner()).clone().unwrap_or_default())),
        }
    }

    fn finish(&self, error: Option<String>) {
        if let Some(e) = error {
            *self.error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e);
            self.state.store(OP_FAILED, Ordering::Release);
        } else {
            self.state.store(OP_DONE, Ordering::Release);
        }
    }
}

/// A posted operation's context pointer: one strong count of the `Op`, given to the
/// provider and taken back by whoever reads its completion.
fn into_context(op: &Arc<Op>) -> *mut c_void {
    Arc::into_raw(Arc::clone(op)).cast_mut().cast()
}

/// Makes an operation holding `keep` and hands its context to `post`; when the post fails
/// (the provider then never took the context), the context's count is taken back.
fn with_op(keep: Option<Arc<dyn Any + Send + Sync>>, post: impl FnOnce(*mut c_void) -> Result<()>) -> Result<Arc<Op>> {
    let op = Op::new(keep);
    let ctx = into_context(&op);
    if let Err(e) = post(ctx) {
        // SAFETY: the post failed, so the provider never took the context: this is its
        // only count, taken back once.
        drop(unsafe { from_context(ctx) });
        return Err(e);
    }
    Ok(op)
}

/// Takes back the count [`into_context`] gave away.
///
/// # Safety
/// `ctx` must come from `into_context` and be taken back exactly once.
unsafe fn from_context(ctx: *mut c_void) -> Arc<Op> {
    // SAFETY: the caller's contract.
    unsafe { Arc::from_raw(ctx.cast_const().cast::<Op>()) }
}

/// Where a remote object's data is: the owner's endpoint (as inserted here), the address
/// of data offset 0 there, the registration's key, the registered length and the object's
/// handle in the owner's table (the upper 16 bits of remote CQ data meant for it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteRange {
    pub peer: FiAddr,
    pub base: u64,
    pub key: u64,
    pub len: u64,
    pub handle: u16,
}

impl RemoteRange {
    /// The target of an operation on `len` bytes from `offset` of the range, checked.
    pub fn target(&self, offset: u64, len: u64) -> Result<Target> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(Error::OutOfRange { offset, len, size: self.len, what: "remote object" });
        }
        Ok(Target { peer: self.peer, addr: self.base + offset, key: self.key })
    }

    /// The remote CQ data that names this object with `value` in the low 16 bits.
    pub fn cq_data(&self, value: u16) -> u64 {
        u64::from(self.handle) << 16 | u64::from(value)
    }
}

/// What the endpoint was opened for: the provider, the address it binds and how it
/// progresses while idle.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EndpointSpec {
    pub provider: String,
    pub address: IpAddr,
    pub progress: IdleProgress,
}

/// The process's endpoint. See the module documentation.
pub struct ProcessEndpoint {
    spec: EndpointSpec,
    ep: Arc<fi::Endpoint>,
    fabric: Arc<fi::Fabric>,
    name: Vec<u8>,
    provider_keys: bool,
    peers: Mutex<HashMap<Vec<u8>, FiAddr>>,
    handlers: RwLock<Vec<Option<DataHandler>>>,
    /// Arrival watches with their ids; `watching` says whether there are any, so that a
    /// process without any pays one load per pass.
    watches: RwLock<Vec<(u64, ArrivalWatch)>>,
    watching: AtomicBool,
    next_watch: AtomicU64,
    periodic: Mutex<Vec<Weak<dyn Fn() + Send + Sync>>>,
    next_key: AtomicU64,
    /// Waiters reading the CQs themselves right now; the service thread stays off the CQ fds
    /// meanwhile.
    spinners: AtomicU32,
    stop: AtomicBool,
    wake: Held<OwnedFd>,
    service: Mutex<Option<JoinHandle<()>>>,
    /// Set by the service thread when it has returned (it calls the provider no more).
    service_done: Arc<AtomicBool>,
    /// The last error a remote-data completion reported (nobody waits for those).
    last_rx_error: Mutex<Option<String>>,
}

impl std::fmt::Debug for ProcessEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessEndpoint").field("spec", &self.spec).field("name", &hex(&self.name)).finish()
    }
}

static ENDPOINTS: Mutex<Vec<(EndpointSpec, Weak<ProcessEndpoint>)>> = Mutex::new(Vec::new());

/// The process's endpoint for `spec`, opened on first use and shared by every fabric
/// descriptor of the process while one holds it.
pub fn process_endpoint(spec: &EndpointSpec) -> Result<Arc<ProcessEndpoint>> {
    let mut all = ENDPOINTS.lock().unwrap_or_else(|e| e.into_inner());
    all.retain(|(_, w)| w.strong_count() > 0);
    if let Some(ep) = find_endpoint(&all, spec) {
        return Ok(ep);
    }
    let ep = ProcessEndpoint::open(spec.clone())?;
    all.push((spec.clone(), Arc::downgrade(&ep)));
    Ok(ep)
}

/// The process's endpoint for `spec` if some fabric descriptor of the process holds one,
/// never opening it.
pub fn open_process_endpoint(spec: &EndpointSpec) -> Option<Arc<ProcessEndpoint>> {
    find_endpoint(&ENDPOINTS.lock().unwrap_or_else(|e| e.into_inner()), spec)
}

fn find_endpoint(all: &[(EndpointSpec, Weak<ProcessEndpoint>)], spec: &EndpointSpec) -> Option<Arc<ProcessEndpoint>> {
    all.iter().find(|(s, _)| s == spec).and_then(|(_, w)| w.upgrade())
}

impl ProcessEndpoint {
    /// Opens an endpoint of `spec.provider` bound to `spec.address` (any free port) and
    /// starts its service thread. With every signal blocked: the threads the provider
    /// starts meanwhile inherit that mask (see `platform::threads`).
    pub fn open(spec: EndpointSpec) -> Result<Arc<ProcessEndpoint>> {
        crate::platform::threads::with_signals_blocked(|| Self::open_masked(spec))
    }

    fn open_masked(spec: EndpointSpec) -> Result<Arc<ProcessEndpoint>> {
        let hints = fi::Hints::lanes_rdm(Some(&spec.provider));
        let node = spec.address.to_string();
        let info = fi::Info::get(&hints, Some(&node), None, fi::FI_SOURCE)?.into_iter().next().ok_or_else(|| {
            Error::Ofi {
                call: "fi_getinfo",
                code: 61, // FI_ENODATA
                message: format!("no {} provider offers what Lanes needs on {node}", spec.provider),
            }
        })?;
        if info.cq_data_size() < 4 {
            return Err(Error::Ofi {
                call: "fi_getinfo",
                code: 95, // FI_EOPNOTSUPP
                message: format!(
                    "provider {} carries {} bytes of CQ data, Lanes needs 4",
                    spec.provider,
                    info.cq_data_size()
                ),
            });
        }
        let fabric = fi::Fabric::open(&info)?;
        let domain = fi::Domain::open(&fabric, &info)?;
        let av = fi::Av::open(&domain, 64)?;
        // No wait object on the transmit CQ: whoever waits for its own operations drives
        // progress itself, and the service thread sleeps on the receive CQ's fd (remote CQ
        // data, and the sockets). That one wait object is what `IdleProgress::Poll` saves:
        // on tcp;ofi_rxm a wait object on either CQ gives rxm's inner CQ one too, and every
        // completion then signals it (a write, and a read to drain it: two system calls per
        // operation, on both sides of a ping-pong).
        let tx = fi::Cq::open(&domain, 0, fi::Wait::None)?;
        let rx_wait = match spec.progress {
            IdleProgress::Wake => fi::Wait::Fd,
            IdleProgress::Poll(_) => fi::Wait::None,
        };
        let rx = fi::Cq::open(&domain, 0, rx_wait)?;
        let ep = Arc::new(fi::Endpoint::open(&domain, None, &av, &tx, &rx)?);
        let name = ep.name()?;
        let provider_keys = info.mr_mode() & fi::FI_MR_PROV_KEY != 0;
        let wake = Held::make(|| {
            // SAFETY: eventfd has no memory-safety preconditions.
            let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            if wake < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: wake is a new descriptor nobody else owns.
            Ok(unsafe { OwnedFd::from_raw_fd(wake) })
        })
        .map_err(|e| Error::io("creating the ofi service eventfd", e))?;
        let me = Arc::new(ProcessEndpoint {
            spec,
            ep,
            fabric,
            name,
            provider_keys,
            peers: Mutex::new(HashMap::new()),
            handlers: RwLock::new(vec![None]),
            watches: RwLock::new(Vec::new()),
            watching: AtomicBool::new(false),
            next_watch: AtomicU64::new(1),
            periodic: Mutex::new(Vec::new()),
            next_key: AtomicU64::new(random_u64() | 1),
            spinners: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            wake,
            service: Mutex::new(None),
            service_done: Arc::new(AtomicBool::new(false)),
            last_rx_error: Mutex::new(None),
        });
        let weak = Arc::downgrade(&me);
        let done = me.service_done.clone();
        let handle = crate::platform::threads::spawn("lanes-ofi", move || {
            service_loop(weak);
            done.store(true, Ordering::Release);
        })
        .map_err(|e| Error::io("starting the ofi service thread", e))?;
        *me.service.lock().unwrap_or_else(|e| e.into_inner()) = Some(handle);
        Ok(me)
    }

    /// This endpoint's name, as peers insert it.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The underlying endpoint (for posts).
    pub fn fi(&self) -> &fi::Endpoint {
        &self.ep
    }

    /// The address of the peer named `name`, inserted on first use.
    pub fn peer(&self, name: &[u8]) -> Result<FiAddr> {
        let mut peers = self.peers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = peers.get(name) {
            return Ok(*a);
        }
        let a = self.ep.av().insert(name)?;
        peers.insert(name.to_vec(), a);
        Ok(a)
    }

    /// Registers `memory` for `access`, with a key no other registration of this process has.
    pub fn register(&self, memory: Arc<dyn fi::RegistrableMemory>, access: u64) -> Result<fi::MemoryRegion> {
        let key = if self.provider_keys { 0 } else { self.next_key.fetch_add(2, Ordering::Relaxed) };
        fi::MemoryRegion::register(self.ep.domain(), memory, access, key)
    }

    /// Registers a handler of remote CQ data; its handle goes in the data's upper 16 bits.
    pub fn add_handler(&self, handler: DataHandler) -> Result<u16> {
        let mut hs = self.handlers.write().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = hs.iter().skip(1).position(Option::is_none) {
            hs[i + 1] = Some(handler);
            return Ok((i + 1) as u16);
        }
        if hs.len() > u16::MAX as usize {
            return Err(Error::IllegalOperation("more than 65535 objects exported by one process"));
        }
        hs.push(Some(handler));
        Ok((hs.len() - 1) as u16)
    }

    /// Forgets a handler; data for its handle is dropped from now on.
    pub fn remove_handler(&self, handle: u16) {
        let mut hs = self.handlers.write().unwrap_or_else(|e| e.into_inner());
        if let Some(h) = hs.get_mut(handle as usize) {
            *h = None;
        }
    }

    /// Adds an arrival watch, run after every progress pass from now on; returns its id.
    pub fn add_arrival_watch(&self, watch: ArrivalWatch) -> u64 {
        let id = self.next_watch.fetch_add(1, Ordering::Relaxed);
        let mut ws = self.watches.write().unwrap_or_else(|e| e.into_inner());
        ws.push((id, watch));
        self.watching.store(true, Ordering::Release);
        id
    }

    /// Forgets arrival watch `id`; a pass already running it finishes.
    pub fn remove_arrival_watch(&self, id: u64) {
        let mut ws = self.watches.write().unwrap_or_else(|e| e.into_inner());
        ws.retain(|(i, _)| *i != id);
        self.watching.store(!ws.is_empty(), Ordering::Release);
    }

    /// Runs the arrival watches (after a progress pass).
    fn watch_arrivals(&self) {
        if !self.watching.load(Ordering::Acquire) {
            return;
        }
        let ws = self.watches.read().unwrap_or_else(|e| e.into_inner());
        for (_, w) in ws.iter() {
            w();
        }
    }

    /// Runs `task` from the service thread about every 10 ms while it lives (drains of
    /// windows nobody flushes).
    pub fn add_periodic(&self, task: Weak<dyn Fn() + Send + Sync>) {
        let mut p = self.periodic.lock().unwrap_or_else(|e| e.into_inner());
        p.retain(|w| w.strong_count() > 0);
        p.push(task);
    }

    /// Posts an RMA write of `local` to `target` with `flags` (`FI_REMOTE_CQ_DATA` sends
    /// `data`; `FI_DELIVERY_COMPLETE`, ...), retrying `-FI_EAGAIN` until `deadline`.
    ///
    /// # Safety
    /// `local` must stay valid until the returned operation finishes: `keep` must own it (or
    /// the caller must otherwise keep it alive and unmodified-by-drop that long).
    pub unsafe fn post_write(
        &self,
        local: Local,
        target: Target,
        data: u64,
        flags: u64,
        keep: Option<Arc<dyn Any + Send + Sync>>,
        deadline: Instant,
    ) -> Result<Arc<Op>> {
        // SAFETY: local lives as long as the op (the caller's contract through keep); ctx is
        // the op's own fi_context, alive while the provider holds its count.
        with_op(keep, |ctx| unsafe { self.ep.write_msg(local, target, data, flags, ctx, deadline) })
    }

    /// Posts one RMA write of `local` to several targets of one peer's registration, each
    /// `(target, len)` taking the next `len` bytes of `local` (see
    /// [`fi::Endpoint::write_scatter`]).
    ///
    /// # Safety
    /// As for [`ProcessEndpoint::post_write`].
    pub unsafe fn post_write_scatter(
        &self,
        local: Local,
        targets: &[(Target, usize)],
        flags: u64,
        keep: Option<Arc<dyn Any + Send + Sync>>,
        deadline: Instant,
    ) -> Result<Arc<Op>> {
        // SAFETY: as in post_write.
        with_op(keep, |ctx| unsafe { self.ep.write_scatter(local, targets, flags, ctx, deadline) })
    }

    /// Posts an RMA read of `target` into `local`.
    ///
    /// # Safety
    /// As for [`ProcessEndpoint::post_write`]; nobody else may touch `local` meanwhile.
    pub unsafe fn post_read(
        &self,
        local: Local,
        target: Target,
        keep: Option<Arc<dyn Any + Send + Sync>>,
        deadline: Instant,
    ) -> Result<Arc<Op>> {
        // SAFETY: as in post_write.
        with_op(keep, |ctx| unsafe { self.ep.read(local, target, ctx, deadline) })
    }

    /// Waits for `op` while driving progress ([`Self::wait_until`] its outcome).
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn wait(&self, op: &Op, spin: Duration, deadline: Instant, what: &str) -> Result<()> {
        self.wait_until(|| op.outcome(), spin, deadline, what)?.map_err(|message| Error::Ofi {
            call: "completion",
            code: 5, // FI_EIO
            message: format!("{what}: {message}"),
        })
    }

    /// Calls `check` with progress in between until it gives a value: spins for `spin`, then
    /// sleeps in growing steps (at most 1 ms), up to `deadline`.
    pub fn wait_until<T>(
        &self,
        mut check: impl FnMut() -> Option<T>,
        spin: Duration,
        deadline: Instant,
        what: &str,
    ) -> Result<T> {
        if let Some(v) = check() {
            return Ok(v);
        }
        let started = Instant::now();
        let _spinning = Spinning::new(self);
        let mut pause = Duration::from_micros(20);
        loop {
            self.progress();
            if let Some(v) = check() {
                return Ok(v);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    what: what.to_string(),
                    waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                });
            }
            if now - started < spin {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(pause.min(deadline - now));
                pause = (pause * 2).min(Duration::from_millis(1));
            }
        }
    }

    /// Reads both CQs until neither returns a full batch and dispatches what they held, then
    /// runs the arrival watches; returns how many entries it read. The receive CQ goes
    /// first: its read drives the provider's progress too, so remote data that arrived
    /// meanwhile is returned by that same read instead of being moved there by the transmit
    /// CQ's read and returned by a second one.
    pub fn progress(&self) -> usize {
        let mut n = 0;
        let mut buf = [Completion::default(); BATCH];
        loop {
            // A read that returns less than a batch has emptied its queue: one more read
            // of each would only cost another provider progress (a system call on tcp).
            let rx = self.read_cq(self.ep.rx_cq(), &mut buf, false);
            let tx = self.read_cq(self.ep.tx_cq(), &mut buf, true);
            n += rx + tx;
            if rx < BATCH && tx < BATCH {
                self.watch_arrivals();
                return n;
            }
        }
    }

    /// One look for a spinning waiter: reads the receive CQ, and the transmit CQ only when
    /// the receive CQ held nothing, so that remote data is handed over after one provider
    /// progress, not three; then runs the arrival watches. Returns how many entries it read.
    fn poll_once(&self) -> usize {
        let mut buf = [Completion::default(); BATCH];
        let n = match self.read_cq(self.ep.rx_cq(), &mut buf, false) {
            0 => self.read_cq(self.ep.tx_cq(), &mut buf, true),
            rx => rx,
        };
        self.watch_arrivals();
        n
    }

    fn read_cq(&self, cq: &fi::Cq, buf: &mut [Completion; BATCH], transmit: bool) -> usize {
        match cq.poll(buf) {
            Ok(Polled::Completions(k)) => {
                for c in &buf[..k] {
                    self.dispatch(c, transmit);
                }
                k
            }
            Ok(Polled::Error(e)) => {
                if !e.context.is_null() && transmit {
                    // SAFETY: every context this endpoint posts with came from into_context,
                    // and a completion (here an error) is read exactly once.
                    let op = unsafe { from_context(e.context) };
                    op.finish(Some(e.to_string()));
                } else {
                    *self.last_rx_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                }
                1
            }
            Err(e) => {
                *self.last_rx_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
                0
            }
        }
    }

    fn dispatch(&self, c: &Completion, transmit: bool) {
        if c.has_remote_data() {
            let data = c.data() as u32;
            let handler = {
                let hs = self.handlers.read().unwrap_or_else(|e| e.into_inner());
                hs.get((data >> 16) as usize).cloned().flatten()
            };
            if let Some(h) = handler {
                h(data as u16);
            }
            return;
        }
        if transmit && !c.context().is_null() {
            // SAFETY: as in read_cq.
            let op = unsafe { from_context(c.context()) };
            op.finish(None);
        }
    }

    fn wake_service(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        unsafe { libc::write(self.wake.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    fn run_periodic(&self) {
        let tasks: Vec<_> = {
            let mut p = self.periodic.lock().unwrap_or_else(|e| e.into_inner());
            p.retain(|w| w.strong_count() > 0);
            p.iter().filter_map(Weak::upgrade).collect()
        };
        for t in tasks {
            t();
        }
    }
}

impl Drop for ProcessEndpoint {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.wake_service();
        if let Some(h) = self.service.lock().unwrap_or_else(|e| e.into_inner()).take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

/// At the process's exit, before the libraries it uses are finalized (libfabric's own
/// destructor frees what a service thread may be using at that moment, a crash at exit):
/// every endpoint's service thread is told to stop, and waited for at most `bound`. The
/// endpoints are left as they are (the process is ending; tearing them down would take the
/// provider's time and locks).
pub fn quiesce_for_exit(bound: Duration) {
    let live: Vec<Arc<ProcessEndpoint>> = match ENDPOINTS.try_lock() {
        Ok(list) => list.iter().filter_map(|(_, w)| w.upgrade()).collect(),
        Err(_) => return, // a thread holds it at exit: nothing safe to wait for
    };
    for e in &live {
        e.stop.store(true, Ordering::Release);
        e.wake_service();
    }
    let until = Instant::now() + bound;
    for e in &live {
        while !e.service_done.load(Ordering::Acquire) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    std::mem::forget(live);
}

/// A thread that drives the endpoint's progress itself for as long as this lives (a hot
/// spin loop calling [`SpinDriver::poll`]): the service thread keeps off the CQs meanwhile,
/// as it does for [`ProcessEndpoint::wait_until`], so a ping-pong has one thread per side.
pub struct SpinDriver(Arc<ProcessEndpoint>);

impl crate::transport::ProgressPoll for SpinDriver {
    #[inline]
    fn poll(&self) -> usize {
        SpinDriver::poll(self)
    }
}

impl SpinDriver {
    pub fn new(ep: Arc<ProcessEndpoint>) -> SpinDriver {
        ep.spinners.fetch_add(1, Ordering::AcqRel);
        SpinDriver(ep)
    }

    /// Reads the receive CQ, or the transmit CQ when it held nothing, and dispatches what it
    /// read.
    #[inline]
    pub fn poll(&self) -> usize {
        self.0.poll_once()
    }
}

impl Drop for SpinDriver {
    fn drop(&mut self) {
        if self.0.spinners.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.wake_service();
        }
    }
}

/// Marks a waiter that reads the CQs itself, so that the service thread keeps off them.
struct Spinning<'a>(&'a ProcessEndpoint);

impl<'a> Spinning<'a> {
    fn new(ep: &'a ProcessEndpoint) -> Self {
        ep.spinners.fetch_add(1, Ordering::AcqRel);
        Spinning(ep)
    }
}

impl Drop for Spinning<'_> {
    fn drop(&mut self) {
        if self.0.spinners.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.wake_service();
        }
    }
}

/// The service thread: progress while nobody else drives it, periodic tasks every tick.
fn service_loop(weak: Weak<ProcessEndpoint>) {
    let mut last_tick = Instant::now();
    loop {
        let Some(me) = weak.upgrade() else { return };
        if me.stop.load(Ordering::Acquire) {
            return;
        }
        if last_tick.elapsed() >= SERVICE_TICK {
            me.run_periodic();
            last_tick = Instant::now();
        }
        let spinning = me.spinners.load(Ordering::Acquire) > 0;
        let idle = libc::pollfd { fd: -1, events: 0, revents: 0 };
        let mut fds = [libc::pollfd { fd: me.wake.as_raw_fd(), events: libc::POLLIN, revents: 0 }, idle, idle];
        let mut nfds = 1;
        let mut sleep = SERVICE_TICK;
        if !spinning {
            me.progress();
            if let IdleProgress::Poll(every) = me.spec.progress {
                sleep = every.min(SERVICE_TICK);
            } else {
                match me.fabric.trywait(&[me.ep.rx_cq()]) {
                    // `fi_trywait` may drive progress itself, and what it placed leaves no
                    // readable socket to wake the poll below.
                    Ok(true) => me.watch_arrivals(),
                    // Completions may be pending: read them first.
                    Ok(false) => continue,
                    Err(_) => {
                        // Should not happen; do not spin on it.
                        drop(me);
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                }
                for cq in [me.ep.tx_cq(), me.ep.rx_cq()] {
                    if let Some(fd) = cq.wait_fd() {
                        fds[nfds] = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                        nfds += 1;
                    }
                }
            }
        }
        let wake_fd = me.wake.as_raw_fd();
        // `me` is held across the poll (its descriptors must stay open); the bound lets the
        // thread see within a tick that every other handle is gone.
        let timeout =
            libc::timespec { tv_sec: sleep.as_secs() as libc::time_t, tv_nsec: sleep.subsec_nanos() as libc::c_long };
        // SAFETY: fds holds nfds valid pollfds; timeout is a live timespec; no signal mask.
        let rc = unsafe { libc::ppoll(fds.as_mut_ptr(), nfds as libc::nfds_t, &timeout, std::ptr::null()) };
        if rc > 0 && fds[0].revents != 0 {
            let mut v: u64 = 0;
            // SAFETY: reads 8 bytes into a live u64 from our own non-blocking eventfd.
            unsafe { libc::read(wake_fd, (&mut v as *mut u64).cast(), 8) };
        }
        drop(me);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> EndpointSpec {
        spec_with(IdleProgress::Wake)
    }

    fn spec_with(progress: IdleProgress) -> EndpointSpec {
        EndpointSpec { provider: fi::provider_from_env(), address: "127.0.0.1".parse().expect("ip"), progress }
    }

    /// The fabric descriptors of a process share one endpoint while any holds it; after the
    /// last goes, the endpoint closes (within a service tick) and the next one is new, with
    /// a new address that peers reach over new connections (`lanes bench --transport ofi`
    /// relies on this for a fresh connection per size).
    #[test]
    fn the_process_endpoint_is_shared_while_held_and_new_once_released() {
        // A progress interval no other test uses, so that nothing else holds this endpoint.
        let spec = spec_with(IdleProgress::Poll(Duration::from_micros(777)));
        assert!(open_process_endpoint(&spec).is_none());
        let first = process_endpoint(&spec).expect("endpoint");
        let again = process_endpoint(&spec).expect("endpoint");
        assert!(Arc::ptr_eq(&first, &again), "a second holder opened an endpoint of its own");
        assert!(open_process_endpoint(&spec).is_some_and(|e| Arc::ptr_eq(&e, &first)));
        let name = first.name().to_vec();
        drop((first, again));
        // The service thread holds the endpoint across one poll of its own.
        let deadline = Instant::now() + Duration::from_secs(2);
        while open_process_endpoint(&spec).is_some() {
            assert!(Instant::now() < deadline, "the endpoint outlived its holders by 2 s");
            std::thread::sleep(Duration::from_millis(1));
        }
        let next = process_endpoint(&spec).expect("endpoint");
        assert_ne!(next.name(), name, "the endpoint opened after the last one closed has the old address");
    }

    #[test]
    fn a_spin_driver_polls_in_place_of_the_waking_service_thread_until_dropped() {
        spin_driver_hand_over(IdleProgress::Wake);
    }

    #[test]
    fn a_spin_driver_polls_in_place_of_the_polling_service_thread_until_dropped() {
        spin_driver_hand_over(IdleProgress::Poll(Duration::from_micros(100)));
    }

    /// A spin driver counts as a spinner while it lives and its polls dispatch remote CQ data;
    /// once it is dropped the service thread takes over again (a second write is dispatched
    /// with nobody polling). The writer's endpoint progresses the other way than the target's.
    fn spin_driver_hand_over(target_progress: IdleProgress) {
        let writer_progress = match target_progress {
            IdleProgress::Wake => IdleProgress::Poll(Duration::from_micros(100)),
            IdleProgress::Poll(_) => IdleProgress::Wake,
        };
        let a = ProcessEndpoint::open(spec_with(writer_progress)).expect("endpoint a");
        let b = ProcessEndpoint::open(spec_with(target_progress)).expect("endpoint b");
        // Only a waking endpoint's receive CQ has a wait object.
        assert_eq!(b.ep.rx_cq().wait_fd().is_some(), target_progress == IdleProgress::Wake);
        assert!(a.ep.tx_cq().wait_fd().is_none() && b.ep.tx_cq().wait_fd().is_none());
        let target_buf = Arc::new(fi::Buffer::new(4096).expect("buffer"));
        let mr = b.register(target_buf, fi::FI_REMOTE_WRITE).expect("register");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let handle = b.add_handler(Arc::new(move |v| s2.lock().unwrap().push(v))).expect("handler");
        let peer = a.peer(b.name()).expect("peer");
        let src = Arc::new(fi::Buffer::new(4096).expect("src"));
        let src_mr = a.register(src.clone(), fi::FI_WRITE).expect("src mr");
        let deadline = fi::deadline_in(Duration::from_secs(20));
        let target = Target { peer, addr: mr.remote_base(), key: mr.key() };
        let write = |value: u16| {
            // SAFETY: src is kept alive by the op (keep) and by this test.
            let op = unsafe {
                a.post_write(
                    src_mr.local(0, 8).expect("local"),
                    target,
                    u64::from(handle) << 16 | u64::from(value),
                    fi::FI_REMOTE_CQ_DATA,
                    Some(src.clone()),
                    deadline,
                )
            }
            .expect("post");
            a.wait(&op, Duration::from_micros(50), deadline, "the write").expect("write completes");
        };
        let wait_for = |n: usize, what: &str| {
            while seen.lock().unwrap().len() < n {
                assert!(Instant::now() < deadline, "{what}");
                std::thread::sleep(Duration::from_millis(1));
            }
        };
        // The first write sets rxm's connection up, which needs the target's progress: the
        // service thread's.
        write(0);
        wait_for(1, "the service thread did not dispatch the first write");
        let driver = SpinDriver::new(b.clone());
        assert_eq!(b.spinners.load(Ordering::Acquire), 1);
        // The holder polls while another thread writes. (The service thread may still have
        // been in a read of its own when the driver came, so who dispatched this one is not
        // asserted; the hand-over below is.)
        std::thread::scope(|s| {
            s.spawn(|| write(1));
            while seen.lock().unwrap().len() < 2 {
                driver.poll();
                assert!(Instant::now() < deadline, "the driver never saw the write's data");
                std::hint::spin_loop();
            }
        });
        drop(driver);
        assert_eq!(b.spinners.load(Ordering::Acquire), 0);
        write(2);
        wait_for(3, "the service thread did not take over after the driver");
        assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2]);
    }

    #[test]
    fn writes_reads_and_remote_data_between_two_endpoints() {
        let a = ProcessEndpoint::open(spec()).expect("endpoint a");
        let b = ProcessEndpoint::open(spec()).expect("endpoint b");
        let target_buf = Arc::new(fi::Buffer::new(4096).expect("buffer"));
        let mr = b
            .register(target_buf.clone(), fi::FI_REMOTE_READ | fi::FI_REMOTE_WRITE | fi::FI_READ | fi::FI_WRITE)
            .expect("register");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let handle = b.add_handler(Arc::new(move |v| s2.lock().unwrap().push(v))).expect("handler");
        let peer = a.peer(b.name()).expect("peer");
        assert_eq!(a.peer(b.name()).expect("cached"), peer);
        let src = Arc::new(fi::Buffer::new(4096).expect("src"));
        src.write(0, b"hello, other host").expect("fill");
        let src_mr = a.register(src.clone(), fi::FI_READ | fi::FI_WRITE).expect("src mr");
        let deadline = fi::deadline_in(Duration::from_secs(20));
        let target = Target { peer, addr: mr.remote_base() + 100, key: mr.key() };
        // SAFETY: src is kept alive by the op (keep) and by this test.
        let op = unsafe {
            a.post_write(
                src_mr.local(0, 17).expect("local"),
                target,
                u64::from(handle) << 16 | 0x1234,
                fi::FI_REMOTE_CQ_DATA | fi::FI_DELIVERY_COMPLETE,
                Some(src.clone()),
                deadline,
            )
        }
        .expect("post");
        a.wait(&op, Duration::from_micros(50), deadline, "the write").expect("write completes");
        // The target's service thread (or nobody: we wait) dispatches the CQ data.
        b.wait_until(|| (!seen.lock().unwrap().is_empty()).then_some(()), Duration::ZERO, deadline, "cq data")
            .expect("remote data arrives");
        assert_eq!(*seen.lock().unwrap(), vec![0x1234]);
        let mut got = [0u8; 17];
        target_buf.read(100, &mut got).expect("read");
        assert_eq!(&got, b"hello, other host");
        // Read it back into the source buffer's second half.
        // SAFETY: as above.
        let op = unsafe { a.post_read(src_mr.local(2048, 17).expect("local"), target, Some(src.clone()), deadline) }
            .expect("post read");
        a.wait(&op, Duration::from_micros(50), deadline, "the read").expect("read completes");
        let mut back = [0u8; 17];
        src.read(2048, &mut back).expect("read back");
        assert_eq!(&back, b"hello, other host");
        // A wrong key fails a read on the CQ, not by hanging.
        let bad = Target { key: mr.key() ^ 0x5a5a_0000, ..target };
        // SAFETY: as above.
        let op = unsafe { a.post_read(src_mr.local(0, 8).expect("local"), bad, Some(src.clone()), deadline) }
            .expect("post bad read");
        assert!(a.wait(&op, Duration::from_micros(50), deadline, "a bad read").is_err());
        b.remove_handler(handle);
    }

    #[test]
    fn a_wait_past_its_deadline_is_a_timeout() {
        let a = ProcessEndpoint::open(spec()).expect("endpoint");
        let r = a.wait_until(|| None::<()>, Duration::from_micros(10), Instant::now() + Duration::from_millis(30), "x");
        assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}");
    }
}
