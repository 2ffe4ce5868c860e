//! The control protocol: what daemons say to each other over TCP and what processes say to
//! their daemon over `<fabric dir>/daemon.sock`.
//!
//! Every message is one frame: a 12-byte header — magic `LNSC`, protocol version (u16, big
//! endian), flags (u16, zero), payload length (u32, big endian) — then the payload, one
//! message in JSON. The control plane carries a few hundred small messages per second at
//! most, so a self-describing encoding that `socat` and a human can read costs nothing that
//! matters. A frame longer than [`MAX_FRAME`], a wrong magic or version, or a payload that is
//! not a message is a [`FrameError`]: the receiver logs it and closes that connection. No
//! input makes the reader panic or allocate more than one maximal frame.

use std::fmt;
use std::io::{self, Read, Write};

use std::net::{IpAddr, SocketAddr};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::exports::ExportRecord;
use crate::transport::vocab::kind;

/// The frame magic.
pub const MAGIC: [u8; 4] = *b"LNSC";
/// The protocol version this build speaks; a peer speaking another is refused at its hello.
/// Version 2 added the daemon-restart messages (`Holding`, `Adopt`) and per-claim keys;
/// version 3 the hosts' addresses at hello and the pairing of cross-host socket halves.
pub const PROTOCOL_VERSION: u16 = 3;
/// Bytes of the frame header.
pub const HEADER_LEN: usize = 12;
/// The largest payload accepted.
pub const MAX_FRAME: usize = 64 * 1024;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The stream does not start a frame where one must start.
    #[error("bad frame magic {0:02x?} (not a Lanes control connection)")]
    BadMagic([u8; 4]),
    /// The peer speaks another protocol version.
    #[error("protocol version {got}, this daemon speaks {PROTOCOL_VERSION}")]
    Version { got: u16 },
    /// Flags this version does not define.
    #[error("unknown frame flags {0:#06x}")]
    Flags(u16),
    /// A frame longer than [`MAX_FRAME`].
    #[error("frame of {len} bytes exceeds the {MAX_FRAME}-byte limit")]
    Oversized { len: u64 },
    /// A payload that is not a message of the expected kind.
    #[error("malformed message: {0}")]
    Malformed(String),
}

/// Encodes `msg` as one frame.
pub fn encode<T: Serialize>(msg: &T) -> Result<Vec<u8>, FrameError> {
    let payload = serde_json::to_vec(msg).map_err(|e| FrameError::Malformed(e.to_string()))?;
    if payload.len() > MAX_FRAME {
        return Err(FrameError::Oversized { len: payload.len() as u64 });
    }
    let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&PROTOCOL_VERSION.to_be_bytes());
    frame.extend_from_slice(&0u16.to_be_bytes());
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&payload);
    Ok(frame)
}

/// Writes `msg` as one frame. A failed or timed-out write may leave part of a frame on the
/// stream: the caller must close the connection after any error.
pub fn write_message<W: Write, T: Serialize>(w: &mut W, msg: &T) -> io::Result<()> {
    let frame = encode(msg).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    w.write_all(&frame)?;
    w.flush()
}

/// Reassembles frames from a stream read in pieces (reads may time out between pieces
/// without losing data).
#[derive(Debug, Default)]
pub struct FrameReader {
    buf: Vec<u8>,
}

/// What one [`FrameReader::fill`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Fill {
    /// Some bytes arrived.
    Data,
    /// The peer closed the stream.
    Closed,
    /// Nothing arrived before the stream's read timeout.
    Idle,
}

impl FrameReader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads what the stream has (one `read`), waiting at most the stream's read timeout.
    pub fn fill<R: Read>(&mut self, r: &mut R) -> io::Result<Fill> {
        let mut chunk = [0u8; 4096];
        // Never read past one maximal frame: a peer that floods is cut off by `next`.
        let want = (HEADER_LEN + MAX_FRAME).saturating_sub(self.buf.len()).clamp(1, chunk.len());
        match r.read(&mut chunk[..want]) {
            Ok(0) => Ok(Fill::Closed),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(Fill::Data)
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => Ok(Fill::Idle),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(Fill::Idle),
            Err(e) => Err(e),
        }
    }

    /// Takes the next complete message out of the buffer, if one is there.
    pub fn next_message<T: DeserializeOwned>(&mut self) -> Result<Option<T>, FrameError> {
        if self.buf.len() < HEADER_LEN {
            // Check the magic as soon as it is there, so that a stranger is refused early.
            let n = self.buf.len().min(4);
            if self.buf[..n] != MAGIC[..n] {
                let mut got = [0u8; 4];
                got[..n].copy_from_slice(&self.buf[..n]);
                return Err(FrameError::BadMagic(got));
            }
            return Ok(None);
        }
        let h = &self.buf[..HEADER_LEN];
        let magic: [u8; 4] = [h[0], h[1], h[2], h[3]];
        if magic != MAGIC {
            return Err(FrameError::BadMagic(magic));
        }
        let version = u16::from_be_bytes([h[4], h[5]]);
        if version != PROTOCOL_VERSION {
            return Err(FrameError::Version { got: version });
        }
        let flags = u16::from_be_bytes([h[6], h[7]]);
        if flags != 0 {
            return Err(FrameError::Flags(flags));
        }
        let len = u32::from_be_bytes([h[8], h[9], h[10], h[11]]) as usize;
        if len > MAX_FRAME {
            return Err(FrameError::Oversized { len: len as u64 });
        }
        if self.buf.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let parsed = serde_json::from_slice::<T>(&self.buf[HEADER_LEN..HEADER_LEN + len])
            .map_err(|e| FrameError::Malformed(e.to_string()));
        self.buf.drain(..HEADER_LEN + len);
        parsed.map(Some)
    }
}

