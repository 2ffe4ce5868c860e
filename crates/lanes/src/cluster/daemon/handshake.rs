//! The hello exchange that admits a connection from or to another host's daemon, bounded by
//! `suspect_after`: with host keys a Noise XX handshake ([`crate::cluster::link`]) whose
//! static key must be the one lanes.toml lists for the host the hello names (and, accepted,
//! from that host's address); without keys plaintext hellos, with the proofs of the
//! optional cluster secret ([`crate::cluster::secret`]). A refused peer hears a goodbye
//! saying why. Nothing about any peer changes before a handshake passed.

use std::io::{self, Write};
use std::net::TcpStream;
use std::time::Instant;

use super::Shared;
use crate::cluster::identity::{HostKey, PublicKey};
use crate::cluster::link::{self, Opener, Sealed};
use crate::cluster::proto::{self, encode, write_message, Fill, FrameReader, PeerMessage, PROTOCOL_VERSION};
use crate::cluster::secret::{ClusterSecret, Role};

/// What a peer's hello said of its daemon and host: its boot value, its host epoch, and
/// the addresses it claims for its host.
#[derive(Clone, Debug, Default)]
pub(super) struct PeerBoot {
    pub(super) boot: u64,
    pub(super) host_epoch: String,
    pub(super) addresses: Vec<std::net::IpAddr>,
}

impl Shared {
    /// This daemon's hello, with its challenge and (as acceptor) its proof when the cluster
    /// has a secret.
    pub(super) fn hello(&self, nonce: Option<&str>, proof: Option<String>) -> PeerMessage {
        PeerMessage::Hello {
            version: PROTOCOL_VERSION,
            host: self.me.name.clone(),
            boot: self.boot,
            nodes: self.me.nodes.iter().map(|n| n.get()).collect(),
            nonce: nonce.map(str::to_string),
            proof,
            host_epoch: self.host_epoch.clone(),
            addresses: self.own_addresses(),
        }
    }

    /// Exchanges hellos, bounded by `suspect_after`: over a Noise handshake with the host
    /// keys when the cluster lists them ([`Shared::secure_handshake`]), else in plaintext.
    /// Nothing about any peer changes here: the caller makes the connection a peer's only
    /// once this returned.
    pub(super) fn handshake(
        &self,
        stream: TcpStream,
        expect: Option<&str>,
    ) -> std::result::Result<(TcpStream, HandshakeReader, PeerBoot), String> {
        match &self.key {
            Some(key) => self.secure_handshake(stream, expect, key),
            None => self.plain_handshake(stream, expect),
        }
    }

