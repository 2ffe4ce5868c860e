//! Interrupts and data interrupts over ofi (docs/design/multi-host.md, section 8): a peer's
//! trigger or message is one RMA write into the exported object's shm layout, and the
//! owner's hooks turn it into exactly what a same-host peer would have done, so the owner's
//! waiters and callbacks run unchanged. How a write is published depends on the provider
//! ([`Publish`]): where it places the ranges of one write in the order named
//! ([`fi::Info::fills_ranges_in_order`]: tcp and net) and the processor shows other cores
//! stores in the order made (x86-64), the write ends with a word the owner looks at (in
//! place); elsewhere it carries remote CQ data for the owner's completion
//! handler. In place, no completion reaches the owner: a receiver that spins (driving
//! progress, as library waits do) sees the word the moment the provider placed it, as it
//! sees a remote PIO store; for one that sleeps, the owner's arrival watch, run after every
//! progress pass of its process, rings the doorbell. Remote CQ data used to publish every
//! write; it cost a completion (and the provider's wake-up signal) per message at the
//! owner, about 7 us of a ping-pong on tcp.
//!
//! **Remote CQ data** is `handle << 16 | value` (`RemoteRange::cq_data`); `value` holds the
//! sender's connection slot in bits 0..7 and, for data interrupts, its message number
//! modulo 512 in bits 7..16. The design's 2 kind bits are not needed: each handle names one
//! object, whose handler knows its kind.
//!
//! **Interrupts.** In place, a trigger is one write of two ranges: the sender's slot's new
//! trigger count into its watched count word (`shm::interrupt::WATCHED_COUNTS`), then the
//! arrival word (`ARRIVAL`: slot and count, so every trigger changes it). The sender reads
//! its count word at its first trigger and counts on from there, so a slot's count only
//! grows whoever holds it. The owner's arrival watch ([`InterruptTarget`]) looks at the
//! arrival word after each progress pass and, only when it changed, adds up every count
//! word's increase since its last look ([`BellPage::trigger_many`]): counts are exact, and a
//! process with many exported interrupts pays one load per interrupt per pass. By
//! completion data, a trigger writes the running count into its slot's count word of the
//! other area (`REMOTE_COUNTS`, a record only) with CQ data, and the owner's handler counts
//! one trigger per completion ([`BellPage::trigger`]): the provider reports each write
//! exactly once. Both areas lie in bytes of the `int-` page shm peers never use. Triggers
//! are fire-and-forget: the sender does not wait for the write. It keeps its last
//! [`TRIGGER_DEPTH`] writes' operations (their source words live in a small registered
//! staging buffer of the connection) and reaps them on later calls; a failed one makes that
//! call and every later one fail (the count at the owner is no longer what the sender sent).
//!
//! **Data interrupts.** A message is written into the sender's next entry of its own slot's
//! ring in the `dint-` layout, so the receiving code is the shm one. How the entry is
//! published depends on the provider ([`Publish`]):
//! - **In place, by its sequence word**: one write of two ranges, the length word and
//!   payload, then the sequence word, as a local sender stores them. The owner's arrival
//!   watch ([`DataInterruptTarget::hooks`]) moves the recorded tail past what arrived and
//!   rings the doorbell ([`Rings::advance_recorded_tails`]).
//! - **By completion data**: one `fi_writedata` of the length word and payload,
//!   never the sequence word. The owner's handler publishes entries ([`Rings::publish`]:
//!   sequence word, recorded tail, then the receiver's doorbell). Completions of one sender
//!   arrive in order (one rxm connection, `FI_ORDER_RMA_WAW`), but two threads reading the CQ
//!   may dispatch them out of order, so the handler keeps a mask of entries arrived beyond
//!   the recorded tail and publishes only the contiguous ones.
//!
//! Either way messages arrive whole, in order per sender, none lost or duplicated. The
//! sender tracks its tail and the last head it read; it reads the ring's tail and head once
//! (`fi_read`) at its first send; three quarters into the ring past the last head it read,
//! it posts a read of the head without waiting and takes its answer at a later send (so a
//! sender whose receiver keeps up never waits for a read: a ping-pong used to pay a round
//! trip every 16 messages); when it believes the ring full it reads the head and waits for
//! it, spinning for `poll` and then backing off up to 1 ms, until its timeout
//! ([`Error::QueueFull`], nothing sent).
//!
//! Writes are posted without `FI_DELIVERY_COMPLETE`, as a posted write on a PCIe fabric is
//! not acknowledged: asking for delivery completion cost an acknowledgement per trigger and
//! doubled the ping-pong latency. A write to an export withdrawn meanwhile (the object
//! removed, its owner dead) may then vanish at the target instead of failing at the sender
//! (docs/design/multi-host.md, "Stage 0 results"); the sender learns of the loss from the
//! owner's daemon (a grant notice, within a heartbeat and a relay), after which every call
//! fails with it. A write the provider reports failed still fails the next call. No call
//! waits without a bound: posts and the waits for the sender's own reads and staging reuse
//! end at [`POST_TIMEOUT`].
//!
//! The owner side: an interrupt's hooks are [`InterruptTarget::hooks`]; a data interrupt's
//! are [`DataInterruptTarget::hooks`], and whoever hands a connection slot of it to a remote
//! sender settles the slot's ring first ([`Rings::settle`]: the daemon, or
//! `DataInterruptTarget::attach` in tests), as the sender reads the ring's tail at its
//! first send. A sender gives its slot back only once its writes are placed
//! ([`Notifier::settle`], at disconnect), so the next holder reads what they left.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::endpoint::{DataHandler, Op, ProcessEndpoint};
use super::export::OwnerHooks;
use super::fi;
use super::remote::OfiConn;
use crate::error::{Error, Result};
use crate::transport::shm::data_interrupt::{
    Rings, ENTRY_BYTES, ENTRY_HEADER, ENTRY_LEN, ENTRY_SEQ, MAX_DATA_INTERRUPT_PAYLOAD, RING_CAP, RING_HEAD, RING_TAIL,
};
use crate::transport::shm::interrupt::{BellPage, ARRIVAL, REMOTE_COUNTS, WATCHED_COUNTS};
use crate::transport::shm::layout::{kind, MAX_CONNECTIONS};
use crate::transport::shm::segment_file::DataMapping;
use crate::transport::Timeout;

