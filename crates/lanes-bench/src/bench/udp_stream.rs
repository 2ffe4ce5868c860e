//! `lanes bench udp-stream`: the UDP streaming API (crates/lanes-udpstream) against
//! per-datagram `send`/`recv`, in the same run.
//!
//! Per datagram size, a sender thread streams blocks (default 4 MiB) for a time slice and a
//! receiver thread takes them into a buffer of the block's size; each pinned to its own CPU.
//! Measured: goodput (payload bytes received per second), the CPU time of each thread over
//! the stream's wall time (CLOCK_THREAD_CPUTIME_ID), the system calls of each side per GB
//! received, and loss (datagrams sent less datagrams received). Rows:
//!
//! - `shm`: the library on its own choice of path: on one host, both ends using the API, the
//!   shared-memory ring (over `--netns` there is none: the fastest kernel path);
//! - `fast`: the library forced to its fastest kernel path (UDP GSO / UDP GRO where the
//!   kernel has them);
//! - `uring`: the library forced to GSO / GRO through io_uring (linked `SENDMSG` / `RECVMSG`
//!   entries, one submission per batch; GSO / GRO where io_uring is refused);
//! - `mmsg`: the library forced to `sendmmsg` / `recvmmsg`;
//! - `per-datagram`: one `send(2)` and one `recv(2)` per datagram on plain sockets, the
//!   baseline every ratio is against;
//! - `shm@80%`, `fast@80%`: those paths paced at 80% of the goodput they just reached (the
//!   loss there is the figure that matters for a stream that must not lose data).
//!
//! Rounds alternate the order of the rows; the figure of a row is the median of its rounds.
//! Over loopback, and with `--netns` between two network namespaces joined by a veth pair
//! (root): the receiver thread enters one namespace, the sender thread the other.

use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::{Duration, Instant};

use lanes_udpstream::header::HEADER_LEN;
use lanes_udpstream::{RecvOptions, RecvPath, SendOptions, SendPath, StreamReceiver, StreamSender, MAX_UDP_PAYLOAD};
use serde::{Deserialize, Serialize};

use crate::measure::affinity;
use crate::report::{self, say, Machine, Report};

/// Arguments of `lanes bench udp-stream`.
#[derive(clap::Args, Debug)]
pub struct UdpStreamArgs {
    /// A short run: 0.3 s per measurement, 2 rounds.
    #[arg(long)]
    quick: bool,
    /// Seconds per measurement (default 1).
    #[arg(long, value_name = "T")]
    seconds: Option<f64>,
    /// Rounds (default 3; 2 with --quick).
    #[arg(long, value_name = "N")]
    rounds: Option<usize>,
    /// Datagram payload sizes (default 1K,4K,16K,64K; 64K means the largest UDP payload).
    #[arg(long, value_name = "SIZES")]
    sizes: Option<String>,
    /// The block handed to one send_block / recv_block.
    #[arg(long, value_name = "SIZE", default_value = "4M")]
    block: String,
    /// The library's rows put the 16-byte sequence header on each datagram (loss then also
    /// shows as gaps).
    #[arg(long)]
    header: bool,
    /// Between two network namespaces joined by a veth pair (root), instead of loopback.
    #[arg(long)]
    netns: bool,
    /// The veth pair's MTU with --netns (GSO needs datagrams within it).
    #[arg(long, default_value_t = 1500)]
    mtu: u32,
    /// CPUs: `A,B` pins the sender to A and the receiver to B (default: the first two allowed).
    #[arg(long, value_name = "A,B")]
    cpu: Option<String>,
    /// Write the results as JSON to FILE (`-` for standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Only these rows (comma-separated: shm, fast, uring, mmsg, shm80, fast80); the per-datagram
    /// baseline is always measured.
    #[arg(long, value_name = "ROWS")]
    only: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Row {
    Shm,
    Fast,
    Uring,
    Mmsg,
    PerDatagram,
    Shm80,
    Fast80,
}

/// The unpaced rows, in the order of even rounds.
const MEASURED: [Row; 5] = [Row::Shm, Row::Fast, Row::Uring, Row::Mmsg, Row::PerDatagram];

impl Row {
    fn label(self) -> &'static str {
        match self {
            Row::Shm => "shm",
            Row::Fast => "fast",
            Row::Uring => "uring",
            Row::Mmsg => "mmsg",
            Row::PerDatagram => "per-datagram",
            Row::Shm80 => "shm@80%",
            Row::Fast80 => "fast@80%",
        }
    }

