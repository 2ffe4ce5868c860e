//! The pairing of a cross-host socket, in its record (docs/design/cross-host-sockets.md,
//! section 2): a TCP socket whose peer is on another host of the cluster has a record like a
//! local one ([`FLAG_REMOTE`] set, the smallest ring, unused), made by the library when the
//! connection is set up. The library writes the peer's host and [`PairingState::Unregistered`]
//! once, before it registers the half with its daemon; from then on only the daemon writes
//! the pairing: waiting for the peer's half, paired (with the pairing's generation and the
//! peer socket's cookie), or the peer gone. The library and `lanes status` read it.
//!
//! While paired, the block also holds the peer's stream objects (node, segment, doorbells:
//! what the peer's process exported for this connection's bytes, as the peer's daemon
//! announced them). Beside the block, the library writes its own stream objects at
//! each export ([`Endpoint::set_own_handles`]; a connection whose stream failed over exports
//! new ones for the next), so that a restarted daemon announces them again.
//!
//! The block (at offset 512 of the header page) is a sequence lock: the writer makes the
//! sequence odd, writes, makes it even; a reader retries while it changed. A writer that died
//! half-way leaves it odd: the next writer makes it even again, and readers give up after a
//! bounded number of tries rather than spin.

use std::sync::atomic::{fence, AtomicU64, Ordering};

use super::endpoint::Endpoint;
pub use super::endpoint::FLAG_REMOTE;
use crate::cluster::proto::StreamHandles;

const OFF_SEQ: usize = 512;
const OFF_STATE: usize = 520;
const OFF_GENERATION: usize = 528;
const OFF_PEER_COOKIE: usize = 536;
/// One length byte, then the host's name (at most [`HOST_BYTES`] bytes), in 8 words.
const OFF_HOST: usize = 544;
const HOST_WORDS: usize = 8;
/// The peer's stream objects (two words; a node of 0, never a valid one, is none).
const OFF_PEER_HANDLES: usize = 608;
/// This end's own stream objects, written by the library at each export (outside the
/// sequence lock).
const OFF_OWN_HANDLES: usize = 624;
/// How many directions of the connection failed over to the kernel connection (the
/// library's count, written with its byte counts).
const OFF_FAILOVERS: usize = 640;
/// How many times a new fabric stream replaced one that had failed over (the library's
/// count, written with its byte counts).
const OFF_FALL_FORWARDS: usize = 648;
/// The longest peer host name a record keeps (a longer one is cut, for display only: the
/// daemons name hosts by their configuration, never by a record).
pub const HOST_BYTES: usize = 8 * HOST_WORDS - 1;
/// Reads of a changing block before a reader gives up.
const READ_TRIES: usize = 1000;

/// Where a cross-host socket's pairing stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PairingState {
    /// The library made the record; no daemon took the half yet (none ran, or it has not
    /// answered): a daemon that starts takes it over from the record.
    Unregistered,
    /// The daemon holds the half and waits for the peer's (a peer without the library never
    /// sends one; a peer host that is down sends it when it is back).
    Waiting,
    /// Both daemons vouched for their halves: the connection's two ends are known.
    Paired,
    /// The peer's half was withdrawn (its last holder closed it, or its process died).
    PeerGone,
}

impl PairingState {
    fn code(self) -> u64 {
        match self {
            PairingState::Unregistered => 1,
            PairingState::Waiting => 2,
            PairingState::Paired => 3,
            PairingState::PeerGone => 4,
        }
    }

    fn from_code(code: u64) -> Option<PairingState> {
        Some(match code {
            1 => PairingState::Unregistered,
            2 => PairingState::Waiting,
            3 => PairingState::Paired,
            4 => PairingState::PeerGone,
            _ => return None,
        })
    }

    /// A word for `lanes status`.
    pub fn label(self) -> &'static str {
        match self {
            PairingState::Unregistered => "unregistered",
            PairingState::Waiting => "waiting",
            PairingState::Paired => "paired",
            PairingState::PeerGone => "peer-gone",
        }
    }
}