// ---------------------------------------------------------------------------------------
// What the messages talk about
// ---------------------------------------------------------------------------------------

/// The kinds of fabric object a lookup can ask about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ObjectKind {
    Segment,
    Interrupt,
    DataInterrupt,
    /// A reflective group's object on its creator's host (roster at the end of its data).
    Reflective,
}

impl ObjectKind {
    /// The object kind of the shared-memory layout.
    pub fn layout_kind(self) -> u32 {
        match self {
            ObjectKind::Segment => kind::SEGMENT,
            ObjectKind::Interrupt => kind::INTERRUPT,
            ObjectKind::DataInterrupt => kind::DATA_INTERRUPT,
            ObjectKind::Reflective => kind::REFLECTIVE,
        }
    }

    /// The kind of a shared-memory layout kind (none for kinds no lookup names).
    #[cfg_attr(not(feature = "ofi"), allow(dead_code))] // the ofi transport asks it
    pub fn from_layout_kind(layout_kind: u32) -> Option<ObjectKind> {
        match layout_kind {
            kind::SEGMENT => Some(ObjectKind::Segment),
            kind::INTERRUPT => Some(ObjectKind::Interrupt),
            kind::DATA_INTERRUPT => Some(ObjectKind::DataInterrupt),
            kind::REFLECTIVE => Some(ObjectKind::Reflective),
            _ => None,
        }
    }
}

impl fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ObjectKind::Segment => "segment",
            ObjectKind::Interrupt => "interrupt",
            ObjectKind::DataInterrupt => "data interrupt",
            ObjectKind::Reflective => "reflective group",
        })
    }
}

/// What a daemon knows of a host, as seen from that daemon.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HostState {
    /// Not heard from since this daemon started.
    Unknown,
    /// Heartbeats arrive.
    Operational,
    /// Silent for `suspect_after`, or its connection failed: work towards it fails.
    Suspect,
    /// Silent for `lost_after`, or its daemon restarted: what it served is gone.
    Lost,
}

impl fmt::Display for HostState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HostState::Unknown => "unknown",
            HostState::Operational => "operational",
            HostState::Suspect => "suspect",
            HostState::Lost => "lost",
        })
    }
}

/// A fabric object found by a lookup.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectInfo {
    pub node: u32,
    pub kind: ObjectKind,
    pub id: u32,
    /// The host whose fabric directory holds it.
    pub host: String,
    /// Data bytes.
    pub size: u64,
    /// Its owner made it available: connections are accepted.
    pub available: bool,
    /// The owner's pid on `host`.
    pub owner_pid: u32,
}

/// A connection slot claimed in an object's header for a process on another host (or on
/// this one, when it reaches the object over libfabric), with what the owner exported.
/// The slot stays claimed until the grant is released: by [`Request::Disconnect`], when the
/// requesting process's connection to its daemon closes, or when its host is lost.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The object, as a lookup would describe it.
    pub info: ObjectInfo,
    /// The owner's export record (endpoint, key, address, epoch).
    pub export: ExportRecord,
    /// The connection slot claimed in the object's header.
    pub slot: u32,
    /// Names the grant in [`Request::Disconnect`] and [`PeerMessage::Release`].
    pub grant: u64,
}

/// A live reflective group, as the daemon of its creator's host sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupInfo {
    /// The creator's node.
    pub node: u32,
    /// The group id.
    pub id: u32,
    /// The creator's host.
    pub host: String,
}

/// Whether a node is there: its host's state and the processes acting as it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeProbe {
    pub node: u32,
    pub host: String,
    pub host_state: HostState,
    /// Live processes acting as the node on its host.
    pub processes: u32,
}

