//! What a process uses to talk to its host's daemon over `<fabric dir>/daemon.sock`.
//!
//! Every call takes a timeout and returns by then: connecting, sending, and waiting for
//! the answer (which, for a node on another host, is the other host's daemon's answer
//! relayed). A call that timed out leaves the connection unusable (its answer may still
//! come); later calls on it fail at once and the caller connects again.
//!
//! **Grants live as long as the connection.** A connection slot claimed with
//! [`Client::connect_object`] is held for this process until [`Client::disconnect_object`],
//! or until this client's connection to the daemon closes: dropped, the process exited or
//! died, or a call failed or timed out (which drops the connection, see above). A process
//! keeps one client open, used for nothing that may time out carelessly, while it has
//! connections to remote objects; [`Client::is_usable`] says whether its grants still hold.

use std::io;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::proto::{
    write_message, Fill, FrameReader, Grant, GrantStatus, GroupInfo, HeldGrant, HostStatus, NodeEvent, NodeProbe,
    ObjectInfo, ObjectKind, Reply, Request, PROTOCOL_VERSION,
};
use super::{Error, Result, SOCKET_NAME};
use crate::config::NodeId;

/// A connection to the local daemon.
#[derive(Debug)]
pub struct Client {
    conn: Connection,
    host: String,
    boot: u64,
    /// The subscription that hears the status of grants this client obtains.
    notify: Option<u64>,
}

#[derive(Debug)]
struct Connection {
    stream: Option<UnixStream>,
    reader: FrameReader,
    socket: PathBuf,
}

impl Client {
    /// The daemon's socket in the fabric directory `dir`.
    pub fn socket_path(dir: &Path) -> PathBuf {
        dir.join(SOCKET_NAME)
    }

    /// Connects to the daemon serving the fabric directory `dir` and exchanges hellos.
    pub fn connect(dir: &Path, timeout: Duration) -> Result<Client> {
        let started = Instant::now();
        let socket = Self::socket_path(dir);
        let stream = connect_within(&socket, timeout)?;
        let mut conn = Connection { stream: Some(stream), reader: FrameReader::new(), socket };
        let left = timeout.saturating_sub(started.elapsed());
        match conn.call(&Request::Hello { version: PROTOCOL_VERSION }, "the daemon's hello", left)? {
            Reply::Hello { host, boot, .. } => Ok(Client { conn, host, boot, notify: None }),
            other => Err(conn.unexpected(other)),
        }
    }

    /// The host the daemon serves.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The daemon's boot value: random per daemon start, so a changed value means the
    /// daemon restarted (and what it held for this process is gone).
    pub fn boot(&self) -> u64 {
        self.boot
    }

    /// Grants this client obtains from now on report their object's [`GrantStatus`]
    /// changes to the subscription `subscriber` ([`Subscription::id`]) of the same daemon.
    pub fn notify_to(&mut self, subscriber: u64) {
        self.notify = Some(subscriber);
    }

    /// Whether `node` has object `id` of `kind`, whether it is available, and its size,
    /// as the fabric directory of the node's host says. "No such object" is
    /// [`Error::Refused`] with [`super::Refusal::NotFound`] ([`Error::is_not_found`]).
    pub fn lookup(&mut self, node: NodeId, kind: ObjectKind, id: u32, timeout: Duration) -> Result<ObjectInfo> {
        let req = Request::Lookup { node: node.get(), kind, id, timeout_ms: budget_ms(timeout) };
        match self.conn.call(&req, &format!("a lookup of {kind} {id:#x} on node {node}"), timeout)? {
            Reply::Lookup { result } => result.map_err(Error::Refused),
            other => Err(self.conn.unexpected(other)),
        }
    }

    /// Whether `node`'s host can be reached and how many processes act as the node.
    pub fn probe_node(&mut self, node: NodeId, timeout: Duration) -> Result<NodeProbe> {
        let req = Request::Probe { node: node.get(), timeout_ms: budget_ms(timeout) };
        match self.conn.call(&req, &format!("a probe of node {node}"), timeout)? {
            Reply::Probe { result } => result.map_err(Error::Refused),
            other => Err(self.conn.unexpected(other)),
        }
    }

