//! The daemons' authenticated, encrypted links: a Noise handshake with the hosts' static
//! keys ([`super::identity`]), then every control frame sealed.
//!
//! **Handshake.** `Noise_XX_25519_ChaChaPoly_SHA256` (`Noise_XXpsk3_...` when the cluster
//! also has a `secret_file`: the secret's SHA-256 is the pre-shared key), run by the `snow`
//! crate; nothing cryptographic is written here. The dialler first sends the 6-byte
//! preamble `LNSK` and the protocol version (u16, big endian), then each handshake message
//! and afterwards each sealed record is a u16 big-endian length and that many bytes:
//!
//! 1. dialler -> acceptor: `e`
//! 2. acceptor -> dialler: `e, ee, s, es` (the acceptor's static key: the dialler checks it
//!    is the key `lanes.toml` lists for the host it dialled)
//! 3. dialler -> acceptor: `s, se`, with the dialler's hello as payload (the acceptor checks
//!    the key against the host the hello names, and the connection's source address
//!    against that host's address)
//! 4. acceptor -> dialler, sealed: its hello, or a goodbye saying why it refused.
//!
//! Both sides' ephemeral keys are fresh, so a recorded message 1 or 3 replayed on another
//! connection fails (message 3 does not decrypt under the new ephemeral keys), and the
//! static keys are only accepted with proof of their private halves (`es`, `se`). Nothing
//! a daemon knows about a peer changes before step 3 has been checked.
//!
//! **Records.** After the handshake the stream of control frames (`super::proto`) is cut
//! into records of at most 65519 plaintext bytes, each sealed with ChaCha20-Poly1305 under
//! the session's keys and counter nonces (Noise transport messages): a record that is
//! altered, dropped, reordered or replayed fails authentication and ends the connection.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use snow::{HandshakeState, TransportState};

use super::identity::HostKey;

/// The Noise protocol of a link.
pub const NOISE_PARAMS: &str = "Noise_XX_25519_ChaChaPoly_SHA256";
/// The Noise protocol of a link when the cluster also has a `secret_file`.
pub const NOISE_PARAMS_PSK: &str = "Noise_XXpsk3_25519_ChaChaPoly_SHA256";
/// What a secured link starts with (a plaintext one starts with the frame magic `LNSC`).
pub const LINK_MAGIC: [u8; 4] = *b"LNSK";
/// Bound into the handshake: both sides must agree on it.
const PROLOGUE: &[u8] = b"lanes cluster link 1";
/// The largest Noise message (handshake or record).
pub const MAX_RECORD: usize = 65535;
/// Authentication tag bytes per record.
const TAG: usize = 16;
/// The most plaintext bytes a record carries.
pub const MAX_PLAIN: usize = MAX_RECORD - TAG;

/// One side of a handshake: `key` is this host's, `psk` the cluster secret's hash.
pub fn handshake_state(key: &HostKey, psk: Option<&[u8; 32]>, initiator: bool) -> Result<HandshakeState, String> {
    let params = if psk.is_some() { NOISE_PARAMS_PSK } else { NOISE_PARAMS };
    let params = params.parse().map_err(|e| format!("Noise parameters {params}: {e}"))?;
    let mut b = snow::Builder::new(params)
        .local_private_key(key.private())
        .and_then(|b| b.prologue(PROLOGUE))
        .map_err(|e| format!("setting up the handshake: {e}"))?;
    if let Some(psk) = psk {
        b = b.psk(3, psk).map_err(|e| format!("setting up the handshake: {e}"))?;
    }
    let state = if initiator { b.build_initiator() } else { b.build_responder() };
    state.map_err(|e| format!("setting up the handshake: {e}"))
}

/// The 6-byte preamble the dialler sends first.
pub fn preamble(version: u16) -> [u8; 6] {
    let v = version.to_be_bytes();
    [LINK_MAGIC[0], LINK_MAGIC[1], LINK_MAGIC[2], LINK_MAGIC[3], v[0], v[1]]
}

/// Writes one record (length and bytes).
pub fn write_record(w: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    let len = u16::try_from(bytes.len()).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "record too long"))?;
    let mut out = Vec::with_capacity(2 + bytes.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
    w.write_all(&out)?;
    w.flush()
}

/// Fills `buf` from `stream` by `deadline`. The error says what was missing.
pub fn read_exact_by(stream: &TcpStream, buf: &mut [u8], deadline: Instant, what: &str) -> Result<(), String> {
    let mut got = 0;
    while got < buf.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("no {what} in time"));
        }
        stream.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
        match (&*stream).read(&mut buf[got..]) {
            Ok(0) => return Err(format!("closed before its {what}")),
            Ok(n) => got += n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading its {what}: {e}")),
        }
    }
    Ok(())
}