/// The bound on every post (the provider answering `-FI_EAGAIN`) and on every wait for one of
/// the sender's own operations.
pub const POST_TIMEOUT: Duration = Duration::from_secs(5);
/// Triggers a connection may have in flight before it waits for the oldest.
pub const TRIGGER_DEPTH: u64 = 256;
/// The staging stride of one trigger: its count word, then its arrival word.
const TRIGGER_STAGE: usize = 16;
/// Where the read of an interrupt sender's count word lands in its staging buffer.
const COUNT_READ: usize = TRIGGER_DEPTH as usize * TRIGGER_STAGE;
/// An interrupt sender's staging buffer.
const TRIGGER_STAGING: usize = COUNT_READ + 8;
/// The bits of the arrival word holding the count (the slot is above them).
const ARRIVAL_COUNT_BITS: u32 = 57;
/// A watched count that moved by more than this since the owner's last look moved
/// backwards (a word read half-placed) or was damaged: nothing is counted.
const MAX_COUNT_STEP: u64 = 1 << 40;
/// Bits of the CQ data value naming the sender's slot.
const SLOT_BITS: u32 = 7;
const SLOT_MASK: u16 = (1 << SLOT_BITS) - 1;
/// Message numbers travel modulo this.
const NUMBER_MOD: u64 = 1 << (16 - SLOT_BITS);
/// The bytes of an entry a remote sender writes before its sequence word: from the length
/// word to the payload's end.
const ENTRY_WRITTEN: usize = ENTRY_BYTES - ENTRY_LEN;
/// The staging stride of one message (a multiple of 64): the length word, the payload and,
/// right after the payload, the sequence word.
const MESSAGE_STAGE: usize = (ENTRY_WRITTEN + 8).div_ceil(64) * 64;
/// Where reads of the ring's tail and head land in a data interrupt sender's staging buffer.
const HEADER_STAGE: usize = RING_CAP as usize * MESSAGE_STAGE;
/// Bytes read at the first send: the ring's tail word up to and including its head word.
const HEADER_READ: usize = RING_HEAD + 8 - RING_TAIL;
/// Where a read of the ring's head started ahead of need lands (8 bytes).
const HEAD_PREFETCH: usize = (HEADER_STAGE + HEADER_READ).div_ceil(8) * 8;
/// A data interrupt sender's staging buffer: message sources, then both read landings.
const DATA_STAGING: usize = HEAD_PREFETCH + 8;
/// Messages beyond the last head seen from which a sender reads the head again without
/// waiting for the answer, so that it has a fresher head before the ring looks full.
const PREFETCH_AT: u64 = RING_CAP * 3 / 4;
#[doc(hidden)] // for the fabric's tests of this transport
pub const SPIN: Duration = Duration::from_micros(20);
const MAX_BACKOFF: Duration = Duration::from_millis(1);

