//! Data interrupts: a wake-up that carries a message of up to 4 KiB.
//!
//! The receiver's object holds a doorbell page and one single-producer ring per connection
//! slot, so every sender has its own queue: messages arrive whole and in order per sender,
//! a sender that dies mid-write leaves nothing half-visible (a message is published by one
//! release store of its entry's sequence word), and a new sender that inherits the slot continues
//! after whatever the dead one published. A full ring makes the sender wait (spin, then
//! sleep on the ring's own doorbell) up to its timeout, then fail with
//! [`Error::QueueFull`]; nothing is ever dropped.
//!
//! ```text
//! page 0    line 0: receiver doorbell (seq, sleepers)   line 1: active-ring bitmap (128 bits)
//! ring i    at 4096 + i * RING_BYTES:
//!           line 0: tail (sender)  line 1: head (receiver)  line 2: space doorbell
//!           then RING_CAP entries: a 64-byte header (sequence word, length), 4096 bytes of payload
//! ```
//!
//! A message is published by its entry's sequence word (message number + 1), stored last
//! with release ordering; the receiver reads only the entry, one line fewer than reading a
//! separate tail. The sender records its tail afterwards, for whoever inherits its slot: a
//! new sender continues past any entry already published beyond the recorded tail.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::events::{self, CallbackAction};
use super::interrupt::{interrupt_error, timeout_ms};
use super::local::LocalSegment;
use super::map::{Map, MapAccess};
use super::remote::RemoteSegment;
use super::{FabricInner, Timeout};
use crate::config::NodeId;
use crate::error::{Error, IoContext, Result};
use crate::platform::doorbell::{Doorbell, WaitError};
use crate::platform::memory;
use crate::transport::shm::layout::{kind, MAX_CONNECTIONS};

/// The largest payload of one data interrupt.
pub const MAX_DATA_INTERRUPT_PAYLOAD: usize = 4096;

const PAGE: usize = 4096;
const BELL_SEQ: usize = 0;
const BELL_SLEEPERS: usize = 4;
const ACTIVE_MASK: usize = 64;
const RING_TAIL: usize = 0;
const RING_HEAD: usize = 64;
const RING_SPACE_SEQ: usize = 128;
const RING_SPACE_SLEEPERS: usize = 132;
const RING_ENTRIES: usize = 192;
const ENTRY_HEADER: usize = 64;
/// Within an entry header: the sequence word, then the length.
const ENTRY_SEQ: usize = 0;
const ENTRY_LEN: usize = 8;
const ENTRY_BYTES: usize = ENTRY_HEADER + MAX_DATA_INTERRUPT_PAYLOAD;
/// Messages a sender may have queued before it must wait.
pub const RING_CAP: u64 = 16;
const RING_BYTES: usize = (RING_ENTRIES + RING_CAP as usize * ENTRY_BYTES).div_ceil(PAGE) * PAGE;
const OBJECT_BYTES: u64 = (PAGE + MAX_CONNECTIONS * RING_BYTES) as u64;

/// The mapped object, with typed access to its words.
#[derive(Debug)]
struct Rings {
    map: Map,
}

impl Rings {
    fn word64(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= self.map.len());
        // SAFETY: every caller passes an 8-aligned offset inside the map (the layout above);
        // these words are only accessed atomically by every process.
        unsafe { AtomicU64::from_ptr(self.map.as_ptr().add(off).cast()) }
    }

    fn word32(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= self.map.len());
        // SAFETY: as for word64, 4-aligned.
        unsafe { AtomicU32::from_ptr(self.map.as_ptr().add(off).cast()) }
    }

    fn bell(&self) -> Doorbell {
        // SAFETY: both words lie in page 0 of the map, which outlives every doorbell we make
        // (doorbells are used only while `self` lives, or registered with the connection
        // that owns the map).
        unsafe { Doorbell::new(self.word32(BELL_SEQ).as_ptr(), self.word32(BELL_SLEEPERS).as_ptr()) }
    }

    fn ring(i: usize) -> usize {
        PAGE + i * RING_BYTES
    }

    fn space_bell(&self, i: usize) -> Doorbell {
        let r = Self::ring(i);
        // SAFETY: as for bell(); the words lie in ring i, inside the map.
        unsafe {
            Doorbell::new(self.word32(r + RING_SPACE_SEQ).as_ptr(), self.word32(r + RING_SPACE_SLEEPERS).as_ptr())
        }
    }

    fn entry(i: usize, seq: u64) -> usize {
        Self::ring(i) + RING_ENTRIES + (seq % RING_CAP) as usize * ENTRY_BYTES
    }

    fn active(&self) -> [u64; 2] {
        [self.word64(ACTIVE_MASK).load(Ordering::Acquire), self.word64(ACTIVE_MASK + 8).load(Ordering::Acquire)]
    }
}