    fn key(self) -> &'static str {
        match self {
            Row::Shm80 => "shm80",
            Row::Fast80 => "fast80",
            r => r.label(),
        }
    }

    /// The row a paced row paces.
    fn paced(self) -> Option<Row> {
        match self {
            Row::Shm80 => Some(Row::Shm),
            Row::Fast80 => Some(Row::Fast),
            _ => None,
        }
    }

    fn send_path(self) -> Option<SendPath> {
        match self {
            Row::Shm | Row::Shm80 => Some(SendPath::Shm),
            Row::Fast | Row::Fast80 => Some(SendPath::Gso),
            Row::Uring => Some(SendPath::Uring),
            Row::Mmsg => Some(SendPath::Mmsg),
            Row::PerDatagram => None,
        }
    }

    fn recv_path(self) -> Option<RecvPath> {
        match self {
            Row::Shm | Row::Shm80 => Some(RecvPath::Shm),
            Row::Fast | Row::Fast80 => Some(RecvPath::Gro),
            Row::Uring => Some(RecvPath::Uring),
            Row::Mmsg => Some(RecvPath::Mmsg),
            Row::PerDatagram => None,
        }
    }
}

/// The rows asked for by `--only` (all when absent), the baseline always among them.
fn rows_asked(only: Option<&str>) -> Result<Vec<Row>, String> {
    let all = [Row::Shm, Row::Fast, Row::Uring, Row::Mmsg, Row::PerDatagram, Row::Shm80, Row::Fast80];
    let Some(only) = only else { return Ok(all.to_vec()) };
    let mut rows = vec![Row::PerDatagram];
    for w in only.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        let r = all
            .iter()
            .copied()
            .find(|r| r.key() == w || r.label() == w)
            .ok_or_else(|| format!("--only {w:?}: rows are shm, fast, uring, mmsg, per-datagram, shm80, fast80"))?;
        if !rows.contains(&r) {
            rows.push(r);
        }
    }
    Ok(all.iter().copied().filter(|r| rows.contains(r)).collect())
}

/// One measurement.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(default)]
struct Sample {
    sent_bytes: u64,
    sent_datagrams: u64,
    received_bytes: u64,
    received_datagrams: u64,
    gaps: u64,
    tx_calls: u64,
    rx_calls: u64,
    tx_cpu_ns: u64,
    rx_cpu_ns: u64,
    wall_ns: u64,
    send_path: String,
    recv_path: String,
}

impl Sample {
    fn mb_s(&self) -> f64 {
        self.received_bytes as f64 / self.wall_ns.max(1) as f64 * 1e3
    }
    fn gb(&self) -> f64 {
        (self.received_bytes as f64 / 1e9).max(1e-12)
    }
    fn tx_cpu(&self) -> f64 {
        self.tx_cpu_ns as f64 / self.wall_ns.max(1) as f64 * 100.0
    }
    fn rx_cpu(&self) -> f64 {
        self.rx_cpu_ns as f64 / self.wall_ns.max(1) as f64 * 100.0
    }
    /// CPU seconds (both sides) per GB received.
    fn cpu_s_per_gb(&self) -> f64 {
        (self.tx_cpu_ns + self.rx_cpu_ns) as f64 / 1e9 / self.gb()
    }
    fn tx_calls_gb(&self) -> f64 {
        self.tx_calls as f64 / self.gb()
    }
    fn rx_calls_gb(&self) -> f64 {
        self.rx_calls as f64 / self.gb()
    }
    fn loss_pct(&self) -> f64 {
        let lost = self.sent_datagrams.saturating_sub(self.received_datagrams);
        lost as f64 / self.sent_datagrams.max(1) as f64 * 100.0
    }
}