const _: () = assert!(MAX_CONNECTIONS <= 1 << SLOT_BITS);
const _: () = assert!(RING_CAP < NUMBER_MOD);
const _: () = assert!(REMOTE_COUNTS as usize + 8 * MAX_CONNECTIONS <= 4096);
const _: () = assert!(MAX_CONNECTIONS <= 1 << (64 - ARRIVAL_COUNT_BITS));

/// The arrival word of a trigger that brought slot `slot`'s count to `count`.
#[doc(hidden)] // for the fabric's tests of this transport
pub fn arrival_value(slot: usize, count: u64) -> u64 {
    (slot as u64) << ARRIVAL_COUNT_BITS | count & ((1 << ARRIVAL_COUNT_BITS) - 1)
}

/// The CQ data value of message `n` of the sender in `slot`.
#[doc(hidden)] // for the fabric's tests of this transport
pub fn message_value(slot: usize, n: u64) -> u16 {
    slot as u16 | ((n % NUMBER_MOD) as u16) << SLOT_BITS
}

// ---------------------------------------------------------------------------------------
// Owner side
// ---------------------------------------------------------------------------------------

/// The owner's side of an exported interrupt: counts what remote senders triggered.
#[derive(Debug)]
pub struct InterruptTarget {
    page: BellPage,
    /// The arrival word as last looked at: a pass that finds it unchanged does nothing more.
    arrival_seen: AtomicU64,
    /// Per slot, the watched count up to which triggers were counted.
    counted: Mutex<Vec<u64>>,
}

impl InterruptTarget {
    /// A target over `page`, the owner's own view of the interrupt's data; counting starts
    /// from the count words as they are.
    pub fn new(page: BellPage) -> Arc<InterruptTarget> {
        let arrival_seen = AtomicU64::new(page.word(ARRIVAL).load(Ordering::SeqCst));
        let counted = (0..MAX_CONNECTIONS).map(|slot| page.word(watched_count(slot)).load(Ordering::SeqCst)).collect();
        Arc::new(InterruptTarget { page, arrival_seen, counted: Mutex::new(counted) })
    }

    /// The hooks to export the interrupt with: one trigger per completion with remote
    /// data; the count words' increases after a changed arrival word.
    pub fn hooks(self: &Arc<Self>) -> OwnerHooks {
        let (a, b) = (Arc::clone(self), Arc::clone(self));
        OwnerHooks {
            on_data: Some(Arc::new(move |_value| a.page.trigger())),
            on_arrival: Some(Arc::new(move || b.look())),
        }
    }

    /// The arrival watch. The arrival word is written after its count word (one write, in
    /// order): whoever sees it changed sees the count, and a change made after the word was
    /// read is seen by the next look (the word read is recorded before the scan).
    fn look(&self) {
        let arrival = self.page.word(ARRIVAL).load(Ordering::SeqCst);
        if arrival == self.arrival_seen.load(Ordering::SeqCst) {
            return;
        }
        let mut counted = self.counted.lock().unwrap_or_else(|e| e.into_inner());
        self.arrival_seen.store(arrival, Ordering::SeqCst);
        let mut triggers = 0u64;
        for (slot, seen) in counted.iter_mut().enumerate() {
            let count = self.page.word(watched_count(slot)).load(Ordering::SeqCst);
            let step = count.wrapping_sub(*seen);
            // Only increases count. A word may be read half-placed (the provider may place a
            // write's bytes over two progress passes, and a look runs when an earlier
            // trigger's arrival word changed): placed in address order, a little-endian
            // word then holds the new low bytes under the old high ones, which is either
            // between the old and the new count (counted now, the rest later) or below the
            // old one (ignored until it is whole). Anything else (a step beyond
            // MAX_COUNT_STEP) is damage, ignored too.
            if (1..=MAX_COUNT_STEP).contains(&step) {
                *seen = count;
                triggers += step;
            }
        }
        if triggers > 0 {
            self.page.trigger_many(triggers);
        }
    }
}

/// Where slot `slot`'s watched count word lies in the interrupt page.
#[doc(hidden)] // for the fabric's tests of this transport
pub fn watched_count(slot: usize) -> u64 {
    WATCHED_COUNTS + 8 * slot as u64
}

/// The owner's side of an exported data interrupt: publishes what remote senders wrote.
#[derive(Debug)]
pub struct DataInterruptTarget {
    rings: Rings,
    /// Per slot, entries whose writes completed beyond the recorded tail (bit i: tail + i).
    arrived: Mutex<Vec<u32>>,
}

