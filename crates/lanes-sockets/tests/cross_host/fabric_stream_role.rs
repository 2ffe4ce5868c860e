//! Role `fabric-stream` of cross_host.rs: connections whose bytes move through the ring
//! across hosts (`lanes::sockets::fabric_stream`) beside their kernel connection, used
//! directly by this process (not through the socket library).
//!
//! Each connection's two ends swap their objects' handles over the fresh TCP connection
//! before anything else (16 bytes each way), standing in for the daemons' pairing
//! announcement; a ring size of 0 keeps a connection plain kernel TCP (the baseline).
//!
//! Commands: `listen PORT`, `accept N RING`, `connect N ADDR RING` (each answers how many
//! connections have the fabric path), `stream ID client|server BYTES` (both directions at
//! once, checksummed, then the end of the stream), `stream-all client|server BYTES` (every
//! connection at once), `requests ID ROUNDS` and `serve ID` (request/response), `flood ID`
//! (sends until an error), `drain ID` (reads and checks until an error, sending meanwhile),
//! `source ID BYTES` and `sink ID` (one direction), `ping ID ROUNDS SIZE` and `echo ID`
//! (round trips, timed), `spin ID US` (the receive spin before a receiver sleeps), `exit`.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use lanes::fabric::Fabric;
use lanes::sockets::fabric_stream::{FabricStream, StreamCounts, StreamExports, StreamHandles};
use lanes_testkit::process::{ok_line, test_err_line};
use lanes_testkit::ChildIo;

/// One connection: its kernel socket, and the fabric path when it has one. The stream is
/// dropped before the socket (field order).
struct Conn {
    fabric: Option<FabricStream>,
    socket: TcpStream,
}

impl Conn {
    fn send_all(&self, buf: &[u8]) -> std::io::Result<()> {
        match &self.fabric {
            Some(f) => f.send_all(buf),
            None => (&self.socket).write_all(buf),
        }
    }

    fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        match &self.fabric {
            Some(f) => f.recv(buf),
            None => (&self.socket).read(buf),
        }
    }

    fn shutdown_write(&self) -> std::io::Result<()> {
        match &self.fabric {
            Some(f) => f.shutdown_write(),
            None => self.socket.shutdown(std::net::Shutdown::Write),
        }
    }

    fn counts(&self) -> StreamCounts {
        self.fabric.as_ref().map(FabricStream::counts).unwrap_or_default()
    }
}

fn seed(id: usize, client: bool) -> u64 {
    2 * id as u64 + u64::from(client)
}

fn pattern(seed: u64, at: u64) -> u8 {
    (at.wrapping_mul(0x9E37_79B9).wrapping_add(seed * 131) >> 9) as u8
}

fn encode(h: StreamHandles) -> [u8; 16] {
    let mut b = [0u8; 16];
    for (i, v) in [h.node, h.segment, h.request_bell, h.answer_bell].into_iter().enumerate() {
        b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
    }
    b
}

fn decode(b: [u8; 16]) -> StreamHandles {
    let w = |i: usize| u32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap());
    StreamHandles { node: w(0), segment: w(1), request_bell: w(2), answer_bell: w(3) }
}

/// Sets a connection up: swaps handles over the socket, connects the fabric path.
fn set_up(fabric: &Fabric, mut socket: TcpStream, ring: usize) -> Result<Conn, String> {
    socket.set_nodelay(true).map_err(|e| e.to_string())?;
    if ring == 0 {
        return Ok(Conn { fabric: None, socket });
    }
    let exports = StreamExports::create(fabric, ring).map_err(|e| format!("exports: {e}"))?;
    socket.write_all(&encode(exports.handles())).map_err(|e| e.to_string())?;
    let mut peer = [0u8; 16];
    socket.read_exact(&mut peer).map_err(|e| e.to_string())?;
    let stream = FabricStream::connect(exports, decode(peer), socket.as_raw_fd(), Duration::from_secs(20))
        .map_err(|e| format!("connect to {:?}: {e}", decode(peer)))?;
    Ok(Conn { fabric: Some(stream), socket })
}

