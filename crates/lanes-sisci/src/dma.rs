//! DMA queues and channels over the fabric's DMA engine ([`lanes::fabric::DmaQueue`]): the
//! transfers run on library threads (the engine's channels) while the caller goes on.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ffi::{c_uint, c_void};
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::{Duration, Instant};

use lanes::fabric::{DmaCallback, DmaChannel, DmaDirection, DmaQueue, DmaQueueState, DmaVec};
use lanes::Timeout;

use crate::consts::*;
use crate::error::{fail, Code, SciResult};
use crate::ffi::{adapter, call, call_quiet, flags, get_in, need, put, CbArg};
use crate::node::{desc, QueryDma};
use crate::registry::{self, Object};
use crate::segment::{broadcast_only_for_groups, LSeg, RSeg};
use crate::DmaCb;

/// The engine's channel count.
pub const DMA_CHANNELS: u32 = lanes::MAX_DMA_CHANNELS as u32;
/// The largest single transfer reported (the engine has no limit of its own; a transfer is
/// bounded by its segments): the largest page-aligned 32-bit size.
pub const DMA_MTU: u32 = 0xFFFF_F000;

/// `sci_dma_queue_t`. Starting takes the write lock; state and waits the read lock.
pub struct DmaQ {
    queue: RwLock<DmaQueue>,
    /// The queue's entries in use: one per start call, whatever its vector's length.
    entries: Mutex<Entries>,
}

/// A queue's `maxEntries` counts start calls, as the vendor's does: a vector of up to
/// `DIS_DMA_MAX_VECLEN` transfers is one entry (programs written for the hardware create a
/// queue of one entry and start vectors of many on it, as public SISCI benchmarks do:
/// `SCICreateDMAQueue(sd, &q, adapter, 1, 0, &err)` then `SCIStartDmaTransferVec(q, ...,
/// repeat, vec, ...)`). The fabric's queue counts descriptors, so it is made with room for
/// the vectors ([`descriptor_capacity`]) and the entries are counted here.
struct Entries {
    max: usize,
    /// Descriptors handed to the fabric's queue so far.
    submitted: u64,
    /// For each start call not yet known complete, `submitted` after it.
    ends: VecDeque<u64>,
}

impl Entries {
    /// Start calls whose transfers are not all complete, given the fabric queue's
    /// outstanding descriptors.
    fn in_use(&mut self, outstanding: usize) -> usize {
        let completed = self.submitted.saturating_sub(outstanding as u64);
        while self.ends.front().is_some_and(|&e| e <= completed) {
            self.ends.pop_front();
        }
        self.ends.len()
    }
}

/// Descriptors the fabric's queue must hold for `max_entries` start calls of up to
/// `DIS_DMA_MAX_VECLEN` transfers each, bounded so that a huge queue does not reserve
/// memory for vectors nobody sends: at most 64 Ki descriptors (or `max_entries`, if more).
fn descriptor_capacity(max_entries: usize) -> usize {
    if max_entries == 0 || max_entries > 1 << 20 {
        return max_entries; // refused by the fabric as it is
    }
    max_entries.saturating_mul(DIS_DMA_MAX_VECLEN as usize).min((1 << 16).max(max_entries))
}

impl Object for DmaQ {
    const MAGIC: u32 = 0x5141_4D44; // "DMAQ"
}

/// `sci_dma_channel_t`.
pub struct DmaCh {
    channel: DmaChannel,
}
impl Object for DmaCh {
    const MAGIC: u32 = 0x4843_4D44; // "DMCH"
}

fn state_code(s: DmaQueueState) -> u32 {
    match s {
        DmaQueueState::Idle => SCI_DMAQUEUE_IDLE,
        DmaQueueState::Gather => SCI_DMAQUEUE_GATHER,
        DmaQueueState::Posted => SCI_DMAQUEUE_POSTED,
        DmaQueueState::Done => SCI_DMAQUEUE_DONE,
        DmaQueueState::Aborted => SCI_DMAQUEUE_ABORTED,
        DmaQueueState::Error => SCI_DMAQUEUE_ERROR,
    }
}

fn outcome_code(s: DmaQueueState) -> SciError {
    match s {
        DmaQueueState::Error => SCI_ERR_TRANSFER_FAILED,
        DmaQueueState::Aborted => SCI_ERR_CANCELLED,
        _ => SCI_ERR_OK,
    }
}

