//! Events: what local and remote segments report, and the callback threads that deliver them.

use std::time::{Duration, Instant};

use super::Timeout;
use crate::platform::doorbell::default_poll_time;

/// What a callback asks for next (`sci_callback_action_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallbackAction {
    /// Keep calling.
    Continue,
    /// Remove the callback.
    Cancel,
}

/// An event of a local segment (`SCI_CB_CONNECT`, `SCI_CB_DISCONNECT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalEvent {
    /// A peer connected.
    Connected { node: u32, pid: u32 },
    /// A peer disconnected; `died` when it went away without disconnecting.
    Disconnected { node: u32, pid: u32, died: bool },
}

/// An event of a remote segment (`SCI_CB_OPERATIONAL`, `SCI_CB_NOT_OPERATIONAL`, `SCI_CB_LOST`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteEvent {
    /// The owner made the segment available again.
    Operational,
    /// The owner made the segment unavailable; maps still work.
    NotOperational,
    /// The segment is gone for good.
    Lost(super::LossReason),
}

/// Converts a timeout into a deadline.
pub(crate) fn deadline(timeout: Timeout) -> Option<Instant> {
    timeout.deadline()
}

/// An object's spin time for waits: the process default (`LANES_POLL_US`) unless set. An
/// atomic, because every wait reads it.
#[derive(Debug)]
pub(crate) struct PollTime(std::sync::atomic::AtomicU64);

impl PollTime {
    const DEFAULT: u64 = u64::MAX;

    pub fn new() -> Self {
        PollTime(std::sync::atomic::AtomicU64::new(Self::DEFAULT))
    }

    pub fn set(&self, poll: Duration) {
        let ns = u64::try_from(poll.as_nanos()).unwrap_or(Self::DEFAULT - 1).min(Self::DEFAULT - 1);
        self.0.store(ns, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn get(&self) -> Duration {
        match self.0.load(std::sync::atomic::Ordering::Relaxed) {
            Self::DEFAULT => default_poll_time(),
            ns => Duration::from_nanos(ns),
        }
    }
}

/// Starts a library thread that calls `cb` with every value `next` yields, until `cb`
/// cancels or `next` fails (object removed, lost, disconnected).
pub(crate) fn spawn_callback_thread<T: Send + 'static, E>(
    name: &str,
    mut next: impl FnMut() -> Result<T, E> + Send + 'static,
    mut cb: impl FnMut(T) -> CallbackAction + Send + 'static,
) -> std::io::Result<()> {
    crate::platform::threads::spawn(name, move || {
        while let Ok(v) = next() {
            // A panicking callback must not take the process down with it; it is cancelled.
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| cb(v))) {
                Ok(CallbackAction::Continue) => {}
                Ok(CallbackAction::Cancel) | Err(_) => break,
            }
        }
    })?;
    Ok(())
}