impl DataInterruptTarget {
    /// A target over `map`, the owner's own view of the whole object.
    pub fn new(map: DataMapping) -> Arc<DataInterruptTarget> {
        Arc::new(DataInterruptTarget { rings: Rings::new(map), arrived: Mutex::new(vec![0; MAX_CONNECTIONS]) })
    }

    /// Prepares ring `slot` for a new remote sender, before it is handed the connection:
    /// settles the ring's tail past what an earlier holder published, forgets what an
    /// earlier holder's writes left unpublished, and marks the ring active. Returns the
    /// tail the sender will start from.
    #[cfg(any(test, feature = "test-hooks"))]
    pub fn attach(&self, slot: usize) -> u64 {
        assert!(slot < MAX_CONNECTIONS, "connection slot {slot}");
        let mut arrived = self.arrived.lock().unwrap_or_else(|e| e.into_inner());
        arrived[slot] = 0;
        self.rings.settle(slot).0
    }

    /// The hooks to export the object with: the handler of completion data, and the
    /// arrival watch for senders that publish by sequence word.
    pub fn hooks(self: &Arc<Self>) -> OwnerHooks {
        let me = Arc::clone(self);
        OwnerHooks {
            on_data: Some(self.handler()),
            on_arrival: Some(Arc::new(move || me.rings.advance_recorded_tails())),
        }
    }

    /// The handler of completion data (senders that publish by completion data).
    #[doc(hidden)] // for the fabric's tests of this transport
    pub fn handler(self: &Arc<Self>) -> DataHandler {
        let me = Arc::clone(self);
        Arc::new(move |value| me.on_data(value))
    }

    fn on_data(&self, value: u16) {
        let slot = usize::from(value & SLOT_MASK);
        if slot >= MAX_CONNECTIONS {
            return;
        }
        let low = u64::from(value >> SLOT_BITS);
        let mut arrived = self.arrived.lock().unwrap_or_else(|e| e.into_inner());
        let tail_word = self.rings.word64(Rings::ring(slot) + RING_TAIL);
        let mut tail = tail_word.load(Ordering::Acquire);
        let ahead = (low + NUMBER_MOD - tail % NUMBER_MOD) % NUMBER_MOD;
        if ahead >= RING_CAP {
            // Not a message this ring can hold now (a sender never runs more than RING_CAP
            // ahead of the head, and the tail is past the head): ignore it.
            return;
        }
        let mask = &mut arrived[slot];
        *mask |= 1 << ahead;
        if *mask & 1 == 0 {
            return;
        }
        while *mask & 1 == 1 {
            self.rings.publish(slot, tail);
            tail = tail.wrapping_add(1);
            *mask >>= 1;
        }
        drop(arrived);
        self.rings.bell().ring();
    }
}

// ---------------------------------------------------------------------------------------
// Sender side
// ---------------------------------------------------------------------------------------

/// A connection's registered staging memory: the sources of its writes and the
/// destinations of its reads. Posted operations keep it alive until they complete.
struct Staging {
    buf: Arc<fi::Buffer>,
    mr: fi::MemoryRegion,
}

impl Staging {
    fn new(endpoint: &ProcessEndpoint, len: usize) -> Result<Arc<Staging>> {
        let buf = Arc::new(fi::Buffer::new(len)?);
        let mr = endpoint.register(buf.clone(), fi::FI_READ | fi::FI_WRITE)?;
        Ok(Arc::new(Staging { buf, mr }))
    }

    fn keep(self: &Arc<Self>) -> Option<Arc<dyn Any + Send + Sync>> {
        Some(Arc::clone(self) as Arc<dyn Any + Send + Sync>)
    }
}

/// How a sender publishes its triggers or messages (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Publish {
    /// One write that ends with the word the owner looks at: a data interrupt entry's
    /// sequence word, an interrupt's arrival word after its count.
    InPlace,
    /// A write with remote CQ data, for the owner's completion handler.
    ByCompletionData,
}

impl Publish {
    /// Whether `endpoint`'s provider can carry writes published in place: one write's
    /// ranges land in the order named and after every earlier write's (`FI_ORDER_RMA_WAW`).
    fn provider_allows(endpoint: &ProcessEndpoint) -> bool {
        let info = endpoint.fi().domain().info();
        let ordered = info.msg_order() & fi::FI_ORDER_RMA_WAW != 0;
        ordered && info.fills_ranges_in_order() && info.rma_iov_limit() >= 2
    }

