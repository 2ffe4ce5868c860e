//! The fabric's one error type. The C layer maps each variant onto one `sci_error_t`.

use std::io;
use std::path::PathBuf;

use crate::platform::SliceError;

/// Result of every fallible fabric call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, with enough context to act on it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A node id that no fabric accepts (not a multiple of 4, out of range, reserved).
    #[error("invalid node id {value}: {reason}")]
    InvalidNodeId { value: String, reason: &'static str },

    /// The configuration file could not be read or does not make sense.
    #[error("configuration {path}: {message}")]
    Config { path: PathBuf, message: String },

    /// A segment id that a live segment of this node already holds.
    #[error("segment id {segment:#x} is in use on node {node}")]
    SegmentIdInUse { node: u32, segment: u32 },

    /// No segment with this id exists on that node (or its owner is gone).
    #[error("no segment {segment:#x} on node {node}")]
    NoSuchSegment { node: u32, segment: u32 },

    /// The segment exists but its owner has not made it available: the connection is refused.
    #[error("segment {segment:#x} on node {node} is not available (connection refused)")]
    NotAvailable { node: u32, segment: u32 },

    /// A wait ran out of time.
    #[error("timed out after {waited_ms} ms waiting for {what}")]
    Timeout { what: String, waited_ms: u64 },

    /// An offset/length pair that does not lie inside the segment or map.
    #[error("range {offset}+{len} is outside the {size}-byte {what}")]
    OutOfRange { offset: u64, len: u64, size: u64, what: &'static str },

    /// An offset that is not aligned as the access needs.
    #[error("offset {offset} is not aligned to {align} bytes")]
    Misaligned { offset: u64, align: u64 },

    /// A size of zero, or one the platform cannot back.
    #[error("invalid size {size}: {reason}")]
    InvalidSize { size: u64, reason: &'static str },

    /// Removal refused while peers are connected (use force to remove anyway).
    #[error("segment {segment:#x} on node {node} has {connections} connected peer(s)")]
    SegmentBusy { node: u32, segment: u32, connections: usize },

    /// An operation that needs a prepared segment.
    #[error("segment {segment:#x} is not prepared")]
    NotPrepared { segment: u32 },

    /// A segment file whose header is not one this library wrote: never trusted, never mapped.
    #[error("corrupt segment file {path}: {reason}")]
    CorruptSegment { path: PathBuf, reason: String },

    /// All connection slots of the segment are taken.
    #[error("segment {segment:#x} on node {node} has no free connection slot")]
    TooManyConnections { node: u32, segment: u32 },

    /// A write through a read-only map.
    #[error("map is read-only")]
    ReadOnly,

    /// The segment's owner died or removed it; the connection is dead.
    #[error("segment {segment:#x} on node {node} was lost ({reason})")]
    SegmentLost { node: u32, segment: u32, reason: &'static str },

    /// No interrupt with this number exists on that node (or its owner is gone).
    #[error("no interrupt {number} on node {node}")]
    NoSuchInterrupt { node: u32, number: u32 },

    /// An interrupt number that a live interrupt of this node already holds.
    #[error("interrupt number {number} is in use on node {node}")]
    InterruptNumberInUse { node: u32, number: u32 },

    /// The interrupt's owner removed it or died, or this side disconnected.
    #[error("interrupt {number} on node {node} is gone ({reason})")]
    InterruptLost { node: u32, number: u32, reason: &'static str },

    /// A wait on an interrupt that was removed meanwhile.
    #[error("interrupt {number} was removed")]
    InterruptRemoved { number: u32 },

    /// A data interrupt's receive queue stayed full for the whole timeout; nothing was sent.
    #[error("the receive queue of data interrupt {number} on node {node} stayed full for {waited_ms} ms")]
    QueueFull { node: u32, number: u32, waited_ms: u64 },

    /// A received message does not fit the buffer; it stays queued for a larger one.
    #[error("a {needed}-byte message does not fit the {given}-byte buffer (it is kept)")]
    BufferTooSmall { needed: usize, given: usize },

    /// A data interrupt payload over the maximum.
    #[error("payload of {len} bytes exceeds the maximum of {max}")]
    PayloadTooLarge { len: usize, max: usize },

    /// More DMA entries than the queue was created for are outstanding.
    #[error("{requested} more DMA entries do not fit: {outstanding} outstanding of at most {max}")]
    TooManyEntries { requested: usize, outstanding: usize, max: usize },

    /// A DMA transfer could not complete (its remote segment was lost); the queue is in error.
    #[error("DMA transfer failed: {reason}")]
    DmaFailed { reason: String },

    /// No live reflective group has this id.
    #[error("no reflective group {group}")]
    NoSuchGroup { group: u32 },

    /// A live reflective group already has this id.
    #[error("reflective group {group} exists already (created by node {node})")]
    GroupInUse { group: u32, node: u32 },

    /// The fabric already has its maximum number of reflective groups.
    #[error("the fabric has {max} reflective groups already, the most it supports")]
    TooManyGroups { max: usize },

    /// The group's creator did not choose this node as a receiver.
    #[error("node {node} is not a receiver of reflective group {group}")]
    NotAReceiver { node: u32, group: u32 },

    /// A peer wrote something into shared memory that no correct peer writes.
    #[error("malformed data from a peer: {0}")]
    Malformed(String),

    /// The call does not apply to this object in its present state.
    #[error("illegal operation: {0}")]
    IllegalOperation(&'static str),

    /// A libfabric call failed (the `ofi` transport): the call, libfabric's code and its text.
    #[error("{call} failed: {message} (-{code})")]
    Ofi { call: &'static str, code: i32, message: String },

    /// The node's host cannot be reached now (its daemon is suspect or lost, or was never
    /// heard from).
    #[error("node {node} cannot be reached: {reason}")]
    NodeUnreachable { node: u32, reason: String },

    /// This host's daemon could not be asked, or answered with something unexpected.
    #[error("cluster control plane: {0}")]
    Cluster(String),

    /// A system call failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },
}

impl Error {
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }

    /// The error of a refused access to shared memory (`what`: the map, buffer or object):
    /// a range that does not fit, a misaligned scalar, a store into read-only memory.
    pub fn shared(e: SliceError, what: &'static str) -> Self {
        match e {
            SliceError::OutOfBounds { offset, len, size } => {
                Error::OutOfRange { offset: offset as u64, len: len as u64, size: size as u64, what }
            }
            SliceError::Misaligned { offset, align } => {
                Error::Misaligned { offset: offset as u64, align: align as u64 }
            }
            SliceError::ReadOnly => Error::ReadOnly,
            SliceError::Overlap => Error::IllegalOperation("a copy between overlapping ranges"),
        }
    }
}

/// Adds a human context to `io::Result`s.
pub trait IoContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| Error::io(what(), e))
    }
}
