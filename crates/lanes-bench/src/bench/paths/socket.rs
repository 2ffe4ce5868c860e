//! The socket paths: one benchmark, run over kernel TCP loopback, Unix domain stream sockets
//! and accelerated TCP (`sockets.rs`: this code with the library preloaded), so every socket
//! figure comes from the same code.
//!
//! *Latency*: the client writes a `size`-byte message, the peer reads it in full and writes
//! one back, the client reads it in full; closing the connection ends the slice.
//! *Throughput*: the client writes `size`-byte messages for the slice (each one `write`),
//! then shuts its side down; the peer reads full messages until end of stream, checking
//! each one's stamp, and answers with the count, which stops the client's clock.
//!
//! Every slice uses a fresh connection. Sockets carry TCP_NODELAY and 60-second timeouts,
//! so a peer that stops answering fails the run instead of hanging it.

use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixListener, UnixStream};
use std::time::Duration;

use crate::bench::paths::path::{pattern, stamp, stamped, ClientOffer, ClientPath, PeerPath, SetupEnv, Streamed};
use crate::bench::wait::{poll_ready, Waiter};
use crate::measure::clock::now_ticks;
use crate::measure::ticks::TickHistogram;

const IO_TIMEOUT: Duration = Duration::from_secs(60);
const ACCEPT_TIMEOUT_MS: i32 = 30_000;

/// A connected stream socket of either family.
trait Sock: Read + Write {
    fn shutdown_write(&self) -> std::io::Result<()>;
}

impl Sock for TcpStream {
    fn shutdown_write(&self) -> std::io::Result<()> {
        self.shutdown(Shutdown::Write)
    }
}