/// A data interrupt of this node. Dropping it removes it.
#[derive(Debug)]
pub struct LocalDataInterrupt {
    inner: Arc<LocalDataInner>,
}

#[derive(Debug)]
struct LocalDataInner {
    seg: LocalSegment,
    rings: Rings,
    /// The ring to look at first, so senders are served round robin. The lock also makes
    /// this (single-consumer) side safe for several receiving threads.
    next: Mutex<usize>,
}

impl LocalDataInterrupt {
    pub(crate) fn create(fabric: &Arc<FabricInner>, number: Option<u32>) -> Result<Self> {
        let seg =
            LocalSegment::create(fabric, kind::DATA_INTERRUPT, number, OBJECT_BYTES, None).map_err(interrupt_error)?;
        seg.prepare()?;
        seg.set_available()?;
        let rings = Rings { map: seg.map(0, OBJECT_BYTES, MapAccess::ReadWrite)? };
        Ok(LocalDataInterrupt { inner: Arc::new(LocalDataInner { seg, rings, next: Mutex::new(0) }) })
    }

    /// The number peers connect to.
    pub fn number(&self) -> u32 {
        self.inner.seg.id()
    }

    /// The node it belongs to.
    pub fn node_id(&self) -> u32 {
        self.inner.seg.node_id()
    }

    /// Sets how long waits spin before they sleep (default: `LANES_POLL_US`, 50 us).
    pub fn set_poll_time(&self, poll: Duration) {
        self.inner.seg.set_poll_time(poll);
    }

    /// Waits for a message and copies it into `buf`, returning its length. A message longer
    /// than `buf` fails with [`Error::BufferTooSmall`] and stays queued.
    pub fn wait(&self, buf: &mut [u8], timeout: Timeout) -> Result<usize> {
        self.inner.wait(buf, timeout)
    }

    /// Calls `cb` with each message from a library thread until it returns
    /// [`CallbackAction::Cancel`] or the data interrupt is removed.
    pub fn on_message(&self, mut cb: impl FnMut(&[u8]) -> CallbackAction + Send + 'static) -> Result<()> {
        let inner = self.inner.clone();
        let mut buf = vec![0u8; MAX_DATA_INTERRUPT_PAYLOAD];
        let mut buf2 = vec![0u8; 0];
        events::spawn_callback_thread(
            "lanes-data-interrupt",
            move || {
                let n = inner.wait(&mut buf, Timeout::Infinite)?;
                buf2.clear();
                buf2.extend_from_slice(&buf[..n]);
                Ok::<_, Error>(std::mem::take(&mut buf2))
            },
            move |msg: Vec<u8>| cb(&msg),
        )
        .context(|| "starting the data interrupt callback thread".into())
    }

    /// Removes it: senders fail from now on, waiters get an error.
    pub fn remove(&self) -> Result<()> {
        self.inner.remove()
    }
}

impl LocalDataInner {
    fn remove(&self) -> Result<()> {
        self.seg.remove(true)?;
        // Wake senders blocked on full rings and our own waiters: they see the removal.
        let [a, b] = self.rings.active();
        for i in 0..MAX_CONNECTIONS {
            let bit = if i < 64 { a >> i } else { b >> (i - 64) };
            if bit & 1 == 1 {
                self.rings.space_bell(i).ring();
            }
        }
        self.rings.bell().ring();
        Ok(())
    }