/// One row at one datagram size: the median round and every round.
struct Cell {
    datagram_size: usize,
    row: Row,
    /// The median round (by goodput).
    median: Sample,
    rounds: Vec<Sample>,
}

impl Cell {
    /// The cell as a report row: `key` the row's name, `detail.median` the median round,
    /// `samples.rounds` every round, `values` the median's derived figures.
    fn to_row(&self) -> report::Row {
        let m = &self.median;
        report::Row::new(report::to_value(&self.row).as_str().unwrap_or_default())
            .with_title(self.row.label())
            .with_size(self.datagram_size)
            .with_value("mb_s", m.mb_s())
            .with_value("tx_cpu_pct", m.tx_cpu())
            .with_value("rx_cpu_pct", m.rx_cpu())
            .with_value("cpu_s_per_gb", m.cpu_s_per_gb())
            .with_value("loss_pct", m.loss_pct())
            .with_detail("median", m)
            .with_samples("rounds", &self.rounds)
    }

    fn from_row(r: &report::Row) -> Option<Cell> {
        Some(Cell {
            datagram_size: r.size?,
            row: serde_json::from_value(serde_json::Value::String(r.key.clone())).ok()?,
            median: r.detail_as("median")?,
            rounds: Vec::new(),
        })
    }
}

/// How a run was made: the report's `run`.
#[derive(Serialize)]
struct RunInfo {
    link: String,
    block: usize,
    header: bool,
    /// Seconds per measurement.
    seconds: f64,
}

/// The report's `benchmark`.
pub(crate) const BENCHMARK: &str = "udp-stream";

const UNITS: [(&str, &str); 8] = [
    ("key", "shm (the library's own path: the shared-memory ring on one host), fast (forced UDP GSO/GRO), uring (GSO/GRO through io_uring), mmsg (forced sendmmsg/recvmmsg), per-datagram (send/recv, the baseline), shm80 and fast80 (shm and fast paced at 80% of their goodput)"),
    ("size", "datagram payload bytes"),
    ("values.mb_s", "payload bytes received per second / 1e6, median round"),
    ("values.tx_cpu_pct", "the sender thread's CPU time over the stream's wall time, percent"),
    ("values.rx_cpu_pct", "the receiver thread's CPU time over the stream's wall time, percent"),
    ("values.cpu_s_per_gb", "both threads' CPU seconds per GB received"),
    ("values.loss_pct", "datagrams sent but not received, percent"),
    ("detail.median", "the median round's counters (by goodput); samples.rounds: every round's"),
];

/// Where the two threads run.
#[derive(Clone)]
struct Link {
    /// Namespaces (sender, receiver) to enter, if any.
    netns: Option<(String, String)>,
    bind: SocketAddr,
    dest_ip: std::net::IpAddr,
    label: String,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is valid for writes; CLOCK_THREAD_CPUTIME_ID needs nothing else.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Moves the calling thread into network namespace `name` (its sockets are made there).
fn enter_netns(name: &str) -> Result<(), String> {
    let f = std::fs::File::open(format!("/var/run/netns/{name}")).map_err(|e| format!("netns {name}: {e}"))?;
    // SAFETY: a valid namespace fd; setns affects only this thread.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(format!("setns {name}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

fn set_rcvbuf(s: &UdpSocket, bytes: i32) {
    const SO_RCVBUFFORCE: libc::c_int = 33;
    for opt in [SO_RCVBUFFORCE, libc::SO_RCVBUF] {
        // SAFETY: `bytes` lives across the call and its size is passed.
        let rc = unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const i32).cast(),
                std::mem::size_of::<i32>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return;
        }
    }
}

enum Rx {
    Lib(Box<StreamReceiver>),
    Plain(UdpSocket),
}

/// How long the receiver waits after the sender stopped before it counts what it got.
const DRAIN: Duration = Duration::from_millis(100);

/// What every measurement of a run shares.
struct Setup {
    link: Link,
    block: usize,
    header: bool,
    slice: Duration,
    cpus: Option<(usize, usize)>,
}

