//! The multicast fan-out row: one sender (this executable, `--mcast-sender`) sends 64-byte
//! datagrams carrying their send time to an IPv4 group every 200 us; four receivers (this
//! executable, `--mcast-receiver`, each its own process, all members of the group on one
//! port) take them with blocking receives and note each one's delivery latency (receive
//! time minus send time, both `CLOCK_MONOTONIC` of this host) and every sequence number
//! seen twice or never. The row's figure is the receivers' average latency; duplicates and
//! losses are in its details (a duplicate fails the row).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use crate::bench::sockets::procs::{run_client, Launch, Server};
use crate::bench::sockets::servers::{Params, Sample};

/// The group (administratively scoped, TTL 0: nothing leaves the host).
const GROUP: Ipv4Addr = Ipv4Addr::new(239, 255, 90, 1);
/// Receivers per measurement.
pub(crate) const RECEIVERS: usize = 4;
/// Time between two datagrams.
const INTERVAL: Duration = Duration::from_micros(200);
/// The sequence number of the end marker.
const END: u64 = u64::MAX;
/// Datagram size.
const BYTES: usize = 64;

fn now_ns() -> u64 {
    // SAFETY: all-zero is a valid timespec.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: ts is valid for writes.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn check(r: libc::c_int, what: &str) -> Result<(), String> {
    if r < 0 {
        return Err(format!("{what}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn int_option(
    fd: libc::c_int,
    level: libc::c_int,
    name: libc::c_int,
    v: libc::c_int,
    what: &str,
) -> Result<(), String> {
    // SAFETY: v is an int, as the option takes.
    let r = unsafe { libc::setsockopt(fd, level, name, (&v as *const libc::c_int).cast(), 4) };
    check(r, what)
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
        sin_zero: [0; 8],
    }
}

/// An IPv4 UDP socket, closed when dropped.
struct Socket(libc::c_int);

impl Socket {
    fn new() -> Result<Socket, String> {
        // SAFETY: plain socket creation.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        check(fd, "socket")?;
        Ok(Socket(fd))
    }
}

impl Drop for Socket {
    fn drop(&mut self) {
        // SAFETY: the descriptor is ours.
        unsafe { libc::close(self.0) };
    }
}

/// `--mcast-receiver PORT` (internal): joins the group on `port`, prints `ready`, and
/// receives until the end marker; prints its counts and latencies.
pub(crate) fn receive(port: u16) -> Result<(), String> {
    let s = Socket::new()?;
    int_option(s.0, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1, "SO_REUSEADDR")?;
    let at = sockaddr(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port));
    // SAFETY: at is a sockaddr_in of the size given.
    check(unsafe { libc::bind(s.0, (&at as *const libc::sockaddr_in).cast(), 16) }, "bind")?;
    let mreq = libc::ip_mreq {
        imr_multiaddr: libc::in_addr { s_addr: u32::from(GROUP).to_be() },
        imr_interface: libc::in_addr { s_addr: 0 },
    };
    // SAFETY: mreq is an ip_mreq of the size given.
    let r = unsafe {
        libc::setsockopt(s.0, libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, (&mreq as *const libc::ip_mreq).cast(), 8)
    };
    check(r, "IP_ADD_MEMBERSHIP")?;
    // A liveness bound, not a measurement: a sender that died ends the receiver too.
    let limit = libc::timeval { tv_sec: 30, tv_usec: 0 };
    // SAFETY: limit is a timeval of the size given.
    let r = unsafe {
        libc::setsockopt(
            s.0,
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&limit as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    check(r, "SO_RCVTIMEO")?;
    println!("ready");
    let mut seen: Vec<bool> = Vec::new();
    let (mut duplicates, mut received) = (0u64, 0u64);
    let mut latencies: Vec<u64> = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        // SAFETY: buf is writable for its length.
        let n = unsafe { libc::recv(s.0, buf.as_mut_ptr().cast(), buf.len(), 0) };
        let at = now_ns();
        if n < 0 {
            return Err(format!("recv: {}", std::io::Error::last_os_error()));
        }
        if (n as usize) < 16 {
            return Err(format!("a datagram of {n} bytes"));
        }
        let seq = u64::from_le_bytes(buf[0..8].try_into().expect("8 bytes"));
        if seq == END {
            break;
        }
        let sent = u64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
        let i = seq as usize;
        if i >= seen.len() {
            seen.resize(i + 1, false);
        }
        if seen[i] {
            duplicates += 1;
            continue;
        }
        seen[i] = true;
        received += 1;
        latencies.push(at.saturating_sub(sent));
    }
    latencies.sort_unstable();
    let pick = |q: f64| latencies.get(((latencies.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0);
    let avg = latencies.iter().sum::<u64>() as f64 / latencies.len().max(1) as f64;
    println!("received {received} duplicates {duplicates} avg_ns {avg:.0} p50_ns {} p99_ns {}", pick(0.5), pick(0.99));
    Ok(())
}

/// `--mcast-sender PORT` (internal): sends to the group for `seconds`, then the end marker;
/// prints how many it sent.
pub(crate) fn send(port: u16, seconds: u64) -> Result<(), String> {
    let s = Socket::new()?;
    int_option(s.0, libc::IPPROTO_IP, libc::IP_MULTICAST_TTL, 0, "IP_MULTICAST_TTL")?;
    let to = sockaddr(SocketAddrV4::new(GROUP, port));
    let mut buf = [0u8; BYTES];
    let send = |buf: &[u8]| -> Result<(), String> {
        // SAFETY: buf and to are valid for the sizes given.
        let r = unsafe {
            libc::sendto(s.0, buf.as_ptr().cast(), buf.len(), 0, (&to as *const libc::sockaddr_in).cast(), 16)
        };
        check(r as libc::c_int, "sendto")
    };
    let (start, limit) = (Instant::now(), Duration::from_secs(seconds));
    let mut seq = 0u64;
    while start.elapsed() < limit {
        buf[0..8].copy_from_slice(&seq.to_le_bytes());
        buf[8..16].copy_from_slice(&now_ns().to_le_bytes());
        send(&buf)?;
        seq += 1;
        std::thread::sleep(INTERVAL);
    }
    // The end marker, a few times (a receiver whose queue was full may miss one).
    buf[0..8].copy_from_slice(&END.to_le_bytes());
    for _ in 0..3 {
        send(&buf)?;
        std::thread::sleep(Duration::from_millis(20));
    }
    println!("sent {seq}");
    Ok(())
}

/// One receiver's summary line.
pub(crate) fn parse_receiver(out: &str) -> Result<BTreeMap<String, f64>, String> {
    let line = out.lines().find(|l| l.starts_with("received ")).ok_or_else(|| format!("no summary in {out:?}"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut m = BTreeMap::new();
    for pair in words.chunks(2) {
        if let [k, v] = pair {
            m.insert(k.to_string(), v.parse::<f64>().map_err(|_| format!("bad number in {line:?}"))?);
        }
    }
    for k in ["received", "duplicates", "avg_ns", "p50_ns", "p99_ns"] {
        if !m.contains_key(k) {
            return Err(format!("no {k} in {line:?}"));
        }
    }
    Ok(m)
}

/// The row: four receivers and a sender, all free to run on any CPU (four spinning
/// receivers pinned to one CPU would only take turns).
pub(crate) fn fanout(p: &Params, server: &Launch, client: &Launch) -> Result<Sample, String> {
    let exe = p.exe.as_deref().ok_or("this executable's path is unknown")?;
    let exe = exe.to_str().ok_or("this executable's path is not UTF-8")?;
    let port = server.port.to_string();
    let free = |l: &Launch| Launch { cpu: None, ..l.clone() };
    let mut receivers = Vec::new();
    for i in 0..RECEIVERS {
        let mut cmd = free(server).command(exe)?;
        cmd.args(["bench", "sockets", "--mcast-receiver", &port]);
        receivers.push(Server::start(cmd, &format!("multicast receiver {i}"), server.port)?);
    }
    let start = Instant::now();
    while !receivers.iter().all(|r| r.output().contains("ready")) {
        if start.elapsed() > Duration::from_secs(15) {
            return Err("the multicast receivers did not join within 15 s".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut cmd = free(client).command(exe)?;
    cmd.args(["bench", "sockets", "--seconds", &p.seconds.to_string(), "--mcast-sender", &port]);
    let out = run_client(cmd, "multicast sender", p.limit())?;
    let sent = out
        .lines()
        .find_map(|l| l.strip_prefix("sent ")?.trim().parse::<f64>().ok())
        .ok_or_else(|| format!("the sender printed no count: {out:?}"))?;
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    let mut p50s = Vec::new();
    let mut p99s = Vec::new();
    for (i, r) in receivers.into_iter().enumerate() {
        let output = || r.output();
        let begin = Instant::now();
        while !output().contains("received ") && begin.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(5));
        }
        let m = parse_receiver(&output()).map_err(|e| format!("receiver {i}: {e}"))?;
        *sums.entry("duplicates".into()).or_default() += m["duplicates"];
        *sums.entry("lost".into()).or_default() += sent - m["received"];
        *sums.entry("avg_us".into()).or_default() += m["avg_ns"] / 1e3 / RECEIVERS as f64;
        p50s.push(m["p50_ns"] / 1e3);
        p99s.push(m["p99_ns"] / 1e3);
    }
    p50s.sort_by(f64::total_cmp);
    p99s.sort_by(f64::total_cmp);
    let value = sums["avg_us"];
    let mut details = sums;
    details.remove("avg_us");
    details.insert("sent".into(), sent);
    details.insert("p50_us".into(), p50s[p50s.len() / 2]);
    details.insert("p99_us_worst".into(), p99s[p99s.len() - 1]);
    if details["duplicates"] > 0.0 {
        return Err(format!("{} datagrams delivered twice", details["duplicates"]));
    }
    Ok(Sample { value, details })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receivers_summary_is_read_whole_or_refused() {
        let m = parse_receiver("ready\nreceived 10 duplicates 0 avg_ns 5300 p50_ns 5000 p99_ns 9000\n").unwrap();
        assert_eq!((m["received"], m["p99_ns"]), (10.0, 9000.0));
        assert!(parse_receiver("ready\n").is_err());
        assert!(parse_receiver("received 10 duplicates x avg_ns 1 p50_ns 1 p99_ns 1").is_err());
        assert!(parse_receiver("received 10 duplicates 0").is_err());
    }
}