    fn wait(&self, buf: &mut [u8], timeout: Timeout) -> Result<usize> {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let poll = self.seg.inner.poll_time();
        let removed = || self.seg.inner.is_removed().then_some(());
        match self.rings.bell().wait(|| self.take(&mut next, buf), removed, poll, events::deadline(timeout)) {
            Ok(r) => r,
            Err(WaitError::Aborted(())) => Err(Error::InterruptRemoved { number: self.seg.id() }),
            Err(WaitError::TimedOut) => Err(Error::Timeout {
                what: format!("data interrupt {}", self.seg.id()),
                waited_ms: timeout_ms(timeout),
            }),
        }
    }

    /// Takes the next message of the first non-empty ring from `next` on, if any.
    fn take(&self, next: &mut usize, buf: &mut [u8]) -> Option<Result<usize>> {
        let r = &self.rings;
        let [a, b] = r.active();
        if a == 0 && b == 0 {
            return None;
        }
        for k in 0..MAX_CONNECTIONS {
            let i = (*next + k) % MAX_CONNECTIONS;
            let bit = if i < 64 { a >> i } else { b >> (i - 64) };
            if bit & 1 == 0 {
                continue;
            }
            let base = Rings::ring(i);
            let head = r.word64(base + RING_HEAD).load(Ordering::Relaxed);
            let entry = Rings::entry(i, head);
            if r.word64(entry + ENTRY_SEQ).load(Ordering::Acquire) != head.wrapping_add(1) {
                continue;
            }
            *next = (i + 1) % MAX_CONNECTIONS;
            let len = r.word32(entry + ENTRY_LEN).load(Ordering::Relaxed) as usize;
            if len > MAX_DATA_INTERRUPT_PAYLOAD {
                r.word64(base + RING_HEAD).store(head + 1, Ordering::Release);
                r.space_bell(i).ring();
                return Some(Err(Error::Malformed(format!(
                    "data interrupt message of {len} bytes (at most {MAX_DATA_INTERRUPT_PAYLOAD}); it was skipped"
                ))));
            }
            if len > buf.len() {
                return Some(Err(Error::BufferTooSmall { needed: len, given: buf.len() }));
            }
            // SAFETY: entry + ENTRY_HEADER + len lies inside ring i, inside the map (len is
            // bounded above); buf is private memory of at least len bytes.
            unsafe { memory::copy_from_shared(&mut buf[..len], r.map.as_ptr().add(entry + ENTRY_HEADER)) };
            r.word64(base + RING_HEAD).store(head + 1, Ordering::SeqCst);
            r.space_bell(i).ring();
            return Some(Ok(len));
        }
        None
    }
}

impl Drop for LocalDataInterrupt {
    fn drop(&mut self) {
        let _ = self.inner.remove();
    }
}

/// A connection to another node's data interrupt. Dropping it disconnects.
#[derive(Debug)]
pub struct RemoteDataInterrupt {
    seg: RemoteSegment,
    rings: Rings,
    /// This sender's ring; the lock keeps the ring single-producer when several threads
    /// trigger through one connection.
    send: Mutex<SendState>,
}

#[derive(Debug)]
struct SendState {
    /// The connection slot, which is the ring's index.
    slot: usize,
    /// The receiver's head as last read: room is re-checked against the shared head (a line
    /// the receiver writes) only when this view says the ring is full.
    head_seen: u64,
    /// The number of the next message.
    tail: u64,
}