impl NodeProbe {
    /// The node can be reached and some process acts as it.
    pub fn is_up(&self) -> bool {
        self.host_state == HostState::Operational && self.processes > 0
    }
}

/// One host as a daemon sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStatus {
    pub name: String,
    pub address: String,
    pub nodes: Vec<u32>,
    /// The daemon answering runs on this host.
    pub local: bool,
    pub state: HostState,
    /// How long the host has been in `state`, in milliseconds.
    pub state_for_ms: u64,
    /// Milliseconds since a frame last came from the host's daemon, if one ever did.
    pub last_heard_ms: Option<u64>,
}

/// A change of a node's reachability, relayed to subscribed processes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeEvent {
    pub node: u32,
    pub host: String,
    pub state: HostState,
    pub previous: HostState,
    /// Why, in words ("no heartbeat for 512 ms", "connection closed by peer").
    pub reason: String,
}

/// What became of a granted object, as its owner's daemon sees it: sent to the grant's
/// holder when it changes ([`PeerMessage::GrantStatus`], [`Reply::GrantStatus`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GrantStatus {
    /// The owner offers it (as when it was granted).
    Available,
    /// The owner made it unavailable; it may make it available again.
    Unavailable,
    /// The owner removed it: final.
    Removed,
    /// The owner process died: final.
    OwnerDied,
    /// The granting host's daemon (restarted) found no such grant to take over: final.
    Forgotten,
}

impl GrantStatus {
    /// No later status follows this one.
    pub fn is_final(self) -> bool {
        matches!(self, GrantStatus::Removed | GrantStatus::OwnerDied | GrantStatus::Forgotten)
    }
}

/// Why a daemon could not answer a question.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "refusal", rename_all = "kebab-case")]
pub enum Refusal {
    /// The node's host has no such object, or only a removed one or one of a dead owner.
    #[error("no {kind} {id:#x} on node {node} (host {host})")]
    NotFound { node: u32, kind: ObjectKind, id: u32, host: String },
    /// The host is not Operational: nothing can be asked of it now.
    #[error("host {host} unreachable (node {node}; its daemon's link is {state})")]
    HostUnreachable { node: u32, host: String, state: HostState },
    /// The host answers but its daemon is away (restarting): nothing can be asked of it
    /// until it is back; connections to it live on.
    #[error("host {host} daemon restarting (node {node}): ask again when it is back")]
    DaemonRestarting { node: u32, host: String },
    /// The host's daemon did not answer within the caller's timeout.
    #[error("host {host} did not answer within {waited_ms} ms")]
    Timeout { host: String, waited_ms: u64 },
    /// The object exists but its owner has not made it available, or has not exported it for
    /// remote access (yet): worth retrying.
    #[error("{kind} {id:#x} on node {node} (host {host}) is not available")]
    NotAvailable { node: u32, kind: ObjectKind, id: u32, host: String },
    /// Every connection slot of the object is held by a live peer.
    #[error("{kind} {id:#x} on node {node} (host {host}) has no free connection slot")]
    TooManyConnections { node: u32, kind: ObjectKind, id: u32, host: String },
    /// The object file is not one Lanes wrote.
    #[error("{kind} {id:#x} on node {node} is corrupt: {reason}")]
    Corrupt { node: u32, kind: ObjectKind, id: u32, reason: String },
    /// The daemon serves as many processes as it will.
    #[error("the daemon is busy: {reason}")]
    Busy { reason: String },
    /// Anything else, in words.
    #[error("{reason}")]
    Failed { reason: String },
}

/// A question one daemon forwards to the daemon of the host that can answer it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "query", rename_all = "kebab-case")]
pub enum Query {
    /// Does `node` have object `id` of `kind`; is it available; how large is it.
    Lookup { node: u32, kind: ObjectKind, id: u32 },
    /// How many live processes act as `node`.
    Probe { node: u32 },
    /// Claim a connection slot of object `id` of `kind` on `node` for a process acting as
    /// `peer_node` on `peer_host` (the asking daemon's host).
    Connect { node: u32, kind: ObjectKind, id: u32, peer_node: u32, peer_host: String },
    /// The live reflective groups of the receiver's host.
    Groups,
}

/// The answer to a [`Query`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "kebab-case")]
pub enum Answer {
    Object { info: ObjectInfo },
    Processes { count: u32 },
    Granted { grant: Grant },
    Refused { refusal: Refusal },
    Groups { groups: Vec<GroupInfo> },
}

// ---------------------------------------------------------------------------------------
// Daemon to daemon (TCP)
// ---------------------------------------------------------------------------------------