/// Sends `bytes` of the pattern `seed` (pieces of varying size), then ends the direction.
fn send_pattern(conn: &Conn, seed: u64, bytes: u64) -> Result<(), String> {
    let mut buf = vec![0u8; 256 * 1024];
    let (mut at, mut piece) = (0u64, 1000usize);
    while at < bytes {
        let n = (piece as u64).min(bytes - at) as usize;
        for (k, b) in buf[..n].iter_mut().enumerate() {
            *b = pattern(seed, at + k as u64);
        }
        conn.send_all(&buf[..n]).map_err(|e| format!("send after {at} bytes: {e}"))?;
        at += n as u64;
        piece = piece * 13 % buf.len() + 1;
    }
    conn.shutdown_write().map_err(|e| format!("shutdown: {e}"))
}

/// Reads until the end of the stream, checking every byte; how many.
fn receive_pattern(conn: &Conn, seed: u64) -> Result<u64, String> {
    let mut buf = vec![0u8; 200 * 1024];
    let mut at = 0u64;
    loop {
        let n = conn.recv(&mut buf).map_err(|e| format!("recv after {at} bytes: {e}"))?;
        if n == 0 {
            return Ok(at);
        }
        if let Some(k) = (0..n).find(|&k| buf[k] != pattern(seed, at + k as u64)) {
            return Err(format!("byte {} of the stream differs", at + k as u64));
        }
        at += n as u64;
    }
}

fn counts_text(c: &StreamCounts) -> String {
    format!(
        "sent_fabric={} sent_kernel={} received_fabric={} received_kernel={} kernel_requests={} ring_requests={} ring_refusals={} failovers={}",
        c.sent_fabric, c.sent_kernel, c.received_fabric, c.received_kernel, c.kernel_requests, c.ring_requests,
        c.ring_refusals, c.failovers
    )
}

fn sum(list: &[StreamCounts]) -> StreamCounts {
    let mut t = StreamCounts::default();
    for c in list {
        t.sent_fabric += c.sent_fabric;
        t.sent_kernel += c.sent_kernel;
        t.received_fabric += c.received_fabric;
        t.received_kernel += c.received_kernel;
        t.kernel_requests += c.kernel_requests;
        t.ring_requests += c.ring_requests;
        t.ring_refusals += c.ring_refusals;
        t.failovers += c.failovers;
    }
    t
}

/// Both directions of `conn` at once; bytes received. On a failure, what each direction
/// came to: `send: ...; recv: received=N` (a clean end) or `recv: <error>`.
fn stream_both(conn: &Conn, id: usize, client: bool, bytes: u64) -> Result<u64, String> {
    std::thread::scope(|s| {
        let sender = s.spawn(|| send_pattern(conn, seed(id, client), bytes));
        let got = receive_pattern(conn, seed(id, !client));
        let sent = sender.join().map_err(|_| "sender panicked".to_string())?;
        match (sent, got) {
            (Ok(()), Ok(n)) => Ok(n),
            (sent, got) => {
                let recv = got.map_or_else(|e| e, |n| format!("received={n}"));
                Err(format!("send: {}; recv: {recv}", sent.err().unwrap_or_else(|| "ok".into())))
            }
        }
    })
}

fn errno_name(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ECONNRESET) => "ECONNRESET".into(),
        Some(libc::EPIPE) => "EPIPE".into(),
        _ => format!("{:?}", e.kind()),
    }
}