    /// Whether an owner on `endpoint` watches for writes published in place (and says so in
    /// its export records): where the provider allows it, on a processor whose stores other
    /// cores see in the order made (x86-64: the thread that finds the last word may not be
    /// the one whose progress placed the write). The owner decides, as the order that
    /// matters is that of its own cores.
    pub fn owner_may_watch(endpoint: &ProcessEndpoint) -> bool {
        cfg!(target_arch = "x86_64") && Self::provider_allows(endpoint)
    }

    /// How a sender on `endpoint` publishes to an owner whose export record says
    /// `owner_watches`.
    pub fn for_sender(endpoint: &ProcessEndpoint, owner_watches: bool) -> Publish {
        if owner_watches && Self::provider_allows(endpoint) {
            Publish::InPlace
        } else {
            Publish::ByCompletionData
        }
    }

    /// A connection made without an export record (tests): as toward an owner like this
    /// process.
    fn for_endpoint(endpoint: &ProcessEndpoint) -> Publish {
        Self::for_sender(endpoint, Self::owner_may_watch(endpoint))
    }
}

/// The sending side of one connection: triggers or messages, serialised by one lock.
#[derive(Default)]
pub struct Notifier {
    state: Mutex<SendState>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f.debug_struct("Notifier")
            .field("sent", &st.sent)
            .field("in_flight", &st.in_flight.len())
            .field("failure", &st.failure)
            .finish()
    }
}

#[derive(Default)]
struct SendState {
    /// Created at the first trigger or send.
    staging: Option<Arc<Staging>>,
    /// Chosen at the first trigger or send.
    publish: Option<Publish>,
    /// For interrupts published in place, once read: the slot's count before this
    /// connection's first trigger.
    count_base: Option<u64>,
    /// Triggers posted, or the number of the next message.
    sent: u64,
    /// For data interrupts, once read: the receiver's head as last read.
    head_seen: Option<u64>,
    /// For data interrupts: a read of the receiver's head into `HEAD_PREFETCH`, posted
    /// ahead of need and not waited for.
    head_prefetch: Option<Arc<Op>>,
    /// Posted writes not yet reaped, oldest first, with their trigger or message number.
    in_flight: VecDeque<(u64, Arc<Op>)>,
    /// The first failure seen; every later call fails with it.
    failure: Option<String>,
}

impl SendState {
    /// Drops finished operations from the front, keeping the first failure.
    fn reap(&mut self) {
        while let Some((_, op)) = self.in_flight.front() {
            match op.outcome() {
                None => break,
                Some(Ok(())) => {}
                Some(Err(e)) => {
                    self.failure.get_or_insert(e);
                }
            }
            self.in_flight.pop_front();
        }
    }