    /// Claims a connection slot of object `id` of `kind` on `node` for this process, acting
    /// as `peer_node`, and returns the grant with the owner's export record (how to reach the
    /// data over libfabric). Works for a node of this host too (no forwarding then).
    ///
    /// Refusals are [`Error::Refused`]: [`super::Refusal::NotFound`] (missing, removed, or
    /// its owner is dead: [`Error::is_not_found`]) and [`super::Refusal::NotAvailable`] (not
    /// made available or not exported yet: [`Error::is_not_available`]) are worth retrying,
    /// as a local connect retries them; `TooManyConnections`, `Corrupt`, `HostUnreachable`,
    /// `Timeout` and `Failed` (such as a bad node id) are not. The grant lasts until
    /// [`Client::disconnect_object`] or until this connection closes (see the module's
    /// documentation).
    pub fn connect_object(
        &mut self,
        node: NodeId,
        kind: ObjectKind,
        id: u32,
        peer_node: NodeId,
        timeout: Duration,
    ) -> Result<Grant> {
        let req = Request::Connect {
            node: node.get(),
            kind,
            id,
            peer_node: peer_node.get(),
            timeout_ms: budget_ms(timeout),
            notify: self.notify,
        };
        match self.conn.call(&req, &format!("a connection to {kind} {id:#x} on node {node}"), timeout)? {
            Reply::Connect { result } => result.map_err(Error::Refused),
            other => Err(self.conn.unexpected(other)),
        }
    }

    /// Registers `grant`, obtained through an earlier daemon of this host (which
    /// restarted), with this daemon: it lives on with this client from now on, as if
    /// connected on it, and its status changes go to the subscription `notify`. A local
    /// object's grant the daemon cannot take over is refused; another host's is checked by
    /// that host, which answers [`GrantStatus::Forgotten`] if it cannot.
    pub fn adopt_object(&mut self, grant: HeldGrant, notify: Option<u64>, timeout: Duration) -> Result<()> {
        let what = format!("registering grant {:016x} again", grant.grant);
        match self.conn.call(&Request::Adopt { grant, notify }, &what, timeout)? {
            Reply::Adopted { result } => result.map_err(Error::Refused),
            other => Err(self.conn.unexpected(other)),
        }
    }

    /// Releases `grant` (the [`Grant::grant`] of a grant this client obtained); releasing
    /// one already released, or not this client's, does nothing.
    pub fn disconnect_object(&mut self, grant: u64, timeout: Duration) -> Result<()> {
        match self.conn.call(&Request::Disconnect { grant }, &format!("the release of grant {grant:016x}"), timeout)? {
            Reply::Disconnected => Ok(()),
            other => Err(self.conn.unexpected(other)),
        }
    }

    /// Whether this client still has its connection to the daemon: false once a call timed
    /// out or failed (the connection is then closed, and the daemon released this client's
    /// grants). A daemon that went away is noticed at the next call.
    pub fn is_usable(&self) -> bool {
        self.conn.stream.is_some()
    }

    /// Every live reflective group of the cluster, from every host's daemon: a host that
    /// cannot answer (not operational, or too slow) makes this a refusal.
    pub fn groups(&mut self, timeout: Duration) -> Result<Vec<GroupInfo>> {
        let req = Request::Groups { timeout_ms: budget_ms(timeout) };
        match self.conn.call(&req, "the cluster's reflective groups", timeout)? {
            Reply::Groups { result } => result.map_err(Error::Refused),
            other => Err(self.conn.unexpected(other)),
        }
    }

    /// Every host of the cluster (this one first) and its state as this daemon sees it.
    pub fn cluster(&mut self, timeout: Duration) -> Result<Vec<HostStatus>> {
        match self.conn.call(&Request::Cluster, "the cluster's hosts", timeout)? {
            Reply::Cluster { hosts } => Ok(hosts),
            other => Err(self.conn.unexpected(other)),
        }
    }

    /// Turns this connection into a subscription to node events.
    pub fn subscribe(mut self, timeout: Duration) -> Result<Subscription> {
        match self.conn.call(&Request::Subscribe, "the subscription", timeout)? {
            Reply::Subscribed { hosts, subscriber } => {
                Ok(Subscription { conn: self.conn, initial: hosts, id: subscriber, boot: self.boot })
            }
            other => Err(self.conn.unexpected(other)),
        }
    }
}

/// Node events from the daemon, in the order it saw them, and the status changes of the
/// grants that named this subscription ([`Client::notify_to`]).
#[derive(Debug)]
pub struct Subscription {
    conn: Connection,
    initial: Vec<HostStatus>,
    id: u64,
    boot: u64,
}

/// What a subscription hears.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A node's host changed state.
    Node(NodeEvent),
    /// The object of a grant changed ([`Client::notify_to`]).
    Grant { grant: u64, status: GrantStatus },
}

impl Subscription {
    /// The hosts and states when the subscription began; events are changes from these.
    pub fn initial(&self) -> &[HostStatus] {
        &self.initial
    }

    /// Names this subscription for [`Client::notify_to`].
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The daemon's boot value ([`Client::boot`]).
    pub fn boot(&self) -> u64 {
        self.boot
    }

