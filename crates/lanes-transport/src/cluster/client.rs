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
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use crate::platform::files::Held;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::proto::{
    encode, write_message, AddressOwner, Fill, FrameReader, Grant, GrantStatus, GroupInfo, HalfRegistration, HeldGrant,
    HostStatus, NodeEvent, NodeProbe, ObjectInfo, ObjectKind, Reply, Request, SocketsStatus, PROTOCOL_VERSION,
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
    /// Held (`platform::files::Held`): a connection lives as long as the stream objects it
    /// serves, in a program's process whose stray closes must not reach it.
    stream: Option<Held<UnixStream>>,
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

    /// This host's cross-host socket halves and the daemon's counts of refusals and
    /// requests.
    pub fn sockets(&mut self, timeout: Duration) -> Result<SocketsStatus> {
        match self.conn.call(&Request::Sockets, "the cross-host socket halves", timeout)? {
            Reply::Sockets { status } => Ok(status),
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

// ---------------------------------------------------------------------------------------
// One-shot requests: what the socket library asks from inside a program's calls
// ---------------------------------------------------------------------------------------

/// Sends `req` to the daemon of the fabric directory `dir` on a connection of its own and
/// returns its one reply, all within `timeout`; no hello. Made for the preloaded socket
/// library, inside a program's `connect`, `accept` or `close`: no thread, a connect that
/// never blocks (a daemon whose backlog is full is busy, not waited for), and sends that
/// raise no SIGPIPE in the program (`MSG_NOSIGNAL`).
pub fn one_shot(dir: &Path, req: &Request, timeout: Duration) -> Result<Reply> {
    let deadline = Instant::now() + timeout;
    let socket = Client::socket_path(dir);
    let protocol = |reason: String| Error::Protocol { socket: socket.clone(), reason };
    let frame = encode(req).map_err(|e| protocol(e.to_string()))?;
    // Held: a request may be made from a thread of the library while the program runs.
    let fd = connect_nonblocking(&socket)?;
    let mut sent = 0;
    while sent < frame.len() {
        wait_for(&fd, libc::POLLOUT, deadline, &socket, "sending a request")?;
        // SAFETY: the frame's bytes from `sent` are valid for reads of their length.
        let n = unsafe {
            libc::send(fd.as_raw_fd(), frame[sent..].as_ptr().cast(), frame.len() - sent, libc::MSG_NOSIGNAL)
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) {
                return Err(protocol(format!("sending: {e}")));
            }
        } else {
            sent += n as usize;
        }
    }
    let mut reader = FrameReader::new();
    loop {
        if let Some(reply) = reader.next_message::<Reply>().map_err(|e| protocol(e.to_string()))? {
            return match reply {
                Reply::Error { reason } => Err(protocol(reason)),
                r => Ok(r),
            };
        }
        wait_for(&fd, libc::POLLIN, deadline, &socket, "the daemon's answer")?;
        let mut buf = [0u8; 4096];
        // SAFETY: buf is valid for writes of its length.
        let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        match n {
            0 => return Err(protocol("the daemon closed the connection".into())),
            n if n > 0 => {
                let _ = reader.fill(&mut &buf[..n as usize]);
            }
            _ => {
                let e = io::Error::last_os_error();
                if !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) {
                    return Err(protocol(format!("receiving: {e}")));
                }
            }
        }
    }
}

/// A non-blocking connect to the Unix socket `path`: `NoDaemon` when nothing listens there,
/// `Timeout` (with "busy") when its backlog is full.
fn connect_nonblocking(path: &Path) -> Result<Held<OwnedFd>> {
    connect_held(path, libc::SOCK_NONBLOCK).map_err(|e| match e.raw_os_error() {
        Some(libc::EAGAIN) => {
            Error::Timeout { what: format!("a connection to {} (the daemon is busy)", path.display()), waited_ms: 0 }
        }
        _ => Error::NoDaemon { socket: path.to_path_buf(), source: e },
    })
}

/// A Unix stream socket (with `flags`, say `SOCK_NONBLOCK`) connected to `path`. It is held
/// (moved to a high number) before it connects, not after: a program closing the number it
/// came at a second time (iperf3 does, at the end of a test) while the connect waits would
/// otherwise close the library's socket, and the library's drop a number not its own.
fn connect_held<T: AsRawFd + FromRawFd>(path: &Path, flags: libc::c_int) -> io::Result<Held<T>> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: a zeroed sockaddr_un is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "path too long for a Unix socket"));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    let fd = Held::make(|| {
        // SAFETY: plain socket creation.
        let raw = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC | flags, 0) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw is a new descriptor nobody else owns.
        Ok(unsafe { T::from_raw_fd(raw) })
    })?;
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: addr is a valid sockaddr_un of at least `len` bytes.
    let r =
        unsafe { libc::connect(fd.as_raw_fd(), (&addr as *const libc::sockaddr_un).cast(), len as libc::socklen_t) };
    if r == 0 {
        Ok(fd)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Waits until `fd` is ready for `events`, at most until `deadline`.
fn wait_for(fd: &OwnedFd, events: libc::c_short, deadline: Instant, socket: &Path, what: &str) -> Result<()> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Error::Timeout { what: what.to_string(), waited_ms: 0 });
        }
        let mut p = libc::pollfd { fd: fd.as_raw_fd(), events, revents: 0 };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: p is one valid pollfd.
        let r = unsafe { libc::poll(&mut p, 1, ms) };
        if r > 0 {
            return Ok(());
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(Error::Protocol { socket: socket.to_path_buf(), reason: format!("{what}: {e}") });
            }
        }
    }
}

