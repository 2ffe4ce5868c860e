//! The UDP streaming API: a block sent as datagrams, datagrams received into one block.
//!
//! The sender hands a large block and a datagram size; [`StreamSender::send_block`] sends
//! the block as a stream of ordinary UDP datagrams, with no per-datagram work for the
//! application. The receiver hands a large buffer; [`StreamReceiver::recv_block`] fills it
//! with the datagrams' payloads, headers stripped, back to back. Any UDP peer works at either
//! end: a plain UDP receiver gets ordinary datagrams, a plain sender's datagrams fill the
//! buffer.
//!
//! With [`SendOptions::sequence_header`] each datagram starts with a 16-byte header
//! ([`header`]: magic, stream id, sequence number), and a receiver with
//! [`RecvOptions::sequence_header`] strips it and reports missing sequence numbers (`gaps`)
//! and late arrivals (`reordered`).
//!
//! The kernel path is chosen at run time, the fastest that works, with fall-backs:
//!
//! | side | paths, fastest first |
//! |---|---|
//! | send | [`SendPath::Gso`] (`sendmmsg` of UDP GSO super-datagrams, `UDP_SEGMENT` cmsg), [`SendPath::Mmsg`] (`sendmmsg`, one message per datagram), [`SendPath::Plain`] (`sendmsg` per datagram) |
//! | receive | [`RecvPath::Gro`] (`UDP_GRO`: one `recvmsg` per coalesced super-datagram, its segment size in a cmsg), [`RecvPath::Mmsg`] (`recvmmsg` straight into the buffer), [`RecvPath::Plain`] (`recvmsg` per datagram) |
//!
//! When both ends use the API on one host, the datagrams go through a shared-memory ring
//! instead ([`shm`], [`SendPath::Shm`], [`RecvPath::Shm`]): the receiver publishes it, a
//! sender to a local address finds and checks it; either end may be a plain UDP peer, which
//! sees only ordinary datagrams.
//!
//! A path is forced with the options' `path`, or for a whole process with the environment
//! variable `LANES_UDPSTREAM_PATH=plain|mmsg|gso|uring|shm` (`gso`, `gro`, `fast` and
//! `kernel` all mean the fastest kernel path of each side, without the ring; `uring`: GSO /
//! GRO through io_uring ([`SendPath::Uring`], [`RecvPath::Uring`]) where the kernel allows
//! it; `shm`, `auto` or unset: the ring where both ends have it, else the fastest kernel
//! path). See docs/udp-stream.md.

mod ffi;
pub mod header;
mod recv;
mod send;
pub mod shm;
mod sys;
mod uring;

use std::io;
use std::time::Duration;

pub use recv::StreamReceiver;
pub use send::StreamSender;

/// The largest UDP payload over IPv4 (65535 - 20 - 8).
pub const MAX_UDP_PAYLOAD: usize = 65507;

/// The environment variable that forces a path in every sender and receiver of a process
/// that does not name one in its options.
pub const PATH_ENV: &str = "LANES_UDPSTREAM_PATH";

/// How a sender hands datagrams to the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SendPath {
    /// `sendmmsg` of UDP GSO super-datagrams: each message carries up to 64 datagrams and a
    /// `UDP_SEGMENT` cmsg; the kernel (or the NIC) cuts it into datagrams.
    Gso,
    /// `sendmmsg`: many datagrams per system call, one message each.
    Mmsg,
    /// One `sendmsg` per datagram.
    Plain,
    /// The shared-memory ring of a receiver on this host that uses the API ([`shm`]); where
    /// there is none (or it goes away), [`SendPath::Gso`] with its fall-backs.
    Shm,
    /// The GSO messages handed over as one io_uring submission of linked `SENDMSG` entries
    /// (where io_uring is refused: [`SendPath::Gso`]).
    Uring,
}

/// How a receiver takes datagrams from the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecvPath {
    /// `UDP_GRO`: the kernel hands over coalesced super-datagrams, one `recvmsg` each, with
    /// the segment size in a cmsg.
    Gro,
    /// `recvmmsg` straight into the caller's buffer, many datagrams per system call.
    Mmsg,
    /// One `recvmsg` per datagram.
    Plain,
    /// A shared-memory ring published for senders on this host that use the API ([`shm`]),
    /// drained together with the socket ([`RecvPath::Gro`] with its fall-back).
    Shm,
    /// `UDP_GRO`, the receives handed over as one io_uring submission of linked `RECVMSG`
    /// entries (where io_uring is refused: [`RecvPath::Gro`]).
    Uring,
}

impl SendPath {
    pub fn name(self) -> &'static str {
        match self {
            SendPath::Gso => "gso",
            SendPath::Mmsg => "mmsg",
            SendPath::Plain => "plain",
            SendPath::Shm => "shm",
            SendPath::Uring => "uring",
        }
    }
}

impl RecvPath {
    pub fn name(self) -> &'static str {
        match self {
            RecvPath::Gro => "gro",
            RecvPath::Mmsg => "mmsg",
            RecvPath::Plain => "plain",
            RecvPath::Shm => "shm",
            RecvPath::Uring => "uring",
        }
    }
}

/// The path level asked for by [`PATH_ENV`]: 0 plain, 1 mmsg, 2 fastest kernel path, 3 shm
/// (with the kernel's fastest as fall-back), 4 io_uring; `None` when unset or `auto` (as 3).
fn env_level() -> io::Result<Option<u8>> {
    match std::env::var(PATH_ENV) {
        Err(_) => Ok(None),
        Ok(v) => match v.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(None),
            "plain" => Ok(Some(0)),
            "mmsg" => Ok(Some(1)),
            "gso" | "gro" | "fast" | "kernel" => Ok(Some(2)),
            "shm" => Ok(Some(3)),
            "uring" | "io_uring" => Ok(Some(4)),
            other => Err(invalid(format!("{PATH_ENV}={other:?}: expected plain, mmsg, gso, uring, shm or auto"))),
        },
    }
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