    /// The next node event, waiting at most `timeout`: `Ok(None)` if none came. Grant
    /// notices are skipped.
    pub fn next_event(&mut self, timeout: Duration) -> Result<Option<NodeEvent>> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_notice(left)? {
                None => return Ok(None),
                Some(Notice::Node(event)) => return Ok(Some(event)),
                Some(Notice::Grant { .. }) => {}
            }
        }
    }

    /// The next notice, waiting at most `timeout`: `Ok(None)` if none came. An error means
    /// the subscription ended (the daemon went away or broke the protocol).
    pub fn next_notice(&mut self, timeout: Duration) -> Result<Option<Notice>> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.conn.receive(deadline)? {
                None => return Ok(None),
                Some(Reply::Event { event }) => return Ok(Some(Notice::Node(event))),
                Some(Reply::GrantStatus { grant, status }) => return Ok(Some(Notice::Grant { grant, status })),
                Some(Reply::KeepAlive) => {}
                Some(other) => return Err(self.conn.unexpected(other)),
            }
        }
    }
}

/// The daemon-side budget: a little less than the caller's, so its answer (a refusal with
/// a reason) arrives before the caller gives up.
fn budget_ms(timeout: Duration) -> u64 {
    let t = timeout.as_millis() as u64;
    t.saturating_sub((t / 10).clamp(1, 50)).max(1)
}

/// `UnixStream::connect` has no timeout and blocks while the daemon's backlog is full (a
/// hung daemon): connect on a helper thread and stop waiting at the deadline.
fn connect_within(socket: &Path, timeout: Duration) -> Result<UnixStream> {
    let (tx, rx) = mpsc::channel();
    let path = socket.to_path_buf();
    std::thread::Builder::new()
        .name("lanes-connect".into())
        .spawn(move || {
            let _ = tx.send(UnixStream::connect(&path));
        })
        .map_err(|e| Error::io("starting a connect thread", e))?;
    match rx.recv_timeout(timeout) {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(source)) => Err(Error::NoDaemon { socket: socket.to_path_buf(), source }),
        Err(_) => Err(Error::Timeout {
            what: format!("a connection to {}", socket.display()),
            waited_ms: timeout.as_millis() as u64,
        }),
    }
}

impl Connection {
    fn protocol(&self, reason: impl Into<String>) -> Error {
        Error::Protocol { socket: self.socket.clone(), reason: reason.into() }
    }

    fn unexpected(&mut self, reply: Reply) -> Error {
        self.stream = None;
        match reply {
            Reply::Error { reason } => self.protocol(reason),
            other => self.protocol(format!("unexpected answer {other:?}")),
        }
    }

    /// Sends `req` and waits for one reply, all within `timeout`.
    fn call(&mut self, req: &Request, what: &str, timeout: Duration) -> Result<Reply> {
        let started = Instant::now();
        let deadline = started + timeout;
        let Some(stream) = self.stream.as_mut() else {
            return Err(self.protocol("connection unusable after an earlier timeout or error; connect again"));
        };
        let sent = stream
            .set_write_timeout(Some(timeout.max(Duration::from_millis(1))))
            .and_then(|_| write_message(stream, req));
        if let Err(e) = sent {
            self.stream = None;
            return Err(if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
                Error::Timeout { what: format!("sending the request for {what}"), waited_ms: ms(started) }
            } else {
                self.protocol(format!("sending: {e}"))
            });
        }
        match self.receive(deadline)? {
            Some(reply) => Ok(reply),
            None => {
                self.stream = None;
                Err(Error::Timeout { what: what.to_string(), waited_ms: ms(started) })
            }
        }
    }

    /// The next frame before `deadline`, or None.
    fn receive(&mut self, deadline: Instant) -> Result<Option<Reply>> {
        loop {
            match self.reader.next_message::<Reply>() {
                Ok(Some(r)) => return Ok(Some(r)),
                Ok(None) => {}
                Err(e) => {
                    self.stream = None;
                    return Err(self.protocol(e.to_string()));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let Some(stream) = self.stream.as_mut() else {
                return Err(self.protocol("connection unusable after an earlier timeout or error; connect again"));
            };
            let got = stream.set_read_timeout(Some(left)).and_then(|_| self.reader.fill(stream));
            match got {
                Ok(Fill::Closed) => {
                    self.stream = None;
                    return Err(self.protocol("the daemon closed the connection"));
                }
                Ok(_) => {}
                Err(e) => {
                    self.stream = None;
                    return Err(self.protocol(format!("receiving: {e}")));
                }
            }
        }
    }
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis() as u64
}