pub fn run(io: &ChildIo) {
    let fabric = match Fabric::open() {
        Ok(f) => f,
        Err(e) => {
            eprintln!("fabric-stream child: {e}");
            std::process::exit(2);
        }
    };
    let mut listener: Option<TcpListener> = None;
    let mut conns: Vec<Conn> = Vec::new();
    io.serve(|line| {
        let w: Vec<&str> = line.split_whitespace().collect();
        let num = |s: &str| s.parse::<u64>().map_err(|_| format!("not a number: {s}"));
        let r: Result<String, String> = (|| match w[..] {
            ["listen", port] => {
                listener = Some(TcpListener::bind(("0.0.0.0", num(port)? as u16)).map_err(|e| e.to_string())?);
                Ok(String::new())
            }
            ["accept", n, ring] => {
                let l = listener.as_ref().ok_or("not listening")?;
                for _ in 0..num(n)? {
                    let (s, _) = l.accept().map_err(|e| e.to_string())?;
                    conns.push(set_up(&fabric, s, num(ring)? as usize)?);
                }
                Ok(format!("fabric={}", conns.iter().filter(|c| c.fabric.is_some()).count()))
            }
            ["connect", n, addr, ring] => {
                for _ in 0..num(n)? {
                    let s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
                    conns.push(set_up(&fabric, s, num(ring)? as usize)?);
                }
                Ok(format!("fabric={}", conns.iter().filter(|c| c.fabric.is_some()).count()))
            }
            ["stream", id, side, bytes] => {
                let id = num(id)? as usize;
                let conn = conns.get(id).ok_or("no such connection")?;
                let got = stream_both(conn, id, side == "client", num(bytes)?)?;
                Ok(format!("received={got} {}", counts_text(&conn.counts())))
            }
            ["stream-all", side, bytes] => {
                let bytes = num(bytes)?;
                let totals = std::thread::scope(|s| {
                    let runs: Vec<_> = conns
                        .iter()
                        .enumerate()
                        .map(|(id, conn)| s.spawn(move || stream_both(conn, id, side == "client", bytes)))
                        .collect();
                    runs.into_iter().map(|r| r.join().map_err(|_| "panicked".to_string())?).collect::<Vec<_>>()
                });
                let mut got = 0;
                for t in totals {
                    got += t?;
                }
                let counts: Vec<StreamCounts> = conns.iter().map(Conn::counts).collect();
                Ok(format!("received={got} {}", counts_text(&sum(&counts))))
            }
            ["requests", id, rounds] => {
                let conn = conns.get(num(id)? as usize).ok_or("no such connection")?;
                let rounds = num(rounds)?;
                let mut answer = vec![0u8; 64 * 1024];
                for i in 0..rounds {
                    let len = (i % 23) * 997 + 1;
                    let mut request = [0u8; 16];
                    request[..8].copy_from_slice(&i.to_le_bytes());
                    request[8..].copy_from_slice(&len.to_le_bytes());
                    conn.send_all(&request).map_err(|e| format!("round {i}: send: {e}"))?;
                    let mut at = 0usize;
                    while at < len as usize {
                        let n = conn.recv(&mut answer[at..len as usize]).map_err(|e| format!("round {i}: {e}"))?;
                        if n == 0 {
                            return Err(format!("end of stream in round {i}"));
                        }
                        at += n;
                    }
                    if let Some(k) = (0..len).find(|&k| answer[k as usize] != pattern(i, k)) {
                        return Err(format!("round {i}: byte {k} differs"));
                    }
                    if i % 1000 == 999 {
                        // A pause: the server's receiver sleeps in the kernel meanwhile.
                        std::thread::sleep(Duration::from_millis(30));
                    }
                }
                conn.shutdown_write().map_err(|e| e.to_string())?;
                let mut rest = [0u8; 16];
                let n = conn.recv(&mut rest).map_err(|e| e.to_string())?;
                if n != 0 {
                    return Err(format!("{n} bytes after the last answer"));
                }
                Ok(format!("rounds={rounds} {}", counts_text(&conn.counts())))
            }
            ["serve", id] => {
                let conn = conns.get(num(id)? as usize).ok_or("no such connection")?;
                let mut served = 0u64;
                let mut answer = Vec::new();
                loop {
                    let mut request = [0u8; 16];
                    let mut at = 0;
                    while at < 16 {
                        let n = conn.recv(&mut request[at..]).map_err(|e| e.to_string())?;
                        if n == 0 && at == 0 {
                            conn.shutdown_write().map_err(|e| e.to_string())?;
                            return Ok(format!("served={served} {}", counts_text(&conn.counts())));
                        }
                        if n == 0 {
                            return Err("end of stream inside a request".into());
                        }
                        at += n;
                    }
                    let i = u64::from_le_bytes(request[..8].try_into().unwrap());
                    let len = u64::from_le_bytes(request[8..].try_into().unwrap());
                    answer.clear();
                    answer.extend((0..len).map(|k| pattern(i, k)));
                    conn.send_all(&answer).map_err(|e| e.to_string())?;
                    served += 1;
                }
            }
            ["flood", id] => {
                let id = num(id)? as usize;
                let conn = conns.get(id).ok_or("no such connection")?;
                let mut buf = vec![0u8; 64 * 1024];
                let mut at = 0u64;
                loop {
                    for (k, b) in buf.iter_mut().enumerate() {
                        *b = pattern(seed(id, true), at + k as u64);
                    }
                    if let Err(e) = conn.send_all(&buf) {
                        return Ok(format!("send={} sent={at}", errno_name(&e)));
                    }
                    at += buf.len() as u64;
                }
            }
            ["drain", id] => {
                let id = num(id)? as usize;
                let conn = conns.get(id).ok_or("no such connection")?;
                // Bytes the peer never reads: its kernel resets the connection when it dies.
                conn.send_all(&[7u8; 64 * 1024]).map_err(|e| e.to_string())?;
                let mut buf = vec![0u8; 64 * 1024];
                let mut at = 0u64;
                let recv_error = loop {
                    match conn.recv(&mut buf) {
                        Ok(0) => break "end".to_string(),
                        Ok(n) => {
                            if let Some(k) = (0..n).find(|&k| buf[k] != pattern(seed(id, true), at + k as u64)) {
                                break format!("corrupt-at-{}", at + k as u64);
                            }
                            at += n as u64;
                        }
                        Err(e) => break errno_name(&e),
                    }
                };
                let send = match conn.send_all(&[7u8; 1024]) {
                    Ok(()) => "none".to_string(),
                    Err(e) => errno_name(&e),
                };
                Ok(format!("received={at} recv={recv_error} send={send} {}", counts_text(&conn.counts())))
            }
            ["ping", id, rounds, size] => {
                let conn = conns.get(num(id)? as usize).ok_or("no such connection")?;
                let (rounds, size) = (num(rounds)?, num(size)? as usize);
                let mut buf = vec![0x33u8; size];
                let start = std::time::Instant::now();
                for i in 0..rounds {
                    conn.send_all(&buf).map_err(|e| format!("round {i}: {e}"))?;
                    let mut at = 0;
                    while at < size {
                        match conn.recv(&mut buf[at..]).map_err(|e| format!("round {i}: {e}"))? {
                            0 => return Err(format!("end of stream in round {i}")),
                            n => at += n,
                        }
                    }
                }
                let ns = start.elapsed().as_nanos() as u64 / rounds.max(1);
                conn.shutdown_write().map_err(|e| e.to_string())?;
                Ok(format!("round_trip_ns={ns} {}", counts_text(&conn.counts())))
            }
            ["echo", id] => {
                let conn = conns.get(num(id)? as usize).ok_or("no such connection")?;
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match conn.recv(&mut buf).map_err(|e| e.to_string())? {
                        0 => break,
                        n => conn.send_all(&buf[..n]).map_err(|e| e.to_string())?,
                    }
                }
                conn.shutdown_write().map_err(|e| e.to_string())?;
                Ok(counts_text(&conn.counts()))
            }
            ["spin", id, us] => {
                let conn = conns.get(num(id)? as usize).ok_or("no such connection")?;
                let f = conn.fabric.as_ref().ok_or("no fabric path")?;
                f.set_receive_spin(Duration::from_micros(num(us)?));
                Ok(String::new())
            }
            ["source", id, bytes] => {
                let conn = conns.get(num(id)? as usize).ok_or("no such connection")?;
                let bytes = num(bytes)?;
                let buf = vec![0x5au8; 256 * 1024];
                let mut at = 0;
                while at < bytes {
                    let n = (buf.len() as u64).min(bytes - at) as usize;
                    conn.send_all(&buf[..n]).map_err(|e| e.to_string())?;
                    at += n as u64;
                }
                conn.shutdown_write().map_err(|e| e.to_string())?;
                Ok(counts_text(&conn.counts()))
            }
            ["sink", id] => {
                let conn = conns.get(num(id)? as usize).ok_or("no such connection")?;
                let mut buf = vec![0u8; 256 * 1024];
                let mut got = 0u64;
                loop {
                    match conn.recv(&mut buf).map_err(|e| e.to_string())? {
                        0 => break,
                        n => got += n as u64,
                    }
                }
                Ok(format!("received={got} {}", counts_text(&conn.counts())))
            }
            ["exit"] => {
                conns.clear();
                Ok(String::new())
            }
            _ => Err(format!("unknown command {line:?}")),
        })();
        match r {
            Ok(text) => ok_line(&text),
            Err(e) => test_err_line(&e),
        }
    });
}
