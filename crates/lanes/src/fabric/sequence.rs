//! Sequences: did a burst of programmed I/O reach a live segment?

use super::map::MapOrigin;
use super::remote::RemoteState;
use crate::transport::{MapSequence, SequenceStatus, TrackedSequence};

/// Error checking across a burst of PIO. On shared memory checks cost two atomic loads: the
/// death watch thread and the owner's header publish failures; nothing on this path makes a
/// system call. On a map of an object on another host, `start` records the map's error
/// epoch and `check` flushes the map (bounded), then reports `Retriable` if any write or read
/// of the map failed since `start`, `NotRetriable` once the connection is lost.
#[derive(Debug, Clone)]
pub struct Sequence {
    origin: MapOrigin,
    /// The sequence of a tracked window (a map of an object on another host).
    tracked: Option<TrackedSequence>,
}

impl Sequence {
    /// A sequence of a map of `origin`, checked through `tracked` when the map's window is
    /// tracked.
    pub(crate) fn new(origin: MapOrigin, tracked: Option<TrackedSequence>) -> Self {
        Sequence { origin, tracked }
    }

    fn status(&self) -> SequenceStatus {
        match &self.origin {
            MapOrigin::Local(_) => SequenceStatus::Ok,
            MapOrigin::Remote(r) => match r.state() {
                RemoteState::Lost(_) => SequenceStatus::NotRetriable,
                RemoteState::Operational | RemoteState::NotOperational => SequenceStatus::Ok,
            },
        }
    }

    /// Starts a burst (`SCIStartSequence`).
    pub fn start(&self) -> SequenceStatus {
        if let Some(m) = &self.tracked {
            return MapSequence::start(m);
        }
        self.status()
    }

    /// Ends a burst: were all accesses since `start` good? (`SCICheckSequence`)
    pub fn check(&self) -> SequenceStatus {
        if let Some(m) = &self.tracked {
            return MapSequence::check(m);
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.status()
    }
}