fn measure(setup: &Setup, row: Row, ds: usize, rate: Option<f64>) -> Result<Sample, String> {
    let Setup { ref link, block, header, slice, cpus } = *setup;
    let header = header && row != Row::PerDatagram;
    let stop = Arc::new(AtomicBool::new(false));
    let (port_tx, port_rx) = mpsc::channel::<Result<(u16, String), String>>();
    let rlink = link.clone();
    let rstop = stop.clone();
    let receiver = thread::spawn(move || -> Result<Sample, String> {
        if let Some((_, ns)) = &rlink.netns {
            enter_netns(ns)?;
        }
        if let Some((_, b)) = cpus {
            let _ = affinity::pin_to(b);
        }
        let mut opts = RecvOptions::new(ds);
        opts.sequence_header = header;
        let rx = match row.recv_path() {
            Some(p) => StreamReceiver::bind(rlink.bind, opts.with_path(p)).map(|r| Rx::Lib(Box::new(r))),
            None => UdpSocket::bind(rlink.bind).map(|s| {
                set_rcvbuf(&s, 16 << 20);
                Rx::Plain(s)
            }),
        };
        let mut rx = match rx {
            Ok(r) => r,
            Err(e) => {
                let _ = port_tx.send(Err(format!("receiver: {e}")));
                return Err(format!("receiver: {e}"));
            }
        };
        let (port, path) = match &rx {
            Rx::Lib(r) => (r.local_addr().map(|a| a.port()).unwrap_or(0), r.path().name().to_string()),
            Rx::Plain(s) => (s.local_addr().map(|a| a.port()).unwrap_or(0), "recv".to_string()),
        };
        let _ = port_tx.send(Ok((port, path.clone())));
        let mut buf = vec![0u8; block.max(ds)];
        let mut s = Sample { recv_path: path, ..Sample::default() };
        let cpu0 = thread_cpu_ns();
        let mut off = 0;
        if let Rx::Plain(sock) = &rx {
            sock.set_read_timeout(Some(DRAIN)).map_err(|e| e.to_string())?;
        }
        loop {
            match &mut rx {
                Rx::Lib(r) => match r.recv_block(&mut buf, Some(DRAIN)) {
                    Ok(rep) => {
                        // The path that carried data (a published ring may carry none: --netns).
                        if rep.datagrams > 0 {
                            s.recv_path = rep.path.name().to_string();
                        }
                        s.received_bytes += rep.bytes as u64;
                        s.received_datagrams += rep.datagrams;
                        s.gaps += rep.gaps;
                        s.rx_calls += rep.system_calls;
                    }
                    Err(e) if e.kind() == ErrorKind::TimedOut => {
                        s.rx_calls += 1;
                        if rstop.load(Ordering::Acquire) {
                            break;
                        }
                    }
                    Err(e) => return Err(format!("recv_block: {e}")),
                },
                Rx::Plain(sock) => {
                    if buf.len() - off < ds {
                        off = 0;
                    }
                    s.rx_calls += 1;
                    match sock.recv(&mut buf[off..off + ds]) {
                        Ok(n) => {
                            off += n;
                            s.received_bytes += n as u64;
                            s.received_datagrams += 1;
                        }
                        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                            if rstop.load(Ordering::Acquire) {
                                break;
                            }
                        }
                        Err(e) => return Err(format!("recv: {e}")),
                    }
                }
            }
        }
        // The final idle wait is blocked, not spent: its CPU is near nothing.
        s.rx_cpu_ns = thread_cpu_ns() - cpu0;
        Ok(s)
    });
    let (port, _) = port_rx.recv().map_err(|_| "the receiver thread died".to_string())??;
    let slink = link.clone();
    let sender = thread::spawn(move || -> Result<Sample, String> {
        if let Some((ns, _)) = &slink.netns {
            enter_netns(ns)?;
        }
        if let Some((a, _)) = cpus {
            let _ = affinity::pin_to(a);
        }
        let dest = SocketAddr::new(slink.dest_ip, port);
        let data: Vec<u8> = (0..block).map(|i| (i * 7 + (i >> 10)) as u8).collect();
        let mut s = Sample::default();
        let mut opts = SendOptions::new(ds);
        opts.sequence_header = header;
        enum Tx {
            Lib(Box<StreamSender>),
            Plain(UdpSocket),
        }
        let mut tx = match row.send_path() {
            Some(p) => StreamSender::connect(dest, opts.with_path(p)).map(|t| Tx::Lib(Box::new(t))),
            None => {
                let bind: SocketAddr = if dest.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" }.parse().expect("address");
                UdpSocket::bind(bind).and_then(|u| u.connect(dest).map(|_| Tx::Plain(u)))
            }
        }
        .map_err(|e| format!("sender: {e}"))?;
        let cpu0 = thread_cpu_ns();
        let start = Instant::now();
        while start.elapsed() < slice {
            match &mut tx {
                Tx::Lib(t) => {
                    let r = t.send_block(&data).map_err(|e| format!("send_block: {e}"))?;
                    s.sent_bytes += r.bytes;
                    // A datagram dropped at a full ring is lost like one dropped by the kernel.
                    s.sent_datagrams += r.datagrams + r.dropped;
                    s.tx_calls += r.system_calls;
                    s.send_path = r.path.name().to_string();
                }
                Tx::Plain(u) => {
                    for c in data.chunks(ds) {
                        s.tx_calls += 1;
                        match u.send(c) {
                            Ok(_) => {
                                s.sent_bytes += c.len() as u64;
                                s.sent_datagrams += 1;
                            }
                            // An ICMP error from an earlier datagram; this one did not go.
                            Err(e) if e.kind() == ErrorKind::ConnectionRefused => {}
                            Err(e) => return Err(format!("send: {e}")),
                        }
                    }
                    s.send_path = "send".into();
                }
            }
            if let Some(rate) = rate {
                let due = Duration::from_secs_f64(s.sent_bytes as f64 / rate);
                if let Some(wait) = due.checked_sub(start.elapsed()) {
                    thread::sleep(wait);
                }
            }
        }
        s.tx_cpu_ns = thread_cpu_ns() - cpu0;
        s.wall_ns = start.elapsed().as_nanos() as u64;
        Ok(s)
    });
    let sent = sender.join().map_err(|_| "the sender panicked".to_string());
    stop.store(true, Ordering::Release);
    let got = receiver.join().map_err(|_| "the receiver panicked".to_string())??;
    let sent = sent??;
    Ok(Sample {
        sent_bytes: sent.sent_bytes,
        sent_datagrams: sent.sent_datagrams,
        tx_calls: sent.tx_calls,
        tx_cpu_ns: sent.tx_cpu_ns,
        wall_ns: sent.wall_ns,
        send_path: sent.send_path,
        ..got
    })
}