    /// Waits (bounded) until every operation numbered `n` or lower has finished, so that the
    /// staging memory it used may be reused.
    fn retire_through(&mut self, conn: &OfiConn, n: u64) -> Result<()> {
        let deadline = fi::deadline_in(POST_TIMEOUT);
        while let Some((k, op)) = self.in_flight.front().map(|(k, op)| (*k, Arc::clone(op))) {
            if k > n {
                break;
            }
            match wait_op(conn, &op, deadline, "an earlier write of this connection") {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    self.failure.get_or_insert(e);
                }
                Err(e) => {
                    // Its staging memory may still be read: nothing more goes out.
                    self.failure.get_or_insert(e.to_string());
                    return Err(e);
                }
            }
            self.in_flight.pop_front();
        }
        Ok(())
    }

    fn failed(&self, conn: &OfiConn) -> Result<()> {
        match &self.failure {
            None => Ok(()),
            Some(e) => Err(failure_error(conn, e)),
        }
    }

    fn staging(&mut self, endpoint: &ProcessEndpoint, len: usize) -> Result<Arc<Staging>> {
        if let Some(s) = &self.staging {
            return Ok(Arc::clone(s));
        }
        let s = Staging::new(endpoint, len)?;
        self.staging = Some(Arc::clone(&s));
        Ok(s)
    }

    /// Reads `len` bytes at `offset` of the remote object into `landing` of the staging
    /// buffer (`HEADER_STAGE` or `COUNT_READ`) and returns them. A read that does not
    /// complete in time fails the connection: it may still land in the staging buffer later.
    fn read_remote(
        &mut self,
        conn: &OfiConn,
        staging: &Arc<Staging>,
        landing: usize,
        offset: u64,
        len: usize,
    ) -> Result<Vec<u8>> {
        let ep = &conn.endpoint;
        let deadline = fi::deadline_in(POST_TIMEOUT);
        let target = conn.range.target(offset, len as u64)?;
        let local = staging.mr.local(landing, len)?;
        // SAFETY: the local range lies in the staging buffer, which the operation keeps
        // alive (keep) until its completion is read; nothing else reads or writes the
        // landing while a read is in flight (the state lock is held, and a read that
        // times out or is given up on fails the connection, so no later read is posted over
        // it).
        let op = conn.post_until(POST_TIMEOUT, |d| unsafe { ep.post_read(local, target, staging.keep(), d) })?;
        match wait_op(conn, &op, deadline, "a read of the receiver's ring") {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                self.failure.get_or_insert(e.clone());
                return Err(failure_error(conn, &e));
            }
            Err(e) => {
                self.failure.get_or_insert(e.to_string());
                return Err(e);
            }
        }
        let mut out = vec![0u8; len];
        staging.buf.read(landing, &mut out)?;
        Ok(out)
    }

    /// Takes a finished head prefetch into `head_seen` when it names a head between `seen`
    /// (the last one seen) and message `next` (anything else is not a head this sender can
    /// have caused, and is ignored: the full-ring wait reads again); a failed one fails the
    /// connection like any other failed operation. Returns the head seen now.
    fn harvest_head(&mut self, staging: &Staging, seen: u64, next: u64) -> Result<u64> {
        let Some(op) = &self.head_prefetch else { return Ok(seen) };
        let mut now = seen;
        match op.outcome() {
            None => return Ok(seen),
            Some(Err(e)) => {
                self.failure.get_or_insert(e);
            }
            Some(Ok(())) => {
                let mut w = [0u8; 8];
                staging.buf.read(HEAD_PREFETCH, &mut w)?;
                let h = u64::from_ne_bytes(w);
                if h.wrapping_sub(seen) <= next.wrapping_sub(seen) {
                    now = h;
                    self.head_seen = Some(h);
                }
            }
        }
        self.head_prefetch = None;
        Ok(now)
    }

    /// Posts a read of ring `ring`'s head word into `HEAD_PREFETCH`, not waited for.
    fn prefetch_head(&mut self, conn: &OfiConn, staging: &Arc<Staging>, ring: u64) -> Result<()> {
        let ep = &conn.endpoint;
        let target = conn.range.target(ring + RING_HEAD as u64, 8)?;
        let local = staging.mr.local(HEAD_PREFETCH, 8)?;
        // SAFETY: the local range lies in the staging buffer, which the operation keeps
        // alive (keep) until its completion is read; HEAD_PREFETCH is written by nothing
        // else, and read (harvest_head) only after this operation finished; one prefetch
        // is in flight at a time.
        let op = conn.post_until(POST_TIMEOUT, |d| unsafe { ep.post_read(local, target, staging.keep(), d) })?;
        self.head_prefetch = Some(op);
        Ok(())
    }
}

/// Waits for `op` of `conn` up to `deadline`: its outcome, or the connection's fault as
/// soon as it has one (a lost or unreachable peer may never complete it).
fn wait_op(conn: &OfiConn, op: &Op, deadline: Instant, what: &str) -> Result<std::result::Result<(), String>> {
    let done = || match op.outcome() {
        Some(outcome) => Some(Ok(outcome)),
        None => conn.fault().map(Err),
    };
    conn.endpoint.wait_until(done, SPIN, deadline, what)?
}

fn failure_error(conn: &OfiConn, message: &str) -> Error {
    let a = conn.info.addr;
    Error::Ofi {
        call: "completion",
        code: 5, // FI_EIO
        message: format!(
            "an earlier write to {} {:#x} on node {} failed: {message}",
            crate::transport::shm::layout::kind::name(a.kind),
            a.id,
            a.node
        ),
    }
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_ne_bytes(w)
}