/// Which host of the cluster `address` is on, as the daemon of `dir` knows it (one-shot).
pub fn host_of(dir: &Path, address: IpAddr, timeout: Duration) -> Result<AddressOwner> {
    match one_shot(dir, &Request::HostOf { address }, timeout)? {
        Reply::HostOf { owner } => Ok(owner),
        other => Err(unexpected(dir, other)),
    }
}

/// Registers a TCP socket half of this process whose peer is on another host of the
/// cluster (one-shot): the answer names that host. A refusal says why
/// ([`Error::Refused`]).
pub fn register_half(dir: &Path, half: &HalfRegistration, timeout: Duration) -> Result<String> {
    match one_shot(dir, &Request::RegisterHalf { half: half.clone() }, timeout)? {
        Reply::Registered { result } => result.map_err(Error::Refused),
        other => Err(unexpected(dir, other)),
    }
}

/// This process's half `local`-`remote` (cookie `cookie`) is gone (one-shot).
/// `fabric`: the bytes the connection sent and received over the fabric (the daemon's totals).
pub fn withdraw_half(
    dir: &Path,
    local: SocketAddr,
    remote: SocketAddr,
    cookie: u64,
    fabric: (u64, u64),
    timeout: Duration,
) -> Result<()> {
    let (fabric_sent, fabric_received) = fabric;
    match one_shot(dir, &Request::WithdrawHalf { local, remote, cookie, fabric_sent, fabric_received }, timeout)? {
        Reply::Withdrawn => Ok(()),
        other => Err(unexpected(dir, other)),
    }
}

fn unexpected(dir: &Path, reply: Reply) -> Error {
    Error::Protocol { socket: Client::socket_path(dir), reason: format!("unexpected answer {reply:?}") }
}

/// The daemon-side budget: a little less than the caller's, so its answer (a refusal with
/// a reason) arrives before the caller gives up.
fn budget_ms(timeout: Duration) -> u64 {
    let t = timeout.as_millis() as u64;
    t.saturating_sub((t / 10).clamp(1, 50)).max(1)
}

/// A blocking connect has no timeout and blocks while the daemon's backlog is full (a
/// hung daemon): connect on a helper thread and stop waiting at the deadline.
fn connect_within(socket: &Path, timeout: Duration) -> Result<Held<UnixStream>> {
    let (tx, rx) = mpsc::channel();
    let path = socket.to_path_buf();
    crate::platform::threads::spawn("lanes-connect", move || {
        let _ = tx.send(connect_held(&path, 0));
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
            .and_then(|_| write_message(&mut **stream, req));
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
            let got = stream.set_read_timeout(Some(left)).and_then(|_| self.reader.fill(&mut **stream));
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
