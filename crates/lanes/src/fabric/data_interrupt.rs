//! Data interrupts: a wake-up that carries a message of up to 4 KiB.
//!
//! The receiver's object holds a doorbell page and one single-producer ring per connection
//! slot, so every sender has its own queue: messages arrive whole and in order per sender,
//! a sender that dies mid-write leaves nothing half-visible (a message is published by its
//! entry's sequence word, stored after the message: a release store on this host, the last
//! range of the same RMA write from another), and a new sender that inherits the slot continues
//! after whatever the dead one published. A full ring makes the sender wait (spin, then
//! sleep on the ring's own doorbell) up to its timeout, then fail with
//! [`Error::QueueFull`]; nothing is ever dropped.
//!
//! The object's layout (a doorbell page, then one ring per connection slot) and the
//! sending side are the shm transport's (`transport::shm::data_interrupt`); this module is
//! the public API and the receiving side.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::events::{self, CallbackAction};
use super::interrupt::{interrupt_error, timeout_ms};
use super::local::LocalSegment;
use super::remote::RemoteSegment;
use super::{DrivenSpin, FabricInner, Timeout};
use crate::config::NodeId;
use crate::error::{Error, IoContext, Result};
use crate::platform::doorbell::WaitError;
pub use crate::transport::shm::data_interrupt::MAX_DATA_INTERRUPT_PAYLOAD;
use crate::transport::shm::data_interrupt::{Rings, ENTRY_HEADER, ENTRY_LEN, ENTRY_SEQ, OBJECT_BYTES, RING_HEAD};
use crate::transport::shm::layout::{kind, MAX_CONNECTIONS};
use crate::transport::shm::remote::direct_mapping;
use crate::transport::MapAccess;
use crate::transport::RemoteObject;

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
        let rings = Rings::new(direct_mapping(&seg.inner.file, 0, OBJECT_BYTES, MapAccess::ReadWrite)?);
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

    /// Takes the next message into `buf` if one is there (`Ok(Some(len))`), else `Ok(None)`
    /// at once: for a caller's own spin loop. Unlike `wait` with [`Timeout::Immediate`] it
    /// reads no clock, makes no error value and drives no progress; across hosts a message
    /// is placed by whoever drives the transport (a [`crate::ProgressDriver`] polled in the
    /// same loop, else the transport's own thread). Errors as `wait`'s: a removed data
    /// interrupt, a message longer than `buf` (it stays queued), a malformed entry.
    pub fn try_wait(&self, buf: &mut [u8]) -> Result<Option<usize>> {
        self.inner.try_wait(buf)
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
        for i in self.rings.active_slots(0) {
            self.rings.space_bell(i).ring();
        }
        self.rings.bell().ring();
        Ok(())
    }

    fn wait(&self, buf: &mut [u8], timeout: Timeout) -> Result<usize> {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let poll = self.seg.inner.poll_time();
        let deadline = events::deadline(timeout);
        let removed = || self.seg.inner.is_removed().then_some(());
        let spun = self.seg.inner.fabric.spin_driving_progress(poll, deadline, || self.take(&mut next, buf), removed);
        let outcome = match spun {
            DrivenSpin::Found(r) => Ok(r),
            DrivenSpin::Aborted(()) => Err(WaitError::Aborted(())),
            _ => {
                let poll = spun.remaining_poll(poll);
                self.rings.bell().wait(|| self.take(&mut next, buf), removed, poll, deadline)
            }
        };
        match outcome {
            Ok(r) => r,
            Err(WaitError::Aborted(())) => Err(self.removed()),
            Err(WaitError::TimedOut) => Err(Error::Timeout {
                what: format!("data interrupt {}", self.seg.id()),
                waited_ms: timeout_ms(timeout),
            }),
        }
    }

    fn try_wait(&self, buf: &mut [u8]) -> Result<Option<usize>> {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        match self.take(&mut next, buf) {
            Some(taken) => taken.map(Some),
            None if self.seg.inner.is_removed() => Err(self.removed()),
            None => Ok(None),
        }
    }

    /// What a wait on this data interrupt fails with once it is removed.
    fn removed(&self) -> Error {
        Error::InterruptRemoved { number: self.seg.id() }
    }

    /// Takes the next message of the first non-empty ring from `next` on, if any.
    fn take(&self, next: &mut usize, buf: &mut [u8]) -> Option<Result<usize>> {
        let r = &self.rings;
        for i in r.active_slots(*next) {
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
            // entry + ENTRY_HEADER + len lies inside ring i, inside the map (len is bounded
            // above).
            r.slice().copy_to(entry + ENTRY_HEADER, &mut buf[..len]).expect("a ring entry lies inside its map");
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
}

impl RemoteDataInterrupt {
    pub(crate) fn connect(fabric: &Arc<FabricInner>, node: NodeId, number: u32, timeout: Timeout) -> Result<Self> {
        let seg =
            RemoteSegment::connect(fabric, kind::DATA_INTERRUPT, node, number, timeout).map_err(interrupt_error)?;
        Ok(RemoteDataInterrupt { seg })
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
        let inner = &self.seg.inner;
        inner.remote.send(data, timeout, inner.poll_time()).map_err(interrupt_error)
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