/// A grant as its holder knows it, for a restarted daemon to take over.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldGrant {
    pub grant: u64,
    pub node: u32,
    pub kind: ObjectKind,
    pub id: u32,
    pub slot: u32,
    pub peer_node: u32,
}

/// What daemons say to each other on their control connection.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum PeerMessage {
    /// First frame in each direction. `boot` is random per daemon start: a changed value
    /// means the host's daemon restarted. With a cluster secret (`super::secret`), `nonce`
    /// is the sender's challenge, and the acceptor's hello carries its `proof` (the answer
    /// to the dialler's challenge); the dialler answers with [`PeerMessage::Auth`].
    Hello {
        version: u16,
        host: String,
        boot: u64,
        nodes: Vec<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nonce: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        proof: Option<String>,
        /// The host's own epoch: its kernel's boot id and the fabric directory's instance,
        /// unchanged by a daemon restart. A new `boot` with the same `host_epoch` is a
        /// restarted daemon on a host whose processes may live on (reconciled, not Lost).
        #[serde(default, skip_serializing_if = "String::is_empty")]
        host_epoch: String,
        /// The host's interface addresses (not loopback nor link-local), as its daemon
        /// found them at this hello: which TCP peers are on that host. Believed only on
        /// an authenticated link, and never for an address lanes.toml gives another host.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        addresses: Vec<IpAddr>,
    },
    /// The dialler's answer to the acceptor's challenge, right after the hellos.
    Auth {
        proof: String,
    },
    /// Sent every `heartbeat_ms`; any frame counts as a sign of life.
    Heartbeat,
    /// A question for the receiver's fabric directory; answered with the same `id`.
    Query {
        id: u64,
        query: Query,
    },
    Answer {
        id: u64,
        answer: Answer,
    },
    /// The grant's requester is done with it (disconnected, exited or died): release its
    /// slot. Fire and forget; an unknown grant is ignored.
    Release {
        grant: u64,
        /// The holder went away without disconnecting: the owner sees it die.
        #[serde(default)]
        died: bool,
    },
    /// What became of the object of `grant`, which the receiver's host holds: sent by the
    /// owner's daemon when it changes. Fire and forget; an unknown grant is ignored.
    GrantStatus {
        grant: u64,
        status: GrantStatus,
    },
    /// Every grant of the receiver's host that the sender's processes hold, sent once per
    /// connection (by a restarted daemon once its processes had time to register again).
    /// The receiver takes over the slots it does not know yet (its daemon restarted) and
    /// releases, as their holders' deaths, those granted to the sender on an earlier
    /// connection that the list leaves out.
    Holding {
        grants: Vec<HeldGrant>,
    },
    /// A TCP socket half of a process on the sender's host whose peer is on the receiver's
    /// host (registered with the sender's daemon and vouched for by it): the receiver
    /// matches it against its own halves by mirrored tuple. Also how a half's state is
    /// told again (an unchanged half sent twice changes nothing).
    SocketHalf {
        half: WireHalf,
    },
    /// Every half of the sender's host whose peer is on the receiver's host, sent on each
    /// new connection in chunks (`more` on all but the last): the receiver replaces what it
    /// knew of the sender's halves with the list, so a half withdrawn while the link was
    /// down is gone on the other side too.
    SocketSync {
        halves: Vec<WireHalf>,
        more: bool,
    },
    /// The half (`local` on the sender's host, `remote` on the receiver's) is gone: its
    /// last holder closed it, its process died, or it was handed to an image without the
    /// library.
    SocketWithdraw {
        local: SocketAddr,
        remote: SocketAddr,
        cookie: u64,
    },
    /// The two halves of a connection are paired, as the pair's leader decided (of the two
    /// hosts, the one whose name sorts first): `local` and `cookie` are the sender's half,
    /// `remote` and `peer_cookie` the receiver's; `generation` is the pairing's.
    SocketPaired {
        local: SocketAddr,
        remote: SocketAddr,
        cookie: u64,
        peer_cookie: u64,
        generation: u64,
        /// The sender's half's stream objects, and the receiver's as the sender knows them
        /// (the receiver refuses a pairing that names other objects than its half's).
        #[serde(default)]
        handles: Option<StreamHandles>,
        #[serde(default)]
        peer_handles: Option<StreamHandles>,
    },
    /// The sender is closing the connection, and why.
    Bye {
        reason: String,
    },
}

/// One socket half as daemons tell each other of it: its tuple as the sender's host sees it
/// (`local` there, `remote` the peer on the receiver's host), its cookie, its user, and
/// what the sender knows of its pairing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireHalf {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub cookie: u64,
    /// The uid of the process holding it: halves of different users never pair.
    pub uid: u32,
    /// The generation of the pairing this half is in (0: none), and the peer's cookie then.
    #[serde(default)]
    pub generation: u64,
    #[serde(default)]
    pub peer_cookie: u64,
    /// The objects its process exported for the connection's bytes (None: it has none, the
    /// connection stays kernel TCP).
    #[serde(default)]
    pub handles: Option<StreamHandles>,
}