/// What a sender does.
#[derive(Clone, Debug)]
pub struct SendOptions {
    /// Payload bytes per datagram (the last datagram of a block may be shorter): 1 to
    /// 65507, less the 16-byte header when there is one.
    pub datagram_size: usize,
    /// Put the sequence header ([`header`]) in front of each datagram's payload.
    pub sequence_header: bool,
    /// The header's stream id (default: made from the process id and the clock).
    pub stream_id: Option<u32>,
    /// Force a path (default: [`PATH_ENV`], else the fastest that works).
    pub path: Option<SendPath>,
    /// SO_SNDBUF asked for (SO_SNDBUFFORCE first, which needs CAP_NET_ADMIN).
    pub socket_buffer: usize,
    /// On the shared-memory path, how long `send_block` waits for room in a full ring while
    /// the receiver takes nothing; then the datagrams that do not fit are dropped (counted
    /// in [`SendReport::dropped`]), as a full socket buffer would lose them (default 250 ms).
    pub ring_wait: Duration,
}

impl SendOptions {
    pub fn new(datagram_size: usize) -> SendOptions {
        SendOptions {
            datagram_size,
            sequence_header: false,
            stream_id: None,
            path: None,
            socket_buffer: 4 << 20,
            ring_wait: Duration::from_millis(250),
        }
    }

    pub fn with_sequence_header(mut self) -> SendOptions {
        self.sequence_header = true;
        self
    }

    pub fn with_path(mut self, path: SendPath) -> SendOptions {
        self.path = Some(path);
        self
    }
}

/// What a receiver does.
#[derive(Clone, Debug)]
pub struct RecvOptions {
    /// The largest payload of one datagram (header not counted); longer datagrams are
    /// dropped and counted as `truncated`. A block is filled until less than this is left.
    pub datagram_size: usize,
    /// Expect the sequence header ([`header`]) and strip it; datagrams without one are
    /// dropped and counted as `rejected`.
    pub sequence_header: bool,
    /// Once the first datagram of a block has arrived, the block ends when no datagram came
    /// for this long (default 5 ms).
    pub idle: Duration,
    /// Force a path (default: [`PATH_ENV`], else the fastest that works).
    pub path: Option<RecvPath>,
    /// SO_RCVBUF asked for (SO_RCVBUFFORCE first, which needs CAP_NET_ADMIN). A sender
    /// faster than the receiver loses datagrams once this is full.
    pub socket_buffer: usize,
    /// The shared-memory ring's data bytes (rounded up to a power of two, 256 KiB to 1 GiB;
    /// default 8 MiB).
    pub ring_capacity: usize,
}

impl RecvOptions {
    pub fn new(datagram_size: usize) -> RecvOptions {
        RecvOptions {
            datagram_size,
            sequence_header: false,
            idle: Duration::from_millis(5),
            path: None,
            socket_buffer: 16 << 20,
            ring_capacity: 8 << 20,
        }
    }

    pub fn with_sequence_header(mut self) -> RecvOptions {
        self.sequence_header = true;
        self
    }

    pub fn with_path(mut self, path: RecvPath) -> RecvOptions {
        self.path = Some(path);
        self
    }
}

/// What one [`StreamSender::send_block`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendReport {
    /// Datagrams sent.
    pub datagrams: u64,
    /// Payload bytes sent (the block's length; headers not counted).
    pub bytes: u64,
    /// System calls made.
    pub system_calls: u64,
    /// The path used (after any fall-back).
    pub path: SendPath,
    /// The first sequence number used (with the header, else the datagram counter).
    pub first_sequence: u64,
    /// Datagrams dropped because the receiver's shared-memory ring stayed full for
    /// [`SendOptions::ring_wait`] (their sequence numbers are used: the receiver sees gaps).
    pub dropped: u64,
}

/// What one [`StreamReceiver::recv_block`] or [`StreamReceiver::try_recv_block`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvReport {
    /// Payload bytes written to the front of the buffer.
    pub bytes: usize,
    /// Datagrams whose payload is in those bytes.
    pub datagrams: u64,
    /// Sequence numbers skipped over (datagrams lost, or not yet arrived), with the header.
    pub gaps: u64,
    /// Datagrams that arrived after a later sequence number (their payload is placed in
    /// arrival order), with the header.
    pub reordered: u64,
    /// Datagrams dropped for lacking a valid header (with the header only).
    pub rejected: u64,
    /// Datagrams dropped for a payload longer than `datagram_size`.
    pub truncated: u64,
    /// System calls made (receives, and setting SO_RCVTIMEO when the wait changes).
    pub system_calls: u64,
    /// The path used.
    pub path: RecvPath,
    /// The stream id of the last datagram with a header.
    pub stream_id: Option<u32>,
    /// The sequence number the receiver expects next from that stream.
    pub next_sequence: Option<u64>,
}

impl RecvReport {
    fn new(path: RecvPath) -> RecvReport {
        RecvReport {
            bytes: 0,
            datagrams: 0,
            gaps: 0,
            reordered: 0,
            rejected: 0,
            truncated: 0,
            system_calls: 0,
            path,
            stream_id: None,
            next_sequence: None,
        }
    }
}