thread_local! {
    /// Set while this thread starts a transfer (holding the queue's lock): a completion the
    /// engine reports synchronously is deferred until the lock is released, so a program's
    /// callback may call back into the library.
    static STARTING: Cell<bool> = const { Cell::new(false) };
    static DEFERRED: RefCell<Vec<Box<dyn FnOnce()>>> = const { RefCell::new(Vec::new()) };
}

/// The engine callback that calls the program's `sci_cb_dma_t`.
fn completion(cb: DmaCb, arg: *mut c_void, queue: usize) -> Option<DmaCallback> {
    let cb = cb?;
    let arg = CbArg(arg);
    Some(Box::new(move |state: DmaQueueState| {
        let run = move || {
            // SAFETY: the program passed this callback and argument with SCI_FLAG_USE_CALLBACK;
            // SISCI calls it once the transfers of this start call have completed.
            let _ = unsafe { cb(arg.ptr(), queue as *mut c_void, outcome_code(state)) };
        };
        if STARTING.with(Cell::get) {
            DEFERRED.with(|d| d.borrow_mut().push(Box::new(run)));
        } else {
            run();
        }
    }))
}

/// Runs `f` on the queue under its write lock as one more of its `maxEntries` entries
/// (`SCI_ERR_MAX_ENTRIES` when they are all in use), then the callbacks it completed
/// meanwhile.
fn starting<T>(q: &DmaQ, descriptors: u64, f: impl FnOnce(&mut DmaQueue) -> SciResult<T>) -> SciResult<T> {
    let r = {
        let mut queue = q.queue.write().unwrap_or_else(|e| e.into_inner());
        let mut entries = q.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.in_use(queue.outstanding()) >= entries.max {
            return fail(SCI_ERR_MAX_ENTRIES);
        }
        STARTING.with(|s| s.set(true));
        let r = f(&mut queue);
        STARTING.with(|s| s.set(false));
        if r.is_ok() {
            // The fabric queued the call's descriptors whole (or refused them all).
            entries.submitted += descriptors;
            let end = entries.submitted;
            entries.ends.push_back(end);
        }
        r
    };
    for run in DEFERRED.with(|d| std::mem::take(&mut *d.borrow_mut())) {
        run();
    }
    r
}

const START_FLAGS: u32 = SCI_FLAG_USE_CALLBACK
    | SCI_FLAG_DMA_READ
    | SCI_FLAG_DMA_WAIT
    | SCI_FLAG_DMA_GLOBAL
    | SCI_FLAG_DMA_SYSDMA
    | SCI_FLAG_DMA_ADAPTER
    | SCI_FLAG_DMA_PHDMA
    | SCI_FLAG_DMA_SOURCE_ONLY
    // With SCI_FLAG_BROADCAST, lets the engine fall back to unicast writes: the group's
    // writes reach every member either way.
    | SCI_FLAG_ALLOW_UNICAST
    | SCI_FLAG_BROADCAST;

/// Direction and callback of a start call to `remote`. `SCI_FLAG_BROADCAST` (usually with
/// `SCI_FLAG_DMA_GLOBAL`) writes to a reflective group through the member's connection; a
/// transfer to a group's connection writes to the group with or without it. Broadcast is
/// for groups only, and for writes only.
fn start_flags(fl: u32, extra: u32, cb: DmaCb, remote: &RSeg) -> SciResult<(DmaDirection, bool)> {
    flags(fl, START_FLAGS | extra)?;
    broadcast_only_for_groups(fl, remote.is_group())?;
    if fl & SCI_FLAG_BROADCAST != 0 && fl & SCI_FLAG_DMA_READ != 0 {
        return fail(SCI_ERR_ILLEGAL_FLAG);
    }
    let dir = if fl & SCI_FLAG_DMA_READ != 0 { DmaDirection::Read } else { DmaDirection::Write };
    Ok((dir, fl & SCI_FLAG_USE_CALLBACK != 0 && cb.is_some()))
}

/// Waits until nothing is outstanding, up to `timeout`. The queue's lock is held for slices
/// of at most a millisecond, so that a completion callback of this queue that starts more
/// transfers (and so needs the lock) is never blocked for the whole wait: the channel thread
/// running it must go on for the wait to end.
fn wait_queue(q: &DmaQ, timeout: Timeout) -> Result<DmaQueueState, lanes::Error> {
    const SLICE: Duration = Duration::from_millis(1);
    let deadline = match timeout {
        Timeout::After(d) => Some(Instant::now() + d),
        _ => None,
    };
    loop {
        let slice = match (timeout, deadline) {
            (Timeout::Immediate, _) => Timeout::Immediate,
            (_, Some(d)) => Timeout::After(d.saturating_duration_since(Instant::now()).min(SLICE)),
            (_, None) => Timeout::After(SLICE),
        };
        let r = q.queue.read().unwrap_or_else(|e| e.into_inner()).wait(slice);
        match r {
            Err(lanes::Error::Timeout { .. })
                if timeout == Timeout::Infinite || deadline.is_some_and(|d| Instant::now() < d) => {}
            other => return other,
        }
    }
}