/// Two namespaces joined by a veth pair, deleted on drop.
struct Netns {
    a: String,
    b: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let o = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if !o.status.success() {
        return Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim()));
    }
    Ok(())
}

impl Netns {
    fn new(mtu: u32) -> Result<Netns, String> {
        let pid = std::process::id();
        let n = Netns { a: format!("lus{pid}a"), b: format!("lus{pid}b") };
        let mtu = mtu.to_string();
        ip(&["netns", "add", &n.a])?;
        ip(&["netns", "add", &n.b])?;
        // Created inside namespace a, the peer moved to b: nothing appears in ours.
        ip(&["-n", &n.a, "link", "add", "veth0", "mtu", &mtu, "type", "veth", "peer", "name", "veth1", "mtu", &mtu])?;
        ip(&["-n", &n.a, "link", "set", "veth1", "netns", &n.b])?;
        ip(&["-n", &n.a, "addr", "add", "10.213.0.1/24", "dev", "veth0"])?;
        ip(&["-n", &n.b, "addr", "add", "10.213.0.2/24", "dev", "veth1"])?;
        for (ns, dev) in [(&n.a, "veth0"), (&n.b, "veth1")] {
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(n)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.a]);
        let _ = ip(&["netns", "del", &self.b]);
    }
}

fn median(mut v: Vec<Sample>) -> (Sample, Vec<Sample>) {
    let all = v.clone();
    v.sort_by(|a, b| a.mb_s().total_cmp(&b.mb_s()));
    (v[v.len() / 2].clone(), all)
}

