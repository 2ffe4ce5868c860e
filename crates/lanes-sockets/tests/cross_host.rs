//! Connections between hosts of a cluster under the library (docs/design/cross-host-sockets.md,
//! stages 1 and 2): hosts a, b and c are network namespaces on a bridge, each with its
//! daemon and fabric directory (`lanes_testkit::cluster`); programs under the library (this
//! test binary in role `sockets`, LD_PRELOAD set: an echo server, clients) connect across
//! them. The connection's halves are registered with both hosts' daemons and paired (the
//! pairing carries each end's stream objects), the library moves the bytes over the
//! connection's fabric stream, byte-exact, and what is no pair is said: a peer without the
//! library, a host outside the cluster, remote acceleration off, forged registrations, a
//! killed peer, a daemon restarted. Real programs (redis, iperf3, nginx with wrk,
//! PostgreSQL with pgbench, the sockconf suite) run across the hosts.
//!
//! The data path across hosts (`lanes::sockets::fabric_stream`) is also tested as a
//! component, between processes of hosts a and b that use it directly (role
//! `fabric-stream`).
//!
//! Root only (network namespaces); skipped with the reason otherwise, unless `CI` is set.

#[path = "cross_host/fabric_stream_role.rs"]
mod fabric_stream_role;
mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lanes::cluster::proto::{HalfRegistration, HalfStatus, SocketsStatus, StreamHandles};
use lanes::platform::liveness::ProcessIdentity;
use lanes::sockets::reasons::{list_reasons, Reason};
use lanes::sockets::registry::list_connections;
use lanes::sockets::remote::PairingState;
use lanes_testkit::cluster::{Cluster, CALL, SUSPECT_MS};
use lanes_testkit::netns::Netns;
use lanes_testkit::process::{ok_line, test_err_line};
use lanes_testkit::{ChildIo, Proc};

const PORT: u16 = 15201;
/// How long a pairing, a withdrawal or a sweep may take to be seen (the daemons' sweep
/// runs every second).
const BOUND: Duration = Duration::from_secs(10);

#[test]
fn child_entry() {
    lanes_testkit::child_entry(|role, io| match role {
        "sockets" => {
            run_sockets(io);
            true
        }
        "fabric-stream" => {
            fabric_stream_role::run(io);
            true
        }
        _ => false,
    });
}

// ---------------------------------------------------------------------------------------
// The child: an echo server and clients (under the library when the test preloads it)
// ---------------------------------------------------------------------------------------

/// Byte `i` of connection `id`'s pattern.
fn pattern(id: u64, i: u64) -> u8 {
    (i.wrapping_mul(31).wrapping_add(id * 7) ^ (i >> 11)) as u8
}

/// Serves commands: `listen PORT echo|hold|drain` (an echo server; `hold` keeps a
/// connection open after its peer's end; `drain` sends 64 KiB its peer never reads, then
/// reads the flood pattern checking it until an error or the end, and tries a send),
/// `drained` (the outcome of the first drained connection), `connect ID ADDR`,
/// `exchange ID BYTES` (sends the pattern, reads it back, checks every byte), `flood ID`
/// (sends the flood pattern until a send fails, in the background), `own ID` (the
/// socket's tuple and cookie), `close ID`, `register LOCAL REMOTE COOKIE PROCESS
/// [NODE:SEGMENT:REQUEST:ANSWER]` (a registration, forged or not), `identity`.
fn run_sockets(io: &ChildIo) {
    let mut conns: HashMap<u64, TcpStream> = HashMap::new();
    let mut senders: HashMap<u64, Sender> = HashMap::new();
    let held: Arc<Mutex<Vec<TcpStream>>> = Arc::new(Mutex::new(Vec::new()));
    let drained: Arc<Mutex<Vec<String>>> = Arc::new(Mutex::new(Vec::new()));
    io.serve(|line| {
        let w: Vec<&str> = line.split_whitespace().collect();
        let r: Result<String, String> = (|| match w[..] {
            ["listen", port, "sink"] => {
                // Connections held unread until `sink`, each added to an epoll set as an
                // event loop's would be: an accepted socket's half is registered then (or
                // at its first call that moves bytes), not at accept.
                let l = TcpListener::bind(("::", port.parse::<u16>().map_err(|e| e.to_string())?))
                    .map_err(|e| format!("bind: {e}"))?;
                let held = held.clone();
                std::thread::spawn(move || {
                    // SAFETY: epoll_create1 has no memory-safety preconditions.
                    let set = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
                    for s in l.incoming().flatten() {
                        let fd = std::os::fd::AsRawFd::as_raw_fd(&s);
                        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: fd as u64 };
                        // SAFETY: our own event structure and descriptors.
                        unsafe { libc::epoll_ctl(set, libc::EPOLL_CTL_ADD, fd, &mut ev) };
                        held.lock().unwrap().push(s);
                    }
                });
                Ok(String::new())
            }
            ["sink"] => {
                let started = Instant::now();
                let s = loop {
                    if let Some(s) = held.lock().unwrap().pop() {
                        break s;
                    }
                    if started.elapsed() > Duration::from_secs(60) {
                        return Err("no connection to sink within 60 s".into());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                };
                let drained = drained.clone();
                std::thread::spawn(move || {
                    let outcome = sink(&s);
                    drained.lock().unwrap().push(outcome);
                });
                Ok(String::new())
            }
            ["blocked-send", id, first] => {
                let id: u64 = id.parse().map_err(|_| "id")?;
                let first: usize = first.parse().map_err(|_| "bytes")?;
                let s = conns.get(&id).ok_or("no such connection")?;
                senders.insert(id, Sender::start(s.try_clone().map_err(|e| e.to_string())?, first));
                Ok(String::new())
            }
            ["pokes", id, millis] => {
                let s = conns.get(&id.parse().map_err(|_| "id")?).ok_or("no such connection")?;
                let until = Instant::now() + Duration::from_millis(millis.parse().map_err(|_| "millis")?);
                let mut calls = 0;
                while Instant::now() < until {
                    let mut byte = 0u8;
                    // SAFETY: a receive of at most one byte into a local.
                    let r = unsafe {
                        libc::recv(
                            std::os::fd::AsRawFd::as_raw_fd(s),
                            (&mut byte as *mut u8).cast(),
                            1,
                            libc::MSG_DONTWAIT,
                        )
                    };
                    let e = std::io::Error::last_os_error();
                    if r >= 0 || e.raw_os_error() != Some(libc::EAGAIN) {
                        return Err(format!("a receive found {r}: {e}"));
                    }
                    calls += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(format!("calls={calls}"))
            }
            ["mmsg-exchange", id, bytes] => {
                let id: u64 = id.parse().map_err(|_| "id")?;
                let n: u64 = bytes.parse().map_err(|_| "bytes")?;
                let s = conns.get(&id).ok_or("no such connection")?;
                exchange_mmsg(s, id, n)
            }
            ["stop-send", id] => {
                let sender = senders.remove(&id.parse().map_err(|_| "id")?).ok_or("no sender")?;
                sender.stop().map(|n| format!("sent={n}"))
            }
            ["listen", port, mode] => {
                // Dual-stack, as most servers listen: IPv4 clients get IPv4-mapped addresses.
                let l = TcpListener::bind(("::", port.parse::<u16>().map_err(|e| e.to_string())?))
                    .map_err(|e| format!("bind: {e}"))?;
                let hold = mode == "hold";
                let drain = mode == "drain";
                let held = held.clone();
                let drained = drained.clone();
                std::thread::spawn(move || {
                    for s in l.incoming().flatten() {
                        let held = held.clone();
                        let drained = drained.clone();
                        if drain {
                            std::thread::spawn(move || {
                                let outcome = drain_flood(&s);
                                drained.lock().unwrap().push(outcome);
                                held.lock().unwrap().push(s);
                            });
                        } else {
                            std::thread::spawn(move || echo(s, hold.then_some(held)));
                        }
                    }
                });
                Ok(String::new())
            }
            ["drained"] => {
                let started = Instant::now();
                loop {
                    if let Some(o) = drained.lock().unwrap().first() {
                        break Ok(o.clone());
                    }
                    if started.elapsed() > Duration::from_secs(60) {
                        break Err("no drained connection within 60 s".into());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            ["ping", id, rounds, size, pause_us] => {
                let s = conns.get(&id.parse().map_err(|_| "id")?).ok_or("no such connection")?;
                let num = |x: &str| x.parse::<u64>().map_err(|_| format!("not a number: {x}"));
                let (rounds, size, pause) = (num(rounds)?, num(size)? as usize, num(pause_us)?);
                let mut out = vec![0u8; size];
                let mut back = vec![0u8; size];
                let started = Instant::now();
                for i in 0..rounds {
                    for (k, b) in out.iter_mut().enumerate() {
                        *b = pattern(i, k as u64);
                    }
                    if pause > 0 {
                        std::thread::sleep(Duration::from_micros(pause));
                    }
                    (&*s).write_all(&out).map_err(|e| format!("round {i}: {e}"))?;
                    (&*s).read_exact(&mut back).map_err(|e| format!("round {i}: {e}"))?;
                    if back != out {
                        return Err(format!("round {i}: the echo differs"));
                    }
                }
                Ok(format!("round_trip_ns={}", started.elapsed().as_nanos() as u64 / rounds.max(1)))
            }
            ["inq", id] => {
                // TCP_INQ on, ten bytes out to the echo, read back in three receives with a
                // control buffer: the TCP_CM_INQ each carried ("none" without one).
                let s = conns.get(&id.parse().map_err(|_| "id")?).ok_or("no such connection")?;
                let fd = std::os::fd::AsRawFd::as_raw_fd(s);
                let one: libc::c_int = 1;
                // SAFETY: an int option from a local.
                let r = unsafe {
                    libc::setsockopt(
                        fd,
                        libc::SOL_TCP,
                        36,
                        (&one as *const libc::c_int).cast(),
                        size_of::<libc::c_int>() as _,
                    )
                };
                if r != 0 {
                    return Err(format!("TCP_INQ: {}", std::io::Error::last_os_error()));
                }
                (&*s).write_all(b"0123456789").map_err(|e| e.to_string())?;
                let mut seen = Vec::new();
                let mut got = 0usize;
                for want in [3usize, 2, 5] {
                    let mut buf = [0u8; 16];
                    let mut control = [0u64; 8];
                    let mut iov = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: want };
                    // SAFETY: an all-zero msghdr is valid.
                    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
                    m.msg_iov = &mut iov;
                    m.msg_iovlen = 1;
                    m.msg_control = control.as_mut_ptr().cast();
                    m.msg_controllen = size_of_val(&control);
                    // With a wait first for all ten bytes (the echo's one write), so that
                    // what is queued after each receive is the same on every path: poll,
                    // which must see ring bytes (it once went to the kernel alone for a
                    // live stream, and timed out with the bytes in the ring), then
                    // FIONREAD, which counts them too.
                    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
                    // SAFETY: poll on one pollfd of ours.
                    if unsafe { libc::poll(&mut p, 1, 5000) } != 1 {
                        return Err(format!("poll for the echo's bytes, with {got} read: not ready in 5 s"));
                    }
                    let started = Instant::now();
                    loop {
                        let mut queued: libc::c_int = 0;
                        // SAFETY: FIONREAD writes one int.
                        let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut queued) };
                        if r != 0 || queued as usize >= 10 - got || started.elapsed() > Duration::from_secs(5) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    // SAFETY: a recvmsg into our buffers.
                    let n = unsafe { libc::recvmsg(fd, &mut m, libc::MSG_WAITALL) };
                    if n != want as isize {
                        return Err(format!("recvmsg of {want}: {n}: {}", std::io::Error::last_os_error()));
                    }
                    got += want;
                    let mut inq = "none".to_string();
                    // SAFETY: walking the control messages the call returned in our buffer.
                    unsafe {
                        let mut cm = libc::CMSG_FIRSTHDR(&m);
                        while !cm.is_null() {
                            if (*cm).cmsg_level == libc::SOL_TCP && (*cm).cmsg_type == 36 {
                                inq = std::ptr::read_unaligned(libc::CMSG_DATA(cm).cast::<libc::c_int>()).to_string();
                            }
                            cm = libc::CMSG_NXTHDR(&m, cm);
                        }
                    }
                    seen.push(format!("{}:{inq}", String::from_utf8_lossy(&buf[..want])));
                }
                Ok(seen.join(" "))
            }
            ["flood", id] => {
                let s = conns.get(&id.parse().map_err(|_| "id")?).ok_or("no such connection")?;
                let mut w = s.try_clone().map_err(|e| e.to_string())?;
                std::thread::spawn(move || {
                    let mut at = 0u64;
                    let mut chunk = vec![0u8; 64 * 1024];
                    loop {
                        for (k, b) in chunk.iter_mut().enumerate() {
                            *b = pattern(FLOOD, at + k as u64);
                        }
                        if w.write_all(&chunk).is_err() {
                            break;
                        }
                        at += chunk.len() as u64;
                    }
                });
                Ok(String::new())
            }
            ["connect", id, addr] => {
                let s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
                let local = s.local_addr().map_err(|e| e.to_string())?;
                conns.insert(id.parse().map_err(|_| "id")?, s);
                Ok(format!("local={local}"))
            }
            ["exchange", id, bytes] => {
                let id: u64 = id.parse().map_err(|_| "id")?;
                let n: u64 = bytes.parse().map_err(|_| "bytes")?;
                let s = conns.get(&id).ok_or("no such connection")?;
                exchange(s, id, n)
            }
            ["close", id] => {
                conns.remove(&id.parse().map_err(|_| "id")?).ok_or("no such connection")?;
                Ok(String::new())
            }
            ["closefrom", low] => {
                // As a daemon does before it goes on: every descriptor from `low` up closed
                // (the C library's closefrom, which the library interposes).
                extern "C" {
                    fn closefrom(lowfd: libc::c_int);
                }
                // SAFETY: closes descriptors this program does not use (all its own are below).
                unsafe { closefrom(low.parse().map_err(|_| "low")?) };
                Ok(String::new())
            }
            ["close-range", first] => {
                let first: libc::c_uint = first.parse().map_err(|_| "first")?;
                // SAFETY: as for closefrom.
                let r = unsafe { libc::close_range(first, libc::c_uint::MAX, 0) };
                if r != 0 {
                    return Err(format!("close_range: {}", std::io::Error::last_os_error()));
                }
                Ok(String::new())
            }
            ["own", id] => {
                let s = conns.get(&id.parse().map_err(|_| "id")?).ok_or("no such connection")?;
                let cookie = lanes::platform::net::own_cookie(std::os::fd::AsRawFd::as_raw_fd(s)).ok_or("cookie")?;
                Ok(format!("cookie={cookie} local={} remote={}", s.local_addr().unwrap(), s.peer_addr().unwrap()))
            }
            ["identity"] => Ok(format!("identity={}", ProcessIdentity::current().map_err(|e| e.to_string())?.bits())),
            ["register", local, remote, cookie, process, ref objects @ ..] => {
                let parse = |s: &str| s.parse::<std::net::SocketAddr>().map_err(|e| e.to_string());
                // NODE:SEGMENT:REQUEST:ANSWER, the stream objects the half names.
                let handles = match objects {
                    [o] => {
                        let n: Vec<u32> =
                            o.split(':').map(|x| x.parse().map_err(|_| "objects")).collect::<Result<_, _>>()?;
                        let [node, segment, request_bell, answer_bell] = n[..] else { return Err("objects".into()) };
                        Some(StreamHandles { node, segment, request_bell, answer_bell })
                    }
                    _ => None,
                };
                let half = HalfRegistration {
                    local: parse(local)?,
                    remote: parse(remote)?,
                    cookie: cookie.parse().map_err(|_| "cookie")?,
                    netns: lanes::platform::net::netns_inode(),
                    process: process.parse().map_err(|_| "process")?,
                    handles,
                };
                let dir = std::path::PathBuf::from(std::env::var("LANES_DIR").map_err(|_| "LANES_DIR")?);
                match lanes::cluster::client::register_half(&dir, &half, CALL) {
                    Ok(host) => Ok(format!("registered {host}")),
                    Err(e) => Ok(format!("refused {e}")),
                }
            }
            ["exit"] => Ok(String::new()),
            _ => Err(format!("unknown command {line:?}")),
        })();
        match r {
            Ok(text) => ok_line(&text),
            Err(e) => test_err_line(&e),
        }
    });
}

/// The pattern id of `flood`.
const FLOOD: u64 = 77;

fn errno_name(e: &std::io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ECONNRESET) => "ECONNRESET".into(),
        Some(libc::EPIPE) => "EPIPE".into(),
        Some(n) => format!("errno-{n}"),
        None => e.to_string().replace(' ', "-"),
    }
}

/// `listen … drain`: 64 KiB the peer never reads (its kernel then resets the connection
/// when it dies), then the flood pattern read and checked to an error or the end, then
/// one send; the outcome in words.
fn drain_flood(s: &TcpStream) -> String {
    let mut w = s;
    if let Err(e) = w.write_all(&[7u8; 64 * 1024]) {
        return format!("received=0 recv=none send-first={}", errno_name(&e));
    }
    let mut r = s;
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = 0u64;
    let recv = loop {
        match r.read(&mut buf) {
            Ok(0) => break "end".to_string(),
            Ok(n) => {
                if let Some(k) = (0..n).find(|&k| buf[k] != pattern(FLOOD, at + k as u64)) {
                    break format!("corrupt-at-{}", at + k as u64);
                }
                at += n as u64;
            }
            Err(e) => break errno_name(&e),
        }
    };
    let send = match w.write_all(&[7u8; 1024]) {
        Ok(()) => "none".to_string(),
        Err(e) => errno_name(&e),
    };
    format!("received={at} recv={recv} send={send}")
}