impl Sock for UnixStream {
    fn shutdown_write(&self) -> std::io::Result<()> {
        self.shutdown(Shutdown::Write)
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` if the stream ended before the first one.
#[inline]
fn read_full<S: Read>(s: &mut S, buf: &mut [u8]) -> std::io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "stream ended inside a message")),
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn io(what: &'static str) -> impl Fn(std::io::Error) -> String {
    move |e| format!("{what}: {e}")
}

fn client_latency<S: Sock>(
    s: &mut S,
    size: usize,
    until: u64,
    rec: &mut TickHistogram,
    payload: &[u8],
    buf: &mut [u8],
) -> Result<(), String> {
    let (payload, buf) = (&payload[..size], &mut buf[..size]);
    let mut prev = now_ticks();
    loop {
        s.write_all(payload).map_err(io("writing"))?;
        if !read_full(s, buf).map_err(io("reading"))? {
            return Err("the peer closed the connection".into());
        }
        let now = now_ticks();
        rec.record(now.wrapping_sub(prev), now);
        prev = now;
        if now >= until {
            return Ok(());
        }
    }
}

fn peer_latency<S: Sock>(s: &mut S, size: usize, payload: &[u8], buf: &mut [u8]) -> Result<(), String> {
    let (payload, buf) = (&payload[..size], &mut buf[..size]);
    while read_full(s, buf).map_err(io("reading"))? {
        s.write_all(payload).map_err(io("writing"))?;
    }
    Ok(())
}

fn client_throughput<S: Sock>(s: &mut S, size: usize, until: u64, payload: &mut [u8]) -> Result<Streamed, String> {
    let msg = &mut payload[..size];
    let mut n = 0u64;
    let t0 = now_ticks();
    loop {
        stamp(msg, n);
        s.write_all(msg).map_err(io("writing"))?;
        n += 1;
        if now_ticks() >= until {
            break;
        }
    }
    s.shutdown_write().map_err(io("shutting down"))?;
    let mut count = [0u8; 8];
    if !read_full(s, &mut count).map_err(io("reading the count"))? {
        return Err("the peer closed without a count".into());
    }
    let ticks = now_ticks().wrapping_sub(t0);
    let got = u64::from_le_bytes(count);
    if got != n {
        return Err(format!("sent {n} messages, the peer took {got}"));
    }
    Ok(Streamed { msgs: n, ticks })
}

fn peer_throughput<S: Sock>(s: &mut S, size: usize, buf: &mut [u8]) -> Result<u64, String> {
    let buf = &mut buf[..size];
    let mut n = 0u64;
    while read_full(s, buf).map_err(io("reading"))? {
        if !stamped(buf, n) {
            return Err(format!("message {n} arrived corrupt"));
        }
        n += 1;
    }
    s.write_all(&n.to_le_bytes()).map_err(io("writing the count"))?;
    Ok(n)
}

/// Where the client connects.
enum Target {
    Tcp(u16),
    Unix(String),
}

impl Target {
    fn connect(&self) -> Result<Conn, String> {
        match self {
            Target::Tcp(port) => {
                let s = TcpStream::connect((Ipv4Addr::LOCALHOST, *port)).map_err(io("connecting over TCP"))?;
                s.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
                s.set_read_timeout(Some(IO_TIMEOUT))
                    .and_then(|_| s.set_write_timeout(Some(IO_TIMEOUT)))
                    .map_err(io("timeouts"))?;
                Ok(Conn::Tcp(s))
            }
            Target::Unix(name) => {
                let addr = UnixAddr::from_abstract_name(name.as_bytes()).map_err(io("socket name"))?;
                let s = UnixStream::connect_addr(&addr).map_err(io("connecting over a Unix socket"))?;
                s.set_read_timeout(Some(IO_TIMEOUT))
                    .and_then(|_| s.set_write_timeout(Some(IO_TIMEOUT)))
                    .map_err(io("timeouts"))?;
                Ok(Conn::Unix(s))
            }
        }
    }
}

enum Conn {
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// The client side of either socket path.
struct SocketClient {
    target: Target,
    max: usize,
    payload: Vec<u8>,
    buf: Vec<u8>,
}

impl ClientPath for SocketClient {
    fn latency(&mut self, size: usize, until: u64, rec: &mut TickHistogram, _: &Waiter) -> Result<(), String> {
        check(size, self.max)?;
        let (p, b) = (&self.payload, &mut self.buf);
        match self.target.connect()? {
            Conn::Tcp(mut s) => client_latency(&mut s, size, until, rec, p, b),
            Conn::Unix(mut s) => client_latency(&mut s, size, until, rec, p, b),
        }
    }

    fn throughput(&mut self, size: usize, until: u64, _: &Waiter) -> Result<Streamed, String> {
        check(size, self.max)?;
        let p = &mut self.payload;
        match self.target.connect()? {
            Conn::Tcp(mut s) => client_throughput(&mut s, size, until, p),
            Conn::Unix(mut s) => client_throughput(&mut s, size, until, p),
        }
    }
}

fn check(size: usize, max: usize) -> Result<(), String> {
    if size == 0 || size > max {
        return Err(format!("message size {size}: sizes run from 1 to {max}"));
    }
    Ok(())
}

/// Set-up needs nothing from the client: the peer listens and says where.
struct Offer {
    max: usize,
    tcp: bool,
}

impl ClientOffer for Offer {
    fn offer(&self) -> String {
        "-".into()
    }

    fn accept(self: Box<Self>, reply: &str) -> Result<Box<dyn ClientPath>, String> {
        let reply = reply.trim();
        let target = if self.tcp {
            Target::Tcp(reply.parse().map_err(|_| format!("bad TCP port {reply:?}"))?)
        } else {
            if reply.is_empty() {
                return Err("empty Unix socket name".into());
            }
            Target::Unix(reply.to_string())
        };
        Ok(Box::new(SocketClient { target, max: self.max, payload: pattern(self.max, 1), buf: vec![0; self.max] }))
    }
}

pub(crate) fn tcp_client(env: &SetupEnv) -> Result<Box<dyn ClientOffer>, String> {
    Ok(Box::new(Offer { max: env.max_size, tcp: true }))
}

pub(crate) fn unix_client(env: &SetupEnv) -> Result<Box<dyn ClientOffer>, String> {
    Ok(Box::new(Offer { max: env.max_size, tcp: false }))
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    fn fd(&self) -> RawFd {
        match self {
            Listener::Tcp(l) => l.as_raw_fd(),
            Listener::Unix(l) => l.as_raw_fd(),
        }
    }

    /// Accepts the slice's connection; gives up after a while or if the client hangs up.
    fn accept(&self) -> Result<Conn, String> {
        if !poll_ready(self.fd(), ACCEPT_TIMEOUT_MS) {
            return Err("the client did not connect".into());
        }
        let conn = match self {
            Listener::Tcp(l) => {
                let (s, _) = l.accept().map_err(io("accepting"))?;
                s.set_nodelay(true).map_err(io("TCP_NODELAY"))?;
                Conn::Tcp(s)
            }
            Listener::Unix(l) => Conn::Unix(l.accept().map_err(io("accepting"))?.0),
        };
        match &conn {
            Conn::Tcp(s) => s.set_read_timeout(Some(IO_TIMEOUT)).and_then(|_| s.set_write_timeout(Some(IO_TIMEOUT))),
            Conn::Unix(s) => s.set_read_timeout(Some(IO_TIMEOUT)).and_then(|_| s.set_write_timeout(Some(IO_TIMEOUT))),
        }
        .map_err(io("timeouts"))?;
        Ok(conn)
    }
}

/// The peer side of either socket path.
struct SocketPeer {
    listener: Listener,
    max: usize,
    payload: Vec<u8>,
    buf: Vec<u8>,
}

impl PeerPath for SocketPeer {
    fn latency(&mut self, size: usize, _: &Waiter) -> Result<(), String> {
        check(size, self.max)?;
        let (p, b) = (&self.payload, &mut self.buf);
        match self.listener.accept()? {
            Conn::Tcp(mut s) => peer_latency(&mut s, size, p, b),
            Conn::Unix(mut s) => peer_latency(&mut s, size, p, b),
        }
    }

    fn throughput(&mut self, size: usize, _: &Waiter) -> Result<u64, String> {
        check(size, self.max)?;
        let b = &mut self.buf;
        match self.listener.accept()? {
            Conn::Tcp(mut s) => peer_throughput(&mut s, size, b),
            Conn::Unix(mut s) => peer_throughput(&mut s, size, b),
        }
    }
}

fn peer_with(listener: Listener, env: &SetupEnv, reply: String) -> (Box<dyn PeerPath>, String) {
    let max = env.max_size;
    (Box::new(SocketPeer { listener, max, payload: pattern(max, 5), buf: vec![0; max] }), reply)
}

pub(crate) fn tcp_peer(env: &SetupEnv, _offer: &str) -> Result<(Box<dyn PeerPath>, String), String> {
    tcp_peer_on(env, 0)
}

/// The TCP peer listening on `port` (0: any free port).
pub(crate) fn tcp_peer_on(env: &SetupEnv, port: u16) -> Result<(Box<dyn PeerPath>, String), String> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map_err(io("listening on TCP loopback"))?;
    let port = l.local_addr().map_err(io("listening on TCP loopback"))?.port();
    l.set_nonblocking(false).map_err(io("listener"))?;
    Ok(peer_with(Listener::Tcp(l), env, port.to_string()))
}

pub(crate) fn unix_peer(env: &SetupEnv, _offer: &str) -> Result<(Box<dyn PeerPath>, String), String> {
    // An abstract socket name: nothing in the file system to clean up.
    let name = format!("lanes-bench-{}-{}", std::process::id(), now_ticks());
    let addr = UnixAddr::from_abstract_name(name.as_bytes()).map_err(io("socket name"))?;
    let l = UnixListener::bind_addr(&addr).map_err(io("listening on a Unix socket"))?;
    Ok(peer_with(Listener::Unix(l), env, name))
}