impl RemoteDataInterrupt {
    pub(crate) fn connect(fabric: &Arc<FabricInner>, node: NodeId, number: u32, timeout: Timeout) -> Result<Self> {
        let seg =
            RemoteSegment::connect(fabric, kind::DATA_INTERRUPT, node, number, timeout).map_err(interrupt_error)?;
        if seg.size() < OBJECT_BYTES {
            return Err(Error::Malformed(format!(
                "data interrupt object of {} bytes, {OBJECT_BYTES} expected",
                seg.size()
            )));
        }
        let rings = Rings { map: seg.map(0, OBJECT_BYTES, MapAccess::ReadWrite).map_err(interrupt_error)? };
        let slot = seg.inner.slot;
        let (word, bit) = if slot < 64 { (ACTIVE_MASK, slot) } else { (ACTIVE_MASK + 8, slot - 64) };
        rings.word64(word).fetch_or(1 << bit, Ordering::SeqCst);
        // SAFETY: the ring's doorbell lies in `rings.map`, which this struct keeps as long as
        // the connection (`seg`) lives; the connection is dropped first (field order).
        unsafe { seg.inner.ring_on_loss(rings.space_bell(slot)) };
        let base = Rings::ring(slot);
        let head_seen = rings.word64(base + RING_HEAD).load(Ordering::Acquire);
        // Continue after whatever an earlier holder of the slot published, including an entry
        // it published but died before recording in the tail.
        let mut tail = rings.word64(base + RING_TAIL).load(Ordering::Acquire);
        while tail.wrapping_sub(head_seen) < RING_CAP
            && rings.word64(Rings::entry(slot, tail) + ENTRY_SEQ).load(Ordering::Acquire) == tail.wrapping_add(1)
        {
            tail = tail.wrapping_add(1);
        }
        Ok(RemoteDataInterrupt { seg, rings, send: Mutex::new(SendState { slot, head_seen, tail }) })
    }

    /// The number.
    pub fn number(&self) -> u32 {
        self.seg.id()
    }

    /// The node that owns it.
    pub fn node_id(&self) -> u32 {
        self.seg.node_id()
    }

    /// Sends `data` (at most [`MAX_DATA_INTERRUPT_PAYLOAD`] bytes) and wakes the receiver.
    /// If this sender's queue is full, waits up to `timeout` for room, then fails with
    /// [`Error::QueueFull`] having sent nothing.
    pub fn trigger(&self, data: &[u8], timeout: Timeout) -> Result<()> {
        if data.len() > MAX_DATA_INTERRUPT_PAYLOAD {
            return Err(Error::PayloadTooLarge { len: data.len(), max: MAX_DATA_INTERRUPT_PAYLOAD });
        }
        let mut st = self.send.lock().unwrap_or_else(|e| e.into_inner());
        let slot = st.slot;
        self.seg.inner.check().map_err(interrupt_error)?;
        let r = &self.rings;
        let base = Rings::ring(slot);
        let tail = st.tail;
        if tail.wrapping_sub(st.head_seen) >= RING_CAP {
            let room = || {
                let h = r.word64(base + RING_HEAD).load(Ordering::SeqCst);
                (tail.wrapping_sub(h) < RING_CAP).then_some(h)
            };
            let lost = || self.seg.inner.check().err();
            match r.space_bell(slot).wait(room, lost, self.seg.inner.poll_time(), events::deadline(timeout)) {
                Ok(h) => st.head_seen = h,
                Err(WaitError::Aborted(e)) => return Err(interrupt_error(e)),
                Err(WaitError::TimedOut) => {
                    return Err(Error::QueueFull {
                        node: self.node_id(),
                        number: self.number(),
                        waited_ms: timeout_ms(timeout),
                    })
                }
            }
        }
        let entry = Rings::entry(slot, tail);
        r.word32(entry + ENTRY_LEN).store(data.len() as u32, Ordering::Relaxed);
        // SAFETY: the entry's payload area (4096 bytes) lies inside ring `slot` in the map,
        // and data is at most 4096 bytes of private memory.
        unsafe { memory::copy_to_shared(r.map.as_ptr().add(entry + ENTRY_HEADER), data) };
        r.word64(entry + ENTRY_SEQ).store(tail.wrapping_add(1), Ordering::SeqCst);
        r.word64(base + RING_TAIL).store(tail.wrapping_add(1), Ordering::Relaxed);
        st.tail = tail.wrapping_add(1);
        r.bell().ring();
        Ok(())
    }

    /// `Ok` while the data interrupt exists, else [`Error::InterruptLost`] with the reason.
    pub fn check(&self) -> Result<()> {
        self.seg.inner.check().map_err(interrupt_error)
    }

    /// Disconnects (`SCIDisconnectDataInterrupt`).
    pub fn disconnect(self) {
        drop(self)
    }
}