impl Notifier {
    /// Makes this sender publish `how` (what the owner's export record allows; in tests,
    /// either way on tcp). Before the first trigger or send; later calls change nothing.
    pub fn publish_by(&self, how: Publish) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.staging.is_none() {
            st.publish = Some(how);
        }
    }

    /// Whether this connection's owner sees the ranges of one write in the order filled:
    /// its record said so (or, made without a record, this process would), and the
    /// provider fills ranges in order.
    pub fn owner_sees_ranges_in_order(&self, endpoint: &ProcessEndpoint) -> bool {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.publish.unwrap_or_else(|| Publish::for_endpoint(endpoint)) == Publish::InPlace
    }

    /// `Ok` unless an earlier write of this connection failed (reaping finished ones first).
    pub fn check(&self, conn: &OfiConn) -> Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.reap();
        st.failed(conn)
    }

    /// Triggers the interrupt `conn` is connected to: posts one write and returns (the
    /// first trigger published in place first reads its slot's count).
    pub fn trigger(&self, conn: &OfiConn) -> Result<()> {
        let slot = conn.slot as usize;
        if slot >= MAX_CONNECTIONS {
            return Err(Error::IllegalOperation("a connection slot beyond the object's slots"));
        }
        let ep = &conn.endpoint;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.reap();
        st.failed(conn)?;
        let staging = st.staging(ep, TRIGGER_STAGING)?;
        let publish = *st.publish.get_or_insert_with(|| Publish::for_endpoint(ep));
        let n = st.sent;
        if n >= TRIGGER_DEPTH {
            // The write that used this staging stride before.
            st.retire_through(conn, n - TRIGGER_DEPTH)?;
            st.failed(conn)?;
        }
        let at = (n % TRIGGER_DEPTH) as usize * TRIGGER_STAGE;
        let op = match publish {
            Publish::InPlace => {
                let base = match st.count_base {
                    Some(b) => b,
                    None => {
                        let b = word(&st.read_remote(conn, &staging, COUNT_READ, watched_count(slot), 8)?, 0);
                        st.count_base = Some(b);
                        b
                    }
                };
                let count = base.wrapping_add(n + 1);
                staging.buf.write(at, &count.to_ne_bytes())?;
                staging.buf.write(at + 8, &arrival_value(slot, count).to_ne_bytes())?;
                let targets = [(conn.range.target(watched_count(slot), 8)?, 8), (conn.range.target(ARRIVAL, 8)?, 8)];
                let local = staging.mr.local(at, TRIGGER_STAGE)?;
                // SAFETY: the source words lie in the staging buffer, which the operation
                // keeps alive until its completion is read, and are not written again before
                // that (reused only after retire_through saw this operation finish). A
                // refused attempt posted nothing.
                conn.post_until(POST_TIMEOUT, |d| unsafe {
                    ep.post_write_scatter(local, &targets, 0, staging.keep(), d)
                })?
            }
            Publish::ByCompletionData => {
                staging.buf.write(at, &(n + 1).to_ne_bytes())?;
                let target = conn.range.target(REMOTE_COUNTS + 8 * slot as u64, 8)?;
                let data = conn.range.cq_data(slot as u16);
                let local = staging.mr.local(at, 8)?;
                // SAFETY: as above.
                conn.post_until(POST_TIMEOUT, |d| unsafe {
                    ep.post_write(local, target, data, fi::FI_REMOTE_CQ_DATA, staging.keep(), d)
                })?
            }
        };
        st.sent = n + 1;
        st.in_flight.push_back((n, op));
        Ok(())
    }

    /// Before the connection's slot goes back to the owner (disconnect): waits until every
    /// write this connection posted has been placed at the owner. The next holder of the
    /// slot reads the slot's count or ring at its first trigger or send over its own
    /// connection, which nothing orders with ours: had one of our writes still been on its
    /// way, it would have read an older count and its first triggers would not have counted
    /// (the owner ignores a count that goes backwards), or have had its ring entries
    /// overwritten. A read of the slot's word posted after the writes completes only once
    /// they are placed where the provider orders reads after writes (`FI_ORDER_RMA_RAW`, as
    /// tcp and net do); elsewhere only the writes' own completions can be waited for.
    /// Bounded by [`POST_TIMEOUT`], and by the connection's fault (a lost or unreachable
    /// owner). Later triggers and sends of this connection fail.
    pub fn settle(&self, conn: &OfiConn) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.reap();
        // Nothing sent (no staging yet), or a failed connection: nothing to wait for.
        if let Some(staging) = st.staging.clone().filter(|_| st.failure.is_none()) {
            let slot = conn.slot as usize;
            let (landing, word) = if conn.info.addr.kind == kind::DATA_INTERRUPT {
                (HEADER_STAGE, Rings::ring(slot) as u64 + RING_HEAD as u64)
            } else {
                (COUNT_READ, watched_count(slot))
            };
            let read_orders = conn.endpoint.fi().domain().info().msg_order() & fi::FI_ORDER_RMA_RAW != 0;
            // A failure is recorded in the state, which is closed below anyway.
            let _ = if read_orders {
                st.read_remote(conn, &staging, landing, word, 8).map(drop)
            } else {
                st.retire_through(conn, u64::MAX)
            };
        }
        st.failure.get_or_insert_with(|| "the connection was disconnected".into());
    }

    /// Sends one message to the data interrupt `conn` is connected to. `lost` fails once the
    /// connection is lost; it is consulted while waiting for room.
    pub fn send(
        &self,
        conn: &OfiConn,
        data: &[u8],
        timeout: Timeout,
        poll: Duration,
        lost: impl Fn() -> Result<()>,
    ) -> Result<()> {
        if data.len() > MAX_DATA_INTERRUPT_PAYLOAD {
            return Err(Error::PayloadTooLarge { len: data.len(), max: MAX_DATA_INTERRUPT_PAYLOAD });
        }
        let slot = conn.slot as usize;
        if slot >= MAX_CONNECTIONS {
            return Err(Error::IllegalOperation("a connection slot beyond the object's slots"));
        }
        let ep = &conn.endpoint;
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        lost()?;
        st.reap();
        st.failed(conn)?;
        let staging = st.staging(ep, DATA_STAGING)?;
        let ring = Rings::ring(slot) as u64;
        let head_seen = match st.head_seen {
            Some(h) => h,
            None => {
                let hdr = st.read_remote(conn, &staging, HEADER_STAGE, ring + RING_TAIL as u64, HEADER_READ)?;
                let (tail, head) = (word(&hdr, 0), word(&hdr, RING_HEAD - RING_TAIL));
                if tail.wrapping_sub(head) > RING_CAP {
                    return Err(Error::Malformed(format!(
                        "data interrupt ring {slot} with tail {tail} and head {head} ({RING_CAP} entries)"
                    )));
                }
                st.sent = tail;
                st.head_seen = Some(head);
                head
            }
        };
        let n = st.sent;
        let head_seen = st.harvest_head(&staging, head_seen, n)?;
        st.failed(conn)?;
        if st.head_prefetch.is_none() && n.wrapping_sub(head_seen) >= PREFETCH_AT {
            st.prefetch_head(conn, &staging, ring)?;
        }
        if n.wrapping_sub(head_seen) >= RING_CAP {
            // The clock only now: a sender with room (every message of a receiver that keeps
            // up) reads none. The timeout counts from here.
            let started = Instant::now();
            let deadline = timeout.deadline();
            let mut pause = Duration::from_micros(20);
            loop {
                lost()?;
                let h = word(&st.read_remote(conn, &staging, HEADER_STAGE, ring + RING_HEAD as u64, 8)?, 0);
                if n.wrapping_sub(h) < RING_CAP {
                    st.head_seen = Some(h);
                    break;
                }
                let now = Instant::now();
                if deadline.is_some_and(|d| now >= d) {
                    let a = conn.info.addr;
                    return Err(Error::QueueFull { node: a.node, number: a.id, waited_ms: timeout.as_millis() });
                }
                if now - started >= poll {
                    let left = deadline.map_or(pause, |d| d - now);
                    std::thread::sleep(pause.min(left));
                    pause = (pause * 2).min(MAX_BACKOFF);
                }
            }
        }
        if n >= RING_CAP {
            // The write that used this staging entry before.
            st.retire_through(conn, n - RING_CAP)?;
            st.failed(conn)?;
        }
        let at = (n % RING_CAP) as usize * MESSAGE_STAGE;
        let written = ENTRY_HEADER - ENTRY_LEN + data.len();
        staging.buf.write(at, &(data.len() as u32).to_ne_bytes())?;
        staging.buf.write(at + ENTRY_HEADER - ENTRY_LEN, data)?;
        let entry = Rings::entry(slot, n) as u64;
        let body = conn.range.target(entry + ENTRY_LEN as u64, written as u64)?;
        let publish = *st.publish.get_or_insert_with(|| Publish::for_endpoint(ep));
        let op = match publish {
            Publish::InPlace => {
                staging.buf.write(at + written, &n.wrapping_add(1).to_ne_bytes())?;
                let seq = conn.range.target(entry + ENTRY_SEQ as u64, 8)?;
                let local = staging.mr.local(at, written + 8)?;
                // SAFETY: the source lies in the staging buffer, which the operation keeps
                // alive until its completion is read, and this entry's staging is not written
                // again before that (reused only after retire_through saw this operation
                // finish). A refused attempt posted nothing.
                conn.post_until(POST_TIMEOUT, |d| unsafe {
                    ep.post_write_scatter(local, &[(body, written), (seq, 8)], 0, staging.keep(), d)
                })?
            }
            Publish::ByCompletionData => {
                let value = conn.range.cq_data(message_value(slot, n));
                let local = staging.mr.local(at, written)?;
                // SAFETY: as above.
                conn.post_until(POST_TIMEOUT, |d| unsafe {
                    ep.post_write(local, body, value, fi::FI_REMOTE_CQ_DATA, staging.keep(), d)
                })?
            }
        };
        st.sent = n + 1;
        st.in_flight.push_back((n, op));
        Ok(())
    }
}
