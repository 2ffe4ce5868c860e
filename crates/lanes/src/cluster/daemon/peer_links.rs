//! The links to the other hosts' daemons: the dialler's redials, the acceptor's accepts,
//! probes of a host whose daemon is away, and per connection a reader (frames in, a peer's
//! messages handled) and a writer (a bounded queue of frames out, sealed on keyed links).
//! What a link sees (a hello, a frame, its end, an answered connect) goes to
//! [`Membership`](super::membership::Membership) with the time it happened.

use std::io::{self, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Instant;

use super::handshake::{HandshakeReader, PeerBoot};
use super::{Shared, PEER_QUEUE, TICK};
use crate::cluster::config::HostEntry;
use crate::cluster::link::Opener;
use crate::cluster::proto::{encode, Answer, Fill, FrameReader, PeerMessage};

/// This daemon's side of one other host: its connection and what is owed to it. (Its
/// state is [`Membership`](super::membership::Membership)'s.)
pub(super) struct Link {
    pub(super) entry: HostEntry,
    pub(super) conn: Option<Conn>,
    /// This daemon dials the peer (our name sorts first).
    dials: bool,
    /// Releases of the peer's grants that could not be sent (no connection): sent when it
    /// is connected again, dropped when it is Lost (it released them itself).
    pub(super) owed: Vec<(u64, bool)>,
    /// The connection generation our `Holding` was sent on.
    pub(super) holding_sent: Option<u64>,
}

impl Link {
    /// The link of `me` to host `entry`, not connected yet.
    pub(super) fn new(entry: &HostEntry, me: &HostEntry) -> Link {
        Link { entry: entry.clone(), conn: None, dials: me.name < entry.name, owed: Vec::new(), holding_sent: None }
    }
}

/// One live control connection: the writer's queue and the socket (to shut it down).
#[derive(Clone)]
pub(super) struct Conn {
    pub(super) generation: u64,
    frames: SyncSender<Vec<u8>>,
    stream: Arc<TcpStream>,
}

impl Conn {
    /// Queues a frame; false if the connection is stalled or gone.
    pub(super) fn send(&self, msg: &PeerMessage) -> bool {
        match encode(msg) {
            Ok(frame) => self.send_frame(frame),
            Err(_) => false,
        }
    }

    pub(super) fn send_frame(&self, frame: Vec<u8>) -> bool {
        match self.frames.try_send(frame) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => false,
        }
    }

    pub(super) fn close(&self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// Whether `s` is connected to itself: on one machine, a connect to a port nobody listens
/// on in the ephemeral range may be given that very port as its source (TCP simultaneous
/// open). Nobody answered then.
fn is_self_connection(s: &TcpStream) -> bool {
    matches!((s.local_addr(), s.peer_addr()), (Ok(l), Ok(p)) if l == p)
}

/// Closes a probe's connection with a reset, so that it leaves nothing in TIME_WAIT on
/// its port (a probe's own port may be the port a restarting daemon is about to bind).
fn close_at_once(s: TcpStream) {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: the fd is open for the duration of the call; `linger` is a valid value of the
    // size passed.
    unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&s),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
    drop(s);
}

impl Shared {
    /// Dials peer `i` while it has no connection (when this daemon is the dialler), and
    /// while its daemon is away takes a refused or accepted connect as the host's sign of
    /// life (the acceptor only probes).
    pub(super) fn dial_loop(&self, i: usize) {
        let (host, addr, dials) = {
            let st = self.lock();
            (st.links[i].entry.name.clone(), st.links[i].entry.address, st.links[i].dials)
        };
        if !dials {
            return self.probe_loop(i, addr);
        }
        if self.key.is_none() && !addr.ip().is_loopback() {
            self.log(format_args!(
                "host {host} ({addr}): not dialled: without host keys in lanes.toml this daemon serves loopback only"
            ));
            return;
        }
        let mut last_error = String::new();
        while !self.stopping() {
            let connected = self.lock().links[i].conn.is_some();
            if !connected {
                let attempt = TcpStream::connect_timeout(&addr, self.cluster.suspect_after)
                    .and_then(|s| {
                        if is_self_connection(&s) {
                            close_at_once(s);
                            return Err(io::Error::new(
                                io::ErrorKind::AddrInUse,
                                "connected to itself (nobody listens)",
                            ));
                        }
                        self.host_answered(i);
                        Ok(s)
                    })
                    .inspect_err(|e| {
                        if e.kind() == io::ErrorKind::ConnectionRefused {
                            self.host_answered(i);
                        }
                    })
                    .map_err(|e| format!("connecting to {addr}: {e}"))
                    .and_then(|s| self.handshake(s, Some(&host)).map_err(|e| format!("hello with {addr}: {e}")));
                match attempt {
                    Ok((stream, reader, boot)) => {
                        last_error.clear();
                        self.serve_peer(i, stream, reader, boot);
                    }
                    Err(e) => {
                        if e != last_error {
                            self.log(format_args!("host {host}: {e} (retrying every heartbeat)"));
                            last_error = e;
                        }
                    }
                }
            }
            std::thread::sleep(self.cluster.heartbeat);
        }
    }

    /// While peer `i`'s daemon is away, connects to its address every heartbeat: refused
    /// (nobody listens yet) or accepted (its new daemon, which dials us itself), the host
    /// answered. A connect that times out or finds no route is silence.
    fn probe_loop(&self, i: usize, addr: SocketAddr) {
        while !self.stopping() {
            if self.lock().membership.away(i) {
                match TcpStream::connect_timeout(&addr, self.cluster.heartbeat) {
                    Ok(s) => {
                        if !is_self_connection(&s) {
                            self.host_answered(i);
                        }
                        close_at_once(s);
                    }
                    Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => self.host_answered(i),
                    Err(_) => {}
                }
            }
            std::thread::sleep(self.cluster.heartbeat);
        }
    }

    /// Peer `i`'s host answered a connect while its daemon is away: a sign of life.
    fn host_answered(&self, i: usize) {
        self.lock().membership.on_host_answered(i, Instant::now());
    }

    /// Accepts peer daemons.
    pub(super) fn accept_peers(self: Arc<Self>, listener: TcpListener) {
        for stream in listener.incoming() {
            if self.stopping() {
                return;
            }
            let stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    self.log(format_args!("accepting a peer: {e}"));
                    std::thread::sleep(TICK);
                    continue;
                }
            };
            let s = self.clone();
            let spawned = crate::platform::threads::spawn("lanes-d-peer", move || {
                let from = match stream.peer_addr() {
                    Ok(a) => a,
                    Err(e) => return s.log(format_args!("a peer connection without an address: {e}")),
                };
                if let Err(e) = s.admit_source(&stream, from.ip()) {
                    return s.log_refusal(from, &e);
                }
                match s.handshake(stream, None) {
                    Ok((stream, reader, boot)) => {
                        if let Some(i) = s.peer_index(&reader.host) {
                            s.serve_peer(i, stream, reader, boot);
                        }
                    }
                    Err(e) => s.log_refusal(from, &e),
                }
            });
            if let Err(e) = spawned {
                self.log(format_args!("cannot serve a peer: {e}"));
            }
        }
    }

    /// Logs a refused peer connection, as [`Membership::on_refused`] rate-limits it.
    ///
    /// [`Membership::on_refused`]: super::membership::Membership::on_refused
    fn log_refusal(&self, from: SocketAddr, reason: &str) {
        let mut st = self.lock();
        let actions = st.membership.on_refused(from, reason, Instant::now());
        self.apply(&mut st, actions);
    }

    /// Whether a connection from `ip` may say hello at all: with keys, from one of the
    /// cluster's addresses; without, from loopback only (then with a goodbye saying why).
    fn admit_source(&self, stream: &TcpStream, ip: IpAddr) -> std::result::Result<(), String> {
        if self.key.is_none() {
            if ip.is_loopback() {
                return Ok(());
            }
            let why = "this daemon has no host keys in lanes.toml and serves loopback only (run `lanes keygen` \
                       on each host and list each host's public_key)"
                .to_string();
            let _ = stream.set_write_timeout(Some(self.cluster.heartbeat));
            return Err(self.bye(stream, why));
        }
        if self.cluster.hosts.iter().any(|h| h.address.ip() == ip) {
            Ok(())
        } else {
            Err(format!("{ip} is not the address of any host in lanes.toml"))
        }
    }

    /// Makes a handshaken connection peer `i`'s, then reads it until it ends.
    fn serve_peer(&self, i: usize, stream: TcpStream, reader: HandshakeReader, boot: PeerBoot) {
        let stream = Arc::new(stream);
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(PEER_QUEUE);
        let generation = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Conn { generation, frames: tx, stream: stream.clone() };
        let host = {
            let mut st = self.lock();
            if self.stopping() {
                return;
            }
            if let Some(old) = st.links[i].conn.take() {
                old.close(); // a newer connection replaces it (the peer restarted or redialled)
            }
            // The new connection is installed after the hello's actions: a restarted host's
            // Lost closes the connections it had, not this one.
            let actions = st.membership.on_hello(i, boot.boot, &boot.host_epoch, Instant::now());
            self.apply(&mut st, actions);
            let host = st.links[i].entry.name.clone();
            // The addresses it claims, believed only on an authenticated link.
            self.claims_at_hello(&mut st, &host, &boot.addresses, reader.link.is_some());
            let link = &mut st.links[i];
            link.conn = Some(conn.clone());
            for (grant, died) in std::mem::take(&mut link.owed) {
                if !conn.send(&PeerMessage::Release { grant, died }) {
                    link.owed.push((grant, died));
                }
            }
            // Every half of ours whose peer is there, whatever it heard before.
            let outs = st.cross.pairing.on_connected(&host);
            self.carry_out(&mut st, outs);
            host
        };
        let writer_stream = stream.clone();
        let sealer = reader.link.clone();
        let writer = crate::platform::threads::spawn("lanes-d-write", move || {
            for frame in rx.iter() {
                let bytes = match &sealer {
                    Some(s) => match s.seal(&frame) {
                        Ok(b) => b,
                        Err(_) => break,
                    },
                    None => frame,
                };
                if (&*writer_stream).write_all(&bytes).is_err() {
                    break;
                }
            }
            let _ = writer_stream.shutdown(Shutdown::Both);
        });
        if let Err(e) = writer {
            self.log(format_args!("host {host}: cannot start a writer: {e}"));
            conn.close();
        }
        let reason = self.read_peer(i, &conn, reader.frames, reader.opener);
        drop(conn);
        self.connection_ended(i, generation, &reason);
    }

    /// Reads frames from a peer until the connection ends; returns why it ended.
    fn read_peer(&self, i: usize, conn: &Conn, mut reader: FrameReader, mut opener: Option<Opener>) -> String {
        if let Err(e) = conn.stream.set_read_timeout(Some(TICK)) {
            return e.to_string();
        }
        loop {
            loop {
                match reader.next_message::<PeerMessage>() {
                    Ok(Some(msg)) => {
                        if let Some(end) = self.on_peer_message(i, conn, msg) {
                            return end;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let reason = format!("bad frame: {e}");
                        conn.send(&PeerMessage::Bye { reason: reason.clone() });
                        return reason;
                    }
                }
            }
            if self.stopping() {
                return "daemon stopping".into();
            }
            let filled = match &mut opener {
                Some(o) => reader.fill(&mut o.on(&mut &*conn.stream)),
                None => reader.fill(&mut &*conn.stream),
            };
            match filled {
                Ok(Fill::Closed) => return "connection closed by peer".into(),
                Ok(_) => {}
                Err(e) => return format!("connection failed: {e}"),
            }
        }
    }

    /// Handles one frame; `Some(reason)` ends the connection.
    fn on_peer_message(&self, i: usize, conn: &Conn, msg: PeerMessage) -> Option<String> {
        let host = {
            let mut st = self.lock();
            match &st.links[i].conn {
                Some(c) if c.generation == conn.generation => {}
                _ => return Some("replaced by a newer connection".into()),
            }
            st.membership.on_frame(i, Instant::now());
            st.links[i].entry.name.clone()
        };
        match msg {
            PeerMessage::Heartbeat => None,
            PeerMessage::Query { id, query } => {
                let answer = self.answer_locally(&host, &query, conn.generation);
                let granted = match &answer {
                    Answer::Granted { grant } => Some(grant.grant),
                    _ => None,
                };
                if !conn.send(&PeerMessage::Answer { id, answer }) {
                    if let Some(g) = granted {
                        self.release_grant(g, Some(&host), false); // it will never hear of it
                    }
                    return Some("cannot queue an answer: connection stalled".into());
                }
                None
            }
            PeerMessage::Answer { id, answer } => {
                let waiting = self.pending.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                match (waiting, answer) {
                    (Some(p), answer) => {
                        if let Err(mpsc::SendError(Answer::Granted { grant })) = p.answer.send(answer) {
                            // The asker gave up meanwhile: nobody holds the grant.
                            conn.send(&PeerMessage::Release { grant: grant.grant, died: false });
                        }
                    }
                    (None, Answer::Granted { grant }) => {
                        // Answered after the asker's timeout: give the slot back.
                        conn.send(&PeerMessage::Release { grant: grant.grant, died: false });
                    }
                    (None, _) => {}
                }
                None
            }
            PeerMessage::Release { grant, died } => {
                self.release_grant(grant, Some(&host), died);
                None
            }
            PeerMessage::GrantStatus { grant, status } => {
                self.tell_requester(grant, Some(&host), status);
                None
            }
            PeerMessage::Holding { grants } => {
                self.reconcile(&host, conn, &grants);
                None
            }
            PeerMessage::SocketHalf { half } => {
                self.on_peer_sockets(|c, vouch| c.pairing.on_half(&c.book, &host, half, vouch));
                None
            }
            PeerMessage::SocketSync { halves, more } => {
                self.on_peer_sockets(|c, vouch| c.pairing.on_sync(&c.book, &host, halves, more, vouch));
                None
            }
            PeerMessage::SocketWithdraw { local, remote, cookie } => {
                self.on_peer_sockets(|c, _| c.pairing.on_withdraw(&c.book, &host, local, remote, cookie));
                None
            }
            PeerMessage::SocketPaired { local, remote, cookie, peer_cookie, generation, handles, peer_handles } => {
                self.on_peer_sockets(|c, vouch| {
                    let theirs = (local, cookie, handles);
                    c.pairing.on_paired(&c.book, &host, theirs, (remote, peer_cookie, peer_handles), generation, vouch)
                });
                None
            }
            PeerMessage::Bye { reason } => Some(format!("peer said goodbye: {reason}")),
            PeerMessage::Hello { .. } => Some("a second hello on one connection".into()),
            PeerMessage::Auth { .. } => Some("a proof outside the hello exchange".into()),
        }
    }

    /// Connection `generation` of peer `i` ended (`reason`): if it is still the peer's,
    /// the membership hears how.
    fn connection_ended(&self, i: usize, generation: u64, reason: &str) {
        let mut st = self.lock();
        let current = st.links[i].conn.as_ref().is_some_and(|c| c.generation == generation);
        if !current {
            return;
        }
        if let Some(c) = st.links[i].conn.take() {
            c.close();
        }
        if self.stopping() {
            return;
        }
        // Closed or reset by the peer's kernel: its host lives, only its daemon went away
        // (then `probe_loop`, or the dialler's refused dials, keep hearing from the host).
        let host_answers = reason == "connection closed by peer" || reason.contains("reset by peer");
        let actions = st.membership.on_link_ended(i, host_answers, reason, Instant::now());
        self.apply(&mut st, actions);
    }
}