/// With `SCI_FLAG_DMA_WAIT`, waits for the queue after starting.
fn wait_if_asked(q: &DmaQ, fl: u32) -> SciResult<()> {
    if fl & SCI_FLAG_DMA_WAIT != 0 && wait_queue(q, Timeout::Infinite)? == DmaQueueState::Aborted {
        return fail(SCI_ERR_CANCELLED);
    }
    Ok(())
}

pub(crate) fn create_dma_queue(
    sd: *mut c_void,
    dq: *mut *mut c_void,
    adapter_no: c_uint,
    max_entries: c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let d = desc(sd)?;
        need(dq)?;
        flags(fl, 0)?;
        adapter(adapter_no)?;
        // 0 is a queue of one entry: public benchmarks measured on the vendor's hardware
        // create their queue with maxEntries 0 and start one vector at a time on it
        // (kritjo/sisci-perf dma_vec.c passes NO_ARG there).
        let max = (max_entries as usize).max(1);
        let queue = d.body.fabric.create_dma_queue(descriptor_capacity(max))?;
        let entries = Mutex::new(Entries { max, submitted: 0, ends: VecDeque::new() });
        let (p, _) = registry::insert(d.key(), 0, DmaQ { queue: RwLock::new(queue), entries });
        put(dq, p)
    })
}

pub(crate) fn remove_dma_queue(dq: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        flags(fl, 0)?;
        let taken = {
            let mut reg = registry::write();
            let h = reg.get::<DmaQ>(dq)?;
            if h.body.queue.read().unwrap_or_else(|e| e.into_inner()).outstanding() > 0 {
                // Wait for the transfers or abort them first.
                return fail(SCI_ERR_BUSY);
            }
            reg.take::<DmaQ>(dq)?
        };
        drop(taken);
        Ok(())
    })
}

pub(crate) fn abort_dma_queue(dq: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        let h = registry::get::<DmaQ>(dq)?;
        flags(fl, 0)?;
        h.body.queue.read().unwrap_or_else(|e| e.into_inner()).abort();
        Ok(())
    })
}

pub(crate) fn dma_queue_state(dq: *mut c_void) -> u32 {
    call_quiet(SCI_DMAQUEUE_ERROR, || match registry::get::<DmaQ>(dq) {
        Ok(h) => state_code(h.body.queue.read().unwrap_or_else(|e| e.into_inner()).state()),
        Err(_) => SCI_DMAQUEUE_ERROR,
    })
}

pub(crate) fn wait_for_dma_queue(dq: *mut c_void, timeout: c_uint, fl: c_uint, error: *mut SciError) -> u32 {
    let mut on_error = SCI_DMAQUEUE_ERROR;
    let r = call(error, None, || {
        let h = registry::get::<DmaQ>(dq)?;
        flags(fl, 0)?;
        match wait_queue(&h.body, Timeout::from_millis(timeout)) {
            Ok(s) => Ok(Some(state_code(s))),
            Err(e) => {
                on_error = state_code(h.body.queue.read().unwrap_or_else(|e| e.into_inner()).state());
                Err(Code::from(e))
            }
        }
    });
    r.unwrap_or(on_error)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn start_dma_transfer(
    dq: *mut c_void,
    local: *mut c_void,
    remote: *mut c_void,
    local_offset: usize,
    size: usize,
    remote_offset: usize,
    callback: DmaCb,
    callback_arg: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let q = registry::get::<DmaQ>(dq)?;
        let l = registry::get::<LSeg>(local)?;
        let r = registry::get::<RSeg>(remote)?;
        let (dir, use_cb) = start_flags(fl, 0, callback, &r.body)?;
        let cb = if use_cb { completion(callback, callback_arg, q.key()) } else { None };
        let lseg = l.body.live()?;
        starting(&q.body, 1, |queue| {
            Ok(queue.start(lseg, r.body.seg(), local_offset as u64, size as u64, remote_offset as u64, dir, cb)?)
        })?;
        wait_if_asked(&q.body, fl)
    })
}

