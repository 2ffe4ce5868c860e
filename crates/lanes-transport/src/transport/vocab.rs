//! The vocabulary the fabric API, the transports and the control plane share: how long a
//! call may wait, what a map may do, what a sequence reports, which way a DMA goes, what
//! kind an object is. Defined here, at the lowest layer that needs them, and re-exported by
//! the fabric (`lanes::Timeout`, ...).

use std::time::Duration;

/// How long a blocking call may wait: a bound, or for ever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// Do not wait: fail at once if the condition does not hold.
    Immediate,
    /// Wait at most this long.
    After(Duration),
    /// Wait for ever.
    Infinite,
}

impl Timeout {
    /// From SISCI milliseconds: 0 is immediate, `0xFFFF_FFFF` infinite.
    pub fn from_millis(ms: u32) -> Timeout {
        match ms {
            0 => Timeout::Immediate,
            u32::MAX => Timeout::Infinite,
            ms => Timeout::After(Duration::from_millis(ms.into())),
        }
    }

    /// The instant a wait of this timeout started now ends; `None` for ever.
    pub fn deadline(self) -> Option<std::time::Instant> {
        match self {
            Timeout::Immediate => Some(std::time::Instant::now()),
            Timeout::After(d) => Some(std::time::Instant::now() + d),
            Timeout::Infinite => None,
        }
    }

    /// The bound in milliseconds, for error messages (0 unless `After`).
    pub fn as_millis(self) -> u64 {
        match self {
            Timeout::After(d) => d.as_millis() as u64,
            _ => 0,
        }
    }
}

/// Whether a map may be written. Read-only maps are enforced by the page tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapAccess {
    ReadOnly,
    ReadWrite,
}

/// The outcome of a sequence's start or check (`sci_sequence_status_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceStatus {
    /// Every access since the start reached the segment.
    Ok,
    /// A transient error; repeat the burst. (Not produced by shared memory.)
    Retriable,
    /// The segment is gone (owner died, removed it, or this side disconnected).
    NotRetriable,
    /// The check could not decide yet. (Not produced by shared memory.)
    Pending,
}

/// Which way a transfer goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaDirection {
    /// Local segment (or memory) to remote segment.
    Write,
    /// Remote segment to local segment (or memory) (`SCI_FLAG_DMA_READ`).
    Read,
}

/// One entry of a vector transfer (`dis_dma_vec_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaVec {
    pub size: u64,
    pub local_offset: u64,
    pub remote_offset: u64,
}

/// What kind of object a fabric object is (segment, interrupt, ...): named in object files,
/// export records and control messages. Each kind has its own file-name prefix.
pub mod kind {
    /// A memory segment.
    pub const SEGMENT: u32 = 1;
    /// A remote interrupt (doorbell without data).
    pub const INTERRUPT: u32 = 2;
    /// A data interrupt (doorbell with a message).
    pub const DATA_INTERRUPT: u32 = 3;
    /// A reflective-memory group (multicast segment).
    pub const REFLECTIVE: u32 = 4;

    /// The file-name prefix of a kind.
    pub fn prefix(kind: u32) -> &'static str {
        match kind {
            INTERRUPT => "int",
            DATA_INTERRUPT => "dint",
            REFLECTIVE => "refl",
            _ => "seg",
        }
    }

    /// A human name of a kind, for messages.
    pub fn name(kind: u32) -> &'static str {
        match kind {
            INTERRUPT => "interrupt",
            DATA_INTERRUPT => "data interrupt",
            REFLECTIVE => "reflective group",
            _ => "segment",
        }
    }

    /// Every kind, for listing and clean-up.
    pub const ALL: [u32; 4] = [SEGMENT, INTERRUPT, DATA_INTERRUPT, REFLECTIVE];
}