/// Runs `lanes bench udp-stream`.
pub fn run(a: UdpStreamArgs) -> Result<(), String> {
    let started = std::time::SystemTime::now();
    let block = crate::sizes::parse_size(&a.block)?;
    let header_len = if a.header { HEADER_LEN } else { 0 };
    let max = MAX_UDP_PAYLOAD - header_len;
    let mut sizes = crate::sizes::parse_sizes(a.sizes.as_deref().unwrap_or("1K,4K,16K,64K"))?;
    for s in &mut sizes {
        if *s == 64 << 10 {
            *s = max;
        }
        if *s == 0 || *s > max {
            return Err(format!("datagram size {s}: 1 to {max} bytes"));
        }
    }
    if block == 0 {
        return Err("--block must be at least one byte".into());
    }
    let slice = Duration::from_secs_f64(a.seconds.unwrap_or(if a.quick { 0.3 } else { 1.0 }).max(0.05));
    let rounds = a.rounds.unwrap_or(if a.quick { 2 } else { 3 }).max(1);
    let cpus = affinity::distinct_pair_or_default(a.cpu.as_deref(), "udp-stream")?;
    let _ns;
    let link = if a.netns {
        let n = Netns::new(a.mtu)?;
        let l = Link {
            netns: Some((n.a.clone(), n.b.clone())),
            bind: "10.213.0.2:0".parse().expect("address"),
            dest_ip: "10.213.0.2".parse().expect("address"),
            label: format!("two network namespaces, veth MTU {}", a.mtu),
        };
        _ns = Some(n);
        l
    } else {
        _ns = None;
        Link {
            netns: None,
            bind: "127.0.0.1:0".parse().expect("address"),
            dest_ip: "127.0.0.1".parse().expect("address"),
            label: "loopback".into(),
        }
    };
    let title = format!(
        "lanes bench udp-stream: {}, blocks of {}, {} per measurement, {} rounds{}{}\n",
        link.label,
        crate::sizes::fmt_size(block),
        crate::measure::stats::fmt_ns(slice.as_nanos() as f64),
        rounds,
        if a.header { ", sequence header on the library's rows" } else { "" },
        cpus.map_or(String::new(), |(x, y)| format!(", sender on cpu {x}, receiver on cpu {y}")),
    );
    // With the JSON on standard output, the title goes to standard error.
    if a.json.as_deref().is_some_and(|p| p.as_os_str() == "-") {
        eprint!("{title}");
    } else {
        say(&title)?;
    }
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let setup = Setup { link: link.clone(), block, header: a.header, slice, cpus };
    let mut cells = Vec::new();
    let rows = rows_asked(a.only.as_deref())?;
    let measured: Vec<Row> = MEASURED.iter().copied().filter(|r| rows.contains(r)).collect();
    for &ds in &sizes {
        let mut by_row: Vec<(Row, Vec<Sample>)> = measured.iter().map(|&r| (r, Vec::new())).collect();
        for round in 0..rounds {
            let mut order = measured.clone();
            if round % 2 == 1 {
                order.reverse();
            }
            for row in order {
                if tty {
                    eprint!("\r\x1b[Kmeasuring {} {} round {}", crate::sizes::fmt_size(ds), row.label(), round + 1);
                }
                let s = measure(&setup, row, ds, None)?;
                by_row.iter_mut().find(|(r, _)| *r == row).expect("row").1.push(s);
            }
        }
        let mut medians: Vec<Cell> = by_row
            .into_iter()
            .map(|(row, v)| {
                let (m, all) = median(v);
                Cell { datagram_size: ds, row, median: m, rounds: all }
            })
            .collect();
        // The paced rows: 80% of their path's median goodput.
        for paced in rows.iter().copied().filter(|r| r.paced().is_some()) {
            let Some(of) = medians.iter().find(|c| Some(c.row) == paced.paced()) else { continue };
            let rate = of.median.mb_s() * 1e6 * 0.8;
            if rate <= 0.0 {
                continue;
            }
            let mut v = Vec::new();
            for round in 0..rounds {
                if tty {
                    eprint!("\r\x1b[Kmeasuring {} {} round {}", crate::sizes::fmt_size(ds), paced.label(), round + 1);
                }
                v.push(measure(&setup, paced, ds, Some(rate))?);
            }
            let (m, all) = median(v);
            medians.push(Cell { datagram_size: ds, row: paced, median: m, rounds: all });
        }
        cells.extend(medians);
    }
    if tty {
        eprint!("\r\x1b[K");
    }
    let mut report = Report::new(BENCHMARK, Machine::this(started));
    report.set_units(UNITS);
    report.set_run(&RunInfo { link: link.label.clone(), block, header: a.header, seconds: slice.as_secs_f64() });
    report.rows = cells.iter().map(Cell::to_row).collect();
    report::emit(&report, |r| drop(say(&table(r))), a.json.as_deref())
}