/// Reads one record by `deadline`.
pub fn read_record(stream: &TcpStream, deadline: Instant, what: &str) -> Result<Vec<u8>, String> {
    let mut len = [0u8; 2];
    read_exact_by(stream, &mut len, deadline, what)?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    read_exact_by(stream, &mut buf, deadline, what)?;
    Ok(buf)
}

/// Writes the next handshake message with `payload`.
pub fn write_handshake(state: &mut HandshakeState, stream: &TcpStream, payload: &[u8]) -> Result<(), String> {
    let mut msg = vec![0u8; MAX_RECORD];
    let n = state.write_message(payload, &mut msg).map_err(|e| format!("handshake: {e}"))?;
    write_record(&mut &*stream, &msg[..n]).map_err(|e| e.to_string())
}

/// Reads the next handshake message by `deadline`; returns its payload. A message that
/// does not verify is an error naming the step.
pub fn read_handshake(
    state: &mut HandshakeState,
    stream: &TcpStream,
    deadline: Instant,
    what: &str,
) -> Result<Vec<u8>, String> {
    let msg = read_record(stream, deadline, what)?;
    let mut payload = vec![0u8; MAX_RECORD];
    let n = state.read_message(&msg, &mut payload).map_err(|e| format!("its {what} failed the handshake ({e})"))?;
    payload.truncate(n);
    Ok(payload)
}

/// An established link's session keys, shared by its reader and writer.
#[derive(Clone)]
pub struct Sealed {
    state: Arc<Mutex<TransportState>>,
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealed(..)")
    }
}

impl Sealed {
    /// The session of a finished handshake.
    pub fn new(state: HandshakeState) -> Result<Sealed, String> {
        let t = state.into_transport_mode().map_err(|e| format!("handshake: {e}"))?;
        Ok(Sealed { state: Arc::new(Mutex::new(t)) })
    }

    /// `plain` as sealed records, ready for the wire.
    pub fn seal(&self, plain: &[u8]) -> io::Result<Vec<u8>> {
        let mut t = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(plain.len() + (plain.len() / MAX_PLAIN + 1) * (2 + TAG));
        let mut buf = vec![0u8; MAX_RECORD];
        for chunk in plain.chunks(MAX_PLAIN) {
            let n = t.write_message(chunk, &mut buf).map_err(|e| io::Error::other(format!("sealing: {e}")))?;
            out.extend_from_slice(&(n as u16).to_be_bytes());
            out.extend_from_slice(&buf[..n]);
        }
        Ok(out)
    }

    /// A reader of this link's records.
    pub fn opener(&self) -> Opener {
        Opener { link: self.clone(), raw: Vec::new(), plain: Vec::new(), pos: 0 }
    }
}

/// Opens a link's records as they arrive: bytes in from the stream, plaintext out.
#[derive(Debug)]
pub struct Opener {
    link: Sealed,
    raw: Vec<u8>,
    plain: Vec<u8>,
    pos: usize,
}

impl Opener {
    /// Plaintext into `out`: what is left from earlier records, else one read of `r` (bounded
    /// by its read timeout) and every record it completed. `Ok(0)`: the stream closed;
    /// `WouldBlock`: nothing whole arrived yet; `InvalidData`: a record failed
    /// authentication (the connection must end).
    pub fn read_via(&mut self, r: &mut impl Read, out: &mut [u8]) -> io::Result<usize> {
        if self.pos == self.plain.len() {
            self.plain.clear();
            self.pos = 0;
            let mut chunk = [0u8; 8192];
            let n = r.read(&mut chunk)?;
            if n == 0 {
                return Ok(0);
            }
            self.raw.extend_from_slice(&chunk[..n]);
            self.open_complete()?;
            if self.plain.is_empty() {
                return Err(io::Error::new(io::ErrorKind::WouldBlock, "part of a record"));
            }
        }
        let n = out.len().min(self.plain.len() - self.pos);
        out[..n].copy_from_slice(&self.plain[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }

    fn open_complete(&mut self) -> io::Result<()> {
        let mut t = self.link.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut buf = vec![0u8; MAX_RECORD];
        let mut at = 0;
        while self.raw.len() - at >= 2 {
            let len = usize::from(u16::from_be_bytes([self.raw[at], self.raw[at + 1]]));
            if self.raw.len() - at - 2 < len {
                break;
            }
            let record = &self.raw[at + 2..at + 2 + len];
            let n = t.read_message(record, &mut buf).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidData, format!("a sealed record failed authentication ({e})"))
            })?;
            self.plain.extend_from_slice(&buf[..n]);
            at += 2 + len;
        }
        self.raw.drain(..at);
        Ok(())
    }

    /// `r` read through this opener.
    pub fn on<'a, R: Read>(&'a mut self, r: &'a mut R) -> OpenRead<'a, R> {
        OpenRead { opener: self, inner: r }
    }
}