/// The objects one end of a cross-host connection exports for its peer's bytes
/// (`lanes::sockets::fabric_stream`): the node they belong to, the inbound segment (header
/// and ring) and two interrupts (the doorbells rung after a request and after an answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamHandles {
    pub node: u32,
    pub segment: u32,
    pub request_bell: u32,
    pub answer_bell: u32,
}

/// Whose an address is, as this host's daemon knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "owner", rename_all = "kebab-case")]
pub enum AddressOwner {
    /// One of this host's own addresses.
    ThisHost,
    /// Another host of the cluster: lanes.toml lists it for the host, or the host's daemon
    /// claimed it at hello.
    Host { host: String },
    /// No host of the cluster.
    Nobody,
}

/// A process's request to pair one of its TCP sockets with a peer on another host of the
/// cluster (`Request::RegisterHalf`). The daemon checks every field against the kernel:
/// the caller's credentials (`SO_PEERCRED`), the socket with this tuple and cookie
/// (`NETLINK_SOCK_DIAG`), that the caller holds it, and the socket's record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HalfRegistration {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub cookie: u64,
    /// The network namespace the socket lives in (its inode).
    pub netns: u64,
    /// The calling process (pid and start time, `ProcessIdentity::bits`).
    pub process: u64,
    /// The objects the caller exported for the connection's bytes, which the daemon checks
    /// are this host's and the caller's, and announces to the peer (None: kernel TCP only).
    #[serde(default)]
    pub handles: Option<StreamHandles>,
}

/// A cross-host socket half as this host's daemon holds it (`lanes status`, tests).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HalfStatus {
    pub local: SocketAddr,
    pub remote: SocketAddr,
    pub cookie: u64,
    pub pid: u32,
    pub uid: u32,
    /// The host its peer is on.
    pub peer_host: String,
    /// `waiting`, `paired` or `peer-gone`.
    pub state: String,
    /// The pairing's generation (0: never paired).
    pub generation: u64,
    /// Milliseconds since it was registered (or taken over from a record).
    pub age_ms: u64,
}

/// What this host's daemon knows of cross-host socket halves, and what it refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketsStatus {
    /// This host's halves.
    pub halves: Vec<HalfStatus>,
    /// Halves other hosts told of that match none of ours yet, per host.
    pub unmatched: Vec<(String, u64)>,
    /// Refused registrations and daemon messages, per reason.
    pub refused: Vec<(String, u64)>,
    /// Peer daemons' pairings of halves this host had withdrawn just before (the two
    /// messages crossed): ignored, and counted apart from the refusals.
    #[serde(default)]
    pub stale: u64,
    /// Local requests served, per kind (`host-of`, `register`, `withdraw`).
    pub requests: Vec<(String, u64)>,
    /// Bytes this host's withdrawn halves sent and received over the fabric, as their
    /// processes told at the withdrawal.
    #[serde(default)]
    pub fabric_sent: u64,
    #[serde(default)]
    pub fabric_received: u64,
}

// ---------------------------------------------------------------------------------------
// Process to daemon (Unix socket)
// ---------------------------------------------------------------------------------------

/// What a process asks its daemon.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Request {
    Hello {
        version: u16,
    },
    /// Forwarded to the node's host when that is another host.
    Lookup {
        node: u32,
        kind: ObjectKind,
        id: u32,
        timeout_ms: u64,
    },
    Probe {
        node: u32,
        timeout_ms: u64,
    },
    /// Claims a connection slot of the object for this process, acting as `peer_node`;
    /// forwarded to the node's host when that is another host. The grant lives until
    /// [`Request::Disconnect`] or until this connection closes.
    Connect {
        node: u32,
        kind: ObjectKind,
        id: u32,
        peer_node: u32,
        timeout_ms: u64,
        /// The subscription (`subscriber` of [`Reply::Subscribed`]) that hears the grant's
        /// [`GrantStatus`] changes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        notify: Option<u64>,
    },
    /// Releases a grant this connection holds (an unknown one is ignored).
    Disconnect {
        grant: u64,
    },
    /// This process holds `grant` (of object `kind` `id` of `node`, slot `slot`, as
    /// `peer_node`) from an earlier daemon of this host, which restarted: the grant lives on
    /// with this connection, as if it had been connected on it.
    Adopt {
        grant: HeldGrant,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        notify: Option<u64>,
    },
    /// Every live reflective group of the cluster: this host's and every other host's
    /// (refused when a host cannot answer, since it might hold groups).
    Groups {
        timeout_ms: u64,
    },
    /// Every host and its state.
    Cluster,
    /// Turns this connection into a stream of [`Reply::Event`]s (and keep-alives).
    Subscribe,
    /// Which host of the cluster `address` is on.
    HostOf {
        address: IpAddr,
    },
    /// Registers a TCP socket half of the calling process whose peer is on another host.
    RegisterHalf {
        half: HalfRegistration,
    },
    /// The calling process's half is gone (its last holder closed it).
    WithdrawHalf {
        local: SocketAddr,
        remote: SocketAddr,
        cookie: u64,
        /// Bytes the connection sent and received over the fabric (its stream's counts).
        #[serde(default)]
        fabric_sent: u64,
        #[serde(default)]
        fabric_received: u64,
    },
    /// This host's cross-host socket halves and the daemon's counts.
    Sockets,
}

