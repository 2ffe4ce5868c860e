//! What a path implements: its client and peer sides (the traits the runner calls), what
//! set-up and a slice exchange, and the stamp and pattern its messages carry.

use crate::bench::wait::Waiter;
use crate::measure::ticks::TickHistogram;

/// Which measurement a slice is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Ping-pong round trips, each timed.
    Latency,
    /// One-directional streaming for a time slice.
    Throughput,
}

impl Kind {
    /// The word for it on the control channel.
    pub(crate) fn word(self) -> &'static str {
        match self {
            Kind::Latency => "lat",
            Kind::Throughput => "tput",
        }
    }
}

/// What both sides know when they set a path up.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SetupEnv {
    /// The largest message of the run, in bytes.
    pub max_size: usize,
}

/// What a throughput slice moved, as the client timed it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Streamed {
    /// Messages the receiver took in full.
    pub msgs: u64,
    /// Clock ticks from the first send until the receiver had taken the last message.
    pub ticks: u64,
}

/// A path's client side after set-up.
pub(crate) trait ClientPath {
    /// Readies shared state for a slice; called before the command goes to the peer (which is
    /// idle then), so plain stores suffice.
    fn prepare(&mut self, _kind: Kind, _size: usize) -> Result<(), String> {
        Ok(())
    }

    /// Round trips of `size`-byte messages until the clock passes `until` (ticks), at least
    /// one; records each round trip's ticks in `rec`. Ends by telling the peer to stop.
    fn latency(&mut self, size: usize, until: u64, rec: &mut TickHistogram, wait: &Waiter) -> Result<(), String>;

    /// Streams `size`-byte messages to the peer until the clock passes `until`, at least one,
    /// then waits until the peer has taken them all.
    fn throughput(&mut self, size: usize, until: u64, wait: &Waiter) -> Result<Streamed, String>;
}

/// A path's client side during set-up: its offer made, waiting for the peer's reply.
pub(crate) trait ClientOffer {
    /// One line of text for the peer.
    fn offer(&self) -> String;
    /// Completes set-up with the peer's one-line reply.
    fn accept(self: Box<Self>, reply: &str) -> Result<Box<dyn ClientPath>, String>;
}

/// A path's peer side after set-up.
pub(crate) trait PeerPath {
    /// Answers round trips of `size`-byte messages until the client says stop.
    fn latency(&mut self, size: usize, wait: &Waiter) -> Result<(), String>;
    /// Receives `size`-byte messages, copying each out, until the client closes the stream;
    /// returns how many arrived.
    fn throughput(&mut self, size: usize, wait: &Waiter) -> Result<u64, String>;
}

/// The message-stamp every throughput message carries in its first 4 bytes: its index.
#[inline(always)]
pub(crate) fn stamp(msg: &mut [u8], index: u64) {
    if let Some(w) = msg.get_mut(..4) {
        w.copy_from_slice(&(index as u32).to_le_bytes());
    }
}

/// Whether `msg` carries the stamp of message `index` (messages under 4 bytes carry none).
#[inline(always)]
pub(crate) fn stamped(msg: &[u8], index: u64) -> bool {
    msg.get(..4).is_none_or(|w| w == (index as u32).to_le_bytes())
}

/// A payload of `len` bytes with a recognisable pattern.
pub(crate) fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(7).wrapping_add(seed)) as u8).collect()
}