    /// The handshake of `super::link`: Noise XX with this host's key; the other side's
    /// static key must be the one lanes.toml lists for the host it names, and (for an
    /// accepted connection) the connection must come from that host's address. A refused
    /// dialler hears a sealed goodbye saying why.
    fn secure_handshake(
        &self,
        stream: TcpStream,
        expect: Option<&str>,
        key: &HostKey,
    ) -> std::result::Result<(TcpStream, HandshakeReader, PeerBoot), String> {
        let deadline = Instant::now() + self.cluster.suspect_after;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(self.cluster.suspect_after)).map_err(|e| e.to_string())?;
        let mut hs = link::handshake_state(key, self.psk.as_ref(), expect.is_some())?;
        let hello = encode(&self.hello(None, None)).map_err(|e| e.to_string())?;
        let mut frames = FrameReader::new();
        if let Some(want) = expect {
            let entry = self.cluster.host(want).ok_or_else(|| format!("host {want} is not in lanes.toml"))?;
            let mut first = link::preamble(PROTOCOL_VERSION).to_vec();
            let mut msg = vec![0u8; link::MAX_RECORD];
            let n = hs.write_message(&[], &mut msg).map_err(|e| format!("handshake: {e}"))?;
            first.extend_from_slice(&(n as u16).to_be_bytes());
            first.extend_from_slice(&msg[..n]);
            (&stream).write_all(&first).map_err(|e| e.to_string())?;
            // A daemon without keys answers in plaintext: show its goodbye.
            let mut head = [0u8; 2];
            link::read_exact_by(&stream, &mut head, deadline, "handshake")?;
            if head == [b'L', b'N'] {
                let mut plain = FrameReader::new();
                let mut buf = head.to_vec();
                let mut rest = [0u8; 512];
                let _ = stream.set_read_timeout(Some(self.cluster.heartbeat));
                if let Ok(n) = io::Read::read(&mut &stream, &mut rest) {
                    buf.extend_from_slice(&rest[..n]);
                }
                let _ = plain.fill(&mut &buf[..]);
                return Err(match plain.next_message::<PeerMessage>() {
                    Ok(Some(PeerMessage::Bye { reason })) => format!("host {want} refused: {reason}"),
                    _ => format!("host {want} answered without a handshake (a daemon without host keys?)"),
                });
            }
            let mut msg2 = vec![0u8; usize::from(u16::from_be_bytes(head))];
            link::read_exact_by(&stream, &mut msg2, deadline, "handshake")?;
            let mut payload = vec![0u8; link::MAX_RECORD];
            hs.read_message(&msg2, &mut payload).map_err(|e| format!("host {want}'s handshake failed ({e})"))?;
            let theirs = hs.get_remote_static().and_then(PublicKey::from_bytes);
            if theirs.is_none() || theirs != entry.public_key {
                return Err(format!(
                    "the daemon at {} proved key {}, not host {want}'s key in lanes.toml ({})",
                    entry.address,
                    theirs.map(|k| k.to_string()).unwrap_or_default(),
                    entry.public_key.map(|k| k.to_string()).unwrap_or_default()
                ));
            }
            link::write_handshake(&mut hs, &stream, &hello)?;
            let sealed = Sealed::new(hs)?;
            let mut opener = sealed.opener();
            let answer = loop {
                match frames.next_message::<PeerMessage>() {
                    Ok(Some(m)) => break m,
                    Ok(None) => {}
                    Err(e) => return Err(format!("host {want}: {e}")),
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(format!("host {want}: no hello in time"));
                }
                stream.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
                match frames.fill(&mut opener.on(&mut &stream)) {
                    Ok(Fill::Closed) => return Err(format!("host {want} closed the connection before its hello")),
                    Ok(_) => {}
                    Err(e) => return Err(format!("host {want}: {e}")),
                }
            };
            let (version, boot) = match answer {
                PeerMessage::Hello { version, host, boot, host_epoch, addresses, .. } if host == want => {
                    (version, PeerBoot { boot, host_epoch, addresses })
                }
                PeerMessage::Hello { host, .. } => return Err(format!("dialled host {want} but {host} answered")),
                PeerMessage::Bye { reason } => return Err(format!("host {want} refused: {reason}")),
                _ => return Err(format!("host {want}: the first message was not a hello")),
            };
            if version != PROTOCOL_VERSION {
                return Err(format!("host {want} speaks protocol version {version}, this daemon {PROTOCOL_VERSION}"));
            }
            let reader = HandshakeReader { frames, host: want.to_string(), link: Some(sealed), opener: Some(opener) };
            return Ok((stream, reader, boot));
        }
        // Acceptor.
        let from = stream.peer_addr().map_err(|e| e.to_string())?;
        let mut pre = [0u8; 6];
        link::read_exact_by(&stream, &mut pre, deadline, "preamble")?;
        if pre[..4] == proto::MAGIC {
            return Err(self.bye(
                &stream,
                "this cluster's daemons prove their host keys (public_key in lanes.toml); this peer sent a \
                 plaintext hello (does its lanes.toml list no keys?)"
                    .into(),
            ));
        }
        if pre[..4] != link::LINK_MAGIC {
            return Err(format!("bad preamble {:02x?} (not a Lanes daemon)", &pre[..4]));
        }
        let version = u16::from_be_bytes([pre[4], pre[5]]);
        if version != PROTOCOL_VERSION {
            return Err(format!("protocol version {version}, this daemon speaks {PROTOCOL_VERSION}"));
        }
        link::read_handshake(&mut hs, &stream, deadline, "first handshake message")?;
        link::write_handshake(&mut hs, &stream, &[])?;
        let payload = link::read_handshake(&mut hs, &stream, deadline, "third handshake message")?;
        let theirs = hs.get_remote_static().and_then(PublicKey::from_bytes);
        let sealed = Sealed::new(hs)?;
        let refuse = |reason: String| {
            if let Ok(bytes) = encode(&PeerMessage::Bye { reason: reason.clone() })
                .and_then(|f| sealed.seal(&f).map_err(|e| proto::FrameError::Malformed(e.to_string())))
            {
                let _ = (&stream).write_all(&bytes);
            }
            reason
        };
        let mut hello_frames = FrameReader::new();
        let _ = hello_frames.fill(&mut &payload[..]);
        let (host, boot) = match hello_frames.next_message::<PeerMessage>() {
            Ok(Some(PeerMessage::Hello { version, host, boot, host_epoch, addresses, .. })) => {
                let boot = PeerBoot { boot, host_epoch, addresses };
                if version != PROTOCOL_VERSION {
                    return Err(refuse(format!("protocol version {version}, this daemon speaks {PROTOCOL_VERSION}")));
                }
                (host, boot)
            }
            _ => return Err(refuse("the handshake did not carry a hello".into())),
        };
        let Some(entry) = self.cluster.host(&host).filter(|h| h.name != self.me.name) else {
            return Err(refuse(format!("host {host:?} is not a peer in this cluster")));
        };
        if theirs.is_none() || theirs != entry.public_key {
            let holder = theirs.and_then(|k| self.cluster.host_with_key(&k)).map(|h| h.name.clone());
            return Err(refuse(format!(
                "a daemon calling itself host {host} proved key {}{}, not host {host}'s key in lanes.toml",
                theirs.map(|k| k.to_string()).unwrap_or_default(),
                holder.map(|h| format!(" (host {h}'s)")).unwrap_or_default()
            )));
        }
        if from.ip() != entry.address.ip() {
            return Err(refuse(format!(
                "host {host} connects from {}, not from its address in lanes.toml ({})",
                from.ip(),
                entry.address.ip()
            )));
        }
        let ours = sealed.seal(&hello).map_err(|e| e.to_string())?;
        (&stream).write_all(&ours).map_err(|e| e.to_string())?;
        let reader = HandshakeReader { frames, host, link: Some(sealed.clone()), opener: Some(sealed.opener()) };
        Ok((stream, reader, boot))
    }

    /// Exchanges plaintext hellos (no host keys: loopback only), bounded by `suspect_after`.
    /// `expect` names the host dialled; an accepted connection may come from any other host
    /// of the cluster. With a cluster secret, each side proves it knows the secret
    /// (`super::secret`) before the connection is used.
    fn plain_handshake(
        &self,
        stream: TcpStream,
        expect: Option<&str>,
    ) -> std::result::Result<(TcpStream, HandshakeReader, PeerBoot), String> {
        let deadline = Instant::now() + self.cluster.suspect_after;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(self.cluster.suspect_after)).map_err(|e| e.to_string())?;
        let own = self.secret.as_ref().map(|_| ClusterSecret::nonce());
        if expect.is_some() {
            write_message(&mut &stream, &self.hello(own.as_deref(), None)).map_err(|e| e.to_string())?;
        }
        let mut reader = FrameReader::new();
        let msg = self.handshake_message(&stream, &mut reader, deadline, "hello")?;
        let PeerMessage::Hello { version, host, boot, nonce, proof, host_epoch, addresses, .. } = msg else {
            return Err(self.bye(&stream, "the first message was not a hello".into()));
        };
        if version != PROTOCOL_VERSION {
            return Err(self.bye(&stream, format!("protocol version {version}, this daemon speaks {PROTOCOL_VERSION}")));
        }
        if let Some(want) = expect {
            if host != want {
                return Err(self.bye(&stream, format!("dialled host {want} but {host} answered")));
            }
        } else if host == self.me.name || self.cluster.host(&host).is_none() {
            return Err(self.bye(&stream, format!("host {host:?} is not a peer in this cluster")));
        }
        if let (Some(secret), Some(own)) = (&self.secret, &own) {
            let Some(challenge) = nonce else {
                return Err(self.bye(&stream, format!("host {host} did not offer to prove the cluster secret")));
            };
            if expect.is_some() {
                // Dialler: check the acceptor's proof, then prove ourselves.
                let proven = proof.is_some_and(|p| secret.verify(&p, Role::Acceptor, own, &challenge, &host));
                if !proven {
                    return Err(self.bye(&stream, format!("host {host} did not prove the cluster secret")));
                }
                let proof = secret.proof(Role::Dialler, &challenge, own, &self.me.name);
                write_message(&mut &stream, &PeerMessage::Auth { proof }).map_err(|e| e.to_string())?;
            } else {
                // Acceptor: answer with our hello and proof, then check the dialler's.
                let proof = secret.proof(Role::Acceptor, &challenge, own, &self.me.name);
                write_message(&mut &stream, &self.hello(Some(own), Some(proof))).map_err(|e| e.to_string())?;
                let proven = match self.handshake_message(&stream, &mut reader, deadline, "proof")? {
                    PeerMessage::Auth { proof } => secret.verify(&proof, Role::Dialler, own, &challenge, &host),
                    _ => false,
                };
                if !proven {
                    return Err(self.bye(&stream, format!("host {host} did not prove the cluster secret")));
                }
            }
        } else if expect.is_none() {
            write_message(&mut &stream, &self.hello(None, None)).map_err(|e| e.to_string())?;
        }
        let boot = PeerBoot { boot, host_epoch, addresses };
        Ok((stream, HandshakeReader { frames: reader, host, link: None, opener: None }, boot))
    }

    /// The next message of a handshake, by `deadline`.
    fn handshake_message(
        &self,
        stream: &TcpStream,
        reader: &mut FrameReader,
        deadline: Instant,
        what: &str,
    ) -> std::result::Result<PeerMessage, String> {
        loop {
            match reader.next_message::<PeerMessage>() {
                Ok(Some(m)) => return Ok(m),
                Ok(None) => {}
                Err(e) => return Err(self.bye(stream, e.to_string())),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(format!("no {what} in time"));
            }
            stream.set_read_timeout(Some(left)).map_err(|e| e.to_string())?;
            match reader.fill(&mut &*stream) {
                Ok(Fill::Closed) => return Err(format!("closed before its {what}")),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    /// Sends a goodbye with `reason` (best effort) and returns the reason.
    pub(super) fn bye(&self, stream: &TcpStream, reason: String) -> String {
        let _ = write_message(&mut &*stream, &PeerMessage::Bye { reason: reason.clone() });
        reason
    }
}
/// The frames read during a handshake (a peer may send more right after its hello), the
/// host that said hello and, on a keyed link, its session.
pub(super) struct HandshakeReader {
    pub(super) frames: FrameReader,
    pub(super) host: String,
    /// The link's session (keyed clusters): frames out are sealed, frames in opened.
    pub(super) link: Option<Sealed>,
    pub(super) opener: Option<Opener>,
}