pub(crate) fn table(r: &Report) -> String {
    let mut t = String::new();
    t += &format!(
        "{:>9}  {:<13} {:<11} {:>9} {:>6} {:>6} {:>8} {:>10} {:>10} {:>7}   {:>7} {:>7} {:>7}\n",
        "datagram",
        "row",
        "path",
        "MB/s",
        "tx CPU",
        "rx CPU",
        "CPU s/GB",
        "tx calls",
        "rx calls",
        "loss",
        "MB/s",
        "CPU/GB",
        "calls"
    );
    t += &format!(
        "{:>9}  {:<13} {:<11} {:>9} {:>6} {:>6} {:>8} {:>10} {:>10} {:>7}   {:>23}\n",
        "", "", "tx/rx", "", "%", "%", "", "per GB", "per GB", "%", "vs per-datagram"
    );
    let all: Vec<Cell> = r.rows.iter().filter_map(Cell::from_row).collect();
    let sizes: Vec<usize> = all.iter().map(|c| c.datagram_size).fold(Vec::new(), |mut v, s| {
        if !v.contains(&s) {
            v.push(s);
        }
        v
    });
    for ds in sizes {
        let cells: Vec<&Cell> = all.iter().filter(|c| c.datagram_size == ds).collect();
        let base = cells.iter().find(|c| c.row == Row::PerDatagram).map(|c| &c.median);
        for (i, c) in cells.iter().enumerate() {
            let m = &c.median;
            let size = if i == 0 { crate::sizes::fmt_size(ds) } else { String::new() };
            let ratios = match (base, c.row) {
                (Some(b), row) if row != Row::PerDatagram => format!(
                    "{:>6.2}x {:>6.2}x {:>6.1}x",
                    m.mb_s() / b.mb_s().max(1e-9),
                    b.cpu_s_per_gb() / m.cpu_s_per_gb().max(1e-12),
                    (b.tx_calls_gb() + b.rx_calls_gb()) / (m.tx_calls_gb() + m.rx_calls_gb()).max(1e-12),
                ),
                _ => String::new(),
            };
            t += &format!(
                "{:>9}  {:<13} {:<11} {:>9.1} {:>6.0} {:>6.0} {:>8.3} {:>10.0} {:>10.0} {:>7.3}   {}\n",
                size,
                c.row.label(),
                format!("{}/{}", m.send_path, m.recv_path),
                m.mb_s(),
                m.tx_cpu(),
                m.rx_cpu(),
                m.cpu_s_per_gb(),
                m.tx_calls_gb(),
                m.rx_calls_gb(),
                m.loss_pct(),
                ratios
            );
        }
    }
    t += "MB/s: payload received per second; CPU%: each thread's CPU time over the stream's wall time;\n";
    t += "CPU s/GB: both threads' CPU seconds per GB received; ratios: MB/s, CPU per GB and system calls\n";
    t += "per GB (both sides) of the per-datagram row over this row's (higher is better for all three).\n";
    t
}