/// A cross-host socket's pairing, as its record holds it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Pairing {
    pub state: PairingState,
    /// The host the peer is on.
    pub peer_host: String,
    /// The pairing's generation: the same number on both hosts, new each time the two
    /// halves are paired again (0: never paired).
    pub generation: u64,
    /// The peer socket's cookie on its host (0 until paired).
    pub peer_cookie: u64,
    /// While paired: the objects the peer's process exported for the connection's bytes
    /// (None: it exported none, the connection stays kernel TCP).
    pub peer_handles: Option<StreamHandles>,
}

fn handle_words(h: Option<StreamHandles>) -> [u64; 2] {
    match h {
        Some(h) => {
            [u64::from(h.node) << 32 | u64::from(h.segment), u64::from(h.request_bell) << 32 | u64::from(h.answer_bell)]
        }
        None => [0, 0],
    }
}

fn handles_of(words: [u64; 2]) -> Option<StreamHandles> {
    let node = (words[0] >> 32) as u32;
    (node != 0).then_some(StreamHandles {
        node,
        segment: words[0] as u32,
        request_bell: (words[1] >> 32) as u32,
        answer_bell: words[1] as u32,
    })
}

impl Endpoint {
    /// Directions of this cross-host connection that failed over to the kernel connection.
    pub fn failovers(&self) -> &AtomicU64 {
        self.u64_at(OFF_FAILOVERS)
    }

    /// How many times a new fabric stream replaced one that had failed over.
    pub fn fall_forwards(&self) -> &AtomicU64 {
        self.u64_at(OFF_FALL_FORWARDS)
    }

    /// Writes the pairing block (the library once, at creation; then the daemon).
    pub fn set_pairing(&self, p: &Pairing) {
        let seq = self.u64_at(OFF_SEQ);
        // Odd while writing; a writer that died left it odd, which `| 1` keeps so.
        let start = seq.load(Ordering::Relaxed) | 1;
        seq.store(start, Ordering::Relaxed);
        fence(Ordering::Release);
        self.u64_at(OFF_STATE).store(p.state.code(), Ordering::Relaxed);
        self.u64_at(OFF_GENERATION).store(p.generation, Ordering::Relaxed);
        self.u64_at(OFF_PEER_COOKIE).store(p.peer_cookie, Ordering::Relaxed);
        let mut bytes = [0u8; 8 * HOST_WORDS];
        let mut name = p.peer_host.as_bytes();
        if name.len() > HOST_BYTES {
            let mut cut = HOST_BYTES;
            while !p.peer_host.is_char_boundary(cut) {
                cut -= 1;
            }
            name = &name[..cut];
        }
        bytes[0] = name.len() as u8;
        bytes[1..1 + name.len()].copy_from_slice(name);
        for (i, w) in bytes.chunks_exact(8).enumerate() {
            let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            self.u64_at(OFF_HOST + 8 * i).store(v, Ordering::Relaxed);
        }
        let words = handle_words(p.peer_handles);
        self.u64_at(OFF_PEER_HANDLES).store(words[0], Ordering::Relaxed);
        self.u64_at(OFF_PEER_HANDLES + 8).store(words[1], Ordering::Relaxed);
        seq.store(start.wrapping_add(1), Ordering::Release);
    }

    /// Writes this end's own stream objects (the library, once, before it registers).
    pub fn set_own_handles(&self, h: StreamHandles) {
        let words = handle_words(Some(h));
        self.u64_at(OFF_OWN_HANDLES).store(words[0], Ordering::Relaxed);
        self.u64_at(OFF_OWN_HANDLES + 8).store(words[1], Ordering::Release);
    }

    /// This end's own stream objects, if the library exported any.
    pub fn own_handles(&self) -> Option<StreamHandles> {
        let second = self.u64_at(OFF_OWN_HANDLES + 8).load(Ordering::Acquire);
        handles_of([self.u64_at(OFF_OWN_HANDLES).load(Ordering::Relaxed), second])
    }