/// `dis_dma_vec_t`: its members are `unsigned int`, as in the vendor's API reference
/// (docs.dolphinics.com/sisci/reference/api.html, "struct dis_dma_vec_t ... unsigned int
/// size; unsigned int local_offset; unsigned int remote_offset; unsigned int flags").
#[repr(C)]
#[derive(Clone, Copy)]
pub struct DisDmaVec {
    pub size: c_uint,
    pub local_offset: c_uint,
    pub remote_offset: c_uint,
    pub flags: c_uint,
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn start_dma_transfer_vec(
    dq: *mut c_void,
    local: *mut c_void,
    remote: *mut c_void,
    vec_length: c_uint,
    vec: *mut DisDmaVec,
    callback: DmaCb,
    callback_arg: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let q = registry::get::<DmaQ>(dq)?;
        let l = registry::get::<LSeg>(local)?;
        let r = registry::get::<RSeg>(remote)?;
        let (dir, use_cb) = start_flags(fl, 0, callback, &r.body)?;
        if vec.is_null() || vec_length == 0 {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        if vec_length > DIS_DMA_MAX_VECLEN {
            return fail(SCI_ERR_MAX_ENTRIES);
        }
        let entries: Vec<DmaVec> = (0..vec_length as usize)
            .map(|i| {
                // SAFETY: SCIStartDmaTransferVec's contract: `vec` holds `vec_length` entries;
                // i < vec_length.
                get_in(unsafe { vec.add(i) }.cast_const()).map(|v| DmaVec {
                    size: u64::from(v.size),
                    local_offset: u64::from(v.local_offset),
                    remote_offset: u64::from(v.remote_offset),
                })
            })
            .collect::<SciResult<_>>()?;
        let cb = if use_cb { completion(callback, callback_arg, q.key()) } else { None };
        let lseg = l.body.live()?;
        starting(&q.body, entries.len() as u64, |queue| Ok(queue.start_vec(lseg, r.body.seg(), &entries, dir, cb)?))?;
        wait_if_asked(&q.body, fl)
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn start_dma_transfer_mem(
    dq: *mut c_void,
    local_address: *mut c_void,
    remote: *mut c_void,
    size: usize,
    remote_offset: usize,
    callback: DmaCb,
    callback_arg: *mut c_void,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let q = registry::get::<DmaQ>(dq)?;
        let r = registry::get::<RSeg>(remote)?;
        let (dir, use_cb) = start_flags(fl, SCI_FLAG_DMA_USER_MEM, callback, &r.body)?;
        if local_address.is_null() {
            return fail(SCI_ERR_ILLEGAL_ADDRESS);
        }
        let cb = if use_cb { completion(callback, callback_arg, q.key()) } else { None };
        starting(&q.body, 1, |queue| {
            // SAFETY: SCIStartDmaTransferMem's contract: the program's memory at
            // `local_address` holds `size` bytes and stays valid and untouched until the
            // transfer completes (SCIWaitForDMAQueue or the callback).
            let r = unsafe {
                queue.start_memory(local_address.cast(), r.body.seg(), size as u64, remote_offset as u64, dir, cb)
            };
            Ok(r?)
        })?;
        wait_if_asked(&q.body, fl)
    })
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn request_dma_channel(
    sd: *mut c_void,
    channel: *mut *mut c_void,
    adapter_no: c_uint,
    kind: c_uint,
    channel_id: c_uint,
    fl: c_uint,
    error: *mut SciError,
) {
    call(error, (), || {
        let d = desc(sd)?;
        need(channel)?;
        // SCI_FLAG_DMA_CHANNEL_SHARED: a channel may serve other queues too, which every
        // channel of the fabric's engine does.
        flags(fl, SCI_FLAG_DMA_CHANNEL_SHARED)?;
        adapter(adapter_no)?;
        if !(SCI_DMA_TYPE_DONTCARE..=SCI_DMA_TYPE_TRANSPARENT).contains(&kind) {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        }
        let id = if channel_id == SCI_DMA_CHANNEL_ID_DONTCARE {
            None
        } else if channel_id >= DMA_CHANNELS {
            return fail(SCI_ERR_ILLEGAL_PARAMETER);
        } else {
            Some(channel_id)
        };
        let ch = d.body.fabric.request_dma_channel(id)?;
        let (p, _) = registry::insert(d.key(), 0, DmaCh { channel: ch });
        put(channel, p)
    })
}

pub(crate) fn assign_dma_channel(channel: *mut c_void, dq: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || {
        let ch = registry::get::<DmaCh>(channel)?;
        let q = registry::get::<DmaQ>(dq)?;
        flags(fl, 0)?;
        let mut queue = q.body.queue.write().unwrap_or_else(|e| e.into_inner());
        if queue.outstanding() > 0 {
            return fail(SCI_ERR_BUSY);
        }
        Ok(queue.assign_channel(&ch.body.channel)?)
    })
}

/// `SCIReturnDMAChannel(channel, &error)`: no flags argument, as programs written for the
/// vendor's header call it (kritjo/sisci-perf, in every version of its DMA-channel code).
pub(crate) fn return_dma_channel(channel: *mut c_void, error: *mut SciError) {
    call(error, (), || {
        let taken = registry::write().take::<DmaCh>(channel)?;
        drop(taken);
        Ok(())
    })
}

/// The `SCI[Un]Prepare{Local,Remote}SegmentForDMA` calls: the engine reaches any segment's
/// memory directly, so there is nothing to prepare; the handles and flags are checked.
fn check_for_dma<S: Object>(channel: *mut c_void, segment: *mut c_void, fl: c_uint) -> SciResult<()> {
    registry::get::<DmaCh>(channel)?;
    registry::get::<S>(segment)?;
    flags(fl, 0)
}

pub(crate) fn prepare_local_segment_for_dma(ch: *mut c_void, seg: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || check_for_dma::<LSeg>(ch, seg, fl))
}