/// The pattern id of `blocked-send` and `sink`.
const SINK: u64 = 78;

/// `sink`: reads the `blocked-send` pattern to the end, checking every byte; the outcome
/// in words.
fn sink(s: &TcpStream) -> String {
    let mut r = s;
    let mut buf = vec![0u8; 64 * 1024];
    let mut at = 0u64;
    let end = loop {
        match r.read(&mut buf) {
            Ok(0) => break "end".to_string(),
            Ok(n) => {
                if let Some(k) = (0..n).find(|&k| buf[k] != pattern(SINK, at + k as u64)) {
                    let at = at + k as u64;
                    break format!("byte-{at}-differs{}", whence(SINK, at, &buf[k..n]).replace(' ', "_"));
                }
                at += n as u64;
            }
            Err(e) => break errno_name(&e),
        }
    };
    format!("received={at} recv={end}")
}

/// `blocked-send`: a thread that writes the `sink` pattern, its first bytes in one call
/// (which blocks in the kernel while the peer reads nothing), then 64 KiB at a time until
/// stopped; then it shuts the connection down for writing.
struct Sender {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<std::io::Result<u64>>,
}

impl Sender {
    fn start(mut s: TcpStream, first: usize) -> Sender {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let fill = |buf: &mut [u8], from: u64| {
                for (k, b) in buf.iter_mut().enumerate() {
                    *b = pattern(SINK, from + k as u64);
                }
            };
            let mut buf = vec![0u8; first];
            fill(&mut buf, 0);
            s.write_all(&buf)?;
            let mut sent = first as u64;
            let mut chunk = vec![0u8; 64 * 1024];
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                fill(&mut chunk, sent);
                s.write_all(&chunk)?;
                sent += chunk.len() as u64;
            }
            s.shutdown(std::net::Shutdown::Write)?;
            Ok(sent)
        });
        Sender { stop, thread }
    }

    /// Stops the writing; what was written in all.
    fn stop(self) -> Result<u64, String> {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().map_err(|_| "the sender panicked")?.map_err(|e| format!("send: {e}"))
    }
}

/// Echoes `s` until its peer's end; then closes it, or keeps it in `hold`.
fn echo(mut s: TcpStream, hold: Option<Arc<Mutex<Vec<TcpStream>>>>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if s.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    if let Some(h) = hold {
        h.lock().unwrap().push(s);
    }
}

/// Sends `n` bytes of connection `id`'s pattern and reads them back, checking every byte.
fn exchange(s: &TcpStream, id: u64, n: u64) -> Result<String, String> {
    let mut w = s.try_clone().map_err(|e| e.to_string())?;
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        let mut chunk = vec![0u8; 64 * 1024];
        let mut sent = 0;
        while sent < n {
            let len = (n - sent).min(chunk.len() as u64) as usize;
            for (k, b) in chunk[..len].iter_mut().enumerate() {
                *b = pattern(id, sent + k as u64);
            }
            w.write_all(&chunk[..len])?;
            sent += len as u64;
        }
        Ok(())
    });
    let mut r = s;
    let mut got = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    while got < n {
        let m = r.read(&mut buf).map_err(|e| format!("read after {got} bytes: {e}"))?;
        if m == 0 {
            return Err(format!("end of stream after {got} of {n} bytes"));
        }
        for (k, b) in buf[..m].iter().enumerate() {
            if *b != pattern(id, got + k as u64) {
                let at = got + k as u64;
                return Err(format!("byte {at} differs{}", whence(id, at, &buf[k..m])));
            }
        }
        got += m as u64;
    }
    writer.join().map_err(|_| "writer panicked")?.map_err(|e| format!("write: {e}"))?;
    Ok(format!("bytes={got}"))
}

/// As [`exchange`], with every other 64 KiB written by `sendmmsg` (two messages) instead
/// of `write`, and every other read made by `recvmmsg` (two entries, `MSG_WAITFORONE`).
fn exchange_mmsg(s: &TcpStream, id: u64, n: u64) -> Result<String, String> {
    use std::os::fd::AsRawFd;
    let mut w = s.try_clone().map_err(|e| e.to_string())?;
    let writer = std::thread::spawn(move || -> std::io::Result<()> {
        let fd = w.as_raw_fd();
        let mut chunk = vec![0u8; 64 * 1024];
        let mut sent = 0;
        let mut round = 0;
        while sent < n {
            let len = (n - sent).min(chunk.len() as u64) as usize;
            for (k, b) in chunk[..len].iter_mut().enumerate() {
                *b = pattern(id, sent + k as u64);
            }
            let mut done = 0;
            if round % 2 == 1 && len >= 2 {
                let (first, second) = chunk[..len].split_at_mut(len / 2);
                let mut iov = [
                    libc::iovec { iov_base: first.as_mut_ptr().cast(), iov_len: first.len() },
                    libc::iovec { iov_base: second.as_mut_ptr().cast(), iov_len: second.len() },
                ];
                // SAFETY: an all-zero mmsghdr is valid; each names one iovec of ours.
                let mut msgs: [libc::mmsghdr; 2] = unsafe { std::mem::zeroed() };
                for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
                    m.msg_hdr.msg_iov = v;
                    m.msg_hdr.msg_iovlen = 1;
                }
                // SAFETY: two mmsghdrs over buffers that outlive the call.
                let r = unsafe { libc::sendmmsg(fd, msgs.as_mut_ptr(), 2, 0) };
                if r < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                done = msgs[..r as usize].iter().map(|m| m.msg_len as usize).sum();
            }
            w.write_all(&chunk[done..len])?;
            sent += len as u64;
            round += 1;
        }
        Ok(())
    });
    let fd = s.as_raw_fd();
    let mut r = s;
    let mut got = 0u64;
    let mut buf = vec![0u8; 64 * 1024];
    let mut round = 0;
    while got < n {
        let m = if round % 2 == 1 {
            let (first, second) = buf.split_at_mut(32 * 1024);
            let mut iov = [
                libc::iovec { iov_base: first.as_mut_ptr().cast(), iov_len: first.len() },
                libc::iovec { iov_base: second.as_mut_ptr().cast(), iov_len: second.len() },
            ];
            // SAFETY: an all-zero mmsghdr is valid; each names one iovec of ours.
            let mut msgs: [libc::mmsghdr; 2] = unsafe { std::mem::zeroed() };
            for (m, v) in msgs.iter_mut().zip(iov.iter_mut()) {
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: two mmsghdrs over buffers that outlive the call; no timeout.
            let k = unsafe { libc::recvmmsg(fd, msgs.as_mut_ptr(), 2, libc::MSG_WAITFORONE, std::ptr::null_mut()) };
            if k < 0 {
                return Err(format!("recvmmsg after {got} bytes: {}", std::io::Error::last_os_error()));
            }
            // The entries' bytes back to back, where the second one's start.
            let lens: Vec<usize> = msgs[..k as usize].iter().map(|m| m.msg_len as usize).collect();
            if lens.len() == 2 && lens[0] < 32 * 1024 {
                buf.copy_within(32 * 1024..32 * 1024 + lens[1], lens[0]);
            }
            lens.iter().sum()
        } else {
            r.read(&mut buf).map_err(|e| format!("read after {got} bytes: {e}"))?
        };
        if m == 0 {
            return Err(format!("end of stream after {got} of {n} bytes"));
        }
        for (k, b) in buf[..m].iter().enumerate() {
            if *b != pattern(id, got + k as u64) {
                let at = got + k as u64;
                return Err(format!("byte {at} differs{}", whence(id, at, &buf[k..m])));
            }
        }
        got += m as u64;
        round += 1;
    }
    writer.join().map_err(|_| "writer panicked")?.map_err(|e| format!("write: {e}"))?;
    Ok(format!("bytes={got}"))
}

/// Where in the pattern bytes read at `at` come from, if from within 8 MiB of it: the
/// shape of a stream's fault (a chunk lost, repeated, or read out of order).
fn whence(id: u64, at: u64, got: &[u8]) -> String {
    let probe = &got[..got.len().min(64)];
    let matches = |from: u64| probe.iter().enumerate().all(|(k, b)| *b == pattern(id, from + k as u64));
    let lo = at.saturating_sub(8 << 20);
    (lo..at + (8 << 20)).find(|&from| matches(from)).map_or_else(
        || format!(" (read {} bytes, none from the pattern nearby)", got.len()),
        |from| {
            format!(
                " (read {} bytes there, which are the pattern's at {from}: {} bytes off)",
                got.len(),
                from as i64 - at as i64
            )
        },
    )
}

// ---------------------------------------------------------------------------------------
// The parent
// ---------------------------------------------------------------------------------------

/// A `sockets` child on host `k` (`None`: the outsider), with the library preloaded when
/// `remote` says how (`Some("on")`, `Some("")` for the default), else without it.
fn sockets_child(c: &Cluster, k: Option<usize>, remote: Option<&str>, name: &str) -> Proc {
    sockets_child_with(c, k, remote, name, &[])
}

/// [`sockets_child`] with `extra` in its environment as well.
fn sockets_child_with(c: &Cluster, k: Option<usize>, remote: Option<&str>, name: &str, extra: &[(&str, &str)]) -> Proc {
    let mut env: Vec<(String, String)> = match k {
        Some(k) => c.env(k),
        None => Vec::new(),
    };
    if let Some(mode) = remote {
        env.push(("LD_PRELOAD".into(), support::library().to_str().expect("utf-8 path").into()));
        // Empty is unset for the library: the default, whatever this process's environment says.
        env.push(("LANES_SOCKETS_REMOTE".into(), mode.into()));
    }
    env.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let prefix = match k {
        Some(k) => c.prefix(k),
        None => c.namespaces().expect("namespaces").outsider(),
    };
    Proc::spawn_in(&prefix, name, "sockets", &envs)
}

/// Host `k`'s daemon's view of the cross-host sockets.
fn daemon_sockets(c: &Cluster, k: usize) -> SocketsStatus {
    c.client(k).sockets(CALL).unwrap_or_else(|e| panic!("sockets of host {k}: {e}\n{}", c.logs()))
}

fn count(list: &[(String, u64)], key: &str) -> u64 {
    list.iter().find(|(k, _)| k == key).map_or(0, |(_, n)| *n)
}