/// A stream read through an [`Opener`].
pub struct OpenRead<'a, R> {
    opener: &'a mut Opener,
    inner: &'a mut R,
}

impl<R: Read> Read for OpenRead<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.opener.read_via(self.inner, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A handshake between two keys, in memory; the two sessions.
    fn pair(a: &HostKey, b: &HostKey) -> (Sealed, Sealed) {
        let (mut i, mut r) = (handshake_state(a, None, true).unwrap(), handshake_state(b, None, false).unwrap());
        let (mut m, mut p) = (vec![0u8; MAX_RECORD], vec![0u8; MAX_RECORD]);
        let n = i.write_message(&[], &mut m).unwrap();
        r.read_message(&m[..n], &mut p).unwrap();
        let n = r.write_message(&[], &mut m).unwrap();
        i.read_message(&m[..n], &mut p).unwrap();
        assert_eq!(i.get_remote_static().unwrap(), b.public().as_bytes());
        let n = i.write_message(b"hello", &mut m).unwrap();
        let k = r.read_message(&m[..n], &mut p).unwrap();
        assert_eq!(&p[..k], b"hello");
        assert_eq!(r.get_remote_static().unwrap(), a.public().as_bytes());
        (Sealed::new(i).unwrap(), Sealed::new(r).unwrap())
    }

    #[test]
    fn records_carry_long_frames_and_refuse_tampering_and_replay() {
        let (a, b) = (HostKey::generate().unwrap(), HostKey::generate().unwrap());
        let (sa, sb) = pair(&a, &b);
        let big: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let wire = sa.seal(&big).unwrap();
        assert!(!wire.windows(8).any(|w| w == &big[1000..1008]), "sealed, not clear");
        let mut opener = sb.opener();
        let mut src = &wire[..];
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match opener.on(&mut src).read(&mut buf) {
                Ok(0) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, big);
        // The same records again (a replay) fail: the nonces moved on.
        let mut src = &wire[..];
        let e = loop {
            match opener.on(&mut src).read(&mut buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                other => break other.unwrap_err(),
            }
        };
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        // A flipped bit fails.
        let mut wire = sa.seal(b"grant").unwrap();
        let last = wire.len() - 1;
        wire[last] ^= 1;
        let (_, sb2) = (sa.clone(), sb.clone());
        let mut fresh = sb2.opener();
        assert_eq!(fresh.on(&mut &wire[..]).read(&mut buf).unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_wrong_psk_or_a_replayed_third_message_fails_the_handshake() {
        let (a, b) = (HostKey::generate().unwrap(), HostKey::generate().unwrap());
        let (p1, p2) = ([1u8; 32], [2u8; 32]);
        let (mut i, mut r) =
            (handshake_state(&a, Some(&p1), true).unwrap(), handshake_state(&b, Some(&p2), false).unwrap());
        let (mut m, mut p) = (vec![0u8; MAX_RECORD], vec![0u8; MAX_RECORD]);
        let n = i.write_message(&[], &mut m).unwrap();
        r.read_message(&m[..n], &mut p).unwrap();
        let n = r.write_message(&[], &mut m).unwrap();
        i.read_message(&m[..n], &mut p).unwrap();
        let n = i.write_message(&[], &mut m).unwrap();
        assert!(r.read_message(&m[..n], &mut p).is_err(), "another secret");

        // Record a whole exchange, then replay the initiator's messages to a new responder.
        let (mut i, mut r) = (handshake_state(&a, None, true).unwrap(), handshake_state(&b, None, false).unwrap());
        let n = i.write_message(&[], &mut m).unwrap();
        let first = m[..n].to_vec();
        r.read_message(&first, &mut p).unwrap();
        let n = r.write_message(&[], &mut m).unwrap();
        i.read_message(&m[..n], &mut p).unwrap();
        let n = i.write_message(b"hello", &mut m).unwrap();
        let third = m[..n].to_vec();
        r.read_message(&third, &mut p).unwrap();
        let mut again = handshake_state(&b, None, false).unwrap();
        again.read_message(&first, &mut p).unwrap();
        let n = again.write_message(&[], &mut m).unwrap();
        assert!(n > 0);
        assert!(again.read_message(&third, &mut p).is_err(), "a replayed third message is refused");
    }
}