/// What the daemon answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Reply {
    Hello {
        version: u16,
        host: String,
        boot: u64,
    },
    Lookup {
        result: Result<ObjectInfo, Refusal>,
    },
    Probe {
        result: Result<NodeProbe, Refusal>,
    },
    Connect {
        result: Result<Grant, Refusal>,
    },
    Disconnected,
    /// The answer to [`Request::Adopt`].
    Adopted {
        result: Result<(), Refusal>,
    },
    Groups {
        result: Result<Vec<GroupInfo>, Refusal>,
    },
    Cluster {
        hosts: Vec<HostStatus>,
    },
    /// The subscription starts from this picture; events follow. `subscriber` names it in
    /// the `notify` of a [`Request::Connect`].
    Subscribed {
        hosts: Vec<HostStatus>,
        #[serde(default)]
        subscriber: u64,
    },
    Event {
        event: NodeEvent,
    },
    /// To a subscription named by a connect's `notify`: the object of `grant` changed.
    GrantStatus {
        grant: u64,
        status: GrantStatus,
    },
    /// Sent to subscribers when nothing happened for a while, so that either side notices
    /// the other's death.
    KeepAlive,
    HostOf {
        owner: AddressOwner,
    },
    /// The answer to [`Request::RegisterHalf`]: the host the peer is on.
    Registered {
        result: Result<String, Refusal>,
    },
    Withdrawn,
    Sockets {
        status: SocketsStatus,
    },
    /// The request could not be served; the connection is closed after this.
    Error {
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages, written one after another, read back equal.
    fn assert_round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(messages: &[T]) {
        let mut bytes = Vec::new();
        messages.iter().for_each(|m| write_message(&mut bytes, m).unwrap());
        assert_eq!(read_all::<T>(&bytes).0, messages);
    }

    fn read_all<T: DeserializeOwned>(bytes: &[u8]) -> (Vec<T>, Option<FrameError>) {
        let mut r = FrameReader::new();
        let mut src = bytes;
        let mut out = Vec::new();
        loop {
            match r.next_message::<T>() {
                Ok(Some(m)) => {
                    out.push(m);
                    continue;
                }
                Ok(None) => {}
                Err(e) => return (out, Some(e)),
            }
            match r.fill(&mut src).unwrap() {
                Fill::Closed => return (out, None),
                Fill::Data | Fill::Idle => {}
            }
        }
    }

    #[test]
    fn frames_round_trip_in_pieces() {
        let msgs = vec![
            PeerMessage::Hello {
                version: PROTOCOL_VERSION,
                host: "a".into(),
                boot: 7,
                nodes: vec![8, 12],
                nonce: None,
                proof: None,
                host_epoch: String::new(),
                addresses: vec![],
            },
            PeerMessage::Hello {
                version: PROTOCOL_VERSION,
                host: "b".into(),
                boot: 8,
                nodes: vec![],
                nonce: Some("00ff".into()),
                proof: Some("ab".into()),
                host_epoch: "boot/0123".into(),
                addresses: vec!["10.77.0.2".parse().unwrap(), "fd77::2".parse().unwrap()],
            },
            PeerMessage::Auth { proof: "cd".into() },
            PeerMessage::Heartbeat,
            PeerMessage::Query { id: 1, query: Query::Lookup { node: 8, kind: ObjectKind::Segment, id: 0x10 } },
            PeerMessage::Answer {
                id: 1,
                answer: Answer::Refused {
                    refusal: Refusal::NotFound { node: 8, kind: ObjectKind::Segment, id: 0x10, host: "a".into() },
                },
            },
        ];
        let mut bytes = Vec::new();
        for m in &msgs {
            write_message(&mut bytes, m).unwrap();
        }
        // One byte per read: every split point is exercised.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0.is_empty() {
                    return Ok(0);
                }
                buf[0] = self.0[0];
                self.0 = &self.0[1..];
                Ok(1)
            }
        }
        let mut r = FrameReader::new();
        let mut src = Trickle(&bytes);
        let mut got = Vec::new();
        while r.fill(&mut src).unwrap() != Fill::Closed {
            while let Some(m) = r.next_message::<PeerMessage>().unwrap() {
                got.push(m);
            }
        }
        assert_eq!(got, msgs);
        let (all, err) = read_all::<PeerMessage>(&bytes);
        assert_eq!(all, msgs);
        assert!(err.is_none());
    }

    #[test]
    fn connect_messages_round_trip() {
        let info = ObjectInfo {
            node: 8,
            kind: ObjectKind::Segment,
            id: 0x10,
            host: "a".into(),
            size: 8192,
            available: true,
            owner_pid: 77,
        };
        let export = ExportRecord {
            in_place: true,
            kind: ObjectKind::Segment,
            node: 8,
            id: 0x10,
            owner_pid: 77,
            owner_identity: u64::MAX - 1,
            provider: "tcp;ofi_rxm".into(),
            endpoint: "0a0b".into(),
            key: u64::MAX,
            base: 1 << 47,
            len: 8192,
            handle: 2,
            epoch: 0x8000_0000_0000_0001,
            slot_keys: vec![crate::cluster::exports::SlotKey { slot: 3, generation: 4, key: 5 }],
        };
        let grant = Grant { info, export, slot: 3, grant: u64::MAX };
        let peer = vec![
            PeerMessage::Query {
                id: 2,
                query: Query::Connect {
                    node: 8,
                    kind: ObjectKind::Segment,
                    id: 0x10,
                    peer_node: 12,
                    peer_host: "b".into(),
                },
            },
            PeerMessage::Answer { id: 2, answer: Answer::Granted { grant: grant.clone() } },
            PeerMessage::Release { grant: u64::MAX, died: true },
            PeerMessage::GrantStatus { grant: u64::MAX - 1, status: GrantStatus::OwnerDied },
        ];
        let local = vec![
            Reply::Connect { result: Ok(grant) },
            Reply::Connect {
                result: Err(Refusal::TooManyConnections {
                    node: 8,
                    kind: ObjectKind::Segment,
                    id: 1,
                    host: "a".into(),
                }),
            },
            Reply::Disconnected,
            Reply::Subscribed { hosts: Vec::new(), subscriber: u64::MAX },
            Reply::GrantStatus { grant: 7, status: GrantStatus::Unavailable },
        ];
        let mut bytes = Vec::new();
        peer.iter().for_each(|m| write_message(&mut bytes, m).unwrap());
        assert_eq!(read_all::<PeerMessage>(&bytes).0, peer, "full 64-bit values survive JSON");
        let mut bytes = Vec::new();
        local.iter().for_each(|m| write_message(&mut bytes, m).unwrap());
        assert_eq!(read_all::<Reply>(&bytes).0, local);
        let r = Refusal::NotAvailable { node: 8, kind: ObjectKind::Segment, id: 0x10, host: "a".into() };
        assert_eq!(r.to_string(), "segment 0x10 on node 8 (host a) is not available");
    }

    #[test]
    fn group_messages_round_trip() {
        let g = GroupInfo { node: 8, id: u32::MAX, host: "a".into() };
        let peer = vec![
            PeerMessage::Query { id: 3, query: Query::Groups },
            PeerMessage::Answer { id: 3, answer: Answer::Groups { groups: vec![g.clone()] } },
        ];
        let local = vec![Request::Groups { timeout_ms: 2000 }];
        let replies = vec![
            Reply::Groups { result: Ok(vec![g]) },
            Reply::Groups {
                result: Err(Refusal::HostUnreachable { node: 16, host: "c".into(), state: HostState::Suspect }),
            },
        ];
        assert_round_trip(&peer);
        assert_round_trip(&local);
        assert_round_trip(&replies);
        assert_eq!(ObjectKind::from_layout_kind(kind::REFLECTIVE), Some(ObjectKind::Reflective));
        assert_eq!(ObjectKind::Reflective.layout_kind(), kind::REFLECTIVE);
    }

    #[test]
    fn socket_messages_round_trip() {
        let v4 = |s: &str| s.parse::<SocketAddr>().unwrap();
        let half = WireHalf {
            local: v4("10.77.0.2:40000"),
            remote: v4("10.77.0.1:5201"),
            cookie: u64::MAX,
            uid: 1000,
            generation: 3,
            peer_cookie: 7,
            handles: Some(StreamHandles { node: 12, segment: 0x1000_0001, request_bell: 4, answer_bell: u32::MAX }),
        };
        let peer = vec![
            PeerMessage::SocketHalf { half: half.clone() },
            PeerMessage::SocketSync { halves: vec![half.clone(), half], more: true },
            PeerMessage::SocketWithdraw { local: v4("[fd77::2]:1"), remote: v4("[fd77::1]:2"), cookie: 9 },
            PeerMessage::SocketPaired {
                local: v4("10.77.0.1:5201"),
                remote: v4("10.77.0.2:40000"),
                cookie: 7,
                peer_cookie: u64::MAX,
                generation: 4,
                handles: None,
                peer_handles: Some(StreamHandles { node: 12, segment: 1, request_bell: 2, answer_bell: 3 }),
            },
        ];
        let registration = HalfRegistration {
            local: v4("10.77.0.2:40000"),
            remote: v4("10.77.0.1:5201"),
            cookie: 1,
            netns: 2,
            process: 3,
            handles: Some(StreamHandles { node: 8, segment: 5, request_bell: 6, answer_bell: 7 }),
        };
        let local = vec![
            Request::HostOf { address: "10.77.0.1".parse().unwrap() },
            Request::RegisterHalf { half: registration },
            Request::WithdrawHalf {
                local: v4("10.77.0.2:40000"),
                remote: v4("10.77.0.1:5201"),
                cookie: 1,
                fabric_sent: 2,
                fabric_received: 3,
            },
            Request::Sockets,
        ];
        let replies = vec![
            Reply::HostOf { owner: AddressOwner::Host { host: "a".into() } },
            Reply::HostOf { owner: AddressOwner::Nobody },
            Reply::Registered { result: Ok("a".into()) },
            Reply::Registered { result: Err(Refusal::Failed { reason: "no".into() }) },
            Reply::Withdrawn,
            Reply::Sockets { status: SocketsStatus::default() },
        ];
        assert_round_trip(&peer);
        assert_round_trip(&local);
        assert_round_trip(&replies);
    }

    #[test]
    fn bad_frames_are_errors_not_panics() {
        let good = encode(&Request::Cluster).unwrap();
        let header = |magic: &[u8; 4], version: u16, flags: u16, len: u32| {
            let mut h = magic.to_vec();
            h.extend_from_slice(&version.to_be_bytes());
            h.extend_from_slice(&flags.to_be_bytes());
            h.extend_from_slice(&len.to_be_bytes());
            h
        };
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (b"GET / HTTP/1.1\r\n\r\n".to_vec(), "magic"),
            (b"L".iter().chain(b"X").copied().collect(), "magic"),
            (header(&MAGIC, PROTOCOL_VERSION + 1, 0, 2), "version"),
            (header(&MAGIC, PROTOCOL_VERSION - 1, 0, 2), "version"),
            (header(&MAGIC, PROTOCOL_VERSION, 1, 2), "flags"),
            (header(&MAGIC, PROTOCOL_VERSION, 0, u32::MAX), "exceeds"),
            (header(&MAGIC, PROTOCOL_VERSION, 0, (MAX_FRAME + 1) as u32), "exceeds"),
            ([header(&MAGIC, PROTOCOL_VERSION, 0, 4), b"{{{{".to_vec()].concat(), "malformed"),
            ([header(&MAGIC, PROTOCOL_VERSION, 0, 15), br#"{"type":"nope"}"#.to_vec()].concat(), "malformed"),
        ];
        for (bytes, says) in cases {
            let (msgs, err) = read_all::<Request>(&[good.clone(), bytes.clone()].concat());
            assert_eq!(msgs, vec![Request::Cluster], "{bytes:?}");
            let err = err.unwrap_or_else(|| panic!("{bytes:?} accepted"));
            assert!(err.to_string().to_lowercase().contains(says), "{bytes:?}: {err}");
        }
        // A truncated frame is simply incomplete.
        let (msgs, err) = read_all::<Request>(&good[..good.len() - 1]);
        assert!(msgs.is_empty() && err.is_none());
    }

    #[test]
    fn an_oversized_message_is_not_sent() {
        let huge = Reply::Error { reason: "x".repeat(MAX_FRAME) };
        assert!(matches!(encode(&huge), Err(FrameError::Oversized { .. })));
    }

    #[test]
    fn refusals_read_well() {
        let r = Refusal::NotFound { node: 8, kind: ObjectKind::Segment, id: 0x10, host: "a".into() };
        assert_eq!(r.to_string(), "no segment 0x10 on node 8 (host a)");
        let r = Refusal::HostUnreachable { node: 12, host: "b".into(), state: HostState::Suspect };
        assert_eq!(r.to_string(), "host b unreachable (node 12; its daemon's link is suspect)");
    }
}