/// Waits until `cond` holds, at most [`BOUND`]; panics with `what` and the daemons' logs.
fn wait_for(c: &Cluster, what: &str, mut cond: impl FnMut() -> bool) {
    let started = Instant::now();
    while !cond() {
        if started.elapsed() > BOUND {
            panic!("{what}: not within {BOUND:?}\n{}", c.logs());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The half of host `k` whose peer address is `remote` (ip:port), if its daemon holds one.
fn half_to(c: &Cluster, k: usize, remote: &str) -> Option<HalfStatus> {
    daemon_sockets(c, k).halves.into_iter().find(|h| h.remote.to_string() == remote)
}

/// Waits until the connection from `client` (ip:port, on host `ck`) to the server on host
/// `sk` (`server`, ip:port) is paired on both hosts, with one generation; returns it.
fn wait_paired(c: &Cluster, (ck, client): (usize, &str), (sk, server): (usize, &str)) -> u64 {
    let started = Instant::now();
    loop {
        // The client's half by both addresses: a client may hold several connections to
        // the one server address.
        let h1 = daemon_sockets(c, ck).halves.into_iter().find(|h| h.local.to_string() == client);
        let h2 = half_to(c, sk, client);
        match (&h1, &h2) {
            (Some(x), Some(y)) if x.state == "paired" && y.state == "paired" && x.generation == y.generation => {
                return x.generation;
            }
            _ if started.elapsed() > BOUND => {
                panic!(
                    "{client} -> {server} not paired on both hosts within {BOUND:?}: {h1:?} and {h2:?}\n{}",
                    c.logs()
                )
            }
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The pairing in host `k`'s record of the socket whose peer is `remote`.
fn record_to(c: &Cluster, k: usize, remote: &str) -> Option<lanes::sockets::remote::Pairing> {
    list_connections(&c.fabric(k)).into_iter().find(|r| r.remote.to_string() == remote).and_then(|r| r.cross_host)
}

/// The record on host `k` of the socket whose peer is `remote` (ip:port).
fn record_endpoint(c: &Cluster, k: usize, remote: &str) -> Option<lanes::sockets::Endpoint> {
    std::fs::read_dir(lanes::sockets::endpoint::sockets_dir(&c.fabric(k)))
        .ok()?
        .flatten()
        .filter_map(|e| lanes::sockets::ConnectionKey::parse(e.file_name().to_str()?))
        .find(|k| k.remote.to_string() == remote)
        .and_then(|key| lanes::sockets::Endpoint::open(&c.fabric(k), &key).ok())
}

/// Bytes host `k`'s record of the socket whose peer is `remote` says went over the fabric
/// (sent, received), as the library last wrote them.
fn fabric_bytes(c: &Cluster, k: usize, remote: &str) -> (u64, u64) {
    list_connections(&c.fabric(k))
        .into_iter()
        .find(|r| r.remote.to_string() == remote)
        .map_or((0, 0), |r| (r.ring_bytes_sent, r.ring_bytes_received))
}

/// The record on host `k` of the connection whose peer is `remote` (ip:port).
fn connection_to(c: &Cluster, k: usize, remote: &str) -> lanes::sockets::registry::ConnectionInfo {
    list_connections(&c.fabric(k)).into_iter().find(|r| r.remote.to_string() == remote).expect("a record")
}

/// Round trips on the client's connection 1 (on b, to `server_at`) until b's record counts
/// `fall_forwards` fall-forwards and bytes moved over the fabric since the call: how long
/// that took and how many round trips it made.
fn wait_fall_forward(
    c: &Cluster,
    (client, client_at): (&mut Proc, &str),
    (server, server_at): (&Proc, &str),
    fall_forwards: u64,
) -> (Duration, u64) {
    let moved = |k: usize, remote: &str| {
        let (sent, received) = fabric_bytes(c, k, remote);
        sent + received
    };
    let back = Instant::now();
    let before = moved(1, server_at);
    let mut pings = 0;
    while connection_to(c, 1, server_at).fall_forwards < fall_forwards || moved(1, server_at) == before {
        assert!(
            back.elapsed() < BOUND,
            "no fall-forward within {BOUND:?}\nb: {:?}\na: {:?}\nclient: {}\nserver: {}\n{}",
            connection_to(c, 1, server_at),
            connection_to(c, 0, client_at),
            stderr_of(client),
            stderr_of(server),
            c.logs()
        );
        client.call_within("ping 1 50 64 0", Duration::from_secs(60)).expect("round trips");
        pings += 50;
    }
    (back.elapsed(), pings)
}

/// Bytes the withdrawn halves of hosts a and b said they moved over the fabric (their
/// daemons' totals: sent plus received).
fn fabric_totals(c: &Cluster) -> u64 {
    (0..2).map(|k| daemon_sockets(c, k)).map(|s| s.fabric_sent + s.fabric_received).sum()
}

/// The count of `reason` in the reasons file of process `pid` on host `k`.
fn reason_count(c: &Cluster, k: usize, pid: u32, reason: Reason) -> u64 {
    list_reasons(&c.fabric(k))
        .into_iter()
        .filter(|p| p.pid == pid)
        .flat_map(|p| p.reasons)
        .filter(|r| r.reason == reason)
        .map(|r| r.sockets)
        .sum()
}

/// `lanes status` on host `k`, as a user runs it there.
fn lanes_status(c: &Cluster, k: usize) -> String {
    let mut cmd = std::process::Command::new(&c.prefix(k)[0]);
    cmd.args(&c.prefix(k)[1..]).arg(support::lanes_command()).arg("status");
    for v in support::SCRUBBED.iter().chain(lanes_testkit::LANES_ENV) {
        cmd.env_remove(v);
    }
    cmd.envs(c.env(k));
    let out = cmd.output().expect("running lanes status");
    assert!(out.status.success(), "lanes status: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn server_addr(k: usize) -> String {
    format!("{}:{PORT}", Netns::address(k))
}

/// b's client and a's server, both under the library: the halves are registered with both
/// daemons and paired (one generation), the records and `lanes status` say so, every byte
/// comes back; a client on c without the library never pairs (the server says why); a
/// machine outside the cluster is not a candidate (the daemon is asked once, the answer
/// cached); closing withdraws the halves on both hosts.
#[test]
fn connections_between_cluster_hosts_pair_and_others_stay_kernel_tcp() {
    let Some(c) = Cluster::netns("xh-pair") else { return };
    let mut server = sockets_child(&c, Some(0), Some("on"), "server on a");
    server.ok(&format!("listen {PORT} echo"));
    let mut client = sockets_child(&c, Some(1), Some("on"), "client on b");
    let local = client.ok(&format!("connect 1 {}", server_addr(0)));
    let client_addr = local.trim_start_matches("local=").to_string();
    assert_eq!(client.ok("exchange 1 4194304"), "bytes=4194304");
    let generation = wait_paired(&c, (1, &client_addr), (0, &server_addr(0)));
    assert!(generation >= 1);
    let half = half_to(&c, 1, &server_addr(0)).unwrap();
    assert_eq!((half.peer_host.as_str(), half.pid), ("a", client.pid()));
    assert_eq!(half_to(&c, 0, &client_addr).unwrap().peer_host, "b");
    // What the libraries read: the records.
    let rec = record_to(&c, 1, &server_addr(0)).expect("b's record");
    assert_eq!((rec.state, rec.generation, rec.peer_host.as_str()), (PairingState::Paired, generation, "a"));
    let rec = record_to(&c, 0, &client_addr).expect("a's record");
    assert_eq!((rec.state, rec.generation, rec.peer_host.as_str()), (PairingState::Paired, generation, "b"));
    // The pairing carried each end's stream objects to the other: each record names the
    // objects the other end's library exported (when the build has the fabric stream).
    if lanes::OFI_TRANSPORT {
        let on_b = record_endpoint(&c, 1, &server_addr(0)).expect("b's record");
        let on_a = record_endpoint(&c, 0, &client_addr).expect("a's record");
        let (b_own, a_own) = (on_b.own_handles(), on_a.own_handles());
        assert!(b_own.is_some() && a_own.is_some(), "{b_own:?} {a_own:?}");
        assert_eq!(on_b.pairing().unwrap().peer_handles, a_own, "b's record names a's objects");
        assert_eq!(on_a.pairing().unwrap().peer_handles, b_own, "a's record names b's objects");
        assert_eq!(Cluster::host_of(a_own.unwrap().node), Some(0), "on a node of a's");
        assert_eq!(Cluster::host_of(b_own.unwrap().node), Some(1), "on a node of b's");
    }
    let status = lanes_status(&c, 1);
    let line = status.lines().find(|l| l.contains(&server_addr(0))).unwrap_or_else(|| panic!("{status}"));
    assert!(line.contains("paired") && line.contains(" a "), "{status}");
    assert!(status.contains("cross-host connections"), "{status}");
    // Paired, and still byte-exact (the bytes go through the kernel).
    assert_eq!(client.ok("exchange 1 1048576"), "bytes=1048576");

    // A peer without the library (c): a's half waits, never pairs; the server says why.
    let mut plain = sockets_child(&c, Some(2), None, "client on c without the library");
    let plain_addr = plain.ok(&format!("connect 1 {}", server_addr(0))).trim_start_matches("local=").to_string();
    assert_eq!(plain.ok("exchange 1 65536"), "bytes=65536");
    wait_for(&c, "a's half of c's connection registered", || half_to(&c, 0, &plain_addr).is_some());
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(half_to(&c, 0, &plain_addr).unwrap().state, "waiting");
    assert!(daemon_sockets(&c, 2).halves.is_empty(), "c registered nothing");
    plain.ok("close 1");
    wait_for(&c, "the never-paired half withdrawn", || half_to(&c, 0, &plain_addr).is_none());
    wait_for(&c, "counted as never paired", || reason_count(&c, 0, server.pid(), Reason::RemotePeerNeverPaired) == 1);
    let said = server.output_snapshot();
    assert!(said.contains("the peer on host c never paired"), "{said}");

    // A machine outside the cluster: no candidate, the daemon asked once.
    let asked = |c: &Cluster| count(&daemon_sockets(c, 0).requests, "host-of");
    assert_eq!(asked(&c), 0, "lanes.toml placed b and c without asking");
    let mut outsider = sockets_child(&c, None, None, "outsider");
    for id in [1, 2] {
        outsider.ok(&format!("connect {id} {}", server_addr(0)));
        assert_eq!(outsider.ok(&format!("exchange {id} 65536")), "bytes=65536");
    }
    std::thread::sleep(Duration::from_millis(200));
    let seen = daemon_sockets(&c, 0);
    assert_eq!(count(&seen.requests, "host-of"), 1, "asked once, the answer kept: {seen:?}");
    assert!(seen.halves.iter().all(|h| !h.remote.to_string().starts_with(Netns::OUTSIDER)), "{seen:?}");
    assert!(list_connections(&c.fabric(0)).iter().all(|r| !r.remote.to_string().starts_with(Netns::OUTSIDER)));
    outsider.exit();

    // Closing withdraws both halves; no record is left.
    client.ok("close 1");
    wait_for(&c, "both halves withdrawn", || {
        daemon_sockets(&c, 0).halves.is_empty() && daemon_sockets(&c, 1).halves.is_empty()
    });
    wait_for(&c, "no record left", || {
        list_connections(&c.fabric(0)).is_empty() && list_connections(&c.fabric(1)).is_empty()
    });
    assert!(daemon_sockets(&c, 0).refused.is_empty() && daemon_sockets(&c, 1).refused.is_empty());
    client.exit();
    server.exit();
}

/// Over IPv6, to addresses lanes.toml does not list (the hosts claimed them at hello): each
/// library asks its daemon which host the peer is on, and the connection pairs.
#[test]
fn ipv6_connections_to_addresses_claimed_at_hello_pair() {
    let Some(c) = Cluster::netns_with_ipv6("xh-ipv6") else { return };
    let mut server = sockets_child(&c, Some(0), Some("on"), "server on a");
    server.ok(&format!("listen {PORT} echo"));
    let mut client = sockets_child(&c, Some(1), Some("on"), "client on b");
    let server6 = format!("[{}]:{PORT}", Netns::address6(0));
    let local = client.ok(&format!("connect 1 {server6}")).trim_start_matches("local=").to_string();
    assert!(local.starts_with(&format!("[{}]", Netns::address6(1))), "{local}");
    assert_eq!(client.ok("exchange 1 1048576"), "bytes=1048576");
    let generation = wait_paired(&c, (1, &local), (0, &server6));
    assert_eq!(generation, 1);
    for k in [0, 1] {
        assert_eq!(count(&daemon_sockets(&c, k).requests, "host-of"), 1, "host {k} asked once");
    }
    // An IPv4 client of the same dual-stack server pairs too (its side keyed as IPv4).
    let v4 = client.ok(&format!("connect 2 {}", server_addr(0))).trim_start_matches("local=").to_string();
    wait_paired(&c, (1, &v4), (0, &server_addr(0)));
    client.ok("close 1");
    client.ok("close 2");
    wait_for(&c, "halves withdrawn", || {
        daemon_sockets(&c, 0).halves.is_empty() && daemon_sockets(&c, 1).halves.is_empty()
    });
}

/// A command on host `k` under `lanes run` (the library preloaded as a user gets it), with
/// host `k`'s environment and `LANES_SOCKETS_REMOTE=on`.
/// `lanes ARGS` on host `k`, with the host's environment and none of this process's.
fn lanes_cmd(c: &Cluster, k: usize, args: &[&str]) -> std::process::Command {
    let prefix = c.prefix(k);
    let mut cmd = std::process::Command::new(&prefix[0]);
    cmd.args(&prefix[1..]).arg(support::lanes_command()).args(args);
    for v in support::SCRUBBED.iter().chain(lanes_testkit::LANES_ENV) {
        cmd.env_remove(v);
    }
    cmd.envs(c.env(k));
    cmd
}

fn lanes_run(c: &Cluster, k: usize, program: &str, args: &[&str]) -> std::process::Command {
    let mut cmd = lanes_cmd(c, k, &["run", "--", program]);
    cmd.args(args).env("LANES_SOCKETS_REMOTE", "on");
    cmd
}

/// Whether every one of `programs` is installed (in CI they must be: scripts/test.sh
/// installs them); says it skips otherwise.
fn installed(programs: &[&str]) -> bool {
    let missing: Vec<&str> = programs.iter().copied().filter(|p| !lanes_testkit::program::on_path(p)).collect();
    if missing.is_empty() {
        return true;
    }
    assert!(std::env::var_os("CI").is_none(), "{missing:?} missing (scripts/test.sh installs them)");
    eprintln!("skipping: {missing:?} not installed");
    false
}

/// redis-server under `lanes run` on host `k` at `port`, ready for connections.
fn redis_server(c: &Cluster, k: usize, port: &str, data: &std::path::Path) -> lanes_testkit::program::Program {
    let mut cmd = lanes_run(c, k, "redis-server", &["--port", port, "--bind", "0.0.0.0", "--save", ""]);
    cmd.args(["--appendonly", "no", "--protected-mode", "no", "--daemonize", "no", "--logfile", ""]);
    cmd.arg("--dir").arg(data);
    let mut server = lanes_testkit::program::Program::spawn(cmd, "redis-server");
    let ready = server.stdout_line(Duration::from_secs(10), |l| l.contains("Ready to accept connections"));
    assert!(ready.is_some(), "redis-server never ready: {}", server.stdout_so_far());
    server
}

/// The sum of `f` over host `k`'s cross-host connection records.
fn sum_of_cross_host(c: &Cluster, k: usize, f: fn(&lanes::sockets::registry::ConnectionInfo) -> u64) -> u64 {
    list_connections(&c.fabric(k)).iter().filter(|r| r.cross_host.is_some()).map(f).sum()
}

/// Real programs as a user runs them: redis-server on a and redis-benchmark and redis-cli on
/// b, each under `lanes run`: the benchmark's connections pair while it runs, a 1 MiB value
/// set and read back across the hosts comes back byte for byte, and every half is
/// withdrawn when the programs are done.
#[test]
fn redis_across_hosts_under_lanes_run() {
    use lanes_testkit::program::Program;
    if !installed(&["redis-server", "redis-benchmark", "redis-cli"]) {
        return;
    }
    let Some(c) = Cluster::netns("xh-redis") else { return };
    let data = lanes_testkit::TestDir::new("xh-redis-data");
    let port = "16379";
    let server = redis_server(&c, 0, port, data.root());
    let host = Netns::address(0);
    let bench = Program::spawn(
        lanes_run(&c, 1, "redis-benchmark", &["-h", &host, "-p", port, "-c", "2", "-n", "100000", "-t", "ping", "-q"]),
        "redis-benchmark on b",
    );
    // 100000 requests: long enough to be seen paired on a loaded machine (once, at a load
    // average of 11, 20000 were over before both hosts were seen paired).
    wait_for(&c, "the benchmark's connections paired on both hosts", || {
        let paired = |k: usize| daemon_sockets(&c, k).halves.iter().filter(|h| h.state == "paired").count();
        paired(0) >= 2 && paired(1) >= 2
    });
    let b = bench.wait(Duration::from_secs(120));
    assert!(b.ok() && b.stdout.contains("requests per second"), "{}", b.describe("redis-benchmark"));

    let value: Vec<u8> = (0..1u64 << 20).map(|i| pattern(9, i)).collect();
    let file = data.root().join("value.bin");
    std::fs::write(&file, &value).unwrap();
    let set = Program::spawn_with_stdin(
        lanes_run(&c, 1, "redis-cli", &["-h", &host, "-p", port, "-x", "SET", "big"]),
        "redis-cli SET",
        std::process::Stdio::from(std::fs::File::open(&file).unwrap()),
    )
    .wait(Duration::from_secs(30));
    assert!(set.ok() && set.stdout.trim() == "OK", "{}", set.describe("redis-cli -x SET"));
    let get = Program::spawn(lanes_run(&c, 1, "redis-cli", &["-h", &host, "-p", port, "--raw", "GET", "big"]), "GET")
        .wait(Duration::from_secs(30));
    assert!(get.ok(), "{}", get.describe("redis-cli GET"));
    let mut want = value;
    want.push(b'\n');
    assert!(get.stdout_bytes == want, "GET gave {} bytes, not the 1 MiB value", get.stdout_bytes.len());
    wait_for(&c, "every half withdrawn", || {
        daemon_sockets(&c, 0).halves.is_empty() && daemon_sockets(&c, 1).halves.is_empty()
    });
    let s = server.stop(libc::SIGTERM, Duration::from_secs(10));
    assert!(s.ok(), "{}", s.describe("redis-server"));
    for k in [0, 1] {
        let refused = daemon_sockets(&c, k).refused;
        assert!(refused.is_empty(), "host {k}: {refused:?}\n{}", c.logs());
    }
}

/// redis-server on a and `redis-cli -r 3000 -i 0.005 INCR` on b under `lanes run`, over the
/// "Ethernet" address: one connection, a request every 5 ms for about 15 s, while a's
/// fabric link is cut twice (each time until b's daemon calls a Lost). Every increment is
/// answered once and in order (redis-cli prints 1 to 3000), the connection fails over and
/// falls forward at each cut (b's record), and the counter is 3000 at the end.
#[test]
fn redis_cli_across_hosts_while_the_fabric_link_flaps() {
    use lanes::cluster::proto::HostState;
    use lanes_testkit::program::Program;
    if !installed(&["redis-server", "redis-cli"]) {
        return;
    }
    let Some(c) = Cluster::netns_with_ethernet("xh-redis-flap") else { return };
    if !with_fabric_stream("redis_cli_across_hosts_while_the_fabric_link_flaps") {
        return;
    }
    let data = lanes_testkit::TestDir::new("xh-redis-flap-data");
    let (host, port) = (Netns::ethernet_address(0), "16380");
    let server = redis_server(&c, 0, port, data.root());
    const INCRS: u64 = 3000;
    let client = Program::spawn(
        lanes_run(&c, 1, "redis-cli", &["-h", &host, "-p", port, "-r", &INCRS.to_string(), "-i", "0.005", "INCR", "n"]),
        "redis-cli on b",
    );
    let on_b = |f| sum_of_cross_host(&c, 1, f);
    wait_for(&c, "redis-cli's connection with a live fabric stream", || {
        on_b(|r| r.kernel_bytes_sent + r.ring_bytes_sent) > 0
    });
    let n = c.namespaces().expect("namespaces");
    for cut in 1..=2 {
        let forwarded_before = on_b(|r| r.fall_forwards);
        n.set_link(0, false);
        c.wait_state(1, 0, HostState::Lost, Duration::from_secs(30));
        n.set_link(0, true);
        c.wait_state(1, 0, HostState::Operational, Duration::from_secs(30));
        let back = Instant::now();
        while on_b(|r| r.fall_forwards) <= forwarded_before {
            assert!(
                back.elapsed() < BOUND,
                "cut {cut}: redis-cli's connection did not fall forward within {BOUND:?}\nb:\n{}\n{}",
                lanes_status(&c, 1),
                c.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let failovers = on_b(|r| r.failovers);
    let out = client.wait(Duration::from_secs(120));
    assert!(out.ok(), "{}", out.describe("redis-cli -r INCR"));
    let answers: Vec<u64> = out.stdout.lines().filter_map(|l| l.trim().parse().ok()).collect();
    let expected: Vec<u64> = (1..=INCRS).collect();
    assert!(answers == expected, "redis-cli's answers are not 1 to {INCRS} in order: {} of them", answers.len());
    let get = Program::spawn(lanes_run(&c, 1, "redis-cli", &["-h", &host, "-p", port, "GET", "n"]), "GET")
        .wait(Duration::from_secs(30));
    assert!(get.ok() && get.stdout.trim() == INCRS.to_string(), "{}", get.describe("redis-cli GET n"));
    assert!(failovers > 0, "redis-cli's connection never failed over\n{}", c.logs());
    eprintln!("redis-cli across two cuts: {INCRS} answers in order; fail-overs {failovers} on b");
    let s = server.stop(libc::SIGTERM, Duration::from_secs(10));
    assert!(s.ok(), "{}", s.describe("redis-server"));
}

/// PostgreSQL on a (as its own user, under `lanes run`) and pgbench on b (under `lanes
/// run`), over the "Ethernet" address, TPC-B with 4 clients while a's fabric link is cut
/// twice: every transaction commits and the books balance afterwards (the accounts' balances
/// sum to the history's deltas, one history row per transaction), as on kernel TCP. The
/// server's user is not the daemon's, whose fabric directory holds the records of cross-host
/// halves, so the connections stay kernel TCP (and pgbench's halves wait for peers that
/// never register): what this checks is that nothing of the library's, at either end,
/// changes what the programs see. (A forking server run as the daemon's user:
/// `a_server_forking_per_connection_moves_bytes_over_the_fabric`.)
#[test]
fn postgresql_across_hosts_while_the_fabric_link_flaps() {
    use lanes::cluster::proto::HostState;
    use lanes_testkit::postgres;
    use lanes_testkit::program::Program;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipping: PostgreSQL as its own user needs root");
        return;
    }
    let (Some(bin), Ok(ids)) = (postgres::bin_dir(), lanes::platform::users::account_ids("postgres")) else {
        assert!(std::env::var_os("CI").is_none(), "PostgreSQL missing (scripts/test.sh installs it)");
        eprintln!("skipping: PostgreSQL not installed");
        return;
    };
    let Some(c) = Cluster::netns_with_ethernet("xh-pg-flap") else { return };
    let dir = lanes_testkit::TestDir::new("xh-pg");
    std::fs::set_permissions(dir.root(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let data = dir.root().join("data");
    std::fs::create_dir(&data).unwrap();
    std::os::unix::fs::chown(&data, Some(ids.0), Some(ids.1)).unwrap();
    let mut init = std::process::Command::new("setpriv");
    init.args(postgres::as_user(ids, &bin.join("initdb"))).arg("-D").arg(&data).args(postgres::INITDB_ARGS);
    let f = Program::spawn(init, "initdb").wait(Duration::from_secs(120));
    assert!(f.ok(), "{}", f.describe("initdb"));
    let mut hba = std::fs::OpenOptions::new().append(true).open(data.join("pg_hba.conf")).unwrap();
    writeln!(hba, "host all all 0.0.0.0/0 trust").unwrap();
    drop(hba);
    let (host, port) = (Netns::ethernet_address(0), "15432");
    let mut args = postgres::as_user(ids, &bin.join("postgres"));
    let data_arg = data.display().to_string();
    args.extend(["-D", &data_arg, "-k", &data_arg, "-p", port].map(String::from));
    for setting in ["listen_addresses=*"].into_iter().chain(postgres::DURABILITY_OFF) {
        args.extend(["-c".to_string(), setting.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut server = Program::spawn(lanes_run(&c, 0, "setpriv", &args), "postgres on a");
    let pgbench = bin.join("pgbench").display().to_string();
    let client = |extra: &[&str]| {
        let mut a = vec!["-h", &host, "-p", port, "-U", "postgres"];
        a.extend_from_slice(extra);
        a.push("postgres");
        lanes_run(&c, 1, &pgbench, &a)
    };
    let started = Instant::now();
    loop {
        let f = Program::spawn(client(&["-i", "-q", "-s", "1"]), "pgbench -i on b").wait(Duration::from_secs(60));
        if f.ok() {
            break;
        }
        assert!(
            started.elapsed() < BOUND && !server.exited(),
            "{}
postgres: {}",
            f.describe("pgbench -i"),
            server.stderr_so_far()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let run = Program::spawn(client(&["-n", "-c", "4", "-j", "2", "-T", "20"]), "pgbench on b");
    std::thread::sleep(Duration::from_secs(2));
    let n = c.namespaces().expect("namespaces");
    for _ in 1..=2 {
        n.set_link(0, false);
        c.wait_state(1, 0, HostState::Lost, Duration::from_secs(30));
        n.set_link(0, true);
        c.wait_state(1, 0, HostState::Operational, Duration::from_secs(30));
    }
    let f = run.wait(Duration::from_secs(120));
    assert!(f.ok() && f.stdout.contains("number of failed transactions: 0"), "{}", f.describe("pgbench"));
    let done = postgres::transactions_processed(&f.stdout);
    assert!(done > 0, "{}", f.describe("pgbench processed no transaction"));
    let psql = bin.join("psql").display().to_string();
    let check = Program::spawn(
        lanes_run(&c, 1, &psql, &["-h", &host, "-p", port, "-U", "postgres", "-Atc", postgres::BOOKS, "postgres"]),
        "psql on b",
    )
    .wait(Duration::from_secs(60));
    assert!(check.ok() && check.stdout.trim() == format!("t|{done}"), "{}", check.describe("the books"));
    eprintln!("PostgreSQL across two cuts: {done} transactions, books balanced");
    let s = server.stop(libc::SIGINT, Duration::from_secs(20));
    assert!(s.ok(), "{}", s.describe("postgres"));
}

/// socat forking a process per connection on a (`TCP-LISTEN:…,fork`, as root: the daemon's
/// user) under `lanes run`, each child relaying its connection to an echo server on a's
/// loopback, and clients on b: the parent closes its copy of each accepted socket, and the
/// child, the socket's only holder then, registers it with objects of its own, so each of
/// two connections in turn carries bytes over the fabric and a checksummed exchange comes
/// back byte-exact; a child that execs `cat` to serve its connection (`EXEC:cat`, the inetd
/// way) hands it over as kernel TCP, byte-exact too; every half is withdrawn at the end.
#[test]
fn a_server_forking_per_connection_moves_bytes_over_the_fabric() {
    use lanes_testkit::program::Program;
    if !installed(&["socat"]) {
        return;
    }
    let Some(c) = Cluster::netns("xh-fork") else { return };
    if !with_fabric_stream("a_server_forking_per_connection_moves_bytes_over_the_fabric") {
        return;
    }
    let mut echo = sockets_child(&c, Some(0), Some("on"), "echo server on a");
    let (mut client, servers) = unless_a_host_was_lost(&c, "socat", |n| {
        let (port, echo_port) = (PORT + 50 + n, PORT + 70 + n);
        echo.ok(&format!("listen {echo_port} echo"));
        let listen = format!("TCP-LISTEN:{port},fork,reuseaddr");
        let relay = format!("TCP:127.0.0.1:{echo_port}");
        let server = Program::spawn(lanes_run(&c, 0, "socat", &[&listen, &relay]), "socat on a");
        let server_at = format!("{}:{port}", Netns::address(0));
        let mut client = sockets_child(&c, Some(1), Some("on"), "client on b");
        let connect = |client: &mut Proc, id: u64, at: &str| -> Result<String, String> {
            let started = Instant::now();
            loop {
                match client.call(&format!("connect {id} {at}")) {
                    Ok(local) => return Ok(local.trim_start_matches("local=").to_string()),
                    Err(e) if started.elapsed() > BOUND => return Err(format!("socat never listened: {e:?}")),
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        };
        for id in 1..=2 {
            let local = connect(&mut client, id, &server_at)?;
            // socat's child registers its half at its first read: round trips until the
            // connection is paired, its stream live and carrying bytes.
            let over = || {
                list_connections(&c.fabric(1))
                    .into_iter()
                    .find(|r| r.local.to_string() == local)
                    .map_or(0, |r| r.ring_bytes_sent + r.ring_bytes_received)
            };
            let started = Instant::now();
            while over() == 0 {
                if started.elapsed() > BOUND {
                    return Err(format!("connection {id}: no byte over the fabric\n{}", lanes_status(&c, 1)));
                }
                client.call_within(&format!("ping {id} 50 64 0"), BOUND).map_err(|e| format!("{e:?}"))?;
            }
            let got = client
                .call_within(&format!("exchange {id} {}", 16 << 20), Duration::from_secs(120))
                .map_err(|e| format!("{e:?}"))?;
            assert_eq!(got, format!("bytes={}", 16 << 20), "connection {id}");
            eprintln!("connection {id}: {} bytes over the fabric", over());
            client.ok(&format!("close {id}"));
        }
        let port = PORT + 60 + n;
        let listen = format!("TCP-LISTEN:{port},fork,reuseaddr");
        let exec = Program::spawn(lanes_run(&c, 0, "socat", &[&listen, "EXEC:cat"]), "socat EXEC:cat on a");
        connect(&mut client, 3, &format!("{}:{port}", Netns::address(0)))?;
        let got = client.call_within("exchange 3 4194304", Duration::from_secs(120)).map_err(|e| format!("{e:?}"))?;
        assert_eq!(got, "bytes=4194304", "through cat");
        client.ok("close 3");
        Ok((client, [server, exec]))
    });
    wait_for(&c, "every half withdrawn", || {
        daemon_sockets(&c, 0).halves.is_empty() && daemon_sockets(&c, 1).halves.is_empty()
    });
    for k in [0, 1] {
        let refused = daemon_sockets(&c, k).refused;
        assert!(refused.is_empty(), "host {k}: {refused:?}\n{}", c.logs());
    }
    client.exit();
    echo.exit();
    drop(servers);
}

/// `remote = "off"`, and `auto` on the tcp provider: no registration, no question to the
/// daemon, no record; each end counts and says why its connection stays kernel TCP.
#[test]
fn with_remote_acceleration_off_nothing_is_asked_or_registered() {
    let Some(c) = Cluster::netns("xh-off") else { return };
    let mut server = sockets_child(&c, Some(0), Some("off"), "server on a, remote off");
    server.ok(&format!("listen {PORT} echo"));
    let mut off = sockets_child(&c, Some(1), Some("off"), "client on b, remote off");
    let mut auto = sockets_child(&c, Some(2), Some(""), "client on c, remote auto");
    for p in [&mut off, &mut auto] {
        p.ok(&format!("connect 1 {}", server_addr(0)));
        assert_eq!(p.ok("exchange 1 1048576"), "bytes=1048576");
    }
    std::thread::sleep(Duration::from_millis(300));
    for k in 0..3 {
        let s = daemon_sockets(&c, k);
        assert!(s.requests.is_empty() && s.halves.is_empty(), "host {k}: {s:?}");
        assert!(list_connections(&c.fabric(k)).is_empty(), "host {k} has records");
    }
    assert_eq!(reason_count(&c, 1, off.pid(), Reason::RemoteOff), 1);
    assert_eq!(reason_count(&c, 2, auto.pid(), Reason::RemoteOff), 1);
    assert!(
        off.output_snapshot().contains("remote acceleration is off ([sockets] remote"),
        "{}",
        off.output_snapshot()
    );
    let said = auto.output_snapshot();
    assert!(said.contains("remote acceleration is off for provider \"tcp;ofi_rxm\""), "{said}");
    wait_for(&c, "the server counted both", || reason_count(&c, 0, server.pid(), Reason::RemoteOff) == 2);
}

/// Registrations a process makes for sockets that are not its own, or for a tuple its
/// socket does not have, or in another process's name, are refused and counted; the real
/// halves stay paired.
#[test]
fn forged_registrations_are_refused_and_counted() {
    let Some(c) = Cluster::netns("xh-forged") else { return };
    let mut server = sockets_child(&c, Some(0), Some("on"), "server on a");
    server.ok(&format!("listen {PORT} echo"));
    let mut client = sockets_child(&c, Some(1), Some("on"), "client on b");
    let client_addr = client.ok(&format!("connect 1 {}", server_addr(0))).trim_start_matches("local=").to_string();
    let generation = wait_paired(&c, (1, &client_addr), (0, &server_addr(0)));
    // The server's socket, as its record says.
    let victim = list_connections(&c.fabric(0)).into_iter().find(|r| r.remote.to_string() == client_addr).unwrap();
    let (sl, sr) = (victim.local, victim.remote);
    // Its record's name carries a's network namespace, which this process is not in.
    let cookie = std::fs::read_dir(lanes::sockets::endpoint::sockets_dir(&c.fabric(0)))
        .unwrap()
        .flatten()
        .filter_map(|e| lanes::sockets::ConnectionKey::parse(e.file_name().to_str()?))
        .find(|k| k.local == sl && k.remote == sr)
        .and_then(|k| lanes::sockets::Endpoint::open(&c.fabric(0), &k).ok())
        .map(|ep| ep.cookie())
        .expect("the server's record");

    // The forger: a process on a without the library, with a socket of its own.
    let mut forger = sockets_child(&c, Some(0), None, "forger on a");
    let me: u64 = forger.ok("identity").trim_start_matches("identity=").parse().unwrap();
    forger.ok(&format!("connect 1 {}", server_addr(0)));
    let own = forger.ok("own 1");
    let own_cookie = lanes_testkit::process::field(&own, "cookie");
    let server_identity = ProcessIdentity::of_pid(server.pid()).unwrap().bits();
    // The forger's own socket (registered as its own), naming the server's stream objects:
    // a peer would write into the server's memory.
    let (fl, fr) = (field_text(&own, "local"), field_text(&own, "remote"));
    let theirs = record_endpoint(&c, 0, &client_addr).and_then(|ep| ep.own_handles());
    let mut cases = vec![
        (format!("register {sl} {sr} {cookie} {me}"), "registration: a socket the caller does not hold"),
        (format!("register {sl} {sr} {own_cookie} {me}"), "registration: no socket with this tuple and cookie"),
        (format!("register {sl} {sr} {cookie} {server_identity}"), "registration: a half of another process"),
    ];
    if let Some(h) = theirs {
        let objects = format!("{}:{}:{}:{}", h.node, h.segment, h.request_bell, h.answer_bell);
        cases.push((
            format!("register {fl} {fr} {own_cookie} {me} {objects}"),
            "registration: stream objects not the caller's on this host",
        ));
        // Objects on another host's node.
        cases.push((
            format!("register {fl} {fr} {own_cookie} {me} {}:1:2:3", lanes_testkit::cluster::NODES[1]),
            "registration: stream objects not the caller's on this host",
        ));
    }
    for (i, (cmd, why)) in cases.iter().enumerate() {
        let answer = forger.ok(cmd);
        assert!(answer.starts_with("refused"), "{cmd}: {answer}");
        let before = cases[..i].iter().filter(|(_, w)| w == why).count() as u64;
        assert_eq!(count(&daemon_sockets(&c, 0).refused, why), before + 1, "{cmd}: {answer}");
        if why.contains("stream objects") {
            assert!(answer.contains("stream objects"), "the refusal names its cause: {answer}");
        }
    }
    let s = daemon_sockets(&c, 0);
    let h = s.halves.iter().find(|h| h.remote.to_string() == client_addr).unwrap();
    assert_eq!((h.state.as_str(), h.generation, h.pid), ("paired", generation, server.pid()), "{s:?}");
    assert_eq!(s.refused.iter().map(|(_, n)| n).sum::<u64>(), cases.len() as u64, "{s:?}");
    let status = lanes_status(&c, 0);
    assert!(
        status.contains("refused by this host's daemon") && status.contains("a half of another process"),
        "{status}"
    );
    assert_eq!(client.ok("exchange 1 262144"), "bytes=262144");
}

/// A peer host's daemon killed and restarted: the new daemon takes its halves over from
/// the records, the pair keeps its generation; a connection opened while it was away pairs
/// when it is back. A killed peer process: its daemon withdraws its halves (the sweep), and
/// the other host's half is left with its peer gone.
#[test]
fn a_restarted_daemon_keeps_its_pairs_and_a_killed_peer_is_withdrawn() {
    let Some(mut c) = Cluster::netns("xh-restart") else { return };
    let mut server = sockets_child(&c, Some(0), Some("on"), "server on a");
    server.ok(&format!("listen {PORT} hold"));
    let mut client = sockets_child(&c, Some(1), Some("on"), "client on b");
    let first = client.ok(&format!("connect 1 {}", server_addr(0))).trim_start_matches("local=").to_string();
    let generation = wait_paired(&c, (1, &first), (0, &server_addr(0)));

    // b's daemon dies and comes back: same pair, same generation.
    c.daemon(1).kill9();
    c.start_daemon(1);
    let again = wait_paired(&c, (1, &first), (0, &server_addr(0)));
    assert_eq!(again, generation, "the restart renumbered the pair\n{}", c.logs());
    assert_eq!(client.ok("exchange 1 1048576"), "bytes=1048576");

    // A connection opened while b has no daemon: b's half waits in its record.
    c.daemon(1).kill9();
    let second = client.ok(&format!("connect 2 {}", server_addr(0))).trim_start_matches("local=").to_string();
    assert_eq!(client.ok("exchange 2 65536"), "bytes=65536");
    let rec = record_to(&c, 1, &server_addr(0));
    assert!(rec.is_some(), "b's records: {:?}", list_connections(&c.fabric(1)));
    let unregistered = list_connections(&c.fabric(1))
        .into_iter()
        .filter(|r| r.local.to_string() == second)
        .filter_map(|r| r.cross_host)
        .next()
        .expect("the second connection's record");
    assert_eq!(unregistered.state, PairingState::Unregistered);
    assert_eq!(
        reason_count(&c, 1, client.pid(), Reason::NoDaemon),
        1,
        "the reasons on b: {:?}",
        list_reasons(&c.fabric(1))
    );
    c.start_daemon(1);
    let g2 = wait_paired(&c, (1, &second), (0, &server_addr(0)));
    assert!(g2 >= 1);

    // The client is killed: b's daemon finds its sockets gone and withdraws the halves;
    // a's (held by the server) are left with their peer gone.
    client.kill9();
    wait_for(&c, "b's halves withdrawn", || daemon_sockets(&c, 1).halves.is_empty());
    wait_for(&c, "a's halves: peer gone", || {
        let s = daemon_sockets(&c, 0);
        s.halves.len() == 2 && s.halves.iter().all(|h| h.state == "peer-gone")
    });
    let rec = record_to(&c, 0, &first).expect("a's record");
    assert_eq!(rec.state, PairingState::PeerGone);
    server.exit();
    wait_for(&c, "a's halves withdrawn with the server", || daemon_sockets(&c, 0).halves.is_empty());
}

// ---------------------------------------------------------------------------------------
// The library's connections over their fabric stream
// ---------------------------------------------------------------------------------------

/// Whether this build has the fabric stream (else the reason is printed).
fn with_fabric_stream(test: &str) -> bool {
    if !lanes::OFI_TRANSPORT {
        assert!(std::env::var_os("CI").is_none(), "the CI builds with --features lanes/ofi");
        eprintln!("skipped {test}: the fabric stream needs the ofi transport (--features lanes/ofi)");
    }
    lanes::OFI_TRANSPORT
}

/// An echo server on a at `ip:port` and a client on b with connection 1 to it, paired and
/// its stream live, after a checksummed exchange of `bytes` both ways: (server, client, the
/// server's address, the client's).
fn live_echo_pair(c: &Cluster, ip: &str, port: u16, bytes: u64) -> Result<(Proc, Proc, String, String), String> {
    let server_at = format!("{ip}:{port}");
    let mut server = sockets_child(c, Some(0), Some("on"), "server on a");
    server.ok(&format!("listen {port} echo"));
    let mut client = sockets_child(c, Some(1), Some("on"), "client on b");
    let client_addr = client.ok(&format!("connect 1 {server_at}")).trim_start_matches("local=").to_string();
    wait_paired(c, (1, &client_addr), (0, &server_at));
    make_live(c, &mut client, &server_at)?;
    let got =
        client.call_within(&format!("exchange 1 {bytes}"), Duration::from_secs(300)).map_err(|e| format!("{e:?}"))?;
    assert_eq!(got, format!("bytes={bytes}"));
    Ok((server, client, server_at, client_addr))
}

/// Round trips of 64 B from one thread on the client's connection 1 (on host b) to
/// `server_at` until its stream is live (its record carries the stream's counts): a stream
/// starts only at a call made while no other is inside the kernel, which two threads that
/// both move bytes may leave for long.
fn make_live(c: &Cluster, client: &mut Proc, server_at: &str) -> Result<(), String> {
    let started = Instant::now();
    let live = || {
        list_connections(&c.fabric(1))
            .into_iter()
            .any(|r| r.remote.to_string() == server_at && r.kernel_bytes_sent + r.ring_bytes_sent > 0)
    };
    while !live() {
        if started.elapsed() > Duration::from_secs(60) {
            return Err("the stream never went live".into());
        }
        client.call_within("ping 1 50 64 0", Duration::from_secs(60)).map_err(|e| format!("{e:?}"))?;
    }
    Ok(())
}

/// TCP_INQ across hosts: on a live stream, each `recvmsg` with a control buffer carries
/// TCP_CM_INQ, the bytes still queued after it, as on kernel TCP (the same program on the
/// same link without the library first).
#[test]
fn tcp_cm_inq_through_the_library_as_on_kernel_tcp() {
    let Some(c) = Cluster::netns("xh-lib-inq") else { return };
    if !with_fabric_stream("tcp_cm_inq_through_the_library_as_on_kernel_tcp") {
        return;
    }
    let mut answers = Vec::new();
    for (with_library, port) in [(false, PORT + 50), (true, PORT + 51)] {
        let remote = with_library.then_some("on");
        let server_at = format!("{}:{port}", Netns::address(0));
        let mut server = sockets_child(&c, Some(0), remote, "echo on a");
        server.ok(&format!("listen {port} echo"));
        let mut client = sockets_child(&c, Some(1), remote, "client on b");
        let client_addr = client.ok(&format!("connect 1 {server_at}")).trim_start_matches("local=").to_string();
        if with_library {
            wait_paired(&c, (1, &client_addr), (0, &server_at));
            make_live(&c, &mut client, &server_at).unwrap_or_else(|e| panic!("{e}"));
        }
        answers.push(client.ok("inq 1"));
        client.exit();
        server.exit();
    }
    eprintln!(
        "kernel TCP: {}
the library: {}",
        answers[0], answers[1]
    );
    assert_eq!(answers[0], "012:7 34:5 56789:0", "kernel TCP's own answers");
    assert_eq!(answers[1], answers[0], "as kernel TCP");
}

/// A checksummed stream both ways (64 MiB out, echoed back) between programs under the
/// library on a and b, paired (its stream made live first): every byte comes back in order, some went over the fabric
/// (both ends' records together: which direction the ring carried depends on scheduling),
/// `lanes status` shows the counts, and at the close both daemons' totals have them.
#[test]
fn a_checksummed_stream_through_the_library_moves_over_the_fabric() {
    let Some(c) = Cluster::netns("xh-lib-stream") else { return };
    if !with_fabric_stream("a_checksummed_stream_through_the_library_moves_over_the_fabric") {
        return;
    }
    // A host called Lost (a machine so loaded that heartbeats stopped for seconds) revokes
    // the fabric's grants and, without fail-over, resets the streams: then again.
    let (mut server, mut client, server_at, client_addr) =
        unless_a_host_was_lost(&c, "the stream", |n| live_echo_pair(&c, &Netns::address(0), PORT + 20 + n, 64 << 20));
    let (b_sent, b_received) = fabric_bytes(&c, 1, &server_at);
    let (a_sent, a_received) = fabric_bytes(&c, 0, &client_addr);
    eprintln!("over the fabric: b sent {b_sent} received {b_received}; a sent {a_sent} received {a_received}");
    assert!(b_sent + b_received + a_sent + a_received > 0, "no byte went over the fabric\n{}", c.logs());
    // What one end received over the fabric the other sent over it (the counts are
    // written after each call: the last call's may be missing).
    let status = lanes_status(&c, 1);
    let line = status.lines().find(|l| l.contains(&server_at)).unwrap_or_else(|| panic!("{status}"));
    assert!(status.contains("fabric out") && line.contains("paired"), "{status}");
    assert_eq!(client.ok("exchange 1 1048576"), "bytes=1048576", "and on, byte-exact");
    client.ok("close 1");
    wait_for(&c, "both halves withdrawn", || {
        daemon_sockets(&c, 0).halves.is_empty() && daemon_sockets(&c, 1).halves.is_empty()
    });
    let b = daemon_sockets(&c, 1);
    assert!(b.fabric_sent + b.fabric_received > 0, "b's daemon heard of no fabric bytes: {b:?}");
    for k in [0, 1] {
        let refused = daemon_sockets(&c, k).refused;
        assert!(refused.is_empty(), "host {k}: {refused:?}");
    }
    client.exit();
    server.exit();
}

/// A program that closes every descriptor above its own (`closefrom`, `close_range`, as
/// daemons do when they start or hand over) does not close the library's: the files and
/// daemon connections behind a live fabric stream sit above the program's descriptors, and
/// closing them under the stream would withdraw its pairing (or, with the number reused,
/// send the library's bytes into the program's file). The stream goes on over the fabric,
/// byte-exact, and both halves are withdrawn as usual at the end.
#[test]
fn closing_every_descriptor_above_the_programs_own_leaves_the_librarys() {
    let Some(c) = Cluster::netns("xh-closefrom") else { return };
    if !with_fabric_stream("closing_every_descriptor_above_the_programs_own_leaves_the_librarys") {
        return;
    }
    let (mut server, mut client, server_at, client_addr) =
        unless_a_host_was_lost(&c, "the stream", |n| live_echo_pair(&c, &Netns::address(0), PORT + 60 + n, 1 << 20));
    // The children's own descriptors (pipes, listener, connections) are far below 64.
    client.ok("closefrom 64");
    server.ok("close-range 64");
    let (sent_before, received_before) = fabric_bytes(&c, 1, &server_at);
    assert_eq!(client.ok("exchange 1 4194304"), "bytes=4194304", "byte-exact after the closes");
    // Whether that exchange's receivers took the ring is the stream's choice (a receiver
    // backing off after stints that did not pay stays on the kernel a while): round trips
    // until bytes move over the fabric again, which a stream whose objects were closed
    // never does.
    let started = Instant::now();
    loop {
        let (sent_after, received_after) = fabric_bytes(&c, 1, &server_at);
        if sent_after + received_after > sent_before + received_before {
            break;
        }
        assert!(
            started.elapsed() < BOUND,
            "nothing more over the fabric after the closes: sent {sent_before} -> {sent_after}, received \
             {received_before} -> {received_after}\n{}",
            lanes_status(&c, 1)
        );
        client.call_within("ping 1 50 64 0", Duration::from_secs(60)).expect("round trips");
    }
    for (k, remote) in [(1, server_at.as_str()), (0, client_addr.as_str())] {
        let half = half_to(&c, k, remote).unwrap_or_else(|| panic!("host {k}: the half was withdrawn\n{}", c.logs()));
        assert_eq!(half.state, "paired", "host {k}");
    }
    client.ok("close 1");
    wait_for(&c, "both halves withdrawn", || {
        daemon_sockets(&c, 0).halves.is_empty() && daemon_sockets(&c, 1).halves.is_empty()
    });
    client.exit();
    server.exit();
}

/// A send blocked in the kernel (its peer reads nothing yet) while other calls on the
/// connection, which find nothing to read, set its stream up: the stream must not start
/// while that send is inside the kernel, whose counts then miss the rest it queues later
/// (the sender's kernel count short of what the receiver reads, so the receiver is either
/// never granted the ring or, caught up with the short count while the rest is on its way,
/// granted it ahead of those bytes: a wrong byte). Once the peer reads, every byte arrives
/// in order and the direction takes the ring (the counts agree): the sender holds its
/// kernel sends back while the sink reads the megabytes both kernels buffered, until it
/// caught up and asked for the ring.
#[test]
fn a_stream_does_not_start_while_a_send_is_inside_the_kernel() {
    let Some(c) = Cluster::netns("xh-lib-start") else { return };
    if !with_fabric_stream("a_stream_does_not_start_while_a_send_is_inside_the_kernel") {
        return;
    }
    let (mut server, mut client) = unless_a_host_was_lost(&c, "a send blocked at the start", |n| {
        let port = PORT + 30 + n;
        let server_at = format!("{}:{port}", Netns::address(0));
        let mut server = sockets_child(&c, Some(0), Some("on"), "sink on a");
        server.ok(&format!("listen {port} sink"));
        let mut client = sockets_child(&c, Some(1), Some("on"), "sender on b");
        let client_addr = client.ok(&format!("connect 1 {server_at}")).trim_start_matches("local=").to_string();
        wait_paired(&c, (1, &client_addr), (0, &server_at));
        // 16 MiB: far more than both kernels' buffers hold, so the send stays in the kernel.
        client.ok("blocked-send 1 16777216");
        // Long enough for the set-up (three connects, at most 5 s) and starts after it.
        client.ok("pokes 1 6000");
        server.ok("sink");
        let started = Instant::now();
        while fabric_bytes(&c, 1, &server_at).0 == 0 {
            if started.elapsed() > Duration::from_secs(60) {
                return Err(format!("the direction never took the ring: {:?}", client.call("stop-send 1")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let sent = field(&client.ok("stop-send 1"), "sent");
        let got = server.call_within("drained", Duration::from_secs(120)).map_err(|e| format!("{e:?}"))?;
        assert_eq!(got, format!("received={sent} recv=end"), "every byte in order");
        eprintln!("sent {sent}, over the fabric {:?}", fabric_bytes(&c, 1, &server_at));
        Ok((server, client))
    });
    client.exit();
    server.exit();
}

/// `sendmmsg` and `recvmmsg` mixed with `write` and `read` on a connection whose stream is
/// live (made live by round trips from one thread, so that nothing keeps it from starting):
/// the stream does not serve them, so the connection goes back to the kernel for good
/// first, byte-exact (the ring's bytes before the kernel's); every byte arrives in order.
#[test]
fn sendmmsg_and_recvmmsg_keep_their_place_in_a_stream_through_the_library() {
    let Some(c) = Cluster::netns("xh-lib-mmsg") else { return };
    if !with_fabric_stream("sendmmsg_and_recvmmsg_keep_their_place_in_a_stream_through_the_library") {
        return;
    }
    let (mut server, mut client) = unless_a_host_was_lost(&c, "sendmmsg and recvmmsg", |n| {
        let port = PORT + 40 + n;
        let server_at = format!("{}:{port}", Netns::address(0));
        let mut server = sockets_child(&c, Some(0), Some("on"), "server on a");
        server.ok(&format!("listen {port} echo"));
        let mut client = sockets_child(&c, Some(1), Some("on"), "client on b");
        let client_addr = client.ok(&format!("connect 1 {server_at}")).trim_start_matches("local=").to_string();
        wait_paired(&c, (1, &client_addr), (0, &server_at));
        make_live(&c, &mut client, &server_at)?;
        // Some bytes over the ring first (a stream in ring mode), then the calls mixed.
        client.call_within("exchange 1 16777216", Duration::from_secs(300)).map_err(|e| format!("{e:?}"))?;
        let got =
            client.call_within("mmsg-exchange 1 33554432", Duration::from_secs(300)).map_err(|e| format!("{e:?}"))?;
        assert_eq!(got, "bytes=33554432", "every byte in order");
        eprintln!("over the fabric: {:?}", fabric_bytes(&c, 1, &server_at));
        Ok((server, client))
    });
    client.exit();
    server.exit();
}

/// A peer killed mid-stream (b floods a and never reads, so its kernel holds unread bytes
/// and resets the connection when it dies): a, under the library with the stream live,
/// reads what came and then the same errors as the same scenario on plain kernel TCP
/// (`ECONNRESET`, then a failing send), never a clean end nor a wrong byte.
#[test]
fn a_killed_peer_reads_as_a_reset_through_the_library_as_on_kernel_tcp() {
    let Some(c) = Cluster::netns("xh-lib-kill") else { return };
    if !with_fabric_stream("a_killed_peer_reads_as_a_reset_through_the_library_as_on_kernel_tcp") {
        return;
    }
    let mut outcomes = Vec::new();
    for (with_library, port) in [(false, PORT), (true, PORT + 1)] {
        let remote = with_library.then_some("on");
        let mut server = sockets_child(&c, Some(0), remote, "drain on a");
        server.ok(&format!("listen {port} drain"));
        let mut client = sockets_child(&c, Some(1), remote, "flood from b");
        let addr = format!("{}:{port}", Netns::address(0));
        let client_addr = client.ok(&format!("connect 1 {addr}")).trim_start_matches("local=").to_string();
        if with_library {
            wait_paired(&c, (1, &client_addr), (0, &addr));
        }
        client.ok("flood 1");
        std::thread::sleep(Duration::from_millis(1500));
        let fabric = fabric_bytes(&c, 0, &client_addr);
        client.kill9();
        let got = server.call_within("drained", Duration::from_secs(90)).unwrap_or_else(|e| panic!("{e:?}"));
        eprintln!("library {with_library}: {got} (a's fabric bytes before the kill: {fabric:?})");
        assert!(field(&got, "received") > 0, "{got}");
        assert!(got.contains("recv=ECONNRESET"), "library {with_library}: {got}");
        assert!(got.contains("send=EPIPE") || got.contains("send=ECONNRESET"), "library {with_library}: {got}");
        outcomes.push(got);
        server.exit();
    }
    let errors = |s: &str| -> String {
        s.split_whitespace().filter(|w| w.starts_with("recv=") || w.starts_with("send=")).collect::<Vec<_>>().join(" ")
    };
    assert_eq!(errors(&outcomes[0]), errors(&outcomes[1]), "as kernel TCP: {outcomes:?}");
}

/// iperf3 across hosts under `lanes run` (server on a, client on b, 3 s), after the same
/// run on kernel TCP: both runs complete as iperf3 reports them, and the bytes the
/// programs' connections moved over the fabric are counted by the daemons when they close.
/// (A run of 64 MiB could finish before the streams were set up in the background.)
#[test]
fn iperf3_across_hosts_under_lanes_run_moves_bytes_over_the_fabric() {
    use lanes_testkit::program::{on_path, Program};
    if !on_path("iperf3") {
        assert!(std::env::var_os("CI").is_none(), "iperf3 is missing (scripts/test.sh installs it)");
        eprintln!("skipping: iperf3 is not installed");
        return;
    }
    let Some(c) = Cluster::netns("xh-iperf3") else { return };
    if !with_fabric_stream("iperf3_across_hosts_under_lanes_run_moves_bytes_over_the_fabric") {
        return;
    }
    let host = Netns::address(0);
    // The same run without the library first: what iperf3 reports on kernel TCP.
    // A host called Lost (heartbeats stopped for seconds on a loaded machine) resets the
    // streams without fail-over: then both runs again, on fresh ports.
    let reports = unless_a_host_was_lost(&c, "iperf3", |n| {
        let mut reports = Vec::new();
        for with_library in [false, true] {
            let port = (15301 + 2 * n + u16::from(with_library)).to_string();
            let port = port.as_str();
            let on = |k: usize, args: &[&str]| {
                let mut cmd = lanes_run(&c, k, "iperf3", args);
                if !with_library {
                    cmd.env("LANES_SOCKETS", "0");
                }
                cmd
            };
            let server = Program::spawn(on(0, &["-s", "-1", "-p", port]), "iperf3 -s on a");
            std::thread::sleep(Duration::from_millis(500));
            let client = Program::spawn(on(1, &["-c", &host, "-p", port, "-t", "3", "-J"]), "iperf3 -c on b")
                .wait(Duration::from_secs(180));
            let s = server.wait(Duration::from_secs(60));
            if !client.ok() || !s.ok() {
                return Err(format!("{}{}", client.describe("iperf3 -c"), s.describe("iperf3 -s")));
            }
            let report: serde_json::Value = serde_json::from_str(&client.stdout).expect("iperf3 -J output");
            let sent = report["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
            let received = report["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
            eprintln!("iperf3, library {with_library}: sent {sent} received {received}");
            reports.push((sent, received));
        }
        Ok(reports)
    });
    // iperf3's receiver stops counting when the test's end comes over the control
    // connection, on kernel TCP as well: what it received is at most what was sent.
    for (sent, received) in &reports {
        assert!(*received > 0 && received <= sent, "{reports:?}");
    }
    wait_for(&c, "every half withdrawn", || {
        daemon_sockets(&c, 0).halves.is_empty() && daemon_sockets(&c, 1).halves.is_empty()
    });
    let fabric = fabric_totals(&c);
    eprintln!("iperf3: over the fabric (both hosts, sent + received): {fabric}");
    assert!(fabric > 0, "no byte of iperf3's went over the fabric\n{}", c.logs());
}

/// iperf3 across hosts under `lanes run`, both directions at once for 14 s over the
/// "Ethernet" (the second link), with a's fabric link cut for 4 s once its connections are
/// live (up to 4 s after the start under load, so the link is back for a few seconds
/// before the end): the connections fail over (`lanes status` on b counts it while they run), fall
/// forward to the fabric once the link is back (counted too), and iperf3 completes on both
/// ends as on kernel TCP.
#[test]
fn iperf3_across_hosts_completes_while_the_fabric_link_is_cut() {
    use lanes_testkit::program::{on_path, Program};
    if !on_path("iperf3") {
        assert!(std::env::var_os("CI").is_none(), "iperf3 is missing (scripts/test.sh installs it)");
        eprintln!("skipping: iperf3 is not installed");
        return;
    }
    let Some(c) = Cluster::netns_with_ethernet("xh-iperf3-cut") else { return };
    if !with_fabric_stream("iperf3_across_hosts_completes_while_the_fabric_link_is_cut") {
        return;
    }
    let host = Netns::ethernet_address(0);
    let port = "15341";
    // The test is about the cut, not about whether a CPU is free to spin: without the gate's
    // checks the streams carry bytes over the fabric whatever else the machine runs (with
    // them, under CI's load, they could stay kernel TCP for the whole run, correctly).
    let run = |k: usize, args: &[&str]| {
        let mut cmd = lanes_run(&c, k, "iperf3", args);
        cmd.env("LANES_SPIN_GATE", "0").env("LANES_SOCKETS_DEFER", "0");
        cmd
    };
    let server = Program::spawn(run(0, &["-s", "-1", "-p", port]), "iperf3 -s on a");
    std::thread::sleep(Duration::from_millis(500));
    let client = Program::spawn(run(1, &["-c", &host, "-p", port, "-t", "14", "--bidir", "-J"]), "iperf3 -c");
    // The cut comes once the test's connections are live over the fabric.
    let t0 = Instant::now();
    wait_for(&c, "iperf3's connections moving bytes over the fabric", || {
        list_connections(&c.fabric(1))
            .iter()
            .any(|r| r.cross_host.is_some() && r.ring_bytes_sent + r.ring_bytes_received > 0)
    });
    let n = c.namespaces().expect("namespaces");
    let live_after = t0.elapsed();
    n.set_link(0, false);
    let cut = Instant::now();
    let (mut failovers, mut first_seen) = (0, None);
    while cut.elapsed() < Duration::from_secs(4) {
        let now: u64 = list_connections(&c.fabric(1)).iter().map(|r| r.failovers).sum();
        if now > 0 && first_seen.is_none() {
            first_seen = Some(cut.elapsed());
        }
        failovers = failovers.max(now);
        std::thread::sleep(Duration::from_millis(20));
    }
    n.set_link(0, true);
    // Fall-forwards while the test runs on.
    let mut fall_forwards = 0;
    let mut client = client;
    while !client.exited() {
        let now: u64 = list_connections(&c.fabric(1)).iter().map(|r| r.fall_forwards).sum();
        fall_forwards = fall_forwards.max(now);
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = client.wait(Duration::from_secs(120));
    let s = server.wait(Duration::from_secs(60));
    assert!(client.ok() && s.ok(), "{}{}\n{}", client.describe("iperf3 -c"), s.describe("iperf3 -s"), c.logs());
    let report: serde_json::Value = serde_json::from_str(&client.stdout).expect("iperf3 -J output");
    let sent = report["end"]["sum_sent"]["bytes"].as_u64().unwrap_or(0);
    let received = report["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    eprintln!(
        "iperf3 across a cut: bytes over the fabric {live_after:?} after the start; sent {sent} received \
         {received}; fail-overs seen on b: {failovers}, the first \
         {first_seen:?} after the cut (the daemons suspect a host after {SUSPECT_MS} ms); fall-forwards seen \
         on b after the link's return: {fall_forwards}"
    );
    assert!(received > 0 && received <= sent, "{}", client.stdout);
    assert!(failovers > 0, "no connection of b's failed over during the cut\n{}", c.logs());
    assert!(fall_forwards > 0, "no connection of b's fell forward after the cut\n{}", c.logs());
}

/// nginx on a and wrk on b under `lanes run`, over the "Ethernet" address, while a's
/// fabric link is cut twice (each time until b's
/// daemon calls a Lost, then restored): wrk's keep-alive connections, their streams live,
/// fail over and fall forward (counted in b's records while it runs), wrk reports no socket
/// error and no failed response, and the file fetched by curl after the second return
/// comes back byte for byte.
#[test]
fn nginx_and_wrk_across_hosts_while_the_fabric_link_flaps() {
    use lanes::cluster::proto::HostState;
    use lanes_testkit::program::Program;
    if !installed(&["nginx", "wrk", "curl"]) {
        return;
    }
    let Some(c) = Cluster::netns_with_ethernet("xh-nginx-flap") else { return };
    if !with_fabric_stream("nginx_and_wrk_across_hosts_while_the_fabric_link_flaps") {
        return;
    }
    let dir = lanes_testkit::TestDir::new("xh-nginx");
    let p = dir.root().display().to_string();
    for d in ["www", "tmp"] {
        std::fs::create_dir_all(dir.root().join(d)).unwrap();
    }
    let big: Vec<u8> = (0..4u64 << 20).map(|i| pattern(7, i)).collect();
    std::fs::write(dir.root().join("www/big.bin"), &big).unwrap();
    std::fs::write(dir.root().join("www/index.html"), "<html>lanes</html>\n").unwrap();
    let (host, port) = (Netns::ethernet_address(0), 15380);
    // sendfile off: a file's bytes go through the program's writes (sendfile gives a
    // connection to the kernel for good); keep-alive connections last the whole run.
    let conf = format!(
        "user root;\ndaemon off;\nmaster_process on;\nworker_processes 1;\npid {p}/nginx.pid;\n\
         error_log {p}/error.log info;\nevents {{ worker_connections 256; }}\n\
         http {{\n  access_log off;\n  sendfile off;\n  keepalive_requests 100000000;\n\
         \x20 keepalive_timeout 120s;\n  client_body_temp_path {p}/tmp/body;\n\
         \x20 proxy_temp_path {p}/tmp/proxy;\n  fastcgi_temp_path {p}/tmp/fastcgi;\n\
         \x20 uwsgi_temp_path {p}/tmp/uwsgi;\n  scgi_temp_path {p}/tmp/scgi;\n\
         \x20 server {{ listen {host}:{port}; root {p}/www; }}\n}}\n"
    );
    let conf_path = dir.path("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let conf_arg = conf_path.display().to_string();
    let err_log = format!("{p}/error.log");
    let server = Program::spawn(lanes_run(&c, 0, "nginx", &["-p", &p, "-c", &conf_arg, "-e", &err_log]), "nginx on a");
    let url = |file: &str| format!("http://{host}:{port}/{file}");
    let started = Instant::now();
    loop {
        let mut probe = std::process::Command::new(&c.prefix(1)[0]);
        probe.args(&c.prefix(1)[1..]).args(["curl", "-fsS", "-o", "/dev/null", &url("index.html")]);
        if probe.output().is_ok_and(|o| o.status.success()) {
            break;
        }
        assert!(started.elapsed() < BOUND, "nginx never answered on a\n{}", c.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    let wrk =
        Program::spawn(lanes_run(&c, 1, "wrk", &["-c", "4", "-t", "1", "-d", "20s", &url("index.html")]), "wrk on b");
    let on_b = |f| sum_of_cross_host(&c, 1, f);
    // Live streams (their records carry the streams' counts): whether a ring pays is the
    // streams' choice (an epoll loop's short reads mostly leave it to the kernel).
    wait_for(&c, "wrk's connections with live fabric streams", || {
        on_b(|r| r.kernel_bytes_sent + r.ring_bytes_sent) > 0
    });
    let n = c.namespaces().expect("namespaces");
    let (mut failovers, mut fall_forwards) = (0, 0);
    for cut in 1..=2 {
        let forwarded_before = on_b(|r| r.fall_forwards);
        n.set_link(0, false);
        c.wait_state(1, 0, HostState::Lost, Duration::from_secs(30));
        failovers = failovers.max(on_b(|r| r.failovers));
        n.set_link(0, true);
        c.wait_state(1, 0, HostState::Operational, Duration::from_secs(30));
        let back = Instant::now();
        while on_b(|r| r.fall_forwards) <= forwarded_before {
            assert!(
                back.elapsed() < BOUND,
                "cut {cut}: no connection of wrk's fell forward within {BOUND:?}\na:\n{}\nb:\n{}\nnginx: {}\nwrk: {}\n{}",
                lanes_status(&c, 0),
                lanes_status(&c, 1),
                server.stderr_so_far()
                    + &std::fs::read_to_string(&err_log)
                        .unwrap_or_default()
                        .lines()
                        .filter(|l| l.contains("liblanes_sockets"))
                        .collect::<Vec<_>>()
                        .join("\n"),
                wrk.stderr_so_far(),
                c.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        fall_forwards = fall_forwards.max(on_b(|r| r.fall_forwards));
    }
    let w = wrk.wait(Duration::from_secs(120));
    assert!(w.ok(), "{}", w.describe("wrk"));
    let requests =
        w.stdout.lines().find(|l| l.contains("requests in")).and_then(|l| l.split_whitespace().next()).unwrap_or("0");
    assert!(requests.parse::<u64>().unwrap_or(0) > 0, "{}", w.describe("wrk made no request"));
    for bad in ["Socket errors", "Non-2xx or 3xx responses"] {
        assert!(!w.stdout.contains(bad), "{}", w.describe(&format!("wrk reports {bad}")));
    }
    let got =
        Program::spawn(lanes_run(&c, 1, "curl", &["-fsS", &url("big.bin")]), "curl on b").wait(Duration::from_secs(60));
    assert!(got.ok() && got.stdout_bytes == big, "{}", got.describe("curl of a 4 MiB file"));
    let s = server.stop(libc::SIGQUIT, Duration::from_secs(10));
    assert!(s.ok(), "{}", s.describe("nginx"));
    let log = std::fs::read_to_string(&err_log).unwrap_or_default();
    let serious: Vec<&str> =
        log.lines().filter(|l| ["[alert]", "[emerg]", "[crit]"].iter().any(|s| l.contains(s))).collect();
    assert!(serious.is_empty(), "nginx's error log:\n{}", serious.join("\n"));
    eprintln!("nginx and wrk across two cuts: {requests} requests; fail-overs {failovers}, fall-forwards {fall_forwards} on b");
    assert!(failovers > 0, "no connection of wrk's failed over\n{}", c.logs());
}

// ---------------------------------------------------------------------------------------
// The ring across hosts (stage 3), between processes that use it directly
// ---------------------------------------------------------------------------------------

/// `lanes bench sockets --remote-node 8` on b against `lanes bench --serve` on a: both rows
/// across hosts measured over kernel TCP and through the library, each round, with figures
/// and a ratio in the JSON; first as configured (`auto` on the tcp provider: nothing pairs,
/// nothing goes over the fabric), then with pairing forced on at both ends (the library's
/// connections move bytes over the fabric: the daemons' totals).
#[test]
fn lanes_bench_sockets_across_hosts_reports_both_modes() {
    use lanes_testkit::program::Program;
    if !installed(&["sockperf", "iperf3"]) {
        return;
    }
    let Some(c) = Cluster::netns("xh-bench") else { return };
    if !with_fabric_stream("lanes_bench_sockets_across_hosts_reports_both_modes") {
        return;
    }
    let lanes_in = |k: usize, args: &[&str]| {
        let mut cmd = lanes_cmd(&c, k, args);
        cmd.env("LANES_NODE_ID", lanes_testkit::cluster::NODES[k].to_string());
        cmd
    };
    let port = "15471";
    let mut server = Program::spawn(lanes_in(0, &["bench", "--serve", "--port", port]), "lanes bench --serve");
    let listening = server.stderr_line(Duration::from_secs(30), |l| l.contains("listening on"));
    assert!(listening.is_some(), "lanes bench --serve: {}", server.stderr_so_far());
    let node = lanes_testkit::cluster::NODES[0].to_string();
    for force in [false, true] {
        let mut args = vec!["bench", "sockets", "--remote-node", &node, "--port", port, "--rounds", "2"];
        args.extend(["--seconds", "1", "--json", "-"]);
        if force {
            args.push("--force-remote");
        }
        let client = Program::spawn(lanes_in(1, &args), "lanes bench sockets").wait(Duration::from_secs(240));
        assert!(client.ok(), "{}\n{}", client.describe("lanes bench sockets --remote-node"), c.logs());
        let report: serde_json::Value = serde_json::from_str(&client.stdout).expect("the JSON report");
        for key in ["sockperf-latency", "iperf3"] {
            let row = report["rows"].as_array().into_iter().flatten().find(|r| r["key"] == key);
            let row = row.unwrap_or_else(|| panic!("no {key} row: {}", client.stdout));
            for mode in ["kernel", "lanes"] {
                let v = row["values"][mode].as_f64().unwrap_or(0.0);
                assert!(v > 0.0, "{key}: no {mode} figure: {row}");
                let samples = row["samples"][mode].as_array().map_or(0, Vec::len);
                assert_eq!(samples, 2, "{key}: a {mode} sample per round: {row}");
            }
            assert!(row["ratio"].as_f64().is_some_and(|r| r > 0.0), "{key}: no ratio: {row}");
        }
        assert_eq!(report["detail"]["pairing_forced"], force, "{}", client.stdout);
        wait_for(&c, "every half withdrawn", || {
            daemon_sockets(&c, 0).halves.is_empty() && daemon_sockets(&c, 1).halves.is_empty()
        });
        let fabric = fabric_totals(&c);
        if force {
            assert!(fabric > 0, "forced: the library's connections moved nothing over the fabric\n{}", c.logs());
        } else {
            assert_eq!(fabric, 0, "auto on the tcp provider: nothing pairs\n{}", c.logs());
        }
        eprintln!("{}", client.stderr);
    }
    // (The server serves clients until it is stopped.)
    drop(server.stop(libc::SIGTERM, Duration::from_secs(10)));
}

/// How long a client and a server may take to set their connections up.
const SET_UP: Duration = Duration::from_secs(120);

/// A `fabric-stream` child on host `k`, acting as the host's first node.
fn stream_child(c: &Cluster, k: usize, name: &str) -> Proc {
    let mut env = c.env(k);
    env.push(("LANES_NODE_ID".into(), lanes_testkit::cluster::NODES[k].to_string()));
    let envs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Proc::spawn_in(&c.prefix(k), name, "fabric-stream", &envs)
}

/// A server on a and a client on b with `n` connections between them, each with the ring
/// across hosts when `ring` is not 0 (else plain kernel TCP); None (the reason printed)
/// in a build without the ofi transport.
fn stream_pair(c: &Cluster, n: usize, ring: usize, port: u16) -> Option<(Proc, Proc)> {
    stream_pair_to(c, n, ring, port, &Netns::address(0))
}

/// [`stream_pair`], the client connecting to a's address `server_ip`.
fn stream_pair_to(c: &Cluster, n: usize, ring: usize, port: u16, server_ip: &str) -> Option<(Proc, Proc)> {
    if !lanes::OFI_TRANSPORT {
        assert!(std::env::var_os("CI").is_none(), "the CI builds with --features lanes/ofi");
        eprintln!("skipped: the ring across hosts needs the ofi transport (--features lanes/ofi)");
        return None;
    }
    let mut server = stream_child(c, 0, "stream server on a");
    server.ok(&format!("listen {port}"));
    let mut client = stream_child(c, 1, "stream client on b");
    let accept = format!("accept {n} {ring}");
    server.start(&accept);
    // Each connection's set-up asks both daemons for three grants: generous bounds.
    let connect = format!("connect {n} {server_ip}:{port} {ring}");
    let connected = client.call_within(&connect, SET_UP).unwrap_or_else(|e| panic!("{connect}: {e:?}\n{}", c.logs()));
    let accepted = server.finish_within(&accept, SET_UP).unwrap_or_else(|e| panic!("{accept}: {e:?}\n{}", c.logs()));
    if ring != 0 {
        assert_eq!(field(&connected, "fabric"), n as u64, "client: {connected}\n{}", c.logs());
        assert_eq!(field(&accepted, "fabric"), n as u64, "server: {accepted}\n{}", c.logs());
    }
    Some((server, client))
}

fn field(s: &str, key: &str) -> u64 {
    lanes_testkit::process::field(s, key)
}

/// The text after `key=` in `s`, to the next space.
fn field_text(s: &str, key: &str) -> String {
    let at = s.find(&format!("{key}=")).unwrap_or_else(|| panic!("no {key} in {s}")) + key.len() + 1;
    s[at..].split_whitespace().next().unwrap_or("").to_string()
}

/// Hosts the daemons called Lost so far (their logs).
fn hosts_lost(c: &Cluster) -> usize {
    c.logs().matches("-> lost").count()
}

/// Runs `attempt` (given an attempt number, for fresh ports) until it succeeds; an attempt
/// that fails while a daemon called a host Lost (a machine so loaded that heartbeats
/// stopped for seconds: the fabric's grants are then revoked and, without fail-over, the
/// streams reset, as the fabric-lost test checks) is run again, twice at most. Any other
/// failure fails the test.
fn unless_a_host_was_lost<T>(c: &Cluster, what: &str, mut attempt: impl FnMut(u16) -> Result<T, String>) -> T {
    for n in 0..3u16 {
        let lost_before = hosts_lost(c);
        match attempt(n) {
            Ok(v) => return v,
            Err(e) if hosts_lost(c) > lost_before && n < 2 => {
                eprintln!("{what}: a host was called Lost meanwhile (a loaded machine), again: {e}");
            }
            Err(e) => panic!("{what}: {e}\n{}", c.logs()),
        }
    }
    unreachable!()
}

/// Streams in both directions at once on one connection between a and b, checksummed,
/// through the ring across hosts (tcp;ofi_rxm) and the anchor: every byte arrives, in
/// order; the ring carried bytes both ways (what went into a ring came out of it); a
/// request/response load follows on a fresh connection.
#[test]
fn the_ring_across_hosts_carries_checksummed_streams_both_ways() {
    let Some(c) = Cluster::netns("xh-ring") else { return };
    if !lanes::OFI_TRANSPORT {
        stream_pair(&c, 1, 1 << 20, PORT);
        return;
    }
    const BYTES: u64 = 96 << 20;
    let (on_a, on_b) = unless_a_host_was_lost(&c, "streams both ways", |n| {
        let (mut server, mut client) = stream_pair(&c, 1, 1 << 20, PORT + 2 * n).expect("ofi");
        // Receivers that spin 5 ms before they sleep: the directions still switch, but the
        // ring carries bytes both ways however loaded the machine.
        server.ok("spin 0 5000");
        client.ok("spin 0 5000");
        let cmd = format!("stream 0 server {BYTES}");
        server.start(&cmd);
        let on_b = client.call_within(&format!("stream 0 client {BYTES}"), Duration::from_secs(240));
        let on_a = server.finish_within(&cmd, Duration::from_secs(60));
        match (on_a, on_b) {
            (Ok(a), Ok(b)) => Ok((a, b)),
            (a, b) => Err(format!("server: {a:?}\nclient: {b:?}")),
        }
    });
    eprintln!("a: {on_a}\nb: {on_b}");
    for got in [&on_a, &on_b] {
        assert_eq!(field(got, "received"), BYTES, "{got}");
        assert_eq!(field(got, "sent_fabric") + field(got, "sent_kernel"), BYTES, "{got}");
    }
    assert_eq!(field(&on_a, "sent_fabric"), field(&on_b, "received_fabric"), "a's ring bytes: {on_a} / {on_b}");
    assert_eq!(field(&on_b, "sent_fabric"), field(&on_a, "received_fabric"), "b's ring bytes: {on_a} / {on_b}");
    // Every byte is checked above; which direction gets its ring depends on scheduling (in
    // a CI run one direction's only ring request was refused), so only that the fabric
    // carried some of them is asked.
    assert!(field(&on_a, "sent_fabric") + field(&on_b, "sent_fabric") > 0, "{on_a} / {on_b}");

    let (rr, served) = unless_a_host_was_lost(&c, "request/response", |n| {
        let (mut server, mut client) = stream_pair(&c, 1, 64 << 10, PORT + 10 + 2 * n).expect("ofi");
        server.start("serve 0");
        let rr = client.call_within("requests 0 4000", Duration::from_secs(180));
        let served = server.finish_within("serve 0", Duration::from_secs(60));
        match (rr, served) {
            (Ok(r), Ok(s)) => Ok((r, s)),
            (r, s) => Err(format!("requests: {r:?}\nserve: {s:?}")),
        }
    });
    eprintln!("requests: {rr}\nserved: {served}");
    assert_eq!(field(&rr, "rounds"), 4000, "{rr}");
    assert!(field(&rr, "received_fabric") + field(&served, "received_fabric") > 0, "{rr} / {served}");
}

/// Many connections between a and b at once, each with its ring across hosts, each
/// checksummed both ways. (Each connection to an object of another host holds a session
/// with this host's daemon, which serves 64 at once, and a stream makes three: so 16.)
#[test]
fn many_connections_each_with_a_ring_across_hosts() {
    let Some(c) = Cluster::netns("xh-many") else { return };
    if !lanes::OFI_TRANSPORT {
        stream_pair(&c, 1, 1 << 20, PORT);
        return;
    }
    const N: usize = 16;
    const BYTES: u64 = 2 << 20;
    let (on_a, on_b) = unless_a_host_was_lost(&c, "many connections", |n| {
        let (mut server, mut client) = stream_pair(&c, N, 64 << 10, PORT + 2 * n).expect("ofi");
        server.start(&format!("stream-all server {BYTES}"));
        let on_b = client.call_within(&format!("stream-all client {BYTES}"), Duration::from_secs(240));
        let on_a = server.finish_within("stream-all", Duration::from_secs(60));
        match (on_a, on_b) {
            (Ok(a), Ok(b)) => Ok((a, b)),
            (a, b) => Err(format!("server: {a:?}\nclient: {b:?}")),
        }
    });
    eprintln!("a: {on_a}\nb: {on_b}");
    for got in [&on_a, &on_b] {
        assert_eq!(field(got, "received"), BYTES * N as u64, "{got}");
    }
    // Every byte is checked above; which direction gets its ring depends on scheduling (on
    // a loaded 2-CPU machine one direction's requests were all refused in a CI run), so
    // only that the fabric carried some of them is asked.
    assert!(field(&on_a, "received_fabric") + field(&on_b, "received_fabric") > 0, "{on_a} / {on_b}");
}

/// A peer killed mid-stream (b sends and never reads, so its kernel holds unread bytes of
/// a's and resets the connection): a reads what landed, then ECONNRESET, never a clean
/// end; its next send fails. The same scenario on plain kernel TCP gives the same.
#[test]
fn a_peer_killed_mid_stream_is_a_reset_as_on_kernel_tcp() {
    let Some(c) = Cluster::netns("xh-kill") else { return };
    let mut outcomes = Vec::new();
    for (ring, port) in [(0usize, PORT), (1 << 20, PORT + 1)] {
        let Some((mut server, mut client)) = stream_pair(&c, 1, ring, port) else { return };
        if ring != 0 {
            server.ok("spin 0 5000");
        }
        client.start("flood 0");
        server.start("drain 0");
        std::thread::sleep(Duration::from_millis(1500));
        client.kill9();
        let got = server.finish_within("drain 0", Duration::from_secs(60)).unwrap_or_else(|e| panic!("{e:?}"));
        eprintln!("ring {ring}: {got}");
        assert!(field(&got, "received") > 0, "{got}");
        // Whether the ring carried some of b's bytes before the kill depends on scheduling
        // (in a CI run its one ring request was still pending when b died): what is asked is
        // that the killed peer reads as a reset, with the ring or without it.
        if ring != 0 && field(&got, "received_fabric") == 0 {
            eprintln!("ring {ring}: the ring carried none of b's bytes before the kill this time");
        }
        assert!(got.contains("recv=ECONNRESET"), "ring {ring}: {got}");
        assert!(got.contains("send=EPIPE") || got.contains("send=ECONNRESET"), "ring {ring}: {got}");
        outcomes.push(got);
        server.exit();
    }
    let errors = |s: &str| -> String {
        s.split_whitespace().filter(|w| w.starts_with("recv=") || w.starts_with("send=")).collect::<Vec<_>>().join(" ")
    };
    assert_eq!(errors(&outcomes[0]), errors(&outcomes[1]), "as kernel TCP: {outcomes:?}");
}

/// The fabric to b lost mid-stream, both ways at once (b's daemon killed: a's daemon
/// calls b Lost and cuts b's fabric connections, while the connection's kernel socket
/// stands): both directions fail over to the kernel connection and go on, and every
/// byte arrives, in order, once, on both ends.
#[test]
fn a_fabric_lost_mid_stream_fails_over_and_every_byte_arrives() {
    let Some(mut c) = Cluster::netns("xh-lost") else { return };
    let Some((mut server, mut client)) = stream_pair(&c, 1, 1 << 20, PORT) else { return };
    const BYTES: u64 = 256 << 20;
    let cmd = format!("stream 0 server {BYTES}");
    server.start(&cmd);
    client.start(&format!("stream 0 client {BYTES}"));
    std::thread::sleep(Duration::from_millis(1500));
    c.daemon(1).kill9();
    let on_b = client.finish_within("stream", Duration::from_secs(120));
    let on_a = server.finish_within("stream", Duration::from_secs(60));
    eprintln!("a: {on_a:?}\nb: {on_b:?}");
    for got in [&on_a, &on_b] {
        let text = got.as_ref().unwrap_or_else(|e| panic!("{e:?}\n{}", c.logs()));
        assert_eq!(field(text, "received"), BYTES, "{text}");
    }
    let failovers = field(on_a.as_ref().unwrap(), "failovers");
    assert!(failovers > 0, "a's end saw b lost and failed over: {on_a:?}\n{}", c.logs());
    c.start_daemon(1);
}

/// Hosts with two links: the fabric's (lanes.toml's addresses, which the provider and the
/// daemons use) and an "Ethernet" the connection runs over. a's fabric link is cut for
/// 4 s mid-stream (256 MiB both ways), then restored: the daemons call each other Lost,
/// both directions fail over to the kernel connection, and every byte arrives, in order,
/// once, on both ends.
#[test]
fn a_fabric_link_cut_mid_stream_fails_over_and_every_byte_arrives() {
    let Some(c) = Cluster::netns_with_ethernet("xh-cut") else { return };
    let ethernet = Netns::ethernet_address(0);
    let Some((mut server, mut client)) = stream_pair_to(&c, 1, 1 << 20, PORT + 70, &ethernet) else { return };
    const BYTES: u64 = 256 << 20;
    server.start(&format!("stream 0 server {BYTES}"));
    client.start(&format!("stream 0 client {BYTES}"));
    std::thread::sleep(Duration::from_millis(1000));
    let n = c.namespaces().expect("namespaces");
    n.set_link(0, false);
    std::thread::sleep(Duration::from_secs(4));
    n.set_link(0, true);
    let on_b = client.finish_within("stream", Duration::from_secs(180));
    let on_a = server.finish_within("stream", Duration::from_secs(60));
    eprintln!("a: {on_a:?}\nb: {on_b:?}");
    let mut failovers = 0;
    for got in [&on_a, &on_b] {
        let text = got.as_ref().unwrap_or_else(|e| panic!("{e:?}\n{}", c.logs()));
        assert_eq!(field(text, "received"), BYTES, "{text}");
        failovers += field(text, "failovers");
    }
    assert!(failovers > 0, "the cut made the stream fail over: {on_a:?} {on_b:?}\n{}", c.logs());
}

/// A connection opened over the second link while a's fabric link is down runs on kernel
/// TCP meanwhile; once the link is back its halves pair through the daemons, and its bytes
/// move over the fabric (every byte of a checksummed exchange comes back).
#[test]
fn a_connection_opened_while_the_fabric_is_down_uses_it_once_it_returns() {
    use lanes::cluster::proto::HostState;
    let Some(c) = Cluster::netns_with_ethernet("xh-opened-down") else { return };
    if !with_fabric_stream("a_connection_opened_while_the_fabric_is_down_uses_it_once_it_returns") {
        return;
    }
    let n = c.namespaces().expect("namespaces");
    let port = PORT + 80;
    let server_at = format!("{}:{port}", Netns::ethernet_address(0));
    let mut server = sockets_child(&c, Some(0), Some("on"), "echo on a");
    server.ok(&format!("listen {port} echo"));
    n.set_link(0, false);
    c.wait_state(1, 0, HostState::Lost, Duration::from_secs(30));
    let mut client = sockets_child(&c, Some(1), Some("on"), "client on b");
    let client_addr = client.ok(&format!("connect 1 {server_at}")).trim_start_matches("local=").to_string();
    assert_eq!(client.ok("exchange 1 1048576"), "bytes=1048576", "over the kernel during the cut");
    n.set_link(0, true);
    c.wait_state(1, 0, HostState::Operational, Duration::from_secs(30));
    wait_paired(&c, (1, &client_addr), (0, &server_at));
    make_live(&c, &mut client, &server_at).unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    let got = client.call_within("exchange 1 16777216", Duration::from_secs(300)).expect("the exchange");
    assert_eq!(got, "bytes=16777216");
    let (sent, received) = fabric_bytes(&c, 1, &server_at);
    assert!(sent + received > 0, "no byte over the fabric after the link came back\n{}", c.logs());
}

/// What a child said on its standard error so far (its notices), without its replies.
fn stderr_of(p: &Proc) -> String {
    p.output_snapshot().lines().filter(|l| l.starts_with("[stderr]")).collect::<Vec<_>>().join("\n")
}

/// A stream whose start fails (as when the fabric to the peer's host is cut between the
/// pairing and the start; here the server's library fails its first `failing` starts on
/// purpose) is set up again with new objects at both ends, the client's stream, if it
/// started, failing over when the server's objects go; bytes then move over the fabric.
/// Past eight failures in a row the connection stays kernel TCP for good, with the reason
/// given. Either way a checksummed exchange comes back whole.
fn stream_set_up_again_after_failed_starts(test: &str, failing: u32, port: u16) {
    let Some(c) = Cluster::netns(test) else { return };
    if !with_fabric_stream(test) {
        return;
    }
    let server_at = format!("{}:{port}", Netns::address(0));
    let fail = failing.to_string();
    let extra = [("LANES_SOCKETS_FAIL_SET_UPS", fail.as_str())];
    let mut server = sockets_child_with(&c, Some(0), Some("on"), "server on a", &extra);
    server.ok(&format!("listen {port} echo"));
    let mut client = sockets_child(&c, Some(1), Some("on"), "client on b");
    let client_at = client.ok(&format!("connect 1 {server_at}")).trim_start_matches("local=").to_string();
    wait_paired(&c, (1, &client_at), (0, &server_at));
    let moved = |k: usize, remote: &str| {
        let (sent, received) = fabric_bytes(&c, k, remote);
        sent + received
    };
    let given_up = || reason_count(&c, 0, server.pid(), Reason::RemoteNoStream) > 0;
    let started = Instant::now();
    while moved(0, &client_at) == 0 || moved(1, &server_at) == 0 {
        if failing >= 8 && given_up() {
            break;
        }
        assert!(
            started.elapsed() < BOUND,
            "no byte over the fabric within {BOUND:?}\na: {:?}\nb: {:?}\nserver: {}\nclient: {}\n{}",
            connection_to(&c, 0, &client_at),
            connection_to(&c, 1, &server_at),
            stderr_of(&server),
            stderr_of(&client),
            c.logs()
        );
        client.call_within("ping 1 50 64 0", Duration::from_secs(60)).expect("round trips");
    }
    assert_eq!(client.ok("exchange 1 1048576"), "bytes=1048576");
    let a = connection_to(&c, 0, &client_at);
    let pairing = a.cross_host.as_ref().expect("a cross-host record");
    eprintln!(
        "{failing} starts failing on a: generation {}, fabric bytes a {:?} b {:?}, b's fail-overs {} and fall-forwards {}",
        pairing.generation,
        fabric_bytes(&c, 0, &client_at),
        fabric_bytes(&c, 1, &server_at),
        connection_to(&c, 1, &server_at).failovers,
        connection_to(&c, 1, &server_at).fall_forwards
    );
    if failing >= 8 {
        assert!(given_up(), "a: {a:?}\nserver: {}", stderr_of(&server));
        let (before, _) = fabric_bytes(&c, 0, &client_at);
        assert_eq!(client.ok("exchange 1 65536"), "bytes=65536");
        assert_eq!(fabric_bytes(&c, 0, &client_at).0, before, "a connection given up sent over the fabric");
    } else {
        assert_eq!(reason_count(&c, 0, server.pid(), Reason::RemoteNoStream), 0, "{}", stderr_of(&server));
        // Each failed start renewed the pairing.
        assert!(pairing.generation > u64::from(failing), "a: {a:?}");
    }
}

#[test]
fn a_stream_whose_start_failed_is_set_up_again() {
    stream_set_up_again_after_failed_starts("xh-start-failed", 1, PORT + 130);
}

#[test]
fn a_stream_whose_starts_keep_failing_leaves_the_connection_kernel_tcp() {
    stream_set_up_again_after_failed_starts("xh-starts-failing", 100, PORT + 131);
}

/// Fall-forward: a connection live over the fabric, whose fabric link is cut mid-exchange,
/// fails over (every byte of a checksummed exchange during the cut comes back through the
/// kernel connection); once the link is back, both ends replace their failed-over stream
/// with a new one (new objects, paired again at a new generation), and the connection's
/// bytes move over the fabric again (round trips), then a checksummed exchange on the new
/// stream, with the records' and `lanes status`'s fall-forward counts. Three cuts in a row,
/// the last one short (the host suspected, not lost).
#[test]
fn a_connection_falls_forward_to_the_fabric_once_its_link_is_back() {
    use lanes::cluster::proto::HostState;
    let Some(c) = Cluster::netns_with_ethernet("xh-fall-forward") else { return };
    if !with_fabric_stream("a_connection_falls_forward_to_the_fabric_once_its_link_is_back") {
        return;
    }
    let n = c.namespaces().expect("namespaces");
    let (server, mut client, server_at, client_at) =
        live_echo_pair(&c, &Netns::ethernet_address(0), PORT + 90, 4 << 20)
            .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    let first = wait_paired(&c, (1, &client_at), (0, &server_at));
    let record = |k: usize, remote: &str| connection_to(&c, k, remote);
    let (sent, received) = fabric_bytes(&c, 1, &server_at);
    assert!(sent + received > 0, "no byte over the fabric before the cut\n{}", c.logs());

    // Three cuts: the stream that replaced one fails over and is replaced in turn. The
    // first two last until b's daemon calls a Lost; the third ends as soon as b's stream
    // failed over (a's host only suspected, as a short outage leaves it).
    let mut generation = first;
    for cut in 1..=3u64 {
        // (The records count directions that failed over: two per stream.)
        let failed_before = record(1, &server_at).failovers;
        n.set_link(0, false);
        if cut < 3 {
            let during = client.call_within("exchange 1 4194304", Duration::from_secs(300)).expect("the exchange");
            assert_eq!(during, "bytes=4194304", "cut {cut}: every byte through the kernel connection");
            c.wait_state(1, 0, HostState::Lost, Duration::from_secs(30));
            // (An exchange the kernel carried may end before the fabric is even suspected,
            // and a record's counts are written at the connection's calls.)
            client.call_within("ping 1 10 64 0", Duration::from_secs(60)).expect("round trips");
            let failed = record(1, &server_at).failovers > failed_before;
            assert!(failed, "cut {cut}: b's stream failed over\n{}", c.logs());
        } else {
            // An idle stream fails over at the suspicion, and its record says so at once.
            c.wait_state(1, 0, HostState::Suspect, Duration::from_secs(30));
            wait_for(&c, "b's idle stream failed over, in its record", || {
                record(1, &server_at).failovers > failed_before
            });
        }
        n.set_link(0, true);
        c.wait_state(1, 0, HostState::Operational, Duration::from_secs(30));
        // Round trips until b runs a new stream that moved bytes over the fabric.
        let (took, pings) = wait_fall_forward(&c, (&mut client, &client_at), (&server, &server_at), cut);
        assert!(record(1, &server_at).failovers > failed_before, "cut {cut}: b's stream failed over");
        let again = wait_paired(&c, (1, &client_at), (0, &server_at));
        assert!(again > generation, "cut {cut}: paired again at a new generation: {generation} then {again}");
        generation = again;
        // Every byte of an exchange both ways on the new stream (whether its receivers take
        // the ring meanwhile is the stream's choice: the round trips above moved bytes over
        // the fabric).
        assert_eq!(client.ok("exchange 1 16777216"), "bytes=16777216");
        assert!(record(0, &client_at).fall_forwards >= cut, "cut {cut}: a's end fell forward too\n{}", c.logs());
        eprintln!(
            "cut {cut}: over the fabric again {took:?} after the link's return ({pings} round trips), generation \
             {generation}"
        );
    }
    let status = lanes_status(&c, 1);
    assert!(status.contains("fall-forwards"), "{status}");
}

/// The whole host cut off: a's fabric link and its Ethernet both down in the middle of a
/// checksummed exchange through the library (64 MiB both ways), until b's daemon calls a
/// Lost, then both back. The kernel connection's retransmissions carry the exchange over
/// the gap, as they would carry kernel TCP alone; the stream fails over, every byte
/// arrives once and in order, and once the fabric is back the connection falls forward.
#[test]
fn a_host_cut_off_entirely_mid_exchange_loses_nothing_and_falls_forward() {
    use lanes::cluster::proto::HostState;
    let Some(c) = Cluster::netns_with_ethernet("xh-host-cut") else { return };
    if !with_fabric_stream("a_host_cut_off_entirely_mid_exchange_loses_nothing_and_falls_forward") {
        return;
    }
    let n = c.namespaces().expect("namespaces");
    let (server, mut client, server_at, client_at) =
        live_echo_pair(&c, &Netns::ethernet_address(0), PORT + 95, 4 << 20)
            .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    let failed_before = connection_to(&c, 1, &server_at).failovers;

    client.start("exchange 1 67108864");
    std::thread::sleep(Duration::from_millis(200));
    assert!(!client.output_snapshot().contains("bytes=67108864"), "the exchange is under way at the cut");
    for dev in ["eth0", "eth1"] {
        n.set_device(0, dev, false);
    }
    c.wait_state(1, 0, HostState::Lost, Duration::from_secs(30));
    for dev in ["eth1", "eth0"] {
        n.set_device(0, dev, true);
    }
    let got = client
        .finish_within("exchange 1 67108864", Duration::from_secs(300))
        .unwrap_or_else(|e| panic!("the exchange across the gap: {e:?}\n{}", c.logs()));
    assert_eq!(got, "bytes=67108864", "every byte, once, in order, across the gap");

    c.wait_state(1, 0, HostState::Operational, Duration::from_secs(30));
    let (took, _) = wait_fall_forward(&c, (&mut client, &client_at), (&server, &server_at), 1);
    assert!(connection_to(&c, 1, &server_at).failovers > failed_before, "b's stream failed over\n{}", c.logs());
    assert_eq!(client.ok("exchange 1 16777216"), "bytes=16777216", "and on, over the new stream");
    eprintln!("over the fabric again {took:?} after the host's return");
}

/// Round trips of small messages on one connection between a and b (request/response: the
/// receiver's sleep costs a request and its answer over the fabric, the design's open
/// question), through the ring across hosts and over plain kernel TCP, in alternating
/// rounds; prints the figures (no assertion on them). Run by hand:
/// `cargo test --release -p lanes-sockets --features lanes/ofi --test cross_host -- --ignored --nocapture round_trips`.
#[test]
#[ignore = "a benchmark: prints figures"]
fn round_trips_over_the_ring_across_hosts_against_kernel_tcp() {
    let Some(c) = Cluster::netns("xh-rtt") else { return };
    const ROUNDS: usize = 3;
    const TRIPS: u64 = 5000;
    const LABELS: [&str; 3] = ["kernel TCP", "ring across hosts", "ring, receivers spin 1 s"];
    let mut times: [Vec<f64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for size in [64u64, 4096] {
        for t in times.iter_mut() {
            t.clear();
        }
        for round in 0..ROUNDS * 3 {
            let which = round % 3;
            let ring = if which == 0 { 0 } else { 1 << 20 };
            let port = PORT + 40 + round as u16 + 20 * (size == 4096) as u16;
            let Some((mut server, mut client)) = stream_pair(&c, 1, ring, port) else { return };
            if which == 2 {
                server.ok("spin 0 1000000");
                client.ok("spin 0 1000000");
            }
            server.start("echo 0");
            let got = client.call_within(&format!("ping 0 {TRIPS} {size}"), Duration::from_secs(300)).unwrap();
            server.finish_within("echo 0", Duration::from_secs(60)).unwrap();
            let us = field(&got, "round_trip_ns") as f64 / 1000.0;
            eprintln!("{size} B, round {round}: {} {us:.1} us ({got})", LABELS[which]);
            times[which].push(us);
            client.exit();
            server.exit();
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        let kernel = median(&mut times[0]);
        println!("round trips of {size} B between a and b, {TRIPS} per round, {ROUNDS} rounds each (medians):");
        for (i, label) in LABELS.iter().enumerate() {
            let m = median(&mut times[i]);
            println!("  {label:26} {m:8.1} us   ratio to kernel {:.2}", m / kernel);
        }
    }
}

/// The sockconf transcript suite (tests/sockconf, conformance.rs) across two hosts: every
/// case that runs as two programs but stream-4g, its server on a (listening on a's addresses) and its
/// client on b, first without the library (the reference), then with it on both sides
/// (`remote = "on"`, daemons running: the connections pair and get their fabric streams):
/// every transcript must equal the reference, byte for byte, and the suite's connections
/// must have moved bytes over the fabric (the daemons' totals of the withdrawn halves).
#[test]
fn the_sockconf_transcripts_across_two_hosts_equal_kernel_tcp() {
    let Some(c) = Cluster::netns_with_ipv6("xh-sockconf") else { return };
    let dir = lanes_testkit::TestDir::new("xh-sockconf");
    let bin = dir.path("sockconf");
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sockconf");
    let mut sources: Vec<_> = std::fs::read_dir(&fixtures)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "c") && !p.ends_with("forkserve.c"))
        .collect();
    sources.sort();
    let o = std::process::Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-pthread"])
        .args(&sources)
        .arg("-o")
        .arg(&bin)
        .output()
        .expect("cc (scripts/test.sh installs gcc)");
    assert!(o.status.success(), "cc: {}", String::from_utf8_lossy(&o.stderr));
    let listed = std::process::Command::new(&bin).arg("--list").output().unwrap();
    // stream-4g is left to the one-host suite: 4 GiB through the hosts' link takes seconds
    // per run, too close to sockconf's own watchdog on a loaded machine.
    let cases: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .filter(|l| l.split('\t').nth(1) == Some("split"))
        .map(|l| l.split('\t').next().unwrap().to_string())
        .filter(|case| case != "stream-4g")
        .collect();
    assert!(cases.len() > 20, "{cases:?}");
    // SOCKCONF_ONLY=a,b runs only those cases (when looking into one).
    let only = std::env::var("SOCKCONF_ONLY").ok();
    let cases: Vec<String> =
        cases.into_iter().filter(|case| only.as_ref().is_none_or(|o| o.split(',').any(|w| w == case))).collect();
    // What the workers need of the cluster (which itself stays on this thread).
    let prefixes = [c.prefix(0), c.prefix(1)];
    let envs = [c.env(0), c.env(1)];
    let run = |case: &str, port: u16, with_library: bool, seq: usize| -> (String, Option<String>) {
        let tmp = dir.sub(&format!("run-{seq}"));
        let side = |k: usize, role: &str| {
            let prefix = &prefixes[k];
            let mut cmd = std::process::Command::new(&prefix[0]);
            cmd.args(&prefix[1..]).arg(&bin).args([case, "--role", role, "--port", &port.to_string()]);
            cmd.args(["--host4", &Netns::address(0), "--host6", &Netns::address6(0)]);
            for v in support::SCRUBBED.iter().chain(lanes_testkit::LANES_ENV) {
                cmd.env_remove(v);
            }
            cmd.envs(envs[k].iter().cloned()).env("TMPDIR", &tmp);
            if with_library {
                cmd.env("LD_PRELOAD", support::library()).env("LANES_SOCKETS_REMOTE", "on");
            }
            lanes_testkit::program::Program::spawn(cmd, &format!("{case} {role}"))
        };
        let server = side(0, "server");
        let client = side(1, "client");
        let cl = client.wait(Duration::from_secs(60));
        let sv = server.wait(Duration::from_secs(60));
        let trouble = (!cl.ok() || !sv.ok()).then(|| format!("{}{}", sv.describe("server"), cl.describe("client")));
        let _ = std::fs::remove_dir_all(&tmp);
        (format!("{}{}", sv.stdout, cl.stdout), trouble)
    };
    let jobs: Vec<(usize, String)> = cases.iter().cloned().enumerate().collect();
    let queue = Mutex::new(jobs);
    let failures = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| loop {
                let Some((i, case)) = queue.lock().unwrap().pop() else { break };
                let port = 20000 + 2 * i as u16;
                let (reference, t) = run(&case, port, false, 2 * i);
                let bad = ["TIMEOUT", "FATAL", "MISMATCH"].iter().find(|w| reference.contains(*w));
                if t.is_some() || bad.is_some() {
                    failures.lock().unwrap().push(format!("{case}: the reference run failed: {t:?}\n{reference}"));
                    continue;
                }
                let (got, t) = run(&case, port + 1, true, 2 * i + 1);
                if got != reference || t.is_some() {
                    let d = support::diff(&reference, &got, 40);
                    failures.lock().unwrap().push(format!("{case} (library on both hosts): {t:?}\n{d}"));
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases.len(), failures.join("\n"));
    if lanes::OFI_TRANSPORT {
        wait_for(&c, "every half withdrawn", || {
            daemon_sockets(&c, 0).halves.is_empty() && daemon_sockets(&c, 1).halves.is_empty()
        });
        let fabric = fabric_totals(&c);
        eprintln!("the suite's connections moved {fabric} bytes over the fabric (sent + received, both hosts)");
        assert!(fabric > 0 || only.is_some(), "no byte of the suite went over the fabric\n{}", c.logs());
    }
}

/// Throughput of one connection between a and b, a to b, through the ring across hosts
/// (tcp;ofi_rxm) against plain kernel TCP on the same link, in alternating rounds: the
/// stream as it is (a receiver that finds its ring empty for 100 us sleeps in the kernel),
/// and with a receive spin of a second (it stays on the ring); prints the figures and their
/// ratios (no assertion on them). Run by hand:
/// `cargo test --release -p lanes-sockets --features lanes/ofi --test cross_host -- --ignored --nocapture throughput`.
#[test]
#[ignore = "a benchmark: prints figures"]
fn throughput_of_the_ring_across_hosts_against_kernel_tcp() {
    let Some(c) = Cluster::netns("xh-bench") else { return };
    const BYTES: u64 = 256 << 20;
    const ROUNDS: usize = 3;
    const LABELS: [&str; 3] = ["kernel TCP", "ring across hosts", "ring, receiver spins 1 s"];
    let mut rates: [Vec<f64>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for round in 0..ROUNDS * 3 {
        let which = round % 3;
        let ring = if which == 0 { 0 } else { 1 << 20 };
        let port = PORT + 10 + round as u16;
        let Some((mut server, mut client)) = stream_pair(&c, 1, ring, port) else { return };
        if which == 2 {
            server.ok("spin 0 1000000");
        }
        server.start("sink 0");
        let t = Instant::now();
        let sent = client.call_within(&format!("source 0 {BYTES}"), Duration::from_secs(300)).unwrap();
        let got = server.finish_within("sink 0", Duration::from_secs(60)).unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(field(&got, "received"), BYTES, "{got}");
        let mbs = BYTES as f64 / secs / 1e6;
        eprintln!("round {round}: {} {mbs:.0} MB/s ({sent})", LABELS[which]);
        rates[which].push(mbs);
        client.exit();
        server.exit();
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    let kernel = median(&mut rates[0]);
    println!("one connection a -> b, {} MiB per round, {ROUNDS} rounds each, alternating (medians):", BYTES >> 20);
    for (i, label) in LABELS.iter().enumerate() {
        let m = median(&mut rates[i]);
        println!("  {label:26} {m:8.0} MB/s   ratio to kernel {:.2}", m / kernel);
    }
}

/// Programs' connections through the library between a and b (remote on, paired, fabric
/// streams) against the same programs on kernel TCP (no library), in alternating rounds:
/// an echoed stream (BYTES out and back, both directions at once) and round trips of 64 B
/// (back to back, and with a 100 us pause before each, as sockconf's pingpong-slow);
/// prints medians and their ratios (no assertion on them). Run by hand:
/// `cargo test --release -p lanes-sockets --features lanes/ofi --test cross_host -- --ignored --nocapture through_the_library`.
#[test]
#[ignore = "a benchmark: prints figures"]
fn through_the_library_against_kernel_tcp() {
    let Some(c) = Cluster::netns("xh-lib-bench") else { return };
    if !with_fabric_stream("through_the_library_against_kernel_tcp") {
        return;
    }
    const BYTES: u64 = 128 << 20;
    const ROUNDS: usize = 3;
    const TRIPS: u64 = 2000;
    let tests: [(&str, String); 3] = [
        ("echoed stream, MB/s each way", format!("exchange 1 {BYTES}")),
        ("64 B round trips, us", format!("ping 1 {TRIPS} 64 0")),
        ("64 B round trips after 100 us, us", format!("ping 1 {TRIPS} 64 100")),
    ];
    let mut results: Vec<[Vec<f64>; 2]> =
        vec![[Vec::new(), Vec::new()], [Vec::new(), Vec::new()], [Vec::new(), Vec::new()]];
    let mut fabric = 0u64;
    for round in 0..ROUNDS * 2 {
        let with_library = round % 2 == 1;
        let port = PORT + 100 + round as u16;
        let remote = with_library.then_some("on");
        let mut server = sockets_child(&c, Some(0), remote, "server on a");
        server.ok(&format!("listen {port} echo"));
        let mut client = sockets_child(&c, Some(1), remote, "client on b");
        let addr = format!("{}:{port}", Netns::address(0));
        let client_addr = client.ok(&format!("connect 1 {addr}")).trim_start_matches("local=").to_string();
        if with_library {
            wait_paired(&c, (1, &client_addr), (0, &addr));
            // The stream is set up by the first calls after the pairing.
            assert_eq!(client.ok("exchange 1 65536"), "bytes=65536");
        }
        for (i, (label, cmd)) in tests.iter().enumerate() {
            let t = Instant::now();
            let got = client
                .call_within(cmd, Duration::from_secs(600))
                .unwrap_or_else(|e| panic!("{cmd}: {e:?}\n{}\n{}", server.output_snapshot(), c.logs()));
            let figure = if i == 0 {
                BYTES as f64 / t.elapsed().as_secs_f64() / 1e6
            } else {
                field(&got, "round_trip_ns") as f64 / 1000.0
            };
            eprintln!("round {round}, library {with_library}: {label} {figure:.1}");
            results[i][with_library as usize].push(figure);
        }
        if with_library {
            let (s, r) = fabric_bytes(&c, 1, &addr);
            fabric += s + r;
        }
        client.exit();
        server.exit();
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    println!("a and b, {ROUNDS} rounds each, alternating, medians (kernel TCP / library with fabric streams):");
    for (i, (label, _)) in tests.iter().enumerate() {
        let k = median(&mut results[i][0]);
        let l = median(&mut results[i][1]);
        println!("  {label:36} kernel {k:10.1}   library {l:10.1}   ratio {:.2}", l / k);
    }
    println!("  bytes over the fabric in the library's rounds (client's record): {fabric}");
}

/// A fork-per-connection server across hosts (Python's `socketserver.ForkingTCPServer`: the
/// parent accepts, forks and closes its copy; the child serves the connection and leaves
/// with `os._exit` at its end, without closing it, as many such servers' children do): every byte of each connection's exchanges comes
/// back, and no record of a finished connection stays behind on either host (the server
/// host's daemon removes the records of halves whose socket is gone once no live process
/// holds them: before, one file per connection stayed for good).
#[test]
fn a_fork_per_connection_server_across_hosts_leaves_no_records_behind() {
    use lanes_testkit::program::Program;
    let Some(c) = Cluster::netns("xh-fork-server") else { return };
    let port = PORT + 97;
    let script = format!(
        "import os, socketserver\n\
         class Echo(socketserver.BaseRequestHandler):\n    \
             def handle(self):\n        \
                 while True:\n            \
                     d = self.request.recv(65536)\n            \
                     if not d:\n                \
                         os._exit(0)\n            \
                     self.request.sendall(d)\n\
         socketserver.ForkingTCPServer.allow_reuse_address = True\n\
         print('listening', flush=True)\n\
         socketserver.ForkingTCPServer(('0.0.0.0', {port}), Echo).serve_forever()\n"
    );
    let mut server = Program::spawn(lanes_run(&c, 0, "/usr/bin/python3", &["-c", &script]), "forking server on a");
    let ready = server.stdout_line(Duration::from_secs(30), |l| l.contains("listening"));
    assert!(ready.is_some(), "the forking server never listened: {}", server.stdout_so_far());
    let server_at = format!("{}:{port}", Netns::address(0));
    let cross_host_records =
        |k: usize| list_connections(&c.fabric(k)).into_iter().filter(|r| r.cross_host.is_some()).count();
    for round in 0..3 {
        let mut client = sockets_child(&c, Some(1), Some("on"), "client on b");
        client.ok(&format!("connect 1 {server_at}"));
        for _ in 0..3 {
            let got = client.call_within("exchange 1 1048576", Duration::from_secs(60));
            assert_eq!(got.map_err(|e| format!("{e:?}")).as_deref(), Ok("bytes=1048576"), "round {round}");
        }
        client.ok("close 1");
        client.exit();
        let started = Instant::now();
        while cross_host_records(0) + cross_host_records(1) > 0 {
            assert!(
                started.elapsed() < BOUND,
                "round {round}: records of the finished connection stayed\na: {:?}\nb: {:?}\n{}",
                list_connections(&c.fabric(0)),
                list_connections(&c.fabric(1)),
                c.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    drop(server);
}