pub(crate) fn unprepare_local_segment_for_dma(ch: *mut c_void, seg: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || check_for_dma::<LSeg>(ch, seg, fl))
}

pub(crate) fn prepare_remote_segment_for_dma(ch: *mut c_void, seg: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || check_for_dma::<RSeg>(ch, seg, fl))
}

pub(crate) fn unprepare_remote_segment_for_dma(ch: *mut c_void, seg: *mut c_void, fl: c_uint, error: *mut SciError) {
    call(error, (), || check_for_dma::<RSeg>(ch, seg, fl))
}

/// The size from which the engine's automatic copies use DMA rather than PIO: the
/// fabric's own crossover, read from a queue once.
fn suggested_min_dma_size() -> u32 {
    static V: OnceLock<u32> = OnceLock::new();
    *V.get_or_init(|| DmaQueue::new(1).map_or(64 << 10, |q| u32::try_from(q.pio_threshold()).unwrap_or(u32::MAX)))
}

/// The DMA subcommands of `SCI_Q_ADAPTER`.
pub(crate) fn adapter_property(sub: u32) -> SciResult<c_uint> {
    Ok(match sub {
        SCI_Q_ADAPTER_DMA_SIZE_ALIGNMENT | SCI_Q_ADAPTER_DMA_OFFSET_ALIGNMENT => 1,
        SCI_Q_ADAPTER_DMA_MTU => DMA_MTU,
        SCI_Q_ADAPTER_SUGGESTED_MIN_DMA_SIZE | SCI_Q_ADAPTER_SUGGESTED_MIN_BLOCK_SIZE => suggested_min_dma_size(),
        _ => return fail(SCI_ERR_ILLEGAL_QUERY),
    })
}

/// `sci_dma_capabilities_t`, as the vendor's API reference declares it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DmaCapabilities {
    pub num_channels: c_uint,
    pub max_transfer_size: c_uint,
    pub max_vector_length: c_uint,
    pub support_mem2io: c_uint,
    pub support_io2mem: c_uint,
    pub support_io2io: c_uint,
    pub min_align_bytes: c_uint,
    pub suggested_align_bytes: c_uint,
}

/// `SCIQuery(SCI_Q_DMA, ...)`. Every engine kind the flags name is the same engine here.
pub(crate) fn query(q: *mut QueryDma, fl: c_uint) -> SciResult<()> {
    flags(fl, SCI_FLAG_DMA_ADAPTER | SCI_FLAG_DMA_SYSDMA | SCI_FLAG_DMA_GLOBAL)?;
    let v = get_in(q)?;
    adapter(v.local_adapter_no)?;
    match v.subcommand {
        SCI_Q_DMA_AVAILABLE => put(v.data.cast::<c_uint>(), 1),
        SCI_Q_DMA_CAPABILITIES => put(
            v.data.cast::<DmaCapabilities>(),
            DmaCapabilities {
                num_channels: DMA_CHANNELS,
                max_transfer_size: DMA_MTU,
                max_vector_length: DIS_DMA_MAX_VECLEN,
                // Memory to memory only: no I/O (device) side on a software fabric.
                support_mem2io: 0,
                support_io2mem: 0,
                support_io2io: 0,
                min_align_bytes: 1,
                suggested_align_bytes: 64,
            },
        ),
        _ => fail(SCI_ERR_ILLEGAL_QUERY),
    }
}