    /// The pairing block: None for a record without one (a local socket's), or one whose
    /// block never settles or holds nonsense.
    pub fn pairing(&self) -> Option<Pairing> {
        let seq = self.u64_at(OFF_SEQ);
        for _ in 0..READ_TRIES {
            let before = seq.load(Ordering::Acquire);
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let state = self.u64_at(OFF_STATE).load(Ordering::Relaxed);
            let generation = self.u64_at(OFF_GENERATION).load(Ordering::Relaxed);
            let peer_cookie = self.u64_at(OFF_PEER_COOKIE).load(Ordering::Relaxed);
            let mut bytes = [0u8; 8 * HOST_WORDS];
            for i in 0..HOST_WORDS {
                let v = self.u64_at(OFF_HOST + 8 * i).load(Ordering::Relaxed);
                bytes[8 * i..8 * i + 8].copy_from_slice(&v.to_le_bytes());
            }
            let handles = [
                self.u64_at(OFF_PEER_HANDLES).load(Ordering::Relaxed),
                self.u64_at(OFF_PEER_HANDLES + 8).load(Ordering::Relaxed),
            ];
            fence(Ordering::Acquire);
            if seq.load(Ordering::Relaxed) != before {
                continue;
            }
            let state = PairingState::from_code(state)?;
            let len = usize::from(bytes[0]).min(HOST_BYTES);
            let peer_host = String::from_utf8_lossy(&bytes[1..1 + len]).into_owned();
            let peer_handles = handles_of(handles);
            return Some(Pairing { state, peer_host, generation, peer_cookie, peer_handles });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sockets::endpoint::{ConnectionKey, MIN_RING_BYTES};

    #[test]
    fn a_pairing_reads_back_as_written_and_a_torn_block_settles() {
        let dir = std::env::temp_dir().join(format!("lanes-pairing-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let key = ConnectionKey::new(9, "10.77.0.2:40000".parse().unwrap(), "10.77.0.1:5201".parse().unwrap());
        let ep = Endpoint::create(&dir, &key, 11, MIN_RING_BYTES).unwrap();
        assert_eq!(ep.pairing(), None, "a local socket's record has no pairing");
        let mut p = Pairing {
            state: PairingState::Unregistered,
            peer_host: "a".into(),
            generation: 0,
            peer_cookie: 0,
            peer_handles: None,
        };
        ep.set_pairing(&p);
        assert_eq!(ep.pairing(), Some(p.clone()));
        let objects = StreamHandles { node: 65532, segment: u32::MAX, request_bell: 1, answer_bell: u32::MAX - 1 };
        p = Pairing {
            state: PairingState::Paired,
            peer_host: "é".repeat(40),
            generation: 3,
            peer_cookie: u64::MAX,
            peer_handles: Some(objects),
        };
        ep.set_pairing(&p);
        assert_eq!(ep.own_handles(), None);
        ep.set_own_handles(StreamHandles { node: 4, segment: 0, request_bell: 0, answer_bell: 0 });
        let got = Endpoint::open(&dir, &key).unwrap().pairing().unwrap();
        assert_eq!((got.state, got.generation, got.peer_cookie), (PairingState::Paired, 3, u64::MAX));
        assert_eq!(got.peer_handles, Some(objects));
        assert_eq!(ep.own_handles().map(|h| h.node), Some(4));
        assert_eq!(got.peer_host, "é".repeat(31), "cut at a character within {HOST_BYTES} bytes");
        // A writer that died half-way: the sequence stays odd; readers give up, the next
        // writer settles it.
        ep.u64_at(OFF_SEQ).fetch_add(1, Ordering::SeqCst);
        assert_eq!(ep.pairing(), None);
        p.peer_host = "b".into();
        ep.set_pairing(&p);
        assert_eq!(ep.pairing(), Some(p));
        // Nonsense in the state word is no pairing.
        ep.u64_at(OFF_STATE).store(77, Ordering::SeqCst);
        assert_eq!(ep.pairing(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
