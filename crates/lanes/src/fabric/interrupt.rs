//! Remote interrupts: one node wakes a thread of another, as a PCIe doorbell does.
//!
//! An interrupt is a fabric object whose data is one doorbell line: the doorbell words and
//! a count of triggers not yet consumed. **Triggers are counted**: a trigger that arrives
//! while nobody waits is kept, and each wait consumes exactly one, so no trigger is ever
//! lost and a million triggers make a million successful waits.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::events::{self, CallbackAction};
use super::local::LocalSegment;
use super::remote::RemoteSegment;
use super::{DrivenSpin, FabricInner, Timeout};
use crate::config::NodeId;
use crate::error::{Error, IoContext, Result};
use crate::platform::doorbell::WaitError;
use crate::transport::shm::interrupt::{BellPage, BELL_PAGE};
use crate::transport::shm::layout::kind;
use crate::transport::shm::remote::direct_mapping;
use crate::transport::MapAccess;
use crate::transport::RemoteObject;

/// Renames segment errors for interrupts.
pub(crate) fn interrupt_error(e: Error) -> Error {
    match e {
        Error::NoSuchSegment { node, segment } | Error::NotAvailable { node, segment } => {
            Error::NoSuchInterrupt { node, number: segment }
        }
        Error::SegmentIdInUse { node, segment } => Error::InterruptNumberInUse { node, number: segment },
        Error::SegmentLost { node, segment, reason } => Error::InterruptLost { node, number: segment, reason },
        other => other,
    }
}

/// An interrupt of this node that others trigger. Dropping it removes it.
#[derive(Debug)]
pub struct LocalInterrupt {
    inner: Arc<LocalInterruptInner>,
}

#[derive(Debug)]
struct LocalInterruptInner {
    seg: LocalSegment,
    page: BellPage,
}

impl LocalInterrupt {
    pub(crate) fn create(fabric: &Arc<FabricInner>, number: Option<u32>) -> Result<LocalInterrupt> {
        let seg = LocalSegment::create(fabric, kind::INTERRUPT, number, BELL_PAGE, None).map_err(interrupt_error)?;
        seg.prepare()?;
        seg.set_available()?;
        let page = BellPage::new(direct_mapping(&seg.inner.file, 0, BELL_PAGE, MapAccess::ReadWrite)?);
        Ok(LocalInterrupt { inner: Arc::new(LocalInterruptInner { seg, page }) })
    }

    /// The interrupt number peers connect to.
    pub fn number(&self) -> u32 {
        self.inner.seg.id()
    }

    /// The node it belongs to.
    pub fn node_id(&self) -> u32 {
        self.inner.seg.node_id()
    }

    /// Triggers received and not yet consumed by a wait.
    pub fn pending(&self) -> u64 {
        self.inner.page.pending().load(Ordering::SeqCst)
    }

    /// Sets how long waits spin before they sleep (default: `LANES_POLL_US`, 50 us).
    pub fn set_poll_time(&self, poll: Duration) {
        self.inner.seg.set_poll_time(poll);
    }

    /// Waits for a trigger and consumes it. Fails with [`Error::InterruptRemoved`] if the
    /// interrupt is removed meanwhile, or [`Error::Timeout`].
    pub fn wait(&self, timeout: Timeout) -> Result<()> {
        self.inner.wait(timeout)
    }

    /// Calls `cb` from a library thread once per trigger until it returns
    /// [`CallbackAction::Cancel`] or the interrupt is removed.
    pub fn on_trigger(&self, mut cb: impl FnMut() -> CallbackAction + Send + 'static) -> Result<()> {
        let inner = self.inner.clone();
        events::spawn_callback_thread("lanes-interrupt", move || inner.wait(Timeout::Infinite), move |()| cb())
            .context(|| "starting the interrupt callback thread".into())
    }

    /// Removes the interrupt: connected triggers fail from now on, waiters get an error.
    pub fn remove(&self) -> Result<()> {
        self.inner.seg.remove(true)?;
        // Waiters sleep on the interrupt's own doorbell: wake them to see the removal.
        self.inner.page.bell().ring();
        Ok(())
    }
}

impl LocalInterruptInner {
    fn wait(&self, timeout: Timeout) -> Result<()> {
        let poll = self.seg.inner.poll_time();
        let deadline = events::deadline(timeout);
        let removed = || self.seg.inner.is_removed().then_some(());
        let spun = self.seg.inner.fabric.spin_driving_progress(poll, deadline, || self.page.take_one(), removed);
        let outcome = match spun {
            DrivenSpin::Found(()) => Ok(()),
            DrivenSpin::Aborted(()) => Err(WaitError::Aborted(())),
            _ => self.page.bell().wait(|| self.page.take_one(), removed, spun.remaining_poll(poll), deadline),
        };
        match outcome {
            Ok(()) => Ok(()),
            Err(WaitError::Aborted(())) => Err(Error::InterruptRemoved { number: self.seg.id() }),
            Err(WaitError::TimedOut) => {
                Err(Error::Timeout { what: format!("interrupt {}", self.seg.id()), waited_ms: timeout_ms(timeout) })
            }
        }
    }
}

impl Drop for LocalInterrupt {
    fn drop(&mut self) {
        // Removal wakes a callback thread, which then lets go of the inner state.
        let _ = self.remove();
    }
}

pub(crate) fn timeout_ms(t: Timeout) -> u64 {
    t.as_millis()
}

/// A connection to another node's interrupt. Dropping it disconnects.
#[derive(Debug)]
pub struct RemoteInterrupt {
    seg: RemoteSegment,
}

impl RemoteInterrupt {
    pub(crate) fn connect(fabric: &Arc<FabricInner>, node: NodeId, number: u32, timeout: Timeout) -> Result<Self> {
        let seg = RemoteSegment::connect(fabric, kind::INTERRUPT, node, number, timeout).map_err(interrupt_error)?;
        Ok(RemoteInterrupt { seg })
    }

    /// The interrupt number.
    pub fn number(&self) -> u32 {
        self.seg.id()
    }

    /// The node that owns it.
    pub fn node_id(&self) -> u32 {
        self.seg.node_id()
    }

    /// Triggers the interrupt: one wait on the owner's side will return for it. Fails with
    /// [`Error::InterruptLost`] once the owner removed it or died. No system call unless a
    /// waiter sleeps.
    #[inline]
    pub fn trigger(&self) -> Result<()> {
        self.seg.inner.remote.trigger().map_err(interrupt_error)
    }

    /// `Ok` while the interrupt exists, else [`Error::InterruptLost`] with the reason.
    pub fn check(&self) -> Result<()> {
        self.seg.inner.check().map_err(interrupt_error)
    }

    /// Disconnects (`SCIDisconnectInterrupt`).
    pub fn disconnect(self) {
        drop(self)
    }
}
